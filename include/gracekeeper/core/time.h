// Kubernetes' times as text: one RFC 3339 parser and two formatters, the
// only ones in the tree (metav1.Time, metav1.MicroTime, the annotations and
// status fields gracekeeper writes).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace gracekeeper::core {

using SystemTime = std::chrono::system_clock::time_point;

// "2026-12-01T18:00:00Z", with an optional fraction of any length (digits
// past the ninth are ignored) and "Z" or an offset "+01:30"; "T" and "Z"
// also in lower case. nullopt for anything else, a date that does not
// exist, a leap second (Kubernetes never writes one) and a year outside
// 1700-2200 (whose nanoseconds since 1970 would not fit SystemTime).
std::optional<SystemTime> parse_rfc3339(std::string_view text);

// "2026-12-01T18:00:00Z": UTC, whole seconds, the fraction dropped
// (metav1.Time).
std::string format_rfc3339(SystemTime);

// "2026-12-01T18:00:00.123456Z": UTC, microseconds (metav1.MicroTime).
std::string format_rfc3339_micro(SystemTime);

}  // namespace gracekeeper::core
