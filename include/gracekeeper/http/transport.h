// The seam between HTTP clients and sockets: send one request and read the
// whole answer, or stream an answer's body to a handler.
//
// make_transport gives the real one: HTTPS (or plain HTTP when the endpoint
// allows it) with a small pool of keep-alive connections. Tests supply
// their own Transport over in-memory streams (see src/http/exchange.h).
// Included by the modules' .cpp files and tests, not by widely included
// headers: it brings Asio's awaitable and Beast's verb.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "gracekeeper/http/options.h"

namespace gracekeeper::http {

using Verb = boost::beast::http::verb;

struct Request {
  Verb method = Verb::get;
  std::string target{};        // path and query, without the endpoint's path prefix
  std::string content_type{};  // empty: no body
  std::string body{};
  std::string accept = "application/json";
  // Sending it twice has the same effect as once. Decides whether a request
  // may be sent again after its answer was lost (see Client), and whether
  // the transport re-sends it when a pooled connection turns out to have
  // been closed by the server.
  bool idempotent = true;
};

struct Response {
  unsigned status = 0;
  std::string content_type;
  std::optional<std::chrono::seconds> retry_after;  // the Retry-After header, delta-seconds form
  std::string body;
};

enum class ErrorKind {
  Transport,    // connect, TLS, I/O, our timeouts, a bad endpoint or credential
  BadResponse,  // malformed HTTP, body over the size cap
};

// No usable answer.
struct Error {
  ErrorKind kind = ErrorKind::Transport;
  std::string message{};
  bool request_written = false;  // the whole request went out: the server may act on it
  bool received_any = false;     // some bytes of an answer arrived
};

// A streamed answer: either the server refused (non-2xx, read whole) or the
// body was handed to the handler until it ended.
struct StreamResult {
  std::optional<Response> refused{};
  StreamEnd end = StreamEnd::Closed;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual boost::asio::awaitable<std::expected<Response, Error>> send(const Request&) = 0;
  virtual boost::asio::awaitable<std::expected<StreamResult, Error>> stream(
      const Request&, const ChunkHandler& on_chunk) = 0;
};

// PEM text and where it came from (named in errors).
struct Pem {
  std::string text;
  std::string origin;  // "file /path", "kubeconfig field users[x].user.client-key-data"
};

struct Tls {
  std::optional<Pem> certificate_authority;  // nullopt: the system trust store
  bool insecure_skip_verify = false;
  std::string server_name;  // SNI and verification name, if not the URL's host
  std::optional<Pem> client_certificate;
  std::optional<Pem> client_key;
};

// The bearer token to send now ("" for none), or why there is none. Called
// for every request, so a rotated token file is picked up.
using TokenSource = std::function<std::expected<std::string, std::string>()>;

struct Endpoint {
  std::string url;  // https://host:port[/prefix]; http:// only with allow_plain_http
  bool allow_plain_http = false;
  Tls tls{};
  TokenSource token{};  // empty: no Authorization header
};

// A problem with the endpoint (URL, PEM) is not thrown: every request fails
// with it as a Transport error naming the PEM's origin.
std::unique_ptr<Transport> make_transport(boost::asio::any_io_executor, Endpoint, const Options&);

}  // namespace gracekeeper::http
