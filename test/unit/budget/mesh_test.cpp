#include "gracekeeper/budget/mesh.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

std::vector<Finding> findings_on(const Json& object) {
  auto d = project_deployment(object);
  EXPECT_TRUE(d.has_value()) << (d ? "" : d.error().front().format());
  if (!d) return {};
  static const PolicySpec policy;
  Context ctx;
  ctx.policy = &policy;
  ctx.propagation_seconds = 4;
  return check(*d, ctx);
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
  auto d = project_deployment(meshed("Deployment", istio_proxy()));
  ASSERT_TRUE(d.has_value());
  static const PolicySpec policy;
  Context ctx;
  ctx.policy = &policy;
  ctx.propagation_seconds = 4;
  const Plan p = plan(*d, ctx);
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
  const Finding* f = find(findings_on(meshed("Pod", bare)), "ProxyExitsEarly");
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
  auto d = project_deployment(pod);
  ASSERT_TRUE(d.has_value());
  static const PolicySpec policy;
  Context ctx;
  ctx.policy = &policy;
  ctx.propagation_seconds = 4;
  const Plan p = plan(*d, ctx);
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
  auto d = project_deployment(object);
  ASSERT_TRUE(d.has_value());
  static const PolicySpec policy;
  Context ctx;
  ctx.policy = &policy;
  ctx.propagation_seconds = 4;
  const Plan p = plan(*d, ctx);
  ASSERT_EQ(p.invalid.size(), 1u);
  EXPECT_NE(p.invalid.front().message.find("\"istio-proxy\" is a mesh proxy"), std::string::npos)
      << p.invalid.front().message;
}

}  // namespace
}  // namespace gracekeeper::budget
