#include "scalar.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

namespace gracekeeper::manifest::detail {
namespace {

// go-yaml v2 looks at the first byte to decide which rules may apply at all;
// most Kubernetes strings (names, images, paths) start with a letter outside
// this table and are settled with one lookup.
enum class Hint : char { None, InTable, Digit, Sign, Dot };

constexpr std::array<Hint, 256> make_hints() {
  std::array<Hint, 256> hints{};
  for (char c : std::string_view("yYnNtTfFoO~"))
    hints[static_cast<unsigned char>(c)] = Hint::InTable;
  for (char c = '0'; c <= '9'; ++c) hints[static_cast<unsigned char>(c)] = Hint::Digit;
  hints['+'] = Hint::Sign;
  hints['-'] = Hint::Sign;
  hints['.'] = Hint::Dot;
  return hints;
}
constexpr std::array<Hint, 256> kHints = make_hints();

struct Word {
  std::string_view text;
  int kind;  // 0 false, 1 true, 2 null, 3 nan, 4 +inf, 5 -inf
};

// YAML 1.1 as Kubernetes reads it: `yes`, `on` and `y` are booleans there, which
// is why `value: yes` in an env var fails to apply. Matching that avoids
// surprises between `plan` and `kubectl apply`.
constexpr std::array<Word, 38> kWords{{
    {"y", 1},     {"Y", 1},     {"yes", 1},   {"Yes", 1},   {"YES", 1},   {"true", 1},
    {"True", 1},  {"TRUE", 1},  {"on", 1},    {"On", 1},    {"ON", 1},    {"n", 0},
    {"N", 0},     {"no", 0},    {"No", 0},    {"NO", 0},    {"false", 0}, {"False", 0},
    {"FALSE", 0}, {"off", 0},   {"Off", 0},   {"OFF", 0},   {"~", 2},     {"null", 2},
    {"Null", 2},  {"NULL", 2},  {".nan", 3},  {".NaN", 3},  {".NAN", 3},  {".inf", 4},
    {".Inf", 4},  {".INF", 4},  {"+.inf", 4}, {"+.Inf", 4}, {"+.INF", 4}, {"-.inf", 5},
    {"-.Inf", 5}, {"-.INF", 5},
}};

const Word* find_word(std::string_view text) {
  if (text.empty() || text.size() > 5) return nullptr;
  for (const Word& w : kWords) {
    if (w.text == text) return &w;
  }
  return nullptr;
}

Json word_value(const Word& w) {
  switch (w.kind) {
    case 0:
      return false;
    case 1:
      return true;
    case 3:
      return std::numeric_limits<double>::quiet_NaN();
    case 4:
      return std::numeric_limits<double>::infinity();
    case 5:
      return -std::numeric_limits<double>::infinity();
    default:
      return nullptr;
  }
}

enum class IntResult { Ok, Syntax, Range };

int digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return 99;
}

// Go's strconv.ParseInt(s, 0, 64), which go-yaml uses: optional sign, then
// 0x / 0o / 0b prefixes or a leading 0 for octal (so `defaultMode: 0644` is 420).
// Unlike Go it checks every digit before reporting overflow, so that
// `99999999999999999999x` stays a string rather than becoming a range error.
IntResult parse_int(std::string_view s, std::int64_t& out) {
  if (s.empty()) return IntResult::Syntax;
  bool negative = false;
  if (s[0] == '+' || s[0] == '-') {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) return IntResult::Syntax;
  int base = 10;
  if (s[0] == '0') {
    char p = s.size() >= 3 ? static_cast<char>(s[1] | 0x20) : '\0';
    if (p == 'x') {
      base = 16;
      s.remove_prefix(2);
    } else if (p == 'o') {
      base = 8;
      s.remove_prefix(2);
    } else if (p == 'b') {
      base = 2;
      s.remove_prefix(2);
    } else {
      base = 8;
      s.remove_prefix(1);
    }
  }
  std::uint64_t value = 0;
  bool overflow = false;
  const auto limit = std::numeric_limits<std::uint64_t>::max();
  for (char c : s) {
    int d = digit_value(c);
    if (d >= base) return IntResult::Syntax;
    if (overflow) continue;
    if (value > (limit - static_cast<std::uint64_t>(d)) / static_cast<std::uint64_t>(base)) {
      overflow = true;
    } else {
      value = value * static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(d);
    }
  }
  constexpr auto max_positive =
      static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (overflow) return IntResult::Range;
  if (negative) {
    if (value > max_positive + 1) return IntResult::Range;
    // Negate in unsigned arithmetic: -(2^63) has no positive int64 counterpart.
    out = static_cast<std::int64_t>(~value + 1);
  } else {
    if (value > max_positive) return IntResult::Range;
    out = static_cast<std::int64_t>(value);
  }
  return IntResult::Ok;
}

// go-yaml's yamlStyleFloat: ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$
bool is_yaml_float(std::string_view s) {
  std::size_t i = 0;
  auto digits = [&] {
    std::size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - start;
  };
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (digits() == 0) return false;
  } else {
    if (digits() == 0) return false;
    if (i < s.size() && s[i] == '.') {
      ++i;
      digits();
    }
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

// Parses a string that matched is_yaml_float. Go's ParseFloat fails on
// overflow and go-yaml then keeps the text as a string; underflow rounds to 0.
std::optional<double> parse_float(std::string_view s) {
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  double value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec == std::errc::result_out_of_range) {
    // Tell overflow from underflow by the exponent's sign and the mantissa.
    auto e = s.find_first_of("eE");
    bool tiny = e != std::string_view::npos && e + 1 < s.size() && s[e + 1] == '-';
    if (!tiny) return std::nullopt;
    value = 0;
  } else if (ec != std::errc() || end != s.data() + s.size()) {
    return std::nullopt;
  }
  return negative ? -value : value;
}

std::string without_underscores(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c != '_') out.push_back(c);
  }
  return out;
}

