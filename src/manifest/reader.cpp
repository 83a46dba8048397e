// Reads YAML manifests into JSON values with yaml-cpp's event API: no node
// graph is built, each document is turned into JSON as it is parsed, and every
// way a document can grow beyond its text (aliases) or nest too deep is counted
// as it happens, so hostile input fails fast instead of exhausting memory.
#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <unordered_set>
#include <utility>

#include "gracekeeper/manifest/document.h"
#include "prescan.h"
#include "scalar.h"
#include "yaml_support.h"

namespace gracekeeper::manifest {
namespace {

constexpr std::string_view kNotAnObject =
    "expected a Kubernetes object (a mapping with apiVersion and kind)";

// Thrown from inside the event handler to abandon the parse; caught in
// read_documents, never outside this file.
struct ReadFailure {
  YAML::Mark mark;
  std::string message;
};

[[noreturn]] void fail(const YAML::Mark& mark, std::string message) {
  throw ReadFailure{mark, std::move(message)};
}

// Thrown when the sink wants no more documents in the middle of a List read
// item by item; caught in parse_documents.
struct StopReading {};

// Where a List read item by item sends its items.
struct ItemSink {
  const DocumentSink* sink = nullptr;
  std::string_view file;
  std::shared_ptr<const std::string> source;
};

bool is_core(std::string_view tag, std::string_view name) {
  return tag.size() == detail::kCoreTagPrefix.size() + name.size() &&
         tag.starts_with(detail::kCoreTagPrefix) && tag.ends_with(name);
}

// yaml-cpp 0.7 decodes the escapes `\N` and `\_` to the single bytes 0x85 and
// 0xA0 instead of the UTF-8 encodings of U+0085 and U+00A0. The input was
// checked to be valid UTF-8, so a lone such byte in a quoted scalar can only
// come from those escapes: encode it properly.
std::string repair_escapes(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t length = c < 0x80           ? 1
                         : (c >> 5) == 0x6  ? 2
                         : (c >> 4) == 0xE  ? 3
                         : (c >> 3) == 0x1E ? 4
                                            : 0;
    bool valid = length > 0 && i + length <= text.size();
    for (std::size_t k = 1; valid && k < length; ++k) {
      valid = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    }
    if (valid) {
      out.append(text, i, length);
      i += length;
    } else {  // a lone byte: its Latin-1 code point, UTF-8 encoded
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
      ++i;
    }
  }
  return out;
}

class DocumentBuilder final : public YAML::EventHandler {
 public:
  DocumentBuilder(std::string_view text, const Limits& limits, ReadBudget& budget,
                  const ItemSink* items = nullptr)
      : text_(text), limits_(limits), budget_(budget), items_(items) {
    // yaml-cpp's positions start after a byte order mark.
    if (text_.starts_with("\xEF\xBB\xBF")) text_.remove_prefix(3);
  }

  // The document just parsed, if it is not empty (a lone `---` or comments).
  std::optional<std::pair<Json, YAML::Mark>> take_document() {
    if (!root_ || root_->is_null()) return std::nullopt;
    return std::pair{std::move(*root_), root_mark_};
  }

  // Where the current document's first token is.
  const YAML::Mark& document_start() const { return document_start_; }

  // Items of the current document handed out one by one (ItemSink).
  std::size_t items_handed_out() const { return items_handed_out_; }
  // The index the next document gets, for the items handed out of it.
  void set_index(int index) { index_ = index; }

  // The character at a mark, for messages; '\0' when unknown.
  char char_at(const YAML::Mark& mark) const {
    if (mark.pos < 0 || static_cast<std::size_t>(mark.pos) >= text_.size()) return '\0';
    return text_[static_cast<std::size_t>(mark.pos)];
  }

