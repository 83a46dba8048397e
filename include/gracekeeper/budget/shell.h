// Whether a container's entrypoint leaves a shell as PID 1, where SIGTERM
// stops: `sh -c "java -jar app.jar"`. The rule (API.md, ShellFormEntrypoint):
// a shell run with -c is fine when its command string certainly replaces the
// shell with the app, and flagged whenever that is not certain.
#pragma once

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

}  // namespace gracekeeper::budget
