#include "gracekeeper/budget/policy.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace gracekeeper::budget {
namespace {

Json parse_json(const std::string& text) {
  return Json::parse(text);
}

std::string describe_errors(const FieldErrors& errors) {
  std::string out;
  for (const auto& error : errors) out += "\n  " + error.format();
  return out;
}

template <typename T>
std::string describe_errors(const std::expected<T, FieldErrors>& parsed) {
  return parsed ? std::string() : describe_errors(parsed.error());
}

PolicySpec parse_valid_spec(const std::string& text) {
  auto parsed = parse_policy_spec(parse_json(text));
  EXPECT_TRUE(parsed.has_value()) << text << describe_errors(parsed);
  return parsed.value_or(PolicySpec{});
}

// Every default of docs/api.md ("ShutdownPolicy spec"), field by field.
void expect_defaults(const PolicySpec& spec) {
  EXPECT_EQ(spec.mode, Mode::Enforce);
  EXPECT_TRUE(spec.selector.match_labels.empty());
  EXPECT_TRUE(spec.selector.match_expressions.empty());
  EXPECT_EQ(spec.propagation.source, PropagationSource::Static);
  EXPECT_EQ(spec.propagation.static_seconds, 10);
  EXPECT_EQ(spec.propagation.quantile, 0.99);
  EXPECT_TRUE(spec.propagation.prometheus_queries.empty());
  EXPECT_EQ(spec.propagation.safety_factor, 1.5);
  EXPECT_FALSE(spec.propagation.external_load_balancer.has_value());
  EXPECT_EQ(spec.pre_stop.min_seconds, 5);
  EXPECT_EQ(spec.pre_stop.max_seconds, 60);
  EXPECT_EQ(spec.pre_stop.action, PreStopAction::Auto);
  EXPECT_EQ(spec.pre_stop.existing, ExistingHook::Keep);
  EXPECT_EQ(spec.drain_seconds, 30);
  EXPECT_EQ(spec.drain.source, DrainSource::Static);
  EXPECT_EQ(spec.drain.quantile, 0.9);
  EXPECT_EQ(spec.drain.min_samples, 5);
  EXPECT_EQ(spec.drain.window_seconds, 86400);
  EXPECT_EQ(spec.drain.max_seconds, 600);
  EXPECT_EQ(spec.sidecar_drain_seconds, 0);
  EXPECT_EQ(spec.reserve_seconds, 10);
  EXPECT_TRUE(spec.rollout.manage);
  EXPECT_EQ(spec.rollout.max_surge, (IntOrPercent{1, false}));
  EXPECT_EQ(spec.changes.min_interval_seconds, 3600);
  EXPECT_EQ(spec.changes.decrease_threshold_seconds, 2);
}

TEST(PolicySpecTest, NullSpecIsAllDefaults) {
  expect_defaults(parse_valid_spec("null"));
}

TEST(PolicySpecTest, EmptySpecIsAllDefaults) {
  expect_defaults(parse_valid_spec("{}"));
}

TEST(PolicySpecTest, NullFieldsAndEmptyObjectsKeepDefaults) {
  // The API server prunes nulls before defaulting; so do we.
  expect_defaults(parse_valid_spec(R"({
    "mode": null, "selector": {}, "drainSeconds": null,
    "propagation": {"source": null, "prometheus": null, "externalLoadBalancer": null},
    "preStop": {}, "rollout": {"maxSurge": null}, "changes": null
  })"));
}

// The example of docs/api.md ("ShutdownPolicy spec"), every value changed from its default where it
// can be.
TEST(PolicySpecTest, FullSpecIsReadFieldByField) {
  const PolicySpec spec = parse_valid_spec(R"json({
    "mode": "DryRun",
    "selector": {
      "matchLabels": {"app.kubernetes.io/part-of": "shop"},
      "matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["web", "api"]},
        {"key": "canary", "operator": "DoesNotExist"}
      ]
    },
    "propagation": {
      "source": "Prometheus",
      "staticSeconds": 12.5,
      "quantile": 0.95,
      "prometheus": {"queries": [
        {"name": "kube-proxy", "query": "histogram_quantile(0.99, x)"},
        {"name": "ingress", "query": "max(y)"}
      ]},
      "safetyFactor": 2,
      "externalLoadBalancer": {"healthCheckIntervalSeconds": 5, "unhealthyThreshold": 3}
    },
    "preStop": {"minSeconds": 3, "maxSeconds": 90, "action": "Exec", "existing": "Replace"},
    "drainSeconds": 45,
    "sidecarDrainSeconds": 5,
    "reserveSeconds": 15,
    "rollout": {"manage": false, "maxSurge": "25%"},
    "changes": {"minIntervalSeconds": 600, "decreaseThresholdSeconds": 4}
  })json");
  EXPECT_EQ(spec.mode, Mode::DryRun);
  EXPECT_EQ(spec.selector.match_labels,
            (std::map<std::string, std::string>{{"app.kubernetes.io/part-of", "shop"}}));
  ASSERT_EQ(spec.selector.match_expressions.size(), 2u);
  EXPECT_EQ(spec.selector.match_expressions[0].key, "tier");
  EXPECT_EQ(spec.selector.match_expressions[0].op, LabelSelector::Operator::In);
  EXPECT_EQ(spec.selector.match_expressions[0].values, (std::vector<std::string>{"web", "api"}));
  EXPECT_EQ(spec.selector.match_expressions[1].key, "canary");
  EXPECT_EQ(spec.selector.match_expressions[1].op, LabelSelector::Operator::DoesNotExist);
  EXPECT_TRUE(spec.selector.match_expressions[1].values.empty());
  EXPECT_EQ(spec.propagation.source, PropagationSource::Prometheus);
  EXPECT_EQ(spec.propagation.static_seconds, 12.5);
  EXPECT_EQ(spec.propagation.quantile, 0.95);
  ASSERT_EQ(spec.propagation.prometheus_queries.size(), 2u);
  EXPECT_EQ(spec.propagation.prometheus_queries[0].name, "kube-proxy");
  EXPECT_EQ(spec.propagation.prometheus_queries[0].query, "histogram_quantile(0.99, x)");
  EXPECT_EQ(spec.propagation.prometheus_queries[1].name, "ingress");
  EXPECT_EQ(spec.propagation.prometheus_queries[1].query, "max(y)");
  EXPECT_EQ(spec.propagation.safety_factor, 2.0);
  ASSERT_TRUE(spec.propagation.external_load_balancer.has_value());
  EXPECT_EQ(spec.propagation.external_load_balancer->health_check_interval_seconds, 5);
  EXPECT_EQ(spec.propagation.external_load_balancer->unhealthy_threshold, 3);
  EXPECT_EQ(spec.pre_stop.min_seconds, 3);
  EXPECT_EQ(spec.pre_stop.max_seconds, 90);
  EXPECT_EQ(spec.pre_stop.action, PreStopAction::Exec);
  EXPECT_EQ(spec.pre_stop.existing, ExistingHook::Replace);
  EXPECT_EQ(spec.drain_seconds, 45);
  EXPECT_EQ(spec.sidecar_drain_seconds, 5);
  EXPECT_EQ(spec.reserve_seconds, 15);
  EXPECT_FALSE(spec.rollout.manage);
  EXPECT_EQ(spec.rollout.max_surge, (IntOrPercent{25, true}));
  EXPECT_EQ(spec.changes.min_interval_seconds, 600);
  EXPECT_EQ(spec.changes.decrease_threshold_seconds, 4);
}

