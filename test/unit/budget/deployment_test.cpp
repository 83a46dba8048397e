#include "gracekeeper/budget/deployment.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gracekeeper::budget {
namespace {

Json with_container(const Json& container, const Json& annotations = Json::object()) {
  Json d = Json::parse(R"({"apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web"}, "spec": {"template": {"spec": {"containers": []}}}})");
  d["metadata"]["annotations"] = annotations;
  d["spec"]["template"]["spec"]["containers"].push_back(container);
  return d;
}

TEST(ProjectDeployment, KubernetesDefaultsApplyWhenFieldsAreAbsent) {
  auto d = project_deployment(with_container(Json::parse(R"({"name": "app"})")));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->replicas, 1);
  EXPECT_EQ(d->grace_seconds, 30);
  EXPECT_FALSE(d->grace_set);
  EXPECT_EQ(d->strategy.type, Strategy::Type::RollingUpdate);
  EXPECT_EQ(d->strategy.max_unavailable, (IntOrPercent{25, true}));
  EXPECT_EQ(d->strategy.max_surge, (IntOrPercent{25, true}));
  EXPECT_FALSE(opted_in(*d));
  EXPECT_EQ(key(*d), "web");
}

TEST(ProjectDeployment, RecognisesWaitsOfKnownLength) {
  struct Case {
    const char* pre_stop;
    PreStopHook::Kind kind;
    std::optional<std::int64_t> seconds;
  } cases[] = {
      {R"({"sleep": {"seconds": 7}})", PreStopHook::Kind::Sleep, 7},
      {R"({"exec": {"command": ["sleep", "5"]}})", PreStopHook::Kind::ExecSleep, 5},
      {R"({"exec": {"command": ["/bin/sleep", "5s"]}})", PreStopHook::Kind::ExecSleep, 5},
      {R"({"exec": {"command": ["sh", "-c", "sleep 12"]}})", PreStopHook::Kind::ExecSleep, 12},
      {R"({"exec": {"command": ["sleep", "0.5"]}})", PreStopHook::Kind::Exec, std::nullopt},
      {R"({"exec": {"command": ["sh", "-c", "sleep 5 && nginx -s quit"]}})",
       PreStopHook::Kind::Exec, std::nullopt},
      {R"({"exec": {"command": ["/drain.sh"]}})", PreStopHook::Kind::Exec, std::nullopt},
      {R"({"httpGet": {"path": "/drain", "port": 8080}})", PreStopHook::Kind::HttpGet,
       std::nullopt},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.pre_stop);
    Json container = {{"name", "app"}, {"lifecycle", {{"preStop", Json::parse(c.pre_stop)}}}};
    auto d = project_deployment(with_container(container));
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->containers[0].pre_stop.kind, c.kind);
    EXPECT_EQ(d->containers[0].pre_stop.seconds, c.seconds);
  }
}

TEST(ProjectDeployment, ProbeTargetsCompareLivenessWithReadiness) {
  Json container = Json::parse(R"({"name": "app", "ports": [{"containerPort": 80}],
    "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}},
    "livenessProbe": {"grpc": {"port": 9090}}})");
  auto d = project_deployment(with_container(container));
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->containers[0].has_ports);
  EXPECT_EQ(d->containers[0].readiness.target, "http:http/ready");
  EXPECT_EQ(d->containers[0].liveness.target, "grpc:9090/");
}

