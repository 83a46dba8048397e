#pragma once

// Gives the memory freed by a burst of work back to the system, whichever
// allocator the binary runs with (GRACEKEEPER_ALLOCATOR in CMakeLists.txt).

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// mimalloc's, when the binary links it (weak: null when it does not). Its
// own header is not included, so that nothing else here depends on it.
extern "C" void mi_collect(bool force) __attribute__((weak));

namespace gracekeeper {

inline void release_free_memory() {
  if (mi_collect != nullptr) {
    mi_collect(/*force=*/true);
    return;
  }
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

}  // namespace gracekeeper