// go-yaml's quick timestamp check (YYYY-): such plain scalars become
// time.Time there. We keep the text, but the writer must quote it.
bool looks_like_timestamp(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  return i == 4 && i < s.size() && s[i] == '-';
}

std::expected<Json, std::string> resolve_number(std::string_view text) {
  std::string plain = without_underscores(text);
  std::int64_t integer = 0;
  switch (parse_int(plain, integer)) {
    case IntResult::Ok:
      return Json(integer);
    case IntResult::Range:
      return std::unexpected(fmt::format(
          "integer {} does not fit in 64 bits (quote it if it is meant as a string)", text));
    case IntResult::Syntax:
      break;
  }
  if (is_yaml_float(plain)) {
    if (auto d = parse_float(plain)) return Json(*d);
  }
  return Json(std::string(text));
}

}  // namespace

std::expected<Json, std::string> resolve_plain(std::string_view text) {
  if (text.empty()) return Json(nullptr);
  Hint hint = kHints[static_cast<unsigned char>(text[0])];
  if (hint == Hint::None) return Json(std::string(text));
  if (const Word* w = find_word(text)) return word_value(*w);
  switch (hint) {
    case Hint::Dot:
      if (is_yaml_float(text)) {
        if (auto d = parse_float(text)) return Json(*d);
      }
      break;
    case Hint::Digit:
    case Hint::Sign:
      if (looks_like_timestamp(text)) break;
      return resolve_number(text);
    default:
      break;
  }
  return Json(std::string(text));
}

std::string display_tag(std::string_view tag) {
  if (tag.starts_with(kCoreTagPrefix)) {
    return fmt::format("!!{}", tag.substr(kCoreTagPrefix.size()));
  }
  return std::string(tag);
}

std::expected<Json, std::string> resolve_tagged(std::string_view tag, std::string_view text) {
  if (tag == "?") return resolve_plain(text);
  if (tag == "!") return Json(std::string(text));
  if (!tag.starts_with(kCoreTagPrefix)) {
    return std::unexpected(
        fmt::format("unsupported tag {}: Kubernetes manifests use only the YAML core tags "
                    "(!!str, !!int, !!float, !!bool, !!null, !!map, !!seq)",
                    display_tag(tag)));
  }
  std::string_view name = tag.substr(kCoreTagPrefix.size());
  if (name == "str") return Json(std::string(text));
  auto cannot = [&] {
    return std::unexpected(fmt::format("cannot read `{}` as {}", text, display_tag(tag)));
  };
  if (name == "int" || name == "bool" || name == "null" || name == "float") {
    auto value = resolve_plain(text);
    if (!value) return value;
    if (name == "int" && value->is_number_integer()) return value;
    if (name == "bool" && value->is_boolean()) return value;
    if (name == "null" && value->is_null()) return value;
    if (name == "float") {
      if (value->is_number_float()) return value;
      if (value->is_number_integer()) return Json(static_cast<double>(value->get<std::int64_t>()));
    }
    return cannot();
  }
  if (name == "map" || name == "seq") {
    return std::unexpected(fmt::format("tag {} on a scalar value", display_tag(tag)));
  }
  return std::unexpected(
      fmt::format("unsupported tag {}: Kubernetes manifests use only the YAML core tags "
                  "(!!str, !!int, !!float, !!bool, !!null, !!map, !!seq)",
                  display_tag(tag)));
}

bool plain_reads_as_string(std::string_view text) {
  if (text == "<<") return false;  // a merge key
  // YAML 1.1's value key: PyYAML has no constructor for it and fails.
  if (text == "=") return false;
  auto value = resolve_plain(text);
  if (!value || !value->is_string()) return false;
  Hint hint = kHints[static_cast<unsigned char>(text[0])];
  if (hint == Hint::Digit || hint == Hint::Sign) {
    // YAML 1.1 readers also see timestamps and base-60 numbers (1:30) here.
    if (looks_like_timestamp(text)) return false;
    if (text.find(':') != std::string_view::npos) return false;
  }
  return true;
}

}  // namespace gracekeeper::manifest::detail
