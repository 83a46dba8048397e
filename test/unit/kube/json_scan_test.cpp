// JsonScanner (src/kube/json_scan.h): the fast path that reads watch events
// and List pages, stepping over what a FieldSet drops. What it reads must be
// what nlohmann reads; what it leaves, nlohmann reads again.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "../../../src/kube/json_reader.h"  // private: the SAX reader that applies a FieldSet
#include "gracekeeper/kube/fields.h"

namespace gracekeeper::kube {
namespace {

using Json = nlohmann::json;
using detail::Scan;

const FieldSet kFields({"metadata.name", "metadata.managedFields.manager",
                        "spec.template.spec.containers", "spec.replicas"});

const char* const kEvent = R"({"type":"MODIFIED","object":{
  "apiVersion":"apps/v1","kind":"Deployment",
  "metadata":{"name":"web","namespace":"shop","uid":"u-1","resourceVersion":"17",
    "annotations":{"note":"caf\u00e9 \ud83d\ude00 \"quoted\" \\ \/ \b\f\n\r\t","raw":"naïve ☃ 𝄞"},
    "managedFields":[{"manager":"kubectl","operation":"Update","time":"2026-12-01T00:00:00Z",
      "fieldsV1":{"f:spec":{"f:replicas":{},"f:template":{"f:spec":{".":{}}}}}},
      {"manager":"gracekeeper","operation":"Apply","fieldsV1":{"f:x":[1,-2,3.5e-7,0,-0,true,false,null]}}]},
  "spec":{"replicas":3,"template":{"spec":{"containers":[
    {"name":"app","image":"web:1","ports":[{"containerPort":8080}],"env":[],"cmd":"a \u0026\u0026 b"}]}}},
  "status":{"replicas":3,"ratio":0.75,"big":123456789012345678901234567890,"conditions":[]}}})";

// What the scanner alone makes of `text`: Parsed (and then `out` is the
// document) or Fallback.
Scan scan(std::string_view text, const FieldSet& fields, Json* out = nullptr,
          std::size_t max_depth = static_cast<std::size_t>(-1)) {
  detail::FilteringReader reader("object", fields, {}, max_depth);
  const Scan result = detail::JsonScanner<detail::FilteringReader>(text, reader).run();
  if (out != nullptr && result == Scan::Parsed) *out = reader.root();
  return result;
}

// What the reader makes of `text`, scanner and nlohmann together: the
// document, or discarded with the error in `error`.
Json read(std::string_view text, const FieldSet& fields, std::string* error = nullptr,
          std::size_t max_depth = static_cast<std::size_t>(-1)) {
  detail::FilteringReader reader("object", fields, {}, max_depth);
  if (!detail::parse(text, reader)) {
    if (error != nullptr) *error = reader.error();
    return Json(Json::value_t::discarded);
  }
  return reader.root();
}

TEST(JsonScanner, ReadsAWatchEventAsNlohmannDoesStepingOverWhatIsDropped) {
  const Json want = Json::parse(kEvent);
  Json got;
  // The status's float and 30-digit integer are dropped: stepped over, not read.
  ASSERT_EQ(scan(kEvent, kFields, &got), Scan::Parsed);
  Json filtered = want;
  filtered["object"] = kFields.filter(want["object"]);
  EXPECT_EQ(got, filtered);
  EXPECT_EQ(got["object"]["metadata"]["managedFields"],
            Json::parse(R"([{"manager":"kubectl"},{"manager":"gracekeeper"}])"));
  // Kept whole, the float is left to nlohmann, and the result is the same.
  EXPECT_EQ(scan(kEvent, FieldSet(), &got), Scan::Fallback);
  EXPECT_EQ(read(kEvent, FieldSet()), want);
  EXPECT_EQ(read(kEvent, kFields), filtered);
}

