// The pure parts of the event recorder (dedupe key, series state, JSON) and
// of leader election (MicroTime, lease records).
#include "gracekeeper/kube/events.h"

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "../../../src/kube/transport.h"  // private: the seam for a fake API server
#include "gracekeeper/kube/leader_election.h"

namespace gracekeeper::kube {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::system_clock;
using Kind = EventSeriesCache::Write::Kind;

EventRecord warning(std::string note = "drain-seconds: \"x\" is not a number") {
  EventRecord e;
  e.regarding = {"apps/v1", "Deployment", "shop", "web", "uid-1"};
  e.type = EventType::Warning;
  e.reason = "InvalidAnnotation";
  e.action = "Tune";
  e.note = std::move(note);
  return e;
}

const Clock::time_point t0 = Clock::time_point(1'800'000'000s);

TEST(DedupeKey, SameEventSameKey) {
  EXPECT_EQ(dedupe_key(warning()), dedupe_key(warning()));
}

TEST(DedupeKey, EachFieldCounts) {
  const auto base = dedupe_key(warning());
  auto e = warning();
  e.note = "other";
  EXPECT_NE(dedupe_key(e), base);
  e = warning();
  e.type = EventType::Normal;
  EXPECT_NE(dedupe_key(e), base);
  e = warning();
  e.reason = "Other";
  EXPECT_NE(dedupe_key(e), base);
  e = warning();
  e.regarding.uid = "uid-2";
  EXPECT_NE(dedupe_key(e), base);
  e = warning();
  e.regarding.name = "api";
  EXPECT_NE(dedupe_key(e), base);
}

TEST(DedupeKey, FieldBoundariesCannotBeForged) {
  auto a = warning();
  a.reason = "ab";
  a.note = "c";
  auto b = warning();
  b.reason = "a";
  b.note = "bc";
  EXPECT_NE(dedupe_key(a), dedupe_key(b));
}

// A waiting Event is kept as its key alone: the key must give the record back.
TEST(DedupeKey, DecodesBackToTheRecord) {
  auto e = warning("a note: with \"quotes\", 12:34 and a colon");
  e.regarding = {"", "Node", "", "node-1", ""};  // empty fields too
  auto decoded = decode_key(dedupe_key(e));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->regarding, e.regarding);
  EXPECT_EQ(decoded->type, EventType::Warning);
  EXPECT_EQ(decoded->reason, e.reason);
  EXPECT_EQ(decoded->note, e.note);
  EXPECT_EQ(decoded->action, "");  // not part of the key

  EventSeriesCache cache(4, 360s);
  const auto* entry = cache.observe(e, t0, "node-1.1");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->record().action, "Tune");
  EXPECT_EQ(entry->record().note, e.note);
}

TEST(DedupeKey, DecodingRefusesWhatIsNotAKey) {
  const std::string key = dedupe_key(warning());
  EXPECT_FALSE(decode_key(""));
  EXPECT_FALSE(decode_key(key.substr(0, key.size() - 1)));  // cut short
  EXPECT_FALSE(decode_key(key + "x"));                      // trailing bytes
  EXPECT_FALSE(decode_key("7:apps/v1"));                    // too few fields
  EXPECT_FALSE(decode_key("x:" + key));                     // not a length
  EXPECT_FALSE(decode_key("99999999999999999999999:a"));    // a length beyond the key
  auto odd = warning();
  std::string bad = dedupe_key(odd);
  bad.replace(bad.find("7:Warning"), 9, "7:Warnung");  // not a type
  EXPECT_FALSE(decode_key(bad));
}

