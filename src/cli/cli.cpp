#include "gracekeeper/cli/cli.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>
#include <streambuf>

#include "args.h"
#include "gracekeeper/manifest/document.h"
#include "gracekeeper/memory.h"
#include "gracekeeper/offline/offline.h"
#include "revert.h"

#ifndef GRACEKEEPER_VERSION
#define GRACEKEEPER_VERSION "0.0.0-dev"
#endif

namespace gracekeeper::cli {
namespace {

using offline::Evaluated;
using offline::InputErrors;
using offline::Loaded;
using offline::Planned;
using offline::PlannedChange;

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
    "  revert    put tuned Deployments back as their users had them\n"
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

std::string escaped(std::string_view text);

int report_input_errors(std::string_view command, const InputErrors& errors, std::ostream& err) {
  for (const auto& e : errors) err << "gracekeeper " << command << ": " << escaped(e) << "\n";
  return kExitUsage;
}

void print_notes(std::string_view command, const Loaded& loaded, std::ostream& err) {
  for (const auto& note : loaded.notes)
    err << "gracekeeper " << command << ": note: " << escaped(note) << "\n";
}

// Text output must not let a name or value drive the terminal or forge a
// line of its own: control characters are escaped as JSON escapes them.
std::string escaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      switch (c) {
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          out += fmt::format("\\u{:04x}", u);
      }
    } else {
      out.push_back(c);
    }
  }
  // C1 controls (U+0080..U+009F, UTF-8 C2 80..C2 9F) include CSI.
  std::string clean;
  clean.reserve(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto u = static_cast<unsigned char>(out[i]);
    const auto next = i + 1 < out.size() ? static_cast<unsigned char>(out[i + 1]) : 0;
    if (u == 0xC2 && next >= 0x80 && next <= 0x9F) {
      clean += fmt::format("\\u{:04x}", next);
      ++i;
    } else {
      clean.push_back(out[i]);
    }
  }
  return clean;
}

// "Deployment shop/checkout" (or StatefulSet, DaemonSet).
std::string object_name(const Evaluated& e) {
  return escaped(e.deployment.kind + " " + budget::key(e.deployment));
}

// A hook the plan leaves as the user wrote it (existing: Keep): what is wrong
// with it stays wrong after `plan`, so the summary says so.
bool kept_by_user(const budget::Plan& plan, const std::string& container) {
  return std::any_of(plan.containers.begin(), plan.containers.end(),
                     [&](const auto& cp) { return cp.name == container && cp.user_hook_kept; });
}

// What `plan` reports about one Deployment on stderr.
void summarise(const Evaluated& e, std::ostream& summary) {
  for (const auto& error : e.plan.invalid) {
    summary << fmt::format("{}: {}: not changed: {}\n", escaped(e.position.format()),
                           object_name(e), escaped(error.format()));
  }
  for (const auto& f : e.plan.findings) {
    if (f.code == "AmbiguousPolicy" || f.code == "PolicyNotFound" || f.code == "NoMatchingPolicy" ||
        f.code == "BudgetClamped" || f.code == "PreStopOutOfRange" || f.code == "UnsupportedKind" ||
        ((f.code == "PreStopTooShort" || f.code == "PreStopUnknownLength") &&
         kept_by_user(e.plan, f.container))) {
      summary << fmt::format("{}: {}: {}: {}\n", escaped(e.position.format()), object_name(e),
                             f.code, escaped(f.message));
    }
  }
  if (e.deployment.kind == "Pod") {
    const bool broken = std::ranges::any_of(
        e.plan.findings, [](const auto& f) { return f.severity != budget::Severity::Info; });
    if (broken) {
      summary << fmt::format(
          "{}: {}: not changed: a Pod's preStop and grace are fixed when it is created; `check` "
          "says what breaks the budget, to fix in its workload's template or in what mutated it\n",
          escaped(e.position.format()), object_name(e));
    }
    return;
  }
  if (!e.plan.changed()) return;
  summary << fmt::format("{} (policy {}){}:\n", object_name(e), escaped(e.policy_name),
                         e.applied ? "" : " [DryRun: not applied]");
  for (const auto& c : e.plan.changes) {
    summary << fmt::format("  {}: {} -> {}\n", escaped(c.field), escaped(c.from), escaped(c.to));
  }
}

