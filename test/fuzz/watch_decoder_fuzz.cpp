// libFuzzer target for the watch stream decoder (gracekeeper/kube/watch_decoder.h):
// arbitrary bytes, as an API server (or anything in between) might send them,
// fed in arbitrary chunks.
//
// Besides the sanitizers' findings (crash, leak, overflow, UB), it aborts when
// one of these properties breaks:
//  - errors are values: feed/finish never throw, and every error formats;
//  - chunking does not matter: the input fed whole and fed in chunks (split
//    points taken from the input's first bytes) gives the same events and the
//    same first error (kind, event index, stream offset);
//  - memory stays bounded: buffered_bytes() never exceeds max_event_bytes;
//  - a failed decoder stays failed and decodes nothing more;
//  - every event is well formed: an object, a status exactly for ERROR events;
//  - a field filter only drops members: decoded with a FieldSet, every event
//    is the unfiltered one passed through FieldSet::filter (an ERROR event's
//    Status whole; an object `wanted` refuses reduced to its metadata), and
//    the errors are the same;
//  - every event is its line's "object" as nlohmann parses it, and a line
//    refused as malformed JSON is one nlohmann refuses (or one too deep).
//
// Build and run (clang with libFuzzer; std::expected needs clang >= 16 here,
// see hack/fuzz): target wiring is in test/fuzz/CMakeLists.txt.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/kube/watch_decoder.h"

namespace {

namespace kube = gracekeeper::kube;

// Small limits so the fuzzer reaches "too large" and "too deep" quickly.
const kube::WatchDecoderOptions kOptions{.max_event_bytes = 4096, .max_depth = 64};
// With a `wanted` that refuses about half the objects (those whose filtered
// metadata has an odd number of members), so reduced objects are checked too.
const kube::FieldSet kFields({"metadata.name", "metadata.resourceVersion",
                              "metadata.managedFields.manager", "spec.template.spec.containers"},
                             [](const nlohmann::json& metadata) {
                               return metadata.size() % 2 == 0;
                             });
const kube::WatchDecoderOptions kFiltered{
    .max_event_bytes = 4096, .max_depth = 64, .fields = &kFields};

[[noreturn]] void violation(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "\n==== watch_decoder_fuzz: PROPERTY VIOLATED: %s\n%s\n====\n", what,
               detail.c_str());
  std::abort();
}

struct Outcome {
  std::vector<kube::WatchEvent> events;
  std::optional<kube::WatchError> error;
};

void check_event(const kube::WatchEvent& event) {
  if (!event.object.is_object()) violation("event object is not an object");
  if (event.status.has_value() != (event.type == kube::WatchEventType::Error)) {
    violation("status present exactly for ERROR events", event.object.dump());
  }
}

// Feeds `stream` in chunks whose sizes come from `sizes` (cycled; 0 allowed),
// then finishes, collecting events as they come.
Outcome run(std::string_view stream, std::string_view sizes,
            const kube::WatchDecoderOptions& options = kOptions) {
  Outcome out;
  kube::WatchDecoder decoder(options);
  auto collect = [&] {
    while (auto event = decoder.next()) {
      check_event(*event);
      out.events.push_back(std::move(*event));
    }
  };
  auto note_error = [&](const kube::WatchError& error) {
    if (error.format().empty()) violation("error formats to nothing");
    out.error = error;
  };
  std::size_t at = 0;
  std::size_t turn = 0;
  while (at < stream.size()) {
    std::size_t size = stream.size() - at;
    if (!sizes.empty()) {
      size = std::min<std::size_t>(size, static_cast<unsigned char>(sizes[turn++ % sizes.size()]));
    }
    auto fed = decoder.feed(stream.substr(at, size));
    at += size;
    if (decoder.buffered_bytes() > kOptions.max_event_bytes) violation("buffer exceeds the limit");
    collect();
    if (!fed) {
      note_error(fed.error());
      // Failed for good: the same error again, nothing more decoded.
      auto again = decoder.feed("{\"type\":\"ADDED\",\"object\":{}}\n");
      if (again || again.error().kind != fed.error().kind) violation("decoder did not stay failed");
      if (decoder.next()) violation("failed decoder produced an event");
      return out;
    }
  }
  auto finished = decoder.finish();
  collect();
  if (!finished) note_error(finished.error());
  return out;
}

