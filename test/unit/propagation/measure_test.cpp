// measure(): the step per source, with a fake Prometheus.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <map>

#include "../../support/run_on.h"
#include "gracekeeper/propagation/propagation.h"

namespace gracekeeper::propagation {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Clock = std::chrono::system_clock;

const Clock::time_point kNow = Clock::from_time_t(1717243200);

// Answers each PromQL text from a table; records what was asked.
class FakePrometheus final : public Prometheus {
 public:
  std::map<std::string, std::expected<double, QueryError>> answers;
  std::vector<std::string> asked;

  boost::asio::awaitable<std::expected<double, QueryError>> query(std::string promql) override {
    asked.push_back(promql);
    auto it = answers.find(promql);
    if (it == answers.end()) {
      co_return std::unexpected(QueryError{"EmptyResult", "no answer scripted"});
    }
    co_return it->second;
  }
};

budget::PolicySpec policy(budget::PropagationSource source, std::vector<std::string> queries = {}) {
  budget::PolicySpec spec;
  spec.propagation.source = source;
  spec.propagation.static_seconds = 10;
  for (std::size_t i = 0; i < queries.size(); ++i) {
    spec.propagation.prometheus_queries.push_back({"q" + std::to_string(i), queries[i]});
  }
  return spec;
}

class MeasureTest : public ::testing::Test {
 protected:
  Measurement run(const budget::PolicySpec& spec, Prometheus* p, std::optional<LastGood> last) {
    return test_support::run_on(io_, measure(spec, p, last, kNow));
  }
  boost::asio::io_context io_;
  FakePrometheus prometheus_;
};

TEST_F(MeasureTest, StaticSendsNoQuery) {
  auto spec = policy(budget::PropagationSource::Static, {"up"});
  spec.propagation.static_seconds = 7.5;
  auto m = run(spec, &prometheus_, std::nullopt);
  EXPECT_DOUBLE_EQ(m.seconds, 7.5);
  EXPECT_EQ(m.source, "Static");
  EXPECT_TRUE(m.metrics_available);
  EXPECT_EQ(m.reason, "StaticSource");
  EXPECT_FALSE(m.fallback);
  EXPECT_EQ(m.sampled_at, kNow);
  EXPECT_TRUE(prometheus_.asked.empty());
}

TEST_F(MeasureTest, PrometheusQueriesEveryQueryAndTakesTheMax) {
  prometheus_.answers = {{"a", 1.25}, {"b", 6.0}};
  auto m = run(policy(budget::PropagationSource::Prometheus, {"a", "b"}), &prometheus_,
               LastGood{.seconds = 2, .sampled_at = kNow - 1min});
  EXPECT_THAT(prometheus_.asked, ElementsAre("a", "b"));
  EXPECT_DOUBLE_EQ(m.seconds, 6);
  EXPECT_EQ(m.reason, "QuerySucceeded");
  EXPECT_EQ(m.source, "Prometheus");
  EXPECT_FALSE(m.fallback);
  ASSERT_TRUE(m.last_good);
  EXPECT_DOUBLE_EQ(m.last_good->seconds, 6);
  EXPECT_EQ(m.last_good->sampled_at, kNow);
}

TEST_F(MeasureTest, FailureHoldsTheLastGoodValue) {
  prometheus_.answers = {{"a", std::unexpected(QueryError{"QueryFailed", "bad_data: x"})}};
  LastGood last{.seconds = 4, .sampled_at = kNow - 20min};
  auto m = run(policy(budget::PropagationSource::Prometheus, {"a"}), &prometheus_, last);
  EXPECT_DOUBLE_EQ(m.seconds, 4);
  EXPECT_TRUE(m.fallback);
  EXPECT_FALSE(m.metrics_available);
  EXPECT_EQ(m.reason, "QueryFailed");
  EXPECT_THAT(m.message, HasSubstr("query \"q0\": QueryFailed: bad_data: x"));
}

TEST_F(MeasureTest, UnreachableStopsTheRemainingQueries) {
  prometheus_.answers = {{"a", std::unexpected(QueryError{"Unreachable", "refused"})}, {"b", 3.0}};
  auto m =
      run(policy(budget::PropagationSource::Prometheus, {"a", "b"}), &prometheus_, std::nullopt);
  EXPECT_THAT(prometheus_.asked, ElementsAre("a"));
  EXPECT_EQ(m.reason, "Unreachable");
  EXPECT_DOUBLE_EQ(m.seconds, 10);
  EXPECT_THAT(m.message, HasSubstr("query \"q1\": Unreachable: not sent"));
}

TEST_F(MeasureTest, OtherFailuresDoNotStopTheRemainingQueries) {
  prometheus_.answers = {{"a", std::unexpected(QueryError{"EmptyResult", "none"})}, {"b", 30.0}};
  auto m =
      run(policy(budget::PropagationSource::Prometheus, {"a", "b"}), &prometheus_, std::nullopt);
  EXPECT_THAT(prometheus_.asked, ElementsAre("a", "b"));
  EXPECT_EQ(m.reason, "EmptyResult");
  EXPECT_DOUBLE_EQ(m.seconds, 30);  // never lower than what answered
  EXPECT_TRUE(m.fallback);
}

TEST_F(MeasureTest, PrometheusNotConfigured) {
  LastGood last{.seconds = 2.5, .sampled_at = kNow - 5min};
  auto m = run(policy(budget::PropagationSource::Prometheus, {"a"}), nullptr, last);
  EXPECT_EQ(m.reason, "PrometheusNotConfigured");
  EXPECT_DOUBLE_EQ(m.seconds, 2.5);
  EXPECT_TRUE(m.fallback);
  EXPECT_FALSE(m.metrics_available);
  EXPECT_EQ(m.source, "Prometheus");

  auto none = run(policy(budget::PropagationSource::Prometheus, {"a"}), nullptr, std::nullopt);
  EXPECT_DOUBLE_EQ(none.seconds, 10);
}

TEST_F(MeasureTest, NoQueries) {
  auto m = run(policy(budget::PropagationSource::Prometheus), &prometheus_, std::nullopt);
  EXPECT_EQ(m.reason, "NoQueries");
  EXPECT_DOUBLE_EQ(m.seconds, 10);
  EXPECT_TRUE(prometheus_.asked.empty());
}

// Without the operator's samples (observed.h), Observed has none: the fallback.
TEST_F(MeasureTest, ObservedWithoutSamplesFallsBack) {
  auto m = run(policy(budget::PropagationSource::Observed), &prometheus_, std::nullopt);
  EXPECT_EQ(m.reason, "TooFewSamples");
  EXPECT_TRUE(prometheus_.asked.empty());
  EXPECT_EQ(m.source, "Observed");
  EXPECT_DOUBLE_EQ(m.seconds, 10);
  EXPECT_TRUE(m.fallback);
  EXPECT_FALSE(m.metrics_available);
}

class ThrowingPrometheus final : public Prometheus {
 public:
  boost::asio::awaitable<std::expected<double, QueryError>> query(std::string) override {
    throw std::runtime_error("boom");
    co_return 0.0;
  }
};

TEST_F(MeasureTest, AThrowingImplementationBecomesAFailedQuery) {
  ThrowingPrometheus p;
  auto m = run(policy(budget::PropagationSource::Prometheus, {"a"}), &p, std::nullopt);
  EXPECT_EQ(m.reason, "BadResponse");
  EXPECT_THAT(m.message, HasSubstr("boom"));
}

}  // namespace
}  // namespace gracekeeper::propagation