TEST(EventSeriesCache, FirstOccurrenceCreatesWithoutSeries) {
  EventSeriesCache cache(16, 360s);
  ASSERT_TRUE(cache.observe(warning(), t0, "web.1"));
  auto w = cache.next_write(dedupe_key(warning()));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->kind, Kind::Create);
  EXPECT_EQ(w->name, "web.1");
  EXPECT_EQ(w->count, 1);
  auto body = event_object(*cache.find(w->key), w->count, "gracekeeper.dev/operator", "pod-a");
  EXPECT_FALSE(body.contains("series"));
  EXPECT_EQ(body["type"], "Warning");
  EXPECT_EQ(body["reason"], "InvalidAnnotation");
  EXPECT_EQ(body["action"], "Tune");
  EXPECT_EQ(body["reportingController"], "gracekeeper.dev/operator");
  EXPECT_EQ(body["reportingInstance"], "pod-a");
  EXPECT_EQ(body["regarding"]["kind"], "Deployment");
  EXPECT_EQ(body["regarding"]["uid"], "uid-1");
  EXPECT_EQ(body["metadata"]["namespace"], "shop");
  EXPECT_EQ(body["eventTime"], "2027-01-15T08:00:00.000000Z");
  cache.write_succeeded(*w);
  EXPECT_FALSE(cache.next_write(w->key));
  EXPECT_FALSE(cache.find(w->key)->writing);
}

TEST(EventSeriesCache, RepeatPatchesSeriesStartingAtTwo) {
  EventSeriesCache cache(16, 360s);
  const auto key = dedupe_key(warning());
  cache.observe(warning(), t0, "web.1");
  auto w = cache.next_write(key);
  cache.write_succeeded(*w);
  EXPECT_FALSE(cache.next_write(key));

  ASSERT_TRUE(cache.observe(warning(), t0 + 10s, "web.2"));
  w = cache.next_write(key);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->kind, Kind::PatchSeries);
  EXPECT_EQ(w->name, "web.1");
  EXPECT_EQ(w->count, 2);
  auto patch = series_patch(*cache.find(key), w->count);
  EXPECT_EQ(patch["series"]["count"], 2);
  EXPECT_EQ(patch["series"]["lastObservedTime"], "2027-01-15T08:00:10.000000Z");
  cache.write_succeeded(*w);
  EXPECT_FALSE(cache.next_write(key));
}

TEST(EventSeriesCache, ObservationsDuringAWriteCoalesce) {
  EventSeriesCache cache(16, 360s);
  const auto key = dedupe_key(warning());
  ASSERT_TRUE(cache.observe(warning(), t0, "web.1"));
  auto w = cache.next_write(key);                        // create in flight
  EXPECT_FALSE(cache.observe(warning(), t0 + 1s, "x"));  // no second writer
  EXPECT_FALSE(cache.observe(warning(), t0 + 2s, "y"));
  cache.write_succeeded(*w);
  w = cache.next_write(key);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->kind, Kind::PatchSeries);
  EXPECT_EQ(w->count, 3);
  cache.write_succeeded(*w);
  EXPECT_FALSE(cache.next_write(key));
}

TEST(EventSeriesCache, ManyBeforeTheFirstWriteCreateWithSeries) {
  EventSeriesCache cache(16, 360s);
  const auto key = dedupe_key(warning());
  EXPECT_TRUE(cache.observe(warning(), t0, "web.1"));
  for (int i = 1; i < 5; ++i) {
    // The writer has not run yet: still only one writer.
    EXPECT_FALSE(cache.observe(warning(), t0 + std::chrono::seconds(i), "x"));
  }
  auto w = cache.next_write(key);
  EXPECT_EQ(w->kind, Kind::Create);
  EXPECT_EQ(w->count, 5);
  auto body = event_object(*cache.find(key), w->count, "c", "i");
  EXPECT_EQ(body["series"]["count"], 5);
  EXPECT_EQ(body["series"]["lastObservedTime"], "2027-01-15T08:00:04.000000Z");
}

TEST(EventSeriesCache, AfterTheWindowANewEventStarts) {
  EventSeriesCache cache(16, 60s);
  const auto key = dedupe_key(warning());
  cache.observe(warning(), t0, "web.1");
  cache.write_succeeded(*cache.next_write(key));
  EXPECT_FALSE(cache.next_write(key));  // the writer finds nothing left and ends
  ASSERT_TRUE(cache.observe(warning(), t0 + 61s, "web.2"));
  auto w = cache.next_write(key);
  EXPECT_EQ(w->kind, Kind::Create);
  EXPECT_EQ(w->name, "web.2");
  EXPECT_EQ(w->count, 1);
}