TEST(PolicySpecTest, MeasuredDrainIsReadAndBounded) {
  const PolicySpec spec = parse_valid_spec(R"({"drain": {"source": "Observed", "quantile": 0.5,
      "minSamples": 3, "windowSeconds": 600, "maxSeconds": 120}})");
  EXPECT_EQ(spec.drain.source, DrainSource::Observed);
  EXPECT_EQ(spec.drain.quantile, 0.5);
  EXPECT_EQ(spec.drain.min_samples, 3);
  EXPECT_EQ(spec.drain.window_seconds, 600);
  EXPECT_EQ(spec.drain.max_seconds, 120);
  EXPECT_EQ(to_string(spec.drain.source), "Observed");

  const auto bad = parse_policy_spec(parse_json(
      R"({"drain": {"source": "Prometheus", "quantile": 1, "maxSeconds": 0, "window": 1}})"));
  ASSERT_FALSE(bad.has_value());
  const std::string errors = describe_errors(bad.error());
  EXPECT_NE(errors.find("spec.drain.source"), std::string::npos) << errors;
  EXPECT_NE(errors.find("spec.drain.quantile"), std::string::npos) << errors;
  EXPECT_NE(errors.find("spec.drain.maxSeconds"), std::string::npos) << errors;
  EXPECT_NE(errors.find("spec.drain.window"), std::string::npos) << errors;
}

TEST(PolicySpecTest, PartialSpecKeepsOtherDefaults) {
  const PolicySpec spec = parse_valid_spec(R"({"preStop": {"maxSeconds": 30}})");
  EXPECT_EQ(spec.pre_stop.max_seconds, 30);
  EXPECT_EQ(spec.pre_stop.min_seconds, 5);
  EXPECT_EQ(spec.pre_stop.action, PreStopAction::Auto);
  EXPECT_EQ(spec.drain_seconds, 30);
}

TEST(PolicySpecTest, FloatsThatAreExactIntegersAreIntegers) {
  const PolicySpec spec =
      parse_valid_spec(R"({"drainSeconds": 5.0, "rollout": {"maxSurge": 2.0}})");
  EXPECT_EQ(spec.drain_seconds, 5);
  EXPECT_EQ(spec.rollout.max_surge, (IntOrPercent{2, false}));
}

