// Source Observed: the sample arithmetic (seen - trigger time, clamped at 0),
// bad trigger-time annotations, the window and the quantile, and too few
// samples.
#include "gracekeeper/propagation/observed.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gracekeeper::propagation {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::system_clock;

// 2026-12-01T18:00:00Z
const TimePoint kNow = std::chrono::sys_days(std::chrono::year{2026} / 12 / 1) + 18h;

budget::PolicySpec observed_policy(int min_samples = 3, double consumer_sync = 1) {
  budget::PolicySpec spec;
  spec.propagation.source = budget::PropagationSource::Observed;
  spec.propagation.static_seconds = 10;
  spec.propagation.quantile = 0.9;
  spec.propagation.observed.window_seconds = 600;
  spec.propagation.observed.min_samples = min_samples;
  spec.propagation.observed.consumer_sync_seconds = consumer_sync;
  return spec;
}

TEST(Lag, SeenMinusTriggerTime) {
  const std::string trigger = "2026-12-01T18:00:00.5Z";
  auto l = lag(&trigger, kNow + 1750ms);
  ASSERT_TRUE(l);
  EXPECT_DOUBLE_EQ(l->seconds, 1.25);
  EXPECT_FALSE(l->clamped);
}

TEST(Lag, ATriggerAfterSeenIsSkewClampedToZero) {
  // The controller manager's clock is ahead of gracekeeper's.
  const std::string trigger = "2026-12-01T18:00:03Z";
  auto l = lag(&trigger, kNow + 1s);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->seconds, 0);
  EXPECT_TRUE(l->clamped);
}

TEST(Lag, MissingAndGarbageAnnotationsAreErrorsThatSayWhat) {
  auto missing = lag(nullptr, kNow);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, LagError::Kind::Missing);
  EXPECT_THAT(missing.error().message, HasSubstr(kTriggerTimeAnnotation));

  const std::string garbage = "yesterday-ish";
  auto bad = lag(&garbage, kNow);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().kind, LagError::Kind::Garbage);
  EXPECT_THAT(bad.error().message, HasSubstr("\"yesterday-ish\""));
  EXPECT_THAT(bad.error().message, HasSubstr(kTriggerTimeAnnotation));

  const std::string huge(100000, '9');  // cut in the message, never a crash
  auto cut = lag(&huge, kNow);
  ASSERT_FALSE(cut);
  EXPECT_LT(cut.error().message.size(), 200u);
}

TEST(SampleBook, NearestRankQuantileOverTheWindow) {
  SampleBook book;
  // 1..10 s, one per second, all within the window.
  for (int i = 1; i <= 10; ++i) book.add("shop", kNow - std::chrono::seconds(20 - i), i);
  Window w = book.window("shop", 600s, 0.9, kNow);
  EXPECT_EQ(w.count, 10u);
  ASSERT_TRUE(w.quantile);
  EXPECT_FLOAT_EQ(*w.quantile, 9);  // ceil(0.9 * 10) = 9th of 10
  EXPECT_FALSE(w.short_tail);
  w = book.window("shop", 600s, 0.99, kNow);
  EXPECT_FLOAT_EQ(*w.quantile, 9);  // 10 < 1 / (1 - 0.99): never the largest alone
  EXPECT_TRUE(w.short_tail);
  w = book.window("shop", 600s, 0.5, kNow);
  EXPECT_FLOAT_EQ(*w.quantile, 5);
  w = book.window("shop", 600s, 0.01, kNow);
  EXPECT_FLOAT_EQ(*w.quantile, 1);
}

