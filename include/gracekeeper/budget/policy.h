// ShutdownPolicy: the typed spec with every default of docs/api.md ("ShutdownPolicy
// spec"), and the parser
// that turns a ShutdownPolicy object (already decoded from YAML/JSON) into it.
// The operator reuses this parser for what the CRD schema cannot check.
#pragma once

#include <expected>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/budget/types.h"

namespace gracekeeper::budget {

inline constexpr const char* kApiGroup = "gracekeeper.dev";
inline constexpr const char* kApiVersion = "gracekeeper.dev/v1alpha1";
inline constexpr const char* kPolicyKind = "ShutdownPolicy";

enum class Mode { Enforce, DryRun };
enum class PropagationSource { Static, Prometheus, Observed };
enum class DrainSource { Static, Observed };
enum class PreStopAction { Auto, Sleep, Exec };
enum class ExistingHook { Keep, Replace };
// A Deployment whose pods no Service selects: nothing routes to them, so
// by default (Skip) they get no preStop wait. Wait: they get one anyway
// (pods reached some other way, e.g. by an ingress that reads pod IPs).
enum class WithoutService { Skip, Wait };

std::string to_string(Mode);
std::string to_string(PropagationSource);
std::string to_string(DrainSource);
std::string to_string(PreStopAction);
std::string to_string(ExistingHook);

// metav1.LabelSelector.
struct LabelSelector {
  enum class Operator { In, NotIn, Exists, DoesNotExist };
  struct Requirement {
    std::string key;
    Operator op = Operator::Exists;
    std::vector<std::string> values;
  };
  std::map<std::string, std::string> match_labels;
  std::vector<Requirement> match_expressions;

  // An empty selector matches everything (docs/api.md, "ShutdownPolicy spec": "empty = all").
  bool matches(const std::map<std::string, std::string>& labels) const;
};

struct PrometheusQuery {
  std::string name;
  std::string query;
};

struct ExternalLoadBalancer {
  int health_check_interval_seconds = 10;
  int unhealthy_threshold = 2;
};

// A consumer of endpoint changes besides kube-proxy (an ingress or Gateway API
// controller, a mesh) and the declared time it takes to act on a change once
// the change is visible in the API (docs/api.md, "Consumers").
struct DeclaredConsumer {
  std::string name;
  double sync_seconds = 0;
};

// The name consumerSyncSeconds stands for in the status and in messages.
inline constexpr std::string_view kServiceConsumer = "kube-proxy";

// Source Observed: gracekeeper's own EndpointSlice timing (docs/api.md, "Propagation sources").
struct ObservedSource {
  int window_seconds = 3600;  // the samples of this long ago and newer count
  int min_samples = 20;       // fewer in the window: fallback, MetricsAvailable=False
  // A declared allowance for what kube-proxy adds after the change is visible
  // in the API (its minSyncPeriod); added to the quantile of the samples.
  double consumer_sync_seconds = 1;
  // The other consumers; the slowest of all of them is added instead.
  std::vector<DeclaredConsumer> consumers;

  // The consumer with the largest allowance: kube-proxy (consumer_sync_seconds)
  // unless a declared one is slower; the first of equals.
  DeclaredConsumer slowest_consumer() const;
};

struct PolicySpec {
  Mode mode = Mode::Enforce;
  LabelSelector selector;

  struct Propagation {
    PropagationSource source = PropagationSource::Static;
    double static_seconds = 10;
    double quantile = 0.99;
    std::vector<PrometheusQuery> prometheus_queries;
    double safety_factor = 1.5;
    std::optional<ExternalLoadBalancer> external_load_balancer;
    ObservedSource observed;
  } propagation;

  struct PreStop {
    int min_seconds = 5;
    int max_seconds = 60;
    PreStopAction action = PreStopAction::Auto;
    ExistingHook existing = ExistingHook::Keep;
    WithoutService without_service = WithoutService::Skip;
  } pre_stop;

  int drain_seconds = 30;
  // The app's drain as its pods' terminations show it (docs/api.md, "The
  // measured drain"): with source Observed, the grace covers the quantile of
  // the workload's measured drains, never less than drainSeconds.
  struct Drain {
    DrainSource source = DrainSource::Static;
    double quantile = 0.9;
    int min_samples = 5;         // fewer in the window (and no kill): drainSeconds
    int window_seconds = 86400;  // the terminations of this long ago and newer count
    int max_seconds = 600;       // the measured figure never goes above this
  } drain;
  int sidecar_drain_seconds = 0;
  int reserve_seconds = 10;

  struct Rollout {
    bool manage = true;
    IntOrPercent max_surge{1, false};
  } rollout;

  struct Changes {
    int min_interval_seconds = 3600;
    int decrease_threshold_seconds = 2;
    // Re-tunes of Deployments gracekeeper tuned before (a risen figure, a
    // changed policy) roll out at most this many at a time per policy, an
    // integer or a percentage of its governed Deployments (rounded up, at
    // least 1); the next starts when one of them completes.
    IntOrPercent max_concurrent_rollouts{10, true};
  } changes;
};

// A ShutdownPolicy object: identity plus spec.
struct Policy {
  std::string name;
  std::string namespace_;  // empty when the manifest does not say
  PolicySpec spec;
};

// Parses `spec` (a JSON object, or null for all defaults). Every default of
// docs/api.md ("ShutdownPolicy spec") is applied; every problem is reported with its field path,
// e.g. `spec.preStop.minSeconds: must be <= maxSeconds (got 30 > 20)`. Unknown fields are errors
// (the CRD is structural; a typo must not pass silently).
std::expected<PolicySpec, FieldErrors> parse_policy_spec(const Json& spec);

// Parses a whole ShutdownPolicy object (apiVersion, kind, metadata, spec).
std::expected<Policy, FieldErrors> parse_policy(const Json& object);

// True when the object is a gracekeeper ShutdownPolicy by apiVersion/kind.
bool is_policy(const Json& object);

}  // namespace gracekeeper::budget
