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

// Issue 32 item 1: hook lengths read as the kubelet runs them, in
// milliseconds: the wait before the app is told to stop, and the whole length.
TEST(ProjectDeployment, RecognisesWaitsOfKnownLength) {
  using Kind = PreStopHook::Kind;
  const std::optional<std::int64_t> unknown;
  struct Case {
    const char* pre_stop;
    Kind kind;
    std::optional<std::int64_t> wait_ms;
    std::optional<std::int64_t> length_ms;
  } cases[] = {
      {R"({"sleep": {"seconds": 7}})", Kind::Sleep, 7000, 7000},
      {R"({"exec": {"command": ["sleep", "5"]}})", Kind::ExecSleep, 5000, 5000},
      {R"({"exec": {"command": ["/bin/sleep", "5s"]}})", Kind::ExecSleep, 5000, 5000},
      {R"({"exec": {"command": ["sh", "-c", "sleep 12"]}})", Kind::ExecSleep, 12000, 12000},
      // coreutils sleep: decimals, suffixes, several arguments added up.
      {R"({"exec": {"command": ["sleep", "0.5"]}})", Kind::ExecSleep, 500, 500},
      {R"({"exec": {"command": ["sleep", ".5"]}})", Kind::ExecSleep, 500, 500},
      {R"({"exec": {"command": ["sleep", "2."]}})", Kind::ExecSleep, 2000, 2000},
      {R"({"exec": {"command": ["sleep", "1m"]}})", Kind::ExecSleep, 60000, 60000},
      {R"({"exec": {"command": ["sleep", "1h", "0.5d"]}})", Kind::ExecSleep, 46800000, 46800000},
      {R"({"exec": {"command": ["sleep", "1m", "30s", "0.25"]}})", Kind::ExecSleep, 90250, 90250},
      {R"({"exec": {"command": ["sleep", "0.0001"]}})", Kind::ExecSleep, 0, 1},
      {R"({"exec": {"command": ["busybox", "sleep", "3"]}})", Kind::ExecSleep, 3000, 3000},
      {R"({"exec": {"command": ["/usr/bin/env", "sleep", "3"]}})", Kind::ExecSleep, 3000, 3000},
      {R"({"exec": {"command": ["sleep", "inf"]}})", Kind::Exec, unknown, unknown},
      {R"({"exec": {"command": ["sleep", "0x10"]}})", Kind::Exec, unknown, unknown},
      {R"({"exec": {"command": ["sleep", "-1"]}})", Kind::Exec, unknown, unknown},
      {R"({"exec": {"command": ["sleep", "1e3"]}})", Kind::Exec, unknown, unknown},
      {R"({"exec": {"command": ["sleep", "5x"]}})", Kind::Exec, unknown, unknown},
      {R"({"exec": {"command": ["sleep", "."]}})", Kind::Exec, unknown, unknown},
      {R"({"exec": {"command": ["sleep"]}})", Kind::Exec, unknown, unknown},
      // Shell forms: the sleeps of simple commands joined by ;, && or newlines.
      {R"({"exec": {"command": ["sh", "-c", "sleep 2.5"]}})", Kind::ExecSleep, 2500, 2500},
      {R"({"exec": {"command": ["bash", "-ec", "sleep 2; sleep '3'"]}})", Kind::ExecSleep, 5000,
       5000},
      {R"({"exec": {"command": ["/bin/sh", "-c", "echo bye\nsleep 1m && true"]}})", Kind::ExecSleep,
       60000, 60000},
      {R"({"exec": {"command": ["sh", "-c", "sleep 90; nginx -s quit"]}})", Kind::Exec, 90000,
       90000},
      {R"({"exec": {"command": ["sh", "-c", "sleep 5 && nginx -s quit && sleep 10"]}})", Kind::Exec,
       5000, 15000},
      {R"({"exec": {"command": ["sh", "-c", "set -eu; sleep 5"]}})", Kind::ExecSleep, 5000, 5000},
      {R"({"exec": {"command": ["sh", "-c", "set -n; sleep 5"]}})", Kind::Exec, unknown, 5000},
      {R"({"exec": {"command": ["sh", "-c", "set -o pipefail; sleep 5"]}})", Kind::Exec, unknown,
       5000},
      {R"({"exec": {"command": ["sh", "-c", "sleep 5; exit 0; sleep 50"]}})", Kind::ExecSleep, 5000,
       5000},
      {R"({"exec": {"command": ["busybox", "sh", "-c", "exec sleep 4"]}})", Kind::ExecSleep, 4000,
       4000},
      // A command before any sleep may stop the app at once: the wait is unknown.
      {R"({"exec": {"command": ["sh", "-c", "nginx -s quit; sleep 10"]}})", Kind::Exec, unknown,
       10000},
      {R"({"exec": {"command": ["sh", "-c", "sleep $DELAY"]}})", Kind::Exec, unknown, unknown},
      {R"({"exec": {"command": ["sh", "-c", "sleep 5 || true"]}})", Kind::Exec, unknown, unknown},
      {R"({"exec": {"command": ["sh", "-c", "sleep 5 &"]}})", Kind::Exec, unknown, unknown},
      {R"({"exec": {"command": ["sh", "-c", "if true; then sleep 5; fi"]}})", Kind::Exec, unknown,
       unknown},
      {R"({"exec": {"command": ["sh", "-c", "sleep 5 | cat"]}})", Kind::Exec, unknown, unknown},
      {R"({"exec": {"command": ["zsh", "-c", "sleep 5"]}})", Kind::Exec, unknown, unknown},
      {R"({"exec": {"command": ["/drain.sh"]}})", Kind::Exec, unknown, unknown},
      {R"({"httpGet": {"path": "/drain", "port": 8080}})", Kind::HttpGet, unknown, unknown},
      {R"({"tcpSocket": {"port": 8080}})", Kind::TcpSocket, unknown, unknown},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.pre_stop);
    Json container = {{"name", "app"}, {"lifecycle", {{"preStop", Json::parse(c.pre_stop)}}}};
    auto d = project_deployment(with_container(container));
    ASSERT_TRUE(d.has_value());
    const PreStopHook& hook = d->containers[0].pre_stop;
    EXPECT_EQ(hook.kind, c.kind);
    EXPECT_EQ(hook.wait_ms, c.wait_ms);
    EXPECT_EQ(hook.length_ms, c.length_ms);
    // Whole seconds, rounded down, for the controller's comparisons.
    EXPECT_EQ(hook.seconds, c.wait_ms ? std::optional<std::int64_t>(*c.wait_ms / 1000) : unknown);
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
