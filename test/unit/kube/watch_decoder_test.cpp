#include "gracekeeper/kube/watch_decoder.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/kube/fields.h"

namespace gracekeeper::kube {
namespace {

using Json = nlohmann::json;

std::string event_line(std::string_view type, const Json& object) {
  return Json{{"type", type}, {"object", object}}.dump() + "\n";
}

Json pod(std::string_view name, std::string_view resource_version) {
  return Json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", name}, {"namespace", "default"}, {"resourceVersion", resource_version}}}};
}

std::vector<WatchEvent> drain(WatchDecoder& decoder) {
  std::vector<WatchEvent> events;
  while (auto event = decoder.next()) events.push_back(std::move(*event));
  return events;
}

TEST(WatchDecoder, DecodesOneEvent) {
  WatchDecoder decoder;
  ASSERT_TRUE(decoder.feed(event_line("ADDED", pod("a", "12"))));
  auto event = decoder.next();
  ASSERT_TRUE(event);
  EXPECT_EQ(event->type, WatchEventType::Added);
  EXPECT_EQ(event->resource_version, "12");
  EXPECT_EQ(event->object["metadata"]["name"], "a");
  EXPECT_FALSE(event->status);
  EXPECT_FALSE(decoder.next());
  EXPECT_TRUE(decoder.finish());
}

TEST(WatchDecoder, SeveralEventsInOneChunkKeepTheirOrder) {
  WatchDecoder decoder;
  const std::string chunk = event_line("ADDED", pod("a", "1")) +
                            event_line("MODIFIED", pod("a", "2")) +
                            event_line("DELETED", pod("a", "3"));
  ASSERT_TRUE(decoder.feed(chunk));
  const auto events = drain(decoder);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, WatchEventType::Added);
  EXPECT_EQ(events[1].type, WatchEventType::Modified);
  EXPECT_EQ(events[2].type, WatchEventType::Deleted);
  EXPECT_EQ(events[2].resource_version, "3");
  EXPECT_EQ(decoder.events_decoded(), 3u);
}

TEST(WatchDecoder, EventSplitAcrossChunks) {
  const std::string stream =
      event_line("ADDED", pod("a", "1")) + event_line("DELETED", pod("b", "2"));
  WatchDecoder decoder;
  std::vector<WatchEvent> events;
  for (const char c : stream) {  // the worst split: one byte at a time
    ASSERT_TRUE(decoder.feed(std::string_view(&c, 1)));
    for (auto& e : drain(decoder)) events.push_back(std::move(e));
  }
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].object, pod("a", "1"));
  EXPECT_EQ(events[1].object, pod("b", "2"));
  EXPECT_EQ(decoder.buffered_bytes(), 0u);
  EXPECT_TRUE(decoder.finish());
}

TEST(WatchDecoder, TwoMegabyteObject) {
  Json object = pod("big", "7");
  object["data"]["blob"] = std::string(2u << 20, 'x');
  const std::string line = event_line("MODIFIED", object);
  WatchDecoder decoder;
  for (std::size_t at = 0; at < line.size(); at += 16384) {
    ASSERT_TRUE(decoder.feed(std::string_view(line).substr(at, 16384)));
  }
  auto event = decoder.next();
  ASSERT_TRUE(event);
  EXPECT_EQ(event->object["data"]["blob"].get_ref<const std::string&>().size(), 2u << 20);
  EXPECT_EQ(event->resource_version, "7");
}

