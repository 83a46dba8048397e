#include "gracekeeper/deployment/takeover.h"

#include <algorithm>
#include <string>

namespace gracekeeper::controller {
namespace {

using budget::PreStopHook;

std::string_view handler(PreStopHook::Kind kind) {
  switch (kind) {
    case PreStopHook::Kind::Sleep:
      return "sleep";
    case PreStopHook::Kind::ExecSleep:
    case PreStopHook::Kind::Exec:
      return "exec";
    case PreStopHook::Kind::HttpGet:
      return "httpGet";
    case PreStopHook::Kind::TcpSocket:
      return "tcpSocket";
    case PreStopHook::Kind::None:
      break;
  }
  return "";
}

nlohmann::json add(std::string path, nlohmann::json value) {
  return {{"op", "add"}, {"path", std::move(path)}, {"value", std::move(value)}};
}

// Adds each of `wanted` to the annotations of the metadata at `at` in
// `object` (`add` replaces an existing member), making the metadata and the
// annotations first where the object has none.
void add_annotations(const nlohmann::json& object, const nlohmann::json::json_pointer& at,
                     const nlohmann::json& wanted, nlohmann::json& ops) {
  const nlohmann::json* metadata = object.contains(at) ? &object[at] : nullptr;
  const bool has_metadata = metadata != nullptr && metadata->is_object();
  bool has_annotations =
      has_metadata && metadata->contains("annotations") && (*metadata)["annotations"].is_object();
  for (const auto& [key, value] : wanted.items()) {
    if (has_annotations) {
      ops.push_back(add((at / "annotations" / key).to_string(), value));
    } else if (has_metadata) {
      ops.push_back(add((at / "annotations").to_string(), {{key, value}}));
    } else {
      ops.push_back(add(at.to_string(), {{"annotations", {{key, value}}}}));
    }
    has_annotations = true;
  }
}

}  // namespace

bool changes_handler(const budget::Deployment& d, const budget::Plan& plan) {
  using Action = budget::ContainerPlan::Action;
  return std::any_of(plan.containers.begin(), plan.containers.end(), [&](const auto& cp) {
    if (cp.action == Action::Keep || cp.action == Action::Remove) return false;
    auto c = std::find_if(d.containers.begin(), d.containers.end(),
                          [&](const auto& c) { return c.name == cp.name; });
    if (c == d.containers.end() || c->pre_stop.kind == PreStopHook::Kind::None) return false;
    return handler(c->pre_stop.kind) != (cp.action == Action::SetSleep ? "sleep" : "exec");
  });
}

nlohmann::json replacement_patch(const nlohmann::json& current,
                                 const nlohmann::json& configuration) {
  nlohmann::json ops = nlohmann::json::array();
  ops.push_back({{"op", "test"},
                 {"path", "/metadata/resourceVersion"},
                 {"value", current.at("metadata").at("resourceVersion")}});
  for (auto& op : owned_fields_patch(current, configuration)) ops.push_back(std::move(op));
  return ops;
}

nlohmann::json owned_fields_patch(const nlohmann::json& current,
                                  const nlohmann::json& configuration) {
  nlohmann::json ops = nlohmann::json::array();
  const auto& spec = configuration.at("spec");
  if (spec.contains("strategy")) ops.push_back(add("/spec/strategy", spec["strategy"]));
  const auto& pod = spec.at("template").at("spec");
  if (pod.contains("terminationGracePeriodSeconds")) {
    ops.push_back(add("/spec/template/spec/terminationGracePeriodSeconds",
                      pod["terminationGracePeriodSeconds"]));
  }
  const auto& containers = current.at("spec").at("template").at("spec").at("containers");
  for (const auto& wanted : pod.value("containers", nlohmann::json::array())) {
    for (std::size_t i = 0; i < containers.size(); ++i) {
      if (containers[i].value("name", "") != wanted.value("name", "")) continue;
      const std::string at = "/spec/template/spec/containers/" + std::to_string(i) + "/lifecycle";
      const auto& pre_stop = wanted.at("lifecycle").at("preStop");
      if (containers[i].contains("lifecycle") && containers[i]["lifecycle"].is_object()) {
        ops.push_back(add(at + "/preStop", pre_stop));  // `add` replaces an existing member
      } else {
        ops.push_back(add(at, {{"preStop", pre_stop}}));
      }
    }
  }
  // The pod template's mesh annotations (docs/api.md, "Mesh proxies"), and
  // gracekeeper's own on the object.
  add_annotations(current, nlohmann::json::json_pointer("/spec/template/metadata"),
                  spec.at("template")
                      .value("metadata", nlohmann::json::object())
                      .value("annotations", nlohmann::json::object()),
                  ops);
  add_annotations(current, nlohmann::json::json_pointer("/metadata"),
                  configuration.at("metadata").value("annotations", nlohmann::json::object()), ops);
  return ops;
}

}  // namespace gracekeeper::controller