TEST(SampleBook, OnlyTheWindowCountsAndNamespacesAreApart) {
  SampleBook book;
  book.add("shop", kNow - 700s, 30);  // outside a 600 s window
  book.add("shop", kNow - 100s, 2);
  book.add("shop", kNow - 50s, 3);
  book.add("other", kNow - 10s, 50);
  Window w = book.window("shop", 600s, 0.5, kNow);
  EXPECT_EQ(w.count, 2u);
  EXPECT_FLOAT_EQ(*w.quantile, 2);
  w = book.window("shop", 600s, 0.99, kNow);
  EXPECT_FLOAT_EQ(*w.quantile, 2);  // never the largest alone
  w = book.window("shop", 800s, 0.5, kNow);
  EXPECT_EQ(w.count, 3u);
  EXPECT_FLOAT_EQ(*w.quantile, 3);
  w = book.window("shop", 800s, 0.99, kNow);
  EXPECT_FLOAT_EQ(*w.quantile, 3);  // the second largest of 3
  EXPECT_EQ(book.window("nowhere", 600s, 0.99, kNow).count, 0u);
  EXPECT_FALSE(book.window("nowhere", 600s, 0.99, kNow).quantile);
}

// One outlier among fewer samples than the quantile needs does not set it:
// nearest rank would make p99 of 20 samples their maximum.
TEST(SampleBook, AHighQuantileIsNeverSetByOneSample) {
  SampleBook book;
  for (int i = 1; i <= 19; ++i)
    book.add("shop", kNow - 100s + std::chrono::seconds(i), 1 + i * 0.1);
  book.add("shop", kNow - 50s, 30);  // a stuck moment, still plausible
  Window w = book.window("shop", 600s, 0.99, kNow);
  EXPECT_EQ(w.count, 20u);
  ASSERT_TRUE(w.quantile);
  EXPECT_FLOAT_EQ(*w.quantile, 2.9f);  // the second largest, not 30
  EXPECT_TRUE(w.short_tail);
  // Enough samples for the quantile (n >= 1 / (1 - q)): plain nearest rank,
  // which leaves the largest out by itself.
  SampleBook full;
  for (int i = 1; i <= 100; ++i) full.add("shop", kNow - 200s + std::chrono::seconds(i), i);
  w = full.window("shop", 600s, 0.99, kNow);
  EXPECT_FLOAT_EQ(*w.quantile, 99);
  EXPECT_FALSE(w.short_tail);
  full.add("shop", kNow - 10s, 500);  // 101 samples: ceil(99.99) = 100th
  EXPECT_FLOAT_EQ(*full.window("shop", 600s, 0.99, kNow).quantile, 100);
  // A single sample is all there is.
  SampleBook one;
  one.add("shop", kNow - 1s, 4);
  w = one.window("shop", 600s, 0.99, kNow);
  EXPECT_FLOAT_EQ(*w.quantile, 4);
  EXPECT_FALSE(w.short_tail);
}

TEST(SampleBook, ImplausibleSamplesAreCountedButNeverInTheFigure) {
  budget::PolicySpec defaults;
  EXPECT_DOUBLE_EQ(implausible_above(defaults), 40);  // maxSeconds 60 / safetyFactor 1.5
  SampleBook book;
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(book.add("shop", kNow - 60s + std::chrono::seconds(i), 2, 40));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(book.add("shop", kNow - 30s, 400, 40));
  EXPECT_TRUE(book.add("shop", kNow - 20s, 40, 40));  // at the bound: kept
  Window w = book.window("shop", 600s, 0.5, kNow);
  EXPECT_EQ(w.count, 6u);
  EXPECT_EQ(w.implausible, 3u);
  EXPECT_FLOAT_EQ(*w.quantile, 2);
  EXPECT_EQ(book.counters().samples, 9u);
  EXPECT_EQ(book.counters().implausible, 3u);
  // They leave the window as the others do.
  EXPECT_EQ(book.window("shop", 25s, 0.5, kNow).implausible, 0u);
}

TEST(SampleBook, BoundedInCountAndAge) {
  SampleBook book;
  for (std::size_t i = 0; i < SampleBook::kMaxSamples + 100; ++i) {
    book.add("shop", kNow - 1000s + std::chrono::milliseconds(i), 1);
  }
  EXPECT_EQ(book.window("shop", 86400s, 0.5, kNow).count, SampleBook::kMaxSamples);
  book.prune(kNow + SampleBook::kMaxAge);
  EXPECT_EQ(book.namespaces(), 0u);
}