TEST(WatchDecoder, EventLargerThanLimitIsAnErrorWithoutBufferingIt) {
  WatchDecoder decoder(WatchDecoderOptions{.max_event_bytes = 1000});
  ASSERT_TRUE(decoder.feed(event_line("ADDED", pod("a", "1"))));
  const std::string huge(400, ' ');
  ASSERT_TRUE(decoder.feed("{\"type\":\"ADDED\",\"object\":{\"pad\":\""));
  ASSERT_TRUE(decoder.feed(huge));
  ASSERT_TRUE(decoder.feed(huge));
  EXPECT_LE(decoder.buffered_bytes(), 1000u);
  auto result = decoder.feed(huge);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().kind, WatchErrorKind::TooLarge);
  EXPECT_EQ(result.error().event_index, 1u);
  EXPECT_EQ(decoder.buffered_bytes(), 0u);
  // The event before the oversized one is still delivered.
  EXPECT_TRUE(decoder.next());
  // Failed for good: no more decoding on this stream.
  EXPECT_EQ(decoder.feed(event_line("ADDED", pod("b", "2"))).error().kind,
            WatchErrorKind::TooLarge);
  EXPECT_FALSE(decoder.next());
  EXPECT_EQ(decoder.finish().error().kind, WatchErrorKind::TooLarge);
}

TEST(WatchDecoder, LimitAppliesToCompleteLinesAndIsInclusive) {
  std::string line = event_line("ADDED", pod("a", "1"));
  const std::size_t length = line.size() - 1;  // without the newline
  {
    WatchDecoder decoder(WatchDecoderOptions{.max_event_bytes = length});
    EXPECT_TRUE(decoder.feed(line));
    EXPECT_TRUE(decoder.next());
  }
  {
    WatchDecoder decoder(WatchDecoderOptions{.max_event_bytes = length - 1});
    auto result = decoder.feed(line);
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().kind, WatchErrorKind::TooLarge);
  }
}

TEST(WatchDecoder, DefaultLimitIs16MiB) {
  EXPECT_EQ(WatchDecoderOptions{}.max_event_bytes, 16u << 20);
  WatchDecoder decoder;
  const std::string megabyte(1u << 20, ' ');
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(decoder.feed(megabyte)) << i;
  auto result = decoder.feed("x");
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().kind, WatchErrorKind::TooLarge);
}

TEST(WatchDecoder, MalformedJsonIsAnErrorAfterTheGoodEvents) {
  WatchDecoder decoder;
  auto result =
      decoder.feed(event_line("ADDED", pod("a", "1")) + "{\"type\":\"ADDED\",\"object\":{\n");
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().kind, WatchErrorKind::MalformedJson);
  EXPECT_EQ(result.error().event_index, 1u);
  EXPECT_EQ(result.error().stream_offset, event_line("ADDED", pod("a", "1")).size());
  const std::string text = result.error().format();
  EXPECT_NE(text.find("malformed JSON"), std::string::npos) << text;
  EXPECT_NE(text.find("event 1"), std::string::npos) << text;
  ASSERT_TRUE(decoder.next());
  EXPECT_FALSE(decoder.next());
}

TEST(WatchDecoder, ErrorOffsetDoesNotDependOnChunking) {
  const std::string good = event_line("ADDED", pod("a", "1"));
  const std::string stream = good + "\n" + good + "{\"type\":\"GONE\",\"object\":{}}\n";
  const std::uint64_t bad_at = 2 * good.size() + 1;
  for (std::size_t chunk : {stream.size(), std::size_t{1}, std::size_t{7}}) {
    WatchDecoder decoder;
    std::expected<void, WatchError> result;
    for (std::size_t at = 0; at < stream.size() && result; at += chunk) {
      result = decoder.feed(std::string_view(stream).substr(at, chunk));
    }
    ASSERT_FALSE(result) << chunk;
    EXPECT_EQ(result.error().kind, WatchErrorKind::UnknownType);
    EXPECT_EQ(result.error().event_index, 2u) << chunk;  // the blank line is no event
    EXPECT_EQ(result.error().stream_offset, bad_at) << chunk;
  }
}