TEST(EventSeriesCache, PatchNotFoundRecreates) {
  EventSeriesCache cache(16, 360s);
  const auto key = dedupe_key(warning());
  cache.observe(warning(), t0, "web.1");
  cache.write_succeeded(*cache.next_write(key));
  cache.observe(warning(), t0 + 1s, "x");
  auto w = cache.next_write(key);
  ASSERT_EQ(w->kind, Kind::PatchSeries);
  cache.write_failed(*w, /*not_found=*/true);
  w = cache.next_write(key);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->kind, Kind::Create);
  EXPECT_EQ(w->count, 2);
}

TEST(EventSeriesCache, OtherFailuresDropTheEntry) {
  EventSeriesCache cache(16, 360s);
  const auto key = dedupe_key(warning());
  cache.observe(warning(), t0, "web.1");
  cache.write_failed(*cache.next_write(key), false);
  EXPECT_EQ(cache.find(key), nullptr);
  EXPECT_FALSE(cache.next_write(key));
  EXPECT_TRUE(cache.observe(warning(), t0 + 1s, "web.2"));  // starts over
}

// Writes everything observed for `e` (as a writer would).
void write_all(EventSeriesCache& cache, const EventRecord& e) {
  const auto key = dedupe_key(e);
  while (auto w = cache.next_write(key)) cache.write_succeeded(*w);
}

TEST(EventSeriesCache, LeastRecentlyUsedIsEvicted) {
  EventSeriesCache cache(2, 360s);
  auto a = warning("a"), b = warning("b"), c = warning("c");
  cache.observe(a, t0, "a");
  cache.observe(b, t0, "b");
  write_all(cache, a);
  write_all(cache, b);
  cache.observe(a, t0 + 1s, "a2");  // a is now the most recent
  write_all(cache, a);
  cache.observe(c, t0 + 2s, "c");
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.find(dedupe_key(a)), nullptr);
  EXPECT_EQ(cache.find(dedupe_key(b)), nullptr);
  EXPECT_NE(cache.find(dedupe_key(c)), nullptr);
}

// A burst larger than the cache (thousands of Deployments tuned at once,
// writers capped) must not lose the events still waiting to be written.
TEST(EventSeriesCache, EntriesWaitingToBeWrittenAreNotEvicted) {
  EventSeriesCache cache(2, 360s);
  std::vector<EventRecord> burst;
  for (int i = 0; i < 5; ++i) burst.push_back(warning("burst " + std::to_string(i)));
  for (const auto& e : burst) EXPECT_TRUE(cache.observe(e, t0, e.note));
  EXPECT_EQ(cache.size(), 5u);
  for (const auto& e : burst) {
    auto w = cache.next_write(dedupe_key(e));
    ASSERT_TRUE(w) << e.note << " was lost";
    EXPECT_EQ(w->kind, Kind::Create);
    cache.write_succeeded(*w);
    EXPECT_FALSE(cache.next_write(dedupe_key(e)));  // done: now it may be evicted
  }
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.find(dedupe_key(burst[4])), nullptr);
  EXPECT_EQ(cache.find(dedupe_key(burst[0])), nullptr);
}

TEST(HeldEvents, FirstInFirstOutWithEveryField) {
  HeldEvents held;
  const auto since = std::chrono::steady_clock::time_point(5s);
  auto a = warning("note a");
  auto b = warning("note b");
  b.regarding = {"", "Node", "", std::string(300, 'n'), ""};
  b.type = EventType::Normal;
  b.action = "Check";
  held.push(a, t0, since);
  held.push(b, t0 + 1s, since + 1s);
  EXPECT_EQ(held.size(), 2u);
  EXPECT_EQ(held.front_since(), since);
  auto first = held.pop();
  EXPECT_EQ(dedupe_key(first.record), dedupe_key(a));
  EXPECT_EQ(first.record.action, "Tune");
  EXPECT_EQ(first.observed, t0);
  EXPECT_EQ(held.front_since(), since + 1s);
  auto second = held.pop();
  EXPECT_EQ(second.record.regarding, b.regarding);
  EXPECT_EQ(second.record.type, EventType::Normal);
  EXPECT_EQ(second.record.note, "note b");
  EXPECT_EQ(second.record.action, "Check");
  EXPECT_EQ(second.observed, t0 + 1s);
  EXPECT_TRUE(held.empty());
}

