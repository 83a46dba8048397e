// The HTTP exchange and the REST client on in-memory streams: raw HTTP
// answers written by a scripted server into beast::test::stream, split in odd
// places, cut short, oversized; errors decoded; the retry rule. And the real
// transport on a loopback socket: plain http:// only when the config allows it.
#include "gracekeeper/kube/client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "../../support/kube_transport.h"  // the seam between the client and sockets
#include "../../support/run_on.h"

namespace gracekeeper::kube {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;
using ::testing::HasSubstr;

using test_support::run_on;

// One scripted answer: raw bytes written in `pieces`, the reader limited to
// `read_size` bytes per read, the connection closed afterwards. Or a
// failure before any byte was exchanged (connect refused).
struct Reply {
  std::vector<std::string> pieces{};
  std::size_t read_size = 0;  // 0: unlimited
  std::optional<detail::TransportError> fail{};
};

std::string http_response(int status, std::string_view body, std::string_view extra_headers = "") {
  return "HTTP/1.1 " + std::to_string(status) +
         " X\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + std::string{extra_headers} + "\r\n" + std::string{body};
}

std::string status_body(int code, std::string_view reason, std::string_view message,
                        json details = nullptr) {
  json s = {{"kind", "Status"},   {"apiVersion", "v1"}, {"status", "Failure"},
            {"message", message}, {"reason", reason},   {"code", code}};
  if (!details.is_null()) s["details"] = details;
  return s.dump();
}

// A Transport whose every connection is an in-memory stream pair; the far
// end replays the next Reply and records the request it received.
class ScriptedTransport final : public detail::Transport {
 public:
  explicit ScriptedTransport(asio::any_io_executor ex) : ex_(std::move(ex)) {}

  std::deque<Reply> replies;
  std::vector<http::request<http::string_body>> requests;
  Timeouts timeouts;
  std::size_t max_body = 64u << 20;

  asio::awaitable<std::expected<detail::HttpResponse, detail::TransportError>> send(
      const detail::HttpRequest& r) override {
    auto reply = next();
    if (reply.fail) co_return std::unexpected(*reply.fail);
    beast::test::stream client(ex_);
    beast::test::stream server(ex_);
    client.connect(server);
    if (reply.read_size) client.read_size(reply.read_size);
    asio::co_spawn(ex_, serve(std::move(server), std::move(reply.pieces)), asio::detached);
    beast::flat_buffer buffer;
    auto wire = detail::make_wire_request(r, head_);
    auto out = co_await detail::exchange(client, buffer, wire, timeouts, max_body);
    if (!out) co_return std::unexpected(std::move(out.error()));
    last_reusable = out->reusable;
    co_return std::move(out->response);
  }

  asio::awaitable<std::expected<detail::StreamResult, detail::TransportError>> stream(
      const detail::HttpRequest& r, const ChunkHandler& on_chunk) override {
    auto reply = next();
    if (reply.fail) co_return std::unexpected(*reply.fail);
    beast::test::stream client(ex_);
    beast::test::stream server(ex_);
    client.connect(server);
    if (reply.read_size) client.read_size(reply.read_size);
    asio::co_spawn(ex_, serve(std::move(server), std::move(reply.pieces)), asio::detached);
    beast::flat_buffer buffer;
    auto wire = detail::make_wire_request(r, head_);
    co_return co_await detail::exchange_streaming(client, buffer, wire, timeouts, max_body,
                                                  on_chunk);
  }

  bool last_reusable = false;

 private:
  Reply next() {
    if (replies.empty()) {
      Reply r;
      r.fail = detail::TransportError{.message = "no scripted reply"};
      return r;
    }
    Reply r = std::move(replies.front());
    replies.pop_front();
    return r;
  }

  asio::awaitable<void> serve(beast::test::stream server, std::vector<std::string> pieces) {
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    auto [ec, n] = co_await http::async_read(server, buffer, req, detail::use_nothrow);
    if (ec) co_return;
    requests.push_back(std::move(req));
    for (const auto& piece : pieces) {
      auto [wec, wn] = co_await asio::async_write(server, asio::buffer(piece), detail::use_nothrow);
      if (wec) co_return;
    }
    server.close();  // EOF after the scripted bytes
  }

