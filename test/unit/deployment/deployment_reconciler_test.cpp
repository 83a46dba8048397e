// The Deployment controller, driven through its ports with in-memory
// implementations and a fake clock: every rule it applies between the
// budget engine and the API server.
#include "gracekeeper/deployment/deployment_reconciler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../../support/reconciler_fakes.h"

namespace gracekeeper::controller::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Reason = kube::ApiError::Reason;

class DeploymentReconcilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world.put_policy(policy());
    ASSERT_TRUE(world.reconcile_policy("shop/default"));  // measured: 4 s
  }
  World world;
};

TEST_F(DeploymentReconcilerTest, WaitsForThePolicysFirstMeasurement) {
  World fresh;
  fresh.put_policy(policy());
  fresh.put_deployment(deployment());
  auto r = fresh.reconcile_deployment("shop/web");
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, Result::done());  // the measurement enqueues the namespace
  EXPECT_THAT(fresh.writer.calls, IsEmpty());
  EXPECT_THAT(fresh.events.recorded, IsEmpty());
}

TEST_F(DeploymentReconcilerTest, AFirstTuneIsOneForcedApplyAndOneEvent) {
  world.put_deployment(deployment());
  auto r = world.reconcile_deployment("shop/web");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, Result::done());
  ASSERT_EQ(world.writer.calls.size(), 1u);
  // No other applier: a conflict could only be with Update writers, taken
  // over anyway, so the first request forces.
  EXPECT_TRUE(world.writer.calls[0].force);
  const json& spec = world.writer.calls[0].configuration["spec"]["template"]["spec"];
  EXPECT_EQ(spec["terminationGracePeriodSeconds"], 46);
  EXPECT_EQ(spec["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"], 6);
  ASSERT_THAT(world.events.reasons(), ElementsAre("Tuned"));
  EXPECT_EQ(world.events.recorded[0].regarding.uid, "u-web");
  EXPECT_THAT(world.events.recorded[0].note,
              HasSubstr("terminationGracePeriodSeconds: 30s (default) -> 46s"));
  EXPECT_THAT(world.events.recorded[0].note, HasSubstr("(policy default, propagation 4s)"));

  // The watch brings the written object back: nothing more to do or say.
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 1u);
  EXPECT_EQ(world.events.recorded.size(), 1u);
}

TEST_F(DeploymentReconcilerTest, FindingsOfTheTunedDeploymentAreFoldedIntoItsOneEvent) {
  json d = deployment();
  d["spec"]["strategy"] = {{"type", "Recreate"}};
  world.put_deployment(d);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_THAT(world.events.reasons(), ElementsAre("Tuned"));
  EXPECT_EQ(world.events.recorded[0].type, kube::EventType::Warning);
  EXPECT_THAT(world.events.recorded[0].note, HasSubstr(". Also RecreateStrategy: "));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.events.recorded.size(), 1u);  // not reported again on its own
}

TEST_F(DeploymentReconcilerTest, AConflictWithAnotherApplierIsReportedOnceAndNotRepeated) {
  json d = deployment();
  d["metadata"]["managedFields"] = {{{"manager", "flux"}, {"operation", "Apply"}}};
  world.put_deployment(d);
  world.writer.answers.push_back(std::unexpected(
      api_error(Reason::Conflict, "Apply failed with 1 conflict",
                {{".spec.template.spec.terminationGracePeriodSeconds", "FieldManagerConflict",
                  "conflict with \"flux\" using apps/v1"}})));
  auto r = world.reconcile_deployment("shop/web");
  ASSERT_TRUE(r);
  ASSERT_EQ(world.writer.calls.size(), 1u);
  EXPECT_FALSE(world.writer.calls[0].force);  // another applier: never forced
  ASSERT_FALSE(world.events.recorded.empty());
  EXPECT_EQ(world.events.recorded[0].reason, "FieldConflict");
  EXPECT_THAT(world.events.recorded[0].note, HasSubstr("\"flux\" (an applier)"));
  EXPECT_THAT(world.policies_changed, ElementsAre("shop/default"));
  const auto reported = world.events.recorded.size();
  // The same Deployment and plan: the write is not sent again, nor the Event.
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 1u);
  EXPECT_EQ(world.events.recorded.size(), reported);
  EXPECT_EQ(world.policy_controller.count("shop/default").pending, 1);

  // A new generation (flux changed something): tried again.
  d["metadata"]["generation"] = 2;
  world.put_deployment(d);
  world.writer.answers.push_back(DeploymentWriter::Written{});
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 2u);
}

