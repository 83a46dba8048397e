// The projection of a Deployment that the budget engine works on: only the
// fields that matter for graceful termination. Built from a Deployment object
// (decoded JSON) by `project_deployment`, which reports wrong types with the
// field path instead of guessing.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <limits>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gracekeeper/budget/types.h"

namespace gracekeeper::budget {

inline constexpr const char* kAnnotationEnabled = "gracekeeper.dev/enabled";
inline constexpr const char* kAnnotationPolicy = "gracekeeper.dev/policy";
inline constexpr const char* kAnnotationDrainSeconds = "gracekeeper.dev/drain-seconds";
inline constexpr const char* kAnnotationContainers = "gracekeeper.dev/containers";
inline constexpr const char* kAnnotationApplied = "gracekeeper.dev/applied";

// Kubernetes defaults that apply when a manifest leaves a field out.
inline constexpr std::int64_t kDefaultGraceSeconds = 30;
inline constexpr std::int64_t kDefaultReplicas = 1;

struct Probe {
  enum class Kind { None, HttpGet, TcpSocket, Exec, Grpc };
  Kind kind = Kind::None;
  // What the probe hits, for comparing liveness with readiness:
  // "http:8080/healthz", "tcp:8080", "grpc:9090/", "exec:cat /tmp/ready".
  std::string target;
  bool operator==(const Probe&) const = default;
};

struct PreStopHook {
  enum class Kind { None, Sleep, ExecSleep, Exec, HttpGet, TcpSocket };
  // ExecSleep: an exec hook that only sleeps (`sleep 0.5`, `sh -c "sleep 2; sleep 3"`).
  Kind kind = Kind::None;
  // How long the hook waits before the app is told to stop, in milliseconds
  // (rounded down): the native sleep action, or the leading sleeps of an exec
  // hook (docs/api.md, "The budget"). nullopt when it cannot be known (httpGet,
  // tcpSocket, a command that is not read).
  std::optional<std::int64_t> wait_ms;
  // The least time the hook runs, in milliseconds (rounded up): all its
  // sleeps. Exact for Sleep and ExecSleep. nullopt when not known.
  std::optional<std::int64_t> length_ms;
  // wait_ms in whole seconds, rounded down (what the termination audit and
  // the FieldFight check compare).
  std::optional<std::int64_t> seconds;
  // Written by gracekeeper (per the applied annotation offline, per managedFields
  // in the cluster). Only an owned hook is ever updated under `existing: Keep`.
  bool owned = false;
  // The handler as written, compact JSON: what gracekeeper records as the
  // user's own hook before replacing it. Without a hook: empty, or "{}" in
  // an empty `lifecycle: {}`.
  std::string json;
  bool operator==(const PreStopHook&) const = default;
};

// Whole seconds in milliseconds, saturating (a hook's seconds are the user's).
inline std::int64_t milliseconds_of(std::int64_t seconds) {
  std::int64_t ms = 0;
  if (__builtin_mul_overflow(seconds, 1000, &ms)) {
    return seconds > 0 ? std::numeric_limits<std::int64_t>::max()
                       : std::numeric_limits<std::int64_t>::min();
  }
  return ms;
}

// Milliseconds in whole seconds, rounded up: what a grace period must cover.
inline std::int64_t seconds_covering(std::int64_t ms) {
  return ms / 1000 + (ms % 1000 > 0 ? 1 : 0);
}

struct Container {
  std::string name;
  // A native sidecar: an entry of initContainers with `restartPolicy: Always`.
  // It runs beside the app and is stopped only after the app containers have
  // exited, so its preStop hook runs after theirs, not at the same time.
  bool sidecar = false;
  bool has_ports = false;
  std::vector<std::string> command;
  std::vector<std::string> args;
  PreStopHook pre_stop;
  Probe readiness;
  Probe liveness;
  // An istio-proxy's environment variables of its shutdown (is_proxy_env):
  // nothing else of any container's environment is kept.
  std::map<std::string, std::string> proxy_env;
  bool operator==(const Container&) const = default;
};

struct Strategy {
  enum class Type { RollingUpdate, Recreate };
  Type type = Type::RollingUpdate;
  // Kubernetes defaults both to 25% when absent.
  IntOrPercent max_surge{25, true};
  IntOrPercent max_unavailable{25, true};
  bool operator==(const Strategy&) const = default;
};

// A StatefulSet's spec.updateStrategy and podManagementPolicy: read and
// reported, never written. A StatefulSet replaces each pod in place, with no
// surge, so no strategy keeps its capacity through a rollout.
struct StatefulUpdate {
  bool on_delete = false;      // type OnDelete: a pod takes a new template only when deleted
  std::int64_t partition = 0;  // pods with a lower ordinal keep the old template
  IntOrPercent max_unavailable{1, false};  // pods replaced at once (Kubernetes >= 1.35)
  bool parallel = false;                   // podManagementPolicy Parallel
  bool operator==(const StatefulUpdate&) const = default;
};

// The user's own values of the fields gracekeeper changed (`user` in the
// applied annotation), each recorded the first time gracekeeper changed that
// field and kept from then on: what `gracekeeper revert` restores, and the
// floor of the grace. A field gracekeeper never changed is not recorded.
struct UserValues {
  std::optional<std::int64_t> grace_seconds;
  std::optional<Strategy> strategy;  // always a RollingUpdate (Recreate is never converted)
  // Per container: its preStop handler as compact JSON; nullopt for none,
  // "{}" for none in an empty `lifecycle: {}`.
  std::map<std::string, std::optional<std::string>> pre_stop;
  // Per mesh annotation of the pod template (budget/mesh.h): its value;
  // nullopt for none.
  std::map<std::string, std::optional<std::string>> annotations;
  bool empty() const {
    return !grace_seconds && !strategy && pre_stop.empty() && annotations.empty();
  }
  bool operator==(const UserValues&) const = default;
};

// What gracekeeper recorded in `gracekeeper.dev/applied` the last time it changed this Deployment.
struct AppliedRecord {
  std::string policy;
  std::int64_t pre_stop_seconds = 0;
  std::int64_t grace_seconds = 0;
  bool grace_owned = false;  // gracekeeper raised the grace to grace_seconds
  double propagation_seconds = 0;
  // `drain`: the measured drain the grace was planned with, when it was
  // longer than the declared one (drain.source Observed).
  std::optional<std::int64_t> drain_seconds;
  std::vector<std::string> containers;  // the containers that received gracekeeper's wait
  // The wait gracekeeper wrote, per container (`waits` in the annotation).
  // nullopt for an annotation of the older format, which records one wait
  // (`preStop`) for every container listed.
  std::optional<std::map<std::string, std::int64_t>> waits;
  std::optional<std::chrono::system_clock::time_point> time;
  // `mesh`: the mesh annotations gracekeeper wrote on the pod template, with
  // their values (docs/api.md, "Mesh proxies").
  std::map<std::string, std::string> mesh;
  // `setBack`: when gracekeeper last wrote its fields again after another
  // writer had set them back. A second set-back within minIntervalSeconds
  // of it is a FieldFight; the object says so, not the operator's memory.
  std::optional<std::chrono::system_clock::time_point> set_back;
  // nullopt for an annotation written before the user's values were recorded:
  // they are unknown, and stay unrecorded (gracekeeper's own values must
  // never pass for the user's).
  std::optional<UserValues> user;
  bool operator==(const AppliedRecord&) const = default;
};

struct Deployment {
  std::string kind = "Deployment";  // or StatefulSet (no strategy managed), or Pod (checked only)
  std::string name;
  std::string namespace_;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> pod_labels;
  // The pod template's (a Pod's own) annotations the meshes read their
  // proxy's shutdown from (is_mesh_annotation); no other is kept.
  std::map<std::string, std::string> pod_annotations;
  std::int64_t replicas = kDefaultReplicas;
  Strategy strategy;        // a Deployment's
  StatefulUpdate stateful;  // a StatefulSet's
  std::int64_t grace_seconds = kDefaultGraceSeconds;
  bool grace_set = false;  // false when the manifest relied on the 30 s default
  // The app containers in order, then the native sidecars in order.
  std::vector<Container> containers;
  std::optional<AppliedRecord> applied;  // absent or unreadable annotation: nullopt
  bool operator==(const Deployment&) const = default;
};

// Builds the projection. Errors name the field path and what was expected
// (`spec.template.spec.terminationGracePeriodSeconds: expected an integer >= 0, got "abc"`).
std::expected<Deployment, FieldErrors> project_deployment(const Json& object);

// Sets the `gracekeeper.dev/applied` annotation to `text` and reads it as
// project_deployment does: `applied`, and which hooks are gracekeeper's.
void set_applied_annotation(Deployment&, std::string text);

// The wait gracekeeper recorded for this container, if it wrote one: per
// container in the current format, else the one `preStop` of the older format
// for every listed container.
std::optional<std::int64_t> recorded_wait(const AppliedRecord&, const std::string& container);

// The container's hook is no longer the one gracekeeper wrote (per `record`),
// and it waits at least as long: the user lengthened it. It is the user's
// new value: kept, never set back to gracekeeper's shorter one, and no
// set-back (docs/api.md, "What gracekeeper writes back").
bool lengthened_by_user(const AppliedRecord& record, const Container&);

bool is_deployment(const Json& object);

// apps/v1 StatefulSet: planned for its preStop wait and grace only (it
// replaces its pods in place; its updateStrategy is reported, not written).
bool is_statefulset(const Json& object);

// v1 Pod (`kubectl get pod -o yaml`): checked as it runs, never planned
// (its preStop and grace cannot change; its workload's template can).
bool is_pod(const Json& object);

// A value for "expected X, got Y" messages: `string "abc"`, `number .inf`,
// `null`, `a mapping`, `a list`.
std::string describe_value(const Json& value);

// `gracekeeper.dev/enabled: "true"`.
bool opted_in(const Deployment&);

// "namespace/name", or "name" without a namespace.
std::string key(const Deployment&);

}  // namespace gracekeeper::budget
