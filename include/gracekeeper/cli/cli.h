// The command line: run, plan, check, version. `main` returns the process
// exit code; streams are parameters so the commands are testable in-process.
#pragma once

#include <iostream>
#include <span>
#include <string_view>

namespace gracekeeper::cli {

struct Streams {
  std::istream& in;
  std::ostream& out;
  std::ostream& err;
};

// Exit codes of `check` and `plan` (docs/api.md, "Command line").
inline constexpr int kExitOk = 0;
inline constexpr int kExitFindings = 1;
inline constexpr int kExitUsage = 2;

int main(std::span<const std::string_view> args, Streams streams);
inline int main(std::span<const std::string_view> args) {
  return main(args, Streams{std::cin, std::cout, std::cerr});
}

}  // namespace gracekeeper::cli
