#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "gracekeeper/manifest/document.h"
#include "manifest/test_util.h"

namespace gracekeeper::manifest {
namespace {

using ::testing::HasSubstr;
using testing::read_one;
using testing::read_value;
using testing::same;

std::string error_of(std::string text, const Limits& limits = {}) {
  auto docs = read_text(std::move(text), "in.yaml", limits);
  if (docs) return "<no error>";
  return docs.error().format();
}

TEST(ErrorFormat, FileLineColumn) {
  EXPECT_EQ((Error{Position{"a.yaml", 3, 5}, "bad"}.format()), "a.yaml:3:5: bad");
  EXPECT_EQ((Position{"a.yaml", 3, 0}.format()), "a.yaml:3");
  EXPECT_EQ((Position{"a.yaml", 0, 0}.format()), "a.yaml");
  EXPECT_EQ((Error{Position{"-"}, "no documents"}.format()), "-: no documents");
}

TEST(Reader, DocumentPositionsAndIndexes) {
  const std::string text =
      "# leading comment\n"                // 1
      "apiVersion: v1\n"                   // 2
      "kind: ConfigMap\n"                  // 3
      "---\n"                              // 4  empty document (index 1)
      "---\n"                              // 5  comments only (index 2)
      "# nothing here\n"                   // 6
      "---\n"                              // 7
      "apiVersion: v1\n"                   // 8  index 3
      "kind: Secret\n"                     // 9
      "--- {apiVersion: v1, kind: Pod}\n"  // 10 index 4, content at column 5
      "...\n";                             // 11
  auto docs = read_text(text, "multi.yaml");
  ASSERT_TRUE(docs) << docs.error().format();
  ASSERT_EQ(docs->size(), 3u);
  EXPECT_EQ((*docs)[0].position.format(), "multi.yaml:2:1");
  EXPECT_EQ((*docs)[0].index, 0);
  EXPECT_EQ((*docs)[0].value["kind"], "ConfigMap");
  EXPECT_EQ((*docs)[1].position.format(), "multi.yaml:8:1");
  EXPECT_EQ((*docs)[1].index, 3);
  EXPECT_EQ((*docs)[1].value["kind"], "Secret");
  EXPECT_EQ((*docs)[2].position.format(), "multi.yaml:10:5");
  EXPECT_EQ((*docs)[2].index, 4);
  EXPECT_EQ((*docs)[2].value["kind"], "Pod");
}

TEST(Reader, DocumentsShareOneSource) {
  auto docs = read_text("a: 1\n---\nb: 2\n", "x");
  ASSERT_TRUE(docs);
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0].source.get(), (*docs)[1].source.get());
  EXPECT_EQ(*(*docs)[0].source, "a: 1\n---\nb: 2\n");
}

TEST(Reader, KeysKeepTheirOrder) {
  auto doc = read_one("zeta: 1\nalpha: 2\nmid: {y: 1, b: 2}\n");
  ASSERT_TRUE(doc) << doc.error();
  EXPECT_EQ(doc->dump(), R"({"zeta":1,"alpha":2,"mid":{"y":1,"b":2}})");
}

TEST(Reader, EmptyInputsHaveNoDocuments) {
  for (const char* text :
       {"", "\n\n", "# only a comment\n", "---\n", "---\n---\n# c\n...\n", "--- ~\n", "null\n"}) {
    auto docs = read_text(text, "empty.yaml");
    ASSERT_TRUE(docs) << text << ": " << docs.error().format();
    EXPECT_TRUE(docs->empty()) << text;
  }
}

TEST(Reader, RootMustBeAMapping) {
  for (const char* text : {"- a\n- b\n", "hello\n", "\"quoted\"\n", "[1, 2]\n", "42\n"}) {
    EXPECT_THAT(error_of(text),
                HasSubstr("expected a Kubernetes object (a mapping with apiVersion and kind)"))
        << text;
  }
  EXPECT_THAT(error_of("a: 1\n---\n- x\n"), HasSubstr("in.yaml:3:1: expected a Kubernetes object"));
}

TEST(Reader, JsonInput) {
  auto doc = read_one(R"({"apiVersion": "v1", "kind": "List", "items": [{"a": 1.5, "b": null}]})");
  ASSERT_TRUE(doc) << doc.error();
  EXPECT_TRUE(
      same(*doc, Json::parse(R"({"apiVersion":"v1","kind":"List","items":[{"a":1.5,"b":null}]})")));
}

TEST(Reader, CrLfLineEndings) {
  auto docs =
      read_text("apiVersion: v1\r\nkind: A\r\n---\r\napiVersion: v1\r\nkind: B\r\n", "crlf");
  ASSERT_TRUE(docs) << docs.error().format();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[1].value["kind"], "B");
  EXPECT_EQ((*docs)[1].position.line, 4);
}

struct ScalarCase {
  const char* yaml;
  Json expected;
};