  asio::any_io_executor ex_;
  detail::RequestHead head_{.host = "api.test:6443", .user_agent = "gk-test"};
};

class ClientTest : public ::testing::Test {
 protected:
  ClientTest() {
    auto t = std::make_unique<ScriptedTransport>(io_.get_executor());
    transport_ = t.get();
    ClientOptions options;
    options.retry = {.attempts = 4,
                     .initial_backoff = std::chrono::milliseconds{1},
                     .max_backoff = std::chrono::milliseconds{2}};
    client_.emplace(std::move(t), options);
  }
  void reply(std::string raw) { transport_->replies.push_back(Reply{.pieces = {std::move(raw)}}); }
  template <class T>
  T run(asio::awaitable<T> task) {
    return run_on(io_, std::move(task));
  }

  asio::io_context io_;
  ScriptedTransport* transport_;
  std::optional<Client> client_;
};

// ---------------------------------------------------------------- HTTP framing

TEST_F(ClientTest, ChunkedBodySplitInOddPlaces) {
  const std::string body = R"({"kind":"ConfigMap","metadata":{"name":"x"},"data":{"k":"v"}})";
  std::string chunked =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  // Chunks of 7, 1 and the rest; the wire is then cut at every 3rd byte.
  std::vector<std::string> parts = {body.substr(0, 7), body.substr(7, 1), body.substr(8)};
  for (const auto& p : parts) {
    char size[16];
    std::snprintf(size, sizeof size, "%zx", p.size());
    chunked += std::string{size} + "\r\n" + p + "\r\n";
  }
  chunked += "0\r\n\r\n";
  Reply r;
  for (std::size_t i = 0; i < chunked.size(); i += 5) r.pieces.push_back(chunked.substr(i, 5));
  r.read_size = 3;
  transport_->replies.push_back(std::move(r));
  auto got = run(client_->get(resources::config_maps, "ns", "x"));
  ASSERT_TRUE(got) << got.error().format();
  EXPECT_EQ(got->dump(), json::parse(body).dump());
  EXPECT_TRUE(transport_->last_reusable);
}

TEST_F(ClientTest, RequestLineAndHeaders) {
  reply(http_response(200, "{}"));
  ApplyOptions o{.field_manager = "gracekeeper", .force = true};
  auto r = run(client_->apply(resources::deployments, "prod", "web", {{"kind", "Deployment"}}, o));
  ASSERT_TRUE(r) << r.error().format();
  ASSERT_EQ(transport_->requests.size(), 1u);
  const auto& req = transport_->requests[0];
  EXPECT_EQ(req.method(), http::verb::patch);
  EXPECT_EQ(req.target(),
            "/apis/apps/v1/namespaces/prod/deployments/web?fieldManager=gracekeeper&force=true");
  EXPECT_EQ(req[http::field::content_type], "application/apply-patch+yaml");
  EXPECT_EQ(req[http::field::host], "api.test:6443");
  EXPECT_EQ(req[http::field::accept], "application/json");
  EXPECT_EQ(json::parse(req.body()), json({{"kind", "Deployment"}}));

  reply(http_response(200, R"({"items":[]})"));
  ListOptions lo{.label_selector = "app in (a,b)", .limit = 5};
  ASSERT_TRUE(run(client_->list(resources::config_maps, "", lo)));
  EXPECT_EQ(transport_->requests[1].target(),
            "/api/v1/configmaps?labelSelector=app%20in%20%28a%2Cb%29&limit=5");
}

TEST_F(ClientTest, ConnectionCloseIsNotReused) {
  reply(http_response(200, "{}", "Connection: close\r\n"));
  ASSERT_TRUE(run(client_->get(resources::namespaces, "", "x")));
  EXPECT_FALSE(transport_->last_reusable);
}

TEST_F(ClientTest, TwoMegabyteBody) {
  std::string big(2 << 20, 'a');
  const std::string body = json({{"data", {{"big", big}}}}).dump();
  Reply r;
  const std::string raw = http_response(200, body);
  for (std::size_t i = 0; i < raw.size(); i += 65'521) r.pieces.push_back(raw.substr(i, 65'521));
  transport_->replies.push_back(std::move(r));
  auto got = run(client_->get(resources::config_maps, "ns", "big"));
  ASSERT_TRUE(got) << got.error().format();
  EXPECT_EQ((*got)["data"]["big"].get<std::string>().size(), big.size());
}

