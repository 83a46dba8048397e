#include "gracekeeper/kube/workqueue.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace gracekeeper::kube {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using std::chrono::nanoseconds;

// Time moves only when a test says so.
struct FakeClock {
  SteadyTime now = SteadyTime{} + 1h;
  Clock fn() {
    return [this] { return now; };
  }
};

WorkQueueOptions fake_options(FakeClock& clock, RateLimiterOptions limiter = {}) {
  return WorkQueueOptions{.rate_limiter = limiter, .clock = clock.fn()};
}

std::vector<std::string> drain(WorkQueue& q) {
  std::vector<std::string> keys;
  while (auto key = q.get()) keys.push_back(*key);
  return keys;
}

// ---- core ----

TEST(WorkQueue, AddDedupesWaitingKeys) {
  FakeClock clock;
  WorkQueue q(fake_options(clock));
  q.add("ns/a");
  q.add("ns/a");
  q.add("ns/b");
  q.add("ns/a");
  EXPECT_EQ(q.len(), 2u);
  EXPECT_EQ(drain(q), (std::vector<std::string>{"ns/a", "ns/b"}));
  EXPECT_EQ(q.counters().adds, 4u);
}

TEST(WorkQueue, GetIsFifo) {
  FakeClock clock;
  WorkQueue q(fake_options(clock));
  for (const char* key : {"ns/c", "ns/a", "ns/b", "other/a"}) q.add(key);
  EXPECT_EQ(drain(q), (std::vector<std::string>{"ns/c", "ns/a", "ns/b", "other/a"}));
  EXPECT_EQ(q.get(), std::nullopt);
}

TEST(WorkQueue, AddWhileProcessingRequeuesOnDoneOnly) {
  FakeClock clock;
  WorkQueue q(fake_options(clock));
  q.add("ns/a");
  ASSERT_EQ(q.get(), "ns/a");
  EXPECT_EQ(q.processing(), 1u);

  q.add("ns/a");
  q.add("ns/a");
  // Not handed out again while it is being processed.
  EXPECT_EQ(q.len(), 0u);
  EXPECT_EQ(q.get(), std::nullopt);

  q.done("ns/a");
  EXPECT_EQ(q.processing(), 0u);
  ASSERT_EQ(q.len(), 1u);  // the two adds coalesced into one
  EXPECT_EQ(q.get(), "ns/a");
  q.done("ns/a");
  EXPECT_EQ(q.len(), 0u);  // not dirty this time: nothing re-queued
}

TEST(WorkQueue, DirtyKeyKeepsItsTurnBehindKeysQueuedBeforeDone) {
  FakeClock clock;
  WorkQueue q(fake_options(clock));
  q.add("ns/a");
  ASSERT_EQ(q.get(), "ns/a");
  q.add("ns/a");
  q.add("ns/b");
  q.done("ns/a");
  EXPECT_EQ(drain(q), (std::vector<std::string>{"ns/b", "ns/a"}));
}

TEST(RateLimiter, PerItemBackoffDoublesFrom5msAndCapsAt1000s) {
  FakeClock clock;
  RateLimiter limiter(RateLimiterOptions{.qps = 0}, clock.fn());  // bucket off
  nanoseconds expected = 5ms;
  for (int i = 0; i < 18; ++i) {
    EXPECT_EQ(limiter.when("ns/a"), expected) << "failure " << i;
    expected *= 2;
  }
  // 5 ms * 2^18 = 1310.72 s: capped from here on, also long after.
  for (int i = 18; i < 200; ++i) EXPECT_EQ(limiter.when("ns/a"), 1000s) << "failure " << i;
  EXPECT_EQ(limiter.num_requeues("ns/a"), 200);
}

TEST(RateLimiter, DefaultsCombinePerItemAndBucket) {
  FakeClock clock;
  RateLimiter limiter({}, clock.fn());
  // Within the burst the bucket adds nothing: the sequence is the per-item one.
  const std::vector<nanoseconds> expected{5ms, 10ms, 20ms, 40ms, 80ms, 160ms, 320ms, 640ms, 1280ms};
  for (const nanoseconds want : expected) EXPECT_EQ(limiter.when("ns/a"), want);
}

TEST(RateLimiter, ForgetResetsOnlyThatKey) {
  FakeClock clock;
  RateLimiter limiter(RateLimiterOptions{.qps = 0}, clock.fn());
  EXPECT_EQ(limiter.when("ns/a"), 5ms);
  EXPECT_EQ(limiter.when("ns/a"), 10ms);
  EXPECT_EQ(limiter.when("ns/b"), 5ms);
  EXPECT_EQ(limiter.num_requeues("ns/a"), 2);
  limiter.forget("ns/a");
  EXPECT_EQ(limiter.num_requeues("ns/a"), 0);
  EXPECT_EQ(limiter.when("ns/a"), 5ms);
  EXPECT_EQ(limiter.when("ns/b"), 10ms);
}

