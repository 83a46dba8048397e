// The ShutdownPolicy controller: its status is computed from the stores on
// each reconcile, its measurement is refreshed on a schedule the fake clock
// drives, and it waits for queued Deployments before it counts them.
#include "gracekeeper/policy/policy_reconciler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../../../src/operator/kube_ports.h"  // propagation_meter, the real one
#include "../../support/reconciler_fakes.h"
#include "gracekeeper/core/time.h"

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

// What a process of the operator keeps in memory, on the World's stores and
// writers, with the real meter of source Observed: a restart is a new one.
struct Process {
  explicit Process(World& w)
      : world(w),
        meter(propagation_meter(nullptr, &samples)),
        deployments({w.deployments, w.policies, w.services, book, w.writer, w.events, w.clock,
                     w.metrics, [](const std::string&) {},
                     [](const std::string&, std::chrono::nanoseconds) {}}),
        policies({w.policies, w.deployments, book, *meter, w.status_writer, w.clock, w.metrics,
                  deployments, [](const std::string&) {}, [] { return true; }},
                 {}) {
    budget::Capabilities c;
    c.native_sleep = true;
    deployments.set_capabilities(c);
  }
  ReconcileResult reconcile_policy() { return world.run(policies.reconcile("shop/default")); }
  ReconcileResult reconcile_deployment() { return world.run(deployments.reconcile("shop/web")); }
  World& world;
  PropagationBook book;
  propagation::SampleBook samples;
  std::unique_ptr<PropagationMeter> meter;
  DeploymentReconciler deployments;
  PolicyReconciler policies;
};

json observed_policy() {
  return policy({{"propagation",
                  {{"source", "Observed"},
                   {"staticSeconds", 10},
                   {"observed", {{"minSamples", 3}, {"consumerSyncSeconds", 1}}}}}});
}

// A restart (a new process, helm upgrade) has no samples: the figure is the
// one the status holds, so no Deployment is tuned again, until samples come
// back or the value is an hour old, as for a last good value kept in memory.
TEST(PolicyReconciler, ARestartKeepsTheObservedFigureOfTheStatus) {
  World world;
  world.put_policy(observed_policy());
  world.put_deployment(deployment("web"));
  auto first = std::make_unique<Process>(world);
  for (int i = 0; i < 5; ++i) first->samples.add("shop", kStart - std::chrono::seconds(10 + i), 2);
  ASSERT_TRUE(first->reconcile_policy());
  ASSERT_EQ(world.status_writer.written.size(), 1u);
  EXPECT_EQ(world.status_writer.written[0]["propagation"]["seconds"], 3);  // 2 + 1
  EXPECT_EQ(world.status_writer.written[0]["propagation"]["source"], "Observed");
  ASSERT_TRUE(first->reconcile_deployment());
  ASSERT_EQ(world.writer.calls.size(), 1u);  // tuned to 3 s
  ASSERT_TRUE(first->reconcile_deployment());
  EXPECT_EQ(world.writer.calls.size(), 1u);
  const std::string sampled_at = world.status_writer.written[0]["propagation"]["sampledAt"];
  first.reset();

  world.clock.advance(std::chrono::minutes(10));
  auto second = std::make_unique<Process>(world);  // no samples
  ASSERT_TRUE(second->reconcile_policy());
  const PolicyMeasurement* m = second->book.find("shop/default");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->state.seconds, 3) << m->state.message;  // not staticSeconds 10
  EXPECT_EQ(m->state.source, "Observed");
  EXPECT_TRUE(m->fallback);
  EXPECT_FALSE(m->static_fallback);
  EXPECT_TRUE(m->seeded);
  const json& status = world.status_writer.written.back();
  EXPECT_EQ(status["propagation"]["seconds"], 3);
  EXPECT_EQ(status["propagation"]["sampledAt"], sampled_at);
  EXPECT_THAT(status["propagation"]["message"].get<std::string>(),
              HasSubstr("using the last good value 3s"));
  ASSERT_TRUE(second->reconcile_deployment());
  EXPECT_EQ(world.writer.calls.size(), 1u) << "the restart tuned the Deployment again";

  // Samples come back: measured again, the seeded value is gone.
  for (int i = 0; i < 3; ++i) second->samples.add("shop", world.clock.now(), 2);
  world.clock.advance(std::chrono::seconds(61));
  ASSERT_TRUE(second->reconcile_policy());
  EXPECT_FALSE(second->book.find("shop/default")->fallback);
  EXPECT_FALSE(second->book.find("shop/default")->seeded);
  second.reset();

  // An hour after sampledAt with no sample since: staticSeconds, as in memory.
  world.clock.advance(std::chrono::hours(1) + std::chrono::seconds(1));
  Process third(world);
  ASSERT_TRUE(third.reconcile_policy());
  EXPECT_EQ(third.book.find("shop/default")->state.seconds, 10);
  EXPECT_TRUE(third.book.find("shop/default")->static_fallback);
  EXPECT_EQ(world.status_writer.written.back()["propagation"]["source"], "Static");
}

