// An informer, split the way client-go splits it (tools/cache):
//
//  - Reflector: the list/watch loop (reflector.go). It keeps a Store (store.h)
//    equal to the server's state and tells the handlers what changed.
//  - StoreCore / Store<T>: the typed, indexed storage of immutable snapshots.
//  - InformerHandlers: what runs on a change; they get keys only and should
//    only enqueue them (sample-controller). Several sets may be added.
//  - Informer<T>: the three wired together for one resource and one T.
//
// The list/watch loop:
//  - sync, then WATCH from the synced resourceVersion, bookmarks on,
//    timeoutSeconds random in [min_watch_timeout, max_watch_timeout];
//  - sync as client-go's reflector does: a streaming list
//    (sendInitialEvents=true, resourceVersionMatch=NotOlderThan,
//    resourceVersion ""), the current state as ADDED events from the API
//    server's watch cache, ended by a bookmark annotated
//    k8s.io/initial-events-end; the same stream then carries the changes.
//    A server that refuses it, or an informer told not to stream
//    (InformerOptions::watch_list), gets paginated LISTs of the most recent
//    state (resourceVersion ""), not client-go's resourceVersion "0": the
//    watch cache answers "0" with the whole list at once, whatever the page
//    size;
//  - the resourceVersion follows every event and bookmark; a watch the server
//    ends is re-opened from it at once;
//  - 410 Gone / Expired (refused up front or as an ERROR event): relist and
//    reconcile the store, emitting the adds, updates and deletes the gap hid;
//  - transport errors, a malformed stream, other errors: re-watch from the
//    same resourceVersion after a jittered backoff (0.8 s doubling to 30 s,
//    back to 0.8 s once no failure happened for 2 minutes).
//
// Only a projection of each object is stored: `project` returns the fields
// the controller needs, or null to filter the object out (it is then not
// stored, and if it was stored it counts as deleted).
//
// Everything runs on the caller's executor as one coroutine (`run`); no
// threads, not thread-safe. `run` ends when stop() is called or when the
// coroutine's cancellation slot is signalled (terminal cancellation).
#pragma once

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
#include "gracekeeper/kube/store.h"
#include "gracekeeper/kube/watch_decoder.h"

namespace gracekeeper::kube {

struct InformerOptions {
  std::string namespace_{};  // "" = all namespaces (ignored for cluster-scoped resources)
  std::string label_selector{};
  std::string field_selector{};
  std::int64_t page_size = 100;  // small pages keep the peak of a LIST close to the steady cache
                                 // (docs/performance.md, "What bounds each figure")
  // The members of each object that the projection reads, as FieldSet paths
  // ("spec.replicas"); the rest of each object is not built (fields.h).
  // Empty: the whole object.
  std::vector<std::string> fields{};
  // Objects whose metadata (as `fields` keeps it) this refuses are cached as
  // the projection of their metadata alone; the rest of their text is not
  // built (FieldSet). Empty: every object is built as `fields` says.
  FieldSet::Wanted wanted{};
  // Sync with a streaming list (WatchOptions::send_initial_events), as
  // client-go's WatchListClient does: served from the API server's watch
  // cache and read event by event, so neither etcd nor this process holds
  // the whole list at once. false, or a server that refuses it: paginated
  // LISTs.
  bool watch_list = true;
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

// "namespace/name", or "name" when the object has no namespace.
std::string object_key(const nlohmann::json& object);

class ReflectorTestAccess;  // test/support: drives the loop into corners

// The list/watch loop on JSON objects with a type-erased projection; it
// writes into a StoreCore it does not own. Use Informer<T> below.
class Reflector {
 public:
  using Projection = std::function<StoreCore::Value(const nlohmann::json&)>;

  // `client` and `store` must outlive the reflector; `client` must run on the
  // executor `run` runs on.
  Reflector(Client& client, Resource resource, InformerOptions options, Projection project,
            StoreCore& store);
  Reflector(const Reflector&) = delete;
  Reflector& operator=(const Reflector&) = delete;

  // Before run(); handlers must not throw or destroy the informer. Each set
  // is told of every change, in the order the sets were added.
  void add_handlers(InformerHandlers handlers) { handlers_.push_back(std::move(handlers)); }

  // List and watch until stop() or cancellation. Call once at a time.
  boost::asio::awaitable<void> run();
  // Ends run() at its next step (an open watch or backoff is interrupted).
  // Called while no run() is active, it makes the next run() return at once.
  void stop();