  void OnDocumentStart(const YAML::Mark& mark) override {
    document_start_ = mark;
    stack_.clear();
    anchors_.clear();
    root_.reset();
    nodes_ = bytes_ = 0;
    items_handed_out_ = 0;
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (expecting_key()) {
      fail(mark, "a mapping key is empty or null; Kubernetes object keys must be strings");
    }
    add_scalar(Json(nullptr), mark, anchor, 0);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& raw) override {
    std::string repaired;
    if (tag == "!") {
      check_closing_quote(mark);
      repaired = repair_escapes(raw);
    }
    const std::string& text = tag == "!" ? repaired : raw;
    if (expecting_key()) {
      // Keys are taken as written (`80: x` is the key "80", as Kubernetes
      // has it); only the plain `<<` is special, as a merge.
      const bool plain = tag == "?";
      if (!plain || anchor != YAML::NullAnchor) {
        // Resolved only to check an explicit tag, or to be reused by an alias.
        auto value = detail::resolve_tagged(tag, text);
        if (!value && !plain) fail(mark, std::move(value).error());
        if (anchor != YAML::NullAnchor) {
          remember(anchor, value ? std::move(*value) : Json(text), 1, text.size(), 0);
        }
      }
      if (plain && anchor == YAML::NullAnchor) check_colon_after_key(mark, text);
      start_entry(mark, text, plain && text == "<<");
      bytes_ += text.size();
      return;
    }
    auto value = detail::resolve_tagged(tag, text);
    if (!value) fail(mark, std::move(value).error());
    if (stack_.empty() && !value->is_null()) {
      fail(mark, fmt::format("{}, found a scalar", kNotAnObject));
    }
    add_scalar(std::move(*value), mark, anchor, text.size());
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const Anchored* anchored = anchor < anchors_.size() ? &anchors_[anchor] : nullptr;
    if (anchored == nullptr || !anchored->complete) {
      fail(mark, "an alias refers to a node that contains it (recursive alias)");
    }
    // Counted over the whole input, not per document: twenty documents just
    // under a per-document limit would cost twenty times the memory.
    budget_.alias_nodes += anchored->nodes;
    if (budget_.alias_nodes > limits_.max_alias_nodes) {
      fail(mark, fmt::format("aliases expand the input beyond {} nodes (counted over all "
                             "documents); is it an alias bomb?",
                             limits_.max_alias_nodes));
    }
    budget_.alias_bytes += anchored->bytes;
    if (budget_.alias_bytes > limits_.max_alias_bytes) {
      fail(mark, fmt::format("aliases expand the input beyond {} bytes of text (counted over all "
                             "documents); is it an alias bomb?",
                             limits_.max_alias_bytes));
    }
    if (stack_.size() + static_cast<std::size_t>(anchored->height) >
        static_cast<std::size_t>(limits_.max_depth)) {
      fail_depth(mark);
    }
    nodes_ += anchored->nodes;
    bytes_ += anchored->bytes;
    if (expecting_key()) {
      const Json& key = anchored->value;
      if (key.is_object() || key.is_array() || key.is_null()) {
        fail(mark, "a mapping key must be a string, not an alias to a mapping, sequence or null");
      }
      start_entry(mark, key.is_string() ? key.get<std::string>() : key.dump(), false);
      return;
    }
    attach(Json(anchored->value), mark, anchored->height);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    if (tag != "?" && tag != "!" && !is_core(tag, "seq")) fail(mark, bad_container_tag(tag));
    begin_container(mark, anchor, false, "a sequence");
  }
  void OnSequenceEnd() override { end_container(); }

  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value style) override {
    if (tag != "?" && tag != "!" && !is_core(tag, "map")) fail(mark, bad_container_tag(tag));
    begin_container(mark, anchor, true, "a mapping");
    stack_.back().block = style != YAML::EmitterStyle::Flow;
  }
  void OnMapEnd() override { end_container(); }

 private:
  // Above this many keys, duplicate detection switches from a scan to a hash
  // set (ConfigMaps with thousands of keys exist).
  static constexpr std::size_t kIndexThreshold = 16;

