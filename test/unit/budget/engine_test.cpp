#include "gracekeeper/budget/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "gracekeeper/budget/apply.h"

namespace gracekeeper::budget {
namespace {

// The articles' Deployment: 3 replicas, grace 30, no preStop, default rolling update.
Json article_deployment() {
  return Json::parse(R"({
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "checkout", "namespace": "shop-prod",
                 "annotations": {"gracekeeper.dev/enabled": "true",
                                 "gracekeeper.dev/drain-seconds": "30"}},
    "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "checkout"}},
      "template": {"metadata": {"labels": {"app": "checkout"}},
        "spec": {"terminationGracePeriodSeconds": 30,
          "containers": [{"name": "checkout", "image": "checkout:1.4.2",
            "ports": [{"containerPort": 8080}],
            "readinessProbe": {"httpGet": {"path": "/actuator/health/readiness", "port": 8080}},
            "livenessProbe": {"httpGet": {"path": "/actuator/health/liveness", "port": 8080}}}]}}}})");
}

Deployment project(const Json& object) {
  auto d = project_deployment(object);
  EXPECT_TRUE(d.has_value()) << (d ? "" : d.error().front().format());
  return d ? *d : Deployment{};
}

Context context_for(const PolicySpec& policy, double propagation) {
  Context ctx;
  ctx.policy = &policy;
  ctx.policy_name = "shop-prod/default";
  ctx.propagation_seconds = propagation;
  return ctx;
}

std::vector<std::string> codes(const std::vector<Finding>& findings, Severity severity) {
  std::vector<std::string> out;
  for (const auto& f : findings) {
    if (f.severity == severity) out.push_back(f.code);
  }
  return out;
}

bool has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

const auto kTime = std::chrono::sys_days{std::chrono::year{2026} / 11 / 30};

TEST(ComputeBudget, FollowsTheFormula) {
  PolicySpec policy;  // safety 1.5, min 5, max 60, reserve 10
  auto b = compute_budget(policy, 4.0, 30);
  EXPECT_EQ(b.pre_stop_seconds, 6);
  EXPECT_EQ(b.grace_seconds, 6 + 30 + 0 + 10);
  EXPECT_FALSE(b.clamped);
}

TEST(ComputeBudget, AddsLoadBalancerDelayAndClamps) {
  PolicySpec policy;
  policy.propagation.external_load_balancer = ExternalLoadBalancer{10, 2};
  auto b = compute_budget(policy, 2.0, 30);
  EXPECT_EQ(b.lb_delay_seconds, 20);
  EXPECT_EQ(b.pre_stop_seconds, 23);
  b = compute_budget(policy, 40.0, 30);
  EXPECT_EQ(b.unclamped_pre_stop_seconds, 80);
  EXPECT_EQ(b.pre_stop_seconds, 60);
  EXPECT_TRUE(b.clamped);
}

TEST(ComputeBudget, RaisesToMinimumAndAvoidsFloatingPointCreep) {
  PolicySpec policy;
  EXPECT_EQ(compute_budget(policy, 0.5, 0).pre_stop_seconds, 5);
  policy.propagation.safety_factor = 1.1;
  policy.pre_stop.min_seconds = 0;
  EXPECT_EQ(compute_budget(policy, 10.0, 0).pre_stop_seconds, 11);  // not 12
}

TEST(ComputeBudget, NonsensePropagationFallsBackToStaticNeverShorter) {
  PolicySpec policy;
  policy.propagation.static_seconds = 10;
  EXPECT_EQ(compute_budget(policy, std::nan(""), 0).pre_stop_seconds, 15);
  EXPECT_EQ(compute_budget(policy, -3, 0).pre_stop_seconds, 15);
  auto huge = compute_budget(policy, 1e308, 0);
  EXPECT_EQ(huge.pre_stop_seconds, 60);
  EXPECT_TRUE(huge.clamped);
  auto inf = compute_budget(policy, INFINITY, 0);
  EXPECT_EQ(inf.pre_stop_seconds, 60);
}

TEST(Plan, ArticleSituationIsReportedAndFixed) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  auto d = project(article_deployment());
  auto result = plan(d, ctx);
  auto errors = codes(result.findings, Severity::Error);
  EXPECT_TRUE(has(errors, "BudgetExceeded"));
  EXPECT_TRUE(has(errors, "NoPreStopWait"));
  // 25% of 3 replicas is 0 pods as the controller rounds it: a warning now.
  EXPECT_TRUE(has(codes(result.findings, Severity::Warning), "CapacityDropOnRollout"));
  EXPECT_TRUE(result.budget_broken);

  ASSERT_EQ(result.containers.size(), 1u);
  EXPECT_EQ(result.containers[0].action, ContainerPlan::Action::SetSleep);
  EXPECT_EQ(result.containers[0].pre_stop_seconds, 15);
  EXPECT_EQ(result.grace_seconds, 15 + 30 + 10);
  EXPECT_EQ(result.strategy.max_unavailable, (IntOrPercent{0, false}));
  EXPECT_EQ(result.strategy.max_surge, (IntOrPercent{1, false}));

  Json object = article_deployment();
  apply_plan(object, result, ctx.policy_name, kTime);
  auto& container = object["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(container["lifecycle"]["preStop"]["sleep"]["seconds"], 15);
  EXPECT_EQ(object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 55);
  EXPECT_EQ(object["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0);

  // The planned object passes, and planning again changes nothing.
  auto again = plan(project(object), ctx);
  EXPECT_TRUE(codes(again.findings, Severity::Error).empty());
  EXPECT_FALSE(again.changed());
}

TEST(Plan, ExecSleepWithoutNativeSleepAction) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  ctx.capabilities.native_sleep = false;
  auto result = plan(project(article_deployment()), ctx);
  EXPECT_EQ(result.containers[0].action, ContainerPlan::Action::SetExecSleep);
  Json object = article_deployment();
  apply_plan(object, result, ctx.policy_name, kTime);
  EXPECT_EQ(object["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"],
            Json::parse(R"({"exec": {"command": ["sleep", "15"]}})"));
}

TEST(Plan, ExecSleepOnNativeServerIsReported) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  object["spec"]["template"]["spec"]["containers"][0]["lifecycle"] =
      Json::parse(R"({"preStop": {"exec": {"command": ["/bin/sleep", "20"]}}})");
  auto result = plan(project(object), ctx);
  EXPECT_TRUE(has(codes(result.findings, Severity::Warning), "ExecSleepNeedsBinary"));
  EXPECT_TRUE(has(codes(result.findings, Severity::Info), "ExistingPreStopKept"));
  EXPECT_EQ(result.containers[0].pre_stop_seconds, 20);
  EXPECT_EQ(result.grace_seconds, 20 + 30 + 10);  // the user's longer wait is budgeted
}

