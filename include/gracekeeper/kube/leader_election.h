// Leader election on a coordination.k8s.io/v1 Lease, after client-go's
// tools/leaderelection: candidates race to write their identity into the
// Lease with optimistic concurrency (create, or replace with the
// resourceVersion they read; a Conflict means another candidate won). The
// leader renews every retry period.
//
// Expiry is judged as client-go judges it, on each candidate's own monotonic
// clock, never from the Lease's timestamps: a candidate notes when IT saw the
// Lease's record change (holder, renewTime, ...), and takes a Lease held by
// another only when leaseDurationSeconds has passed on its clock since then
// (or when the holder is empty: released). So a candidate whose wall clock
// runs ahead cannot take a live Lease. The leader stops acting when no
// renewal succeeded within renew_deadline counted from the START of its last
// successful attempt: that write reached the server after the attempt began,
// and every other candidate saw it later still, so the leader has stopped
// before any other candidate's leaseDuration (> renew_deadline) has passed.
// renewTime and acquireTime are written for people and other tools only.
//
// Preconditions: lease_duration > renew_deadline > retry_period > 0. The
// candidates' clocks need not agree; their rates must (as for client-go).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "gracekeeper/kube/client.h"

namespace gracekeeper::kube {

// The clocks the elector reads; tests replace them.
struct LeaderElectionClocks {
  // Written into the Lease (acquireTime, renewTime); never used to judge expiry.
  std::function<std::chrono::system_clock::time_point()> wall = [] {
    return std::chrono::system_clock::now();
  };
  // When a Lease record was observed, and the leader's renew deadline.
  std::function<std::chrono::steady_clock::time_point()> monotonic = [] {
    return std::chrono::steady_clock::now();
  };
};

struct LeaderElectionConfig {
  std::string namespace_{};
  std::string name{};      // the Lease's name
  std::string identity{};  // this candidate, unique among candidates (e.g. the pod name)
  std::chrono::milliseconds lease_duration{15'000};
  // The leader gives up when no renewal succeeded for this long, so it stops
  // acting before the lease can expire and another candidate take over.
  std::chrono::milliseconds renew_deadline{10'000};
  std::chrono::milliseconds retry_period{2'000};

  // Called on the executor, from within run(). They must not block.
  std::function<void()> on_started_leading{};
  std::function<void()> on_stopped_leading{};
  // When the observed holder changes (including to this identity); not for an empty holder.
  std::function<void(const std::string&)> on_new_leader{};

  LeaderElectionClocks clocks{};
};

// The Lease's spec as read or written (coordination.k8s.io/v1 LeaseSpec).
struct LeaseRecord {
  std::string holder_identity{};
  std::int64_t lease_duration_seconds = 0;
  std::optional<std::chrono::system_clock::time_point> acquire_time{};
  std::optional<std::chrono::system_clock::time_point> renew_time{};
  std::int64_t lease_transitions = 0;
};

// Pure helpers, exposed for tests.
// The Lease's times are MicroTime (core::format_rfc3339_micro).
LeaseRecord lease_record_from_json(const nlohmann::json& lease);
nlohmann::json lease_spec_to_json(const LeaseRecord&);
// Valid for a candidate that observed this record (saw it change) at
// `observed_at` on its own monotonic clock: a holder is set and
// leaseDurationSeconds has not yet passed since then. The record's renewTime
// plays no part (client-go's rule).
bool lease_valid(const LeaseRecord&, std::chrono::steady_clock::time_point observed_at,
                 std::chrono::steady_clock::time_point now);
// The same record, as far as expiry is concerned (holder, times, duration, transitions).
bool same_record(const LeaseRecord&, const LeaseRecord&);

class LeaderElector {
 public:
  // `client` must outlive the elector and every coroutine it runs.
  LeaderElector(Client& client, LeaderElectionConfig config);

  // Tries to acquire the lease every retry period until it succeeds, then
  // renews it every retry period. Returns (after on_stopped_leading) when a
  // renewal has not succeeded within the renew deadline or another holder
  // is found: like client-go, a replica that lost leadership should exit or
  // call run() again. Cancellable: on cancellation a leader calls
  // on_stopped_leading and the cancellation propagates (operation_aborted);
  // call release() afterwards to hand over at once.
  boost::asio::awaitable<void> run();

  // Graceful hand-over: when this identity holds the lease, rewrites it with
  // an empty holder, leaseDurationSeconds 1 and renewTime now, so another
  // candidate acquires it at its next retry. Errors are returned, not thrown.
  boost::asio::awaitable<std::expected<void, ApiError>> release();

  // One attempt: true when this identity holds the lease afterwards. run()
  // calls it every retry period; public for tests that drive the clocks.
  boost::asio::awaitable<bool> try_acquire_or_renew();

  bool is_leader() const { return leading_; }
  const std::string& observed_holder() const { return observed_.holder_identity; }
  const LeaderElectionConfig& config() const { return config_; }

 private:
  void observe(const LeaseRecord&);
  // The observed Lease is held by another candidate and not yet expired on our clock.
  bool held_by_another() const;
  void stop_leading();

  Client& client_;
  LeaderElectionConfig config_;
  LeaseRecord observed_{};
  // When observed_ last changed, on config_.clocks.monotonic.
  std::chrono::steady_clock::time_point observed_time_{};
  bool observed_once_ = false;
  std::string observed_resource_version_{};
  bool leading_ = false;
};

}  // namespace gracekeeper::kube
