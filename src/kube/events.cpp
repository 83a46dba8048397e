#include "gracekeeper/kube/events.h"

#include <fmt/core.h>
#include <sys/mman.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstring>
#include <exception>
#include <new>

#include "gracekeeper/core/time.h"
#include "gracekeeper/log/log.h"

namespace gracekeeper::kube {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

constexpr std::size_t kNoteLimit = 1024;  // events.k8s.io/v1 validation
constexpr std::size_t kShortLimit = 128;  // reason, action
constexpr std::size_t kNameLimit = 253;

// Cuts at a UTF-8 character boundary.
std::string cut(std::string s, std::size_t limit) {
  if (s.size() <= limit) return s;
  std::size_t n = limit;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s;
}

json object_ref_json(const ObjectRef& r) {
  json j = json::object();
  if (!r.api_version.empty()) j["apiVersion"] = r.api_version;
  if (!r.kind.empty()) j["kind"] = r.kind;
  if (!r.namespace_.empty()) j["namespace"] = r.namespace_;
  if (!r.name.empty()) j["name"] = r.name;
  if (!r.uid.empty()) j["uid"] = r.uid;
  return j;
}

}  // namespace

std::string_view to_string(EventType t) {
  return t == EventType::Warning ? "Warning" : "Normal";
}

std::string dedupe_key(const EventRecord& e) {
  // Length-prefixed fields: no separator can be forged by a field's content.
  std::string key;
  auto field = [&key](std::string_view f) {
    key += std::to_string(f.size());
    key += ':';
    key += f;
  };
  for (std::string_view f :
       {std::string_view(e.regarding.api_version), std::string_view(e.regarding.kind),
        std::string_view(e.regarding.namespace_), std::string_view(e.regarding.name),
        std::string_view(e.regarding.uid), to_string(e.type), std::string_view(e.reason),
        std::string_view(e.note)}) {
    field(f);
  }
  for (const auto& [name, value] : e.annotations) {
    field(name);
    field(value);
  }
  return key;
}

std::optional<EventRecord> decode_key(std::string_view key) {
  auto take = [&key](std::string& field) {
    const auto colon = key.find(':');
    if (colon == std::string_view::npos || colon == 0) return false;
    std::size_t size = 0;
    for (char c : key.substr(0, colon)) {
      if (c < '0' || c > '9' || size > key.size()) return false;
      size = size * 10 + static_cast<std::size_t>(c - '0');
    }
    if (key.size() - colon - 1 < size) return false;
    field.assign(key.substr(colon + 1, size));
    key.remove_prefix(colon + 1 + size);
    return true;
  };
  EventRecord e;
  std::string type;
  if (!take(e.regarding.api_version) || !take(e.regarding.kind) || !take(e.regarding.namespace_) ||
      !take(e.regarding.name) || !take(e.regarding.uid) || !take(type) || !take(e.reason) ||
      !take(e.note) || (type != "Normal" && type != "Warning")) {
    return std::nullopt;
  }
  while (!key.empty()) {  // the annotations, name and value
    std::string name;
    std::string value;
    if (!take(name) || !take(value)) return std::nullopt;
    e.annotations.insert_or_assign(std::move(name), std::move(value));
  }
  e.type = type == "Warning" ? EventType::Warning : EventType::Normal;
  return e;
}

EventRecord EventSeriesCache::Entry::record() const {
  EventRecord e = decode_key(key).value_or(EventRecord{});
  e.action = action;
  return e;
}

std::string event_namespace(const ObjectRef& r) {
  return r.namespace_.empty() ? std::string("default") : r.namespace_;
}

const EventSeriesCache::Entry* EventSeriesCache::observe(const EventRecord& record,
                                                         Clock::time_point now,
                                                         const std::string& new_name) {
  std::string key = dedupe_key(record);
  auto found = index_.find(std::string_view(key));
  if (found != index_.end()) {
    auto it = found->second;
    touch(it);
    if (now - it->last_time <= window_) {
      ++it->count;
      it->last_time = now;
      return claim(*it);
    }
    // The series has ended: a new Event. A writer still busy with the old
    // one picks the new series up through next_write.
    it->name = new_name;
    it->count = 1;
    it->written_count = 0;
    it->first_time = now;
    it->last_time = now;
    return claim(*it);
  }
  Entry e;
  e.key = std::move(key);
  e.key.shrink_to_fit();
  e.action = record.action;
  e.name = new_name;
  e.count = 1;
  e.first_time = now;
  e.last_time = now;
  e.writing = true;  // the caller starts its writer
  lru_.push_front(std::move(e));
  index_.emplace(std::string_view(lru_.front().key), lru_.begin());
  evict();  // never this entry: it is writing
  return &lru_.front();
}