TEST(PolicySpecTest, BoundsAreInclusiveWhereTheyShouldBe) {
  const PolicySpec spec = parse_valid_spec(R"({
    "propagation": {"staticSeconds": 0, "quantile": 0.5, "safetyFactor": 10},
    "preStop": {"minSeconds": 3600, "maxSeconds": 3600},
    "drainSeconds": 86400, "sidecarDrainSeconds": 3600, "reserveSeconds": 0,
    "rollout": {"maxSurge": "100%"},
    "changes": {"minIntervalSeconds": 604800, "decreaseThresholdSeconds": 0}
  })");
  EXPECT_EQ(spec.propagation.static_seconds, 0);
  EXPECT_EQ(spec.propagation.safety_factor, 10);
  EXPECT_EQ(spec.pre_stop.min_seconds, 3600);
  EXPECT_EQ(spec.pre_stop.max_seconds, 3600);
  EXPECT_EQ(spec.drain_seconds, 86400);
  EXPECT_EQ(spec.rollout.max_surge, (IntOrPercent{100, true}));
  EXPECT_EQ(spec.changes.min_interval_seconds, 604800);
}

TEST(PolicySpecTest, EmptyExternalLoadBalancerMeansOneWithDefaultRhythm) {
  const PolicySpec spec = parse_valid_spec(R"({"propagation": {"externalLoadBalancer": {}}})");
  ASSERT_TRUE(spec.propagation.external_load_balancer.has_value());
  EXPECT_EQ(spec.propagation.external_load_balancer->health_check_interval_seconds, 10);
  EXPECT_EQ(spec.propagation.external_load_balancer->unhealthy_threshold, 2);
}

TEST(PolicySpecTest, QueriesAreOptionalForOtherSources) {
  EXPECT_EQ(parse_valid_spec(R"({"propagation": {"source": "Observed"}})").propagation.source,
            PropagationSource::Observed);
  const PolicySpec spec = parse_valid_spec(
      R"({"propagation": {"source": "Static", "prometheus": {"queries": [{"name": "a", "query": "b"}]}}})");
  EXPECT_EQ(spec.propagation.prometheus_queries.size(), 1u);
}

TEST(PolicySpecTest, MaxSurgeCount) {
  EXPECT_EQ(parse_valid_spec(R"({"rollout": {"maxSurge": 3}})").rollout.max_surge,
            (IntOrPercent{3, false}));
  EXPECT_EQ(parse_valid_spec(R"({"rollout": {"maxSurge": "1%"}})").rollout.max_surge,
            (IntOrPercent{1, true}));
}

// --- Validation errors: a table. Each case lists every error it must produce (path
// exactly, message by substring); no other error may appear.

struct ExpectedError {
  std::string path;
  std::string message;  // substring of the message
};

struct ErrorCase {
  std::string name;
  std::string spec;  // JSON
  std::vector<ExpectedError> errors;
};

void PrintTo(const ErrorCase& c, std::ostream* out) {
  *out << c.name << ": " << c.spec;
}

class PolicySpecErrorTest : public testing::TestWithParam<ErrorCase> {};

TEST_P(PolicySpecErrorTest, ReportsEveryErrorWithItsPath) {
  const ErrorCase& c = GetParam();
  const auto parsed = parse_policy_spec(parse_json(c.spec));
  ASSERT_FALSE(parsed.has_value()) << "accepted: " << c.spec;
  const FieldErrors& actual = parsed.error();
  std::vector<bool> used(actual.size(), false);
  for (const auto& expected : c.errors) {
    bool found = false;
    for (std::size_t i = 0; i < actual.size() && !found; ++i) {
      if (!used[i] && actual[i].path == expected.path &&
          actual[i].message.find(expected.message) != std::string::npos) {
        used[i] = found = true;
      }
    }
    EXPECT_TRUE(found) << "missing " << expected.path << ": ..." << expected.message
                       << "...\ngot:" << describe_errors(actual);
  }
  EXPECT_EQ(actual.size(), c.errors.size()) << "got:" << describe_errors(actual);
}

