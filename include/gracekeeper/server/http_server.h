// The operator's own HTTP endpoints (/metrics, /healthz, /readyz, and over
// HTTPS the admission webhook): a small HTTP/1.1 server on the io_context,
// one coroutine per connection.
//
// HTTP or HTTPS with keep-alive; GET and HEAD on the routes, POST on the
// post routes (405 with Allow otherwise), 404 for paths without a route. Every read and write has a
// timeout, requests have a size limit and connections a cap, so a slow or hostile client costs one
// bounded coroutine. Failures are counted (stats()), never thrown out of run(). Beast stays out of
// this header (pimpl).
//
// Not thread-safe: bind, run, stop and the handlers all run on the
// executor's single thread.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gracekeeper::metrics {
class Metrics;
}

namespace gracekeeper::server {

class TlsSource;

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Called for GET and HEAD on its path (HEAD sends the headers only). A handler
// that throws gives a 500 and counts as a handler error.
using Handler = std::function<Response()>;
// Exact path (the query string is ignored) -> handler.
using Routes = std::map<std::string, Handler, std::less<>>;
// Called for POST on its path with the request's body.
using PostHandler = std::function<Response(std::string_view body)>;
using PostRoutes = std::map<std::string, PostHandler, std::less<>>;
// Asked before a route's handler, with the request's path (no query) and its
// Authorization header ("" when none): an answer (401, 403) ends the
// request there; nullopt lets it through. It may suspend (a TokenReview);
// an exception is a 500.
using Authorizer = std::function<boost::asio::awaitable<std::optional<Response>>(
    std::string path, std::string authorization)>;

// The oldest TLS version an HTTPS server accepts.
enum class TlsVersion { Tls12, Tls13 };

// "1.2" or "1.3" (also "VersionTLS12" / "VersionTLS13", as Kubernetes
// components write it); the error names the accepted values.
std::expected<TlsVersion, std::string> parse_tls_version(std::string_view text);

// A list of TLS 1.2 cipher suites by their OpenSSL names, separated by
// commas or colons ("ECDHE-ECDSA-AES128-GCM-SHA256,ECDHE-RSA-AES128-GCM-SHA256"):
// the OpenSSL cipher list, or an error naming the first name this OpenSSL
// does not know (a TLS 1.3 suite among them: those are not configurable).
std::expected<std::string, std::string> parse_cipher_suites(std::string_view text);

struct HttpServerOptions {
  // Limit for each read of a request and each write of a response; an idle
  // keep-alive connection is closed after it too.
  std::chrono::steady_clock::duration timeout = std::chrono::seconds{10};
  // Request line plus headers, and separately the body: larger is 431 / 413.
  std::size_t max_request_bytes = std::size_t{8} * 1024;
  // The body's own limit when larger than max_request_bytes (a POST route's).
  std::size_t max_body_bytes = 0;
  // The TLS handshake, and each request's header: a new connection must send
  // a complete request header within this of being accepted (after the
  // handshake), a kept-alive one within this of the header's first byte.
  std::chrono::steady_clock::duration header_timeout = std::chrono::seconds{5};
  // Open connections, on the listener and from one peer IP address. When a
  // limit is reached, the connection (of that peer, for its limit) idle the
  // longest is closed to make room: first those that never sent a complete
  // request header, then kept-alive ones between requests. Only when none is
  // idle (all are reading a body, handling or writing) is the new connection
  // closed as soon as it is accepted. So idle connections, however many,
  // cannot keep a probe or an admission out.
  std::size_t max_connections = 64;
  std::size_t max_connections_per_peer = 32;
  // HTTPS with the certificate this gives when set; each connection asks for
  // current(), and a new TLS context is built only when its generation
  // changes. With no certificate yet, connections are closed unanswered.
  std::shared_ptr<const TlsSource> tls{};
  // HTTPS: the oldest version accepted; a client offering only older ones
  // fails its handshake.
  TlsVersion tls_min_version = TlsVersion::Tls12;
  // HTTPS: the TLS 1.2 cipher suites, an OpenSSL cipher list
  // (parse_cipher_suites); "" is OpenSSL's default. TLS 1.3 keeps its own.
  std::string tls_cipher_suites{};
  // When set, every request with a route is asked of it first.
  Authorizer authorize{};
};

// Monotonic counters, for tests and logs.
struct HttpServerStats {
  std::uint64_t connections = 0;       // accepted and served
  std::uint64_t rejected = 0;          // closed at once: over a limit, none idle
  std::uint64_t evicted = 0;           // idle ones closed to make room for a new one
  std::uint64_t requests = 0;          // answered, whatever the status
  std::uint64_t bad_requests = 0;      // malformed or oversized: 400 / 413 / 431
  std::uint64_t timeouts = 0;          // connections cut by the timeout
  std::uint64_t handler_errors = 0;    // handlers that threw: 500
  std::uint64_t io_errors = 0;         // accept, read and write failures
  std::uint64_t tls_failures = 0;      // HTTPS: handshakes that failed, or no certificate
  std::uint64_t tls_contexts = 0;      // HTTPS: TLS contexts built (one per certificate generation)
  std::uint64_t lame_duck_closes = 0;  // answers sent with Connection: close in lame duck
};

class HttpServer {
 public:
  // Parses and binds `address` now: "host:port", "[v6]:port", or ":port" for
  // every interface; host is an IP address or "localhost"; port 0 picks a
  // free port. Errors name the address.
  static std::expected<std::unique_ptr<HttpServer>, std::string> bind(
      boost::asio::any_io_executor executor, std::string_view address, Routes routes);
  static std::expected<std::unique_ptr<HttpServer>, std::string> bind(
      boost::asio::any_io_executor executor, std::string_view address, Routes routes,
      HttpServerOptions options);
  static std::expected<std::unique_ptr<HttpServer>, std::string> bind(
      boost::asio::any_io_executor executor, std::string_view address, Routes routes,
      PostRoutes post_routes, HttpServerOptions options);