bool same_events(const std::vector<kube::WatchEvent>& a, const std::vector<kube::WatchEvent>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].type != b[i].type || a[i].resource_version != b[i].resource_version ||
        a[i].object != b[i].object) {
      return false;
    }
    const auto& sa = a[i].status;
    const auto& sb = b[i].status;
    if (sa.has_value() != sb.has_value()) return false;
    if (sa && (sa->code != sb->code || sa->reason != sb->reason || sa->message != sb->message ||
               sa->status != sb->status)) {
      return false;
    }
  }
  return true;
}

bool same_error(const std::optional<kube::WatchError>& a,
                const std::optional<kube::WatchError>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->kind == b->kind && a->event_index == b->event_index &&
                a->stream_offset == b->stream_offset);
}

// The decoder reads each line as nlohmann reads it (its scanner steps over
// dropped values itself, and leaves the rest to nlohmann): every event is the
// line's "object" as nlohmann parses it, and a line refused as malformed JSON
// is one nlohmann refuses too, or one nested deeper than the limit.
void check_against_nlohmann(std::string_view stream, const Outcome& whole) {
  std::size_t index = 0;
  while (!stream.empty() && index <= whole.events.size()) {
    const std::size_t newline = stream.find('\n');
    std::string_view line = stream.substr(0, newline);
    stream.remove_prefix(newline == std::string_view::npos ? stream.size() : newline + 1);
    const std::size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) continue;
    line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    const nlohmann::json doc = nlohmann::json::parse(line, nullptr, false);
    if (index < whole.events.size()) {
      if (doc.is_discarded() || !doc.is_object() || !doc.contains("object") ||
          doc["object"] != whole.events[index].object) {
        violation("an event differs from nlohmann's reading of its line", std::string(line));
      }
    } else if (whole.error && whole.error->kind == kube::WatchErrorKind::MalformedJson &&
               whole.error->event_index == index && !doc.is_discarded() &&
               kube::json_within_depth(line, kOptions.max_depth)) {
      violation("a line nlohmann reads was refused as malformed", std::string(line));
    }
    ++index;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Input layout: [n][n bytes of chunk sizes][stream]. Sizes cycle; a 0 feeds
  // an empty chunk. With no nonzero size the stream is cut into 1-byte chunks,
  // the finest split (and the loop always advances).
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (input.empty()) return 0;
  const std::size_t n =
      std::min<std::size_t>(static_cast<unsigned char>(input[0]), input.size() - 1);
  std::string_view sizes = input.substr(1, n);
  const std::string_view stream = input.substr(1 + n);
  const std::string one_byte(1, '\1');
  if (sizes.find_first_not_of('\0') == std::string_view::npos) sizes = one_byte;

  try {
    const Outcome whole = run(stream, {});
    check_against_nlohmann(stream, whole);
    Outcome chunked = run(stream, sizes);
    if (!same_events(whole.events, chunked.events)) {
      violation("chunking changed the events", std::to_string(whole.events.size()) + " vs " +
                                                   std::to_string(chunked.events.size()));
    }
    if (!same_error(whole.error, chunked.error)) {
      violation("chunking changed the error",
                (whole.error ? whole.error->format() : std::string("none")) + "\n vs \n" +
                    (chunked.error ? chunked.error->format() : std::string("none")));
    }
    Outcome filtered = run(stream, sizes, kFiltered);
    for (auto& event : chunked.events) {
      if (event.type != kube::WatchEventType::Error) event.object = kFields.filter(event.object);
    }
    if (!same_events(chunked.events, filtered.events)) {
      violation("the field filter changed more than the members it drops");
    }
    if (!same_error(chunked.error, filtered.error)) violation("the field filter changed the error");
  } catch (const std::exception& e) {
    violation("exception escaped the decoder", e.what());
  }
  return 0;
}
