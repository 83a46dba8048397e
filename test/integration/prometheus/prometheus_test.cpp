// The Prometheus propagation source against a real Prometheus (Debian's
// package) scraping fixture_exporter.py once a second: measure() follows a
// change of the exporter's distribution, real error answers map to the right
// reasons, and a stopped Prometheus gives Unreachable with the last good value
// held. No Kubernetes control plane involved.
//
// Usage: integration_prometheus WORK_DIR   (created; Prometheus' data and logs go there)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "../../support/run_on.h"
#include "gracekeeper/http/client.h"
#include "gracekeeper/propagation/propagation.h"

extern char** environ;

namespace gracekeeper::propagation {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

const char* const kQuantileQuery =
    "histogram_quantile(0.99, sum by (le) "
    "(rate(kubeproxy_network_programming_duration_seconds_bucket[1m])))";

fs::path g_work_dir;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Waits for `file` to exist; its content trimmed, or "" at the deadline.
std::string wait_for_file(const fs::path& file, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (fs::exists(file)) return read_file(file);
    std::this_thread::sleep_for(50ms);
  }
  return "";
}

int run_command(const std::string& command) {
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

budget::PolicySpec prometheus_policy(std::string query, double static_seconds = 10) {
  budget::PolicySpec spec;
  spec.propagation.source = budget::PropagationSource::Prometheus;
  spec.propagation.static_seconds = static_seconds;
  spec.propagation.prometheus_queries.push_back({"kube-proxy", std::move(query)});
  return spec;
}

// One exporter and one Prometheus for the whole suite (Prometheus takes a few
// seconds to have rate() data; the tests share that wait).
class PrometheusTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = g_work_dir / "run";
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // The exporter is our child; it exits with us (parent-death signal and
    // its own owner watch), so a crashed test leaves nothing behind.
    std::string script = std::string{GK_PROMETHEUS_FIXTURES} + "/fixture_exporter.py";
    std::string port_file = (dir_ / "exporter.port").string();
    std::vector<std::string> args = {"python3", script, "--port-file", port_file, "--p99", "1.0"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ASSERT_EQ(posix_spawnp(&exporter_pid_, "python3", nullptr, nullptr, argv.data(), environ), 0);
    const std::string port = wait_for_file(port_file, 30s);
    ASSERT_FALSE(port.empty()) << "the fixture exporter did not start";
    exporter_url_ = "http://127.0.0.1:" + port;

    const std::string start = std::string{GK_PROMETHEUS_FIXTURES} +
                              "/start-prometheus --owner-pid " + std::to_string(getpid()) + " '" +
                              (dir_ / "prometheus").string() + "' 127.0.0.1:" + port;
    ASSERT_EQ(run_command(start), 0) << start;
    prometheus_url_ = read_file(dir_ / "prometheus" / "url");
    ASSERT_FALSE(prometheus_url_.empty());
  }

  static void TearDownTestSuite() {
    stop_prometheus();
    if (exporter_pid_ > 0) {
      kill(exporter_pid_, SIGTERM);
      waitpid(exporter_pid_, nullptr, 0);
      exporter_pid_ = 0;
    }
  }

  static void stop_prometheus() {
    const std::string stop = std::string{GK_PROMETHEUS_FIXTURES} + "/stop-prometheus '" +
                             (dir_ / "prometheus").string() + "'";
    EXPECT_EQ(run_command(stop), 0);
  }

  void SetUp() override {
    ASSERT_FALSE(prometheus_url_.empty()) << "no Prometheus (see SetUpTestSuite)";
    PrometheusConfig config{.url = prometheus_url_, .timeout = 5s};
    auto p = make_prometheus(io_.get_executor(), config);
    ASSERT_TRUE(p) << p.error();
    prometheus_ = std::move(*p);
  }

  Measurement measure_now(const budget::PolicySpec& spec, std::optional<LastGood> last_good) {
    return test_support::run_on(
        io_, measure(spec, prometheus_.get(), last_good, std::chrono::system_clock::now()));
  }

  // Polls measure() until `accept` holds or the deadline passes; the last result.
  Measurement measure_until(const budget::PolicySpec& spec, std::chrono::seconds limit,
                            const std::function<bool(const Measurement&)>& accept) {
    const auto deadline = Clock::now() + limit;
    Measurement m;
    for (;;) {
      m = measure_now(spec, std::nullopt);
      if (accept(m) || Clock::now() >= deadline) return m;
      std::this_thread::sleep_for(500ms);
    }
  }

  // GET on the exporter (plain HTTP through the same http::Client code).
  std::string exporter_get(std::string target) {
    http::Client client(io_.get_executor(),
                        http::Endpoint{.url = exporter_url_, .allow_plain_http = true});
    auto r = test_support::run_on(io_, client.send(http::Request{.target = std::move(target)}));
    EXPECT_TRUE(r && r->status == 200)
        << (r ? "HTTP " + std::to_string(r->status) + ": " + r->body : r.error().message);
    return r && r->status == 200 ? r->body : "";
  }

  static inline fs::path dir_;
  static inline pid_t exporter_pid_ = 0;
  static inline std::string exporter_url_;
  static inline std::string prometheus_url_;
  boost::asio::io_context io_;
  std::unique_ptr<Prometheus> prometheus_;
};

