// http::Client over real sockets on 127.0.0.1: the connection pool, the
// retry rule, streaming, the endpoint's path prefix and bearer token.
#include "gracekeeper/http/client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <chrono>

#include "loopback.h"

namespace gracekeeper::http {
namespace {

using namespace std::chrono_literals;
using namespace test;
using ::testing::HasSubstr;

using Answer = std::expected<Response, Error>;

class HttpClientTest : public ::testing::Test {
 protected:
  static Options fast() {
    Options o;
    o.retry.initial_backoff = 1ms;
    o.retry.max_backoff = 4ms;
    return o;
  }
  std::unique_ptr<Client> client(Options o = fast(), std::string url = {}) {
    Endpoint e{.url = url.empty() ? server_.url() : url, .allow_plain_http = true};
    return std::make_unique<Client>(io_.get_executor(), std::move(e), std::move(o));
  }
  Answer get(Client& c, std::string target = "/x") {
    return run(io_, c.send(Request{.target = std::move(target)}));
  }

  asio::io_context io_;
  LoopbackServer server_{io_};
};

TEST_F(HttpClientTest, SequentialRequestsReuseOnePooledConnection) {
  auto c = client();
  for (int i = 0; i < 5; ++i) {
    auto r = get(*c);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, 200u);
    EXPECT_EQ(r->body, "ok");
  }
  EXPECT_EQ(server_.requests.size(), 5u);
  EXPECT_EQ(server_.connections, 1);
}

TEST_F(HttpClientTest, ConnectionCloseIsNotPooled) {
  server_.respond = [](const WireRequest&) { return response(200, "ok", "Connection: close\r\n"); };
  auto c = client();
  ASSERT_TRUE(get(*c));
  ASSERT_TRUE(get(*c));
  EXPECT_EQ(server_.connections, 2);
}

TEST_F(HttpClientTest, AConnectionTheServerClosedWhileIdleIsReplaced) {
  server_.close_after_response = true;  // keep-alive by the headers, closed in fact
  auto c = client();
  for (int i = 0; i < 3; ++i) {
    auto r = get(*c);
    ASSERT_TRUE(r) << i << ": " << r.error().message;
  }
  EXPECT_EQ(server_.requests.size(), 3u);  // each sent once: none went into a closed socket
  EXPECT_EQ(server_.connections, 3);
}

TEST_F(HttpClientTest, ThePoolKeepsAtMostMaxIdleConnections) {
  using namespace boost::asio::experimental::awaitable_operators;
  Options o = fast();
  o.max_idle_connections = 1;
  auto c = client(o);
  // (Named requests: GCC 12 mishandles aggregate temporaries in co_await.)
  auto three = [](Client& client) -> asio::awaitable<bool> {
    Request a{.target = "/a"};
    Request b{.target = "/b"};
    Request d{.target = "/c"};
    auto [ra, rb, rd] = co_await (client.send(a) && client.send(b) && client.send(d));
    co_return ra&& rb&& rd;
  };
  EXPECT_TRUE(run(io_, three(*c)));
  EXPECT_EQ(server_.connections, 3);  // concurrent: one connection each
  EXPECT_TRUE(run(io_, three(*c)));
  EXPECT_EQ(server_.connections, 5);  // one came back from the pool, two are new
}

TEST_F(HttpClientTest, RetriesTransientAnswersOfIdempotentRequests) {
  int n = 0;
  server_.respond = [&](const WireRequest&) {
    return ++n < 3 ? response(503, "busy") : response(200, "ok");
  };
  auto c = client();
  auto r = get(*c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(server_.requests.size(), 3u);
}

TEST_F(HttpClientTest, ANonIdempotentRequestIsNotRepeatedAfterA5xx) {
  server_.respond = [](const WireRequest&) { return response(503, "busy"); };
  auto c = client();
  auto r = run(io_, c->send(Request{.method = Verb::post, .target = "/x", .idempotent = false}));
  ASSERT_TRUE(r);  // the answer, not an error: the caller reads the status
  EXPECT_EQ(r->status, 503u);
  EXPECT_EQ(server_.requests.size(), 1u);
}

TEST_F(HttpClientTest, TooManyRequestsIsRetriedWhateverTheVerb) {
  int n = 0;
  server_.respond = [&](const WireRequest&) {
    return ++n == 1 ? response(429, "slow down") : response(201, "made");
  };
  auto c = client();
  auto r = run(io_, c->send(Request{.method = Verb::post, .target = "/x", .idempotent = false}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201u);
  EXPECT_EQ(server_.requests.size(), 2u);
}

TEST_F(HttpClientTest, GivesUpAfterTheLastAttemptWithTheLastAnswer) {
  server_.respond = [](const WireRequest&) { return response(500, "broken"); };
  Options o = fast();
  o.retry.attempts = 3;
  auto c = client(o);
  auto r = get(*c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500u);
  EXPECT_EQ(r->body, "broken");
  EXPECT_EQ(server_.requests.size(), 3u);
}

TEST_F(HttpClientTest, AFinalAnswerIsNotRetried) {
  server_.respond = [](const WireRequest&) { return response(404, "no"); };
  auto c = client();
  auto r = get(*c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404u);
  EXPECT_EQ(server_.requests.size(), 1u);
}

TEST_F(HttpClientTest, RetryAfterIsAFloorForTheWait) {
  int n = 0;
  server_.respond = [&](const WireRequest&) {
    return ++n == 1 ? response(429, "later", "Retry-After: 1\r\n") : response(200, "ok");
  };
  auto c = client();
  const auto start = std::chrono::steady_clock::now();
  auto r = get(*c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1s);
}

// The call gave up on a 429 (its last attempt): the same request, sent
// again by the caller (a work queue's requeue), waits out Retry-After first;
// another request does not.
TEST_F(HttpClientTest, RetryAfterHoldsTheSameRequestPastTheCallThatGaveUp) {
  std::vector<std::chrono::steady_clock::time_point> at;
  server_.respond = [&](const WireRequest& req) {
    at.push_back(std::chrono::steady_clock::now());
    return req.target() == "/x" && at.size() == 1 ? response(429, "later", "Retry-After: 1\r\n")
                                                  : response(200, "ok");
  };
  Options o = fast();
  o.retry.attempts = 1;
  auto c = client(o);
  auto first = get(*c);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 429u);
  EXPECT_GT(c->held_for(Request{.target = "/x"}), 500ms);
  EXPECT_EQ(c->held_for(Request{.target = "/y"}), 0ms);
  EXPECT_EQ(c->held_for(Request{.method = Verb::post, .target = "/x"}), 0ms);
  EXPECT_GT(c->held_for(Request{.target = "/x?timeoutSeconds=7"}), 500ms);  // any query

  auto other = get(*c, "/y");  // not held
  ASSERT_TRUE(other);
  ASSERT_EQ(at.size(), 2u);
  EXPECT_LT(at[1] - at[0], 500ms);

  auto again = get(*c);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200u);
  ASSERT_EQ(at.size(), 3u);
  EXPECT_GE(at[2] - at[0], 1s);
  EXPECT_EQ(c->held_for(Request{.target = "/x"}), 0ms);
}

// Creates share their collection's path: a refused create holds the same
// body again, not the other creates.
TEST_F(HttpClientTest, ARefusedCreateHoldsItsOwnBodyOnly) {
  server_.respond = [](const WireRequest& req) {
    return req.body() == "a" ? response(429, "later", "Retry-After: 5\r\n") : response(201, "ok");
  };
  Options o = fast();
  o.retry.attempts = 1;
  auto c = client(o);
  auto post = [&](std::string body) {
    return run(io_, c->send(Request{.method = Verb::post,
                                    .target = "/events",
                                    .content_type = "application/json",
                                    .body = std::move(body),
                                    .idempotent = false}));
  };
  auto a = post("a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 429u);
  EXPECT_GT(c->held_for(Request{.method = Verb::post, .target = "/events", .body = "a"}), 4s);
  EXPECT_EQ(c->held_for(Request{.method = Verb::post, .target = "/events", .body = "b"}), 0ms);
  const auto start = std::chrono::steady_clock::now();
  auto b = post("b");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 201u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

// A cancelled wait for the hold ends the call without sending anything.
TEST_F(HttpClientTest, ACallCancelledWhileHeldSendsNothing) {
  server_.respond = [](const WireRequest&) {
    return response(429, "later", "Retry-After: 30\r\n");
  };
  Options o = fast();
  o.retry.attempts = 1;
  auto c = client(o);
  ASSERT_TRUE(get(*c));
  using namespace boost::asio::experimental::awaitable_operators;
  // (A named request: GCC 12 mishandles aggregate temporaries in co_await.)
  auto task = [](Client& client) -> asio::awaitable<std::variant<Answer, std::monostate>> {
    asio::steady_timer t(co_await asio::this_coro::executor, 100ms);
    Request x{.target = "/x"};
    co_return co_await (client.send(x) || t.async_wait(asio::use_awaitable));
  };
  const auto start = std::chrono::steady_clock::now();
  auto r = run(io_, task(*c));
  EXPECT_EQ(r.index(), 1u);  // the timer won
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(server_.requests.size(), 1u);
}

// A refused stream's Retry-After holds the next stream of the same path (a
// watch's timeoutSeconds differs every time).
TEST_F(HttpClientTest, ARefusedStreamsRetryAfterHoldsTheNextOne) {
  std::vector<std::chrono::steady_clock::time_point> at;
  server_.respond = [&](const WireRequest&) {
    at.push_back(std::chrono::steady_clock::now());
    return at.size() == 1 ? response(429, "later", "Retry-After: 1\r\n") : response(200, "done");
  };
  auto c = client();
  auto ignore = [](std::string_view) { return true; };
  auto first = run(io_, c->stream(Request{.target = "/w?timeoutSeconds=300"}, ignore));
  ASSERT_TRUE(first);
  ASSERT_TRUE(first->refused);
  auto second = run(io_, c->stream(Request{.target = "/w?timeoutSeconds=411"}, ignore));
  ASSERT_TRUE(second);
  EXPECT_FALSE(second->refused);
  ASSERT_EQ(at.size(), 2u);
  EXPECT_GE(at[1] - at[0], 1s);
}

TEST_F(HttpClientTest, TheCallersClassifierDecides) {
  server_.respond = [](const WireRequest&) { return response(409, "try again"); };
  auto c = client();
  Classifier again = [](const Response&) { return Verdict{.retry = Retry::IfIdempotent}; };
  auto r = run(io_, c->send(Request{.target = "/x"}, again));
  ASSERT_TRUE(r);
  EXPECT_EQ(server_.requests.size(), 4u);  // the default attempts
}

TEST_F(HttpClientTest, ConnectionRefusedIsRetriedThenATransportError) {
  Options o = fast();
  o.retry.attempts = 2;
  const std::string url = "http://127.0.0.1:" + std::to_string(closed_port(io_));
  auto c = client(o, url);
  // Not written: safe to repeat even for a POST.
  auto r = run(io_, c->send(Request{.method = Verb::post, .target = "/x", .idempotent = false}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::Transport);
  EXPECT_FALSE(r.error().request_written);
  EXPECT_THAT(r.error().message, HasSubstr("connecting to 127.0.0.1:"));
}

TEST_F(HttpClientTest, ABodyOverTheCapIsABadResponseAndNotRetried) {
  server_.respond = [](const WireRequest&) { return response(200, std::string(2000, 'x')); };
  Options o = fast();
  o.max_body_bytes = 1000;
  auto c = client(o);
  auto r = get(*c);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::BadResponse);
  EXPECT_THAT(r.error().message, HasSubstr("larger than 1000 bytes"));
  EXPECT_EQ(server_.requests.size(), 1u);
}

TEST_F(HttpClientTest, PathPrefixTokenAndHeaders) {
  int calls = 0;
  Endpoint e{.url = server_.url() + "/prefix/", .allow_plain_http = true};
  e.token = [&]() -> std::expected<std::string, std::string> {
    return "t" + std::to_string(++calls);
  };
  Options o = fast();
  o.user_agent = "gk-test";
  Client c(io_.get_executor(), std::move(e), o);
  Request put{
      .method = Verb::put, .target = "/a?b=c", .content_type = "application/json", .body = "{}"};
  ASSERT_TRUE(run(io_, c.send(put)));
  ASSERT_TRUE(run(io_, c.send(Request{.target = "/d"})));
  ASSERT_EQ(server_.requests.size(), 2u);
  const auto& first = server_.requests[0];
  EXPECT_EQ(first.method(), bhttp::verb::put);
  EXPECT_EQ(first.target(), "/prefix/a?b=c");
  EXPECT_EQ(first[bhttp::field::authorization], "Bearer t1");
  EXPECT_EQ(first[bhttp::field::user_agent], "gk-test");
  EXPECT_EQ(first[bhttp::field::content_type], "application/json");
  EXPECT_EQ(first.body(), "{}");
  EXPECT_EQ(server_.requests[1][bhttp::field::authorization], "Bearer t2");  // read per request
}

TEST_F(HttpClientTest, ATokenThatCannotBeReadFailsTheRequestBeforeConnecting) {
  Endpoint e{.url = server_.url(), .allow_plain_http = true};
  e.token = []() -> std::expected<std::string, std::string> {
    return std::unexpected("/run/token: no such file");
  };
  Options o = fast();
  o.retry.attempts = 1;
  Client c(io_.get_executor(), std::move(e), o);
  auto r = run(io_, c.send(Request{.target = "/x"}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "bearer token: /run/token: no such file");
  EXPECT_EQ(server_.connections, 0);
}

TEST_F(HttpClientTest, StreamsAChunkedBodyUntilTheHandlerStops) {
  server_.respond = [](const WireRequest&) {
    return std::string{
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        "3\r\none\r\n3\r\ntwo\r\n5\r\nthree\r\n0\r\n\r\n"};
  };
  auto c = client();
  std::string seen;
  auto all = run(io_, c->stream(Request{.target = "/w"}, [&](std::string_view piece) {
    seen += piece;
    return true;
  }));
  ASSERT_TRUE(all);
  EXPECT_FALSE(all->refused);
  EXPECT_EQ(all->end, StreamEnd::Closed);
  EXPECT_EQ(seen, "onetwothree");

  seen.clear();
  auto stopped = run(io_, c->stream(Request{.target = "/w"}, [&](std::string_view piece) {
    seen += piece;
    return false;
  }));
  ASSERT_TRUE(stopped);
  EXPECT_EQ(stopped->end, StreamEnd::Stopped);
  EXPECT_EQ(seen, "one");
}

TEST_F(HttpClientTest, ARefusedStreamIsReadWhole) {
  server_.respond = [](const WireRequest&) { return response(410, "gone"); };
  auto c = client();
  auto r = run(io_, c->stream(Request{.target = "/w"}, [](std::string_view) { return true; }));
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->refused);
  EXPECT_EQ(r->refused->status, 410u);
  EXPECT_EQ(r->refused->body, "gone");
}

TEST(ClassifyByStatus, Table) {
  struct Case {
    unsigned status;
    Retry want;
  };
  for (auto [status, want] :
       {Case{429, Retry::Always}, Case{408, Retry::IfIdempotent}, Case{500, Retry::IfIdempotent},
        Case{503, Retry::IfIdempotent}, Case{504, Retry::IfIdempotent}, Case{400, Retry::Never},
        Case{404, Retry::Never}, Case{409, Retry::Never}, Case{422, Retry::Never},
        Case{301, Retry::Never}}) {
    Response r;
    r.status = status;
    EXPECT_EQ(classify_by_status(r).retry, want) << status;
  }
  Response later;
  later.status = 429;
  later.retry_after = 7s;
  EXPECT_EQ(classify_by_status(later).retry_after, 7s);
}

}  // namespace
}  // namespace gracekeeper::http
