#include "gracekeeper/deployment/deployment_reconciler.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "gracekeeper/log/log.h"

namespace gracekeeper::controller {
namespace {

// The manager a server-side apply conflict names: `conflict with "kubectl" using apps/v1`.
std::string conflicting_manager(const kube::ApiError::Cause& cause) {
  const auto open = cause.message.find('"');
  if (open == std::string::npos) return {};
  const auto close = cause.message.find('"', open + 1);
  if (close == std::string::npos) return {};
  return cause.message.substr(open + 1, close - open - 1);
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

// The conflicts of a refused apply with the other appliers' fields.
std::vector<ConflictingField> applier_conflicts(const kube::ApiError& conflict,
                                                const std::vector<std::string>& appliers) {
  std::vector<ConflictingField> conflicts;
  for (const auto& cause : conflict.causes) {
    if (auto m = conflicting_manager(cause); std::ranges::find(appliers, m) != appliers.end()) {
      conflicts.push_back({std::move(m), cause.field});
    }
  }
  return conflicts;
}

// The FieldConflict Warning of an apply refused for another applier's fields.
kube::EventRecord field_conflict_event(const kube::ApiError& conflict, const std::string& owners,
                                       bool webhook_served, const std::string& wanted) {
  // The fix depends on whether the webhook keeps the applier's deploys
  // on the budget: then its next apply carries the new one by itself.
  const std::string fix =
      webhook_served
          ? "the admission webhook puts the budget into each of its applies, so its next "
            "apply or sync carries this change; to apply it now, run that apply or sync "
            "again, or set spec.preStop.existing: Replace to let gracekeeper take the fields "
            "over"
          : "fix: drop these fields from the manifest it applies, serve the admission "
            "webhook (its applies then carry the budget), or set spec.preStop.existing: "
            "Replace to let gracekeeper take the fields over";
  return kube::EventRecord{
      {},
      kube::EventType::Warning,
      "FieldConflict",
      "Tune",
      fmt::format("not changed: {} owned by {}; {} {}",
                  conflict.causes.size() == 1 ? "a field is" : "fields are", owners, fix, wanted)};
}

}  // namespace

std::pair<std::string, std::string> split_key(const std::string& key) {
  const auto slash = key.find('/');
  if (slash == std::string::npos) return {std::string(), key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

DeploymentReconciler::DeploymentReconciler(Dependencies deps) : deps_(std::move(deps)) {
  deps_.events.on_outcome(
      [this](const kube::EventRecord& e, bool written) { event_outcome(e, written); });
}

const BlockedWrite* DeploymentReconciler::blocked(const std::string& key) const {
  auto it = blocked_.find(key);
  return it == blocked_.end() ? nullptr : &it->second.write;
}

// An Event counts as reported once written; one that failed is recorded
// again by a later reconcile of its Deployment, after a backoff.
void DeploymentReconciler::event_outcome(const kube::EventRecord& e, bool written) {
  if (e.regarding.kind != deps_.kind) return;
  const std::string key = e.regarding.namespace_ + "/" + e.regarding.name;
  const auto retry = ledger_.outcome(key, e, written);
  if (!retry) return;
  log::info("event not written, will record it again",
            {{log_key(), key}, {"reason", e.reason}, {"after", std::to_string(retry->count())}});
  if (deps_.requeue) deps_.requeue(key, *retry);
}

// A write refused for a conflict with other appliers is tried again once
// none of them owns a field it conflicted on any more: an applier can give
// a field up (apply a configuration without it) without any value, and so
// the generation, changing. Looked at once per new snapshot of the
// Deployment, with one GET: the informer keeps the managers, not their
// fields.
boost::asio::awaitable<bool> DeploymentReconciler::conflict_released(
    const std::string& key, const std::shared_ptr<const CachedDeployment>& cached) {
  auto it = blocked_.find(key);
  if (it == blocked_.end() || it->second.write.conflicts.empty()) co_return false;
  if (it->second.checked.lock() == cached) co_return false;  // looked at this state already
  it->second.checked = cached;
  const std::vector<ConflictingField> conflicts = it->second.write.conflicts;
  const bool still_applies = std::ranges::any_of(conflicts, [&](const ConflictingField& c) {
    return std::ranges::find(cached->appliers, c.manager) != cached->appliers.end();
  });
  if (!still_applies) co_return true;  // those managers apply nothing any more
  const auto [ns, name] = split_key(key);
  auto fields = co_await deps_.writer.managed_fields(ns, name);
  if (!fields) {
    log::warn("cannot read the managers of a blocked write",
              {{log_key(), key}, {"error", fields.error().format()}});
    co_return false;  // looked at again with the next change
  }
  co_return std::ranges::none_of(conflicts, [&](const ConflictingField& c) {
    return applier_owns(*fields, c.manager, c.field);
  });
}

std::uint64_t DeploymentReconciler::pod_version(const std::string& key) const {
  return deps_.pods ? deps_.pods->version(budget::workload_key(deps_.kind, key)) : 0;
}

DeploymentDecision DeploymentReconciler::decide(const std::string& key,
                                                const CachedDeployment& cached) const {
  return decide(key, cached, namespace_inputs(split_key(key).first));
}

DeploymentDecision DeploymentReconciler::decide(const std::string& key,
                                                const CachedDeployment& cached,
                                                const NamespaceInputs& inputs) const {
  const auto deployment = cached.project();
  DeploymentFacts facts;
  facts.deployment = &deployment;
  facts.uid = cached.uid;
  facts.generation = cached.generation;
  facts.ns = &inputs;
  facts.now = deps_.clock.now();
  facts.blocked = blocked(key);
  facts.rolling = cached.rollout.rolling(cached.generation);
  facts.observed = cached.rollout.observed_generation == cached.generation;
  const std::string book_key = budget::workload_key(deps_.kind, key);
  if (deps_.drains) facts.drains = deps_.drains->samples(book_key);
  const auto pod = deps_.pods ? deps_.pods->find(book_key) : nullptr;
  facts.pod = pod.get();
  return decide_deployment(facts);
}

NamespaceInputs DeploymentReconciler::namespace_inputs(std::string_view ns) const {
  return controller::namespace_inputs(
      deps_.policies, deps_.services, ns,
      [this](const CachedPolicy& p) { return book_figure(deps_.propagation, p); }, capabilities_);
}

void DeploymentReconciler::remember(const std::string& key,
                                    const std::shared_ptr<const CachedDeployment>& snapshot,
                                    const NamespaceInputs& inputs,
                                    const DeploymentDecision& d) const {
  NamespaceDecisions& n = decided_[split_key(key).first];
  if (n.inputs != inputs) {
    n.inputs = inputs;
    n.deployments.clear();
  }
  Remembered& r = n.deployments[key];
  r.snapshot = snapshot;
  r.pod_version = pod_version(key);
  r.until = d.requeue_after ? std::optional<TimePoint>(
                                  deps_.clock.now() +
                                  std::chrono::duration_cast<TimePoint::duration>(*d.requeue_after))
                            : std::nullopt;
  r.counted = {d.policy_key, d.contenders, d.state};
}

DeploymentReconciler::Counted DeploymentReconciler::counted(const std::string& key,
                                                            const CachedDeployment& cached,
                                                            const NamespaceInputs& inputs) const {
  if (!blocked(key)) {
    auto n = decided_.find(split_key(key).first);
    if (n != decided_.end() && n->second.inputs == inputs) {
      auto r = n->second.deployments.find(key);
      if (r != n->second.deployments.end() && r->second.snapshot.get() == &cached &&
          r->second.pod_version == pod_version(key) &&
          (!r->second.until || deps_.clock.now() < *r->second.until)) {
        return r->second.counted;
      }
    }
  }
  ++counted_decisions_;
  DeploymentDecision d = decide(key, cached, inputs);
  // Remembered only for the store's own snapshot (a count reads the store).
  if (auto snapshot = deps_.deployments.get(key); snapshot.get() == &cached && !blocked(key)) {
    remember(key, snapshot, inputs, d);
  }
  return {std::move(d.policy_key), std::move(d.contenders), d.state};
}

// The other Deployments of the namespace that the policy tuned last and
// whose rollout is not complete, as the store shows them; and those this
// process wrote whose new generation the store does not show yet.
std::int64_t DeploymentReconciler::rollouts_in_flight(const std::string& key,
                                                      const std::string& policy_key) {
  const auto policy = split_key(policy_key);
  std::int64_t n = 0;
  deps_.deployments.in_namespace(policy.first, [&](const std::string& other,
                                                   const CachedDeployment& c) {
    if (other == key) return;
    if (auto it = rolling_.find(other); it != rolling_.end()) {
      if (c.generation < it->second) {
        ++n;  // written; the watch has not brought the new generation yet
        return;
      }
      rolling_.erase(it);
    }
    if (c.tuned_by == policy.second && c.rollout.in_flight(c.generation) && !stalled(other, c)) {
      ++n;
    }
  });
  return n;
}

namespace {

std::array<std::int64_t, 5> progress_counts(const CachedDeployment& c) {
  return {c.generation, c.rollout.observed_generation, c.rollout.updated, c.rollout.available,
          c.rollout.replicas};
}

}  // namespace

bool DeploymentReconciler::stalled(const std::string& key, const CachedDeployment& c) const {
  const auto it = progress_.find(key);
  return it != progress_.end() && it->second.counts == progress_counts(c) &&
         deps_.clock.now() - it->second.since >= deps_.stall_after;
}

std::optional<kube::EventRecord> DeploymentReconciler::note_progress(const std::string& key,
                                                                     const CachedDeployment& c) {
  const RolloutStatus& r = c.rollout;
  const bool past_deadline = r.deadline_exceeded && r.replacing(c.generation);
  // Timed only for what a slot counts (a workload gracekeeper tuned), and
  // once the controller has observed it: a control plane without one (or
  // a workload just created) has nothing to time.
  const bool timed = !c.tuned_by.empty() && r.observed_generation > 0;
  if (!timed || (!r.in_flight(c.generation) && !past_deadline)) {
    progress_.erase(key);
    return std::nullopt;
  }
  const auto counts = progress_counts(c);
  const TimePoint now = deps_.clock.now();
  auto [it, added] = progress_.try_emplace(key, Progress{counts, now});
  if (!added && it->second.counts != counts) it->second = Progress{counts, now};
  if (!past_deadline && !stalled(key, c)) {
    // Come back when it would stall, with no other event needed. Asked on
    // every reconcile until then: a work queue keeps the earliest of the
    // delays asked for a key, which may be one from before the last move.
    const auto left = it->second.since + deps_.stall_after - now;
    if (deps_.requeue) {
      deps_.requeue(key, std::max<std::chrono::nanoseconds>(left, std::chrono::seconds(1)));
    }
    return std::nullopt;
  }
  const std::string why = past_deadline
                              ? "is past its progressDeadlineSeconds"
                              : fmt::format("made no progress for {}s", deps_.stall_after.count());
  log::warn("rollout stalled", {{log_key(), key}, {"generation", std::to_string(c.generation)}});
  return kube::EventRecord{
      {},
      kube::EventType::Warning,
      "RolloutStalled",
      "Tune",
      fmt::format("the rollout of generation {} {} ({} of {} pods updated, {} available): it no "
                  "longer holds a slot of changes.maxConcurrentRollouts, so other re-tunes of "
                  "its policy go on; find why its new pods do not become ready (kubectl rollout "
                  "status, kubectl describe)",
                  c.generation, why, r.updated, r.desired, r.available)};
}

std::int64_t DeploymentReconciler::governed(const std::string& policy_key) const {
  const auto policy = split_key(policy_key);
  const NamespaceInputs inputs = namespace_inputs(policy.first);
  std::int64_t n = 0;
  deps_.deployments.in_namespace(policy.first,
                                 [&](const std::string& key, const CachedDeployment& cached) {
                                   n += counted(key, cached, inputs).policy_key == policy_key;
                                 });
  return n;
}

// Someone set owned fields back (a deploy re-applying its manifest, a
// GitOps self-heal) within the policy's minIntervalSeconds of gracekeeper's
// last repair (decide_deployment's fight_ends_in, from `setBack` in
// gracekeeper.dev/applied): gracekeeper stops re-tuning the Deployment
// instead of starting a rollout on every sync, and says who and what in
// the FieldFight Warning. The managers come from managedFields, which the
// informer does not keep: one GET.
boost::asio::awaitable<kube::EventRecord> DeploymentReconciler::fight_event(
    const std::string& key, const CachedDeployment& cached, const DeploymentDecision& decision) {
  const auto [ns, name] = split_key(key);
  std::vector<std::string> managers;
  auto fields = co_await deps_.writer.managed_fields(ns, name);
  if (fields) {
    for (const auto& path : decision.set_back_paths) {
      for (auto& m : owners_of(*fields, path)) {
        if (std::ranges::find(managers, m) == managers.end()) managers.push_back(std::move(m));
      }
    }
  }
  std::string who;
  for (const auto& m : managers) who += (who.empty() ? "\"" : ", \"") + m + "\"";
  if (who.empty()) who = "another writer";
  std::string what;
  for (const auto& f : decision.set_back) what += (what.empty() ? "" : ", ") + f;
  log::warn("field fight", {{log_key(), key}, {"managers", who}, {"fields", what}});
  // Each set-back (a new generation) is a new note, so an Event of its own.
  co_return kube::EventRecord{
      {},
      kube::EventType::Warning,
      "FieldFight",
      "Tune",
      fmt::format("{} set gracekeeper's fields back twice within {}s ({}; the last at generation "
                  "{}); gracekeeper stops re-tuning this {} rather than restart its pods on "
                  "every deploy. Fix: drop these fields from the manifest that {} applies, or set "
                  "them to the budget ({}); gracekeeper tunes again once they stop being set back",
                  who, decision.min_interval.count(), what, cached.generation, deps_.kind, who,
                  decision.write->changes)};
}

void DeploymentReconciler::forget_decision(const std::string& key) const {
  if (auto n = decided_.find(split_key(key).first); n != decided_.end()) {
    n->second.deployments.erase(key);
    if (n->second.deployments.empty()) decided_.erase(n);
  }
}

void DeploymentReconciler::forget(const std::string& key) {
  forget_decision(key);
  ledger_.forget(key);
  blocked_.erase(key);
  rolling_.erase(key);
  progress_.erase(key);
}

boost::asio::awaitable<ReconcileResult> DeploymentReconciler::reconcile(std::string key) {
  // A snapshot: it stays as it is while this coroutine waits.
  const auto cached = deps_.deployments.get(key);
  const std::string version(deps_.deployments.resource_version(key));  // the snapshot's
  if (!cached) {
    forget(key);  // deleted, or no longer opted in: left as it is, no longer managed
    co_return Result::done();
  }
  DeploymentDecision decision = decide_and_remember(key, cached);
  if (decision.wait_for_policy) co_return Result::done();
  if (auto stall = note_progress(key, *cached)) decision.events.push_back(std::move(*stall));
  if (co_await unblocked(key, cached, decision)) decision = decide(key, *cached);

  const auto [ns, name] = split_key(key);
  const kube::ObjectRef ref{"apps/v1", deps_.kind, ns, name, cached->uid};
  if (auto fight = co_await held_by_fight(key, ref, *cached, decision)) co_return *fight;
  if (auto queued = take_rollout_slot(key, ref, *cached, decision)) co_return *queued;
  if (decision.write) {
    if (auto written = co_await write_decision(key, ref, cached, version, decision)) {
      co_return *written;
    }
  }
  report(key, ref, std::move(decision.events));
  co_return decision.requeue_after ? Result::after(*decision.requeue_after) : Result::done();
}

DeploymentDecision DeploymentReconciler::decide_and_remember(
    const std::string& key, const std::shared_ptr<const CachedDeployment>& cached) {
  const NamespaceInputs inputs = namespace_inputs(split_key(key).first);
  DeploymentDecision decision = decide(key, *cached, inputs);
  // The counts of its policy read this decision until something changes.
  // One that writes is stale once its write lands (and holding the
  // snapshot written over would keep it alive until the next reconcile).
  if (!decision.write && !decision.blocked && !blocked(key)) {
    remember(key, cached, inputs, decision);
  } else {
    forget_decision(key);
  }
  return decision;
}

// Whether the write the decision found blocked may be tried again now; it
// is no longer blocked then.
boost::asio::awaitable<bool> DeploymentReconciler::unblocked(
    const std::string& key, const std::shared_ptr<const CachedDeployment>& cached,
    const DeploymentDecision& decision) {
  if (!decision.blocked) co_return false;
  const bool released = co_await conflict_released(key, cached);
  if (!released) co_return false;
  log::info("conflicting fields released, trying again", {{log_key(), key}});
  blocked_.erase(key);
  co_return true;
}

boost::asio::awaitable<std::optional<ReconcileResult>> DeploymentReconciler::held_by_fight(
    const std::string& key, const kube::ObjectRef& ref, const CachedDeployment& cached,
    DeploymentDecision& decision) {
  if (!decision.write || !decision.fight_ends_in) co_return std::nullopt;
  decision.events.insert(decision.events.begin(), co_await fight_event(key, cached, decision));
  report(key, ref, std::move(decision.events));
  // docs/api.md ("Checks that are reported", FieldFight): it tunes again
  // once the interval since its last repair has passed, with no other
  // event needed.
  co_return Result::after(*decision.fight_ends_in);
}

std::optional<ReconcileResult> DeploymentReconciler::take_rollout_slot(
    const std::string& key, const kube::ObjectRef& ref, const CachedDeployment& cached,
    DeploymentDecision& decision) {
  if (!decision.write || !decision.write->retune) return std::nullopt;
  if (auto own = rolling_.find(key); own != rolling_.end() && cached.generation < own->second) {
    // Its re-tune is written and the store does not show it yet: this
    // snapshot is older than the write, whose watch event comes next.
    return Result::done();
  }
  const std::int64_t busy = rollouts_in_flight(key, decision.policy_key) +
                            (deps_.other_rollouts ? deps_.other_rollouts(decision.policy_key) : 0);
  const std::int64_t limit =
      max_rollouts(decision.max_concurrent_rollouts,
                   governed(decision.policy_key) +
                       (deps_.other_governed ? deps_.other_governed(decision.policy_key) : 0));
  if (busy >= limit) {
    decision.events.push_back(
        {{},
         kube::EventType::Normal,
         "RolloutQueued",
         "Tune",
         fmt::format("waiting to apply {}: {} re-tuned workloads of policy {} are still rolling "
                     "out (changes.maxConcurrentRollouts allows {})",
                     decision.write->changes, busy, decision.policy_name, limit)});
    report(key, ref, std::move(decision.events));
    return Result::after(kRolloutPoll);
  }
  // The slot is taken before the write: other workers count it meanwhile.
  rolling_.insert_or_assign(key, cached.generation + 1);
  return std::nullopt;
}

// Writes the decision. Applied, it records the Tuned Event and the reconcile
// is done; refused, the write is blocked and the refusal joins the
// decision's Events; applied without a change, nothing is recorded (both
// nullopt: the caller reports the decision's Events).
boost::asio::awaitable<std::optional<ReconcileResult>> DeploymentReconciler::write_decision(
    const std::string& key, const kube::ObjectRef& ref,
    const std::shared_ptr<const CachedDeployment>& cached, const std::string& version,
    DeploymentDecision& decision) {
  auto outcome = co_await write(ref.namespace_, ref.name, *decision.write, *cached, version);
  if (!outcome || !outcome->applied) rolling_.erase(key);
  if (!outcome) co_return transient(outcome.error());
  if (outcome->stale) {
    // The Deployment changed since this snapshot (gracekeeper's own write
    // among the changes, when an older event woke this reconcile): nothing
    // was written, and the newer object's watch event reconciles again.
    log::debug("stale snapshot, not written", {{log_key(), key}});
    co_return Result::done();
  }
  if (outcome->applied) {
    // An answer without a generation counts as the one after the snapshot's.
    const std::int64_t written = outcome->generation.value_or(cached->generation + 1);
    if (written <= cached->generation) {
      // The server kept the object as it was (a mutating webhook undid the
      // change, or it already held it): nothing was tuned, nothing rolls,
      // no new generation will come for it, and the decision's findings
      // still hold (the caller reports them).
      rolling_.erase(key);
      log::warn("the write changed nothing",
                {{log_key(), key}, {"generation", std::to_string(written)}});
      // Not again until the object or the plan changes (a BlockedWrite):
      // the same write would be set back the same way.
      kube::EventRecord reverted{
          {},
          kube::EventType::Warning,
          "WriteReverted",
          "Tune",
          "not changed: the API server kept the object as it was, so a mutating admission "
          "webhook (a policy engine's rule for this kind, say) set back what gracekeeper "
          "wrote (" +
              decision.write->changes +
              "); gracekeeper cannot hold it and tries again when the object or the plan "
              "changes"};
      blocked_.insert_or_assign(
          key,
          Blocked{BlockedWrite{
                      cached->uid, cached->generation, decision.write->plan_hash, reverted, {}},
                  cached});
      deps_.policy_changed(decision.policy_key);
      decision.events.insert(decision.events.begin(), std::move(reverted));
      co_return std::nullopt;
    }
    // A re-tune holds its slot until the store shows what it wrote.
    if (auto slot = rolling_.find(key); slot != rolling_.end()) slot->second = written;
    record_tuned(key, ref, decision);
    co_return Result::done();
  }
  blocked_.insert_or_assign(
      key, Blocked{BlockedWrite{cached->uid, cached->generation, decision.write->plan_hash,
                                *outcome->refused, std::move(outcome->conflicts)},
                   cached});
  deps_.policy_changed(decision.policy_key);
  decision.events.insert(decision.events.begin(), std::move(*outcome->refused));
  co_return std::nullopt;
}

void DeploymentReconciler::record_tuned(const std::string& key, const kube::ObjectRef& ref,
                                        const DeploymentDecision& decision) {
  if (blocked_.erase(key)) deps_.policy_changed(decision.policy_key);
  // One Event for the tune, with the findings of the written Deployment
  // folded in; its next reconcile reports only what differs from them.
  std::vector<kube::EventRecord> after;
  for (const auto& f : decision.write->findings_after) after.push_back(finding_event(f));
  ledger_.mark(key, after);
  kube::EventRecord tuned = tuned_event(*decision.write, decision.policy_name);
  tuned.regarding = ref;
  EventLedger::stamp(tuned, after);
  ledger_.once(key, tuned);  // recorded again until written
  deps_.metrics.count_event(to_string(tuned.type), tuned.reason);
  deps_.events.record(std::move(tuned));
}

void DeploymentReconciler::report(const std::string& key, const kube::ObjectRef& ref,
                                  std::vector<kube::EventRecord> events) {
  for (auto& e : ledger_.unreported(key, std::move(events))) {
    e.regarding = ref;
    EventLedger::stamp(e);
    deps_.metrics.count_event(to_string(e.type), e.reason);
    deps_.events.record(std::move(e));
  }
}

// Applies the write to the version of the Deployment it was decided on:
// the configuration carries the snapshot's resourceVersion, a precondition
// the server checks, so a snapshot older than the object (an older event
// that woke the reconcile after gracekeeper's own write) writes nothing and
// is `stale`. A field conflict with Update writers is taken over at once
// (may_force); a conflict with another applier, or a configuration the
// server rejects, is refused for good: `refused` says why. Anything else is
// an error worth retrying.
boost::asio::awaitable<std::expected<DeploymentReconciler::WriteOutcome, std::string>>
DeploymentReconciler::write(const std::string& ns, const std::string& name, const PlannedWrite& w,
                            const CachedDeployment& cached, const std::string& version) {
  const std::string key = ns + "/" + name;
  const std::string wanted = "(wanted " + w.changes + ")";
  const std::vector<std::string>& appliers = cached.appliers;
  nlohmann::json configuration = w.configuration;
  if (!version.empty()) configuration["metadata"]["resourceVersion"] = version;
  // Without another applier every conflict is with Update writers, which
  // may_force takes over anyway: force at once, one request instead of two.
  bool force = w.force || appliers.empty();
  // (No co_await inside ?: : GCC 12 miscompiles it.)
  DeploymentWriter::Written result;
  if (w.replace_hooks) {
    result = co_await deps_.writer.replace_hooks(ns, name, configuration);
  } else {
    result = co_await deps_.writer.apply(ns, name, configuration, force);
  }
  std::string owners;
  if (!result && result.error().reason == kube::ApiError::Reason::Conflict &&
      !result.error().causes.empty() && !force && !w.replace_hooks) {
    if (!may_force(result.error(), appliers, owners)) {
      log::warn("field conflict", {{log_key(), key}, {"owners", owners}});
      WriteOutcome refused;
      refused.conflicts = applier_conflicts(result.error(), appliers);
      refused.refused = field_conflict_event(result.error(), owners, webhook_served_, wanted);
      co_return refused;
    }
    result = co_await deps_.writer.apply(ns, name, configuration, /*force=*/true);
  }
  if (!result && result.error().reason == kube::ApiError::Reason::Conflict &&
      result.error().causes.empty()) {
    WriteOutcome stale;  // the precondition failed: no field named, the object is newer
    stale.stale = true;
    co_return stale;
  }
  if (!result && result.error().reason == kube::ApiError::Reason::Invalid) {
    // The server refuses this configuration; sending it again cannot help
    // until the Deployment or the plan changes.
    log::warn("apply rejected", {{log_key(), key}, {"error", result.error().format()}});
    WriteOutcome refused;
    refused.refused = kube::EventRecord{{},
                                        kube::EventType::Warning,
                                        "ApplyRejected",
                                        "Tune",
                                        "not changed: the API server rejected the change: " +
                                            result.error().message + " " + wanted};
    co_return refused;
  }
  if (!result) {
    std::string error = "apply " + key + ": " + result.error().format();
    co_return std::unexpected(std::move(error));
  }
  deps_.metrics.count_patch(ns);
  log::info("tuned", {{log_key(), key}, {"changes", w.changes}});
  WriteOutcome applied;
  applied.applied = true;
  applied.generation = result->generation;
  co_return applied;
}

}  // namespace gracekeeper::controller
