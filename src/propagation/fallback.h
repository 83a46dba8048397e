// Shared by the sources' pure parts (propagation.cpp, observed.cpp): the
// fallback rule of docs/api.md ("The budget") and how figures are written in messages.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "gracekeeper/propagation/propagation.h"

namespace gracekeeper::propagation::detail {

// "3.472s", "10s".
std::string seconds_text(double s);

// What a fallback figure is never below:
//  * Prometheus: the queries that did answer (a lower bound of the true
//    maximum), measured now;
//  * Observed: the slowest consumer's declared allowance (the measured
//    figure is the samples' quantile plus it, so never below it), a figure
//    of the spec rather than a measurement.
struct Floor {
  double seconds = 0;
  std::string consumer{};  // named in Measurement::consumer when the floor sets the figure
  std::string text{};      // ", raised to 8s " + text
  bool measured = false;   // the figure was measured now: sampled_at becomes now
};

// A failed measurement: the last good value if at most kLastGoodMaxAge old,
// else staticSeconds (raised to `floor` when given), metrics unavailable.
Measurement fall_back(const budget::PolicySpec& spec, std::string reason, std::string why,
                      const std::optional<LastGood>& last_good,
                      std::chrono::system_clock::time_point now,
                      const std::optional<Floor>& floor = std::nullopt);

}  // namespace gracekeeper::propagation::detail
