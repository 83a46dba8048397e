// `gracekeeper run`: the operator's flags (docs/api.md, "Command line").
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <ostream>
#include <utility>

#include "args.h"

#ifdef GRACEKEEPER_HAVE_OPERATOR
#include "gracekeeper/admission/certs.h"  // check_san
#include "gracekeeper/operator/operator.h"
#include "gracekeeper/server/http_server.h"  // parse_tls_version, parse_cipher_suites
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
    "      --rollout-stall-timeout S         a rollout with no progress for S seconds holds no\n"
    "                                        rollout slot: RolloutStalled (default 600)\n"
    "      --workers N                       concurrent Deployment reconciles (default 4)\n"
    "      --min-kubelet-version V           the oldest kubelet in the cluster (e.g. 1.29), when\n"
    "                                        older than the API server: below 1.30, preStop\n"
    "                                        action Auto writes exec sleep, not native sleep\n"
    "      --webhook-port N                  serve the mutating admission webhook over HTTPS\n"
    "                                        on this port, POST /mutate-deployments (default 0:\n"
    "                                        off)\n"
    "      --webhook-cert-dir DIR            the webhook's serving certificate: DIR/tls.crt and\n"
    "                                        DIR/tls.key (a mounted Secret), re-read on change\n"
    "      --webhook-cert-secret NAME        manage the admission webhook's CA and serving\n"
    "                                        certificate in this Secret of the pod's namespace\n"
    "      --webhook-service NAME            the webhook's Service: the certificate is for\n"
    "                                        NAME.NS.svc and NAME.NS.svc.cluster.local\n"
    "      --webhook-config NAME             the MutatingWebhookConfiguration whose caBundle\n"
    "                                        is kept equal to the Secret's ca.crt\n"
    "      --webhook-cert-extra-san NAME     another DNS name or IP address (repeatable)\n"
    "      --webhook-cert-validity S         serving certificate, seconds (default 31536000);\n"
    "                                        renewed at 2/3 of its life\n"
    "      --webhook-ca-validity S           the CA, seconds (default 315360000)\n"
    "      --webhook-cert-resync S           re-read the Secret and caBundle (default 30)\n"
    "      --shutdown-lame-duck-seconds S    after SIGTERM, /readyz says 503 while the webhook\n"
    "                                        and /metrics keep answering S seconds, with\n"
    "                                        Connection: close, or longer when a policy of\n"
    "                                        the pod's namespace has a longer propagation\n"
    "                                        figure (default 10; 0: stop at once)\n"
    "      --metrics-secure                  /metrics only with a bearer token the API server\n"
    "                                        authenticates (else 401) whose user may get\n"
    "                                        /metrics (else 403): TokenReview, "
    "SubjectAccessReview\n"
    "      --tls-min-version 1.2|1.3         the webhook's oldest TLS version (default 1.2)\n"
    "      --tls-cipher-suites LIST          the webhook's TLS 1.2 cipher suites, OpenSSL\n"
    "                                        names separated by commas (default: OpenSSL's)\n"
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

#ifdef GRACEKEEPER_HAVE_OPERATOR
// One row per flag that takes a value: its name and how the value is stored.
// Parsing is then a lookup, and each setter says what it accepts.
using Setter = std::expected<void, std::string> (*)(controller::OperatorOptions&, std::string_view,
                                                    std::string_view);

template <auto field>
std::expected<void, std::string> set_text(controller::OperatorOptions& o, std::string_view,
                                          std::string_view value) {
  o.*field = std::string(value);
  return {};
}

template <auto field, long max>
std::expected<void, std::string> set_seconds(controller::OperatorOptions& o, std::string_view flag,
                                             std::string_view value) {
  auto number = parse_count(flag, value, 1, max);
  if (!number) return std::unexpected(number.error());
  o.*field = std::chrono::seconds(*number);
  return {};
}

std::expected<void, std::string> set_workers(controller::OperatorOptions& o, std::string_view flag,
                                             std::string_view value) {
  auto number = parse_count(flag, value, 1, 256);
  if (!number) return std::unexpected(number.error());
  o.workers = static_cast<std::size_t>(*number);
  return {};
}

