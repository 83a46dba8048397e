// What the cluster holds beyond Deployments and policies: the Services that
// decide whether pods need a wait at all, policies that select the same
// Deployments, and re-tunes spread over time so a risen figure does not
// restart a whole namespace at once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../../support/reconciler_fakes.h"
#include "gracekeeper/core/time.h"
#include "gracekeeper/deployment/event_ledger.h"
#include "gracekeeper/deployment/services.h"

namespace gracekeeper::controller::testing {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

const json& pod_spec(const FakeWriter::Call& call) {
  return call.configuration["spec"]["template"]["spec"];
}

// A Deployment whose pods only the labels given select.
json deployment_labelled(const std::string& name, json labels) {
  json d = deployment(name);
  d["spec"]["template"]["metadata"]["labels"] = std::move(labels);
  return d;
}

TEST(Services, OnlyServicesThatSelectPodsAreCached) {
  auto service = [](json spec) {
    return json{{"metadata", {{"name", "s"}, {"namespace", "shop"}}}, {"spec", std::move(spec)}};
  };
  EXPECT_TRUE(project_service(service({{"selector", {{"app", "web"}}}})));
  EXPECT_FALSE(
      project_service(service({{"type", "ExternalName"}, {"externalName", "db.example"}})));
  EXPECT_FALSE(project_service(
      service({{"type", "ExternalName"}, {"selector", {{"app", "web"}}}})));  // never endpoints
  EXPECT_FALSE(project_service(service(json::object())));  // endpoints managed by hand
  EXPECT_FALSE(project_service(service({{"selector", json::object()}})));
  EXPECT_FALSE(project_service(service({{"selector", 5}})));  // garbage: no crash, not cached
  EXPECT_FALSE(project_service(json::object()));
}

TEST(Services, ASelectorMatchesPodsCarryingAllItsPairs) {
  const CachedService s{{{"app", "web"}, {"tier", "front"}}};
  EXPECT_TRUE(selects(s, {{"app", "web"}, {"tier", "front"}, {"version", "2"}}));
  EXPECT_FALSE(selects(s, {{"app", "web"}}));
  EXPECT_FALSE(selects(s, {{"app", "web"}, {"tier", "back"}}));
  EXPECT_FALSE(selects(s, {}));
}

class ClusterTruthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world.put_policy(policy());
    ASSERT_TRUE(world.reconcile_policy("shop/default"));  // measured: 4 s, a 6 s wait
  }
  World world;
};

TEST_F(ClusterTruthTest, PodsNoServiceSelectsGetNoWaitUntilOneDoes) {
  world.put_deployment(deployment_labelled("batch", {{"app", "batch"}}));
  ASSERT_TRUE(world.reconcile_deployment("shop/batch"));
  ASSERT_EQ(world.writer.calls.size(), 1u);  // the grace and the strategy, no hook
  EXPECT_FALSE(pod_spec(world.writer.calls[0]).contains("containers"));
  ASSERT_THAT(world.events.reasons(), ElementsAre("Tuned"));
  EXPECT_THAT(world.events.recorded[0].note, HasSubstr("NotBehindService"));

  // A Service that selects the pods arrives: now they need the wait.
  world.put_service("batch", {{"app", "batch"}});
  ASSERT_TRUE(world.reconcile_deployment("shop/batch"));
  ASSERT_EQ(world.writer.calls.size(), 2u);
  EXPECT_EQ(
      pod_spec(world.writer.calls[1])["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"],
      6);
}

TEST_F(ClusterTruthTest, AServiceSelectsPodsWhoseContainersDeclareNoPort) {
  json d = deployment_labelled("quiet", {{"tier", "web"}});
  d["spec"]["template"]["spec"]["containers"][0].erase("ports");
  world.put_deployment(d);
  ASSERT_TRUE(world.reconcile_deployment("shop/quiet"));
  ASSERT_EQ(world.writer.calls.size(), 1u);
  EXPECT_EQ(
      pod_spec(world.writer.calls[0])["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"],
      6);
}

TEST_F(ClusterTruthTest, WithoutServiceWaitGivesUnselectedPodsTheWaitAnyway) {
  world.put_policy(policy({{"preStop", {{"withoutService", "Wait"}}}}));
  world.put_deployment(deployment_labelled("mesh", {{"app", "mesh"}}));
  ASSERT_TRUE(world.reconcile_deployment("shop/mesh"));
  ASSERT_EQ(world.writer.calls.size(), 1u);
  EXPECT_EQ(
      pod_spec(world.writer.calls[0])["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"],
      6);
}

