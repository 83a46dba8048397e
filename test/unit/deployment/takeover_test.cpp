// Replacing another manager's preStop hook is one JSON patch that swaps the
// handler and sets every other owned field: one write, one rollout.
#include "gracekeeper/deployment/takeover.h"  // pure helpers

#include <gtest/gtest.h>

#include "gracekeeper/budget/apply.h"

namespace gracekeeper::controller {
namespace {

const nlohmann::json kCurrent = nlohmann::json::parse(R"({
  "apiVersion": "apps/v1", "kind": "Deployment",
  "metadata": {"name": "legacy", "namespace": "shop", "uid": "u", "resourceVersion": "7",
               "annotations": {"other": "x"}},
  "spec": {"replicas": 3,
    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
    "template": {"spec": {"terminationGracePeriodSeconds": 30,
      "containers": [
        {"name": "app", "image": "app:1",
         "lifecycle": {"preStop": {"httpGet": {"path": "/drain", "port": 8080, "scheme": "HTTP"}}}},
        {"name": "proxy", "image": "proxy:1"}]}}}})");

const nlohmann::json kConfiguration = nlohmann::json::parse(R"({
  "apiVersion": "apps/v1", "kind": "Deployment",
  "metadata": {"name": "legacy", "namespace": "shop",
               "annotations": {"gracekeeper.dev/applied": "{}"}},
  "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
    "template": {"spec": {"terminationGracePeriodSeconds": 46,
      "containers": [{"name": "app", "lifecycle": {"preStop": {"sleep": {"seconds": 6}}}}]}}}})");

TEST(Takeover, PatchSwapsTheHookAndSetsEveryOwnedField) {
  const auto patch = replacement_patch(kCurrent, kConfiguration);
  const auto expected = nlohmann::json::parse(R"([
    {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
    {"op": "add", "path": "/spec/strategy",
     "value": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
    {"op": "add", "path": "/spec/template/spec/terminationGracePeriodSeconds", "value": 46},
    {"op": "add", "path": "/spec/template/spec/containers/0/lifecycle/preStop",
     "value": {"sleep": {"seconds": 6}}},
    {"op": "add", "path": "/metadata/annotations/gracekeeper.dev~1applied", "value": "{}"}])");
  EXPECT_EQ(patch, expected);
  // Applied to the object, the old handler is gone and the other container untouched.
  const auto after = kCurrent.patch(patch);
  const auto& app = after["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(app["lifecycle"]["preStop"], nlohmann::json::parse(R"({"sleep": {"seconds": 6}})"));
  EXPECT_EQ(after["spec"]["template"]["spec"]["containers"][1],
            kCurrent["spec"]["template"]["spec"]["containers"][1]);
  EXPECT_EQ(after["metadata"]["annotations"]["other"], "x");
}

TEST(Takeover, PatchCreatesMissingLifecycleAndAnnotations) {
  auto current = kCurrent;
  current["metadata"].erase("annotations");
  auto& app = current["spec"]["template"]["spec"]["containers"][0];
  app.erase("lifecycle");
  const auto after = current.patch(replacement_patch(current, kConfiguration));
  EXPECT_EQ(after["metadata"]["annotations"]["gracekeeper.dev/applied"], "{}");
  EXPECT_EQ(after["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["sleep"]
                 ["seconds"],
            6);
}

TEST(Takeover, OnlyAChangeOfHandlerNeedsThePatch) {
  budget::Deployment d;
  d.containers.push_back({});
  d.containers[0].name = "app";
  budget::Plan plan;
  plan.containers.push_back({});
  plan.containers[0].name = "app";
  plan.containers[0].action = budget::ContainerPlan::Action::SetSleep;

  d.containers[0].pre_stop.kind = budget::PreStopHook::Kind::HttpGet;
  EXPECT_TRUE(changes_handler(d, plan));
  d.containers[0].pre_stop.kind = budget::PreStopHook::Kind::ExecSleep;
  EXPECT_TRUE(changes_handler(d, plan));
  d.containers[0].pre_stop.kind = budget::PreStopHook::Kind::Sleep;  // same handler: one apply
  EXPECT_FALSE(changes_handler(d, plan));
  d.containers[0].pre_stop.kind = budget::PreStopHook::Kind::None;
  EXPECT_FALSE(changes_handler(d, plan));
  budget::PreStopHook owned_exec;
  owned_exec.kind = budget::PreStopHook::Kind::ExecSleep;
  owned_exec.wait_ms = owned_exec.length_ms = 6000;
  owned_exec.seconds = 6;
  owned_exec.owned = true;
  d.containers[0].pre_stop = owned_exec;
  EXPECT_TRUE(changes_handler(d, plan));  // owned or not, other managers may share it
  d.containers[0].pre_stop = budget::PreStopHook{};
  d.containers[0].pre_stop.kind = budget::PreStopHook::Kind::HttpGet;
  plan.containers[0].action = budget::ContainerPlan::Action::Keep;
  EXPECT_FALSE(changes_handler(d, plan));
}

}  // namespace
}  // namespace gracekeeper::controller
