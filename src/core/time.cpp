#include "gracekeeper/core/time.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cstdint>

namespace gracekeeper::core {
namespace {

using namespace std::chrono;

constexpr int kFirstYear = 1700;
constexpr int kLastYear = 2200;

// Reads exactly `n` digits at `pos`.
bool digits(std::string_view text, std::size_t& pos, std::size_t n, int& out) {
  if (pos + n > text.size()) return false;
  out = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = text[pos + i];
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  pos += n;
  return true;
}

bool expect(std::string_view text, std::size_t& pos, char c) {
  if (pos >= text.size() || text[pos] != c) return false;
  ++pos;
  return true;
}

// ".123": the fraction of a second, nanoseconds; nullopt for a dot without digits.
std::optional<nanoseconds> fraction(std::string_view text, std::size_t& pos) {
  if (pos >= text.size() || text[pos] != '.') return nanoseconds{0};
  ++pos;
  std::int64_t ns = 0;
  int count = 0;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    if (count < 9) ns = ns * 10 + (text[pos] - '0');
    ++count;
    ++pos;
  }
  if (count == 0) return std::nullopt;
  for (int i = count; i < 9; ++i) ns *= 10;
  return nanoseconds(ns);
}

// "Z" or "+hh:mm" / "-hh:mm", to the end of the text.
std::optional<minutes> offset(std::string_view text, std::size_t& pos) {
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
    return minutes{0};
  }
  if (pos >= text.size() || (text[pos] != '+' && text[pos] != '-')) return std::nullopt;
  const int sign = text[pos] == '-' ? -1 : 1;
  ++pos;
  int oh = 0, om = 0;
  if (!digits(text, pos, 2, oh) || !expect(text, pos, ':') || !digits(text, pos, 2, om) ||
      oh > 23 || om > 59) {
    return std::nullopt;
  }
  return minutes(sign * (oh * 60 + om));
}

}  // namespace

std::optional<SystemTime> parse_rfc3339(std::string_view text) {
  std::size_t pos = 0;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!digits(text, pos, 4, year) || !expect(text, pos, '-') || !digits(text, pos, 2, month) ||
      !expect(text, pos, '-') || !digits(text, pos, 2, day)) {
    return std::nullopt;
  }
  if (pos >= text.size() || (text[pos] != 'T' && text[pos] != 't')) return std::nullopt;
  ++pos;
  if (!digits(text, pos, 2, hour) || !expect(text, pos, ':') || !digits(text, pos, 2, minute) ||
      !expect(text, pos, ':') || !digits(text, pos, 2, second)) {
    return std::nullopt;
  }
  const auto frac = fraction(text, pos);
  const auto off = frac ? offset(text, pos) : std::nullopt;
  if (!off || pos != text.size()) return std::nullopt;
  const year_month_day date{std::chrono::year(year),
                            std::chrono::month(static_cast<unsigned>(month)),
                            std::chrono::day(static_cast<unsigned>(day))};
  if (!date.ok() || hour > 23 || minute > 59 || second > 59) return std::nullopt;
  // SystemTime counts nanoseconds in 64 bits: only 1678-2262 fit. Nothing
  // Kubernetes or gracekeeper writes lies outside 1700-2200.
  if (year < kFirstYear || year > kLastYear) return std::nullopt;
  const auto t = sys_days(date) + hours(hour) + minutes(minute) + seconds(second) - *off;
  return time_point_cast<SystemTime::duration>(t + *frac);
}

std::string format_rfc3339(SystemTime t) {
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", floor<seconds>(t));
}

std::string format_rfc3339_micro(SystemTime t) {
  const auto s = floor<seconds>(t);
  const auto us = duration_cast<microseconds>(t - s).count();
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:06}Z", s, us);
}

}  // namespace gracekeeper::core