TEST(Reader, ScalarResolutionLikeKubernetes) {
  const double inf = std::numeric_limits<double>::infinity();
  const ScalarCase cases[] = {
      {"true", true},
      {"True", true},
      {"TRUE", true},
      {"false", false},
      {"FALSE", false},
      // YAML 1.1, as Kubernetes' decoder (go-yaml v2) reads it.
      {"yes", true},
      {"Yes", true},
      {"on", true},
      {"ON", true},
      {"y", true},
      {"no", false},
      {"off", false},
      {"N", false},
      {"null", nullptr},
      {"Null", nullptr},
      {"~", nullptr},
      {"", nullptr},
      {"10", 10},
      {"-10", -10},
      {"+10", 10},
      {"0", 0},
      {"0x1F", 31},
      {"0X1f", 31},
      {"-0x1F", -31},
      {"0o17", 15},
      {"0644", 420},  // defaultMode: 0644 is octal in Kubernetes manifests
      {"0b101", 5},
      {"1_000", 1000},
      {"9223372036854775807", std::numeric_limits<std::int64_t>::max()},
      {"-9223372036854775808", std::numeric_limits<std::int64_t>::min()},
      {"1.5", 1.5},
      {"-1.5", -1.5},
      {"1e3", 1000.0},
      {"1.0", 1.0},
      {".5", 0.5},
      {"-.5", -0.5},
      {"08", 8.0},  // not octal, so go-yaml falls through to a float
      {".inf", inf},
      {"-.Inf", -inf},
      {"+.INF", inf},
      {"1e400", "1e400"},  // overflows: go-yaml keeps the text
      {"1.2.3", "1.2.3"},
      {"1Gi", "1Gi"},
      {"100m", "100m"},
      {"0x", "0x"},
      {"0xG", "0xG"},
      {"+", "+"},
      {"yES", "yES"},
      {"NaN", "NaN"},
      {"Infinity", "Infinity"},
      {"2001-12-14", "2001-12-14"},  // a timestamp in go-yaml; kept as written here
      {"nginx:1.25", "nginx:1.25"},
      {"\"true\"", "true"},
      {"'10'", "10"},
      {"\"\"", ""},
      {"''", ""},
      {"\"null\"", "null"},
      {"\"a\\tb\\u00e9\"", "a\tb\xC3\xA9"},
      {"'it''s'", "it's"},
  };
  for (const auto& c : cases) {
    auto value = read_value(c.yaml);
    ASSERT_TRUE(value) << c.yaml << ": " << value.error();
    EXPECT_TRUE(same(*value, c.expected))
        << "`" << c.yaml << "` read as " << value->dump() << ", expected " << c.expected.dump();
  }
  auto nan = read_value(".nan");
  ASSERT_TRUE(nan);
  EXPECT_TRUE(nan->is_number_float() && std::isnan(nan->get<double>()));
}

TEST(Reader, IntegerOutOfRangeIsAnErrorNamingTheLine) {
  EXPECT_THAT(error_of("a: 1\nb: 9223372036854775808\n"),
              HasSubstr("in.yaml:2:4: integer 9223372036854775808 does not fit in 64 bits"));
  EXPECT_THAT(error_of("a: -9223372036854775809\n"), HasSubstr("does not fit in 64 bits"));
  EXPECT_THAT(error_of("a: 0x1FFFFFFFFFFFFFFFF\n"), HasSubstr("does not fit in 64 bits"));
  // Quoted, it is just a string.
  auto quoted = read_value("\"99999999999999999999\"");
  ASSERT_TRUE(quoted);
  EXPECT_EQ(*quoted, "99999999999999999999");
  // As a key, it is text.
  auto key = read_one("99999999999999999999: x\n");
  ASSERT_TRUE(key) << key.error();
  EXPECT_EQ((*key)["99999999999999999999"], "x");
}

TEST(Reader, BlockScalars) {
  auto doc = read_one("a: |\n  line one\n  line two\nb: >\n  folded\n  text\nc: |-\n  x\n");
  ASSERT_TRUE(doc) << doc.error();
  EXPECT_EQ((*doc)["a"], "line one\nline two\n");
  EXPECT_EQ((*doc)["b"], "folded text\n");
  EXPECT_EQ((*doc)["c"], "x");
}

TEST(Reader, CoreTagsAreHonoured) {
  const ScalarCase cases[] = {
      {"!!str 10", "10"},
      {"!!str true", "true"},
      {"!!str", ""},
      {"!!int \"10\"", 10},
      {"!!int 0x10", 16},
      {"!!float 1", 1.0},
      {"!!float \"2.5\"", 2.5},
      {"!!bool \"yes\"", true},
      {"!!null \"\"", nullptr},
      {"! 10", "10"},
      {"!<tag:yaml.org,2002:str> 5", "5"},
      {"!!map {a: 1}", Json{{"a", 1}}},
      {"!!seq [1]", Json::array({1})},
  };
  for (const auto& c : cases) {
    auto value = read_value(c.yaml);
    ASSERT_TRUE(value) << c.yaml << ": " << value.error();
    EXPECT_TRUE(same(*value, c.expected))
        << "`" << c.yaml << "` read as " << value->dump() << ", expected " << c.expected.dump();
  }
}

TEST(Reader, OtherTagsAreErrorsNamingTheLine) {
  EXPECT_THAT(error_of("a: 1\nb: !foo x\n"), HasSubstr("in.yaml:2:4: unsupported tag !foo"));
  EXPECT_THAT(error_of("a: !!binary aGk=\n"), HasSubstr("unsupported tag !!binary"));
  EXPECT_THAT(error_of("a: !!timestamp 2001-12-14\n"), HasSubstr("unsupported tag !!timestamp"));
  EXPECT_THAT(error_of("a: !local {b: 1}\n"), HasSubstr("unsupported tag !local"));
  EXPECT_THAT(error_of("a: !!int abc\n"), HasSubstr("cannot read `abc` as !!int"));
  EXPECT_THAT(error_of("a: !!bool 1\n"), HasSubstr("cannot read `1` as !!bool"));
  EXPECT_THAT(error_of("a: !!null x\n"), HasSubstr("as !!null"));
  EXPECT_THAT(error_of("a: !!seq {b: 1}\n"), HasSubstr("tag !!seq cannot be used"));
  EXPECT_THAT(error_of("a: !!str [1]\n"), HasSubstr("tag !!str cannot be used"));
  EXPECT_THAT(error_of("a: !!map x\n"), HasSubstr("tag !!map on a scalar"));
  EXPECT_THAT(error_of("!foo\napiVersion: v1\n"), HasSubstr("unsupported tag !foo"));
}

