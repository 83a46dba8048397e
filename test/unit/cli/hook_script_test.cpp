// Issue 45 item 1: hook scripts read as the shell runs them, end to end.
// Each hook below was once counted as a wait, and `check` passed it; each is
// now PreStopUnknownLength. A hook whose `exec` has only redirections runs
// on after it, and the grace `plan` gives covers the whole 75 s.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gracekeeper/cli/cli.h"

namespace gracekeeper::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int code = 0;
  std::string out;
  std::string err;
};

Result run(std::vector<std::string> args) {
  std::vector<std::string_view> views(args.begin(), args.end());
  std::istringstream in;
  std::ostringstream out, err;
  const int code = main(views, Streams{in, out, err});
  return {code, out.str(), err.str()};
}

// The articles' Deployment (grace 30, drain 30) with one exec preStop hook;
// with the default policy the wait is 15 s and the reserve 10 s.
std::string deployment_with_hook(const std::string& command) {
  return R"(apiVersion: apps/v1
kind: Deployment
metadata:
  name: checkout
  namespace: shop-prod
  annotations:
    gracekeeper.dev/enabled: "true"
    gracekeeper.dev/drain-seconds: "30"
spec:
  replicas: 3
  selector:
    matchLabels: {app: checkout}
  template:
    metadata:
      labels: {app: checkout}
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: checkout
        image: checkout:1.4.2
        ports:
        - containerPort: 8080
        lifecycle:
          preStop:
            exec:
              command: )" +
         command + R"(
        readinessProbe:
          httpGet: {path: /actuator/health/readiness, port: 8080}
)";
}

class HookScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gk-hook-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ::setenv("SOURCE_DATE_EPOCH", "1790000000", 1);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }

  fs::path dir_;
};

TEST_F(HookScriptTest, HooksThatMayActBeforeTheSleepAreOfUnknownLength) {
  const char* hooks[] = {
      R"j(["sh", "-nc", "sleep 30"])j",
      R"j(["bash", "-rc", "/bin/sleep 30"])j",
      R"j(["sh", "-c", "X=$(nginx -s quit) sleep 30"])j",
      R"j(["sh", "-c", "X=$(nginx -s quit); sleep 20"])j",
      R"j(["sh", "-c", "sleep 20 >$(nginx -s quit)"])j",
      R"j(["bash", "-c", "echo quit > /dev/tcp/127.0.0.1/9000; sleep 30"])j",
      R"j(["sh", "-c", "printf x > /run/app.ctl; sleep 20"])j",
  };
  int i = 0;
  for (const char* hook : hooks) {
    SCOPED_TRACE(hook);
    const auto file = write("hook-" + std::to_string(i) + ".yaml", deployment_with_hook(hook));
    auto checked = run({"check", "-f", file});
    EXPECT_THAT(checked.out, HasSubstr("PreStopUnknownLength")) << checked.out << checked.err;
    // Planned (the user's hook is kept), `check` still warns: never the wait.
    auto planned = run({"plan", "-f", file});
    ASSERT_EQ(planned.code, 0) << planned.err;
    EXPECT_THAT(planned.err, HasSubstr("PreStopUnknownLength"));
    EXPECT_THAT(planned.err, HasSubstr("not known to hold"));
    auto again =
        run({"check", "-f", write("planned-" + std::to_string(i++) + ".yaml", planned.out)});
    EXPECT_EQ(again.code, 0) << again.out << again.err;
    EXPECT_THAT(again.out, HasSubstr("warning PreStopUnknownLength"));
  }
}

TEST_F(HookScriptTest, AnExecWithOnlyRedirectionsDoesNotEndTheHook) {
  const auto file = write(
      "exec.yaml",
      deployment_with_hook(R"j(["sh", "-c", "sleep 15; exec >/proc/1/fd/1 2>&1; sleep 60"])j"));
  auto planned = run({"plan", "-f", file});
  ASSERT_EQ(planned.code, 0) << planned.err;
  // 75 s of hook + 30 s of drain + 10 s of reserve.
  EXPECT_THAT(planned.err, HasSubstr("terminationGracePeriodSeconds: 30s -> 115s"));
  EXPECT_THAT(planned.err, Not(HasSubstr("PreStopUnknownLength")));
  EXPECT_THAT(planned.out, HasSubstr("terminationGracePeriodSeconds: 115"));
  auto checked = run({"check", "-f", write("planned.yaml", planned.out)});
  EXPECT_EQ(checked.code, 0) << checked.out << checked.err;
  EXPECT_THAT(checked.out, Not(HasSubstr("PreStopTooShort")));
}

}  // namespace
}  // namespace gracekeeper::cli
