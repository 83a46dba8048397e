// The controller's work queue, after client-go's rate-limited workqueue
// (k8s.io/client-go/util/workqueue): event handlers add keys ("namespace/name"),
// reconcile workers take them one at a time.
//
// Guarantees, as in client-go:
//  - a key waiting in the queue is not queued twice (adds coalesce);
//  - a key being processed is never handed out again until done(key); an add
//    that arrives meanwhile marks it dirty and done() re-queues it, so the
//    latest state is always reconciled once more;
//  - failures back off per key (5 ms * 2^failures, capped at 1000 s), and all
//    rate-limited adds together share a token bucket (10 qps, burst 100); the
//    delay is the larger of the two, like DefaultControllerRateLimiter.
//
// Two layers: WorkQueue is the deterministic core (no I/O, clock injected, so
// tests drive time by hand); AsyncWorkQueue puts it on an Asio executor for
// coroutine workers. Neither is thread-safe: everything runs on the one
// io_context thread (docs/architecture.md, "Concurrency"), so there are no locks.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace gracekeeper::kube {

using SteadyTime = std::chrono::steady_clock::time_point;
// Returns "now". Injected so tests control time; production uses steady_clock.
using Clock = std::function<SteadyTime()>;

struct RateLimiterOptions {
  // Per-key exponential backoff: base_delay * 2^failures, at most max_delay.
  std::chrono::nanoseconds base_delay = std::chrono::milliseconds(5);
  std::chrono::nanoseconds max_delay = std::chrono::seconds(1000);
  // Overall token bucket shared by all keys; qps <= 0 disables it.
  double qps = 10.0;
  double burst = 100.0;
};

// client-go's DefaultControllerRateLimiter: the max of a per-item exponential
// failure limiter and an overall token bucket.
class RateLimiter final {
 public:
  explicit RateLimiter(RateLimiterOptions options = {}, Clock clock = {});

  // How long to wait before retrying `key`; counts one more failure for it and
  // takes a token from the bucket (which may go into debt, as x/time/rate's
  // Reserve does, so a burst of failures spreads out at qps).
  std::chrono::nanoseconds when(const std::string& key);
  // Success: the key's next failure starts again at base_delay. The bucket is
  // not refunded (client-go's BucketRateLimiter.Forget is a no-op too).
  void forget(const std::string& key);
  int num_requeues(const std::string& key) const;

 private:
  std::chrono::nanoseconds bucket_delay();

  RateLimiterOptions options_;
  Clock clock_;
  std::unordered_map<std::string, int> failures_;
  double tokens_;
  SteadyTime last_refill_;
};

struct WorkQueueOptions {
  RateLimiterOptions rate_limiter;
  Clock clock;  // empty: std::chrono::steady_clock::now
};

// Counters for the operator's metrics; monotonic.
struct WorkQueueCounters {
  std::uint64_t adds = 0;     // add() calls accepted (before dedupe)
  std::uint64_t retries = 0;  // add_rate_limited() calls accepted
  std::uint64_t dropped_after_shutdown = 0;
};

class WorkQueue final {
 public:
  explicit WorkQueue(WorkQueueOptions options = {});

  // Queues `key` unless it is already waiting; if it is being processed it is
  // marked dirty and re-queued by done(). Ignored after shut_down().
  void add(const std::string& key);
  // Queues `key` once `delay` has passed (delay <= 0: now). If the key is
  // already waiting for a later time, the earlier time wins, as in client-go.
  void add_after(const std::string& key, std::chrono::nanoseconds delay);
  // add_after(key, rate limiter's delay for key).
  void add_rate_limited(const std::string& key);
  void forget(const std::string& key);
  int num_requeues(const std::string& key) const;

  // The next key in FIFO order, now marked processing; nullopt when none is
  // ready (check shutting_down() to tell "wait" from "stop"). Moves delayed
  // keys whose time has come into the queue first.
  std::optional<std::string> get();
  // Precondition: `key` came from get(). Re-queues it if it was added meanwhile.
  void done(const std::string& key);