// Issue 32 item 1: a hook of unknown length is kept under existing: Keep,
// never counted as covering the wait (the budget is not known to hold, so
// the Deployment is not compliant), and replaced under existing: Replace.
TEST(Plan, UserHookOfUnknownLengthIsKeptButNeverCountedAsTheWait) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  object["spec"]["template"]["spec"]["containers"][0]["lifecycle"] =
      Json::parse(R"({"preStop": {"httpGet": {"path": "/drain", "port": 8080}}})");
  auto result = plan(project(object), ctx);
  EXPECT_EQ(result.containers[0].action, ContainerPlan::Action::Keep);
  EXPECT_TRUE(result.containers[0].user_hook_kept);
  EXPECT_EQ(result.grace_seconds, 55);  // room for the wait the hook should be
  const auto unknown = std::ranges::find(result.findings, "PreStopUnknownLength", &Finding::code);
  ASSERT_NE(unknown, result.findings.end());
  EXPECT_EQ(unknown->severity, Severity::Warning);
  EXPECT_EQ(unknown->container, "checkout");
  EXPECT_NE(unknown->message.find("not known to hold"), std::string::npos);
  EXPECT_NE(unknown->message.find("at least 15s"), std::string::npos);
  EXPECT_NE(unknown->message.find("preStop.existing to Replace"), std::string::npos);
  EXPECT_NE(unknown->message.find("remove the hook"), std::string::npos);
  EXPECT_TRUE(result.budget_broken);  // never compliant
  apply_plan(object, result, ctx.policy_name, kTime);
  EXPECT_TRUE(object["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"].contains(
      "httpGet"));
  const auto again = plan(project(object), ctx);
  EXPECT_FALSE(again.changed());
  EXPECT_TRUE(again.budget_broken);
  EXPECT_TRUE(has(codes(again.findings, Severity::Warning), "PreStopUnknownLength"));

  // So are a script that is not read and an unbounded sleep.
  for (const char* command :
       {R"(["/drain.sh"])", R"(["sleep", "inf"])", R"(["sh", "-c", "nginx -s quit; sleep 20"])"}) {
    SCOPED_TRACE(command);
    Json other = object;
    other["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"] =
        Json{{"exec", {{"command", Json::parse(command)}}}};
    const auto kept = plan(project(other), ctx);
    EXPECT_TRUE(has(codes(kept.findings, Severity::Warning), "PreStopUnknownLength"));
    EXPECT_TRUE(kept.budget_broken);
  }

  policy.pre_stop.existing = ExistingHook::Replace;
  auto replaced = plan(project(object), ctx);
  EXPECT_EQ(replaced.containers[0].action, ContainerPlan::Action::SetSleep);
  const auto replacing =
      std::ranges::find(replaced.findings, "PreStopUnknownLength", &Finding::code);
  ASSERT_NE(replacing, replaced.findings.end());
  EXPECT_NE(replacing->message.find("gracekeeper replaces the hook"), std::string::npos);
}

// Issue 32 item 1: fractions, units and shell sums are read as the kubelet
// runs them. Shorter than the wait is an error; longer raises the grace.
TEST(Plan, HookLengthsAreReadAsTheKubeletRunsThem) {
  PolicySpec policy;  // safety 1.5, min 5, reserve 10; drain 30 from the annotation
  const auto with_hook = [](const char* command) {
    Json object = article_deployment();
    object["spec"]["template"]["spec"]["containers"][0]["lifecycle"] =
        Json{{"preStop", {{"exec", {{"command", Json::parse(command)}}}}}};
    return object;
  };
  const auto too_short = [&](const char* command, double propagation) {
    SCOPED_TRACE(command);
    auto ctx = context_for(policy, propagation);
    const auto result = plan(project(with_hook(command)), ctx);
    EXPECT_TRUE(has(codes(result.findings, Severity::Error), "PreStopTooShort"));
    EXPECT_TRUE(result.budget_broken);
    return result;
  };
  // 0.5 s < 5 s, and 2.5 s < 3 s: each was once counted as the full wait.
  auto half = too_short(R"(["sleep", "0.5"])", 0);
  EXPECT_EQ(half.budget.pre_stop_seconds, 5);
  const auto message = std::ranges::find(half.findings, "PreStopTooShort", &Finding::code);
  EXPECT_NE(message->message.find("preStop waits 0.5s"), std::string::npos) << message->message;
  policy.pre_stop.min_seconds = 3;
  auto two_and_a_half = too_short(R"(["sh", "-c", "sleep 2.5"])", 2);  // ceil(1.5 * 2) = 3
  EXPECT_EQ(two_and_a_half.budget.pre_stop_seconds, 3);
  too_short(R"(["sh", "-c", "sleep 1; sleep 1.5"])", 2);
  policy.pre_stop.min_seconds = 5;

  // Longer than the wait (15 s): the grace covers the whole hook, rounded up.
  const auto grace_for = [&](const char* command) {
    SCOPED_TRACE(command);
    auto ctx = context_for(policy, 10);
    const auto result = plan(project(with_hook(command)), ctx);
    EXPECT_FALSE(has(codes(result.findings, Severity::Error), "PreStopTooShort"));
    EXPECT_FALSE(has(codes(result.findings, Severity::Warning), "PreStopUnknownLength"));
    EXPECT_EQ(result.containers[0].action, ContainerPlan::Action::Keep);
    return result.grace_seconds;
  };
  EXPECT_EQ(grace_for(R"(["sleep", "1m"])"), 60 + 30 + 10);
  EXPECT_EQ(grace_for(R"(["sh", "-c", "sleep 90; nginx -s quit"])"), 90 + 30 + 10);
  EXPECT_EQ(grace_for(R"(["sleep", "15.2"])"), 16 + 30 + 10);
  EXPECT_EQ(grace_for(R"(["sh", "-c", "sleep 20 && nginx -s quit && sleep 10"])"), 30 + 30 + 10);
  EXPECT_EQ(grace_for(R"(["busybox", "sleep", "1m", "30"])"), 90 + 30 + 10);
}

TEST(Plan, LargerUserGraceIsKept) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 300;
  auto result = plan(project(object), ctx);
  EXPECT_EQ(result.grace_seconds, 300);
  EXPECT_FALSE(has(codes(result.findings, Severity::Error), "BudgetExceeded"));
}

TEST(Plan, RecreateIsReportedNotConverted) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  object["spec"]["strategy"] = Json::parse(R"({"type": "Recreate"})");
  auto result = plan(project(object), ctx);
  // All capacity goes: at least as severe as maxUnavailable 1 (issue 45 item 7).
  EXPECT_TRUE(has(codes(result.findings, Severity::Error), "RecreateStrategy"));
  EXPECT_TRUE(result.budget_broken);
  EXPECT_FALSE(result.manage_strategy);
  apply_plan(object, result, ctx.policy_name, kTime);
  EXPECT_EQ(object["spec"]["strategy"], Json::parse(R"({"type": "Recreate"})"));
}

