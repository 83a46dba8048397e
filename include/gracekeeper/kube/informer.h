// An informer: a local cache of one resource kept up to date by list+watch,
// after client-go's reflector (tools/cache/reflector.go).
//
//  - LIST (paginated) then WATCH from the list's resourceVersion, bookmarks
//    on, timeoutSeconds random in [min_watch_timeout, max_watch_timeout];
//  - the resourceVersion follows every event and bookmark; a watch the server
//    ends is re-opened from it at once;
//  - 410 Gone / Expired (refused up front or as an ERROR event): relist and
//    reconcile the cache, emitting the adds, updates and deletes the gap hid;
//  - transport errors, a malformed stream, other errors: re-watch from the
//    same resourceVersion after a jittered backoff (0.8 s doubling to 30 s,
//    back to 0.8 s once no failure happened for 2 minutes).
//
// Only a projection of each object is cached: `project` returns the fields
// the controller needs, or nullopt to filter the object out (it is then not
// cached, and if it was cached it counts as deleted). The cache maps
// "namespace/name" (just "name" for cluster-scoped resources) to the
// object's resourceVersion and its projection.
//
// Handlers get keys only and should only enqueue them (sample-controller);
// they run synchronously inside the informer, after the cache changed.
//
// Everything runs on the caller's executor as one coroutine (`run`); no
// threads, not thread-safe. `run` ends when stop() is called or when the
// coroutine's cancellation slot is signalled (terminal cancellation).
#pragma once

#include <any>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gracekeeper/kube/client.h"
#include "gracekeeper/kube/fields.h"
#include "gracekeeper/kube/watch_decoder.h"

