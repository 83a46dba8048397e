// `gracekeeper run`: the operator's flags (API.md, "Command line").
#include <fmt/format.h>

#include <charconv>
#include <ostream>

#include "args.h"

#ifdef GRACEKEEPER_HAVE_OPERATOR
#include "gracekeeper/controller/operator.h"
#endif

namespace gracekeeper::cli {
namespace {

constexpr const char* kRunUsage =
    "Usage: gracekeeper run [flags]\n"
    "\n"
    "Runs the operator: watches ShutdownPolicies and opted-in Deployments and keeps their\n"
    "termination budget true. Stops cleanly on SIGTERM (in-flight work finishes, the\n"
    "leader Lease is released).\n"
    "\n"
    "Flags:\n"
    "      --kubeconfig FILE                 kubeconfig (default: in-cluster inside a pod,\n"
    "                                        else $KUBECONFIG or ~/.kube/config)\n"
    "      --context NAME                    kubeconfig context (default: current-context)\n"
    "      --namespace NS                    watch only this namespace (default: all)\n"
    "      --leader-elect                    elect a leader through a Lease (run >1 replica)\n"
    "      --leader-election-namespace NS    the Lease's namespace (default: the pod's or the\n"
    "                                        context's namespace)\n"
    "      --leader-election-id NAME         the Lease's name (default gracekeeper-leader)\n"
    "      --lease-duration S                default 15; --renew-deadline S default 10;\n"
    "      --renew-deadline S                --retry-period S default 2 (seconds)\n"
    "      --retry-period S\n"
    "      --metrics-bind-address ADDR       /metrics (default :8080; 0 disables)\n"
    "      --health-probe-bind-address ADDR  /healthz and /readyz (default :8081; 0 disables)\n"
    "      --prometheus-url URL              Prometheus for source: Prometheus policies\n"
    "      --prometheus-ca-file FILE         CA bundle for an https Prometheus\n"
    "      --prometheus-bearer-token-file F  bearer token, re-read on every query\n"
    "      --propagation-refresh S           how often policies' sources are read (default 60)\n"
    "      --workers N                       concurrent Deployment reconciles (default 4)\n"
    "      --log-format json|text            default json\n"
    "      --log-level debug|info|warn|error default info\n"
    "  -h, --help                            this help\n";

std::expected<long, std::string> parse_count(std::string_view flag, std::string_view text, long min,
                                             long max) {
  long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    return std::unexpected(fmt::format("flag {}: expected a whole number from {} to {}, got \"{}\"",
                                       flag, min, max, text));
  }
  return value;
}

}  // namespace

int run_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
#ifndef GRACEKEEPER_HAVE_OPERATOR
  (void)args;
  (void)out;
  err << "gracekeeper run: this build has no operator (it needs Boost, OpenSSL and "
         "prometheus-cpp; see README, Building)\n";
  return 2;
#else
  controller::OperatorOptions o;
  FlagCursor cursor(args);
  auto fail = [&](const std::string& message) {
    err << "gracekeeper run: " << message << "\nRun 'gracekeeper run --help' for usage.\n";
    return 2;
  };
  while (cursor.next()) {
    const std::string_view flag = cursor.flag();
    if (flag == "-h" || flag == "--help") {
      out << kRunUsage;
      return 0;
    }
    if (flag == "--leader-elect") {
      if (auto ok = cursor.no_value(); !ok) return fail(ok.error());
      o.leader_elect = true;
      continue;
    }
    if (!flag.starts_with("-")) return fail(fmt::format("unexpected argument \"{}\"", flag));
    auto value = cursor.value();
    if (!value) return fail(value.error());
    const std::string v(*value);
    auto seconds = [&](long max) -> std::expected<long, std::string> {
      return parse_count(flag, v, 1, max);
    };
    std::expected<long, std::string> number = 0;
    if (flag == "--kubeconfig") {
      o.kubeconfig = v;
    } else if (flag == "--context") {
      o.context = v;
    } else if (flag == "--namespace") {
      o.watch_namespace = v;
    } else if (flag == "--leader-election-namespace") {
      o.leader_election_namespace = v;
    } else if (flag == "--leader-election-id") {
      o.leader_election_id = v;
    } else if (flag == "--lease-duration" && (number = seconds(3600))) {
      o.lease_duration = std::chrono::seconds(*number);
    } else if (flag == "--renew-deadline" && (number = seconds(3600))) {
      o.renew_deadline = std::chrono::seconds(*number);
    } else if (flag == "--retry-period" && (number = seconds(3600))) {
      o.retry_period = std::chrono::seconds(*number);
    } else if (flag == "--metrics-bind-address") {
      o.metrics_address = v;
    } else if (flag == "--health-probe-bind-address") {
      o.health_address = v;
    } else if (flag == "--prometheus-url") {
      o.prometheus_url = v;
    } else if (flag == "--prometheus-ca-file") {
      o.prometheus_ca_file = v;
    } else if (flag == "--prometheus-bearer-token-file") {
      o.prometheus_token_file = v;
    } else if (flag == "--propagation-refresh" && (number = seconds(86400))) {
      o.propagation_refresh = std::chrono::seconds(*number);
    } else if (flag == "--workers" && (number = parse_count(flag, v, 1, 256))) {
      o.workers = static_cast<std::size_t>(*number);
    } else if (flag == "--log-format") {
      if (v != "json" && v != "text") {
        return fail(fmt::format("flag --log-format: expected json or text, got \"{}\"", v));
      }
      o.log_format = v;
    } else if (flag == "--log-level") {
      if (v != "debug" && v != "info" && v != "warn" && v != "error") {
        return fail(
            fmt::format("flag --log-level: expected debug, info, warn or error, got \"{}\"", v));
      }
      o.log_level = v;
    } else if (!number) {
      return fail(number.error());
    } else {
      return fail(fmt::format("unknown flag {}", flag));
    }
  }
  if (o.leader_elect &&
      !(o.lease_duration > o.renew_deadline && o.renew_deadline > o.retry_period)) {
    return fail("leader election needs --lease-duration > --renew-deadline > --retry-period");
  }
  return controller::run_operator(o);
#endif
}

}  // namespace gracekeeper::cli