TEST(WatchDecoder, RejectsMalformedInputs) {
  struct Case {
    std::string line;
    WatchErrorKind kind;
  };
  const std::vector<Case> cases{
      {"not json", WatchErrorKind::MalformedJson},
      {"{\"type\":\"ADDED\",\"object\":{}} trailing", WatchErrorKind::MalformedJson},
      {"{\"type\":\"ADDED\",\"object\":{\"s\":\"\xff\"}}", WatchErrorKind::MalformedJson},
      {std::string(100000, '['), WatchErrorKind::MalformedJson},
      {"[1,2]", WatchErrorKind::InvalidEvent},
      {"\"ADDED\"", WatchErrorKind::InvalidEvent},
      {"{\"object\":{}}", WatchErrorKind::InvalidEvent},
      {"{\"type\":7,\"object\":{}}", WatchErrorKind::InvalidEvent},
      {"{\"type\":\"ADDED\"}", WatchErrorKind::InvalidEvent},
      {"{\"type\":\"ADDED\",\"object\":[]}", WatchErrorKind::InvalidEvent},
      {"{\"type\":\"ADDED\",\"object\":null}", WatchErrorKind::InvalidEvent},
      {"{\"type\":\"added\",\"object\":{}}", WatchErrorKind::UnknownType},
      {"{\"type\":\"SYNC\",\"object\":{}}", WatchErrorKind::UnknownType},
  };
  for (const Case& c : cases) {
    WatchDecoder decoder;
    auto result = decoder.feed(c.line + "\n");
    ASSERT_FALSE(result) << c.line.substr(0, 80);
    EXPECT_EQ(result.error().kind, c.kind) << c.line.substr(0, 80);
    EXPECT_FALSE(result.error().format().empty());
    EXPECT_FALSE(decoder.next());
  }
}

// max_depth holds whether the whole event is built or only some fields of
// it (the reader counts the containers it drops too), checked as the line
// is read: the event, its object and `extra` more levels, inside a member
// the fields drop. A line that is malformed before it gets too deep gives
// the syntax error, with the fields and without (a pass over the line
// first said "nested deeper" without them only: the fuzzer's finding).
TEST(WatchDecoder, DepthLimitWithAndWithoutFields) {
  auto line = [](std::size_t extra, std::string_view before = "") {
    return "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"},\"spec\":" +
           std::string(before) + std::string(extra, '[') + std::string(extra, ']') + "}}\n";
  };
  const FieldSet metadata_only({"metadata.name"});
  std::vector<std::string> malformed_errors;
  for (const FieldSet* fields : {static_cast<const FieldSet*>(nullptr), &metadata_only}) {
    WatchDecoderOptions options;
    options.max_depth = 8;
    options.fields = fields;
    WatchDecoder within(options);
    ASSERT_TRUE(within.feed(line(6))) << (fields ? "filtered" : "whole");
    auto event = within.next();
    ASSERT_TRUE(event);
    EXPECT_EQ(event->object["metadata"]["name"], "a");
    EXPECT_EQ(event->object.contains("spec"), fields == nullptr);

    WatchDecoder beyond(options);
    auto result = beyond.feed(line(7));
    ASSERT_FALSE(result) << (fields ? "filtered" : "whole");
    EXPECT_EQ(result.error().kind, WatchErrorKind::MalformedJson);
    EXPECT_NE(result.error().format().find("nested deeper than 8"), std::string::npos)
        << result.error().format();

    WatchDecoder broken(options);
    result = broken.feed(line(20, "[1,,"));
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().format().find("nested deeper"), std::string::npos)
        << result.error().format();
    malformed_errors.push_back(result.error().format());
  }
  EXPECT_EQ(malformed_errors[0], malformed_errors[1]);
}

TEST(WatchDecoder, ErrorEventCarriesTheStatus) {
  const Json status = Json::parse(R"json({"kind":"Status","apiVersion":"v1","metadata":{},
      "status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired",
      "code":410})json");
  WatchDecoder decoder;
  ASSERT_TRUE(decoder.feed(event_line("ERROR", status)));
  auto event = decoder.next();
  ASSERT_TRUE(event);
  EXPECT_EQ(event->type, WatchEventType::Error);
  EXPECT_EQ(event->resource_version, "");
  ASSERT_TRUE(event->status);
  EXPECT_EQ(event->status->code, 410);
  EXPECT_EQ(event->status->status, "Failure");
  EXPECT_EQ(event->status->reason, "Expired");
  EXPECT_EQ(event->status->message, "too old resource version: 1 (2)");
  EXPECT_TRUE(event->status->resource_version_too_old());
}

