// Flag parsing for the offline commands. Small on purpose: the flags are few
// and every mistake must produce a message that names the flag.
#pragma once

#include <expected>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gracekeeper::cli {

struct OfflineOptions {
  std::vector<std::string> files;         // -f, repeatable; "-" is stdin
  std::vector<std::string> policy_files;  // --policy, repeatable
  std::optional<double> propagation_seconds;
  std::string output;         // plan: yaml|json, check: text|json
  bool all = false;           // every Deployment, not only opted-in ones
  int kubernetes_minor = 30;  // --kubernetes-version 1.N: native sleep from 1.30
  bool help = false;
};

// Parses the arguments after the command name. `command` is "plan" or "check".
std::expected<OfflineOptions, std::string> parse_offline_args(
    std::string_view command, std::span<const std::string_view> args);

std::string offline_usage(std::string_view command);

}  // namespace gracekeeper::cli
