#include "gracekeeper/deployment/deployment_decision.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>

#include "gracekeeper/budget/apply.h"
#include "gracekeeper/deployment/takeover.h"

namespace gracekeeper::controller {
namespace {

std::string describe_changes(const budget::Plan& plan) {
  std::string out;
  for (const auto& c : plan.changes) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{}: {} -> {}", c.field, c.from, c.to);
  }
  return out;
}

bool has_error(const std::vector<budget::Finding>& findings) {
  return std::ranges::any_of(findings,
                             [](const auto& f) { return f.severity == budget::Severity::Error; });
}

kube::EventRecord warning(std::string reason, std::string action, std::string note) {
  return {{}, kube::EventType::Warning, std::move(reason), std::move(action), std::move(note)};
}

// The governing policy among the namespace's valid ones, or the finding
// that says why there is none.
std::expected<const NamespaceInputs::Policy*, budget::Finding> governing(
    const budget::Deployment& d, const DeploymentFacts& facts) {
  std::vector<const NamespaceInputs::Policy*> valid;
  std::vector<budget::PolicyCandidate> candidates;
  for (const NamespaceInputs::Policy& p : facts.ns->policies) {
    if (!p.policy->spec) continue;  // an invalid policy governs nothing; its status says why
    valid.push_back(&p);
    candidates.push_back({p.policy->name, &p.policy->spec->selector, ""});
  }
  auto chosen = budget::select_policy(d, candidates, "in namespace " + d.namespace_);
  if (!chosen) return std::unexpected(chosen.error());
  return valid[*chosen];
}

// The fields gracekeeper.dev/applied says gracekeeper wrote that hold
// another value now (see DeploymentDecision::set_back). A value the user
// raised since (a longer grace, a hook that waits longer) is theirs, not a
// set-back; nor is a field gracekeeper never wrote.
void find_set_back(const budget::Deployment& d, const budget::PolicySpec& policy,
                   DeploymentDecision& out) {
  if (!d.applied) return;
  const budget::AppliedRecord& a = *d.applied;
  if (a.grace_owned && d.grace_seconds < a.grace_seconds) {
    out.set_back_paths.push_back(".spec.template.spec.terminationGracePeriodSeconds");
    out.set_back.push_back(
        fmt::format("terminationGracePeriodSeconds: {}s -> {}s", a.grace_seconds, d.grace_seconds));
  }
  // gracekeeper wrote the strategy when it recorded the user's own (an
  // annotation too old to record it: as before, taken as written).
  const bool wrote_strategy = !a.user || a.user->strategy;
  if (policy.rollout.manage && wrote_strategy && d.kind == "Deployment" &&
      d.strategy.type == budget::Strategy::Type::RollingUpdate &&
      !d.strategy.max_unavailable.is_zero()) {
    out.set_back_paths.push_back(".spec.strategy.rollingUpdate.maxUnavailable");
    out.set_back.push_back(
        fmt::format("maxUnavailable: 0 -> {}", d.strategy.max_unavailable.to_string()));
  }
  if (!a.waits) return;
  for (const auto& [name, seconds] : *a.waits) {
    const auto c =
        std::ranges::find_if(d.containers, [&](const auto& c) { return c.name == name; });
    if (c == d.containers.end()) continue;
    const budget::PreStopHook& hook = c->pre_stop;
    // Still gracekeeper's: a hook that only sleeps, exactly the recorded
    // length (to the millisecond: `sleep 15.5` over a recorded 15 is not).
    const bool sleeps_only = hook.kind == budget::PreStopHook::Kind::Sleep ||
                             hook.kind == budget::PreStopHook::Kind::ExecSleep;
    if ((sleeps_only && hook.length_ms == budget::milliseconds_of(seconds)) ||
        (seconds == 0 && hook.kind == budget::PreStopHook::Kind::None) ||
        budget::lengthened_by_user(a, *c)) {
      continue;
    }
    out.set_back_paths.push_back(".spec.template.spec.containers[name=\"" + name +
                                 "\"].lifecycle.preStop");
    std::string now = "none";
    if (sleeps_only && hook.length_ms) {
      now = fmt::format("sleep {}s", static_cast<double>(*hook.length_ms) / 1000);
    } else if (hook.kind != budget::PreStopHook::Kind::None) {
      now = "another hook";
    }
    out.set_back.push_back(
        fmt::format("containers[{}].preStop: sleep {}s -> {}", name, seconds, now));
  }
}

// The plan's change (budget::Change::field) that writes a set-back path.
std::string change_field(std::string_view path) {
  if (path == ".spec.template.spec.terminationGracePeriodSeconds") {
    return "terminationGracePeriodSeconds";
  }
  if (path.starts_with(".spec.strategy")) return "strategy";
  constexpr std::string_view prefix = ".spec.template.spec.containers[name=\"";
  const auto end = path.find("\"]");
  if (path.starts_with(prefix) && end != std::string_view::npos) {
    return fmt::format("containers[{}].preStop", path.substr(prefix.size(), end - prefix.size()));
  }
  return {};
}

// Whether the plan writes back a field that was set back: a repair, whose
// time is recorded (`setBack`) and which a FieldFight holds back. A plan
// that changes other fields only (a set-back value that still holds the
// budget is left as it is) repairs nothing.
bool repairs_set_back(const budget::Plan& plan, const std::vector<std::string>& paths) {
  return std::ranges::any_of(paths, [&](const std::string& path) {
    const std::string field = change_field(path);
    return std::ranges::any_of(plan.changes,
                               [&](const budget::Change& c) { return c.field == field; });
  });
}

// The valid policies whose selectors all match the Deployment.
std::vector<std::string> contenders(const budget::Deployment& d, const DeploymentFacts& facts) {
  std::vector<std::string> names;
  for (const NamespaceInputs::Policy& p : facts.ns->policies) {
    const CachedPolicy& policy = *p.policy;
    if (policy.spec && policy.spec->selector.matches(d.labels)) names.push_back(policy.name);
  }
  std::ranges::sort(names);
  return names;
}

budget::Context planning_context(const budget::Deployment& d, const CachedPolicy& policy,
                                 const NamespaceInputs::Figure& propagation,
                                 const DeploymentFacts& facts) {
  budget::Context ctx;
  ctx.policy = &*policy.spec;
  ctx.policy_name = policy.name;
  ctx.propagation_seconds = propagation.seconds;
  // Never shorten a wait because the source went away: while the
  // metrics are unavailable, the figure this Deployment was tuned to holds.
  if (!propagation.available && d.applied) {
    ctx.propagation_seconds = std::max(ctx.propagation_seconds, d.applied->propagation_seconds);
  }
  ctx.capabilities = facts.ns->capabilities;
  // Its pod as it runs: the proxies a mesh injected get their budget.
  if (facts.pod != nullptr) ctx.pod = &facts.pod->pod;
  ctx.behind_service = std::ranges::any_of(
      facts.ns->services, [&](const auto& service) { return selects(*service, d.pod_labels); });
  ctx.now = facts.now;
  // The measured drain: its samples' figure, else the one the workload was
  // tuned to (a restart forgets the samples; the grace they raised holds).
  if (policy.spec->drain.source == budget::DrainSource::Observed) {
    if (auto figure = budget::drain_figure(facts.drains, policy.spec->drain, facts.now)) {
      ctx.measured_drain_seconds = figure->seconds;
    } else if (d.applied) {
      ctx.measured_drain_seconds = d.applied->drain_seconds;
    }
  }
  // A fallback that raises the figure (the source failed, staticSeconds is
  // higher), or a longer measured drain, is no repair of a Deployment that
  // holds the budget it was tuned to: churn control applies, as to any
  // other change.
  const bool propagation_raise = !propagation.available && d.applied &&
                                 ctx.propagation_seconds > d.applied->propagation_seconds;
  const bool drain_raise = d.applied && ctx.measured_drain_seconds &&
                           *ctx.measured_drain_seconds > d.applied->drain_seconds.value_or(0);
  if (propagation_raise || drain_raise) {
    budget::Context tuned = ctx;
    if (propagation_raise) tuned.propagation_seconds = d.applied->propagation_seconds;
    if (drain_raise) tuned.measured_drain_seconds = d.applied->drain_seconds;
    ctx.figure_raise = !budget::plan(d, tuned).budget_broken;
  }
  return ctx;
}

// What `check` would find on the Deployment once `plan` is written.
std::vector<budget::Finding> findings_once_written(const budget::Deployment& d,
                                                   const budget::Plan& plan,
                                                   const budget::Context& ctx, TimePoint now) {
  return budget::plan(budget::apply_plan(d, plan, ctx.policy_name, now), ctx).findings;
}

PlannedWrite planned_write(const budget::Deployment& d, const budget::Plan& plan,
                           const budget::Context& ctx, const DeploymentFacts& facts) {
  PlannedWrite w;
  w.configuration = budget::apply_configuration(d, plan, ctx.policy_name, facts.now);
  w.replace_hooks = changes_handler(d, plan);
  w.force = ctx.policy->pre_stop.existing == budget::ExistingHook::Replace;
  w.changes = describe_changes(plan);
  w.plan_hash = std::hash<std::string>{}(w.changes);
  w.propagation_seconds = plan.budget.propagation_seconds;
  w.retune = d.applied.has_value();
  w.findings_after = findings_once_written(d, plan, ctx, facts.now);
  return w;
}

}  // namespace

