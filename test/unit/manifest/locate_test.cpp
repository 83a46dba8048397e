#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gracekeeper/manifest/document.h"

namespace gracekeeper::manifest {
namespace {

using Path = std::vector<std::string>;

const char* const kDeployment =
    "apiVersion: apps/v1\n"                        // 1
    "kind: Deployment\n"                           // 2
    "metadata:\n"                                  // 3
    "  name: web\n"                                // 4
    "  annotations:\n"                             // 5
    "    gracekeeper.dev/drain-seconds: \"30\"\n"  // 6
    "spec:\n"                                      // 7
    "  template:\n"                                // 8
    "    spec:\n"                                  // 9
    "      containers:\n"                          // 10
    "      - name: app\n"                          // 11
    "        image: nginx\n"                       // 12
    "      - name: sidecar\n"                      // 13
    "        image: envoy\n"                       // 14
    "        ports:\n"                             // 15
    "        - containerPort: 80\n";               // 16

Document read_single(const std::string& text, int which = 0) {
  auto docs = read_text(text, "deploy.yaml");
  EXPECT_TRUE(docs) << docs.error().format();
  return std::move((*docs)[static_cast<std::size_t>(which)]);
}

std::string where(const Document& doc, std::string_view dotted) {
  return locate(doc, split_field_path(dotted)).format();
}

TEST(SplitFieldPath, DotsAndIndexes) {
  EXPECT_EQ(split_field_path("spec.template.spec.containers[1].name"),
            (Path{"spec", "template", "spec", "containers", "1", "name"}));
  EXPECT_EQ(split_field_path("metadata.annotations[gracekeeper.dev/drain-seconds]"),
            (Path{"metadata", "annotations", "gracekeeper.dev/drain-seconds"}));
  EXPECT_EQ(split_field_path("metadata.annotations[\"gracekeeper.dev/policy\"]"),
            (Path{"metadata", "annotations", "gracekeeper.dev/policy"}));
  EXPECT_EQ(split_field_path("a[0][1].b"), (Path{"a", "0", "1", "b"}));
  EXPECT_EQ(split_field_path("spec"), (Path{"spec"}));
  EXPECT_EQ(split_field_path(""), (Path{}));
  EXPECT_EQ(split_field_path("a[unclosed.b"), (Path{"a", "unclosed.b"}));
}

TEST(Locate, NestedFieldsAndSequenceItems) {
  Document doc = read_single(kDeployment);
  EXPECT_EQ(where(doc, "kind"), "deploy.yaml:2:1");
  EXPECT_EQ(where(doc, "metadata.name"), "deploy.yaml:4:3");
  EXPECT_EQ(where(doc, "metadata.annotations[gracekeeper.dev/drain-seconds]"), "deploy.yaml:6:5");
  EXPECT_EQ(where(doc, "spec.template.spec.containers"), "deploy.yaml:10:7");
  EXPECT_EQ(where(doc, "spec.template.spec.containers[0]"), "deploy.yaml:11:9");
  EXPECT_EQ(where(doc, "spec.template.spec.containers[1].name"), "deploy.yaml:13:9");
  EXPECT_EQ(where(doc, "spec.template.spec.containers[1].image"), "deploy.yaml:14:9");
  EXPECT_EQ(where(doc, "spec.template.spec.containers[1].ports[0].containerPort"),
            "deploy.yaml:16:11");
}

TEST(Locate, FallsBackToTheDeepestAncestor) {
  Document doc = read_single(kDeployment);
  EXPECT_EQ(where(doc, "spec.template.spec.containers[1].resources.limits"), "deploy.yaml:13:9");
  EXPECT_EQ(where(doc, "spec.template.spec.containers[7].name"), "deploy.yaml:10:7");
  EXPECT_EQ(where(doc, "spec.template.spec.containers[x]"), "deploy.yaml:10:7");
  EXPECT_EQ(where(doc, "spec.template.spec.containers[0].name.deeper"), "deploy.yaml:11:9");
  EXPECT_EQ(where(doc, "status"), "deploy.yaml:1:1");
  EXPECT_EQ(where(doc, ""), "deploy.yaml:1:1");
}

TEST(Locate, UsesTheRightDocument) {
  const std::string text = std::string("---\n# empty\n---\nkind: First\n---\n") + kDeployment;
  auto docs = read_text(text, "multi.yaml");
  ASSERT_TRUE(docs) << docs.error().format();
  ASSERT_EQ(docs->size(), 2u);
  const Document& second = (*docs)[1];
  EXPECT_EQ(second.position.format(), "multi.yaml:6:1");
  EXPECT_EQ(where(second, "spec.template.spec.containers[1].name"), "multi.yaml:18:9");
  EXPECT_EQ(where((*docs)[0], "kind"), "multi.yaml:4:1");
}

TEST(Locate, AfterAndThroughAliases) {
  Document doc = read_single(
      "apiVersion: v1\n"   // 1
      "kind: X\n"          // 2
      "defaults: &d\n"     // 3
      "  port: 80\n"       // 4
      "  name: &n web\n"   // 5
      "spec:\n"            // 6
      "  a: *d\n"          // 7
      "  b: 1\n"           // 8
      "  list:\n"          // 9
      "  - *d\n"           // 10
      "  - name: *n\n"     // 11
      "    after: true\n"  // 12
      "  merged:\n"        // 13
      "    <<: *d\n"       // 14
      "    own: 2\n");     // 15
  EXPECT_EQ(where(doc, "spec.b"), "deploy.yaml:8:3");
  EXPECT_EQ(where(doc, "spec.a"), "deploy.yaml:7:3");
  EXPECT_EQ(where(doc, "spec.a.port"), "deploy.yaml:4:3");  // the anchored text
  EXPECT_EQ(where(doc, "spec.list[0].name"), "deploy.yaml:5:3");
  EXPECT_EQ(where(doc, "spec.list[1].after"), "deploy.yaml:12:5");
  EXPECT_EQ(where(doc, "spec.merged.own"), "deploy.yaml:15:5");
  EXPECT_EQ(where(doc, "spec.merged.port"), "deploy.yaml:4:3");
}

TEST(Locate, FlowStyleAndJson) {
  Document doc = read_single(
      "{\"apiVersion\": \"v1\",\n"
      " \"kind\": \"Pod\",\n"
      " \"spec\": {\"containers\": [{\"name\": \"a\"}, {\"name\": \"b\"}]}}\n");
  EXPECT_EQ(where(doc, "spec.containers[1].name"), "deploy.yaml:3:42");
}

TEST(Locate, WithoutSourceUsesTheDocumentPosition) {
  Document doc;
  doc.position = Position{"x.yaml", 7, 1};
  EXPECT_EQ(where(doc, "spec.replicas"), "x.yaml:7:1");
  // A source that no longer parses also falls back.
  doc.source = std::make_shared<const std::string>("a: [\n");
  EXPECT_EQ(where(doc, "a"), "x.yaml:7:1");
}

}  // namespace
}  // namespace gracekeeper::manifest