INSTANTIATE_TEST_SUITE_P(
    Table, PolicySpecErrorTest,
    testing::Values(
        // Whole spec and nested objects of the wrong type.
        ErrorCase{"spec_not_object", "[]", {{"spec", "expected an object, got array"}}},
        ErrorCase{"nested_not_object",
                  R"({"propagation": "fast"})",
                  {{"spec.propagation", R"(expected an object, got string "fast")"}}},
        // Enums.
        ErrorCase{"mode_unknown",
                  R"({"mode": "Yolo"})",
                  {{"spec.mode", R"(must be one of Enforce, DryRun (got "Yolo"))"}}},
        ErrorCase{"mode_is_case_sensitive",
                  R"({"mode": "dryrun"})",
                  {{"spec.mode", R"(must be one of Enforce, DryRun (got "dryrun"))"}}},
        ErrorCase{"mode_wrong_type",
                  R"({"mode": 1})",
                  {{"spec.mode", "expected a string (one of Enforce, DryRun), got number 1"}}},
        ErrorCase{"source_unknown",
                  R"({"propagation": {"source": "Guess"}})",
                  {{"spec.propagation.source",
                    R"(must be one of Static, Prometheus, Observed (got "Guess"))"}}},
        ErrorCase{"action_and_existing_unknown",
                  R"({"preStop": {"action": "Shell", "existing": "keep"}})",
                  {{"spec.preStop.action", R"(must be one of Auto, Sleep, Exec (got "Shell"))"},
                   {"spec.preStop.existing", R"(must be one of Keep, Replace (got "keep"))"}}},
        // Integers.
        ErrorCase{"integer_as_string",
                  R"({"drainSeconds": "30s"})",
                  {{"spec.drainSeconds", R"(expected an integer, got string "30s")"}}},
        ErrorCase{"integer_fractional",
                  R"({"drainSeconds": 2.5})",
                  {{"spec.drainSeconds", "expected an integer, got number 2.5"}}},
        ErrorCase{"integer_boolean",
                  R"({"reserveSeconds": true})",
                  {{"spec.reserveSeconds", "expected an integer, got boolean true"}}},
        ErrorCase{"integer_negative",
                  R"({"drainSeconds": -1})",
                  {{"spec.drainSeconds", "must be between 0 and 86400 (got -1)"}}},
        ErrorCase{"integer_too_large",
                  R"({"drainSeconds": 86401})",
                  {{"spec.drainSeconds", "must be between 0 and 86400 (got 86401)"}}},
        ErrorCase{
            "integer_beyond_int64",
            R"({"drainSeconds": 18446744073709551615})",
            {{"spec.drainSeconds", "must be between 0 and 86400 (got 18446744073709551615)"}}},
        ErrorCase{"integer_huge_float",
                  R"({"drainSeconds": 1e30})",
                  {{"spec.drainSeconds", "must be between 0 and 86400 (got 1e+30)"}}},
        ErrorCase{"sidecar_and_reserve_out_of_range",
                  R"({"sidecarDrainSeconds": 3601, "reserveSeconds": -5})",
                  {{"spec.sidecarDrainSeconds", "must be between 0 and 3600 (got 3601)"},
                   {"spec.reserveSeconds", "must be between 0 and 3600 (got -5)"}}},
        ErrorCase{
            "changes_out_of_range",
            R"({"changes": {"minIntervalSeconds": 604801, "decreaseThresholdSeconds": -1}})",
            {{"spec.changes.minIntervalSeconds", "must be between 0 and 604800 (got 604801)"},
             {"spec.changes.decreaseThresholdSeconds", "must be between 0 and 3600 (got -1)"}}},
        // preStop bounds and their relation.
        ErrorCase{"min_above_max",
                  R"({"preStop": {"minSeconds": 30, "maxSeconds": 20}})",
                  {{"spec.preStop.minSeconds", "must be <= maxSeconds (got 30 > 20)"}}},
        ErrorCase{"max_below_default_min",
                  R"({"preStop": {"maxSeconds": 3}})",
                  {{"spec.preStop.maxSeconds", "must be >= minSeconds (got 3 < 5, the default"}}},
        ErrorCase{"max_zero_is_out_of_range_only",
                  R"({"preStop": {"maxSeconds": 0}})",
                  {{"spec.preStop.maxSeconds", "must be between 1 and 3600 (got 0)"}}},
        ErrorCase{"min_too_large",
                  R"({"preStop": {"minSeconds": 3601}})",
                  {{"spec.preStop.minSeconds", "must be between 0 and 3600 (got 3601)"}}},
        // Numbers.
        ErrorCase{"quantile_above_one",
                  R"({"propagation": {"quantile": 1.5}})",
                  {{"spec.propagation.quantile", "must be > 0 and < 1 (got 1.5)"}}},
        ErrorCase{"quantile_bounds_are_exclusive",
                  R"({"propagation": {"quantile": 1}})",
                  {{"spec.propagation.quantile", "must be > 0 and < 1 (got 1)"}}},
        ErrorCase{"quantile_zero",
                  R"({"propagation": {"quantile": 0}})",
                  {{"spec.propagation.quantile", "must be > 0 and < 1 (got 0)"}}},
        ErrorCase{"safety_factor_below_one",
                  R"({"propagation": {"safetyFactor": 0.5}})",
                  {{"spec.propagation.safetyFactor", "must be between 1 and 10 (got 0.5)"}}},
        ErrorCase{"static_seconds_as_string",
                  R"({"propagation": {"staticSeconds": "10"}})",
                  {{"spec.propagation.staticSeconds", R"(expected a number, got string "10")"}}},
        ErrorCase{"static_seconds_too_large",
                  R"({"propagation": {"staticSeconds": 3600.5}})",
                  {{"spec.propagation.staticSeconds", "must be between 0 and 3600 (got 3600.5)"}}},
        ErrorCase{"load_balancer_out_of_range",
                  R"({"propagation": {"externalLoadBalancer":
                       {"healthCheckIntervalSeconds": 0, "unhealthyThreshold": 101}}})",
                  {{"spec.propagation.externalLoadBalancer.healthCheckIntervalSeconds",
                    "must be between 1 and 3600 (got 0)"},
                   {"spec.propagation.externalLoadBalancer.unhealthyThreshold",
                    "must be between 1 and 100 (got 101)"}}},
        // Prometheus queries.
        ErrorCase{"prometheus_source_without_queries",
                  R"({"propagation": {"source": "Prometheus"}})",
                  {{"spec.propagation.prometheus.queries",
                    "at least one query is required when source is Prometheus"}}},
        ErrorCase{"prometheus_source_with_empty_queries",
                  R"({"propagation": {"source": "Prometheus", "prometheus": {"queries": []}}})",
                  {{"spec.propagation.prometheus.queries", "at least one query is required"}}},
        ErrorCase{"query_empty",
                  R"({"propagation": {"source": "Prometheus",
                      "prometheus": {"queries": [{"name": "kube-proxy", "query": ""}]}}})",
                  {{"spec.propagation.prometheus.queries[0].query", "must not be empty"}}},
        ErrorCase{"query_blank_and_name_missing",
                  R"({"propagation": {"prometheus": {"queries": [{"query": "  "}]}}})",
                  {{"spec.propagation.prometheus.queries[0].name", "must not be empty"},
                   {"spec.propagation.prometheus.queries[0].query", "must not be empty"}}},
        ErrorCase{"query_names_unique",
                  R"({"propagation": {"prometheus": {"queries": [
                      {"name": "kube-proxy", "query": "a"}, {"name": "ingress", "query": "b"},
                      {"name": "kube-proxy", "query": "c"}]}}})",
                  {{"spec.propagation.prometheus.queries[2].name",
                    R"(duplicate name "kube-proxy" (also queries[0]))"}}},
        ErrorCase{"queries_not_array",
                  R"({"propagation": {"source": "Prometheus", "prometheus": {"queries": {}}}})",
                  {{"spec.propagation.prometheus.queries", "expected an array, got object"},
                   {"spec.propagation.prometheus.queries", "at least one query is required"}}},
        ErrorCase{
            "query_item_not_object",
            R"({"propagation": {"source": "Prometheus", "prometheus": {"queries": ["up"]}}})",
            {{"spec.propagation.prometheus.queries[0]", R"(expected an object, got string "up")"}}},
        ErrorCase{
            "query_type_errors",
            R"({"propagation": {"prometheus": {"queries": [{"name": 7, "query": ["x"]}]}}})",
            {{"spec.propagation.prometheus.queries[0].name", "expected a string, got number 7"},
             {"spec.propagation.prometheus.queries[0].query", "expected a string, got array"}}},
        // Unknown fields, at every level.
        ErrorCase{"unknown_top_level_field",
                  R"({"drainSecond": 30})",
                  {{"spec.drainSecond", "unknown field"}}},
        ErrorCase{"unknown_nested_field",
                  R"({"preStop": {"minSecond": 5}})",
                  {{"spec.preStop.minSecond", "unknown field"}}},
        ErrorCase{"unknown_field_in_query",
                  R"({"propagation": {"prometheus": {"queries": [{"name": "a", "query": "b",
                      "promql": "c"}], "url": "http://evil"}}})",
                  {{"spec.propagation.prometheus.queries[0].promql", "unknown field"},
                   {"spec.propagation.prometheus.url", "unknown field"}}},
        ErrorCase{"unknown_field_in_selector_requirement",
                  R"({"selector": {"matchExpressions": [{"key": "a", "operator": "Exists",
                      "value": "x"}], "matchLabel": {}}})",
                  {{"spec.selector.matchExpressions[0].value", "unknown field"},
                   {"spec.selector.matchLabel", "unknown field"}}},
        // maxSurge.
        ErrorCase{"max_surge_zero",
                  R"({"rollout": {"maxSurge": 0}})",
                  {{"spec.rollout.maxSurge", "must be >= 1 because maxUnavailable is 0 (got 0)"}}},
        ErrorCase{
            "max_surge_zero_percent",
            R"({"rollout": {"maxSurge": "0%"}})",
            {{"spec.rollout.maxSurge", R"(must be at least 1% because maxUnavailable is 0)"}}},
        ErrorCase{"max_surge_percent_above_hundred",
                  R"({"rollout": {"maxSurge": "150%"}})",
                  {{"spec.rollout.maxSurge",
                    R"(must be a percentage between 1% and 100% (got "150%"))"}}},
        ErrorCase{"max_surge_percent_overflow",
                  R"({"rollout": {"maxSurge": "99999999999999999999999%"}})",
                  {{"spec.rollout.maxSurge", "must be a percentage between 1% and 100%"}}},
        ErrorCase{"max_surge_numeric_string",
                  R"({"rollout": {"maxSurge": "25"}})",
                  {{"spec.rollout.maxSurge",
                    R"(expected an integer or a percentage string like "25%", got string "25")"}}},
        ErrorCase{"max_surge_fractional_percent",
                  R"({"rollout": {"maxSurge": "12.5%"}})",
                  {{"spec.rollout.maxSurge", R"(got string "12.5%")"}}},
        ErrorCase{"max_surge_boolean",
                  R"({"rollout": {"maxSurge": true}})",
                  {{"spec.rollout.maxSurge",
                    R"(expected an integer or a percentage string like "25%", got boolean true)"}}},
        ErrorCase{"max_surge_fractional",
                  R"({"rollout": {"maxSurge": 1.5}})",
                  {{"spec.rollout.maxSurge", "got number 1.5"}}},
        ErrorCase{"max_surge_checked_when_unmanaged",
                  R"({"rollout": {"manage": false, "maxSurge": -1}})",
                  {{"spec.rollout.maxSurge", "must be >= 1 because maxUnavailable is 0 (got -1)"}}},
        ErrorCase{"manage_not_boolean",
                  R"({"rollout": {"manage": "yes"}})",
                  {{"spec.rollout.manage", R"(expected a boolean, got string "yes")"}}},
        // Selector.
        ErrorCase{"selector_in_without_values",
                  R"({"selector": {"matchExpressions": [{"key": "tier", "operator": "In"}]}})",
                  {{"spec.selector.matchExpressions[0].values",
                    "must not be empty when operator is In"}}},
        ErrorCase{"selector_notin_with_empty_values",
                  R"({"selector": {"matchExpressions": [
                      {"key": "tier", "operator": "NotIn", "values": []}]}})",
                  {{"spec.selector.matchExpressions[0].values",
                    "must not be empty when operator is NotIn"}}},
        ErrorCase{"selector_exists_with_values",
                  R"({"selector": {"matchExpressions": [
                      {"key": "a", "operator": "In", "values": ["x"]},
                      {"key": "b", "operator": "Exists", "values": ["x"]}]}})",
                  {{"spec.selector.matchExpressions[1].values",
                    "must be empty when operator is Exists"}}},
        ErrorCase{"selector_operator_missing_and_key_empty",
                  R"({"selector": {"matchExpressions": [{"key": ""}]}})",
                  {{"spec.selector.matchExpressions[0].key", "must not be empty"},
                   {"spec.selector.matchExpressions[0].operator",
                    "required: one of In, NotIn, Exists, DoesNotExist"}}},
        ErrorCase{"selector_operator_unknown",
                  R"({"selector": {"matchExpressions": [{"key": "a", "operator": "in",
                      "values": ["x"]}]}})",
                  {{"spec.selector.matchExpressions[0].operator",
                    R"(must be one of In, NotIn, Exists, DoesNotExist (got "in"))"}}},
        ErrorCase{
            "selector_values_wrong_type",
            R"({"selector": {"matchExpressions": [{"key": "a", "operator": "In",
                      "values": ["x", 3]}]}})",
            {{"spec.selector.matchExpressions[0].values[1]", "expected a string, got number 3"}}},
        ErrorCase{"selector_match_labels",
                  R"({"selector": {"matchLabels": {"app.kubernetes.io/name": 5, "": "x"}}})",
                  {{"spec.selector.matchLabels[app.kubernetes.io/name]",
                    "expected a string, got number 5"},
                   {"spec.selector.matchLabels", "label keys must not be empty"}}},
        ErrorCase{"selector_match_labels_not_object",
                  R"({"selector": {"matchLabels": ["app=web"]}})",
                  {{"spec.selector.matchLabels", "expected an object, got array"}}},
        // Everything at once: all errors are collected, not just the first.
        ErrorCase{"many_errors_collected",
                  R"({"mode": "Yolo", "drainSeconds": "30s",
                      "propagation": {"source": "Prometheus", "quantile": 1.5},
                      "preStop": {"minSeconds": 30, "maxSeconds": 20, "minSecond": 1},
                      "rollout": {"maxSurge": 0}, "typo": true})",
                  {{"spec.mode", "must be one of Enforce, DryRun"},
                   {"spec.drainSeconds", "expected an integer"},
                   {"spec.propagation.quantile", "must be > 0 and < 1 (got 1.5)"},
                   {"spec.propagation.prometheus.queries", "at least one query is required"},
                   {"spec.preStop.minSeconds", "must be <= maxSeconds (got 30 > 20)"},
                   {"spec.preStop.minSecond", "unknown field"},
                   {"spec.rollout.maxSurge", "must be >= 1"},
                   {"spec.typo", "unknown field"}}}),
    [](const testing::TestParamInfo<ErrorCase>& info) { return info.param.name; });

