#include "gracekeeper/budget/mesh.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gracekeeper/budget/apply.h"
#include "gracekeeper/budget/deployment.h"
#include "gracekeeper/budget/engine.h"

namespace gracekeeper::budget {
namespace {

// A served Deployment whose pods wait 6 s (propagation 4 s, safety 1.5) and
// drain 10 s: a proxy beside the app must serve 16 s after the deletion.
Json meshed(const char* kind, Json proxy, Json annotations = Json::object()) {
  Json object = Json::parse(R"({
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "checkout", "namespace": "shop",
                 "annotations": {"gracekeeper.dev/enabled": "true",
                                 "gracekeeper.dev/drain-seconds": "10"}},
    "spec": {"replicas": 3,
      "template": {"metadata": {"labels": {"app": "checkout"}},
        "spec": {"terminationGracePeriodSeconds": 60,
          "containers": [{"name": "checkout", "ports": [{"containerPort": 8080}],
                          "lifecycle": {"preStop": {"sleep": {"seconds": 6}}}}]}}}})");
  if (std::string(kind) == "Pod") {
    Json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", object["metadata"]},
                {"spec", object["spec"]["template"]["spec"]}};
    pod["metadata"]["name"] = "checkout-7d9f-abcde";
    for (const auto& [k, v] : annotations.items()) pod["metadata"]["annotations"][k] = v;
    pod["spec"]["containers"].push_back(std::move(proxy));
    return pod;
  }
  object["spec"]["template"]["metadata"]["annotations"] = std::move(annotations);
  object["spec"]["template"]["spec"]["containers"].push_back(std::move(proxy));
  return object;
}

Json istio_proxy(Json env = Json::array()) {
  return Json{{"name", "istio-proxy"},
              {"ports", Json::array({Json{{"containerPort", 15090}}})},
              {"env", std::move(env)}};
}

// The default policy, propagation 4 s: a wait of 6 s.
Context context(const Deployment* pod = nullptr) {
  static const PolicySpec policy;
  Context ctx;
  ctx.policy = &policy;
  ctx.propagation_seconds = 4;
  ctx.pod = pod;
  return ctx;
}

Deployment project(const Json& object) {
  auto d = project_deployment(object);
  EXPECT_TRUE(d.has_value()) << (d ? "" : d.error().front().format());
  return d ? *d : Deployment{};
}

std::vector<Finding> findings_on(const Json& object) {
  return check(project(object), context());
}

Plan plan_of(const Json& object, const Deployment* pod = nullptr) {
  return plan(project(object), context(pod));
}

const Finding* find(const std::vector<Finding>& findings, std::string_view code) {
  for (const auto& f : findings)
    if (f.code == code) return &f;
  return nullptr;
}

TEST(ParseDuration, ReadsGoDurations) {
  EXPECT_EQ(parse_duration_ms("5s"), 5000);
  EXPECT_EQ(parse_duration_ms("1m30s"), 90000);
  EXPECT_EQ(parse_duration_ms("1.5s"), 1500);
  EXPECT_EQ(parse_duration_ms("500ms"), 500);
  EXPECT_EQ(parse_duration_ms("0"), 0);
  EXPECT_EQ(parse_duration_ms("48h"), 86'400'000);  // capped at a day
  for (const char* bad : {"", "5", "-5s", "abc", "5 s", "s", "1.2.3s", "5d"}) {
    EXPECT_EQ(parse_duration_ms(bad), std::nullopt) << bad;
  }
}

TEST(MeshProxy, IsNoAppContainerAndGetsNoWait) {
  const Plan p = plan_of(meshed("Deployment", istio_proxy()));
  for (const auto& cp : p.containers) EXPECT_NE(cp.name, "istio-proxy");
  for (const auto& f : p.findings) {
    EXPECT_NE(f.code, "NoPreStopWait") << f.message;
    EXPECT_NE(f.code, "ContainerWithoutWait") << f.message;
  }
}