TEST_F(ClusterTruthTest, TwoPoliciesSelectingOneDeploymentBothReportTheConflict) {
  world.put_policy(policy({}, "other"));
  ASSERT_TRUE(world.reconcile_policy("shop/other"));
  world.put_deployment(deployment("web"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_THAT(world.writer.calls, IsEmpty());
  EXPECT_THAT(world.events.reasons(), ElementsAre("AmbiguousPolicy"));

  for (const char* name : {"default", "other"}) {
    SCOPED_TRACE(name);
    world.clock.advance(std::chrono::seconds(1));
    ASSERT_TRUE(world.reconcile_policy(std::string("shop/") + name));
    const json& status = world.policy_objects.at(std::string("shop/") + name)["status"];
    EXPECT_EQ(condition(status, "Ready", "status"), "False");
    EXPECT_EQ(condition(status, "Ready", "reason"), "Conflict");
    const std::string other = std::string(name) == "default" ? "other" : "default";
    EXPECT_THAT(condition(status, "Ready", "message"),
                HasSubstr("ShutdownPolicy " + other + " also selects 1 Deployment (web)"));
    EXPECT_EQ(status["deployments"]["managed"], 0);
  }

  // The Deployment names one: no conflict left, and it is governed.
  json named = deployment("web");
  named["metadata"]["annotations"]["gracekeeper.dev/policy"] = "other";
  world.put_deployment(named);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 1u);
  for (const char* name : {"default", "other"}) {
    world.clock.advance(std::chrono::seconds(1));
    ASSERT_TRUE(world.reconcile_policy(std::string("shop/") + name));
    const json& status = world.policy_objects.at(std::string("shop/") + name)["status"];
    EXPECT_EQ(condition(status, "Ready", "status"), "True") << name;
  }
}

TEST(RolloutStatus, CompleteAsKubectlRolloutStatusSaysIt) {
  RolloutStatus r{3, 2, 3, 3, 3, false};
  EXPECT_TRUE(r.complete(2));
  EXPECT_FALSE(r.complete(3));  // not observed yet
  r.replicas = 4;               // an old pod is still there
  EXPECT_FALSE(r.complete(2));
  r = {3, 2, 3, 2, 2, false};  // surged: 2 updated of 3
  EXPECT_FALSE(r.complete(2));
  r.deadline_exceeded = true;  // gave up: the slot is free
  EXPECT_TRUE(r.complete(2));
}

TEST_F(ClusterTruthTest, ARisenFigureReTunesAtMostMaxConcurrentRolloutsAtATime) {
  world.put_policy(policy({{"changes", {{"maxConcurrentRollouts", 2}}}}));
  const std::vector<std::string> keys = {"shop/a", "shop/b", "shop/c", "shop/d", "shop/e"};
  for (const auto& key : keys) {
    world.put_deployment(deployment(key.substr(5)));
    ASSERT_TRUE(world.reconcile_deployment(key));  // first tunes are never held back
    rollout_done(world, key);
  }
  ASSERT_EQ(world.writer.calls.size(), 5u);

  // The figure rises from 4 s to 8 s: every wait is too short now.
  world.meter.seconds = 8;
  world.clock.advance(std::chrono::seconds(61));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  std::size_t held = 0;
  for (const auto& key : keys) {
    auto r = world.reconcile_deployment(key);
    ASSERT_TRUE(r);
    if (r->requeue_after) ++held;
  }
  EXPECT_EQ(world.writer.calls.size(), 7u);  // two re-tunes went out
  EXPECT_EQ(held, 3u);
  EXPECT_THAT(world.events.reasons(), Contains("RolloutQueued"));

  // Polling again changes nothing while both are still rolling out.
  for (const auto& key : keys) ASSERT_TRUE(world.reconcile_deployment(key));
  EXPECT_EQ(world.writer.calls.size(), 7u);

  // One finishes: exactly one more starts.
  rollout_done(world, world.writer.calls[5].key);
  for (const auto& key : keys) ASSERT_TRUE(world.reconcile_deployment(key));
  EXPECT_EQ(world.writer.calls.size(), 8u);

  // All finish as they go: every Deployment ends re-tuned, 10 writes in all.
  for (int round = 0; round < 5; ++round) {
    for (const auto& key : keys) rollout_done(world, key);
    for (const auto& key : keys) ASSERT_TRUE(world.reconcile_deployment(key));
  }
  EXPECT_EQ(world.writer.calls.size(), 10u);
  for (std::size_t i = 5; i < 10; ++i) {
    EXPECT_EQ(
        pod_spec(
            world.writer.calls[i])["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"],
        12);
  }
}

// A percentage resolves against the workloads the policy governs in the
// stores, not against the count its status last showed: a status written
// before the Deployments arrived must not shrink the slots to one.
TEST_F(ClusterTruthTest, APercentOfMaxConcurrentRolloutsCountsTheStoresNotTheStatus) {
  world.put_policy(policy({{"changes", {{"maxConcurrentRollouts", "40%"}}}}));
  const std::vector<std::string> keys = {"shop/a", "shop/b", "shop/c", "shop/d", "shop/e"};
  for (const auto& key : keys) {
    world.put_deployment(deployment(key.substr(5)));
    ASSERT_TRUE(world.reconcile_deployment(key));
    rollout_done(world, key);
  }
  world.meter.seconds = 8;
  world.clock.advance(std::chrono::seconds(61));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  json stale = world.policy_objects.at("shop/default");
  ASSERT_EQ(stale["status"]["deployments"]["managed"], 5);
  stale["status"]["deployments"]["managed"] = 0;
  world.put_policy(stale);

  std::size_t held = 0;
  for (const auto& key : keys) {
    auto r = world.reconcile_deployment(key);
    ASSERT_TRUE(r);
    if (r->requeue_after) ++held;
  }
  EXPECT_EQ(world.writer.calls.size(), 7u);  // 40 % of 5, rounded up: two re-tunes
  EXPECT_EQ(held, 3u);
}

// A deploy that writes the manifest's own values back, as `kubectl apply`
// or `helm upgrade` does with an Update: grace 30, 25%/25%, and the manager
// that now owns the grace.
void set_back(World& world, const std::string& key) {
  json object = world.objects.at(key);
  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 30;
  object["spec"]["strategy"] = {
      {"type", "RollingUpdate"},
      {"rollingUpdate", {{"maxSurge", "25%"}, {"maxUnavailable", "25%"}}}};
  object["metadata"]["generation"] = object["metadata"].value("generation", 1) + 1;
  object["metadata"]["managedFields"] = {
      {{"manager", "helm"},
       {"operation", "Update"},
       {"fieldsV1",
        {{"f:spec",
          {{"f:template",
            {{"f:spec", {{"f:terminationGracePeriodSeconds", json::object()}}}}}}}}}}};
  world.put_deployment(object);
}

TEST_F(ClusterTruthTest, FieldsSetBackTwiceAreAFieldFightNotARolloutLoop) {
  world.put_deployment(deployment("web"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.writer.calls.size(), 1u);

  set_back(world, "shop/web");  // the first time: repaired
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.writer.calls.size(), 2u);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));  // the watch brings the repair back
  EXPECT_THAT(world.events.reasons(), ::testing::Not(Contains("FieldFight")));

  world.clock.advance(std::chrono::seconds(20));
  set_back(world, "shop/web");  // again within minIntervalSeconds: a fight
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 2u);  // no third rollout
  ASSERT_THAT(world.events.reasons(), Contains("FieldFight"));
  const auto& fight = *std::ranges::find_if(world.events.recorded,
                                            [](const auto& e) { return e.reason == "FieldFight"; });
  EXPECT_EQ(fight.type, kube::EventType::Warning);
  EXPECT_THAT(fight.note, HasSubstr("\"helm\" set gracekeeper's fields back twice within 3600s"));
  EXPECT_THAT(fight.note, HasSubstr("terminationGracePeriodSeconds: 46s -> 30s"));
  EXPECT_THAT(fight.note, HasSubstr("maxUnavailable: 0 -> 25%"));

  // More syncs of the same manifest: nothing written, nothing said again.
  for (int i = 0; i < 5; ++i) {
    world.clock.advance(std::chrono::seconds(20));
    ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  }
  EXPECT_EQ(world.writer.calls.size(), 2u);
  EXPECT_EQ(std::ranges::count(world.events.reasons(), std::string("FieldFight")), 1);

  // Once the interval has passed with no new set-back, the budget is repaired again.
  world.clock.advance(std::chrono::seconds(3600));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 3u);
}

