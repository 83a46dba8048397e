#include "gracekeeper/audit/termination_audit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gracekeeper/budget/engine.h"  // annotated_containers
#include "gracekeeper/budget/mesh.h"
#include "gracekeeper/core/json.h"
#include "gracekeeper/core/time.h"
#include "gracekeeper/kube/informer.h"  // object_key
#include "gracekeeper/log/log.h"
#include "gracekeeper/propagation/observed.h"

namespace gracekeeper::controller {
namespace {

std::int64_t count_member(const nlohmann::json& object, const char* key) {
  return std::max<std::int64_t>(core::int_member(object, key), 0);
}

std::optional<TimePoint> later(std::optional<TimePoint> a, std::optional<TimePoint> b) {
  if (!a) return b;
  if (!b) return a;
  return std::max(*a, *b);
}

TerminationCounts add(const TerminationCounts& a, const TerminationCounts& b) {
  TerminationCounts out;
  out.observed = a.observed + b.observed;
  out.late = a.late + b.late;
  out.last_late_at = later(a.last_late_at, b.last_late_at);
  out.drained = a.drained + b.drained;
  out.cut_short = a.cut_short + b.cut_short;
  out.last_cut_short_at = later(a.last_cut_short_at, b.last_cut_short_at);
  return out;
}

std::string seconds(double s) {
  return fmt::format("{:.2f}s", s);
}

}  // namespace

TerminationCounts read_terminations(const nlohmann::json& status) {
  TerminationCounts out;
  if (!status.is_object()) return out;
  auto it = status.find("terminations");
  if (it == status.end() || !it->is_object()) return out;
  out.observed = count_member(*it, "observed");
  out.late = count_member(*it, "late");
  if (auto at = it->find("lastLateAt"); at != it->end() && at->is_string()) {
    out.last_late_at = core::parse_rfc3339(at->get<std::string>());
  }
  out.drained = count_member(*it, "drained");
  out.cut_short = count_member(*it, "cutShort");
  if (auto at = it->find("lastCutShortAt"); at != it->end() && at->is_string()) {
    out.last_cut_short_at = core::parse_rfc3339(at->get<std::string>());
  }
  return out;
}

TerminationBook::Entry& TerminationBook::entry(const std::string& policy_key) {
  auto it = entries_.find(policy_key);
  if (it == entries_.end()) it = entries_.emplace(policy_key, Entry{}).first;
  return it->second;
}

void TerminationBook::count(const std::string& policy_key, bool late, TimePoint at) {
  TerminationCounts& counted = entry(policy_key).counted;
  ++counted.observed;
  if (late) {
    ++counted.late;
    counted.last_late_at = at;
  }
}

void TerminationBook::count_drain(const std::string& policy_key, bool cut_short, TimePoint at) {
  TerminationCounts& counted = entry(policy_key).counted;
  ++counted.drained;
  if (cut_short) {
    ++counted.cut_short;
    counted.last_cut_short_at = at;
  }
}

TerminationCounts TerminationBook::totals(const std::string& policy_key,
                                          const nlohmann::json& status) {
  Entry& e = entry(policy_key);
  if (!e.base) e.base = read_terminations(status);
  return add(*e.base, e.counted);
}

void TerminationBook::erase(const std::string& policy_key) {
  if (auto it = entries_.find(policy_key); it != entries_.end()) entries_.erase(it);
}

std::optional<std::int64_t> pod_wait(const budget::Deployment& d) {
  // The containers traffic reaches while the wait runs: the app containers
  // gracekeeper.dev/containers names (read as the budget engine reads it),
  // else every app container that declares a port, else every app
  // container. Never a native sidecar: it has no wait of its own to keep
  // the pod routed. Never a mesh proxy: its stay is its mesh's.
  std::vector<const budget::Container*> targets;
  for (std::size_t i : budget::annotated_containers(d).value_or(std::vector<std::size_t>{})) {
    targets.push_back(&d.containers[i]);
  }
  // No annotation, or one that names no app container (invalid: the
  // Deployment is reported and left as it is): the default.
  if (targets.empty()) {
    for (const auto& c : d.containers) {
      if (!c.sidecar && c.has_ports && !budget::proxy_mesh(c.name)) targets.push_back(&c);
    }
  }
  if (targets.empty()) {
    for (const auto& c : d.containers) {
      if (!c.sidecar && !budget::proxy_mesh(c.name)) targets.push_back(&c);
    }
  }
  std::optional<std::int64_t> wait;
  for (const budget::Container* c : targets) {
    std::int64_t w = 0;
    if (c->pre_stop.kind != budget::PreStopHook::Kind::None) {
      if (!c->pre_stop.seconds) return std::nullopt;  // a hook of unknown length
      w = *c->pre_stop.seconds;
    }
    wait = std::min(wait.value_or(w), w);
  }
  return wait;
}

double TerminationAudit::implausible_above(const std::string& ns) const {
  std::optional<double> bound;
  deps_.policies.in_namespace(ns, [&](const std::string&, const CachedPolicy& p) {
    if (!p.spec) return;
    bound = std::max(bound.value_or(0), propagation::implausible_above(*p.spec));
  });
  return bound.value_or(propagation::implausible_above(budget::PolicySpec{}));
}

std::optional<TerminationAudit::Owner> TerminationAudit::owner_of(const std::string& ns,
                                                                  const std::string& pod) const {
  if (const auto owner = pod_owner(pod)) {
    std::string key = ns + "/" + owner->deployment;
    if (auto cached = deps_.deployments.get(key)) {
      return Owner{std::move(key), owner->hash, false, std::move(cached)};
    }
  }
  if (!deps_.statefulsets) return std::nullopt;
  // A StatefulSet's pod: its name and an ordinal.
  const auto dash = pod.rfind('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == pod.size() ||
      pod.size() - dash - 1 > 10 ||
      !std::ranges::all_of(pod.substr(dash + 1), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  std::string key = ns + "/" + pod.substr(0, dash);
  auto cached = deps_.statefulsets->get(key);
  if (!cached) return std::nullopt;
  return Owner{std::move(key), std::string(), true, std::move(cached)};
}

std::optional<std::optional<std::int64_t>> TerminationAudit::remembered_wait(
    const std::string& deployment_key, const std::string& hash) const {
  auto it = waits_.find(pod_id(deployment_key));
  if (it == waits_.end()) return std::nullopt;
  const std::uint64_t h = pod_id(hash);
  for (const RolloutWait& r : it->second) {
    if (r.hash != h) continue;
    // Known; its wait may be of unknown length.
    return std::optional<std::optional<std::int64_t>>(
        r.wait < 0 ? std::nullopt : std::optional<std::int64_t>(r.wait));
  }
  return std::nullopt;
}

void TerminationAudit::remember_wait(const std::string& deployment_key, const std::string& hash,
                                     const CachedDeployment& cached) {
  auto& rollouts = waits_[pod_id(deployment_key)];
  const std::uint64_t h = pod_id(hash);
  if (std::ranges::any_of(rollouts, [&](const RolloutWait& r) { return r.hash == h; })) return;
  const auto deployment = cached.project();
  const auto wait = deployment ? pod_wait(*deployment) : std::nullopt;
  rollouts.push_back({h, wait.value_or(-1)});
  if (rollouts.size() > kRolloutsKept) rollouts.erase(rollouts.begin());
}

// A missing trigger time is common (a deletion's first change has none): one
// info line a minute with the count. A garbage one is a bug somewhere: a
// warning each time.
void TerminationAudit::report_drop(const std::string& slice, std::size_t endpoints,
                                   const propagation::LagError& error, TimePoint now) {
  if (error.kind == propagation::LagError::Kind::Garbage) {
    log::warn("EndpointSlice change with a garbage trigger time: no propagation sample",
              {{"endpointSlice", slice},
               {"endpoints", std::to_string(endpoints)},
               {"error", error.message}});
    return;
  }
  missing_unlogged_ += endpoints;
  if (now - last_missing_log_ < std::chrono::minutes(1)) return;
  log::info("EndpointSlice changes without a trigger time: no propagation sample",
            {{"endpointSlice", slice},
             {"endpoints", std::to_string(missing_unlogged_)},
             {"error", error.message}});
  last_missing_log_ = now;
  missing_unlogged_ = 0;
}

std::optional<CachedSlice> TerminationAudit::observe(const nlohmann::json& object,
                                                     const CachedSlice* before, TimePoint seen) {
  SliceChange change = read_slice(object);
  std::erase_if(change.endpoints,
                [&](const SeenEndpoint& e) { return !owner_of(change.ns, e.pod); });
  for (const SeenEndpoint& e : change.endpoints) {
    if (e.terminating) continue;  // a rollout is remembered from its serving pods
    const auto owner = owner_of(change.ns, e.pod);
    if (!owner->stateful) {
      remember_wait(owner->key, owner->hash, *owner->cached);
    } else if (auto [it, added] = stateful_waits_.try_emplace(pod_id(change.ns + "/" + e.pod), -1);
               added) {
      const auto workload = owner->cached->project();
      const auto wait = workload ? pod_wait(*workload) : std::nullopt;
      it->second = wait.value_or(-1);
    }
  }
  const std::vector<Turned> now_out = turned(before, change.endpoints);
  if (!now_out.empty()) {
    auto& counters = deps_.samples.counters();
    std::optional<double> lag;
    auto measured = propagation::lag(change.trigger ? &*change.trigger : nullptr, seen);
    if (measured) {
      lag = measured->seconds;
      if (measured->clamped) {
        counters.clamped += now_out.size();
        deps_.metrics.count_propagation_anomaly("clamped", now_out.size());
      }
      const double bound = implausible_above(change.ns);
      for (std::size_t i = 0; i < now_out.size(); ++i) {
        if (!deps_.samples.add(change.ns, seen, *lag, bound)) {
          deps_.metrics.count_propagation_anomaly("implausible", 1);
        }
        deps_.metrics.observe_endpoint_propagation(change.ns, *lag);
      }
      if (*lag > bound) {
        log::warn("implausible EndpointSlice propagation sample: dropped from the figure",
                  {{"endpointSlice", kube::object_key(object)},
                   {"seconds", seconds(*lag)},
                   {"above", seconds(bound)}});
      }
    } else {
      const bool missing = measured.error().kind == propagation::LagError::Kind::Missing;
      (missing ? counters.missing : counters.garbage) += now_out.size();
      deps_.metrics.count_propagation_anomaly(missing ? "missing" : "garbage", now_out.size());
      report_drop(kube::object_key(object), now_out.size(), measured.error(), seen);
    }
    for (const Turned& t : now_out) {
      if (!t.began_terminating) continue;
      if (auto owner = owner_of(change.ns, t.pod)) {
        note_termination(change.ns, t.pod, *owner, lag, seen);
      }
    }
  }
  if (change.endpoints.empty()) return std::nullopt;
  return cache_slice(change.endpoints);
}

// What only the moment of the change knows: the sample, the time, and the
// wait of the pod's rollout (a StatefulSet's pod comes back under its name
// with the new template; a Deployment's rollout is remembered by hash).
void TerminationAudit::note_termination(const std::string& ns, const std::string& pod,
                                        const Owner& owner, std::optional<double> lag,
                                        TimePoint seen) {
  const std::optional<std::int64_t> stateful_wait =
      owner.stateful ? take_stateful_wait(ns + "/" + pod) : std::nullopt;
  if (deps_.active && !deps_.active()) return;  // a standby takes samples only
  std::string key = ns + "/" + pod;
  pending_.insert_or_assign(key, Termination{owner, wait_of(owner, stateful_wait), lag, seen});
  if (deps_.enqueue) deps_.enqueue(key);
}

namespace {
constexpr std::string_view kDrainKeyPrefix = "drain/";
}  // namespace

std::optional<CachedPod> TerminationAudit::observe_pod(const nlohmann::json& object,
                                                       const CachedPod* before) {
  const auto* metadata = core::member(object, "metadata");
  if (metadata == nullptr) return std::nullopt;
  const std::string ns = core::string_member(*metadata, "namespace");
  const std::string pod = core::string_member(*metadata, "name");
  const auto owner = owner_of(ns, pod);
  if (!owner) return std::nullopt;
  if (!pod_terminating(*metadata)) {
    see_serving_pod(object, *metadata, *owner);
    return std::nullopt;
  }
  if (before != nullptr && before->measured) return *before;
  const auto measured = measure_drain(object);
  if (!measured) {
    log::info("cannot measure the drain of a terminating pod",
              {{"pod", ns + "/" + pod}, {"error", measured.error()}});
    return CachedPod{true};
  }
  if (!*measured) return CachedPod{false};  // an app container still runs
  const MeasuredDrain& m = **measured;
  if (deps_.drains) deps_.drains->add(owner->book_key(), m.sample);
  log::info("measured a pod's drain", {{"pod", ns + "/" + pod},
                                       {"container", m.container},
                                       {"drain", seconds(m.sample.seconds)},
                                       {"cutShort", m.sample.cut_short ? "true" : "false"}});
  if (deps_.workload_seen) deps_.workload_seen(owner->stateful, owner->key);
  if (deps_.active && !deps_.active()) return CachedPod{true};  // a standby takes samples only
  std::string key = ns + "/" + pod;
  pending_drains_.insert_or_assign(key, Drained{*owner, m});
  if (deps_.enqueue) deps_.enqueue(std::string(kDrainKeyPrefix) + key);
  return CachedPod{true};
}

std::string TerminationAudit::template_of(const nlohmann::json& metadata, const Owner& owner) {
  if (!owner.stateful) return owner.hash;
  const auto* labels = core::member(metadata, "labels");
  return labels != nullptr ? core::string_member(*labels, "controller-revision-hash")
                           : std::string();
}

bool TerminationAudit::wants_pod(const nlohmann::json& metadata) const {
  if (pod_terminating(metadata)) return true;
  if (deps_.pods == nullptr) return false;
  const auto owner =
      owner_of(core::string_member(metadata, "namespace"), core::string_member(metadata, "name"));
  if (!owner) return false;
  const std::string hash = template_of(metadata, *owner);
  return !hash.empty() && !deps_.pods->has(owner->book_key(), hash);
}

// A serving pod of a template not seen yet: kept in the PodBook, read as
// the budget engine reads a Pod, without its labels and annotations (the
// decision judges it by the workload's).
void TerminationAudit::see_serving_pod(const nlohmann::json& object, const nlohmann::json& metadata,
                                       const Owner& owner) {
  if (deps_.pods == nullptr) return;
  const std::string hash = template_of(metadata, owner);
  const std::string key = owner.book_key();
  if (hash.empty() || deps_.pods->has(key, hash)) return;
  auto read = read_pod(object);
  if (!read) return;  // not a pod the kubelet would run either
  SeenPod seen{
      core::string_member(metadata, "name"), hash,
      core::parse_rfc3339(core::string_member(metadata, "creationTimestamp")).value_or(TimePoint{}),
      std::move(*read)};
  seen.pod.labels.clear();
  seen.pod.annotations.clear();
  seen.pod.pod_labels.clear();
  if (deps_.pods->offer(key, std::move(seen)) && deps_.workload_seen) {
    deps_.workload_seen(owner.stateful, owner.key);
  }
}

ReconcileResult TerminationAudit::reconcile_drain(const std::string& pod_key) {
  auto it = pending_drains_.find(pod_key);
  if (it == pending_drains_.end()) return Result::done();
  const Drained d = std::move(it->second);
  pending_drains_.erase(it);
  if (deps_.active && !deps_.active()) return Result::done();
  const DeploymentReconciler& controller =
      d.owner.stateful ? *deps_.statefulset_controller : deps_.deployment_controller;
  const DeploymentDecision decision = controller.decide(d.owner.key, *d.owner.cached);
  if (decision.policy_key.empty()) return Result::done();  // not governed
  const auto [ns, pod] = split_key(pod_key);
  const auto policy_name = split_key(decision.policy_key).second;
  deps_.metrics.observe_drain(ns, policy_name, d.drain.sample.seconds, d.drain.sample.cut_short);
  deps_.terminations.count_drain(decision.policy_key, d.drain.sample.cut_short, d.drain.sample.at);
  deps_.policy_changed(decision.policy_key);
  if (d.drain.sample.cut_short) {
    const auto policy = deps_.policies.get(decision.policy_key);
    const bool observed =
        policy && policy->spec && policy->spec->drain.source == budget::DrainSource::Observed;
    warn_cut_short(ns, pod, d.owner, d.drain,
                   fmt::format("policy {}: {}", policy_name,
                               observed ? "drain.source Observed raises the grace to cover it"
                                        : "raise drainSeconds, or set drain.source: Observed"));
  }
  return Result::done();
}

ReconcileResult TerminationAudit::reconcile(const std::string& key) {
  if (key.starts_with(kDrainKeyPrefix)) return reconcile_drain(key.substr(kDrainKeyPrefix.size()));
  auto it = pending_.find(key);
  if (it == pending_.end()) return Result::done();
  const Termination t = std::move(it->second);
  pending_.erase(it);
  if (deps_.active && !deps_.active()) return Result::done();
  const auto [ns, pod] = split_key(key);
  const DeploymentReconciler& controller =
      t.owner.stateful ? *deps_.statefulset_controller : deps_.deployment_controller;
  const DeploymentDecision decision = controller.decide(t.owner.key, *t.owner.cached);
  if (decision.policy_key.empty()) return Result::done();  // not governed: nothing to audit
  const auto policy = deps_.policies.get(decision.policy_key);
  if (!policy || !policy->spec) return Result::done();
  const Needed needed =
      needed_of(ns, decision.policy_key, policy->spec->propagation, t.lag, t.seen);
  const auto [policy_ns, policy_name] = split_key(decision.policy_key);
  if (!t.wait || !needed.seconds) {
    deps_.metrics.count_termination(ns, policy_name, "unmeasured");
    return Result::done();
  }
  const double slack = static_cast<double>(*t.wait) - *needed.seconds;
  const bool late = slack < 0;
  deps_.metrics.observe_termination_slack(ns, policy_name, slack);
  deps_.metrics.count_termination(ns, policy_name, late ? "late" : "covered");
  deps_.terminations.count(decision.policy_key, late, t.seen);
  deps_.policy_changed(decision.policy_key);
  if (late) warn_late(ns, pod, t.owner, *t.wait, needed.why, slack, policy_name);
  return Result::done();
}

std::optional<std::int64_t> TerminationAudit::take_stateful_wait(const std::string& pod_key) {
  auto it = stateful_waits_.find(pod_id(pod_key));
  if (it == stateful_waits_.end()) return std::nullopt;
  const std::int64_t wait = it->second;
  stateful_waits_.erase(it);
  return wait;
}

// The preStop wait the terminating pod had, when known.
std::optional<std::int64_t> TerminationAudit::wait_of(
    const Owner& owner, std::optional<std::int64_t> stateful_wait) const {
  if (stateful_wait) {
    if (*stateful_wait >= 0) return *stateful_wait;
    return std::nullopt;
  }
  if (auto remembered = owner.stateful ? std::nullopt : remembered_wait(owner.key, owner.hash)) {
    return *remembered;
  }
  // First seen terminating (e.g. since a restart): the template's now.
  const auto deployment = owner.cached->project();
  if (deployment) return pod_wait(*deployment);
  return std::nullopt;
}

// What the data plane needs: the observed lag plus the declared consumer
// allowance, and with Prometheus the current per-consumer figure.
TerminationAudit::Needed TerminationAudit::needed_of(const std::string& ns,
                                                     const std::string& policy_key,
                                                     const budget::PolicySpec::Propagation& spec,
                                                     std::optional<double> lag,
                                                     TimePoint seen) const {
  Needed needed;
  std::string seen_as = "propagation seen";
  if (!lag) {
    // A deletion's first change usually has no trigger time (the pod's Ready
    // condition has not changed yet): the namespace's samples stand for it.
    const auto w = deps_.samples.window(ns, std::chrono::seconds(spec.observed.window_seconds),
                                        spec.quantile, seen);
    lag = w.quantile;
    seen_as =
        fmt::format("the namespace's observed quantile {} of {} sample(s)", spec.quantile, w.count);
  }
  if (lag) {
    // The slowest consumer's allowance: kube-proxy's consumerSyncSeconds, or
    // a declared consumer's (an ingress that reads the slices itself).
    const budget::DeclaredConsumer slowest = spec.observed.slowest_consumer();
    needed.seconds = *lag + slowest.sync_seconds;
    needed.why = spec.observed.consumers.empty()
                     ? fmt::format("{} {} + consumerSyncSeconds {}", seen_as, seconds(*lag),
                                   seconds(slowest.sync_seconds))
                     : fmt::format("{} {} + {}'s syncSeconds {}", seen_as, seconds(*lag),
                                   slowest.name, seconds(slowest.sync_seconds));
  }
  const PropagationState* figure = deps_.propagation.state(policy_key);
  if (spec.source == budget::PropagationSource::Prometheus && figure && figure->available &&
      figure->seconds > needed.seconds.value_or(-1)) {
    needed.seconds = figure->seconds;
    needed.why = fmt::format("the Prometheus figure {}", seconds(figure->seconds));
  }
  return needed;
}

// The pod turned terminating with a wait shorter than needed: logged, and
// a Warning once per rollout.
void TerminationAudit::warn_late(const std::string& ns, const std::string& pod, const Owner& owner,
                                 std::int64_t wait, const std::string& why, double slack,
                                 const std::string& policy_name) {
  const std::string& key = owner.key;
  const auto& cached = owner.cached;
  log::warn("propagation outlasted the preStop wait",
            {{"pod", ns + "/" + pod},
             {owner.stateful ? "statefulset" : "deployment", key},
             {"slack", seconds(slack)}});
  // Once per rollout: a ReplicaSet hash, or a StatefulSet's generation.
  const std::string rollout = owner.stateful ? std::to_string(cached->generation) : owner.hash;
  auto [it, first] = warned_.try_emplace(owner.stateful ? "statefulset/" + key : key, rollout);
  if (!first && it->second == rollout) return;  // this rollout was reported
  it->second = rollout;
  const auto name = split_key(key).second;
  kube::EventRecord e;
  e.regarding = kube::ObjectRef{"apps/v1", owner.kind(), ns, name, cached->uid};
  e.type = kube::EventType::Warning;
  e.reason = "PropagationOutlastedPreStop";
  e.action = "Audit";
  e.note = fmt::format(
      "pod {} ({}) turned terminating with a preStop wait of {}s, shorter than {} by {}: it "
      "may have stopped serving while still routed (policy {}); reported once per rollout",
      pod,
      owner.stateful ? fmt::format("StatefulSet generation {}", cached->generation)
                     : fmt::format("ReplicaSet hash {}", owner.hash),
      wait, why, seconds(-slack), policy_name);
  deps_.metrics.count_event(kube::to_string(e.type), e.reason);
  deps_.events.record(std::move(e));
}

// A pod killed at the grace: a Warning each time (each is a pod whose
// in-flight work was cut off), on its workload.
void TerminationAudit::warn_cut_short(const std::string& ns, const std::string& pod,
                                      const Owner& owner, const MeasuredDrain& m,
                                      const std::string& advice) {
  log::warn("the kubelet killed a pod at the grace, mid-drain",
            {{"pod", ns + "/" + pod},
             {owner.stateful ? "statefulset" : "deployment", owner.key},
             {"container", m.container}});
  kube::EventRecord e;
  e.regarding =
      kube::ObjectRef{"apps/v1", owner.kind(), ns, split_key(owner.key).second, owner.cached->uid};
  e.type = kube::EventType::Warning;
  e.reason = "DrainCutShort";
  e.action = "Audit";
  e.note = fmt::format(
      "pod {}: container {} was killed at the grace (exit code {}) after draining {}s of "
      "terminationGracePeriodSeconds {}s (preStop {}s): its drain takes longer ({})",
      pod, m.container, m.exit_code, m.grace - m.wait, m.grace, m.wait, advice);
  deps_.metrics.count_event(kube::to_string(e.type), e.reason);
  deps_.events.record(std::move(e));
}

}  // namespace gracekeeper::controller