TEST(Plan, InvalidAnnotationsLeaveTheDeploymentAsItWas) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  for (auto [annotation, value, expected] :
       {std::tuple{"gracekeeper.dev/drain-seconds", "30s", "got \"30s\""},
        std::tuple{"gracekeeper.dev/drain-seconds", "-1", "got \"-1\""},
        std::tuple{"gracekeeper.dev/drain-seconds", "99999999999999999999", "from 0 to 86400"},
        std::tuple{"gracekeeper.dev/containers", "checkout,sidecar",
                   "no container named \"sidecar\""},
        // Issue 20: four empty entries gave four identical errors; one now.
        std::tuple{"gracekeeper.dev/containers", ",,checkout,,", "empty entry in \",,checkout,,\""},
        std::tuple{"gracekeeper.dev/containers", "nope, nope,nope",
                   "no container named \"nope\""}}) {
    Json object = article_deployment();
    object["metadata"]["annotations"][annotation] = value;
    auto result = plan(project(object), ctx);
    EXPECT_FALSE(result.changed()) << annotation << "=" << value;
    ASSERT_EQ(result.invalid.size(), 1u);
    EXPECT_NE(result.invalid[0].path.find(annotation), std::string::npos);
    EXPECT_NE(result.invalid[0].message.find(expected), std::string::npos)
        << result.invalid[0].message;
    EXPECT_TRUE(has(codes(result.findings, Severity::Error), "InvalidAnnotation"));
  }
}

// Issue 20: a hook near 2^63 made `current wait + drain + ...` wrap to a
// negative number, and a budget that does not hold passed.
TEST(Plan, HugeHookIsReportedAndSumsNeverWrap) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  for (const std::int64_t seconds : {std::int64_t{86401}, std::int64_t{9223372036854775800},
                                     std::numeric_limits<std::int64_t>::max()}) {
    Json object = article_deployment();
    object["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["sleep"]
          ["seconds"] = seconds;
    auto result = plan(project(object), ctx);
    EXPECT_FALSE(result.changed());
    EXPECT_TRUE(has(codes(result.findings, Severity::Error), "PreStopOutOfRange")) << seconds;
  }
  // A day is still a wait gracekeeper budgets for; the grace it needs is
  // computed without overflow and reported as too short.
  Json object = article_deployment();
  object["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"] =
      86400;
  auto result = plan(project(object), ctx);
  EXPECT_TRUE(has(codes(result.findings, Severity::Error), "BudgetExceeded"));
  // Saturating: the largest grace the API allows is never exceeded by a wrap.
  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] =
      std::numeric_limits<std::int64_t>::max();
  result = plan(project(object), ctx);
  EXPECT_FALSE(has(codes(result.findings, Severity::Error), "BudgetExceeded"));
  IntOrPercent huge{std::numeric_limits<std::int64_t>::max(), true};
  EXPECT_GT(huge.resolve(std::numeric_limits<std::int32_t>::max(), true), 0);
}

TEST(Plan, ContainersAnnotationChoosesTargets) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  object["spec"]["template"]["spec"]["containers"].push_back(
      Json::parse(R"({"name": "envoy", "image": "envoy", "ports": [{"containerPort": 9901}]})"));
  auto both = plan(project(object), ctx);
  EXPECT_EQ(both.containers.size(), 2u);
  object["metadata"]["annotations"]["gracekeeper.dev/containers"] = " checkout ";
  auto one = plan(project(object), ctx);
  ASSERT_EQ(one.containers.size(), 1u);
  EXPECT_EQ(one.containers[0].name, "checkout");
}

TEST(Plan, ProbeAndEntrypointChecks) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  auto& c = object["spec"]["template"]["spec"]["containers"][0];
  c["command"] = Json::parse(R"(["sh", "-c", "java -jar /app.jar"])");
  c["readinessProbe"] = Json::parse(R"({"tcpSocket": {"port": 8080}})");
  c["livenessProbe"] = Json::parse(R"({"tcpSocket": {"port": 8080}})");
  object["spec"]["replicas"] = 1;
  auto result = plan(project(object), ctx);
  auto warnings = codes(result.findings, Severity::Warning);
  EXPECT_TRUE(has(warnings, "ShellFormEntrypoint"));
  EXPECT_TRUE(has(warnings, "TCPReadinessProbe"));
  EXPECT_TRUE(has(warnings, "SameLivenessReadiness"));
  EXPECT_TRUE(has(codes(result.findings, Severity::Info), "SingleReplica"));

  c["command"] = Json::parse(R"(["sh", "-c", "exec java -jar /app.jar"])");
  c.erase("readinessProbe");
  auto fixed = plan(project(object), ctx);
  warnings = codes(fixed.findings, Severity::Warning);
  EXPECT_FALSE(has(warnings, "ShellFormEntrypoint"));
  EXPECT_TRUE(has(warnings, "NoReadinessProbe"));
}

TEST(Plan, NotBehindServiceNeedsNoWait) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  ctx.behind_service = false;
  auto result = plan(project(article_deployment()), ctx);
  EXPECT_TRUE(has(codes(result.findings, Severity::Info), "NotBehindService"));
  EXPECT_FALSE(has(codes(result.findings, Severity::Error), "NoPreStopWait"));
  EXPECT_EQ(result.containers[0].action, ContainerPlan::Action::Keep);
}

TEST(Plan, SmallDecreaseIsNotWorthARestartButALargeOneIs) {
  PolicySpec policy;  // decreaseThresholdSeconds 2
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  apply_plan(object, plan(project(object), ctx), ctx.policy_name, kTime);  // wait 15

  ctx.propagation_seconds = 9.0;  // 13.5 -> 14: only 1 s lower
  EXPECT_FALSE(plan(project(object), ctx).changed());
  ctx.propagation_seconds = 6.0;  // 9: 6 s lower
  auto lower = plan(project(object), ctx);
  ASSERT_TRUE(lower.changed());
  EXPECT_EQ(lower.containers[0].pre_stop_seconds, 9);
  EXPECT_EQ(lower.grace_seconds, 9 + 30 + 10);  // our own grace follows it down
  ctx.propagation_seconds = 11.0;               // 17: longer, always applied
  EXPECT_EQ(plan(project(object), ctx).containers[0].pre_stop_seconds, 17);
}

TEST(Plan, ChurnControlDefersChangesButNeverARepair) {
  PolicySpec policy;  // minIntervalSeconds 3600
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  apply_plan(object, plan(project(object), ctx), ctx.policy_name, kTime);

  ctx.now = kTime + std::chrono::minutes(10);
  ctx.propagation_seconds = 4.0;  // a lower wait would be nice, but not within the hour
  auto deferred = plan(project(object), ctx);
  EXPECT_TRUE(deferred.deferred);
  EXPECT_FALSE(deferred.changed());
  ASSERT_TRUE(deferred.due_at);  // when the reconciler comes back for it
  EXPECT_EQ(*deferred.due_at, kTime + std::chrono::hours(1));

  ctx.now = kTime + std::chrono::minutes(61);
  EXPECT_TRUE(plan(project(object), ctx).changed());

  ctx.now = kTime + std::chrono::minutes(10);
  ctx.propagation_seconds = 20.0;  // the wait is now too short: repair at once
  auto repair = plan(project(object), ctx);
  EXPECT_TRUE(repair.budget_broken);
  EXPECT_TRUE(repair.changed());
}

