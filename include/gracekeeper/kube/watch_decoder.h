// Decodes the body of a Kubernetes watch response: one JSON event per line,
//   {"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}}\n
// arriving in HTTP chunks that split events anywhere. Pure: bytes in, events
// out, no I/O, so every framing corner case is unit-testable and fuzzable.
//
// Any error means the stream cannot be trusted any more: the caller drops the
// connection and re-watches (or relists), as client-go's reflector does. The
// decoder never throws for bad input and never buffers more than one event of
// at most max_event_bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "gracekeeper/kube/fields.h"

namespace gracekeeper::kube {

enum class WatchEventType { Added, Modified, Deleted, Bookmark, Error };

// "ADDED", "MODIFIED", ... as on the wire.
std::string_view to_string(WatchEventType);

// The metav1.Status carried by an ERROR event.
struct WatchStatus {
  int code = 0;         // HTTP-like code; 410 when the resourceVersion is too old
  std::string status;   // "Failure"
  std::string reason;   // "Expired", "Gone", ...
  std::string message;  // "too old resource version: 1 (2)"

  // The watch cannot resume from its resourceVersion: the caller must relist.
  // Servers have said this both as 410 and as reason Expired/Gone.
  bool resource_version_too_old() const {
    return code == 410 || reason == "Expired" || reason == "Gone";
  }
};

struct WatchEvent {
  WatchEventType type = WatchEventType::Added;
  // The object as sent. nlohmann::json (sorted keys), not the ordered_json of
  // manifest/: informers project a few fields out of it and drop it, so key
  // order does not matter here and the cheaper type is used.
  nlohmann::json object;
  // object.metadata.resourceVersion; empty when absent (ERROR events).
  std::string resource_version;
  // Only for ERROR events.
  std::optional<WatchStatus> status;
};

enum class WatchErrorKind {
  MalformedJson,  // a line is not valid JSON, or is nested too deep
  InvalidEvent,   // valid JSON but not {"type": string, "object": object}
  UnknownType,    // a type other than the five above
  TooLarge,       // an event longer than max_event_bytes
  Truncated,      // the stream ended inside an event
};

struct WatchError {
  WatchErrorKind kind;
  std::string message;
  // Which event (0-based, counting lines with content) and where in the
  // stream it started, for the log line that precedes the reconnect.
  std::uint64_t event_index = 0;
  std::uint64_t stream_offset = 0;
  std::string format() const;
};

struct WatchDecoderOptions {
  // One event's line, newline excluded. Beyond it the stream is an error
  // instead of unbounded buffering. Kubernetes objects are at most ~1.5 MiB in
  // etcd (its default request limit), so 16 MiB leaves ample room.
  std::size_t max_event_bytes = 16u << 20;
  // Array/object nesting. Far beyond any Kubernetes object, and low enough that
  // the recursive parts of nlohmann::json (copy, compare) cannot overflow the stack.
  std::size_t max_depth = 512;
  // Of each event's object, only these members are built (fields.h); null:
  // everything. An ERROR event's Status is always read whole. Must outlive
  // the decoder.
  const FieldSet* fields = nullptr;
};

class WatchDecoder final {
 public:
  explicit WatchDecoder(WatchDecoderOptions options = {});

  // Consumes a chunk, decoding every event it completes. On error the decoder
  // stays failed (every later feed/finish returns the same error); events
  // decoded before the bad one are still returned by next().
  std::expected<void, WatchError> feed(std::string_view bytes);
  // The oldest decoded event not yet taken, if any.
  std::optional<WatchEvent> next();
  // End of the response body. Leftover bytes that do not make a complete event
  // are a truncated stream; a last event missing only its newline is accepted.
  std::expected<void, WatchError> finish();

  // Bytes of an incomplete event held (never more than max_event_bytes).
  std::size_t buffered_bytes() const { return partial_.size(); }
  std::size_t pending_events() const { return events_.size(); }
  std::uint64_t events_decoded() const { return event_index_; }

 private:
  // Decodes one complete line (blank lines are skipped) into events_.
  std::expected<void, WatchError> take_line(std::string_view line);
  std::unexpected<WatchError> fail(WatchErrorKind kind, std::string message);

  WatchDecoderOptions options_;
  std::string partial_;  // the incomplete last line, without its newline
  std::deque<WatchEvent> events_;
  std::optional<WatchError> error_;
  std::uint64_t consumed_ = 0;     // stream offset of the start of partial_
  std::uint64_t event_index_ = 0;  // lines with content decoded so far
};

// True when no JSON array or object in `text` nests deeper than `max_depth`
// (brackets inside strings do not count). One pass, no allocation: run it
// before nlohmann builds a value, whose copies and comparisons recurse.
bool json_within_depth(std::string_view text, std::size_t max_depth);

}  // namespace gracekeeper::kube