TEST_F(ClientTest, BodyOverTheCapIsBadResponse) {
  transport_->max_body = 1000;
  reply(http_response(200, json({{"x", std::string(5000, 'b')}}).dump()));
  auto got = run(client_->get(resources::config_maps, "ns", "big"));
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().reason, ApiError::Reason::BadResponse);
  EXPECT_THAT(got.error().message, HasSubstr("larger than 1000"));
  EXPECT_EQ(transport_->requests.size(), 1u);  // not transient: not retried
}

TEST_F(ClientTest, MalformedResponseIsBadResponse) {
  reply("HTTP/1.1 abc nonsense\r\n\r\n");
  auto got = run(client_->get(resources::config_maps, "ns", "x"));
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().reason, ApiError::Reason::BadResponse) << got.error().format();
}

TEST_F(ClientTest, NotJsonIsBadResponse) {
  reply(http_response(200, "<html>proxy</html>"));
  auto got = run(client_->get(resources::config_maps, "ns", "x"));
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().reason, ApiError::Reason::BadResponse);
}

// ---------------------------------------------------------------- errors

TEST_F(ClientTest, StatusBodiesAreDecoded) {
  reply(http_response(404, status_body(404, "NotFound", R"(configmaps "x" not found)",
                                       {{"name", "x"}, {"kind", "configmaps"}})));
  auto nf = run(client_->get(resources::config_maps, "ns", "x"));
  ASSERT_FALSE(nf);
  EXPECT_EQ(nf.error().reason, ApiError::Reason::NotFound);
  EXPECT_EQ(nf.error().http_status, 404);
  EXPECT_EQ(nf.error().format(), R"(NotFound (404): configmaps "x" not found)");

  json conflict_details = {
      {"causes", json::array({{{"reason", "FieldManagerConflict"},
                               {"message", "conflict with \"other\" using apps/v1"},
                               {"field", ".spec.replicas"}}})}};
  reply(http_response(
      409, status_body(409, "Conflict", "Apply failed with 1 conflict", conflict_details)));
  ApplyOptions o{.field_manager = "me"};
  auto c = run(client_->apply(resources::deployments, "ns", "web", json::object(), o));
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().reason, ApiError::Reason::Conflict);
  ASSERT_EQ(c.error().causes.size(), 1u);
  EXPECT_EQ(c.error().causes[0].field, ".spec.replicas");
  EXPECT_EQ(c.error().causes[0].reason, "FieldManagerConflict");
  EXPECT_THAT(c.error().format(), HasSubstr(R"(.spec.replicas: conflict with "other")"));
  EXPECT_EQ(transport_->requests.size(), 2u);  // conflicts are not retried
}

TEST(ApiErrorTest, DecodesWithoutStatus) {
  auto e = decode_api_error(502, "<html>Bad Gateway</html>");
  EXPECT_EQ(e.reason, ApiError::Reason::ServerError);
  EXPECT_EQ(e.message, "<html>Bad Gateway</html>");
  EXPECT_TRUE(e.transient());

  EXPECT_EQ(decode_api_error(410, status_body(410, "Expired", "too old resource version")).reason,
            ApiError::Reason::Gone);
  EXPECT_EQ(decode_api_error(500, status_body(500, "ServerTimeout", "try again")).reason,
            ApiError::Reason::Timeout);
  EXPECT_EQ(decode_api_error(422, "").reason, ApiError::Reason::Invalid);
  EXPECT_EQ(decode_api_error(409, status_body(409, "AlreadyExists", "exists")).reason,
            ApiError::Reason::AlreadyExists);
  auto throttled = decode_api_error(
      429, status_body(429, "TooManyRequests", "slow down", {{"retryAfterSeconds", 3}}));
  EXPECT_EQ(throttled.reason, ApiError::Reason::TooManyRequests);
  EXPECT_EQ(throttled.retry_after, std::chrono::seconds{3});
  EXPECT_FALSE(decode_api_error(403, "").transient());
}

