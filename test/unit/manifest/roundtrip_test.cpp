// The writer's contract: for any document D read from YAML,
// read_text(to_yaml(D)) yields a value equal to D (types included).
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cstdint>
#include <random>
#include <string>

#include "gracekeeper/manifest/writer.h"
#include "manifest/test_util.h"

namespace gracekeeper::manifest {
namespace {

using testing::same;

::testing::AssertionResult round_trips(const Json& doc) {
  const std::string yaml = to_yaml(doc);
  auto back = read_text(yaml, "written.yaml");
  if (!back) {
    return ::testing::AssertionFailure() << back.error().format() << "\n--- written:\n"
                                         << yaml << "--- from:\n"
                                         << doc.dump();
  }
  if (back->size() != 1 || !same(back->front().value, doc)) {
    return ::testing::AssertionFailure()
           << "read back differently\n--- written:\n"
           << yaml << "--- from:\n"
           << doc.dump() << "\n--- read:\n"
           << (back->empty() ? "nothing" : back->front().value.dump());
  }
  // Writing is a fixed point: the second write is the same text.
  if (to_yaml(back->front().value) != yaml) {
    return ::testing::AssertionFailure() << "second write differs for\n" << yaml;
  }
  return ::testing::AssertionSuccess();
}

const char* const kCorpus[] = {
    R"(apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
  namespace: prod
  labels: {app: shop, tier: "1"}
  annotations:
    gracekeeper.dev/enabled: "true"
    gracekeeper.dev/drain-seconds: "30"
    description: 'It''s the shop: orders # and payments'
spec:
  replicas: 3
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 25%, maxUnavailable: 0}
  template:
    metadata:
      labels:
        app: shop
    spec:
      terminationGracePeriodSeconds: 60
      containers:
      - name: app
        image: registry.example.com/shop:1.25.3@sha256:abc
        command: ["sh", "-c", "exec java -jar app.jar"]
        env:
        - name: ENABLED
          value: "yes"
        - name: RATIO
          value: "1.5"
        - {name: EMPTY, value: ""}
        ports:
        - containerPort: 8080
          protocol: TCP
        resources:
          limits: {cpu: 500m, memory: 1Gi}
        lifecycle:
          preStop:
            exec:
              command: [sleep, "10"]
        readinessProbe:
          httpGet: {path: /ready, port: 8080}
          periodSeconds: 5
      volumes:
      - name: config
        configMap: {name: shop, defaultMode: 0644}
)",
    R"(apiVersion: v1
kind: ConfigMap
metadata: {name: scripts}
data:
  start.sh: |
    #!/bin/sh
    set -eu
    echo "starting: $1" # comment-like
    exec "$@"
  folded: >
    one
    two

    three
  keep: |+
    trailing

  strip: |-
    no newline
  indented: |2
      four spaces
    two spaces
  quoted: "tab\there \u00e9 \"q\" back\\slash \x41"
  unicode: "snow ☃ and 🚀"
  empty: ""
  spaces: "  both  "
  colon: "a: b"
  hash: "a #b"
  dash: "- not a list"
  numbers-as-strings: ["1", "0x10", "1e3", ".5", "-.inf", "~", "null", "yes", "Off"]
)",
    R"(apiVersion: v1
kind: List
items:
- {a: 1, b: -2, c: 3.25, d: -0.0, e: .inf, f: -.inf, g: .nan, h: 1e-7, i: 6.02e+23}
- [1, [2, [3, [4, []]]], {}]
- ~
- true
- 9223372036854775807
- -9223372036854775808
- 0x7FFFFFFFFFFFFFFF
- 1_000_000
)",
    R"({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
  "data": {"key": "c2VjcmV0"}, "stringData": {"x": "line1\nline2", "y": "\t\r\b\f"}})",
    R"(base: &base
  cpu: 100m
  memory: 128Mi
apiVersion: v1
kind: LimitRange
spec:
  limits:
  - default:
      <<: *base
      memory: 256Mi
    defaultRequest: *base
    type: Container
)",
    R"(apiVersion: v1
kind: Weird
"quoted key": 1
"yes": "no"
"": empty key
"multi\nline key": x
? complex but scalar
: value
"<<": not a merge
'#': hash
nested:
  - - - deep
      - list
    - {}
  - []
)",
};

