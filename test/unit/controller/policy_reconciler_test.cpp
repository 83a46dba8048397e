// The ShutdownPolicy controller: its status is computed from the stores on
// each reconcile, its measurement is refreshed on a schedule the fake clock
// drives, and it waits for queued Deployments before it counts them.
#include "../../../src/controller/policy_reconciler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fakes.h"

namespace gracekeeper::controller::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(PolicyReconciler, MeasuresWritesStatusAndSchedulesTheRefresh) {
  World world;
  world.put_policy(policy());
  auto r = world.reconcile_policy("shop/default");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(r->requeue_after);
  EXPECT_EQ(*r->requeue_after, std::chrono::seconds(60));
  EXPECT_EQ(world.meter.calls, 1);
  EXPECT_THAT(world.namespaces_changed, ElementsAre("shop"));  // a first figure
  ASSERT_EQ(world.status_writer.written.size(), 1u);
  const json& status = world.status_writer.written[0];
  EXPECT_EQ(status["propagation"]["seconds"], 4);
  EXPECT_EQ(status["deployments"]["managed"], 0);

  // Within the refresh period: no new measurement, no write (status equal).
  world.clock.advance(std::chrono::seconds(30));
  r = world.reconcile_policy("shop/default");
  ASSERT_TRUE(r);
  EXPECT_EQ(*r->requeue_after, std::chrono::seconds(30));
  EXPECT_EQ(world.meter.calls, 1);
  EXPECT_EQ(world.status_writer.written.size(), 1u);

  // Due: measured again; an unchanged figure enqueues nothing.
  world.clock.advance(std::chrono::seconds(30));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  EXPECT_EQ(world.meter.calls, 2);
  EXPECT_EQ(world.namespaces_changed.size(), 1u);
}

TEST(PolicyReconciler, CountsTheDeploymentsFromTheStore) {
  World world;
  world.put_policy(policy());
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  world.put_deployment(deployment("tuned"));
  ASSERT_TRUE(world.reconcile_deployment("shop/tuned"));  // written and read back
  json broken = deployment("broken");
  broken["metadata"]["annotations"]["gracekeeper.dev/policy"] = "default";
  broken["spec"]["template"]["spec"]["containers"][0]["lifecycle"] = {
      {"preStop", {{"exec", {{"command", {"sh", "-c", "sleep 1"}}}}}}};
  world.put_deployment(broken);  // not reconciled yet: counted as it is
  json other = deployment("other-policy");
  other["metadata"]["annotations"]["gracekeeper.dev/policy"] = "missing";
  world.put_deployment(other);

  auto c = world.policy_controller.count("shop/default");
  EXPECT_EQ(c.managed, 2);
  EXPECT_EQ(c.compliant, 1);
  EXPECT_THAT(c.not_compliant, ElementsAre("broken"));

  world.clock.advance(std::chrono::seconds(1));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  const json& status = world.status_writer.written.back();
  EXPECT_EQ(status["deployments"]["managed"], 2);
  EXPECT_EQ(status["deployments"]["compliant"], 1);
  EXPECT_EQ(condition(status, "BudgetHolds", "status"), "False");
  EXPECT_THAT(condition(status, "BudgetHolds", "message"), HasSubstr("broken"));
}

TEST(PolicyReconciler, TheStatusWaitsWhileDeploymentsAreQueuedButTheMeasurementDoesNot) {
  World world;
  world.settled = false;
  world.put_policy(policy());
  auto r = world.reconcile_policy("shop/default");
  ASSERT_TRUE(r);
  EXPECT_EQ(*r->requeue_after, std::chrono::seconds(2));
  EXPECT_EQ(world.meter.calls, 1);
  EXPECT_NE(world.book.state("shop/default"), nullptr);
  EXPECT_THAT(world.status_writer.written, IsEmpty());
  world.settled = true;
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  EXPECT_EQ(world.status_writer.written.size(), 1u);
}

TEST(PolicyReconciler, AnInvalidSpecIsReportedAndGovernsNothing) {
  World world;
  // What the schema cannot catch: a quantile outside (0, 1] is refused by
  // the engine's own validation.
  world.put_policy(policy({{"propagation", {{"quantile", 1.5}}}}));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  ASSERT_EQ(world.status_writer.written.size(), 1u);
  const json& status = world.status_writer.written[0];
  EXPECT_EQ(condition(status, "Ready", "status"), "False");
  EXPECT_EQ(condition(status, "Ready", "reason"), "InvalidSpec");
  EXPECT_EQ(world.meter.calls, 0);
  world.put_deployment(deployment());
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_THAT(world.writer.calls, IsEmpty());
}

TEST(PolicyReconciler, ANewFigureEnqueuesTheNamespace) {
  World world;
  world.put_policy(policy());
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  world.meter.seconds = 9;
  world.clock.advance(std::chrono::seconds(61));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  EXPECT_THAT(world.namespaces_changed, ElementsAre("shop", "shop"));
  EXPECT_EQ(world.book.state("shop/default")->seconds, 9);
}

