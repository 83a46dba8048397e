#include "gracekeeper/cli/cli.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args.h"
#include "gracekeeper/budget/apply.h"
#include "gracekeeper/manifest/writer.h"
#include "offline.h"

#ifndef GRACEKEEPER_VERSION
#define GRACEKEEPER_VERSION "0.0.0-dev"
#endif

namespace gracekeeper::cli {
namespace {

constexpr const char* kUsage =
    "gracekeeper keeps Kubernetes rollouts from losing requests: it budgets the preStop\n"
    "wait, terminationGracePeriodSeconds and rollout strategy of opted-in Deployments.\n"
    "\n"
    "Usage: gracekeeper COMMAND [flags]\n"
    "\n"
    "Commands:\n"
    "  plan      print manifests with the termination budget applied\n"
    "  check     report termination-budget findings in manifests (exit 1 on errors)\n"
    "  run       run the operator in a cluster\n"
    "  version   print the version\n"
    "\n"
    "Run 'gracekeeper COMMAND --help' for a command's flags.\n";

// The time recorded in the applied annotation: SOURCE_DATE_EPOCH when set, for
// reproducible output (the reproducible-builds convention), else now.
std::chrono::system_clock::time_point applied_time() {
  if (const char* epoch = std::getenv("SOURCE_DATE_EPOCH")) {
    char* end = nullptr;
    const long long seconds = std::strtoll(epoch, &end, 10);
    if (end != epoch && *end == '\0' && seconds >= 0) {
      return std::chrono::system_clock::time_point{std::chrono::seconds{seconds}};
    }
  }
  return std::chrono::system_clock::now();
}

int report_input_errors(std::string_view command, const InputErrors& errors, std::ostream& err) {
  for (const auto& e : errors) err << "gracekeeper " << command << ": " << e << "\n";
  return kExitUsage;
}

void print_notes(std::string_view command, const Loaded& loaded, std::ostream& err) {
  for (const auto& note : loaded.notes)
    err << "gracekeeper " << command << ": note: " << note << "\n";
}

std::string object_name(const Evaluated& e) {
  return budget::key(e.deployment);
}

int run_plan(const OfflineOptions& options, Streams io) {
  auto loaded = load_and_evaluate(options, io.in, /*keep_documents=*/true);
  if (!loaded) return report_input_errors("plan", loaded.error(), io.err);
  print_notes("plan", *loaded, io.err);

  const auto now = applied_time();
  std::size_t changed = 0, dry_run = 0, unchanged = 0;
  std::ostringstream summary;
  for (const auto& e : loaded->deployments) {
    for (const auto& error : e.plan.invalid) {
      summary << fmt::format("{}: Deployment {}: not changed: {}\n", e.position.format(),
                             object_name(e), error.format());
    }
    for (const auto& f : e.plan.findings) {
      if (f.code == "AmbiguousPolicy" || f.code == "PolicyNotFound" ||
          f.code == "NoMatchingPolicy" || f.code == "BudgetClamped") {
        summary << fmt::format("{}: Deployment {}: {}: {}\n", e.position.format(), object_name(e),
                               f.code, f.message);
      }
    }
    if (!e.plan.changed()) {
      ++unchanged;
      continue;
    }
    e.applied ? ++changed : ++dry_run;
    summary << fmt::format("Deployment {} (policy {}){}:\n", object_name(e), e.policy_name,
                           e.applied ? "" : " [DryRun: not applied]");
    for (const auto& c : e.plan.changes) {
      summary << fmt::format("  {}: {} -> {}\n", c.field, c.from, c.to);
    }
    if (e.applied) {
      auto& document = loaded->documents[e.document].value;
      budget::apply_plan(e.item ? document["items"][*e.item] : document, e.plan, e.policy_name,
                         now);
    }
  }

  std::vector<manifest::Json> values;
  values.reserve(loaded->documents.size());
  for (auto& d : loaded->documents) values.push_back(std::move(d.value));
  // Built whole before anything is written: a failure never leaves half a manifest on stdout.
  const std::string output = options.output == "json" ? manifest::to_json_stream(values)
                                                      : manifest::to_yaml_stream(values);
  io.out << output;
  io.out.flush();
  io.err << summary.str()
         << fmt::format("plan: {} Deployment(s) changed, {} unchanged{}{}\n", changed, unchanged,
                        dry_run ? fmt::format(", {} DryRun", dry_run) : "",
                        loaded->skipped
                            ? fmt::format(", {} not opted in (use --all)", loaded->skipped)
                            : "");
  return kExitOk;
}

int run_check(const OfflineOptions& options, Streams io) {
  // Findings are written as each Deployment is planned (bounded memory on large
  // inputs); the sink only starts once the whole input has been read cleanly.
  std::size_t counts[3] = {0, 0, 0};
  std::size_t deployments = 0;
  const bool json = options.output == "json";
  bool first = true;
  auto write = [&](Evaluated&& e) {
    ++deployments;
    for (const auto& f : e.plan.findings) {
      ++counts[static_cast<int>(f.severity)];
      if (json) {
        const nlohmann::ordered_json finding{{"code", f.code},
                                             {"severity", budget::to_string(f.severity)},
                                             {"object",
                                              {{"kind", "Deployment"},
                                               {"namespace", e.deployment.namespace_},
                                               {"name", e.deployment.name}}},
                                             {"container", f.container},
                                             {"message", f.message},
                                             {"file", e.position.file},
                                             {"line", e.position.line}};
        io.out << (first ? "[\n  " : ",\n  ") << finding.dump();
        first = false;
      } else {
        io.out << fmt::format("{}: {} {}: Deployment {}{}: {}\n", e.position.format(),
                              budget::to_string(f.severity), f.code, object_name(e),
                              f.container.empty() ? "" : " container " + f.container, f.message);
      }
    }
  };
  auto loaded = load_and_evaluate(options, io.in, /*keep_documents=*/false, write);
  if (!loaded) return report_input_errors("check", loaded.error(), io.err);
  if (json) io.out << (first ? "[]\n" : "\n]\n");
  io.out.flush();
  print_notes("check", *loaded, io.err);
  io.err << fmt::format(
      "check: {} error(s), {} warning(s), {} info in {} Deployment(s){}\n", counts[2], counts[1],
      counts[0], deployments,
      loaded->skipped ? fmt::format("; {} not opted in (use --all)", loaded->skipped) : "");
  return counts[2] > 0 ? kExitFindings : kExitOk;
}

int offline_command(std::string_view command, std::span<const std::string_view> args, Streams io) {
  auto options = parse_offline_args(command, args);
  if (!options) {
    io.err << "gracekeeper " << command << ": " << options.error() << "\n"
           << "Run 'gracekeeper " << command << " --help' for usage.\n";
    return kExitUsage;
  }
  if (options->help) {
    io.out << offline_usage(command);
    return kExitOk;
  }
  return command == "plan" ? run_plan(*options, io) : run_check(*options, io);
}

}  // namespace

int main(std::span<const std::string_view> args, Streams io) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    (args.empty() ? io.err : io.out) << kUsage;
    return args.empty() ? kExitUsage : kExitOk;
  }
  const std::string_view command = args[0];
  const auto rest = args.subspan(1);
  if (command == "plan" || command == "check") return offline_command(command, rest, io);
  if (command == "version" || command == "--version") {
    io.out << "gracekeeper " << GRACEKEEPER_VERSION << "\n";
    return kExitOk;
  }
  if (command == "run") return run_command(rest, io.out, io.err);
  io.err << "gracekeeper: unknown command \"" << command << "\"\n\n" << kUsage;
  return kExitUsage;
}

}  // namespace gracekeeper::cli