TEST(JsonScanner, DecodesStringsAsNlohmannDoes) {
  for (const char* text : {
           R"({"s":"caf\u00e9"})",
           R"({"s":"\ud83d\ude00 \u0000 \u007f \u0080 \u07ff \u0800 \uffff"})",
           R"({"s":"\"\\\/\b\f\n\r\t"})",
           "{\"s\":\"na\xc3\xafve \xe2\x98\x83 \xf0\x9d\x84\x9e \xf4\x8f\xbf\xbf\"}",
           R"({"k\u00e9y":"", "":"empty key"})",
           R"({"n":[0,-0,1,-1,999999999999999999,-999999999999999999,true,false,null]})",
           " \t\r\n{ \"a\" : [ ] , \"b\" : { } } \r\n",
       }) {
    SCOPED_TRACE(text);
    Json got;
    ASSERT_EQ(scan(text, FieldSet(), &got), Scan::Parsed);
    EXPECT_EQ(got, Json::parse(text));
    EXPECT_EQ(got.dump(), Json::parse(text).dump());  // integer and unsigned alike
  }
}

TEST(JsonScanner, LeavesWhatItDoesNotReadToNlohmann) {
  // Valid JSON it does not build itself: nlohmann does, with the same result.
  for (const char* text : {
           R"({"n":1.5})",
           R"({"n":1e3})",
           R"({"n":1234567890123456789})",
           R"({"n":-1234567890123456789})",
           R"({"n":18446744073709551616})",
           "\xef\xbb\xbf{\"bom\":1}",
       }) {
    SCOPED_TRACE(text);
    EXPECT_EQ(scan(text, FieldSet()), Scan::Fallback);
    EXPECT_EQ(read(text, FieldSet()), Json::parse(text));
  }
}

// In a dropped value as in a kept one, what nlohmann refuses is refused, with
// nlohmann's own message.
TEST(JsonScanner, RefusesInADroppedValueWhatNlohmannRefuses) {
  for (const std::string& bad : {std::string("\"a\x01\""),
                                 std::string("\"\\x\""),
                                 std::string("\"\\u12G4\""),
                                 std::string("\"\\udc00\""),
                                 std::string("\"\\ud800\""),
                                 std::string("\"\\ud800\\u0041\""),
                                 std::string("\"\xc0\x80\""),
                                 std::string("\"\xed\xa0\x80\""),
                                 std::string("\"\xf5\x80\x80\x80\""),
                                 std::string("\"\xe2\x98\""),
                                 std::string("\"\x80\""),
                                 std::string("01"),
                                 std::string("1."),
                                 std::string("-"),
                                 std::string("1e"),
                                 std::string("1e999"),
                                 std::string("-1e+999"),
                                 std::string(400, '9'),
                                 std::string("tru"),
                                 std::string("nul"),
                                 std::string("[1,]"),
                                 std::string("{\"a\"}"),
                                 std::string("{\"a\":1,}"),
                                 std::string("[1 2]"),
                                 std::string("{1:2}"),
                                 std::string("\"unterminated"),
                                 std::string("[")}) {
    const std::string text = R"({"object":{"status":)" + bad + R"(,"metadata":{"name":"x"}}})";
    SCOPED_TRACE(text);
    const bool nlohmann_accepts = Json::accept(text);
    std::string error;
    const Json got = read(text, kFields, &error);
    EXPECT_EQ(!got.is_discarded(), nlohmann_accepts);
    if (!nlohmann_accepts) {
      EXPECT_EQ(scan(text, kFields), Scan::Fallback);
      std::string unfiltered_error;
      read(text, FieldSet(), &unfiltered_error);
      EXPECT_EQ(error, unfiltered_error);  // nlohmann's message, whatever the fields
      EXPECT_FALSE(error.empty());         // "parse error ...", "number overflow ..."
    }
  }
  // What it accepts in a dropped value, nlohmann accepts too.
  for (const char* good : {"1.5e-7", "-0.0", "1E+99", "\"\\ud83d\\ude00\"", "[[],{}]"}) {
    const std::string text = R"({"object":{"status":)" + std::string(good) + "}}";
    EXPECT_EQ(scan(text, kFields), Scan::Parsed) << text;
    EXPECT_TRUE(Json::accept(text)) << text;
  }
}

