// The informers' projections: only opted-in Deployments are cached, and what
// the engine cannot read is kept as errors instead of being guessed.
#include "gracekeeper/deployment/cache.h"  // the projections

#include <gtest/gtest.h>

#include <set>

#include "gracekeeper/budget/deployment.h"

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
  auto projected = d->project();
  ASSERT_TRUE(projected);
  EXPECT_EQ(projected->name, "web");
  EXPECT_EQ(projected->containers.size(), 1u);
}

TEST(Cache, KeepsOnlyGracekeepersAnnotations) {
  auto d = project_deployment(
      deployment({{"gracekeeper.dev/enabled", "true"},
                  {"gracekeeper.dev/drain-seconds", "20"},
                  {"kubectl.kubernetes.io/last-applied-configuration", std::string(10000, 'x')}}));
  ASSERT_TRUE(d);
  EXPECT_LT(d->source.size(), 200u);
  auto projected = d->project();
  ASSERT_TRUE(projected);
  EXPECT_EQ(projected->annotations.size(), 2u);
  EXPECT_EQ(projected->annotations.at("gracekeeper.dev/drain-seconds"), "20");
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

// A Deployment with every field the budget engine reads, and many it does not.
nlohmann::json rich_deployment() {
  return nlohmann::json::parse(R"({
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {
      "name": "web", "namespace": "shop", "uid": "u-1", "generation": 3, "resourceVersion": "77",
      "labels": {"app.kubernetes.io/name": "web", "tier": "", "team": "payments"},
      "annotations": {
        "gracekeeper.dev/enabled": "true", "gracekeeper.dev/drain-seconds": "20",
        "gracekeeper.dev/containers": "app,proxy", "gracekeeper.dev/policy": "default",
        "gracekeeper.dev/applied": "{\"policy\":\"default\",\"preStop\":9,\"grace\":45,\"graceOwned\":true,\"propagation\":3.5,\"containers\":[\"app\"],\"time\":\"2026-11-30T14:05:00Z\"}",
        "kubectl.kubernetes.io/last-applied-configuration": "{}"},
      "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update",
                         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
    "spec": {
      "replicas": 3, "revisionHistoryLimit": 5,
      "selector": {"matchLabels": {"app.kubernetes.io/name": "web"}},
      "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "10%"}},
      "template": {
        "metadata": {"labels": {"app.kubernetes.io/name": "web"},
                     "annotations": {"proxy.istio.io/config": "terminationDrainDuration: 30s",
                                     "config.alpha.linkerd.io/proxy-wait-before-exit-seconds": "12",
                                     "sidecar.istio.io/inject": "true"}},
        "spec": {
          "terminationGracePeriodSeconds": 45, "serviceAccountName": "web",
          "initContainers": [
            {"name": "migrate", "image": "migrate:1", "command": ["/migrate"]},
            {"name": "mesh", "image": "mesh:1", "restartPolicy": "Always",
             "ports": [{"containerPort": 15001}], "env": [{"name": "X", "value": "y"}],
             "lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}],
          "containers": [
            {"name": "app", "image": "app:1", "command": ["/app"], "args": ["--port=8080"],
             "ports": [{"name": "http", "containerPort": 8080}],
             "env": [{"name": "A", "value": "b"}],
             "resources": {"requests": {"cpu": "100m"}},
             "lifecycle": {"preStop": {"sleep": {"seconds": 9}}},
             "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 5},
             "livenessProbe": {"tcpSocket": {"port": 8080}}},
            {"name": "proxy", "image": "proxy:2",
             "ports": [{"containerPort": 15001}],
             "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "sleep 3"]}}},
             "readinessProbe": {"exec": {"command": ["cat", "/ready"]}},
             "livenessProbe": {"grpc": {"port": 9090, "service": "health"}}},
            {"name": "worker", "image": "worker:3",
             "lifecycle": {"preStop": {"httpGet": {"path": "/stop", "port": 8081}}}},
            {"name": "istio-proxy", "image": "proxyv2:1", "ports": [{"containerPort": 15090}],
             "env": [{"name": "PROXY_CONFIG", "value": "{\"terminationDrainDuration\":\"20s\"}"},
                     {"name": "EXIT_ON_ZERO_ACTIVE_CONNECTIONS", "value": "true"},
                     {"name": "MINIMUM_DRAIN_DURATION", "value": "9s"},
                     {"name": "ISTIO_META_CLUSTER_ID", "value": "Kubernetes"}]}]}}},
    "status": {"replicas": 3, "readyReplicas": 3}
  })");
}

// What the cache cannot change: annotations other than gracekeeper's are not kept.
budget::Deployment comparable(budget::Deployment d) {
  std::erase_if(d.annotations,
                [](const auto& a) { return !a.first.starts_with("gracekeeper.dev/"); });
  return d;
}

void expect_same_projection(const nlohmann::json& object, const std::string& what) {
  SCOPED_TRACE(what);
  const auto whole = budget::project_deployment(budget::Json(object));
  const auto kept = budget::project_deployment(budget::Json(budget_fields(object)));
  budget::FieldErrors errors = whole ? budget::FieldErrors{} : whole.error();
  if (whole) {
    ASSERT_TRUE(kept) << kept.error().front().format();
    EXPECT_TRUE(comparable(*whole) == comparable(*kept));
  } else if (errors.empty()) {
    EXPECT_TRUE(kept) << kept.error().front().format();
  } else {
    ASSERT_FALSE(kept);
    EXPECT_EQ(errors, kept.error());
  }
}

// budget_fields must keep everything budget::project_deployment reads. Every
// field and every object of a rich Deployment is replaced in turn by values
// of other types (and removed): whatever the engine makes of it, it makes of
// the cached copy too. A field the engine reads that the cache dropped shows
// up here as a difference.
TEST(Cache, KeepsEveryFieldTheBudgetEngineReads) {
  const nlohmann::json rich = rich_deployment();
  expect_same_projection(rich, "as it is");
  ASSERT_TRUE(budget::project_deployment(budget::Json(rich)));
  // The native sidecar is kept, and read from the cache as one.
  const auto cached = project_deployment(rich)->project();
  ASSERT_TRUE(cached);
  EXPECT_TRUE(std::ranges::any_of(cached->containers,
                                  [](const auto& c) { return c.name == "mesh" && c.sidecar; }));

  std::set<std::string> paths;
  const nlohmann::json flat = rich.flatten();
  for (const auto& [leaf, value] : flat.items()) {
    for (auto p = nlohmann::json::json_pointer(leaf); !p.empty(); p = p.parent_pointer()) {
      paths.insert(p.to_string());
    }
  }
  const nlohmann::json others[] = {nullptr,
                                   7,
                                   -1,
                                   2.5,
                                   "x",
                                   "",
                                   true,
                                   nlohmann::json::array(),
                                   nlohmann::json::object(),
                                   nlohmann::json::array({1, "y"})};
  int cases = 0;
  for (const auto& path : paths) {
    const nlohmann::json::json_pointer p(path);
    for (const auto& value : others) {
      nlohmann::json object = rich;
      object[p] = value;
      expect_same_projection(object, path + " = " + value.dump());
      ++cases;
    }
    nlohmann::json object = rich;
    auto& parent = object[p.parent_pointer()];
    if (parent.is_array()) {
      parent.erase(std::stoul(p.back()));
    } else {
      parent.erase(p.back());
    }
    expect_same_projection(object, path + " removed");
    ++cases;
  }
  EXPECT_GT(cases, 500);
}

TEST(Cache, KeepsLittleOfABigDeployment) {
  nlohmann::json object = rich_deployment();
  object["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
      std::string(10000, 'x');
  auto d = project_deployment(object);
  ASSERT_TRUE(d);
  EXPECT_LT(d->source.size(), object.dump().size() / 4) << "kept more than it reads";
  auto projected = d->project();
  ASSERT_TRUE(projected);
  EXPECT_EQ(projected->labels.at("team"), "payments");
  EXPECT_EQ(projected->containers.size(), 5u);  // four containers and the native sidecar
  // Of the environment, only istio-proxy's shutdown variables.
  EXPECT_EQ(projected->containers[3].proxy_env.size(), 3u);
  EXPECT_EQ(projected->pod_annotations.size(), 2u);  // the meshes' only
  const std::string kept = d->object().dump();
  EXPECT_EQ(kept.find("ISTIO_META_CLUSTER_ID"), std::string::npos) << kept;
  EXPECT_EQ(kept.find("sidecar.istio.io/inject"), std::string::npos) << kept;
  EXPECT_EQ(kept.find("\"A\""), std::string::npos) << kept;  // the app's env
  ASSERT_TRUE(projected->applied);
  EXPECT_EQ(projected->applied->grace_seconds, 45);
}

// The cache packs, deflates and inflates through buffers reused from one
// Deployment to the next: a large one, then a small one, then the large one
// again each read back to exactly their own fields (nothing of the other
// left behind), and the buffer a large one grew is given back (over 64 KiB).
TEST(Cache, SourcesReadBackWholeWhateverCameBefore) {
  nlohmann::json large = rich_deployment();
  large["spec"]["template"]["spec"]["containers"][0]["args"] =
      nlohmann::json::array({std::string(200000, 'a'), "--port=8080"});
  const nlohmann::json small = deployment({{"gracekeeper.dev/enabled", "true"}});
  const nlohmann::json* order[] = {&large, &small, &large, &small};
  for (const nlohmann::json* object : order) {
    const auto cached = project_deployment(*object);
    ASSERT_TRUE(cached);
    EXPECT_EQ(nlohmann::json(cached->object()), budget_fields(*object));
  }
  const auto a = project_deployment(large);
  const auto b = project_deployment(small);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(nlohmann::json(b->object()), budget_fields(small));
  EXPECT_EQ(nlohmann::json(a->object()), budget_fields(large));
}

TEST(Cache, UnreadableDeploymentKeepsItsErrors) {
  auto object = deployment({{"gracekeeper.dev/enabled", "true"}});
  object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "abc";
  auto d = project_deployment(object);
  ASSERT_TRUE(d);
  auto projected = d->project();
  ASSERT_FALSE(projected);
  EXPECT_EQ(projected.error().front().path, "spec.template.spec.terminationGracePeriodSeconds");
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
