// In-place edits of a manifest's text: a tree of positions is built for the
// one document that changes (yaml-cpp's event API, as in locate.cpp), the old
// and new values are compared, and each difference becomes an edit at the
// position of the node it concerns. The edited document is read back and
// compared with the wanted value; if they differ, the document is written
// whole instead (correct before pretty).
#include "gracekeeper/manifest/edit.h"

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <optional>
#include <ostream>
#include <sstream>
#include <utility>

#include "gracekeeper/manifest/writer.h"
#include "yaml_support.h"

namespace gracekeeper::manifest {
namespace {

struct TextNode {
  enum class Kind { Scalar, Null, Map, Seq, Alias };
  Kind kind = Kind::Scalar;
  std::size_t pos = 0;
  int line = 0;
  int column = 0;
  bool flow = false;           // a flow collection, or any node inside one
  std::size_t value_size = 0;  // of a scalar's value: a plain one may span lines
  struct Entry {
    std::string key;
    std::size_t key_pos = 0;
    int key_line = 0;
    int key_column = 0;
    TextNode* value = nullptr;
    // A key that is not a scalar (`? [a, b]`, an alias): where its text
    // ends is that of a node, not of a scalar.
    TextNode* key_node = nullptr;
  };
  std::vector<Entry> entries;
  std::vector<TextNode*> items;

  const Entry* find(const std::string& key) const {
    for (const auto& e : entries) {
      if (e.key == key) return &e;
    }
    return nullptr;
  }
};

class TreeBuilder final : public YAML::EventHandler {
 public:
  explicit TreeBuilder(std::size_t offset) : offset_(offset) {}
  TextNode* root() const { return root_; }
  // Frees the tree (positions are no longer needed once the edits are made).
  void clear() {
    std::deque<TextNode>().swap(nodes_);
    root_ = nullptr;
  }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override {
    leaf(mark, TextNode::Kind::Null, "");
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string& text) override {
    leaf(mark, TextNode::Kind::Scalar, text);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    leaf(mark, TextNode::Kind::Alias, "");
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value style) override {
    open(mark, TextNode::Kind::Seq, style == YAML::EmitterStyle::Flow);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value style) override {
    open(mark, TextNode::Kind::Map, style == YAML::EmitterStyle::Flow);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Open {
    TextNode* node;
    bool expect_key = true;
    TextNode::Entry pending;
  };

  TextNode* make(const YAML::Mark& mark, TextNode::Kind kind, bool flow) {
    TextNode& node = nodes_.emplace_back();
    node.kind = kind;
    node.pos = static_cast<std::size_t>(std::max(mark.pos, 0)) + offset_;
    node.line = mark.line;
    node.column = mark.column;
    node.flow = flow || (!open_.empty() && open_.back().node->flow);
    return &node;
  }

  bool key_expected() const {
    return !open_.empty() && open_.back().node->kind == TextNode::Kind::Map &&
           open_.back().expect_key;
  }

  void leaf(const YAML::Mark& mark, TextNode::Kind kind, const std::string& text) {
    if (key_expected()) {
      const bool scalar = kind == TextNode::Kind::Scalar;
      TextNode* key_node = scalar ? nullptr : make(mark, kind, false);
      Open& parent = open_.back();
      parent.pending = TextNode::Entry{scalar ? text : std::string("\x01"),
                                       static_cast<std::size_t>(std::max(mark.pos, 0)) + offset_,
                                       mark.line,
                                       mark.column,
                                       nullptr,
                                       key_node};
      parent.expect_key = false;
      return;
    }
    TextNode* node = make(mark, kind, false);
    node->value_size = text.size();
    attach(node);
  }

  void open(const YAML::Mark& mark, TextNode::Kind kind, bool flow) {
    TextNode* node = make(mark, kind, flow);
    if (key_expected()) {
      // A collection as a key: never one of ours; remembered as unmatchable.
      open_.back().pending =
          TextNode::Entry{"\x01", node->pos, mark.line, mark.column, nullptr, nullptr};
      open_.back().expect_key = false;
      key_depth_.push_back(open_.size());
    }
    open_.push_back(Open{node, true, {}});
  }

  void close() {
    Open done = std::move(open_.back());
    open_.pop_back();
    if (!key_depth_.empty() && key_depth_.back() == open_.size()) {
      key_depth_.pop_back();
      open_.back().pending.key_node = done.node;
      return;  // it was a key
    }
    attach(done.node);
  }

  void attach(TextNode* node) {
    if (open_.empty()) {
      root_ = node;
      return;
    }
    Open& parent = open_.back();
    if (parent.node->kind == TextNode::Kind::Seq) {
      parent.node->items.push_back(node);
      return;
    }
    parent.pending.value = node;
    parent.node->entries.push_back(std::move(parent.pending));
    parent.expect_key = true;
  }

  std::size_t offset_;
  std::deque<TextNode> nodes_;
  std::vector<Open> open_;
  std::vector<std::size_t> key_depth_;
  TextNode* root_ = nullptr;
};

// JSON text the reader takes back: nlohmann writes code points past ASCII
// as they are, and the C1 controls (U+0080-U+009F but U+0085) and
// U+FFFE/U+FFFF, which a string may hold escaped, would make it binary data.
std::string json_dump(const Json& value, int indent = -1) {
  std::string text = value.dump(indent, ' ', false, Json::error_handler_t::replace);
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    const auto third = i + 2 < text.size() ? static_cast<unsigned char>(text[i + 2]) : 0;
    if (c == 0xC2 && next >= 0x80 && next <= 0x9F && next != 0x85) {
      if (out.empty()) out.assign(text, 0, i);
      out += fmt::format("\\u{:04x}", next);
      ++i;
    } else if (c == 0xEF && next == 0xBF && (third == 0xBE || third == 0xBF)) {
      if (out.empty()) out.assign(text, 0, i);
      out += third == 0xBE ? "\\ufffe" : "\\uffff";
      i += 2;
    } else if (!out.empty()) {
      out += text[i];
    }
  }
  return out.empty() ? text : out;
}

// Equality that keeps types apart (1 vs 1.0), as reading back must give,
// but not key order: a key that is edited in place keeps its place.
bool same(const Json& a, const Json& b) {
  if (a.is_number_integer() && b.is_number_integer()) return a == b;
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [key, value] : a.items()) {
      auto other = b.find(key);
      if (other == b.end() || !same(value, *other)) return false;
    }
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (!same(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_number_float()) {
    const double x = a.get<double>(), y = b.get<double>();
    return (std::isnan(x) && std::isnan(y)) || x == y;
  }
  return a == b;
}

bool has_removed_keys(const Json& before, const Json& after) {
  for (const auto& [key, value] : before.items()) {
    if (!after.contains(key)) return true;
  }
  return false;
}

// Reads the text the way the edits need: where a token ends.
class Text {
 public:
  explicit Text(std::string_view text) : s_(text) {}
  std::string_view str() const { return s_; }
  char at(std::size_t i) const { return i < s_.size() ? s_[i] : '\0'; }
  bool line_end(std::size_t i) const { return i >= s_.size() || s_[i] == '\n' || s_[i] == '\r'; }

