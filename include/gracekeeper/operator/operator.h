// `gracekeeper run`: the operator. Watches ShutdownPolicies and opted-in
// Deployments and keeps every governed Deployment's termination budget true
// (docs/api.md, "The budget"), until SIGTERM or SIGINT.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gracekeeper::controller {

struct OperatorOptions {
  // Cluster access: in-cluster when running in a pod and no kubeconfig is
  // given, else the kubeconfig (KUBECONFIG / ~/.kube/config) and context.
  std::optional<std::filesystem::path> kubeconfig{};
  std::string context{};

  bool leader_elect = false;
  std::string leader_election_namespace{};  // "" = the pod's / the context's namespace
  std::string leader_election_id = "gracekeeper-leader";
  std::string identity{};  // "" = hostname + "_" + a random suffix
  std::chrono::milliseconds lease_duration{15'000};
  std::chrono::milliseconds renew_deadline{10'000};
  std::chrono::milliseconds retry_period{2'000};

  std::string metrics_address = ":8080";  // "0" disables
  // /metrics only for a bearer token the API server authenticates
  // (TokenReview, else 401) whose user may get the nonResourceURL /metrics
  // (SubjectAccessReview, else 403); --metrics-secure.
  bool metrics_secure = false;
  std::string health_address = ":8081";  // "0" disables

  std::string prometheus_url{};  // "" = no Prometheus: such policies use their fallback
  std::optional<std::filesystem::path> prometheus_ca_file{};
  std::optional<std::filesystem::path> prometheus_token_file{};

  // The mutating admission webhook (docs/api.md, "Admission webhook"): HTTPS on
  // this port of every interface, on every replica; 0 = off.
  int webhook_port = 0;
  // tls.crt and tls.key of its serving certificate.
  std::optional<std::filesystem::path> webhook_cert_dir{};
  // The webhook's oldest TLS version, "1.2" or "1.3" (--tls-min-version), and
  // its TLS 1.2 cipher suites, an OpenSSL cipher list ("" = OpenSSL's
  // default; --tls-cipher-suites). Checked by the CLI
  // (server::parse_tls_version, server::parse_cipher_suites).
  std::string tls_min_version = "1.2";
  std::string tls_cipher_suites{};

  std::string log_format = "json";  // json | text
  std::string log_level = "info";   // debug | info | warn | error

  std::size_t workers = 4;                       // Deployment reconcile workers
  std::chrono::seconds propagation_refresh{60};  // how often a policy's source is asked
  // A rollout with no progress for this long holds no rollout slot (RolloutStalled).
  std::chrono::seconds rollout_stall_timeout{600};
  std::string watch_namespace{};             // "" = all namespaces
  std::chrono::seconds shutdown_timeout{8};  // in-flight work gets this long after SIGTERM
  // After SIGTERM, /readyz says 503 at once while the webhook and /metrics
  // keep answering this long (each answer with Connection: close), so the
  // endpoint leaves their Services before they stop (--shutdown-lame-duck-seconds).
  std::chrono::seconds shutdown_lame_duck{10};
  // The oldest kubelet's minor version (--min-kubelet-version 1.29), -1 when
  // not given: the native sleep action needs the API server and the
  // kubelets at 1.30 or later. Nodes are not read (no RBAC on nodes).
  int min_kubelet_minor = -1;

  // The admission webhook's certificates, managed in a Secret of the pod's
  // namespace (--webhook-cert-secret; "" = none: e.g. cert-manager's, mounted).
  std::string webhook_cert_secret{};
  std::string webhook_config{};                   // the MutatingWebhookConfiguration to patch
  std::string webhook_service{};                  // the Service: the certificate's names
  std::vector<std::string> webhook_extra_sans{};  // more DNS names or IP addresses
  std::chrono::seconds webhook_cert_validity{std::chrono::hours(24 * 365)};
  std::chrono::seconds webhook_ca_validity{std::chrono::hours(24 * 365 * 10)};
  std::chrono::seconds webhook_cert_resync{30};  // how often the Secret and caBundle are read
};

// The lame duck after SIGTERM: `flag` (--shutdown-lame-duck-seconds), or
// longer when this replica holds a larger propagation figure for the
// policies of its own namespace (`figure`, rounded up): the endpoint must
// have left the webhook's Service before the servers stop. `from` says which
// ("flag" or "measured"), for the log line.
struct LameDuck {
  std::chrono::seconds length{};
  std::string from;
};
LameDuck lame_duck(std::chrono::seconds flag, std::optional<double> figure);

// Runs until SIGTERM/SIGINT; returns the process exit code (0 after a clean
// shutdown, 1 when startup failed or leadership was lost). Startup problems
// (unreadable kubeconfig, an address in use) are logged with what was wrong.
int run_operator(const OperatorOptions&);

}  // namespace gracekeeper::controller
