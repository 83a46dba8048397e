// Flag parsing for the offline commands. Small on purpose: the flags are few
// and every mistake must produce a message that names the flag.
#pragma once

#include <expected>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/offline/options.h"

namespace gracekeeper::cli {

// Walks command-line arguments: "--flag value", "--flag=value", bare flags
// and positional arguments. Errors name the flag.
class FlagCursor {
 public:
  explicit FlagCursor(std::span<const std::string_view> args) : args_(args) {}
  // Moves to the next argument; false at the end.
  bool next();
  // The current argument without any "=value".
  std::string_view flag() const { return flag_; }
  // The flag's value: after '=', else the next argument.
  std::expected<std::string_view, std::string> value();
  // An error when a value was given to a flag that takes none.
  std::expected<void, std::string> no_value() const;

 private:
  std::span<const std::string_view> args_;
  std::size_t next_ = 0;
  std::string_view flag_;
  std::optional<std::string_view> inline_value_;
};

// `plan`'s and `check`'s flags: what the offline engine reads, and how the
// command writes its output.
struct OfflineOptions : offline::Options {
  std::string output;  // plan: yaml|json, check: text|json
  bool help = false;
};

// Parses the arguments after the command name. `command` is "plan" or "check".
std::expected<OfflineOptions, std::string> parse_offline_args(
    std::string_view command, std::span<const std::string_view> args);

std::string offline_usage(std::string_view command);

// `gracekeeper run`: flags as in docs/api.md ("Command line"); 0 on success, else
// the exit code, with messages written to `err`.
int run_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace gracekeeper::cli
