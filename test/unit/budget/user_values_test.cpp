// The user's own values in the applied annotation (issue 17, item 3): recorded
// the first time gracekeeper changes a field, kept after that, read back, and
// a floor for the grace.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gracekeeper/budget/apply.h"
#include "gracekeeper/budget/engine.h"

namespace gracekeeper::budget {
namespace {

const auto kTime = std::chrono::sys_days{std::chrono::year{2026} / 11 / 30};

// The articles' Deployment: grace 30, no preStop, 25 %/25 %, drain 30 s.
Json article(const char* drain = "30") {
  Json object = Json::parse(R"({
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "checkout", "namespace": "shop-prod",
                 "annotations": {"gracekeeper.dev/enabled": "true"}},
    "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "checkout"}},
      "strategy": {"type": "RollingUpdate",
                   "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
      "template": {"metadata": {"labels": {"app": "checkout"}},
        "spec": {"terminationGracePeriodSeconds": 30,
          "containers": [{"name": "checkout", "image": "checkout:1.4.2",
            "ports": [{"containerPort": 8080}],
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}}]}}}})");
  object["metadata"]["annotations"]["gracekeeper.dev/drain-seconds"] = drain;
  return object;
}

Deployment project(const Json& object) {
  auto d = project_deployment(object);
  EXPECT_TRUE(d.has_value()) << (d ? "" : d.error().front().format());
  return d ? *d : Deployment{};
}

Context context_for(const PolicySpec& policy, double propagation) {
  Context ctx;
  ctx.policy = &policy;
  ctx.policy_name = "default";
  ctx.propagation_seconds = propagation;
  return ctx;
}

Json record_of(const Json& object) {
  return Json::parse(
      object["metadata"]["annotations"]["gracekeeper.dev/applied"].get<std::string>());
}

// Plans and writes, as the operator or `plan` would; returns the plan.
Plan tune(Json& object, const Context& ctx) {
  Plan p = plan(project(object), ctx);
  apply_plan(object, p, ctx.policy_name, kTime);
  return p;
}

TEST(UserValues, TheFirstTuneRecordsWhatItChangesAndTheRecordIsSmall) {
  PolicySpec policy;
  auto ctx = context_for(policy, 4);
  Json object = article();
  ASSERT_TRUE(tune(object, ctx).changed());
  const Json record = record_of(object);
  EXPECT_EQ(record["user"], Json::parse(R"({"grace":30,"maxSurge":"25%","maxUnavailable":"25%",
                                            "preStop":{"checkout":null}})"));

  const Deployment d = project(object);
  ASSERT_TRUE(d.applied && d.applied->user);
  EXPECT_EQ(d.applied->user->grace_seconds, 30);
  EXPECT_EQ(d.applied->user->strategy,
            (Strategy{Strategy::Type::RollingUpdate, {25, true}, {25, true}}));
  ASSERT_EQ(d.applied->user->pre_stop.size(), 1u);
  EXPECT_FALSE(d.applied->user->pre_stop.at("checkout"));

  // What the record adds to the annotation, on every tuned Deployment.
  Json without = record;
  without.erase("user");
  const std::size_t added = record.dump().size() - without.dump().size();
  std::printf("[ figure ] applied annotation %zu bytes, of which the user's values %zu\n",
              record.dump().size(), added);
  EXPECT_LE(added, 90u);
}

TEST(UserValues, ARetuneKeepsTheFirstRecordAndReplanningChangesNothing) {
  PolicySpec policy;
  auto ctx = context_for(policy, 4);
  Json object = article();
  tune(object, ctx);
  const Json first = record_of(object)["user"];
  ctx.propagation_seconds = 20;  // the wait must rise: a broken budget, repaired at once
  ASSERT_TRUE(tune(object, ctx).changed());
  EXPECT_EQ(record_of(object)["user"], first);  // not gracekeeper's 6 s and 46 s
  EXPECT_FALSE(plan(project(object), ctx).changed());
}