  // Past an `&anchor` or `!tag` and the blanks after it. An anchor ends at a
  // blank or a flow indicator; a tag, as yaml-cpp reads one, at anything but
  // a URI character: `!{a: 1}` is the tag `!` on a flow mapping, and
  // `!"a]"` the tag `!` on a quoted scalar.
  std::size_t skip_properties(std::size_t i) const {
    while (at(i) == '&' || at(i) == '!') {
      if (at(i) == '!' && at(i + 1) == '<') {  // verbatim: !<...>
        while (!line_end(i) && at(i) != '>') ++i;
        if (at(i) == '>') ++i;
      } else if (at(i) == '!') {
        for (++i; tag_char(at(i)); ++i) {
        }
      } else {
        while (!line_end(i) && at(i) != ' ' && at(i) != '\t' &&
               std::string_view(",[]{}").find(at(i)) == std::string_view::npos) {
          ++i;
        }
      }
      while (at(i) == ' ' || at(i) == '\t') ++i;
    }
    return i;
  }

  // yaml-cpp's tag characters (Exp::Tag, and `!` of a named handle).
  static bool tag_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           (c != '\0' &&
            std::string_view("-#;/?:@&=+$_.~*'()!%").find(c) != std::string_view::npos);
  }

  std::size_t quoted_end(std::size_t i) const {
    const char quote = at(i);
    for (++i; i < s_.size(); ++i) {
      if (quote == '"' && s_[i] == '\\') {
        ++i;
      } else if (s_[i] == quote) {
        if (quote == '\'' && at(i + 1) == '\'') {
          ++i;
          continue;
        }
        return i + 1;
      }
    }
    return s_.size();
  }

  std::size_t next_line(std::size_t i) const {
    while (!line_end(i)) ++i;
    if (at(i) == '\r') ++i;
    if (at(i) == '\n') ++i;
    return i;
  }

  std::size_t indent_at(std::size_t line_start) const {
    std::size_t i = line_start;
    while (at(i) == ' ') ++i;
    return i - line_start;
  }

  std::size_t line_start(std::size_t i) const {
    while (i > 0 && s_[i - 1] != '\n' && s_[i - 1] != '\r') --i;
    return i;
  }

  // A block scalar (`|`, `>`): its lines are those indented deeper than the
  // line of its header; ends after the last non-blank one.
  std::size_t block_scalar_end(std::size_t header) const {
    const std::size_t parent = indent_at(line_start(header));
    std::size_t end = header;
    while (!line_end(end)) ++end;
    for (std::size_t i = next_line(header); i < s_.size(); i = next_line(i)) {
      const std::size_t indent = indent_at(i);
      if (line_end(i + indent)) continue;  // blank
      if (indent <= parent) break;
      end = i;
      while (!line_end(end)) ++end;
    }
    return end;
  }

  std::size_t plain_end(std::size_t i, bool flow) const {
    std::size_t end = i;
    while (!line_end(i)) {
      const char c = s_[i];
      if (c == '#' && i > 0 && (s_[i - 1] == ' ' || s_[i - 1] == '\t')) break;
      if (flow && (c == ',' || c == ']' || c == '}')) break;
      if (c == ':' && (line_end(i + 1) || at(i + 1) == ' ' || (flow && at(i + 1) == ','))) break;
      ++i;
      if (c != ' ' && c != '\t') end = i;
    }
    return end;
  }

  // Where a plain scalar whose value is `value_size` bytes ends: a plain
  // scalar may go on over more lines (folded: one line break becomes a
  // space, n + 1 become n line breaks), which yaml-cpp accepts even at the
  // indentation of its key. Without this, an edit after such a value would
  // land inside it.
  std::size_t plain_scalar_end(std::size_t start, bool flow, std::size_t value_size) const {
    std::size_t end = plain_end(start, flow);
    std::size_t folded = end - start;
    while (folded < value_size) {
      std::size_t i = end;
      while (at(i) == ' ' || at(i) == '\t') ++i;
      if (!line_end(i) || i >= s_.size()) break;  // a comment or an indicator ends it
      std::size_t breaks = 0;
      std::size_t content = i;
      do {
        content = next_line(content);
        ++breaks;
        while (at(content) == ' ' || at(content) == '\t') ++content;
      } while (content < s_.size() && line_end(content));
      const std::size_t next_end = plain_end(content, flow);
      if (content >= s_.size() || next_end == content) break;
      folded += (breaks == 1 ? 1 : breaks - 1) + (next_end - content);
      end = next_end;
    }
    return end;
  }

