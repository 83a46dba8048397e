#include "args.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

namespace gracekeeper::cli {
namespace {

std::optional<double> parse_seconds(std::string_view text) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || value < 0 ||
      value > 3600) {
    return std::nullopt;
  }
  return value;
}

std::optional<int> parse_minor(std::string_view text) {
  if (text.starts_with("v")) text.remove_prefix(1);
  if (!text.starts_with("1.")) return std::nullopt;
  text.remove_prefix(2);
  int minor = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), minor);
  // "1.31" or "1.31.2"
  if (ec != std::errc() || minor < 0 || minor > 1000 ||
      (end != text.data() + text.size() && *end != '.')) {
    return std::nullopt;
  }
  return minor;
}

}  // namespace

bool FlagCursor::next() {
  if (next_ >= args_.size()) return false;
  flag_ = args_[next_++];
  inline_value_.reset();
  if (flag_.starts_with("--") && flag_.find('=') != std::string_view::npos) {
    inline_value_ = flag_.substr(flag_.find('=') + 1);
    flag_ = flag_.substr(0, flag_.find('='));
  }
  return true;
}

std::expected<std::string_view, std::string> FlagCursor::value() {
  if (inline_value_) return *inline_value_;
  if (next_ >= args_.size()) return std::unexpected(fmt::format("flag {} needs a value", flag_));
  return args_[next_++];
}

std::expected<void, std::string> FlagCursor::no_value() const {
  if (inline_value_) return std::unexpected(fmt::format("flag {} takes no value", flag_));
  return {};
}

std::string offline_usage(std::string_view command) {
  const bool plan = command == "plan";
  return fmt::format(
      "Usage: gracekeeper {0} -f FILE|DIR|- [-f ...] [flags]\n"
      "\n"
      "{1}\n"
      "\n"
      "Flags:\n"
      "  -f, --filename PATH          manifest file, directory (recursive: .yaml, .yml, .json) or "
      "-\n"
      "                               for stdin; repeatable\n"
      "      --policy FILE            ShutdownPolicy to use (a ShutdownPolicy among the inputs is\n"
      "                               used too); without one, the defaults of the API apply\n"
      "      --propagation-seconds S  endpoint propagation to budget for (default: the policy's\n"
      "                               staticSeconds; Prometheus is only queried by `run`)\n"
      "      --all                    every Deployment, not only those annotated\n"
      "                               gracekeeper.dev/enabled: \"true\"\n"
      "      --kubernetes-version V   target cluster version, e.g. 1.29 (default: a current\n"
      "                               one; before 1.30 exec sleep instead of the native sleep\n"
      "                               action, before 1.35 a StatefulSet's maxUnavailable is 1)\n"
      "  -o, --output FORMAT          {2}\n"
      "{3}"
      "  -h, --help                   this help\n",
      command,
      plan ? "Prints every document with the termination budget applied to opted-in Deployments,\n"
             "and a summary of each change on stderr. Exit 0, or 2 for unusable input."
           : "Prints findings about each opted-in Deployment's termination budget.\n"
             "Exit 0 when no finding is an error, 1 when one is, 2 for unusable input.",
      plan ? "yaml (default) or json" : "text (default) or json",
      plan ? "  -w, --in-place               edit the files in place, only the lines that must "
             "change\n"
             "                               (comments, quoting and layout kept); nothing on "
             "stdout\n"
             "      --diff                   print a unified diff of the edits instead of "
             "manifests\n"
           : "");
}

namespace {

// What is wrong with the flags taken together, if anything.
std::optional<std::string> check_combination(const OfflineOptions& options) {
  if (!options.help && options.files.empty()) {
    return "no input: give at least one -f FILE, -f DIR or -f -";
  }
  if ((options.in_place || options.diff) && options.output == "json") {
    return "flags -w/--in-place and --diff edit the manifests as written; "
           "they cannot be combined with -o json";
  }
  if (options.in_place &&
      std::find(options.files.begin(), options.files.end(), "-") != options.files.end()) {
    return "flag -w/--in-place cannot write back to standard input (-f -)";
  }
  return std::nullopt;
}

// A flag of plan or check that takes a value, read into `options`: false
// when `arg` is none of them.
std::expected<bool, std::string> offline_value_flag(std::string_view command, std::string_view arg,
                                                    FlagCursor& cursor, OfflineOptions& options) {
  const bool files = arg == "-f" || arg == "--filename";
  const bool output = arg == "-o" || arg == "--output";
  if (!files && !output && arg != "--policy" && arg != "--propagation-seconds" &&
      arg != "--kubernetes-version") {
    return false;
  }
  auto v = cursor.value();
  if (!v) return std::unexpected(v.error());
  if (files) {
    if (v->empty()) return std::unexpected(fmt::format("flag {} needs a non-empty path", arg));
    options.files.emplace_back(*v);
  } else if (arg == "--policy") {
    options.policy_files.emplace_back(*v);
  } else if (arg == "--propagation-seconds") {
    options.propagation_seconds = parse_seconds(*v);
    if (!options.propagation_seconds) {
      return std::unexpected(fmt::format(
          "flag --propagation-seconds: expected a number of seconds from 0 to 3600, got \"{}\"",
          *v));
    }
  } else if (arg == "--kubernetes-version") {
    auto minor = parse_minor(*v);
    if (!minor) {
      return std::unexpected(
          fmt::format("flag --kubernetes-version: expected a version like 1.30, got \"{}\"", *v));
    }
    options.kubernetes_minor = *minor;
  } else {
    const bool plan = command == "plan";
    if (plan ? (*v != "yaml" && *v != "json") : (*v != "text" && *v != "json")) {
      return std::unexpected(fmt::format("flag {}: expected {}, got \"{}\"", arg,
                                         plan ? "yaml or json" : "text or json", *v));
    }
    options.output = *v;
  }
  return true;
}

}  // namespace

std::expected<OfflineOptions, std::string> parse_offline_args(
    std::string_view command, std::span<const std::string_view> args) {
  OfflineOptions options;
  options.output = command == "plan" ? "yaml" : "text";
  FlagCursor cursor(args);
  while (cursor.next()) {
    const std::string_view arg = cursor.flag();
    auto takes_no_value = [&] { return cursor.no_value(); };

    auto valued = offline_value_flag(command, arg, cursor, options);
    if (!valued) return std::unexpected(valued.error());
    if (*valued) continue;
    if (arg == "-h" || arg == "--help") {
      options.help = true;
    } else if (arg == "--all") {
      if (auto ok = takes_no_value(); !ok) return std::unexpected(ok.error());
      options.all = true;
    } else if (command == "plan" && (arg == "-w" || arg == "--in-place")) {
      if (auto ok = takes_no_value(); !ok) return std::unexpected(ok.error());
      options.in_place = true;
    } else if (command == "plan" && arg == "--diff") {
      if (auto ok = takes_no_value(); !ok) return std::unexpected(ok.error());
      options.diff = true;
    } else if (arg.starts_with("-") && arg != "-") {
      return std::unexpected(fmt::format("unknown flag {}", arg));
    } else {
      return std::unexpected(
          fmt::format("unexpected argument \"{}\" (input files are given with -f)", arg));
    }
  }
  if (auto wrong = check_combination(options)) return std::unexpected(std::move(*wrong));
  return options;
}

}  // namespace gracekeeper::cli
