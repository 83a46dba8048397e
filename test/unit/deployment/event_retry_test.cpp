// Two things the Deployment controller keeps about its own writes, and how
// they end: Events count as reported only once written (a failed one is
// recorded again after a backoff), and a write refused for a field conflict
// is tried again once the other applier no longer owns the fields.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../../support/reconciler_fakes.h"
#include "gracekeeper/deployment/deployment_reconciler.h"
#include "gracekeeper/deployment/event_ledger.h"

namespace gracekeeper::controller::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Reason = kube::ApiError::Reason;

class EventRetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world.put_policy(policy());
    ASSERT_TRUE(world.reconcile_policy("shop/default"));
  }
  // A Deployment gracekeeper leaves alone, with one Warning: a bad annotation.
  void put_bad_annotation() {
    json d = deployment();
    d["metadata"]["annotations"]["gracekeeper.dev/drain-seconds"] = "soon";
    world.put_deployment(d);
  }
  std::vector<std::chrono::nanoseconds> delays() const {
    std::vector<std::chrono::nanoseconds> out;
    for (const auto& [key, after] : world.requeued) out.push_back(after);
    return out;
  }
  World world;
};

TEST_F(EventRetryTest, AnEventThatFailsIsRecordedAgainWithBackoffUntilWritten) {
  put_bad_annotation();
  world.events.failures = 3;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.events.recorded.size(), 4u);  // three failures, then written
  for (const auto& e : world.events.recorded) EXPECT_EQ(e.reason, "InvalidAnnotation");
  EXPECT_THAT(delays(), ElementsAre(2s, 4s, 8s));
  for (const auto& [key, after] : world.requeued) EXPECT_EQ(key, "shop/web");
  // Written: reported for good, not again.
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.events.recorded.size(), 4u);
  EXPECT_EQ(world.requeued.size(), 3u);
  EXPECT_EQ(world.deployment_controller.ledger().failed(), 0u);
}

TEST_F(EventRetryTest, AnEventInFlightIsNotRecordedTwice) {
  EventSink::Outcome outcome = world.events.outcome;
  world.events.outcome = nullptr;  // writes that have not ended yet
  put_bad_annotation();
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.events.recorded.size(), 1u);
  outcome(world.events.recorded[0], false);  // the write fails later
  ASSERT_EQ(world.requeued.size(), 1u);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.events.recorded.size(), 2u);
}

TEST_F(EventRetryTest, AFailedTunedEventIsRecordedAgainThoughTheStateIsSettled) {
  world.put_deployment(deployment());
  world.events.failures = 1;
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.writer.calls.size(), 1u);
  ASSERT_THAT(world.events.reasons(), ElementsAre("Tuned"));
  ASSERT_EQ(world.requeued.size(), 1u);
  // The watch brought the written Deployment: nothing to write, but the
  // Tuned Event is owed.
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 1u);
  ASSERT_THAT(world.events.reasons(), ElementsAre("Tuned", "Tuned"));
  EXPECT_EQ(world.events.recorded[1].note, world.events.recorded[0].note);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.events.recorded.size(), 2u);
}

TEST_F(EventRetryTest, AFailedEventThatNoLongerAppliesIsNotRecordedAgain) {
  put_bad_annotation();
  world.events.failures = 1;
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.requeued.size(), 1u);
  // Fixed before the retry: its state has no such Event any more.
  json d = deployment();
  d["metadata"]["annotations"]["gracekeeper.dev/drain-seconds"] = "20";
  world.put_deployment(d);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_THAT(world.events.reasons(), ElementsAre("InvalidAnnotation", "Tuned"));
}

// An API server that refuses Events for an hour: what waits stays one entry
// per Deployment and Event, and the retries slow down to one per 5 minutes.
TEST_F(EventRetryTest, RefusedForAnHourWhatWaitsIsBounded) {
  for (int i = 0; i < 10; ++i) {
    json d = deployment("web-" + std::to_string(i));
    d["metadata"]["annotations"]["gracekeeper.dev/drain-seconds"] = "soon";
    world.put_deployment(d);
  }
  world.events.failures = 1'000'000;
  std::chrono::nanoseconds waited{0};
  int rounds = 0;
  while (waited < 1h) {
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(world.reconcile_deployment("shop/web-" + std::to_string(i)));
    }
    waited += world.requeued.back().second;
    ++rounds;
  }
  EXPECT_EQ(world.deployment_controller.ledger().size(), 10u);
  EXPECT_EQ(world.deployment_controller.ledger().failed(), 10u);
  EXPECT_EQ(world.requeued.back().second, EventLedger::kRetryMax);
  EXPECT_LE(rounds, 20);  // 2+4+...+256 s, then every 300 s
  EXPECT_EQ(world.events.recorded.size(), 10u * static_cast<std::size_t>(rounds));
}

