#include "reconciler.h"

#include <fmt/format.h>

#include <algorithm>
#include <ranges>
#include <utility>

#include "gracekeeper/budget/apply.h"
#include "log.h"
#include "takeover.h"

namespace gracekeeper::controller {
namespace {

using Clock = std::chrono::system_clock;

kube::ObjectRef deployment_ref(const std::string& ns, const std::string& name,
                               const std::string& uid) {
  return kube::ObjectRef{"apps/v1", "Deployment", ns, name, uid};
}

kube::EventRecord finding_event(const kube::ObjectRef& ref, const budget::Finding& f) {
  const bool warning = f.severity != budget::Severity::Info;
  std::string note =
      f.container.empty() ? f.message : "container " + f.container + ": " + f.message;
  return kube::EventRecord{ref, warning ? kube::EventType::Warning : kube::EventType::Normal,
                           f.code, "Check", std::move(note)};
}

std::string describe_changes(const budget::Plan& plan) {
  std::string out;
  for (const auto& c : plan.changes) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{}: {} -> {}", c.field, c.from, c.to);
  }
  return out;
}

bool has_error(const std::vector<budget::Finding>& findings) {
  return std::any_of(findings.begin(), findings.end(),
                     [](const auto& f) { return f.severity == budget::Severity::Error; });
}

// The manager a server-side apply conflict names: `conflict with "kubectl" using apps/v1`.
std::string conflicting_manager(const kube::ApiError::Cause& cause) {
  const auto open = cause.message.find('"');
  if (open == std::string::npos) return {};
  const auto close = cause.message.find('"', open + 1);
  if (close == std::string::npos) return {};
  return cause.message.substr(open + 1, close - open - 1);
}

std::string event_key(const kube::EventRecord& e) {
  return e.reason + '\x1f' + e.note;
}

// Events whose note write() reads back: this very change failed, do not repeat it.
bool blocks_writes(std::string_view event_key) {
  return event_key.starts_with("FieldConflict\x1f") || event_key.starts_with("ApplyRejected\x1f");
}

// A conflict with managers that wrote with Update (kubectl create/edit/
// client-side apply, other controllers' updates) is taken over: those
// writers do not re-assert their values, and raising the budget is what the
// Deployment opted in for. A conflict with another *applier* (a GitOps
// controller re-applying its manifest) is not: forcing would start a fight
// that restarts pods on every sync. `owners` gets the conflicting managers.
bool may_force(const kube::ApiError& conflict, const std::vector<std::string>& appliers,
               std::string& owners) {
  std::set<std::string> managers;
  for (const auto& cause : conflict.causes) {
    if (auto m = conflicting_manager(cause); !m.empty()) managers.insert(m);
  }
  for (const auto& m : managers) owners += (owners.empty() ? "\"" : ", \"") + m + "\"";
  if (managers.empty()) return false;
  for (const auto& m : managers) {
    if (std::ranges::find(appliers, m) != appliers.end()) {
      owners += " (an applier)";
      return false;
    }
  }
  return true;
}

}  // namespace