  struct Frame {
    bool is_map = false;
    bool block = false;  // a block mapping (not flow)
    YAML::Mark mark;
    YAML::anchor_t anchor = YAML::NullAnchor;
    std::size_t nodes_at_start = 0;
    std::size_t bytes_at_start = 0;
    int height = 1;
    // Members are collected with mutable keys and moved into the object at
    // the end: ordered_json's vector of pair<const string, json> would deep-copy
    // every member each time it grows.
    std::vector<std::pair<std::string, Json>> members;
    Json::array_t items;
    bool expect_key = true;
    bool merge_pending = false;
    std::optional<std::size_t> replace_at;  // an explicit key overriding a merged one
    YAML::Mark key_mark;
    std::string key;
    std::unique_ptr<std::unordered_set<std::string>> index;
    std::unique_ptr<std::unordered_set<std::string>> merged;
    bool hand_out = false;  // the root's `items`: each item goes to items_ when read
  };

  struct Anchored {
    Json value;
    std::size_t nodes = 0;
    std::size_t bytes = 0;
    int height = 0;
    bool complete = false;
  };

  // yaml-cpp ends a quoted scalar that is never closed at the end of the input
  // without complaint; go-yaml (and so kubectl) rejects it, and so do we.
  void check_closing_quote(const YAML::Mark& mark) const {
    if (mark.pos < 0 || static_cast<std::size_t>(mark.pos) >= text_.size()) return;
    const auto start = static_cast<std::size_t>(mark.pos);
    const char quote = text_[start];
    if (quote != '"' && quote != '\'') return;  // a tagged or anchored scalar; not checked
    for (std::size_t i = start + 1; i < text_.size(); ++i) {
      if (quote == '"' && text_[i] == '\\') {
        ++i;
      } else if (text_[i] == quote) {
        if (quote == '\'' && i + 1 < text_.size() && text_[i + 1] == '\'') {
          ++i;  // '' is an escaped quote
          continue;
        }
        return;
      }
    }
    fail(mark, fmt::format("invalid YAML: expected the closing {} before the end of the input",
                           quote == '"' ? "double quote (\")" : "single quote (')"));
  }

  // A plain key of a block mapping is one line followed by `:`. yaml-cpp
  // also takes a line with no `:` as a key with a null value, and folds a key
  // over several lines (even over a `---`); go-yaml, and so kubectl, reject
  // both ("could not find expected ':'"), and so do we.
  void check_colon_after_key(const YAML::Mark& mark, const std::string& key) const {
    if (stack_.empty() || !stack_.back().block || mark.pos < 0) return;
    const auto pos = static_cast<std::size_t>(mark.pos);
    if (text_.substr(pos, key.size()) != key) {
      if (pos < text_.size() && !key.empty() && text_[pos] == key.front()) {
        fail(mark, "invalid YAML: a mapping key must be on one line");
      }
      return;  // not where the key is written (an explicit `?` key, ...)
    }
    std::size_t i = pos + key.size();
    while (i < text_.size() && (text_[i] == ' ' || text_[i] == '\t')) ++i;
    if (i < text_.size() && text_[i] == ':') return;
    std::size_t line = pos;
    while (line > 0 && text_[line - 1] != '\n' && text_[line - 1] != '\r') --line;
    while (line < pos && (text_[line] == ' ' || text_[line] == '\t' || text_[line] == '-')) ++line;
    if (line < pos && text_[line] == '?') return;  // an explicit key: its `:` comes later
    fail(mark, fmt::format("invalid YAML: expected `:` after \"{}\" (a line of a mapping "
                           "must be `key: value`)",
                           key.size() > 60 ? key.substr(0, 60) + "..." : key));
  }

  bool expecting_key() const {
    return !stack_.empty() && stack_.back().is_map && stack_.back().expect_key;
  }

  [[noreturn]] void fail_depth(const YAML::Mark& mark) const {
    fail(mark, fmt::format("nesting is deeper than {} levels", limits_.max_depth));
  }

  static std::string bad_container_tag(std::string_view tag) {
    if (tag.starts_with(detail::kCoreTagPrefix)) {
      return fmt::format("tag {} cannot be used on a mapping or sequence",
                         detail::display_tag(tag));
    }
    return detail::resolve_tagged(tag, "").error();  // the "unsupported tag" message
  }