// A burst: many chunks, each note stored once, and every chunk returned to
// the system once the queue is drained.
TEST(HeldEvents, ABurstIsSmallAndLeavesNothingBehind) {
  HeldEvents held;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto e = warning(i % 2 ? "container proxy: no readiness probe"
                           : "a long Tuned note " + std::string(150, 'x'));
    e.regarding.name = "web-" + std::to_string(i);
    held.push(e, t0, std::chrono::steady_clock::time_point(std::chrono::seconds(i)));
  }
  EXPECT_EQ(held.distinct_notes(), 2u);
  EXPECT_GT(held.chunk_bytes(), HeldEvents::kChunkSize);  // more than one chunk
  EXPECT_LT(held.chunk_bytes() / n, 128u) << "bytes per held Event";
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(held.front_since(), std::chrono::steady_clock::time_point(std::chrono::seconds(i)));
    auto h = held.pop();
    ASSERT_EQ(h.record.regarding.name, "web-" + std::to_string(i));
    ASSERT_EQ(h.record.note.size(), i % 2 ? 35u : 168u);
  }
  EXPECT_TRUE(held.empty());
  EXPECT_EQ(held.chunk_bytes(), 0u);
  EXPECT_EQ(held.distinct_notes(), 0u);
}

TEST(EventObject, ClusterScopedGoesToDefaultAndLongNoteIsCut) {
  EventSeriesCache cache(4, 360s);
  auto e = warning(std::string(2000, 'n'));
  e.regarding = {"v1", "Node", "", "node-1", "u"};
  cache.observe(e, t0, "node-1.1");
  auto body = event_object(*cache.find(dedupe_key(e)), 1, "c", "i");
  EXPECT_EQ(body["metadata"]["namespace"], "default");
  EXPECT_FALSE(body["regarding"].contains("namespace"));
  EXPECT_EQ(body["note"].get<std::string>().size(), 1024u);
}

TEST(MicroTime, FormatsAndParses) {
  auto t = t0 + 123456us;
  EXPECT_EQ(format_micro_time(t), "2027-01-15T08:00:00.123456Z");
  EXPECT_EQ(parse_rfc3339("2027-01-15T08:00:00.123456Z"), t);
  EXPECT_EQ(parse_rfc3339("2027-01-15T08:00:00Z"), t0);
  EXPECT_EQ(parse_rfc3339("2027-01-15T09:00:00.5+01:00"), t0 + 500ms);
  EXPECT_FALSE(parse_rfc3339(""));
  EXPECT_FALSE(parse_rfc3339("2027-01-15 08:00:00Z"));
  EXPECT_FALSE(parse_rfc3339("2027-01-15T08:00:00"));
}

TEST(Lease, HeldUntilRenewTimePlusDuration) {
  nlohmann::json lease = {{"spec",
                           {{"holderIdentity", "a"},
                            {"leaseDurationSeconds", 15},
                            {"renewTime", "2027-01-15T08:00:00.000000Z"},
                            {"leaseTransitions", 3}}}};
  auto r = lease_record_from_json(lease);
  EXPECT_EQ(r.holder_identity, "a");
  EXPECT_EQ(r.lease_transitions, 3);
  EXPECT_TRUE(lease_held(r, t0 + 15s));
  EXPECT_FALSE(lease_held(r, t0 + 15s + 1us));
  r.holder_identity.clear();  // released
  EXPECT_FALSE(lease_held(r, t0));
  auto spec = lease_spec_to_json(r);
  EXPECT_EQ(spec["holderIdentity"], "");
  EXPECT_EQ(spec["renewTime"], "2027-01-15T08:00:00.000000Z");
}

