// How long gracekeeper keeps serving after SIGTERM: the flag's lame duck, or
// the propagation figure this replica holds for its own namespace when that
// is longer.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>

#include "gracekeeper/deployment/propagation_book.h"
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

TEST(PropagationBook, TheLargestFigureOfANamespaceAndOfNoOther) {
  PropagationBook book;
  EXPECT_FALSE(book.largest_in("gracekeeper-system"));
  auto put = [&](const char* key, double seconds) {
    PolicyMeasurement m;
    m.state.seconds = seconds;
    book.put(key, m);
  };
  put("gracekeeper-system/default", 3.5);
  put("gracekeeper-system/webhooks", 7.25);
  put("gracekeeper-system-2/slow", 40);  // a namespace that only starts alike
  put("gracekeeper/slower", 50);
  EXPECT_EQ(book.largest_in("gracekeeper-system"), 7.25);
  EXPECT_EQ(book.largest_in("gracekeeper"), 50);
  EXPECT_FALSE(book.largest_in("shop"));
}

}  // namespace
}  // namespace gracekeeper::controller