TEST(RoundTrip, Corpus) {
  for (const char* text : kCorpus) {
    auto docs = read_text(text, "corpus.yaml");
    ASSERT_TRUE(docs) << docs.error().format() << "\n" << text;
    for (const Document& doc : *docs) EXPECT_TRUE(round_trips(doc.value));
  }
}

// Pieces that stress quoting: words the reader resolves, indicators, blanks,
// escapes, YAML 1.1 line breaks, multi-byte characters.
const std::array<std::string_view, 64> kPieces{
    "a",
    "Z",
    "word",
    " ",
    "  ",
    "\t",
    "\n",
    "\n\n",
    "\r",
    ":",
    ": ",
    "#",
    " #",
    "-",
    "- ",
    "?",
    ",",
    "[",
    "]",
    "{",
    "}",
    "&",
    "*",
    "!",
    "|",
    ">",
    "'",
    "\"",
    "%",
    "@",
    "`",
    "\\",
    "true",
    "yes",
    "No",
    "null",
    "~",
    "<<",
    "0",
    "9",
    "0x1F",
    "0o7",
    "1e5",
    ".5",
    ".inf",
    "_",
    "+",
    ".",
    "---",
    "...",
    "2001-",
    "1:2",
    "\xC3\xA9",
    "\xE2\x98\x83",
    "\xF0\x9F\x9A\x80",
    "\xC2\x85",
    "\xE2\x80\xA8",
    "\xEF\xBB\xBF",
    "\x01",
    "\x7F",
    "\x1B",
    "=",
    "  x",
    "x  ",
};

class Generator {
 public:
  explicit Generator(std::uint32_t seed) : random_(seed) {}

  Json document() {
    Json doc = Json::object();
    int keys = 1 + below(6);
    for (int i = 0; i < keys; ++i) add_member(doc, 0);
    return doc;
  }

 private:
  int below(int n) { return static_cast<int>(random_() % static_cast<std::uint32_t>(n)); }

  std::string text() {
    std::string s;
    int pieces = below(6);
    for (int i = 0; i < pieces; ++i) s += kPieces[static_cast<std::size_t>(below(kPieces.size()))];
    return s;
  }

  double real() {
    switch (below(4)) {
      case 0:
        return static_cast<double>(static_cast<std::int32_t>(random_())) / 64.0;
      case 1:
        return static_cast<double>(below(1000));  // integral floats must stay floats
      default: {
        std::uint64_t bits = (static_cast<std::uint64_t>(random_()) << 32) | random_();
        return std::bit_cast<double>(bits);  // any double, NaN, infinities and subnormals too
      }
    }
  }

  std::int64_t integer() {
    switch (below(3)) {
      case 0:
        return below(100);
      case 1:
        return -below(100000);
      default:
        return static_cast<std::int64_t>((static_cast<std::uint64_t>(random_()) << 32) | random_());
    }
  }

  Json value(int depth) {
    int kind = below(depth >= 4 ? 6 : 8);
    switch (kind) {
      case 0:
      case 1:
        return text();
      case 2:
        return integer();
      case 3:
        return real();
      case 4:
        return below(2) == 0;
      case 5:
        return nullptr;
      case 6: {
        Json array = Json::array();
        int n = below(4);
        for (int i = 0; i < n; ++i) array.push_back(value(depth + 1));
        return array;
      }
      default: {
        Json object = Json::object();
        int n = below(4);
        for (int i = 0; i < n; ++i) add_member(object, depth + 1);
        return object;
      }
    }
  }

  void add_member(Json& object, int depth) {
    std::string key = text();
    if (object.contains(key)) return;
    object[key] = value(depth);
  }

  std::mt19937 random_;
};

TEST(RoundTrip, RandomDocuments) {
  Generator generator(20240601);
  for (int i = 0; i < 3000; ++i) {
    Json doc = generator.document();
    ASSERT_TRUE(round_trips(doc)) << "document #" << i;
  }
}

TEST(RoundTrip, RandomStringsOneByOne) {
  std::mt19937 random(7);
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    int pieces = 1 + static_cast<int>(random() % 5);
    for (int k = 0; k < pieces; ++k) s += kPieces[random() % kPieces.size()];
    ASSERT_TRUE(round_trips(Json{{"v", s}, {s, "as key"}})) << "string #" << i;
  }
}

}  // namespace
}  // namespace gracekeeper::manifest