TEST(Reader, DuplicateKeysAreErrorsNamingTheLine) {
  EXPECT_THAT(error_of("apiVersion: v1\nkind: A\nmetadata:\n  name: a\n  name: b\n"),
              HasSubstr("in.yaml:5:3: duplicate key \"name\""));
  EXPECT_THAT(error_of("a: {x: 1, x: 2}\n"), HasSubstr("duplicate key \"x\""));
  // Large mappings use a hash index; the rule is the same.
  std::string big = "data:\n";
  for (int i = 0; i < 100; ++i) big += "  k" + std::to_string(i) + ": v\n";
  EXPECT_TRUE(read_one(big));
  EXPECT_THAT(error_of(big + "  k42: again\n"), HasSubstr("in.yaml:102:3: duplicate key \"k42\""));
  // Same text in different mappings is fine.
  EXPECT_TRUE(read_one("a: {x: 1}\nb: {x: 1}\n"));
}

TEST(Reader, KeysMustBeStrings) {
  EXPECT_THAT(error_of("? [a, b]\n: c\n"),
              HasSubstr("a mapping key must be a string, not a sequence"));
  EXPECT_THAT(error_of("? {a: 1}\n: c\n"),
              HasSubstr("a mapping key must be a string, not a mapping"));
  EXPECT_THAT(error_of("a: 1\nnull: x\n"),
              HasSubstr("in.yaml:2:1: a mapping key is empty or null"));
  auto doc = read_one("80: http\ntrue: yes\n1.5: x\n");
  ASSERT_TRUE(doc) << doc.error();
  EXPECT_EQ(doc->dump(), R"({"80":"http","true":true,"1.5":"x"})");
}

TEST(Reader, AliasesAreCopied) {
  auto doc = read_one(
      "metadata:\n"
      "  labels: &labels\n"
      "    app: web\n"
      "    tier: front\n"
      "spec:\n"
      "  selector:\n"
      "    matchLabels: *labels\n"
      "  ports: &p [80, 443]\n"
      "  again: *p\n"
      "  name: &n web\n"
      "  copy: *n\n"
      "  *n : by-alias-key\n");
  ASSERT_TRUE(doc) << doc.error();
  EXPECT_TRUE(
      same((*doc)["spec"]["selector"]["matchLabels"], Json{{"app", "web"}, {"tier", "front"}}));
  EXPECT_TRUE(same((*doc)["spec"]["again"], Json::array({80, 443})));
  EXPECT_EQ((*doc)["spec"]["copy"], "web");
  EXPECT_EQ((*doc)["spec"]["web"], "by-alias-key");
}

TEST(Reader, MergeKeys) {
  auto doc = read_one(
      "base: &base {a: 1, b: 2}\n"
      "other: &other {b: 20, c: 30}\n"
      "one: {<<: *base, b: 3}\n"
      "before: {b: 3, <<: *base}\n"
      "many: {<<: [*base, *other], d: 4}\n");
  ASSERT_TRUE(doc) << doc.error();
  EXPECT_TRUE(same((*doc)["one"], Json::parse(R"({"a":1,"b":3})")));
  EXPECT_TRUE(same((*doc)["before"], Json::parse(R"({"b":3,"a":1})")));
  EXPECT_TRUE(same((*doc)["many"], Json::parse(R"({"a":1,"b":2,"c":30,"d":4})")));
  // An explicit key may override a merged one once, not twice.
  EXPECT_THAT(error_of("base: &b {a: 1}\nx: {<<: *b, a: 2, a: 3}\n"),
              HasSubstr("duplicate key \"a\""));
  EXPECT_THAT(error_of("x: {<<: 5}\n"), HasSubstr("merge key (<<) takes a mapping"));
  // Quoted, "<<" is an ordinary key.
  auto quoted = read_one("\"<<\": 1\n");
  ASSERT_TRUE(quoted) << quoted.error();
  EXPECT_EQ((*quoted)["<<"], 1);
}

TEST(Reader, AliasBombFailsAtTheNodeLimit) {
  std::string bomb =
      "apiVersion: v1\nkind: ConfigMap\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  std::string previous = "a";
  for (char level = 'b'; level <= 'i'; ++level) {
    std::string name(1, level);
    bomb += name + ": &" + name + " [";
    for (int i = 0; i < 9; ++i) bomb += (i ? ", *" : "*") + previous;
    bomb += "]\n";
    previous = name;
  }
  std::string error = error_of(bomb);
  EXPECT_THAT(error, HasSubstr("beyond 262144 nodes"));
  EXPECT_THAT(error, HasSubstr("in.yaml:"));

  Limits small;
  small.max_alias_nodes = 50;
  EXPECT_THAT(error_of("a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: [*a, *a, *a, *a, *a, *a]\n", small),
              HasSubstr("in.yaml:2:"));
  // The limit holds over the whole input: two documents, each under it
  // (36 nodes), are over it together. (Issue 20: twenty documents just under
  // a per-document limit cost 1.1 GB.)
  const std::string half = "a: &a [1, 2, 3, 4, 5]\nb: [*a, *a, *a, *a, *a, *a]\n";
  EXPECT_TRUE(read_text(half, "x", small));
  auto both = read_text(half + "---\n" + half, "x", small);
  ASSERT_FALSE(both);
  EXPECT_EQ(both.error().position.line, 5);
  EXPECT_THAT(both.error().message, HasSubstr("counted over all documents"));
  // And over several texts read with one budget (the files of one command).
  ReadBudget budget;
  EXPECT_TRUE(read_text(half, "one.yaml", small, &budget));
  auto second = read_text(half, "two.yaml", small, &budget);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().position.file, "two.yaml");
}