const EventSeriesCache::Entry* EventSeriesCache::claim(Entry& e) {
  // One writer per key: set here, when the caller is told to start one, so
  // observations before that writer first runs do not start another.
  if (e.writing) return nullptr;
  e.writing = true;
  return &e;
}

std::optional<EventSeriesCache::Write> EventSeriesCache::next_write(std::string_view key) {
  auto found = index_.find(key);
  if (found == index_.end()) return std::nullopt;
  Entry& e = *found->second;
  if (e.written_count >= e.count) {
    e.writing = false;
    evict();
    return std::nullopt;
  }
  e.writing = true;
  Write w;
  w.kind = e.written_count == 0 ? Write::Kind::Create : Write::Kind::PatchSeries;
  w.key = std::string(key);
  w.name = e.name;
  w.count = e.count;
  return w;
}

void EventSeriesCache::write_succeeded(const Write& w) {
  auto found = index_.find(w.key);
  if (found == index_.end() || found->second->name != w.name) return;
  found->second->written_count = std::max(found->second->written_count, w.count);
}

void EventSeriesCache::write_failed(const Write& w, bool not_found) {
  auto found = index_.find(w.key);
  if (found == index_.end() || found->second->name != w.name) return;
  if (not_found && w.kind == Write::Kind::PatchSeries) {
    found->second->written_count = 0;  // deleted (or expired by TTL): create it again
    return;
  }
  auto entry = found->second;
  index_.erase(found);
  lru_.erase(entry);
}

const EventSeriesCache::Entry* EventSeriesCache::find(std::string_view key) const {
  auto found = index_.find(key);
  return found == index_.end() ? nullptr : &*found->second;
}

void EventSeriesCache::touch(std::list<Entry>::iterator it) {
  lru_.splice(lru_.begin(), lru_, it);
}

void EventSeriesCache::evict() {
  // An entry with a write waiting or running is not evicted: its event would
  // be lost. Over capacity until its writer is done (next_write evicts then).
  while (index_.size() > capacity_ && !lru_.empty() && !lru_.back().writing) {
    index_.erase(std::string_view(lru_.back().key));
    lru_.pop_back();
  }
}

// A held Event in its chunk: the type, the two times, the interned note,
// then the strings, each as a 2-byte length and its bytes.
namespace {

constexpr std::size_t kPage = 4096;

void put_bytes(char*& out, const void* data, std::size_t size) {
  std::memcpy(out, data, size);
  out += size;
}

void put_string(char*& out, std::string_view text) {
  const auto size = static_cast<std::uint16_t>(std::min<std::size_t>(text.size(), 0xffff));
  put_bytes(out, &size, sizeof size);
  put_bytes(out, text.data(), size);
}

// T may be a pointer (the interned note): its own bytes are what is stored.
template <class T>
T get(const char*& in) {
  T value;
  std::memcpy(&value, in, sizeof value);  // NOLINT(bugprone-sizeof-expression)
  in += sizeof value;                     // NOLINT(bugprone-sizeof-expression)
  return value;
}

std::string get_string(const char*& in) {
  const auto size = get<std::uint16_t>(in);
  std::string text(in, size);
  in += size;
  return text;
}

}  // namespace

HeldEvents::~HeldEvents() {
  for (auto& c : chunks_) ::munmap(c.data, c.capacity);
}

void HeldEvents::push(const EventRecord& e, SystemTime observed, SteadyTime since) {
  const std::string* note = nullptr;  // interned below, once the record has its room
  const std::string_view strings[] = {e.regarding.api_version,
                                      e.regarding.kind,
                                      e.regarding.namespace_,
                                      e.regarding.name,
                                      e.regarding.uid,
                                      e.reason,
                                      e.action};
  std::size_t size =
      sizeof(std::uint8_t) + 2 * sizeof(std::int64_t) +
      sizeof note;  // NOLINT(bugprone-sizeof-expression): the pointer is what is stored
  for (auto text : strings)
    size += sizeof(std::uint16_t) + std::min<std::size_t>(text.size(), 0xffff);
  // The annotations: their count, then name and value of each.
  const auto annotations =
      static_cast<std::uint16_t>(std::min<std::size_t>(e.annotations.size(), 0xffff));
  size += sizeof annotations;
  std::uint16_t counted = 0;
  for (const auto& [name, value] : e.annotations) {
    if (counted++ == annotations) break;
    size += 2 * sizeof(std::uint16_t) + std::min<std::size_t>(name.size(), 0xffff) +
            std::min<std::size_t>(value.size(), 0xffff);
  }
  if (chunks_.empty() || chunks_.back().capacity - chunks_.back().written < size) {
    const std::size_t capacity = std::max(kChunkSize, (size + kPage - 1) / kPage * kPage);
    void* data =
        ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) throw std::bad_alloc();
    chunks_.push_back({static_cast<char*>(data), capacity, 0, 0});
  }
  auto interned = notes_.try_emplace(e.note, 0).first;
  ++interned->second;
  note = &interned->first;  // nodes never move
  Chunk& c = chunks_.back();
  char* out = c.data + c.written;
  const auto type = static_cast<std::uint8_t>(e.type);
  const std::int64_t times[] = {observed.time_since_epoch().count(),
                                since.time_since_epoch().count()};
  put_bytes(out, &type, sizeof type);
  put_bytes(out, times, sizeof times);
  put_bytes(out, &note, sizeof note);  // NOLINT(bugprone-sizeof-expression)
  for (auto text : strings) put_string(out, text);
  put_bytes(out, &annotations, sizeof annotations);
  counted = 0;
  for (const auto& [name, value] : e.annotations) {
    if (counted++ == annotations) break;
    put_string(out, name);
    put_string(out, value);
  }
  c.written += size;
  ++size_;
}

