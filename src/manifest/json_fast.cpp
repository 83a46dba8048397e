// A single JSON object read with nlohmann's SAX parser instead of yaml-cpp.
//
// Why: yaml-cpp's scanner cannot hand out a token of a flow collection while
// a simple key is pending, and a document that opens with `{` could be the
// key of a mapping (`{...}: value`) until its closing `}` is seen. So it
// tokenises the whole single-line document before the first event: ~8x the
// text in tokens, on top of the decoded value (a 20 MB JSON ConfigMap peaked
// at 276 MB). JSON is YAML, and for strict JSON the values are the same, so
// such input is decoded here in one streaming pass. Anything this parser does
// not take exactly as the YAML reader would (a duplicate key, `<<`, an
// integer beyond int64, trailing text, a comment, ...) is left to the YAML
// reader, which then reports it as before.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "prescan.h"
#include "scalar.h"

namespace gracekeeper::manifest::detail {
namespace {

// A pointer into the text that publishes where the parser is: nlohmann's
// SAX interface tells no position, and a List item handed out on its own
// should know its line.
class Cursor {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  Cursor(const char* at, const char** shared) : at_(at), shared_(shared) {}
  reference operator*() const { return *at_; }
  Cursor& operator++() {
    *shared_ = ++at_;
    return *this;
  }
  Cursor operator++(int) {
    Cursor before = *this;
    ++*this;
    return before;
  }
  bool operator==(const Cursor& other) const { return at_ == other.at_; }

 private:
  const char* at_;
  const char** shared_;
};

class Builder {
 public:
  Builder(JsonItems* items, const char* const* cursor, const char* text, int max_depth)
      : items_(items), cursor_(cursor), text_(text), max_depth_(max_depth) {}

  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  std::optional<Json> take() { return std::move(result_); }

  bool null() { return attach(Json()); }
  bool boolean(bool value) { return attach(Json(value)); }
  bool number_integer(number_integer_t value) { return attach(Json(value)); }
  bool number_unsigned(number_unsigned_t value) {
    if (value > static_cast<number_unsigned_t>(std::numeric_limits<std::int64_t>::max())) {
      return false;  // the YAML reader names this error
    }
    return attach(Json(static_cast<std::int64_t>(value)));
  }
  bool number_float(number_float_t, const string_t& raw) {
    auto value = resolve_plain(raw);  // as the YAML reader resolves it
    return value && attach(std::move(*value));
  }
  bool string(string_t& value) { return attach(Json(std::move(value))); }
  bool binary(binary_t&) { return false; }
  bool start_object(std::size_t) {
    if (too_deep()) return false;
    note_item_start();
    frames_.emplace_back().is_map = true;
    return true;
  }
  bool key(string_t& key) {
    if (key == "<<") return false;  // a merge key to the YAML reader when plain
    frames_.back().key = std::move(key);
    return true;
  }
  bool end_object() {
    Frame frame = std::move(frames_.back());
    frames_.pop_back();
    if (has_duplicates(frame.members)) return false;
    Json value = Json::object();
    auto& object = value.get_ref<Json::object_t&>();
    object.reserve(frame.members.size());
    for (auto& [key, member] : frame.members)
      object.emplace_back(std::move(key), std::move(member));
    return attach(std::move(value));
  }
  bool start_array(std::size_t) {
    if (too_deep()) return false;
    note_item_start();
    // The root object's `items`, handed out item by item when asked.
    const bool hand_out = items_ != nullptr && frames_.size() == 1 && frames_.front().is_map &&
                          frames_.front().key == "items";
    frames_.emplace_back().hand_out = hand_out;
    return true;
  }
  bool end_array() {
    Frame frame = std::move(frames_.back());
    frames_.pop_back();
    return attach(Json(std::move(frame.items)));
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

 private:
  struct Frame {
    bool is_map = false;
    bool hand_out = false;
    std::string key;
    // Mutable keys, moved into the object at the end (as the YAML reader does).
    std::vector<std::pair<std::string, Json>> members;
    Json::array_t items;
  };

  // One more level would be deeper than max_depth_ (the YAML reader names it).
  bool too_deep() const { return static_cast<long>(frames_.size()) >= max_depth_; }

  static bool has_duplicates(const std::vector<std::pair<std::string, Json>>& members) {
    std::vector<std::uint32_t> order(members.size());
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      return members[a].first < members[b].first;
    });
    return std::adjacent_find(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
             return members[a].first == members[b].first;
           }) != order.end();
  }

  // Where a collection that is an item to hand out starts (the parser has
  // just read its `[` or `{`).
  void note_item_start() {
    if (!frames_.empty() && frames_.back().hand_out) item_start_ = offset() - 1;
  }

  std::size_t offset() const { return static_cast<std::size_t>(*cursor_ - text_); }

  bool attach(Json value) {
    if (frames_.empty()) {
      result_ = std::move(value);
      return true;
    }
    Frame& frame = frames_.back();
    if (frame.hand_out) {
      const std::size_t start = value.is_structured() ? item_start_ : offset();
      ++items_->handed_out;
      if (!items_->sink(std::move(value), start)) {
        items_->stopped = true;
        return false;
      }
      return true;
    }
    if (frame.is_map) {
      frame.members.emplace_back(std::move(frame.key), std::move(value));
    } else {
      frame.items.push_back(std::move(value));
    }
    return true;
  }

  JsonItems* items_;
  const char* const* cursor_;
  const char* text_;
  int max_depth_;
  std::size_t item_start_ = 0;
  std::vector<Frame> frames_;
  std::optional<Json> result_;
};

}  // namespace

std::optional<Json> read_json_object(std::string_view text, std::size_t first, int max_depth,
                                     JsonItems* items) {
  if (first >= text.size() || text[first] != '{') return std::nullopt;
  if (text.size() > std::numeric_limits<std::uint32_t>::max()) return std::nullopt;
  const char* at = text.data() + first;
  Builder builder(items, &at, text.data(), max_depth);
  try {
    if (!Json::sax_parse(Cursor(at, &at), Cursor(text.data() + text.size(), &at), &builder,
                         Json::input_format_t::json, /*strict=*/true, /*ignore_comments=*/false)) {
      return std::nullopt;
    }
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return builder.take();
}

}  // namespace gracekeeper::manifest::detail