  ~HttpServer();  // stop()s; connections still closing finish on their own
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port (the chosen one with port 0).
  unsigned short port() const;

  // Accepts and serves until stop() (or until its coroutine is cancelled),
  // then returns once every connection coroutine has ended. Call once.
  boost::asio::awaitable<void> run();

  // Closes the acceptor and every open connection; run() then returns. No
  // handler is called after stop().
  void stop();

  // Lame duck, the first step of a graceful stop: the server keeps accepting
  // and answering, but every answer from now on carries `Connection: close`
  // and its connection is closed after it, so a client with a keep-alive
  // connection (the API server calling the webhook) opens a new one, which
  // its Service sends to another replica. stop() ends it. Idempotent.
  void begin_lame_duck();
  bool lame_duck() const;

  // Whether the server can answer: without TLS always; with TLS, when the
  // TlsSource has a certificate that loads (handshakes fail until then).
  // May build the TLS context, as the next connection would.
  bool serving_certificate_loaded();

  const HttpServerStats& stats() const;
  std::size_t open_connections() const;

 private:
  struct Impl;
  explicit HttpServer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared with the connection coroutines
};

// GET /metrics -> 200, the registry in the text format 0.0.4. `metrics` must
// outlive the server.
Routes metrics_routes(const metrics::Metrics& metrics);

// The end of a graceful stop: waits until `until` (the lame duck's end, on
// the steady clock), then stops every server. Lame duck begins earlier, at
// SIGTERM, with begin_lame_duck(). Cancellation skips the wait.
boost::asio::awaitable<void> stop_at(std::vector<HttpServer*> servers,
                                     std::chrono::steady_clock::time_point until);

// Why the process is not ready, "" when it is, checked in this order:
// shutting down (a SIGTERM put the servers in lame duck: the endpoint must
// leave its Services at once); the webhook (null: none) has no serving
// certificate that loads, so the API server's calls would fail their TLS
// handshake; else what `otherwise` says (e.g. caches not synced).
std::string not_ready_reason(bool shutting_down, HttpServer* webhook,
                             const std::function<std::string()>& otherwise);

// GET /healthz -> 200 "ok", or 500 with the text `unhealthy` returns when it is
// not empty. GET /readyz -> 200 "ok", or 503 with the text `not_ready`
// returns when it is not empty. An empty std::function always says ok.
Routes health_routes(std::function<std::string()> unhealthy,
                     std::function<std::string()> not_ready);

}  // namespace gracekeeper::server
