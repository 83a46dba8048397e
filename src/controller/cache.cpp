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

// Each string as its 4-byte length, then its bytes: key, value, key, value...
std::string pack_labels(const std::map<std::string, std::string>& labels) {
  std::string out;
  auto put = [&out](const std::string& text) {
    const auto size = static_cast<std::uint32_t>(text.size());
    out.append(reinterpret_cast<const char*>(&size), sizeof size);
    out.append(text);
  };
  for (const auto& [key, value] : labels) {
    put(key);
    put(value);
  }
  out.shrink_to_fit();
  return out;
}

std::map<std::string, std::string> unpack_labels(std::string_view packed) {
  std::map<std::string, std::string> out;
  auto take = [&packed](std::string& text) {
    std::uint32_t size = 0;
    if (packed.size() < sizeof size) return false;
    std::memcpy(&size, packed.data(), sizeof size);
    packed.remove_prefix(sizeof size);
    if (packed.size() < size) return false;
    text.assign(packed.substr(0, size));
    packed.remove_prefix(size);
    return true;
  };
  std::string key;
  std::string value;
  while (take(key) && take(value)) out.emplace(std::move(key), std::move(value));
  return out;
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
  CachedDeployment out{string_member(*metadata, "uid"),
                       int_member(*metadata, "generation"),
                       budget::project_deployment(budget::Json(object)),
                       {},
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
    out.labels = pack_labels(out.deployment->labels);
    out.deployment->labels.clear();
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
