#include "gracekeeper/manifest/writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "manifest/test_util.h"

namespace gracekeeper::manifest {
namespace {

using testing::read_one;
using testing::same;

// How a string value is written after `v: `.
std::string written(const std::string& s) {
  std::string yaml = to_yaml(Json{{"v", s}});
  return yaml.substr(3, yaml.size() - 4);
}

TEST(Writer, KubectlLayout) {
  Json doc = Json::parse(R"({
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "labels": {}},
    "spec": {
      "replicas": 3,
      "template": {"spec": {
        "containers": [
          {"name": "app", "args": ["a", "b"], "ports": [{"containerPort": 80, "protocol": "TCP"}]}
        ],
        "volumes": []
      }},
      "matrix": [[1, 2], [], {}, [[true]], null]
    }
  })");
  EXPECT_EQ(to_yaml(doc),
            "apiVersion: apps/v1\n"
            "kind: Deployment\n"
            "metadata:\n"
            "  name: web\n"
            "  labels: {}\n"
            "spec:\n"
            "  replicas: 3\n"
            "  template:\n"
            "    spec:\n"
            "      containers:\n"
            "      - name: app\n"
            "        args:\n"
            "        - a\n"
            "        - b\n"
            "        ports:\n"
            "        - containerPort: 80\n"
            "          protocol: TCP\n"
            "      volumes: []\n"
            "  matrix:\n"
            "  - - 1\n"
            "    - 2\n"
            "  - []\n"
            "  - {}\n"
            "  - - - true\n"
            "  - null\n");
}

TEST(Writer, RootsThatAreNotMappings) {
  EXPECT_EQ(to_yaml(Json::object()), "{}\n");
  EXPECT_EQ(to_yaml(Json::array()), "[]\n");
  EXPECT_EQ(to_yaml(Json::array({1, "x"})), "- 1\n- x\n");
  EXPECT_EQ(to_yaml(Json("a\nb")), "\"a\\nb\"\n");
  EXPECT_EQ(to_yaml(Json(nullptr)), "null\n");
}

TEST(Writer, StringsAreQuotedOnlyWhenNeeded) {
  const std::pair<const char*, const char*> cases[] = {
      {"hello", "hello"},
      {"hello world", "hello world"},
      {"nginx:1.25", "nginx:1.25"},
      {"http://example.com/a#b", "http://example.com/a#b"},
      {"a:b", "a:b"},
      {"100m", "100m"},
      {"1Gi", "1Gi"},
      {"caf\xC3\xA9", "caf\xC3\xA9"},
      {"a-b_c.d/e", "a-b_c.d/e"},
      {"", "\"\""},
      // Would read back as another type.
      {"true", "\"true\""},
      {"False", "\"False\""},
      {"yes", "\"yes\""},
      {"no", "\"no\""},
      {"on", "\"on\""},
      {"off", "\"off\""},
      {"y", "\"y\""},
      {"n", "\"n\""},
      {"null", "\"null\""},
      {"~", "\"~\""},
      {"10", "\"10\""},
      {"-10", "\"-10\""},
      {"1.5", "\"1.5\""},
      {"1e3", "\"1e3\""},
      {"0x1F", "\"0x1F\""},
      {"0o17", "\"0o17\""},
      {"0644", "\"0644\""},
      {"1_000", "\"1_000\""},
      {".inf", "\".inf\""},
      {".nan", "\".nan\""},
      {"99999999999999999999", "\"99999999999999999999\""},
      {"<<", "\"<<\""},
      // Would read as something else for YAML 1.1 readers.
      {"2024-01-01", "\"2024-01-01\""},
      {"1:30", "\"1:30\""},
      // Blanks at the ends.
      {" lead", "\" lead\""},
      {"trail ", "\"trail \""},
      {"\ttab", "\"\\ttab\""},
      // Indicators.
      {"-x", "\"-x\""},
      {"- x", "\"- x\""},
      {"?x", "\"?x\""},
      {":x", "\":x\""},
      {",x", "\",x\""},
      {"[x", "\"[x\""},
      {"]x", "\"]x\""},
      {"{x", "\"{x\""},
      {"}x", "\"}x\""},
      {"#x", "\"#x\""},
      {"&x", "\"&x\""},
      {"*x", "\"*x\""},
      {"!x", "\"!x\""},
      {"|x", "\"|x\""},
      {">x", "\">x\""},
      {"'x", "\"'x\""},
      {"\"x", "\"\\\"x\""},
      {"%x", "\"%x\""},
      {"@x", "\"@x\""},
      {"`x", "\"`x\""},
      {"---", "\"---\""},
      {"...", "\"...\""},
      // Inside.
      {"a: b", "\"a: b\""},
      {"a #b", "\"a #b\""},
      {"end:", "\"end:\""},
      {"back\\slash", "back\\slash"},
      {"tab\there", "\"tab\\there\""},
      {"bell\x07", "\"bell\\u0007\""},
      {"nel\xC2\x85", "\"nel\\u0085\""},
      {"ls\xE2\x80\xA8", "\"ls\\u2028\""},
      {"\xEF\xBB\xBF"
       "bom",
       "\"\\uFEFFbom\""},
      {"cr\r", "\"cr\\r\""},
      {"not utf8 \xFF", "\"not utf8 \\uFFFD\""},
  };
  for (const auto& [value, expected] : cases) {
    EXPECT_EQ(written(value), expected) << "for `" << value << "`";
  }
}

