// The logger: configure() accepts the formats and levels it names, and
// nothing else.
#include "gracekeeper/log/log.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace gracekeeper::log {
namespace {

TEST(Log, ConfigureAcceptsKnownFormatsAndLevels) {
  for (auto format : {"json", "text"}) {
    for (auto level : {"debug", "info", "warn", "error"}) {
      EXPECT_TRUE(configure(format, level)) << format << " " << level;
    }
  }
  EXPECT_FALSE(configure("xml", "info"));
  EXPECT_FALSE(configure("json", "verbose"));
  EXPECT_TRUE(configure("json", "info"));
}

TEST(Log, WritingBelowTheLevelOrWithFieldsDoesNotThrow) {
  ASSERT_TRUE(configure("json", "error"));
  EXPECT_NO_THROW(info("not shown", {{"k", "v"}}));
  EXPECT_NO_THROW(error("shown", {{"invalid utf-8", "\xff"}}));
  ASSERT_TRUE(configure("json", "info"));
}

TEST(Log, AJsonRecordIsOneLineWhateverItsFieldsHold) {
  ASSERT_TRUE(configure("json", "info"));
  ::testing::internal::CaptureStderr();
  warn("event recorder: creating an event",
       {{"event", "ns/a"}, {"error", "Forbidden (403): \"no\"\nsecond line"}});
  debug("below the level");
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_NE(out.find(R"("level":"warn","msg":"event recorder: creating an event")"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(R"("error":"Forbidden (403): \"no\"\nsecond line")"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace gracekeeper::log