  void begin_container(const YAML::Mark& mark, YAML::anchor_t anchor, bool is_map,
                       std::string_view what) {
    if (expecting_key()) {
      fail(mark, fmt::format("a mapping key must be a string, not {}", what));
    }
    if (stack_.empty() && !is_map) fail(mark, fmt::format("{}, found {}", kNotAnObject, what));
    if (stack_.size() >= static_cast<std::size_t>(limits_.max_depth)) fail_depth(mark);
    if (anchor != YAML::NullAnchor) reserve_anchor(anchor);
    // The root mapping's `items` sequence, read item by item (not when it
    // is anchored: an alias to it would need it whole).
    const bool hand_out = items_ != nullptr && !is_map && stack_.size() == 1 &&
                          stack_.front().is_map && stack_.front().key == "items" &&
                          !stack_.front().merge_pending && !stack_.front().replace_at &&
                          anchor == YAML::NullAnchor;
    Frame& frame = stack_.emplace_back();
    frame.is_map = is_map;
    frame.hand_out = hand_out;
    frame.mark = mark;
    frame.anchor = anchor;
    frame.nodes_at_start = nodes_;
    frame.bytes_at_start = bytes_;
    ++nodes_;
  }

  void end_container() {
    Frame frame = std::move(stack_.back());
    stack_.pop_back();
    Json value;
    if (frame.is_map) {
      value = Json::object();
      auto& object = value.get_ref<Json::object_t&>();
      object.reserve(frame.members.size());
      for (auto& [key, member] : frame.members)
        object.emplace_back(std::move(key), std::move(member));
    } else {
      value = Json(std::move(frame.items));
    }
    if (frame.anchor != YAML::NullAnchor) {
      remember(frame.anchor, Json(value), nodes_ - frame.nodes_at_start,
               bytes_ - frame.bytes_at_start, frame.height);
    }
    attach(std::move(value), frame.mark, frame.height);
  }

  void add_scalar(Json value, const YAML::Mark& mark, YAML::anchor_t anchor, std::size_t bytes) {
    ++nodes_;
    bytes_ += bytes;
    if (anchor != YAML::NullAnchor) remember(anchor, Json(value), 1, bytes, 0);
    attach(std::move(value), mark, 0);
  }

  void reserve_anchor(YAML::anchor_t anchor) {
    if (anchor >= anchors_.size()) anchors_.resize(anchor + 1);
    anchors_[anchor] = Anchored{};
  }

  void remember(YAML::anchor_t anchor, Json value, std::size_t nodes, std::size_t bytes,
                int height) {
    reserve_anchor(anchor);
    anchors_[anchor] = Anchored{std::move(value), nodes, bytes, height, true};
  }

  bool has_member(const Frame& frame, const std::string& key) const {
    if (frame.index) return frame.index->contains(key);
    return std::any_of(frame.members.begin(), frame.members.end(),
                       [&](const auto& member) { return member.first == key; });
  }

  void add_member(Frame& frame, std::string key, Json value) {
    if (frame.index) {
      frame.index->insert(key);
    } else if (frame.members.size() + 1 >= kIndexThreshold) {
      frame.index = std::make_unique<std::unordered_set<std::string>>();
      for (const auto& member : frame.members) frame.index->insert(member.first);
      frame.index->insert(key);
    }
    frame.members.emplace_back(std::move(key), std::move(value));
  }

  void start_entry(const YAML::Mark& mark, const std::string& key, bool merge) {
    Frame& frame = stack_.back();
    frame.key_mark = mark;
    frame.expect_key = false;
    if (merge) {
      frame.merge_pending = true;
      return;
    }
    if (has_member(frame, key)) {
      // A key brought in by `<<` is a default: an explicit key overrides it.
      if (frame.merged && frame.merged->erase(key) == 1) {
        auto it = std::find_if(frame.members.begin(), frame.members.end(),
                               [&](const auto& member) { return member.first == key; });
        frame.replace_at = static_cast<std::size_t>(it - frame.members.begin());
      } else {
        fail(mark, fmt::format("duplicate key \"{}\": it is already set in this mapping", key));
      }
    }
    frame.key = key;
  }