HeldEvents::SteadyTime HeldEvents::front_since() const {
  const Chunk& c = chunks_.front();
  const char* in = c.data + c.read + sizeof(std::uint8_t) + sizeof(std::int64_t);
  return SteadyTime(SteadyTime::duration(get<std::int64_t>(in)));
}

HeldEvents::Held HeldEvents::pop() {
  Chunk& c = chunks_.front();
  const char* in = c.data + c.read;
  Held h;
  h.record.type = static_cast<EventType>(get<std::uint8_t>(in));
  h.observed = SystemTime(SystemTime::duration(get<std::int64_t>(in)));
  h.since = SteadyTime(SteadyTime::duration(get<std::int64_t>(in)));
  const auto* note = get<const std::string*>(in);
  h.record.regarding.api_version = get_string(in);
  h.record.regarding.kind = get_string(in);
  h.record.regarding.namespace_ = get_string(in);
  h.record.regarding.name = get_string(in);
  h.record.regarding.uid = get_string(in);
  h.record.reason = get_string(in);
  h.record.action = get_string(in);
  for (auto n = get<std::uint16_t>(in); n > 0; --n) {
    std::string name = get_string(in);
    h.record.annotations.insert_or_assign(std::move(name), get_string(in));
  }
  h.record.note = *note;
  if (auto it = notes_.find(*note); --it->second == 0) notes_.erase(it);
  c.read = static_cast<std::size_t>(in - c.data);
  --size_;
  if (c.read == c.written) {  // read to the end: back to the system
    ::munmap(c.data, c.capacity);
    chunks_.pop_front();
  }
  return h;
}

std::size_t HeldEvents::chunk_bytes() const {
  std::size_t bytes = 0;
  for (const auto& c : chunks_) bytes += c.capacity;
  return bytes;
}

json event_object(const EventSeriesCache::Entry& entry, std::int64_t count,
                  const std::string& reporting_controller, const std::string& reporting_instance) {
  const EventSeriesCache::Entry& e = entry;
  const EventRecord record = entry.record();
  json event = {
      {"apiVersion", "events.k8s.io/v1"},
      {"kind", "Event"},
      {"metadata", {{"name", e.name}, {"namespace", event_namespace(record.regarding)}}},
      {"eventTime", core::format_rfc3339_micro(e.first_time)},
      {"reportingController", reporting_controller},
      {"reportingInstance", reporting_instance},
      {"action", cut(record.action, kShortLimit)},
      {"reason", cut(record.reason, kShortLimit)},
      {"regarding", object_ref_json(record.regarding)},
      {"note", cut(record.note, kNoteLimit)},
      {"type", std::string(to_string(record.type))},
  };
  if (!record.annotations.empty()) event["metadata"]["annotations"] = record.annotations;
  if (count >= 2) {
    event["series"] = {{"count", count},
                       {"lastObservedTime", core::format_rfc3339_micro(e.last_time)}};
  }
  return event;
}

json series_patch(const EventSeriesCache::Entry& e, std::int64_t count) {
  return {{"series",
           {{"count", count}, {"lastObservedTime", core::format_rfc3339_micro(e.last_time)}}}};
}

EventRecorder::EventRecorder(asio::any_io_executor executor, Client& client,
                             EventRecorderOptions options)
    : executor_(std::move(executor)),
      client_(client),
      options_(std::move(options)),
      cache_(options_.cache_size, options_.window) {}

EventRecorder::~EventRecorder() = default;

std::string EventRecorder::new_name(const ObjectRef& regarding) {
  // client-go: "<regarding name>.<unix nanos in hex>"; a sequence number
  // keeps two events of the same nanosecond apart.
  auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  std::string suffix = fmt::format(".{:x}{:x}", nanos, sequence_++ & 0xff);
  std::string base = regarding.name.empty() ? std::string("event") : regarding.name;
  if (base.size() + suffix.size() > kNameLimit) base.resize(kNameLimit - suffix.size());
  return base + suffix;
}