bool near(double value, double target, double tolerance) {
  return std::abs(value - target) <= tolerance;
}

TEST_F(PrometheusTest, TracksTheExportersDistribution) {
  const auto spec = prometheus_policy(kQuantileQuery);
  // Until Prometheus has two scrapes of the exporter, the query is empty.
  auto first = measure_until(spec, 60s, [](const Measurement& m) {
    return m.reason == "QuerySucceeded" && near(m.seconds, 1.0, 0.1);
  });
  ASSERT_EQ(first.reason, "QuerySucceeded") << first.message;
  EXPECT_NEAR(first.seconds, 1.0, 0.1) << first.message;
  EXPECT_EQ(first.source, "Prometheus");
  EXPECT_TRUE(first.metrics_available);
  EXPECT_FALSE(first.fallback);
  ASSERT_TRUE(first.last_good);
  EXPECT_DOUBLE_EQ(first.last_good->seconds, first.seconds);

  // Slower propagation: the 99th percentile follows within seconds (the old
  // observations only thin out the tail; the range is 1m).
  EXPECT_THAT(exporter_get("/set?p99=4"), HasSubstr("\"p99\": 4.0"));
  auto slower = measure_until(spec, 60s, [](const Measurement& m) {
    return m.reason == "QuerySucceeded" && near(m.seconds, 4.0, 0.4);
  });
  EXPECT_EQ(slower.reason, "QuerySucceeded") << slower.message;
  EXPECT_NEAR(slower.seconds, 4.0, 0.4) << slower.message;
  EXPECT_FALSE(slower.fallback);
}

TEST_F(PrometheusTest, EmptyResult) {
  auto m = measure_now(prometheus_policy("kubeproxy_network_programming_duration_seconds_count{"
                                         "job=\"nonexistent\"}",
                                         12),
                       std::nullopt);
  EXPECT_EQ(m.reason, "EmptyResult") << m.message;
  EXPECT_TRUE(m.fallback);
  EXPECT_FALSE(m.metrics_available);
  EXPECT_DOUBLE_EQ(m.seconds, 12);
  EXPECT_THAT(m.message, HasSubstr("query \"kube-proxy\": EmptyResult"));
  EXPECT_THAT(m.message, HasSubstr("using staticSeconds 12s"));
}

TEST_F(PrometheusTest, SyntaxErrorIsQueryFailed) {
  auto m = measure_now(prometheus_policy("histogram_quantile(0.99, sum by (le) (rate(x[1m]))"),
                       std::nullopt);
  EXPECT_EQ(m.reason, "QueryFailed") << m.message;
  EXPECT_THAT(m.message, HasSubstr("HTTP 400: bad_data:"));
  EXPECT_THAT(m.message, HasSubstr("parse error"));
  EXPECT_THAT(m.message, HasSubstr(prometheus_url_ + "/api/v1/query"));
  EXPECT_TRUE(m.fallback);
}

