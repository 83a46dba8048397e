// make_prometheus: configuration checks, and queries over a real loopback
// socket to a scripted HTTP server (the request line, the bearer token, and
// how each kind of answer becomes a QueryError).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/url/parse.hpp>
#include <filesystem>
#include <fstream>
#include <functional>

#include "gracekeeper/propagation/propagation.h"

namespace gracekeeper::propagation {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

std::string http_response(int status, std::string_view body,
                          std::string_view content_type = "application/json") {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: " + std::string{content_type} +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string{body};
}

// Answers every request with respond(request); `silent` accepts and never answers.
class LoopbackServer {
 public:
  explicit LoopbackServer(asio::io_context& io)
      : acceptor_(io, tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}) {
    asio::co_spawn(io, accept_loop(), asio::detached);
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  std::function<std::string(const http::request<http::string_body>&)> respond;
  std::vector<http::request<http::string_body>> requests;
  bool silent = false;

 private:
  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(use_nothrow);
      if (ec) co_return;
      asio::co_spawn(acceptor_.get_executor(), serve(std::move(socket)), asio::detached);
    }
  }
  asio::awaitable<void> serve(tcp::socket socket) {
    boost::beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> req;
      auto [ec, n] = co_await http::async_read(socket, buffer, req, use_nothrow);
      if (ec) co_return;
      requests.push_back(req);
      if (silent) {
        asio::steady_timer forever(socket.get_executor(), 1h);
        co_await forever.async_wait(use_nothrow);
        co_return;
      }
      const std::string raw = respond(req);
      auto [wec, wn] = co_await asio::async_write(socket, asio::buffer(raw), use_nothrow);
      if (wec) co_return;
    }
  }
  tcp::acceptor acceptor_;
};

class PrometheusHttpTest : public ::testing::Test {
 protected:
  std::expected<double, QueryError> query(Prometheus& p, std::string promql) {
    std::optional<std::expected<double, QueryError>> out;
    asio::co_spawn(io_, p.query(std::move(promql)), [&](std::exception_ptr e, auto value) {
      if (e) std::rethrow_exception(e);
      out.emplace(std::move(value));
      io_.stop();
    });
    io_.restart();
    io_.run();
    return std::move(*out);
  }
  std::unique_ptr<Prometheus> make(PrometheusConfig config) {
    auto p = make_prometheus(io_.get_executor(), std::move(config));
    EXPECT_TRUE(p) << p.error();
    return p ? std::move(*p) : nullptr;
  }
  std::filesystem::path temp_file(std::string name, std::string content) {
    auto path = std::filesystem::temp_directory_path() /
                ("gk-prom-" + std::to_string(getpid()) + "-" + name);
    std::ofstream(path) << content;
    files_.push_back(path);
    return path;
  }
  ~PrometheusHttpTest() override {
    for (const auto& f : files_) std::filesystem::remove(f);
  }

  asio::io_context io_;
  LoopbackServer server_{io_};
  std::vector<std::filesystem::path> files_;
};

TEST_F(PrometheusHttpTest, SendsTheQueryUnderThePathPrefixWithTheToken) {
  server_.respond = [](const auto&) {
    return http_response(
        200, R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},)"
             R"("value":[1717000000,"2.75"]}]}})");
  };
  auto token = temp_file("token", "s3cret\n");
  auto p = make({.url = server_.url() + "/prom/", .bearer_token_file = token});
  ASSERT_TRUE(p);
  const std::string promql =
      "histogram_quantile(0.99, sum by (le) (rate(x_bucket{job=\"a b\"}[1m])))";
  auto r = query(*p, promql);
  ASSERT_TRUE(r) << r.error().reason << ": " << r.error().message;
  EXPECT_DOUBLE_EQ(*r, 2.75);
  ASSERT_EQ(server_.requests.size(), 1u);
  const auto& req = server_.requests[0];
  EXPECT_EQ(req.method(), http::verb::get);
  auto target = boost::urls::parse_origin_form(req.target());
  ASSERT_TRUE(target);
  EXPECT_EQ(target->path(), "/prom/api/v1/query");
  auto params = target->params();
  ASSERT_NE(params.find("query"), params.end());
  EXPECT_EQ((*params.find("query")).value, promql);
  EXPECT_EQ(req[http::field::authorization], "Bearer s3cret");

  // The token file is re-read: rotation works without a restart.
  std::ofstream(token) << "rotated\n";
  ASSERT_TRUE(query(*p, "vector(1)"));
  EXPECT_EQ(server_.requests.at(1)[http::field::authorization], "Bearer rotated");
}

