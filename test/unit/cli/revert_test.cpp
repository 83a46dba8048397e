// The revert plan (issue 17, item 4): a tuned Deployment or StatefulSet as the
// API server returns it -> the one JSON patch that puts the user's values back, drops
// gracekeeper's annotations and releases its fields. The patch is applied
// here with nlohmann's RFC 6902 implementation to see the object it makes.
#include "../../../src/cli/revert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gracekeeper/budget/apply.h"
#include "gracekeeper/cli/cli.h"

namespace gracekeeper::cli {
namespace {

using budget::Json;
using ::testing::HasSubstr;

const auto kTime = std::chrono::sys_days{std::chrono::year{2026} / 11 / 30};

// As `kubectl create` stores the articles' Deployment.
Json created() {
  return Json::parse(R"({
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "checkout", "namespace": "shop-prod", "resourceVersion": "812",
                 "annotations": {"gracekeeper.dev/enabled": "true", "team": "shop"},
                 "managedFields": [
                   {"manager": "kubectl-create", "operation": "Update", "apiVersion": "apps/v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}]},
    "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "checkout"}},
      "strategy": {"type": "RollingUpdate",
                   "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
      "template": {"metadata": {"labels": {"app": "checkout"}},
        "spec": {"terminationGracePeriodSeconds": 30,
          "containers": [{"name": "checkout", "image": "checkout:1.4.2",
            "ports": [{"containerPort": 8080}]}]}}}})");
}

// gracekeeper's apply as the server stores it: the plan written, and its
// Apply entry in managedFields (plus an Update entry from a hook replacement).
Json tuned(Json object, const budget::PolicySpec& policy, double propagation = 4) {
  budget::Context ctx;
  ctx.policy = &policy;
  ctx.policy_name = "default";
  ctx.propagation_seconds = propagation;
  auto d = budget::project_deployment(object);
  EXPECT_TRUE(d.has_value());
  budget::apply_plan(object, budget::plan(*d, ctx), ctx.policy_name, kTime);
  object["metadata"]["resourceVersion"] = "815";
  object["metadata"]["managedFields"].push_back(
      Json{{"manager", "gracekeeper"}, {"operation", "Apply"}, {"fieldsV1", Json::object()}});
  object["metadata"]["managedFields"].push_back(
      Json{{"manager", "gracekeeper"}, {"operation", "Update"}, {"fieldsV1", Json::object()}});
  return object;
}

RevertPlan planned(const Json& object) {
  auto p = plan_revert(object);
  EXPECT_TRUE(p.has_value()) << (p ? "" : p.error());
  return p ? *p : RevertPlan{};
}

std::vector<std::string> lines(const RevertPlan& p) {
  std::vector<std::string> out;
  for (const auto& c : p.changes) out.push_back(c.field + ": " + c.from + " -> " + c.to);
  return out;
}

TEST(Revert, PutsTheUsersValuesBackInOnePatch) {
  budget::PolicySpec policy;
  const Json before = created();
  const Json after_tune = tuned(before, policy);
  ASSERT_EQ(after_tune["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 46);

  const RevertPlan p = planned(after_tune);
  EXPECT_TRUE(p.tuned);
  EXPECT_TRUE(p.notes.empty());
  EXPECT_THAT(lines(p), ::testing::ElementsAre(
                            "terminationGracePeriodSeconds: 46s -> 30s",
                            "strategy: RollingUpdate maxSurge=1 maxUnavailable=0 -> RollingUpdate "
                            "maxSurge=25% maxUnavailable=25%",
                            "containers[checkout].preStop: sleep 6s -> none",
                            "metadata.annotations[gracekeeper.dev/applied]: (record) -> none",
                            "metadata.annotations[gracekeeper.dev/enabled]: \"true\" -> none",
                            "managedFields: gracekeeper's -> released"));
  // The write is conditional on the version read.
  EXPECT_EQ(p.patch[0], Json::parse(R"({"op":"replace","path":"/metadata/resourceVersion",
                                        "value":"815"})"));

  const Json reverted = after_tune.patch(p.patch);
  EXPECT_EQ(reverted["spec"], before["spec"]);  // exactly the user's fields
  EXPECT_EQ(reverted["metadata"]["annotations"], Json::parse(R"({"team":"shop"})"));
  EXPECT_EQ(reverted["metadata"]["managedFields"], before["metadata"]["managedFields"]);
  EXPECT_FALSE(planned(reverted).tuned);  // nothing left to revert
}

TEST(Revert, PutsTheUsersMeshAnnotationBack) {
  // A template injected by hand, its proxy on Istio's 8 s drain: tuned, the
  // annotation is gracekeeper's; reverted, the user's YAML comes back.
  budget::PolicySpec policy;
  Json before = created();
  before["spec"]["template"]["metadata"]["annotations"]["proxy.istio.io/config"] =
      "terminationDrainDuration: 8s\n";
  before["spec"]["template"]["spec"]["containers"].push_back(
      Json::parse(R"({"name": "istio-proxy", "image": "proxyv2:1"})"));
  const Json after_tune = tuned(before, policy);
  ASSERT_NE(after_tune["spec"]["template"]["metadata"]["annotations"]["proxy.istio.io/config"],
            before["spec"]["template"]["metadata"]["annotations"]["proxy.istio.io/config"]);
  const RevertPlan p = planned(after_tune);
  EXPECT_TRUE(p.notes.empty());
  EXPECT_THAT(lines(p), ::testing::Contains(HasSubstr("annotations[proxy.istio.io/config]: {")));
  EXPECT_EQ(after_tune.patch(p.patch)["spec"], before["spec"]);

  // Without an annotation of the user's, it goes.
  Json bare = before;
  bare["spec"]["template"]["metadata"].erase("annotations");
  const Json bare_tuned = tuned(bare, policy);
  ASSERT_TRUE(bare_tuned["spec"]["template"]["metadata"].contains("annotations"));
  EXPECT_EQ(bare_tuned.patch(planned(bare_tuned).patch)["spec"]["template"]["metadata"].value(
                "annotations", Json::object()),
            Json::object());
}

TEST(Revert, RestoresAReplacedHookAsWrittenAndKeepsTheRestOfTheLifecycle) {
  budget::PolicySpec policy;
  policy.pre_stop.existing = budget::ExistingHook::Replace;
  Json before = created();
  before["spec"]["template"]["spec"]["containers"][0]["lifecycle"] = Json::parse(
      R"({"postStart": {"exec": {"command": ["warm"]}},
          "preStop": {"httpGet": {"path": "/drain", "port": 8080}}})");
  const Json after_tune = tuned(before, policy);
  ASSERT_TRUE(
      after_tune["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"].contains(
          "sleep"));
  const RevertPlan p = planned(after_tune);
  EXPECT_THAT(lines(p), ::testing::Contains("containers[checkout].preStop: sleep 6s -> httpGet"));
  EXPECT_EQ(after_tune.patch(p.patch)["spec"], before["spec"]);
}

// Issue 32 item 3: a container whose recorded hook is null (the user had
// none) ends with no hook and no lifecycle, whether gracekeeper's hook is
// still there or already went when the wait fell to 0.
TEST(Revert, ANullRecordedHookEndsWithNoHook) {
  budget::PolicySpec policy;
  policy.pre_stop.min_seconds = 0;
  Json before = created();
  before["spec"]["template"]["spec"]["containers"].push_back(
      Json::parse(R"({"name": "db-proxy", "image": "cloud-sql-proxy:2"})"));
  const Json after_tune = tuned(before, policy);
  const Json record = Json::parse(
      after_tune["metadata"]["annotations"]["gracekeeper.dev/applied"].get<std::string>());
  EXPECT_EQ(record["user"]["preStop"], Json::parse(R"({"checkout": null, "db-proxy": null})"));
  for (const auto& c : after_tune["spec"]["template"]["spec"]["containers"]) {
    ASSERT_TRUE(c["lifecycle"]["preStop"].contains("sleep")) << c.dump();
  }
  const RevertPlan p = planned(after_tune);
  EXPECT_THAT(lines(p), ::testing::Contains("containers[db-proxy].preStop: sleep 6s -> none"));
  const Json reverted = after_tune.patch(p.patch);
  EXPECT_EQ(reverted["spec"], before["spec"]);

  // The wait falls to 0: gracekeeper's hooks go; revert has no hook to restore.
  Json zero = tuned(after_tune, policy, 0);
  for (const auto& c : zero["spec"]["template"]["spec"]["containers"]) {
    ASSERT_FALSE(c.contains("lifecycle")) << c.dump();
  }
  const RevertPlan q = planned(zero);
  EXPECT_TRUE(q.notes.empty());
  EXPECT_EQ(zero.patch(q.patch)["spec"], before["spec"]);
}

TEST(Revert, AnEmptyLifecycleComesBackEmpty) {
  budget::PolicySpec policy;
  Json before = created();
  before["spec"]["template"]["spec"]["containers"][0]["lifecycle"] = Json::object();
  const Json after_tune = tuned(before, policy);
  EXPECT_EQ(budget::Json::parse(after_tune["metadata"]["annotations"]["gracekeeper.dev/applied"]
                                    .get<std::string>())["user"]["preStop"],
            Json::parse(R"({"checkout": {}})"));
  EXPECT_EQ(after_tune.patch(planned(after_tune).patch)["spec"], before["spec"]);
}

TEST(Revert, AFieldChangedSinceIsLeftAndSaidSo) {
  budget::PolicySpec policy;
  Json object = tuned(created(), policy);
  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 90;  // the user's now
  object["spec"]["strategy"] = Json::parse(R"({"type": "Recreate"})");
  object["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"] =
      Json::parse(R"({"sleep": {"seconds": 9}})");
  const RevertPlan p = planned(object);
  EXPECT_THAT(lines(p), ::testing::ElementsAre(
                            "metadata.annotations[gracekeeper.dev/applied]: (record) -> none",
                            "metadata.annotations[gracekeeper.dev/enabled]: \"true\" -> none",
                            "managedFields: gracekeeper's -> released"));
  ASSERT_EQ(p.notes.size(), 3u);
  EXPECT_THAT(p.notes[0], HasSubstr("terminationGracePeriodSeconds: 90s is not the 46s"));
  EXPECT_THAT(p.notes[1], HasSubstr("strategy: Recreate is not gracekeeper's"));
  EXPECT_THAT(p.notes[2], HasSubstr("containers[checkout].preStop: sleep 9s is not gracekeeper's"));
  const Json reverted = object.patch(p.patch);
  EXPECT_EQ(reverted["spec"], object["spec"]);
}

TEST(Revert, AnOlderAnnotationReleasesButRestoresNothing) {
  Json object = created();
  object["metadata"]["annotations"]["gracekeeper.dev/applied"] =
      R"({"policy":"default","preStop":6,"grace":46,"graceOwned":true,"containers":["checkout"]})";
  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 46;
  object["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"] =
      Json::parse(R"({"sleep": {"seconds": 6}})");
  const RevertPlan p = planned(object);
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_THAT(p.notes[0], HasSubstr("older gracekeeper"));
  const Json reverted = object.patch(p.patch);
  EXPECT_EQ(reverted["spec"], object["spec"]);
  EXPECT_FALSE(reverted["metadata"]["annotations"].contains("gracekeeper.dev/applied"));
}

TEST(Revert, NothingToRevertOnAnUntunedDeployment) {
  const RevertPlan p = planned(created());
  EXPECT_FALSE(p.tuned);
  EXPECT_TRUE(p.patch.empty());
}

TEST(Revert, GracekeeperAsTheOnlyManagerClearsTheList) {
  budget::PolicySpec policy;
  Json object = tuned(created(), policy);
  object["metadata"]["managedFields"].erase(0);  // the creator's entry
  const Json reverted = object.patch(planned(object).patch);
  // An empty list would leave the server's list as it is; [{}] clears it.
  EXPECT_EQ(reverted["metadata"]["managedFields"], Json::parse("[{}]"));
}

TEST(Revert, UnusableObjectsAreNamed) {
  budget::PolicySpec policy;
  Json object = tuned(created(), policy);
  object["metadata"].erase("resourceVersion");
  auto missing = plan_revert(object);
  ASSERT_FALSE(missing.has_value());
  EXPECT_THAT(missing.error(), HasSubstr("metadata.resourceVersion"));
  Json broken = created();
  broken["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "soon";
  ASSERT_FALSE(plan_revert(broken).has_value());
  EXPECT_THAT(plan_revert(broken).error(), HasSubstr("terminationGracePeriodSeconds"));
  EXPECT_FALSE(plan_revert(Json::parse(R"({"kind": "Service"})")).has_value());
  auto daemon_set = plan_revert(Json::parse(R"({"apiVersion": "apps/v1", "kind": "DaemonSet"})"));
  ASSERT_FALSE(daemon_set.has_value());
  EXPECT_THAT(daemon_set.error(), HasSubstr("not an apps/v1 Deployment or StatefulSet"));
}

// A StatefulSet as `kubectl create` stores it: the user's grace of 40 s, no
// hook, the server's default updateStrategy.
Json created_statefulset() {
  return Json::parse(R"({
    "apiVersion": "apps/v1", "kind": "StatefulSet",
    "metadata": {"name": "ledger", "namespace": "shop-prod", "resourceVersion": "912",
                 "annotations": {"gracekeeper.dev/enabled": "true", "team": "shop"},
                 "managedFields": [
                   {"manager": "kubectl-create", "operation": "Update", "apiVersion": "apps/v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}]},
    "spec": {"replicas": 3, "serviceName": "ledger",
      "selector": {"matchLabels": {"app": "ledger"}},
      "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
      "podManagementPolicy": "OrderedReady",
      "template": {"metadata": {"labels": {"app": "ledger"}},
        "spec": {"terminationGracePeriodSeconds": 40,
          "containers": [{"name": "ledger", "image": "ledger:2.0",
            "ports": [{"containerPort": 5432}]}]}}}})");
}

bool touches(const RevertPlan& p, std::string_view prefix) {
  return std::ranges::any_of(
      p.patch, [&](const Json& op) { return op.value("path", std::string()).starts_with(prefix); });
}

TEST(Revert, AStatefulSetGetsItsGraceAndHooksBackAndNoStrategy) {
  budget::PolicySpec policy;
  const Json before = created_statefulset();
  const Json after_tune = tuned(before, policy);
  ASSERT_EQ(after_tune["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 46);
  ASSERT_FALSE(after_tune["spec"].contains("strategy"));
  const Json record = Json::parse(
      after_tune["metadata"]["annotations"]["gracekeeper.dev/applied"].get<std::string>());
  EXPECT_EQ(record["user"], Json::parse(R"({"grace": 40, "preStop": {"ledger": null}})"));

  const RevertPlan p = planned(after_tune);
  EXPECT_TRUE(p.tuned);
  EXPECT_TRUE(p.notes.empty());
  EXPECT_THAT(lines(p), ::testing::ElementsAre(
                            "terminationGracePeriodSeconds: 46s -> 40s",
                            "containers[ledger].preStop: sleep 6s -> none",
                            "metadata.annotations[gracekeeper.dev/applied]: (record) -> none",
                            "metadata.annotations[gracekeeper.dev/enabled]: \"true\" -> none",
                            "managedFields: gracekeeper's -> released"));
  EXPECT_FALSE(touches(p, "/spec/strategy"));
  EXPECT_FALSE(touches(p, "/spec/updateStrategy"));
  const Json reverted = after_tune.patch(p.patch);
  EXPECT_EQ(reverted["spec"], before["spec"]);
  EXPECT_EQ(reverted["metadata"]["annotations"], Json::parse(R"({"team":"shop"})"));
  EXPECT_EQ(reverted["metadata"]["managedFields"], before["metadata"]["managedFields"]);
  EXPECT_FALSE(planned(reverted).tuned);

  Json unread = after_tune;
  unread["metadata"].erase("resourceVersion");
  ASSERT_FALSE(plan_revert(unread).has_value());
  EXPECT_THAT(plan_revert(unread).error(), HasSubstr("read the StatefulSet"));
}

// gracekeeper never records a StatefulSet's strategy; one recorded anyway
// (written by hand, or by a Deployment's record copied over) is not written
// back: a StatefulSet has no spec.strategy, the write would be refused.
TEST(Revert, AStrategyRecordedOnAStatefulSetIsNeverWritten) {
  Json object = created_statefulset();
  object["metadata"]["annotations"]["gracekeeper.dev/applied"] =
      R"({"policy":"default","preStop":6,"grace":46,"graceOwned":true,"propagation":4,)"
      R"("containers":["ledger"],"waits":{"ledger":6},"time":"2026-11-30T00:00:00Z",)"
      R"("user":{"grace":40,"maxSurge":"25%","maxUnavailable":"25%","preStop":{"ledger":null}}})";
  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 46;
  object["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"] =
      Json::parse(R"({"sleep": {"seconds": 6}})");
  const RevertPlan p = planned(object);
  EXPECT_THAT(lines(p), ::testing::Contains("terminationGracePeriodSeconds: 46s -> 40s"));
  EXPECT_THAT(lines(p), ::testing::Contains("containers[ledger].preStop: sleep 6s -> none"));
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_THAT(p.notes[0], HasSubstr("never changes a StatefulSet's updateStrategy"));
  EXPECT_FALSE(touches(p, "/spec/strategy"));
  EXPECT_FALSE(touches(p, "/spec/updateStrategy"));
  EXPECT_EQ(object.patch(p.patch)["spec"], created_statefulset()["spec"]);

  // An annotation of the older format: nothing restored, and no strategy named.
  object["metadata"]["annotations"]["gracekeeper.dev/applied"] =
      R"({"policy":"default","preStop":6,"grace":46,"graceOwned":true,"containers":["ledger"]})";
  const RevertPlan q = planned(object);
  ASSERT_EQ(q.notes.size(), 1u);
  EXPECT_THAT(q.notes[0], HasSubstr("terminationGracePeriodSeconds, preStop are left"));
  EXPECT_EQ(object.patch(q.patch)["spec"], object["spec"]);
}

TEST(RevertTarget, KindsAsKubectlSpellsThem) {
  using T = RevertTarget;
  EXPECT_EQ(parse_revert_target("checkout"), (T{"Deployment", "checkout"}));
  for (const char* kind : {"deployment", "deployments", "deploy", "Deployment", "deployment.apps",
                           "deployments.apps"}) {
    EXPECT_EQ(parse_revert_target(std::string(kind) + "/checkout"), (T{"Deployment", "checkout"}))
        << kind;
  }
  for (const char* kind :
       {"statefulset", "statefulsets", "sts", "StatefulSet", "statefulset.apps", "STS"}) {
    EXPECT_EQ(parse_revert_target(std::string(kind) + "/ledger-0.v2"),
              (T{"StatefulSet", "ledger-0.v2"}))
        << kind;
  }
}

TEST(RevertTarget, BadArgumentsNameWhatIsWrong) {
  auto error = [](std::string_view argument) {
    auto target = parse_revert_target(argument);
    EXPECT_FALSE(target.has_value()) << argument;
    return target ? std::string() : target.error();
  };
  EXPECT_THAT(error("daemonset/x"),
              HasSubstr("\"daemonset/x\": gracekeeper reverts Deployments and StatefulSets, not "
                        "\"daemonset\""));
  EXPECT_THAT(error("statefulset/"), HasSubstr("\"statefulset/\": no StatefulSet name"));
  EXPECT_THAT(error("deploy/"), HasSubstr("no Deployment name"));
  EXPECT_THAT(error("/ledger"), HasSubstr("\"/ledger\": no kind before '/'"));
  EXPECT_THAT(error("sts/Ledger"), HasSubstr("\"Ledger\" is not a StatefulSet name"));
  EXPECT_THAT(error("sts/a/b"), HasSubstr("\"a/b\" is not a StatefulSet name"));
  EXPECT_THAT(error("Checkout"), HasSubstr("\"Checkout\" is not a Deployment name"));
  EXPECT_THAT(error(""), HasSubstr("\"\" is not a Deployment name"));
  EXPECT_THAT(error(std::string(254, 'a')), HasSubstr("is not a Deployment name"));
}

int run(std::vector<std::string> args, std::string& out, std::string& err) {
  std::vector<std::string_view> views(args.begin(), args.end());
  std::istringstream in;
  std::ostringstream o, e;
  const int code = main(views, Streams{in, o, e});
  out = o.str();
  err = e.str();
  return code;
}

TEST(RevertCommand, UsageAndBadArguments) {
  std::string out, err;
  EXPECT_EQ(run({"revert", "--help"}, out, err), 0);
  EXPECT_THAT(out, HasSubstr("--dry-run"));
  EXPECT_THAT(out, HasSubstr("statefulset/NAME"));
  EXPECT_EQ(run({"revert", "--force"}, out, err), 2);
  EXPECT_THAT(err, HasSubstr("unknown flag --force"));
  EXPECT_EQ(run({"revert", "--namespace"}, out, err), 2);
  EXPECT_THAT(err, HasSubstr("--namespace needs a value"));
  EXPECT_EQ(run({"revert", "--dry-run=yes"}, out, err), 2);
  EXPECT_EQ(run({"revert", "Checkout"}, out, err), 2);
  EXPECT_THAT(err, HasSubstr("\"Checkout\" is not a Deployment name"));
  EXPECT_EQ(run({"revert", "checkout", "daemonset/x"}, out, err), 2);
  EXPECT_THAT(err, HasSubstr("not \"daemonset\" (deployment/NAME or statefulset/NAME)"));
  EXPECT_EQ(run({"revert", "statefulset/"}, out, err), 2);
  EXPECT_THAT(err, HasSubstr("\"statefulset/\": no StatefulSet name after the '/'"));
  EXPECT_EQ(run({"revert", "sts/Ledger"}, out, err), 2);
  EXPECT_THAT(err, HasSubstr("\"Ledger\" is not a StatefulSet name"));
  EXPECT_EQ(run({"revert", "--kubeconfig", "/nonexistent/kubeconfig", "checkout"}, out, err), 1);
  EXPECT_THAT(err, HasSubstr("/nonexistent/kubeconfig"));
  EXPECT_EQ(run({"revert", "--kubeconfig", "/nonexistent/kubeconfig", "sts/ledger"}, out, err), 1);
}

}  // namespace
}  // namespace gracekeeper::cli