TEST(Plan, PercentMaxSurgeIsWrittenAsString) {
  PolicySpec policy;
  policy.rollout.max_surge = IntOrPercent{25, true};
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  apply_plan(object, plan(project(object), ctx), ctx.policy_name, kTime);
  EXPECT_EQ(object["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
}

// Issue 18 item 2: native sidecars (initContainers with restartPolicy: Always)
// are read, stop after the app, and never receive the wait by default.
Json with_sidecar() {
  Json object = article_deployment();
  auto& pod = object["spec"]["template"]["spec"];
  pod["initContainers"] = Json::parse(R"([
    {"name": "migrate", "image": "migrate:1", "command": ["sh", "-c", "migrate up"]},
    {"name": "envoy", "image": "envoy:1", "restartPolicy": "Always",
     "ports": [{"containerPort": 15001}],
     "readinessProbe": {"httpGet": {"path": "/ready", "port": 15021}},
     "lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}])");
  return object;
}

TEST(Sidecars, AreReadAfterTheAppContainersAndPlainInitContainersAreNot) {
  const Deployment d = project(with_sidecar());
  ASSERT_EQ(d.containers.size(), 2u);
  EXPECT_EQ(d.containers[0].name, "checkout");
  EXPECT_FALSE(d.containers[0].sidecar);
  EXPECT_EQ(d.containers[1].name, "envoy");
  EXPECT_TRUE(d.containers[1].sidecar);
  EXPECT_EQ(d.containers[1].pre_stop.seconds, 5);

  Json clash = with_sidecar();
  clash["spec"]["template"]["spec"]["initContainers"][1]["name"] = "checkout";
  auto error = project_deployment(clash);
  ASSERT_FALSE(error);
  EXPECT_EQ(error.error().front().path, "spec.template.spec.initContainers[1].name");
}

TEST(Sidecars, GetNoWaitButTheirStopIsBudgeted) {
  PolicySpec policy;
  policy.sidecar_drain_seconds = 3;
  auto ctx = context_for(policy, 10);
  Json object = with_sidecar();
  auto result = plan(project(object), ctx);
  ASSERT_EQ(result.containers.size(), 1u);  // the serving sidecar is not a target
  EXPECT_EQ(result.containers[0].name, "checkout");
  EXPECT_EQ(result.budget.sidecar_pre_stop_seconds, 5);
  // The app's wait, its drain, then the sidecar's own preStop and drain.
  EXPECT_EQ(result.grace_seconds, 15 + 30 + 5 + 3 + 10);
  EXPECT_EQ(result.budget.grace_seconds, 15 + 30 + 5 + 3 + 10);

  apply_plan(object, result, ctx.policy_name, kTime);
  EXPECT_EQ(object["spec"]["template"]["spec"]["initContainers"][1]["lifecycle"]["preStop"],
            Json::parse(R"({"sleep": {"seconds": 5}})"));  // the sidecar's hook is untouched
  const Deployment applied = project(object);
  auto again = plan(applied, ctx);
  EXPECT_FALSE(again.changed());
  EXPECT_TRUE(codes(again.findings, Severity::Error).empty());
  // Server-side apply names only app containers: a sidecar's hook is never
  // claimed (and so never released) by gracekeeper.
  const Json configuration = apply_configuration(applied, result, ctx.policy_name, kTime);
  EXPECT_FALSE(configuration["spec"]["template"]["spec"].contains("initContainers"));
  ASSERT_EQ(configuration["spec"]["template"]["spec"]["containers"].size(), 1u);

  // A grace that covers the app but not the sidecars is reported.
  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 55;
  auto short_grace = plan(project(object), ctx);
  EXPECT_TRUE(has(codes(short_grace.findings, Severity::Error), "BudgetExceeded"));
}

TEST(Sidecars, AWorkerAppStillGetsTheWaitWhenOnlyTheSidecarServes) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = with_sidecar();
  object["spec"]["template"]["spec"]["containers"][0].erase("ports");
  auto result = plan(project(object), ctx);
  ASSERT_EQ(result.containers.size(), 1u);
  EXPECT_EQ(result.containers[0].name, "checkout");
  EXPECT_EQ(result.containers[0].action, ContainerPlan::Action::SetSleep);
}

TEST(Sidecars, NamingOneInTheContainersAnnotationIsAnError) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = with_sidecar();
  object["metadata"]["annotations"]["gracekeeper.dev/containers"] = "checkout,envoy";
  auto result = plan(project(object), ctx);
  EXPECT_FALSE(result.changed());
  ASSERT_EQ(result.invalid.size(), 1u);
  EXPECT_NE(result.invalid[0].message.find("\"envoy\" is a native sidecar"), std::string::npos)
      << result.invalid[0].message;
}

// Issue 18 item 4: a kept user hook shorter than propagation breaks the
// budget: an error that says how to fix it, not a warning.
TEST(Plan, KeptUserHookThatIsTooShortIsAViolation) {
  PolicySpec policy;  // existing: Keep
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  object["spec"]["template"]["spec"]["containers"][0]["lifecycle"] =
      Json::parse(R"({"preStop": {"sleep": {"seconds": 1}}})");
  auto result = plan(project(object), ctx);
  auto too_short = std::find_if(result.findings.begin(), result.findings.end(),
                                [](const Finding& f) { return f.code == "PreStopTooShort"; });
  ASSERT_NE(too_short, result.findings.end());
  EXPECT_EQ(too_short->severity, Severity::Error);
  EXPECT_NE(too_short->message.find("raise its sleep to 15s"), std::string::npos);
  EXPECT_NE(too_short->message.find("preStop.existing to Replace"), std::string::npos);
  EXPECT_TRUE(result.budget_broken);
  EXPECT_TRUE(result.containers[0].user_hook_kept);
  EXPECT_EQ(result.containers[0].action, ContainerPlan::Action::Keep);

  // Still an error once the rest is planned: the plan cannot fix it.
  apply_plan(object, result, ctx.policy_name, kTime);
  auto after = plan(project(object), ctx);
  EXPECT_TRUE(has(codes(after.findings, Severity::Error), "PreStopTooShort"));

  policy.pre_stop.existing = ExistingHook::Replace;
  auto replaced = plan(project(object), ctx);
  EXPECT_EQ(replaced.containers[0].action, ContainerPlan::Action::SetSleep);
}

// Issue 18 item 5: ownership is recorded per container. Container `checkout`
// keeps gracekeeper's earlier 16 s (lowering by 1 s is not worth a restart)
// while the new container `api` gets 15 s; with one recorded value, `api`'s
// hook no longer looked like gracekeeper's.
TEST(Plan, HookOwnershipIsPerContainer) {
  PolicySpec policy;  // decreaseThresholdSeconds 2
  policy.propagation.safety_factor = 1.0;
  auto ctx = context_for(policy, 16);
  Json object = article_deployment();
  apply_plan(object, plan(project(object), ctx), ctx.policy_name, kTime);  // checkout: 16
  Json api = object["spec"]["template"]["spec"]["containers"][0];
  api["name"] = "api";
  api.erase("lifecycle");
  object["spec"]["template"]["spec"]["containers"].push_back(api);

  ctx.propagation_seconds = 15;
  const Plan second = plan(project(object), ctx);
  ASSERT_EQ(second.containers.size(), 2u);
  EXPECT_EQ(second.containers[0].action, ContainerPlan::Action::Keep);
  EXPECT_EQ(second.containers[0].pre_stop_seconds, 16);
  EXPECT_EQ(second.containers[1].action, ContainerPlan::Action::SetSleep);
  EXPECT_EQ(second.containers[1].pre_stop_seconds, 15);
  apply_plan(object, second, ctx.policy_name, kTime);
  const Json annotation =
      Json::parse(object["metadata"]["annotations"]["gracekeeper.dev/applied"].get<std::string>());
  EXPECT_EQ(annotation["waits"], Json::parse(R"({"checkout": 16, "api": 15})"));

  const Deployment written = project(object);
  EXPECT_TRUE(written.containers[0].pre_stop.owned);
  EXPECT_TRUE(written.containers[1].pre_stop.owned);
  const Plan third = plan(written, ctx);
  EXPECT_FALSE(third.changed());  // no extra rollout
  EXPECT_TRUE(third.containers[1].gracekeeper_hook);
  EXPECT_FALSE(third.containers[1].user_hook_kept);
  // Both hooks stay in the server-side apply: neither is released.
  const Json configuration = apply_configuration(written, third, ctx.policy_name, kTime);
  EXPECT_EQ(configuration["spec"]["template"]["spec"]["containers"].size(), 2u);
}

TEST(Plan, AUserWaitBesideGracekeepersIsNeverTakenForIt) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  Json sidecar = object["spec"]["template"]["spec"]["containers"][0];
  sidecar["name"] = "admin";
  sidecar["lifecycle"] = Json::parse(R"({"preStop": {"sleep": {"seconds": 20}}})");
  object["spec"]["template"]["spec"]["containers"].push_back(sidecar);
  apply_plan(object, plan(project(object), ctx), ctx.policy_name, kTime);
  const Deployment written = project(object);
  EXPECT_TRUE(written.containers[0].pre_stop.owned);
  EXPECT_FALSE(written.containers[1].pre_stop.owned);  // the user's 20 s
  EXPECT_FALSE(plan(written, ctx).changed());
}