TEST(ObservedMeasurement, QuantilePlusConsumerSync) {
  auto spec = observed_policy(/*min_samples=*/3, /*consumer_sync=*/1.5);
  Window w{.count = 5, .quantile = 0.75};
  auto m = observed_measurement(spec, w, std::nullopt, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 2.25);
  EXPECT_EQ(m.source, "Observed");
  EXPECT_TRUE(m.metrics_available);
  EXPECT_FALSE(m.fallback);
  EXPECT_EQ(m.reason, "SamplesSufficient");
  ASSERT_TRUE(m.last_good);
  EXPECT_DOUBLE_EQ(m.last_good->seconds, 2.25);
  EXPECT_THAT(m.message, HasSubstr("5 EndpointSlice sample(s)"));
  EXPECT_THAT(m.message, HasSubstr("consumerSyncSeconds 1.5s"));
}

TEST(ObservedMeasurement, TooFewSamplesFallsBackAndSaysHowMany) {
  auto spec = observed_policy(/*min_samples=*/20);
  Window w{.count = 7, .quantile = 0.4};
  auto m = observed_measurement(spec, w, std::nullopt, kNow);
  EXPECT_FALSE(m.metrics_available);
  EXPECT_TRUE(m.fallback);
  EXPECT_EQ(m.reason, "TooFewSamples");
  EXPECT_DOUBLE_EQ(m.seconds, 10);  // staticSeconds
  EXPECT_THAT(m.message, HasSubstr("7 sample(s)"));
  EXPECT_THAT(m.message, HasSubstr("minSamples is 20"));
  EXPECT_THAT(m.message, HasSubstr("staticSeconds"));

  // A recent good value is kept instead.
  LastGood good{.seconds = 3.5, .sampled_at = kNow - 5min};
  m = observed_measurement(spec, w, good, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 3.5);
  EXPECT_FALSE(m.metrics_available);
  EXPECT_THAT(m.message, HasSubstr("last good value 3.5s"));
}

TEST(ObservedMeasurement, SaysWhenTheQuantileIsTheSecondLargestAndWhatWasDropped) {
  auto spec = observed_policy(/*min_samples=*/3);
  Window w{.count = 5, .quantile = 2, .short_tail = true, .implausible = 2};
  auto m = observed_measurement(spec, w, std::nullopt, kNow);
  EXPECT_TRUE(m.metrics_available);
  EXPECT_DOUBLE_EQ(m.seconds, 3);
  EXPECT_THAT(m.message, HasSubstr("too few for that quantile: the second largest"));
  EXPECT_THAT(m.message,
              HasSubstr("2 implausible sample(s) above maxSeconds / safetyFactor = 40s dropped"));
  // Every sample implausible (a cluster that slow, or a clock far ahead):
  // too few samples, and the message says why.
  m = observed_measurement(spec, Window{.count = 0, .implausible = 30}, std::nullopt, kNow);
  EXPECT_EQ(m.reason, "TooFewSamples");
  EXPECT_THAT(m.message, HasSubstr("30 implausible sample(s)"));
}

TEST(ObservedMeasurement, NoSamplesAtAll) {
  auto m = observed_measurement(observed_policy(1), Window{}, std::nullopt, kNow);
  EXPECT_FALSE(m.metrics_available);
  EXPECT_EQ(m.reason, "TooFewSamples");
  EXPECT_THAT(m.message, HasSubstr("0 sample(s)"));
}

TEST(ObservedPolicy, DefaultsAndBoundsOfPropagationObserved) {
  auto spec = budget::parse_policy_spec(budget::Json::object());
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->propagation.observed.window_seconds, 3600);
  EXPECT_EQ(spec->propagation.observed.min_samples, 20);
  EXPECT_EQ(spec->propagation.observed.consumer_sync_seconds, 1);

  spec = budget::parse_policy_spec(budget::Json::parse(
      R"({"propagation": {"source": "Observed", "observed":
          {"windowSeconds": 600, "minSamples": 3, "consumerSyncSeconds": 5}}})"));
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->propagation.observed.window_seconds, 600);
  EXPECT_EQ(spec->propagation.observed.min_samples, 3);
  EXPECT_EQ(spec->propagation.observed.consumer_sync_seconds, 5);

  auto bad = budget::parse_policy_spec(budget::Json::parse(
      R"({"propagation": {"observed": {"windowSeconds": 10, "minSamples": 0,
          "consumerSyncSeconds": -1, "typo": 1}}})"));
  ASSERT_FALSE(bad);
  std::string all;
  for (const auto& e : bad.error()) all += e.format() + "\n";
  EXPECT_THAT(all, HasSubstr("spec.propagation.observed.windowSeconds"));
  EXPECT_THAT(all, HasSubstr("spec.propagation.observed.minSamples"));
  EXPECT_THAT(all, HasSubstr("spec.propagation.observed.consumerSyncSeconds"));
  EXPECT_THAT(all, HasSubstr("spec.propagation.observed.typo: unknown field"));
}