TEST_F(PrometheusHttpTest, NoTokenFileNoAuthorization) {
  server_.respond = [](const auto&) {
    return http_response(200,
                         R"({"status":"success","data":{"resultType":"scalar","result":[1,"1"]}})");
  };
  auto p = make({.url = server_.url()});
  ASSERT_TRUE(query(*p, "scalar(1)"));
  EXPECT_EQ(server_.requests.at(0).count(http::field::authorization), 0u);
}

TEST_F(PrometheusHttpTest, PrometheusErrorBodyReachesTheQueryError) {
  const std::string long_error(500, 'x');  // longer than kube's 300-character excerpt
  server_.respond = [&](const auto&) {
    return http_response(
        400,
        R"({"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:5: parse error: )" +
            long_error + R"("})");
  };
  auto p = make({.url = server_.url()});
  auto r = query(*p, "sum(");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "QueryFailed");
  EXPECT_THAT(r.error().message,
              AllOf(StartsWith(server_.url() + "/api/v1/query, query sum(: HTTP 400: bad_data: "),
                    HasSubstr("parse error: " + long_error)));
}

TEST_F(PrometheusHttpTest, NonPrometheusErrorsAreHttpError) {
  server_.respond = [](const auto&) {
    return http_response(502, "<html>Bad Gateway</html>", "text/html");
  };
  auto p = make({.url = server_.url()});
  auto r = query(*p, "up");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "HttpError");
  EXPECT_THAT(r.error().message, HasSubstr("HTTP 502: <html>Bad Gateway</html>"));

  server_.respond = [](const auto&) { return http_response(200, "<html>login</html>"); };
  auto login = query(*p, "up");
  ASSERT_FALSE(login);
  EXPECT_EQ(login.error().reason, "BadResponse");
}

TEST_F(PrometheusHttpTest, ConnectionRefusedIsUnreachable) {
  unsigned short port = 0;
  {
    tcp::acceptor probe(io_, {asio::ip::make_address("127.0.0.1"), 0});
    port = probe.local_endpoint().port();
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  auto p = make({.url = url});
  auto r = query(*p, "up");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "Unreachable");
  EXPECT_THAT(r.error().message, AllOf(StartsWith(url + "/api/v1/query, query up: "),
                                       HasSubstr("connecting to 127.0.0.1:")));
}

TEST_F(PrometheusHttpTest, SilentServerTimesOut) {
  server_.silent = true;
  auto p = make({.url = server_.url(), .timeout = 300ms});
  const auto start = std::chrono::steady_clock::now();
  auto r = query(*p, "up");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "Unreachable");
  EXPECT_THAT(r.error().message, HasSubstr("timed out"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST_F(PrometheusHttpTest, ConfigurationErrors) {
  auto error_of = [&](PrometheusConfig c) {
    auto p = make_prometheus(io_.get_executor(), std::move(c));
    return p ? std::string{"accepted"} : p.error();
  };
  EXPECT_THAT(error_of({.url = "prometheus:9090"}),
              HasSubstr("must start with http:// or https://"));
  EXPECT_THAT(error_of({.url = "ftp://prometheus"}), HasSubstr("must start with http://"));
  EXPECT_THAT(error_of({.url = "not a url"}), HasSubstr("\"not a url\""));
  EXPECT_THAT(error_of({.url = "http://"}), HasSubstr("has no host"));
  EXPECT_THAT(error_of({.url = "http://p:9090/?x=1"}), HasSubstr("must not have a query"));
  EXPECT_THAT(error_of({.url = "http://user:pw@p:9090"}), HasSubstr("must not carry credentials"));
  EXPECT_THAT(error_of({.url = "http://p:9090", .timeout = 0ms}), HasSubstr("timeout"));
  EXPECT_THAT(error_of({.url = "http://p:9090", .ca_file = "/etc/hosts"}),
              HasSubstr("not https://"));
  EXPECT_THAT(error_of({.url = "https://p:9090", .ca_file = "/nonexistent/ca.pem"}),
              HasSubstr("/nonexistent/ca.pem"));
  EXPECT_THAT(error_of({.url = "https://p:9090", .ca_file = temp_file("ca", "not a pem")}),
              HasSubstr("no PEM certificate"));
  EXPECT_THAT(error_of({.url = "http://p:9090", .bearer_token_file = "/nonexistent/token"}),
              HasSubstr("/nonexistent/token"));
  EXPECT_EQ(error_of({.url = "https://prometheus.monitoring.svc:9090/prefix"}), "accepted");
  EXPECT_EQ(error_of({.url = "HTTP://Prometheus:9090"}), "accepted");
}

}  // namespace
}  // namespace gracekeeper::propagation