TEST_F(DeploymentReconcilerTest, AConflictWithUpdateWritersOnlyIsTakenOver) {
  json d = deployment();
  d["metadata"]["managedFields"] = {{{"manager", "argocd"}, {"operation", "Apply"}}};
  world.put_deployment(d);
  world.writer.answers.push_back(std::unexpected(
      api_error(Reason::Conflict, "conflict",
                {{".spec.strategy", "FieldManagerConflict", "conflict with \"kubectl-edit\""}})));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.writer.calls.size(), 2u);
  EXPECT_FALSE(world.writer.calls[0].force);
  EXPECT_TRUE(world.writer.calls[1].force);
  EXPECT_THAT(world.events.reasons(), ElementsAre("Tuned"));
}

TEST_F(DeploymentReconcilerTest, ARejectedChangeIsNotSentAgainUntilThePlanChanges) {
  world.put_deployment(deployment());
  world.writer.answers.push_back(
      std::unexpected(api_error(Reason::Invalid, "spec.template: Invalid value")));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_FALSE(world.events.recorded.empty());
  EXPECT_EQ(world.events.recorded[0].reason, "ApplyRejected");
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 1u);

  // The figure moves: a different plan is worth one more try.
  world.meter.seconds = 8;
  world.clock.advance(std::chrono::minutes(2));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 2u);
}

TEST_F(DeploymentReconcilerTest, AServerErrorIsATransientErrorWithNoEvent) {
  world.put_deployment(deployment());
  world.writer.answers.push_back(std::unexpected(api_error(Reason::ServerError, "etcd timeout")));
  auto r = world.reconcile_deployment("shop/web");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ReconcileError::Kind::Transient);
  EXPECT_THAT(r.error().message, HasSubstr("etcd timeout"));
  EXPECT_THAT(world.events.recorded, IsEmpty());
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));  // the retry tunes it
  EXPECT_THAT(world.events.reasons(), ElementsAre("Tuned"));
}

TEST_F(DeploymentReconcilerTest, AHeldBackChangeIsRequeuedForWhenItBecomesDue) {
  world.put_policy(policy({{"changes", {{"minIntervalSeconds", 600}}}}));
  world.meter.seconds = 8;  // a 12 s wait
  world.clock.advance(std::chrono::seconds(60));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  world.put_deployment(deployment());
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.writer.calls.size(), 1u);

  // Two minutes later the figure drops: a shorter wait is a change, not a
  // repair, so churn control holds it for the rest of the 10 minutes.
  world.meter.seconds = 1;
  world.clock.advance(std::chrono::minutes(2));  // past the 60 s refresh
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  auto r = world.reconcile_deployment("shop/web");
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->requeue_after);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(*r->requeue_after).count(), 480);
  EXPECT_EQ(world.writer.calls.size(), 1u);
  EXPECT_EQ(world.policy_controller.count("shop/default").pending, 1);

  // Nothing else happens; the queue brings the key back when it is due.
  world.clock.advance(*r->requeue_after);
  r = world.reconcile_deployment("shop/web");
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, Result::done());
  ASSERT_EQ(world.writer.calls.size(), 2u);
  EXPECT_EQ(world.writer.calls[1].configuration["spec"]["template"]["spec"]["containers"][0]
                                               ["lifecycle"]["preStop"]["sleep"]["seconds"],
            5);  // 1.5 x 1 s, raised to the policy's minimum wait
}

