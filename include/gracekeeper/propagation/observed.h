// Source Observed (docs/api.md, "Propagation sources"): gracekeeper's own timing of
// EndpointSlice changes, without Prometheus.
//
// A sample is the control plane's part of endpoint propagation for one
// endpoint that turned not ready or terminating: when gracekeeper saw the
// slice change, minus the slice's endpoints.kubernetes.io/last-change-trigger-time
// (the pod change that caused it; the start kube-proxy's own
// network-programming SLI uses). The two clocks are different machines'
// (the controller manager's and gracekeeper's): a negative difference is
// skew, clamped to 0 and counted.
//
// Everything here is pure: the caller passes the times.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <expected>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "gracekeeper/budget/policy.h"
#include "gracekeeper/propagation/propagation.h"

namespace gracekeeper::propagation {

using TimePoint = std::chrono::system_clock::time_point;

inline constexpr const char* kTriggerTimeAnnotation =
    "endpoints.kubernetes.io/last-change-trigger-time";

// One sample, or why there is none.
struct Lag {
  double seconds = 0;    // >= 0
  bool clamped = false;  // the trigger time was after `seen`: clock skew
};
struct LagError {
  enum class Kind { Missing, Garbage } kind = Kind::Missing;
  std::string message;  // names the annotation and the value
};
// `trigger` is the annotation's value, nullptr when the slice has none.
std::expected<Lag, LagError> lag(const std::string* trigger, TimePoint seen);

// What the book knows of one namespace's window.
struct Window {
  std::size_t count = 0;           // samples in the window (implausible ones not included)
  std::optional<double> quantile;  // nullopt when count == 0
  // The window holds fewer samples than the quantile needs (count < 1 / (1 -
  // quantile)): nearest rank would be the largest sample alone, so the
  // quantile is the second largest (below).
  bool short_tail = false;
  std::size_t implausible = 0;  // samples seen in the window and dropped as implausible
};

// The largest sample a policy can use (docs/api.md, "Propagation sources"):
// preStop.maxSeconds / safetyFactor. A figure above it gives a wait above
// maxSeconds even with no load balancer and consumerSyncSeconds 0, so the
// wait would be clamped to maxSeconds whatever the sample's value: such a
// sample can only move the figure to the clamp, and is an outlier (a stuck
// controller, clock skew) far more often than a cluster that slow.
double implausible_above(const budget::PolicySpec& spec);

// The samples per namespace, oldest first. Each namespace keeps at most
// kMaxSamples and nothing older than kMaxAge (the largest windowSeconds);
// a policy reads its own window of them.
class SampleBook {
 public:
  static constexpr std::size_t kMaxSamples = 4096;
  static constexpr std::chrono::seconds kMaxAge{86400};

  // `seen` must not go backwards within a namespace by much: samples are
  // kept in arrival order and pruned from the front. A sample above
  // `implausible_above` (implausible_above(), the largest of the namespace's
  // policies) is dropped from every window and counted, in `implausible` and
  // in the windows' Window::implausible; add() returns false for it.
  bool add(const std::string& ns, TimePoint seen, double seconds,
           double implausible_above = std::numeric_limits<double>::infinity());
  // The nearest-rank `quantile` (0 < q < 1) of the samples of `ns` seen in
  // (now - window, now], except that the rank is at most n - 1 when n >= 2:
  // a single sample, the largest, never sets the figure. This only binds when
  // n < 1 / (1 - quantile) (20 samples at 0.99), where nearest rank would be
  // the maximum; the window then says short_tail.
  Window window(std::string_view ns, std::chrono::seconds window, double quantile,
                TimePoint now) const;
  // Drops what is older than kMaxAge everywhere (and empty namespaces).
  void prune(TimePoint now);
  std::size_t namespaces() const { return samples_.size(); }

  // Counters for metrics and logs.
  struct Counters {
    std::uint64_t samples = 0;
    std::uint64_t clamped = 0;      // negative: skew between the controller manager and us
    std::uint64_t missing = 0;      // no trigger-time annotation: dropped
    std::uint64_t garbage = 0;      // an annotation that is not a time: dropped
    std::uint64_t implausible = 0;  // above implausible_above(): dropped (also in `samples`)
  };
  Counters& counters() { return counters_; }
  const Counters& counters() const { return counters_; }

 private:
  struct Sample {
    TimePoint seen;
    float seconds;
    bool implausible;  // kept only to be counted in Window::implausible
  };
  std::map<std::string, std::deque<Sample>, std::less<>> samples_;
  Counters counters_;
};

// The Measurement of source Observed from a policy's window:
//  * at least observed.minSamples samples: seconds = quantile +
//    observed.consumerSyncSeconds, reason SamplesSufficient, available; the
//    message says when the quantile is the second largest (short_tail) and
//    how many implausible samples were dropped;
//  * fewer: the fallback (last good value at most kLastGoodMaxAge old, else
//    staticSeconds), reason TooFewSamples, MetricsAvailable false, and a
//    message with the count.
Measurement observed_measurement(const budget::PolicySpec& spec, const Window& window,
                                 const std::optional<LastGood>& last_good, TimePoint now);

}  // namespace gracekeeper::propagation
