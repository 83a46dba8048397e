#include "gracekeeper/budget/types.h"

#include <fmt/format.h>

#include <limits>

namespace gracekeeper::budget {

std::string FieldError::format() const {
  // A problem with the whole document (it is not even an object) has no field to name.
  if (path.empty()) return message;
  return fmt::format("{}: {}", path, message);
}

namespace {

// Integer division that rounds towards minus / plus infinity (C++ `/` truncates
// towards zero), so the results match math.Floor / math.Ceil in the Deployment
// controller even for a negative value.
std::int64_t floor_div(std::int64_t numerator, std::int64_t denominator) {
  std::int64_t quotient = numerator / denominator;
  if (numerator % denominator != 0 && numerator < 0) --quotient;
  return quotient;
}

std::int64_t ceil_div(std::int64_t numerator, std::int64_t denominator) {
  std::int64_t quotient = numerator / denominator;
  if (numerator % denominator != 0 && numerator > 0) ++quotient;
  return quotient;
}

}  // namespace

std::int64_t IntOrPercent::resolve(std::int64_t replicas, bool round_up) const {
  if (!percent) return value;
  // Same as intstr.GetScaledValueFromIntOrPercent, but in exact integer arithmetic
  // instead of float64: value * replicas cannot overflow for percentages (<= 100 after
  // validation) and replica counts (int32 in the Deployment API).
  std::int64_t scaled = 0;
  if (__builtin_mul_overflow(value, replicas, &scaled)) {
    // Only reachable for values no validated object holds; saturate, never wrap.
    scaled = (value < 0) != (replicas < 0) ? std::numeric_limits<std::int64_t>::min()
                                           : std::numeric_limits<std::int64_t>::max();
  }
  return round_up ? ceil_div(scaled, 100) : floor_div(scaled, 100);
}

std::string IntOrPercent::to_string() const {
  return percent ? fmt::format("{}%", value) : fmt::format("{}", value);
}

}  // namespace gracekeeper::budget
