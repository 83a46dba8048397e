// The Deployment controller, and with kind StatefulSet the StatefulSet
// controller: for key "ns/name", read the Deployment and its
// namespace's policies from the stores, decide (deployment_decision.h), apply
// what the decision says with server-side apply, report the Events of the
// state once, and come back when a held-back change becomes due.
//
// It keeps three things between reconciles, all about its own writes: the
// Events it reported per Deployment (EventLedger, told by the EventSink how
// each write ended), the writes the server refused (BlockedWrite, by uid,
// generation and plan; for a field conflict, until the other applier gives
// the fields up), and the re-tunes it wrote whose new generation the store
// does not show yet. Which rollouts are in flight
// (changes.maxConcurrentRollouts) comes from the store, like everything else.
#pragma once

#include <array>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "gracekeeper/deployment/cache.h"
#include "gracekeeper/deployment/deployment_decision.h"
#include "gracekeeper/deployment/event_ledger.h"
#include "gracekeeper/deployment/ports.h"
#include "gracekeeper/deployment/result.h"
#include "gracekeeper/deployment/services.h"
#include "gracekeeper/kube/store.h"
#include "gracekeeper/metrics/metrics.h"

namespace gracekeeper::controller {

class DeploymentReconciler {
 public:
  struct Dependencies {
    kube::Store<CachedDeployment> deployments;
    kube::Store<CachedPolicy> policies;
    kube::Store<CachedService> services;
    const PropagationBook& propagation;
    DeploymentWriter& writer;
    EventSink& events;
    const Clock& clock;
    metrics::Metrics& metrics;
    // A policy's counts changed without any object changing (a write was
    // refused, or is no longer): its status must follow.
    std::function<void(const std::string& policy_key)> policy_changed;
    // Reconcile `key` again after a delay: an Event of its state failed to
    // be written, and is recorded again then.
    std::function<void(const std::string& key, std::chrono::nanoseconds after)> requeue{};
    // The kind of workload this reconciler governs: Deployment or
    // StatefulSet (one reconciler, store, queue and writer per kind).
    std::string kind = "Deployment";
    // The re-tunes of a policy in flight among the workloads of the other
    // kind: changes.maxConcurrentRollouts counts both kinds.
    std::function<std::int64_t(const std::string& policy_key)> other_rollouts{};
    // The workloads of the other kind that a policy governs: a percentage
    // in changes.maxConcurrentRollouts resolves against both kinds.
    std::function<std::int64_t(const std::string& policy_key)> other_governed{};
    // A rollout that made no progress (no change of its generation or pod
    // counts) for this long has stalled: it holds no rollout slot, and a
    // RolloutStalled Warning says so. The Deployment controller's default
    // progressDeadlineSeconds; a StatefulSet has no deadline of its own.
    std::chrono::seconds stall_after{600};
    // The measured drains, by "<kind>/ns/name" (drain.source Observed).
    const budget::DrainBook* drains = nullptr;
    // The pods as the kubelet runs them, by the same keys.
    const PodBook* pods = nullptr;
  };
  explicit DeploymentReconciler(Dependencies deps);
  DeploymentReconciler(const DeploymentReconciler&) = delete;
  DeploymentReconciler& operator=(const DeploymentReconciler&) = delete;
  void set_capabilities(budget::Capabilities c) { capabilities_ = c; }
  // This process serves the admission webhook: another applier's deploys
  // carry the budget, which a FieldConflict's note says.
  void set_webhook_served(bool served) { webhook_served_ = served; }

  boost::asio::awaitable<ReconcileResult> reconcile(std::string key);

  // The decision for a cached Deployment, as reconcile() would take it now
  // (no I/O).
  DeploymentDecision decide(const std::string& key, const CachedDeployment&) const;

  // What a policy's status counts of a Deployment's decision.
  struct Counted {
    std::string policy_key;
    std::vector<std::string> contenders;
    DeploymentState state;
  };
  // Everything of namespace `ns` that a decision reads besides the
  // Deployment and the time, from the stores now.
  NamespaceInputs namespace_inputs(std::string_view ns) const;
  // The counted part of decide(), remembered from the last decision (a
  // reconcile's or a count's) while the Deployment's snapshot and `inputs`
  // are the ones it was taken with and a held-back change is not yet due:
  // a cold start decides each Deployment once for the counts, not once per
  // count of its policy.
  Counted counted(const std::string& key, const CachedDeployment&,
                  const NamespaceInputs& inputs) const;
  // Decisions taken for `counted` (not remembered ones), for tests.
  std::uint64_t counted_decisions() const { return counted_decisions_; }

  EventLedger& ledger() { return ledger_; }
  const BlockedWrite* blocked(const std::string& key) const;
  // The re-tunes of `policy_key` in flight among this kind's workloads.
  std::int64_t rollouts_in_flight(const std::string& policy_key) {
    return rollouts_in_flight(std::string(), policy_key);
  }
  // The workloads of this kind that `policy_key` governs now, from the
  // stores (what its status counts as managed; the status itself is not
  // read, so a stale status never changes a decision).
  std::int64_t governed(const std::string& policy_key) const;
  const std::string& kind() const { return deps_.kind; }
  const kube::Store<CachedDeployment>& store() const { return deps_.deployments; }