std::pair<std::string, std::string> split_key(const std::string& key) {
  const auto slash = key.find('/');
  if (slash == std::string::npos) return {std::string(), key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

Reconciler::Reconciler(Dependencies deps, ReconcilerOptions options)
    : deps_(deps), options_(options) {}

namespace {

// The entries of namespace `ns`'s Deployments: the keys "ns/...", which sort
// together, before "ns0" ('0' follows '/').
template <class Map>
auto namespace_entries(Map& map, std::string_view ns) {
  const std::string prefix(ns);
  return std::ranges::subrange(map.lower_bound(prefix + "/"), map.lower_bound(prefix + "0"));
}

}  // namespace

kube::InformerHandlers Reconciler::deployment_handlers() {
  auto added = [this](const std::string& key) {
    deployments_[key].cached = true;
    deps_.deployment_queue.add(key);
  };
  return {added, added, [this](const std::string& key) {
            // Kept until its reconcile: the policy's counts follow then.
            if (auto it = deployments_.find(key); it != deployments_.end()) {
              it->second.cached = false;
            }
            deps_.deployment_queue.add(key);
          }};
}

void Reconciler::forget_if_empty(TrackedMap::iterator it) {
  const Tracked& t = it->second;
  if (!t.cached && !t.record && t.reported.hashes.empty()) deployments_.erase(it);
}

kube::InformerHandlers Reconciler::policy_handlers() {
  auto changed = [this](const std::string& key) {
    const std::string ns = split_key(key).first;
    policies_by_namespace_[ns].insert(key);
    deps_.policy_queue.add(key);
    // Our own status writes change the object too; only a new spec (or a new
    // policy) can change which Deployments it governs and how.
    const CachedPolicy* p = deps_.policies.get(key);
    const std::int64_t generation = p ? p->generation : -1;
    auto [it, inserted] = policy_generation_seen_.try_emplace(key, generation);
    if (inserted || it->second != generation) {
      it->second = generation;
      enqueue_namespace(ns);
    }
  };
  return {changed, changed, [this](const std::string& key) {
            const std::string ns = split_key(key).first;
            auto it = policies_by_namespace_.find(ns);
            if (it != policies_by_namespace_.end()) it->second.erase(key);
            policy_generation_seen_.erase(key);
            deps_.policy_queue.add(key);
            enqueue_namespace(ns);
          }};
}

void Reconciler::deployments_synced() {
  for (const auto& [ns, keys] : policies_by_namespace_) {
    for (const auto& key : keys) deps_.policy_queue.add(key);
  }
}

bool Reconciler::Reported::contains(const std::string& event) const {
  return std::ranges::find(hashes, std::hash<std::string>{}(event)) != hashes.end();
}

bool Reconciler::Reported::add(std::string event) {
  if (contains(event)) return false;
  hashes.push_back(std::hash<std::string>{}(event));
  if (blocks_writes(event)) blocking.push_back(std::move(event));
  return true;
}

void Reconciler::seed_reported(std::multimap<std::string, std::string> reported) {
  for (auto& [key, event] : reported) deployments_[key].reported.add(std::move(event));
}

void Reconciler::enqueue_namespace(const std::string& ns) {
  for (const auto& [key, tracked] : namespace_entries(deployments_, ns)) {
    if (tracked.cached) deps_.deployment_queue.add(key);
  }
}

void Reconciler::remember(const std::string& key, std::optional<Record> record) {
  auto it = record ? deployments_.try_emplace(key).first : deployments_.find(key);
  const std::optional<Record> old =
      it == deployments_.end() ? std::nullopt : std::exchange(it->second.record, record);
  std::string old_policy = old ? old->policy_key : std::string();
  const bool same = old && record && old->policy_key == record->policy_key &&
                    old->state.compliant == record->state.compliant &&
                    old->state.pending == record->state.pending &&
                    old->state.violating == record->state.violating;
  if (it != deployments_.end()) forget_if_empty(it);
  if (same) return;
  // The policies' counts changed: their status follows.
  if (!old_policy.empty()) deps_.policy_queue.add(old_policy);
  if (record && !record->policy_key.empty() && record->policy_key != old_policy) {
    deps_.policy_queue.add(record->policy_key);
  }
  // A Deployment without a policy still counts for "every Deployment of the
  // namespace has been seen" (see count()).
  if (record && record->policy_key.empty() && old_policy.empty()) {
    auto ps = policies_by_namespace_.find(split_key(key).first);
    if (ps != policies_by_namespace_.end()) {
      for (const auto& p : ps->second) deps_.policy_queue.add(p);
    }
  }
}

// Reports the events of a Deployment's current state that were not reported
// for it already; forgets the ones that no longer apply, so they are
// reported again if they come back.
void Reconciler::report(const std::string& key, std::vector<kube::EventRecord> events) {
  Reported now;
  auto found = deployments_.find(key);
  for (auto& e : events) {
    std::string k = event_key(e);
    const bool before = found != deployments_.end() && found->second.reported.contains(k);
    if (!now.add(std::move(k)) || before) continue;
    deps_.metrics.count_event(to_string(e.type), e.reason);
    deps_.events.record(std::move(e));
  }
  if (found == deployments_.end()) {
    if (now.hashes.empty()) return;
    found = deployments_.try_emplace(key).first;
  }
  found->second.reported = std::move(now);
  forget_if_empty(found);
}

boost::asio::awaitable<bool> Reconciler::reconcile_deployment(std::string key) {
  const CachedDeployment* cached = deps_.deployments.get(key);
  if (!cached) {
    // Deleted, or no longer opted in: left as it is, no longer managed.
    remember(key, std::nullopt);
    if (auto it = deployments_.find(key); it != deployments_.end()) {
      it->second.reported = {};
      forget_if_empty(it);
    }
    co_return true;
  }
  // Copies: the cache may change while we await.
  const std::string uid = cached->uid;
  const auto deployment = cached->project();
  Outcome outcome = co_await decide(deployment);
  if (outcome.wait) co_return true;
  const auto [ns, name] = split_key(key);
  const kube::ObjectRef ref = deployment_ref(ns, name, uid);
  for (auto& e : outcome.events) e.regarding = ref;
  report(key, std::move(outcome.events));
  remember(key, Record{outcome.policy_key, outcome.state});
  co_return true;
}

boost::asio::awaitable<Reconciler::Outcome> Reconciler::decide(
    const std::expected<budget::Deployment, budget::FieldErrors>& deployment) {
  Outcome out;
  const kube::ObjectRef none{};
  if (!deployment) {
    std::string note = "gracekeeper cannot read this Deployment; left unchanged:";
    for (const auto& e : deployment.error()) note += " " + e.format() + ";";
    out.events.push_back({none, kube::EventType::Warning, "InvalidDeployment", "Check", note});
    co_return out;
  }
  const budget::Deployment& d = *deployment;

  // The governing policy.
  std::vector<const CachedPolicy*> policies;
  std::vector<budget::PolicyCandidate> candidates;
  if (auto ps = policies_by_namespace_.find(d.namespace_); ps != policies_by_namespace_.end()) {
    for (const auto& pkey : ps->second) {
      const CachedPolicy* p = deps_.policies.get(pkey);
      if (!p || !p->spec) continue;  // an invalid policy governs nothing; its status says why
      policies.push_back(p);
      candidates.push_back({p->name, &p->spec->selector, ""});
    }
  }
  auto chosen = budget::select_policy(d, candidates, "in namespace " + d.namespace_);
  if (!chosen) {
    out.events.push_back(finding_event(none, chosen.error()));
    co_return out;
  }
  // A copy: the informer may replace its cache entry while this coroutine waits.
  const CachedPolicy policy = *policies[*chosen];
  out.policy_key = d.namespace_ + "/" + policy.name;
  auto runtime = policy_runtime_.find(out.policy_key);
  if (runtime == policy_runtime_.end() || !runtime->second.propagation) {
    // Not measured yet: the policy's first measurement enqueues this key again.
    deps_.policy_queue.add(out.policy_key);
    out.wait = true;
    co_return out;
  }
  const PropagationState& propagation = *runtime->second.propagation;

  budget::Context ctx;
  ctx.policy = &*policy.spec;
  ctx.policy_name = policy.name;
  ctx.propagation_seconds = propagation.seconds;
  // Never shorten a wait because the source went away (API.md): while the
  // metrics are unavailable, the figure this Deployment was tuned to holds.
  if (!propagation.available && d.applied) {
    ctx.propagation_seconds = std::max(ctx.propagation_seconds, d.applied->propagation_seconds);
  }
  ctx.capabilities = options_.capabilities;
  ctx.now = Clock::now();
  budget::Plan plan = budget::plan(d, ctx);

  if (!plan.invalid.empty()) {
    for (const auto& e : plan.invalid) {
      out.events.push_back({none, kube::EventType::Warning, "InvalidAnnotation", "Check",
                            e.format() + "; left unchanged"});
    }
    out.state.violating = has_error(plan.findings);
    co_return out;
  }

  out.state.violating = has_error(plan.findings);
  out.state.compliant = !out.state.violating && !plan.budget_broken;
  const bool dry_run = policy.spec->mode == budget::Mode::DryRun;
  if (plan.changed() && !dry_run) {
    if (co_await write(d, plan, policy, out)) {
      // Findings are reported on the state that stays: the next reconcile
      // sees the patched object.
      out.state = DeploymentState{true, false, false};
      co_return out;
    }
  } else if (plan.changed()) {
    out.state.pending = true;
    out.events.push_back({none, kube::EventType::Normal, "DryRun", "Tune",
                          "DryRun: would set " + describe_changes(plan)});
  }
  if (plan.deferred) out.state.pending = true;
  for (const auto& f : plan.findings) out.events.push_back(finding_event(none, f));
  co_return out;
}

// Applies the plan; true when the Deployment was patched. A field conflict
// is reported in `out` (and false returned).
boost::asio::awaitable<bool> Reconciler::write(const budget::Deployment& d,
                                               const budget::Plan& plan, const CachedPolicy& policy,
                                               Outcome& out) {
  const std::string key = budget::key(d);
  const auto now = Clock::now();
  nlohmann::json configuration(budget::apply_configuration(d, plan, policy.name, now));
  // This change already failed on a field conflict or was rejected (its
  // FieldConflict or ApplyRejected event names it, also when reported before
  // a restart): wait for the Deployment or the plan to change instead of
  // repeating the write.
  const std::string wanted = "(wanted " + describe_changes(plan) + ")";
  if (auto it = deployments_.find(key); it != deployments_.end()) {
    for (const auto& e : it->second.reported.blocking) {
      if (!e.ends_with(wanted)) continue;
      const auto separator = e.find('\x1f');
      out.state.pending = true;
      out.events.push_back(
          {{}, kube::EventType::Warning, e.substr(0, separator), "Tune", e.substr(separator + 1)});
      co_return false;
    }
  }

  // Copied: the cache may change while this coroutine waits.
  const CachedDeployment* cached = deps_.deployments.get(key);
  const std::vector<std::string> appliers = cached ? cached->appliers : std::vector<std::string>{};
  kube::ApplyOptions options;
  options.field_manager = kFieldManager;
  // Without another applier every conflict is with Update writers, which
  // may_force takes over anyway: force at once, one request instead of three.
  options.force =
      policy.spec->pre_stop.existing == budget::ExistingHook::Replace || appliers.empty();
  options.read_object = false;  // the informer's watch brings the patched Deployment
  std::expected<nlohmann::json, kube::ApiError> result;
  if (changes_handler(d, plan)) {
    co_await replace_hooks(d, configuration);
    result = nlohmann::json::object();
  } else {
    result = co_await deps_.client.apply(kube::resources::deployments, d.namespace_, d.name,
                                         configuration, options);
  }
  if (!result && result.error().reason == kube::ApiError::Reason::Conflict &&
      !result.error().causes.empty() && !options.force) {
    std::string owners;
    if (may_force(result.error(), appliers, owners)) {
      options.force = true;
      result = co_await deps_.client.apply(kube::resources::deployments, d.namespace_, d.name,
                                           configuration, options);
    } else {
      out.state.pending = true;
      out.events.push_back(
          {{},
           kube::EventType::Warning,
           "FieldConflict",
           "Tune",
           fmt::format("not changed: {} owned by {}; gracekeeper takes fields over from another "
                       "applier only with spec.preStop.existing: Replace {}",
                       result.error().causes.size() == 1 ? "a field is" : "fields are", owners,
                       wanted)});
      log::warn("field conflict", {{"deployment", key}, {"owners", owners}});
      co_return false;
    }
  }
  if (!result && result.error().reason == kube::ApiError::Reason::Invalid) {
    // The server refuses this configuration; sending it again cannot help
    // until the Deployment or the plan changes.
    out.state.pending = true;
    out.events.push_back({{},
                          kube::EventType::Warning,
                          "ApplyRejected",
                          "Tune",
                          "not changed: the API server rejected the change: " +
                              result.error().message + " " + wanted});
    log::warn("apply rejected", {{"deployment", key}, {"error", result.error().format()}});
    co_return false;
  }
  if (!result) {
    log::error("apply failed", {{"deployment", key}, {"error", result.error().format()}});
    throw std::runtime_error("apply " + key + ": " + result.error().format());
  }
  deps_.metrics.count_patch(d.namespace_);
  log::info("tuned",
            {{"deployment", key}, {"policy", policy.name}, {"changes", describe_changes(plan)}});
  kube::EventRecord tuned{
      {},
      kube::EventType::Normal,
      "Tuned",
      "Tune",
      describe_changes(plan) + fmt::format(" (policy {}, propagation {}s)", policy.name,
                                           plan.budget.propagation_seconds)};
  // Tuned is reported every time: it is about a write, not a state.
  deps_.metrics.count_event("Normal", "Tuned");
  tuned.regarding =
      deployment_ref(d.namespace_, d.name,
                     deps_.deployments.get(key) ? deps_.deployments.get(key)->uid : std::string());
  deps_.events.record(std::move(tuned));
  co_return true;
}

// See takeover.h: the hooks are swapped with a JSON patch, in one write.
boost::asio::awaitable<void> Reconciler::replace_hooks(const budget::Deployment& d,
                                                       const nlohmann::json& configuration) {
  const std::string subresource;
  auto current =
      co_await deps_.client.get(kube::resources::deployments, d.namespace_, d.name, subresource);
  if (!current) throw std::runtime_error("get " + budget::key(d) + ": " + current.error().format());
  nlohmann::json patch = replacement_patch(*current, configuration);
  kube::WriteOptions options;
  options.field_manager = kFieldManager;
  options.read_object = false;  // the informer's watch brings the patched Deployment
  auto result = co_await deps_.client.json_patch(kube::resources::deployments, d.namespace_, d.name,
                                                 std::move(patch), options);
  if (!result) {
    throw std::runtime_error("replacing the preStop hooks of " + budget::key(d) + ": " +
                             result.error().format());
  }
}

DeploymentCounts Reconciler::count(const std::string& policy_key, bool& complete) const {
  DeploymentCounts c;
  // Until the first list of Deployments is whole, a namespace may have more.
  complete = deps_.deployments.has_synced();
  for (const auto& [key, tracked] : namespace_entries(deployments_, split_key(policy_key).first)) {
    if (!tracked.cached) continue;
    if (!tracked.record) {
      complete = false;
      continue;
    }
    if (tracked.record->policy_key != policy_key) continue;
    const DeploymentState& s = tracked.record->state;
    ++c.managed;
    c.compliant += s.compliant;
    c.pending += s.pending;
    c.violations += s.violating;
    if (!s.compliant) c.not_compliant.push_back(split_key(key).second);
  }
  return c;
}

boost::asio::awaitable<void> Reconciler::measure(const std::string& key, const CachedPolicy& policy,
                                                 PolicyRuntime& rt) {
  const auto now = Clock::now();
  propagation::Measurement m =
      co_await propagation::measure(*policy.spec, deps_.prometheus, rt.last_good, now);
  rt.last_good = m.last_good;
  PropagationState next;
  next.seconds = m.seconds;
  // API.md: the source reads Static when a failing source fell back to staticSeconds.
  const bool static_fallback =
      m.fallback && (!m.last_good || now - m.last_good->sampled_at > std::chrono::hours(1));
  next.source = static_fallback ? "Static" : m.source;
  next.sampled_at = m.sampled_at;
  next.message = m.message;
  next.available = m.metrics_available;
  next.reason = m.reason;
  const bool moved = !rt.propagation || rt.propagation->seconds != next.seconds ||
                     rt.propagation->available != next.available;
  if (!m.metrics_available) {
    log::warn("propagation source unavailable",
              {{"policy", key}, {"reason", m.reason}, {"message", m.message}});
  } else if (moved) {
    log::info(
        "propagation measured",
        {{"policy", key}, {"source", next.source}, {"seconds", fmt::format("{}", next.seconds)}});
  }
  rt.propagation = std::move(next);
  rt.measured_generation = policy.generation;
  rt.next_measurement = std::chrono::steady_clock::now() + options_.propagation_refresh;
  deps_.metrics.set_propagation(policy.namespace_, policy.name, rt.propagation->source,
                                rt.propagation->seconds);
  if (moved) enqueue_namespace(policy.namespace_);
}

boost::asio::awaitable<bool> Reconciler::reconcile_policy(std::string key) {
  const CachedPolicy* cached = deps_.policies.get(key);
  const auto [ns, name] = split_key(key);
  if (!cached) {
    policy_runtime_.erase(key);
    deps_.metrics.forget_policy(ns, name);
    co_return true;
  }
  const CachedPolicy policy = *cached;
  StatusInput in;
  in.generation = policy.generation;
  in.now = Clock::now();
  if (!policy.spec) {
    std::string message;
    for (const auto& e : policy.spec.error()) message += (message.empty() ? "" : "; ") + e.format();
    in.invalid_spec = message;
    policy_runtime_.erase(key);
    co_return co_await write_status(policy, desired_status(in, policy.status));
  }
  PolicyRuntime& rt = policy_runtime_[key];
  if (!rt.propagation || rt.measured_generation != policy.generation ||
      std::chrono::steady_clock::now() >= *rt.next_measurement) {
    co_await measure(key, policy, rt);
  }
  // Re-armed on every run, not only after measuring: a failed run is retried
  // with a short backoff, and the queue keeps only the earliest time per key,
  // so the refresh must be scheduled again by whichever run comes next.
  deps_.policy_queue.add_after(key,
                               std::max(std::chrono::steady_clock::duration::zero(),
                                        *rt.next_measurement - std::chrono::steady_clock::now()));
  in.quantile = policy.spec->propagation.quantile;
  in.propagation = rt.propagation;
  in.recommended =
      budget::compute_budget(*policy.spec, rt.propagation->seconds, policy.spec->drain_seconds);
  bool complete = false;
  DeploymentCounts counts = count(key, complete);
  if (complete) {
    rt.counts_awaited_since.reset();
    deps_.metrics.set_deployments(ns, name, counts.managed, counts.compliant, counts.violations);
    in.deployments = std::move(counts);
  } else if (!policy.status.is_object() || !policy.status.contains("deployments")) {
    // A policy's first status waits for its counts, so a cold start writes
    // each status once, not twice (once without counts, once with). For
    // kCountsWait, and up to kCountsBusyWait while Deployments are still
    // queued (the counts are on their way: 10,000 take about 30 s on two
    // cores). Not longer: a Deployment whose reconcile keeps failing must not
    // keep the propagation figure out of the status.
    const auto now = std::chrono::steady_clock::now();
    if (!rt.counts_awaited_since) rt.counts_awaited_since = now;
    const auto waited = now - *rt.counts_awaited_since;
    const auto& queue = deps_.deployment_queue.core();
    const bool queued = queue.len() + queue.processing() > 0;
    if (waited < kCountsWait) {
      deps_.policy_queue.add_after(key, kCountsWait - waited);
      co_return true;
    }
    if (queued && waited < kCountsBusyWait) {
      deps_.policy_queue.add_after(key, std::chrono::seconds(1));
      co_return true;
    }
  }
  co_return co_await write_status(policy, desired_status(in, policy.status));
}

// PUT .../status with the resourceVersion the status was computed from; a
// Conflict (someone wrote in between) is retried with the next cache state.
boost::asio::awaitable<bool> Reconciler::write_status(const CachedPolicy& policy,
                                                      nlohmann::json status) {
  if (status == policy.status) co_return true;
  nlohmann::json object{{"apiVersion", "gracekeeper.dev/v1alpha1"},
                        {"kind", "ShutdownPolicy"},
                        {"metadata",
                         {{"name", policy.name},
                          {"namespace", policy.namespace_},
                          {"resourceVersion", policy.resource_version}}},
                        {"status", std::move(status)}};
  kube::WriteOptions options;
  options.field_manager = kFieldManager;
  options.read_object = false;  // the informer's watch brings the new status
  auto result = co_await deps_.client.update_status(shutdown_policies, policy.namespace_,
                                                    policy.name, std::move(object), options);
  if (result) co_return true;
  if (result.error().reason == kube::ApiError::Reason::NotFound) co_return true;
  log::info("status update retried", {{"policy", policy.namespace_ + "/" + policy.name},
                                      {"error", result.error().format()}});
  co_return false;
}

}  // namespace gracekeeper::controller
