#include "gracekeeper/deployment/status.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>

#include "gracekeeper/core/time.h"

namespace gracekeeper::controller {
namespace {

const nlohmann::json* find_condition(const nlohmann::json& status, const std::string& type) {
  if (!status.is_object()) return nullptr;
  auto conditions = status.find("conditions");
  if (conditions == status.end() || !conditions->is_array()) return nullptr;
  for (const auto& c : *conditions) {
    if (c.is_object() && c.value("type", "") == type) return &c;
  }
  return nullptr;
}

// metav1.Condition; lastTransitionTime moves only when the status flips.
nlohmann::json condition(const StatusInput& in, const nlohmann::json& current,
                         const std::string& type, bool ok, const std::string& reason,
                         const std::string& message) {
  const std::string status = ok ? "True" : "False";
  std::string since = core::format_rfc3339(in.now);
  if (const auto* old = find_condition(current, type); old && old->value("status", "") == status &&
                                                       old->contains("lastTransitionTime") &&
                                                       (*old)["lastTransitionTime"].is_string()) {
    since = (*old)["lastTransitionTime"].get<std::string>();
  }
  return nlohmann::json{{"type", type},
                        {"status", status},
                        {"observedGeneration", in.generation},
                        {"lastTransitionTime", since},
                        {"reason", reason},
                        {"message", message.substr(0, 32768)}};
}

nlohmann::json propagation_json(const StatusInput& in, const nlohmann::json& current) {
  const PropagationState& p = *in.propagation;
  nlohmann::json out{{"seconds", p.seconds},
                     {"quantile", in.quantile},
                     {"source", p.source},
                     {"sampledAt", core::format_rfc3339(p.sampled_at)},
                     {"message", p.message.substr(0, 32768)}};
  if (!p.consumer.empty()) out["consumer"] = p.consumer;
  // The figure has not changed since the server's copy: keep its time, so a
  // steady measurement causes no write.
  if (current.is_object() && current.contains("propagation")) {
    const auto& old = current["propagation"];
    if (old.is_object() && old.value("seconds", -1.0) == p.seconds &&
        old.value("source", "") == p.source &&
        old.value("message", std::string()) == out["message"].get_ref<const std::string&>() &&
        old.contains("sampledAt")) {
      out["sampledAt"] = old["sampledAt"];
    }
  }
  return out;
}

// The Deployments' counts and the StatefulSets' as one: a StatefulSet is
// named "statefulset/web" among the Deployments' names.
DeploymentCounts combined(const DeploymentCounts& deployments,
                          const std::optional<DeploymentCounts>& statefulsets) {
  DeploymentCounts c = deployments;
  if (!statefulsets) return c;
  c.managed += statefulsets->managed;
  c.compliant += statefulsets->compliant;
  c.pending += statefulsets->pending;
  c.violations += statefulsets->violations;
  c.rolling += statefulsets->rolling;
  c.only_rolling += statefulsets->only_rolling;
  c.pods_differ += statefulsets->pods_differ;
  if (statefulsets->longest_drain > c.longest_drain) {
    c.longest_drain = statefulsets->longest_drain;
    c.longest_drain_of = "statefulset/" + statefulsets->longest_drain_of;
  }
  for (const auto& name : statefulsets->not_compliant) {
    c.not_compliant.push_back("statefulset/" + name);
  }
  for (const auto& [other, names] : statefulsets->shared_with) {
    for (const auto& name : names) c.shared_with[other].push_back("statefulset/" + name);
  }
  return c;
}

std::string budget_message(const DeploymentCounts& c, bool statefulsets) {
  const char* what = statefulsets ? "workloads (Deployments and StatefulSets)" : "Deployments";
  if (c.managed == 0) {
    return statefulsets ? "no opted-in Deployment or StatefulSet is governed by this policy"
                        : "no opted-in Deployment is governed by this policy";
  }
  if (c.not_compliant.empty()) {
    return fmt::format("all {} governed {} satisfy the budget", c.managed, what);
  }
  std::vector<std::string> names = c.not_compliant;
  std::string list;
  for (std::size_t i = 0; i < names.size() && i < 10; ++i) list += (i ? ", " : "") + names[i];
  if (names.size() > 10) list += fmt::format(" and {} more", names.size() - 10);
  std::string rolling;
  if (c.rolling > 0) {
    rolling = fmt::format(
        " ({} rolling out: pods of an older template, with its wait and grace, "
        "still run or terminate)",
        c.rolling);
  }
  return fmt::format("{} of {} governed {} do not satisfy the budget: {}{}", names.size(),
                     c.managed, what, list, rolling);
}

nlohmann::json counts_json(const DeploymentCounts& c) {
  return {{"managed", c.managed}, {"compliant", c.compliant},    {"pending", c.pending},
          {"rolling", c.rolling}, {"podsDiffer", c.pods_differ}, {"violations", c.violations}};
}

// Ready=False, Conflict: which other policies select the same Deployments.
std::string conflict_message(const DeploymentCounts& c) {
  std::string out;
  for (const auto& [other, names] : c.shared_with) {
    std::string list;
    for (std::size_t i = 0; i < names.size() && i < 10; ++i) list += (i ? ", " : "") + names[i];
    if (names.size() > 10) list += fmt::format(" and {} more", names.size() - 10);
    const bool stateful = std::ranges::any_of(
        names, [](const std::string& n) { return n.starts_with("statefulset/"); });
    out += fmt::format("{}ShutdownPolicy {} also selects {} {}{} ({})", out.empty() ? "" : "; ",
                       other, names.size(), stateful ? "workload" : "Deployment",
                       names.size() == 1 ? "" : "s", list);
  }
  return out +
         ": neither policy governs them; name one with the gracekeeper.dev/policy annotation, or "
         "make the selectors disjoint";
}

// The Ready condition of a valid spec.
nlohmann::json ready_condition(const StatusInput& in, const nlohmann::json& current,
                               const std::optional<DeploymentCounts>& all) {
  if (all && !all->shared_with.empty()) {
    return condition(in, current, "Ready", false, "Conflict", conflict_message(*all));
  }
  if (const auto* old = find_condition(current, "Ready");
      !in.deployments && old && old->value("reason", "") == "Conflict") {
    return *old;  // the counts are not complete yet: keep what the server has
  }
  return condition(in, current, "Ready", true, "Reconciled",
                   "the spec is valid and the policy is reconciled");
}

// The counts of the governed workloads, and the BudgetHolds condition.
void add_counts(const StatusInput& in, const nlohmann::json& current,
                const std::optional<DeploymentCounts>& all, nlohmann::json& status,
                nlohmann::json& conditions) {
  if (in.deployments) {
    status["deployments"] = counts_json(*in.deployments);
    // Written once a StatefulSet is governed, and kept (at 0) from then on.
    if (in.statefulsets && (in.statefulsets->managed > 0 ||
                            (current.is_object() && current.contains("statefulSets")))) {
      status["statefulSets"] = counts_json(*in.statefulsets);
    }
    const DeploymentCounts& c = *all;
    const bool holds = c.not_compliant.empty();
    // Rolling: every governed Deployment's settings hold, but some still
    // have pods of an older template, with its shorter wait.
    const char* reason = holds ? "AllCompliant"
                         : c.only_rolling == static_cast<std::int64_t>(c.not_compliant.size())
                             ? "Rolling"
                             : "NotCompliant";
    conditions.push_back(condition(in, current, "BudgetHolds", holds, reason,
                                   budget_message(c, status.contains("statefulSets"))));
    if (c.managed > 0) {
      status["drain"] = {{"source", in.drain_source},
                         {"seconds", c.longest_drain},
                         {"workload", c.longest_drain_of}};
    }
  } else if (current.is_object() && current.contains("deployments")) {
    // Not every Deployment is reconciled yet (e.g. just after a restart): keep
    // what the server has rather than write a partial count.
    status["deployments"] = current["deployments"];
    if (current.contains("statefulSets")) status["statefulSets"] = current["statefulSets"];
    if (current.contains("drain")) status["drain"] = current["drain"];
    if (const auto* old = find_condition(current, "BudgetHolds")) conditions.push_back(*old);
  }
}

}  // namespace

nlohmann::json desired_status(const StatusInput& in, const nlohmann::json& current) {
  nlohmann::json status = nlohmann::json::object();
  status["observedGeneration"] = in.generation;
  nlohmann::json conditions = nlohmann::json::array();
  if (in.invalid_spec) {
    conditions.push_back(condition(in, current, "Ready", false, "InvalidSpec", *in.invalid_spec));
    status["conditions"] = std::move(conditions);
    return status;
  }
  // StatefulSets are counted with the Deployments in the conditions.
  const std::optional<DeploymentCounts> all =
      in.deployments ? std::optional(combined(*in.deployments, in.statefulsets)) : std::nullopt;
  conditions.push_back(ready_condition(in, current, all));
  if (in.propagation) {
    status["propagation"] = propagation_json(in, current);
    conditions.push_back(condition(in, current, "MetricsAvailable", in.propagation->available,
                                   in.propagation->reason, in.propagation->message));
  }
  if (in.recommended) {
    status["recommended"] = {{"preStopSeconds", in.recommended->pre_stop_seconds},
                             {"terminationGracePeriodSeconds", in.recommended->grace_seconds}};
  }
  add_counts(in, current, all, status, conditions);
  if (in.terminations) {
    nlohmann::json t{{"observed", in.terminations->observed}, {"late", in.terminations->late}};
    if (in.terminations->last_late_at)
      t["lastLateAt"] = core::format_rfc3339(*in.terminations->last_late_at);
    if (in.terminations->drained > 0) {
      t["drained"] = in.terminations->drained;
      t["cutShort"] = in.terminations->cut_short;
    }
    if (in.terminations->last_cut_short_at)
      t["lastCutShortAt"] = core::format_rfc3339(*in.terminations->last_cut_short_at);
    status["terminations"] = std::move(t);
  }
  status["conditions"] = std::move(conditions);
  return status;
}

}  // namespace gracekeeper::controller