TEST(EventLedger, OutcomesOfUnknownOrSettledEventsAreIgnored) {
  EventLedger ledger;
  kube::EventRecord e{{}, kube::EventType::Warning, "BudgetClamped", "Check", "clamped"};
  EXPECT_FALSE(ledger.outcome("shop/web", e, false));
  ASSERT_EQ(ledger.unreported("shop/web", {e}).size(), 1u);
  EXPECT_FALSE(ledger.outcome("shop/web", e, true));
  EXPECT_FALSE(ledger.outcome("shop/web", e, false));  // settled
  EXPECT_TRUE(ledger.unreported("shop/web", {e}).empty());
  EXPECT_EQ(ledger.failed(), 0u);
}

// ------------------------------------------------------------- field conflicts

// flux applied grace (and, with ~withGrace, everything else but grace).
json flux_fields(bool with_grace) {
  json spec = {
      {"f:replicas", json::object()},
      {"f:template",
       {{"f:spec",
         {{"f:containers",
           {{"k:{\"name\":\"app\"}", {{".", json::object()}, {"f:image", json::object()}}}}}}}}}};
  if (with_grace) {
    spec["f:template"]["f:spec"]["f:terminationGracePeriodSeconds"] = json::object();
  }
  return json::array({{{"manager", "flux"},
                       {"operation", "Apply"},
                       {"fieldsType", "FieldsV1"},
                       {"fieldsV1", {{"f:spec", spec}}}},
                      {{"manager", "kube-controller-manager"},
                       {"operation", "Update"},
                       {"subresource", "status"},
                       {"fieldsV1", {{"f:status", {{"f:replicas", json::object()}}}}}}});
}

kube::ApiError grace_conflict() {
  return api_error(Reason::Conflict, "Apply failed with 1 conflict",
                   {{".spec.template.spec.terminationGracePeriodSeconds", "FieldManagerConflict",
                     "conflict with \"flux\" using apps/v1"}});
}

class ConflictReleaseTest : public EventRetryTest {
 protected:
  void put_gitops(bool flux_owns_grace, const std::string& label = "a") {
    json d = deployment();
    d["metadata"]["labels"] = {{"rev", label}};
    d["metadata"]["managedFields"] = flux_fields(flux_owns_grace);
    world.put_deployment(d);
  }
};

TEST_F(ConflictReleaseTest, AFieldTheOtherApplierGivesUpIsWrittenWithoutANewGeneration) {
  put_gitops(true);
  world.writer.answers.push_back(std::unexpected(grace_conflict()));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.writer.calls.size(), 1u);
  ASSERT_NE(world.deployment_controller.blocked("shop/web"), nullptr);
  // Reconciled again with nothing new (a policy change in the namespace):
  // neither a write nor a read.
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 1u);
  EXPECT_EQ(world.writer.reads, 0);

  // flux applies a configuration without grace: generation 1 still.
  put_gitops(false);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.reads, 1);
  ASSERT_EQ(world.writer.calls.size(), 2u);
  EXPECT_FALSE(world.writer.calls[1].force);  // flux still applies: not forced
  EXPECT_EQ(world.deployment_controller.blocked("shop/web"), nullptr);
  EXPECT_EQ(world.events.recorded.front().reason, "FieldConflict");
  EXPECT_EQ(world.events.recorded.back().reason, "Tuned");
}

TEST_F(ConflictReleaseTest, AChangeThatLeavesTheFieldWithTheApplierIsReadOnceAndNotWritten) {
  put_gitops(true);
  world.writer.answers.push_back(std::unexpected(grace_conflict()));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  put_gitops(true, "b");  // a label changed; flux still owns grace
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.reads, 1);  // once per new state of the Deployment
  EXPECT_EQ(world.writer.calls.size(), 1u);
  EXPECT_NE(world.deployment_controller.blocked("shop/web"), nullptr);
  EXPECT_EQ(world.events.recorded.front().reason, "FieldConflict");
  EXPECT_THAT(world.events.reasons(), ::testing::Not(::testing::Contains("Tuned")));
}