TEST(Writer, MultiLineStringsUseLiteralBlocksWhenSafe) {
  EXPECT_EQ(to_yaml(Json{{"script", "#!/bin/sh\nexec app\n"}}),
            "script: |\n  #!/bin/sh\n  exec app\n");
  EXPECT_EQ(to_yaml(Json{{"s", "no final newline\nx"}}), "s: |-\n  no final newline\n  x\n");
  EXPECT_EQ(to_yaml(Json{{"s", "keep\n\n"}}), "s: |+\n  keep\n\n");
  EXPECT_EQ(to_yaml(Json{{"s", "a\n\n  indented\n"}}), "s: |\n  a\n\n    indented\n");
  EXPECT_EQ(to_yaml(Json{{"l", Json::array({"x\ny"})}}), "l:\n- |-\n  x\n  y\n");
  // Where a literal block would change the text, double quotes instead.
  EXPECT_EQ(to_yaml(Json{{"s", "  leading\nx"}}), "s: \"  leading\\nx\"\n");
  EXPECT_EQ(to_yaml(Json{{"s", "a\n   \nb"}}), "s: \"a\\n   \\nb\"\n");
  EXPECT_EQ(to_yaml(Json{{"s", "crlf\r\n"}}), "s: \"crlf\\r\\n\"\n");
  EXPECT_EQ(to_yaml(Json{{"s", "\n"}}), "s: \"\\n\"\n");
}

TEST(Writer, KeysFollowTheSameRules) {
  EXPECT_EQ(to_yaml(Json{{"gracekeeper.dev/drain-seconds", "30"}}),
            "gracekeeper.dev/drain-seconds: \"30\"\n");
  EXPECT_EQ(to_yaml(Json{{"yes", 1}}), "\"yes\": 1\n");
  EXPECT_EQ(to_yaml(Json{{"", 1}}), "\"\": 1\n");
  EXPECT_EQ(to_yaml(Json{{"a: b", 1}}), "\"a: b\": 1\n");
  EXPECT_EQ(to_yaml(Json{{"multi\nline", 1}}), "\"multi\\nline\": 1\n");
}

TEST(Writer, Numbers) {
  auto number = [](const Json& v) {
    std::string yaml = to_yaml(Json{{"v", v}});
    return yaml.substr(3, yaml.size() - 4);
  };
  EXPECT_EQ(number(0), "0");
  EXPECT_EQ(number(-42), "-42");
  EXPECT_EQ(number(std::numeric_limits<std::int64_t>::min()), "-9223372036854775808");
  EXPECT_EQ(number(std::numeric_limits<std::uint64_t>::max()), "18446744073709551615");
  EXPECT_EQ(number(1.0), "1.0");
  EXPECT_EQ(number(-0.0), "-0.0");
  EXPECT_EQ(number(0.1), "0.1");
  EXPECT_EQ(number(1.5e300), "1.5e+300");
  EXPECT_EQ(number(1e20), "1e+20");
  EXPECT_EQ(number(123456789.0), "123456789.0");
  EXPECT_EQ(number(std::numeric_limits<double>::infinity()), ".inf");
  EXPECT_EQ(number(-std::numeric_limits<double>::infinity()), "-.inf");
  EXPECT_EQ(number(std::numeric_limits<double>::quiet_NaN()), ".nan");
  EXPECT_EQ(number(true), "true");
  EXPECT_EQ(number(nullptr), "null");
  for (double d : {0.1, 1.0 / 3.0, 2.5e-308, 5e-324, 1.7976931348623157e308, 1e16, 123.456}) {
    auto back = read_one(to_yaml(Json{{"v", d}}));
    ASSERT_TRUE(back) << back.error();
    EXPECT_TRUE((*back)["v"].is_number_float());
    EXPECT_EQ((*back)["v"].get<double>(), d);
  }
}

TEST(Writer, YamlStream) {
  std::vector<Json> docs{Json{{"kind", "A"}}, Json{{"kind", "B"}}};
  EXPECT_EQ(to_yaml_stream(docs), "kind: A\n---\nkind: B\n");
  EXPECT_EQ(to_yaml_stream({Json{{"kind", "A"}}}), "kind: A\n");
  EXPECT_EQ(to_yaml_stream({}), "");
  auto back = read_text(to_yaml_stream(docs), "x");
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].value["kind"], "B");
}

TEST(Writer, JsonOneDocumentIsItself) {
  Json doc = Json{{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"data", {{"b", "2"}, {"a", "1"}}}};
  EXPECT_EQ(to_json_stream({doc}),
            "{\n"
            "  \"apiVersion\": \"v1\",\n"
            "  \"kind\": \"ConfigMap\",\n"
            "  \"data\": {\n"
            "    \"b\": \"2\",\n"
            "    \"a\": \"1\"\n"
            "  }\n"
            "}\n");
  EXPECT_EQ(to_json_stream({doc}, -1),
            R"({"apiVersion":"v1","kind":"ConfigMap","data":{"b":"2","a":"1"}})"
            "\n");
}

TEST(Writer, JsonSeveralDocumentsAreAList) {
  std::vector<Json> docs{Json{{"kind", "A"}}, Json{{"kind", "B"}, {"x", 1.0}}};
  EXPECT_EQ(to_json_stream(docs, -1),
            R"({"apiVersion":"v1","kind":"List","items":[{"kind":"A"},{"kind":"B","x":1.0}]})"
            "\n");
  EXPECT_EQ(to_json_stream({}, -1), R"({"apiVersion":"v1","kind":"List","items":[]})"
                                    "\n");
  // Text that is not UTF-8 does not throw.
  EXPECT_EQ(to_json_stream({Json{{"s", "\xFF"}}}, -1), "{\"s\":\"\xEF\xBF\xBD\"}\n");
}

}  // namespace
}  // namespace gracekeeper::manifest