TEST_F(DeploymentReconcilerTest, DryRunReportsTheChangeAndWritesNothing) {
  world.put_policy(policy({{"mode", "DryRun"}}));
  world.put_deployment(deployment());
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_THAT(world.writer.calls, IsEmpty());
  ASSERT_FALSE(world.events.recorded.empty());
  EXPECT_EQ(world.events.recorded[0].reason, "DryRun");
  const auto reported = world.events.recorded.size();
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.events.recorded.size(), reported);  // the state is reported once
  auto counts = world.policy_controller.count("shop/default");
  EXPECT_EQ(counts.managed, 1);
  EXPECT_EQ(counts.pending, 1);
}

TEST_F(DeploymentReconcilerTest, TwoMatchingPoliciesAreAmbiguousAndNothingIsWritten) {
  world.put_policy(policy({}, "other"));
  ASSERT_TRUE(world.reconcile_policy("shop/other"));
  world.put_deployment(deployment());
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_THAT(world.writer.calls, IsEmpty());
  EXPECT_THAT(world.events.reasons(), ElementsAre("AmbiguousPolicy"));
}

TEST_F(DeploymentReconcilerTest, ABadAnnotationLeavesTheDeploymentAlone) {
  json d = deployment();
  d["metadata"]["annotations"]["gracekeeper.dev/drain-seconds"] = "soon";
  world.put_deployment(d);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_THAT(world.writer.calls, IsEmpty());
  ASSERT_FALSE(world.events.recorded.empty());
  EXPECT_EQ(world.events.recorded[0].reason, "InvalidAnnotation");
  EXPECT_THAT(world.events.recorded[0].note, HasSubstr("drain-seconds"));
}

TEST_F(DeploymentReconcilerTest, AnEventThatStopsApplyingIsReportedAgainWhenItComesBack) {
  world.put_policy(policy({{"mode", "DryRun"}}));
  world.put_deployment(deployment());
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  const auto first = world.events.recorded.size();
  json d = deployment();
  d["metadata"]["annotations"]["gracekeeper.dev/drain-seconds"] = "soon";
  world.put_deployment(d);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  world.put_deployment(deployment());
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.events.recorded.size(), first + 1 + first);
}

// Seen against a real API server (test/integration/gitops): the Deployment
// controller's status update of the generation gracekeeper had just written
// over woke a second reconcile before the watch brought the write, which
// then applied the same fields again with a new applied time: a second
// generation and a second Tuned Event. The write carries the snapshot's
// resourceVersion, so the server refuses a write decided on an older one.
TEST_F(DeploymentReconcilerTest, AStaleSnapshotOfAWrittenGenerationIsNotWrittenAgain) {
  world.put_deployment(deployment());
  const json d = world.objects.at("shop/web");
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.writer.calls.size(), 1u);
  EXPECT_EQ(world.writer.calls[0].configuration["metadata"]["resourceVersion"],
            d["metadata"]["resourceVersion"]);
  const json written = world.objects.at("shop/web");
  ASSERT_EQ(written["metadata"]["generation"], 2);

  // The status update of generation 1, made before the write, comes after
  // it: stale. Its write is refused; nothing changes, nothing is reported.
  json status_update = d;
  status_update["status"] = {{"observedGeneration", 1}};
  world.deliver_deployment(status_update);
  auto r = world.reconcile_deployment("shop/web");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, Result::done());  // the write's own watch event comes next
  EXPECT_EQ(world.writer.calls.size(), 2u);
  EXPECT_EQ(world.objects.at("shop/web"), written);
  EXPECT_EQ(world.events.recorded.size(), 1u);
  EXPECT_EQ(world.deployment_controller.rollouts_in_flight("shop/default"), 0);

  // The write arrives: nothing to do.
  world.deliver_deployment(written);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 2u);

  // A newer generation that needs the budget again is written.
  json set_back = d;
  set_back["metadata"]["generation"] = 3;
  world.put_deployment(set_back);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 3u);
  EXPECT_EQ(world.objects.at("shop/web")["metadata"]["generation"], 4);

  // So is a Deployment deleted and created again under the same name, at
  // generation 1 but with another uid.
  json recreated = deployment();
  recreated["metadata"]["uid"] = "u-web-2";
  world.put_deployment(recreated);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 4u);
  EXPECT_EQ(world.objects.at("shop/web")["metadata"]["generation"], 2);
}

