// Writes documents the way `kubectl get -o yaml` does: block style, two-space
// indentation, sequence items at their key's indentation, and plain scalars
// wherever the reader (and a YAML 1.1 reader such as kubectl's) would read the
// same string back.
#include "gracekeeper/manifest/writer.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "scalar.h"

namespace gracekeeper::manifest {
namespace {

// Decodes one UTF-8 sequence at s[i]; returns its length, or 0 when invalid.
std::size_t decode_utf8(std::string_view s, std::size_t i, std::uint32_t& cp) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  std::size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
  if (length == 0 || c > 0xF4 || i + length > s.size()) return 0;
  cp = length == 4 ? c & 0x07u : length == 3 ? c & 0x0Fu : c & 0x1Fu;
  for (std::size_t k = 1; k < length; ++k) {
    auto next = static_cast<unsigned char>(s[i + k]);
    if ((next & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (next & 0x3Fu);
  }
  static constexpr std::uint32_t minimum[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < minimum[length] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return length;
}

// Characters YAML does not allow raw, or that YAML 1.1 readers take as line
// breaks (NEL, LS, PS), or that are invisible (BOM): all written escaped.
bool needs_escape(std::uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0xFEFF || cp == 0xFFFE || cp == 0xFFFF;
}

// True when every character may appear unescaped; `allow_newline` for
// literal blocks, which carry newlines and tabs as they are.
bool all_printable(std::string_view s, bool allow_newline) {
  for (std::size_t i = 0; i < s.size();) {
    std::uint32_t cp = 0;
    std::size_t length = decode_utf8(s, i, cp);
    if (length == 0) return false;
    if (needs_escape(cp) && !(allow_newline && (cp == '\n' || cp == '\t'))) return false;
    i += length;
  }
  return true;
}

bool is_indicator(char c) {
  return std::string_view("-?:,[]{}#&*!|>'\"%@`").find(c) != std::string_view::npos;
}

bool can_be_plain(std::string_view s) {
  if (s.empty() || is_indicator(s.front())) return false;
  if (s.front() == ' ' || s.front() == '\t' || s.back() == ' ' || s.back() == '\t') return false;
  if (s.back() == ':' || s.starts_with("...")) return false;
  for (std::size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] == ':' && (s[i + 1] == ' ' || s[i + 1] == '\t')) return false;
    if ((s[i] == ' ' || s[i] == '\t') && s[i + 1] == '#') return false;
  }
  return all_printable(s, false) && detail::plain_reads_as_string(s);
}

// A literal block (`|`) keeps multi-line text (scripts, config files in
// ConfigMaps) readable. Only used where its rules cannot change the text:
// the first line sets the indentation, so it must not start with a blank, and
// lines of blanks only would be taken as indentation.
bool can_be_literal(std::string_view s) {
  if (s.find('\n') == std::string_view::npos || !all_printable(s, true)) return false;
  bool seen_content = false;
  std::size_t start = 0;
  while (start < s.size()) {
    std::size_t end = s.find('\n', start);
    if (end == std::string_view::npos) end = s.size();
    std::string_view line = s.substr(start, end - start);
    if (!line.empty()) {
      if (line.find_first_not_of(" \t") == std::string_view::npos) return false;
      if (!seen_content && (line.front() == ' ' || line.front() == '\t')) return false;
      seen_content = true;
    }
    start = end + 1;
  }
  return seen_content;
}

void write_quoted(std::string& out, std::string_view s) {
  out.push_back('"');
  for (std::size_t i = 0; i < s.size();) {
    std::uint32_t cp = 0;
    std::size_t length = decode_utf8(s, i, cp);
    if (length == 0) {
      out += "\\uFFFD";  // not UTF-8: the text cannot be kept as it is anyway
      ++i;
      continue;
    }
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (needs_escape(cp)) {
          out += fmt::format("\\u{:04X}", cp);
        } else {
          out.append(s.substr(i, length));
        }
    }
    i += length;
  }
  out.push_back('"');
}

void write_string(std::string& out, std::string_view s) {
  if (can_be_plain(s)) {
    out.append(s);
  } else {
    write_quoted(out, s);
  }
}

void write_double(std::string& out, double d) {
  if (std::isnan(d)) {
    out += ".nan";
    return;
  }
  if (std::isinf(d)) {
    out += d > 0 ? ".inf" : "-.inf";
    return;
  }
  // Shortest text that reads back as the same double; a float that looks like
  // an integer gets ".0" so it stays a float.
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, d);
  std::string_view text(buffer, static_cast<std::size_t>(end - buffer));
  out.append(text);
  if (text.find_first_of(".eE") == std::string_view::npos) out += ".0";
}

void write_literal(std::string& out, std::string_view s, int indent) {
  out.push_back('|');
  if (!s.ends_with('\n')) {
    out.push_back('-');
  } else if (s.ends_with("\n\n")) {
    out.push_back('+');
  }
  out.push_back('\n');
  std::size_t start = 0;
  while (start < s.size()) {
    std::size_t end = s.find('\n', start);
    if (end == std::string_view::npos) end = s.size();
    if (end > start) {
      out.append(static_cast<std::size_t>(indent), ' ');
      out.append(s.substr(start, end - start));
    }
    out.push_back('\n');
    start = end + 1;
  }
}

class YamlWriter {
 public:
  explicit YamlWriter(std::string& out) : out_(out) {}

  void document(const Json& value) {
    if (value.is_object() && !value.empty()) {
      map_body(value, 0, false);
    } else if (value.is_array() && !value.empty()) {
      seq_body(value, 0, false);
    } else {
      scalar(value);
      out_.push_back('\n');
    }
  }