TEST(PolicySpecTest, LongStringsAreShortenedInMessages) {
  const std::string long_mode(500, 'x');
  const auto parsed = parse_policy_spec(Json{{"mode", long_mode}});
  ASSERT_FALSE(parsed.has_value());
  ASSERT_EQ(parsed.error().size(), 1u);
  EXPECT_LT(parsed.error()[0].message.size(), 200u);
  EXPECT_NE(parsed.error()[0].message.find("...\""), std::string::npos);
}

TEST(PolicySpecTest, InvalidUtf8DoesNotThrow) {
  const auto parsed = parse_policy_spec(Json{{"mode", std::string("\xff\xfe")}});
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error()[0].path, "spec.mode");
}

// --- Whole objects.

constexpr const char* kValidPolicy = R"({
  "apiVersion": "gracekeeper.dev/v1alpha1",
  "kind": "ShutdownPolicy",
  "metadata": {"name": "default", "namespace": "shop-prod", "labels": {"team": "shop"},
               "uid": "1234", "resourceVersion": "42"},
  "spec": {"mode": "DryRun", "drainSeconds": 20},
  "status": {"observedGeneration": 1}
})";

TEST(PolicyTest, ParsesIdentityAndSpec) {
  const auto policy = parse_policy(parse_json(kValidPolicy));
  ASSERT_TRUE(policy.has_value()) << describe_errors(policy);
  EXPECT_EQ(policy->name, "default");
  EXPECT_EQ(policy->namespace_, "shop-prod");
  EXPECT_EQ(policy->spec.mode, Mode::DryRun);
  EXPECT_EQ(policy->spec.drain_seconds, 20);
  EXPECT_EQ(policy->spec.reserve_seconds, 10);
}

