// A ShutdownPolicy's status, computed without I/O: what the operator would
// write given what it measured and what its Deployments look like. Built
// against the status the server has, so that an unchanged state gives an
// identical object (no write) and conditions keep their transition times.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gracekeeper/budget/engine.h"

namespace gracekeeper::controller {

using TimePoint = std::chrono::system_clock::time_point;

// One governed Deployment as its last reconcile left it.
struct DeploymentState {
  // The current settings satisfy the budget, and every pod carries them.
  bool compliant = false;
  // Pods of an older template still run or terminate (RolloutStatus::rolling):
  // the budget does not hold for them yet.
  bool rolling = false;
  bool pending = false;    // a change is due but held back (DryRun, churn control, conflict)
  bool violating = false;  // at least one error finding remains
  // The settings do not hold the budget: an error, or a warning that breaks
  // it (PreStopUnknownLength: the wait is not known to cover propagation).
  bool broken = false;
  // Its running pod differs from its template in what the budget reads
  // (PodDiffersFromTemplate), whether or not the budget holds on the pod.
  bool pod_differs = false;
  // The drain its budget covers: the declared one, or the measured one when
  // longer (drain.source Observed).
  std::int64_t drain_seconds = 0;
  // Rolling is the only reason it is not compliant: the settings hold and
  // nothing is pending. BudgetHolds says `Rolling` only when every
  // not-compliant workload is so; a broken budget is never hidden behind it.
  bool holds_but_rolling() const { return rolling && !violating && !broken && !pending; }
};

struct DeploymentCounts {
  std::int64_t managed = 0;
  std::int64_t compliant = 0;
  std::int64_t pending = 0;
  std::int64_t violations = 0;
  std::vector<std::string> not_compliant;  // names, sorted, for the BudgetHolds message
  // Deployments this policy selects together with other policies, so that
  // neither governs them: other policy -> those Deployments' names.
  std::map<std::string, std::vector<std::string>> shared_with;
  // Pods of an older template still run or terminate (DeploymentState::rolling).
  std::int64_t rolling = 0;
  // Of not_compliant, those whose settings hold and only their pods roll.
  std::int64_t only_rolling = 0;
  // Those whose running pod differs from the template (DeploymentState::pod_differs).
  std::int64_t pods_differ = 0;
  // The longest drain a governed workload's budget covers, and its name
  // (the first of equals in key order): status.drain.
  std::int64_t longest_drain = 0;
  std::string longest_drain_of{};
};

struct PropagationState {
  double seconds = 0;
  std::string source;  // Static, Prometheus, Observed
  TimePoint sampled_at{};
  std::string message;
  bool available = true;   // MetricsAvailable
  std::string reason;      // MetricsAvailable's reason
  std::string consumer{};  // the slowest consumer, when measured (Measurement::consumer)
};

// status.terminations: the termination audit's counts (termination_audit.h).
struct TerminationTotals {
  std::int64_t observed = 0;
  std::int64_t late = 0;
  std::optional<TimePoint> last_late_at;
  // The measured drains (audit/drain.h): terminations measured, and those
  // the kubelet killed at the grace.
  std::int64_t drained = 0;
  std::int64_t cut_short = 0;
  std::optional<TimePoint> last_cut_short_at;
  bool operator==(const TerminationTotals&) const = default;
};

struct StatusInput {
  std::int64_t generation = 0;
  double quantile = 0.99;
  std::string drain_source = "Static";  // spec.drain.source
  // Set when the spec is invalid (Ready=False, InvalidSpec); the rest is then ignored.
  std::optional<std::string> invalid_spec;
  std::optional<PropagationState> propagation;  // nullopt: not measured yet
  std::optional<budget::Budget> recommended;
  std::optional<DeploymentCounts> deployments;  // nullopt: not all reconciled yet
  // The StatefulSets' (nullopt: StatefulSets are not governed, or not
  // counted yet). Written as status.statefulSets once one is governed.
  std::optional<DeploymentCounts> statefulsets;
  std::optional<TerminationTotals> terminations;  // nullopt: none audited, none written before
  TimePoint now{};
};

// The full status object to write. `current` is the status on the server
// (null if none): unchanged parts keep its timestamps.
nlohmann::json desired_status(const StatusInput&, const nlohmann::json& current);

}  // namespace gracekeeper::controller
