// An HTTP client over a Transport: the retry rule with jittered exponential
// backoff, on top of the transport's pool.
//
// Not thread-safe: use it from one thread (the program's io_context) and
// keep it alive until its calls have finished.
//
// Retries (Options::retry). A request whose answer is transient is sent
// again only when repeating it cannot do something twice:
//  * Retry::Always answers (429: the server refused before handling it),
//    whatever the verb;
//  * a transport failure before the request went out whole (the server
//    never acts on half a request), whatever the verb;
//  * Retry::IfIdempotent answers (5xx, timeouts) and connections cut after
//    the request was sent, only for idempotent requests: a POST that timed
//    out may have created its object.
// What is transient is the caller's to say (a Classifier): the Kubernetes
// client reads a metav1.Status for it, others go by the status code.
//
// Retry-After outlives the call. An answer with Retry-After (a 429 of API
// Priority and Fairness: 1 s, doubled while it keeps dropping, at most 32 s;
// obeyed up to 60 s) holds its method and path, whatever the query, until
// then (a POST: its path and body, since creates share a collection's path):
// a later send() or stream() of the same request waits for it first,
// whoever makes it (a work queue's requeue, an informer's rewatch). A send()
// that gave up on its last attempt cannot be repeated by its caller sooner
// than the server asked. Other requests are not held.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "gracekeeper/http/transport.h"

namespace gracekeeper::http {

enum class Retry { Never, IfIdempotent, Always };

struct Verdict {
  Retry retry = Retry::Never;
  std::optional<std::chrono::seconds> retry_after{};  // a floor for the wait, at most 60 s
};

// Says whether a non-2xx answer is worth another attempt.
using Classifier = Verdict (*)(const Response&);

// By the status code: 429 Always; 408 and 5xx IfIdempotent; the Retry-After header.
Verdict classify_by_status(const Response&);

class Client {
 public:
  Client(boost::asio::any_io_executor, Endpoint, Options = {});
  // The seam for tests: any Transport.
  Client(std::unique_ptr<Transport>, Options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends with the retry rule. The last answer, whatever its status (a non-2xx
  // that is still transient after the last attempt too), or the failure when
  // there is no usable answer.
  boost::asio::awaitable<std::expected<Response, Error>> send(Request,
                                                              Classifier = classify_by_status);
  // Streams the body to `on_chunk` (see Transport::stream). Not retried:
  // the caller knows where to resume.
  boost::asio::awaitable<std::expected<StreamResult, Error>> stream(Request, ChunkHandler on_chunk);

  const Options& options() const { return options_; }

  // How long `req` (its method and path) is still held by a Retry-After,
  // zero when it is not.
  std::chrono::milliseconds held_for(const Request& req) const;

 private:
  using Clock = std::chrono::steady_clock;
  // Waits out the hold on `key`, if any; false when cancelled meanwhile.
  boost::asio::awaitable<bool> wait_hold(const std::string& key);
  // Holds `key` until now + retry_after (at most 60 s); a later hold wins.
  void hold(const std::string& key, std::optional<std::chrono::seconds> retry_after);

  std::unique_ptr<Transport> transport_;
  Options options_;
  std::uint64_t jitter_state_;
  std::unordered_map<std::string, Clock::time_point> held_until_;  // by hold_key
};

}  // namespace gracekeeper::http
