// The informer on in-memory streams: the cache diff on relist, a watch cut in
// the middle of an event, a 410 in the stream, filtering by the projection.
#include "gracekeeper/kube/informer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "../../support/kube_transport.h"  // the seam between the client and sockets

namespace gracekeeper::kube {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// ------------------------------------------------------------------ diff_cache

TEST(DiffCache, AddsUpdatesDeletes) {
  VersionMap old{{"ns/a", "1"}, {"ns/b", "2"}, {"ns/c", "3"}};
  VersionMap fresh{{"ns/a", "1"}, {"ns/b", "7"}, {"ns/d", "8"}};
  CacheDiff d = diff_cache(old, fresh);
  EXPECT_THAT(d.added, ElementsAre("ns/d"));
  EXPECT_THAT(d.updated, ElementsAre("ns/b"));
  EXPECT_THAT(d.deleted, ElementsAre("ns/c"));
}

TEST(DiffCache, EmptySides) {
  VersionMap some{{"a", "1"}, {"b", "2"}};
  EXPECT_THAT(diff_cache({}, some).added, ElementsAre("a", "b"));
  EXPECT_THAT(diff_cache(some, {}).deleted, ElementsAre("a", "b"));
  CacheDiff same = diff_cache(some, some);
  EXPECT_THAT(same.added, IsEmpty());
  EXPECT_THAT(same.updated, IsEmpty());
  EXPECT_THAT(same.deleted, IsEmpty());
}

TEST(ObjectKey, NamespacedAndClusterScoped) {
  EXPECT_EQ(object_key({{"metadata", {{"namespace", "ns"}, {"name", "x"}}}}), "ns/x");
  EXPECT_EQ(object_key({{"metadata", {{"name", "node-1"}}}}), "node-1");
  EXPECT_EQ(object_key(json::array()), "");
}

// ------------------------------------------------------------ scripted server

// One answer: raw bytes written in `pieces`, then the connection is closed
// (mid-body if the pieces stop there).
struct Reply {
  std::vector<std::string> pieces{};
  bool hold_open = false;  // after the pieces, keep the connection open until the client leaves
};

// Every request takes the next Reply; none left = connection refused.
class ScriptedTransport final : public detail::Transport {
 public:
  explicit ScriptedTransport(asio::any_io_executor ex) : ex_(std::move(ex)) {}

  std::deque<Reply> replies;
  std::vector<std::string> targets;  // request targets, in order

  // beast::test::stream ignores per-operation cancellation (the TLS stream
  // honours it, see the integration tests), so a test ends held-open
  // watches by closing their server side, including any that would only be
  // held after this call (a watch whose reply is still being written).
  void close_held() {
    closing_ = true;
    for (auto* s : held_) s->close();
  }

  asio::awaitable<std::expected<detail::HttpResponse, detail::TransportError>> send(
      const detail::HttpRequest& r) override {
    targets.push_back(r.target);
    if (replies.empty()) co_return std::unexpected(refused());
    beast::test::stream client(ex_);
    start(client, next());
    beast::flat_buffer buffer;
    auto wire = detail::make_wire_request(r, head_);
    auto out = co_await detail::exchange(client, buffer, wire, timeouts_, 64u << 20);
    if (!out) co_return std::unexpected(std::move(out.error()));
    co_return std::move(out->response);
  }

  asio::awaitable<std::expected<detail::StreamResult, detail::TransportError>> stream(
      const detail::HttpRequest& r, const ChunkHandler& on_chunk) override {
    targets.push_back(r.target);
    if (replies.empty()) co_return std::unexpected(refused());
    beast::test::stream client(ex_);
    start(client, next());
    beast::flat_buffer buffer;
    auto wire = detail::make_wire_request(r, head_);
    co_return co_await detail::exchange_streaming(client, buffer, wire, timeouts_, 1u << 20,
                                                  on_chunk);
  }