TEST(RateLimiter, BucketLimitsAfterBurst) {
  FakeClock clock;
  RateLimiter limiter({}, clock.fn());
  // 100 distinct keys fail at the same instant: the burst absorbs them.
  for (int i = 0; i < 100; ++i) EXPECT_EQ(limiter.when("k" + std::to_string(i)), 5ms) << i;
  // Then 10 qps: each further retry waits 100 ms more than the previous one.
  EXPECT_EQ(limiter.when("k100"), 100ms);
  EXPECT_EQ(limiter.when("k101"), 200ms);
  EXPECT_EQ(limiter.when("k102"), 300ms);
  // One second refills 10 tokens, repaying the debt of 3 with 7 to spare.
  clock.now += 1s;
  for (int i = 0; i < 7; ++i) EXPECT_EQ(limiter.when("j" + std::to_string(i)), 5ms) << i;
  EXPECT_EQ(limiter.when("j7"), 100ms);
  // The bucket never holds more than the burst, however long it idles.
  clock.now += 1h;
  for (int i = 0; i < 100; ++i) EXPECT_EQ(limiter.when("m" + std::to_string(i)), 5ms) << i;
  EXPECT_EQ(limiter.when("m100"), 100ms);
}

TEST(WorkQueue, AddRateLimitedDelaysByBackoff) {
  FakeClock clock;
  WorkQueue q(fake_options(clock));
  q.add_rate_limited("ns/a");
  EXPECT_EQ(q.len(), 0u);
  EXPECT_EQ(q.waiting(), 1u);
  ASSERT_EQ(q.next_ready_time(), clock.now + 5ms);
  EXPECT_EQ(q.num_requeues("ns/a"), 1);
  clock.now += 4ms;
  EXPECT_EQ(q.get(), std::nullopt);
  clock.now += 1ms;
  ASSERT_EQ(q.get(), "ns/a");
  q.add_rate_limited("ns/a");
  q.done("ns/a");
  EXPECT_EQ(q.next_ready_time(), clock.now + 10ms);
  q.forget("ns/a");
  EXPECT_EQ(q.num_requeues("ns/a"), 0);
  EXPECT_EQ(q.counters().retries, 2u);
}

TEST(WorkQueue, AddAfterReleasesInReadyTimeOrder) {
  FakeClock clock;
  WorkQueue q(fake_options(clock));
  const SteadyTime t0 = clock.now;
  q.add_after("ns/c", 30ms);
  q.add_after("ns/a", 10ms);
  q.add_after("ns/b", 20ms);
  q.add_after("ns/b2", 20ms);  // same time as ns/b: insertion order
  EXPECT_EQ(q.next_ready_time(), t0 + 10ms);
  EXPECT_EQ(q.get(), std::nullopt);

  clock.now = t0 + 10ms;
  EXPECT_EQ(q.get(), "ns/a");
  EXPECT_EQ(q.next_ready_time(), t0 + 20ms);

  clock.now = t0 + 35ms;
  EXPECT_EQ(drain(q), (std::vector<std::string>{"ns/b", "ns/b2", "ns/c"}));
  EXPECT_EQ(q.next_ready_time(), std::nullopt);
  EXPECT_EQ(q.waiting(), 0u);
}

TEST(WorkQueue, AddAfterKeepsTheEarlierTime) {
  FakeClock clock;
  WorkQueue q(fake_options(clock));
  const SteadyTime t0 = clock.now;
  q.add_after("ns/x", 50ms);
  q.add_after("ns/x", 10ms);  // earlier: wins
  q.add_after("ns/y", 10ms);
  q.add_after("ns/y", 50ms);  // later: ignored
  EXPECT_EQ(q.waiting(), 2u);
  EXPECT_EQ(q.next_ready_time(), t0 + 10ms);

  clock.now = t0 + 10ms;
  EXPECT_EQ(drain(q), (std::vector<std::string>{"ns/x", "ns/y"}));
  // The superseded 50 ms entry of ns/x is gone, not a second release.
  EXPECT_EQ(q.next_ready_time(), std::nullopt);
  clock.now = t0 + 1s;
  EXPECT_EQ(q.get(), std::nullopt);
}

TEST(WorkQueue, AddAfterDedupesWithQueuedAndProcessingKeys) {
  FakeClock clock;
  WorkQueue q(fake_options(clock));
  q.add_after("ns/a", 0ms);  // no delay: queued at once
  EXPECT_EQ(q.len(), 1u);
  q.add_after("ns/a", 5ms);
  clock.now += 5ms;
  EXPECT_EQ(drain(q), (std::vector<std::string>{"ns/a"}));  // coalesced with the queued one

  q.add_after("ns/a", 5ms);  // ns/a is processing now
  clock.now += 5ms;
  EXPECT_EQ(q.get(), std::nullopt);  // marked dirty, not handed out twice
  q.done("ns/a");
  EXPECT_EQ(q.get(), "ns/a");
}

