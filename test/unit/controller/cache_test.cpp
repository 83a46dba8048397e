// The informers' projections: only opted-in Deployments are cached, and what
// the engine cannot read is kept as errors instead of being guessed.
#include "../../../src/controller/cache.h"  // private: the projections

#include <gtest/gtest.h>

namespace gracekeeper::controller {
namespace {

nlohmann::json deployment(nlohmann::json annotations) {
  return {{"apiVersion", "apps/v1"},
          {"kind", "Deployment"},
          {"metadata",
           {{"name", "web"},
            {"namespace", "shop"},
            {"uid", "u-1"},
            {"generation", 4},
            {"annotations", std::move(annotations)}}},
          {"spec",
           {{"template", {{"spec", {{"containers", {{{"name", "app"}, {"image", "app:1"}}}}}}}}}}};
}

TEST(Cache, OnlyOptedInDeploymentsAreCached) {
  EXPECT_FALSE(project_deployment(deployment(nlohmann::json::object())));
  EXPECT_FALSE(project_deployment(deployment({{"gracekeeper.dev/enabled", "false"}})));
  EXPECT_FALSE(project_deployment(deployment({{"gracekeeper.dev/enabled", true}})));
  EXPECT_FALSE(project_deployment(nlohmann::json::array()));
  auto d = project_deployment(deployment({{"gracekeeper.dev/enabled", "true"}}));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->uid, "u-1");
  EXPECT_EQ(d->generation, 4);
  ASSERT_TRUE(d->deployment);
  EXPECT_EQ(d->deployment->name, "web");
  EXPECT_EQ(d->deployment->containers.size(), 1u);
}

TEST(Cache, KeepsOnlyGracekeepersAnnotations) {
  auto d = project_deployment(
      deployment({{"gracekeeper.dev/enabled", "true"},
                  {"gracekeeper.dev/drain-seconds", "20"},
                  {"kubectl.kubernetes.io/last-applied-configuration", std::string(10000, 'x')}}));
  ASSERT_TRUE(d && d->deployment);
  EXPECT_EQ(d->deployment->annotations.size(), 2u);
  EXPECT_EQ(d->deployment->annotations.at("gracekeeper.dev/drain-seconds"), "20");
}

TEST(Cache, KeepsTheOtherAppliersOnly) {
  auto object = deployment({{"gracekeeper.dev/enabled", "true"}});
  object["metadata"]["managedFields"] = {
      {{"manager", "kubectl-create"}, {"operation", "Update"}},
      {{"manager", "gracekeeper"}, {"operation", "Apply"}},
      {{"manager", "flux"}, {"operation", "Apply"}},
      {{"manager", "argocd-controller"}, {"operation", "Apply"}},
      {{"manager", "flux"}, {"operation", "Apply"}, {"subresource", "scale"}},
      {{"operation", "Apply"}},
      {{"manager", 7}, {"operation", "Apply"}},
      "not an entry"};
  auto d = project_deployment(object);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->appliers, (std::vector<std::string>{"argocd-controller", "flux"}));

  object["metadata"]["managedFields"] = {{{"manager", "kubectl-create"}, {"operation", "Update"}}};
  EXPECT_TRUE(project_deployment(object)->appliers.empty());
  object["metadata"]["managedFields"] = "garbage";
  EXPECT_TRUE(project_deployment(object)->appliers.empty());
}

TEST(Cache, LabelsArePackedAndUnpackedWhole) {
  auto object = deployment({{"gracekeeper.dev/enabled", "true"}});
  object["metadata"]["labels"] = {{"app.kubernetes.io/name", "web"},
                                  {"tier", ""},
                                  {"team", std::string(300, 't')},
                                  {"example.com/unicode", "\u00e9t\u00e9"}};
  auto d = project_deployment(object);
  ASSERT_TRUE(d && d->deployment);
  EXPECT_TRUE(d->deployment->labels.empty()) << "kept twice";
  const std::map<std::string, std::string> want{{"app.kubernetes.io/name", "web"},
                                                {"tier", ""},
                                                {"team", std::string(300, 't')},
                                                {"example.com/unicode", "\u00e9t\u00e9"}};
  EXPECT_EQ(unpack_labels(d->labels), want);
  EXPECT_TRUE(unpack_labels(pack_labels({})).empty());
  // A truncated packing yields the whole pairs before the cut, never garbage.
  const std::string packed = pack_labels({{"a", "1"}, {"b", "2"}});
  EXPECT_EQ(unpack_labels(std::string_view(packed).substr(0, packed.size() - 1)),
            (std::map<std::string, std::string>{{"a", "1"}}));
}

TEST(Cache, UnreadableDeploymentKeepsItsErrors) {
  auto object = deployment({{"gracekeeper.dev/enabled", "true"}});
  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "abc";
  auto d = project_deployment(object);
  ASSERT_TRUE(d);
  ASSERT_FALSE(d->deployment);
  EXPECT_EQ(d->deployment.error().front().path, "spec.template.spec.terminationGracePeriodSeconds");
}

TEST(Cache, PolicyKeepsStatusAndVersion) {
  nlohmann::json object{
      {"apiVersion", "gracekeeper.dev/v1alpha1"},
      {"kind", "ShutdownPolicy"},
      {"metadata",
       {{"name", "default"}, {"namespace", "shop"}, {"resourceVersion", "42"}, {"generation", 2}}},
      {"spec", {{"drainSeconds", 20}}},
      {"status", {{"observedGeneration", 1}}}};
  auto p = project_policy(object);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->resource_version, "42");
  EXPECT_EQ(p->generation, 2);
  ASSERT_TRUE(p->spec);
  EXPECT_EQ(p->spec->drain_seconds, 20);
  EXPECT_EQ(p->status["observedGeneration"], 1);
}

TEST(Cache, InvalidPolicySpecIsKeptAsErrors) {
  nlohmann::json object{{"metadata", {{"name", "p"}, {"namespace", "shop"}}},
                        {"spec", {{"preStop", {{"minSeconds", 30}, {"maxSeconds", 20}}}}}};
  auto p = project_policy(object);
  ASSERT_TRUE(p);
  ASSERT_FALSE(p->spec);
  EXPECT_NE(p->spec.error().front().format().find("minSeconds"), std::string::npos);
}

}  // namespace
}  // namespace gracekeeper::controller