TEST(Plan, OlderAppliedAnnotationIsStillRead) {
  Json object = article_deployment();
  object["spec"]["template"]["spec"]["containers"][0]["lifecycle"] =
      Json::parse(R"({"preStop": {"sleep": {"seconds": 15}}})");
  object["metadata"]["annotations"]["gracekeeper.dev/applied"] =
      R"({"policy":"p","preStop":15,"grace":55,"graceOwned":true,"propagation":10,)"
      R"("containers":["checkout"],"time":"2026-11-30T00:00:00Z"})";
  const Deployment d = project(object);
  EXPECT_FALSE(d.applied->waits);
  EXPECT_TRUE(d.containers[0].pre_stop.owned);
}

// Issue 18 item 9: a wait of 0 s is no hook at all, never `sleep 0`.
TEST(Plan, AZeroWaitWritesNoHookAndRemovesGracekeepers) {
  PolicySpec policy;
  policy.pre_stop.min_seconds = 0;
  auto ctx = context_for(policy, 0);
  Json object = article_deployment();
  auto result = plan(project(object), ctx);
  EXPECT_EQ(result.budget.pre_stop_seconds, 0);
  EXPECT_EQ(result.containers[0].action, ContainerPlan::Action::Keep);
  EXPECT_FALSE(result.containers[0].gracekeeper_hook);
  EXPECT_FALSE(has(codes(result.findings, Severity::Error), "NoPreStopWait"));
  apply_plan(object, result, ctx.policy_name, kTime);
  EXPECT_FALSE(object["spec"]["template"]["spec"]["containers"][0].contains("lifecycle"));
  EXPECT_FALSE(plan(project(object), ctx).changed());

  // gracekeeper's own 15 s hook goes when the wait falls to 0.
  ctx.propagation_seconds = 10;
  apply_plan(object, plan(project(object), ctx), ctx.policy_name, kTime);
  ASSERT_TRUE(project(object).containers[0].pre_stop.owned);
  ctx.propagation_seconds = 0;
  auto removal = plan(project(object), ctx);
  ASSERT_TRUE(removal.changed());
  EXPECT_EQ(removal.containers[0].action, ContainerPlan::Action::Remove);
  const Json configuration = apply_configuration(project(object), removal, ctx.policy_name, kTime);
  EXPECT_FALSE(configuration["spec"]["template"]["spec"].contains("containers"));  // released
  apply_plan(object, removal, ctx.policy_name, kTime);
  EXPECT_FALSE(object["spec"]["template"]["spec"]["containers"][0].contains("lifecycle"));
  EXPECT_FALSE(plan(project(object), ctx).changed());

  // A user's hook is kept, even under Replace: there is no wait to replace it with.
  policy.pre_stop.existing = ExistingHook::Replace;
  object["spec"]["template"]["spec"]["containers"][0]["lifecycle"] =
      Json::parse(R"({"preStop": {"exec": {"command": ["/drain.sh"]}}})");
  EXPECT_EQ(plan(project(object), ctx).containers[0].action, ContainerPlan::Action::Keep);
}

// Issue 17 item 5: with maxUnavailable 0 the surge takes over the unavailable
// budget the user had, so a rollout is no slower than it was.
TEST(Plan, SurgeTakesOverTheUnavailableBudget) {
  PolicySpec policy;  // rollout.maxSurge 1
  auto ctx = context_for(policy, 10);
  const auto strategy_for = [&](std::int64_t replicas, const char* strategy) {
    Json object = article_deployment();
    object["spec"]["replicas"] = replicas;
    object["spec"]["strategy"] = Json::parse(strategy);
    return plan(project(object), ctx).strategy;
  };
  // 40 replicas at 25%/25%: 10 could be unavailable, 10 surge: 10 surge now.
  auto s = strategy_for(40, R"({"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})");
  EXPECT_EQ(s.max_unavailable, (IntOrPercent{0, false}));
  EXPECT_EQ(s.max_surge, (IntOrPercent{25, true}));
  // The unavailable budget was the larger: it becomes the surge.
  s = strategy_for(40, R"({"rollingUpdate": {"maxSurge": 2, "maxUnavailable": 8}})");
  EXPECT_EQ(s.max_surge, (IntOrPercent{8, false}));
  s = strategy_for(20, R"({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "50%"}})");
  EXPECT_EQ(s.max_surge, (IntOrPercent{50, true}));
  // Small Deployments: the policy's 1 (a tie keeps the policy's value).
  s = strategy_for(3, R"({"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})");
  EXPECT_EQ(s.max_surge, (IntOrPercent{1, false}));
  // At least 1, even when every figure resolves to 0.
  policy.rollout.max_surge = IntOrPercent{10, true};
  s = strategy_for(2, R"({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "10%"}})");
  EXPECT_EQ(s.max_surge, (IntOrPercent{10, true}));
  // Scaled to 0 (issue 32): every percentage resolves to 0 pods, so none is
  // compared; the user's own budget is kept in its form, not shrunk to 1
  // for good: the surge it has, else its unavailable budget, else the policy's.
  s = strategy_for(0, R"({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "10%"}})");
  EXPECT_EQ(s.max_surge, (IntOrPercent{10, true}));
  EXPECT_EQ(s.max_unavailable, (IntOrPercent{0, false}));
  s = strategy_for(0, R"({"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})");
  EXPECT_EQ(s.max_surge, (IntOrPercent{25, true}));
  s = strategy_for(0, R"({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}})");
  EXPECT_EQ(s.max_surge, (IntOrPercent{10, true}));  // the policy's
}