  // The end of the flow collection opening at `i`. A quote opens a quoted
  // scalar only where a node starts; inside a plain scalar (`a"b`, `a "b`)
  // it is an ordinary character, so plain scalars are skipped whole. A `#`
  // where a token starts is a comment, as yaml-cpp reads it, blank before it
  // or not (`a,# [x`): only a plain scalar holds one (`a#b`, `:#b`).
  std::size_t flow_end(std::size_t i) const {
    int depth = 0;
    bool token_start = true;
    // After a quoted scalar or a flow collection a `:` is an indicator
    // whatever follows it (yaml-cpp's JSON-like value).
    bool json_node = false;
    while (i < s_.size()) {
      const char c = s_[i];
      const bool was_json_node = std::exchange(json_node, false);
      if (c == '"' || c == '\'') {
        i = quoted_end(i);
        token_start = json_node = true;
      } else if (c == '#' && token_start) {
        while (!line_end(i)) ++i;  // a comment
        json_node = was_json_node;
      } else if (c == '[' || c == '{') {
        ++depth;
        ++i;
        token_start = true;
      } else if (c == ']' || c == '}') {
        if (--depth == 0) return i + 1;
        ++i;
        token_start = json_node = true;
      } else if (c == '&' || c == '!') {
        const std::size_t next = skip_properties(i);
        i = next > i ? next : i + 1;
        token_start = s_[i - 1] == ' ' || s_[i - 1] == '\t';
      } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ',') {
        ++i;
        token_start = true;
        json_node = was_json_node && c != ',';
      } else if ((c == ':' && (was_json_node || indicator_end(i + 1))) ||
                 (c == '?' && (line_end(i + 1) || at(i + 1) == ' ' || at(i + 1) == '\t'))) {
        ++i;
        token_start = true;
      } else {
        const std::size_t end = plain_end(i, true);
        i = end > i ? end : i + 1;
        token_start = false;
      }
    }
    return s_.size();
  }

  // What may follow a `:` indicator in a flow collection.
  bool indicator_end(std::size_t i) const {
    return line_end(i) || at(i) == ' ' || at(i) == '\t' || at(i) == ',' || at(i) == ']' ||
           at(i) == '}';
  }

  // Where the scalar key that starts at `key` ends. A plain key, like a plain value, may go on over
  // more lines (`a,\n }` is the key "a, }"): `value_size` is its length once read.
  std::size_t scalar_key_end(std::size_t key, bool flow, std::size_t value_size) const {
    const std::size_t i = skip_properties(key);
    if (at(i) == '"' || at(i) == '\'') return quoted_end(i);
    return plain_scalar_end(i, flow, value_size);
  }

  // The `:` that follows a key ending at `key_end`, past blanks, comments
  // and line breaks (`? key` may put it on a later line); npos when the next
  // token is something else: a key without a value (`? key`, `{key}`) has
  // no `:`, and a search further on would find the next key's.
  std::size_t colon_after(std::size_t key_end) const {
    for (std::size_t i = key_end; i < s_.size();) {
      const char c = s_[i];
      if (c == ':') return i;
      if (c == '#') {
        while (!line_end(i)) ++i;
      } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++i;
      } else {
        break;
      }
    }
    return std::string_view::npos;
  }

 private:
  std::string_view s_;
};

class Editor {
 public:
  Editor(std::string_view source, bool json) : text_(source), json_(json) {
    const auto lf = source.find('\n');
    newline_ = lf != std::string_view::npos && lf > 0 && source[lf - 1] == '\r' ? "\r\n" : "\n";
  }

  std::vector<TextEdit>& edits() { return edits_; }
  // Some edit's position could not be found: the document is rewritten whole.
  bool lost() const { return lost_; }

  std::size_t node_end(const TextNode& node) const {
    const std::size_t start = text_.skip_properties(node.pos);
    switch (node.kind) {
      case TextNode::Kind::Alias: {
        std::size_t i = start + 1;
        while (!text_.line_end(i) && text_.at(i) != ' ' && text_.at(i) != ',' &&
               text_.at(i) != ']' && text_.at(i) != '}') {
          ++i;
        }
        return i;
      }
      case TextNode::Kind::Null:
      case TextNode::Kind::Scalar: {
        const char c = text_.at(start);
        if (c == '"' || c == '\'') return text_.quoted_end(start);
        if (!node.flow && (c == '|' || c == '>')) return text_.block_scalar_end(start);
        return text_.plain_scalar_end(start, node.flow, node.value_size);
      }
      case TextNode::Kind::Map:
      case TextNode::Kind::Seq:
        if (node.flow) return text_.flow_end(start);
        if (node.kind == TextNode::Kind::Map) {
          return node.entries.empty() ? start : entry_end(node.entries.back());
        }
        return node.items.empty() ? start : node_end(*node.items.back());
    }
    return start;
  }

  // An empty value (`key:` and nothing, or a key without `:`) has no text
  // of its own.
  bool empty_value(const TextNode::Entry& entry) const {
    if (entry.value->kind != TextNode::Kind::Null) return false;
    const std::size_t c = colon(entry);
    if (c == std::string_view::npos || entry.value->pos <= c) return true;
    // yaml-cpp marks an empty value at the next token, which may be lines
    // further on (a `---`, the next key): only a null written out is text
    // of the value's own.
    const std::size_t start = text_.skip_properties(entry.value->pos);
    const std::string_view word =
        text_.str().substr(start, text_.plain_end(start, entry.value->flow) - start);
    return !(word == "~" || word == "null" || word == "Null" || word == "NULL");
  }

  std::size_t key_end(const TextNode::Entry& entry) const {
    if (entry.key_node != nullptr) {
      // A null key has no text; yaml-cpp marks it after its `?`.
      if (entry.key_node->kind == TextNode::Kind::Null) return entry.key_pos;
      return node_end(*entry.key_node);
    }
    return text_.scalar_key_end(entry.key_pos, entry.value && entry.value->flow, entry.key.size());
  }

  // The entry's `:`, or npos when it has none.
  std::size_t colon(const TextNode::Entry& entry) const {
    return text_.colon_after(key_end(entry));
  }

  std::size_t entry_end(const TextNode::Entry& entry) const {
    if (empty_value(entry)) {
      const std::size_t c = colon(entry);
      return c == std::string_view::npos ? key_end(entry) : c + 1;
    }
    return node_end(*entry.value);
  }

  // Changes `map` (whose value was `before`) into `after`; false when that
  // cannot be done key by key (a key was removed).
  bool edit_map(const TextNode& map, const Json& before, const Json& after) {
    if (has_removed_keys(before, after)) return false;
    for (const auto& [key, value] : after.items()) {
      auto old = before.find(key);
      if (old != before.end() && same(*old, value)) continue;
      const TextNode::Entry* entry = map.find(key);
      if (entry == nullptr) {  // new, or brought in by a merge key (<<)
        insert_entry(map, key, value);
        continue;
      }
      const TextNode& node = *entry->value;
      if (old != before.end() && node.kind == TextNode::Kind::Map && old->is_object() &&
          value.is_object() && edit_map(node, *old, value)) {
        continue;
      }
      if (old != before.end() && node.kind == TextNode::Kind::Seq && old->is_array() &&
          value.is_array() && edit_seq(node, *old, value)) {
        continue;
      }
      replace_value(map, *entry, value);
    }
    return true;
  }