TEST_F(ClusterTruthTest, AFigureThatRisesIsNotASetBack) {
  world.put_deployment(deployment("web"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  for (double seconds : {8.0, 12.0, 16.0}) {
    world.meter.seconds = seconds;
    world.clock.advance(std::chrono::seconds(61));
    ASSERT_TRUE(world.reconcile_policy("shop/default"));
    ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  }
  EXPECT_EQ(world.writer.calls.size(), 4u);
  EXPECT_THAT(world.events.reasons(), ::testing::Not(Contains("FieldFight")));
}

// A new leader reads the Tuned Events back: the findings folded into them
// count as reported too, or it would report them again on its own. What an
// Event reports is in its annotation, not read back from its note (which
// the server may have cut at 1 kB).
TEST(ReportedEvents, ATunedEventReportsItselfAndTheFindingsFoldedIntoIt) {
  PlannedWrite w;
  w.changes = "terminationGracePeriodSeconds: 30s -> 46s";
  w.propagation_seconds = 4;
  w.findings_after = {
      {"SingleReplica", budget::Severity::Info, "",
       "one replica: each rollout and node drain leaves a single target"},
      {"ExistingPreStopKept", budget::Severity::Info, "app",
       "the preStop hook (exec) was written by hand and is kept; its duration is unknown, so "
       "the budget counts it as 6s; " +
           std::string(1100, 'x')},
      {"TCPReadinessProbe", budget::Severity::Warning, "proxy", "readiness by tcpSocket: x"}};
  std::vector<kube::EventRecord> after;
  for (const auto& f : w.findings_after) after.push_back(finding_event(f));
  kube::EventRecord tuned = tuned_event(w, "default");
  EventLedger::stamp(tuned, after);

  const std::string cut = tuned.note.substr(0, 1024);  // as the server keeps it
  const auto reports = EventLedger::reports(tuned.annotations, tuned.reason, cut);
  ASSERT_EQ(reports.size(), 4u);
  EXPECT_EQ(reports[0], EventLedger::hash(tuned.reason, tuned.note));
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(reports[i + 1], EventLedger::hash(after[i].reason, after[i].note));
  }
  // Seeded with them, a new leader's ledger reports none of the findings.
  EventLedger ledger;
  std::multimap<std::string, std::uint64_t> seed;
  for (std::uint64_t h : reports) seed.emplace("shop/web", h);
  ledger.seed(seed);
  EXPECT_THAT(ledger.unreported("shop/web", after), IsEmpty());
  // One that was not folded in is reported.
  kube::EventRecord other{{}, kube::EventType::Warning, "NotBehindService", "Tune", "no Service"};
  EXPECT_EQ(ledger.unreported("shop/web", {other}).size(), 1u);
}

TEST(ReportedEvents, TheAnnotationIsReadStrictlyAndWithoutItAnEventReportsItself) {
  // FNV-1a of "Tuned\x1fx": the same in every build.
  EXPECT_EQ(EventLedger::hash("Tuned", "x"), 0x8f62caa48fee79d2ULL);
  const std::string key(EventLedger::kReportsAnnotation);
  EXPECT_THAT(EventLedger::reports({}, "Tuned", "x"), ElementsAre(0x8f62caa48fee79d2ULL));
  EXPECT_THAT(EventLedger::reports({{"other", "1"}}, "Tuned", "x"),
              ElementsAre(0x8f62caa48fee79d2ULL));
  EXPECT_THAT(EventLedger::reports({{key,
                                     "00000000000000ff,xyz,,0123456789abcdef0,"
                                     "-000000000000001,ffffffffffffffff"}},
                                   "Tuned", "x"),
              ElementsAre(0xffULL, 0xffffffffffffffffULL));
  EXPECT_THAT(EventLedger::reports({{key, ""}}, "Tuned", "x"), IsEmpty());
  std::string many;
  for (int i = 0; i < 100; ++i) many += "00000000000000aa,";
  EXPECT_EQ(EventLedger::reports({{key, many}}, "Tuned", "x").size(), EventLedger::kMaxReports);
}

// Issue 32: the budget always holds.

// A FieldFight ends by itself: the fight's reconcile asks to be run again
// when the interval has passed, and that run repairs, with no other event.
TEST_F(ClusterTruthTest, AFieldFightEndsOnItsOwnWhenTheIntervalPasses) {
  world.put_deployment(deployment("web"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  set_back(world, "shop/web");
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));  // repaired once
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  world.clock.advance(std::chrono::seconds(20));
  set_back(world, "shop/web");
  auto fight = world.reconcile_deployment("shop/web");
  ASSERT_TRUE(fight);
  ASSERT_THAT(world.events.reasons(), Contains("FieldFight"));
  ASSERT_EQ(world.writer.calls.size(), 2u);
  // The first set-back was 20 s ago: the fight is over 3580 s from now.
  ASSERT_TRUE(fight->requeue_after.has_value());
  EXPECT_EQ(*fight->requeue_after, std::chrono::seconds(3580));
  world.clock.advance(*fight->requeue_after);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));  // the requeue, nothing else
  EXPECT_EQ(world.writer.calls.size(), 3u);
  EXPECT_EQ(pod_spec(world.writer.calls[2])["terminationGracePeriodSeconds"], 46);
}

