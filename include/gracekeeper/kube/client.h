// The REST client for the Kubernetes API: Kubernetes verbs, JSON in and out,
// errors as ApiError values, watches. The HTTP underneath (one HTTPS
// connection pool per Client, TLS, retries) is an http::Client.
//
// Every call is a coroutine on the Client's executor. A Client is not
// thread-safe: use it from one thread (the program's io_context) and keep it
// alive until its calls have finished. Requests carry the bearer token read
// by current_token() at the time of the request, so rotated tokens work.
//
// Retries (ClientOptions::retry): a request whose answer is transient is
// retried with jittered exponential backoff only when repeating it cannot do
// something twice: the rule is http::Client's
// (include/gracekeeper/http/client.h); what is transient is read from the
// metav1.Status (ApiError::transient). A Retry-After (the header, or the
// Status's retryAfterSeconds) also holds the same request after the call
// gave up: its caller's retry waits for it too.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/http/options.h"
#include "gracekeeper/kube/config.h"
#include "gracekeeper/kube/error.h"

namespace gracekeeper::http {
class Client;
struct Request;
class Transport;  // include/gracekeeper/http/transport.h: the seam to sockets
}  // namespace gracekeeper::http

namespace gracekeeper::kube {

namespace detail {
using Transport = gracekeeper::http::Transport;
}

// Which collection a call addresses: /api/v1/... for the core group ("").
struct Resource {
  std::string group{};  // "" for core
  std::string version{};
  std::string resource{};  // plural, lower case: "configmaps"
  bool namespaced = true;
};

namespace resources {
inline const Resource namespaces{"", "v1", "namespaces", false};
inline const Resource config_maps{"", "v1", "configmaps", true};
inline const Resource pods{"", "v1", "pods", true};
inline const Resource services{"", "v1", "services", true};
inline const Resource events{"", "v1", "events", true};
inline const Resource deployments{"apps", "v1", "deployments", true};
inline const Resource leases{"coordination.k8s.io", "v1", "leases", true};
}  // namespace resources

// Timeouts, retries and the connection pool are the http layer's (an
// http::Client under every kube::Client); these are the names the kube
// client's users know them by.
using Timeouts = http::Timeouts;
using RetryPolicy = http::RetryPolicy;
using ClientOptions = http::Options;

struct ListOptions {
  std::string label_selector{};
  std::string field_selector{};
  std::optional<std::int64_t> limit{};  // page size; the answer's metadata.continue leads on
  std::string continue_token{};
  std::string resource_version{};  // "" = most recent (quorum read)
};

struct WriteOptions {
  std::string field_manager{};  // fieldManager query parameter, if set
  bool dry_run = false;
  std::string subresource{};  // e.g. "status"
  // false: the answer (the whole object written) is not parsed, for a
  // caller that sees the change on its watch anyway. A success returns only
  // the written object's metadata.generation ({"metadata":{"generation":N}},
  // read from the answer's first bytes: metadata_generation), or an empty
  // object when the answer has none. Errors are decoded either way.
  bool read_object = true;
};

// An object's metadata.generation from its JSON text, reading only as far as
// that member (an API server writes metadata, and in it generation, near the
// start); nullopt when the text is not an object with one.
std::optional<std::int64_t> metadata_generation(std::string_view text);

struct ApplyOptions {
  std::string field_manager{};  // required by the server for apply
  bool force = false;           // take over fields owned by other managers
  bool dry_run = false;
  std::string subresource{};
  bool read_object = true;  // as WriteOptions::read_object
};

struct DeleteOptions {
  std::string propagation_policy{};  // "Foreground", "Background", "Orphan" or "" (default)
  std::optional<std::int64_t> grace_period_seconds{};
  std::string precondition_uid{};
  std::string precondition_resource_version{};
  bool dry_run = false;
};

struct WatchOptions {
  std::string resource_version{};  // start after this version (from a list); "" = now
  std::string label_selector{};
  std::string field_selector{};
  std::chrono::seconds timeout{300};  // timeoutSeconds: the server ends the watch after this
  bool allow_bookmarks = true;
  // A streaming list (KEP-3157, client-go's WatchListClient): the server
  // first sends the current state as ADDED events, from its watch cache, then
  // a BOOKMARK annotated k8s.io/initial-events-end, then changes. Sent with
  // resourceVersionMatch=NotOlderThan; needs allow_bookmarks.
  bool send_initial_events = false;
};

struct ServerVersion {
  std::string major{};
  std::string minor{};
  std::string git_version{};  // "v1.37.2"
};

// One resource of a group/version as discovery lists it.
struct DiscoveredResource {
  std::string name{};  // "deployments", "deployments/status"
  std::string kind{};
  bool namespaced = false;
  std::vector<std::string> verbs{};
};

// How a watch ended when it did not fail: Closed (the server ended the
// stream: timeoutSeconds elapsed, or it restarted cleanly) or Stopped (the
// chunk handler returned false).
using WatchEnd = http::StreamEnd;

// Gets each piece of a watch body as it arrives. Pieces follow the wire's
// chunking, not the event boundaries: a JSON event may be split across calls
// and one call may carry several events. Return false to stop the watch.
using ChunkHandler = http::ChunkHandler;

using Result = std::expected<nlohmann::json, ApiError>;

class Client {
 public:
  // TLS settings (CA, client certificate) are loaded here; a problem with
  // them is reported by every call as a Transport error naming the PEM.
  Client(boost::asio::any_io_executor executor, ClusterConfig config, ClientOptions options = {});
  // The seam for tests: any Transport (e.g. in-memory streams).
  Client(std::unique_ptr<detail::Transport> transport, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Arguments are taken by value, so a call may be co_spawned with
  // temporaries. `namespace_` is ignored for cluster-scoped resources; for
  // `list` and `watch` an empty namespace means all namespaces.
  //
  // GCC 12 (Debian 12's compiler) miscompiles an aggregate temporary inside
  // a co_await expression (a double free): inside a coroutine, name an
  // options struct before the call (`WriteOptions o{...}; co_await
  // c.create(..., o)`) rather than writing `{...}` in it. That is why the
  // options parameters have overloads instead of `= {}` defaults.
  boost::asio::awaitable<Result> get(Resource, std::string namespace_, std::string name,
                                     std::string subresource = {});
  // One page (or everything, without a limit): the List object as sent.
  boost::asio::awaitable<Result> list(Resource, std::string namespace_, ListOptions);
  // Follows metadata.continue until the end and returns one List with all
  // items; metadata.resourceVersion is the snapshot all pages came from, the
  // one to watch from. A continue token that expired gives Gone: list again.
  boost::asio::awaitable<Result> list_all(Resource, std::string namespace_, ListOptions);
  boost::asio::awaitable<Result> create(Resource, std::string namespace_, nlohmann::json object,
                                        WriteOptions);
  // PUT: replaces the object (or its subresource); metadata.resourceVersion
  // in `object` makes it conditional (Conflict if it changed).
  boost::asio::awaitable<Result> replace(Resource, std::string namespace_, std::string name,
                                         nlohmann::json object, WriteOptions);
  // PUT .../status.
  boost::asio::awaitable<Result> update_status(Resource, std::string namespace_, std::string name,
                                               nlohmann::json object, WriteOptions);
  // DELETE; the answer is the deleted object or a Status.
  boost::asio::awaitable<Result> remove(Resource, std::string namespace_, std::string name,
                                        DeleteOptions);
  // Server-side apply: `object` is the applied configuration (apiVersion,
  // kind, metadata.name and only the fields this manager owns).
  boost::asio::awaitable<Result> apply(Resource, std::string namespace_, std::string name,
                                       nlohmann::json object, ApplyOptions);
  // RFC 7386 merge patch (application/merge-patch+json).
  boost::asio::awaitable<Result> merge_patch(Resource, std::string namespace_, std::string name,
                                             nlohmann::json patch, WriteOptions);
  // RFC 6902 JSON patch: `patch` is an array of operations.
  boost::asio::awaitable<Result> json_patch(Resource, std::string namespace_, std::string name,
                                            nlohmann::json patch, WriteOptions);

  // The same with default options.
  boost::asio::awaitable<Result> list(Resource r, std::string ns) {
    return list(std::move(r), std::move(ns), ListOptions{});
  }
  boost::asio::awaitable<Result> list_all(Resource r, std::string ns) {
    return list_all(std::move(r), std::move(ns), ListOptions{});
  }
  boost::asio::awaitable<Result> create(Resource r, std::string ns, nlohmann::json object) {
    return create(std::move(r), std::move(ns), std::move(object), WriteOptions{});
  }
  boost::asio::awaitable<Result> replace(Resource r, std::string ns, std::string name,
                                         nlohmann::json object) {
    return replace(std::move(r), std::move(ns), std::move(name), std::move(object), WriteOptions{});
  }
  boost::asio::awaitable<Result> update_status(Resource r, std::string ns, std::string name,
                                               nlohmann::json object) {
    return update_status(std::move(r), std::move(ns), std::move(name), std::move(object),
                         WriteOptions{});
  }
  boost::asio::awaitable<Result> remove(Resource r, std::string ns, std::string name) {
    return remove(std::move(r), std::move(ns), std::move(name), DeleteOptions{});
  }
  boost::asio::awaitable<Result> merge_patch(Resource r, std::string ns, std::string name,
                                             nlohmann::json patch) {
    return merge_patch(std::move(r), std::move(ns), std::move(name), std::move(patch),
                       WriteOptions{});
  }
  boost::asio::awaitable<Result> json_patch(Resource r, std::string ns, std::string name,
                                            nlohmann::json patch) {
    return json_patch(std::move(r), std::move(ns), std::move(name), std::move(patch),
                      WriteOptions{});
  }

  boost::asio::awaitable<std::expected<ServerVersion, ApiError>> server_version();
  // GET /apis/<group_version> (or /api/v1 for "v1").
  boost::asio::awaitable<std::expected<std::vector<DiscoveredResource>, ApiError>> discover(
      std::string group_version);

  // Opens a watch and hands the body to `on_chunk` as it arrives, until the
  // server ends it, the handler returns false, the connection fails or the
  // coroutine is cancelled (terminal cancellation: gives a Transport error
  // "operation aborted"). Not retried: the caller relists/rewatches (410
  // Gone arrives as an ApiError when the server refuses the
  // resourceVersion up front, or as an ERROR event inside the stream).
  boost::asio::awaitable<std::expected<WatchEnd, ApiError>> watch(Resource, std::string namespace_,
                                                                  WatchOptions,
                                                                  ChunkHandler on_chunk);

  // Any path (e.g. "/readyz"), GET, JSON or not; for diagnostics.
  boost::asio::awaitable<std::expected<std::string, ApiError>> get_raw(std::string target);

 private:
  using Call = http::Request;
  boost::asio::awaitable<Result> send_json(Call);
  // send_json, or with read_object false only the status (a success is {}).
  boost::asio::awaitable<Result> send_object(Call, bool read_object);
  boost::asio::awaitable<std::expected<std::string, ApiError>> send(Call);

  std::unique_ptr<http::Client> http_;
};

// The path of a collection or object: /apis/apps/v1/namespaces/ns/deployments/name/status.
std::string resource_path(const Resource&, std::string_view namespace_, std::string_view name = {},
                          std::string_view subresource = {});

}  // namespace gracekeeper::kube