namespace gracekeeper::kube {

struct InformerOptions {
  std::string namespace_{};  // "" = all namespaces (ignored for cluster-scoped resources)
  std::string label_selector{};
  std::string field_selector{};
  std::int64_t page_size =
      100;  // small pages keep the peak of a LIST close to the steady cache (README, Performance)
  // The members of each object that the projection reads, as FieldSet paths
  // ("spec.replicas"); the rest of each object is not built (fields.h).
  // Empty: the whole object.
  std::vector<std::string> fields{};
  // Objects whose metadata (as `fields` keeps it) this refuses are cached as
  // the projection of their metadata alone; the rest of their text is not
  // built (FieldSet). Empty: every object is built as `fields` says.
  FieldSet::Wanted wanted{};
  std::chrono::seconds min_watch_timeout{300};
  std::chrono::seconds max_watch_timeout{600};
  std::chrono::milliseconds initial_backoff{800};
  std::chrono::milliseconds max_backoff{30'000};
  // The backoff starts again at initial_backoff when the last failure is
  // older than this.
  std::chrono::milliseconds backoff_reset{120'000};
  // A wait is backoff * (1 + jitter * U[0,1)), at most max_backoff.
  double backoff_jitter = 1.0;
  std::uint64_t seed = 0;  // jitter and watch timeouts; 0 = std::random_device
};

struct InformerHandlers {
  std::function<void(const std::string& key)> on_add{};
  std::function<void(const std::string& key)> on_update{};
  std::function<void(const std::string& key)> on_delete{};
};

// For metrics.
struct InformerCounters {
  std::uint64_t lists = 0;              // successful LISTs, the first one included
  std::uint64_t relists = 0;            // LISTs caused by 410 Gone / Expired
  std::uint64_t list_errors = 0;        // failed LISTs
  std::uint64_t watch_restarts = 0;     // watches opened after the first one
  std::uint64_t watch_errors = 0;       // watches ended by an error (transport, decoding, status)
  std::uint64_t events = 0;             // watch events applied (bookmarks included)
  std::uint64_t projection_errors = 0;  // `project` threw: the object was treated as rejected
};

// key -> resourceVersion, ordered: what a cache holds, comparable to a LIST.
using VersionMap = std::map<std::string, std::string>;

// What changed between two versions of a cache: keys only in `fresh` were
// added, keys in both with a different resourceVersion updated, keys only in
// `old` deleted. Each list is sorted. Used to reconcile after a relist.
struct CacheDiff {
  std::vector<std::string> added;
  std::vector<std::string> updated;
  std::vector<std::string> deleted;
};
CacheDiff diff_cache(const VersionMap& old, const VersionMap& fresh);

// "namespace/name", or "name" when the object has no namespace.
std::string object_key(const nlohmann::json& object);

// The informer on JSON objects with a type-erased projection (std::any).
// Use Informer<T> below; this is its non-template engine.
class InformerCore {
 public:
  using Projection = std::function<std::optional<std::any>(const nlohmann::json&)>;

  // `client` must outlive the informer and run on the executor `run` runs on.
  InformerCore(Client& client, Resource resource, InformerOptions options, Projection project);
  InformerCore(const InformerCore&) = delete;
  InformerCore& operator=(const InformerCore&) = delete;

  // Set before run(); handlers must not throw or destroy the informer.
  void set_handlers(InformerHandlers handlers) { handlers_ = std::move(handlers); }

  // List and watch until stop() or cancellation. Call once at a time.
  boost::asio::awaitable<void> run();
  // Ends run() at its next step (an open watch or backoff is interrupted).
  // Called while no run() is active, it makes the next run() return at once.
  void stop();

  // The first LIST is whole in the cache. Before that, the cache fills (and
  // on_add fires) item by item as the first LIST's pages arrive.
  bool has_synced() const { return synced_; }
  const std::any* find(std::string_view key) const;
  std::vector<std::string> keys() const;  // sorted
  std::size_t size() const { return cache_.size(); }
  VersionMap versions() const;
  // The resourceVersion the next watch starts from.
  const std::string& resource_version() const { return resource_version_; }
  const InformerCounters& counters() const { return counters_; }
  // The last failure, for a log line ("" if none yet).
  const std::string& last_error() const { return last_error_; }

  // Test hook: ends the current watch and re-watches from `resource_version`
  // (e.g. an old, compacted one, to force a 410 and a relist).
  void restart_watch_from(std::string resource_version);

 private:
  struct Entry {
    std::string resource_version;
    std::any value;
  };
  enum class WatchOutcome { closed, gone, failed, interrupted };
  enum class Step { next, gone, failed };

  boost::asio::awaitable<bool> list_and_replace();
  boost::asio::awaitable<WatchOutcome> watch_once();
  boost::asio::awaitable<void> back_off();
  boost::asio::awaitable<void> wait_wake();
  template <class T>
  boost::asio::awaitable<std::optional<T>> interruptible(boost::asio::awaitable<T> op);

  void replace(std::unordered_map<std::string, Entry> fresh, std::string version);
  Step apply(const WatchEvent& event);
  std::optional<std::any> project(const nlohmann::json& object);
  void upsert(std::string key, Entry entry);
  void erase(const std::string& key);
  void notify(const std::function<void(const std::string&)>& handler, const std::string& key);
  std::chrono::milliseconds next_backoff();
  std::chrono::seconds watch_timeout();

  Client& client_;
  Resource resource_;
  InformerOptions options_;
  Projection project_;
  FieldSet fields_;
  InformerHandlers handlers_{};

  std::unordered_map<std::string, Entry> cache_;
  std::string resource_version_;
  bool synced_ = false;
  InformerCounters counters_{};
  std::string last_error_;

  // Interrupts whatever run() waits for; armed at time_point::max while running.
  std::optional<boost::asio::steady_timer> wake_;
  bool stopping_ = false;
  bool rewatch_requested_ = false;

  std::mt19937_64 random_;
  std::chrono::milliseconds backoff_;
  std::optional<std::chrono::steady_clock::time_point> last_failure_;
};

// The typed informer: caches the T that `project` returns. T must be
// copy-constructible (it is held in a std::any).
template <class T>
class Informer {
 public:
  using Project = std::function<std::optional<T>(const nlohmann::json&)>;

  Informer(Client& client, Resource resource, InformerOptions options, Project project)
      : core_(client, std::move(resource), std::move(options),
              [p = std::move(project)](const nlohmann::json& o) -> std::optional<std::any> {
                auto v = p(o);
                if (!v) return std::nullopt;
                return std::any(std::move(*v));
              }) {}

  void set_handlers(InformerHandlers handlers) { core_.set_handlers(std::move(handlers)); }
  boost::asio::awaitable<void> run() { return core_.run(); }
  void stop() { core_.stop(); }

  bool has_synced() const { return core_.has_synced(); }
  // The cached projection, or nullptr; valid until the informer runs again.
  // Never modify what the cache holds.
  const T* get(std::string_view key) const {
    const std::any* a = core_.find(key);
    return a ? std::any_cast<T>(a) : nullptr;
  }
  std::vector<std::string> keys() const { return core_.keys(); }
  std::size_t size() const { return core_.size(); }
  VersionMap versions() const { return core_.versions(); }
  const std::string& resource_version() const { return core_.resource_version(); }
  const InformerCounters& counters() const { return core_.counters(); }
  const std::string& last_error() const { return core_.last_error(); }
  void restart_watch_from(std::string rv) { core_.restart_watch_from(std::move(rv)); }

 private:
  InformerCore core_;
};

}  // namespace gracekeeper::kube