// A paused Deployment whose template changed never completes its rollout:
// it must not hold a slot of maxConcurrentRollouts, or no other re-tune of
// its policy would ever go out.
TEST_F(ClusterTruthTest, APausedDeploymentHoldsNoRolloutSlot) {
  world.put_policy(policy({{"changes", {{"maxConcurrentRollouts", 1}}}}));
  for (const std::string name : {"paused", "web"}) {
    world.put_deployment(deployment(name));
    ASSERT_TRUE(world.reconcile_deployment("shop/" + name));
    rollout_done(world, "shop/" + name);
  }
  // Paused, and re-tuned while paused: its new template never rolls out.
  json paused = world.objects.at("shop/paused");
  paused["spec"]["paused"] = true;
  world.put_deployment(paused);
  world.meter.seconds = 8;
  world.clock.advance(std::chrono::seconds(61));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  ASSERT_TRUE(world.reconcile_deployment("shop/paused"));
  ASSERT_EQ(world.writer.calls.size(), 3u);
  json observed = world.objects.at("shop/paused");
  observed["status"]["observedGeneration"] = observed["metadata"]["generation"];
  observed["status"]["updatedReplicas"] = 0;  // the old pod stays: paused
  world.put_deployment(observed);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 4u) << "web waited for a paused Deployment's slot";
  EXPECT_EQ(world.writer.calls.back().key, "shop/web");
}