TEST(WorkQueue, ShutDownDrainsQueuedAndDirtyKeys) {
  FakeClock clock;
  WorkQueue q(fake_options(clock));
  q.add("ns/a");
  q.add("ns/b");
  q.add_after("ns/later", 1s);
  ASSERT_EQ(q.get(), "ns/a");
  q.add("ns/a");  // dirty while processing

  q.shut_down();
  EXPECT_TRUE(q.shutting_down());
  q.add("ns/c");
  q.add_after("ns/d", 1ms);
  q.add_rate_limited("ns/e");
  EXPECT_EQ(q.counters().dropped_after_shutdown, 3u);
  EXPECT_EQ(q.next_ready_time(), std::nullopt);  // delayed keys are dropped

  EXPECT_EQ(q.get(), "ns/b");
  EXPECT_EQ(q.get(), std::nullopt);
  q.done("ns/b");
  q.done("ns/a");  // the add that arrived while processing is not lost
  EXPECT_EQ(q.get(), "ns/a");
  q.done("ns/a");
  clock.now += 1h;
  EXPECT_EQ(q.get(), std::nullopt);
  EXPECT_EQ(q.len(), 0u);
  EXPECT_EQ(q.processing(), 0u);
}

// ---- Asio driver, real io_context and real time ----

// Runs `body` as a coroutine on a fresh io_context until everything finishes.
// (gtest's ASSERT_* cannot be used inside coroutines: they `return`.)
template <typename Body>
void run_on_io_context(Body body) {
  asio::io_context io;
  bool finished = false;
  asio::co_spawn(io, body(io.get_executor()), [&](std::exception_ptr e) {
    finished = true;
    if (e) std::rethrow_exception(e);
  });
  io.run();
  ASSERT_TRUE(finished);
}

asio::awaitable<void> sleep_for(nanoseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(asio::use_awaitable);
}

asio::awaitable<void> yield() {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
}

TEST(AsyncWorkQueue, WaitsForDelayedKeys) {
  run_on_io_context([](asio::any_io_executor ex) -> asio::awaitable<void> {
    AsyncWorkQueue q(ex);
    const auto start = std::chrono::steady_clock::now();
    q.add_after("ns/late", 30ms);
    q.add_after("ns/early", 10ms);
    auto first = co_await q.async_get();
    EXPECT_EQ(first, "ns/early");
    EXPECT_GE(std::chrono::steady_clock::now() - start, 10ms);
    auto second = co_await q.async_get();
    EXPECT_EQ(second, "ns/late");
    EXPECT_GE(std::chrono::steady_clock::now() - start, 30ms);
    q.done("ns/early");
    q.done("ns/late");
    q.shut_down();
    EXPECT_EQ(co_await q.async_get(), std::nullopt);
    co_await q.wait_workers_exited();  // none ran: completes at once
  });
}

constexpr int kKeys = 1000;
constexpr int kWorkers = 8;

TEST(AsyncWorkQueue, ManyWorkersProcessEveryKeyAfterItsLastAddNeverConcurrently) {
  run_on_io_context([](asio::any_io_executor ex) -> asio::awaitable<void> {
    AsyncWorkQueue q(ex);
    std::uint64_t tick = 0;  // orders adds and reconcile starts
    std::map<std::string, std::uint64_t> last_add;
    std::map<std::string, std::uint64_t> last_start;
    std::set<std::string> in_flight;
    int concurrent_violations = 0;
    int adds_while_in_flight = 0;
    int reconciles = 0;
    std::mt19937 rng(42);

    q.run_workers(kWorkers, [&](std::string key) -> asio::awaitable<bool> {
      if (!in_flight.insert(key).second) ++concurrent_violations;
      last_start[key] = ++tick;
      ++reconciles;
      // Suspend so other workers and the producer interleave with this one.
      const int pause = static_cast<int>(rng() % 4);
      if (pause == 0) co_await sleep_for(std::chrono::microseconds(rng() % 500));
      for (int i = 0; i < pause; ++i) co_await yield();
      in_flight.erase(key);
      co_return true;
    });

    auto key_of = [](int i) { return "ns/key-" + std::to_string(i); };
    auto add = [&](const std::string& key) {
      last_add[key] = ++tick;
      if (in_flight.contains(key)) ++adds_while_in_flight;
      q.add(key);
    };
    for (int i = 0; i < kKeys; ++i) add(key_of(i));
    // Duplicates, many of them while the key is being processed.
    for (int round = 0; round < 5000; ++round) {
      add(key_of(static_cast<int>(rng() % kKeys)));
      if (round % 7 == 0) co_await yield();
    }

    q.shut_down();
    co_await q.wait_workers_exited();

    EXPECT_EQ(concurrent_violations, 0);
    EXPECT_GT(adds_while_in_flight, 0);  // the dirty path was exercised
    EXPECT_TRUE(in_flight.empty());
    EXPECT_EQ(q.workers_running(), 0u);
    for (const auto& [key, added] : last_add) {
      if (!last_start.contains(key)) {
        ADD_FAILURE() << key << " never reconciled";
        continue;
      }
      EXPECT_GT(last_start[key], added) << key << " not reconciled after its last add";
    }
    // Dedupe did its job: far fewer reconciles than adds.
    EXPECT_GE(reconciles, kKeys);
    EXPECT_LT(reconciles, kKeys + 5000);
    EXPECT_EQ(q.worker_counters().reconciled, static_cast<std::uint64_t>(reconciles));
    EXPECT_EQ(q.core().len(), 0u);
  });
}