  // The first LIST is whole in the store. Before that, the store fills (and
  // on_add fires) item by item as the first LIST's pages arrive.
  bool has_synced() const { return synced_; }
  // The resourceVersion the next watch starts from.
  const std::string& resource_version() const { return resource_version_; }
  const InformerCounters& counters() const { return counters_; }
  // The last failure, for a log line ("" if none yet).
  const std::string& last_error() const { return last_error_; }

 private:
  friend class ReflectorTestAccess;
  enum class WatchOutcome { Closed, Gone, Failed, Interrupted, Refused };
  enum class Step { Next, Gone, Failed };

  // Ends the current watch and re-watches from `resource_version`.
  void restart_watch_from(std::string resource_version);
  boost::asio::awaitable<bool> list_and_replace();
  std::string list_path() const;
  bool read_list_page(const std::expected<std::string, ApiError>& page,
                      std::function<void(nlohmann::json&&)> on_item, std::string& list_version,
                      std::string& continue_token);
  // A watch; with `initial_events`, a streaming list that syncs the store
  // first (Informer docs above) and then goes on as a watch.
  boost::asio::awaitable<WatchOutcome> watch_once(bool initial_events);
  WatchOptions start_watch(bool initial_events);
  WatchOutcome watch_refused(const ApiError& e, bool initial_events);
  void finish_initial_events(std::string version);
  boost::asio::awaitable<void> back_off();
  boost::asio::awaitable<void> wait_wake();
  template <class T>
  boost::asio::awaitable<std::optional<T>> interruptible(boost::asio::awaitable<T> op);

  void replace(StoreCore::Entries fresh, std::string version);
  Step apply(const WatchEvent& event);
  std::optional<WatchOutcome> apply_decoded(WatchDecoder& decoder, std::uint64_t& applied);
  StoreCore::Value project(const nlohmann::json& object);
  void upsert(std::string key, StoreCore::Entry entry);
  void erase(const std::string& key);
  void notify_added(const std::string& key);
  void notify_updated(const std::string& key);
  void notify_deleted(const std::string& key);
  std::chrono::milliseconds next_backoff();
  std::chrono::seconds watch_timeout();

  Client& client_;
  Resource resource_;
  InformerOptions options_;
  Projection project_;
  FieldSet fields_;
  StoreCore& store_;
  std::vector<InformerHandlers> handlers_;

  std::string resource_version_;
  bool synced_ = false;
  // While a streaming list sends the initial state: the fresh store it
  // builds (nullopt when it streams straight into an empty store).
  bool initial_events_ = false;
  std::optional<StoreCore::Entries> initial_store_;
  bool watch_list_refused_ = false;
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

// The typed informer: a Reflector storing the T that `project` returns.
template <class T>
class Informer {
 public:
  using Project = std::function<std::optional<T>(const nlohmann::json&)>;

  Informer(Client& client, Resource resource, InformerOptions options, Project project)
      : reflector_(
            client, std::move(resource), std::move(options),
            [p = std::move(project)](const nlohmann::json& o) -> StoreCore::Value {
              auto v = p(o);
              if (!v) return nullptr;
              return std::make_shared<const T>(std::move(*v));
            },
            core_) {}

  void add_handlers(InformerHandlers handlers) { reflector_.add_handlers(std::move(handlers)); }
  boost::asio::awaitable<void> run() { return reflector_.run(); }
  void stop() { reflector_.stop(); }

  bool has_synced() const { return reflector_.has_synced(); }
  Store<T> store() const { return Store<T>(core_); }
  // The cached projection, or null: an immutable snapshot, valid as long as
  // it is held.
  std::shared_ptr<const T> get(std::string_view key) const { return store().get(key); }
  std::vector<std::string> keys() const { return core_.keys(); }
  std::size_t size() const { return core_.size(); }
  VersionMap versions() const { return core_.versions(); }
  const std::string& resource_version() const { return reflector_.resource_version(); }
  const InformerCounters& counters() const { return reflector_.counters(); }
  const std::string& last_error() const { return reflector_.last_error(); }
  Reflector& reflector() { return reflector_; }

 private:
  StoreCore core_;  // before reflector_, which writes into it
  Reflector reflector_;
};

}  // namespace gracekeeper::kube
