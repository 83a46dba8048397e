#include "gracekeeper/propagation/observed.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

#include "fallback.h"
#include "gracekeeper/core/time.h"

namespace gracekeeper::propagation {

using namespace std::chrono;

std::expected<Lag, LagError> lag(const std::string* trigger, TimePoint seen) {
  if (trigger == nullptr) {
    return std::unexpected(LagError{LagError::Kind::Missing,
                                    std::string("no ") + kTriggerTimeAnnotation + " annotation"});
  }
  const std::optional<TimePoint> t = core::parse_rfc3339(*trigger);
  if (!t) {
    return std::unexpected(
        LagError{LagError::Kind::Garbage,
                 fmt::format("{} is not an RFC 3339 time: \"{}\"", kTriggerTimeAnnotation,
                             std::string_view(*trigger).substr(0, 64))});
  }
  const double seconds = duration<double>(seen - *t).count();
  if (seconds < 0) return Lag{0, true};
  return Lag{seconds, false};
}

double implausible_above(const budget::PolicySpec& spec) {
  return static_cast<double>(spec.pre_stop.max_seconds) / spec.propagation.safety_factor;
}

bool SampleBook::add(const std::string& ns, TimePoint seen, double seconds,
                     double implausible_above) {
  auto it = samples_.find(ns);
  if (it == samples_.end()) it = samples_.emplace(ns, std::deque<Sample>{}).first;
  auto& q = it->second;
  const bool implausible = seconds > implausible_above;
  q.push_back({seen, static_cast<float>(seconds), implausible});
  while (q.size() > kMaxSamples) q.pop_front();
  while (!q.empty() && seen - q.front().seen > kMaxAge) q.pop_front();
  ++counters_.samples;
  if (implausible) ++counters_.implausible;
  return !implausible;
}

Window SampleBook::window(std::string_view ns, std::chrono::seconds window, double quantile,
                          TimePoint now) const {
  Window out;
  auto it = samples_.find(ns);
  if (it == samples_.end()) return out;
  std::vector<float> values;
  for (const Sample& s : it->second) {
    if (!(now - s.seen < window && s.seen <= now)) continue;
    if (s.implausible) {
      ++out.implausible;
    } else {
      values.push_back(s.seconds);
    }
  }
  out.count = values.size();
  if (values.empty()) return out;
  // Nearest rank: the smallest sample with at least `quantile` of them at or
  // below it; but never the largest alone (n - 1), which only binds when n <
  // 1 / (1 - quantile).
  const auto n = values.size();
  std::size_t rank = static_cast<std::size_t>(std::ceil(quantile * static_cast<double>(n)));
  if (n >= 2 && rank >= n) {
    rank = n - 1;
    out.short_tail = true;
  }
  rank = std::clamp<std::size_t>(rank, 1, n);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rank - 1),
                   values.end());
  out.quantile = values[rank - 1];
  return out;
}

void SampleBook::prune(TimePoint now) {
  for (auto it = samples_.begin(); it != samples_.end();) {
    auto& q = it->second;
    while (!q.empty() && now - q.front().seen > kMaxAge) q.pop_front();
    it = q.empty() ? samples_.erase(it) : std::next(it);
  }
}

namespace {

// What the figure adds to the samples' quantile, for the message:
// "consumerSyncSeconds 1s" without declared consumers, else
// "traefik 2.5s, the slowest consumer (kube-proxy 1s, traefik 2.5s)".
// Every consumer's allowance: "kube-proxy 1s, traefik 2.5s".
std::string consumers_text(const budget::ObservedSource& o) {
  std::string all =
      fmt::format("{} {}", budget::kServiceConsumer, detail::seconds_text(o.consumer_sync_seconds));
  for (const auto& c : o.consumers)
    all += fmt::format(", {} {}", c.name, detail::seconds_text(c.sync_seconds));
  return all;
}

std::string allowance_text(const budget::ObservedSource& o) {
  if (o.consumers.empty()) {
    return "consumerSyncSeconds " + detail::seconds_text(o.consumer_sync_seconds);
  }
  const budget::DeclaredConsumer slowest = o.slowest_consumer();
  return fmt::format("{} {}, the slowest consumer ({})", slowest.name,
                     detail::seconds_text(slowest.sync_seconds), consumers_text(o));
}

// Why a fallback was raised to the slowest allowance: "to cover the slowest
// declared consumer, traefik 8s (kube-proxy 1s, traefik 8s)", or "to cover
// consumerSyncSeconds 1s (kube-proxy)" without declared consumers.
std::string floor_text(const budget::ObservedSource& o) {
  if (o.consumers.empty()) {
    return fmt::format("to cover consumerSyncSeconds {} ({})",
                       detail::seconds_text(o.consumer_sync_seconds), budget::kServiceConsumer);
  }
  const budget::DeclaredConsumer slowest = o.slowest_consumer();
  return fmt::format("to cover the slowest declared consumer, {} {} ({})", slowest.name,
                     detail::seconds_text(slowest.sync_seconds), consumers_text(o));
}

}  // namespace

Measurement observed_measurement(const budget::PolicySpec& spec, const Window& window,
                                 const std::optional<LastGood>& last_good, TimePoint now) {
  const auto& o = spec.propagation.observed;
  const std::string span = fmt::format("{}s", o.window_seconds);
  const std::string dropped =
      window.implausible == 0
          ? std::string()
          : fmt::format(" ({} implausible sample(s) above maxSeconds / safetyFactor = {} dropped)",
                        window.implausible, detail::seconds_text(implausible_above(spec)));
  const budget::DeclaredConsumer slowest = o.slowest_consumer();
  if (window.count < static_cast<std::size_t>(o.min_samples) || !window.quantile) {
    // docs/api.md, "Consumers": a measured figure is never below the slowest
    // declared allowance (a quantile is >= 0), so neither is the fallback:
    // max(fallback, allowance), the rule of Prometheus queries that did answer.
    return detail::fall_back(
        spec, "TooFewSamples",
        fmt::format("{} sample(s) of EndpointSlice propagation in the last {}{}, minSamples is {}",
                    window.count, span, dropped, o.min_samples),
        last_good, now,
        detail::Floor{.seconds = slowest.sync_seconds,
                      .consumer = slowest.name,
                      .text = floor_text(o),
                      .measured = false});
  }
  Measurement m;
  // Milliseconds are plenty, and spare the status float noise (samples are floats).
  m.seconds = std::round((*window.quantile + slowest.sync_seconds) * 1000) / 1000;
  m.source = budget::to_string(spec.propagation.source);
  m.consumer = slowest.name;
  m.metrics_available = true;
  m.reason = "SamplesSufficient";
  m.message =
      fmt::format("quantile {} of {} EndpointSlice sample(s) in the last {}{}{}: {} + {}",
                  spec.propagation.quantile, window.count, span,
                  window.short_tail ? " (too few for that quantile: the second largest)" : "",
                  dropped, detail::seconds_text(*window.quantile), allowance_text(o));
  m.sampled_at = now;
  m.fallback = false;
  m.last_good = LastGood{.seconds = m.seconds, .sampled_at = now};
  return m;
}

}  // namespace gracekeeper::propagation