  void merge(Frame& frame, Json value, const YAML::Mark& mark) {
    auto merge_one = [&](Json& source) {
      if (!source.is_object()) {
        fail(mark, "a merge key (<<) takes a mapping or a sequence of mappings");
      }
      for (auto& [key, member] : source.get_ref<Json::object_t&>()) {
        // Explicit keys, and earlier merge sources, take precedence.
        if (has_member(frame, key)) continue;
        if (!frame.merged) frame.merged = std::make_unique<std::unordered_set<std::string>>();
        frame.merged->insert(key);
        add_member(frame, key, std::move(member));
      }
    };
    if (value.is_array()) {
      for (Json& source : value.get_ref<Json::array_t&>()) merge_one(source);
    } else {
      merge_one(value);
    }
  }

  void attach(Json value, const YAML::Mark& mark, int height) {
    if (stack_.empty()) {
      root_ = std::move(value);
      root_mark_ = mark;
      return;
    }
    Frame& frame = stack_.back();
    frame.height = std::max(frame.height, height + 1);
    if (!frame.is_map) {
      if (frame.hand_out) {
        hand_out(std::move(value), mark);
        return;
      }
      frame.items.push_back(std::move(value));
      return;
    }
    frame.expect_key = true;
    if (frame.merge_pending) {
      frame.merge_pending = false;
      merge(frame, std::move(value), frame.key_mark);
    } else if (frame.replace_at) {
      frame.members[*frame.replace_at].second = std::move(value);
      frame.replace_at.reset();
    } else {
      add_member(frame, std::move(frame.key), std::move(value));
    }
  }

  void hand_out(Json value, const YAML::Mark& mark) {
    Document item{std::move(value),
                  detail::position_at(items_->file, mark),
                  index_,
                  items_->source,
                  items_handed_out_++,
                  false};
    if (!(*items_->sink)(std::move(item))) throw StopReading{};
  }

  std::string_view text_;
  const Limits& limits_;
  ReadBudget& budget_;
  const ItemSink* items_;
  int index_ = 0;
  std::size_t items_handed_out_ = 0;
  std::vector<Frame> stack_;
  std::vector<Anchored> anchors_;  // by yaml-cpp's anchor id, which restarts per document
  std::optional<Json> root_;
  YAML::Mark root_mark_;
  YAML::Mark document_start_;
  std::size_t nodes_ = 0;
  std::size_t bytes_ = 0;
  // Only growth through aliases is limited (in budget_): everything else is
  // bounded by the input size already, and a `kubectl get -o yaml` List of
  // thousands of Deployments is one legitimately large document.
};

Error error_at(std::string_view name, std::string_view text, std::size_t offset,
               std::string message) {
  int line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return Error{Position{std::string(name), line, static_cast<int>(offset - line_start) + 1},
               std::move(message)};
}

// An outermost flow collection longer than limits.max_flow_bytes, opened at
// `offset`, that yaml-cpp would have to read (the prescan finds it where the
// limit is crossed).
Error flow_too_long(std::string_view name, std::string_view text, std::size_t offset,
                    const Limits& limits) {
  const std::size_t limit = limits.max_flow_bytes;
  const std::string size =
      limit % (1u << 20) == 0 ? fmt::format("{} MiB", limit >> 20) : fmt::format("{} bytes", limit);
  return error_at(name, text, offset,
                  fmt::format("a flow collection longer than {} (the API server accepts no "
                              "object this large); write it as block YAML or as JSON",
                              size));
}

// UTF-32 and UTF-16, by byte order mark or by the zero bytes ASCII leaves in
// them; UTF-32 first, since its little-endian mark starts like UTF-16's.
std::optional<std::string_view> wide_encoding(std::string_view text) {
  using namespace std::string_view_literals;
  if (text.starts_with("\x00\x00\xFE\xFF"sv) || text.starts_with("\xFF\xFE\x00\x00"sv)) {
    return "UTF-32";
  }
  if (text.starts_with("\xFF\xFE"sv) || text.starts_with("\xFE\xFF"sv)) return "UTF-16";
  if (text.size() >= 4 && text[0] != 0 && text.substr(1, 3) == "\0\0\0"sv) return "UTF-32";
  if (text.size() >= 4 && text.substr(0, 3) == "\0\0\0"sv && text[3] != 0) return "UTF-32";
  if (text.size() >= 2 && (text[0] == 0) != (text[1] == 0)) return "UTF-16";
  return std::nullopt;
}

