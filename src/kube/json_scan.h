// A scanner for the plain JSON an API server sends, driving a SAX handler the
// way nlohmann's parser does, with one thing it cannot: a value the handler
// drops (managedFields, status, ...) is stepped over, checked but never
// tokenized, copied or handed to the handler. Internal to src/kube.
//
// It is a fast path, not a second parser: where the text holds anything it
// leaves to nlohmann (a fraction or an exponent in a kept number, an integer
// of more than 18 digits, a byte order mark) or anything malformed or too deep,
// it stops and says Fallback, and the caller parses the text again with
// nlohmann from the start. So what it accepts, nlohmann accepts, with the same
// values, and every error and every message is nlohmann's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gracekeeper::kube::detail {

enum class Scan { Parsed, Fallback };

// `Sax` is nlohmann's SAX interface (the members this calls) plus:
//   bool skip_value()        the value that starts now is dropped (called once
//                            per value, where nlohmann's parser would call the
//                            value's first handler);
//   std::size_t depth()      containers open in the handler;
//   std::size_t max_depth()  a container opened at depth >= this is refused.
template <class Sax>
class JsonScanner {
 public:
  JsonScanner(std::string_view text, Sax& sax)
      : p_(text.data()), end_(text.data() + text.size()), sax_(sax) {}

  Scan run() { return parse() ? Scan::Parsed : Scan::Fallback; }

 private:
  static constexpr std::size_t kUnknownSize = static_cast<std::size_t>(-1);

  bool parse() {
    ws();
    if (p_ != end_ && static_cast<unsigned char>(*p_) == 0xEF) return false;  // a BOM
    std::vector<char> open;  // '{' or '[' for each container the handler has open
    bool need_value = true;
    while (true) {
      if (need_value) {
        need_value = false;
        if (sax_.skip_value()) {
          if (!skip()) return false;
        } else if (p_ != end_ && (*p_ == '{' || *p_ == '[')) {
          const bool object = *p_++ == '{';
          if (!(object ? sax_.start_object(kUnknownSize) : sax_.start_array(kUnknownSize))) {
            return false;
          }
          ws();
          if (p_ != end_ && *p_ == (object ? '}' : ']')) {
            ++p_;
            if (!(object ? sax_.end_object() : sax_.end_array())) return false;
          } else {
            open.push_back(object ? '{' : '[');
            if (object && !key()) return false;
            need_value = true;
            continue;
          }
        } else if (!scalar()) {
          return false;
        }
      }
      ws();
      if (open.empty()) return p_ == end_;
      if (p_ == end_) return false;
      const bool object = open.back() == '{';
      const char c = *p_++;
      if (c == ',') {
        ws();
        if (object && !key()) return false;
        need_value = true;
      } else if (c == (object ? '}' : ']')) {
        open.pop_back();
        if (!(object ? sax_.end_object() : sax_.end_array())) return false;
      } else {
        return false;
      }
    }
  }

  // A dropped value at p_: checked as nlohmann's lexer would check it, and
  // its nesting counted as the handler would count it, nothing kept.
  bool skip() {
    const std::size_t base = sax_.depth();
    skip_open_.clear();
    bool need_value = true;
    while (true) {
      if (need_value) {
        need_value = false;
        if (p_ != end_ && (*p_ == '{' || *p_ == '[')) {
          if (base + skip_open_.size() >= sax_.max_depth()) return false;
          const bool object = *p_++ == '{';
          ws();
          if (p_ != end_ && *p_ == (object ? '}' : ']')) {
            ++p_;
          } else {
            skip_open_.push_back(object ? '{' : '[');
            if (object && !skip_key()) return false;
            need_value = true;
            continue;
          }
        } else if (!skip_scalar()) {
          return false;
        }
      }
      if (skip_open_.empty()) return true;
      ws();
      if (p_ == end_) return false;
      const bool object = skip_open_.back() == '{';
      const char c = *p_++;
      if (c == ',') {
        ws();
        if (object && !skip_key()) return false;
        need_value = true;
      } else if (c == (object ? '}' : ']')) {
        skip_open_.pop_back();
      } else {
        return false;
      }
    }
  }

