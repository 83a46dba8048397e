#include "gracekeeper/metrics/metrics.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "gracekeeper/kube/informer.h"

namespace gracekeeper::metrics {
namespace {

// The value of the sample whose name and labels are exactly `series`
// (labels in the order the serializer writes them: sorted by name).
std::optional<double> sample(const std::string& text, std::string_view series) {
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) {
    if (line.size() > series.size() && line.starts_with(series) && line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return std::nullopt;
}

bool mentions(const std::string& text, std::string_view what) {
  return text.find(what) != std::string::npos;
}

TEST(Metrics, BuildInfoLeaderAndReconcileBaselineFromTheStart) {
  Metrics metrics{"1.2.3"};
  const auto text = metrics.serialize();
  EXPECT_EQ(sample(text, R"(gracekeeper_build_info{version="1.2.3"})"), 1);
  EXPECT_TRUE(mentions(text, "# TYPE gracekeeper_build_info gauge"));
  EXPECT_EQ(sample(text, "gracekeeper_leader"), 0);
  EXPECT_EQ(
      sample(text, R"(gracekeeper_reconcile_total{controller="shutdownpolicy",result="requeue"})"),
      0);
  EXPECT_EQ(sample(text, R"(gracekeeper_build_info{version="unknown"})"), std::nullopt);
  EXPECT_EQ(sample(Metrics{}.serialize(), R"(gracekeeper_build_info{version="unknown"})"), 1);
}

TEST(Metrics, ReconcileCountsAndDurations) {
  Metrics metrics;
  metrics.observe_reconcile("deployment", "success", 0.02);
  metrics.observe_reconcile("deployment", "success", 0.02);
  metrics.observe_reconcile("deployment", "error", 3);
  const auto text = metrics.serialize();
  EXPECT_TRUE(mentions(text, "# TYPE gracekeeper_reconcile_total counter"));
  EXPECT_TRUE(mentions(text, "# TYPE gracekeeper_reconcile_duration_seconds histogram"));
  EXPECT_EQ(
      sample(text, R"(gracekeeper_reconcile_total{controller="deployment",result="success"})"), 2);
  EXPECT_EQ(sample(text, R"(gracekeeper_reconcile_total{controller="deployment",result="error"})"),
            1);
  EXPECT_EQ(
      sample(
          text,
          R"(gracekeeper_reconcile_duration_seconds_count{controller="deployment",result="success"})"),
      2);
  EXPECT_DOUBLE_EQ(
      *sample(
          text,
          R"(gracekeeper_reconcile_duration_seconds_sum{controller="deployment",result="success"})"),
      0.04);
  EXPECT_EQ(
      sample(
          text,
          R"(gracekeeper_reconcile_duration_seconds_bucket{controller="deployment",result="success",le="0.01"})"),
      0);
  EXPECT_EQ(
      sample(
          text,
          R"(gracekeeper_reconcile_duration_seconds_bucket{controller="deployment",result="success",le="0.025"})"),
      2);
  EXPECT_EQ(
      sample(
          text,
          R"(gracekeeper_reconcile_duration_seconds_bucket{controller="deployment",result="error",le="2.5"})"),
      0);
  EXPECT_EQ(
      sample(
          text,
          R"(gracekeeper_reconcile_duration_seconds_bucket{controller="deployment",result="error",le="+Inf"})"),
      1);
}

TEST(Metrics, DeploymentGaugesFollowTheLastCall) {
  Metrics metrics;
  metrics.set_deployments("shop", "web", 5, 3, 1);
  metrics.set_deployments("shop", "web", 6, 6, 0);
  metrics.set_deployments("ops", "batch", 2, 1, 1);
  const auto text = metrics.serialize();
  for (auto type : {"managed", "compliant", "violating"}) {
    EXPECT_TRUE(mentions(text, std::string{"# TYPE gracekeeper_deployments_"} + type + " gauge"));
  }
  EXPECT_EQ(sample(text, R"(gracekeeper_deployments_managed{namespace="shop",policy="web"})"), 6);
  EXPECT_EQ(sample(text, R"(gracekeeper_deployments_compliant{namespace="shop",policy="web"})"), 6);
  EXPECT_EQ(sample(text, R"(gracekeeper_deployments_violating{namespace="shop",policy="web"})"), 0);
  EXPECT_EQ(sample(text, R"(gracekeeper_deployments_managed{namespace="ops",policy="batch"})"), 2);
  EXPECT_EQ(sample(text, R"(gracekeeper_deployments_violating{namespace="ops",policy="batch"})"),
            1);
}

TEST(Metrics, PropagationKeepsOneSourcePerPolicy) {
  Metrics metrics;
  metrics.set_propagation("shop", "web", "static", 5);
  metrics.set_propagation("shop", "api", "static", 4);
  metrics.set_propagation("shop", "web", "prometheus", 7.5);
  metrics.set_propagation("shop", "web", "prometheus", 8.25);
  const auto text = metrics.serialize();
  EXPECT_TRUE(mentions(text, "# TYPE gracekeeper_propagation_seconds gauge"));
  EXPECT_EQ(
      sample(text,
             R"(gracekeeper_propagation_seconds{namespace="shop",policy="web",source="static"})"),
      std::nullopt);
  EXPECT_EQ(
      sample(
          text,
          R"(gracekeeper_propagation_seconds{namespace="shop",policy="web",source="prometheus"})"),
      8.25);
  EXPECT_EQ(
      sample(text,
             R"(gracekeeper_propagation_seconds{namespace="shop",policy="api",source="static"})"),
      4);
}

TEST(Metrics, ForgetPolicyRemovesOnlyItsSeries) {
  Metrics metrics;
  metrics.set_deployments("shop", "web", 5, 3, 1);
  metrics.set_propagation("shop", "web", "observed", 2);
  metrics.set_deployments("shop", "api", 1, 1, 0);
  metrics.set_propagation("shop", "api", "static", 4);
  metrics.forget_policy("shop", "web");
  metrics.forget_policy("shop", "never-seen");
  auto text = metrics.serialize();
  EXPECT_FALSE(mentions(text, R"(policy="web")"));
  EXPECT_EQ(sample(text, R"(gracekeeper_deployments_managed{namespace="shop",policy="api"})"), 1);
  EXPECT_EQ(
      sample(text,
             R"(gracekeeper_propagation_seconds{namespace="shop",policy="api",source="static"})"),
      4);

  // A policy of the same name created again starts afresh.
  metrics.set_propagation("shop", "web", "static", 9);
  text = metrics.serialize();
  EXPECT_EQ(
      sample(text,
             R"(gracekeeper_propagation_seconds{namespace="shop",policy="web",source="static"})"),
      9);
  EXPECT_FALSE(mentions(text, R"(source="observed")"));
}

TEST(Metrics, PropagationAvailableFollowsTheSourceAndGoesWithThePolicy) {
  Metrics metrics;
  metrics.set_propagation_available("shop", "web", true);
  metrics.set_propagation_available("shop", "api", true);
  auto text = metrics.serialize();
  EXPECT_EQ(sample(text, R"(gracekeeper_propagation_available{namespace="shop",policy="web"})"), 1);
  metrics.set_propagation_available("shop", "web", false);  // a fallback
  text = metrics.serialize();
  EXPECT_EQ(sample(text, R"(gracekeeper_propagation_available{namespace="shop",policy="web"})"), 0);
  metrics.forget_policy("shop", "web");
  text = metrics.serialize();
  EXPECT_FALSE(
      mentions(text, R"(gracekeeper_propagation_available{namespace="shop",policy="web"})"));
  EXPECT_EQ(sample(text, R"(gracekeeper_propagation_available{namespace="shop",policy="api"})"), 1);
}

TEST(Metrics, PatchesAndEventsCount) {
  Metrics metrics;
  metrics.count_patch("shop");
  metrics.count_patch("shop");
  metrics.count_patch("ops");
  metrics.count_event("Normal", "Tuned");
  metrics.count_event("Warning", "FieldConflict");
  metrics.count_event("Warning", "FieldConflict");
  const auto text = metrics.serialize();
  EXPECT_TRUE(mentions(text, "# TYPE gracekeeper_patches_applied_total counter"));
  EXPECT_TRUE(mentions(text, "# TYPE gracekeeper_events_total counter"));
  EXPECT_EQ(sample(text, R"(gracekeeper_patches_applied_total{namespace="shop"})"), 2);
  EXPECT_EQ(sample(text, R"(gracekeeper_patches_applied_total{namespace="ops"})"), 1);
  EXPECT_EQ(sample(text, R"(gracekeeper_events_total{reason="Tuned",type="Normal"})"), 1);
  EXPECT_EQ(sample(text, R"(gracekeeper_events_total{reason="FieldConflict",type="Warning"})"), 2);
}

TEST(Metrics, InformerCountersAddOnlyTheDelta) {
  Metrics metrics;
  kube::InformerCounters c;
  c.watch_restarts = 3;
  c.relists = 1;
  c.events = 100;  // not exported
  metrics.update_informer("deployments", c);
  metrics.update_informer("deployments", c);  // nothing new
  auto text = metrics.serialize();
  EXPECT_TRUE(mentions(text, "# TYPE gracekeeper_watch_restarts_total counter"));
  EXPECT_TRUE(mentions(text, "# TYPE gracekeeper_relists_total counter"));
  EXPECT_EQ(sample(text, R"(gracekeeper_watch_restarts_total{resource="deployments"})"), 3);
  EXPECT_EQ(sample(text, R"(gracekeeper_relists_total{resource="deployments"})"), 1);

  c.watch_restarts = 5;
  metrics.update_informer("deployments", c);
  kube::InformerCounters policies;
  policies.relists = 2;
  metrics.update_informer("shutdownpolicies", policies);
  text = metrics.serialize();
  EXPECT_EQ(sample(text, R"(gracekeeper_watch_restarts_total{resource="deployments"})"), 5);
  EXPECT_EQ(sample(text, R"(gracekeeper_relists_total{resource="deployments"})"), 1);
  EXPECT_EQ(sample(text, R"(gracekeeper_relists_total{resource="shutdownpolicies"})"), 2);
  EXPECT_EQ(sample(text, R"(gracekeeper_watch_restarts_total{resource="shutdownpolicies"})"), 0);

  // A new informer for the same resource counts from 0 again: the counter
  // must not go down.
  kube::InformerCounters fresh;
  fresh.watch_restarts = 1;
  metrics.update_informer("deployments", fresh);
  text = metrics.serialize();
  EXPECT_EQ(sample(text, R"(gracekeeper_watch_restarts_total{resource="deployments"})"), 6);
  EXPECT_EQ(sample(text, R"(gracekeeper_relists_total{resource="deployments"})"), 1);
}

TEST(Metrics, QueueDepthAndLeader) {
  Metrics metrics;
  metrics.set_queue_depth("deployment", 12);
  metrics.set_queue_depth("shutdownpolicy", 0);
  metrics.set_leader(true);
  auto text = metrics.serialize();
  EXPECT_TRUE(mentions(text, "# TYPE gracekeeper_workqueue_depth gauge"));
  EXPECT_TRUE(mentions(text, "# TYPE gracekeeper_leader gauge"));
  EXPECT_EQ(sample(text, R"(gracekeeper_workqueue_depth{controller="deployment"})"), 12);
  EXPECT_EQ(sample(text, R"(gracekeeper_workqueue_depth{controller="shutdownpolicy"})"), 0);
  EXPECT_EQ(sample(text, "gracekeeper_leader"), 1);
  metrics.set_leader(false);
  EXPECT_EQ(sample(metrics.serialize(), "gracekeeper_leader"), 0);
}

// `promtool check metrics` on `text` fed to its stdin: its exit status and
// what it printed.
struct Promtool {
  int status = -1;
  std::string output;
};

Promtool promtool_check(const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path();
  const auto input = dir / ("gk-metrics-" + std::to_string(::getpid()) + ".prom");
  std::ofstream{input} << text;
  const std::string command = "promtool check metrics < '" + input.string() + "' 2>&1";
  Promtool out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char chunk[4096];
  for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, pipe)) > 0;)
    out.output.append(chunk, n);
  const int status = ::pclose(pipe);
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::filesystem::remove(input);
  return out;
}

