#include "statefulsets.h"

#include <nlohmann/json.hpp>

#include "cache.h"  // opted_in

namespace gracekeeper::controller {

std::vector<std::string> statefulset_fields() {
  return {"metadata.name", "metadata.namespace", "metadata.uid", "metadata.annotations"};
}

std::optional<CachedStatefulSet> project_statefulset(const nlohmann::json& object) {
  const auto metadata = object.find("metadata");
  if (metadata == object.end() || !metadata->is_object() || !opted_in(*metadata)) {
    return std::nullopt;
  }
  const auto uid = metadata->find("uid");
  return CachedStatefulSet{uid != metadata->end() && uid->is_string() ? uid->get<std::string>()
                                                                      : std::string()};
}

kube::EventRecord unsupported_statefulset_event() {
  return {{},
          kube::EventType::Normal,
          "UnsupportedKind",
          "Check",
          "gracekeeper governs Deployments only: this StatefulSet's preStop wait and grace "
          "period are not managed in the cluster. Plan them in its manifest with `gracekeeper "
          "plan` and `gracekeeper check` (preStop and grace; its update strategy is left alone)"};
}

}  // namespace gracekeeper::controller
