#include "gracekeeper/kube/workqueue.h"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <exception>
#include <utility>

namespace gracekeeper::kube {

namespace {

Clock or_steady_clock(Clock clock) {
  if (clock) return clock;
  return [] { return std::chrono::steady_clock::now(); };
}

}  // namespace

// ---- RateLimiter ----

RateLimiter::RateLimiter(RateLimiterOptions options, Clock clock)
    : options_(options),
      clock_(or_steady_clock(std::move(clock))),
      tokens_(options.burst),  // x/time/rate starts with a full bucket
      last_refill_(clock_()) {}

std::chrono::nanoseconds RateLimiter::when(const std::string& key) {
  using std::chrono::nanoseconds;
  const int exp = failures_[key]++;
  // In double, like client-go, so a long failure streak saturates at max_delay
  // instead of overflowing.
  const double backoff = std::ldexp(static_cast<double>(options_.base_delay.count()), exp);
  const nanoseconds per_item = backoff >= static_cast<double>(options_.max_delay.count())
                                   ? options_.max_delay
                                   : nanoseconds(static_cast<nanoseconds::rep>(backoff));
  return std::max(per_item, bucket_delay());
}

std::chrono::nanoseconds RateLimiter::bucket_delay() {
  if (options_.qps <= 0) return std::chrono::nanoseconds::zero();
  const SteadyTime now = clock_();
  if (now > last_refill_) {
    const double elapsed = std::chrono::duration<double>(now - last_refill_).count();
    tokens_ = std::min(options_.burst, tokens_ + elapsed * options_.qps);
    last_refill_ = now;
  }
  // Take the token even when there is none: the debt is what makes the next
  // callers wait longer (rate.Limiter.Reserve), spreading retries out at qps.
  tokens_ -= 1.0;
  if (tokens_ >= 0) return std::chrono::nanoseconds::zero();
  const std::chrono::duration<double> wait(-tokens_ / options_.qps);
  return std::chrono::ceil<std::chrono::nanoseconds>(wait);
}

void RateLimiter::forget(const std::string& key) {
  failures_.erase(key);
}

int RateLimiter::num_requeues(const std::string& key) const {
  const auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

// ---- WorkQueue ----

WorkQueue::WorkQueue(WorkQueueOptions options)
    : clock_(or_steady_clock(std::move(options.clock))), limiter_(options.rate_limiter, clock_) {}

void WorkQueue::add(const std::string& key) {
  if (shutting_down_) {
    ++counters_.dropped_after_shutdown;
    return;
  }
  ++counters_.adds;
  if (!dirty_.insert(key).second) return;  // already waiting, or already dirty
  if (processing_.contains(key)) return;   // done() re-queues it
  queue_.push_back(key);
}

void WorkQueue::add_after(const std::string& key, std::chrono::nanoseconds delay) {
  if (shutting_down_) {
    ++counters_.dropped_after_shutdown;
    return;
  }
  if (delay <= std::chrono::nanoseconds::zero()) {
    add(key);
    return;
  }
  const SteadyTime ready = clock_() + delay;
  const auto it = waiting_.find(key);
  if (it != waiting_.end() && it->second.ready <= ready) return;
  const std::uint64_t seq = next_seq_++;
  waiting_[key] = WaitingRef{ready, seq};
  heap_.push(Waiting{ready, seq, key});
}

void WorkQueue::add_rate_limited(const std::string& key) {
  if (shutting_down_) {
    ++counters_.dropped_after_shutdown;
    return;
  }
  ++counters_.retries;
  add_after(key, limiter_.when(key));
}

void WorkQueue::forget(const std::string& key) {
  limiter_.forget(key);
}

int WorkQueue::num_requeues(const std::string& key) const {
  return limiter_.num_requeues(key);
}

std::optional<std::string> WorkQueue::get() {
  promote_ready();
  if (queue_.empty()) return std::nullopt;
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  processing_.insert(key);
  dirty_.erase(key);
  return key;
}

void WorkQueue::done(const std::string& key) {
  processing_.erase(key);
  // Dirty means it was added while processing: hand it out again now that no
  // one holds it. This runs after shut_down() too, so the latest add is not lost
  // from a drain.
  if (dirty_.contains(key)) queue_.push_back(key);
}

void WorkQueue::shut_down() {
  shutting_down_ = true;
  heap_ = {};
  waiting_.clear();
}

std::optional<SteadyTime> WorkQueue::next_ready_time() const {
  if (heap_.empty()) return std::nullopt;
  return heap_.top().ready;  // the top is never stale (drop_stale_heap_top)
}

void WorkQueue::promote_ready() {
  if (heap_.empty()) return;
  const SteadyTime now = clock_();
  while (!heap_.empty() && heap_.top().ready <= now) {
    Waiting top = heap_.top();
    heap_.pop();
    waiting_.erase(top.key);
    add(top.key);
    drop_stale_heap_top();
  }
}

void WorkQueue::drop_stale_heap_top() {
  while (!heap_.empty()) {
    const Waiting& top = heap_.top();
    const auto it = waiting_.find(top.key);
    if (it != waiting_.end() && it->second.seq == top.seq) return;
    heap_.pop();
  }
}

// ---- AsyncWorkQueue ----

namespace asio = boost::asio;

struct AsyncWorkQueue::State {
  explicit State(asio::any_io_executor ex, RateLimiterOptions rate_limiter)
      : executor(ex),
        core(WorkQueueOptions{.rate_limiter = rate_limiter, .clock = {}}),
        signal(ex),
        delay_timer(ex),
        workers_exited(ex) {
    // Timers used as events: they never expire by themselves; cancel wakes.
    signal.expires_at(asio::steady_timer::time_point::max());
    workers_exited.expires_at(asio::steady_timer::time_point::max());
  }

  // After anything that may have made keys ready or changed the earliest
  // delayed time: wake one waiter per ready key and re-arm the delay timer.
  void sync() {
    core.promote_ready();
    // One waiter per ready key is enough; a woken waiter that finds the queue
    // empty (another worker was quicker) just waits again.
    for (std::size_t ready = core.len(); ready > 0; --ready) {
      if (signal.cancel_one() == 0) break;
    }
    if (core.shutting_down() && core.len() == 0) signal.cancel();  // let them all see the end
    arm_delay_timer();
  }

  void arm_delay_timer() {
    const std::optional<SteadyTime> next = core.next_ready_time();
    if (next == armed_for) return;
    armed_for = next;
    ++arm_generation;
    if (!next) {
      delay_timer.cancel();
      return;
    }
    delay_timer.expires_at(*next);  // cancels the previous wait, if any
    delay_timer.async_wait([this, alive = std::weak_ptr<int>(alive_token),
                            generation = arm_generation](boost::system::error_code ec) {
      // Aborted: re-armed, or the queue is being destroyed. A wait that had
      // already completed when the queue was destroyed is not aborted, hence
      // the token: `this` may be gone.
      if (ec || alive.expired()) return;
      // A wait that completed just before it was re-armed is stale.
      if (generation != arm_generation) return;
      armed_for.reset();
      sync();
    });
  }

  asio::awaitable<std::optional<std::string>> next_key();
  asio::awaitable<void> worker(Reconcile reconcile);

  asio::any_io_executor executor;
  WorkQueue core;
  asio::steady_timer signal;
  asio::steady_timer delay_timer;
  std::shared_ptr<int> alive_token = std::make_shared<int>(0);
  std::optional<SteadyTime> armed_for;
  std::uint64_t arm_generation = 0;
  asio::steady_timer workers_exited;
  std::size_t workers_running = 0;
  WorkerCounters counters;
};

AsyncWorkQueue::AsyncWorkQueue(asio::any_io_executor executor, RateLimiterOptions rate_limiter)
    : state_(std::make_unique<State>(std::move(executor), rate_limiter)) {}

AsyncWorkQueue::~AsyncWorkQueue() = default;

void AsyncWorkQueue::add(const std::string& key) {
  state_->core.add(key);
  state_->sync();
}

void AsyncWorkQueue::add_after(const std::string& key, std::chrono::nanoseconds delay) {
  state_->core.add_after(key, delay);
  state_->sync();
}

void AsyncWorkQueue::add_rate_limited(const std::string& key) {
  state_->core.add_rate_limited(key);
  state_->sync();
}

void AsyncWorkQueue::forget(const std::string& key) {
  state_->core.forget(key);
}

void AsyncWorkQueue::done(const std::string& key) {
  state_->core.done(key);
  state_->sync();
}

void AsyncWorkQueue::shut_down() {
  state_->core.shut_down();
  state_->sync();
}

asio::awaitable<std::optional<std::string>> AsyncWorkQueue::async_get() {
  return state_->next_key();
}

asio::awaitable<std::optional<std::string>> AsyncWorkQueue::State::next_key() {
  for (;;) {
    if (std::optional<std::string> key = core.get()) {
      arm_delay_timer();  // get() may have promoted delayed keys
      co_return key;
    }
    if (core.shutting_down()) co_return std::nullopt;
    // No suspension between the check above and this wait, and there is only
    // one thread, so a wake-up cannot slip in between.
    boost::system::error_code ec;
    co_await signal.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<void> AsyncWorkQueue::State::worker(Reconcile reconcile) {
  while (std::optional<std::string> key = co_await next_key()) {
    bool ok = false;
    try {
      ok = co_await reconcile(*key);
    } catch (...) {
      // A reconcile bug must not take the worker (or the operator) down:
      // exceptions stop here and count as a failure to retry with backoff.
      ++counters.exceptions;
    }
    if (ok) {
      ++counters.reconciled;
      core.forget(*key);
    } else {
      ++counters.failed;
      core.add_rate_limited(*key);
    }
    core.done(*key);
    sync();
  }
}

void AsyncWorkQueue::run_workers(std::size_t n, Reconcile reconcile) {
  State& s = *state_;
  for (std::size_t i = 0; i < n; ++i) {
    ++s.workers_running;
    asio::co_spawn(s.executor, s.worker(reconcile), [&s](std::exception_ptr) {
      // Only allocation failure can get here (reconcile's exceptions are caught
      // in the loop); the worker is gone either way, so count it out.
      if (--s.workers_running == 0) s.workers_exited.cancel();
    });
  }
}

asio::awaitable<void> AsyncWorkQueue::wait_workers_exited() {
  State& s = *state_;
  while (s.workers_running > 0) {
    boost::system::error_code ec;
    co_await s.workers_exited.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

std::size_t AsyncWorkQueue::workers_running() const {
  return state_->workers_running;
}

const WorkQueue& AsyncWorkQueue::core() const {
  return state_->core;
}

const WorkerCounters& AsyncWorkQueue::worker_counters() const {
  return state_->counters;
}

}  // namespace gracekeeper::kube