// A write the server answers with the generation the object had (a
// mutating webhook set the change back on the way in: a policy engine's
// rule for Deployments) tuned nothing: no Tuned Event, no rollout slot held,
// no waiting for a new generation that never comes. A Warning WriteReverted
// says so, and the same write is not sent again until the object or the
// plan changes (it would be set back the same way).
TEST_F(DeploymentReconcilerTest, AWriteThatChangedNothingIsReportedAndNotRepeated) {
  world.put_deployment(deployment());
  world.writer.answers.push_back(DeploymentWriter::WrittenObject{1});
  auto r = world.reconcile_deployment("shop/web");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, Result::done());
  ASSERT_EQ(world.writer.calls.size(), 1u);
  EXPECT_THAT(world.events.reasons(), ::testing::Not(::testing::Contains("Tuned")));
  EXPECT_THAT(world.events.reasons(), ::testing::Contains("WriteReverted"));
  EXPECT_EQ(world.deployment_controller.rollouts_in_flight("shop/default"), 0);

  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 1u);  // not again

  // The object changes (a deploy): the write is tried again, and holds.
  json changed = deployment();
  changed["metadata"]["generation"] = 2;
  changed["spec"]["template"]["spec"]["containers"][0]["image"] = "web:2";
  world.put_deployment(changed);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.writer.calls.size(), 2u);
  EXPECT_THAT(world.events.reasons(), ::testing::Contains("Tuned"));
  // The written object, back from the watch: nothing more to write.
  world.put_deployment(world.objects.at("shop/web"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 2u);
}

// A re-tune answered with a generation further on than the next (another
// writer's change came first): a snapshot before that generation is stale,
// and the re-tune's rollout slot stays taken until the store shows it.
TEST_F(DeploymentReconcilerTest, TheWrittenGenerationIsTheServersAnswer) {
  world.put_deployment(deployment());
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));  // the first tune: generation 2
  ASSERT_EQ(world.writer.calls.size(), 1u);
  world.meter.seconds = 8;  // a longer wait: a re-tune
  world.clock.advance(std::chrono::seconds(61));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  world.writer.answers.push_back(DeploymentWriter::WrittenObject{5});
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.writer.calls.size(), 2u);
  EXPECT_EQ(world.deployment_controller.rollouts_in_flight("shop/default"), 1);
  // Generation 2 again (a status update): older than the write, stale.
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 2u) << "wrote again while its re-tune was rolling out";
  // The store shows generation 5, rolled out: the slot is free.
  json written = world.objects.at("shop/web");
  merge(written, world.writer.calls[1].configuration);
  written["metadata"]["generation"] = 5;
  written["status"] = {
      {"observedGeneration", 5}, {"replicas", 3}, {"updatedReplicas", 3}, {"availableReplicas", 3}};
  world.put_deployment(written);
  EXPECT_EQ(world.deployment_controller.rollouts_in_flight("shop/default"), 0);
}

TEST_F(DeploymentReconcilerTest, ADeletedDeploymentIsForgotten) {
  json d = deployment();
  d["metadata"]["managedFields"] = {{{"manager", "flux"}, {"operation", "Apply"}}};
  world.put_deployment(d);
  world.writer.answers.push_back(
      std::unexpected(api_error(Reason::Conflict, "conflict",
                                {{".spec", "FieldManagerConflict", "conflict with \"flux\""}})));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_NE(world.deployment_controller.blocked("shop/web"), nullptr);
  world.deployment_core.erase("shop/web");
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.deployment_controller.blocked("shop/web"), nullptr);
  EXPECT_EQ(world.deployment_controller.ledger().size(), 0u);
}

}  // namespace
}  // namespace gracekeeper::controller::testing