TEST(Reader, AliasesCannotBuildDepth) {
  // Each anchor nests the previous one: shallow text, deep value.
  std::string text = "a0: &a0 [x]\n";
  for (int i = 1; i < 150; ++i) {
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [*a" + std::to_string(i - 1) +
            "]\n";
  }
  EXPECT_THAT(error_of(text), HasSubstr("nesting is deeper than 100 levels"));
}

TEST(Reader, LoneCarriageReturnsAreLineBreaks) {
  // Valid YAML (old Mac line ends); yaml-cpp alone rejected them (issue 20).
  auto docs = read_text("apiVersion: v1\rkind: ConfigMap\rdata:\r  a: \"1\"\r---\rb: 2\r", "cr");
  ASSERT_TRUE(docs) << docs.error().format();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ(docs->at(0).value["data"]["a"], "1");
  EXPECT_EQ(docs->at(1).position.line, 6);
}

// A line of only blanks is an empty line, tabs or not (YAML 1.2). yaml-cpp
// took a tab there only right after a flow collection, so `plan` could add a
// block above such a line and write a file that no longer read (CI's fuzz
// finding).
TEST(Reader, BlankLinesWithTabsAreEmptyLines) {
  for (const std::string text : {
           "a:\n  b:\n    c: 1\n\t\n",               // after a nested block: yaml-cpp refused
           "a:\n  b:\n    c: {d: 1}\n\t\n",          // after a flow collection: it took it
           "a:\n\t \t\n  b:\n    c: 1\n",            // between a key and its value
           "a:\n  b:\n    c: 1\n  \t\n---\nx: 2\n",  // before the next document
       }) {
    auto docs = read_text(text, "tabs.yaml");
    ASSERT_TRUE(docs) << docs.error().format() << " for " << ::testing::PrintToString(text);
    EXPECT_EQ(docs->front().value["a"]["b"]["c"].is_null(), false);
  }
  // In a block scalar a tab past the indentation is content, and stays.
  auto literal = read_one("a: |\n  x\n  \t\n  y\nb: 1\n");
  ASSERT_TRUE(literal) << literal.error();
  EXPECT_EQ((*literal)["a"], "x\n\t\ny\n");
  // In a quoted scalar it is folded as before.
  auto quoted = read_one("a: \"x\n\t\n  y\"\n");
  ASSERT_TRUE(quoted) << quoted.error();
  EXPECT_EQ((*quoted)["a"], "x\ny");
  // Line numbers stay: the rewrite is byte for byte.
  EXPECT_THAT(error_of("a:\n\t\n  b: [\n"), HasSubstr("in.yaml:"));
  auto docs = read_text("a:\n\t\n  b: 1\n---\nc: 2\n", "lines.yaml");
  ASSERT_TRUE(docs) << docs.error().format();
  EXPECT_EQ(docs->at(1).position.line, 5);
}

TEST(Reader, RecursiveAliasIsAnError) {
  EXPECT_THAT(error_of("a: &a [1, *a]\n"), HasSubstr("recursive alias"));
  EXPECT_THAT(error_of("a: *nope\n"), HasSubstr("not defined"));
}

TEST(Reader, DeepNestingIsAnErrorNotACrash) {
  const std::string brackets(100000, '[');
  const std::string balanced = brackets + std::string(100000, ']');
  // Found by the scan before yaml-cpp runs, at the bracket that goes one
  // level too deep, whether or not the brackets are ever closed (issue 20:
  // unclosed, yaml-cpp read `[[` as a mapping whose key is a sequence and
  // said so, after hundreds of megabytes).
  EXPECT_THAT(error_of("a: " + balanced),
              HasSubstr("in.yaml:1:104: nesting is deeper than 100 levels"));
  EXPECT_THAT(error_of(balanced), HasSubstr("in.yaml:1:101: nesting is deeper than 100 levels"));
  EXPECT_THAT(error_of("a: " + brackets),
              HasSubstr("in.yaml:1:104: nesting is deeper than 100 levels"));
  EXPECT_THAT(error_of(brackets), HasSubstr("in.yaml:1:101: nesting is deeper than 100 levels"));
  EXPECT_THAT(error_of("a: " + std::string(200, '{')),
              HasSubstr("in.yaml:1:104: nesting is deeper than 100 levels"));
  // Brackets in strings, comments and block scalars are not nesting.
  EXPECT_TRUE(read_text("a: \"" + brackets + "\"\nb: '" + brackets + "' # " + brackets +
                            "\nc: |\n  " + brackets + "\n  " + brackets + "\nd: x[[[[\n",
                        "x"));
  std::string dashes;
  for (int i = 0; i < 100000; ++i) dashes += "- ";
  EXPECT_THAT(error_of("a:\n  " + dashes + "x\n"), HasSubstr("nesting is deeper than 100 levels"));
  EXPECT_THAT(error_of(dashes + "x\n"), HasSubstr("in.yaml:1:1:"));
  std::string lines = "a:\n";
  for (int i = 0; i < 2000; ++i)
    lines += std::string(static_cast<std::size_t>(i) + 2, ' ') + "- \n";
  EXPECT_THAT(error_of(lines), HasSubstr("nesting is deeper than 100 levels"));
  std::string maps = "a:\n";
  for (int i = 0; i < 2000; ++i) maps += std::string(static_cast<std::size_t>(i) + 2, ' ') + "k:\n";
  EXPECT_THAT(error_of(maps), HasSubstr("nesting is deeper than 100 levels"));

  // With our limit lifted, yaml-cpp's own recursion guard still stops it.
  Limits deep;
  deep.max_depth = 1000000;
  EXPECT_THAT(error_of("a: " + balanced, deep), HasSubstr("nesting is too deep"));
  EXPECT_THAT(error_of("a: " + brackets, deep), HasSubstr("in.yaml:1:"));
  EXPECT_THAT(error_of("a:\n  " + dashes + "x\n", deep), HasSubstr("nesting is too deep"));

  // Exactly at the limit is fine.
  Limits three;
  three.max_depth = 3;
  EXPECT_TRUE(read_text("a: [[1]]\n", "x", three));
  EXPECT_THAT(error_of("a: [[[1]]]\n", three), HasSubstr("nesting is deeper than 3 levels"));
}

TEST(Reader, BinaryInputIsAnError) {
  EXPECT_THAT(error_of(std::string("\x7F"
                                   "ELF\x02\x01\x01\0\0\0",
                                   10)),
              HasSubstr("in.yaml:1:1: binary data is not a manifest"));
  EXPECT_THAT(error_of(std::string("apiVersion: v1\nkind: A\ndata: ab\0cd\n", 32)),
              HasSubstr("in.yaml:3:9: binary data is not a manifest (NUL byte)"));
  EXPECT_THAT(error_of("a: \xff\xfe\n"),
              HasSubstr("in.yaml:1:4: binary data is not a manifest (invalid UTF-8)"));
  EXPECT_THAT(error_of("a: \xC0\xAF\n"), HasSubstr("invalid UTF-8"));      // overlong
  EXPECT_THAT(error_of("a: \xED\xA0\x80\n"), HasSubstr("invalid UTF-8"));  // surrogate
  EXPECT_THAT(error_of("a: \x1b[31mred\n"), HasSubstr("control character 0x1B"));
  EXPECT_THAT(error_of(std::string("\xFF\xFE"
                                   "a\0:\0",
                                   6)),
              HasSubstr("UTF-16"));
  // UTF-32's byte order mark starts like UTF-16's: named right (issue 20).
  EXPECT_THAT(error_of(std::string("\xFF\xFE\0\0a\0\0\0", 8)),
              HasSubstr("UTF-32 text is not supported"));
  EXPECT_THAT(error_of(std::string("\0\0\xFE\xFF\0\0\0a", 8)), HasSubstr("UTF-32"));
  EXPECT_THAT(error_of(std::string("a\0\0\0:\0\0\0", 8)), HasSubstr("UTF-32"));
  EXPECT_THAT(error_of(std::string("a\0:\0", 4)), HasSubstr("UTF-16"));
  std::mt19937 random(42);
  for (int round = 0; round < 20; ++round) {
    std::string garbage(4096, '\0');
    for (char& c : garbage) c = static_cast<char>(random() & 0xFF);
    EXPECT_THAT(error_of(garbage), HasSubstr("binary data is not a manifest"));
  }
  // Valid non-ASCII text is fine, a UTF-8 byte order mark too.
  auto doc = read_one("\xEF\xBB\xBFname: caf\xC3\xA9 \xE2\x9C\x93 \xF0\x9F\x9A\x80\n");
  ASSERT_TRUE(doc) << doc.error();
  EXPECT_EQ((*doc)["name"], "caf\xC3\xA9 \xE2\x9C\x93 \xF0\x9F\x9A\x80");
}

TEST(Reader, SyntaxErrorsNameTheLineAndWhatWasExpected) {
  EXPECT_THAT(error_of("apiVersion: v1\nkind: A\nmetadata:\n  name: a\n bad: b\n"),
              HasSubstr("in.yaml:5:"));
  EXPECT_THAT(error_of("a: \"unterminated\n"),
              HasSubstr("in.yaml:1:4: invalid YAML: expected the closing double quote"));
  EXPECT_THAT(error_of("a: 'it''s\n"), HasSubstr("expected the closing single quote"));
  EXPECT_THAT(error_of(R"(a: "ends in \")"), HasSubstr("expected the closing quote"));
  auto closed = read_one(R"(a: "\\"
b: 'x'''
c: "multi
  line"
)");
  ASSERT_TRUE(closed) << closed.error();
  EXPECT_EQ(closed->dump(), R"({"a":"\\","b":"x'","c":"multi line"})");
  EXPECT_THAT(error_of("a: [1, 2\n"), HasSubstr("expected"));
  EXPECT_THAT(error_of("a: {b: 1\n"), HasSubstr("expected"));
  EXPECT_THAT(error_of("a: b: c\n"), HasSubstr("in.yaml:1:5: invalid YAML: unexpected `:`"));
  EXPECT_THAT(error_of("a: \"\\q\"\n"), HasSubstr("unknown escape sequence"));
  EXPECT_THAT(error_of("a:\n\t- b\n"), HasSubstr("in.yaml:2:"));
  // yaml-cpp alone would report empty documents here forever.
  EXPECT_THAT(error_of(",a]"), HasSubstr("in.yaml:1:1: invalid YAML: unexpected `,`"));
  EXPECT_THAT(error_of("a: 1\n---\n, b\n"), HasSubstr("in.yaml:3:1: invalid YAML: unexpected `,`"));
}

TEST(Reader, ArbitraryYamlLikeTextEndsInDocumentsOrAnError) {
  const char* const pieces[] = {"a",      ":",     ": ", " ",    "\n", "  ",  "- ",
                                "[",      "]",     "{",  "}",    ",",  "&x ", "*x",
                                "!!str ", "!t ",   "\"", "'",    "|",  ">",   "#",
                                "---\n",  "...\n", "? ", "<<: ", "1",  "\t",  "%YAML 1.2\n"};
  std::mt19937 random(1234);
  for (int i = 0; i < 5000; ++i) {
    std::string text;
    int n = 1 + static_cast<int>(random() % 40);
    for (int k = 0; k < n; ++k) text += pieces[random() % std::size(pieces)];
    auto docs = read_text(text, "fuzz.yaml");
    if (!docs) {
      EXPECT_TRUE(docs.error().format().starts_with("fuzz.yaml")) << docs.error().format();
      continue;
    }
    for (const Document& doc : *docs) EXPECT_TRUE(doc.value.is_object()) << text;
  }
}

TEST(Reader, InputSizeLimit) {
  Limits limits;
  limits.max_input_bytes = 16;
  EXPECT_THAT(error_of("apiVersion: v1\nkind: A\n", limits),
              HasSubstr("larger than the limit of 16 bytes"));
  EXPECT_TRUE(read_text("a: 1\n", "x", limits));
}

TEST(Reader, ForEachDocumentStopsWhenAsked) {
  int seen = 0;
  auto done = for_each_document("a: 1\n---\nb: 2\n---\nc: 3\n", "x", [&](Document&& doc) {
    ++seen;
    return !doc.value.contains("b");
  });
  ASSERT_TRUE(done);
  EXPECT_EQ(seen, 2);
}

TEST(Reader, ForEachDocumentDeliversDocumentsBeforeAnError) {
  std::vector<std::string> kinds;
  auto done = for_each_document("kind: A\n---\nkind: B\n---\nkind: [\n", "x", [&](Document&& doc) {
    kinds.push_back(doc.value["kind"].get<std::string>());
    return true;
  });
  ASSERT_FALSE(done);
  EXPECT_THAT(done.error().format(), HasSubstr("x:"));
  EXPECT_EQ(kinds, (std::vector<std::string>{"A", "B"}));
}

}  // namespace
}  // namespace gracekeeper::manifest