// Scaled to 0 with 25%/0 already: left as it is (no change, no rollout),
// and judged again at its size once scaled up.
TEST(Plan, AScaledToZeroDeploymentKeepsAPercentageSurge) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  object["spec"]["replicas"] = 0;
  object["spec"]["strategy"] =
      Json::parse(R"({"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}})");
  const Plan p = plan(project(object), ctx);
  EXPECT_FALSE(
      std::ranges::any_of(p.changes, [](const Change& c) { return c.field == "strategy"; }));
  EXPECT_EQ(p.strategy.max_surge, (IntOrPercent{25, true}));
}

// rollout.manage: false on a Deployment whose strategy gracekeeper changed
// before: the strategy is re-stated as it is, or server-side apply would drop
// gracekeeper's ownership and the field with it (maxUnavailable back to 25%).
TEST(Plan, ManageFalseReStatesAStrategyGracekeeperChangedBefore) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  const Plan first = plan(project(object), ctx);
  ASSERT_TRUE(first.manage_strategy);
  Json tuned = object;
  apply_plan(tuned, first, "default", std::chrono::system_clock::time_point{});
  policy.rollout.manage = false;
  ctx.propagation_seconds = 20;  // a re-tune
  const Deployment d = project(tuned);
  const Plan second = plan(d, ctx);
  ASSERT_TRUE(second.changed());
  EXPECT_FALSE(second.manage_strategy);
  const Json config =
      apply_configuration(d, second, "default", std::chrono::system_clock::time_point{});
  ASSERT_TRUE(config["spec"].contains("strategy"));
  EXPECT_EQ(config["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
  EXPECT_EQ(config["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 1);
  // Never changed by gracekeeper: not stated, not owned.
  const Plan untouched = plan(project(object), ctx);
  EXPECT_FALSE(apply_configuration(project(object), untouched, "default",
                                   std::chrono::system_clock::time_point{})["spec"]
                   .contains("strategy"));
}

TEST(Plan, StatefulSetGetsWaitAndGraceButNoStrategy) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  object["kind"] = "StatefulSet";
  object["spec"]["updateStrategy"] = Json::parse(R"({"type": "RollingUpdate"})");
  const Deployment d = project(object);
  EXPECT_EQ(d.kind, "StatefulSet");
  auto result = plan(d, ctx);
  EXPECT_FALSE(result.manage_strategy);
  EXPECT_FALSE(has(codes(result.findings, Severity::Error), "CapacityDropOnRollout"));
  EXPECT_EQ(result.containers[0].action, ContainerPlan::Action::SetSleep);
  EXPECT_EQ(result.grace_seconds, 55);
  apply_plan(object, result, ctx.policy_name, kTime);
  EXPECT_FALSE(object["spec"].contains("strategy"));
  EXPECT_FALSE(plan(project(object), ctx).changed());
}

// Issue 36: a StatefulSet's updateStrategy is read and reported, never
// written: OnDelete, a partition, and maxUnavailable above 1 (where the
// cluster honours it) each have a finding; the configuration is a
// StatefulSet's, with no strategy of either kind.
TEST(Plan, StatefulSetUpdateStrategyIsReportedNotWritten) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  object["kind"] = "StatefulSet";
  object["spec"]["replicas"] = 4;
  object["spec"]["podManagementPolicy"] = "Parallel";
  object["spec"]["updateStrategy"] = Json::parse(
      R"({"type": "RollingUpdate", "rollingUpdate": {"partition": 2, "maxUnavailable": "50%"}})");
  const Deployment d = project(object);
  EXPECT_EQ(d.stateful.partition, 2);
  EXPECT_TRUE(d.stateful.parallel);
  auto result = plan(d, ctx);
  EXPECT_FALSE(result.manage_strategy);
  EXPECT_TRUE(has(codes(result.findings, Severity::Info), "PartitionedRollout"));
  EXPECT_TRUE(has(codes(result.findings, Severity::Warning), "CapacityDropOnRollout"));
  EXPECT_FALSE(has(codes(result.findings, Severity::Error), "CapacityDropOnRollout"));
  for (const auto& f : result.findings) {
    if (f.code == "CapacityDropOnRollout") {
      EXPECT_NE(f.message.find("maxUnavailable 50% takes 2 of 4 pods down at once during a "
                               "rollout (podManagementPolicy Parallel)"),
                std::string::npos)
          << f.message;
    }
  }
  const Json config = apply_configuration(d, result, "default", kTime);
  EXPECT_EQ(config["kind"], "StatefulSet");
  EXPECT_FALSE(config["spec"].contains("strategy"));
  EXPECT_FALSE(config["spec"].contains("updateStrategy"));
  EXPECT_EQ(config["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 55);

  // Before 1.35 the field is ignored: one pod at a time, nothing to report.
  ctx.capabilities.statefulset_max_unavailable = false;
  EXPECT_FALSE(has(codes(plan(d, ctx).findings, Severity::Warning), "CapacityDropOnRollout"));
  // maxUnavailable 1 (the default) is fine.
  object["spec"]["updateStrategy"]["rollingUpdate"].erase("maxUnavailable");
  ctx.capabilities.statefulset_max_unavailable = true;
  EXPECT_FALSE(
      has(codes(plan(project(object), ctx).findings, Severity::Warning), "CapacityDropOnRollout"));

  object["spec"]["updateStrategy"] = Json::parse(R"({"type": "OnDelete"})");
  object["spec"]["replicas"] = 1;
  const auto on_delete = plan(project(object), ctx);
  EXPECT_TRUE(has(codes(on_delete.findings, Severity::Info), "OnDeleteStrategy"));
  EXPECT_FALSE(has(codes(on_delete.findings, Severity::Info), "PartitionedRollout"));
  // One replica under OnDelete: its deletion leaves no ready target either.
  EXPECT_TRUE(has(codes(on_delete.findings, Severity::Info), "SingleReplica"));

  // A bad value names its field.
  object["spec"]["updateStrategy"] = Json::parse(R"({"type": "Sometimes"})");
  object["spec"]["podManagementPolicy"] = "Random";
  const auto bad = project_deployment(object);
  ASSERT_FALSE(bad.has_value());
  ASSERT_EQ(bad.error().size(), 2u);
  EXPECT_EQ(bad.error()[0].path, "spec.updateStrategy.type");
  EXPECT_EQ(bad.error()[1].path, "spec.podManagementPolicy");
}

// Issue 45 item 7: a percentage that resolves to 0 pods takes none down,
// as the Deployment controller rounds it (down); both at 0, it takes 1.
TEST(Plan, AnUnavailablePercentageThatRoundsToZeroIsNoError) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();  // 3 replicas: 25% is 0 pods
  object["spec"]["strategy"] =
      Json::parse(R"({"rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"}})");
  auto three = plan(project(object), ctx);
  EXPECT_FALSE(has(codes(three.findings, Severity::Error), "CapacityDropOnRollout"));
  const auto warned = std::ranges::find(three.findings, "CapacityDropOnRollout", &Finding::code);
  ASSERT_NE(warned, three.findings.end());
  EXPECT_EQ(warned->severity, Severity::Warning);
  EXPECT_NE(warned->message.find("0 of 3 replicas down now, but 1 from 4 replicas on"),
            std::string::npos)
      << warned->message;
  EXPECT_EQ(three.strategy.max_unavailable, (IntOrPercent{0, false}));  // still written as 0
  object["spec"]["replicas"] = 4;                                       // 1 pod
  EXPECT_TRUE(
      has(codes(plan(project(object), ctx).findings, Severity::Error), "CapacityDropOnRollout"));
  object["spec"]["replicas"] = 3;
  object["spec"]["strategy"]["rollingUpdate"]["maxSurge"] = 0;  // both 0 pods: 1 goes down
  EXPECT_TRUE(
      has(codes(plan(project(object), ctx).findings, Severity::Error), "CapacityDropOnRollout"));
}

// Issue 45 item 2: `plan` and `check` read one rule of which pods are
// served. Offline without Services every pod counts as served, ports or
// not: every app container gets the wait, and `check` names each that
// lacks it. A Service among the inputs that selects none of them decides.
TEST(Plan, PlanAndCheckAgreeOnWhichPodsAreServed) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  object["spec"]["template"]["spec"]["containers"].push_back(
      Json::parse(R"({"name": "db-proxy", "image": "cloud-sql-proxy:2"})"));
  auto served = plan(project(object), ctx);
  ASSERT_EQ(served.containers.size(), 2u);
  EXPECT_EQ(served.containers[1].action, ContainerPlan::Action::SetSleep);
  std::size_t missing = 0;
  for (const auto& f : served.findings) missing += f.code == "NoPreStopWait";
  EXPECT_EQ(missing, 2u) << "check must name the port-less container plan gives a wait";

  Json worker = article_deployment();
  worker["spec"]["template"]["spec"]["containers"][0].erase("ports");
  worker["spec"]["template"]["spec"]["containers"][0].erase("readinessProbe");
  auto portless = plan(project(worker), ctx);
  ASSERT_EQ(portless.containers.size(), 1u);
  EXPECT_EQ(portless.containers[0].action, ContainerPlan::Action::SetSleep);
  EXPECT_TRUE(has(codes(portless.findings, Severity::Error), "NoPreStopWait"));
  ctx.behind_service = false;  // Services among the inputs, none selects it
  auto alone = plan(project(worker), ctx);
  EXPECT_EQ(alone.containers[0].action, ContainerPlan::Action::Keep);
  EXPECT_FALSE(has(codes(alone.findings, Severity::Error), "NoPreStopWait"));
  EXPECT_TRUE(has(codes(alone.findings, Severity::Info), "NotBehindService"));
}

// Issue 32 item 2: every app container gets the wait, with ports or not (a
// database proxy stopped at once fails the requests the app still serves).
// The containers annotation still chooses; a container it leaves out is named.
TEST(Plan, EveryAppContainerGetsTheWaitByDefault) {
  PolicySpec policy;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  object["spec"]["template"]["spec"]["containers"].push_back(
      Json::parse(R"({"name": "db-proxy", "image": "cloud-sql-proxy:2"})"));
  auto result = plan(project(object), ctx);
  ASSERT_EQ(result.containers.size(), 2u);
  EXPECT_EQ(result.containers[1].name, "db-proxy");
  EXPECT_EQ(result.containers[1].action, ContainerPlan::Action::SetSleep);
  EXPECT_EQ(result.containers[1].pre_stop_seconds, 15);
  EXPECT_FALSE(has(codes(result.findings, Severity::Info), "ContainerWithoutWait"));
  apply_plan(object, result, ctx.policy_name, kTime);
  EXPECT_EQ(object["spec"]["template"]["spec"]["containers"][1]["lifecycle"]["preStop"]["sleep"]
                  ["seconds"],
            15);
  EXPECT_FALSE(plan(project(object), ctx).changed());

  Json chosen = article_deployment();
  chosen["spec"]["template"]["spec"]["containers"].push_back(
      Json::parse(R"({"name": "db-proxy", "image": "cloud-sql-proxy:2"})"));
  chosen["metadata"]["annotations"]["gracekeeper.dev/containers"] = "checkout";
  auto one = plan(project(chosen), ctx);
  ASSERT_EQ(one.containers.size(), 1u);
  const auto left_out = std::ranges::find(one.findings, "ContainerWithoutWait", &Finding::code);
  ASSERT_NE(left_out, one.findings.end());
  EXPECT_EQ(left_out->severity, Severity::Info);
  EXPECT_EQ(left_out->container, "db-proxy");
  EXPECT_NE(left_out->message.find("gracekeeper.dev/containers"), std::string::npos);
}

// Issue 32 item 3: gracekeeper's own hook goes when the wait falls to 0, in
// each container that has one and in the exec form too; the lifecycle the
// user never had goes with it, and the next plan is a no-op.
TEST(Plan, OwnHooksAreRemovedWhenTheWaitFallsToZero) {
  PolicySpec policy;
  policy.pre_stop.min_seconds = 0;
  policy.pre_stop.action = PreStopAction::Exec;
  auto ctx = context_for(policy, 10);
  Json object = article_deployment();
  object["spec"]["template"]["spec"]["containers"].push_back(
      Json::parse(R"({"name": "db-proxy", "image": "cloud-sql-proxy:2"})"));
  apply_plan(object, plan(project(object), ctx), ctx.policy_name, kTime);
  for (const auto& c : project(object).containers) {
    ASSERT_EQ(c.pre_stop.kind, PreStopHook::Kind::ExecSleep) << c.name;
    ASSERT_TRUE(c.pre_stop.owned) << c.name;
  }
  ctx.propagation_seconds = 0;
  const auto removal = plan(project(object), ctx);
  EXPECT_EQ(removal.budget.pre_stop_seconds, 0);
  ASSERT_EQ(removal.containers.size(), 2u);
  for (const auto& cp : removal.containers) {
    EXPECT_EQ(cp.action, ContainerPlan::Action::Remove) << cp.name;
  }
  EXPECT_EQ(removal.grace_seconds, 0 + 30 + 10);  // our own grace comes down with it
  apply_plan(object, removal, ctx.policy_name, kTime + std::chrono::hours(1));
  for (const auto& c : object["spec"]["template"]["spec"]["containers"]) {
    EXPECT_FALSE(c.contains("lifecycle")) << c.dump();
  }
  EXPECT_FALSE(plan(project(object), ctx).changed());
}

// Property tests: random Deployments and policies; the invariants of docs/api.md
// ("The budget") hold for every one.
struct Generated {
  PolicySpec policy;
  Json object;
  double propagation = 0;
  bool native = true;
};

Generated generate(std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Generated g;
  g.policy.pre_stop.min_seconds = pick(0, 30);
  g.policy.pre_stop.max_seconds = pick(std::max(1, g.policy.pre_stop.min_seconds), 120);
  g.policy.propagation.safety_factor = 1.0 + pick(0, 90) / 10.0;
  g.policy.drain_seconds = pick(0, 120);
  g.policy.sidecar_drain_seconds = pick(0, 20);
  g.policy.reserve_seconds = pick(0, 30);
  g.policy.pre_stop.existing = pick(0, 1) ? ExistingHook::Keep : ExistingHook::Replace;
  g.policy.pre_stop.action = static_cast<PreStopAction>(pick(0, 2));
  g.policy.changes.decrease_threshold_seconds = pick(0, 10);
  if (pick(0, 3) == 0)
    g.policy.propagation.external_load_balancer = ExternalLoadBalancer{pick(1, 30), pick(1, 5)};
  g.propagation = pick(0, 1) ? pick(0, 200) / 10.0 : pick(0, 100000) / 100.0;
  g.native = pick(0, 1);

  g.object = article_deployment();
  auto& pod = g.object["spec"]["template"]["spec"];
  if (pick(0, 4) == 0) {
    pod.erase("terminationGracePeriodSeconds");
  } else {
    pod["terminationGracePeriodSeconds"] = pick(0, 400);
  }
  if (pick(0, 2) == 0) g.object["metadata"]["annotations"].erase("gracekeeper.dev/drain-seconds");
  const int extra = pick(0, 2);
  for (int i = 0; i < extra; ++i) {
    Json c = pod["containers"][0];
    c["name"] = "c" + std::to_string(i);
    if (pick(0, 1)) c.erase("ports");
    pod["containers"].push_back(c);
  }
  if (pick(0, 2) == 0) {  // a native sidecar, serving or not, with or without its own sleep
    Json sidecar{{"name", "proxy"}, {"image", "proxy:1"}, {"restartPolicy", "Always"}};
    if (pick(0, 1)) sidecar["ports"] = Json::parse(R"([{"containerPort": 15001}])");
    if (pick(0, 1)) sidecar["lifecycle"] = {{"preStop", {{"sleep", {{"seconds", pick(0, 30)}}}}}};
    pod["initContainers"] = Json::array({sidecar});
  }
  for (auto& c : pod["containers"]) {
    switch (pick(0, 5)) {
      case 0:
        c["lifecycle"] = {{"preStop", {{"sleep", {{"seconds", pick(0, 90)}}}}}};
        break;
      case 1:
        c["lifecycle"] = {
            {"preStop", {{"exec", {{"command", {"sleep", std::to_string(pick(0, 90))}}}}}}};
        break;
      case 2:
        switch (pick(0, 3)) {
          case 0:
            c["lifecycle"] = {{"preStop", {{"exec", {{"command", {"/drain.sh"}}}}}}};
            break;
          case 1:  // a fraction or a unit
            c["lifecycle"] = {{"preStop",
                               {{"exec",
                                 {{"command",
                                   {"sleep",
                                    std::to_string(pick(0, 90)) + "." + std::to_string(pick(0, 9)) +
                                        (pick(0, 1) ? "" : "s"),
                                    pick(0, 1) ? "1m" : "0.25"}}}}}}};
            break;
          case 2:  // a shell sum
            c["lifecycle"] = {
                {"preStop",
                 {{"exec",
                   {{"command",
                     {"sh", "-c",
                      "sleep " + std::to_string(pick(0, 60)) + "." + std::to_string(pick(0, 9)) +
                          "; sleep " + std::to_string(pick(0, 30))}}}}}}};
            break;
          default:  // a wait, then a command that tells the app to stop
            c["lifecycle"] = {
                {"preStop",
                 {{"exec",
                   {{"command",
                     {"sh", "-c",
                      "sleep " + std::to_string(pick(0, 90)) + " && nginx -s quit"}}}}}}};
            break;
        }
        break;
      case 3:  // an empty lifecycle, or one with another handler only
        c["lifecycle"] = pick(0, 1) ? Json::object()
                                    : Json{{"postStart", {{"exec", {{"command", {"/warm.sh"}}}}}}};
        break;
      default:
        break;
    }
  }
  return g;
}

TEST(PlanProperties, BudgetInvariantsHoldForGeneratedInputs) {
  std::mt19937_64 rng(20261130);
  for (int i = 0; i < 5000; ++i) {
    Generated g = generate(rng);
    Context ctx = context_for(g.policy, g.propagation);
    ctx.capabilities.native_sleep = g.native;
    const Deployment before = project(g.object);
    const Plan result = plan(before, ctx);
    const Budget& b = result.budget;
    SCOPED_TRACE(testing::Message() << "case " << i << ": " << g.object.dump());

    EXPECT_GE(b.pre_stop_seconds, g.policy.pre_stop.min_seconds);
    EXPECT_LE(b.pre_stop_seconds, g.policy.pre_stop.max_seconds);
    for (const auto& cp : result.containers) {
      EXPECT_LE(cp.pre_stop_seconds + b.drain_seconds + b.sidecar_pre_stop_seconds +
                    b.sidecar_drain_seconds + b.reserve_seconds,
                result.grace_seconds);
      EXPECT_NE(cp.name, "proxy");  // a native sidecar never gets the wait
    }
    // A larger user grace is never lowered (our own earlier grace may be).
    if (!before.applied) {
      EXPECT_GE(result.grace_seconds, before.grace_seconds);
    }

    Json after = g.object;
    apply_plan(after, result, ctx.policy_name, kTime);
    const Deployment applied = project(after);
    // The projection once written, computed without the object, is what the
    // written object reads as; and so after a re-tune to another figure.
    EXPECT_TRUE(apply_plan(before, result, ctx.policy_name, kTime) == applied);
    Context retune = ctx;
    retune.propagation_seconds = i % 3 == 0 ? 0 : g.propagation + 20;
    const Plan again = plan(applied, retune);
    Json retuned = after;
    apply_plan(retuned, again, ctx.policy_name, kTime + std::chrono::hours(1));
    EXPECT_TRUE(apply_plan(applied, again, ctx.policy_name, kTime + std::chrono::hours(1)) ==
                project(retuned));
    for (std::size_t c = 0; c < before.containers.size(); ++c) {
      const auto& old_hook = before.containers[c].pre_stop;
      const auto& new_hook = applied.containers[c].pre_stop;
      if (g.policy.pre_stop.existing == ExistingHook::Keep &&
          old_hook.kind != PreStopHook::Kind::None) {
        EXPECT_EQ(old_hook.kind, new_hook.kind);
        EXPECT_EQ(old_hook.seconds, new_hook.seconds);
      }
    }
    // After the plan, check finds no error but a user's too-short hook that
    // is kept (existing: Keep), and planning again is a no-op.
    const Plan second = plan(applied, ctx);
    for (const auto& f : second.findings) {
      if (f.severity != Severity::Error) continue;
      const auto kept = std::find_if(result.containers.begin(), result.containers.end(),
                                     [&](const auto& cp) { return cp.name == f.container; });
      EXPECT_TRUE(f.code == "PreStopTooShort" && kept != result.containers.end() &&
                  kept->user_hook_kept)
          << f.code << " " << f.container << " " << f.message;
    }
    EXPECT_FALSE(second.changed());
    if (HasFailure()) {
      for (const auto& f : second.findings)
        ADD_FAILURE() << f.code << " " << f.container << " " << f.message;
      for (const auto& c : second.changes)
        ADD_FAILURE() << c.field << " " << c.from << " -> " << c.to;
      ADD_FAILURE() << after.dump();
      break;
    }
  }
}

}  // namespace
}  // namespace gracekeeper::budget
