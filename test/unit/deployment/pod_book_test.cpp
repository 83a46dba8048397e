// Pods that differ from their template (pod_book.h): what is compared, one
// pod per template, and the decision that judges the budget on the pod.
#include "gracekeeper/deployment/pod_book.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../../support/reconciler_fakes.h"

namespace gracekeeper::controller::testing {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

budget::Deployment read(const json& object) {
  auto d = budget::project_deployment(budget::Json(object));
  EXPECT_TRUE(d.has_value()) << (d ? "" : d.error().front().format());
  return d ? *d : budget::Deployment{};
}

// The pod the template of `deployment` makes, as the API server stores it.
json pod_of(const json& deployment, const std::string& name = "web-7d9f8b6c5-x2x4z") {
  json spec = deployment["spec"]["template"]["spec"];
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "shop"}}},
          {"spec", spec}};
}

json tuned_web() {
  json d = deployment("web");
  d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 46;
  d["spec"]["template"]["spec"]["containers"][0]["lifecycle"] = {
      {"preStop", {{"sleep", {{"seconds", 6}}}}}};
  return d;
}

TEST(PodDifferences, WhatAMutatingWebhookChanges) {
  const json d = tuned_web();
  EXPECT_THAT(pod_differences(read(d), read(pod_of(d))), IsEmpty());

  json pod = pod_of(d);
  pod["spec"]["terminationGracePeriodSeconds"] = 10;  // a policy engine's cap
  pod["spec"]["containers"].push_back(
      {{"name", "istio-proxy"}, {"image", "proxy:1"}, {"ports", {{{"containerPort", 15090}}}}});
  pod["spec"]["containers"][0]["lifecycle"] = {
      {"preStop", {{"exec", {{"command", {"sleep", "2"}}}}}}};
  EXPECT_THAT(
      pod_differences(read(d), read(pod)),
      ElementsAre("container istio-proxy: added to the pod",
                  "container app: preStop sleep 6s in the template, exec sleep 2 on the pod",
                  "terminationGracePeriodSeconds: 46 in the template, 10 on the pod"));

  json sidecar = pod_of(d);
  sidecar["spec"]["initContainers"] = {
      {{"name", "linkerd-proxy"}, {"image", "l:1"}, {"restartPolicy", "Always"}}};
  sidecar["spec"]["containers"][0].erase("lifecycle");
  EXPECT_THAT(pod_differences(read(d), read(sidecar)),
              ElementsAre("container linkerd-proxy: added to the pod (a native sidecar)",
                          "container app: preStop sleep 6s in the template, none on the pod"));
}

TEST(PodBook, OnePodPerTemplateTheNewestKept) {
  PodBook book;
  const auto t0 = std::chrono::system_clock::time_point(std::chrono::hours(1));
  EXPECT_EQ(book.version("Deployment/shop/web"), 0u);
  EXPECT_TRUE(book.offer("Deployment/shop/web", {"web-a", "aaa", t0, {}}));
  const auto v1 = book.version("Deployment/shop/web");
  EXPECT_TRUE(book.has("Deployment/shop/web", "aaa"));
  EXPECT_FALSE(
      book.offer("Deployment/shop/web", {"web-b", "aaa", t0 + std::chrono::seconds(5), {}}));
  EXPECT_FALSE(
      book.offer("Deployment/shop/web", {"web-old", "zzz", t0 - std::chrono::seconds(5), {}}));
  EXPECT_TRUE(
      book.offer("Deployment/shop/web", {"web-c", "bbb", t0 + std::chrono::seconds(9), {}}));
  EXPECT_GT(book.version("Deployment/shop/web"), v1);
  EXPECT_EQ(book.find("Deployment/shop/web")->name, "web-c");
  EXPECT_FALSE(book.has("Deployment/shop/web", "aaa"));
  book.erase("Deployment/shop/web");
  EXPECT_EQ(book.find("Deployment/shop/web"), nullptr);
}