TEST_F(ConflictReleaseTest, AnApplierThatAppliesNothingAnyMoreIsNotReadFor) {
  put_gitops(true);
  world.writer.answers.push_back(std::unexpected(grace_conflict()));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  json d = world.objects.at("shop/web");
  d["metadata"]["managedFields"] = json::array();  // flux's entry is gone
  world.put_deployment(d);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.reads, 0);
  EXPECT_EQ(world.writer.calls.size(), 2u);
}

TEST_F(ConflictReleaseTest, ARejectedWriteIsNotReadFor) {
  world.put_deployment(deployment());
  world.writer.answers.push_back(
      std::unexpected(api_error(Reason::Invalid, "spec.template: Invalid value")));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  json d = world.objects.at("shop/web");
  d["metadata"]["labels"] = {{"rev", "b"}};
  world.put_deployment(d);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.reads, 0);
  EXPECT_EQ(world.writer.calls.size(), 1u);
}

TEST(ApplierOwns, ReadsFieldsV1AsConflictPathsName) {
  const json fields = json::parse(R"([
    {"manager": "flux", "operation": "Apply", "fieldsV1": {"f:spec": {
      "f:strategy": {"f:rollingUpdate": {"f:maxSurge": {}}},
      "f:template": {"f:spec": {"f:containers": {
        "k:{\"name\":\"app\"}": {".": {}, "f:lifecycle": {"f:preStop": {"f:sleep": {"f:seconds": {}}}},
          "f:ports": {"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}}}}}}}}}},
    {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:spec": {
      "f:template": {"f:spec": {"f:terminationGracePeriodSeconds": {}}}}}},
    {"manager": 7, "operation": "Apply", "fieldsV1": "garbage"},
    {"manager": "argo", "operation": "Apply", "fieldsV1": {"f:metadata": {"f:finalizers": {"v:\"x\"": {}}},
      "f:spec": {"f:template": {"f:spec": {"f:volumes": {"i:0": {}}}}}}}
  ])");
  EXPECT_TRUE(applier_owns(fields, "flux", ".spec.strategy.rollingUpdate.maxSurge"));
  // A field under the conflict's path, and the path under an owned leaf's parent.
  EXPECT_TRUE(applier_owns(fields, "flux", ".spec.strategy"));
  EXPECT_TRUE(applier_owns(fields, "flux",
                           ".spec.template.spec.containers[name=\"app\"].lifecycle.preStop"));
  EXPECT_TRUE(applier_owns(
      fields, "flux",
      ".spec.template.spec.containers[name=\"app\"].ports[containerPort=8080,protocol=\"TCP\"]"));
  EXPECT_FALSE(applier_owns(fields, "flux",
                            ".spec.template.spec.containers[name=\"web\"].lifecycle.preStop"));
  EXPECT_FALSE(applier_owns(fields, "flux", ".spec.strategy.rollingUpdate.maxUnavailable"));
  EXPECT_FALSE(applier_owns(fields, "flux", ".spec.strat"));  // not a path prefix
  EXPECT_FALSE(applier_owns(fields, "flux", ".spec.template.spec.terminationGracePeriodSeconds"));
  // Update writers are not appliers.
  EXPECT_FALSE(
      applier_owns(fields, "kubectl-edit", ".spec.template.spec.terminationGracePeriodSeconds"));
  EXPECT_TRUE(applier_owns(fields, "argo", ".metadata.finalizers[=\"x\"]"));
  EXPECT_TRUE(applier_owns(fields, "argo", ".spec.template.spec.volumes[0]"));
  EXPECT_FALSE(applier_owns(fields, "argo", ".spec.template.spec.volumes[1]"));
  // What the cluster sends is never trusted to be well formed.
  EXPECT_FALSE(applier_owns(json("x"), "flux", ".spec"));
  EXPECT_FALSE(applier_owns(json::array({1, json::array(), nullptr}), "flux", ".spec"));
}

}  // namespace
}  // namespace gracekeeper::controller::testing