TEST(MeshProxy, IstioDefaultDrainExitsBeforeTheApp) {
  const auto findings = findings_on(meshed("Pod", istio_proxy()));
  const Finding* f = find(findings, "ProxyExitsEarly");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::Error);
  EXPECT_EQ(f->container, "istio-proxy");
  EXPECT_NE(f->message.find("terminationDrainDuration 5s (Istio's default)"), std::string::npos)
      << f->message;
  EXPECT_NE(f->message.find("app waits 6s and drains 10s"), std::string::npos) << f->message;
  EXPECT_NE(f->message.find(R"("terminationDrainDuration":"16s")"), std::string::npos)
      << f->message;
  EXPECT_NE(f->message.find(R"("MINIMUM_DRAIN_DURATION":"6s")"), std::string::npos) << f->message;
}

TEST(MeshProxy, TheAdviceHolds) {
  // The annotation the finding gives, set on the pod: nothing to report.
  const std::string advice = proxy_advice(Mesh::Istio, 6, 16);
  const std::string prefix = std::string(kIstioProxyConfig) + ": '";
  ASSERT_EQ(advice.rfind(prefix, 0), 0u) << advice;
  const std::string value = advice.substr(prefix.size(), advice.size() - prefix.size() - 1);
  const auto findings = findings_on(meshed("Pod", istio_proxy(), Json{{kIstioProxyConfig, value}}));
  EXPECT_EQ(find(findings, "ProxyExitsEarly"), nullptr);
  EXPECT_EQ(find(findings, "ProxyConfigUnreadable"), nullptr);
}

TEST(MeshProxy, TheInjectedEnvironmentIsWhatRuns) {
  // PROXY_CONFIG, as the injector rendered it, over the annotation.
  const Json env = Json::array(
      {Json{{"name", "PROXY_CONFIG"}, {"value", R"({"terminationDrainDuration":"20s"})"}},
       Json{{"name", "ISTIO_META_CLUSTER_ID"}, {"value", "Kubernetes"}}});
  const Json pod =
      meshed("Pod", istio_proxy(env), Json{{kIstioProxyConfig, "terminationDrainDuration: 3s"}});
  EXPECT_EQ(find(findings_on(pod), "ProxyExitsEarly"), nullptr);
  auto d = project_deployment(pod);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->containers.back().proxy_env.size(), 1u);  // nothing else of the env is kept
}

TEST(MeshProxy, ExitOnZeroNeedsTheWaitAsItsMinimum) {
  // Exits at zero connections after MINIMUM_DRAIN_DURATION (5 s by
  // default): the endpoints may still route new ones to it for 6 s.
  const char* yaml =
      "terminationDrainDuration: 60s\nproxyMetadata:\n  EXIT_ON_ZERO_ACTIVE_CONNECTIONS: "
      "\"true\"\n";
  const Finding* f = nullptr;
  auto findings = findings_on(meshed("Pod", istio_proxy(), Json{{kIstioProxyConfig, yaml}}));
  f = find(findings, "ProxyExitsEarly");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->message.find("MINIMUM_DRAIN_DURATION 5s (Istio's default)"), std::string::npos)
      << f->message;
  const Json env = Json::array({Json{{"name", "MINIMUM_DRAIN_DURATION"}, {"value", "6s"}}});
  findings = findings_on(meshed("Pod", istio_proxy(env), Json{{kIstioProxyConfig, yaml}}));
  EXPECT_EQ(find(findings, "ProxyExitsEarly"), nullptr);
}

TEST(MeshProxy, AnUnreadableConfigIsReportedByName) {
  const auto findings = findings_on(
      meshed("Pod", istio_proxy(), Json{{kIstioProxyConfig, "terminationDrainDuration: soon"}}));
  const Finding* f = find(findings, "ProxyConfigUnreadable");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::Warning);
  EXPECT_NE(f->message.find("terminationDrainDuration: expected a duration"), std::string::npos)
      << f->message;
  EXPECT_NE(f->message.find(kIstioProxyConfig), std::string::npos) << f->message;
}

