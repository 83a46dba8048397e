// Kubernetes Events (events.k8s.io/v1) for the objects gracekeeper manages,
// deduplicated like client-go's tools/events broadcaster: the first
// occurrence creates an Event without a series; a repeat of the same
// (regarding, type, reason, note) within the window patches that Event's
// series {count, lastObservedTime} (count 2 on the second occurrence)
// instead of creating another object.
//
// Recording is fire-and-forget: record() never blocks, never throws, and
// failures are logged to stderr and counted (EventRecorder::stats()). How
// each write ended is told to on_outcome's callback, so that the caller can
// count an Event as reported once the server has it, and record it again
// when its write failed: the recorder itself does not retry.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "gracekeeper/kube/client.h"

namespace gracekeeper::kube {

inline const Resource events_v1{"events.k8s.io", "v1", "events", true};

// The object an Event is about (core/v1 ObjectReference, the fields kubectl shows).
struct ObjectRef {
  std::string api_version{};  // "apps/v1"
  std::string kind{};         // "Deployment"
  std::string namespace_{};   // "" for cluster-scoped objects
  std::string name{};
  std::string uid{};
  bool operator==(const ObjectRef&) const = default;
};

enum class EventType { Normal, Warning };
std::string_view to_string(EventType);

struct EventRecord {
  ObjectRef regarding{};
  EventType type = EventType::Normal;
  std::string reason{};  // UpperCamelCase, e.g. "BudgetClamped"
  std::string action{};  // what was done or failed, e.g. "Tune"
  std::string note{};    // human-readable; cut to 1 kB (the API's limit)
  // The Event object's metadata.annotations: what a reader needs of the
  // Event besides its prose (the operator's, EventLedger::stamp).
  std::map<std::string, std::string> annotations{};
};

// What identifies "the same event" for deduplication: every field of the
// record but its action, each length-prefixed. It holds the whole record, so
// a series is kept as this one string (decode_key gives it back).
std::string dedupe_key(const EventRecord&);
// The record a dedupe_key was made of (action empty); nullopt for a string
// that is not one.
std::optional<EventRecord> decode_key(std::string_view key);

// The deduplication state, without I/O: which Event (by name) each recent
// key maps to, how often it was observed and how much of that has been
// written. Writes for one key are serialized: while one is in flight, new
// observations only raise the count, and the writer picks up the rest.
class EventSeriesCache {
 public:
  using Clock = std::chrono::system_clock;

  struct Entry {
    std::string key{};  // dedupe_key: the record, but its action
    std::string action{};
    std::string name{};              // the Event object's name
    std::int64_t count = 0;          // observations in this series
    std::int64_t written_count = 0;  // count the server has (0: not created yet)
    Clock::time_point first_time{};  // eventTime
    Clock::time_point last_time{};   // series.lastObservedTime
    bool writing = false;
    EventRecord record() const;  // decoded from key and action
  };

  // The next write for a key: create the Event (with a series when count >=
  // 2) or patch its series.
  struct Write {
    enum class Kind { Create, PatchSeries } kind = Kind::Create;
    std::string key{};
    std::string name{};
    std::int64_t count = 0;
  };

  EventSeriesCache(std::size_t capacity, std::chrono::seconds window)
      : capacity_(capacity), window_(window) {}

  // Records an occurrence at `now`; `new_name` names the Event when this
  // starts a new series (first occurrence, or the last one is older than
  // the window). Returns the entry when the caller should start a writer for
  // it, nullptr when a writer has it already.
  const Entry* observe(const EventRecord&, Clock::time_point now, const std::string& new_name);
  // What the writer should send next, or nullopt when the server is up to
  // date (the key is then no longer writing).
  std::optional<Write> next_write(std::string_view key);
  void write_succeeded(const Write&);
  // A failed write: a PatchSeries that found no Event (NotFound) recreates
  // it next time; other failures drop the entry (counted by the caller).
  void write_failed(const Write&, bool not_found);

  const Entry* find(std::string_view key) const;
  std::size_t size() const { return index_.size(); }

 private:
  static const Entry* claim(Entry&);
  void touch(std::list<Entry>::iterator);
  void evict();

  std::size_t capacity_;
  std::chrono::seconds window_;
  std::list<Entry> lru_{};  // most recent first
  // Keyed by a view of the entry's own key: list nodes never move.
  std::unordered_map<std::string_view, std::list<Entry>::iterator> index_{};
};

// Events recorded but not yet handed to a writer, oldest first. Thousands
// wait while the operator is busy (about 25,000 in a cold start at 10,000
// Deployments), so they are kept small and out of the heap: each is packed
// into chunks of memory of their own (mmap), and a chunk goes back to the
// system as soon as its last Event is taken. Notes are stored once per
// distinct text: a burst of Deployments alike reports the same notes.
class HeldEvents {
 public:
  using SystemTime = std::chrono::system_clock::time_point;
  using SteadyTime = std::chrono::steady_clock::time_point;
  struct Held {
    EventRecord record;
    SystemTime observed;  // when it was recorded: the Event's time
    SteadyTime since;     // for how long it has waited
  };