// ------------------------------------------------------------ LeaderElector

namespace asio = boost::asio;
using nlohmann::json;

// One Lease kept in memory with resourceVersion checks, like the API server;
// `down` makes every request fail with no answer.
class FakeLeaseServer final : public detail::Transport {
 public:
  std::optional<json> lease{};
  int version = 0;
  bool down = false;

  asio::awaitable<std::expected<detail::HttpResponse, detail::TransportError>> send(
      const detail::HttpRequest& r) override {
    namespace http = boost::beast::http;
    if (down) co_return std::unexpected(detail::TransportError{.message = "down"});
    if (r.method == http::verb::get) {
      if (!lease) co_return status(404, "NotFound");
      co_return ok(*lease);
    }
    json body = json::parse(r.body);
    if (r.method == http::verb::post) {
      if (lease) co_return status(409, "AlreadyExists");
    } else if (r.method == http::verb::put) {
      if (!lease) co_return status(404, "NotFound");
      if (body["metadata"].value("resourceVersion", "") != std::to_string(version)) {
        co_return status(409, "Conflict");
      }
    }
    body["metadata"]["resourceVersion"] = std::to_string(++version);
    lease = body;
    co_return ok(body);
  }
  asio::awaitable<std::expected<detail::StreamResult, detail::TransportError>> stream(
      const detail::HttpRequest&, const ChunkHandler&) override {
    co_return std::unexpected(detail::TransportError{.message = "no watch here"});
  }

 private:
  static detail::HttpResponse ok(const json& j) {
    return {.status = 200, .content_type = "application/json", .retry_after = {}, .body = j.dump()};
  }
  static detail::HttpResponse status(unsigned code, const char* reason) {
    json s = {{"kind", "Status"}, {"status", "Failure"}, {"reason", reason}, {"code", code}};
    return {
        .status = code, .content_type = "application/json", .retry_after = {}, .body = s.dump()};
  }
};

// Shares one FakeLeaseServer between Clients (each Client owns its Transport).
class SharedTransport final : public detail::Transport {
 public:
  explicit SharedTransport(FakeLeaseServer& s) : server_(s) {}
  asio::awaitable<std::expected<detail::HttpResponse, detail::TransportError>> send(
      const detail::HttpRequest& r) override {
    co_return co_await server_.send(r);
  }
  asio::awaitable<std::expected<detail::StreamResult, detail::TransportError>> stream(
      const detail::HttpRequest& r, const ChunkHandler& h) override {
    co_return co_await server_.stream(r, h);
  }

 private:
  FakeLeaseServer& server_;
};

struct Candidate {
  Candidate(asio::io_context& io, FakeLeaseServer& server, const std::string& id)
      : client(std::make_unique<SharedTransport>(server), options()),
        elector(client, config(id, *this)) {
    (void)io;
  }
  static ClientOptions options() {
    ClientOptions o;
    o.retry.attempts = 1;
    return o;
  }
  static LeaderElectionConfig config(const std::string& id, Candidate& self) {
    LeaderElectionConfig c;
    c.namespace_ = "default";
    c.name = "lock";
    c.identity = id;
    c.lease_duration = 1000ms;
    c.renew_deadline = 300ms;
    c.retry_period = 50ms;
    c.on_started_leading = [&self] { ++self.started; };
    c.on_stopped_leading = [&self] { ++self.stopped; };
    c.on_new_leader = [&self](const std::string& h) { self.leaders.push_back(h); };
    return c;
  }
  Client client;
  LeaderElector elector;
  int started = 0;
  int stopped = 0;
  std::vector<std::string> leaders{};
  bool returned = false;
  asio::cancellation_signal cancel{};
};

void spawn_run(asio::io_context& io, Candidate& c) {
  asio::co_spawn(io, c.elector.run(),
                 asio::bind_cancellation_slot(c.cancel.slot(),
                                              [&c](std::exception_ptr) { c.returned = true; }));
}

void run_for(asio::io_context& io, std::chrono::milliseconds d) {
  io.restart();
  io.run_for(d);
}

