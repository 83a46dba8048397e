#include "cache.h"

#include <algorithm>
#include <cstring>

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

namespace {

// Copies the members `names` of `from` that are present into `to`.
void copy_members(const nlohmann::json& from, nlohmann::json& to,
                  std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const auto* v = member(from, name)) to[name] = *v;
  }
}

nlohmann::json budget_container(const nlohmann::json& container) {
  if (!container.is_object()) return container;  // an error to report, kept as it is
  nlohmann::json out = nlohmann::json::object();
  copy_members(
      container, out,
      {"name", "ports", "command", "args", "lifecycle", "readinessProbe", "livenessProbe"});
  return out;
}

// One level down: `from[name]` (nullptr when absent) and the object that
// stands for it in the copy. A value that is not an object is copied whole
// (the engine reports it) and there is nothing below it to read.
struct Level {
  const nlohmann::json* from = nullptr;
  nlohmann::json* to = nullptr;
};
std::optional<Level> descend(const nlohmann::json& from, nlohmann::json& to, const char* name) {
  const auto* child = member(from, name);
  if (!child) return std::nullopt;
  if (!child->is_object()) {
    to[name] = *child;
    return std::nullopt;
  }
  return Level{child, &(to[name] = nlohmann::json::object())};
}

}  // namespace

// Mirrors budget::project_deployment (src/budget/deployment.cpp); the unit
// test checks both give the same projection for every Deployment it has.
nlohmann::json budget_fields(const nlohmann::json& object) {
  if (!object.is_object()) return object;
  nlohmann::json out = nlohmann::json::object();
  if (auto metadata = descend(object, out, "metadata")) {
    copy_members(*metadata->from, *metadata->to, {"name", "namespace", "labels"});
    // Only gracekeeper's own annotations are read; kubectl's
    // last-applied-configuration alone can be the size of the whole object.
    if (auto annotations = descend(*metadata->from, *metadata->to, "annotations")) {
      for (const auto& [key, value] : annotations->from->items()) {
        if (key.starts_with("gracekeeper.dev/") || !value.is_string())
          (*annotations->to)[key] = value;
      }
    }
  }
  auto spec = descend(object, out, "spec");
  if (!spec) return out;
  copy_members(*spec->from, *spec->to, {"replicas", "strategy"});
  // The pod template's labels only tell offline `check` which Services select the pods.
  auto pod_template = descend(*spec->from, *spec->to, "template");
  if (!pod_template) return out;
  auto pod_spec = descend(*pod_template->from, *pod_template->to, "spec");
  if (!pod_spec) return out;
  copy_members(*pod_spec->from, *pod_spec->to, {"terminationGracePeriodSeconds"});
  if (const auto* containers = member(*pod_spec->from, "containers")) {
    if (!containers->is_array()) {
      (*pod_spec->to)["containers"] = *containers;
    } else {
      auto& c = (*pod_spec->to)["containers"] = nlohmann::json::array();
      for (const auto& container : *containers) c.push_back(budget_container(container));
    }
  }
  return out;
}

std::expected<budget::Deployment, budget::FieldErrors> CachedDeployment::project() const {
  budget::Json object = budget::Json::from_msgpack(source, /*strict=*/true,
                                                   /*allow_exceptions=*/false);
  if (object.is_discarded()) {  // not possible: `source` is written by project_deployment
    return std::unexpected(budget::FieldErrors{{"", "the cached Deployment is unreadable"}});
  }
  return budget::project_deployment(object);
}

std::optional<CachedDeployment> project_deployment(const nlohmann::json& object) {
  const nlohmann::json* metadata = member(object, "metadata");
  if (!metadata) return std::nullopt;
  // Decided on the raw object, so Deployments that are not opted in cost
  // nothing beyond this lookup.
  const nlohmann::json* annotations = member(*metadata, "annotations");
  if (!annotations || string_member(*annotations, budget::kAnnotationEnabled) != "true") {
    return std::nullopt;
  }
  CachedDeployment out{
      string_member(*metadata, "uid"), int_member(*metadata, "generation"), {}, {}};
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
  nlohmann::json::to_msgpack(budget_fields(object), out.source);
  out.source.shrink_to_fit();
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