 private:
  bool edit_seq(const TextNode& seq, const Json& before, const Json& after) {
    if (before.size() != after.size() || seq.items.size() != after.size()) return false;
    for (std::size_t i = 0; i < after.size(); ++i) {
      if (same(before[i], after[i])) continue;
      const TextNode& item = *seq.items[i];
      if (item.kind != TextNode::Kind::Map || !before[i].is_object() || !after[i].is_object() ||
          !edit_map(item, before[i], after[i])) {
        return false;
      }
    }
    return true;
  }

  void add(std::size_t offset, std::size_t length, std::string text) {
    // A `#` right after a quoted scalar or a flow collection is a comment
    // (`{a: 1}#c`); right after what is written here it could be read as
    // part of a plain scalar (`0#c`): a blank keeps it a comment.
    if (text_.at(offset + length) == '#' && !text.empty() && text.back() != ' ' &&
        text.back() != '\n') {
      text += ' ';
    }
    edits_.push_back({offset, length, std::move(text)});
  }

  std::string key_text(const std::string& key) const {
    if (json_) return json_dump(Json(key));
    return plain_yaml_ok(key) && key.find_first_of(",[]{}") == std::string::npos
               ? key
               : double_quoted_yaml(key);
  }

  std::string flow_text(const Json& value) const {
    return json_ ? json_dump(value) : to_flow_yaml(value);
  }

  // Pretty JSON whose lines after the first start at `indent`.
  std::string json_text(const Json& value, std::size_t indent, int unit) const {
    const std::string dumped = json_dump(value, unit);
    std::string out;
    for (char c : dumped) {
      if (c == '\n') {
        out += newline_;
        out.append(indent, ' ');
      } else {
        out.push_back(c);
      }
    }
    return out;
  }

  // Block YAML, every line at `indent`, without the last line break.
  std::string block_text(const Json& value, std::size_t indent) const {
    const std::string yaml = to_yaml(value);
    std::string out;
    std::size_t start = 0;
    while (start < yaml.size()) {
      std::size_t end = yaml.find('\n', start);
      if (end == std::string::npos) end = yaml.size();
      if (!out.empty() || start > 0) out += newline_;
      if (end > start) out.append(indent, ' ');
      out.append(yaml, start, end - start);
      start = end + 1;
    }
    return out;
  }

  static bool nonempty_collection(const Json& value) {
    return (value.is_object() || value.is_array()) && !value.empty();
  }

  // A scalar that replaces one written in some quoting style keeps it when
  // the style can still hold the value.
  std::string scalar_in_style(const Json& value, char style) const {
    if (json_) return json_dump(value);
    if (!value.is_string()) return scalar_yaml(value);
    const auto& s = value.get_ref<const std::string&>();
    const bool printable = std::none_of(s.begin(), s.end(), [](char c) {
      return static_cast<unsigned char>(c) < 0x20 || c == 0x7F;
    });
    if (style == '\'' && printable) {
      std::string out = "'";
      for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
      return out + "'";
    }
    if (style == '"') return double_quoted_yaml(s);
    return scalar_yaml(value);
  }

  void replace_value(const TextNode& map, const TextNode::Entry& entry, const Json& value) {
    const TextNode& node = *entry.value;
    const std::size_t the_colon = colon(entry);
    if (the_colon == std::string_view::npos) {
      // A key without `:` given a value: rare enough to rewrite the document.
      lost_ = true;
      return;
    }
    const std::size_t after_colon = the_colon + 1;
    if (map.flow) {
      if (empty_value(entry)) {
        add(after_colon, 0, " " + flow_text(value));
      } else {
        const std::size_t start = text_.skip_properties(node.pos);
        add(start, node_end(node) - start, flow_text(value));
      }
      return;
    }
    const bool scalar_to_scalar =
        node.kind == TextNode::Kind::Scalar && !nonempty_collection(value);
    if (scalar_to_scalar) {
      const std::size_t start = text_.skip_properties(node.pos);
      const char style = text_.at(start);
      if (style != '|' && style != '>') {
        add(start, node_end(node) - start, scalar_in_style(value, style));
        return;
      }
    }
    const std::size_t end = entry_end(entry);
    if (!nonempty_collection(value)) {
      add(after_colon, end - after_colon, " " + scalar_yaml(value));
      return;
    }
    // A block value that starts on a later line keeps what follows the
    // colon on the key's own line (a comment).
    std::size_t from = after_colon;
    if (node.kind != TextNode::Kind::Null && node.line > entry.key_line) {
      from = after_colon;
      while (!text_.line_end(from)) ++from;
    }
    add(from, end - from,
        newline_ + block_text(value, static_cast<std::size_t>(entry.key_column) + 2));
  }

  void insert_entry(const TextNode& map, const std::string& key, const Json& value) {
    if (map.flow) {
      insert_flow_entry(map, key, value);
      return;
    }
    // The first key's column, unless it is an explicit one (`? key`): the
    // `?` is at the map's.
    const bool explicit_key = text_.at(text_.skip_properties(map.pos)) == '?';
    const std::size_t indent = map.entries.empty() || explicit_key
                                   ? static_cast<std::size_t>(map.column)
                                   : static_cast<std::size_t>(map.entries.front().key_column);
    const std::size_t at = map.entries.empty() ? node_end(map) : entry_end(map.entries.back());
    std::string text = newline_ + std::string(indent, ' ') + key_text(key) + ":";
    text += nonempty_collection(value) ? newline_ + block_text(value, indent + 2)
                                       : " " + scalar_yaml(value);
    add(at, 0, std::move(text));
  }

