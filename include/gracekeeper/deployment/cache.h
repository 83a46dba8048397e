// What the operator's informers keep of each object: projections with only
// the fields the reconcilers read (docs/architecture.md, "Data flow").
#pragma once

#include <cstdint>
#include <expected>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/budget/deployment.h"
#include "gracekeeper/budget/policy.h"
#include "gracekeeper/kube/client.h"

namespace gracekeeper::controller {

// The field manager of every gracekeeper write.
inline constexpr const char* kFieldManager = "gracekeeper";

inline const kube::Resource shutdown_policies{"gracekeeper.dev", "v1alpha1", "shutdownpolicies",
                                              true};

// Where a Deployment's (or StatefulSet's) rollout stands, from its status:
// what `kubectl rollout status` reads.
struct RolloutStatus {
  std::int64_t desired = 1;  // spec.replicas
  std::int64_t observed_generation = 0;
  std::int64_t replicas = 0;  // status.replicas: old and new pods
  std::int64_t updated = 0;
  std::int64_t available = 0;
  bool deadline_exceeded = false;  // Progressing=False, ProgressDeadlineExceeded
  // status.terminatingReplicas: pods of the Deployment that are shutting
  // down (their preStop wait, then their grace). Reported by API servers
  // with DeploymentReplicaSetTerminatingReplicas; 0 where it is absent.
  std::int64_t terminating = 0;
  bool paused = false;  // spec.paused: the controller starts no rollout
  // A StatefulSet's: it replaces pods in place, and its updateStrategy can
  // hold pods back for good (OnDelete, or an ordinal below the partition).
  bool stateful = false;
  bool on_delete = false;
  std::int64_t partition = 0;
  // A Deployment's Progressing condition's reason: NewReplicaSetAvailable
  // once a rollout completed (it stays so when a pod is lost later).
  std::string progressing_reason;
  // A StatefulSet's status.currentRevision differs from its updateRevision:
  // the controller has not finished rolling every pod to the new revision
  // (set equal once all are updated and ready; a pod lost later leaves them).
  bool revisions_differ = false;

  // The controller has seen `generation` and every replica is new and
  // available with no old pod left, or the rollout gave up.
  bool complete(std::int64_t generation) const;
  // The controller is replacing pods for a new template: it has not
  // observed `generation`, new pods are missing, old ones remain, or (a
  // Deployment) the new ones are not yet available before its rollout
  // first completed. A workload whose rollout finished and that later lost a
  // pod (a crash loop, a node gone) is not replacing anything.
  bool replacing(std::int64_t generation) const;
  // A rollout that holds a slot of changes.maxConcurrentRollouts: replacing
  // pods, and able to move. A paused Deployment never moves, and one past
  // its progress deadline has stalled: neither holds a slot (the reconciler
  // also releases a rollout that made no progress for a while: RolloutStalled).
  bool in_flight(std::int64_t generation) const;
  // Pods of an older template may still run or shut down: the controller
  // has not observed `generation` yet, some pods are not of the current
  // template, or pods are still terminating. Their preStop wait and grace
  // are the old template's, so the budget does not hold for them yet (a
  // paused or stalled rollout stays rolling). A Deployment the controller
  // never observed has no pods: not rolling.
  bool rolling(std::int64_t generation) const;
};

// An opted-in Deployment, kept small: one is cached per opted-in Deployment
// of the cluster. The budget engine's projection is not kept; project()
// builds it from `source` for each reconcile.
struct CachedDeployment {
  std::string uid;
  std::int64_t generation = 0;
  // The other field managers that write this Deployment with server-side
  // apply (managedFields operation Apply), sorted: GitOps controllers whose
  // fields gracekeeper does not take over unless told to. Usually empty, so
  // the first apply can force over the Update writers (kubectl create/edit,
  // controllers) in one request instead of a conflict and a second apply.
  std::vector<std::string> appliers;
  RolloutStatus rollout;
  // The policy named in gracekeeper.dev/applied: the one that tuned it last.
  std::string tuned_by;
  // The fields of the Deployment that budget::project_deployment reads (and
  // nothing else: no managedFields, no env, no status, only gracekeeper's
  // annotations), as MessagePack deflated with a preset dictionary of the
  // usual field names (cache.cpp): a quarter of the MessagePack, about a
  // tenth of the projection's heap. Inflated by each project().
  std::string source;

  // The budget engine's view; a Deployment it cannot read gives its errors,
  // so the reconciler can report them instead of guessing.
  std::expected<budget::Deployment, budget::FieldErrors> project() const;
  // The same in two steps: the budget fields as an object (discarded if
  // unreadable), then the engine's view of them.
  budget::Json object() const;
  static std::expected<budget::Deployment, budget::FieldErrors> project(const budget::Json&);
};

// What project() reads of a Deployment object: a copy with only those
// fields. Fields of the wrong type are kept as they are, so the errors of a
// Deployment the engine cannot read are the same.
nlohmann::json budget_fields(const nlohmann::json& object);

// The members of a Deployment that project_deployment reads (budget fields,
// uid, generation, the managers of managedFields), as kube::FieldSet paths:
// the Deployment informer builds nothing else of each object it receives.
std::vector<std::string> deployment_fields();

// Whether a Deployment with this metadata opted in: gracekeeper.dev/enabled
// is "true". The Deployment informer builds nothing but the metadata of the
// others (InformerOptions::wanted).
bool opted_in(const nlohmann::json& metadata);

RolloutStatus rollout_status(const nlohmann::json& object);

// nullopt for a Deployment that is not opted in: such Deployments are never
// cached and never touched.
std::optional<CachedDeployment> project_deployment(const nlohmann::json& object);

// An opted-in StatefulSet, cached like a Deployment: the engine reads it as
// one (budget::Deployment::kind "StatefulSet"), and its rollout status is
// read from the StatefulSet's.
std::optional<CachedDeployment> project_statefulset(const nlohmann::json& object);
std::vector<std::string> statefulset_fields();

inline const kube::Resource statefulsets{"apps", "v1", "statefulsets", true};

struct CachedPolicy {
  std::string name;
  std::string namespace_;
  std::string uid;
  std::string resource_version;
  std::int64_t generation = 0;
  std::expected<budget::PolicySpec, budget::FieldErrors> spec;
  nlohmann::json status;  // as the server has it; null when none yet
};

std::optional<CachedPolicy> project_policy(const nlohmann::json& object);

}  // namespace gracekeeper::controller
