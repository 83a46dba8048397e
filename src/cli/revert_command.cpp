// `gracekeeper revert`: reads each Deployment and StatefulSet, plans its
// revert (revert.cpp) and sends the one write.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <ostream>

#include "args.h"
#include "gracekeeper/cli/cli.h"
#include "revert.h"

#ifdef GRACEKEEPER_HAVE_OPERATOR
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "gracekeeper/kube/client.h"
#include "gracekeeper/kube/config.h"
#endif

namespace gracekeeper::cli {
namespace {

constexpr const char* kRevertUsage =
    "Usage: gracekeeper revert [flags] [NAME | deployment/NAME | statefulset/NAME ...]\n"
    "\n"
    "Puts tuned Deployments and StatefulSets back as their users had them: the grace\n"
    "period, preStop hooks and (Deployments only) strategy gracekeeper recorded before it\n"
    "first changed them. Removes the annotations gracekeeper.dev/applied and\n"
    "gracekeeper.dev/enabled (the operator then leaves the object alone) and gracekeeper's\n"
    "field ownership, in one write per object. A field changed by someone else since\n"
    "gracekeeper wrote it is left as it is.\n"
    "A bare NAME is a Deployment; the kind is written as kubectl takes it (deployment/,\n"
    "deployments/, deploy/, statefulset/, statefulsets/, sts/). Without a name, every\n"
    "tuned Deployment and StatefulSet of the namespace.\n"
    "\n"
    "Flags:\n"
    "  -n, --namespace NS      the namespace (default: the context's)\n"
    "      --kubeconfig FILE   kubeconfig (default: in-cluster inside a pod, else\n"
    "                          $KUBECONFIG or ~/.kube/config)\n"
    "      --context NAME      kubeconfig context (default: current-context)\n"
    "      --dry-run           print what would change; the write is only validated by\n"
    "                          the API server (dryRun=All), nothing is stored\n"
    "  -h, --help              this help\n"
    "\n"
    "Exit status: 0 every object reverted (or nothing to revert), 1 one could not be (or\n"
    "could not be listed), 2 usage.\n";

struct RevertOptions {
  std::optional<std::string> namespace_;
  std::optional<std::string> kubeconfig;
  std::string context;
  bool dry_run = false;
  bool help = false;
  std::vector<RevertTarget> targets;
};

std::expected<RevertOptions, std::string> parse_revert_args(
    std::span<const std::string_view> args) {
  RevertOptions o;
  FlagCursor cursor(args);
  while (cursor.next()) {
    const std::string_view flag = cursor.flag();
    if (flag == "-h" || flag == "--help") {
      o.help = true;
      return o;
    }
    if (flag == "--dry-run") {
      if (auto ok = cursor.no_value(); !ok) return std::unexpected(ok.error());
      o.dry_run = true;
    } else if (flag == "-n" || flag == "--namespace" || flag == "--kubeconfig" ||
               flag == "--context") {
      auto value = cursor.value();
      if (!value) return std::unexpected(value.error());
      if (value->empty()) return std::unexpected(fmt::format("flag {}: empty value", flag));
      if (flag == "--kubeconfig") {
        o.kubeconfig = std::string(*value);
      } else if (flag == "--context") {
        o.context = std::string(*value);
      } else {
        o.namespace_ = std::string(*value);
      }
    } else if (flag.starts_with("-") && flag != "-") {
      return std::unexpected(fmt::format("unknown flag {}", flag));
    } else {
      auto target = parse_revert_target(flag);
      if (!target) return std::unexpected(target.error());
      o.targets.push_back(std::move(*target));
    }
  }
  return o;
}

#ifdef GRACEKEEPER_HAVE_OPERATOR
namespace asio = boost::asio;

// As controller::statefulsets; kept here so that the CLI needs no controller header.
const kube::Resource kStatefulSets{"apps", "v1", "statefulsets", true};

const kube::Resource& resource_of(const std::string& kind) {
  return kind == "StatefulSet" ? kStatefulSets : kube::resources::deployments;
}

class Revert {
 public:
  Revert(kube::Client& client, const RevertOptions& o, std::string ns, std::ostream& out,
         std::ostream& err)
      : client_(client), o_(o), ns_(std::move(ns)), out_(out), err_(err) {}

  asio::awaitable<int> run() {
    std::vector<RevertTarget> targets = o_.targets;
    const bool listed = targets.empty();
    int failed = 0;
    if (listed) {
      for (const char* kind : {"Deployment", "StatefulSet"}) {
        if (!co_await list_tuned(kind, targets)) ++failed;
      }
    }
    int deployments = 0, statefulsets = 0;
    for (const auto& target : targets) {
      auto result = co_await revert_one(target, listed);
      if (!result) {
        err_ << fmt::format("gracekeeper revert: {} {}/{}: {}\n", target.kind, ns_, target.name,
                            result.error());
        ++failed;
      } else if (*result) {
        ++(target.kind == "StatefulSet" ? statefulsets : deployments);
      }
    }
    out_ << fmt::format("revert: {} Deployment(s) and {} StatefulSet(s) {}, {} failed\n",
                        deployments, statefulsets, o_.dry_run ? "would be reverted" : "reverted",
                        failed);
    co_return failed == 0 ? kExitOk : 1;
  }

