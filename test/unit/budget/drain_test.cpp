// The measured drain's figure (budget/drain.h) and how the engine plans the
// grace with it: never below the declared drain, recorded in
// gracekeeper.dev/applied, and held when the samples are gone.
#include "gracekeeper/budget/drain.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "gracekeeper/budget/apply.h"
#include "gracekeeper/budget/engine.h"

namespace gracekeeper::budget {
namespace {

using namespace std::chrono_literals;
const auto kNow =
    std::chrono::system_clock::time_point(std::chrono::sys_days{std::chrono::year{2026} / 12 / 7});

PolicySpec::Drain observed(int min_samples = 5, double quantile = 0.9) {
  PolicySpec::Drain d;
  d.source = DrainSource::Observed;
  d.min_samples = min_samples;
  d.quantile = quantile;
  return d;
}

std::vector<DrainSample> drains(std::initializer_list<double> seconds) {
  std::vector<DrainSample> out;
  for (double s : seconds) out.push_back({kNow - 1min, s, false});
  return out;
}

TEST(DrainFigure, NeedsMinSamplesInTheWindow) {
  auto samples = drains({3, 4, 5, 6});
  EXPECT_FALSE(drain_figure(samples, observed(5), kNow));
  samples.push_back({kNow - 25h, 9, false});  // outside the 24 h window
  EXPECT_FALSE(drain_figure(samples, observed(5), kNow));
  samples.push_back({kNow, 7.2, false});
  const auto figure = drain_figure(samples, observed(5), kNow);
  ASSERT_TRUE(figure);
  EXPECT_EQ(figure->samples, 5u);
  EXPECT_EQ(figure->seconds, 8);  // nearest rank 0.9 of 5 is the 5th: 7.2, rounded up
  EXPECT_FALSE(figure->cut_short);
}

TEST(DrainFigure, QuantileIsNearestRank) {
  const auto samples = drains({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  EXPECT_EQ(drain_figure(samples, observed(1, 0.5), kNow)->seconds, 5);
  EXPECT_EQ(drain_figure(samples, observed(1, 0.9), kNow)->seconds, 9);
  EXPECT_EQ(drain_figure(samples, observed(1, 0.99), kNow)->seconds, 10);
}

TEST(DrainFigure, ACutShortSampleCountsAtOnceAndDoubled) {
  // One kill: the pod had 15 s after SIGTERM and needed more.
  const std::vector<DrainSample> samples{{kNow - 1min, 15, true}};
  const auto figure = drain_figure(samples, observed(5), kNow);
  ASSERT_TRUE(figure);
  EXPECT_EQ(figure->seconds, 30);
  EXPECT_TRUE(figure->cut_short);
}

TEST(DrainFigure, CappedAtMaxSeconds) {
  auto spec = observed(1);
  spec.max_seconds = 20;
  const std::vector<DrainSample> samples{{kNow, 15, true}};
  const auto figure = drain_figure(samples, spec, kNow);
  ASSERT_TRUE(figure);
  EXPECT_EQ(figure->seconds, 20);
  EXPECT_TRUE(figure->capped);
}

TEST(DrainBook, KeepsTheLastSamplesPerWorkload) {
  DrainBook book;
  for (std::size_t i = 0; i < DrainBook::kSamplesKept + 3; ++i) {
    book.add(workload_key("Deployment", "shop/web"), {kNow, static_cast<double>(i), false});
  }
  const auto kept = book.samples("Deployment/shop/web");
  ASSERT_EQ(kept.size(), DrainBook::kSamplesKept);
  EXPECT_EQ(kept.front().seconds, 3);
  EXPECT_TRUE(book.samples("StatefulSet/shop/web").empty());
}

Json web() {
  return Json::parse(R"({
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "shop",
                 "annotations": {"gracekeeper.dev/enabled": "true"}},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
      "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
      "template": {"metadata": {"labels": {"app": "web"}},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "web", "image": "web:1",
            "ports": [{"containerPort": 8080}]}]}}}})");
}

Deployment project(const Json& object) {
  auto d = project_deployment(object);
  EXPECT_TRUE(d.has_value());
  return d ? *d : Deployment{};
}

TEST(PlanWithMeasuredDrain, TheGraceCoversTheLongerOfDeclaredAndMeasured) {
  PolicySpec policy;
  policy.drain_seconds = 5;
  policy.drain.source = DrainSource::Observed;
  Context ctx;
  ctx.policy = &policy;
  ctx.policy_name = "default";
  ctx.propagation_seconds = 2;  // preStop 5 (minSeconds)
  const Deployment d = project(web());

  ctx.measured_drain_seconds = 3;  // shorter than declared: drainSeconds holds
  Plan p = plan(d, ctx);
  EXPECT_EQ(p.budget.drain_seconds, 5);
  EXPECT_FALSE(p.budget.measured_drain);
  EXPECT_EQ(p.grace_seconds, 5 + 5 + 10);

  ctx.measured_drain_seconds = 30;
  p = plan(d, ctx);
  EXPECT_EQ(p.budget.drain_seconds, 30);
  EXPECT_TRUE(p.budget.measured_drain);
  EXPECT_EQ(p.grace_seconds, 5 + 30 + 10);

  // Recorded as `drain`, and read back from the annotation.
  Json object = web();
  apply_plan(object, p, "default", kNow);
  const Deployment written = project(object);
  ASSERT_TRUE(written.applied);
  EXPECT_EQ(written.applied->drain_seconds, 30);

  // Static ignores a measurement.
  policy.drain.source = DrainSource::Static;
  EXPECT_EQ(plan(d, ctx).budget.drain_seconds, 5);
}

}  // namespace
}  // namespace gracekeeper::budget