TEST(ProjectDeployment, OnlyHooksRecordedInTheAppliedAnnotationAreOwned) {
  Json container =
      Json::parse(R"({"name": "app", "lifecycle": {"preStop": {"sleep": {"seconds": 15}}}})");
  Json ours = {{"gracekeeper.dev/applied",
                R"({"policy":"p","preStop":15,"grace":55,"graceOwned":true,"propagation":10,)"
                R"("containers":["app"],"time":"2026-11-30T10:00:00Z"})"}};
  auto d = project_deployment(with_container(container, ours));
  ASSERT_TRUE(d.has_value() && d->applied.has_value());
  EXPECT_TRUE(d->containers[0].pre_stop.owned);
  EXPECT_TRUE(d->applied->grace_owned);
  ASSERT_TRUE(d->applied->time.has_value());

  // Same numbers, but the user changed the wait: not ours any more.
  container["lifecycle"]["preStop"]["sleep"]["seconds"] = 20;
  EXPECT_FALSE(project_deployment(with_container(container, ours))->containers[0].pre_stop.owned);

  // A time outside what system_clock can hold is ignored, not overflowed (found by the fuzzer).
  Json old_time = ours;
  old_time["gracekeeper.dev/applied"] =
      R"({"preStop":15,"grace":55,"containers":["app"],"time":"1013-01-15T12:00:00Z"})";
  auto ancient = project_deployment(with_container(container, old_time));
  ASSERT_TRUE(ancient.has_value() && ancient->applied.has_value());
  EXPECT_FALSE(ancient->applied->time.has_value());

  // An unreadable annotation owns nothing (and is no error: gracekeeper just treats it as absent).
  for (const char* garbage : {"{", "[]", R"({"preStop": "x"})", R"({"preStop": -1, "grace": 5})"}) {
    auto g = project_deployment(with_container(container, {{"gracekeeper.dev/applied", garbage}}));
    ASSERT_TRUE(g.has_value()) << garbage;
    EXPECT_FALSE(g->applied.has_value()) << garbage;
  }
}

TEST(ProjectDeployment, CollectsEveryErrorWithItsPath) {
  Json d = Json::parse(R"({"apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web", "labels": {"tier": 1}},
    "spec": {"replicas": "three", "strategy": {"type": "BlueGreen"},
      "template": {"spec": {"terminationGracePeriodSeconds": -1,
        "containers": [{"name": "a", "command": "java -jar app.jar"}]}}}})");
  auto result = project_deployment(d);
  ASSERT_FALSE(result.has_value());
  std::vector<std::string> paths;
  for (const auto& e : result.error()) paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"metadata.labels[tier]", "spec.replicas",
                                             "spec.strategy.type",
                                             "spec.template.spec.terminationGracePeriodSeconds",
                                             "spec.template.spec.containers[0].command"}));
  EXPECT_NE(result.error()[0].message.find("quote it"), std::string::npos);
}

}  // namespace
}  // namespace gracekeeper::budget

namespace gracekeeper::budget {
namespace {

// Found by the fuzzer: null where an object is required, nameless and duplicate containers.
TEST(ProjectDeploymentFuzzFindings, NullRequiredFieldsAndBadContainerNamesAreErrors) {
  const char* cases[][2] = {
      {R"({"metadata": {"name": "x"}, "spec": null})", "spec"},
      {R"({"metadata": {"name": "x"}, "spec": {"template": null}})", "spec.template"},
      {R"({"metadata": {"name": "x"}, "spec": {"template": {"spec": null}}})",
       "spec.template.spec"},
      {R"({"metadata": {"name": "x"}, "spec": {"template": {"spec": {"containers": null}}}})",
       "spec.template.spec.containers"},
      {R"({"metadata": {"name": "x"}, "spec": {"template": {"spec": {"containers": [{"name": null}]}}}})",
       "spec.template.spec.containers[0].name"},
      {R"({"metadata": {"name": "x"}, "spec": {"template": {"spec": {"containers": [{"name": ""}]}}}})",
       "spec.template.spec.containers[0].name"},
      {R"({"metadata": {"name": "x"}, "spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}}})",
       "spec.template.spec.containers[1].name"},
  };
  for (const auto& [text, path] : cases) {
    SCOPED_TRACE(text);
    auto result = project_deployment(Json::parse(text));
    ASSERT_FALSE(result.has_value());
    ASSERT_FALSE(result.error().empty());
    EXPECT_EQ(result.error().front().path, path);
  }
}

}  // namespace
}  // namespace gracekeeper::budget