bool have_promtool() {
  return std::system("command -v promtool >/dev/null 2>&1") == 0;
}

TEST(Metrics, PromtoolAcceptsEveryFamilyPopulated) {
  if (!have_promtool()) GTEST_SKIP() << "promtool is not installed";
  Metrics metrics{"0.1.0"};
  metrics.observe_reconcile("deployment", "success", 0.003);
  metrics.observe_reconcile("shutdownpolicy", "requeue", 1.5);
  metrics.set_deployments("shop", "web", 5, 3, 1);
  metrics.set_propagation("shop", "web", "prometheus", 7.5);
  metrics.count_patch("shop");
  metrics.count_event("Warning", "FieldConflict");
  kube::InformerCounters c;
  c.watch_restarts = 2;
  c.relists = 1;
  metrics.update_informer("deployments", c);
  metrics.set_queue_depth("deployment", 3);
  metrics.set_leader(true);

  const auto text = metrics.serialize();
  const auto result = promtool_check(text);
  EXPECT_EQ(result.status, 0) << result.output << "\n--- input ---\n" << text;
  EXPECT_EQ(result.output, "") << "promtool reported lint problems";
}

TEST(Metrics, PromtoolCheckCatchesProblems) {
  // The harness above must be able to fail: a counter without _total.
  if (!have_promtool()) GTEST_SKIP() << "promtool is not installed";
  const auto result = promtool_check(
      "# HELP gracekeeper_things A counter misnamed.\n"
      "# TYPE gracekeeper_things counter\n"
      "gracekeeper_things 1\n");
  EXPECT_NE(result.status, 0);
  EXPECT_NE(result.output, "");
}

}  // namespace
}  // namespace gracekeeper::metrics
