// The termination audit and the samples of source Observed (docs/api.md,
// "The termination audit"), from
// the operator's own watch of EndpointSlices.
//
// The EndpointSlice informer's projection runs here, with the cached
// version of the slice it replaces: each endpoint that stopped being routed
// gives a propagation sample (propagation::SampleBook), and each one of a
// governed Deployment's pod that turned terminating is audited:
//
//   slack = the pod's preStop wait - max(sample + observed.consumerSyncSeconds,
//                                        the policy's figure if its source is Prometheus)
//
// where the sample is this change's, or, when it has no trigger time (a
// deletion's first change usually has none), the policy's quantile of the
// namespace's samples.
//
// A negative slack means the pod may have stopped serving while still
// routed: one Warning PropagationOutlastedPreStop per rollout (ReplicaSet
// hash) of the Deployment, and a count in the policy's status.
//
// Two halves. observe() runs in the informer's projection, at watch time:
// it reads the change against the cached slice, takes the samples, and for
// each pod that turned terminating notes what only that moment knows (the
// sample, the time seen, the wait its rollout had) and queues the pod's key
// ("ns/pod"). reconcile() runs under the controller loop like any other
// reconciler: it decides the governing policy, the slack, the metrics, the
// count and the Warning.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gracekeeper/audit/drain.h"
#include "gracekeeper/audit/endpoints.h"
#include "gracekeeper/budget/drain.h"
#include "gracekeeper/deployment/cache.h"
#include "gracekeeper/deployment/deployment_reconciler.h"
#include "gracekeeper/deployment/pod_book.h"
#include "gracekeeper/deployment/ports.h"
#include "gracekeeper/deployment/propagation_book.h"
#include "gracekeeper/deployment/result.h"
#include "gracekeeper/kube/store.h"
#include "gracekeeper/metrics/metrics.h"
#include "gracekeeper/propagation/observed.h"

namespace gracekeeper::controller {

// status.terminations (status.h).
using TerminationCounts = TerminationTotals;

// A terminating pod of a cached workload, as the Pod informer keeps it.
struct CachedPod {
  bool measured = false;  // its drain was taken (or cannot be)
};

// status.terminations as the server has it (zeros when absent or unreadable).
TerminationCounts read_terminations(const nlohmann::json& status);

// The audit's counts per policy ("ns/name"). What this process counted is
// added to what the policy's status held when the policy reconciler first
// read it, so a restart goes on from the last written status.
class TerminationBook {
 public:
  void count(const std::string& policy_key, bool late, TimePoint at);
  // A measured drain (audit/drain.h); `cut_short`: killed at the grace.
  void count_drain(const std::string& policy_key, bool cut_short, TimePoint at);
  // The totals to write; `status` is the server's, read once per policy.
  TerminationCounts totals(const std::string& policy_key, const nlohmann::json& status);
  void erase(const std::string& policy_key);

 private:
  struct Entry {
    std::optional<TerminationCounts> base;
    TerminationCounts counted;
  };
  Entry& entry(const std::string& policy_key);
  std::map<std::string, Entry, std::less<>> entries_;
};

// The preStop wait of a Deployment's pods as its template has it: the
// shortest known wait of the containers that get the wait (those
// gracekeeper.dev/containers names, else the app containers that declare a
// port, else all app containers; never a native sidecar); nullopt when one
// of them has a hook of unknown length.
std::optional<std::int64_t> pod_wait(const budget::Deployment&);

class TerminationAudit {
 public:
  struct Dependencies {
    kube::Store<CachedDeployment> deployments;
    kube::Store<CachedPolicy> policies;
    const PropagationBook& propagation;
    const DeploymentReconciler& deployment_controller;  // decide(): the governing policy
    propagation::SampleBook& samples;
    TerminationBook& terminations;
    EventSink& events;
    metrics::Metrics& metrics;
    // A policy's termination counts changed: its status must follow.
    std::function<void(const std::string& policy_key)> policy_changed;
    // Whether this replica does the work (leads): a standby takes samples
    // but neither counts nor reports.
    std::function<bool()> active;
    // The governed StatefulSets and their controller, when governed: their
    // pods ("web-0") are audited alike.
    std::optional<kube::Store<CachedDeployment>> statefulsets{};
    const DeploymentReconciler* statefulset_controller = nullptr;
    // A termination to audit: reconcile(key) later, under the loop.
    std::function<void(const std::string& key)> enqueue{};
    // The measured drains (audit/drain.h) and the pods as the kubelet runs
    // them (pod_book.h), by budget::workload_key; and the workload ("ns/name",
    // a StatefulSet's when `stateful`) that got a drain or a pod: its
    // reconciler decides again.
    budget::DrainBook* drains = nullptr;
    PodBook* pods = nullptr;
    std::function<void(bool stateful, const std::string& key)> workload_seen{};
  };
  explicit TerminationAudit(Dependencies deps) : deps_(std::move(deps)) {}

  // The EndpointSlice informer's projection: records what turned since
  // `before` (the cached version, null when none) as seen at `seen`, and
  // returns what to cache: the endpoints of cached Deployments' pods, or
  // nullopt when there is none.
  std::optional<CachedSlice> observe(const nlohmann::json& object, const CachedSlice* before,
                                     TimePoint seen);

