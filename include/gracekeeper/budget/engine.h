// The budget engine: (policy, propagation, deployment, server capabilities)
// -> (desired termination settings, findings). Pure: no I/O, no clock unless
// one is passed in. `gracekeeper plan`/`check` and the operator run this same code.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/budget/deployment.h"
#include "gracekeeper/budget/policy.h"

namespace gracekeeper::budget {

enum class Severity { Info, Warning, Error };
std::string to_string(Severity);

// One reported check (docs/api.md, "Checks that are reported").
struct Finding {
  std::string code;  // BudgetExceeded, NoPreStopWait, ...
  Severity severity = Severity::Info;
  std::string container;  // empty when the finding is about the whole Deployment
  std::string message;
};

struct Capabilities {
  // The API server has the native `sleep` preStop action (Kubernetes >= 1.30).
  bool native_sleep = true;
  // A StatefulSet's rollingUpdate.maxUnavailable is honoured (Kubernetes >=
  // 1.35); before, a StatefulSet replaced one pod at a time whatever it said.
  bool statefulset_max_unavailable = true;
  bool operator==(const Capabilities&) const = default;
};

struct Context {
  const PolicySpec* policy = nullptr;  // required
  std::string policy_name;             // recorded in the applied annotation
  double propagation_seconds = 0;      // the measured (or static) quantile
  Capabilities capabilities;
  // Whether a Service selects the pods; nullopt when unknown (offline without
  // Services in the input): then a container with ports counts as serving.
  std::optional<bool> behind_service;
  // Now, for churn control. nullopt (offline) disables the min-interval rule.
  std::optional<std::chrono::system_clock::time_point> now;
  // A figure rose above the one the Deployment was tuned to (a fallback
  // higher than the measured propagation, a longer measured drain), and the
  // Deployment holds the budget of that one: a change is no repair, and
  // churn control applies to it.
  bool figure_raise = false;
  // The workload's measured drain (drain.source Observed, docs/api.md, "The
  // measured drain"): the grace covers it when it is longer than the
  // declared drain (drainSeconds or gracekeeper.dev/drain-seconds).
  std::optional<std::int64_t> measured_drain_seconds;
  // A pod of the workload as it runs (the operator's PodBook): the mesh
  // proxies an injector added to it are handed their budget through the
  // template's annotations (docs/api.md, "Mesh proxies"). Null offline.
  const Deployment* pod = nullptr;
};

// The numbers of the formula in docs/api.md, "The budget".
struct Budget {
  double propagation_seconds = 0;
  std::int64_t lb_delay_seconds = 0;
  std::int64_t unclamped_pre_stop_seconds = 0;  // ceil(safetyFactor * propagation + lbDelay)
  std::int64_t pre_stop_seconds = 0;            // clamped to [minSeconds, maxSeconds]
  bool clamped = false;
  std::int64_t drain_seconds = 0;
  // drain_seconds is the measured drain, longer than the declared one
  // (recorded in gracekeeper.dev/applied as `drain`).
  bool measured_drain = false;
  std::int64_t sidecar_drain_seconds = 0;
  // The native sidecars' own preStop sleeps, added up: they run one after
  // another, once the app containers have exited (0 without a Deployment).
  std::int64_t sidecar_pre_stop_seconds = 0;
  std::int64_t reserve_seconds = 0;
  // preStop + drain + sidecars (their preStop sleeps + sidecarDrainSeconds) + reserve
  std::int64_t grace_seconds = 0;
};

struct ContainerPlan {
  std::string name;
  // Remove: gracekeeper's own hook goes when the wait falls to 0 (no `sleep 0`).
  enum class Action { Keep, SetSleep, SetExecSleep, Remove };
  Action action = Action::Keep;
  std::int64_t pre_stop_seconds = 0;  // the wait this container will have (or is counted as having)
  bool user_hook_kept = false;
  bool gracekeeper_hook = false;  // after the plan, the hook is gracekeeper's (set now or before)
};

// One field that changes, for the `plan` summary and `Tuned` events.
struct Change {
  std::string field;  // "terminationGracePeriodSeconds", "strategy", "containers[checkout].preStop"
  std::string from;
  std::string to;
};

struct Plan {
  Budget budget;
  // Desired values; equal to the current ones when nothing changes.
  std::int64_t grace_seconds = 0;
  // gracekeeper set the grace (now or earlier); a grace the user chose is never lowered.
  bool grace_owned = false;
  Strategy strategy;
  bool manage_strategy = false;  // whether gracekeeper owns spec.strategy for this Deployment
  std::vector<ContainerPlan> containers;
  // The mesh annotations of the pod template gracekeeper states: those it
  // sets now, and those it set before that the template still has.
  std::map<std::string, std::string> pod_annotations;
  std::vector<Change> changes;
  // The current settings break the budget (grace too short or wait missing/too short):
  // churn control never delays a repair.
  bool budget_broken = false;
  // A change was due but churn control (minIntervalSeconds) held it back
  // until `due_at`: the reconciler comes back then, with no other event.
  bool deferred = false;
  std::optional<std::chrono::system_clock::time_point> due_at;
  // The user's own values to record with this plan: the recorded ones, plus
  // the current value of each field this plan changes for the first time.
  // nullopt when the Deployment carries an older annotation without them.
  std::optional<UserValues> user;
  // The annotation's `setBack` to write: the one recorded
  // (AppliedRecord::set_back). The controller sets it to now when the plan
  // writes back a field another writer set back (a repair).
  std::optional<std::chrono::system_clock::time_point> set_back;
  // Annotation errors: the Deployment must be left as it was.
  FieldErrors invalid;
  std::vector<Finding> findings;

  bool changed() const { return !changes.empty(); }
};

// A ShutdownPolicy a Deployment could be governed by, for select_policy.
struct PolicyCandidate {
  std::string name;
  const LabelSelector* selector = nullptr;  // required
  std::string origin;                       // where it came from, for messages ("" if obvious)
};

// The governing policy among the candidates of the Deployment's namespace
// (docs/api.md, "Opting a Deployment in"): the one named by gracekeeper.dev/policy,
// else the one whose selector matches the Deployment's labels. Otherwise a
// Warning finding, PolicyNotFound, NoMatchingPolicy or AmbiguousPolicy, whose
// message ends with `where` ("among the inputs", "in namespace shop").
std::expected<std::size_t, Finding> select_policy(const Deployment&,
                                                  const std::vector<PolicyCandidate>& candidates,
                                                  std::string_view where);

// Computes the budget alone (docs/api.md, "The budget").
Budget compute_budget(const PolicySpec&, double propagation_seconds, std::int64_t drain_seconds);

// Plans the change for one Deployment. Findings describe the Deployment as it
// is now (what `check` reports), plus what planning decided (BudgetClamped,
// ExistingPreStopKept).
Plan plan(const Deployment&, const Context&);

// The app containers gracekeeper.dev/containers names, as indices into
// Deployment::containers in order; nullopt without the annotation. Names it
// cannot use (unknown, a native sidecar, empty) are left out: plan() reports
// them as invalid.
std::optional<std::vector<std::size_t>> annotated_containers(const Deployment&);

// A preStop hook as messages name it: "none", "sleep 6s", "exec sleep 2.5s",
// "exec", "httpGet".
std::string describe(const PreStopHook&);

// Only the findings on the current state, for `check`.
std::vector<Finding> check(const Deployment&, const Context&);

}  // namespace gracekeeper::budget