  void insert_flow_entry(const TextNode& map, const std::string& key, const Json& value) {
    const std::size_t start = text_.skip_properties(map.pos);
    if (map.entries.empty()) {
      add(start + 1, 0, key_text(key) + ": " + flow_text(value));
      return;
    }
    const TextNode::Entry& last = map.entries.back();
    const std::size_t at = entry_end(last);
    if (last.key_line == map.line) {
      add(at, 0, ", " + key_text(key) + ": " + flow_text(value));
      return;
    }
    // One member per line (pretty JSON): a new line at the members' indentation.
    const auto indent = static_cast<std::size_t>(last.key_column);
    const std::size_t map_indent = text_.indent_at(text_.line_start(start));
    const int unit = indent > map_indent ? static_cast<int>(indent - map_indent) : 2;
    const std::string rendered = json_ ? json_text(value, indent, unit) : flow_text(value);
    add(at, 0, "," + newline_ + std::string(indent, ' ') + key_text(key) + ": " + rendered);
  }

  Text text_;
  bool json_;
  std::string newline_;
  std::vector<TextEdit> edits_;
  bool lost_ = false;
};

bool first_char_is_brace(std::string_view text, std::size_t from) {
  while (from < text.size() &&
         (text[from] == ' ' || text[from] == '\t' || text[from] == '\n' || text[from] == '\r')) {
    ++from;
  }
  return from < text.size() && text[from] == '{';
}

// Where each item of a List's `items` is in the text, from one parse of
// the document: each item's position tree is built on its own and freed as
// soon as its end is known, so memory is bounded by the largest item, not
// the List. The items are those the reader hands out one by one
// (ListItems::OneByOne): the root mapping's one `items` sequence. An anchor
// or alias anywhere in the document makes its items unfit to be edited one
// by one (an item may be used, or use text, elsewhere).
struct ItemSpan {
  std::size_t begin = 0;
  std::size_t end = 0;
};

class ItemSpans final : public YAML::EventHandler {
 public:
  using Span = ItemSpan;

  ItemSpans(std::string_view source, std::size_t offset)
      : source_(source), editor_(source, false), offset_(offset) {}
  // False when the items cannot be edited one by one.
  bool usable() const { return usable_ && found_items_; }
  // `items: [...]`: an item written whole must be flow too.
  bool items_flow() const { return items_flow_; }
  // Where the document's root starts.
  std::size_t root_pos() const { return root_pos_; }
  std::vector<Span> take() { return std::move(spans_); }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (depth_ == 1 && expect_key_) key_.clear();
    leaf(anchor, [&](TreeBuilder& b) { b.OnNull(mark, anchor); });
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& text) override {
    if (depth_ == 1 && expect_key_) key_ = text;
    leaf(anchor, [&](TreeBuilder& b) { b.OnScalar(mark, tag, anchor, text); });
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    usable_ = false;
    if (depth_ == 1 && expect_key_) key_.clear();
    leaf(anchor, [&](TreeBuilder& b) { b.OnAlias(mark, anchor); });
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value style) override {
    if (depth_ == 1 && !expect_key_ && key_ == "items") {
      items_flow_ = style == YAML::EmitterStyle::Flow;
    }
    start(mark, anchor, /*seq=*/true,
          [&](TreeBuilder& b) { b.OnSequenceStart(mark, tag, anchor, style); });
  }
  void OnSequenceEnd() override {
    end([](TreeBuilder& b) { b.OnSequenceEnd(); });
  }
  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value style) override {
    start(mark, anchor, /*seq=*/false,
          [&](TreeBuilder& b) { b.OnMapStart(mark, tag, anchor, style); });
  }
  void OnMapEnd() override {
    end([](TreeBuilder& b) { b.OnMapEnd(); });
  }

 private:
  // Depth: 0 outside the root, 1 inside the root mapping, 2 inside its
  // `items`, 3 and more inside an item.
  template <typename Event>
  void leaf(YAML::anchor_t anchor, Event&& event) {
    if (anchor != YAML::NullAnchor) usable_ = false;
    if (depth_ == 1) {
      expect_key_ = !expect_key_;
    } else if (in_items()) {
      if (depth_ == 2) item_ = std::make_unique<TreeBuilder>(offset_);
      event(*item_);
      if (depth_ == 2) item_done();
    }
  }

  template <typename Event>
  void start(const YAML::Mark& mark, YAML::anchor_t anchor, bool seq, Event&& event) {
    if (anchor != YAML::NullAnchor) usable_ = false;
    if (depth_ == 0 && seq) usable_ = false;  // not an object: no List
    if (depth_ == 0) root_pos_ = static_cast<std::size_t>(std::max(mark.pos, 0)) + offset_;
    if (depth_ == 1) {
      if (expect_key_) usable_ = false;  // a collection as a key
      if (seq && !expect_key_ && key_ == "items") {
        if (found_items_) usable_ = false;  // two of them: the reader takes the last
        found_items_ = true;
        items_open_ = true;
      }
    } else if (in_items()) {
      if (depth_ == 2) item_ = std::make_unique<TreeBuilder>(offset_);
      event(*item_);
    }
    ++depth_;
  }

  template <typename Event>
  void end(Event&& event) {
    --depth_;
    if (depth_ == 1) {
      items_open_ = false;
      expect_key_ = true;
    } else if (in_items()) {
      event(*item_);
      if (depth_ == 2) item_done();
    }
  }

  bool in_items() const { return items_open_ && depth_ >= 2; }

  void item_done() {
    if (item_->root() != nullptr) {
      const TextNode& root = *item_->root();
      const std::size_t end = std::min(editor_.node_end(root), source_.size());
      spans_.push_back({std::min(root.pos, end), end});
    } else {
      usable_ = false;
    }
    item_.reset();
  }

  std::string_view source_;
  Editor editor_;  // for node_end only
  std::size_t offset_;
  int depth_ = 0;
  bool expect_key_ = true;
  std::string key_;
  bool items_open_ = false;
  bool found_items_ = false;
  bool items_flow_ = false;
  bool usable_ = true;
  std::unique_ptr<TreeBuilder> item_;
  std::vector<Span> spans_;
  std::size_t root_pos_ = 0;
};

