#include <span>
#include <string_view>
#include <vector>

#include "gracekeeper/cli/cli.h"

#if defined(GRACEKEEPER_MIMALLOC)
#include <mimalloc.h>

// Pages freed go back to the system at once instead of after mimalloc's
// delay (25 ms in 2.0, 10 ms in 2.1 and 3). The offline commands free a pass
// of tens of thousands of blocks and start the next one within the delay:
// with it, `plan --diff` of a 25,000-Deployment List peaked at 93.6 MB,
// without it at 79.4 MB (glibc's malloc: 83.4 MB). The operator's CPU did
// not move (docs/performance.md).
static void configure_allocator() {
#if MI_MALLOC_VERSION >= 210
  mi_option_set(mi_option_purge_delay, 0);
#else
  mi_option_set(mi_option_decommit_delay, 0);
#endif
}
#else
static void configure_allocator() {}
#endif

int main(int argc, char** argv) {
  configure_allocator();
  std::vector<std::string_view> args(argv + 1, argv + argc);
  return gracekeeper::cli::main(args);
}
