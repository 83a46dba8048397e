#include "gracekeeper/budget/apply.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>

#include "gracekeeper/core/time.h"

namespace gracekeeper::budget {
namespace {

Json int_or_percent_json(const IntOrPercent& value) {
  if (value.percent) return value.to_string();
  return value.value;
}

Json pre_stop_json(bool native_sleep, std::int64_t seconds) {
  if (native_sleep) return Json{{"sleep", Json{{"seconds", seconds}}}};
  return Json{{"exec", Json{{"command", Json::array({"sleep", std::to_string(seconds)})}}}};
}

Json pre_stop_json(const ContainerPlan& cp) {
  return pre_stop_json(cp.action == ContainerPlan::Action::SetSleep, cp.pre_stop_seconds);
}

Json strategy_json(const Strategy& strategy) {
  return Json{
      {"type", "RollingUpdate"},
      {"rollingUpdate", Json{{"maxSurge", int_or_percent_json(strategy.max_surge)},
                             {"maxUnavailable", int_or_percent_json(strategy.max_unavailable)}}}};
}

// The containers list entry with this name (names are unique within a pod).
Json* find_container(Json& containers, const std::string& name) {
  for (auto& container : containers) {
    if (!container.is_object()) continue;
    auto it = container.find("name");
    if (it != container.end() && it->is_string() && it->get_ref<const std::string&>() == name) {
      return &container;
    }
  }
  return nullptr;
}

// `user`: the user's own values, in the form the Deployment has them. Kept
// short, as it is on every tuned Deployment and in the operator's cache.
Json user_values_json(const UserValues& user) {
  Json out = Json::object();
  if (user.grace_seconds) out["grace"] = *user.grace_seconds;
  if (user.strategy) {
    out["maxSurge"] = int_or_percent_json(user.strategy->max_surge);
    out["maxUnavailable"] = int_or_percent_json(user.strategy->max_unavailable);
  }
  if (!user.pre_stop.empty()) {
    Json hooks = Json::object();
    for (const auto& [name, hook] : user.pre_stop) {
      hooks[name] = hook ? Json::parse(*hook, nullptr, /*allow_exceptions=*/false) : Json();
    }
    out["preStop"] = std::move(hooks);
  }
  if (!user.annotations.empty()) {
    Json annotations = Json::object();
    for (const auto& [name, value] : user.annotations) {
      annotations[name] = value ? Json(*value) : Json();
    }
    out["annotations"] = std::move(annotations);
  }
  return out;
}

}  // namespace

std::string applied_annotation(const Plan& plan, const std::string& policy_name,
                               std::chrono::system_clock::time_point time) {
  std::int64_t wait = 0;
  Json containers = Json::array();
  Json waits = Json::object();
  for (const auto& cp : plan.containers) {
    // Only the hooks gracekeeper wrote: they are how it recognises its own
    // later, each by the wait written to its container (`waits`). `preStop`
    // and `containers` are the older format's, still written for readers of it.
    if (!cp.gracekeeper_hook) continue;
    wait = std::max(wait, cp.pre_stop_seconds);
    containers.push_back(cp.name);
    waits[cp.name] = cp.pre_stop_seconds;
  }
  Json record{{"policy", policy_name},
              {"preStop", wait},
              {"grace", plan.grace_seconds},
              {"graceOwned", plan.grace_owned},
              {"propagation", plan.budget.propagation_seconds},
              {"containers", std::move(containers)},
              {"waits", std::move(waits)},
              {"time", core::format_rfc3339(time)}};
  if (plan.budget.measured_drain) record["drain"] = plan.budget.drain_seconds;
  if (!plan.pod_annotations.empty()) {
    Json mesh = Json::object();
    for (const auto& [name, value] : plan.pod_annotations) mesh[name] = value;
    record["mesh"] = std::move(mesh);
  }
  if (plan.set_back) record["setBack"] = core::format_rfc3339(*plan.set_back);
  if (plan.user) record["user"] = user_values_json(*plan.user);
  return record.dump();
}

void apply_plan(Json& deployment, const Plan& plan, const std::string& policy_name,
                std::chrono::system_clock::time_point time) {
  if (!plan.changed()) return;
  // ordered_json keeps an object's members in a vector: inserting a key can move
  // its siblings, so no reference is held across an insertion below.
  if (plan.manage_strategy) {
    deployment["spec"]["strategy"] = strategy_json(plan.strategy);
  }
  deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = plan.grace_seconds;
  for (const auto& [name, value] : plan.pod_annotations) {
    deployment["spec"]["template"]["metadata"]["annotations"][name] = value;
  }
  for (const auto& cp : plan.containers) {
    if (cp.action == ContainerPlan::Action::Keep) continue;
    Json& containers = deployment["spec"]["template"]["spec"]["containers"];
    Json* container = find_container(containers, cp.name);
    if (container == nullptr) continue;
    if (cp.action != ContainerPlan::Action::Remove) {
      (*container)["lifecycle"]["preStop"] = pre_stop_json(cp);
    } else if (auto lifecycle = container->find("lifecycle");
               lifecycle != container->end() && lifecycle->is_object()) {
      lifecycle->erase("preStop");
      if (lifecycle->empty()) container->erase("lifecycle");
    }
  }
  deployment["metadata"]["annotations"][kAnnotationApplied] =
      applied_annotation(plan, policy_name, time);
}

Deployment apply_plan(Deployment current, const Plan& plan, const std::string& policy_name,
                      std::chrono::system_clock::time_point time) {
  if (!plan.changed()) return current;
  // As the object apply_plan writes reads back: a managed strategy is a
  // RollingUpdate (read for a Deployment only), the grace is set, and a
  // hook is replaced or removed with its lifecycle, in the app containers.
  if (plan.manage_strategy && current.kind == "Deployment") {
    current.strategy = plan.strategy;
    current.strategy.type = Strategy::Type::RollingUpdate;
  }
  current.grace_seconds = plan.grace_seconds;
  current.grace_set = true;
  for (const auto& [name, value] : plan.pod_annotations) current.pod_annotations[name] = value;
  for (const auto& cp : plan.containers) {
    if (cp.action == ContainerPlan::Action::Keep) continue;
    auto container =
        std::find_if(current.containers.begin(), current.containers.end(),
                     [&](const Container& c) { return !c.sidecar && c.name == cp.name; });
    if (container == current.containers.end()) continue;
    PreStopHook hook;
    if (cp.action != ContainerPlan::Action::Remove) {
      hook.kind = cp.action == ContainerPlan::Action::SetSleep ? PreStopHook::Kind::Sleep
                                                               : PreStopHook::Kind::ExecSleep;
      hook.seconds = cp.pre_stop_seconds;
      hook.wait_ms = hook.length_ms = milliseconds_of(cp.pre_stop_seconds);
      hook.json = pre_stop_json(cp).dump();
    }
    container->pre_stop = std::move(hook);
  }
  set_applied_annotation(current, applied_annotation(plan, policy_name, time));
  return current;
}

Json apply_configuration(const Deployment& current, const Plan& plan,
                         const std::string& policy_name,
                         std::chrono::system_clock::time_point time) {
  Json containers = Json::array();
  for (const auto& cp : plan.containers) {
    if (!cp.gracekeeper_hook) continue;
    Json hook;
    if (cp.action != ContainerPlan::Action::Keep) {
      hook = pre_stop_json(cp);
    } else {
      // Unchanged, but still ours: re-state it in the form it has.
      auto it = std::find_if(current.containers.begin(), current.containers.end(),
                             [&](const Container& c) { return c.name == cp.name; });
      const bool sleep =
          it == current.containers.end() || it->pre_stop.kind != PreStopHook::Kind::ExecSleep;
      hook = pre_stop_json(sleep, cp.pre_stop_seconds);
    }
    containers.push_back(
        Json{{"name", cp.name}, {"lifecycle", Json{{"preStop", std::move(hook)}}}});
  }
  Json pod_spec{{"terminationGracePeriodSeconds", plan.grace_seconds}};
  if (!containers.empty()) pod_spec["containers"] = std::move(containers);
  Json pod_template = Json::object();
  for (const auto& [name, value] : plan.pod_annotations) {
    pod_template["metadata"]["annotations"][name] = value;
  }
  pod_template["spec"] = std::move(pod_spec);
  Json spec{{"template", std::move(pod_template)}};
  if (plan.manage_strategy) {
    spec["strategy"] = strategy_json(plan.strategy);
  } else if (current.kind == "Deployment" &&
             current.strategy.type == Strategy::Type::RollingUpdate && current.applied &&
             current.applied->user && current.applied->user->strategy) {
    // rollout.manage: false on a Deployment whose strategy gracekeeper
    // changed before: re-stated as it is. Left out, server-side apply would
    // drop gracekeeper's ownership and, with no other owner, the field
    // itself: maxUnavailable back to its 25% default, capacity lost.
    spec["strategy"] = strategy_json(current.strategy);
  }
  return Json{
      {"apiVersion", "apps/v1"},
      {"kind", current.kind},
      {"metadata", Json{{"name", current.name},
                        {"namespace", current.namespace_},
                        {"annotations",
                         Json{{kAnnotationApplied, applied_annotation(plan, policy_name, time)}}}}},
      {"spec", std::move(spec)}};
}

}  // namespace gracekeeper::budget