TEST(MeshProxy, LinkerdWaitsWithItsHookOrTheAnnotation) {
  const Json bare = {{"name", "linkerd-proxy"},
                     {"ports", Json::array({{{"containerPort", 4143}}})}};
  const auto findings = findings_on(meshed("Pod", bare));
  const Finding* f = find(findings, "ProxyExitsEarly");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->message.find(std::string(kLinkerdWaitBeforeExit) + ": \"16\""), std::string::npos)
      << f->message;

  Json hooked = bare;  // as the injector writes the annotation onto the pod
  hooked["lifecycle"]["preStop"]["exec"]["command"] = Json::array({"/bin/sleep", "16"});
  EXPECT_EQ(find(findings_on(meshed("Pod", hooked)), "ProxyExitsEarly"), nullptr);

  // On a template, manually injected, the annotation is what its pods get.
  EXPECT_EQ(find(findings_on(meshed("Deployment", bare, Json{{kLinkerdWaitBeforeExit, "16"}})),
                 "ProxyExitsEarly"),
            nullptr);
  EXPECT_NE(find(findings_on(meshed("Deployment", bare, Json{{kLinkerdWaitBeforeExit, "ten"}})),
                 "ProxyConfigUnreadable"),
            nullptr);
}

TEST(MeshProxy, ANativeSidecarProxyDrainsAfterTheApp) {
  Json proxy = istio_proxy(Json::array(
      {Json{{"name", "PROXY_CONFIG"}, {"value", R"({"terminationDrainDuration":"20s"})"}}}));
  proxy["restartPolicy"] = "Always";
  Json pod = meshed("Pod", proxy);
  pod["spec"]["containers"].erase(1);
  pod["spec"]["initContainers"] = Json::array({proxy});
  pod["spec"]["terminationGracePeriodSeconds"] = 40;
  const Plan p = plan_of(pod);
  EXPECT_EQ(p.budget.sidecar_drain_seconds, 20);
  // wait 6 + drain 10 + the proxy's 20 s after the app + reserve 10 > 40.
  EXPECT_EQ(p.budget.grace_seconds, 6 + 10 + 20 + 10);
  const Finding* f = find(p.findings, "BudgetExceeded");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->message.find("sidecars 20s"), std::string::npos) << f->message;
  EXPECT_EQ(find(p.findings, "ProxyExitsEarly"), nullptr);  // stopped after the app
}

TEST(MeshProxy, IsNotAContainerForTheWait) {
  Json object = meshed("Deployment", istio_proxy());
  object["metadata"]["annotations"]["gracekeeper.dev/containers"] = "checkout,istio-proxy";
  const Plan p = plan_of(object);
  ASSERT_EQ(p.invalid.size(), 1u);
  EXPECT_NE(p.invalid.front().message.find("\"istio-proxy\" is a mesh proxy"), std::string::npos)
      << p.invalid.front().message;
}

TEST(MeshHandOver, AnInjectedProxyGetsItsBudgetOnTheTemplate) {
  // The template has no proxy; its running pod has one, injected, on
  // Istio's default 5 s drain: the template gets the annotation.
  Json object = meshed("Deployment", Json{{"name", "worker"}});
  object["spec"]["template"]["spec"]["containers"].erase(1);
  auto pod = project_deployment(meshed("Pod", istio_proxy()));
  ASSERT_TRUE(pod.has_value());
  const Plan p = plan_of(object, &*pod);
  ASSERT_EQ(p.pod_annotations.size(), 1u);
  const Json config = Json::parse(p.pod_annotations.at(kIstioProxyConfig));
  EXPECT_EQ(config["terminationDrainDuration"], "16s");
  EXPECT_EQ(config["proxyMetadata"]["EXIT_ON_ZERO_ACTIVE_CONNECTIONS"], "true");
  EXPECT_EQ(config["proxyMetadata"]["MINIMUM_DRAIN_DURATION"], "6s");
  EXPECT_TRUE(p.budget_broken);  // a repair: churn control never holds it back
  bool listed = false;
  for (const auto& c : p.changes) listed |= c.field == "annotations[proxy.istio.io/config]";
  EXPECT_TRUE(listed);

  // Written, the template's next pods hold: planned again, nothing changes,
  // and the annotation is stated again as gracekeeper's.
  Json written = object;
  apply_plan(written, p, "default", std::chrono::system_clock::time_point{});
  const Plan again = plan_of(written, &*pod);
  EXPECT_FALSE(again.changed()) << again.changes.front().field;
  EXPECT_EQ(again.pod_annotations, p.pod_annotations);
  // Offline (no pod), the record alone keeps it stated.
  EXPECT_EQ(plan_of(written).pod_annotations, p.pod_annotations);
}