  // No new adds; delayed keys are dropped (as client-go's delaying queue does);
  // keys already queued are still handed out by get(), and a key made dirty
  // while processing is still re-queued by done(), so work in hand drains.
  void shut_down();
  bool shutting_down() const { return shutting_down_; }

  // Keys ready to be handed out (the queue-depth metric); delayed keys and
  // keys being processed are not counted.
  std::size_t len() const { return queue_.size(); }
  std::size_t processing() const { return processing_.size(); }
  std::size_t waiting() const { return waiting_.size(); }
  // When the earliest delayed key becomes ready, so a driver knows when to wake.
  std::optional<SteadyTime> next_ready_time() const;
  // Moves delayed keys that are due into the queue; get() does this itself.
  void promote_ready();

  const WorkQueueCounters& counters() const { return counters_; }

 private:
  struct Waiting {
    SteadyTime ready;
    std::uint64_t seq;  // tie-break: equal times keep insertion order
    std::string key;
    bool operator>(const Waiting& o) const {
      return ready != o.ready ? ready > o.ready : seq > o.seq;
    }
  };
  // A key's live entry in the heap; entries superseded by an earlier time stay
  // in the heap and are skipped when they surface (lazy deletion).
  struct WaitingRef {
    SteadyTime ready;
    std::uint64_t seq;
  };

  void drop_stale_heap_top();

  Clock clock_;
  RateLimiter limiter_;
  std::deque<std::string> queue_;
  // Keys that need processing: queued ones and dirty ones being processed.
  std::unordered_set<std::string> dirty_;
  std::unordered_set<std::string> processing_;
  std::priority_queue<Waiting, std::vector<Waiting>, std::greater<>> heap_;
  std::unordered_map<std::string, WaitingRef> waiting_;
  std::uint64_t next_seq_ = 0;
  bool shutting_down_ = false;
  WorkQueueCounters counters_;
};

// Counters of AsyncWorkQueue's workers.
struct WorkerCounters {
  std::uint64_t reconciled = 0;  // reconcile returned true
  std::uint64_t failed = 0;      // returned false or threw
  std::uint64_t exceptions = 0;  // of those, threw
};

// Reconciles one key; true means done (the key's backoff is forgotten), false
// means retry with backoff. Exceptions are caught and treated as false.
using Reconcile = std::function<boost::asio::awaitable<bool>(std::string key)>;

// WorkQueue on an Asio executor: keys, including delayed ones, are handed to
// coroutines waiting in async_get(). Uses the real steady clock (its timers
// cannot follow a fake one); test time-dependent logic on WorkQueue.
//
// Single-threaded: call it only from the executor's thread (one io_context,
// run by one thread); nothing is locked. The object must outlive every
// coroutine waiting on it: shut_down() and await wait_workers_exited() before
// destroying it.
class AsyncWorkQueue final {
 public:
  explicit AsyncWorkQueue(boost::asio::any_io_executor executor,
                          RateLimiterOptions rate_limiter = {});
  ~AsyncWorkQueue();
  AsyncWorkQueue(const AsyncWorkQueue&) = delete;
  AsyncWorkQueue& operator=(const AsyncWorkQueue&) = delete;

  void add(const std::string& key);
  void add_after(const std::string& key, std::chrono::nanoseconds delay);
  void add_rate_limited(const std::string& key);
  void forget(const std::string& key);
  void done(const std::string& key);
  void shut_down();

  // Waits until a key is ready (queued or a delayed one due) and marks it
  // processing; the caller must call done(key). nullopt once shut down and the
  // queue is drained.
  boost::asio::awaitable<std::optional<std::string>> async_get();

  // Spawns n worker coroutines: each takes a key, awaits reconcile(key), then
  // forget + done on true, add_rate_limited + done on false or an exception.
  // They exit when the queue is shut down and drained.
  void run_workers(std::size_t n, Reconcile reconcile);
  // Completes when every worker started by run_workers has exited (at once if
  // none run). Typical shutdown: shut_down(); co_await wait_workers_exited();
  boost::asio::awaitable<void> wait_workers_exited();
  std::size_t workers_running() const;

  const WorkQueue& core() const;
  const WorkerCounters& worker_counters() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gracekeeper::kube
