// Whether a container's entrypoint leaves a shell as PID 1, where SIGTERM
// stops: `sh -c "java -jar app.jar"`. The rule (docs/api.md, "Checks that are
// reported": ShellFormEntrypoint):
// a shell run with -c is fine when its command string certainly replaces the
// shell with the app, and flagged whenever that is not certain.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gracekeeper::budget {

enum class ShellForm {
  NotShell,   // no shell with -c (a program, or a shell reading a script file)
  Replaced,   // a shell with -c whose command string certainly execs the app
  ShellStays  // a shell with -c that (as far as can be told) stays PID 1
};

// `argv` is the container's command followed by its args.
ShellForm classify_entrypoint(const std::vector<std::string>& argv);

// How long an exec preStop hook runs, read as the kubelet runs it (docs/api.md,
// "The budget"): `sleep ARG...` (also `/bin/sleep`, `busybox sleep`,
// `/usr/bin/env sleep`), or a shell (`sh`, `bash`, `ash`, `dash`) run with
// -c, and no flag but -e, -u, -x, -v, on a script of simple commands joined
// by `;`, `&&` or newlines.
struct HookLength {
  // Before the app is told to stop: the sleeps before the first other
  // command, in milliseconds rounded down. nullopt when a command other than
  // a sleep comes first: it may stop the app at once, or not. An assignment
  // or a redirection (but to /dev/null or a copy of fds 0-2) on a command is
  // such a command too: it runs before the command does.
  std::optional<std::int64_t> wait_ms;
  // Every sleep of the hook, in milliseconds rounded up: the least time the
  // hook runs. Exact when `only_sleeps`.
  std::int64_t length_ms = 0;
  // Nothing but sleeps (and commands that do nothing, such as `true`).
  bool only_sleeps = true;
};

// nullopt when the length cannot be known: not a sleep or such a script, a
// sleep argument coreutils would not read as NUMBER[smhd] (`inf`, `0x10`,
// `-1`, `1e3`, a variable), or any other shell construct (`||`, pipes, the
// background, `if`, loops, subshells, substitutions in a sleep's argument),
// or a shell flag whose effect is not known (`-n` runs nothing, `-r` refuses
// `/bin/sleep`).
std::optional<HookLength> exec_hook_length(const std::vector<std::string>& command);

}  // namespace gracekeeper::budget
