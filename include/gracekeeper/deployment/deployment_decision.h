// The Deployment controller's decision, without I/O: given what the stores
// hold about one Deployment, its namespace's policies and their measured
// propagation, what should be written and reported, and the state the
// Deployment is in. deployment_reconciler.cpp is the I/O around it; the
// policy reconciler calls it too, to count the states from the store.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/budget/drain.h"
#include "gracekeeper/budget/engine.h"
#include "gracekeeper/deployment/cache.h"
#include "gracekeeper/deployment/pod_book.h"
#include "gracekeeper/deployment/propagation_book.h"
#include "gracekeeper/deployment/services.h"
#include "gracekeeper/deployment/status.h"
#include "gracekeeper/kube/events.h"
#include "gracekeeper/kube/store.h"

namespace gracekeeper::controller {

// A field another applier owns, which a write conflicted on (the cause of
// a server-side apply conflict).
struct ConflictingField {
  std::string manager;  // "flux"
  std::string field;    // ".spec.template.spec.terminationGracePeriodSeconds"
};

// A write the server refused (a field conflict with another applier, or 422
// Invalid): not repeated until the Deployment or the plan changes, or (a
// conflict) the appliers no longer own the fields (applier_owns).
struct BlockedWrite {
  std::string uid;
  std::int64_t generation = 0;
  std::size_t plan_hash = 0;
  kube::EventRecord event;                  // the Warning that says why (regarding unset)
  std::vector<ConflictingField> conflicts;  // empty unless a FieldConflict
};

// What a decision reads of a workload's namespace: its policies with their
// figures, its Services, and what the API server can do. A value, read from
// the stores at one moment (namespace_inputs); two are equal when a
// decision would read the same from each, which is what the reconciler's
// memo of decisions is keyed by. Store values are immutable snapshots (a
// change is a new pointer), so comparing pointers compares the objects.
struct NamespaceInputs {
  struct Figure {
    double seconds = 0;
    bool available = true;  // false: a fallback, the source failed
    bool operator==(const Figure&) const = default;
  };
  struct Policy {
    std::shared_ptr<const CachedPolicy> policy;
    std::optional<Figure> figure;  // none: not measured yet
    // The same policy (uid) at the same generation with the same figure: a
    // write of its status changes neither.
    bool operator==(const Policy&) const;
  };
  std::vector<Policy> policies;                                // in key order
  std::vector<std::shared_ptr<const CachedService>> services;  // in key order
  budget::Capabilities capabilities{};
  bool operator==(const NamespaceInputs&) const = default;
};

// A policy's figure as a decision plans with it; nullopt when it has none.
using FigureOf = std::function<std::optional<NamespaceInputs::Figure>(const CachedPolicy&)>;

// Namespace `ns`'s inputs from the stores, each policy's figure from
// `figure_of`: the reconciler's own measurements (PropagationBook), or in
// admission those of this replica, else the one the leader wrote into the
// policy's status.
NamespaceInputs namespace_inputs(const kube::Store<CachedPolicy>&,
                                 const kube::Store<CachedService>&, std::string_view ns,
                                 const FigureOf& figure_of, budget::Capabilities);

// The figure `book` holds for `policy`, for namespace_inputs.
std::optional<NamespaceInputs::Figure> book_figure(const PropagationBook& book,
                                                   const CachedPolicy& policy);

struct DeploymentFacts {
  // The Deployment as the budget engine reads it.
  const std::expected<budget::Deployment, budget::FieldErrors>* deployment = nullptr;
  std::string uid;
  std::int64_t generation = 0;
  const NamespaceInputs* ns = nullptr;  // its namespace's (required)
  TimePoint now{};
  const BlockedWrite* blocked = nullptr;  // this Deployment's, if any
  // Pods of an older template still run or terminate (RolloutStatus::rolling).
  bool rolling = false;
  // The workload's controller has observed this generation (its status says
  // so): only then is a pod seen known to be of this template. Before, the
  // controller may have made pods of the generation before without writing
  // a status yet, which RolloutStatus::rolling does not count as rolling.
  bool observed = false;
  // The workload's measured drains, oldest first (budget::DrainBook).
  std::span<const budget::DrainSample> drains{};
  // A pod of its newest template, as the kubelet runs it (PodBook); null
  // when none was seen.
  const SeenPod* pod = nullptr;
  // The object of an admission request: the webhook puts the budget into
  // the request itself, so fields the request sets back are neither a
  // repair to record nor a fight.
  bool in_request = false;
};

struct PlannedWrite {
  nlohmann::json configuration;  // the server-side apply configuration
  bool replace_hooks = false;    // swap the hooks with a JSON patch (takeover.h)
  bool force = false;            // spec.preStop.existing: Replace
  std::string changes;           // "terminationGracePeriodSeconds: 30 -> 46, ..."
  std::size_t plan_hash = 0;     // of `changes`: what a BlockedWrite is about
  double propagation_seconds = 0;
  // gracekeeper tuned this Deployment before: the write is a re-tune, which
  // waits for a rollout slot (changes.maxConcurrentRollouts).
  bool retune = false;
  // The findings of the Deployment once written: folded into the Tuned
  // Event, so a first tune is one Event.
  std::vector<budget::Finding> findings_after;
};

struct DeploymentDecision {
  std::string policy_key;  // "ns/name" of the governing policy; "" when none
  std::string policy_name;
  // Several policies select this Deployment and none is named: their names,
  // sorted. Each of them reports the conflict in its status.
  std::vector<std::string> contenders;
  bool wait_for_policy = false;  // the governing policy is not measured yet
  // Fields gracekeeper wrote (per gracekeeper.dev/applied) that hold
  // another value now: someone set them back. Paths as a conflict names
  // them, and "field: gracekeeper's -> now" for messages.
  std::vector<std::string> set_back_paths;
  std::vector<std::string> set_back;
  // Set back again within minIntervalSeconds of gracekeeper's last repair
  // (`setBack` in gracekeeper.dev/applied): a FieldFight. `write` is not
  // sent; the fight is over, and the write due, after this long.
  std::optional<std::chrono::nanoseconds> fight_ends_in;
  std::chrono::seconds min_interval{0};  // the policy's changes.minIntervalSeconds
  // The policy's changes.maxConcurrentRollouts; the reconciler resolves it
  // against the workloads the policy governs (max_rollouts()).
  budget::IntOrPercent max_concurrent_rollouts{1, false};
  bool blocked = false;  // the write is the one facts.blocked refused
  DeploymentState state;
  std::optional<PlannedWrite> write;
  // The Events of the current state (regarding unset), reported once each.
  std::vector<kube::EventRecord> events;
  // A change held back by churn control becomes due then.
  std::optional<std::chrono::nanoseconds> requeue_after;
};

DeploymentDecision decide_deployment(const DeploymentFacts&);

// Re-tunes that may roll out at once: changes.maxConcurrentRollouts
// resolved against the `governed` workloads (rounded up, at least 1).
std::int64_t max_rollouts(const budget::IntOrPercent& setting, std::int64_t governed);

kube::EventRecord finding_event(const budget::Finding&);
// Whether `manager`'s server-side apply entry (operation Apply) in a
// Deployment's metadata.managedFields owns `field`, a path as a conflict
// names it (".spec.template.spec.containers[name=\"app\"].lifecycle.preStop"),
// or a field under it.
bool applier_owns(const nlohmann::json& managed_fields, std::string_view manager,
                  std::string_view field);
// The managers (any operation) whose managedFields entry owns `field` or a
// field under it, sorted, gracekeeper's own left out.
std::vector<std::string> owners_of(const nlohmann::json& managed_fields, std::string_view field);
// The Tuned Event of a successful write: the changes, the policy and figure,
// and the findings of the written Deployment; a Warning when one of them is.
kube::EventRecord tuned_event(const PlannedWrite&, const std::string& policy_name);

}  // namespace gracekeeper::controller