// A write's answer read with read_object = false: only metadata.generation,
// and the parse stops there (a cut answer after it is still read).
TEST(MetadataGeneration, ReadsOnlyTheTopLevelMetadatasGeneration) {
  const std::string answer =
      R"({"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"web",)"
      R"("labels":{"generation":"7"},"generation":12,"annotations":{"a":"b"}},)"
      R"("spec":{"template":{"metadata":{"generation":99}}}})";
  EXPECT_EQ(metadata_generation(answer), 12);
  EXPECT_EQ(metadata_generation(answer.substr(0, answer.find("\"annotations\""))), 12);
  EXPECT_EQ(
      metadata_generation(R"({"spec":{"metadata":{"generation":4}},"metadata":{"generation":5}})"),
      5);
  EXPECT_EQ(metadata_generation(R"({"metadata":{"name":"x"},"generation":3})"), std::nullopt);
  EXPECT_EQ(metadata_generation(R"({"metadata":{"generation":"3"}})"), std::nullopt);
  EXPECT_EQ(metadata_generation(R"({"metadata":{"generation":1.5}})"), std::nullopt);
  EXPECT_EQ(metadata_generation(R"({"metadata":{"generation":18446744073709551615}})"),
            std::nullopt);
  EXPECT_EQ(metadata_generation(R"([{"metadata":{"generation":3}}])"), std::nullopt);
  EXPECT_EQ(metadata_generation("{}"), std::nullopt);
  EXPECT_EQ(metadata_generation(""), std::nullopt);
  EXPECT_EQ(metadata_generation("{\"metadata\":{\"gen"), std::nullopt);
  EXPECT_EQ(metadata_generation("not json"), std::nullopt);
}

// ---------------------------------------------------------------- retries

TEST_F(ClientTest, TooManyRequestsIsRetriedHonouringRetryAfter) {
  reply(http_response(429, status_body(429, "TooManyRequests", "slow down"), "Retry-After: 1\r\n"));
  reply(http_response(201, R"({"metadata":{"name":"x"}})"));
  const auto start = std::chrono::steady_clock::now();
  auto r = run(client_->create(resources::config_maps, "ns", {{"metadata", {{"name", "x"}}}}));
  ASSERT_TRUE(r) << r.error().format();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds{900});
  EXPECT_EQ(transport_->requests.size(), 2u);  // POST too: the server refused it before acting
}

// A call that gave up on a 429 (its last attempt) leaves the request held:
// the caller's retry (the work queue requeues a failed reconcile within
// milliseconds) goes out no sooner than the Status's retryAfterSeconds. A
// Deployment of another name is not held.
TEST(ClientRetryAfter, AnApplyThatGaveUpOnA429IsHeldForItsRetryAfter) {
  asio::io_context io;
  auto t = std::make_unique<ScriptedTransport>(io.get_executor());
  ScriptedTransport* transport = t.get();
  ClientOptions options;
  options.retry.attempts = 1;
  Client client(std::move(t), options);
  auto reply = [&](std::string raw) { transport->replies.push_back(Reply{.pieces = {raw}}); };
  reply(http_response(
      429, status_body(429, "TooManyRequests", "slow down", {{"retryAfterSeconds", 1}})));
  reply(http_response(200, R"({"metadata":{"name":"api"}})"));
  reply(http_response(200, R"({"metadata":{"name":"web"}})"));
  ApplyOptions o;
  o.field_manager = "gracekeeper";
  o.force = true;
  auto apply = [&](std::string name) {
    return run_on(io, client.apply(resources::deployments, "ns", name,
                                   json{{"metadata", {{"name", name}}}}, o));
  };
  auto first = apply("web");
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().reason, ApiError::Reason::TooManyRequests);
  EXPECT_EQ(first.error().retry_after, std::chrono::seconds{1});

  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(apply("api"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds{500});
  ASSERT_TRUE(apply("web"));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds{900});
  EXPECT_EQ(transport->requests.size(), 3u);
}