std::int64_t max_rollouts(const budget::IntOrPercent& setting, std::int64_t governed) {
  return std::max<std::int64_t>(1, setting.resolve(governed, /*round_up=*/true));
}

kube::EventRecord finding_event(const budget::Finding& f) {
  const bool is_warning = f.severity != budget::Severity::Info;
  std::string note =
      f.container.empty() ? f.message : "container " + f.container + ": " + f.message;
  return {{},
          is_warning ? kube::EventType::Warning : kube::EventType::Normal,
          f.code,
          "Check",
          std::move(note)};
}

namespace {

// One element of a managedFields fieldsV1 key as a conflict path writes it:
// "f:spec" -> ".spec", "k:{\"name\":\"app\"}" -> "[name=\"app\"]",
// "v:\"x\"" -> "[=\"x\"]", "i:0" -> "[0]"; "" for anything else.
std::string path_element(const std::string& key) {
  if (key.size() < 2 || key[1] != ':') return {};
  const std::string_view rest = std::string_view(key).substr(2);
  switch (key[0]) {
    case 'f':
      return "." + std::string(rest);
    case 'i':
      return "[" + std::string(rest) + "]";
    case 'v': {
      auto value = nlohmann::json::parse(rest, nullptr, /*allow_exceptions=*/false);
      return value.is_discarded() ? std::string() : "[=" + value.dump() + "]";
    }
    case 'k': {
      // Key order matters: the conflict path keeps the key's own order.
      auto fields = nlohmann::ordered_json::parse(rest, nullptr, /*allow_exceptions=*/false);
      if (!fields.is_object()) return {};
      std::string out = "[";
      for (auto it = fields.begin(); it != fields.end(); ++it) {
        if (out.size() > 1) out += ",";
        out += it.key() + "=" + it.value().dump();
      }
      return out + "]";
    }
    default:
      return {};
  }
}

bool owns_under(const nlohmann::json& set, const std::string& prefix, std::string_view field) {
  if (!set.is_object()) return false;
  for (auto it = set.begin(); it != set.end(); ++it) {
    if (it.key() == ".") continue;
    const std::string element = path_element(it.key());
    if (element.empty()) continue;
    const std::string path = prefix + element;
    // The field itself, or a field under it.
    if (path == field || (path.size() > field.size() && path.starts_with(field) &&
                          (path[field.size()] == '.' || path[field.size()] == '['))) {
      return true;
    }
    // An ancestor of the field: look inside.
    if (field.starts_with(path) && field.size() > path.size() &&
        (field[path.size()] == '.' || field[path.size()] == '[') &&
        owns_under(it.value(), path, field)) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool applier_owns(const nlohmann::json& managed_fields, std::string_view manager,
                  std::string_view field) {
  if (!managed_fields.is_array()) return false;
  auto text = [](const nlohmann::json& entry, const char* name) -> std::string_view {
    auto it = entry.find(name);
    return it != entry.end() && it->is_string() ? it->get_ref<const std::string&>()
                                                : std::string_view();
  };
  for (const auto& entry : managed_fields) {
    if (!entry.is_object() || text(entry, "manager") != manager ||
        text(entry, "operation") != "Apply") {
      continue;
    }
    if (auto set = entry.find("fieldsV1"); set != entry.end() && owns_under(*set, "", field)) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> owners_of(const nlohmann::json& managed_fields, std::string_view field) {
  std::vector<std::string> out;
  if (!managed_fields.is_array()) return out;
  for (const auto& entry : managed_fields) {
    if (!entry.is_object()) continue;
    const auto manager = entry.find("manager");
    const auto set = entry.find("fieldsV1");
    if (manager == entry.end() || !manager->is_string() || *manager == kFieldManager ||
        set == entry.end() || !owns_under(*set, "", field)) {
      continue;
    }
    out.push_back(manager->get<std::string>());
  }
  std::ranges::sort(out);
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

kube::EventRecord tuned_event(const PlannedWrite& w, const std::string& policy_name) {
  std::string note =
      w.changes + fmt::format(" (policy {}, propagation {}s)", policy_name, w.propagation_seconds);
  bool is_warning = false;
  for (const auto& f : w.findings_after) {
    note += fmt::format(
        "{} {}: {}", &f == &w.findings_after.front() ? ". Also" : ";", f.code,
        f.container.empty() ? f.message : "container " + f.container + ": " + f.message);
    is_warning |= f.severity != budget::Severity::Info;
  }
  return {{},
          is_warning ? kube::EventType::Warning : kube::EventType::Normal,
          "Tuned",
          "Tune",
          std::move(note)};
}

namespace {

// What to do with a plan's changes: say them (DryRun), write them, or not
// again when the same change failed the same way.
void decide_changes(const budget::Deployment& d, const CachedPolicy& policy,
                    const budget::Plan& plan, const budget::Context& ctx,
                    const DeploymentFacts& facts, DeploymentDecision& out) {
  if (policy.spec->mode == budget::Mode::DryRun) {
    out.events.push_back({{},
                          kube::EventType::Normal,
                          "DryRun",
                          "Tune",
                          "DryRun: would set " + describe_changes(plan)});
    return;
  }
  PlannedWrite w = planned_write(d, plan, ctx, facts);
  const BlockedWrite* b = facts.blocked;
  if (b && b->uid == facts.uid && b->generation == facts.generation &&
      b->plan_hash == w.plan_hash) {
    out.events.push_back(b->event);  // the same change failed the same way: not again
    out.blocked = true;
  } else {
    out.write = std::move(w);
  }
}

// Set back once more within minIntervalSeconds of the last repair: writing
// again would restart the pods on every deploy of the other writer. Over,
// and the repair due, once the interval since that repair has passed.
void find_fight(const budget::Deployment& d, const DeploymentFacts& facts,
                DeploymentDecision& out) {
  if (!out.write || out.set_back.empty() || facts.in_request || !d.applied ||
      !d.applied->set_back) {
    return;
  }
  const TimePoint ends = *d.applied->set_back + out.min_interval;
  if (facts.now >= ends) return;
  out.fight_ends_in = std::max<std::chrono::nanoseconds>(ends - facts.now, std::chrono::seconds(1));
}

// The pod the kubelet runs, against the template: what a mutating webhook
// changed, and whether the budget holds on the pod (docs/api.md, "Pods that
// differ from their template"). Only once the controller has observed this
// generation and the rollout is over: until then the newest pod may be of an
// older template. Not at 0 replicas: the pod kept may be of a template that
// has none now.
void judge_pod(const budget::Deployment& d, const budget::Context& ctx,
               const DeploymentFacts& facts, DeploymentDecision& out) {
  if (!facts.pod || !facts.observed || facts.rolling || d.replicas == 0) return;
  const std::vector<std::string> differences = pod_differences(d, facts.pod->pod);
  if (differences.empty()) return;
  // The workload's annotations (gracekeeper.dev/containers, drain-seconds)
  // and labels (the Services that select it) are what the pod is judged by.
  budget::Deployment pod = facts.pod->pod;
  pod.annotations = d.annotations;
  pod.pod_labels = d.pod_labels;
  std::vector<std::string> broken;
  for (const budget::Finding& f : budget::check(pod, ctx)) {
    if (f.severity != budget::Severity::Error) continue;
    broken.push_back(f.container.empty()
                         ? fmt::format("{}: {}", f.code, f.message)
                         : fmt::format("{} (container {}): {}", f.code, f.container, f.message));
  }
  out.state.pod_differs = true;
  std::string note = fmt::format("pod {} differs from the template: {}", facts.pod->name,
                                 fmt::join(differences, "; "));
  if (broken.empty()) {
    note += "; the budget holds on the pod";
  } else {
    note += "; on the pod the budget does not hold: " + fmt::format("{}", fmt::join(broken, "; "));
    out.state.violating = true;
    out.state.broken = true;
    out.state.compliant = false;
  }
  out.events.push_back(warning("PodDiffersFromTemplate", "Check", std::move(note)));
}

}  // namespace

bool NamespaceInputs::Policy::operator==(const Policy& other) const {
  return policy->uid == other.policy->uid && policy->generation == other.policy->generation &&
         figure == other.figure;
}

NamespaceInputs namespace_inputs(const kube::Store<CachedPolicy>& policies,
                                 const kube::Store<CachedService>& services, std::string_view ns,
                                 const FigureOf& figure_of, budget::Capabilities capabilities) {
  NamespaceInputs in;
  for (auto& [key, policy] : policies.list_namespace(ns)) {
    auto figure = figure_of(*policy);
    in.policies.push_back({std::move(policy), figure});
  }
  for (auto& [key, service] : services.list_namespace(ns))
    in.services.push_back(std::move(service));
  in.capabilities = capabilities;
  return in;
}

std::optional<NamespaceInputs::Figure> book_figure(const PropagationBook& book,
                                                   const CachedPolicy& policy) {
  const PropagationState* s = book.state(policy.namespace_ + "/" + policy.name);
  if (!s) return std::nullopt;
  return NamespaceInputs::Figure{s->seconds, s->available};
}

DeploymentDecision decide_deployment(const DeploymentFacts& facts) {
  DeploymentDecision out;
  if (!*facts.deployment) {
    std::string note = "gracekeeper cannot read this object; left unchanged:";
    for (const auto& e : facts.deployment->error()) note += " " + e.format() + ";";
    out.events.push_back(warning("InvalidDeployment", "Check", std::move(note)));
    return out;
  }
  const budget::Deployment& d = **facts.deployment;
  auto policy = governing(d, facts);
  if (!policy) {
    if (policy.error().code == "AmbiguousPolicy") out.contenders = contenders(d, facts);
    out.events.push_back(finding_event(policy.error()));
    return out;
  }
  const CachedPolicy& governor = *(*policy)->policy;
  out.policy_name = governor.name;
  out.policy_key = d.namespace_ + "/" + out.policy_name;
  out.max_concurrent_rollouts = governor.spec->changes.max_concurrent_rollouts;
  out.min_interval = std::chrono::seconds(governor.spec->changes.min_interval_seconds);
  if (d.applied && d.applied->policy == out.policy_name) find_set_back(d, *governor.spec, out);
  const std::optional<NamespaceInputs::Figure>& propagation = (*policy)->figure;
  if (!propagation) {
    out.wait_for_policy = true;  // its first measurement enqueues the namespace again
    return out;
  }
  const budget::Context ctx = planning_context(d, governor, *propagation, facts);
  budget::Plan plan = budget::plan(d, ctx);
  const bool repair = !facts.in_request && repairs_set_back(plan, out.set_back_paths);
  if (repair) plan.set_back = facts.now;

  out.state.violating = has_error(plan.findings);
  if (!plan.invalid.empty()) {
    for (const auto& e : plan.invalid) {
      out.events.push_back(warning("InvalidAnnotation", "Check", e.format() + "; left unchanged"));
    }
    return out;
  }
  // The template's settings are not yet every pod's: an older template's
  // pods keep its wait and grace until the rollout is over.
  out.state.rolling = facts.rolling;
  out.state.broken = plan.budget_broken;
  out.state.drain_seconds = plan.budget.drain_seconds;
  out.state.compliant = !out.state.violating && !plan.budget_broken && !facts.rolling;
  out.state.pending = plan.changed() || plan.deferred;
  if (plan.deferred && plan.due_at) {
    out.requeue_after =
        std::max<std::chrono::nanoseconds>(*plan.due_at - facts.now, std::chrono::seconds(1));
  }
  if (plan.changed()) decide_changes(d, governor, plan, ctx, facts, out);
  if (repair) find_fight(d, facts, out);
  for (const auto& f : plan.findings) out.events.push_back(finding_event(f));
  judge_pod(d, ctx, facts, out);
  return out;
}

}  // namespace gracekeeper::controller
