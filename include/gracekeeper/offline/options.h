// The flags of `plan` and `check` that the offline engine reads (offline.h);
// light, for the command line's headers.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gracekeeper::offline {

// What the offline engine reads of `plan`'s and `check`'s flags.
struct Options {
  std::vector<std::string> files;         // -f, repeatable; "-" is stdin
  std::vector<std::string> policy_files;  // --policy, repeatable
  std::optional<double> propagation_seconds;
  bool all = false;  // every Deployment, not only opted-in ones
  // --kubernetes-version 1.N; -1 when not given: a current cluster. Native
  // sleep from 1.30, a StatefulSet's maxUnavailable honoured from 1.35.
  int kubernetes_minor = -1;
  bool in_place = false;  // plan -w: write the edited files back
  bool diff = false;      // plan --diff: print a unified diff instead of the manifests
};

}  // namespace gracekeeper::offline