TEST_F(ClientTest, ServerErrorsRetriedForIdempotentCallsOnly) {
  for (int i = 0; i < 4; ++i) reply(http_response(503, "{}"));
  auto get = run(client_->get(resources::config_maps, "ns", "x"));
  ASSERT_FALSE(get);
  EXPECT_EQ(get.error().reason, ApiError::Reason::ServerError);
  EXPECT_EQ(transport_->requests.size(), 4u);  // all attempts used

  reply(http_response(504, status_body(504, "Timeout", "timed out")));
  auto post = run(client_->create(resources::config_maps, "ns", json::object()));
  ASSERT_FALSE(post);
  EXPECT_EQ(post.error().reason, ApiError::Reason::Timeout);
  EXPECT_EQ(transport_->requests.size(), 5u);  // a POST that timed out may have been done

  reply(http_response(500, "{}"));
  reply(http_response(200, "{}"));
  auto jp = run(client_->json_patch(resources::config_maps, "ns", "x", json::array()));
  ASSERT_FALSE(jp);
  EXPECT_EQ(transport_->requests.size(), 6u);
  transport_->replies.clear();
}

TEST_F(ClientTest, TruncatedResponseIsTransportAndRetriedForGet) {
  const std::string full = http_response(200, R"({"a":"0123456789"})");
  reply(full.substr(0, full.size() - 5));  // then EOF
  reply(full);
  auto r = run(client_->get(resources::config_maps, "ns", "x"));
  ASSERT_TRUE(r) << r.error().format();
  EXPECT_EQ((*r)["a"], "0123456789");
  EXPECT_EQ(transport_->requests.size(), 2u);

  reply(full.substr(0, full.size() - 5));
  auto post = run(client_->create(resources::config_maps, "ns", json::object()));
  ASSERT_FALSE(post);
  EXPECT_EQ(post.error().reason, ApiError::Reason::Transport);
  EXPECT_THAT(post.error().message, HasSubstr("reading the response body"));
  EXPECT_EQ(transport_->requests.size(), 3u);
}

TEST_F(ClientTest, ConnectFailureRetriedEvenForPost) {
  transport_->replies.push_back(
      Reply{.fail = detail::TransportError{.message = "connecting: refused"}});
  reply(http_response(201, "{}"));
  auto r = run(client_->create(resources::config_maps, "ns", json::object()));
  ASSERT_TRUE(r) << r.error().format();
}

// ---------------------------------------------------------------- streaming

std::string chunked_stream(const std::vector<std::string>& chunks, bool terminate) {
  std::string raw =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  for (const auto& c : chunks) {
    char size[16];
    std::snprintf(size, sizeof size, "%zx", c.size());
    raw += std::string{size} + "\r\n" + c + "\r\n";
  }
  if (terminate) raw += "0\r\n\r\n";
  return raw;
}

TEST_F(ClientTest, WatchHandsOverEveryByte) {
  const std::string events = R"({"type":"ADDED","object":{"metadata":{"name":"a"}}})"
                             "\n"
                             R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}})"
                             "\n";
  // An event split across chunks, and the wire split inside chunk headers.
  const std::string raw =
      chunked_stream({events.substr(0, 10), events.substr(10, 40), events.substr(50)}, true);
  Reply r;
  for (std::size_t i = 0; i < raw.size(); i += 7) r.pieces.push_back(raw.substr(i, 7));
  r.read_size = 4;
  transport_->replies.push_back(std::move(r));
  std::string received;
  int calls = 0;
  WatchOptions o{.resource_version = "5"};
  auto end = run(client_->watch(resources::config_maps, "ns", o, [&](std::string_view b) {
    received.append(b);
    ++calls;
    return true;
  }));
  ASSERT_TRUE(end) << end.error().format();
  EXPECT_EQ(*end, WatchEnd::Closed);
  EXPECT_EQ(received, events);
  EXPECT_GT(calls, 3);
  EXPECT_EQ(transport_->requests[0].target(),
            "/api/v1/namespaces/ns/configmaps?watch=1&resourceVersion=5&allowWatchBookmarks=true"
            "&timeoutSeconds=300");
}

