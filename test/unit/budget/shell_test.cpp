// Issue 18 item 3: which entrypoints leave a shell as PID 1 (ShellFormEntrypoint).
// Issue 45 item 1: how long an exec preStop hook runs (HookLength).
#include "gracekeeper/budget/shell.h"

#include <gtest/gtest.h>

namespace gracekeeper::budget {
namespace {

struct Form {
  std::vector<std::string> argv;
  ShellForm expected;
};

TEST(ShellForm, TableOfEntrypoints) {
  using enum ShellForm;
  const std::vector<Form> forms = {
      // Flagged: the shell stays PID 1.
      {{"sh", "-c", "java -jar /app.jar"}, ShellStays},  // sh may be dash < 0.5.11
      {{"/bin/sh", "-c", "java -jar /app.jar"}, ShellStays},
      {{"sh", "-ec", "java -jar /app.jar"}, ShellStays},
      {{"sh", "-e", "-c", "java -jar /app.jar"}, ShellStays},
      {{"sh", "-c", "-e", "java -jar /app.jar"}, ShellStays},
      {{"sh", "-xc", "java -jar /app.jar"}, ShellStays},
      {{"dash", "-c", "java -jar /app.jar"}, ShellStays},
      {{"/usr/bin/env", "sh", "-c", "java -jar /app.jar"}, ShellStays},
      {{"bash", "-c", "java -jar /app.jar; echo done"}, ShellStays},
      {{"bash", "-c", "cd /app && java -jar app.jar"}, ShellStays},
      {{"bash", "-lc", "java -jar /app.jar"}, ShellStays},  // a profile may set a trap
      {{"bash", "--login", "-c", "java -jar /app.jar"}, ShellStays},
      {{"/bin/bash", "-c", "java -jar /app.jar > /var/log/app.log"}, ShellStays},
      {{"bash", "-c", "java -jar /app.jar | tee /log"}, ShellStays},
      {{"sh", "-c", "exec java -jar /app.jar | tee /log"}, ShellStays},  // exec in a pipeline
      {{"sh", "-c", "exec java -jar /app.jar &"}, ShellStays},
      {{"sh", "-c", "test -f /x || exec java -jar /app.jar"}, ShellStays},
      {{"sh", "-c", "if true; then exec java -jar /app.jar; fi"}, ShellStays},
      {{"sh", "-c", "(exec java -jar /app.jar)"}, ShellStays},
      {{"sh", "-c", "exec >/var/log/app.log 2>&1; java -jar /app.jar"}, ShellStays},
      {{"sh", "-c", "echo 'exec java'; java -jar /app.jar"}, ShellStays},
      {{"sh", "-c", "execute-me --now"}, ShellStays},
      {{"sh", "-c", "java -jar \"/app.jar"}, ShellStays},  // unterminated quote: unsure
      {{"bash", "-c", "java -jar $(cat /jar-path)"}, ShellStays},
      {{"bash", "-c", "cd /app"}, ShellStays},  // a builtin: nothing is exec'd
      {{"busybox", "sh", "-c", "sleep 5; java -jar /app.jar"}, ShellStays},
      // Not flagged: the app replaces the shell for certain.
      {{"sh", "-c", "exec java -jar /app.jar"}, Replaced},
      {{"sh", "-c", "  exec java -jar /app.jar"}, Replaced},
      {{"sh", "-ec", "set -e; exec java -jar /app.jar"}, Replaced},
      {{"/bin/sh", "-c", "cd /app && exec java -jar app.jar"}, Replaced},
      {{"sh", "-c", "export X=$(cat /etc/x); exec java -jar /app.jar"}, Replaced},
      {{"sh", "-c", "set -e\nmkdir -p /tmp/x\nexec java -jar /app.jar\n"}, Replaced},
      {{"sh", "-c", "# start\nexec java -jar /app.jar"}, Replaced},
      {{"sh", "-c", "exec 2>&1 java -jar /app.jar"}, Replaced},
      {{"sh", "-c", "JAVA_OPTS=-Xmx1g exec java -jar /app.jar"}, Replaced},
      {{"sh", "-c", "exec java -jar /app.jar || echo failed"}, Replaced},
      {{"sh", "-c", "exec \"$@\"", "--", "java", "-jar", "/app.jar"}, Replaced},
      {{"dash", "-c", "exec java -jar /app.jar"}, Replaced},
      {{"/usr/bin/env", "bash", "-c", "exec java -jar /app.jar"}, Replaced},
      // bash and busybox ash exec a lone simple command themselves.
      {{"bash", "-c", "java -jar /app.jar"}, Replaced},
      {{"/bin/bash", "-ec", "java -jar /app.jar --port=$PORT"}, Replaced},
      {{"bash", "-c", "JAVA_OPTS=-Xmx1g java -jar \"/app.jar\"\n"}, Replaced},
      {{"ash", "-c", "java -jar /app.jar"}, Replaced},
      {{"busybox", "sh", "-c", "java -jar /app.jar"}, Replaced},
      // Not a shell with -c: nothing to judge here.
      {{"java", "-jar", "/app.jar"}, NotShell},
      {{"sh", "/entrypoint.sh"}, NotShell},
      {{"bash", "-e", "/entrypoint.sh"}, NotShell},
      {{"sh", "-c"}, NotShell},
      {{"/usr/bin/env"}, NotShell},
      {{"shellcheck", "-c", "x"}, NotShell},
      {{}, NotShell},
  };
  ASSERT_GE(forms.size(), 20u);
  for (const auto& form : forms) {
    std::string shown;
    for (const auto& arg : form.argv) shown += "[" + arg + "] ";
    EXPECT_EQ(classify_entrypoint(form.argv), form.expected) << shown;
  }
}

// Issue 45 item 1: hook scripts read as the shell runs them. Anything that may
// act on the app before the first sleep (a shell flag whose effect is not
// known, an assignment, a redirection that is not harmless) leaves the wait
// unknown; an `exec` with only redirections does not end the script.
struct Hook {
  std::vector<std::string> command;
  // nullopt: the length is unknown (exec_hook_length gives nullopt).
  std::optional<HookLength> expected;
};

constexpr std::optional<std::int64_t> kUnknownWait = std::nullopt;

HookLength waits(std::optional<std::int64_t> wait_ms, std::int64_t length_ms, bool only_sleeps) {
  return HookLength{wait_ms, length_ms, only_sleeps};
}

void expect_hooks(const std::vector<Hook>& hooks) {
  for (const auto& hook : hooks) {
    std::string shown;
    for (const auto& arg : hook.command) shown += "[" + arg.substr(0, 80) + "] ";
    SCOPED_TRACE(shown);
    const auto length = exec_hook_length(hook.command);
    ASSERT_EQ(length.has_value(), hook.expected.has_value());
    if (!length) continue;
    EXPECT_EQ(length->wait_ms, hook.expected->wait_ms);
    EXPECT_EQ(length->length_ms, hook.expected->length_ms);
    EXPECT_EQ(length->only_sleeps, hook.expected->only_sleeps);
  }
}

// `sh -nc` runs nothing (noexec); `bash -r` refuses `/bin/sleep` and exits
// 1; -l and -i read profiles. Only -c, -e, -u, -x, -v are known.
TEST(HookLength, OnlyShellFlagsOfKnownEffectAreRead) {
  expect_hooks({
      {{"sh", "-nc", "sleep 30"}, std::nullopt},
      {{"sh", "-n", "-c", "sleep 30"}, std::nullopt},
      {{"bash", "-rc", "/bin/sleep 30"}, std::nullopt},
      {{"bash", "-r", "-c", "sleep 30"}, std::nullopt},
      {{"bash", "-lc", "sleep 30"}, std::nullopt},
      {{"bash", "-ic", "sleep 30"}, std::nullopt},
      {{"sh", "-fc", "sleep 30"}, std::nullopt},
      {{"sh", "-c", "-n", "sleep 30"}, std::nullopt},
      {{"sh", "+c", "sleep 30"}, std::nullopt},
      {{"bash", "--norc", "-c", "sleep 30"}, std::nullopt},
      {{"sh", "-o", "noexec", "-c", "sleep 30"}, std::nullopt},
      // Known: -c, and -e, -u, -x, -v in any cluster, or + to unset them.
      {{"sh", "-c", "sleep 30"}, waits(30'000, 30'000, true)},
      {{"sh", "-ec", "sleep 30"}, waits(30'000, 30'000, true)},
      {{"bash", "-euxvc", "sleep 30"}, waits(30'000, 30'000, true)},
      {{"sh", "-e", "-c", "sleep 30"}, waits(30'000, 30'000, true)},
      {{"sh", "+x", "-c", "sleep 30"}, waits(30'000, 30'000, true)},
      {{"sh", "-c", "-u", "sleep 30"}, waits(30'000, 30'000, true)},
  });
}

// A command substitution in an assignment or a redirection target runs
// before the command; an assignment may also change which sleep runs.
TEST(HookLength, AssignmentsAndRedirectionTargetsRunBeforeTheSleep) {
  expect_hooks({
      {{"sh", "-c", "X=$(nginx -s quit) sleep 30"}, waits(kUnknownWait, 30'000, false)},
      {{"sh", "-c", "X=$(nginx -s quit); sleep 20"}, waits(kUnknownWait, 20'000, false)},
      {{"sh", "-c", "X=`nginx -s quit`; sleep 20"}, waits(kUnknownWait, 20'000, false)},
      {{"sh", "-c", "sleep 20 >$(nginx -s quit)"}, waits(kUnknownWait, 20'000, false)},
      {{"sh", "-c", "sleep 20 2>\"$(nginx -s quit)\""}, waits(kUnknownWait, 20'000, false)},
      {{"sh", "-c", "PATH=/nowhere sleep 30"}, waits(kUnknownWait, 30'000, false)},
      {{"sh", "-c", "LD_PRELOAD=/quit.so sleep 30"}, waits(kUnknownWait, 30'000, false)},
      {{"sh", "-c", "PATH=/nowhere; sleep 30"}, waits(kUnknownWait, 30'000, false)},
      {{"sh", "-c", "env PATH=/nowhere sleep 30"}, waits(kUnknownWait, 30'000, false)},
      {{"env", "LD_PRELOAD=/quit.so", "sleep", "30"}, waits(kUnknownWait, 30'000, false)},
      {{"/usr/bin/env", "-i", "BASH_ENV=/quit.sh", "bash", "-c", "sleep 30"},
       waits(kUnknownWait, 30'000, false)},
      {{"sh", "-c", "exit $(nginx -s quit)"}, waits(kUnknownWait, 0, false)},
      {{"sh", "-c", ": $(nginx -s quit); sleep 20"}, waits(kUnknownWait, 20'000, false)},
      // After the first sleep, the same only ends the wait.
      {{"sh", "-c", "sleep 10; X=$(nginx -s quit); sleep 20"}, waits(10'000, 30'000, false)},
      // `env -i` alone only empties the environment.
      {{"/usr/bin/env", "-i", "sleep", "3"}, waits(3'000, 3'000, true)},
  });
}

// A builtin (or any command) with a redirection may tell the app to stop
// before the sleep: bash's /dev/tcp, a control file or FIFO. Only /dev/null
// and copies or closes of fds 0-2 are harmless.
TEST(HookLength, RedirectionsMayTellTheAppToStop) {
  expect_hooks({
      {{"bash", "-c", "echo quit > /dev/tcp/127.0.0.1/9000; sleep 30"},
       waits(kUnknownWait, 30'000, false)},
      {{"sh", "-c", "printf x > /run/app.ctl; sleep 20"}, waits(kUnknownWait, 20'000, false)},
      {{"sh", "-c", "echo quit >>/run/app.fifo; sleep 20"}, waits(kUnknownWait, 20'000, false)},
      {{"sh", "-c", ": > /run/app.ctl; sleep 20"}, waits(kUnknownWait, 20'000, false)},
      {{"sh", "-c", "true </run/app.fifo; sleep 20"}, waits(kUnknownWait, 20'000, false)},
      {{"sh", "-c", "> /run/app.ctl; sleep 20"}, waits(kUnknownWait, 20'000, false)},
      {{"sh", "-c", "sleep 20 > /run/app.ctl"}, waits(kUnknownWait, 20'000, false)},
      {{"sh", "-c", "sleep 20 >&3; nginx -s quit"}, waits(kUnknownWait, 20'000, false)},
      {{"sh", "-c", "sleep 20 > 1"}, waits(kUnknownWait, 20'000, false)},  // a file named 1
      {{"sh", "-c", "exit 0 > /run/app.ctl"}, waits(kUnknownWait, 0, false)},
      // Harmless: /dev/null, and copies or closes of 0, 1, 2.
      {{"sh", "-c", "echo bye >/dev/null 2>&1; sleep 20"}, waits(20'000, 20'000, true)},
      {{"sh", "-c", "sleep 20 </dev/null >>'/dev/null' 2>&-"}, waits(20'000, 20'000, true)},
      {{"sh", "-c", "echo bye >&2; sleep 5 1>&2"}, waits(5'000, 5'000, true)},
      {{"sh", "-c", "exec >/dev/null 2>&1; sleep 20"}, waits(20'000, 20'000, true)},
      // Other commands that certainly do nothing, and printf that may fail.
      {{"sh", "-ec", "printf 'bye\\n'; sleep 5"}, waits(5'000, 5'000, true)},
      {{"sh", "-ec", "printf %d x; sleep 5"}, waits(kUnknownWait, 5'000, false)},
      {{"bash", "-c", "printf % && sleep 5"}, waits(kUnknownWait, 5'000, false)},
      {{"sh", "-c", "printf -v X y; sleep 5"}, waits(kUnknownWait, 5'000, false)},
  });
}

// `exec` with only redirections changes the shell's own descriptors and the
// script goes on: this hook runs 75 s, and the grace must cover it. `exec`
// with a program (and `exit`) still ends the script.
TEST(HookLength, AnExecWithOnlyRedirectionsDoesNotEndTheScript) {
  expect_hooks({
      {{"sh", "-c", "sleep 15; exec >/proc/1/fd/1 2>&1; sleep 60"}, waits(15'000, 75'000, false)},
      {{"sh", "-c", "exec >/proc/1/fd/1 2>&1; sleep 60"}, waits(kUnknownWait, 60'000, false)},
      {{"sh", "-c", "exec; sleep 60"}, waits(60'000, 60'000, true)},
      {{"sh", "-c", "sleep 15; exec sleep 5; sleep 60"}, waits(20'000, 20'000, true)},
      {{"sh", "-c", "sleep 15; exec nginx -s quit; sleep 60"}, waits(15'000, 15'000, false)},
      {{"sh", "-c", "sleep 15; exit; sleep 60"}, waits(15'000, 15'000, true)},
  });
}

// Odd input: quotes and substitutions nested deeper than 64 are not
// followed (bounded recursion), never a crash; shallow nesting still reads.
TEST(HookLength, DeepNestingIsUnknownNotACrash) {
  const auto nested = [](int depth, bool closed) {
    std::string script = "sleep 1; X=";
    for (int i = 0; i < depth; ++i) script += "\"$(";
    for (int i = 0; closed && i < depth; ++i) script += ")\"";
    return script;
  };
  expect_hooks({
      {{"sh", "-c", nested(100'000, false)}, std::nullopt},
      {{"sh", "-c", nested(100'000, true)}, std::nullopt},
      {{"sh", "-c", nested(10, true)}, waits(1'000, 1'000, false)},
  });
  EXPECT_EQ(classify_entrypoint({"sh", "-c", nested(100'000, true)}), ShellForm::ShellStays);
}

}  // namespace
}  // namespace gracekeeper::budget