namespace gracekeeper::manifest {
namespace {

// Found by the fuzzer: yaml-cpp 0.7 decodes \N and \_ to lone bytes, not UTF-8.
TEST(ReaderEscapes, NextLineAndNonBreakingSpaceAreUtf8) {
  auto docs =
      read_text("metadata: {name: \"nb\\_sp\", note: \"a\\Nb\", e: \"\\u00e9\"}\n", "t.yaml");
  ASSERT_TRUE(docs.has_value()) << docs.error().format();
  EXPECT_EQ((*docs)[0].value["metadata"]["name"], "nb\xC2\xA0sp");
  EXPECT_EQ((*docs)[0].value["metadata"]["note"],
            "a\xC2\x85"
            "b");
  EXPECT_EQ((*docs)[0].value["metadata"]["e"], "\xC3\xA9");
}

}  // namespace
}  // namespace gracekeeper::manifest

namespace gracekeeper::manifest {
namespace {

// A strict JSON object is decoded by the streaming JSON reader (json_fast.cpp);
// it must give what the YAML reader gives for the same text (a comment line
// in front sends the text to the YAML reader), and leave to the YAML reader
// whatever it would read differently.
TEST(Reader, JsonObjectsReadAsYamlWould) {
  for (const std::string json : {
           R"({"a": 1, "b": -2, "c": 1.50, "d": 1e3, "e": true, "f": null, "g": "x\ny\u00e9"})",
           R"(  {"apiVersion": "v1", "kind": "List", "items": [{"a": [1, [2, {}]]}, [], {}]})",
           R"({"big": 9223372036854775807, "neg": -9223372036854775808, "f": -0.0})",
       }) {
    SCOPED_TRACE(json);
    auto fast = read_text(json, "j");
    auto yaml = read_text("# via yaml-cpp\n" + json, "j");
    ASSERT_TRUE(fast.has_value()) << fast.error().format();
    ASSERT_TRUE(yaml.has_value()) << yaml.error().format();
    ASSERT_EQ(fast->size(), 1u);
    EXPECT_EQ(fast->front().value.dump(), yaml->front().value.dump());
    EXPECT_EQ(fast->front().position.line, 1);
  }
  // Left to the YAML reader, which names the problem as before.
  for (const std::string json :
       {R"({"a": 1, "a": 2})", R"({"a": 18446744073709551615})", R"({"a": 1} # trailing)",
        R"({"a": 1})"
        "\n---\n"
        R"({"b": 2})",
        R"({"<<": {"a": 1}})"}) {
    SCOPED_TRACE(json);
    auto fast = read_text(json, "j");
    auto yaml = read_text("# via yaml-cpp\n" + json, "j");
    ASSERT_EQ(fast.has_value(), yaml.has_value());
    if (!fast) {
      EXPECT_EQ(fast.error().message, yaml.error().message);
    } else {
      ASSERT_EQ(fast->size(), yaml->size());
      EXPECT_EQ(fast->front().value.dump(), yaml->front().value.dump());
    }
  }
  auto position = read_text("\n\n  {\"a\": 1}", "j");
  ASSERT_TRUE(position.has_value());
  EXPECT_EQ(position->front().position.format(), "j:3:3");
}

}  // namespace
}  // namespace gracekeeper::manifest

