// The two reconcilers, after kubernetes/sample-controller's syncHandler:
// read the cache, compute with the budget engine, write what differs, record
// events, update status. Level-based: a key is all they get; everything else
// comes from the informers' caches.
//
// ShutdownPolicy (key "ns/name"): validate, measure the propagation on an
// interval, write status when it changed, re-enqueue the namespace's
// Deployments when the figure moved.
// Deployment (key "ns/name"): find the governing policy, plan, apply the
// owned fields with server-side apply when the plan changes something, report
// findings as events, remember the outcome for the policy's status.
//
// Everything runs on the one io_context thread; no locks.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache.h"
#include "gracekeeper/budget/engine.h"
#include "gracekeeper/kube/events.h"
#include "gracekeeper/kube/informer.h"
#include "gracekeeper/kube/workqueue.h"
#include "gracekeeper/propagation/propagation.h"
#include "gracekeeper/server/metrics.h"
#include "status.h"

namespace gracekeeper::controller {

struct ReconcilerOptions {
  budget::Capabilities capabilities{};
  std::chrono::seconds propagation_refresh{60};
};

class Reconciler {
 public:
  struct Dependencies {
    kube::Client& client;
    kube::Informer<CachedDeployment>& deployments;
    kube::Informer<CachedPolicy>& policies;
    kube::AsyncWorkQueue& deployment_queue;
    kube::AsyncWorkQueue& policy_queue;
    kube::EventRecorder& events;
    server::Metrics& metrics;
    propagation::Prometheus* prometheus;  // null without --prometheus-url
  };
  explicit Reconciler(Dependencies, ReconcilerOptions = {});
  // Before the first reconcile, once the server's capabilities are known.
  void configure(ReconcilerOptions options) { options_ = options; }

  // Informer handlers: they only enqueue keys.
  kube::InformerHandlers deployment_handlers();
  kube::InformerHandlers policy_handlers();
  // The first list of Deployments is whole: every policy's counts can be
  // complete now (count() held them back until then).
  void deployments_synced();

  // Events gracekeeper already reported (e.g. before a restart), so they are
  // not reported again: Deployment key -> "reason\x1fnote".
  void seed_reported(std::multimap<std::string, std::string> reported);

  boost::asio::awaitable<bool> reconcile_deployment(std::string key);
  boost::asio::awaitable<bool> reconcile_policy(std::string key);

 private:
  // What the policy reconciler keeps between runs.
  struct PolicyRuntime {
    std::optional<propagation::LastGood> last_good;
    std::optional<PropagationState> propagation;
    std::optional<std::chrono::steady_clock::time_point> next_measurement;
    std::int64_t measured_generation = -1;
    // Since when the first status has waited for the Deployment counts.
    std::optional<std::chrono::steady_clock::time_point> counts_awaited_since;
  };
  static constexpr std::chrono::seconds kCountsWait{10};
  static constexpr std::chrono::seconds kCountsBusyWait{60};
  // What the last reconcile of a Deployment decided.
  struct Record {
    std::string policy_key;  // "" when no policy governs it
    DeploymentState state;
  };
  struct Outcome {
    std::string policy_key;
    DeploymentState state;
    std::vector<kube::EventRecord> events;  // reported on the state that stays
    bool wait = false;                      // nothing decided (the policy is not measured yet)
  };

  boost::asio::awaitable<Outcome> decide(
      const std::expected<budget::Deployment, budget::FieldErrors>&);
  boost::asio::awaitable<bool> write(const budget::Deployment&, const budget::Plan&,
                                     const CachedPolicy&, Outcome&);
  boost::asio::awaitable<void> replace_hooks(const budget::Deployment&,
                                             const nlohmann::json& configuration);
  void remember(const std::string& key, std::optional<Record> record);
  void report(const std::string& key, std::vector<kube::EventRecord>);
  void enqueue_namespace(const std::string& namespace_);
  DeploymentCounts count(const std::string& policy_key, bool& complete) const;
  boost::asio::awaitable<void> measure(const std::string& key, const CachedPolicy&, PolicyRuntime&);
  boost::asio::awaitable<bool> write_status(const CachedPolicy&, nlohmann::json status);

  Dependencies deps_;
  ReconcilerOptions options_;
  std::unordered_map<std::string, PolicyRuntime> policy_runtime_;
  std::unordered_map<std::string, std::int64_t> policy_generation_seen_;
  // namespace -> keys of policies, kept by the handlers.
  std::map<std::string, std::set<std::string>> policies_by_namespace_;
  // The events reported for a Deployment's current state. Kept per
  // Deployment, so kept small: hashes of "reason\x1fnote", except the
  // FieldConflict and ApplyRejected events, whose notes write() reads back.
  struct Reported {
    std::vector<std::size_t> hashes;
    std::vector<std::string> blocking;
    bool contains(const std::string& event) const;
    // Adds an event ("reason\x1fnote"); false when it is already there.
    bool add(std::string event);
  };
  // All the reconciler keeps of a Deployment.
  struct Tracked {
    bool cached = false;           // in the informer's cache (kept by its handlers)
    std::optional<Record> record;  // what its last reconcile decided
    Reported reported;             // the events reported for its current state
  };
  // Deployment key ("namespace/name") -> what is kept of it, in key order so
  // that a namespace's Deployments are one range. An entry goes once it
  // holds nothing (not cached, no record, no event).
  using TrackedMap = std::map<std::string, Tracked, std::less<>>;
  TrackedMap deployments_;
  void forget_if_empty(TrackedMap::iterator);
};

// "ns/name" -> {ns, name}.
std::pair<std::string, std::string> split_key(const std::string& key);

}  // namespace gracekeeper::controller