TEST_F(ClientTest, WatchStopsWhenTheHandlerSaysSo) {
  reply(chunked_stream({"first\n", "second\n", "third\n"}, false));
  std::string received;
  auto end = run(client_->watch(resources::config_maps, "ns", {}, [&](std::string_view b) {
    received.append(b);
    return received.find("second") == std::string::npos;
  }));
  ASSERT_TRUE(end) << end.error().format();
  EXPECT_EQ(*end, WatchEnd::Stopped);
  EXPECT_EQ(received, "first\nsecond\n");
}

TEST_F(ClientTest, WatchCutMidStreamIsTransport) {
  reply(chunked_stream({"first\n"}, false));  // then EOF without the last chunk
  auto end =
      run(client_->watch(resources::config_maps, "ns", {}, [](std::string_view) { return true; }));
  ASSERT_FALSE(end);
  EXPECT_EQ(end.error().reason, ApiError::Reason::Transport);
}

TEST_F(ClientTest, WatchRefusedWithStatus) {
  reply(http_response(410, status_body(410, "Expired", "too old resource version: 1 (5)")));
  auto end = run(client_->watch(resources::config_maps, "ns", {.resource_version = "1"},
                                [](std::string_view) { return true; }));
  ASSERT_FALSE(end);
  EXPECT_EQ(end.error().reason, ApiError::Reason::Gone);
  EXPECT_EQ(transport_->requests.size(), 1u);  // watches are never retried here
}

// ---------------------------------------------------------------- plain HTTP

// An HTTP/1.1 server on a loopback port that answers every request with
// `respond(request)` (raw bytes) on keep-alive connections.
class LoopbackServer {
 public:
  using tcp = asio::ip::tcp;
  explicit LoopbackServer(asio::io_context& io)
      : acceptor_(io, tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}) {
    asio::co_spawn(io, accept_loop(), asio::detached);
  }
  unsigned short port() const { return acceptor_.local_endpoint().port(); }

  std::function<std::string(const http::request<http::string_body>&)> respond = [](const auto&) {
    return http_response(200, "{}");
  };
  std::vector<http::request<http::string_body>> requests;
  int connections = 0;

 private:
  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(detail::use_nothrow);
      if (ec) co_return;
      ++connections;
      asio::co_spawn(acceptor_.get_executor(), serve(std::move(socket)), asio::detached);
    }
  }
  asio::awaitable<void> serve(tcp::socket socket) {
    beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> req;
      auto [ec, n] = co_await http::async_read(socket, buffer, req, detail::use_nothrow);
      if (ec) co_return;
      requests.push_back(req);
      const std::string raw = respond(req);
      auto [wec, wn] = co_await asio::async_write(socket, asio::buffer(raw), detail::use_nothrow);
      if (wec) co_return;
    }
  }
  tcp::acceptor acceptor_;
};

// Runs `task` until it completes, while the server keeps listening.
template <class T>
T run_until_done(asio::io_context& io, asio::awaitable<T> task) {
  std::optional<T> out;
  asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T value) {
    if (e) std::rethrow_exception(e);
    out.emplace(std::move(value));
    io.stop();
  });
  io.restart();
  io.run();
  return std::move(*out);
}

TEST(PlainHttpTest, RefusedForTheKubernetesApi) {
  asio::io_context io;
  LoopbackServer server(io);
  ClusterConfig config;
  config.server = "http://127.0.0.1:" + std::to_string(server.port());
  ClientOptions options;
  options.retry.attempts = 1;  // a config error is not retried anyway; be quick
  Client client(io.get_executor(), config, options);
  auto got = run_until_done(io, client.get_raw("/readyz"));
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().reason, ApiError::Reason::Transport);
  EXPECT_EQ(got.error().message, "server \"" + config.server + "\" is not an https:// URL");
  EXPECT_EQ(server.connections, 0);  // not even a TCP connection
}

