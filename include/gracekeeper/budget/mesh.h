// Mesh proxies that an injector adds to pods (docs/api.md, "Mesh proxies"):
// Istio's istio-proxy and Linkerd's linkerd-proxy, recognised by their
// container names. A proxy is no app container: it gets no wait of
// gracekeeper's, and its own stay after the pod's deletion must cover the
// app's wait and drain, or the app's last requests are cut off with it.
#pragma once

#include <cstdint>
#include <expected>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace gracekeeper::budget {

struct Container;

enum class Mesh { Istio, Linkerd };
std::string to_string(Mesh);

// The pod annotations the meshes read their proxy's shutdown from.
inline constexpr const char* kIstioProxyConfig = "proxy.istio.io/config";
inline constexpr const char* kLinkerdWaitBeforeExit =
    "config.alpha.linkerd.io/proxy-wait-before-exit-seconds";
// The environment of an injected istio-proxy: the proxy's config as the
// injector rendered it (mesh defaults and the annotation merged), and the
// two proxyMetadata settings of its shutdown.
inline constexpr const char* kIstioProxyConfigEnv = "PROXY_CONFIG";
inline constexpr const char* kIstioExitOnZeroEnv = "EXIT_ON_ZERO_ACTIVE_CONNECTIONS";
inline constexpr const char* kIstioMinimumDrainEnv = "MINIMUM_DRAIN_DURATION";

// The mesh whose proxy a container of this name is.
std::optional<Mesh> proxy_mesh(std::string_view container_name);

// Whether a pod annotation or a proxy's environment variable is one the
// projection keeps (the rest is never stored).
bool is_mesh_annotation(std::string_view name);
bool is_proxy_env(std::string_view name);

// How long a proxy serves once its pod is deleted.
struct ProxyStay {
  Mesh mesh = Mesh::Istio;
  // It takes new connections for at least this long after the deletion
  // (its own preStop wait, then its drain).
  std::int64_t serves_ms = 0;
  // Istio with EXIT_ON_ZERO_ACTIVE_CONNECTIONS: after serves_ms it stays
  // while connections are open, up to this long after the deletion.
  std::optional<std::int64_t> follows_connections_until_ms;
  // After SIGTERM, the time it takes to leave once the app has gone (a
  // native sidecar is told to stop only then).
  std::int64_t drain_after_app_ms = 0;
  // Where the figures come from, for messages: "terminationDrainDuration
  // 5s (Istio's default)".
  std::string source;
};

// Which comes first when a setting is in several places. AsRuns: a running
// proxy's environment (what the injector rendered), then the annotation.
// AsPlanned: the template's annotation, which the injector renders into
// the next pods' proxies over the mesh's defaults, then the environment.
enum class Precedence { AsRuns, AsPlanned };

// Reads a proxy's stay from its container (hook, environment) and the pod's
// annotations; an error names the annotation or variable that does not read.
std::expected<ProxyStay, std::string> proxy_stay(
    const Container& proxy, Mesh mesh, const std::map<std::string, std::string>& pod_annotations,
    Precedence = Precedence::AsRuns);

// The value of the mesh's annotation (mesh_annotation) that makes `proxy`
// serve `wait_seconds` and stay `stay_seconds` once the pod is deleted,
// built on the template's `current` value: every other setting in it kept,
// none of its figures lowered. Istio: terminationDrainDuration, and
// EXIT_ON_ZERO_ACTIVE_CONNECTIONS with MINIMUM_DRAIN_DURATION unless the
// annotation turns it off; Linkerd: the wait before exit. An error when
// `current` does not read.
std::expected<std::string, std::string> handed_budget(
    const Container& proxy, Mesh mesh, const std::map<std::string, std::string>& pod_annotations,
    std::int64_t wait_seconds, std::int64_t stay_seconds);

// The pod annotation gracekeeper hands a mesh's proxy its budget through.
const char* mesh_annotation(Mesh);

// How `plan`, events and `revert` name a change of a pod template's
// annotation: "annotations[proxy.istio.io/config]".
std::string annotation_field(std::string_view name);

// What to set on the pod template so that the proxy serves `wait_seconds`
// (the propagation the app waits for) and stays `stay_seconds` (the wait and
// the app's drain): "proxy.istio.io/config: {...}".
std::string proxy_advice(Mesh, std::int64_t wait_seconds, std::int64_t stay_seconds);

// A Go duration ("5s", "1m30s", "1.5s", "500ms") in milliseconds, rounded
// down; nullopt when it does not read or is negative.
std::optional<std::int64_t> parse_duration_ms(std::string_view text);

}  // namespace gracekeeper::budget