TEST_F(PrometheusTest, NaNSeveralSeriesAndNegative) {
  EXPECT_EQ(measure_now(prometheus_policy("vector(0) / 0"), std::nullopt).reason, "NotANumber");
  EXPECT_EQ(measure_now(prometheus_policy("vector(1) / 0"), std::nullopt).reason, "NotANumber");
  EXPECT_EQ(measure_now(prometheus_policy("vector(1) or label_replace(vector(2), \"a\", \"b\", "
                                          "\"\", \"\")"),
                        std::nullopt)
                .reason,
            "NotScalar");
  EXPECT_EQ(measure_now(prometheus_policy("up[5s]"), std::nullopt).reason, "NotScalar");
  EXPECT_EQ(measure_now(prometheus_policy("vector(-1)"), std::nullopt).reason, "Negative");
  auto scalar = measure_now(prometheus_policy("scalar(vector(2.5))"), std::nullopt);
  EXPECT_EQ(scalar.reason, "QuerySucceeded") << scalar.message;
  EXPECT_DOUBLE_EQ(scalar.seconds, 2.5);
}

// The exporter doubles as a fake Prometheus API that records the request:
// the token file's content goes out as a bearer token, re-read after rotation.
TEST_F(PrometheusTest, BearerTokenFromTheTokenFile) {
  const fs::path token = dir_ / "token";
  std::ofstream(token) << "first-token\n";
  PrometheusConfig config{.url = exporter_url_, .bearer_token_file = token, .timeout = 5s};
  auto p = make_prometheus(io_.get_executor(), config);
  ASSERT_TRUE(p) << p.error();
  auto spec = prometheus_policy("up");
  auto m = test_support::run_on(
      io_, measure(spec, p->get(), std::nullopt, std::chrono::system_clock::now()));
  EXPECT_EQ(m.reason, "QuerySucceeded") << m.message;
  EXPECT_THAT(exporter_get("/last-request"),
              HasSubstr("\"authorization\": \"Bearer first-token\""));

  std::ofstream(token) << "rotated-token\n";
  m = test_support::run_on(io_,
                           measure(spec, p->get(), std::nullopt, std::chrono::system_clock::now()));
  EXPECT_EQ(m.reason, "QuerySucceeded") << m.message;
  EXPECT_THAT(exporter_get("/last-request"),
              HasSubstr("\"authorization\": \"Bearer rotated-token\""));
}

// Last: stops the suite's Prometheus.
TEST_F(PrometheusTest, StoppedPrometheusIsUnreachableAndTheLastGoodValueIsHeld) {
  const auto spec = prometheus_policy(kQuantileQuery);
  auto good =
      measure_until(spec, 60s, [](const Measurement& m) { return m.reason == "QuerySucceeded"; });
  ASSERT_EQ(good.reason, "QuerySucceeded") << good.message;
  ASSERT_TRUE(good.last_good);

  stop_prometheus();
  auto m = measure_now(spec, good.last_good);
  EXPECT_EQ(m.reason, "Unreachable") << m.message;
  EXPECT_TRUE(m.fallback);
  EXPECT_FALSE(m.metrics_available);
  EXPECT_DOUBLE_EQ(m.seconds, good.seconds);
  EXPECT_EQ(m.sampled_at, good.sampled_at);
  EXPECT_THAT(m.message, HasSubstr("query \"kube-proxy\": Unreachable"));
  EXPECT_THAT(m.message, HasSubstr(prometheus_url_));
  EXPECT_THAT(m.message, HasSubstr("using the last good value"));
  ASSERT_TRUE(m.last_good);
  EXPECT_DOUBLE_EQ(m.last_good->seconds, good.seconds);
}

}  // namespace
}  // namespace gracekeeper::propagation

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s WORK_DIR\n", argv[0]);
    return 2;
  }
  gracekeeper::propagation::g_work_dir = std::filesystem::absolute(argv[1]);
  return RUN_ALL_TESTS();
}