TEST(UserValues, OnlyTheFieldsAPlanChangesAreRecorded) {
  PolicySpec policy;
  auto ctx = context_for(policy, 4);
  Json object = article();
  object["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] = 0;
  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 120;
  tune(object, ctx);  // only the hook
  EXPECT_EQ(record_of(object)["user"], Json::parse(R"({"preStop":{"checkout":null}})"));
}

TEST(UserValues, TheGraceNeverFallsBelowTheUsersOwn) {
  PolicySpec policy;
  auto ctx = context_for(policy, 30);  // wait 45 + drain 0 + reserve 10 = 55
  Json object = article("0");
  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 40;
  tune(object, ctx);
  ASSERT_EQ(object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 55);
  EXPECT_EQ(record_of(object)["user"]["grace"], 40);

  ctx.propagation_seconds = 1;  // wait 5: 15 s would do, but the user had 40
  Plan lower = tune(object, ctx);
  EXPECT_EQ(lower.grace_seconds, 40);
  EXPECT_EQ(object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 40);
  EXPECT_EQ(record_of(object)["user"]["grace"], 40);
  EXPECT_FALSE(plan(project(object), ctx).changed());

  // Without the record (an older annotation) the grace goes down to the budget.
  Json older = record_of(object);
  older.erase("user");
  older["grace"] = 55;
  object["metadata"]["annotations"]["gracekeeper.dev/applied"] = older.dump();
  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 55;
  EXPECT_EQ(plan(project(object), ctx).grace_seconds, 15);
}

// Issue 45 item 4: gracekeeper tunes the grace 30 -> 66 and records 30 as
// the user's; the user then sets 100. A rising figure takes the grace to
// 120 and records 100 as the user's; a falling one brings it back to 100,
// never to 66.
TEST(UserValues, AGraceTheUserRaisedLaterIsTheirsAndAFloor) {
  PolicySpec policy;
  auto ctx = context_for(policy, 4);  // wait 6 + drain 50 + reserve 10 = 66
  Json object = article("50");
  tune(object, ctx);
  ASSERT_EQ(object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 66);
  ASSERT_EQ(record_of(object)["user"]["grace"], 30);

  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 100;  // the user
  EXPECT_FALSE(plan(project(object), ctx).changed()) << "the user's 100 was lowered";

  ctx.propagation_seconds = 40;  // wait 60 + 50 + 10 = 120
  ASSERT_TRUE(tune(object, ctx).changed());
  EXPECT_EQ(object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 120);
  EXPECT_EQ(record_of(object)["user"]["grace"], 100);

  ctx.propagation_seconds = 4;  // 66 would do
  ctx.now = kTime + std::chrono::hours(2);
  Plan lower = tune(object, ctx);
  EXPECT_EQ(lower.grace_seconds, 100);
  EXPECT_EQ(object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 100);
  EXPECT_FALSE(plan(project(object), ctx).changed());
}

// The same for a hook: gracekeeper's sleep 6, lengthened by the user to 20,
// is theirs: kept, under `existing: Replace` too, and the grace covers it.
TEST(UserValues, AHookTheUserLengthenedIsKeptEvenUnderReplace) {
  PolicySpec policy;
  policy.pre_stop.existing = ExistingHook::Replace;
  auto ctx = context_for(policy, 4);
  Json object = article();
  tune(object, ctx);  // sleep 6, grace 46
  object["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"] =
      Json::parse(R"({"sleep": {"seconds": 20}})");
  Plan p = plan(project(object), ctx);
  ASSERT_EQ(p.containers.size(), 1u);
  EXPECT_EQ(p.containers[0].action, ContainerPlan::Action::Keep);
  EXPECT_TRUE(p.containers[0].user_hook_kept);
  EXPECT_EQ(p.grace_seconds, 60);  // 20 + 30 + 10
  const auto kept = std::ranges::find(p.findings, "ExistingPreStopKept", &Finding::code);
  ASSERT_NE(kept, p.findings.end());
  EXPECT_NE(kept->message.find("longer than the one gracekeeper wrote"), std::string::npos);
  // Shortened instead, it is replaced again (the budget needs 6 s).
  object["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"] =
      Json::parse(R"({"sleep": {"seconds": 3}})");
  EXPECT_EQ(plan(project(object), ctx).containers[0].action, ContainerPlan::Action::SetSleep);
}

TEST(UserValues, AnOlderAnnotationNeverPassesGracekeepersValuesForTheUsers) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article();
  object["spec"]["template"]["spec"]["containers"][0]["lifecycle"] =
      Json::parse(R"({"preStop": {"sleep": {"seconds": 15}}})");
  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 55;
  object["metadata"]["annotations"]["gracekeeper.dev/applied"] =
      R"({"policy":"default","preStop":15,"grace":55,"graceOwned":true,"propagation":10,)"
      R"("containers":["checkout"],"time":"2026-11-30T00:00:00Z"})";
  ctx.propagation_seconds = 20;
  Plan retune = tune(object, ctx);
  ASSERT_TRUE(retune.changed());
  EXPECT_FALSE(retune.user);
  EXPECT_FALSE(record_of(object).contains("user"));
  EXPECT_FALSE(project(object).applied->user);
}

TEST(UserValues, AReplacedHookIsRecordedAsWrittenAndAKeptOneNotAtAll) {
  PolicySpec policy;
  policy.pre_stop.existing = ExistingHook::Replace;
  auto ctx = context_for(policy, 4);
  Json object = article();
  const Json hook =
      Json::parse(R"({"exec": {"command": ["sh", "-c", "sleep 2 && curl -s localhost/drain"]}})");
  object["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"] = hook;
  tune(object, ctx);
  EXPECT_EQ(record_of(object)["user"]["preStop"]["checkout"], hook);
  EXPECT_EQ(project(object).applied->user->pre_stop.at("checkout"), hook.dump());

  policy.pre_stop.existing = ExistingHook::Keep;
  Json kept = article();
  kept["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"] = hook;
  tune(kept, ctx);
  EXPECT_FALSE(record_of(kept)["user"].contains("preStop"));
}

TEST(UserValues, UnreadablePartsAreNotRecorded) {
  Json object = article();
  object["metadata"]["annotations"]["gracekeeper.dev/applied"] =
      R"({"policy":"default","preStop":6,"grace":46,"waits":{},"user":)"
      R"({"grace":"thirty","maxSurge":"25%","preStop":{"checkout":null,"x":7,"y":[]}}})";
  const Deployment d = project(object);
  ASSERT_TRUE(d.applied && d.applied->user);
  EXPECT_FALSE(d.applied->user->grace_seconds);
  EXPECT_FALSE(d.applied->user->strategy);  // maxUnavailable missing
  EXPECT_EQ(d.applied->user->pre_stop.size(), 1u);
  EXPECT_TRUE(d.applied->user->pre_stop.contains("checkout"));
}

TEST(UserValues, ChurnControlRecordsNothingNew) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article();
  tune(object, ctx);
  const Json first = record_of(object)["user"];
  ctx.now = kTime + std::chrono::minutes(5);
  ctx.propagation_seconds = 4;  // a lower wait: held back for minIntervalSeconds
  Plan held = plan(project(object), ctx);
  EXPECT_TRUE(held.deferred);
  ASSERT_TRUE(held.user);
  EXPECT_EQ(held.user, project(object).applied->user);
  EXPECT_EQ(record_of(object)["user"], first);
}

}  // namespace
}  // namespace gracekeeper::budget