 private:
  void map_body(const Json& object, int indent, bool first_inline) {
    bool first = true;
    for (const auto& [key, value] : object.items()) {
      if (!first || !first_inline) indent_to(indent);
      first = false;
      write_string(out_, key);
      out_.push_back(':');
      if (value.is_object() && !value.empty()) {
        out_.push_back('\n');
        map_body(value, indent + 2, false);
      } else if (value.is_array() && !value.empty()) {
        out_.push_back('\n');
        seq_body(value, indent, false);  // kubectl: items at the key's indentation
      } else {
        out_.push_back(' ');
        block_scalar(value, indent + 2);
      }
    }
  }

  void seq_body(const Json& array, int indent, bool first_inline) {
    bool first = true;
    for (const Json& value : array) {
      if (!first || !first_inline) indent_to(indent);
      first = false;
      out_ += "- ";
      if (value.is_object() && !value.empty()) {
        map_body(value, indent + 2, true);
      } else if (value.is_array() && !value.empty()) {
        seq_body(value, indent + 2, true);
      } else {
        block_scalar(value, indent + 2);
      }
    }
  }

  // A scalar in block context, where a literal block may be used; ends the line.
  void block_scalar(const Json& value, int content_indent) {
    if (value.is_string()) {
      const auto& s = value.get_ref<const std::string&>();
      if (can_be_literal(s)) {
        write_literal(out_, s, content_indent);
        return;
      }
    }
    scalar(value);
    out_.push_back('\n');
  }

  void scalar(const Json& value) {
    switch (value.type()) {
      case Json::value_t::object:
        out_ += "{}";
        break;
      case Json::value_t::array:
        out_ += "[]";
        break;
      case Json::value_t::string:
        write_string(out_, value.get_ref<const std::string&>());
        break;
      case Json::value_t::boolean:
        out_ += value.get<bool>() ? "true" : "false";
        break;
      case Json::value_t::number_integer:
        out_ += fmt::format("{}", value.get<std::int64_t>());
        break;
      case Json::value_t::number_unsigned:
        out_ += fmt::format("{}", value.get<std::uint64_t>());
        break;
      case Json::value_t::number_float:
        write_double(out_, value.get<double>());
        break;
      case Json::value_t::binary:  // not produced by the reader; JSON has no such type
      case Json::value_t::null:
      case Json::value_t::discarded:
        out_ += "null";
        break;
    }
  }

  void indent_to(int indent) { out_.append(static_cast<std::size_t>(indent), ' '); }

  std::string& out_;
};

// Flow style on one line: `{a: b, c: [1, 2]}`. Strings that hold a flow
// indicator are quoted, since they would end the scalar there.
void write_flow(std::string& out, const Json& value) {
  if (value.is_object()) {
    out.push_back('{');
    bool first = true;
    for (const auto& [key, member] : value.items()) {
      if (!first) out += ", ";
      first = false;
      write_flow(out, Json(key));
      out += ": ";
      write_flow(out, member);
    }
    out.push_back('}');
  } else if (value.is_array()) {
    out.push_back('[');
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (i > 0) out += ", ";
      write_flow(out, value[i]);
    }
    out.push_back(']');
  } else if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    if (can_be_plain(s) && s.find_first_of(",[]{}") == std::string::npos) {
      out += s;
    } else {
      write_quoted(out, s);
    }
  } else {
    out += scalar_yaml(value);
  }
}

}  // namespace

std::string scalar_yaml(const Json& value) {
  std::string out;
  switch (value.type()) {
    case Json::value_t::string:
      write_string(out, value.get_ref<const std::string&>());
      break;
    case Json::value_t::boolean:
      out = value.get<bool>() ? "true" : "false";
      break;
    case Json::value_t::number_integer:
      out = fmt::format("{}", value.get<std::int64_t>());
      break;
    case Json::value_t::number_unsigned:
      out = fmt::format("{}", value.get<std::uint64_t>());
      break;
    case Json::value_t::number_float:
      write_double(out, value.get<double>());
      break;
    case Json::value_t::object:
      out = "{}";
      break;
    case Json::value_t::array:
      out = "[]";
      break;
    default:
      out = "null";
  }
  return out;
}

std::string double_quoted_yaml(std::string_view text) {
  std::string out;
  write_quoted(out, text);
  return out;
}

bool plain_yaml_ok(std::string_view text) {
  return can_be_plain(text);
}

std::string to_flow_yaml(const Json& value) {
  std::string out;
  write_flow(out, value);
  return out;
}

std::string to_yaml(const Json& value) {
  std::string out;
  YamlWriter(out).document(value);
  return out;
}

std::string to_yaml_stream(const std::vector<Json>& documents) {
  std::string out;
  for (std::size_t i = 0; i < documents.size(); ++i) {
    if (i > 0) out += "---\n";
    YamlWriter(out).document(documents[i]);
  }
  return out;
}

std::string to_json_stream(const std::vector<Json>& documents, int indent) {
  // `replace` rather than the default `strict`: a string that is not UTF-8
  // must not turn into an exception here.
  constexpr auto on_bad_text = Json::error_handler_t::replace;
  std::string out;
  if (documents.size() == 1) {
    out = documents.front().dump(indent, ' ', false, on_bad_text);
  } else {
    Json list = Json::object();
    list["apiVersion"] = "v1";
    list["kind"] = "List";
    list["items"] = Json(documents);
    out = list.dump(indent, ' ', false, on_bad_text);
  }
  out.push_back('\n');
  return out;
}

}  // namespace gracekeeper::manifest