TEST(PlainHttpTest, AllowedWhenTheConfigSaysSo) {
  asio::io_context io;
  LoopbackServer server(io);
  server.respond = [](const auto& req) {
    if (req.target().ends_with("/bad")) {
      return http_response(400, R"({"status":"error","errorType":"bad_data","error":"no"})");
    }
    return http_response(200, R"({"ok":true})");
  };
  const auto token_file =
      std::filesystem::temp_directory_path() / ("gk-plain-http-token-" + std::to_string(getpid()));
  std::ofstream(token_file) << "first-token\n";
  ClusterConfig config;
  config.server = "http://127.0.0.1:" + std::to_string(server.port()) + "/prefix/";
  config.allow_plain_http = true;
  config.token_file = token_file;
  Client client(io.get_executor(), config);

  auto got = run_until_done(io, client.get_raw("/readyz"));
  ASSERT_TRUE(got) << got.error().format();
  EXPECT_EQ(*got, R"({"ok":true})");
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_EQ(server.requests[0].target(), "/prefix/readyz");
  EXPECT_EQ(server.requests[0][http::field::host], "127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(server.requests[0][http::field::authorization], "Bearer first-token");

  // A rotated token is sent on the next request, on the same pooled connection.
  std::ofstream(token_file) << "second-token\n";
  // A non-2xx answer is an ApiError (the whole answer of a non-Kubernetes
  // server is http::Client's business: test/unit/http).
  auto bad = run_until_done(io, client.get_raw("/bad"));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().http_status, 400);
  ASSERT_EQ(server.requests.size(), 2u);
  EXPECT_EQ(server.requests[1][http::field::authorization], "Bearer second-token");
  EXPECT_EQ(server.connections, 1);
  std::filesystem::remove(token_file);
}

TEST(PlainHttpTest, ConnectionRefusedIsTransport) {
  asio::io_context io;
  unsigned short port = 0;
  {
    asio::ip::tcp::acceptor probe(io, {asio::ip::make_address("127.0.0.1"), 0});
    port = probe.local_endpoint().port();
  }  // closed: nothing listens there now
  ClusterConfig config;
  config.server = "http://127.0.0.1:" + std::to_string(port);
  config.allow_plain_http = true;
  ClientOptions options;
  options.retry.attempts = 1;
  Client client(io.get_executor(), config, options);
  auto got = run_until_done(io, client.get_raw("/x"));
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().reason, ApiError::Reason::Transport);
  EXPECT_THAT(got.error().message, HasSubstr("connecting to 127.0.0.1:" + std::to_string(port)));
}

TEST(PlainHttpTest, OtherSchemesStillRefused) {
  asio::io_context io;
  ClusterConfig config;
  config.server = "ftp://127.0.0.1:21";
  config.allow_plain_http = true;
  ClientOptions options;
  options.retry.attempts = 1;  // a config error is not retried anyway; be quick
  Client client(io.get_executor(), config, options);
  auto got = run_until_done(io, client.get_raw("/x"));
  ASSERT_FALSE(got);
  EXPECT_THAT(got.error().message, HasSubstr("is not an http:// or https:// URL"));
}

TEST(ResourcePathTest, CoreGroupsAndNames) {
  EXPECT_EQ(resource_path(resources::namespaces, "ignored", "kube-system"),
            "/api/v1/namespaces/kube-system");
  EXPECT_EQ(resource_path(resources::deployments, "ns", "web", "status"),
            "/apis/apps/v1/namespaces/ns/deployments/web/status");
  EXPECT_EQ(resource_path(resources::deployments, ""), "/apis/apps/v1/deployments");
  EXPECT_EQ(resource_path(resources::config_maps, "ns", "a b"),
            "/api/v1/namespaces/ns/configmaps/a%20b");
}

}  // namespace
}  // namespace gracekeeper::kube