namespace gracekeeper::manifest {
namespace {

// yaml-cpp takes a block-mapping line without `:` as a key with a null value
// and folds a plain key over lines, even over a `---` (found by the fuzzer: an
// in-place edit then ran into the next document). go-yaml rejects both.
TEST(Reader, BlockKeysNeedAColonOnTheirLine) {
  auto no_colon = read_text("a: 1\nargs p:r[x, y]\n---\nb: 2\n", "k.yaml");
  ASSERT_FALSE(no_colon.has_value());
  EXPECT_THAT(no_colon.error().format(), HasSubstr("k.yaml:2:1: invalid YAML: expected `:`"));
  EXPECT_FALSE(read_text("a: 1\nlong\n  key: 2\n", "k.yaml").has_value());
  // Still read: explicit keys, flow keys without values, spaces before `:`,
  // and plain values over several lines.
  EXPECT_TRUE(read_text("? a\n: 1\n", "k.yaml").has_value());
  EXPECT_TRUE(read_text("m: {a, b: 1}\n", "k.yaml").has_value());
  EXPECT_TRUE(read_text("a   : 1\n- x: 1\n", "k.yaml").has_value() ||
              read_text("a   : 1\n", "k.yaml").has_value());
  auto folded = read_text("a: one\n  two\nb: 2\n", "k.yaml");
  ASSERT_TRUE(folded.has_value());
  EXPECT_EQ(folded->front().value["a"], "one two");
}

}  // namespace
}  // namespace gracekeeper::manifest