TEST(PolicyTest, MissingSpecAndNamespaceAreDefaults) {
  const auto policy = parse_policy(parse_json(R"({"apiVersion": "gracekeeper.dev/v1alpha1",
      "kind": "ShutdownPolicy", "metadata": {"name": "p"}})"));
  ASSERT_TRUE(policy.has_value()) << describe_errors(policy);
  EXPECT_EQ(policy->name, "p");
  EXPECT_EQ(policy->namespace_, "");
  expect_defaults(policy->spec);
}

TEST(PolicyTest, ReportsIdentityAndSpecErrorsTogether) {
  const auto policy = parse_policy(parse_json(R"({
    "apiVersion": "gracekeeper.dev/v1", "kind": "ShutdownPolicies",
    "metadata": {"name": "", "namespace": 3},
    "spec": {"preStop": {"minSeconds": 30, "maxSeconds": 20}},
    "sepc": {}
  })"));
  ASSERT_FALSE(policy.has_value());
  const FieldErrors expected{
      {"apiVersion", R"(must be "gracekeeper.dev/v1alpha1" (got string "gracekeeper.dev/v1"))"},
      {"kind", R"(must be "ShutdownPolicy" (got string "ShutdownPolicies"))"},
      {"metadata.name", "must not be empty"},
      {"metadata.namespace", "expected a string, got number 3"},
      {"spec.preStop.minSeconds", "must be <= maxSeconds (got 30 > 20)"},
      {"sepc", "unknown field"},
  };
  EXPECT_EQ(policy.error(), expected) << describe_errors(policy.error());
}