// "1.29", "v1.29" or "v1.29.3": the minor version.
std::expected<void, std::string> set_min_kubelet(controller::OperatorOptions& o,
                                                 std::string_view flag, std::string_view value) {
  std::string_view text = value;
  if (text.starts_with("v")) text.remove_prefix(1);
  int minor = -1;
  if (text.starts_with("1.")) {
    text.remove_prefix(2);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), minor);
    if (ec != std::errc() || (end != text.data() + text.size() && *end != '.')) minor = -1;
  }
  if (minor < 0 || minor > 1000) {
    return std::unexpected(
        fmt::format("flag {}: expected a version like 1.29, got \"{}\"", flag, value));
  }
  o.min_kubelet_minor = minor;
  return {};
}

std::expected<void, std::string> set_webhook_port(controller::OperatorOptions& o,
                                                  std::string_view flag, std::string_view value) {
  auto number = parse_count(flag, value, 0, 65535);
  if (!number) return std::unexpected(number.error());
  o.webhook_port = static_cast<int>(*number);
  return {};
}

std::expected<void, std::string> add_extra_san(controller::OperatorOptions& o,
                                               std::string_view flag, std::string_view value) {
  if (auto ok = webhook::check_san(value); !ok) {
    return std::unexpected(fmt::format("flag {}: {}", flag, ok.error()));
  }
  o.webhook_extra_sans.emplace_back(value);
  return {};
}

std::expected<void, std::string> set_tls_min_version(controller::OperatorOptions& o,
                                                     std::string_view flag,
                                                     std::string_view value) {
  auto version = server::parse_tls_version(value);
  if (!version) return std::unexpected(fmt::format("flag {}: {}", flag, version.error()));
  o.tls_min_version = *version == server::TlsVersion::Tls13 ? "1.3" : "1.2";
  return {};
}

std::expected<void, std::string> set_tls_cipher_suites(controller::OperatorOptions& o,
                                                       std::string_view flag,
                                                       std::string_view value) {
  auto list = server::parse_cipher_suites(value);
  if (!list) return std::unexpected(fmt::format("flag {}: {}", flag, list.error()));
  o.tls_cipher_suites = std::move(*list);
  return {};
}

std::expected<void, std::string> set_lame_duck(controller::OperatorOptions& o,
                                               std::string_view flag, std::string_view value) {
  auto number = parse_count(flag, value, 0, 600);
  if (!number) return std::unexpected(number.error());
  o.shutdown_lame_duck = std::chrono::seconds(*number);
  return {};
}

std::expected<void, std::string> set_log_format(controller::OperatorOptions& o, std::string_view,
                                                std::string_view value) {
  if (value != "json" && value != "text") {
    return std::unexpected(
        fmt::format("flag --log-format: expected json or text, got \"{}\"", value));
  }
  o.log_format = std::string(value);
  return {};
}

std::expected<void, std::string> set_log_level(controller::OperatorOptions& o, std::string_view,
                                               std::string_view value) {
  if (value != "debug" && value != "info" && value != "warn" && value != "error") {
    return std::unexpected(
        fmt::format("flag --log-level: expected debug, info, warn or error, got \"{}\"", value));
  }
  o.log_level = std::string(value);
  return {};
}

using O = controller::OperatorOptions;
// (Sized by its entries, so that a new flag is one line.)
constexpr auto kValueFlags = std::to_array<std::pair<std::string_view, Setter>>({
    {"--kubeconfig", &set_text<&O::kubeconfig>},
    {"--context", &set_text<&O::context>},
    {"--namespace", &set_text<&O::watch_namespace>},
    {"--leader-election-namespace", &set_text<&O::leader_election_namespace>},
    {"--leader-election-id", &set_text<&O::leader_election_id>},
    {"--lease-duration", &set_seconds<&O::lease_duration, 3600>},
    {"--renew-deadline", &set_seconds<&O::renew_deadline, 3600>},
    {"--retry-period", &set_seconds<&O::retry_period, 3600>},
    {"--metrics-bind-address", &set_text<&O::metrics_address>},
    {"--health-probe-bind-address", &set_text<&O::health_address>},
    {"--prometheus-url", &set_text<&O::prometheus_url>},
    {"--prometheus-ca-file", &set_text<&O::prometheus_ca_file>},
    {"--prometheus-bearer-token-file", &set_text<&O::prometheus_token_file>},
    {"--propagation-refresh", &set_seconds<&O::propagation_refresh, 86400>},
    {"--rollout-stall-timeout", &set_seconds<&O::rollout_stall_timeout, 86400>},
    {"--workers", &set_workers},
    {"--min-kubelet-version", &set_min_kubelet},
    {"--webhook-port", &set_webhook_port},
    {"--webhook-cert-dir", &set_text<&O::webhook_cert_dir>},
    {"--webhook-cert-secret", &set_text<&O::webhook_cert_secret>},
    {"--webhook-config", &set_text<&O::webhook_config>},
    {"--webhook-service", &set_text<&O::webhook_service>},
    {"--webhook-cert-extra-san", &add_extra_san},
    // Seconds, so that a test can force a rotation (10 s at least).
    {"--webhook-cert-validity", &set_seconds<&O::webhook_cert_validity, 10L * 365 * 86400>},
    {"--webhook-ca-validity", &set_seconds<&O::webhook_ca_validity, 100L * 365 * 86400>},
    {"--webhook-cert-resync", &set_seconds<&O::webhook_cert_resync, 3600>},
    {"--shutdown-lame-duck-seconds", &set_lame_duck},
    {"--tls-min-version", &set_tls_min_version},
    {"--tls-cipher-suites", &set_tls_cipher_suites},
    {"--log-format", &set_log_format},
    {"--log-level", &set_log_level},
});

