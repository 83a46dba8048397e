// Kubernetes' times as text: the one parser and the two formatters.
#include "gracekeeper/core/time.h"

#include <gtest/gtest.h>

namespace gracekeeper::core {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::system_clock;

const SystemTime kNow = std::chrono::sys_days(std::chrono::year{2026} / 12 / 1) + 18h;

TEST(ParseRfc3339, TheFormsKubernetesWrites) {
  EXPECT_EQ(parse_rfc3339("2026-12-01T18:00:00Z"), kNow);
  EXPECT_EQ(parse_rfc3339("2026-12-01t18:00:00z"), kNow);
  EXPECT_EQ(parse_rfc3339("2026-12-01T18:00:00.25Z"), kNow + 250ms);
  EXPECT_EQ(parse_rfc3339("2026-12-01T18:00:00.123456Z"), kNow + 123456us);
  EXPECT_EQ(parse_rfc3339("2026-12-01T18:00:00.123456789Z"), kNow + 123456789ns);
  EXPECT_EQ(parse_rfc3339("2026-12-01T18:00:00.1234567891Z"), kNow + 123456789ns);
  EXPECT_EQ(parse_rfc3339("2026-12-01T19:30:00+01:30"), kNow);
  EXPECT_EQ(parse_rfc3339("2026-12-01T17:00:00-01:00"), kNow);
  EXPECT_EQ(parse_rfc3339("2026-12-01T18:30:00.5+00:30"), kNow + 500ms);
  EXPECT_EQ(parse_rfc3339("1969-12-31T23:59:59Z"), SystemTime(-1s));
}

TEST(ParseRfc3339, GarbageIsRefusedNotGuessed) {
  for (const char* bad :
       {"", "now", "2026-12-01", "2026-12-01T18:00:00", "2026-12-01 18:00:00Z",
        "2026-13-01T18:00:00Z", "2026-02-30T18:00:00Z", "2026-12-01T24:00:00Z",
        "2026-12-01T18:60:00Z", "2026-12-01T18:00:60Z", "2026-12-01T18:00:00.Z",
        "2026-12-01T18:00:00Zjunk", "1764612000", "2026-12-01T18:00:00+0100",
        "2026-12-01T18:00:00+24:00", "-026-12-01T18:00:00Z", "2026-12-01T18:00:00.5"}) {
    EXPECT_FALSE(parse_rfc3339(bad)) << bad;
  }
}

// Nanoseconds since 1970 in 64 bits reach 1678-2262: a year outside
// 1700-2200 is refused, not wrapped around.
TEST(ParseRfc3339, AYearWhoseNanosecondsDoNotFitIsRefused) {
  for (const char* far : {"0001-01-01T00:00:00Z", "1677-09-21T00:12:43Z", "1699-12-31T23:59:59Z",
                          "2201-01-01T00:00:00Z", "2262-04-12T00:00:00Z", "9999-12-31T23:59:59Z"}) {
    EXPECT_FALSE(parse_rfc3339(far)) << far;
  }
  EXPECT_TRUE(parse_rfc3339("1700-01-01T00:00:00Z"));
  EXPECT_TRUE(parse_rfc3339("2200-12-31T23:59:59Z"));
}

TEST(FormatRfc3339, WholeSecondsInUtc) {
  EXPECT_EQ(format_rfc3339(kNow), "2026-12-01T18:00:00Z");
  EXPECT_EQ(format_rfc3339(kNow + 999ms), "2026-12-01T18:00:00Z");  // dropped, not rounded
  EXPECT_EQ(format_rfc3339(SystemTime(-1s)), "1969-12-31T23:59:59Z");
}

TEST(FormatRfc3339Micro, SixFractionDigits) {
  EXPECT_EQ(format_rfc3339_micro(kNow), "2026-12-01T18:00:00.000000Z");
  EXPECT_EQ(format_rfc3339_micro(kNow + 123456789ns), "2026-12-01T18:00:00.123456Z");
  EXPECT_EQ(format_rfc3339_micro(SystemTime(-1us)), "1969-12-31T23:59:59.999999Z");
}

TEST(Rfc3339, WhatIsFormattedParsesBack) {
  for (auto t : {kNow, kNow + 1s, kNow + 86'399s, SystemTime(0s)}) {
    EXPECT_EQ(parse_rfc3339(format_rfc3339(t)), t);
  }
  const SystemTime micro = kNow + 123456us;
  EXPECT_EQ(parse_rfc3339(format_rfc3339_micro(micro)), micro);
}

}  // namespace
}  // namespace gracekeeper::core
