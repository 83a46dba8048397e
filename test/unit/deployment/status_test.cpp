// The ShutdownPolicy status the operator writes: computed without I/O, and
// identical to the server's copy when nothing changed (so no write happens).
#include "gracekeeper/deployment/status.h"  // pure status logic

#include <gtest/gtest.h>

namespace gracekeeper::controller {
namespace {

using namespace std::chrono_literals;

const TimePoint t0 = TimePoint{} + std::chrono::seconds(1'790'000'000);

StatusInput healthy(TimePoint now) {
  StatusInput in;
  in.generation = 3;
  in.now = now;
  in.propagation = PropagationState{4, "Static", now, "staticSeconds", true, "StaticSource"};
  in.recommended = budget::Budget{};
  in.recommended->pre_stop_seconds = 6;
  in.recommended->grace_seconds = 46;
  in.deployments = DeploymentCounts{2, 2, 0, 0, {}};
  return in;
}

const nlohmann::json* condition(const nlohmann::json& status, const std::string& type) {
  for (const auto& c : status["conditions"]) {
    if (c["type"] == type) return &c;
  }
  return nullptr;
}

TEST(Status, HasEveryFieldOfTheApi) {
  const auto s = desired_status(healthy(t0), nullptr);
  EXPECT_EQ(s["observedGeneration"], 3);
  EXPECT_EQ(s["propagation"]["seconds"], 4);
  EXPECT_EQ(s["propagation"]["source"], "Static");
  EXPECT_EQ(s["propagation"]["sampledAt"], "2026-09-21T14:13:20Z");
  EXPECT_FALSE(s["propagation"].contains("consumer"));  // Static: nobody's figure
  EXPECT_EQ(s["recommended"]["preStopSeconds"], 6);
  EXPECT_EQ(s["recommended"]["terminationGracePeriodSeconds"], 46);
  EXPECT_EQ(s["deployments"]["managed"], 2);
  EXPECT_EQ(s["deployments"]["compliant"], 2);
  ASSERT_NE(condition(s, "Ready"), nullptr);
  EXPECT_EQ((*condition(s, "Ready"))["status"], "True");
  EXPECT_EQ((*condition(s, "MetricsAvailable"))["reason"], "StaticSource");
  EXPECT_EQ((*condition(s, "BudgetHolds"))["status"], "True");
  EXPECT_EQ((*condition(s, "BudgetHolds"))["observedGeneration"], 3);
}

// Issue 36: StatefulSets are counted apart (status.statefulSets, once one is
// governed) and with the Deployments in BudgetHolds.
TEST(Status, CountsStatefulSetsApartAndInBudgetHolds) {
  StatusInput in = healthy(t0);
  in.statefulsets = DeploymentCounts{};
  const auto none = desired_status(in, nullptr);
  EXPECT_FALSE(none.contains("statefulSets")) << "written before any StatefulSet is governed";
  EXPECT_EQ((*condition(none, "BudgetHolds"))["message"],
            "all 2 governed Deployments satisfy the budget");

  in.statefulsets = DeploymentCounts{1, 0, 0, 1, {"db"}};
  const auto one = desired_status(in, nullptr);
  EXPECT_EQ(one["statefulSets"]["managed"], 1);
  EXPECT_EQ(one["statefulSets"]["violations"], 1);
  EXPECT_EQ(one["deployments"]["managed"], 2);
  const auto* holds = condition(one, "BudgetHolds");
  ASSERT_NE(holds, nullptr);
  EXPECT_EQ((*holds)["status"], "False");
  EXPECT_EQ((*holds)["message"],
            "1 of 3 governed workloads (Deployments and StatefulSets) do not satisfy the budget: "
            "statefulset/db");

  // The last one gone: kept, at 0.
  in.statefulsets = DeploymentCounts{};
  const auto gone = desired_status(in, one);
  EXPECT_EQ(gone["statefulSets"]["managed"], 0);
  EXPECT_EQ((*condition(gone, "BudgetHolds"))["status"], "True");
}

TEST(Status, UnchangedStateLaterGivesTheSameObject) {
  const auto first = desired_status(healthy(t0), nullptr);
  // A minute later, the same figure sampled again: nothing to write.
  auto later = healthy(t0 + 60s);
  EXPECT_EQ(desired_status(later, first), first);
}

TEST(Status, TransitionTimeMovesOnlyWhenTheStatusFlips) {
  const auto first = desired_status(healthy(t0), nullptr);
  auto broken = healthy(t0 + 60s);
  broken.deployments = DeploymentCounts{2, 1, 0, 1, {"web"}};
  const auto second = desired_status(broken, first);
  EXPECT_EQ((*condition(second, "BudgetHolds"))["status"], "False");
  EXPECT_EQ((*condition(second, "BudgetHolds"))["lastTransitionTime"], "2026-09-21T14:14:20Z");
  EXPECT_EQ((*condition(second, "BudgetHolds"))["message"],
            "1 of 2 governed Deployments do not satisfy the budget: web");
  EXPECT_EQ((*condition(second, "Ready"))["lastTransitionTime"], "2026-09-21T14:13:20Z");
}

TEST(Status, NewFigureGetsANewSampleTime) {
  const auto first = desired_status(healthy(t0), nullptr);
  auto moved = healthy(t0 + 60s);
  moved.propagation->seconds = 7;
  const auto second = desired_status(moved, first);
  EXPECT_EQ(second["propagation"]["sampledAt"], "2026-09-21T14:14:20Z");
  EXPECT_EQ(second["propagation"]["seconds"], 7);
}

TEST(Status, InvalidSpecIsReadyFalseNamingTheField) {
  StatusInput in;
  in.generation = 2;
  in.now = t0;
  in.invalid_spec = "spec.rollout.maxSurge: must be >= 1 when maxUnavailable is 0";
  const auto s = desired_status(in, nullptr);
  const auto* ready = condition(s, "Ready");
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ((*ready)["status"], "False");
  EXPECT_EQ((*ready)["reason"], "InvalidSpec");
  EXPECT_EQ((*ready)["message"], *in.invalid_spec);
  EXPECT_FALSE(s.contains("recommended"));
}

TEST(Status, TheSlowestConsumerIsNamed) {
  auto in = healthy(t0);
  in.propagation =
      PropagationState{3.25, "Observed", t0, "quantile ...", true, "SamplesSufficient", "traefik"};
  EXPECT_EQ(desired_status(in, nullptr)["propagation"]["consumer"], "traefik");
}

TEST(Status, PartialCountsKeepTheServersCounts) {
  const auto first = desired_status(healthy(t0), nullptr);
  auto restarted = healthy(t0 + 5s);
  restarted.deployments.reset();  // not every Deployment reconciled yet
  EXPECT_EQ(desired_status(restarted, first), first);
}

TEST(Status, MetricsUnavailableKeepsTheFigureAndSaysWhy) {
  auto in = healthy(t0);
  in.propagation = PropagationState{3.2,       "Prometheus",
                                    t0 - 120s, "kube-proxy: Unreachable; using the last good value",
                                    false,     "Unreachable"};
  const auto s = desired_status(in, nullptr);
  EXPECT_EQ((*condition(s, "MetricsAvailable"))["status"], "False");
  EXPECT_EQ((*condition(s, "MetricsAvailable"))["reason"], "Unreachable");
  EXPECT_EQ(s["propagation"]["seconds"], 3.2);
  EXPECT_EQ(s["propagation"]["sampledAt"], "2026-09-21T14:11:20Z");
}

}  // namespace
}  // namespace gracekeeper::controller