// True when the document's text, with the edits applied, reads back as
// `updated`. `pad` blanks go in front: an item of a block sequence starts
// at its column, and its later lines are indented to match.
bool reads_back(const std::string& source, std::size_t begin, std::size_t end,
                const std::vector<TextEdit>& edits, const Json& updated, std::size_t pad = 0) {
  if (begin > end || end > source.size()) return false;  // positions gone wrong
  std::vector<TextEdit> local;
  for (const auto& e : edits) {
    if (e.offset < begin || e.length > end - e.offset) return false;
    local.push_back({e.offset - begin, e.length, e.text});
  }
  std::string fragment(pad, ' ');
  fragment += apply_edits(std::string_view(source).substr(begin, end - begin), local);
  auto documents = read_text(std::move(fragment), "edit");
  return documents && documents->size() == 1 && same(documents->front().value, updated);
}

// Every line of `text` after the first indented by `pad` blanks.
std::string indent_later_lines(std::string text, std::size_t pad) {
  if (pad == 0) return text;
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    out += c;
    if (c == '\n') out.append(pad, ' ');
  }
  return out;
}

// Written whole: the same style (JSON stays JSON, flow stays flow),
// comments around it kept.
std::string whole_text(const Json& updated, bool json, std::size_t pad, bool flow = false) {
  if (flow && !json) return to_flow_yaml(updated);
  std::string whole = json ? json_dump(updated, 2) : to_yaml(updated);
  if (!json && whole.ends_with('\n')) whole.pop_back();
  return indent_later_lines(std::move(whole), pad);
}

std::vector<TextEdit> normalised(std::vector<TextEdit> edits) {
  std::stable_sort(edits.begin(), edits.end(),
                   [](const TextEdit& a, const TextEdit& b) { return a.offset < b.offset; });
  return edits;
}

bool overlapping(const std::vector<TextEdit>& edits) {
  for (std::size_t i = 1; i < edits.size(); ++i) {
    if (edits[i - 1].offset + edits[i - 1].length > edits[i].offset) return true;
  }
  return false;
}

// The edits for one document whose tree `builder` holds (or one item of a
// List's `items`, starting `pad` bytes into its line). Once the edits are
// made, the tree and (when given) the decoded old value are freed before the
// edited text is read back: on a List of thousands each costs about as much
// as the document, and they would otherwise all be held at once.
DocumentEdit edit_tree(const std::string& source, TreeBuilder& builder, const Json& before,
                       Json* release_before, const Json& updated, std::size_t pad = 0,
                       std::optional<bool> json_style = std::nullopt, bool flow = false) {
  DocumentEdit result;
  const TextNode& root = *builder.root();
  // JSON when the document is (an item takes the style of its List).
  const bool json = json_style.value_or(first_char_is_brace(source, root.pos));
  Editor editor(source, json);
  // Clamped: a position past the text is a bug, but one that must cost a
  // rewrite, not an abort.
  const std::size_t end = std::min(editor.node_end(root), source.size());
  const std::size_t begin = std::min(root.pos, end);
  const bool in_place = root.kind == TextNode::Kind::Map && before.is_object() &&
                        updated.is_object() && editor.edit_map(root, before, updated) &&
                        !editor.lost();
  builder.clear();
  if (release_before != nullptr) *release_before = Json();
  if (in_place) {
    auto edits = normalised(std::move(editor.edits()));
    if (!overlapping(edits) && reads_back(source, begin, end, edits, updated, pad)) {
      result.edits = std::move(edits);
      return result;
    }
  }
  result.edits = {{begin, end - begin, whole_text(updated, json, pad, flow)}};
  result.rewritten = true;
  return result;
}

// A source that only the JSON reader reads (strict JSON that yaml-cpp
// cannot parse, such as a key and its `:` on two lines) has no positions:
// its one object is written whole, as JSON; nothing when it is not one.
DocumentEdit whole_json(const std::string& source, const Json& updated) {
  DocumentEdit result;
  const std::size_t begin = source.find_first_not_of(" \t\r\n");
  const std::size_t last = source.find_last_not_of(" \t\r\n");
  if (begin == std::string::npos || source[begin] != '{' || source[last] != '}') return result;
  result.edits = {{begin, last + 1 - begin, json_dump(updated, 2)}};
  result.rewritten = true;
  return result;
}

}  // namespace

std::string apply_edits(std::string_view text, const std::vector<TextEdit>& edits) {
  // Reserved exactly: grown by doubling, the text of a large List edited
  // would take up to twice its size, and its copy while growing on top.
  std::size_t size = text.size();
  for (const auto& e : edits) size += e.text.size();
  std::string out;
  out.reserve(size);
  std::size_t at = 0;  // never past the text
  for (const auto& e : edits) {
    // Out of order, overlapping or past the end: clamped, never thrown.
    const std::size_t offset = std::clamp(e.offset, at, text.size());
    out.append(text.substr(at, offset - at));
    out += e.text;
    at = offset + std::min(e.length, text.size() - offset);
  }
  out.append(text.substr(at));
  return out;
}

// One parser over the whole source, moved forward document by document: the
// documents before the one to edit are skipped once, not once per edit.
struct SourceEditor::State {
  explicit State(std::shared_ptr<const std::string> text)
      : source(std::move(text)), stream(*source), parser(stream) {}
  std::shared_ptr<const std::string> source;
  detail::MemoryStream stream;
  YAML::Parser parser;
  int next = 0;  // the index of the document the parser reads next
  bool failed = false;
  // The List whose items edit_item edits, and where they are.
  int items_of = -1;
  std::vector<ItemSpan> spans;
  bool items_json = false;  // the List is JSON: so are its edits
  bool items_flow = false;  // its `items` is a flow sequence
};

SourceEditor::SourceEditor(std::shared_ptr<const std::string> source)
    : state_(source ? std::make_unique<State>(std::move(source)) : nullptr) {}

SourceEditor::~SourceEditor() = default;

DocumentEdit SourceEditor::edit(const Document& document, const Json& updated) {
  return edit(document, nullptr, updated);
}

DocumentEdit SourceEditor::edit(Document&& document, const Json& updated) {
  return edit(document, &document.value, updated);
}