void EventRecorder::record(ObjectRef regarding, EventType type, std::string reason,
                           std::string action, std::string note) {
  EventRecord e;
  e.regarding = std::move(regarding);
  e.type = type;
  e.reason = std::move(reason);
  e.action = std::move(action);
  e.note = std::move(note);
  record(std::move(e));
}

void EventRecorder::record(EventRecord e) {
  ++stats_.recorded;
  held_.push(e, std::chrono::system_clock::now(), std::chrono::steady_clock::now());
  start_writers();
}

EventRecorder::Limit EventRecorder::writer_limit() const {
  const std::size_t all = std::max<std::size_t>(options_.max_writers, 1);
  if (!options_.busy || !options_.busy()) return {all, false};
  // Busy: none until the oldest has waited max_defer, then one writer per
  // overdue_interval, one at a time. A writer that would wait for a free
  // connection behind the work's requests, or take one from it, costs the
  // work more than the Event is worth while the work lasts.
  const auto now = std::chrono::steady_clock::now();
  const bool overdue = !held_.empty() && now - held_.front_since() >= options_.max_defer &&
                       now - last_overdue_ >= options_.overdue_interval;
  return {overdue && writers_ == 0 ? std::size_t{1} : std::size_t{0}, true};
}

// While held back, look again every 100 ms.
asio::awaitable<void> EventRecorder::recheck_later() {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_after(std::chrono::milliseconds(100));
  co_await timer.async_wait(asio::use_awaitable);
  rechecking_ = false;
  start_writers();
}

// At most max_writers writers at a time: a burst of events (thousands of
// Deployments tuned at once) must not become thousands of concurrent
// requests, each with its own connection.
void EventRecorder::start_writers() {
  while (!held_.empty()) {
    const Limit limit = writer_limit();
    if (writers_ >= limit.writers) {
      // Held back by busy(), which says nothing when it ends: look again.
      if (limit.busy && !rechecking_) {
        rechecking_ = true;
        asio::co_spawn(executor_, recheck_later(), asio::detached);
      }
      return;
    }
    if (limit.busy) last_overdue_ = std::chrono::steady_clock::now();
    HeldEvents::Held h = held_.pop();
    // Its series: a new Event, or a repeat; a repeat whose writer is busy
    // is picked up by that writer.
    const EventSeriesCache::Entry* entry =
        cache_.observe(h.record, h.observed, new_name(h.record.regarding));
    if (!entry) continue;
    std::string key = entry->key;
    ++writers_;
    asio::co_spawn(executor_, write_loop(std::move(key)), [this](std::exception_ptr error) {
      --writers_;
      if (error) {
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& x) {
          log::error("event recorder: writer stopped", {{"error", x.what()}});
        } catch (...) {
          log::error("event recorder: writer stopped", {{"error", "unknown exception"}});
        }
      }
      start_writers();
    });
  }
}

asio::awaitable<void> EventRecorder::write_loop(std::string key) {
  while (auto w = cache_.next_write(key)) {
    const EventSeriesCache::Entry* entry = cache_.find(key);
    if (!entry) co_return;
    WriteOptions unread;  // the Event written back is not needed
    unread.read_object = false;
    Result result;
    std::string ns;
    if (w->kind == EventSeriesCache::Write::Kind::Create) {
      json body = event_object(*entry, w->count, options_.reporting_controller,
                               options_.reporting_instance);
      ns = body["metadata"]["namespace"].get<std::string>();  // the key is decoded once
      result = co_await client_.create(events_v1, ns, std::move(body), unread);
      if (result) ++stats_.created;
    } else {
      ns = event_namespace(entry->record().regarding);
      json patch = series_patch(*entry, w->count);
      result = co_await client_.merge_patch(events_v1, ns, w->name, std::move(patch), unread);
      if (result) ++stats_.patched;
    }
    if (result) {
      cache_.write_succeeded(*w);
      if (const auto* written = cache_.find(key); written && outcome_) {
        outcome_(written->record(), true);
      }
      continue;
    }
    ++stats_.failed;
    log::warn(w->kind == EventSeriesCache::Write::Kind::Create
                  ? "event recorder: creating an event"
                  : "event recorder: updating an event",
              {{"event", ns + "/" + w->name}, {"error", result.error().format()}});
    // Drops the entry, or (NotFound on a patch) makes the next write a
    // create; either way next_write decides whether anything is left to do.
    const auto* failed = cache_.find(key);
    EventRecord record = failed ? failed->record() : EventRecord{};
    cache_.write_failed(*w, result.error().reason == ApiError::Reason::NotFound);
    if (failed && !cache_.find(key) && outcome_) outcome_(record, false);  // dropped
  }
}

}  // namespace gracekeeper::kube