// Text kept in blocks of 1 MiB, for plan's summary, which goes out last:
// 8 MB for 25,000 changes, which a stringstream, grown by doubling, held at
// up to 1.5x (both its buffers while it grew).
class BlockBuffer : public std::streambuf {
 public:
  void write_to(std::ostream& out) const {
    for (const auto& block : blocks_) out << block;
  }

 protected:
  std::streamsize xsputn(const char* text, std::streamsize count) override {
    std::string_view rest(text, static_cast<std::size_t>(count));
    while (!rest.empty()) {
      if (blocks_.empty() || blocks_.back().size() == blocks_.back().capacity()) {
        blocks_.emplace_back().reserve(kBlock);
      }
      std::string& block = blocks_.back();
      const std::size_t taken = std::min(rest.size(), block.capacity() - block.size());
      block.append(rest.substr(0, taken));
      rest.remove_prefix(taken);
    }
    return count;
  }
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    xsputn(&ch, 1);
    return c;
  }

 private:
  static constexpr std::size_t kBlock = 1u << 20;
  std::vector<std::string> blocks_;
};

// Each input's changes in document order. They come so; sorting costs a
// buffer of half of them.
void in_document_order(std::vector<Planned>& by_source) {
  auto by_document = [](const PlannedChange& a, const PlannedChange& b) {
    return a.address.document < b.address.document;
  };
  for (auto& list : by_source) {
    if (!std::is_sorted(list.begin(), list.end(), by_document)) {
      std::stable_sort(list.begin(), list.end(), by_document);
    }
  }
}

int run_plan(const OfflineOptions& options, Streams io) {
  std::vector<Planned> by_source;  // by input
  BlockBuffer summary_text;
  std::ostream summary(&summary_text);
  std::size_t changed = 0, dry_run = 0, unchanged = 0;
  auto keep = [&](Evaluated&& e) {
    summarise(e, summary);
    if (!e.plan.changed()) {
      ++unchanged;
      return;
    }
    e.applied ? ++changed : ++dry_run;
    if (!e.applied) return;
    // Summarised: the changes and findings (about half of a plan's memory)
    // are not needed to apply it; one change stays, emptied, for apply_plan
    // to see that the plan changes something.
    // (Swapped out: `= {}` is the initializer_list assignment, which keeps
    // the capacity.)
    e.plan.changes.resize(1);
    e.plan.changes.front() = budget::Change{};
    e.plan.changes.shrink_to_fit();
    std::vector<budget::Finding>().swap(e.plan.findings);
    budget::FieldErrors().swap(e.plan.invalid);
    const std::size_t source = e.address.source;
    if (by_source.size() <= source) by_source.resize(source + 1);
    by_source[source].push_back({std::move(e.address), e.policy_name, std::move(e.plan)});
  };
  auto loaded = offline::load_and_evaluate(options, io.in, /*keep_sources=*/true, keep);
  release_free_memory();
  if (!loaded) return report_input_errors("plan", loaded.error(), io.err);
  print_notes("plan", *loaded, io.err);

  by_source.resize(loaded->sources.size());
  in_document_order(by_source);
  const auto now = applied_time();
  if (options.output == "json") {
    offline::write_json(*loaded, by_source, now, io.out);
  } else if (auto written = offline::write_edited(options, *loaded, by_source, now, io.out);
             !written) {
    io.err << "gracekeeper plan: " << escaped(written.error()) << "\n";
    return kExitUsage;
  } else {
    for (const auto& where : *written) {
      summary << fmt::format(
          "{}: note: this document could not be edited in place and was "
          "written out whole (comments and layout not kept)\n",
          escaped(where));
    }
  }
  io.out.flush();
  summary_text.write_to(io.err);
  io.err << fmt::format(
      "plan: {} Deployment(s) changed, {} unchanged{}{}{}\n", changed, unchanged,
      dry_run ? fmt::format(", {} DryRun", dry_run) : "",
      loaded->skipped ? fmt::format(", {} not opted in (use --all)", loaded->skipped) : "",
      options.in_place && changed ? "; files edited in place" : "");
  return kExitOk;
}