// A Deployment whose rollout finished and that later lost a pod (a crash
// loop, a node gone) replaces nothing: it holds no slot, though it is not
// complete in kubectl's sense (fewer pods available than desired).
TEST(RolloutStatus, AFinishedRolloutThatLostAPodHoldsNoSlot) {
  RolloutStatus r{3, 2, 3, 3, 2, false};  // every pod new, one not available
  r.progressing_reason = "NewReplicaSetAvailable";
  EXPECT_FALSE(r.complete(2));
  EXPECT_FALSE(r.in_flight(2));
  r.progressing_reason = "ReplicaSetUpdated";  // the rollout's last pod is not available yet
  EXPECT_TRUE(r.in_flight(2));
  r.progressing_reason = "NewReplicaSetAvailable";
  EXPECT_TRUE(r.in_flight(3));  // a new template: replacing again
}

TEST(RolloutStatus, AStatefulSetHoldsASlotOnlyWhileItsRevisionsDiffer) {
  RolloutStatus r{3, 2, 3, 3, 2, false};  // every pod at the update revision, one not ready
  r.stateful = true;
  EXPECT_FALSE(r.in_flight(2));  // finished, then lost a pod
  r.revisions_differ = true;     // the last pod is not ready yet: still rolling
  EXPECT_TRUE(r.in_flight(2));
  r.partition = 2;  // pods below 2 keep the old revision for good: the one above is new
  r.updated = 1;
  EXPECT_FALSE(r.in_flight(2));
  r.updated = 0;
  EXPECT_TRUE(r.in_flight(2));
}

TEST(RolloutStatus, PausedAndStalledRolloutsHoldNoSlotButStillRoll) {
  RolloutStatus r{3, 2, 4, 1, 3, false};  // observed, one new pod of three, old ones left
  EXPECT_TRUE(r.in_flight(2));
  EXPECT_TRUE(r.rolling(2));
  r.paused = true;
  EXPECT_FALSE(r.in_flight(2));
  EXPECT_TRUE(r.rolling(2));  // the old pods keep the old template
  r.paused = false;
  r.deadline_exceeded = true;
  EXPECT_FALSE(r.in_flight(2));
  EXPECT_TRUE(r.rolling(2));
  r = {3, 2, 3, 3, 3, false};
  EXPECT_FALSE(r.rolling(2));
  EXPECT_TRUE(r.rolling(3));  // a new generation not observed yet
  r.terminating = 1;          // every pod new, an old one still shutting down
  EXPECT_TRUE(r.rolling(2));
  EXPECT_FALSE(RolloutStatus{}.rolling(1));  // never observed: no pod exists yet
}

// A rollout that stopped moving (its new pods never become ready, and a
// StatefulSet has no progress deadline) holds its slot for stall_after (10
// minutes) of no progress, then frees it with a RolloutStalled Warning.
TEST_F(ClusterTruthTest, AStalledRolloutFreesItsSlotWithAWarning) {
  world.put_policy(policy({{"changes", {{"maxConcurrentRollouts", 1}}}}));
  for (const std::string name : {"stuck", "web"}) {
    world.put_deployment(deployment(name));
    ASSERT_TRUE(world.reconcile_deployment("shop/" + name));
    rollout_done(world, "shop/" + name);
  }
  world.meter.seconds = 8;
  world.clock.advance(std::chrono::seconds(61));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  ASSERT_TRUE(world.reconcile_deployment("shop/stuck"));  // re-tuned: takes the slot
  ASSERT_EQ(world.writer.calls.size(), 3u);
  // Its new pod never becomes ready: 1 of 3 new, the old ones stay.
  json stuck = world.objects.at("shop/stuck");
  stuck["status"] = {{"observedGeneration", stuck["metadata"]["generation"]},
                     {"replicas", 4},
                     {"updatedReplicas", 1},
                     {"availableReplicas", 3}};
  world.put_deployment(stuck);
  ASSERT_TRUE(world.reconcile_deployment("shop/stuck"));  // notes its progress
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 3u) << "web went out while the slot was held";

  world.clock.advance(std::chrono::seconds(599));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 3u) << "the slot was freed before 600 s";
  EXPECT_THAT(world.events.reasons(), Not(Contains("RolloutStalled")));

  world.clock.advance(std::chrono::seconds(1));
  ASSERT_TRUE(world.reconcile_deployment("shop/stuck"));  // the requeue at the stall
  EXPECT_THAT(world.events.reasons(), Contains("RolloutStalled"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.writer.calls.size(), 4u) << "a stalled rollout still held the slot";
  EXPECT_EQ(world.writer.calls.back().key, "shop/web");
  EXPECT_TRUE(std::ranges::any_of(world.requeued, [](const auto& r) {
    return r.first == "shop/stuck" && r.second == std::chrono::seconds(600);
  })) << "no reconcile was asked for at the stall";
}

