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

// A failed measurement: the last good value if at most kLastGoodMaxAge old,
// else staticSeconds (raised to `floor` when given), metrics unavailable.
Measurement fall_back(const budget::PolicySpec& spec, std::string reason, std::string why,
                      const std::optional<LastGood>& last_good,
                      std::chrono::system_clock::time_point now,
                      std::optional<double> floor = std::nullopt);

}  // namespace gracekeeper::propagation::detail