// The items of a JSON List (a source that is one JSON object), from the
// text alone: yaml-cpp reads a flow collection whole before its first
// event, at 15x its size. Nothing when the root's members are not as
// strict JSON writes them, or `items` is not there once, as an array.
std::optional<std::vector<ItemSpan>> json_item_spans(std::string_view source, std::size_t at) {
  const Text text(source);
  auto blanks = [&](std::size_t i) {
    while (i < source.size() &&
           std::string_view(" \t\r\n").find(source[i]) != std::string_view::npos) {
      ++i;
    }
    return i;
  };
  // The end of the JSON value at `i` (npos when it is not one).
  auto value_end = [&](std::size_t i) -> std::size_t {
    const char c = text.at(i);
    if (c == '{' || c == '[') return text.flow_end(i);
    if (c == '"') return text.quoted_end(i);
    std::size_t end = i;
    while (end < source.size() &&
           std::string_view(",]} \t\r\n").find(source[end]) == std::string_view::npos) {
      ++end;
    }
    return end > i ? end : std::string_view::npos;
  };
  std::optional<std::vector<ItemSpan>> spans;
  if (text.at(at) != '{') return std::nullopt;
  for (std::size_t i = blanks(at + 1); text.at(i) != '}';) {
    if (text.at(i) != '"') return std::nullopt;
    const std::size_t key_end = text.quoted_end(i);
    const bool items = source.substr(i, key_end - i) == "\"items\"";
    i = blanks(key_end);
    if (text.at(i) != ':') return std::nullopt;
    i = blanks(i + 1);
    if (items) {
      if (spans || text.at(i) != '[') return std::nullopt;
      spans.emplace();
      for (std::size_t k = blanks(i + 1); text.at(k) != ']';) {
        const std::size_t end = value_end(k);
        if (end == std::string_view::npos || end > source.size()) return std::nullopt;
        spans->push_back({k, end});
        k = blanks(end);
        if (text.at(k) == ',')
          k = blanks(k + 1);
        else if (text.at(k) != ']')
          return std::nullopt;
      }
    }
    const std::size_t end = value_end(i);
    if (end == std::string_view::npos || end >= source.size()) return std::nullopt;
    i = blanks(end);
    if (text.at(i) == ',')
      i = blanks(i + 1);
    else if (text.at(i) != '}')
      return std::nullopt;
  }
  return spans;
}

// Moves the parser to document `index`: false when the source does not
// parse that far. A document before the parser is reached by parsing again
// from the start (a List that could not be edited item by item).
bool SourceEditor::skip_to(int index) {
  if (!state_ || state_->failed) return false;
  if (index < state_->next) state_ = std::make_unique<State>(state_->source);
  try {
    detail::SkipEvents skip;
    for (; state_->next < index; ++state_->next) {
      if (!state_->parser.HandleNextDocument(skip)) state_->failed = true;
      if (state_->failed) return false;
    }
  } catch (...) {
    state_->failed = true;  // the source was read before, so this is not reached
  }
  return !state_->failed;
}

DocumentEdit SourceEditor::edit(const Document& document, Json* release, const Json& updated) {
  DocumentEdit result;
  if (!state_) return result;
  const std::string& source = *state_->source;
  // yaml-cpp's positions start after a byte order mark.
  const std::size_t bom = std::string_view(source).starts_with("\xEF\xBB\xBF") ? 3 : 0;
  TreeBuilder builder(bom);
  if (skip_to(document.index)) {
    try {
      ++state_->next;
      if (!state_->parser.HandleNextDocument(builder)) state_->failed = true;
    } catch (...) {
      state_->failed = true;
    }
  }
  if (state_->failed || builder.root() == nullptr) {
    return document.index == 0 ? whole_json(source, updated) : result;
  }
  return edit_tree(source, builder, document.value, release, updated);
}

bool SourceEditor::edits_items(int index) {
  if (state_ && state_->items_of == index) return true;
  if (!state_) return false;
  const std::string& source = *state_->source;
  const std::size_t first = source.find_first_not_of(" \t\r\n");
  if (index == 0 && first != std::string::npos && source[first] == '{') {
    // Strict JSON only (checked without building anything): what else
    // starts with `{` is edited whole, as one document.
    if (!Json::accept(source)) return false;
    auto spans = json_item_spans(source, first);
    if (!spans) return false;
    state_->items_of = index;
    state_->spans = std::move(*spans);
    state_->items_json = true;
    state_->items_flow = true;
    return true;
  }
  if (!skip_to(index)) return false;
  const std::size_t bom = std::string_view(source).starts_with("\xEF\xBB\xBF") ? 3 : 0;
  ItemSpans spans(source, bom);
  try {
    ++state_->next;
    if (!state_->parser.HandleNextDocument(spans)) state_->failed = true;
  } catch (...) {
    state_->failed = true;
  }
  if (state_->failed || !spans.usable()) return false;
  state_->items_of = index;
  state_->spans = spans.take();
  state_->items_json = first_char_is_brace(source, spans.root_pos());
  state_->items_flow = spans.items_flow();
  return true;
}

DocumentEdit SourceEditor::edit_item(Document&& item, const Json& updated) {
  DocumentEdit result;
  if (!state_ || !item.item || item.index != state_->items_of ||
      *item.item >= state_->spans.size()) {
    return result;
  }
  const std::string& source = *state_->source;
  const auto [begin, end] = state_->spans[*item.item];
  // The item parsed on its own, at its column: blanks stand for what is
  // before it on its line (`- `), so that its later lines keep their indentation.
  std::size_t line = begin;
  while (line > 0 && source[line - 1] != '\n' && source[line - 1] != '\r') --line;
  const std::size_t pad = begin - line;
  std::string text(pad, ' ');
  text.append(source, begin, end - begin);
  TreeBuilder builder(line);
  try {
    detail::MemoryStream stream(text);
    YAML::Parser parser(stream);
    (void)parser.HandleNextDocument(builder);
  } catch (...) {
    builder.clear();
  }
  if (builder.root() == nullptr || builder.root()->pos != begin) {
    // It does not parse on its own: written whole, in its place.
    result.edits = {
        {begin, end - begin, whole_text(updated, state_->items_json, pad, state_->items_flow)}};
    result.rewritten = true;
    return result;
  }
  return edit_tree(source, builder, item.value, &item.value, updated, pad, state_->items_json,
                   state_->items_flow);
}