TEST(MeshHandOver, TheUsersSettingsAreKeptAndNeverLowered) {
  // The user's annotation: a longer drain than needed, another field, and
  // exit-on-zero off. Only what falls short changes: nothing here.
  const char* yaml = "terminationDrainDuration: 90s\nholdApplicationUntilProxyStarts: true\n";
  Json object = meshed("Deployment", istio_proxy(), Json{{kIstioProxyConfig, yaml}});
  EXPECT_TRUE(plan_of(object).pod_annotations.empty());
  // Off in the annotation itself, and short: only the drain is raised.
  const char* off =
      "terminationDrainDuration: 3s\nproxyMetadata:\n  EXIT_ON_ZERO_ACTIVE_CONNECTIONS: "
      "\"false\"\n";
  object = meshed("Deployment", istio_proxy(), Json{{kIstioProxyConfig, off}});
  const Plan p = plan_of(object);
  ASSERT_EQ(p.pod_annotations.size(), 1u);
  EXPECT_EQ(Json::parse(p.pod_annotations.at(kIstioProxyConfig)),
            Json::parse(R"({"terminationDrainDuration":"16s",
                            "proxyMetadata":{"EXIT_ON_ZERO_ACTIVE_CONNECTIONS":"false"}})"));
  // The user's value is recorded, for revert.
  ASSERT_TRUE(p.user.has_value());
  EXPECT_EQ(p.user->annotations.at(kIstioProxyConfig), std::optional<std::string>(off));
}

TEST(MeshHandOver, LinkerdGetsItsWaitBeforeExit) {
  const Json bare = {{"name", "linkerd-proxy"}};
  Json object = meshed("Deployment", bare, Json{{kLinkerdWaitBeforeExit, "4"}});
  const Plan p = plan_of(object);
  EXPECT_EQ(p.pod_annotations.at(kLinkerdWaitBeforeExit), "16");
  // A longer wait of the user's holds: kept.
  object = meshed("Deployment", bare, Json{{kLinkerdWaitBeforeExit, "40"}});
  EXPECT_TRUE(plan_of(object).pod_annotations.empty());
}

TEST(MeshHandOver, AnAnnotationTheUserChangedIsTheirs) {
  Json object = meshed("Deployment", Json{{"name", "linkerd-proxy"}});
  const Plan p = plan_of(object);
  Json written = object;
  apply_plan(written, p, "default", std::chrono::system_clock::time_point{});
  // The user sets 30: longer, it holds; gracekeeper no longer states it.
  written["spec"]["template"]["metadata"]["annotations"][kLinkerdWaitBeforeExit] = "30";
  const Plan after = plan_of(written);
  EXPECT_FALSE(after.changed());
  EXPECT_TRUE(after.pod_annotations.empty());
  // Removed while the pod still runs the proxy: written back.
  written["spec"]["template"]["metadata"]["annotations"].erase(kLinkerdWaitBeforeExit);
  auto pod = project_deployment(meshed("Pod", Json{{"name", "linkerd-proxy"}}));
  ASSERT_TRUE(pod.has_value());
  EXPECT_EQ(plan_of(written, &*pod).pod_annotations.at(kLinkerdWaitBeforeExit), "16");
}

}  // namespace
}  // namespace gracekeeper::budget