namespace gracekeeper::manifest {
namespace {

// What for_each_document hands out with ListItems::OneByOne, as
// "index[/item]:value" lines (value without `items`).
std::string read_items(std::string text, int stop_after = -1) {
  std::string out;
  int count = 0;
  auto done = for_each_document(
      std::move(text), "l.yaml",
      [&](Document&& d) {
        out += std::to_string(d.index);
        if (d.item) out += "/" + std::to_string(*d.item);
        if (d.items_recalled) out += " recalled";
        out += " " + std::to_string(d.position.line) + ": " + d.value.dump() + "\n";
        return ++count != stop_after;
      },
      {}, nullptr, ListItems::OneByOne);
  if (!done) out += done.error().format() + "\n";
  return out;
}

// A List is handed out item by item, each as soon as it is read, then the
// List without its items; `kubectl get -o yaml` writes `items` before `kind`.
TEST(ReaderListItems, ItemsComeOneByOneBeforeTheirList) {
  EXPECT_EQ(read_items("a: 1\n---\napiVersion: v1\nitems:\n- {kind: A}\n- kind: B\n  x: 2\n"
                       "kind: List\nmetadata: {}\n"),
            "0 1: {\"a\":1}\n"
            "1/0 5: {\"kind\":\"A\"}\n"
            "1/1 6: {\"kind\":\"B\",\"x\":2}\n"
            "1 3: {\"apiVersion\":\"v1\",\"items\":[],\"kind\":\"List\",\"metadata\":{}}\n");
  // Typed lists too; nested Lists come whole, as items of the outer one.
  EXPECT_EQ(read_items("kind: DeploymentList\napiVersion: apps/v1\nitems: [{kind: List, items: "
                       "[{a: 1}]}]\n"),
            "0/0 3: {\"kind\":\"List\",\"items\":[{\"a\":1}]}\n"
            "0 1: {\"kind\":\"DeploymentList\",\"apiVersion\":\"apps/v1\",\"items\":[]}\n");
}

// An object with a top-level `items` that is not a List (no apiVersion, or
// another kind) comes whole after all, marked so that its items are taken back.
TEST(ReaderListItems, NotAListComesWholeAndRecallsItsItems) {
  EXPECT_EQ(read_items("kind: ConfigMap\napiVersion: v1\nitems: [1, 2]\n"),
            "0/0 3: 1\n0/1 3: 2\n"
            "0 recalled 1: {\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"items\":[1,2]}\n");
  EXPECT_EQ(read_items("kind: List\nitems: [{a: 1}]\n"),
            "0/0 2: {\"a\":1}\n0 recalled 1: {\"kind\":\"List\",\"items\":[{\"a\":1}]}\n");
}

// `kubectl get -o json`'s List, read by the streaming JSON reader, likewise;
// each item knows its line. What that reader leaves to the YAML reader (a
// duplicate key) is read whole there, and the items handed out are recalled.
TEST(ReaderListItems, JsonListsToo) {
  EXPECT_EQ(read_items("{\n  \"apiVersion\": \"v1\",\n  \"items\": [\n    {\"a\": 1},\n    "
                       "{\"a\": 2}\n  ],\n  \"kind\": \"List\"\n}\n"),
            "0/0 4: {\"a\":1}\n0/1 5: {\"a\":2}\n"
            "0 1: {\"apiVersion\":\"v1\",\"items\":[],\"kind\":\"List\"}\n");
  EXPECT_EQ(read_items("{\"kind\": \"Foo\", \"apiVersion\": \"v1\", \"items\": [1]}"),
            "0/0 1: 1\n"
            "0 recalled 1: {\"kind\":\"Foo\",\"apiVersion\":\"v1\",\"items\":[1]}\n");
  EXPECT_EQ(read_items("{\"kind\": \"List\", \"apiVersion\": \"v1\", \"items\": [1], \"x\": 1, "
                       "\"x\": 2}"),
            "0/0 1: 1\nl.yaml:1:60: duplicate key \"x\": it is already set in this mapping\n");
}

// The sink may stop in the middle of a List; an anchored `items` is read whole.
TEST(ReaderListItems, StopsWhenAskedAndKeepsAnchoredItemsWhole) {
  EXPECT_EQ(read_items("apiVersion: v1\nkind: List\nitems: [{a: 1}, {a: 2}, {a: 3}]\n", 2),
            "0/0 3: {\"a\":1}\n0/1 3: {\"a\":2}\n");
  EXPECT_EQ(read_items("apiVersion: v1\nkind: List\nitems: &i [{a: 1}]\n"),
            "0 1: {\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[{\"a\":1}]}\n");
}

}  // namespace
}  // namespace gracekeeper::manifest

namespace gracekeeper::manifest {
namespace {

// Strict JSON is read as JSON, as kubectl reads it, even where yaml-cpp
// would not read it as YAML: a key and its `:` on two lines (found by the
// fuzzer, as a disagreement of the two readers).
TEST(Reader, JsonKeyAndColonOnTwoLines) {
  auto value =
      read_one("{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"data\": {\"a\"\n  : \"1\"}}");
  ASSERT_TRUE(value.has_value()) << value.error();
  EXPECT_EQ((*value)["data"]["a"], "1");
}

// A line at column 0 with no `:` within the 1024 characters a key may have
// (YAML 1.2, go-yaml) is rejected where that becomes clear, without yaml-cpp
// scanning it whole (20 MB of `:` took 5 s, rejected at their end).
TEST(Reader, NoColonWithinTheLengthOfAKey) {
  const std::string start = "apiVersion: v1\nkind: ConfigMap\ndata:\n  a: b\n";
  EXPECT_EQ(error_of(start + std::string(2000, ':')),
            "in.yaml:5:1: invalid YAML: no `:` within the first 1024 characters of this line (a "
            "line of a mapping must be `key: value`, and a key is at most 1024 characters)");
  EXPECT_THAT(error_of(start + std::string(1500, 'x') + ": 1\n"), HasSubstr("in.yaml:5:1: "));
  // Keys up to 1024 characters (not bytes), long values, and long lines that
  // are not at column 0 or not in block context still read.
  const std::string wide(1023, 'k');
  EXPECT_TRUE(read_text(start + wide + ": 1\n", "in.yaml").has_value());
  EXPECT_TRUE(read_text(start + "l: " + std::string(5000, 'v') + "\n", "in.yaml").has_value());
  EXPECT_TRUE(read_text("apiVersion: v1\nkind: ConfigMap\ndata: {a: [\n" + std::string(3000, 'x') +
                            "\n]}\n",
                        "in.yaml")
                  .has_value());
  EXPECT_TRUE(read_text("apiVersion: v1\nkind: ConfigMap\ndata:\n  a: \"x\n" +
                            std::string(3000, 'x') + "\"\n",
                        "in.yaml")
                  .has_value());
}

}  // namespace
}  // namespace gracekeeper::manifest

