#include "gracekeeper/kube/informer.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <functional>
#include <variant>

#include "gracekeeper/http/encoding.h"
#include "json_reader.h"

namespace gracekeeper::kube {

using http::add_query;

namespace asio = boost::asio;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

namespace {

std::string metadata_string(const json& object, const char* field) {
  if (!object.is_object()) return {};
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return {};
  auto f = m->find(field);
  if (f == m->end() || !f->is_string()) return {};
  return f->get<std::string>();
}

// A watch that the server closes this soon without a single event is treated
// as a failure, so a server that keeps closing at once is not hammered
// (client-go does the same for "very short watches").
constexpr auto kShortWatch = std::chrono::seconds{1};

}  // namespace

std::string object_key(const json& object) {
  std::string ns = metadata_string(object, "namespace");
  std::string name = metadata_string(object, "name");
  return ns.empty() ? name : ns + "/" + name;
}

namespace {

// The caller's fields and what the informer itself reads: the key and the version.
FieldSet informer_fields(std::vector<std::string> fields, FieldSet::Wanted wanted) {
  if (fields.empty()) return FieldSet({}, std::move(wanted));
  // metadata.annotations: a streaming list's last initial event is a bookmark
  // that says so in an annotation.
  for (const char* own : {"metadata.name", "metadata.namespace", "metadata.resourceVersion",
                          "metadata.annotations"}) {
    fields.emplace_back(own);
  }
  return FieldSet(fields, std::move(wanted));
}

// The bookmark that ends a streaming list's initial events.
bool initial_events_end(const json& object) {
  if (!object.is_object()) return false;
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return false;
  auto a = m->find("annotations");
  if (a == m->end() || !a->is_object()) return false;
  auto end = a->find("k8s.io/initial-events-end");
  return end != a->end() && end->is_string() && end->get<std::string>() == "true";
}

}  // namespace

Reflector::Reflector(Client& client, Resource resource, InformerOptions options, Projection project,
                     StoreCore& store)
    : client_(client),
      resource_(std::move(resource)),
      options_(std::move(options)),
      project_(std::move(project)),
      fields_(informer_fields(options_.fields, options_.wanted)),
      store_(store),
      random_(options_.seed ? options_.seed : std::random_device{}()),
      backoff_(options_.initial_backoff) {}

void Reflector::stop() {
  stopping_ = true;
  if (wake_) wake_->cancel();
}

void Reflector::restart_watch_from(std::string resource_version) {
  resource_version_ = std::move(resource_version);
  rewatch_requested_ = true;
  if (wake_) wake_->cancel();
}

asio::awaitable<void> Reflector::run() {
  // Cancellation is checked by hand below, so run() ends normally.
  co_await asio::this_coro::throw_if_cancelled(false);
  wake_.emplace(co_await asio::this_coro::executor, SteadyClock::time_point::max());
  auto cancelled = []() -> asio::awaitable<bool> {
    auto state = co_await asio::this_coro::cancellation_state;
    co_return state.cancelled() != asio::cancellation_type::none;
  };
  bool need_sync = !synced_;
  bool first_watch = true;
  while (!stopping_ && !co_await cancelled()) {
    const bool watch_list = need_sync && options_.watch_list && !watch_list_refused_;
    if (need_sync && !watch_list) {
      if (!co_await list_and_replace()) {
        if (stopping_ || co_await cancelled()) break;
        co_await back_off();
        continue;
      }
      need_sync = false;
    }
    if (!first_watch) ++counters_.watch_restarts;
    first_watch = false;
    const WatchOutcome outcome = co_await watch_once(watch_list);
    // A streaming list that ended before its last initial event syncs again.
    if (watch_list && !initial_events_) need_sync = false;
    initial_events_ = false;
    initial_store_.reset();
    switch (outcome) {
      case WatchOutcome::Closed:
      case WatchOutcome::Interrupted:
        break;  // re-watch at once from resource_version_
      case WatchOutcome::Refused:
        watch_list_refused_ = true;  // paginated LISTs from now on
        last_error_ += " (streaming list refused; listing instead)";
        break;
      case WatchOutcome::Gone:
        ++counters_.relists;
        need_sync = true;
        break;
      case WatchOutcome::Failed:
        ++counters_.watch_errors;
        if (stopping_ || co_await cancelled()) break;
        co_await back_off();
        break;
    }
  }
  wake_.reset();
  stopping_ = false;
  rewatch_requested_ = false;
}

asio::awaitable<void> Reflector::wait_wake() {
  co_await wake_->async_wait(asio::as_tuple(asio::use_awaitable));
}

// Runs `op` until it completes or wake_ fires (stop(), the test hook); the
// latter cancels `op` and gives nullopt.
template <class T>
asio::awaitable<std::optional<T>> Reflector::interruptible(asio::awaitable<T> op) {
  using namespace asio::experimental::awaitable_operators;
  // stop() may have come while nothing waited on wake_ (its cancel() then
  // reached no one): do not start another wait that nothing would end.
  if (stopping_) co_return std::nullopt;
  auto result = co_await (std::move(op) || wait_wake());
  if (result.index() == 0) co_return std::move(std::get<0>(result));
  co_return std::nullopt;
}

asio::awaitable<bool> Reflector::list_and_replace() {
  // Page by page, each item projected as soon as it has been parsed: the
  // peak is one page's text plus one item's JSON tree plus the projections,
  // never a page (let alone the whole list) as JSON trees. The page comes as
  // text (get_raw: the same GET Client::list sends, with its retries and
  // errors) so that it can be read with the SAX reader above.
  const std::string base = list_path();
  // The first list into an empty cache goes straight into it, each item
  // announced (on_add) the moment it is projected: the caller can start on
  // the first page instead of after the last (has_synced() says when the
  // list is whole). Every other list, including a retry of a first list that
  // failed half-way, builds a fresh cache and replaces the old with a diff.
  const bool stream = !synced_ && store_.size() == 0;
  StoreCore::Entries fresh;
  auto on_item = [&](json&& item) {
    auto value = project(item);
    if (!value) return;
    StoreCore::Entry entry{metadata_string(item, "resourceVersion"), std::move(value)};
    if (stream) {
      upsert(object_key(item), std::move(entry));
    } else {
      fresh.insert_or_assign(object_key(item), std::move(entry));
    }
  };
  std::string list_version;  // every page comes from the first page's snapshot
  std::string continue_token;
  while (true) {
    std::string target = base;
    add_query(target, "continue", continue_token);
    auto page = co_await interruptible(client_.get_raw(std::move(target)));
    rewatch_requested_ = false;  // a fresh list supersedes any requested resourceVersion
    if (!page) co_return false;
    if (!read_list_page(*page, on_item, list_version, continue_token)) co_return false;
    if (continue_token.empty()) break;
  }
  if (stream) {
    resource_version_ = std::move(list_version);
    synced_ = true;
    ++counters_.lists;
  } else {
    replace(std::move(fresh), std::move(list_version));
  }
  co_return true;
}

// The path of a list's pages, without the continue token.
std::string Reflector::list_path() const {
  std::string base = resource_path(resource_, options_.namespace_);
  add_query(base, "labelSelector", options_.label_selector);
  add_query(base, "fieldSelector", options_.field_selector);
  // No resourceVersion, not client-go's "0" (informer.h says why).
  add_query(base, "limit", std::to_string(options_.page_size));
  return base;
}

// Reads a page of a list, each item handed to `on_item`: false, with
// last_error_ set, when the page is an error or no list. The first page
// sets `list_version`; each sets `continue_token` ("" on the last).
bool Reflector::read_list_page(const std::expected<std::string, ApiError>& page,
                               std::function<void(json&&)> on_item, std::string& list_version,
                               std::string& continue_token) {
  if (!page) {  // an expired continue token is Gone: the next attempt lists afresh
    ++counters_.list_errors;
    last_error_ = "list: " + page.error().format();
    return false;
  }
  detail::FilteringReader reader("items", fields_, std::move(on_item));
  if (!detail::parse(*page, reader) || !reader.root().is_object()) {
    ++counters_.list_errors;
    last_error_ = "list: response is not a JSON object: " +
                  (reader.error().empty() ? page->substr(0, 200) : reader.error());
    return false;
  }
  const json& list = reader.root();
  if (list_version.empty()) list_version = metadata_string(list, "resourceVersion");
  continue_token = metadata_string(list, "continue");
  return true;
}

void Reflector::finish_initial_events(std::string version) {
  initial_events_ = false;
  if (initial_store_) {
    StoreCore::Entries fresh = std::move(*initial_store_);
    initial_store_.reset();
    replace(std::move(fresh), std::move(version));
    return;
  }
  resource_version_ = std::move(version);
  synced_ = true;
  ++counters_.lists;
}

void Reflector::replace(StoreCore::Entries fresh, std::string version) {
  CacheDiff diff = store_.replace(std::move(fresh));
  resource_version_ = std::move(version);
  synced_ = true;
  ++counters_.lists;
  // The store already holds the new state when the handlers run.
  for (const auto& key : diff.deleted) notify_deleted(key);
  for (const auto& key : diff.added) notify_added(key);
  for (const auto& key : diff.updated) notify_updated(key);
}

asio::awaitable<Reflector::WatchOutcome> Reflector::watch_once(bool initial_events) {
  const WatchOptions o = start_watch(initial_events);
  WatchDecoderOptions decoder_options;
  decoder_options.fields = &fields_;
  WatchDecoder decoder(decoder_options);
  std::uint64_t applied = 0;
  std::optional<WatchOutcome> early;  // set when an event or bad bytes end the watch
  ChunkHandler on_chunk = [&](std::string_view bytes) {
    auto fed = decoder.feed(bytes);
    // Events decoded before a bad one are still good: apply them first.
    early = apply_decoded(decoder, applied);
    if (early) return false;
    if (!fed) {
      last_error_ = "watch stream: " + fed.error().format();
      early = WatchOutcome::Failed;
      return false;
    }
    return true;
  };

  const auto started = SteadyClock::now();
  auto watched = co_await interruptible(client_.watch(resource_, options_.namespace_, o, on_chunk));
  if (early) co_return *early;
  if (!watched) {
    rewatch_requested_ = false;
    co_return WatchOutcome::Interrupted;
  }
  if (!*watched) co_return watch_refused(watched->error(), initial_events);
  // The server ended the stream: its last bytes must complete an event.
  auto finished = decoder.finish();
  if (auto end = apply_decoded(decoder, applied)) co_return *end;
  if (!finished) {
    last_error_ = "watch stream: " + finished.error().format();
    co_return WatchOutcome::Failed;
  }
  if (applied == 0 && SteadyClock::now() - started < kShortWatch) {
    last_error_ = "watch: closed by the server at once, without events";
    co_return WatchOutcome::Failed;
  }
  co_return WatchOutcome::Closed;
}

// The options of the next watch, and the state it starts in.
WatchOptions Reflector::start_watch(bool initial_events) {
  WatchOptions o;
  o.resource_version = initial_events ? std::string() : resource_version_;
  o.send_initial_events = initial_events;
  initial_events_ = initial_events;
  // The first sync into an empty store goes straight into it, each object
  // announced (on_add) as it arrives; any other builds a fresh store and
  // replaces the old with a diff once the initial events are complete.
  if (initial_events && (synced_ || store_.size() > 0)) initial_store_.emplace();
  o.label_selector = options_.label_selector;
  o.field_selector = options_.field_selector;
  o.timeout = watch_timeout();
  o.allow_bookmarks = true;
  return o;
}

// The outcome of a watch the server refused.
Reflector::WatchOutcome Reflector::watch_refused(const ApiError& e, bool initial_events) {
  last_error_ = "watch: " + e.format();
  if (e.reason == ApiError::Reason::Gone) return WatchOutcome::Gone;
  // A server without streaming lists refuses their parameters.
  const bool refused = e.http_status == 400 || e.reason == ApiError::Reason::Invalid ||
                       e.reason == ApiError::Reason::Forbidden;
  return initial_events && refused ? WatchOutcome::Refused : WatchOutcome::Failed;
}

// Applies the events the decoder holds; the outcome when one ends the watch.
std::optional<Reflector::WatchOutcome> Reflector::apply_decoded(WatchDecoder& decoder,
                                                                std::uint64_t& applied) {
  while (auto event = decoder.next()) {
    const Step step = apply(*event);
    if (step == Step::Gone) return WatchOutcome::Gone;
    if (step == Step::Failed) return WatchOutcome::Failed;
    ++applied;
  }
  return std::nullopt;
}

Reflector::Step Reflector::apply(const WatchEvent& event) {
  switch (event.type) {
    case WatchEventType::Error:
      if (event.status && event.status->resource_version_too_old()) {
        last_error_ = "watch: " + event.status->message;
        return Step::Gone;
      }
      last_error_ = "watch error event: " + (event.status ? event.status->message : "");
      return Step::Failed;
    case WatchEventType::Bookmark:
      if (initial_events_ && initial_events_end(event.object)) {
        finish_initial_events(event.resource_version);
      }
      break;
    case WatchEventType::Added:
    case WatchEventType::Modified: {
      std::string key = object_key(event.object);
      if (initial_events_ && initial_store_) {
        if (auto value = project(event.object)) {
          initial_store_->insert_or_assign(
              std::move(key), StoreCore::Entry{event.resource_version, std::move(value)});
        }
      } else if (auto value = project(event.object)) {
        upsert(std::move(key), StoreCore::Entry{event.resource_version, std::move(value)});
      } else {
        erase(key);  // filtered out now: gone as far as the cache is concerned
      }
      break;
    }
    case WatchEventType::Deleted:
      erase(object_key(event.object));
      break;
  }
  ++counters_.events;
  if (!event.resource_version.empty()) resource_version_ = event.resource_version;
  return Step::Next;
}

StoreCore::Value Reflector::project(const json& object) {
  try {
    return project_(object);
  } catch (const std::exception& e) {
    ++counters_.projection_errors;
    last_error_ = "projection of " + object_key(object) + ": " + e.what();
    return nullptr;
  }
}

void Reflector::upsert(std::string key, StoreCore::Entry entry) {
  const bool added = store_.upsert(key, std::move(entry));
  added ? notify_added(key) : notify_updated(key);
}

void Reflector::erase(const std::string& key) {
  if (store_.erase(key)) notify_deleted(key);
}

void Reflector::notify_added(const std::string& key) {
  for (const auto& h : handlers_) {
    if (h.on_add) h.on_add(key);
  }
}

void Reflector::notify_updated(const std::string& key) {
  for (const auto& h : handlers_) {
    if (h.on_update) h.on_update(key);
  }
}

void Reflector::notify_deleted(const std::string& key) {
  for (const auto& h : handlers_) {
    if (h.on_delete) h.on_delete(key);
  }
}

std::chrono::milliseconds Reflector::next_backoff() {
  const auto now = SteadyClock::now();
  if (last_failure_ && now - *last_failure_ > options_.backoff_reset) {
    backoff_ = options_.initial_backoff;
  }
  last_failure_ = now;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto wait = std::chrono::milliseconds{static_cast<std::int64_t>(
      static_cast<double>(backoff_.count()) * (1.0 + options_.backoff_jitter * unit(random_)))};
  backoff_ = std::min(backoff_ * 2, options_.max_backoff);
  return std::min(wait, options_.max_backoff);
}

std::chrono::seconds Reflector::watch_timeout() {
  std::uniform_int_distribution<std::int64_t> pick(
      options_.min_watch_timeout.count(),
      std::max(options_.min_watch_timeout.count(), options_.max_watch_timeout.count()));
  return std::chrono::seconds{pick(random_)};
}

asio::awaitable<void> Reflector::back_off() {
  asio::steady_timer sleep(co_await asio::this_coro::executor, next_backoff());
  co_await interruptible(sleep.async_wait(asio::as_tuple(asio::use_awaitable)));
}

}  // namespace gracekeeper::kube