// Issue 45, item 3: before minSamples, and after a restart with a stale
// status, the figure was staticSeconds without the declared consumers: a
// 5 s wait for traefik's 8 s, every termination late.
TEST(PolicyReconciler, TheObservedFallbackCoversTheSlowestDeclaredConsumer) {
  World world;
  world.put_policy(policy({{"propagation",
                            {{"source", "Observed"},
                             {"staticSeconds", 5},
                             {"observed",
                              {{"minSamples", 20},
                               {"consumerSyncSeconds", 1},
                               {"consumers", {{{"name", "traefik"}, {"syncSeconds", 8}}}}}}}}}));
  world.put_deployment(deployment("web"));
  auto check = [&world](const char* when) {
    SCOPED_TRACE(when);
    const json& status = world.status_writer.written.back();
    EXPECT_EQ(status["propagation"]["seconds"], 8);
    EXPECT_EQ(status["propagation"]["consumer"], "traefik");
    EXPECT_EQ(status["propagation"]["source"], "Static");  // still the staticSeconds fallback
    EXPECT_THAT(status["propagation"]["message"].get<std::string>(),
                HasSubstr("raised to 8s to cover the slowest declared consumer, traefik 8s"));
    EXPECT_EQ(condition(status, "MetricsAvailable", "reason"), "TooFewSamples");
    EXPECT_EQ(status["recommended"]["preStopSeconds"], 12);  // ceil(1.5 * 8)
  };
  {
    Process first(world);
    for (int i = 0; i < 3; ++i) first.samples.add("shop", kStart - std::chrono::seconds(10 + i), 2);
    ASSERT_TRUE(first.reconcile_policy());
    check("too few samples");
    ASSERT_TRUE(first.reconcile_deployment());
    ASSERT_EQ(world.writer.calls.size(), 1u);
    EXPECT_EQ(world.writer.calls[0].configuration["spec"]["template"]["spec"]["containers"][0]
                                                 ["lifecycle"]["preStop"]["sleep"]["seconds"],
              12);
  }
  // A restart two hours on: the status is too old to seed, the same figure.
  world.clock.advance(std::chrono::hours(2));
  Process second(world);
  ASSERT_TRUE(second.reconcile_policy());
  check("a restart with a stale status");
  ASSERT_TRUE(second.reconcile_deployment());
  EXPECT_EQ(world.writer.calls.size(), 1u) << "the restart tuned the Deployment again";
}

TEST(PolicyReconciler, WhatTheStatusSeedsAndWhatNot) {
  auto spec = budget::parse_policy_spec(budget::Json(observed_policy()["spec"]));
  ASSERT_TRUE(spec);
  const json status = {
      {"propagation",
       {{"seconds", 3.5}, {"source", "Observed"}, {"sampledAt", core::format_rfc3339(kStart)}}}};
  auto seeded = seed_last_good(*spec, status, kStart + std::chrono::minutes(59));
  ASSERT_TRUE(seeded);
  EXPECT_EQ(seeded->seconds, 3.5);
  EXPECT_EQ(seeded->sampled_at, kStart);
  EXPECT_FALSE(seed_last_good(*spec, status, kStart + std::chrono::minutes(61)));  // too old
  EXPECT_FALSE(seed_last_good(*spec, status, kStart - std::chrono::minutes(2)));   // future
  EXPECT_TRUE(seed_last_good(*spec, status, kStart - std::chrono::seconds(30)));  // a clock's drift
  json fallback = status;
  fallback["propagation"]["source"] = "Static";  // the staticSeconds fallback
  EXPECT_FALSE(seed_last_good(*spec, fallback, kStart));
  for (json bad :
       {json(nullptr), json::object(), json{{"propagation", "x"}},
        json{{"propagation", {{"source", "Observed"}, {"seconds", "3"}}}},
        json{{"propagation", {{"source", "Observed"}, {"seconds", -1}, {"sampledAt", "x"}}}}}) {
    EXPECT_FALSE(seed_last_good(*spec, bad, kStart)) << bad.dump();
  }
  auto prometheus = budget::parse_policy_spec(budget::Json(
      policy({{"propagation",
               {{"source", "Prometheus"},
                {"prometheus", {{"queries", {{{"name", "q"}, {"query", "x"}}}}}}}}})["spec"]));
  ASSERT_TRUE(prometheus);
  EXPECT_FALSE(seed_last_good(*prometheus, status, kStart));  // it measures at once
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
