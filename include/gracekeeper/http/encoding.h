// Percent-encoding (RFC 3986) and query strings: the one implementation the
// Kubernetes and Prometheus clients share.
#pragma once

#include <string>
#include <string_view>

namespace gracekeeper::http {

// Appends `s` to `out` with every byte outside the unreserved set
// (ALPHA / DIGIT / "-" / "." / "_" / "~") written as %XX (upper-case hex).
// Safe for a path segment and for a query key or value alike.
void append_percent_encoded(std::string& out, std::string_view s);

inline std::string percent_encode(std::string_view s) {
  std::string out;
  append_percent_encoded(out, s);
  return out;
}

// Appends `key=value` (value percent-encoded) to a request target, after "?"
// or "&" as the target needs. An empty value appends nothing: every query
// parameter the clients send means "not set" when empty.
void add_query(std::string& target, std::string_view key, std::string_view value);

}  // namespace gracekeeper::http