  HeldEvents() = default;
  ~HeldEvents();
  HeldEvents(const HeldEvents&) = delete;
  HeldEvents& operator=(const HeldEvents&) = delete;

  void push(const EventRecord&, SystemTime observed, SteadyTime since);
  // The oldest; the queue must not be empty.
  Held pop();
  SteadyTime front_since() const;
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  // Memory held now: chunk bytes (mapped) and distinct notes.
  std::size_t chunk_bytes() const;
  std::size_t distinct_notes() const { return notes_.size(); }

  static constexpr std::size_t kChunkSize = std::size_t{256} * 1024;

 private:
  struct Chunk {
    char* data = nullptr;
    std::size_t capacity = 0;
    std::size_t written = 0;
    std::size_t read = 0;
  };
  std::deque<Chunk> chunks_{};
  std::size_t size_ = 0;
  // Note text -> how many held Events use it.
  std::unordered_map<std::string, std::size_t> notes_{};
};

// The JSON sent for a Write (pure; exposed for tests).
nlohmann::json event_object(const EventSeriesCache::Entry&, std::int64_t count,
                            const std::string& reporting_controller,
                            const std::string& reporting_instance);
nlohmann::json series_patch(const EventSeriesCache::Entry&, std::int64_t count);
// The Event's namespace: the regarding object's, "default" for cluster-scoped ones.
std::string event_namespace(const ObjectRef&);

struct EventRecorderOptions {
  std::string reporting_controller = "gracekeeper.dev/operator";
  std::string reporting_instance{};     // this replica's identity (pod name)
  std::chrono::seconds window{6 * 60};  // client-go: a series ends after 6 min without repeats
  std::size_t cache_size = 1024;
  std::size_t max_writers =
      4;  // concurrent Event writes (the default workers); the rest wait in order
  // Events yield to the work they report: while busy() holds (the operator's
  // work queue has work), they wait; once the oldest has waited max_defer,
  // one writer is started per overdue_interval (each writes one Event)
  // until busy() ends: a trickle that never takes more than a sliver of the
  // API server from the work. Unset: never busy.
  std::function<bool()> busy{};
  std::chrono::milliseconds max_defer{60'000};
  std::chrono::milliseconds overdue_interval{250};
};

class EventRecorder {
 public:
  struct Stats {
    std::uint64_t recorded = 0;  // record() calls
    std::uint64_t created = 0;   // Event objects created
    std::uint64_t patched = 0;   // series updates sent
    std::uint64_t failed = 0;    // writes that failed (logged)
  };

  // `client` must outlive the recorder; the recorder must outlive its
  // writers (in_flight() == 0, or the executor stopped).
  EventRecorder(boost::asio::any_io_executor executor, Client& client,
                EventRecorderOptions options);
  ~EventRecorder();
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  // Fire-and-forget: returns at once; the write runs on the executor.
  void record(EventRecord);
  void record(ObjectRef regarding, EventType type, std::string reason, std::string action,
              std::string note);

  // Called after each write of a series, with its record: written (the
  // server has every occurrence so far), or failed (the series is dropped;
  // a series patch that finds its Event gone is not a failure: the Event is
  // created again). Not called for occurrences still waiting.
  using Outcome = std::function<void(const EventRecord&, bool written)>;
  // Each callback given is told (one per reconciler that records).
  void on_outcome(Outcome outcome) {
    if (!outcome_) {
      outcome_ = std::move(outcome);
      return;
    }
    outcome_ = [first = std::move(outcome_), second = std::move(outcome)](const EventRecord& e,
                                                                          bool written) {
      first(e, written);
      second(e, written);
    };
  }

  Stats stats() const { return stats_; }
  // Writes waiting or running.
  std::size_t in_flight() const { return writers_ + held_.size(); }
  // Events waiting for a writer, and the memory they take.
  const HeldEvents& held() const { return held_; }
  // Writes running.
  std::size_t writing() const { return writers_; }

 private:
  boost::asio::awaitable<void> write_loop(std::string key);
  std::string new_name(const ObjectRef&);

  boost::asio::any_io_executor executor_;
  Client& client_;
  EventRecorderOptions options_;
  EventSeriesCache cache_;
  Outcome outcome_{};
  Stats stats_{};
  void start_writers();
  struct Limit {
    std::size_t writers;  // allowed now
    bool busy;            // held back by busy(): look again later
  };
  Limit writer_limit() const;
  boost::asio::awaitable<void> recheck_later();

  HeldEvents held_{};        // recorded, not yet handed to a writer
  bool rechecking_ = false;  // a recheck_later() is pending
  // When the last writer was started while busy (overdue_interval).
  std::chrono::steady_clock::time_point last_overdue_{};
  std::size_t writers_ = 0;
  std::uint64_t sequence_ = 0;
};

}  // namespace gracekeeper::kube
