// How to reach and authenticate to an API server: from kubeconfig files (the
// KUBECONFIG list merged the way kubectl merges it) or from inside a pod.
// Loading only reads files; nothing here opens a connection.
#pragma once

#include <chrono>
#include <expected>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gracekeeper::kube {

// A configuration problem, naming where it is: the file and the field
// (`/home/me/.kube/config: users[admin].user.client-certificate: no such file`).
struct ConfigError {
  std::string file;   // may be empty (e.g. an environment variable)
  std::string field;  // may be empty
  std::string message;
  std::string format() const;
};

// PEM text, read from a file or decoded from *-data at load time, so a
// missing file is reported at startup with its field, not at the first request.
struct Pem {
  std::string text;
  std::string origin;  // "file /path" or "kubeconfig field users[x].user.client-key-data"
};

struct ClusterConfig {
  std::string server;                        // https://host:port, no trailing slash
  std::optional<Pem> certificate_authority;  // nullopt: the system trust store
  bool insecure_skip_tls_verify = false;     // only when the kubeconfig says so
  std::string tls_server_name;               // SNI/verification name override, if set
  std::optional<Pem> client_certificate;
  std::optional<Pem> client_key;
  std::string token;  // static bearer token, if any
  // A token file is re-read (at most every token_refresh) so rotated
  // service-account tokens are picked up.
  std::optional<std::filesystem::path> token_file;
  std::chrono::seconds token_refresh{60};
  std::string context;     // the context used ("" in-cluster)
  std::string namespace_;  // the context's namespace, or the pod's; default "default"
  // Accept an http:// server (no TLS at all). Never set by the loaders
  // below: a Kubernetes API server is always https://, and without this flag
  // an http:// server is refused. Set only by tests and benches that stand
  // up a fake API server on plain HTTP (passed on as http::Endpoint's).
  bool allow_plain_http = false;
};

struct KubeconfigOptions {
  // Files in KUBECONFIG order; empty means $KUBECONFIG, else ~/.kube/config.
  std::vector<std::filesystem::path> files;
  std::string context;  // empty: current-context
};

std::expected<ClusterConfig, ConfigError> load_kubeconfig(const KubeconfigOptions& = {});

// In-cluster: KUBERNETES_SERVICE_HOST/PORT, and the service-account directory
// (ca.crt, token, namespace). `root` replaces /var/run/secrets/kubernetes.io/serviceaccount
// for tests.
std::expected<ClusterConfig, ConfigError> load_in_cluster(
    const std::filesystem::path& root = "/var/run/secrets/kubernetes.io/serviceaccount");

// What a command with --kubeconfig and --context loads, as client-go's
// clientcmd does: in the cluster (KUBERNETES_SERVICE_HOST set) with neither
// given, the in-cluster configuration; else the kubeconfig.
std::expected<ClusterConfig, ConfigError> load_config(
    const std::optional<std::filesystem::path>& kubeconfig, const std::string& context);

// Reads the bearer token to send now: the static token, or the token file's
// current content (trimmed). Errors name the file.
std::expected<std::string, ConfigError> current_token(const ClusterConfig&);

}  // namespace gracekeeper::kube