TEST(PolicyTest, MissingIdentity) {
  const auto policy = parse_policy(parse_json("{}"));
  ASSERT_FALSE(policy.has_value());
  const FieldErrors expected{
      {"apiVersion", R"(must be "gracekeeper.dev/v1alpha1" (missing))"},
      {"kind", R"(must be "ShutdownPolicy" (missing))"},
      {"metadata.name", "must not be empty"},
  };
  EXPECT_EQ(policy.error(), expected) << describe_errors(policy.error());
}

TEST(PolicyTest, MetadataOfWrongTypeIsOneError) {
  const auto policy = parse_policy(parse_json(R"({"apiVersion": "gracekeeper.dev/v1alpha1",
      "kind": "ShutdownPolicy", "metadata": "default"})"));
  ASSERT_FALSE(policy.has_value());
  const FieldErrors expected{{"metadata", R"(expected an object, got string "default")"}};
  EXPECT_EQ(policy.error(), expected) << describe_errors(policy.error());
}

TEST(PolicyTest, NotAnObject) {
  const auto policy = parse_policy(parse_json(R"("ShutdownPolicy")"));
  ASSERT_FALSE(policy.has_value());
  ASSERT_EQ(policy.error().size(), 1u);
  EXPECT_EQ(policy.error()[0].format(),
            R"(expected a ShutdownPolicy object, got string "ShutdownPolicy")");
}

TEST(PolicyTest, IsPolicy) {
  EXPECT_TRUE(is_policy(parse_json(kValidPolicy)));
  // Another version of our group is still a policy, so parse_policy can say what is wrong.
  EXPECT_TRUE(
      is_policy(parse_json(R"({"apiVersion": "gracekeeper.dev/v1", "kind": "ShutdownPolicy"})")));
  EXPECT_FALSE(is_policy(parse_json(R"({"apiVersion": "apps/v1", "kind": "Deployment"})")));
  EXPECT_FALSE(
      is_policy(parse_json(R"({"apiVersion": "example.com/v1", "kind": "ShutdownPolicy"})")));
  EXPECT_FALSE(
      is_policy(parse_json(R"({"apiVersion": "gracekeeper.devx/v1", "kind": "ShutdownPolicy"})")));
  EXPECT_FALSE(
      is_policy(parse_json(R"({"apiVersion": "gracekeeper.dev", "kind": "ShutdownPolicy"})")));
  EXPECT_FALSE(
      is_policy(parse_json(R"({"apiVersion": "gracekeeper.dev/v1alpha1", "kind": "Other"})")));
  EXPECT_FALSE(is_policy(parse_json(R"({"apiVersion": 1, "kind": "ShutdownPolicy"})")));
  EXPECT_FALSE(is_policy(parse_json(R"({"kind": "ShutdownPolicy"})")));
  EXPECT_FALSE(is_policy(parse_json("[]")));
  EXPECT_FALSE(is_policy(parse_json("null")));
}