class PodDiffersFromTemplate : public ::testing::Test {
 protected:
  void SetUp() override {
    world.put_policy(policy());
    ASSERT_TRUE(world.reconcile_policy("shop/default"));
  }
  // `d` tuned by the reconciler, its rollout over: the object as stored.
  json tuned(json d) {
    world.put_deployment(std::move(d));
    EXPECT_TRUE(world.reconcile_deployment("shop/web"));
    rollout_done(world, "shop/web");
    return world.objects.at("shop/web");
  }
  void offer(const json& pod, const std::string& name = "web-7d9f8b6c5-x2x4z",
             const std::string& hash = "7d9f8b6c5",
             std::chrono::system_clock::time_point created = {}) {
    ASSERT_TRUE(world.pods.offer("Deployment/shop/web", {name, hash, created, read(pod)}));
  }
  // The note of the last PodDiffersFromTemplate Event; "" when none.
  std::string differs_note() const {
    std::string note;
    for (const auto& e : world.events.recorded) {
      if (e.reason == "PodDiffersFromTemplate") note = e.note;
    }
    return note;
  }
  World world;
};

TEST_F(PodDiffersFromTemplate, ABudgetThatDoesNotHoldOnThePodIsReportedAndCounted) {
  const json web = tuned(deployment("web"));
  // The pod as the kubelet runs it: the template, with the grace a policy
  // engine capped at 10 s.
  json capped = pod_of(web);
  capped["spec"]["terminationGracePeriodSeconds"] = 10;
  offer(capped);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_THAT(world.events.reasons(), Contains("PodDiffersFromTemplate"));
  const std::string note = differs_note();
  EXPECT_THAT(note, HasSubstr("pod web-7d9f8b6c5-x2x4z differs from the template: "
                              "terminationGracePeriodSeconds: "));
  EXPECT_THAT(note,
              HasSubstr("10 on the pod; on the pod the budget does not hold: BudgetExceeded"));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  json status = world.policy_objects.at("shop/default")["status"];
  EXPECT_EQ(status["deployments"]["compliant"], 0);
  EXPECT_EQ(status["deployments"]["violations"], 1);
  EXPECT_EQ(status["deployments"]["podsDiffer"], 1);
  EXPECT_EQ(condition(status, "BudgetHolds", "reason"), "NotCompliant");
  EXPECT_EQ(world.writer.calls.size(), 1u) << "the pod is reported, the template left as it is";

  // A newer pod made as the template says: the budget holds again.
  offer(pod_of(web), "web-5c4b8d9f7-zzzzz", "5c4b8d9f7", std::chrono::system_clock::now());
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  status = world.policy_objects.at("shop/default")["status"];
  EXPECT_EQ(status["deployments"]["compliant"], 1);
  EXPECT_EQ(status["deployments"]["podsDiffer"], 0);
  EXPECT_EQ(condition(status, "BudgetHolds", "reason"), "AllCompliant");
}

TEST_F(PodDiffersFromTemplate, ADifferenceThatKeepsTheBudgetIsReportedOnly) {
  json raised = pod_of(tuned(deployment("web")));
  raised["spec"]["terminationGracePeriodSeconds"] = 120;  // longer: no harm
  offer(raised);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_THAT(differs_note(), HasSubstr("120 on the pod; the budget holds on the pod"));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  const json& counts = world.policy_objects.at("shop/default")["status"]["deployments"];
  EXPECT_EQ(counts["compliant"], 1);
  EXPECT_EQ(counts["podsDiffer"], 1) << "counted, though the budget holds on the pod";
}

// Tuned at once after its creation: the Deployment controller made the
// first template's pods but had not written a status yet (hack/proof saw
// it). Its pod is of the template before the tune, not judged against it.
TEST_F(PodDiffersFromTemplate, NotBeforeTheControllerObservedTheGeneration) {
  const json created = deployment("web");
  world.put_deployment(created);
  offer(pod_of(created));  // no preStop wait: the template before the tune
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.writer.calls.size(), 1u) << "tuned";
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_THAT(world.events.reasons(), Not(Contains("PodDiffersFromTemplate")));

  // Observed and rolled out, with the pod still of the old template: now
  // it is judged.
  rollout_done(world, "shop/web");
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_THAT(differs_note(), HasSubstr("none on the pod"));
}

// Scaled to 0, the pod kept may be of an older template: not judged.
TEST_F(PodDiffersFromTemplate, NotAtZeroReplicas) {
  json d = deployment("web");
  d["spec"]["replicas"] = 0;
  json capped = pod_of(tuned(d));
  capped["spec"]["terminationGracePeriodSeconds"] = 10;
  offer(capped);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_THAT(world.events.reasons(), Not(Contains("PodDiffersFromTemplate")));
}

}  // namespace
}  // namespace gracekeeper::controller::testing