 private:
  static detail::TransportError refused() {
    detail::TransportError e;
    e.message = "connection refused (script exhausted)";
    return e;
  }
  Reply next() {
    Reply r = std::move(replies.front());
    replies.pop_front();
    return r;
  }
  void start(beast::test::stream& client, Reply reply) {
    auto server = std::make_unique<beast::test::stream>(ex_);
    client.connect(*server);
    asio::co_spawn(ex_, serve(std::move(server), std::move(reply.pieces), reply.hold_open),
                   asio::detached);
  }
  asio::awaitable<void> serve(std::unique_ptr<beast::test::stream> server,
                              std::vector<std::string> pieces, bool hold_open) {
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    auto [ec, n] = co_await http::async_read(*server, buffer, req, detail::use_nothrow);
    if (ec) co_return;
    for (const auto& piece : pieces) {
      auto [wec, wn] =
          co_await asio::async_write(*server, asio::buffer(piece), detail::use_nothrow);
      if (wec) co_return;
    }
    if (hold_open && !closing_) {  // returns when either end closes
      held_.push_back(server.get());
      char byte;
      co_await server->async_read_some(asio::buffer(&byte, 1), detail::use_nothrow);
      std::erase(held_, server.get());
    }
    server->close();
  }

  asio::any_io_executor ex_;
  std::vector<beast::test::stream*> held_;
  bool closing_ = false;
  detail::RequestHead head_{.host = "api.test:6443", .user_agent = "gk-test"};
  Timeouts timeouts_{};
};

json cm(const std::string& name, const std::string& rv, json data = json::object()) {
  return {{"kind", "ConfigMap"},
          {"metadata", {{"namespace", "ns"}, {"name", name}, {"resourceVersion", rv}}},
          {"data", std::move(data)}};
}

std::string list_reply(const std::string& rv, std::vector<json> items) {
  json list = {{"kind", "ConfigMapList"},
               {"metadata", {{"resourceVersion", rv}}},
               {"items", json(std::move(items))}};
  std::string body = list.dump();
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string event_line(const std::string& type, const json& object) {
  return json{{"type", type}, {"object", object}}.dump() + "\n";
}

const std::string kChunkedHead =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

std::string chunk(std::string_view data) {
  char size[16];
  std::snprintf(size, sizeof size, "%zx", data.size());
  return std::string{size} + "\r\n" + std::string{data} + "\r\n";
}

// The projection used below: the "v" data field; objects labelled by a
// "skip" data key are filtered out.
std::optional<std::string> project_v(const json& o) {
  const json& data = o.at("data");
  if (data.contains("skip")) return std::nullopt;
  return data.value("v", "");
}

class InformerTest : public ::testing::Test {
 protected:
  InformerTest() {
    auto t = std::make_unique<ScriptedTransport>(io_.get_executor());
    transport_ = t.get();
    ClientOptions co;
    co.retry.attempts = 1;
    client_.emplace(std::move(t), co);
    // Most tests script the paginated LIST path; the WatchList tests below
    // switch to the streaming list.
    make_informer(/*watch_list=*/false);
  }

  void make_informer(bool watch_list) {
    InformerOptions o;
    o.namespace_ = "ns";
    o.initial_backoff = std::chrono::milliseconds{1};
    o.max_backoff = std::chrono::milliseconds{5};
    o.seed = 42;
    o.watch_list = watch_list;
    informer_.emplace(*client_, resources::config_maps, o, project_v);
    InformerHandlers h;
    h.on_add = [this](const std::string& k) { log_.push_back("add " + k); };
    h.on_update = [this](const std::string& k) { log_.push_back("update " + k); };
    h.on_delete = [this](const std::string& k) { log_.push_back("delete " + k); };
    informer_->add_handlers(h);
  }

  // Runs the informer until `done` holds (checked every ms) or 10 s passed.
  bool run_until(std::function<bool()> done) {
    bool ok = false;
    bool finished = false;
    asio::co_spawn(io_, informer_->run(), [&](std::exception_ptr e) {
      finished = true;
      if (e) std::rethrow_exception(e);
    });
    auto watcher = [&]() -> asio::awaitable<void> {
      asio::steady_timer t(io_);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
      while (std::chrono::steady_clock::now() < deadline) {
        if (done()) {
          ok = true;
          break;
        }
        t.expires_after(std::chrono::milliseconds{1});
        co_await t.async_wait(asio::use_awaitable);
      }
      informer_->stop();
      transport_->close_held();
    };
    asio::co_spawn(io_, watcher(), asio::detached);
    io_.run();
    EXPECT_TRUE(finished) << "run() did not end after stop()";
    return ok;
  }

  asio::io_context io_;
  ScriptedTransport* transport_;
  std::optional<Client> client_;
  std::optional<Informer<std::string>> informer_;
  std::vector<std::string> log_;
};

TEST_F(InformerTest, ListThenWatchThenReconnectAfterCutMidEvent) {
  transport_->replies.push_back(
      {{list_reply("10", {cm("a", "5", {{"v", "1"}}), cm("b", "6", {{"v", "2"}})})}});
  // The first watch: one whole event, then the connection dies inside the
  // next event's chunk (the chunk announces more bytes than arrive).
  std::string modified_b = event_line("MODIFIED", cm("b", "12", {{"v", "3"}}));
  std::string cut = kChunkedHead + chunk(event_line("ADDED", cm("c", "11", {{"v", "x"}})));
  char size[16];
  std::snprintf(size, sizeof size, "%zx\r\n", modified_b.size());
  cut += size + modified_b.substr(0, modified_b.size() / 2);
  transport_->replies.push_back({{cut}});
  // The re-watch (from 11) replays the lost event, deletes a, then the
  // server closes the stream cleanly.
  transport_->replies.push_back(
      {{kChunkedHead + chunk(modified_b) + chunk(event_line("DELETED", cm("a", "13"))) +
        chunk(event_line("BOOKMARK",
                         {{"kind", "ConfigMap"}, {"metadata", {{"resourceVersion", "14"}}}})) +
        "0\r\n\r\n"}});

  ASSERT_TRUE(run_until([&] { return informer_->resource_version() == "14"; }))
      << informer_->last_error();
  EXPECT_TRUE(informer_->has_synced());
  EXPECT_EQ(informer_->versions(), (VersionMap{{"ns/b", "12"}, {"ns/c", "11"}}));
  ASSERT_NE(informer_->get("ns/b"), nullptr);
  EXPECT_EQ(*informer_->get("ns/b"), "3");
  EXPECT_EQ(informer_->get("ns/a"), nullptr);
  EXPECT_THAT(log_, ElementsAre("add ns/a", "add ns/b", "add ns/c", "update ns/b", "delete ns/a"));
  ASSERT_GE(transport_->targets.size(), 3u);
  EXPECT_THAT(transport_->targets[0], HasSubstr("limit=100"));
  EXPECT_THAT(transport_->targets[1], HasSubstr("resourceVersion=10"));
  EXPECT_THAT(transport_->targets[1], HasSubstr("allowWatchBookmarks=true"));
  EXPECT_THAT(transport_->targets[2], HasSubstr("resourceVersion=11"));
  EXPECT_GE(informer_->counters().watch_errors, 1u);
  EXPECT_GE(informer_->counters().watch_restarts, 1u);
  EXPECT_EQ(informer_->counters().relists, 0u);
}

std::string raw_reply(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The list is read item by item (SAX): only the top-level "items" are items,
// whatever the key order, nesting or escapes; metadata may come first or last.
TEST_F(InformerTest, ListPagesAreReadItemByItem) {
  transport_->replies.push_back(
      {{raw_reply(R"({"metadata":{"continue":"tok/1","resourceVersion":"10"},"kind":"List",)"
                  R"("items":[{"metadata":{"namespace":"ns","name":"a","resourceVersion":"5"},)"
                  R"("data":{"v":"\u00e9\"q","items":"[1]"},"spec":{"items":[{"x":[1,2.5,null,)"
                  R"(true]}]}},{"metadata":{"namespace":"ns","name":"b","resourceVersion":"6"},)"
                  R"("data":{"skip":"1"}}]})")}});
  transport_->replies.push_back({{raw_reply(
      R"({"kind":"List","items":[{"metadata":{"namespace":"ns","name":"c",)"
      R"("resourceVersion":"7"},"data":{"v":"3"}}],"metadata":{"resourceVersion":"99"}})")}});
  transport_->replies.push_back({{kChunkedHead}, /*hold_open=*/true});
  ASSERT_TRUE(run_until([&] { return informer_->has_synced(); })) << informer_->last_error();
  EXPECT_EQ(informer_->versions(), (VersionMap{{"ns/a", "5"}, {"ns/c", "7"}}));
  ASSERT_NE(informer_->get("ns/a"), nullptr);
  EXPECT_EQ(*informer_->get("ns/a"), "\xc3\xa9\"q");
  // Every page is from the first page's snapshot: watch from its version.
  EXPECT_EQ(informer_->resource_version(), "10");
  ASSERT_GE(transport_->targets.size(), 3u);
  // The most recent state, in pages: no resourceVersion=0, which the watch
  // cache answers with the whole list at once, whatever the limit.
  EXPECT_EQ(transport_->targets[0], "/api/v1/namespaces/ns/configmaps?limit=100");
  EXPECT_EQ(transport_->targets[1], "/api/v1/namespaces/ns/configmaps?limit=100&continue=tok%2F1");
  EXPECT_THAT(transport_->targets[2], HasSubstr("resourceVersion=10"));
  EXPECT_EQ(informer_->counters().lists, 1u);
}

TEST_F(InformerTest, ListPageThatIsNotJsonIsAListError) {
  transport_->replies.push_back({{raw_reply(R"({"kind":"List","items":[{"metadata":)")}});
  transport_->replies.push_back({{raw_reply("[1,2]")}});
  transport_->replies.push_back({{list_reply("10", {cm("a", "5", {{"v", "1"}})})}});
  transport_->replies.push_back({{kChunkedHead}, /*hold_open=*/true});
  ASSERT_TRUE(run_until([&] { return informer_->has_synced(); })) << informer_->last_error();
  EXPECT_EQ(informer_->counters().list_errors, 2u);
  EXPECT_EQ(informer_->counters().lists, 1u);
  EXPECT_EQ(informer_->versions(), (VersionMap{{"ns/a", "5"}}));
  EXPECT_THAT(log_, ElementsAre("add ns/a"));
}

// The first list is announced item by item as its pages arrive, before it
// is whole: the operator starts work on the first page.
TEST_F(InformerTest, FirstListIsAnnouncedAsItsPagesArrive) {
  std::vector<std::string> seen;  // "<key> <pages requested> <synced>" at each add
  InformerHandlers h;
  h.on_add = [&](const std::string& k) {
    seen.push_back(k + " " + std::to_string(transport_->targets.size()) + " " +
                   (informer_->has_synced() ? "synced" : "listing"));
  };
  informer_->add_handlers(h);
  transport_->replies.push_back({{raw_reply(
      R"({"kind":"List","metadata":{"continue":"t1","resourceVersion":"10"},"items":[)"
      R"({"metadata":{"namespace":"ns","name":"a","resourceVersion":"5"},"data":{"v":"1"}}]})")}});
  transport_->replies.push_back({{raw_reply(
      R"({"kind":"List","metadata":{"resourceVersion":"10"},"items":[)"
      R"({"metadata":{"namespace":"ns","name":"b","resourceVersion":"6"},"data":{"v":"2"}}]})")}});
  transport_->replies.push_back({{kChunkedHead}, /*hold_open=*/true});
  ASSERT_TRUE(run_until([&] { return informer_->has_synced(); })) << informer_->last_error();
  EXPECT_THAT(seen, ElementsAre("ns/a 1 listing", "ns/b 2 listing"));
  EXPECT_EQ(informer_->versions(), (VersionMap{{"ns/a", "5"}, {"ns/b", "6"}}));
  EXPECT_EQ(informer_->resource_version(), "10");
  EXPECT_EQ(informer_->counters().lists, 1u);
}

// A first list that fails half-way leaves what it announced in the cache; the
// retry replaces it with a diff, so nothing announced is left behind.
TEST_F(InformerTest, FirstListThatFailsHalfWayIsRetriedWithADiff) {
  transport_->replies.push_back({{raw_reply(
      R"({"kind":"List","metadata":{"continue":"t1","resourceVersion":"10"},"items":[)"
      R"({"metadata":{"namespace":"ns","name":"a","resourceVersion":"5"},"data":{"v":"1"}},)"
      R"({"metadata":{"namespace":"ns","name":"b","resourceVersion":"6"},"data":{"v":"2"}}]})")}});
  transport_->replies.push_back({{raw_reply(R"({"kind":"List","items":[{"metadata":)")}});
  // The retry: a is gone, b changed, c is new.
  transport_->replies.push_back(
      {{list_reply("20", {cm("b", "16", {{"v", "3"}}), cm("c", "17", {{"v", "4"}})})}});
  transport_->replies.push_back({{kChunkedHead}, /*hold_open=*/true});
  ASSERT_TRUE(run_until([&] { return informer_->has_synced(); })) << informer_->last_error();
  EXPECT_EQ(informer_->counters().list_errors, 1u);
  EXPECT_EQ(informer_->counters().lists, 1u);
  EXPECT_EQ(informer_->versions(), (VersionMap{{"ns/b", "16"}, {"ns/c", "17"}}));
  EXPECT_THAT(log_, ElementsAre("add ns/a", "add ns/b", "delete ns/a", "add ns/c", "update ns/b"));
}

// The ERROR event of a watch whose resourceVersion was compacted away.
json expired_status() {
  return {{"kind", "Status"},
          {"status", "Failure"},
          {"reason", "Expired"},
          {"code", 410},
          {"message", "too old resource version: 10 (20)"}};
}

TEST_F(InformerTest, GoneEventRelistsAndEmitsTheGap) {
  transport_->replies.push_back(
      {{list_reply("10", {cm("a", "5", {{"v", "1"}}), cm("b", "6", {{"v", "2"}}),
                          cm("c", "7", {{"v", "3"}})})}});
  const json status = expired_status();
  transport_->replies.push_back(
      {{kChunkedHead + chunk(event_line("ERROR", status)) + "0\r\n\r\n"}});
  // During the gap: a changed, b deleted, c filtered out, d added.
  transport_->replies.push_back(
      {{list_reply("30", {cm("a", "21", {{"v", "9"}}), cm("c", "22", {{"skip", "1"}}),
                          cm("d", "23", {{"v", "4"}})})}});

  ASSERT_TRUE(run_until([&] { return informer_->counters().lists == 2; }))
      << informer_->last_error();
  EXPECT_EQ(informer_->versions(), (VersionMap{{"ns/a", "21"}, {"ns/d", "23"}}));
  EXPECT_EQ(informer_->counters().relists, 1u);
  EXPECT_THAT(log_, ElementsAre("add ns/a", "add ns/b", "add ns/c", "delete ns/b", "delete ns/c",
                                "add ns/d", "update ns/a"));
  // Every list, the relist after a 410 too, asks for the most recent state.
  ASSERT_GE(transport_->targets.size(), 3u);
  EXPECT_THAT(transport_->targets[0], Not(HasSubstr("resourceVersion")));
  EXPECT_THAT(transport_->targets[2], Not(HasSubstr("resourceVersion")));
}

TEST_F(InformerTest, GoneRefusalRelists) {
  transport_->replies.push_back({{list_reply("10", {cm("a", "5")})}});
  std::string body = json{
      {"kind", "Status"},
      {"status", "Failure"},
      {"reason", "Expired"},
      {"code", 410},
      {"message",
       "too old"}}.dump();
  transport_->replies.push_back(
      {{"HTTP/1.1 410 Gone\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body}});
  transport_->replies.push_back({{list_reply("20", {})}});
  ASSERT_TRUE(run_until([&] { return informer_->counters().lists == 2; }))
      << informer_->last_error();
  EXPECT_EQ(informer_->size(), 0u);
  EXPECT_THAT(log_, ElementsAre("add ns/a", "delete ns/a"));
}

TEST_F(InformerTest, ProjectionFiltersWatchEvents) {
  transport_->replies.push_back({{list_reply("10", {cm("a", "5", {{"v", "1"}})})}});
  transport_->replies.push_back(
      {{kChunkedHead + chunk(event_line("MODIFIED", cm("a", "11", {{"skip", "y"}}))) +
        chunk(event_line("ADDED", cm("b", "12", {{"skip", "y"}}))) +
        chunk(event_line("MODIFIED", cm("b", "13", {{"v", "now"}}))) +
        chunk(event_line("ADDED", cm("bad", "14", json::array()))) + "0\r\n\r\n"}});
  ASSERT_TRUE(run_until([&] { return informer_->resource_version() == "14"; }))
      << informer_->last_error();
  EXPECT_EQ(informer_->versions(), (VersionMap{{"ns/b", "13"}}));
  EXPECT_EQ(informer_->counters().projection_errors, 1u);
  EXPECT_THAT(log_, ElementsAre("add ns/a", "delete ns/a", "add ns/b"));
}

TEST_F(InformerTest, MalformedStreamReconnectsFromLastVersion) {
  transport_->replies.push_back({{list_reply("10", {})}});
  transport_->replies.push_back(
      {{kChunkedHead + chunk(event_line("ADDED", cm("a", "11", {{"v", "1"}}))) +
        chunk("{not json}\n") + "0\r\n\r\n"}});
  transport_->replies.push_back(
      {{kChunkedHead + chunk(event_line("ADDED", cm("b", "12", {{"v", "1"}}))) + "0\r\n\r\n"}});
  ASSERT_TRUE(run_until([&] { return informer_->size() == 2; })) << informer_->last_error();
  ASSERT_GE(transport_->targets.size(), 3u);
  EXPECT_THAT(transport_->targets[2], HasSubstr("resourceVersion=11"));
  EXPECT_GE(informer_->counters().watch_errors, 1u);
}

json initial_events_end(const std::string& rv) {
  return {{"kind", "ConfigMap"},
          {"metadata",
           {{"resourceVersion", rv}, {"annotations", {{"k8s.io/initial-events-end", "true"}}}}}};
}

TEST_F(InformerTest, WatchListSyncsFromInitialEventsThenWatches) {
  make_informer(/*watch_list=*/true);
  transport_->replies.push_back(
      {{kChunkedHead + chunk(event_line("ADDED", cm("a", "5", {{"v", "1"}}))) +
        chunk(event_line("ADDED", cm("b", "6", {{"v", "2"}}))) +
        chunk(event_line("BOOKMARK", initial_events_end("10"))) +
        chunk(event_line("MODIFIED", cm("b", "12", {{"v", "3"}})))},
       /*hold_open=*/true});
  ASSERT_TRUE(run_until([&] { return informer_->resource_version() == "12"; }))
      << informer_->last_error();
  EXPECT_TRUE(informer_->has_synced());
  EXPECT_EQ(informer_->versions(), (VersionMap{{"ns/a", "5"}, {"ns/b", "12"}}));
  EXPECT_THAT(log_, ElementsAre("add ns/a", "add ns/b", "update ns/b"));
  // One request: the streaming list, from the watch cache, then the watch.
  ASSERT_EQ(transport_->targets.size(), 1u);
  EXPECT_THAT(transport_->targets[0], HasSubstr("watch=1"));
  EXPECT_THAT(transport_->targets[0], HasSubstr("sendInitialEvents=true"));
  EXPECT_THAT(transport_->targets[0], HasSubstr("resourceVersionMatch=NotOlderThan"));
  EXPECT_THAT(transport_->targets[0], HasSubstr("allowWatchBookmarks=true"));
  EXPECT_THAT(transport_->targets[0], Not(HasSubstr("resourceVersion=")));
  EXPECT_EQ(informer_->counters().lists, 1u);
}

TEST_F(InformerTest, WatchListIsNotSyncedBeforeItsLastInitialEvent) {
  make_informer(/*watch_list=*/true);
  transport_->replies.push_back(
      {{kChunkedHead + chunk(event_line("ADDED", cm("a", "5", {{"v", "1"}}))) +
        chunk(event_line("ADDED", cm("b", "6", {{"v", "2"}}))) +
        chunk(event_line("BOOKMARK",
                         {{"kind", "ConfigMap"}, {"metadata", {{"resourceVersion", "7"}}}}))},
       /*hold_open=*/true});
  ASSERT_TRUE(run_until([&] { return informer_->size() == 2; })) << informer_->last_error();
  EXPECT_FALSE(informer_->has_synced());  // an ordinary bookmark does not end the list
}

TEST_F(InformerTest, WatchListAfterGoneReplacesTheStoreWithADiff) {
  make_informer(/*watch_list=*/true);
  const json status = expired_status();
  transport_->replies.push_back(
      {{kChunkedHead + chunk(event_line("ADDED", cm("a", "5", {{"v", "1"}}))) +
        chunk(event_line("ADDED", cm("b", "6", {{"v", "2"}}))) +
        chunk(event_line("BOOKMARK", initial_events_end("10"))) +
        chunk(event_line("ERROR", status)) + "0\r\n\r\n"}});
  // During the gap: a changed, b deleted, d added.
  transport_->replies.push_back(
      {{kChunkedHead + chunk(event_line("ADDED", cm("a", "21", {{"v", "9"}}))) +
        chunk(event_line("ADDED", cm("d", "23", {{"v", "4"}}))) +
        chunk(event_line("BOOKMARK", initial_events_end("30")))},
       /*hold_open=*/true});
  ASSERT_TRUE(run_until([&] { return informer_->counters().lists == 2; }))
      << informer_->last_error();
  EXPECT_EQ(informer_->versions(), (VersionMap{{"ns/a", "21"}, {"ns/d", "23"}}));
  EXPECT_EQ(informer_->counters().relists, 1u);
  EXPECT_THAT(log_, ElementsAre("add ns/a", "add ns/b", "delete ns/b", "add ns/d", "update ns/a"));
  ASSERT_EQ(transport_->targets.size(), 2u);
  EXPECT_THAT(transport_->targets[1], HasSubstr("sendInitialEvents=true"));
}

TEST_F(InformerTest, WatchListRefusedFallsBackToPaginatedLists) {
  make_informer(/*watch_list=*/true);
  std::string body = json{{"kind", "Status"},
                          {"status", "Failure"},
                          {"reason", "BadRequest"},
                          {"code", 400},
                          {"message", "sendInitialEvents is not supported"}}
                         .dump();
  transport_->replies.push_back(
      {{"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body}});
  transport_->replies.push_back({{list_reply("10", {cm("a", "5", {{"v", "1"}})})}});
  transport_->replies.push_back({{kChunkedHead}, /*hold_open=*/true});
  ASSERT_TRUE(run_until([&] { return informer_->has_synced(); })) << informer_->last_error();
  EXPECT_EQ(informer_->versions(), (VersionMap{{"ns/a", "5"}}));
  ASSERT_GE(transport_->targets.size(), 3u);
  EXPECT_THAT(transport_->targets[1], HasSubstr("?limit=100"));
  EXPECT_THAT(transport_->targets[1], Not(HasSubstr("resourceVersion")));
  EXPECT_THAT(transport_->targets[2], Not(HasSubstr("sendInitialEvents")));
}

TEST_F(InformerTest, StopEndsAnOpenWatch) {
  transport_->replies.push_back({{list_reply("10", {})}});
  // A watch that never ends on its own: headers, then silence.
  Reply open{{kChunkedHead + chunk(event_line("BOOKMARK", cm("x", "15")))}, true};
  transport_->replies.push_back(open);
  EXPECT_TRUE(run_until([&] { return informer_->resource_version() == "15"; }));
  EXPECT_EQ(informer_->counters().watch_restarts, 0u);
  EXPECT_EQ(informer_->counters().watch_errors, 0u);
}

}  // namespace
}  // namespace gracekeeper::kube
