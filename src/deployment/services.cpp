#include "gracekeeper/deployment/services.h"

#include <nlohmann/json.hpp>

namespace gracekeeper::controller {

std::vector<std::string> service_fields() {
  return {"metadata.name", "metadata.namespace", "spec.type", "spec.selector"};
}

std::optional<CachedService> project_service(const nlohmann::json& object) {
  const auto spec = object.find("spec");
  if (spec == object.end() || !spec->is_object()) return std::nullopt;
  if (const auto type = spec->find("type");
      type != spec->end() && type->is_string() && *type == "ExternalName") {
    return std::nullopt;
  }
  const auto selector = spec->find("selector");
  if (selector == spec->end() || !selector->is_object()) return std::nullopt;
  CachedService out;
  for (const auto& [k, v] : selector->items()) {
    if (v.is_string()) out.selector.emplace(k, v.get<std::string>());
  }
  if (out.selector.empty()) return std::nullopt;
  return out;
}

bool selects(const CachedService& service, const std::map<std::string, std::string>& pod_labels) {
  for (const auto& [k, v] : service.selector) {
    const auto it = pod_labels.find(k);
    if (it == pod_labels.end() || it->second != v) return false;
  }
  return true;
}

}  // namespace gracekeeper::controller
