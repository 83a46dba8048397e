// The revert plan: which of the user's recorded values go back, as one JSON patch.
#include "revert.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "gracekeeper/budget/deployment.h"
#include "gracekeeper/budget/mesh.h"

namespace gracekeeper::cli {
namespace {

using budget::Json;

std::string describe(const budget::Strategy& s) {
  if (s.type == budget::Strategy::Type::Recreate) return "Recreate";
  return fmt::format("RollingUpdate maxSurge={} maxUnavailable={}", s.max_surge.to_string(),
                     s.max_unavailable.to_string());
}

Json int_or_percent_json(const budget::IntOrPercent& value) {
  if (value.percent) return value.to_string();
  return value.value;
}

// A hook as `plan`'s summary names it: "none", "sleep 6s", "exec sleep 6", "httpGet".
std::string describe_hook(const Json* hook) {
  if (hook == nullptr || !hook->is_object() || hook->empty()) return "none";
  if (auto sleep = hook->find("sleep"); sleep != hook->end() && sleep->is_object()) {
    return fmt::format("sleep {}s", sleep->value("seconds", Json()).dump());
  }
  if (auto exec = hook->find("exec"); exec != hook->end() && exec->is_object()) {
    auto command = exec->value("command", Json::array());
    if (command.is_array() && command.size() == 2 && command[0] == "sleep" &&
        command[1].is_string()) {
      return "exec sleep " + command[1].get<std::string>();
    }
    return "exec";
  }
  return hook->begin().key();
}

const Json* find_path(const Json& object, std::initializer_list<const char*> path) {
  const Json* at = &object;
  for (const char* key : path) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(std::string(key));
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

class Reverter {
 public:
  Reverter(const Json& object, const budget::Deployment& d) : object_(object), d_(d) {}

  std::expected<RevertPlan, std::string> run() {
    const Json* annotations = find_path(object_, {"metadata", "annotations"});
    const bool annotated = annotations && annotations->contains(budget::kAnnotationApplied);
    const Json released = managed_fields_without_gracekeeper();
    plan_.tuned = annotated || !released.is_null();
    if (!plan_.tuned) return std::move(plan_);

    const Json* version = find_path(object_, {"metadata", "resourceVersion"});
    if (!version || !version->is_string() || version->get_ref<const std::string&>().empty()) {
      return std::unexpected(fmt::format(
          "metadata.resourceVersion: missing; read the {} from the API server", d_.kind));
    }
    op("replace", "/metadata/resourceVersion", *version);

    if (!d_.applied) {
      plan_.notes.push_back(annotated ? "gracekeeper.dev/applied is unreadable: no values of the "
                                        "user's recorded, the fields are left as they are"
                                      : "no gracekeeper.dev/applied annotation: no values of the "
                                        "user's recorded, the fields are left as they are");
    } else if (!d_.applied->user) {
      plan_.notes.push_back(fmt::format(
          "the annotation was written by an older gracekeeper that did not record the user's "
          "values: terminationGracePeriodSeconds, {}preStop are left as they are",
          d_.kind == "Deployment" ? "strategy and " : ""));
    } else {
      restore_grace(*d_.applied->user);
      restore_strategy(*d_.applied->user);
      restore_hooks(*d_.applied->user);
      restore_mesh_annotations(*d_.applied->user);
    }
    remove_annotations(annotations);
    if (!released.is_null()) {
      op("replace", "/metadata/managedFields", released);
      plan_.changes.push_back({"managedFields", "gracekeeper's", "released"});
    }
    return std::move(plan_);
  }

 private:
  void op(std::string_view kind, std::string path, Json value) {
    plan_.patch.push_back(
        Json{{"op", kind}, {"path", std::move(path)}, {"value", std::move(value)}});
  }
  void remove(std::string path) {
    plan_.patch.push_back(Json{{"op", "remove"}, {"path", std::move(path)}});
  }

  // The recorded grace goes back while the grace is still the one gracekeeper
  // wrote; one the user changed since is theirs.
  void restore_grace(const budget::UserValues& user) {
    if (!user.grace_seconds) return;
    const auto& record = *d_.applied;
    if (d_.grace_seconds == *user.grace_seconds) return;
    if (!record.grace_owned || d_.grace_seconds != record.grace_seconds) {
      plan_.notes.push_back(fmt::format(
          "terminationGracePeriodSeconds: {}s is not the {}s gracekeeper wrote (changed since): "
          "left as it is, not set back to {}s",
          d_.grace_seconds, record.grace_seconds, *user.grace_seconds));
      return;
    }
    op("add", "/spec/template/spec/terminationGracePeriodSeconds", *user.grace_seconds);
    plan_.changes.push_back({"terminationGracePeriodSeconds", fmt::format("{}s", d_.grace_seconds),
                             fmt::format("{}s", *user.grace_seconds)});
  }

  // gracekeeper writes RollingUpdate with maxUnavailable 0; another strategy
  // is the user's since. A StatefulSet has no spec.strategy, and gracekeeper
  // never writes its spec.updateStrategy: a strategy recorded for one is not
  // gracekeeper's to restore (the write would be refused).
  void restore_strategy(const budget::UserValues& user) {
    if (!user.strategy) return;
    if (d_.kind != "Deployment") {
      plan_.notes.push_back(fmt::format(
          "strategy: {} is recorded, but gracekeeper never changes a {}'s updateStrategy: left "
          "as it is",
          describe(*user.strategy), d_.kind));
      return;
    }
    if (d_.strategy == *user.strategy) return;
    const bool ours = d_.strategy.type == budget::Strategy::Type::RollingUpdate &&
                      d_.strategy.max_unavailable.is_zero();
    if (!ours) {
      plan_.notes.push_back(
          fmt::format("strategy: {} is not gracekeeper's (changed since): left as it is, not set "
                      "back to {}",
                      describe(d_.strategy), describe(*user.strategy)));
      return;
    }
    op("add", "/spec/strategy",
       Json{{"type", "RollingUpdate"},
            {"rollingUpdate",
             Json{{"maxSurge", int_or_percent_json(user.strategy->max_surge)},
                  {"maxUnavailable", int_or_percent_json(user.strategy->max_unavailable)}}}});
    plan_.changes.push_back({"strategy", describe(d_.strategy), describe(*user.strategy)});
  }

  void restore_hooks(const budget::UserValues& user) {
    const Json* containers = find_path(object_, {"spec", "template", "spec", "containers"});
    if (!containers || !containers->is_array()) return;
    for (std::size_t i = 0; i < containers->size(); ++i) {
      const Json& container = (*containers)[i];
      const std::string name = container.value("name", std::string());
      auto recorded = user.pre_stop.find(name);
      auto projected = std::ranges::find(d_.containers, name, &budget::Container::name);
      if (projected == d_.containers.end() || projected->sidecar) continue;
      const Json* current = find_path(container, {"lifecycle", "preStop"});
      const std::string field = fmt::format("containers[{}].preStop", name);
      if (recorded == user.pre_stop.end()) {
        if (projected->pre_stop.owned) {
          plan_.notes.push_back(field + ": no value of the user's recorded: left as it is");
        }
        continue;
      }
      if (!projected->pre_stop.owned) {
        if (projected->pre_stop.json != recorded->second.value_or("")) {
          plan_.notes.push_back(field + ": " + describe_hook(current) +
                                " is not gracekeeper's (changed since): left as it is");
        }
        continue;
      }
      restore_hook(i, container, field, current, recorded->second);
    }
  }

  // A mesh annotation gracekeeper wrote goes back to the user's value (or
  // away) while the template still has gracekeeper's.
  void restore_mesh_annotations(const budget::UserValues& user) {
    const auto& record = *d_.applied;
    for (const auto& [name, written] : record.mesh) {
      const std::string field = budget::annotation_field(name);
      auto current = d_.pod_annotations.find(name);
      auto original = user.annotations.find(name);
      if (current == d_.pod_annotations.end() || current->second != written) {
        plan_.notes.push_back(field +
                              ": not the value gracekeeper wrote (changed since): left "
                              "as it is");
        continue;
      }
      if (original == user.annotations.end()) {
        plan_.notes.push_back(field + ": no value of the user's recorded: left as it is");
        continue;
      }
      const std::string path =
          (nlohmann::json::json_pointer("/spec/template/metadata/annotations") / name).to_string();
      if (original->second) {
        op("add", path, *original->second);
      } else {
        remove(path);
      }
      plan_.changes.push_back({field, written, original->second.value_or("none")});
    }
  }

  void restore_hook(std::size_t index, const Json& container, const std::string& field,
                    const Json* current, const std::optional<std::string>& original) {
    const std::string lifecycle = fmt::format("/spec/template/spec/containers/{}/lifecycle", index);
    if (original && *original == "{}") {  // no hook, in the user's empty `lifecycle: {}`
      plan_.changes.push_back({field, describe_hook(current), "none"});
      remove(lifecycle + "/preStop");
      return;
    }
    if (original) {
      Json hook = Json::parse(*original, nullptr, /*allow_exceptions=*/false);
      if (hook.is_discarded()) return;  // not possible: read from JSON by parse_applied
      plan_.changes.push_back({field, describe_hook(current), describe_hook(&hook)});
      op("add", lifecycle + "/preStop", std::move(hook));
      return;
    }
    plan_.changes.push_back({field, describe_hook(current), "none"});
    // A lifecycle with nothing else in it goes too: the user had none.
    const Json* handlers = find_path(container, {"lifecycle"});
    if (handlers && handlers->is_object() && handlers->size() == 1) {
      remove(lifecycle);
    } else {
      remove(lifecycle + "/preStop");
    }
  }

  // The opt-in goes too: the operator would tune the object again.
  void remove_annotations(const Json* annotations) {
    if (!annotations || !annotations->is_object()) return;
    for (const char* key : {budget::kAnnotationApplied, budget::kAnnotationEnabled}) {
      auto it = annotations->find(key);
      if (it == annotations->end()) continue;
      remove((nlohmann::json::json_pointer("/metadata/annotations") / key).to_string());
      plan_.changes.push_back({fmt::format("metadata.annotations[{}]", key),
                               key == budget::kAnnotationApplied ? "(record)" : it->dump(),
                               "none"});
    }
  }

  // managedFields without gracekeeper's entries, or null when it has none.
  // An empty list would leave the server with the old one: `[{}]` clears.
  Json managed_fields_without_gracekeeper() const {
    const Json* fields = find_path(object_, {"metadata", "managedFields"});
    if (!fields || !fields->is_array()) return Json();
    Json kept = Json::array();
    for (const Json& entry : *fields) {
      const bool ours = entry.is_object() &&
                        entry.value("manager", std::string()) == kOperatorFieldManager &&
                        entry.value("subresource", std::string()).empty();
      if (!ours) kept.push_back(entry);
    }
    if (kept.size() == fields->size()) return Json();
    if (kept.empty()) kept.push_back(Json::object());
    return kept;
  }

  const Json& object_;
  const budget::Deployment& d_;
  RevertPlan plan_;
};

}  // namespace

std::expected<RevertPlan, std::string> plan_revert(const budget::Json& object) {
  if (!budget::is_deployment(object) && !budget::is_statefulset(object)) {
    return std::unexpected("not an apps/v1 Deployment or StatefulSet");
  }
  auto projected = budget::project_deployment(object);
  if (!projected) {
    std::string message;
    for (const auto& e : projected.error()) message += (message.empty() ? "" : "; ") + e.format();
    return std::unexpected(message);
  }
  return Reverter(object, *projected).run();
}

bool is_object_name(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  return std::ranges::all_of(name, [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
  });
}

std::expected<RevertTarget, std::string> parse_revert_target(std::string_view argument) {
  const auto slash = argument.find('/');
  RevertTarget target{"Deployment", std::string(argument)};
  if (slash != std::string_view::npos) {
    std::string kind(argument.substr(0, slash));
    std::ranges::transform(kind, kind.begin(),
                           [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (kind.ends_with(".apps")) kind.resize(kind.size() - 5);
    if (kind == "deployment" || kind == "deployments" || kind == "deploy") {
      target.kind = "Deployment";
    } else if (kind == "statefulset" || kind == "statefulsets" || kind == "sts") {
      target.kind = "StatefulSet";
    } else if (kind.empty()) {
      return std::unexpected(fmt::format(
          "\"{}\": no kind before '/' (deployment/NAME or statefulset/NAME)", argument));
    } else {
      return std::unexpected(
          fmt::format("\"{}\": gracekeeper reverts Deployments and StatefulSets, not \"{}\" "
                      "(deployment/NAME or statefulset/NAME)",
                      argument, argument.substr(0, slash)));
    }
    target.name = std::string(argument.substr(slash + 1));
    if (target.name.empty()) {
      return std::unexpected(
          fmt::format("\"{}\": no {} name after the '/'", argument, target.kind));
    }
  }
  if (!is_object_name(target.name)) {
    return std::unexpected(
        fmt::format("\"{}\" is not a {} name (lower-case letters, digits, '-' and '.')",
                    target.name, target.kind));
  }
  return target;
}

}  // namespace gracekeeper::cli