TEST(LeaderElector, OneOfTwoLeadsAndKeepsRenewing) {
  asio::io_context io;
  FakeLeaseServer server;
  Candidate a(io, server, "a"), b(io, server, "b");
  spawn_run(io, a);
  spawn_run(io, b);
  run_for(io, 400ms);
  EXPECT_EQ(a.started + b.started, 1);
  Candidate& leader = a.started ? a : b;
  Candidate& other = a.started ? b : a;
  EXPECT_TRUE(leader.elector.is_leader());
  EXPECT_FALSE(other.elector.is_leader());
  ASSERT_TRUE(server.lease);
  EXPECT_EQ((*server.lease)["spec"]["holderIdentity"], leader.elector.config().identity);
  EXPECT_EQ((*server.lease)["spec"]["leaseDurationSeconds"], 1);
  int v = server.version;
  run_for(io, 200ms);
  EXPECT_GT(server.version, v) << "the leader renews every retry period";
  EXPECT_EQ(other.started, 0);
  ASSERT_FALSE(other.leaders.empty());
  EXPECT_EQ(other.leaders.back(), leader.elector.config().identity);

  // A graceful hand-over: the other acquires at its next retry, well before expiry.
  leader.cancel.emit(asio::cancellation_type::terminal);
  run_for(io, 20ms);
  EXPECT_TRUE(leader.returned);
  EXPECT_EQ(leader.stopped, 1);
  bool released = false;
  asio::co_spawn(
      io, leader.elector.release(),
      [&](std::exception_ptr, std::expected<void, ApiError> r) { released = r.has_value(); });
  run_for(io, 20ms);
  EXPECT_TRUE(released);
  // Released: no holder, unless the other's retry came within these 20 ms
  // (a slow run, e.g. under ASan) and took it already.
  const auto holder = (*server.lease)["spec"]["holderIdentity"].get<std::string>();
  EXPECT_TRUE(holder.empty() || holder == other.elector.config().identity) << holder;
  run_for(io, 150ms);
  EXPECT_EQ(other.started, 1);
  EXPECT_EQ((*server.lease)["spec"]["holderIdentity"], other.elector.config().identity);
  EXPECT_EQ((*server.lease)["spec"]["leaseTransitions"], 1);
  other.cancel.emit(asio::cancellation_type::terminal);
  run_for(io, 20ms);
}

TEST(LeaderElector, StopsLeadingWhenRenewalFailsPastTheDeadline) {
  asio::io_context io;
  FakeLeaseServer server;
  Candidate a(io, server, "a");
  spawn_run(io, a);
  run_for(io, 100ms);
  ASSERT_EQ(a.started, 1);
  server.down = true;
  run_for(io, 200ms);
  EXPECT_EQ(a.stopped, 0) << "still within the renew deadline";
  run_for(io, 250ms);
  EXPECT_EQ(a.stopped, 1);
  EXPECT_TRUE(a.returned) << "run() returns after losing leadership";
  EXPECT_FALSE(a.elector.is_leader());
}

TEST(LeaderElector, TakesAnExpiredLeaseButNotAValidOne) {
  asio::io_context io;
  FakeLeaseServer server;
  LeaseRecord held;
  held.holder_identity = "gone";
  held.lease_duration_seconds = 1;
  held.renew_time = Clock::now();
  server.lease = json{{"apiVersion", "coordination.k8s.io/v1"},
                      {"kind", "Lease"},
                      {"metadata", {{"name", "lock"}, {"namespace", "default"}}},
                      {"spec", lease_spec_to_json(held)}};
  (*server.lease)["metadata"]["resourceVersion"] = std::to_string(++server.version);
  Candidate a(io, server, "a");
  spawn_run(io, a);
  run_for(io, 500ms);
  EXPECT_EQ(a.started, 0) << "the lease is still valid";
  run_for(io, 700ms);
  EXPECT_EQ(a.started, 1) << "expired after 1 s";
  a.cancel.emit(asio::cancellation_type::terminal);
  run_for(io, 20ms);
}

}  // namespace
}  // namespace gracekeeper::kube
