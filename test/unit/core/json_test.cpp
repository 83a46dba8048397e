// The JSON member accessors: a missing member, one of the wrong type and a
// value that is not an object all read as none, for both JSON types.
#include "gracekeeper/core/json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gracekeeper::core {
namespace {

template <class Json>
class JsonMemberTest : public ::testing::Test {};
using JsonTypes = ::testing::Types<nlohmann::json, nlohmann::ordered_json>;
TYPED_TEST_SUITE(JsonMemberTest, JsonTypes);

TYPED_TEST(JsonMemberTest, ReadsWhatIsThereAndNothingElse) {
  const auto object = TypeParam::parse(
      R"({"name":"web","replicas":3,"paused":true,"big":1.5,"neg":-2,"null":null,"n":{"a":1}})");
  EXPECT_EQ(string_member(object, "name"), "web");
  EXPECT_EQ(string_member(object, "replicas"), "");  // not a string
  EXPECT_EQ(string_member(object, "absent"), "");
  EXPECT_EQ(int_member(object, "replicas"), 3);
  EXPECT_EQ(int_member(object, "neg"), -2);
  EXPECT_EQ(int_member(object, "big"), 0);  // not an integer
  EXPECT_EQ(int_member(object, "name", -1), -1);
  EXPECT_EQ(int_member(object, "absent", 7), 7);
  EXPECT_EQ(bool_member(object, "paused"), true);
  EXPECT_EQ(bool_member(object, "null"), std::nullopt);
  ASSERT_NE(member(object, "n"), nullptr);
  EXPECT_EQ(int_member(*member(object, "n"), "a"), 1);
  EXPECT_EQ(member(object, "absent"), nullptr);
}

TYPED_TEST(JsonMemberTest, ANonObjectHasNoMembers) {
  for (const char* text : {"[1,2]", "\"name\"", "3", "null", "true"}) {
    const auto value = TypeParam::parse(text);
    EXPECT_EQ(member(value, "name"), nullptr) << text;
    EXPECT_EQ(string_member(value, "name"), "") << text;
    EXPECT_EQ(int_member(value, "name", 9), 9) << text;
    EXPECT_EQ(bool_member(value, "name"), std::nullopt) << text;
  }
}

}  // namespace
}  // namespace gracekeeper::core