TEST(PolicyTest, EnumNames) {
  EXPECT_EQ(to_string(Mode::Enforce), "Enforce");
  EXPECT_EQ(to_string(Mode::DryRun), "DryRun");
  EXPECT_EQ(to_string(PropagationSource::Static), "Static");
  EXPECT_EQ(to_string(PropagationSource::Prometheus), "Prometheus");
  EXPECT_EQ(to_string(PropagationSource::Observed), "Observed");
  EXPECT_EQ(to_string(PreStopAction::Auto), "Auto");
  EXPECT_EQ(to_string(PreStopAction::Sleep), "Sleep");
  EXPECT_EQ(to_string(PreStopAction::Exec), "Exec");
  EXPECT_EQ(to_string(ExistingHook::Keep), "Keep");
  EXPECT_EQ(to_string(ExistingHook::Replace), "Replace");
}

// --- LabelSelector semantics (metav1.LabelSelector).

using Labels = std::map<std::string, std::string>;
using Op = LabelSelector::Operator;

struct SelectorCase {
  std::string name;
  LabelSelector selector;
  Labels labels;
  bool matches;
};

void PrintTo(const SelectorCase& c, std::ostream* out) {
  *out << c.name;
}

class LabelSelectorTest : public testing::TestWithParam<SelectorCase> {};

TEST_P(LabelSelectorTest, Matches) {
  const SelectorCase& c = GetParam();
  EXPECT_EQ(c.selector.matches(c.labels), c.matches);
}

LabelSelector labels_selector(Labels labels) {
  return {std::move(labels), {}};
}
LabelSelector expression_selector(std::string key, Op op, std::vector<std::string> values = {}) {
  return {{}, {{std::move(key), op, std::move(values)}}};
}

INSTANTIATE_TEST_SUITE_P(
    Table, LabelSelectorTest,
    testing::Values(
        SelectorCase{"empty_matches_all", {}, {{"app", "web"}}, true},
        SelectorCase{"empty_matches_no_labels", {}, {}, true},
        SelectorCase{"labels_equal",
                     labels_selector({{"app", "web"}}),
                     {{"app", "web"}, {"tier", "front"}},
                     true},
        SelectorCase{
            "labels_value_differs", labels_selector({{"app", "web"}}), {{"app", "api"}}, false},
        SelectorCase{
            "labels_key_missing", labels_selector({{"app", "web"}}), {{"tier", "web"}}, false},
        SelectorCase{"labels_all_must_match",
                     labels_selector({{"app", "web"}, {"tier", "front"}}),
                     {{"app", "web"}},
                     false},
        SelectorCase{
            "labels_empty_value", labels_selector({{"canary", ""}}), {{"canary", ""}}, true},
        SelectorCase{"in_listed",
                     expression_selector("tier", Op::In, {"web", "api"}),
                     {{"tier", "api"}},
                     true},
        SelectorCase{"in_not_listed",
                     expression_selector("tier", Op::In, {"web", "api"}),
                     {{"tier", "db"}},
                     false},
        SelectorCase{"in_key_absent", expression_selector("tier", Op::In, {"web"}), {}, false},
        SelectorCase{"notin_listed",
                     expression_selector("tier", Op::NotIn, {"web"}),
                     {{"tier", "web"}},
                     false},
        SelectorCase{"notin_not_listed",
                     expression_selector("tier", Op::NotIn, {"web"}),
                     {{"tier", "db"}},
                     true},
        SelectorCase{"notin_key_absent", expression_selector("tier", Op::NotIn, {"web"}), {}, true},
        SelectorCase{
            "exists_present", expression_selector("canary", Op::Exists), {{"canary", ""}}, true},
        SelectorCase{
            "exists_absent", expression_selector("canary", Op::Exists), {{"app", "x"}}, false},
        SelectorCase{"does_not_exist_absent",
                     expression_selector("canary", Op::DoesNotExist),
                     {{"app", "x"}},
                     true},
        SelectorCase{"does_not_exist_present",
                     expression_selector("canary", Op::DoesNotExist),
                     {{"canary", "true"}},
                     false},
        SelectorCase{"labels_and_expressions_both_hold",
                     {{{"app", "web"}}, {{"canary", Op::DoesNotExist, {}}}},
                     {{"app", "web"}},
                     true},
        SelectorCase{"labels_and_expressions_one_fails",
                     {{{"app", "web"}}, {{"canary", Op::DoesNotExist, {}}}},
                     {{"app", "web"}, {"canary", "1"}},
                     false}),
    [](const testing::TestParamInfo<SelectorCase>& info) { return info.param.name; });

TEST(LabelSelectorParseTest, ParsedSelectorMatches) {
  const PolicySpec spec = parse_valid_spec(R"({"selector": {
    "matchLabels": {"app": "web"},
    "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}})");
  EXPECT_TRUE(spec.selector.matches({{"app", "web"}, {"env", "prod"}}));
  EXPECT_TRUE(spec.selector.matches({{"app", "web"}}));
  EXPECT_FALSE(spec.selector.matches({{"app", "web"}, {"env", "dev"}}));
}

}  // namespace
}  // namespace gracekeeper::budget