TEST(AsyncWorkQueue, FailuresRetryWithBackoffThenSucceed) {
  run_on_io_context([](asio::any_io_executor ex) -> asio::awaitable<void> {
    AsyncWorkQueue q(ex);
    std::vector<std::chrono::steady_clock::time_point> attempts;
    int other = 0;
    q.run_workers(2, [&](std::string key) -> asio::awaitable<bool> {
      if (key != "ns/flaky") {
        ++other;
        co_return true;
      }
      attempts.push_back(std::chrono::steady_clock::now());
      co_await yield();
      if (attempts.size() == 2) throw std::runtime_error("reconcile bug");
      if (attempts.size() < 4) co_return false;
      q.shut_down();  // the fourth attempt succeeds; nothing else to wait for
      co_return true;
    });
    q.add("ns/flaky");
    q.add("ns/fine");
    co_await q.wait_workers_exited();

    EXPECT_EQ(attempts.size(), 4u);
    if (attempts.size() != 4u) co_return;
    // Failures 1..3 back off 5, 10, 20 ms (timers never fire early).
    EXPECT_GE(attempts[1] - attempts[0], 5ms);
    EXPECT_GE(attempts[2] - attempts[1], 10ms);
    EXPECT_GE(attempts[3] - attempts[2], 20ms);
    EXPECT_EQ(other, 1);
    EXPECT_EQ(q.core().num_requeues("ns/flaky"), 0);  // forgotten on success
    EXPECT_EQ(q.worker_counters().failed, 3u);
    EXPECT_EQ(q.worker_counters().exceptions, 1u);
    EXPECT_EQ(q.worker_counters().reconciled, 2u);
  });
}

TEST(AsyncWorkQueue, ShutDownWaitsForInFlightWorkAndDrains) {
  run_on_io_context([](asio::any_io_executor ex) -> asio::awaitable<void> {
    AsyncWorkQueue q(ex);
    std::vector<std::string> finished;
    int in_flight = 0;
    q.run_workers(2, [&](std::string key) -> asio::awaitable<bool> {
      ++in_flight;
      co_await sleep_for(40ms);
      --in_flight;
      finished.push_back(key);
      co_return true;
    });
    q.add("ns/a");
    q.add("ns/b");
    q.add("ns/c");  // queued behind the two in flight
    co_await sleep_for(10ms);
    EXPECT_EQ(in_flight, 2);
    q.add("ns/a");  // dirty while in flight: still reconciled in the drain

    const auto stop = std::chrono::steady_clock::now();
    q.shut_down();
    q.add("ns/ignored");
    co_await q.wait_workers_exited();

    EXPECT_GE(std::chrono::steady_clock::now() - stop, 25ms);
    EXPECT_EQ(in_flight, 0);
    EXPECT_EQ(std::multiset<std::string>(finished.begin(), finished.end()),
              (std::multiset<std::string>{"ns/a", "ns/a", "ns/b", "ns/c"}));
    EXPECT_EQ(q.workers_running(), 0u);
  });
}

TEST(AsyncWorkQueue, ShutDownWakesIdleWorkers) {
  run_on_io_context([](asio::any_io_executor ex) -> asio::awaitable<void> {
    AsyncWorkQueue q(ex);
    q.run_workers(4, [](std::string) -> asio::awaitable<bool> { co_return true; });
    q.add_after("ns/never", 1h);  // dropped by shut_down, must not keep anyone waiting
    co_await yield();
    EXPECT_EQ(q.workers_running(), 4u);
    q.shut_down();
    co_await q.wait_workers_exited();
    EXPECT_EQ(q.workers_running(), 0u);
    EXPECT_EQ(q.worker_counters().reconciled, 0u);
  });
}

}  // namespace
}  // namespace gracekeeper::kube
