#include "gracekeeper/http/encoding.h"

#include <array>

namespace gracekeeper::http {
namespace {

// Locale-independent (std::isalnum is not): the unreserved set of RFC 3986.
constexpr std::array<bool, 256> kUnreserved = [] {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = true;
  t['-'] = t['.'] = t['_'] = t['~'] = true;
  return t;
}();

}  // namespace

void append_percent_encoded(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  out.reserve(out.size() + s.size());
  for (unsigned char ch : s) {
    if (kUnreserved[ch]) {
      out += static_cast<char>(ch);
    } else {
      out += '%';
      out += hex[ch >> 4];
      out += hex[ch & 15];
    }
  }
}

void add_query(std::string& target, std::string_view key, std::string_view value) {
  if (value.empty()) return;
  target += target.find('?') == std::string::npos ? '?' : '&';
  target += key;
  target += '=';
  append_percent_encoded(target, value);
}

}  // namespace gracekeeper::http
