// The ShutdownPolicy controller: for key "ns/name", validate the spec,
// measure the propagation when due (PropagationBook), and write the status,
// computed from the stores on each reconcile: the counts come from deciding,
// without I/O, every Deployment of the namespace as the Deployment
// controller would now.
//
// The status waits while Deployments are still queued (a cold start or a
// mass change): it would change with each of them. The measurement does
// not: Deployments wait for it.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <functional>
#include <string>

#include "gracekeeper/audit/termination_audit.h"
#include "gracekeeper/deployment/cache.h"
#include "gracekeeper/deployment/deployment_reconciler.h"
#include "gracekeeper/deployment/ports.h"
#include "gracekeeper/deployment/propagation_book.h"
#include "gracekeeper/deployment/result.h"
#include "gracekeeper/deployment/status.h"
#include "gracekeeper/kube/store.h"
#include "gracekeeper/metrics/metrics.h"

namespace gracekeeper::controller {

// A restart keeps the figure of source Observed (docs/api.md,
// "Propagation sources"): the last good value, before this process has measured one, is
// status.propagation as the server has it, when the policy's source is
// Observed, the status's source is Observed (a measurement or a last good
// value, not the staticSeconds fallback) and its sampledAt is at most
// propagation::kLastGoodMaxAge old (and at most a minute in the future): the rule a last
// good value kept in memory follows. nullopt otherwise.
std::optional<propagation::LastGood> seed_last_good(const budget::PolicySpec& spec,
                                                    const nlohmann::json& status, TimePoint now);

class PolicyReconciler {
 public:
  struct Dependencies {
    kube::Store<CachedPolicy> policies;
    kube::Store<CachedDeployment> deployments;
    PropagationBook& propagation;
    PropagationMeter& meter;
    StatusWriter& writer;
    const Clock& clock;
    metrics::Metrics& metrics;
    const DeploymentReconciler& deployment_controller;  // its counted(), for the counts
    // The figure of a policy moved: its namespace's Deployments must follow.
    std::function<void(const std::string& ns)> namespace_changed;
    // Every Deployment is listed and none is queued or being reconciled.
    std::function<bool()> deployments_settled;
    // The StatefulSet controller (its store and counted()), when StatefulSets
    // are governed: the status counts them as status.statefulSets.
    const DeploymentReconciler* statefulset_controller = nullptr;
  };
  struct Options {
    std::chrono::seconds propagation_refresh{60};
    // How soon to look again while Deployments are still queued.
    std::chrono::seconds settle_poll{2};
  };
  PolicyReconciler(Dependencies deps, Options options)
      : deps_(std::move(deps)), options_(options) {}

  boost::asio::awaitable<ReconcileResult> reconcile(std::string key);

  // The termination audit's counts, written as status.terminations (none: not written).
  void set_terminations(TerminationBook* book) { terminations_ = book; }

  // The counts of the policy's Deployments, as the store has them now.
  DeploymentCounts count(const std::string& policy_key) const;
  // The same of the workloads another controller governs (StatefulSets).
  static DeploymentCounts count(const DeploymentReconciler&, const std::string& policy_key);

 private:
  boost::asio::awaitable<void> measure(const std::string& key, const CachedPolicy&);
  boost::asio::awaitable<ReconcileResult> write_status(const CachedPolicy&, nlohmann::json status,
                                                       Result then);

  Dependencies deps_;
  Options options_;
  TerminationBook* terminations_ = nullptr;
};

}  // namespace gracekeeper::controller