// A warning that breaks the budget (a hook of unknown length, kept under
// existing: Keep) is not hidden behind Rolling while old pods roll.
TEST_F(ClusterTruthTest, ABrokenBudgetIsNotReportedAsRolling) {
  json d = deployment("web");
  d["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"] =
      json{{"httpGet", {{"path", "/quit"}, {"port", 8080}}}};
  world.put_deployment(d);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  json object = world.objects.at("shop/web");
  object["status"] = {{"observedGeneration", object["metadata"]["generation"]},
                      {"replicas", 4},
                      {"updatedReplicas", 1},
                      {"availableReplicas", 3}};
  world.put_deployment(object);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  const json status = world.policy_objects.at("shop/default")["status"];
  EXPECT_EQ(status["deployments"]["rolling"], 1);
  EXPECT_EQ(condition(status, "BudgetHolds", "status"), "False");
  EXPECT_EQ(condition(status, "BudgetHolds", "reason"), "NotCompliant");
}

// BudgetHolds describes the pods: a Deployment whose old pods still roll
// (with the old, shorter wait) is Rolling, not compliant, until they are gone.
TEST_F(ClusterTruthTest, ADeploymentIsNotCompliantWhileOldPodsStillRoll) {
  world.put_deployment(deployment("web"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  // The controller observed the tune: 1 new pod, the old one still there.
  json object = world.objects.at("shop/web");
  object["status"] = {{"observedGeneration", object["metadata"]["generation"]},
                      {"replicas", 2},
                      {"updatedReplicas", 1},
                      {"availableReplicas", 2}};
  world.put_deployment(object);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  json status = world.policy_objects.at("shop/default")["status"];
  EXPECT_EQ(status["deployments"]["compliant"], 0);
  EXPECT_EQ(status["deployments"]["rolling"], 1);
  EXPECT_EQ(condition(status, "BudgetHolds", "status"), "False");
  EXPECT_EQ(condition(status, "BudgetHolds", "reason"), "Rolling");
  EXPECT_THAT(condition(status, "BudgetHolds", "message"), HasSubstr("1 rolling out"));

  rollout_done(world, "shop/web");
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  status = world.policy_objects.at("shop/default")["status"];
  EXPECT_EQ(status["deployments"]["compliant"], 1);
  EXPECT_EQ(status["deployments"]["rolling"], 0);
  EXPECT_EQ(condition(status, "BudgetHolds", "reason"), "AllCompliant");
}

// A source that fails and falls back to a higher staticSeconds is no
// repair: the re-tune waits for minIntervalSeconds like any other change.
TEST_F(ClusterTruthTest, AFallbackThatRaisesTheFigureIsRateLimited) {
  world.put_deployment(deployment("web"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));  // tuned to 4 s: a 6 s wait
  rollout_done(world, "shop/web");
  world.meter.seconds = 10;  // the fallback: staticSeconds 10
  world.meter.available = false;
  world.clock.advance(std::chrono::seconds(61));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  auto r = world.reconcile_deployment("shop/web");
  ASSERT_TRUE(r);
  EXPECT_EQ(world.writer.calls.size(), 1u) << "a fallback raise went out at once";
  ASSERT_TRUE(r->requeue_after.has_value());  // held back until the interval is over
  EXPECT_EQ(*r->requeue_after, std::chrono::seconds(3600 - 61));
  world.clock.advance(*r->requeue_after);
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 2u);

  // A measured raise is a repair: at once.
  rollout_done(world, "shop/web");
  world.meter.available = true;
  world.meter.seconds = 20;
  world.clock.advance(std::chrono::seconds(61));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 3u);
}

// drain.source Observed: a pod killed at the grace raises the grace without
// waiting for minSamples, rate-limited like any change; the raised drain is
// recorded, so that a restart (which forgets the samples) keeps it.
TEST_F(ClusterTruthTest, AMeasuredDrainRaisesTheGraceOnceDueAndIsKept) {
  world.put_policy(policy({{"drainSeconds", 5}, {"drain", {{"source", "Observed"}}}}));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  world.put_deployment(deployment("web"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));  // a 6 s wait, the declared 5 s drain
  ASSERT_EQ(world.writer.calls.size(), 1u);
  rollout_done(world, "shop/web");

  // A pod was killed 15 s after SIGTERM: its drain was longer, taken as 30 s.
  world.drains.add("Deployment/shop/web", {world.clock.now(), 15, true});
  world.clock.advance(std::chrono::seconds(61));
  auto r = world.reconcile_deployment("shop/web");
  ASSERT_TRUE(r);
  EXPECT_EQ(world.writer.calls.size(), 1u) << "a measured raise went out before it was due";
  ASSERT_TRUE(r->requeue_after.has_value());
  world.clock.advance(*r->requeue_after);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.writer.calls.size(), 2u);
  EXPECT_EQ(pod_spec(world.writer.calls[1])["terminationGracePeriodSeconds"], 6 + 30 + 10);
  const json applied = json::parse(world.objects.at("shop/web")["metadata"]["annotations"].value(
      "gracekeeper.dev/applied", "{}"));
  EXPECT_EQ(applied.value("drain", 0), 30);
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  const json status = world.policy_objects.at("shop/default")["status"];
  EXPECT_EQ(status["drain"], json({{"source", "Observed"}, {"seconds", 30}, {"workload", "web"}}));

  // The samples are gone (a restart): the recorded drain holds.
  rollout_done(world, "shop/web");
  world.drains.erase("Deployment/shop/web");
  world.clock.advance(std::chrono::seconds(7200));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_EQ(world.writer.calls.size(), 2u);
}

