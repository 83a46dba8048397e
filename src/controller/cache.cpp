#include "cache.h"

#include <algorithm>

namespace gracekeeper::controller {
namespace {

const nlohmann::json* member(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string string_member(const nlohmann::json& object, const char* key) {
  const auto* v = member(object, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

std::int64_t int_member(const nlohmann::json& object, const char* key) {
  const auto* v = member(object, key);
  return v && v->is_number_integer() ? v->get<std::int64_t>() : 0;
}

}  // namespace

std::optional<CachedDeployment> project_deployment(const nlohmann::json& object) {
  const nlohmann::json* metadata = member(object, "metadata");
  if (!metadata) return std::nullopt;
  // Decided on the raw object, so Deployments that are not opted in cost
  // nothing beyond this lookup.
  const nlohmann::json* annotations = member(*metadata, "annotations");
  if (!annotations || string_member(*annotations, budget::kAnnotationEnabled) != "true") {
    return std::nullopt;
  }
  CachedDeployment out{string_member(*metadata, "uid"),
                       int_member(*metadata, "generation"),
                       budget::project_deployment(budget::Json(object)),
                       {}};
  if (const auto* fields = member(*metadata, "managedFields"); fields && fields->is_array()) {
    for (const auto& entry : *fields) {
      std::string manager = string_member(entry, "manager");
      if (string_member(entry, "operation") == "Apply" && !manager.empty() &&
          manager != kFieldManager) {
        out.appliers.push_back(std::move(manager));
      }
    }
    std::ranges::sort(out.appliers);
    out.appliers.erase(std::unique(out.appliers.begin(), out.appliers.end()), out.appliers.end());
  }
  if (out.deployment) {
    // Only gracekeeper's own annotations are read; kubectl's
    // last-applied-configuration alone can be the size of the whole object.
    std::erase_if(out.deployment->annotations,
                  [](const auto& a) { return !a.first.starts_with("gracekeeper.dev/"); });
    // Pod labels only tell offline `check` which Services select the pods.
    out.deployment->pod_labels.clear();
  }
  return out;
}

std::optional<CachedPolicy> project_policy(const nlohmann::json& object) {
  const nlohmann::json* metadata = member(object, "metadata");
  if (!metadata) return std::nullopt;
  const nlohmann::json* spec = member(object, "spec");
  const nlohmann::json* status = member(object, "status");
  CachedPolicy out{string_member(*metadata, "name"),
                   string_member(*metadata, "namespace"),
                   string_member(*metadata, "uid"),
                   string_member(*metadata, "resourceVersion"),
                   int_member(*metadata, "generation"),
                   budget::parse_policy_spec(spec ? budget::Json(*spec) : budget::Json()),
                   status ? *status : nlohmann::json()};
  return out;
}

}  // namespace gracekeeper::controller
