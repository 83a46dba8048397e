// How long gracekeeper keeps serving after SIGTERM: the flag's lame duck, or
// the propagation figure this replica holds for its own namespace when that
// is longer.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>

#include "gracekeeper/operator/operator.h"

namespace gracekeeper::controller {
namespace {

using std::chrono::seconds;

TEST(LameDuck, TheFlagWhenNothingIsMeasured) {
  const LameDuck lame = lame_duck(seconds(10), std::nullopt);
  EXPECT_EQ(lame.length, seconds(10));
  EXPECT_EQ(lame.from, "flag");
}

TEST(LameDuck, TheFlagWhenTheFigureIsShorter) {
  EXPECT_EQ(lame_duck(seconds(10), 4.2).length, seconds(10));
  EXPECT_EQ(lame_duck(seconds(10), 10.0).from, "flag");
}

TEST(LameDuck, ALongerFigureRoundedUp) {
  const LameDuck lame = lame_duck(seconds(10), 12.1);
  EXPECT_EQ(lame.length, seconds(13));
  EXPECT_EQ(lame.from, "measured");
}

TEST(LameDuck, AFigureThatIsNotANumberIsIgnoredAndAHugeOneBounded) {
  EXPECT_EQ(lame_duck(seconds(10), std::numeric_limits<double>::quiet_NaN()).length, seconds(10));
  EXPECT_EQ(lame_duck(seconds(10), std::numeric_limits<double>::infinity()).length, seconds(10));
  EXPECT_EQ(lame_duck(seconds(10), 1e300).length, seconds(600));
}

}  // namespace
}  // namespace gracekeeper::controller