TEST(PolicyReconciler, AStatusWriteThatHitsAConflictIsRetriedFromTheNextStoreState) {
  World world;
  world.put_policy(policy());
  kube::ApiError conflict;
  conflict.reason = kube::ApiError::Reason::Conflict;
  conflict.message = "the object has been modified";
  world.status_writer.answers.push_back(std::unexpected(conflict));
  auto r = world.reconcile_policy("shop/default");
  ASSERT_FALSE(r);  // the queue retries it with backoff
  EXPECT_EQ(r.error().kind, ReconcileError::Kind::Transient);
  EXPECT_THAT(r.error().message, HasSubstr("status of shop/default"));
  EXPECT_THAT(world.status_writer.written, IsEmpty());
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  EXPECT_EQ(world.status_writer.written.size(), 1u);
  EXPECT_EQ(world.meter.calls, 1);  // the measurement was kept, not repeated
}

// The counts reuse each Deployment's last decision while nothing it was
// taken from changed, and decide again when anything did.
class CountsReuseDecisions : public ::testing::Test {
 protected:
  void SetUp() override {
    world.put_policy(policy());
    ASSERT_TRUE(world.reconcile_policy("shop/default"));
    world.put_deployment(deployment("a"));
    world.put_deployment(deployment("b"));
    ASSERT_TRUE(world.reconcile_deployment("shop/a"));  // tuned, then decided as written
    ASSERT_TRUE(world.reconcile_deployment("shop/a"));
  }
  // Decisions a count takes (not reused).
  std::uint64_t decisions_of_a_count() {
    const auto before = world.deployment_controller.counted_decisions();
    last = world.policy_controller.count("shop/default");
    return world.deployment_controller.counted_decisions() - before;
  }
  World world;
  DeploymentCounts last;
};

TEST_F(CountsReuseDecisions, NothingChangedNothingDecidedAgain) {
  // a's last reconcile decided it as the store has it; b was never decided.
  EXPECT_EQ(decisions_of_a_count(), 1u);
  EXPECT_EQ(last.managed, 2);
  EXPECT_EQ(last.compliant, 1);
  EXPECT_EQ(decisions_of_a_count(), 0u);
  EXPECT_EQ(last.compliant, 1);
  EXPECT_THAT(last.not_compliant, ElementsAre("b"));
  // The policy's own status write (no new generation) changes nothing.
  world.clock.advance(std::chrono::seconds(1));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  EXPECT_EQ(decisions_of_a_count(), 0u);
}

TEST_F(CountsReuseDecisions, AChangedDeploymentIsDecidedAgain) {
  decisions_of_a_count();
  ASSERT_TRUE(world.reconcile_deployment("shop/b"));  // tuned: a new snapshot, not decided yet
  EXPECT_EQ(decisions_of_a_count(), 1u);
  EXPECT_EQ(last.compliant, 2);
  ASSERT_TRUE(world.reconcile_deployment("shop/b"));  // what the watch of the write brings
  EXPECT_EQ(decisions_of_a_count(), 0u) << "b's last reconcile decided its written snapshot";
  EXPECT_EQ(last.compliant, 2);
  json a = world.objects.at("shop/a");
  a["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1;  // set back by hand
  a["metadata"]["generation"] = a["metadata"]["generation"].get<int>() + 1;
  world.put_deployment(a);
  EXPECT_EQ(decisions_of_a_count(), 1u);
  EXPECT_EQ(last.compliant, 1);
  EXPECT_THAT(last.not_compliant, ElementsAre("a"));
}

TEST_F(CountsReuseDecisions, AChangedPolicyIsDecidedAgain) {
  decisions_of_a_count();
  json p = policy({{"selector", {{"matchLabels", {{"team", "none"}}}}}});
  p["metadata"]["generation"] = 2;  // the server's answer to a spec change
  world.put_policy(p);
  EXPECT_EQ(decisions_of_a_count(), 2u);
  EXPECT_EQ(last.managed, 0);  // it selects neither any more
}

TEST_F(CountsReuseDecisions, ANewFigureIsDecidedAgain) {
  decisions_of_a_count();
  world.meter.seconds = 30;  // a's wait no longer covers it
  world.clock.advance(std::chrono::seconds(61));
  const auto before = world.deployment_controller.counted_decisions();
  ASSERT_TRUE(world.reconcile_policy("shop/default"));  // measured again, then counted
  EXPECT_EQ(world.deployment_controller.counted_decisions() - before, 2u);
  EXPECT_EQ(decisions_of_a_count(), 0u);
  EXPECT_EQ(last.compliant, 0);
  EXPECT_EQ(last.pending, 2);
}

TEST_F(CountsReuseDecisions, AChangedServiceIsDecidedAgain) {
  decisions_of_a_count();
  world.put_service("web", {{"tier", "web"}});  // a new resourceVersion
  EXPECT_EQ(decisions_of_a_count(), 2u);
  world.service_core.erase("shop/web");  // the pods are no longer served
  EXPECT_EQ(decisions_of_a_count(), 2u);
}

TEST(PolicyReconciler, ADeletedPolicyIsForgotten) {
  World world;
  world.put_policy(policy());
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  world.policy_core.erase("shop/default");
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  EXPECT_EQ(world.book.find("shop/default"), nullptr);
}

}  // namespace
}  // namespace gracekeeper::controller::testing
