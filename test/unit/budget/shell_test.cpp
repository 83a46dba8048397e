// Issue 18 item 3: which entrypoints leave a shell as PID 1 (ShellFormEntrypoint).
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

}  // namespace
}  // namespace gracekeeper::budget