int run_check(const OfflineOptions& options, Streams io) {
  // Findings are written as each Deployment is planned (bounded memory on large
  // inputs); the sink only starts once the whole input has been read cleanly.
  std::size_t counts[3] = {0, 0, 0};
  std::size_t deployments = 0, statefulsets = 0, pods = 0;
  const bool json = options.output == "json";
  bool first = true;
  auto write = [&](Evaluated&& e) {
    const std::string& kind = e.deployment.kind;
    ++(kind == "StatefulSet" ? statefulsets : kind == "Pod" ? pods : deployments);
    for (const auto& f : e.plan.findings) {
      ++counts[static_cast<int>(f.severity)];
      if (json) {
        const nlohmann::ordered_json finding{{"code", f.code},
                                             {"severity", budget::to_string(f.severity)},
                                             {"object",
                                              {{"kind", e.deployment.kind},
                                               {"namespace", e.deployment.namespace_},
                                               {"name", e.deployment.name}}},
                                             {"container", f.container},
                                             {"message", f.message},
                                             {"file", e.position.file},
                                             {"line", e.position.line}};
        io.out << (first ? "[\n  " : ",\n  ") << finding.dump();
        first = false;
      } else {
        io.out << fmt::format("{}: {} {}: {}{}: {}\n", escaped(e.position.format()),
                              budget::to_string(f.severity), f.code, object_name(e),
                              f.container.empty() ? "" : " container " + escaped(f.container),
                              escaped(f.message));
      }
    }
  };
  auto loaded = offline::load_and_evaluate(options, io.in, /*keep_sources=*/false, write);
  if (!loaded) return report_input_errors("check", loaded.error(), io.err);
  if (json) io.out << (first ? "[]\n" : "\n]\n");
  io.out.flush();
  print_notes("check", *loaded, io.err);
  // Each kind under its own name: "in 2 Deployment(s) and 1 StatefulSet(s)".
  std::vector<std::string> kinds;
  if (deployments > 0 || (statefulsets == 0 && pods == 0)) {
    kinds.push_back(fmt::format("{} Deployment(s)", deployments));
  }
  if (statefulsets > 0) kinds.push_back(fmt::format("{} StatefulSet(s)", statefulsets));
  if (pods > 0) kinds.push_back(fmt::format("{} Pod(s)", pods));
  std::string checked = kinds.front();
  for (std::size_t i = 1; i < kinds.size(); ++i) {
    checked += (i + 1 == kinds.size() ? " and " : ", ") + kinds[i];
  }
  io.err << fmt::format(
      "check: {} error(s), {} warning(s), {} info in {}{}\n", counts[2], counts[1], counts[0],
      checked,
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

namespace {

int dispatch(std::span<const std::string_view> args, Streams io) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    (args.empty() ? io.err : io.out) << kUsage;
    return args.empty() ? kExitUsage : kExitOk;
  }
  const std::string_view command = args[0];
  const auto rest = args.subspan(1);
  if (command == "plan" || command == "check") return offline_command(command, rest, io);
  if (command == "version" || command == "--version") {
    if (!rest.empty()) {
      io.err << "gracekeeper version: unexpected argument \"" << escaped(rest.front())
             << "\" (version takes no flags)\n";
      return kExitUsage;
    }
    io.out << "gracekeeper " << GRACEKEEPER_VERSION << "\n";
    return kExitOk;
  }
  if (command == "run") return run_command(rest, io.out, io.err);
  if (command == "revert") return revert_command(rest, io.out, io.err);
  io.err << "gracekeeper: unknown command \"" << escaped(command) << "\"\n\n" << kUsage;
  return kExitUsage;
}

}  // namespace

int main(std::span<const std::string_view> args, Streams io) {
  // Nothing escapes as an exception (an abort, exit 134): running out of
  // memory, or anything unforeseen, is unusable input with a message.
  try {
    return dispatch(args, io);
  } catch (const std::bad_alloc&) {
    io.err << "gracekeeper: out of memory; the input is too large or expands too much\n";
  } catch (const std::exception& e) {
    io.err << "gracekeeper: internal error: " << escaped(e.what()) << "\n";
  }
  return kExitUsage;
}

}  // namespace gracekeeper::cli
