// Leader election: MicroTime, lease records, and LeaderElector against an
// in-memory Lease server.
#include "gracekeeper/kube/leader_election.h"

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "../../support/kube_transport.h"  // the seam between the client and sockets

namespace gracekeeper::kube {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::system_clock;

const Clock::time_point t0 = Clock::time_point(1'800'000'000s);

// Validity counts from when this process observed the record, on its own
// monotonic clock; the record's renewTime plays no part.
TEST(Lease, ValidForLeaseDurationAfterItWasObserved) {
  nlohmann::json lease = {{"spec",
                           {{"holderIdentity", "a"},
                            {"leaseDurationSeconds", 15},
                            {"renewTime", "2027-01-15T08:00:00.000000Z"},
                            {"leaseTransitions", 3}}}};
  auto r = lease_record_from_json(lease);
  EXPECT_EQ(r.holder_identity, "a");
  EXPECT_EQ(r.lease_transitions, 3);
  EXPECT_EQ(r.renew_time, t0 + 0s) << "2027-01-15T08:00:00Z is t0";
  const auto seen = std::chrono::steady_clock::time_point(1000s);
  EXPECT_TRUE(lease_valid(r, seen, seen + 15s - 1us));
  EXPECT_FALSE(lease_valid(r, seen, seen + 15s));
  auto renewed = r;
  renewed.renew_time = *r.renew_time + 2s;
  EXPECT_TRUE(same_record(r, r));
  EXPECT_FALSE(same_record(r, renewed));
  r.holder_identity.clear();  // released
  EXPECT_FALSE(lease_valid(r, seen, seen));
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
  // Each request waits this long before it is answered (a stopped API server).
  std::chrono::milliseconds hang{0};

  asio::awaitable<std::expected<detail::HttpResponse, detail::TransportError>> send(
      const detail::HttpRequest& r) override {
    namespace http = boost::beast::http;
    if (hang.count() > 0) {
      asio::steady_timer wait(co_await asio::this_coro::executor, hang);
      co_await wait.async_wait(asio::use_awaitable);
    }
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
  // `wall_offset`: how far this candidate's wall clock is ahead of the others'.
  Candidate(asio::io_context& io, FakeLeaseServer& server, const std::string& id,
            std::chrono::seconds wall_offset = 0s)
      : client(std::make_unique<SharedTransport>(server), options()),
        elector(client, config(id, *this, wall_offset)) {
    (void)io;
  }
  static ClientOptions options() {
    ClientOptions o;
    o.retry.attempts = 1;
    return o;
  }
  static LeaderElectionConfig config(const std::string& id, Candidate& self,
                                     std::chrono::seconds wall_offset) {
    LeaderElectionConfig c;
    c.clocks.wall = [wall_offset] { return Clock::now() + wall_offset; };
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

// An acquire attempt that hangs (a stopped API server) and takes the Lease
// only after longer than the renew deadline, which counts from the
// attempt's start, would make a leader that steps down at its first
// renewal (issue 46, the faults suite): it renews at once instead, and
// leads from that quick answer.
TEST(LeaderElector, AHungAcquireIsGivenUpSoTheNewLeaderStays) {
  asio::io_context io;
  FakeLeaseServer server;
  server.hang = 600ms;  // the renew deadline is 300 ms, the retry period 50 ms
  Candidate a(io, server, "a");
  spawn_run(io, a);
  run_for(io, 200ms);
  EXPECT_EQ(a.started, 0);
  server.hang = 0ms;  // the API server is back
  run_for(io, 1800ms);
  EXPECT_EQ(a.started, 1);
  EXPECT_EQ(a.stopped, 0) << "the new leader stepped down at its first renewal";
  EXPECT_TRUE(a.elector.is_leader());
  a.cancel.emit(asio::cancellation_type::terminal);
  run_for(io, 20ms);
}

// A follower's wall clock 20 s ahead of the leader's (leases of 1 s): under
// a rule that compared renewTime with the follower's wall clock, every
// renewal would look 19 s stale and the follower would take the lease at
// once, giving two writers. It must stay a follower while the leader renews.
TEST(LeaderElector, AFollowerWhoseWallClockRunsAheadDoesNotTakeALiveLease) {
  asio::io_context io;
  FakeLeaseServer server;
  Candidate a(io, server, "a");
  spawn_run(io, a);
  run_for(io, 100ms);
  ASSERT_EQ(a.started, 1);
  Candidate b(io, server, "b", 20s);
  spawn_run(io, b);
  run_for(io, 1500ms);
  EXPECT_EQ(b.started, 0) << "b took a lease a kept renewing";
  EXPECT_EQ(a.stopped, 0);
  EXPECT_EQ((*server.lease)["spec"]["holderIdentity"], "a");
  EXPECT_EQ((*server.lease)["spec"]["leaseTransitions"], 0);
  a.cancel.emit(asio::cancellation_type::terminal);
  b.cancel.emit(asio::cancellation_type::terminal);
  run_for(io, 20ms);
}

// The same with every clock in the test's hands: leases of 15 s, the
// follower's wall clock 20 s ahead. It takes the lease only when 15 s have
// passed on its own monotonic clock since it saw the last renewal.
TEST(LeaderElector, FakeClockExpiryCountsFromTheFollowersOwnObservation) {
  asio::io_context io;
  FakeLeaseServer server;
  struct Clocks {
    Clock::time_point wall;
    std::chrono::steady_clock::time_point monotonic;
  };
  Clocks ca{t0, std::chrono::steady_clock::time_point(100s)};
  Clocks cb{t0 + 20s, std::chrono::steady_clock::time_point(5000s)};  // ahead; its own epoch
  auto make = [&](const std::string& id, Clocks& c) {
    LeaderElectionConfig config;
    config.namespace_ = "default";
    config.name = "lock";
    config.identity = id;
    config.lease_duration = 15s;
    config.renew_deadline = 10s;
    config.retry_period = 2s;
    config.clocks.wall = [&c] { return c.wall; };
    config.clocks.monotonic = [&c] { return c.monotonic; };
    return config;
  };
  Client client_a(std::make_unique<SharedTransport>(server), Candidate::options());
  Client client_b(std::make_unique<SharedTransport>(server), Candidate::options());
  LeaderElector a(client_a, make("a", ca));
  LeaderElector b(client_b, make("b", cb));
  auto attempt = [&](LeaderElector& e) {
    std::optional<bool> got;
    asio::co_spawn(io, e.try_acquire_or_renew(), [&](std::exception_ptr x, bool held) {
      if (!x) got = held;
    });
    io.restart();
    io.run();
    EXPECT_TRUE(got.has_value());
    return got.value_or(false);
  };
  auto advance = [&](std::chrono::seconds d) {
    for (Clocks* c : {&ca, &cb}) {
      c->wall += d;
      c->monotonic += d;
    }
  };
  auto holder = [&] { return (*server.lease)["spec"]["holderIdentity"].get<std::string>(); };

  ASSERT_TRUE(attempt(a));
  EXPECT_EQ((*server.lease)["spec"]["renewTime"], "2027-01-15T08:00:00.000000Z");
  EXPECT_FALSE(attempt(b)) << "renewTime + 15 s is 5 s behind b's wall clock: still a's";
  advance(10s);
  ASSERT_TRUE(attempt(a));  // renewed
  advance(4s);
  EXPECT_FALSE(attempt(b)) << "b saw the renewal 0 s ago";
  advance(14s);
  EXPECT_FALSE(attempt(b)) << "14 s since b saw it, on b's clock";
  EXPECT_EQ(holder(), "a");
  advance(1s);
  EXPECT_TRUE(attempt(b)) << "15 s since b saw the last renewal";
  EXPECT_EQ(holder(), "b");
  EXPECT_EQ((*server.lease)["spec"]["leaseTransitions"], 1);
  EXPECT_FALSE(attempt(a)) << "a sees b's write: b's for 15 s on a's clock";
  advance(14s);
  EXPECT_FALSE(attempt(a));
  EXPECT_EQ(holder(), "b");
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