namespace gracekeeper::manifest {
namespace {

constexpr std::size_t kFlowLimit = 3u << 20;  // Limits::max_flow_bytes
const std::string kFlowError =
    "a flow collection longer than 3 MiB (the API server accepts no object this large); write "
    "it as block YAML or as JSON";

// A YAML flow mapping (plain scalars, not JSON) of exactly `bytes` bytes,
// `{` to `}`, with `separator` between its entries.
std::string flow_mapping(std::size_t bytes, const std::string& separator = ", ") {
  std::string flow = "{";
  for (int i = 0; flow.size() + 64 < bytes; ++i) {
    flow += (i ? separator + "k" : "k") + std::to_string(i) + ": " + std::string(40, 'v');
  }
  flow += separator + "z: ";
  flow += std::string(bytes - flow.size() - 1, 'v');
  return flow + "}";
}

// yaml-cpp holds every token of a flow collection until it closes (~16x the
// text), so an outermost one longer than 3 MiB (no object over 3 MiB gets
// past the API server) is refused before yaml-cpp runs; 3 MiB itself reads.
TEST(ReaderFlowLimit, JustUnderTheLimitReads) {
  const std::string start = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: ";
  const std::string flow = flow_mapping(kFlowLimit);
  ASSERT_EQ(flow.size(), kFlowLimit);
  auto value = read_one(start + flow + "\n");
  ASSERT_TRUE(value.has_value()) << value.error();
  EXPECT_EQ((*value)["data"]["z"].get<std::string>().size(), flow.size() - flow.rfind("z: ") - 4);
}

TEST(ReaderFlowLimit, JustOverFailsNamingWhereItStarts) {
  const std::string start = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: ";
  EXPECT_EQ(error_of(start + flow_mapping(kFlowLimit + 1) + "\n"), "in.yaml:4:7: " + kFlowError);
  // The whole document as one flow mapping (not JSON: plain scalars).
  EXPECT_EQ(error_of("\n  " + flow_mapping(kFlowLimit + 1) + "\n"), "in.yaml:2:3: " + kFlowError);
  // A flow sequence in a later document, left open: refused all the same.
  EXPECT_EQ(error_of("a: 1\n---\nb: [x, " + std::string(kFlowLimit, 'y')),
            "in.yaml:3:4: " + kFlowError);
  // Counted in bytes, not characters.
  std::string wide = "é";
  while (wide.size() < kFlowLimit) wide += "é";
  EXPECT_EQ(error_of("a: [\"" + wide + "\"]\n"), "in.yaml:1:4: " + kFlowError);
}

TEST(ReaderFlowLimit, MultiLineCollectionOverTheLimit) {
  std::string text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  k: [\n";
  while (text.size() < kFlowLimit + 100) text += "    " + std::string(60, 'x') + ",\n";
  text += "  ]\n";
  EXPECT_EQ(error_of(text), "in.yaml:6:6: " + kFlowError);
  // Quoted scalars spanning lines count too.
  std::string quoted = "a:\n  - {b: \"x\n";
  while (quoted.size() < kFlowLimit + 100) quoted += "   " + std::string(60, 'x') + "\n";
  quoted += "   \"}\n";
  EXPECT_EQ(error_of(quoted), "in.yaml:2:5: " + kFlowError);
}

// The limit holds per outermost collection: many small ones adding up to
// more than 3 MiB in one document read.
TEST(ReaderFlowLimit, CountedPerOutermostCollection) {
  std::string text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n";
  int count = 0;
  for (; text.size() < kFlowLimit + (1u << 20); ++count) {
    text += "  k" + std::to_string(count) + ": {a: [" + std::string(100, 'v') + "], b: c}\n";
  }
  auto value = read_one(text);
  ASSERT_TRUE(value.has_value()) << value.error();
  EXPECT_EQ((*value)["data"].size(), static_cast<std::size_t>(count));
}

// Strict JSON is read by the streaming JSON reader, which holds no tokens:
// no limit applies to it, read whole or item by item.
TEST(ReaderFlowLimit, JsonOverTheLimitReads) {
  std::string json = "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"data\": {";
  int count = 0;
  for (; json.size() < kFlowLimit + (1u << 20); ++count) {
    json +=
        (count ? ", \"k" : "\"k") + std::to_string(count) + "\": \"" + std::string(40, 'v') + "\"";
  }
  json += "}}\n";
  auto value = read_one(json);
  ASSERT_TRUE(value.has_value()) << value.error();
  EXPECT_EQ((*value)["data"].size(), static_cast<std::size_t>(count));

  std::string list = "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [";
  for (int i = 0; list.size() < kFlowLimit + (1u << 20); ++i) {
    list += (i ? ", {\"a\": \"" : "{\"a\": \"") + std::string(100, 'v') + "\"}";
  }
  list += "]}";
  std::size_t items = 0;
  auto done = for_each_document(
      list, "in.yaml",
      [&](Document&& doc) {
        if (doc.item) ++items;
        return true;
      },
      Limits{}, nullptr, ListItems::OneByOne);
  ASSERT_TRUE(done.has_value()) << done.error().format();
  EXPECT_GT(items, 30000u);

  // What the JSON reader leaves to yaml-cpp (a duplicate key) is refused
  // when it is that long, and so is nesting too deep past the limit (the
  // prescan stopped where the limit was crossed).
  std::string duplicate = json;
  duplicate.insert(duplicate.size() - 3, ", \"k0\": \"x\"");
  EXPECT_EQ(error_of(duplicate), "in.yaml:1:1: " + kFlowError);
  std::string deep = json;
  deep.insert(deep.size() - 3, ", \"deep\": " + std::string(200, '[') + std::string(200, ']'));
  EXPECT_EQ(error_of(deep), "in.yaml:1:1: " + kFlowError);
  // Under the limit, both are named as before.
  EXPECT_THAT(error_of("{\"a\": 1, \"a\": 2}"), HasSubstr("duplicate key \"a\""));
}

}  // namespace
}  // namespace gracekeeper::manifest