  // `"key"`, the colon and the whitespace around it.
  bool key() {
    if (!string<true>(buffer_)) return false;
    if (!sax_.key(buffer_)) return false;
    return colon();
  }
  bool skip_key() { return string<false>(buffer_) && colon(); }
  bool colon() {
    ws();
    if (p_ == end_ || *p_ != ':') return false;
    ++p_;
    ws();
    return true;
  }

  bool scalar() {
    if (p_ == end_) return false;
    switch (*p_) {
      case '"':
        return string<true>(buffer_) && sax_.string(buffer_);
      case 't':
        return literal("true") && sax_.boolean(true);
      case 'f':
        return literal("false") && sax_.boolean(false);
      case 'n':
        return literal("null") && sax_.null();
      default:
        return integer();
    }
  }
  bool skip_scalar() {
    if (p_ == end_) return false;
    switch (*p_) {
      case '"':
        return string<false>(buffer_);
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      default:
        return skip_number();
    }
  }

  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() ||
        std::string_view(p_, word.size()) != word) {
      return false;
    }
    p_ += word.size();
    return true;
  }

  static bool digit(char c) { return c >= '0' && c <= '9'; }

  // A kept number: an integer of at most 18 digits, which fits nlohmann's
  // int64 and uint64 alike (it gives a negative one as number_integer, any
  // other as number_unsigned). Anything else is left to nlohmann.
  bool integer() {
    const bool negative = *p_ == '-';
    const char* q = p_ + (negative ? 1 : 0);
    const char* digits = q;
    if (q == end_ || !digit(*q)) return false;
    if (*q == '0') {
      ++q;
    } else {
      while (q != end_ && digit(*q)) ++q;
    }
    if (q - digits > 18) return false;
    if (q != end_ && (*q == '.' || *q == 'e' || *q == 'E')) return false;
    std::uint64_t value = 0;
    for (const char* d = digits; d != q; ++d) {
      value = value * 10 + static_cast<std::uint64_t>(*d - '0');
    }
    p_ = q;
    if (negative) return sax_.number_integer(-static_cast<std::int64_t>(value));
    return sax_.number_unsigned(value);
  }

  // A dropped number: the grammar checked; short enough (32 characters, an
  // exponent of at most 2 digits) that nlohmann's value cannot overflow to
  // infinity, which it refuses.
  bool skip_number() {
    const char* start = p_;
    const char* q = p_;
    if (*q == '-') ++q;
    if (q == end_ || !digit(*q)) return false;
    if (*q == '0') {
      ++q;
    } else {
      while (q != end_ && digit(*q)) ++q;
    }
    if (q != end_ && *q == '.') {
      ++q;
      if (q == end_ || !digit(*q)) return false;
      while (q != end_ && digit(*q)) ++q;
    }
    if (q != end_ && (*q == 'e' || *q == 'E')) {
      ++q;
      if (q != end_ && (*q == '+' || *q == '-')) ++q;
      const char* exponent = q;
      while (q != end_ && digit(*q)) ++q;
      if (q == exponent || q - exponent > 2) return false;
    }
    if (q - start > 32) return false;
    p_ = q;
    return true;
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // Four hex digits at p_, or -1.
  int code_unit() {
    if (end_ - p_ < 4) return -1;
    int unit = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = hex(p_[i]);
      if (h < 0) return -1;
      unit = unit * 16 + h;
    }
    p_ += 4;
    return unit;
  }

  // The escape at p_ (its backslash), decoded into `out` when Keep. A
  // surrogate must come in a pair, as nlohmann requires.
  template <bool Keep>
  bool escape(std::string& out) {
    ++p_;
    if (p_ == end_) return false;
    const char c = *p_++;
    char plain = 0;
    switch (c) {
      case '"':
      case '\\':
      case '/':
        plain = c;
        break;
      case 'b':
        plain = '\b';
        break;
      case 'f':
        plain = '\f';
        break;
      case 'n':
        plain = '\n';
        break;
      case 'r':
        plain = '\r';
        break;
      case 't':
        plain = '\t';
        break;
      case 'u': {
        int code = code_unit();
        if (code < 0 || (code >= 0xDC00 && code <= 0xDFFF)) return false;
        if (code >= 0xD800 && code <= 0xDBFF) {
          if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
          p_ += 2;
          const int low = code_unit();
          if (low < 0xDC00 || low > 0xDFFF) return false;
          code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
        }
        if constexpr (Keep) append_utf8(out, static_cast<std::uint32_t>(code));
        return true;
      }
      default:
        return false;
    }
    if constexpr (Keep) out.push_back(plain);
    return true;
  }

  static void append_utf8(std::string& out, std::uint32_t code) {
    if (code < 0x80) {
      out.push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (code >> 6)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else if (code < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (code >> 12)));
      out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (code >> 18)));
      out.push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }

  // One UTF-8 sequence of 2-4 bytes at p_, well formed by RFC 3629 (no
  // overlong form, no surrogate, nothing above U+10FFFF): nlohmann's rule.
  bool utf8() {
    const auto at = [&](std::ptrdiff_t i) { return static_cast<unsigned char>(p_[i]); };
    const auto in = [](unsigned char b, unsigned char lo, unsigned char hi) {
      return b >= lo && b <= hi;
    };
    const unsigned char b = at(0);
    const std::ptrdiff_t left = end_ - p_;
    std::ptrdiff_t n = 0;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;
    if (in(b, 0xC2, 0xDF)) {
      n = 2;
    } else if (b == 0xE0) {
      n = 3;
      lo = 0xA0;
    } else if (in(b, 0xE1, 0xEC) || in(b, 0xEE, 0xEF)) {
      n = 3;
    } else if (b == 0xED) {
      n = 3;
      hi = 0x9F;
    } else if (b == 0xF0) {
      n = 4;
      lo = 0x90;
    } else if (in(b, 0xF1, 0xF3)) {
      n = 4;
    } else if (b == 0xF4) {
      n = 4;
      hi = 0x8F;
    } else {
      return false;
    }
    if (left < n || !in(at(1), lo, hi)) return false;
    for (std::ptrdiff_t i = 2; i < n; ++i) {
      if (!in(at(i), 0x80, 0xBF)) return false;
    }
    p_ += n;
    return true;
  }

  // A string at p_ (its opening quote), into `out` when Keep.
  template <bool Keep>
  bool string(std::string& out) {
    if (p_ == end_ || *p_ != '"') return false;
    ++p_;
    if constexpr (Keep) out.clear();
    const char* run = p_;  // plain bytes not yet copied
    while (true) {
      while (p_ != end_ && kPlain[static_cast<unsigned char>(*p_)]) ++p_;
      if (p_ == end_) return false;
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        if constexpr (Keep) out.append(run, p_);
        ++p_;
        return true;
      }
      if (c == '\\') {
        if constexpr (Keep) out.append(run, p_);
        if (!escape<Keep>(out)) return false;
        run = p_;
      } else if (c < 0x80) {
        return false;  // a control character
      } else if (!utf8()) {
        return false;
      }
    }
  }

  // The bytes a string holds as they are: printable ASCII but the quote and
  // the backslash.
  static constexpr std::array<bool, 256> kPlain = [] {
    std::array<bool, 256> plain{};
    for (int c = 0x20; c < 0x80; ++c) plain[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
    return plain;
  }();

  void ws() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }

  const char* p_;
  const char* end_;
  Sax& sax_;
  std::string buffer_;
  std::vector<char> skip_open_;
};

}  // namespace gracekeeper::kube::detail
