// Test access to the informer's list/watch loop, kept out of its public header.
#pragma once

#include <string>
#include <utility>

#include "gracekeeper/kube/informer.h"

namespace gracekeeper::kube {

class ReflectorTestAccess {
 public:
  // Ends the current watch and re-watches from `resource_version` (e.g. an
  // old, compacted one, to force a 410 and a relist).
  static void restart_watch_from(Reflector& reflector, std::string resource_version) {
    reflector.restart_watch_from(std::move(resource_version));
  }
};

}  // namespace gracekeeper::kube
