// Opted-in StatefulSets, which the operator does not govern: it reports each
// once (an UnsupportedKind Event) so that the opt-in is not silently
// ignored. `gracekeeper plan` and `check` handle them offline (preStop and
// grace only). Only their metadata is read; others are not kept at all.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gracekeeper/kube/client.h"
#include "gracekeeper/kube/events.h"

namespace gracekeeper::controller {

inline const kube::Resource statefulsets{"apps", "v1", "statefulsets", true};

struct CachedStatefulSet {
  std::string uid;
};

// The members project_statefulset reads, as kube::FieldSet paths.
std::vector<std::string> statefulset_fields();

// nullopt unless gracekeeper.dev/enabled is "true".
std::optional<CachedStatefulSet> project_statefulset(const nlohmann::json& object);

// The one Event an opted-in StatefulSet gets (regarding unset).
kube::EventRecord unsupported_statefulset_event();

}  // namespace gracekeeper::controller