DocumentEdit edit_document(const Document& document, const Json& updated) {
  SourceEditor editor(document.source);
  return editor.edit(document, updated);
}

namespace {

// The old text's lines, as offsets where each starts (line breaks included).
class Lines {
 public:
  explicit Lines(std::string_view text) : text_(text) {
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n') starts_.push_back(i + 1);
    }
    if (starts_.back() == text.size() && text.size() > 0) starts_.pop_back();
  }
  std::size_t count() const { return starts_.size(); }
  std::size_t of(std::size_t offset) const {
    return static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) -
                                    starts_.begin()) -
           1;
  }
  std::size_t start(std::size_t line) const { return starts_[line]; }
  std::size_t end(std::size_t line) const {
    return line + 1 < starts_.size() ? starts_[line + 1] : text_.size();
  }
  std::string line(std::size_t line) const {
    return std::string(text_.substr(start(line), end(line) - start(line)));
  }

 private:
  std::string_view text_;
  std::vector<std::size_t> starts_{0};
};

// Edits on the same or adjacent old lines, and the lines they span.
struct Group {
  std::size_t first, last;  // old lines, inclusive
  std::size_t begin, end;   // the edits, by index (not copied: a large List has 100,000)
};

std::vector<Group> group_edits(std::string_view text, const Lines& lines,
                               const std::vector<TextEdit>& edits) {
  std::vector<Group> groups;
  for (std::size_t i = 0; i < edits.size(); ++i) {
    const TextEdit& e = edits[i];
    const std::size_t first = lines.of(std::min(e.offset, text.empty() ? 0 : text.size() - 1));
    const std::size_t last =
        e.length == 0 ? first : lines.of(std::min(e.offset + e.length - 1, text.size() - 1));
    if (!groups.empty() && first <= groups.back().last + 1) {
      groups.back().last = std::max(groups.back().last, last);
      groups.back().end = i + 1;
    } else {
      groups.push_back({first, last, i, i + 1});
    }
  }
  return groups;
}

std::vector<std::string> split_lines(std::string_view block) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < block.size()) {
    std::size_t end = block.find('\n', start);
    end = end == std::string_view::npos ? block.size() : end + 1;
    lines.emplace_back(block.substr(start, end - start));
    start = end;
  }
  return lines;
}

void emit_line(std::string& out, char mark, const std::string& line) {
  out += mark;
  out += line;
  if (!line.ends_with('\n')) out += "\n\\ No newline at end of file\n";
}

// The body lines of one group: its old lines out, its new lines in; lines the
// edits left as they were are context, not a change. Adds to the counts.
void emit_group(std::string& body, std::string_view text, const Lines& lines,
                const std::vector<TextEdit>& edits, const Group& group, std::size_t& old_count,
                std::size_t& new_count) {
  const std::size_t begin = lines.start(group.first);
  const std::size_t end = lines.end(group.last);
  std::vector<TextEdit> local;
  for (std::size_t i = group.begin; i < group.end; ++i) {
    local.push_back({edits[i].offset - begin, edits[i].length, edits[i].text});
  }
  const auto before = split_lines(text.substr(begin, end - begin));
  const auto after = split_lines(apply_edits(text.substr(begin, end - begin), local));
  std::size_t head = 0, tail = 0;
  while (head < before.size() && head < after.size() && before[head] == after[head]) ++head;
  while (tail + head < before.size() && tail + head < after.size() &&
         before[before.size() - 1 - tail] == after[after.size() - 1 - tail]) {
    ++tail;
  }
  for (std::size_t i = 0; i < head; ++i) emit_line(body, ' ', before[i]);
  for (std::size_t i = head; i + tail < before.size(); ++i) emit_line(body, '-', before[i]);
  for (std::size_t i = head; i + tail < after.size(); ++i) emit_line(body, '+', after[i]);
  for (std::size_t i = before.size() - tail; i < before.size(); ++i) {
    emit_line(body, ' ', before[i]);
  }
  old_count += before.size();
  new_count += after.size();
}

}  // namespace

std::string unified_diff(std::string_view text, const std::vector<TextEdit>& edits,
                         std::string_view old_name, std::string_view new_name) {
  std::ostringstream out;
  write_unified_diff(out, text, edits, old_name, new_name);
  return std::move(out).str();
}

void write_unified_diff(std::ostream& out, std::string_view text,
                        const std::vector<TextEdit>& edits, std::string_view old_name,
                        std::string_view new_name) {
  if (edits.empty()) return;
  const Lines lines(text);
  const std::vector<Group> groups = group_edits(text, lines, edits);
  constexpr std::size_t context_lines = 3;
  out << fmt::format("--- {}\n+++ {}\n", old_name, new_name);
  long delta = 0;  // new line number minus old line number, before the hunk
  for (std::size_t g = 0; g < groups.size();) {
    // Groups closer than twice the context share a hunk.
    std::size_t h = g;
    while (h + 1 < groups.size() && groups[h + 1].first <= groups[h].last + 2 * context_lines + 1)
      ++h;
    const std::size_t from = groups[g].first > context_lines ? groups[g].first - context_lines : 0;
    const std::size_t to = std::min(groups[h].last + context_lines, lines.count() - 1);
    std::string body;
    std::size_t old_count = 0, new_count = 0;
    std::size_t line = from;
    for (std::size_t k = g; k <= h; ++k) {
      for (; line < groups[k].first; ++line, ++old_count, ++new_count) {
        emit_line(body, ' ', lines.line(line));
      }
      emit_group(body, text, lines, edits, groups[k], old_count, new_count);
      line = groups[k].last + 1;
    }
    for (; line <= to; ++line, ++old_count, ++new_count) emit_line(body, ' ', lines.line(line));
    const long old_start = static_cast<long>(from) + 1;
    out << fmt::format("@@ -{},{} +{},{} @@\n", old_count ? old_start : old_start - 1, old_count,
                       new_count ? old_start + delta : old_start + delta - 1, new_count)
        << body;
    delta += static_cast<long>(new_count) - static_cast<long>(old_count);
    g = h + 1;
  }
}

}  // namespace gracekeeper::manifest