  // The Pod informer's projection: a terminating pod of a cached workload
  // whose app containers have all exited gives a drain sample, once
  // (measure_drain); its DrainCutShort Warning and counts are queued under
  // "drain/ns/pod". Caches only the terminating pods of cached workloads,
  // and of each whether it was measured.
  // A pod of a cached workload whose template has no pod in the PodBook
  // yet is read too (once per template), and offered to it.
  std::optional<CachedPod> observe_pod(const nlohmann::json& object, const CachedPod* before);
  // The Pod informer's filter (InformerOptions::wanted): the pods
  // observe_pod reads in full. Any other pod is built as its metadata only.
  bool wants_pod(const nlohmann::json& metadata) const;

  // Audits the termination observe() queued under `key` ("ns/pod"), or the
  // drain observe_pod() queued ("drain/ns/pod"); done at once when there is
  // none (audited already, or noted by a standby).
  ReconcileResult reconcile(const std::string& key);
  // Terminations noted and not audited yet.
  std::size_t pending() const { return pending_.size(); }

 private:
  // The cached workload a pod belongs to: a Deployment's (its ReplicaSet
  // hash names the rollout) or a StatefulSet's ("web-0").
  struct Owner {
    std::string key;   // "ns/name"
    std::string hash;  // the ReplicaSet hash; "" for a StatefulSet's pod
    bool stateful = false;
    std::shared_ptr<const CachedDeployment> cached;
    const char* kind() const { return stateful ? "StatefulSet" : "Deployment"; }
    // Its key in the DrainBook and the PodBook.
    std::string book_key() const { return budget::workload_key(kind(), key); }
  };
  std::optional<Owner> owner_of(const std::string& ns, const std::string& pod) const;
  ReconcileResult reconcile_drain(const std::string& pod_key);
  // The template a pod was made from: its pod-template-hash (from its name)
  // or a StatefulSet's controller-revision-hash label; "" when unknown.
  static std::string template_of(const nlohmann::json& metadata, const Owner&);
  void see_serving_pod(const nlohmann::json& object, const nlohmann::json& metadata, const Owner&);
  void warn_cut_short(const std::string& ns, const std::string& pod, const Owner&,
                      const MeasuredDrain&, const std::string& advice);
  // A pod that turned terminating, as observe() saw it: what reconcile()
  // needs from that moment.
  struct Termination {
    Owner owner;
    std::optional<std::int64_t> wait;  // its rollout's preStop wait; nullopt: unknown
    std::optional<double> lag;         // this change's sample, if it had one
    TimePoint seen;
  };
  void note_termination(const std::string& ns, const std::string& pod, const Owner& owner,
                        std::optional<double> lag, TimePoint seen);
  // The steps of audit(): the pod's wait, what it needed, and a late one's
  // Warning.
  std::optional<std::int64_t> take_stateful_wait(const std::string& pod_key);
  std::optional<std::int64_t> wait_of(const Owner&,
                                      std::optional<std::int64_t> stateful_wait) const;
  struct Needed {
    std::optional<double> seconds;
    std::string why;  // how it was made up, for the Warning
  };
  Needed needed_of(const std::string& ns, const std::string& policy_key,
                   const budget::PolicySpec::Propagation&, std::optional<double> lag,
                   TimePoint seen) const;
  void warn_late(const std::string& ns, const std::string& pod, const Owner&, std::int64_t wait,
                 const std::string& why, double slack, const std::string& policy_name);
  // The largest propagation::implausible_above() of the namespace's policies
  // (the default policy's when none is valid): a sample above it is of no
  // use to any of them.
  double implausible_above(const std::string& ns) const;
  void report_drop(const std::string& slice, std::size_t endpoints,
                   const propagation::LagError& error, TimePoint now);
  // The wait of a rollout's pods is the template's when its first endpoint
  // appears: by the time a pod of an old rollout terminates, the template
  // may have changed (a new wait is what starts a rollout).
  void remember_wait(const std::string& deployment_key, const std::string& hash,
                     const CachedDeployment&);
  std::optional<std::optional<std::int64_t>> remembered_wait(const std::string& deployment_key,
                                                             const std::string& hash) const;

  Dependencies deps_;
  // 16 bytes a rollout: hashes of the pod-template-hash, the wait (-1:
  // unknown length), keyed by a hash of the Deployment's key (pod_id).
  struct RolloutWait {
    std::uint64_t hash;
    std::int64_t wait;
  };
  // Per Deployment, the last few rollouts' waits, newest last.
  std::unordered_map<std::uint64_t, std::vector<RolloutWait>> waits_;
  static constexpr std::size_t kRolloutsKept = 4;
  TimePoint last_missing_log_{};
  std::uint64_t missing_unlogged_ = 0;  // endpoints since the last line
  // The ReplicaSet hash of the last Warning per Deployment key (for a
  // StatefulSet, "statefulset/" + key and its generation): once per rollout.
  std::unordered_map<std::string, std::string> warned_;
  // A StatefulSet's pod keeps its name across rollouts, so its wait is
  // remembered per pod (a hash of "ns/pod"), from when it is seen serving
  // until it turns terminating: at most one entry per pod of a governed
  // StatefulSet.
  std::unordered_map<std::uint64_t, std::int64_t> stateful_waits_;
  // Terminations noted and not audited yet, by "ns/pod": one per pod that
  // turned terminating since the loop last ran (only while active()).
  std::unordered_map<std::string, Termination> pending_;
  // Drains measured and not counted yet, by "ns/pod".
  struct Drained {
    Owner owner;
    MeasuredDrain drain;
  };
  std::unordered_map<std::string, Drained> pending_drains_;
};

}  // namespace gracekeeper::controller
