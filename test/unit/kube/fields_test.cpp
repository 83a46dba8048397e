#include "gracekeeper/kube/fields.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../../src/kube/json_reader.h"  // private: the SAX reader that applies a FieldSet
#include "gracekeeper/kube/watch_decoder.h"

namespace gracekeeper::kube {
namespace {

using Json = nlohmann::json;

const std::vector<std::string> kPaths = {"metadata.name", "metadata.managedFields.manager",
                                         "spec.template.spec.containers.ports", "spec.replicas"};

Json deployment() {
  return Json::parse(R"({
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "shop", "uid": "u-1",
      "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}},
                        {"manager": "gracekeeper", "operation": "Apply"}]},
    "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
      "template": {"metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [
          {"name": "app", "image": "web:1", "ports": [{"containerPort": 8080}], "env": []},
          "not a container"]}}},
    "status": {"replicas": 3}})");
}

// What kPaths keep of deployment().
Json filtered_deployment() {
  return Json::parse(R"({
    "metadata": {"name": "web", "managedFields": [{"manager": "kubectl"}, {"manager": "gracekeeper"}]},
    "spec": {"replicas": 3,
      "template": {"spec": {"containers": [{"ports": [{"containerPort": 8080}]}, "not a container"]}}}})");
}

// Parses `text` as a List page as the informer does (JsonScanner, then
// nlohmann where it leaves the page): the filtered items, in order.
std::vector<Json> read_items(const std::string& text, const FieldSet& fields,
                             Json* root = nullptr) {
  std::vector<Json> items;
  detail::FilteringReader reader("items", fields, [&](Json&& item) { items.push_back(item); });
  EXPECT_TRUE(detail::parse(text, reader)) << reader.error();
  if (root) *root = reader.root();
  return items;
}

TEST(FieldSet, KeepsWhatThePathsNameThroughArrays) {
  EXPECT_EQ(FieldSet(kPaths).filter(deployment()), filtered_deployment());
}

TEST(FieldSet, WithoutPathsKeepsEverything) {
  FieldSet all;
  EXPECT_TRUE(all.keeps_everything());
  EXPECT_EQ(all.filter(deployment()), deployment());
}

TEST(FieldSet, AValueOfAnotherTypeIsKeptWholeForTheReaderToReport) {
  const FieldSet fields(kPaths);
  Json odd = deployment();
  odd["spec"] = "three replicas";
  odd["metadata"]["managedFields"] = 7;
  Json want = filtered_deployment();
  want["spec"] = "three replicas";
  want["metadata"]["managedFields"] = 7;
  EXPECT_EQ(fields.filter(odd), want);
}

TEST(FieldSet, AShorterPathKeepsTheWholeValue) {
  const FieldSet fields({"spec.replicas", "spec", "metadata.name", "spec.template.spec"});
  Json want = deployment();
  want.erase("apiVersion");
  want.erase("kind");
  want.erase("status");
  want["metadata"] = {{"name", "web"}};
  EXPECT_EQ(fields.filter(deployment()), want);
}

TEST(FilteringReader, BuildsOnlyTheNamedMembersOfEachItem) {
  Json list = {{"kind", "DeploymentList"},
               {"metadata", {{"resourceVersion", "42"}, {"continue", "c"}}},
               {"items", {deployment(), deployment()}}};
  Json root;
  auto items = read_items(list.dump(), FieldSet(kPaths), &root);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0], filtered_deployment());
  EXPECT_EQ(items[1], filtered_deployment());
  // The List's own members are kept whole, without its items.
  EXPECT_EQ(root, (Json{{"kind", "DeploymentList"},
                        {"metadata", {{"resourceVersion", "42"}, {"continue", "c"}}},
                        {"items", Json::array()}}));
}

// The reader and FieldSet::filter agree on every document: random JSON
// trees over the same member names as the paths, so that paths meet arrays,
// scalars and objects at every level.
TEST(FilteringReader, AgreesWithFilterOnRandomDocuments) {
  std::mt19937 random(20261201);
  const std::vector<std::string> names = {"metadata",   "name",  "spec",          "template",
                                          "containers", "ports", "managedFields", "manager",
                                          "replicas",   "x"};
  std::function<Json(int)> make = [&](int depth) -> Json {
    switch (depth > 5 ? random() % 4 : random() % 7) {
      case 0:
        return nullptr;
      case 1:
        return static_cast<int>(random() % 100);
      case 2:
        return names[random() % names.size()];
      case 3:
        return 1.5;
      case 4:
      case 5: {
        Json o = Json::object();
        for (unsigned i = random() % 5; i > 0; --i)
          o[names[random() % names.size()]] = make(depth + 1);
        return o;
      }
      default: {
        Json a = Json::array();
        for (unsigned i = random() % 4; i > 0; --i) a.push_back(make(depth + 1));
        return a;
      }
    }
  };
  const FieldSet fields(kPaths);
  // Refuses the objects whose (filtered) metadata has a name: "managedFields"
  // and "containers" sort before "metadata", so some members are built
  // before the refusal and must go again.
  const FieldSet gated(kPaths, [](const Json& metadata) { return !metadata.contains("name"); });
  int refused = 0;
  for (int i = 0; i < 2000; ++i) {
    Json item = make(0);
    if (i % 2 == 0) {  // an object with metadata, so that the gate has something to decide
      if (!item.is_object()) item = Json::object();
      Json metadata = Json::object();
      for (unsigned k = random() % 4; k > 0; --k)
        metadata[names[random() % names.size()]] = make(2);
      if (random() % 2) metadata["name"] = "web";
      item["metadata"] = metadata;
      item["spec"] = make(1);
    }
    const std::string page = Json{{"items", Json::array({item})}}.dump();
    auto items = read_items(page, fields);
    ASSERT_EQ(items.size(), 1u);
    ASSERT_EQ(items[0], fields.filter(item)) << item.dump();
    items = read_items(page, gated);
    ASSERT_EQ(items.size(), 1u);
    ASSERT_EQ(items[0], gated.filter(item)) << item.dump();
    refused += gated.filter(item) != fields.filter(item);
  }
  EXPECT_GT(refused, 20);  // the gate was put to the test
}