TEST(JsonScanner, CountsTheDepthOfWhatItDropsAsTheReaderDoes) {
  // 2 containers to the dropped value, 5 in it: 7 deep.
  const std::string text = R"({"object":{"status":[[[[[]]]]]}})";
  for (const std::size_t limit : {6, 7}) {
    SCOPED_TRACE(limit);
    std::string filtered_error;
    std::string whole_error;
    const Json filtered = read(text, kFields, &filtered_error, limit);
    const Json whole = read(text, FieldSet(), &whole_error, limit);
    EXPECT_EQ(filtered.is_discarded(), limit < 7);
    EXPECT_EQ(whole.is_discarded(), limit < 7);
    EXPECT_EQ(filtered_error, whole_error);
    EXPECT_EQ(scan(text, kFields, nullptr, limit), limit < 7 ? Scan::Fallback : Scan::Parsed);
  }
  std::string error;
  read(text, kFields, &error, 6);
  EXPECT_EQ(error, "nested deeper than 6");
}

TEST(JsonScanner, AListPageReadAgainHandsNoItemOutTwice) {
  // The third item's kept replicas is a float: the scanner has handed out two
  // items when it leaves the page to nlohmann.
  const std::string page = R"({"items":[{"metadata":{"name":"a"},"spec":{"replicas":1}},)"
                           R"({"metadata":{"name":"b"},"spec":{"replicas":2}},)"
                           R"({"metadata":{"name":"c"},"spec":{"replicas":2.5}},)"
                           R"({"metadata":{"name":"d"},"spec":{"replicas":4}}]})";
  std::vector<Json> items;
  detail::FilteringReader reader("items", kFields, [&](Json&& item) { items.push_back(item); });
  ASSERT_TRUE(detail::parse(page, reader)) << reader.error();
  ASSERT_EQ(items.size(), 4u);
  const Json want = Json::parse(page)["items"];
  for (std::size_t i = 0; i < items.size(); ++i) EXPECT_EQ(items[i], kFields.filter(want[i])) << i;
}

// Random edits of a watch event: the reader accepts exactly what nlohmann
// accepts, and reads it as nlohmann does, with the fields and without.
TEST(JsonScanner, AgreesWithNlohmannOnMangledEvents) {
  std::mt19937 random(20261202);
  const std::string base = kEvent;
  const std::string alphabet = "{}[]:,\"\\ 0123456789.-+eEtrufalsn\x01\x7f\x80\xc3\xa9\xed\xff/u";
  int parsed = 0;
  int refused = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string text = base;
    for (unsigned edits = 1 + random() % 3; edits > 0; --edits) {
      const std::size_t at = random() % text.size();
      const char c = alphabet[random() % alphabet.size()];
      switch (random() % 3) {
        case 0:
          text[at] = c;
          break;
        case 1:
          text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        default:
          text.erase(at, 1 + random() % 4);
          break;
      }
    }
    SCOPED_TRACE(text);
    const Json want = Json::parse(text, nullptr, false);
    const Json whole = read(text, FieldSet());
    ASSERT_EQ(whole.is_discarded(), want.is_discarded());
    if (want.is_discarded()) {
      ++refused;
      ASSERT_TRUE(read(text, kFields).is_discarded());
      continue;
    }
    ++parsed;
    ASSERT_EQ(whole, want);
    if (want.is_object() && want.contains("object")) {
      Json filtered = want;
      filtered["object"] = kFields.filter(want["object"]);
      ASSERT_EQ(read(text, kFields), filtered);
    }
  }
  EXPECT_GT(parsed, 500);
  EXPECT_GT(refused, 500);
}

}  // namespace
}  // namespace gracekeeper::kube