// Each set-back of a fight is an Event of its own (the note names the
// generation). The fight is over once minIntervalSeconds have passed since
// gracekeeper's last repair, whatever came after it: at most one repair,
// and so one rollout, per interval.
TEST_F(ClusterTruthTest, EachSetBackOfAFightIsANewEventAndTheRepairSetsItsEnd) {
  world.put_deployment(deployment("web"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  set_back(world, "shop/web");
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));  // repaired
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  world.clock.advance(std::chrono::seconds(20));
  set_back(world, "shop/web");
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  world.clock.advance(std::chrono::seconds(600));
  set_back(world, "shop/web");  // a deploy during the fight: a new generation
  auto r = world.reconcile_deployment("shop/web");
  ASSERT_TRUE(r);
  std::vector<std::string> notes;
  for (const auto& e : world.events.recorded) {
    if (e.reason == "FieldFight") notes.push_back(e.note);
  }
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_THAT(notes[0], HasSubstr("back twice within 3600s"));
  EXPECT_THAT(notes[1], HasSubstr("the last at generation 6"));
  EXPECT_EQ(world.writer.calls.size(), 2u);
  // The repair was 620 s ago.
  ASSERT_TRUE(r->requeue_after.has_value());
  EXPECT_EQ(*r->requeue_after, std::chrono::seconds(2980));
}

// The fight is kept on the object: the repair records when it was made
// (`setBack` in gracekeeper.dev/applied), so an operator with no memory of
// it, as after a restart, still holds the fight and ends it on time.
TEST_F(ClusterTruthTest, AFightOutlivesARestartOnTheObjectAlone) {
  world.put_deployment(deployment("web"));
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  const auto repaired_at = world.clock.now();
  set_back(world, "shop/web");
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));  // repaired, and recorded
  ASSERT_EQ(world.writer.calls.size(), 2u);
  const auto record =
      json::parse(world.objects.at("shop/web")["metadata"]["annotations"]["gracekeeper.dev/applied"]
                      .get<std::string>());
  EXPECT_EQ(record.value("setBack", ""), core::format_rfc3339(repaired_at));

  world.clock.advance(std::chrono::seconds(20));
  set_back(world, "shop/web");
  // A new reconciler over the same stores: nothing in memory.
  DeploymentReconciler restarted({world.deployments, world.policies, world.services, world.book,
                                  world.writer, world.events, world.clock, world.metrics,
                                  [](const std::string&) {}});
  budget::Capabilities c;
  c.native_sleep = true;
  restarted.set_capabilities(c);
  auto r = world.run(restarted.reconcile("shop/web"));
  ASSERT_TRUE(r);
  EXPECT_EQ(world.writer.calls.size(), 2u);  // no second rollout
  EXPECT_THAT(world.events.reasons(), Contains("FieldFight"));
  ASSERT_TRUE(r->requeue_after.has_value());
  EXPECT_EQ(*r->requeue_after, std::chrono::seconds(3580));
  world.clock.advance(*r->requeue_after);
  ASSERT_TRUE(world.run(restarted.reconcile("shop/web")));
  EXPECT_EQ(world.writer.calls.size(), 3u);  // the interval passed: repaired
}