// Parses the flags into `o`; an error names the flag. `help` when -h was given.
std::expected<void, std::string> parse_run_flags(FlagCursor& cursor, O& o, bool& help) {
  while (cursor.next()) {
    const std::string_view flag = cursor.flag();
    if (flag == "-h" || flag == "--help") {
      help = true;
      return {};
    }
    if (flag == "--leader-elect") {
      if (auto ok = cursor.no_value(); !ok) return ok;
      o.leader_elect = true;
      continue;
    }
    if (flag == "--metrics-secure") {
      if (auto ok = cursor.no_value(); !ok) return ok;
      o.metrics_secure = true;
      continue;
    }
    if (!flag.starts_with("-")) {
      return std::unexpected(fmt::format("unexpected argument \"{}\"", flag));
    }
    const auto row = std::find_if(kValueFlags.begin(), kValueFlags.end(),
                                  [&](const auto& entry) { return entry.first == flag; });
    if (row == kValueFlags.end()) return std::unexpected(fmt::format("unknown flag {}", flag));
    auto value = cursor.value();
    if (!value) return std::unexpected(value.error());
    if (auto set = row->second(o, flag, *value); !set) return set;
  }
  return {};
}
#endif

}  // namespace

int run_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
#ifndef GRACEKEEPER_HAVE_OPERATOR
  (void)args;
  (void)out;
  err << "gracekeeper run: this build has no operator (it needs Boost, OpenSSL and "
         "prometheus-cpp; see docs/development.md, \"Building\")\n";
  return 2;
#else
  auto fail = [&](const std::string& message) {
    err << "gracekeeper run: " << message << "\nRun 'gracekeeper run --help' for usage.\n";
    return 2;
  };
  controller::OperatorOptions o;
  FlagCursor cursor(args);
  bool help = false;
  if (auto parsed = parse_run_flags(cursor, o, help); !parsed) return fail(parsed.error());
  if (help) {
    out << kRunUsage;
    return 0;
  }
  if (o.leader_elect &&
      !(o.lease_duration > o.renew_deadline && o.renew_deadline > o.retry_period)) {
    return fail("leader election needs --lease-duration > --renew-deadline > --retry-period");
  }
  if (o.webhook_port != 0 && !o.webhook_cert_dir == o.webhook_cert_secret.empty()) {
    return fail(
        "--webhook-port needs --webhook-cert-dir or --webhook-cert-secret (the serving "
        "certificate), not both");
  }
  if (!o.webhook_cert_secret.empty() && o.webhook_service.empty()) {
    return fail("--webhook-cert-secret needs --webhook-service (the certificate's names)");
  }
  if (o.webhook_cert_validity < std::chrono::seconds(10) ||
      o.webhook_ca_validity < std::chrono::seconds(10)) {
    return fail("--webhook-cert-validity and --webhook-ca-validity must be at least 10 seconds");
  }
  if (o.metrics_secure && o.metrics_address == "0") {
    return fail("--metrics-secure needs --metrics-bind-address (it is 0: no /metrics)");
  }
  if (o.tls_min_version == "1.3" && !o.tls_cipher_suites.empty()) {
    return fail(
        "--tls-cipher-suites names TLS 1.2 suites, and --tls-min-version 1.3 refuses TLS 1.2 "
        "(TLS 1.3 suites are not configurable)");
  }
  return controller::run_operator(o);
#endif
}

}  // namespace gracekeeper::cli