 private:
  struct WriteOutcome {
    bool applied = false;
    std::optional<kube::EventRecord> refused;  // why the server refused it for good
    std::vector<ConflictingField> conflicts;   // the appliers' fields it conflicted on
    std::optional<std::int64_t> generation;    // applied: the written object's, if the answer said
    bool stale = false;  // not written: the object is newer than the snapshot decided on
  };
  // A refused write, and the snapshot of the Deployment last checked for
  // whether its conflicting fields are still another applier's.
  struct Blocked {
    BlockedWrite write;
    std::weak_ptr<const CachedDeployment> checked;
  };
  boost::asio::awaitable<bool> conflict_released(const std::string& key,
                                                 const std::shared_ptr<const CachedDeployment>&);
  DeploymentDecision decide(const std::string& key, const CachedDeployment&,
                            const NamespaceInputs&) const;
  // The steps of reconcile(), in order. Each step that can end the
  // reconcile returns its result; nullopt goes on to the next one.
  DeploymentDecision decide_and_remember(const std::string& key,
                                         const std::shared_ptr<const CachedDeployment>&);
  boost::asio::awaitable<bool> unblocked(const std::string& key,
                                         const std::shared_ptr<const CachedDeployment>&,
                                         const DeploymentDecision&);
  boost::asio::awaitable<std::optional<ReconcileResult>> held_by_fight(const std::string& key,
                                                                       const kube::ObjectRef&,
                                                                       const CachedDeployment&,
                                                                       DeploymentDecision&);
  std::optional<ReconcileResult> take_rollout_slot(const std::string& key, const kube::ObjectRef&,
                                                   const CachedDeployment&, DeploymentDecision&);
  boost::asio::awaitable<std::optional<ReconcileResult>> write_decision(
      const std::string& key, const kube::ObjectRef&,
      const std::shared_ptr<const CachedDeployment>&, const std::string& version,
      DeploymentDecision&);
  void record_tuned(const std::string& key, const kube::ObjectRef&, const DeploymentDecision&);
  void event_outcome(const kube::EventRecord&, bool written);
  boost::asio::awaitable<std::expected<WriteOutcome, std::string>> write(
      const std::string& ns, const std::string& name, const PlannedWrite&, const CachedDeployment&,
      const std::string& version);
  void report(const std::string& key, const kube::ObjectRef&, std::vector<kube::EventRecord>);
  void forget(const std::string& key);
  // The FieldFight Warning of a decision with fight_ends_in.
  boost::asio::awaitable<kube::EventRecord> fight_event(const std::string& key,
                                                        const CachedDeployment&,
                                                        const DeploymentDecision&);
  std::int64_t rollouts_in_flight(const std::string& key, const std::string& policy_key);
  // Notes the progress of `key`'s rollout (and asks to be reconciled again
  // when it would stall); the RolloutStalled Warning once it has stalled.
  std::optional<kube::EventRecord> note_progress(const std::string& key, const CachedDeployment&);
  // The rollout made no progress for stall_after, as note_progress saw it.
  bool stalled(const std::string& key, const CachedDeployment&) const;
  // The log field that names the workload: "deployment" or "statefulset".
  std::string_view log_key() const {
    return deps_.kind == "StatefulSet" ? "statefulset" : "deployment";
  }
  // How soon a held-back re-tune looks for a free rollout slot again.
  static constexpr std::chrono::seconds kRolloutPoll{5};

  Dependencies deps_;
  budget::Capabilities capabilities_{};
  bool webhook_served_ = false;
  EventLedger ledger_;
  std::unordered_map<std::string, Blocked> blocked_;
  // Re-tunes written (or being written) -> the generation written (before
  // the answer: the one after the snapshot's): in flight until the store
  // shows it (rollouts_in_flight).
  std::unordered_map<std::string, std::int64_t> rolling_;
  // Rollouts in flight -> their progress as last seen, and since when
  // (note_progress). In memory: after a restart a stall is timed again.
  struct Progress {
    std::array<std::int64_t, 5> counts{};  // generation, observed, updated, available, replicas
    TimePoint since{};
  };
  std::unordered_map<std::string, Progress> progress_;

  // The last decision's counted part per Deployment, per namespace with the
  // inputs it was taken on (counted()). The snapshots are held, so a new
  // one can never reuse an address.
  struct Remembered {
    std::shared_ptr<const CachedDeployment> snapshot;
    std::optional<TimePoint> until;  // a held-back change is due then
    std::uint64_t pod_version = 0;   // PodBook::version when decided
    Counted counted;
  };
  struct NamespaceDecisions {
    NamespaceInputs inputs;
    std::unordered_map<std::string, Remembered> deployments;
  };
  void remember(const std::string& key, const std::shared_ptr<const CachedDeployment>&,
                const NamespaceInputs& inputs, const DeploymentDecision&) const;
  void forget_decision(const std::string& key) const;
  std::uint64_t pod_version(const std::string& key) const;
  mutable std::unordered_map<std::string, NamespaceDecisions> decided_;
  mutable std::uint64_t counted_decisions_ = 0;
};

// "ns/name" -> {ns, name}.
std::pair<std::string, std::string> split_key(const std::string& key);

}  // namespace gracekeeper::controller