// Issue 36: a StatefulSet is cached like a Deployment, with its kind, and its
// rollout read from the StatefulSet's status and updateStrategy.
TEST(RolloutStatus, AStatefulSetsRolloutHonoursPartitionAndOnDelete) {
  json sts = {
      {"apiVersion", "apps/v1"},
      {"metadata",
       {{"name", "db"},
        {"namespace", "shop"},
        {"uid", "u-db"},
        {"generation", 3},
        {"annotations", {{"gracekeeper.dev/enabled", "true"}}}}},
      {"spec",
       {{"replicas", 3},
        {"updateStrategy", {{"type", "RollingUpdate"}, {"rollingUpdate", {{"partition", 1}}}}},
        {"template",
         {{"metadata", {{"labels", {{"app", "db"}}}}},
          {"spec", {{"containers", {{{"name", "db"}, {"image", "db:1"}}}}}}}}}},
      {"status",
       {{"observedGeneration", 3},
        {"replicas", 3},
        {"updatedReplicas", 2},
        {"availableReplicas", 3}}}};
  const auto cached = project_statefulset(sts);  // a LIST item: no kind
  ASSERT_TRUE(cached);
  const auto projected = cached->project();
  ASSERT_TRUE(projected);
  EXPECT_EQ(projected->kind, "StatefulSet");
  const RolloutStatus& r = cached->rollout;
  EXPECT_TRUE(r.stateful);
  EXPECT_EQ(r.partition, 1);
  // Every pod at or above the partition is new: complete, no slot held; the
  // pod below it keeps the old template, so it is still rolling.
  EXPECT_TRUE(r.complete(3));
  EXPECT_FALSE(r.in_flight(3));
  EXPECT_TRUE(r.rolling(3));
  RolloutStatus moving = r;
  moving.updated = 1;  // the controller is replacing ordinal 1
  EXPECT_TRUE(moving.in_flight(3));
  RolloutStatus on_delete = moving;
  on_delete.on_delete = true;  // never moves by itself: no slot
  EXPECT_FALSE(on_delete.in_flight(3));
  EXPECT_TRUE(on_delete.rolling(3));
  RolloutStatus done = r;
  done.partition = 0;
  done.updated = 3;
  EXPECT_FALSE(done.rolling(3));
  EXPECT_TRUE(done.complete(3));
  // Not opted in: not cached.
  sts["metadata"]["annotations"] = json::object();
  EXPECT_FALSE(project_statefulset(sts));
}

// Issue 36: the StatefulSet controller is the Deployment controller with kind
// StatefulSet: one apply of a StatefulSet configuration (no strategy), a
// Tuned Event about the StatefulSet, its counts apart from the Deployments',
// and the rollout slots of a policy shared by both kinds.
TEST(StatefulSets, AreTunedInOneWriteAndCountedApart) {
  World world;
  world.put_policy(policy({{"changes", {{"maxConcurrentRollouts", 1}}}}));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  json sts = deployment("db");
  sts["kind"] = "StatefulSet";
  sts["metadata"]["uid"] = "u-db";
  sts["spec"]["updateStrategy"] = {{"type", "RollingUpdate"}};
  world.put_deployment(sts);
  ASSERT_EQ(world.deployments.get("shop/db")->project()->kind, "StatefulSet");
  std::int64_t web_in_flight = 0;
  DeploymentReconciler statefulsets({world.deployments,
                                     world.policies,
                                     world.services,
                                     world.book,
                                     world.writer,
                                     world.events,
                                     world.clock,
                                     world.metrics,
                                     [](const std::string&) {},
                                     {},
                                     "StatefulSet",
                                     [&](const std::string&) { return web_in_flight; }});
  statefulsets.set_capabilities(budget::Capabilities{});
  ASSERT_TRUE(world.run(statefulsets.reconcile("shop/db")));
  ASSERT_EQ(world.writer.calls.size(), 1u);
  const json& config = world.writer.calls[0].configuration;
  EXPECT_EQ(config["kind"], "StatefulSet");
  EXPECT_FALSE(config["spec"].contains("strategy"));
  EXPECT_EQ(config["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 46);
  ASSERT_THAT(world.events.reasons(), ElementsAre("Tuned"));
  EXPECT_EQ(world.events.recorded[0].regarding.kind, "StatefulSet");
  EXPECT_EQ(world.events.recorded[0].regarding.uid, "u-db");
  // Written and brought back by the watch: nothing more to do or say.
  ASSERT_TRUE(world.run(statefulsets.reconcile("shop/db")));
  EXPECT_EQ(world.writer.calls.size(), 1u);
  EXPECT_EQ(world.events.recorded.size(), 1u);
  const DeploymentCounts counts = PolicyReconciler::count(statefulsets, "shop/default");
  EXPECT_EQ(counts.managed, 1);
  EXPECT_EQ(counts.compliant, 1);

  // A re-tune waits for a slot a Deployment of the same policy holds.
  json observed = world.objects.at("shop/db");
  observed["status"] = {{"observedGeneration", observed["metadata"]["generation"]},
                        {"replicas", 3},
                        {"updatedReplicas", 3},
                        {"availableReplicas", 3}};
  world.put_deployment(observed);
  web_in_flight = 1;
  world.meter.seconds = 8;
  world.clock.advance(std::chrono::seconds(61));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  ASSERT_TRUE(world.run(statefulsets.reconcile("shop/db")));
  EXPECT_EQ(world.writer.calls.size(), 1u) << "re-tuned while a Deployment held the slot";
  EXPECT_EQ(world.events.recorded.back().reason, "RolloutQueued");
  web_in_flight = 0;
  ASSERT_TRUE(world.run(statefulsets.reconcile("shop/db")));
  EXPECT_EQ(world.writer.calls.size(), 2u);
}
}  // namespace
}  // namespace gracekeeper::controller::testing