// yaml-cpp turns invalid UTF-8 into U+FFFD and guesses UTF-16/32 from zero
// bytes, so binary input would otherwise parse as garbage strings. YAML allows
// tab, LF, CR and printable characters only.
std::optional<Error> check_text(std::string_view text, std::string_view name,
                                const Limits& limits) {
  if (text.size() > limits.max_input_bytes) {
    return Error{Position{std::string(name)},
                 fmt::format("input is larger than the limit of {} bytes", limits.max_input_bytes)};
  }
  if (auto encoding = wide_encoding(text)) {
    return Error{Position{std::string(name), 1, 1},
                 fmt::format("{} text is not supported; convert the file to UTF-8", *encoding)};
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t size = text.size();
  for (std::size_t i = 0; i < size;) {
    unsigned char c = bytes[i];
    if (c >= 0x20 && c < 0x7F) {
      ++i;
      continue;
    }
    if (c == '\n' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    if (c == 0) return error_at(name, text, i, "binary data is not a manifest (NUL byte)");
    if (c < 0x80) {
      return error_at(name, text, i,
                      fmt::format("binary data is not a manifest (control character 0x{:02X})", c));
    }
    std::size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    std::uint32_t cp = length == 4 ? c & 0x07u : length == 3 ? c & 0x0Fu : c & 0x1Fu;
    bool valid = length != 0 && c <= 0xF4 && i + length <= size;
    for (std::size_t k = 1; valid && k < length; ++k) {
      unsigned char next = bytes[i + k];
      valid = (next & 0xC0) == 0x80;
      cp = (cp << 6) | (next & 0x3Fu);
    }
    static constexpr std::uint32_t minimum[] = {0, 0, 0x80, 0x800, 0x10000};
    if (valid) {
      valid = cp >= minimum[length] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
    }
    if (!valid) return error_at(name, text, i, "binary data is not a manifest (invalid UTF-8)");
    if ((cp >= 0x80 && cp <= 0x9F && cp != 0x85) || cp == 0xFFFE || cp == 0xFFFF) {
      return error_at(
          name, text, i,
          fmt::format("binary data is not a manifest (control character U+{:04X})", cp));
    }
    i += length;
  }
  return std::nullopt;
}

}  // namespace

bool is_list_object(const Json& value) {
  if (!value.is_object()) return false;
  auto kind = value.find("kind");
  auto api_version = value.find("apiVersion");
  if (kind == value.end() || !kind->is_string() || api_version == value.end() ||
      !api_version->is_string()) {
    return false;
  }
  const auto& text = kind->get_ref<const std::string&>();
  return text == "List" || (text.size() > 4 && text.ends_with("List"));
}

std::string Position::format() const {
  if (line <= 0) return file;
  if (column <= 0) return fmt::format("{}:{}", file, line);
  return fmt::format("{}:{}:{}", file, line, column);
}

std::string Error::format() const {
  std::string where = position.format();
  if (where.empty()) return message;
  return fmt::format("{}: {}", where, message);
}

namespace {

// Document `index` of `source` read again whole: it had a top-level `items`
// sequence read item by item, but is not a List. Its aliases were counted
// the first time.
std::optional<Json> read_whole_again(const std::shared_ptr<const std::string>& source, int index,
                                     const Limits& limits, ReadBudget budget) {
  detail::MemoryStream stream(*source);
  YAML::Parser parser(stream);
  detail::SkipEvents skip;
  for (int i = 0; i < index; ++i) (void)parser.HandleNextDocument(skip);
  DocumentBuilder builder(*source, limits, budget);
  (void)parser.HandleNextDocument(builder);
  auto document = builder.take_document();
  if (!document) return std::nullopt;
  return std::move(document->first);
}

// Offsets to positions, for offsets that only grow: linear over a whole text.
class Lines {
 public:
  Lines(std::string_view text, std::string_view file) : text_(text), file_(file) {}
  Position at(std::size_t offset) {
    for (; counted_ < offset && counted_ < text_.size(); ++counted_) {
      if (text_[counted_] == '\n') {
        ++line_;
        line_start_ = counted_ + 1;
      }
    }
    return Position{std::string(file_), line_, static_cast<int>(offset - line_start_) + 1};
  }

 private:
  std::string_view text_;
  std::string_view file_;
  std::size_t counted_ = 0;
  std::size_t line_start_ = 0;
  int line_ = 1;
};

// Reads documents one by one from text that has passed check_text.
std::expected<void, Error> parse_documents(const std::shared_ptr<const std::string>& source,
                                           const std::string& file, const DocumentSink& sink,
                                           const Limits& limits, ReadBudget& budget,
                                           ListItems lists, bool recall_first = false) {
  detail::MemoryStream stream(*source);
  YAML::Parser parser(stream);
  const ItemSink items{&sink, file, source};
  DocumentBuilder builder(*source, limits, budget, lists == ListItems::OneByOne ? &items : nullptr);
  YAML::Mark previous_start;
  for (int index = 0;; ++index) {
    bool more = false;
    builder.set_index(index);
    const ReadBudget budget_before = budget;
    try {
      more = parser.HandleNextDocument(builder);
    } catch (const StopReading&) {
      return {};
    } catch (const ReadFailure& failure) {
      return std::unexpected(Error{detail::position_at(file, failure.mark), failure.message});
    } catch (const YAML::Exception& e) {
      return std::unexpected(Error{detail::position_at(file, e.mark),
                                   detail::describe_yaml_error(e, limits.max_depth)});
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      // yaml-cpp has a few internal errors that are not YAML::Exception.
      return std::unexpected(Error{Position{file}, fmt::format("invalid YAML: {}", e.what())});
    }
    if (!more) break;
    // yaml-cpp 0.7 reports an empty document without consuming anything for
    // a token that cannot start a node (a `,` at the top level), and would
    // do so forever.
    const YAML::Mark start = builder.document_start();
    if (index > 0 && start.pos == previous_start.pos) {
      char c = builder.char_at(start);
      return std::unexpected(Error{
          detail::position_at(file, start),
          c > ' ' && c < 0x7F ? fmt::format("invalid YAML: unexpected `{}`; expected a node", c)
                              : std::string("invalid YAML: unexpected token; expected a node")});
    }
    previous_start = start;
    auto document = builder.take_document();
    if (!document) continue;
    Document doc{std::move(document->first),
                 detail::position_at(file, document->second),
                 index,
                 source,
                 std::nullopt,
                 recall_first && index == 0};
    if (builder.items_handed_out() > 0 && !is_list_object(doc.value)) {
      // Rare (an object with a top-level `items` that is not a List): read
      // it again, whole. It read once, so it reads again.
      auto whole = read_whole_again(source, index, limits, budget_before);
      if (whole) doc.value = std::move(*whole);
      doc.items_recalled = true;
    }
    if (!sink(std::move(doc))) break;
  }
  return {};
}

// What the prescan finds in a text: an error, or whether only the JSON path
// may read it (true when the text opens with a flow collection too long for
// yaml-cpp: the prescan stopped there; the JSON path bounds the depth
// itself). `blank_tabs` as detail::prescan sets it.
std::expected<bool, Error> prescanned(const std::string& text, std::string_view name,
                                      const Limits& limits, std::size_t first, bool json_candidate,
                                      bool& blank_tabs) {
  const auto found = detail::prescan(text, limits.max_depth, limits.max_flow_bytes, &blank_tabs);
  if (!found) return false;
  if (found->problem == detail::Prescan::Problem::FlowTooLong) {
    if (!json_candidate || found->offset != first) {
      return std::unexpected(flow_too_long(name, text, found->offset, limits));
    }
    return true;
  }
  return std::unexpected(
      error_at(name, text, found->offset,
               found->problem == detail::Prescan::Problem::TooDeep
                   ? fmt::format("nesting is deeper than {} levels (`[` or `{{` opened here)",
                                 limits.max_depth)
                   : std::string("invalid YAML: no `:` within the first 1024 characters of this "
                                 "line (a line of a mapping must be `key: value`, and a key is at "
                                 "most 1024 characters)")));
}

// A text that opens with `{` (at `first`), read as one JSON object: a
// List's items handed out one by one with ListItems::OneByOne. nullopt when
// it is not JSON, for the YAML reader; `recall_first` then says whether it
// handed out items, which that reader takes back.
std::optional<std::expected<void, Error>> read_json_text(
    const std::shared_ptr<const std::string>& text, const std::string& file,
    const DocumentSink& sink, const Limits& limits, std::size_t first, bool json_only,
    ListItems lists, bool& recall_first) {
  Lines lines(*text, file);
  detail::JsonItems items;
  items.sink = [&](Json&& value, std::size_t offset) {
    return sink(Document{std::move(value), lines.at(offset), 0, text, items.handed_out - 1, false});
  };
  const bool by_item = lists == ListItems::OneByOne;
  auto value = detail::read_json_object(*text, first, limits.max_depth, by_item ? &items : nullptr);
  if (items.stopped) return std::expected<void, Error>();
  if (value) {
    Document document{
        std::move(*value), Lines(*text, file).at(first), 0, text, std::nullopt, false};
    if (items.handed_out > 0 && !is_list_object(document.value)) {
      // It read once, so it reads again.
      if (auto whole = detail::read_json_object(*text, first, limits.max_depth)) {
        document.value = std::move(*whole);
      }
      document.items_recalled = true;
    }
    (void)sink(std::move(document));
    return std::expected<void, Error>();
  }
  if (json_only) return std::unexpected(flow_too_long(file, *text, first, limits));
  // The YAML reader reads it whole: its items handed out are taken back.
  recall_first = items.handed_out > 0;
  return std::nullopt;
}

}  // namespace

std::expected<void, Error> for_each_document(std::shared_ptr<const std::string> text,
                                             std::string_view name, const DocumentSink& sink,
                                             const Limits& limits, ReadBudget* budget,
                                             ListItems lists) {
  const std::string file(name);
  try {
    if (auto bad = check_text(*text, name, limits)) return std::unexpected(std::move(*bad));
    const std::size_t first = text->find_first_not_of(" \t\r\n");
    const bool json_candidate = first != std::string::npos && (*text)[first] == '{';
    bool blank_tabs = false;
    const auto json_only = prescanned(*text, name, limits, first, json_candidate, blank_tabs);
    if (!json_only) return std::unexpected(json_only.error());
    if (detail::has_lone_cr(*text)) {
      std::string copy = *text;
      detail::normalise_line_breaks(copy);
      text = std::make_shared<const std::string>(std::move(copy));
    }
    if (blank_tabs) {
      text = std::make_shared<const std::string>(
          detail::blank_lines_without_tabs(*text, limits.max_depth));
    }
    bool recall_first = false;
    if (json_candidate) {
      if (auto done =
              read_json_text(text, file, sink, limits, first, *json_only, lists, recall_first)) {
        return std::move(*done);
      }
    }
    ReadBudget local;
    return parse_documents(text, file, sink, limits, budget ? *budget : local,
                           recall_first ? ListItems::Whole : lists, recall_first);
  } catch (const std::bad_alloc&) {
    return std::unexpected(Error{Position{file}, "out of memory while reading the input"});
  }
}
std::expected<void, Error> for_each_document(std::string text, std::string_view name,
                                             const DocumentSink& sink, const Limits& limits,
                                             ReadBudget* budget, ListItems lists) {
  detail::normalise_line_breaks(text);
  return for_each_document(std::make_shared<const std::string>(std::move(text)), name, sink, limits,
                           budget, lists);
}

std::expected<std::vector<Document>, Error> read_text(std::string text, std::string_view name,
                                                      const Limits& limits, ReadBudget* budget) {
  std::vector<Document> documents;
  auto done = for_each_document(
      std::move(text), name,
      [&](Document&& doc) {
        documents.push_back(std::move(doc));
        return true;
      },
      limits, budget);
  if (!done) return std::unexpected(std::move(done).error());
  return documents;
}

}  // namespace gracekeeper::manifest