TEST(WatchDecoder, ErrorStatusVariants) {
  WatchStatus gone{.code = 0, .status = "Failure", .reason = "Gone", .message = ""};
  EXPECT_TRUE(gone.resource_version_too_old());
  WatchStatus internal{.code = 500, .status = "Failure", .reason = "InternalError", .message = ""};
  EXPECT_FALSE(internal.resource_version_too_old());

  WatchDecoder decoder;
  // Odd fields are tolerated: a code that is not an integer, or absurdly big.
  ASSERT_TRUE(decoder.feed(event_line("ERROR", Json{{"code", "410"}, {"message", 3}})));
  ASSERT_TRUE(decoder.feed(event_line("ERROR", Json{{"code", 4294967706LL}})));
  auto first = decoder.next();
  ASSERT_TRUE(first && first->status);
  EXPECT_EQ(first->status->code, 0);
  EXPECT_EQ(first->status->message, "");
  auto second = decoder.next();
  ASSERT_TRUE(second && second->status);
  EXPECT_NE(second->status->code, 410);  // clamped, not wrapped to 410
}

TEST(WatchDecoder, BookmarkCarriesResourceVersion) {
  WatchDecoder decoder;
  const Json bookmark = {
      {"kind", "Deployment"},
      {"apiVersion", "apps/v1"},
      {"metadata",
       {{"resourceVersion", "98765"}, {"annotations", {{"k8s.io/initial-events-end", "true"}}}}}};
  ASSERT_TRUE(decoder.feed(event_line("BOOKMARK", bookmark)));
  auto event = decoder.next();
  ASSERT_TRUE(event);
  EXPECT_EQ(event->type, WatchEventType::Bookmark);
  EXPECT_EQ(event->resource_version, "98765");
  EXPECT_EQ(to_string(event->type), "BOOKMARK");
}

TEST(WatchDecoder, NonStringResourceVersionIsEmpty) {
  WatchDecoder decoder;
  ASSERT_TRUE(decoder.feed(event_line("ADDED", Json{{"metadata", {{"resourceVersion", 5}}}})));
  ASSERT_TRUE(decoder.feed(event_line("ADDED", Json{{"metadata", "x"}})));
  EXPECT_EQ(decoder.next()->resource_version, "");
  EXPECT_EQ(decoder.next()->resource_version, "");
}

TEST(WatchDecoder, ToleratesBlankLinesAndCrlf) {
  WatchDecoder decoder;
  std::string line = event_line("ADDED", pod("a", "1"));
  line.insert(line.size() - 1, "\r");
  ASSERT_TRUE(decoder.feed("\n\r\n  \n" + line + "\n"));
  EXPECT_EQ(drain(decoder).size(), 1u);
  EXPECT_EQ(decoder.events_decoded(), 1u);
  ASSERT_TRUE(decoder.feed(" \r"));
  EXPECT_TRUE(decoder.finish());
}

TEST(WatchDecoder, FinishReportsATruncatedStream) {
  const std::string line = event_line("ADDED", pod("a", "1"));
  WatchDecoder decoder;
  ASSERT_TRUE(decoder.feed(line + line.substr(0, 20)));
  auto result = decoder.finish();
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().kind, WatchErrorKind::Truncated);
  EXPECT_NE(result.error().format().find("truncated stream"), std::string::npos);
  EXPECT_EQ(drain(decoder).size(), 1u);
  EXPECT_EQ(decoder.buffered_bytes(), 0u);
}

TEST(WatchDecoder, FinishAcceptsALastEventWithoutNewline) {
  std::string line = event_line("DELETED", pod("a", "4"));
  line.pop_back();
  WatchDecoder decoder;
  ASSERT_TRUE(decoder.feed(line));
  EXPECT_FALSE(decoder.next());  // not before the stream ends: more may follow
  ASSERT_TRUE(decoder.finish());
  auto event = decoder.next();
  ASSERT_TRUE(event);
  EXPECT_EQ(event->resource_version, "4");
}

