#include "gracekeeper/budget/types.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>

namespace gracekeeper::budget {
namespace {

TEST(FieldErrorTest, FormatsPathThenMessage) {
  const FieldError error{"spec.preStop.minSeconds", "must be <= maxSeconds (got 30 > 20)"};
  EXPECT_EQ(error.format(), "spec.preStop.minSeconds: must be <= maxSeconds (got 30 > 20)");
}

TEST(FieldErrorTest, WholeObjectErrorHasNoPathPrefix) {
  const FieldError error{"", "expected a ShutdownPolicy object, got array"};
  EXPECT_EQ(error.format(), "expected a ShutdownPolicy object, got array");
}

TEST(FieldErrorTest, ComparesByValue) {
  EXPECT_EQ((FieldError{"a", "b"}), (FieldError{"a", "b"}));
  EXPECT_NE((FieldError{"a", "b"}), (FieldError{"a", "c"}));
}

struct ResolveCase {
  std::string name;
  IntOrPercent value;
  std::int64_t replicas;
  std::int64_t rounded_up;
  std::int64_t rounded_down;
};

void PrintTo(const ResolveCase& c, std::ostream* out) {
  *out << c.name;
}

class IntOrPercentResolveTest : public testing::TestWithParam<ResolveCase> {};

TEST_P(IntOrPercentResolveTest, MatchesDeploymentController) {
  const ResolveCase& c = GetParam();
  EXPECT_EQ(c.value.resolve(c.replicas, /*round_up=*/true), c.rounded_up);
  EXPECT_EQ(c.value.resolve(c.replicas, /*round_up=*/false), c.rounded_down);
}

INSTANTIATE_TEST_SUITE_P(
    Table, IntOrPercentResolveTest,
    testing::Values(
        // A count ignores the replica count.
        ResolveCase{"count_one", {1, false}, 10, 1, 1},
        ResolveCase{"count_above_replicas", {10, false}, 3, 10, 10},
        ResolveCase{"count_zero", {0, false}, 5, 0, 0},
        // Percentages: ceil for maxSurge, floor for maxUnavailable.
        ResolveCase{"quarter_of_ten", {25, true}, 10, 3, 2},
        ResolveCase{"quarter_of_four_is_exact", {25, true}, 4, 1, 1},
        ResolveCase{"one_percent_of_one", {1, true}, 1, 1, 0},
        ResolveCase{"third_of_three", {33, true}, 3, 1, 0},
        ResolveCase{"all", {100, true}, 7, 7, 7}, ResolveCase{"zero_percent", {0, true}, 10, 0, 0},
        ResolveCase{"no_replicas", {50, true}, 0, 0, 0},
        ResolveCase{"over_hundred", {150, true}, 3, 5, 4},
        ResolveCase{"large_deployment", {25, true}, 2147483647, 536870912, 536870911},
        // math.Ceil(-2.5) = -2 and math.Floor(-2.5) = -3, not truncation.
        ResolveCase{"negative_rounds_like_go", {-25, true}, 10, -2, -3}),
    [](const testing::TestParamInfo<ResolveCase>& info) { return info.param.name; });

TEST(IntOrPercentTest, ToString) {
  EXPECT_EQ((IntOrPercent{1, false}).to_string(), "1");
  EXPECT_EQ((IntOrPercent{25, true}).to_string(), "25%");
  EXPECT_EQ((IntOrPercent{0, false}).to_string(), "0");
  EXPECT_EQ((IntOrPercent{100, true}).to_string(), "100%");
}

TEST(IntOrPercentTest, IsZeroAndEquality) {
  EXPECT_TRUE((IntOrPercent{0, false}).is_zero());
  EXPECT_TRUE((IntOrPercent{0, true}).is_zero());
  EXPECT_FALSE((IntOrPercent{1, false}).is_zero());
  EXPECT_EQ((IntOrPercent{25, true}), (IntOrPercent{25, true}));
  EXPECT_NE((IntOrPercent{25, true}), (IntOrPercent{25, false}));
}

}  // namespace
}  // namespace gracekeeper::budget