TEST(ObservedMeasurement, TheSlowestDeclaredConsumerIsAddedAndNamed) {
  auto spec = observed_policy(/*min_samples=*/3, /*consumer_sync=*/1);
  spec.propagation.observed.consumers = {{"traefik", 2.5}, {"mesh", 0.5}};
  auto m = observed_measurement(spec, Window{.count = 5, .quantile = 0.75}, std::nullopt, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 3.25);
  EXPECT_EQ(m.consumer, "traefik");
  EXPECT_THAT(m.message, HasSubstr(": 0.75s + traefik 2.5s, the slowest consumer "
                                   "(kube-proxy 1s, traefik 2.5s, mesh 0.5s)"));

  // kube-proxy's allowance is the largest: it wins, and ties go to it.
  spec.propagation.observed.consumer_sync_seconds = 2.5;
  m = observed_measurement(spec, Window{.count = 5, .quantile = 0.75}, std::nullopt, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 3.25);
  EXPECT_EQ(m.consumer, "kube-proxy");

  // Without declared consumers: kube-proxy, and the message as before.
  m = observed_measurement(observed_policy(3, 1.5), Window{.count = 5, .quantile = 0.75},
                           std::nullopt, kNow);
  EXPECT_EQ(m.consumer, "kube-proxy");
  EXPECT_THAT(m.message, HasSubstr("+ consumerSyncSeconds 1.5s"));

  // A fallback names no consumer: the figure is not theirs.
  m = observed_measurement(spec, Window{.count = 1, .quantile = 0.75}, std::nullopt, kNow);
  EXPECT_TRUE(m.fallback);
  EXPECT_EQ(m.consumer, "");
}

// Issue 45, item 3: the fallback kept the declared consumers out, so a
// policy declaring traefik at 8 s waited for staticSeconds 5 s alone.
TEST(ObservedMeasurement, AFallbackIsNeverBelowTheSlowestDeclaredConsumer) {
  auto spec = observed_policy(/*min_samples=*/20, /*consumer_sync=*/1);
  spec.propagation.static_seconds = 5;
  spec.propagation.observed.consumers = {{"traefik", 8}};
  const Window few{.count = 3, .quantile = 0.4};

  // Too few samples, nothing good before: max(staticSeconds, 8s), named.
  auto m = observed_measurement(spec, few, std::nullopt, kNow);
  EXPECT_TRUE(m.fallback);
  EXPECT_FALSE(m.metrics_available);
  EXPECT_EQ(m.reason, "TooFewSamples");
  EXPECT_DOUBLE_EQ(m.seconds, 8);
  EXPECT_EQ(m.consumer, "traefik");
  EXPECT_EQ(m.sampled_at, kNow);
  EXPECT_THAT(m.message, HasSubstr("using staticSeconds 5s (no good value in the last hour), "
                                   "raised to 8s to cover the slowest declared consumer, "
                                   "traefik 8s (kube-proxy 1s, traefik 8s)"));
  EXPECT_FALSE(m.last_good);  // a declared figure is no measurement to keep

  // A restart with a stale status (no last good value younger than 1 h):
  // the same.
  m = observed_measurement(spec, Window{}, LastGood{.seconds = 9.5, .sampled_at = kNow - 2h}, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 8);
  EXPECT_EQ(m.consumer, "traefik");
  EXPECT_THAT(m.message, HasSubstr("older than 1h), raised to 8s"));

  // A last good value below the allowance (measured before the consumer was
  // declared) is raised too; its time stays: the allowance is not a sample.
  m = observed_measurement(spec, few, LastGood{.seconds = 2, .sampled_at = kNow - 5min}, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 8);
  EXPECT_EQ(m.sampled_at, kNow - 5min);
  EXPECT_EQ(m.consumer, "traefik");
  ASSERT_TRUE(m.last_good);
  EXPECT_DOUBLE_EQ(m.last_good->seconds, 2);

  // A fallback above the allowance is the fallback's own: no consumer.
  m = observed_measurement(spec, few, LastGood{.seconds = 9.5, .sampled_at = kNow - 5min}, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 9.5);
  EXPECT_EQ(m.consumer, "");
  spec.propagation.static_seconds = 12;
  m = observed_measurement(spec, few, std::nullopt, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 12);
  EXPECT_EQ(m.consumer, "");
  EXPECT_THAT(m.message, Not(HasSubstr("raised")));

  // Without declared consumers, kube-proxy's consumerSyncSeconds is the floor.
  auto plain = observed_policy(/*min_samples=*/20, /*consumer_sync=*/3);
  plain.propagation.static_seconds = 2;
  m = observed_measurement(plain, few, std::nullopt, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 3);
  EXPECT_EQ(m.consumer, "kube-proxy");
  EXPECT_THAT(m.message, HasSubstr("raised to 3s to cover consumerSyncSeconds 3s (kube-proxy)"));
}