 private:
  // Adds the tuned objects of `kind` to `targets`; false when they cannot be
  // listed (said on err_; the other kind is still reverted).
  asio::awaitable<bool> list_tuned(std::string kind, std::vector<RevertTarget>& targets) {
    auto list = co_await client_.list_all(resource_of(kind), ns_);
    if (!list) {
      err_ << fmt::format("gracekeeper revert: cannot list the {}s of {}: {}\n", kind, ns_,
                          list.error().format());
      co_return false;
    }
    // Only the tuned ones are read again and written; a List's items carry no kind.
    for (const auto& item : list->value("items", nlohmann::json::array())) {
      budget::Json object(item);
      object["apiVersion"] = "apps/v1";
      object["kind"] = kind;
      auto plan = plan_revert(object);
      if (plan && !plan->tuned) continue;
      const auto metadata = item.value("metadata", nlohmann::json::object());
      if (auto name = metadata.value("name", std::string()); !name.empty()) {
        targets.push_back(RevertTarget{kind, std::move(name)});
      }
    }
    co_return true;
  }

  // true when reverted, false when there was nothing to revert. A Conflict
  // (the object changed between the read and the write) reads it again.
  asio::awaitable<std::expected<bool, std::string>> revert_one(const RevertTarget& target,
                                                               bool listed) {
    const kube::Resource& resource = resource_of(target.kind);
    for (int attempt = 1;; ++attempt) {
      auto current = co_await client_.get(resource, ns_, target.name, std::string());
      if (!current) co_return std::unexpected(current.error().format());
      auto plan = plan_revert(budget::Json(*current));
      if (!plan) co_return std::unexpected(plan.error());
      if (!plan->tuned) {
        if (!listed) {
          out_ << fmt::format("{} {}/{}: not tuned by gracekeeper, nothing to revert\n",
                              target.kind, ns_, target.name);
        }
        co_return false;
      }
      kube::WriteOptions options;
      options.field_manager = kRevertFieldManager;
      options.dry_run = o_.dry_run;
      options.read_object = false;
      nlohmann::json patch(plan->patch);
      auto written =
          co_await client_.json_patch(resource, ns_, target.name, std::move(patch), options);
      if (!written && written.error().reason == kube::ApiError::Reason::Conflict && attempt < 5) {
        continue;
      }
      if (!written) co_return std::unexpected(written.error().format());
      print(target, *plan);
      co_return true;
    }
  }

  void print(const RevertTarget& target, const RevertPlan& plan) {
    out_ << fmt::format("{} {}/{}{}:\n", target.kind, ns_, target.name,
                        o_.dry_run ? " [dry run: validated, not written]" : "");
    for (const auto& c : plan.changes) {
      out_ << fmt::format("  {}: {} -> {}\n", c.field, c.from, c.to);
    }
    for (const auto& note : plan.notes) out_ << "  note: " << note << "\n";
  }

  kube::Client& client_;
  const RevertOptions& o_;
  std::string ns_;
  std::ostream& out_;
  std::ostream& err_;
};

int revert_in_cluster(const RevertOptions& o, std::ostream& out, std::ostream& err) {
  auto config = kube::load_config(o.kubeconfig, o.context);
  if (!config) {
    err << "gracekeeper revert: " << config.error().format() << "\n";
    return 1;
  }
  const std::string ns = o.namespace_.value_or(config->namespace_);
  if (!is_object_name(ns)) {
    err << fmt::format("gracekeeper revert: \"{}\" is not a namespace name\n", ns);
    return kExitUsage;
  }
  asio::io_context io(1);
  kube::ClientOptions client_options;
  client_options.user_agent = kRevertFieldManager;
  kube::Client client(io.get_executor(), *config, client_options);
  Revert revert(client, o, ns, out, err);
  int code = 1;
  asio::co_spawn(io, revert.run(), [&](std::exception_ptr e, int result) {
    if (!e) {
      code = result;
      return;
    }
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      err << "gracekeeper revert: " << ex.what() << "\n";
    }
  });
  io.run();
  return code;
}
#endif

}  // namespace

int revert_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  auto options = parse_revert_args(args);
  if (!options) {
    err << "gracekeeper revert: " << options.error()
        << "\nRun 'gracekeeper revert --help' for usage.\n";
    return kExitUsage;
  }
  if (options->help) {
    out << kRevertUsage;
    return kExitOk;
  }
#ifndef GRACEKEEPER_HAVE_OPERATOR
  err << "gracekeeper revert: this build has no Kubernetes client (it needs Boost and OpenSSL; "
         "see docs/development.md, \"Building\")\n";
  return kExitUsage;
#else
  return revert_in_cluster(*options, out, err);
#endif
}

}  // namespace gracekeeper::cli