TEST(WatchDecoder, FinishOnWellFormedButInvalidLeftoverKeepsItsKind) {
  WatchDecoder decoder;
  ASSERT_TRUE(decoder.feed("{\"type\":\"NOPE\",\"object\":{}}"));
  auto result = decoder.finish();
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().kind, WatchErrorKind::UnknownType);
}

// ---- property: any chunking of any event sequence decodes to the same events ----

class RandomJson {
 public:
  explicit RandomJson(std::mt19937& rng) : rng_(rng) {}

  Json value(int depth) {
    switch (pick(depth > 0 ? 8 : 6)) {
      case 0:
        return nullptr;
      case 1:
        return pick(2) == 1;
      case 2:
        return static_cast<std::int64_t>(rng_()) - (1LL << 31);
      case 3:
        return std::uniform_real_distribution<double>(-1e9, 1e9)(rng_);
      case 4:
      case 5:
        return text();
      case 6: {
        Json array = Json::array();
        for (int i = pick(4); i > 0; --i) array.push_back(value(depth - 1));
        return array;
      }
      default:
        return object(depth - 1);
    }
  }

  Json object(int depth) {
    Json object = Json::object();
    for (int i = pick(5); i > 0; --i) object[text()] = value(depth);
    return object;
  }

  std::string text() {
    // Characters that matter to framing and escaping: quotes, backslashes,
    // newlines (escaped by dump, so never a raw line break), multi-byte UTF-8.
    static const std::vector<std::string> pieces{
        "a",  "Z", "0", " ", "\"", "\\", "\n",   "\r",
        "\t", "{", "}", "[", "]",  "é",  "日本", "\xF0\x9F\x98\x80"};
    std::string s;
    for (int i = pick(12); i > 0; --i) s += pieces[pick(static_cast<int>(pieces.size()))];
    return s;
  }

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

 private:
  std::mt19937& rng_;
};

TEST(WatchDecoder, PropertyRandomEventsAtRandomChunkBoundaries) {
  constexpr std::string_view kTypes[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};
  std::mt19937 rng(20240531);
  RandomJson gen(rng);
  for (int round = 0; round < 300; ++round) {
    std::vector<std::pair<std::string_view, Json>> sent;
    std::string stream;
    for (int i = gen.pick(12); i > 0; --i) {
      const std::string_view type = kTypes[gen.pick(5)];
      Json object = gen.object(3);
      if (gen.pick(4) != 0) object["metadata"]["resourceVersion"] = std::to_string(rng() % 100000);
      stream += event_line(type, object);
      sent.emplace_back(type, std::move(object));
    }

    WatchDecoder decoder;
    std::vector<WatchEvent> received;
    std::size_t at = 0;
    while (at < stream.size()) {
      // Empty chunks too: a transport may deliver them.
      const std::size_t size = std::min<std::size_t>(stream.size() - at, rng() % 64);
      ASSERT_TRUE(decoder.feed(std::string_view(stream).substr(at, size))) << "round " << round;
      at += size;
      while (auto event = decoder.next()) received.push_back(std::move(*event));
    }
    ASSERT_TRUE(decoder.finish()) << "round " << round;

    ASSERT_EQ(received.size(), sent.size()) << "round " << round;
    for (std::size_t i = 0; i < sent.size(); ++i) {
      const auto& [type, object] = sent[i];
      EXPECT_EQ(to_string(received[i].type), type) << "round " << round << " event " << i;
      EXPECT_EQ(received[i].object, object) << "round " << round << " event " << i;
      const Json* rv = nullptr;
      if (object.contains("metadata") && object["metadata"].is_object() &&
          object["metadata"].contains("resourceVersion")) {
        rv = &object["metadata"]["resourceVersion"];
      }
      EXPECT_EQ(received[i].resource_version,
                rv && rv->is_string() ? rv->get<std::string>() : std::string())
          << "round " << round << " event " << i;
      EXPECT_EQ(received[i].status.has_value(), type == "ERROR");
    }
  }
}

}  // namespace
}  // namespace gracekeeper::kube