TEST(ObservedPolicy, ConsumersAreReadAndCheckedByName) {
  auto spec = budget::parse_policy_spec(budget::Json::parse(
      R"({"propagation": {"source": "Observed", "observed": {"consumerSyncSeconds": 1,
          "consumers": [{"name": "traefik", "syncSeconds": 2.5}, {"name": "mesh", "syncSeconds": 0}]}}})"));
  ASSERT_TRUE(spec);
  const auto& consumers = spec->propagation.observed.consumers;
  ASSERT_EQ(consumers.size(), 2u);
  EXPECT_EQ(consumers[0].name, "traefik");
  EXPECT_DOUBLE_EQ(consumers[0].sync_seconds, 2.5);
  EXPECT_EQ(spec->propagation.observed.slowest_consumer().name, "traefik");

  auto bad = budget::parse_policy_spec(budget::Json::parse(R"({"propagation": {"observed": {
      "consumers": [{"name": "traefik", "syncSeconds": 2}, {"name": "traefik", "syncSeconds": 3},
                    {"name": "kube-proxy", "syncSeconds": 1}, {"name": "envoy"},
                    {"name": "", "syncSeconds": 1}, {"name": "late", "syncSeconds": 4000},
                    {"name": "x", "syncSeconds": 1, "throttle": 2}, 7]}}})"));
  ASSERT_FALSE(bad);
  std::string all;
  for (const auto& e : bad.error()) all += e.format() + "\n";
  const std::string at = "spec.propagation.observed.consumers";
  EXPECT_THAT(all, HasSubstr(at + "[1].name: duplicate name \"traefik\" (also consumers[0])"));
  EXPECT_THAT(all, HasSubstr(at + "[2].name: kube-proxy's allowance is "
                                  "observed.consumerSyncSeconds"));
  EXPECT_THAT(all, HasSubstr(at + "[3].syncSeconds: required"));
  EXPECT_THAT(all, HasSubstr(at + "[4].name: must not be empty"));
  EXPECT_THAT(all, HasSubstr(at + "[5].syncSeconds"));
  EXPECT_THAT(all, HasSubstr(at + "[6].throttle: unknown field"));
  EXPECT_THAT(all, HasSubstr(at + "[7]"));

  budget::Json many = budget::Json::array();
  for (int i = 0; i < 17; ++i)
    many.push_back({{"name", "c" + std::to_string(i)}, {"syncSeconds", 1}});
  bad = budget::parse_policy_spec({{"propagation", {{"observed", {{"consumers", many}}}}}});
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().front().format(), HasSubstr(at + ": at most 16 consumers (got 17)"));
}

}  // namespace
}  // namespace gracekeeper::propagation
