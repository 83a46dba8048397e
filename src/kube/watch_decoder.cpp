#include "gracekeeper/kube/watch_decoder.h"

#include <fmt/format.h>

#include <limits>
#include <utility>

#include "gracekeeper/core/json.h"
#include "json_reader.h"

namespace gracekeeper::kube {

namespace {

using Json = nlohmann::json;

std::string_view trim(std::string_view s) {
  constexpr std::string_view space = " \t\r";
  const auto first = s.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

std::optional<WatchEventType> parse_type(std::string_view type) {
  if (type == "ADDED") return WatchEventType::Added;
  if (type == "MODIFIED") return WatchEventType::Modified;
  if (type == "DELETED") return WatchEventType::Deleted;
  if (type == "BOOKMARK") return WatchEventType::Bookmark;
  if (type == "ERROR") return WatchEventType::Error;
  return std::nullopt;
}

using core::string_member;

WatchStatus decode_status(const Json& object) {
  WatchStatus status;
  status.status = string_member(object, "status");
  status.reason = string_member(object, "reason");
  status.message = string_member(object, "message");
  const auto code = object.find("code");
  if (code != object.end() && code->is_number_integer()) {
    // Clamp rather than wrap: a nonsense code must not turn into 410.
    const auto wide = code->get<std::int64_t>();
    constexpr std::int64_t lowest = std::numeric_limits<int>::min();
    constexpr std::int64_t highest = std::numeric_limits<int>::max();
    status.code = static_cast<int>(wide < lowest ? lowest : wide > highest ? highest : wide);
  }
  return status;
}

struct LineError {
  WatchErrorKind kind;
  std::string message;
};

// One trimmed, non-empty line -> one event.
std::expected<WatchEvent, LineError> decode_event(std::string_view line,
                                                  const WatchDecoderOptions& options) {
  // One reader for both: the depth is checked as the line is read (no pass
  // over it first), and a line too deep or malformed gives the same error
  // with a field filter as without one.
  static const FieldSet everything;
  const bool filtered = options.fields != nullptr && !options.fields->keeps_everything();
  detail::FilteringReader reader("object", filtered ? *options.fields : everything, {},
                                 options.max_depth);
  if (!detail::parse(line, reader)) {
    return std::unexpected(LineError{WatchErrorKind::MalformedJson, reader.error()});
  }
  Json doc = std::move(reader.root());
  if (!doc.is_object()) {
    return std::unexpected(LineError{WatchErrorKind::InvalidEvent, "event is not a JSON object"});
  }
  const auto type_it = doc.find("type");
  if (type_it == doc.end() || !type_it->is_string()) {
    return std::unexpected(LineError{WatchErrorKind::InvalidEvent, "event has no string \"type\""});
  }
  const auto object_it = doc.find("object");
  if (object_it == doc.end() || !object_it->is_object()) {
    return std::unexpected(
        LineError{WatchErrorKind::InvalidEvent, "event has no \"object\" object"});
  }
  const auto& type_name = type_it->get_ref<const std::string&>();
  const std::optional<WatchEventType> type = parse_type(type_name);
  if (!type) {
    // Cap what goes into the message: the type is attacker-sized.
    return std::unexpected(LineError{
        WatchErrorKind::UnknownType,
        fmt::format("unknown event type \"{}\"", std::string_view(type_name).substr(0, 64))});
  }

  WatchEvent event;
  event.type = *type;
  if (*type == WatchEventType::Error && filtered) {
    // A Status, not an object the fields describe: read it whole.
    event.object = Json::parse(line.begin(), line.end())["object"];
  } else {
    event.object = std::move(*object_it);
  }
  if (const auto meta = event.object.find("metadata");
      meta != event.object.end() && meta->is_object()) {
    event.resource_version = string_member(*meta, "resourceVersion");
  }
  if (event.type == WatchEventType::Error) event.status = decode_status(event.object);
  return event;
}

}  // namespace

// nlohmann's parser itself is iterative, but copying and comparing a json are
// recursive; reject absurd nesting before it becomes a value anyone copies.
bool json_within_depth(std::string_view text, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) return false;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return true;
}

std::string_view to_string(WatchEventType type) {
  switch (type) {
    case WatchEventType::Added:
      return "ADDED";
    case WatchEventType::Modified:
      return "MODIFIED";
    case WatchEventType::Deleted:
      return "DELETED";
    case WatchEventType::Bookmark:
      return "BOOKMARK";
    case WatchEventType::Error:
      return "ERROR";
  }
  return "?";
}

std::string WatchError::format() const {
  std::string_view what = "?";
  switch (kind) {
    case WatchErrorKind::MalformedJson:
      what = "malformed JSON";
      break;
    case WatchErrorKind::InvalidEvent:
      what = "invalid event";
      break;
    case WatchErrorKind::UnknownType:
      what = "unknown event type";
      break;
    case WatchErrorKind::TooLarge:
      what = "event too large";
      break;
    case WatchErrorKind::Truncated:
      what = "truncated stream";
      break;
  }
  return fmt::format("watch stream: {} (event {}, byte {}): {}", what, event_index, stream_offset,
                     message);
}

WatchDecoder::WatchDecoder(WatchDecoderOptions options) : options_(options) {}

std::unexpected<WatchError> WatchDecoder::fail(WatchErrorKind kind, std::string message) {
  error_ = WatchError{.kind = kind,
                      .message = std::move(message),
                      .event_index = event_index_,
                      .stream_offset = consumed_};
  partial_.clear();
  partial_.shrink_to_fit();  // a failed decoder holds no megabytes
  return std::unexpected(*error_);
}

std::expected<void, WatchError> WatchDecoder::feed(std::string_view bytes) {
  if (error_) return std::unexpected(*error_);
  while (!bytes.empty()) {
    const std::size_t newline = bytes.find('\n');
    const std::string_view piece = bytes.substr(0, newline);
    // Checked before buffering, so memory stays bounded by the limit no matter
    // how the stream is chunked.
    if (partial_.size() + piece.size() > options_.max_event_bytes) {
      return fail(WatchErrorKind::TooLarge,
                  fmt::format("event exceeds {} bytes", options_.max_event_bytes));
    }
    if (newline == std::string_view::npos) {
      partial_.append(piece);
      return {};
    }
    bytes.remove_prefix(newline + 1);
    const std::size_t line_length = partial_.size() + piece.size();
    std::expected<void, WatchError> taken;
    if (partial_.empty()) {
      taken = take_line(piece);  // the common case: no copy of the event
    } else {
      partial_.append(piece);
      taken = take_line(partial_);
    }
    if (!taken) return taken;
    consumed_ += line_length + 1;
    partial_.clear();
  }
  return {};
}

std::expected<void, WatchError> WatchDecoder::take_line(std::string_view line) {
  line = trim(line);
  if (line.empty()) return {};  // tolerate blank lines and CRLF
  std::expected<WatchEvent, LineError> event = decode_event(line, options_);
  if (!event) return fail(event.error().kind, std::move(event.error().message));
  events_.push_back(std::move(*event));
  ++event_index_;
  return {};
}

std::expected<void, WatchError> WatchDecoder::finish() {
  if (error_) return std::unexpected(*error_);
  const std::string_view rest = trim(partial_);
  if (rest.empty()) return {};
  // A last event without its newline is still a whole event; anything that
  // does not parse is the beginning of one the connection cut off.
  std::expected<WatchEvent, LineError> event = decode_event(rest, options_);
  if (!event) {
    if (event.error().kind == WatchErrorKind::MalformedJson) {
      return fail(WatchErrorKind::Truncated,
                  fmt::format("stream ended inside an event ({} bytes)", rest.size()));
    }
    return fail(event.error().kind, std::move(event.error().message));
  }
  events_.push_back(std::move(*event));
  ++event_index_;
  consumed_ += partial_.size();
  partial_.clear();
  return {};
}

std::optional<WatchEvent> WatchDecoder::next() {
  if (events_.empty()) return std::nullopt;
  WatchEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

}  // namespace gracekeeper::kube
