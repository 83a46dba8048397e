// Parses a List page or a watch event as SAX events, building of the objects
// in it only the members a FieldSet names: the rest is stepped over by
// JsonScanner (json_scan.h) or, where it leaves the text to nlohmann, lexed
// and dropped, never allocated (for a Deployment, its managedFields'
// fieldsV1, env, resources and status are most of its text). Internal to
// src/kube.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gracekeeper/kube/fields.h"
#include "json_scan.h"

namespace gracekeeper::kube::detail {

// `member` is the top-level member that holds the objects: "items" of a List,
// "object" of a watch event. It is built as `fields` says; everything else
// is kept whole. With `on_item`, the elements of that member (an array) are
// handed out one at a time, each the moment it is complete, instead of kept:
// one item's tree is alive at a time, never a page's. An object whose
// metadata `fields.wanted()` refuses is reduced to its metadata the moment
// that is complete, and the rest of its text is lexed and dropped.
class FilteringReader {
 public:
  using json = nlohmann::json;
  using string_t = json::string_t;
  using Node = FieldSet::Node;

  // `max_depth`: a document nested deeper (containers kept or dropped
  // alike) is refused, "nested deeper than N", the moment it gets there:
  // copying and comparing a json are recursive. Whatever the fields, the
  // same text fails at the same place with the same message.
  FilteringReader(std::string member, const FieldSet& fields,
                  std::function<void(json&&)> on_item = {},
                  std::size_t max_depth = static_cast<std::size_t>(-1))
      : member_(std::move(member)),
        fields_(fields.root().whole ? nullptr : &fields.root()),
        wanted_(fields.wanted() ? &fields.wanted() : nullptr),
        on_item_(std::move(on_item)),
        max_depth_(max_depth) {}

  bool null() { return value(json(nullptr)); }
  bool boolean(bool v) { return value(json(v)); }
  bool number_integer(json::number_integer_t v) { return value(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return value(json(v)); }
  bool number_float(json::number_float_t v, const string_t&) { return value(json(v)); }
  // A dropped string is not copied into a json: that would be a malloc for
  // every string of managedFields and status, and the lexer's buffer, moved
  // out, would have to grow again for the next token.
  bool string(string_t& v) { return dropped() || add(json(std::move(v))); }
  bool binary(json::binary_t& v) { return value(json::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(json::value_t::object); }
  bool start_array(std::size_t) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(string_t& k) {
    if (skipping_ > 0) return true;
    Frame& f = stack_.back();
    f.next = nullptr;
    f.skip_next = false;
    f.next_handed_out = false;
    if (f.reduced) {
      f.skip_next = true;
    } else if (stack_.size() == 1 && k == member_) {
      f.next = fields_;
      f.next_handed_out = static_cast<bool>(on_item_);
    } else if (f.filter != nullptr) {
      auto it = f.filter->members.find(k);
      if (it == f.filter->members.end()) {
        f.skip_next = true;
      } else if (!it->second.whole) {
        f.next = &it->second;
      }
    }
    f.key.assign(k);  // a copy: the lexer keeps its buffer's capacity
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = e.what();
    return false;
  }

  json& root() { return root_; }
  const std::string& error() const { return error_; }

  // For JsonScanner (json_scan.h): whether the value that starts now is
  // dropped, how deep the reader is, and how deep it may go.
  bool skip_value() { return dropped(); }
  std::size_t depth() const { return stack_.size() + skipping_; }
  std::size_t max_depth() const { return max_depth_; }

  // Back to the start, to read the same text again: the elements already
  // handed to on_item are not handed out a second time.
  void restart() {
    stack_.clear();
    skipping_ = 0;
    root_ = json();
    error_.clear();
    suppress_ = handed_out_;
  }

 private:
  struct Frame {
    json value;
    const Node* filter = nullptr;  // what of this object (or of each element) is kept; null: all
    bool handed_out = false;       // its elements go to on_item
    // In an object, about the value after the last key:
    std::string key;
    const Node* next = nullptr;
    bool skip_next = false;
    bool next_handed_out = false;
    bool member_value = false;  // the value of `member`
    bool item = false;          // an object the fields (and wanted) describe
    bool reduced = false;       // wanted refused it: only its metadata is kept
  };

  // True when the value that starts now is dropped (and skipping_ counts
  // the containers open inside it).
  bool dropped() {
    if (skipping_ > 0) return true;
    if (stack_.empty() || !stack_.back().value.is_object() || !stack_.back().skip_next) {
      return false;
    }
    stack_.back().skip_next = false;
    return true;
  }
  bool open(json::value_t type) {
    if (stack_.size() + skipping_ >= max_depth_) {
      error_ = "nested deeper than " + std::to_string(max_depth_);
      return false;
    }
    if (dropped()) {
      ++skipping_;
      return true;
    }
    Frame frame;
    frame.value = json(type);
    if (!stack_.empty()) {
      const Frame& parent = stack_.back();
      frame.filter = parent.value.is_object() ? parent.next : parent.filter;
      frame.handed_out =
          parent.value.is_object() && parent.next_handed_out && type == json::value_t::array;
      frame.member_value = stack_.size() == 1 && parent.value.is_object() && parent.key == member_;
      frame.item = type == json::value_t::object &&
                   (frame.member_value || (parent.member_value && parent.value.is_array()));
    }
    stack_.push_back(std::move(frame));
    return true;
  }
  bool close() {
    if (skipping_ > 0) {
      --skipping_;
      return true;
    }
    json v = std::move(stack_.back().value);
    stack_.pop_back();
    return add(std::move(v));
  }
  bool value(json v) {
    if (dropped()) return true;
    return add(std::move(v));
  }
  bool add(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
    } else if (Frame& parent = stack_.back(); parent.handed_out) {
      if (suppress_ > 0) {
        --suppress_;
      } else {
        ++handed_out_;
        on_item_(std::move(v));
      }
    } else if (parent.value.is_object()) {
      if (parent.item && wanted_ && parent.key == "metadata" && v.is_object() && !(*wanted_)(v)) {
        parent.value = json::object();
        parent.reduced = true;
      }
      parent.value[parent.key] = std::move(v);
    } else {
      parent.value.push_back(std::move(v));
    }
    return true;
  }

  std::string member_;
  const Node* fields_;
  const FieldSet::Wanted* wanted_;
  std::function<void(json&&)> on_item_;
  std::size_t max_depth_;
  std::vector<Frame> stack_;
  std::size_t skipping_ = 0;
  json root_;
  std::string error_;
  std::size_t handed_out_ = 0;  // elements given to on_item
  std::size_t suppress_ = 0;    // after restart(): how many of them to pass over
};

// Reads `text` into `reader`: JsonScanner first, which steps over what the
// fields drop; where it leaves the text to nlohmann, nlohmann reads it all
// again from the start. False with reader.error() set when it is malformed or
// too deep.
inline bool parse(std::string_view text, FilteringReader& reader) {
  if (JsonScanner<FilteringReader>(text, reader).run() == Scan::Parsed) return true;
  reader.restart();
  return nlohmann::json::sax_parse(text, &reader);
}

}  // namespace gracekeeper::kube::detail