bool named_web(const Json& metadata) {
  return metadata.value("name", "") == "web";
}

TEST(FieldSet, AnObjectWantedRefusesKeepsOnlyItsMetadata) {
  Json other = deployment();
  other["metadata"]["name"] = "api";
  const FieldSet fields(kPaths, named_web);
  EXPECT_FALSE(fields.keeps_everything());
  EXPECT_EQ(fields.filter(deployment()), filtered_deployment());
  Json want = Json::object();
  want["metadata"] = FieldSet(kPaths).filter(other)["metadata"];
  EXPECT_EQ(fields.filter(other), want);
  // Without metadata (or with metadata of another type) there is nothing to ask.
  Json bare = deployment();
  bare.erase("metadata");
  EXPECT_EQ(fields.filter(bare), FieldSet(kPaths).filter(bare));
  bare["metadata"] = "web";
  EXPECT_EQ(fields.filter(bare), FieldSet(kPaths).filter(bare));
  // Without paths, wanted still reduces what it refuses.
  EXPECT_EQ(FieldSet({}, named_web).filter(other), (Json{{"metadata", other["metadata"]}}));
  EXPECT_EQ(FieldSet({}, named_web).filter(deployment()), deployment());
}

TEST(FilteringReader, SkipsTheRestOfAnItemWantedRefuses) {
  Json other = deployment();
  other["metadata"]["name"] = "api";
  const FieldSet fields(kPaths, named_web);
  // Text order as the API server writes it: metadata, then spec and status.
  auto items = read_items(
      R"({"items":[)" + other.dump() + "," + deployment().dump() + "," + other.dump() + "]}",
      fields);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0], fields.filter(other));
  EXPECT_EQ(items[0].size(), 1u);  // metadata alone
  EXPECT_EQ(items[1], filtered_deployment());
  EXPECT_EQ(items[2], fields.filter(other));
}

TEST(WatchDecoder, BuildsOnlyTheNamedMembersButReadsAnErrorWhole) {
  const FieldSet fields(kPaths);
  WatchDecoderOptions options;
  options.fields = &fields;
  WatchDecoder decoder(options);
  Json status = {{"kind", "Status"}, {"code", 410}, {"reason", "Expired"}, {"message", "too old"}};
  ASSERT_TRUE(decoder.feed(Json{{"type", "MODIFIED"}, {"object", deployment()}}.dump() + "\n" +
                           Json{{"type", "ERROR"}, {"object", status}}.dump() + "\n"));
  auto modified = decoder.next();
  ASSERT_TRUE(modified);
  EXPECT_EQ(modified->object, filtered_deployment());
  auto error = decoder.next();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->object, status);
  ASSERT_TRUE(error->status);
  EXPECT_EQ(error->status->code, 410);
}

TEST(WatchDecoder, AnObjectWantedRefusesIsItsMetadataAlone) {
  const FieldSet fields(kPaths, named_web);
  WatchDecoderOptions options;
  options.fields = &fields;
  WatchDecoder decoder(options);
  Json other = deployment();
  other["metadata"]["name"] = "api";
  other["metadata"]["resourceVersion"] = "7";
  ASSERT_TRUE(decoder.feed(Json{{"type", "MODIFIED"}, {"object", other}}.dump() + "\n" +
                           Json{{"type", "ADDED"}, {"object", deployment()}}.dump() + "\n"));
  auto refused = decoder.next();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->object, fields.filter(other));
  EXPECT_EQ(refused->object.size(), 1u);
  auto wanted = decoder.next();
  ASSERT_TRUE(wanted);
  EXPECT_EQ(wanted->object, filtered_deployment());
}

TEST(WatchDecoder, FilteredMalformedLineIsStillAnError) {
  const FieldSet fields(kPaths);
  WatchDecoderOptions options;
  options.fields = &fields;
  WatchDecoder decoder(options);
  auto fed = decoder.feed("{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":}}}\n");
  ASSERT_FALSE(fed);
  EXPECT_EQ(fed.error().kind, WatchErrorKind::MalformedJson);
}

}  // namespace
}  // namespace gracekeeper::kube
