// combine(): the slowest consumer wins; any failure falls back to the last
// good value (at most 1 h old) or staticSeconds; and a failure never lowers
// the figure below what the queries that did answer measured.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gracekeeper/propagation/propagation.h"

namespace gracekeeper::propagation {
namespace {

using namespace std::chrono_literals;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::system_clock;

// 2024-06-01T12:00:00Z
const Clock::time_point kNow = Clock::from_time_t(1717243200);

budget::PolicySpec prometheus_policy(double static_seconds = 10) {
  budget::PolicySpec spec;
  spec.propagation.source = budget::PropagationSource::Prometheus;
  spec.propagation.static_seconds = static_seconds;
  return spec;
}

std::expected<double, QueryError> ok(double v) {
  return v;
}
std::expected<double, QueryError> fail(std::string reason, std::string message = "it failed") {
  return std::unexpected(QueryError{std::move(reason), std::move(message)});
}

TEST(Combine, SlowestConsumerWins) {
  QueryResults results{{"kube-proxy", ok(1.5)}, {"ingress-nginx", ok(4.25)}, {"mesh", ok(0.3)}};
  auto m = combine(prometheus_policy(), results, std::nullopt, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 4.25);
  EXPECT_EQ(m.source, "Prometheus");
  EXPECT_TRUE(m.metrics_available);
  EXPECT_EQ(m.reason, "QuerySucceeded");
  EXPECT_EQ(m.consumer, "ingress-nginx");
  EXPECT_FALSE(m.fallback);
  EXPECT_EQ(m.sampled_at, kNow);
  ASSERT_TRUE(m.last_good);
  EXPECT_DOUBLE_EQ(m.last_good->seconds, 4.25);
  EXPECT_EQ(m.last_good->sampled_at, kNow);
  EXPECT_THAT(m.message, AllOf(HasSubstr("kube-proxy 1.5s"), HasSubstr("ingress-nginx 4.25s"),
                               HasSubstr("mesh 0.3s"), HasSubstr("slowest consumer wins: 4.25s")));
}

TEST(Combine, SuccessReplacesAnOlderLastGood) {
  QueryResults results{{"kube-proxy", ok(0.8)}};
  LastGood previous{.seconds = 7, .sampled_at = kNow - 10min};
  auto m = combine(prometheus_policy(), results, previous, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 0.8);  // a fresh, complete measurement may go down
  EXPECT_FALSE(m.fallback);
  ASSERT_TRUE(m.last_good);
  EXPECT_DOUBLE_EQ(m.last_good->seconds, 0.8);
  EXPECT_EQ(m.message, "kube-proxy 0.8s");
  EXPECT_EQ(m.consumer, "kube-proxy");
}

TEST(Combine, FailureUsesALastGoodValueUpToOneHourOld) {
  QueryResults results{{"kube-proxy", fail("Unreachable", "connecting: refused")}};
  for (auto age : {0min, 30min, 60min}) {
    LastGood last{.seconds = 3.5, .sampled_at = kNow - age};
    auto m = combine(prometheus_policy(), results, last, kNow);
    EXPECT_DOUBLE_EQ(m.seconds, 3.5) << age.count();
    EXPECT_TRUE(m.fallback);
    EXPECT_FALSE(m.metrics_available);
    EXPECT_EQ(m.reason, "Unreachable");
    EXPECT_EQ(m.sampled_at, last.sampled_at);  // when the figure was measured
    ASSERT_TRUE(m.last_good);
    EXPECT_EQ(m.last_good->sampled_at, last.sampled_at);  // unchanged
    EXPECT_THAT(m.message,
                AllOf(HasSubstr("query \"kube-proxy\": Unreachable: connecting: refused"),
                      HasSubstr("using the last good value 3.5s measured at")));
  }
}

TEST(Combine, FailureUsesStaticSecondsWhenTheLastGoodIsOlder) {
  QueryResults results{{"kube-proxy", fail("EmptyResult")}};
  LastGood stale{.seconds = 3.5, .sampled_at = kNow - 60min - 1s};
  auto m = combine(prometheus_policy(12), results, stale, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 12);
  EXPECT_TRUE(m.fallback);
  EXPECT_FALSE(m.metrics_available);
  EXPECT_EQ(m.reason, "EmptyResult");
  EXPECT_EQ(m.sampled_at, kNow);
  ASSERT_TRUE(m.last_good);  // kept as it was; the caller may drop it
  EXPECT_DOUBLE_EQ(m.last_good->seconds, 3.5);
  EXPECT_THAT(m.message, AllOf(HasSubstr("using staticSeconds 12s"), HasSubstr("older than 1h"),
                               HasSubstr("2024-06-01T10:59:59Z")));
}

TEST(Combine, FailureUsesStaticSecondsWithoutALastGood) {
  QueryResults results{{"kube-proxy", fail("QueryFailed", "bad_data: parse error")}};
  auto m = combine(prometheus_policy(10), results, std::nullopt, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 10);
  EXPECT_TRUE(m.fallback);
  EXPECT_EQ(m.reason, "QueryFailed");
  EXPECT_FALSE(m.last_good);
  EXPECT_THAT(m.message, HasSubstr("no good value in the last hour"));
}

// One failing query among several fails the measurement: the max of the
// others could drop the slowest consumer and shrink the wait.
TEST(Combine, OneFailingQueryFailsTheMeasurement) {
  QueryResults results{{"kube-proxy", ok(2)},
                       {"ingress-nginx", fail("EmptyResult", "no series")},
                       {"mesh", fail("NotANumber", "NaN")}};
  LastGood last{.seconds = 5, .sampled_at = kNow - 5min};
  auto m = combine(prometheus_policy(), results, last, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 5);
  EXPECT_TRUE(m.fallback);
  EXPECT_FALSE(m.metrics_available);
  EXPECT_EQ(m.reason, "EmptyResult");  // the first failure names the condition
  EXPECT_THAT(m.message, AllOf(HasSubstr("query \"ingress-nginx\": EmptyResult: no series"),
                               HasSubstr("query \"mesh\": NotANumber: NaN"),
                               Not(HasSubstr("\"kube-proxy\""))));
  EXPECT_DOUBLE_EQ(m.last_good->seconds, 5);  // not replaced by a partial figure
}

// "Never lower because Prometheus failed": the queries that answered are a
// lower bound of the true maximum, so the fallback is raised to them.
TEST(Combine, NeverLowerThanTheQueriesThatAnswered) {
  QueryResults results{{"kube-proxy", ok(20)}, {"ingress-nginx", fail("Unreachable")}};
  LastGood last{.seconds = 5, .sampled_at = kNow - 5min};
  auto with_last = combine(prometheus_policy(10), results, last, kNow);
  EXPECT_DOUBLE_EQ(with_last.seconds, 20);
  EXPECT_TRUE(with_last.fallback);
  EXPECT_EQ(with_last.sampled_at, kNow);
  EXPECT_THAT(with_last.message, HasSubstr("raised to 20s"));
  EXPECT_DOUBLE_EQ(with_last.last_good->seconds, 5);

  auto with_static = combine(prometheus_policy(10), results, std::nullopt, kNow);
  EXPECT_DOUBLE_EQ(with_static.seconds, 20);
  EXPECT_FALSE(with_static.last_good);

  // Below the fallback, the partial figure changes nothing.
  QueryResults low{{"kube-proxy", ok(1)}, {"ingress-nginx", fail("Unreachable")}};
  auto held = combine(prometheus_policy(10), low, last, kNow);
  EXPECT_DOUBLE_EQ(held.seconds, 5);
  EXPECT_EQ(held.sampled_at, last.sampled_at);
  EXPECT_THAT(held.message, Not(HasSubstr("raised")));
}

TEST(Combine, NoQueries) {
  auto m = combine(prometheus_policy(8), {}, std::nullopt, kNow);
  EXPECT_EQ(m.reason, "NoQueries");
  EXPECT_DOUBLE_EQ(m.seconds, 8);
  EXPECT_TRUE(m.fallback);
  EXPECT_FALSE(m.metrics_available);
}

TEST(Combine, LastGoodFromTheFutureCountsAsRecent) {
  // The wall clock stepped back after the sample: still the freshest figure.
  LastGood last{.seconds = 4, .sampled_at = kNow + 2min};
  QueryResults results{{"kube-proxy", fail("Unreachable")}};
  auto m = combine(prometheus_policy(10), results, last, kNow);
  EXPECT_DOUBLE_EQ(m.seconds, 4);
}

}  // namespace
}  // namespace gracekeeper::propagation
