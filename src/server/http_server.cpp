#include "gracekeeper/server/http_server.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <charconv>
#include <exception>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include "gracekeeper/metrics/metrics.h"
#include "gracekeeper/server/tls_source.h"

namespace gracekeeper::server {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
namespace ssl = boost::asio::ssl;
using Clock = std::chrono::steady_clock;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

// After an error answer the client may still be sending (an oversized
// request): read and drop a little of it, so closing the socket with unread
// data does not reset the connection before the client has read the answer.
constexpr std::size_t kLingerBytes = std::size_t{64} * 1024;
constexpr Clock::duration kLingerTime = std::chrono::seconds{1};

struct Endpoint {
  std::optional<asio::ip::address> host;  // nullopt: every interface
  unsigned short port = 0;
};

std::expected<Endpoint, std::string> parse_address(std::string_view address) {
  auto fail = [&](std::string_view why) {
    return std::unexpected("invalid address \"" + std::string{address} + "\": " + std::string{why});
  };
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos) return fail("expected host:port or :port");
  std::string_view host = address.substr(0, colon);
  const std::string_view port = address.substr(colon + 1);

  Endpoint out;
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc{} || end != port.data() + port.size() || value > 65535) {
    return fail("the port must be a number from 0 to 65535");
  }
  out.port = static_cast<unsigned short>(value);

  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return fail("write an IPv6 host in brackets, [::1]:8080");
  }
  if (host.empty()) return out;
  if (host == "localhost") {
    out.host = asio::ip::address_v4::loopback();
    return out;
  }
  beast::error_code aec;
  auto ip = asio::ip::make_address(std::string{host}, aec);
  if (aec) return fail("the host must be an IP address or localhost");
  out.host = ip;
  return out;
}

beast::error_code open_and_listen(tcp::acceptor& acceptor, const tcp::endpoint& endpoint,
                                  bool dual_stack) {
  beast::error_code ec;
  if (acceptor.is_open()) acceptor.close(ec);
  acceptor.open(endpoint.protocol(), ec);
  if (ec) return ec;
  beast::error_code ignored;
  if (dual_stack) acceptor.set_option(asio::ip::v6_only(false), ignored);
  acceptor.set_option(tcp::acceptor::reuse_address(true), ignored);
  acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) acceptor.close(ignored);
  return ec;
}

// The TCP stream under a plain or a TLS stream: its timer and its socket.
beast::tcp_stream& tcp_of(beast::tcp_stream& s) {
  return s;
}
beast::tcp_stream& tcp_of(TlsStream& s) {
  return s.next_layer();
}

// A server context for one certificate: TLS 1.2 and later, or 1.3 only.
std::expected<std::shared_ptr<ssl::context>, std::string> make_tls_context(
    const ServingCertificate& certificate, const HttpServerOptions& options) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                       ssl::context::single_dh_use);
  SSL_CTX* native = context->native_handle();
  const int min_version =
      options.tls_min_version == TlsVersion::Tls13 ? TLS1_3_VERSION : TLS1_2_VERSION;
  if (SSL_CTX_set_min_proto_version(native, min_version) != 1) {
    return std::unexpected(std::string{"cannot set the minimum TLS version"});
  }
  if (!options.tls_cipher_suites.empty() &&
      SSL_CTX_set_cipher_list(native, options.tls_cipher_suites.c_str()) != 1) {
    return std::unexpected("no cipher suite of \"" + options.tls_cipher_suites + "\" is known");
  }
  beast::error_code ec;
  context->use_certificate_chain(asio::buffer(certificate.cert_pem), ec);
  if (ec) return std::unexpected("the serving certificate: " + ec.message());
  context->use_private_key(asio::buffer(certificate.key_pem), ssl::context::pem, ec);
  if (ec) return std::unexpected("the serving certificate's key: " + ec.message());
  return context;
}

Response text(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

}  // namespace

std::expected<TlsVersion, std::string> parse_tls_version(std::string_view text) {
  if (text == "1.2" || text == "VersionTLS12") return TlsVersion::Tls12;
  if (text == "1.3" || text == "VersionTLS13") return TlsVersion::Tls13;
  return std::unexpected("expected 1.2 or 1.3, got \"" + std::string{text} + "\"");
}

std::expected<std::string, std::string> parse_cipher_suites(std::string_view text) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> probe{SSL_CTX_new(TLS_server_method()),
                                                          &SSL_CTX_free};
  if (!probe) return std::unexpected(std::string{"OpenSSL cannot make a TLS context"});
  std::string list;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto end = std::min(text.find_first_of(",:", start), text.size());
    const std::string name{text.substr(start, end - start)};
    start = end + 1;
    if (name.empty()) return std::unexpected(std::string{"an empty cipher suite name"});
    // Each name must be a suite's own: a typo would otherwise vanish from a
    // list that still has others, and OpenSSL's keywords (HIGH, !aNULL)
    // select more than the name says.
    bool known = SSL_CTX_set_cipher_list(probe.get(), name.c_str()) == 1;
    if (known) {
      known = false;
      STACK_OF(SSL_CIPHER)* selected = SSL_CTX_get_ciphers(probe.get());
      for (int k = 0; k < sk_SSL_CIPHER_num(selected); ++k) {
        if (name == SSL_CIPHER_get_name(sk_SSL_CIPHER_value(selected, k))) known = true;
      }
    }
    ERR_clear_error();
    if (!known) {
      std::string why = "unknown TLS 1.2 cipher suite \"" + name +
                        "\" (OpenSSL names, such as ECDHE-ECDSA-AES128-GCM-SHA256)";
      if (name.starts_with("TLS_")) why += "; TLS 1.3 suites are not configurable";
      return std::unexpected(why);
    }
    if (!list.empty()) list += ':';
    list += name;
  }
  return list;
}

struct HttpServer::Impl {
  Impl(tcp::acceptor a, Routes r, PostRoutes p, HttpServerOptions o)
      : executor(a.get_executor()),
        acceptor(std::move(a)),
        routes(std::move(r)),
        post_routes(std::move(p)),
        options(std::move(o)),
        drained(executor) {}

  void stop() {
    if (stopped) return;
    stopped = true;
    beast::error_code ignored;
    acceptor.close(ignored);
    for (auto& [id, c] : open) {
      if (c.stream) c.stream->close();  // their reads end with operation_aborted
    }
    drained.cancel();
  }

  // One accepted connection. `idle`: no request in hand (waiting for one, or
  // reading its header); `fresh`: none yet on this connection.
  struct Connection {
    asio::ip::address peer;
    beast::tcp_stream* stream = nullptr;  // once its coroutine has started
    Clock::time_point idle_since;
    bool idle = true;
    bool fresh = true;
    bool cut = false;  // closed to make room; not counted any more
  };

  // Room for one more connection from `peer`: closes the idle connection
  // that has waited longest (of the peer, when the peer is at its limit)
  // where a limit is reached. False: no room, none is idle.
  bool make_room(const asio::ip::address& peer);
  bool evict(const asio::ip::address* peer);
  bool is_cut(std::uint64_t id) const {
    auto it = open.find(id);
    return it == open.end() || it->second.cut;
  }
  void set_idle(std::uint64_t id, bool idle) {
    auto it = open.find(id);
    if (it == open.end()) return;
    if (idle && !it->second.idle) it->second.idle_since = Clock::now();
    if (!idle) it->second.fresh = false;
    it->second.idle = idle;
  }
  bool fresh(std::uint64_t id) const {
    auto it = open.find(id);
    return it != open.end() && it->second.fresh;
  }

  class Guard;

  static asio::awaitable<void> accept_loop(std::shared_ptr<Impl> self);
  // One connection, from accept to close: a coroutine per connection.
  static asio::awaitable<void> serve(std::shared_ptr<Impl> self, tcp::socket socket,
                                     std::uint64_t id);
  static asio::awaitable<void> serve_tls(std::shared_ptr<Impl> self, tcp::socket socket,
                                         std::uint64_t id);
  template <class Stream>
  static asio::awaitable<void> serve_requests(std::shared_ptr<Impl> self, Stream& stream,
                                              std::uint64_t id);
  template <class Stream>
  asio::awaitable<void> respond(Stream& stream, const http::request<http::string_body>& request,
                                bool& keep_alive);
  Response handle(const http::request<http::string_body>& request, const char*& allow);
  template <class Stream>
  asio::awaitable<void> refuse(Stream& stream, const beast::error_code& ec);
  template <class Stream>
  asio::awaitable<void> linger(Stream& stream);
  // The TLS context of the current certificate; null when there is none.
  std::shared_ptr<ssl::context> current_tls_context();

  asio::any_io_executor executor;
  tcp::acceptor acceptor;
  Routes routes;
  PostRoutes post_routes;
  HttpServerOptions options;
  std::shared_ptr<ssl::context> tls_context;  // of certificate generation tls_generation
  std::uint64_t tls_generation = 0;
  std::uint64_t broken_generation = 0;  // a certificate that did not load
  HttpServerStats stats{};
  unsigned short port = 0;
  bool stopped = false;
  bool lame_duck = false;

  std::size_t active = 0;  // spawned connection coroutines not yet ended
  std::uint64_t next_id = 0;
  std::map<std::uint64_t, Connection> open;  // accepted, their coroutines not yet ended
  asio::steady_timer drained;                // run() waits on it for `active` to reach 0
};

bool HttpServer::Impl::evict(const asio::ip::address* peer) {
  Connection* oldest = nullptr;
  for (auto& [id, c] : open) {
    if (c.cut || !c.idle || (peer && c.peer != *peer)) continue;
    if (!oldest || (c.fresh && !oldest->fresh) ||
        (c.fresh == oldest->fresh && c.idle_since < oldest->idle_since)) {
      oldest = &c;
    }
  }
  if (!oldest) return false;
  oldest->cut = true;
  if (oldest->stream) oldest->stream->close();  // else its coroutine closes it on start
  ++stats.evicted;
  return true;
}

bool HttpServer::Impl::make_room(const asio::ip::address& peer) {
  std::size_t total = 0;
  std::size_t of_peer = 0;
  for (const auto& [id, c] : open) {
    if (c.cut) continue;
    ++total;
    if (c.peer == peer) ++of_peer;
  }
  if (of_peer >= options.max_connections_per_peer) {
    if (!evict(&peer)) return false;
    --total;
  }
  if (total >= options.max_connections && !evict(nullptr)) return false;
  return true;
}

// Keeps Impl's bookkeeping right however a connection coroutine ends.
class HttpServer::Impl::Guard {
 public:
  Guard(Impl& impl, beast::tcp_stream& stream, std::uint64_t id) : impl_(impl), id_(id) {
    auto it = impl_.open.find(id_);
    if (it != impl_.open.end()) {
      it->second.stream = &stream;
      if (it->second.cut) stream.close();
    }
  }
  ~Guard() {
    impl_.open.erase(id_);
    if (--impl_.active == 0 && impl_.stopped) impl_.drained.cancel();
  }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  Impl& impl_;
  std::uint64_t id_;
};

asio::awaitable<void> HttpServer::Impl::serve(std::shared_ptr<Impl> self, tcp::socket socket,
                                              std::uint64_t id) {
  if (self->options.tls) {
    co_await serve_tls(std::move(self), std::move(socket), id);
    co_return;
  }
  beast::tcp_stream stream{std::move(socket)};
  Guard guard{*self, stream, id};
  if (self->stopped || self->is_cut(id)) co_return;
  co_await serve_requests(self, stream, id);
  if (self->stopped) co_return;
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream.close();
}

std::shared_ptr<ssl::context> HttpServer::Impl::current_tls_context() {
  const auto certificate = options.tls->current();
  if (!certificate) return nullptr;
  if ((!tls_context || certificate->generation != tls_generation) &&
      certificate->generation != broken_generation) {
    auto made = make_tls_context(*certificate, options);
    if (!made) {
      // Tried once per generation; the old certificate, if any, still serves.
      broken_generation = certificate->generation;
      ++stats.tls_failures;
      return tls_context;
    }
    tls_context = std::move(*made);
    tls_generation = certificate->generation;
    ++stats.tls_contexts;
  }
  return tls_context;
}

asio::awaitable<void> HttpServer::Impl::serve_tls(std::shared_ptr<Impl> self, tcp::socket socket,
                                                  std::uint64_t id) {
  // Held by the connection: a rotation replaces the server's, not this one.
  const std::shared_ptr<ssl::context> context = self->current_tls_context();
  if (!context) {
    ++self->stats.tls_failures;
    beast::tcp_stream plain{std::move(socket)};
    Guard guard{*self, plain, id};
    plain.close();
    co_return;
  }
  // A response goes out as two TLS records (header, body): without
  // TCP_NODELAY the second waits for the client's delayed ACK.
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  TlsStream stream{std::move(socket), *context};
  Guard guard{*self, stream.next_layer(), id};
  if (self->stopped || self->is_cut(id)) co_return;
  stream.next_layer().expires_after(std::min(self->options.header_timeout, self->options.timeout));
  auto [ec] = co_await stream.async_handshake(ssl::stream_base::server, use_nothrow);
  if (self->stopped || self->is_cut(id)) co_return;
  if (ec) {
    if (ec == beast::error::timeout) {
      ++self->stats.timeouts;
    } else {
      ++self->stats.tls_failures;
    }
    stream.next_layer().close();
    co_return;
  }
  co_await serve_requests(self, stream, id);
  if (self->stopped || self->is_cut(id)) co_return;
  // close_notify, bounded: a client that never answers it is cut.
  stream.next_layer().expires_after(std::min(self->options.timeout, kLingerTime));
  co_await stream.async_shutdown(use_nothrow);
  stream.next_layer().close();
}

// How a read of a request ended.
enum class ReadEnd { Ok, Closed, Timeout, Gone, Refuse };

ReadEnd read_end(const beast::error_code& ec) {
  if (!ec) return ReadEnd::Ok;
  if (ec == http::error::end_of_stream || ec == ssl::error::stream_truncated ||
      ec == asio::error::eof) {
    return ReadEnd::Closed;  // the client closed between requests
  }
  if (ec == beast::error::timeout) return ReadEnd::Timeout;  // Beast has closed the socket
  if (ec == http::error::partial_message || ec == asio::error::connection_reset ||
      ec == asio::error::operation_aborted) {
    return ReadEnd::Gone;
  }
  return ReadEnd::Refuse;
}

template <class Stream>
asio::awaitable<void> HttpServer::Impl::serve_requests(std::shared_ptr<Impl> self, Stream& stream,
                                                       std::uint64_t id) {
  const auto limit = std::min<std::size_t>(self->options.max_request_bytes,
                                           std::numeric_limits<std::uint32_t>::max());
  const auto body_limit = std::max(limit, self->options.max_body_bytes);
  // Holds at most one request's header (and what a client pipelined after it):
  // the parser moves body bytes out into the request.
  beast::flat_buffer buffer{limit + 1024};
  bool keep_alive = true;
  // Why a read ends the connection; nullopt when it succeeded.
  auto ended = [&](const beast::error_code& ec) -> std::optional<ReadEnd> {
    if (self->stopped || self->is_cut(id)) return ReadEnd::Gone;
    const ReadEnd end = read_end(ec);
    if (end == ReadEnd::Ok) return std::nullopt;
    if (end == ReadEnd::Timeout) ++self->stats.timeouts;
    return end;
  };
  while (keep_alive && !self->stopped) {
    self->set_idle(id, true);
    // Waiting for a request: a new connection has header_timeout to start
    // one, a kept-alive one `timeout`.
    if (buffer.size() == 0) {
      tcp_of(stream).expires_after(
          self->fresh(id) ? std::min(self->options.header_timeout, self->options.timeout)
                          : self->options.timeout);
      auto [ec, n] = co_await stream.async_read_some(buffer.prepare(1024), use_nothrow);
      if (auto end = ended(ec)) {
        if (*end == ReadEnd::Refuse) co_await self->refuse(stream, ec);
        co_return;
      }
      buffer.commit(n);
    }
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(limit));
    parser.body_limit(body_limit);
    // The header, from its first byte: header_timeout (slow-loris clients).
    tcp_of(stream).expires_after(std::min(self->options.header_timeout, self->options.timeout));
    {
      auto [ec, n] = co_await http::async_read_header(stream, buffer, parser, use_nothrow);
      if (auto end = ended(ec)) {
        if (*end == ReadEnd::Refuse) co_await self->refuse(stream, ec);
        co_return;
      }
    }
    // A request in hand: not idle until it is answered.
    self->set_idle(id, false);
    if (!parser.is_done()) {
      tcp_of(stream).expires_after(self->options.timeout);
      auto [ec, n] = co_await http::async_read(stream, buffer, parser, use_nothrow);
      if (auto end = ended(ec)) {
        if (*end == ReadEnd::Refuse) co_await self->refuse(stream, ec);
        co_return;
      }
    }
    co_await self->respond(stream, parser.get(), keep_alive);
  }
}

// The answer of the route the request names; `allow` gets the methods of
// a 405.
Response HttpServer::Impl::handle(const http::request<http::string_body>& request,
                                  const char*& allow) {
  std::string_view path = request.target();
  path = path.substr(0, path.find_first_of("?#"));
  const bool get_or_head =
      request.method() == http::verb::head || request.method() == http::verb::get;

  Response answer;
  auto route = routes.find(path);
  auto post_route = post_routes.find(path);
  if (route == routes.end() && post_route == post_routes.end()) {
    answer = text(404, "not found\n");
  } else if (post_route != post_routes.end() && request.method() != http::verb::post) {
    answer = text(405, "method not allowed\n");
    allow = "POST";
  } else if (post_route == post_routes.end() && !get_or_head) {
    answer = text(405, "method not allowed\n");
  } else {
    try {
      if (post_route != post_routes.end()) {
        answer = post_route->second(request.body());
      } else {
        answer = route->second();
      }
    } catch (const std::exception& e) {
      ++stats.handler_errors;
      answer = text(500, std::string{"internal error: "} + e.what() + "\n");
    } catch (...) {
      ++stats.handler_errors;
      answer = text(500, "internal error\n");
    }
  }
  return answer;
}

template <class Stream>
asio::awaitable<void> HttpServer::Impl::respond(Stream& stream,
                                                const http::request<http::string_body>& request,
                                                bool& keep_alive) {
  const bool head = request.method() == http::verb::head;
  const char* allow = "GET, HEAD";
  std::optional<Response> refused;
  if (options.authorize) {
    std::string path{request.target()};
    path = path.substr(0, path.find_first_of("?#"));
    std::string authorization{request[http::field::authorization]};
    if (routes.contains(path) || post_routes.contains(path)) {
      try {
        refused = co_await options.authorize(std::move(path), std::move(authorization));
      } catch (const std::exception& e) {
        ++stats.handler_errors;
        refused = text(500, std::string{"internal error: "} + e.what() + "\n");
      }
      if (stopped) co_return;
    }
  }
  Response answer = refused ? std::move(*refused) : handle(request, allow);
  if (stopped) co_return;  // stop() ran inside the handler
  if (answer.status < 100 || answer.status > 599) {
    ++stats.handler_errors;
    answer = text(
        500, "internal error: handler returned status " + std::to_string(answer.status) + "\n");
  }

  keep_alive = request.keep_alive();
  if (lame_duck && keep_alive) {
    keep_alive = false;
    ++stats.lame_duck_closes;
  }
  http::response<http::string_body> response;
  response.version(request.version());
  response.result(static_cast<unsigned>(answer.status));
  response.set(http::field::server, "gracekeeper");
  response.set(http::field::content_type, answer.content_type);
  if (answer.status == 405) response.set(http::field::allow, allow);
  response.keep_alive(keep_alive);
  if (head) {
    response.content_length(answer.body.size());  // the length GET would send, no body
  } else {
    response.body() = std::move(answer.body);
    response.prepare_payload();
  }
  ++stats.requests;
  tcp_of(stream).expires_after(options.timeout);
  auto [ec, n] = co_await http::async_write(stream, response, use_nothrow);
  if (ec) {
    if (ec == beast::error::timeout) {
      ++stats.timeouts;
    } else if (!stopped) {
      ++stats.io_errors;
    }
    keep_alive = false;
  }
}

template <class Stream>
asio::awaitable<void> HttpServer::Impl::refuse(Stream& stream, const beast::error_code& ec) {
  Response answer;
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    answer = text(431, "request header too large\n");
  } else if (ec == http::error::body_limit) {
    answer = text(413, "request body too large\n");
  } else if (ec.category() == make_error_code(http::error::bad_method).category()) {
    answer = text(400, "bad request: " + ec.message() + "\n");
  } else {
    if (ec != asio::error::operation_aborted) ++stats.io_errors;
    co_return;  // the socket failed: nobody to answer
  }
  ++stats.bad_requests;
  ++stats.requests;
  http::response<http::string_body> response;
  response.result(static_cast<unsigned>(answer.status));
  response.set(http::field::server, "gracekeeper");
  response.set(http::field::content_type, answer.content_type);
  response.keep_alive(false);
  response.body() = std::move(answer.body);
  response.prepare_payload();
  tcp_of(stream).expires_after(options.timeout);
  auto [wec, n] = co_await http::async_write(stream, response, use_nothrow);
  if (!wec) co_await linger(stream);
}

template <class Stream>
asio::awaitable<void> HttpServer::Impl::linger(Stream& stream) {
  beast::error_code ignored;
  // Over TLS the drain reads the TLS records; the TCP half-close comes after.
  if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }
  tcp_of(stream).expires_after(std::min(options.timeout, kLingerTime));
  std::array<char, 4096> scratch;
  std::size_t drained_bytes = 0;
  while (drained_bytes < kLingerBytes && !stopped) {
    auto [ec, n] = co_await stream.async_read_some(asio::buffer(scratch), use_nothrow);
    if (ec) break;
    drained_bytes += n;
  }
  tcp_of(stream).close();
}

HttpServer::HttpServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  impl_->stop();
}

std::expected<std::unique_ptr<HttpServer>, std::string> HttpServer::bind(
    asio::any_io_executor executor, std::string_view address, Routes routes) {
  return bind(std::move(executor), address, std::move(routes), HttpServerOptions{});
}

std::expected<std::unique_ptr<HttpServer>, std::string> HttpServer::bind(
    asio::any_io_executor executor, std::string_view address, Routes routes,
    HttpServerOptions options) {
  return bind(std::move(executor), address, std::move(routes), PostRoutes{}, std::move(options));
}

std::expected<std::unique_ptr<HttpServer>, std::string> HttpServer::bind(
    asio::any_io_executor executor, std::string_view address, Routes routes, PostRoutes post_routes,
    HttpServerOptions options) {
  auto endpoint = parse_address(address);
  if (!endpoint) return std::unexpected(std::move(endpoint.error()));

  tcp::acceptor acceptor{executor};
  beast::error_code ec;
  if (endpoint->host) {
    ec = open_and_listen(acceptor, tcp::endpoint{*endpoint->host, endpoint->port}, false);
  } else {
    // Every interface: IPv6 and IPv4 on one dual-stack socket where the
    // machine has IPv6, else IPv4 alone.
    ec = open_and_listen(acceptor, tcp::endpoint{tcp::v6(), endpoint->port}, true);
    if (ec && ec != asio::error::address_in_use && ec != asio::error::access_denied) {
      ec = open_and_listen(acceptor, tcp::endpoint{tcp::v4(), endpoint->port}, false);
    }
  }
  if (ec) {
    return std::unexpected("cannot listen on \"" + std::string{address} + "\": " + ec.message());
  }
  const auto port = acceptor.local_endpoint(ec).port();
  auto impl = std::make_shared<Impl>(std::move(acceptor), std::move(routes), std::move(post_routes),
                                     std::move(options));
  impl->port = port;
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

unsigned short HttpServer::port() const {
  return impl_->port;
}

// Not a coroutine itself: the loop holds Impl, not `this`, so the server may
// be destroyed before the loop first runs.
asio::awaitable<void> HttpServer::run() {
  return Impl::accept_loop(impl_);
}

asio::awaitable<void> HttpServer::Impl::accept_loop(std::shared_ptr<Impl> self) {
  while (!self->stopped) {
    auto [ec, socket] = co_await self->acceptor.async_accept(use_nothrow);
    if (self->stopped) break;
    if (ec == asio::error::operation_aborted) {  // our coroutine was cancelled
      self->stop();
      co_return;
    }
    if (ec) {
      // Out of descriptors and the like: count it and pause rather than spin.
      ++self->stats.io_errors;
      asio::steady_timer pause{self->executor, std::chrono::milliseconds{100}};
      co_await pause.async_wait(use_nothrow);
      continue;
    }
    beast::error_code pec;
    auto peer = socket.remote_endpoint(pec).address();
    if (peer.is_v6() && peer.to_v6().is_v4_mapped()) {
      peer = asio::ip::make_address_v4(asio::ip::v4_mapped, peer.to_v6());
    }
    if (pec || !self->make_room(peer)) {
      ++self->stats.rejected;
      beast::error_code ignored;
      socket.close(ignored);
      continue;
    }
    ++self->stats.connections;
    ++self->active;  // counted now, not when the coroutine starts, so the cap holds
    const std::uint64_t id = self->next_id++;
    self->open.emplace(id, Connection{.peer = peer, .idle_since = Clock::now()});
    asio::co_spawn(self->executor, Impl::serve(self, std::move(socket), id),
                   [self](std::exception_ptr e) {
                     if (e) ++self->stats.io_errors;
                   });
  }
  // stop() closed every connection; wait for their coroutines to notice.
  while (self->active > 0) {
    self->drained.expires_at(Clock::time_point::max());
    co_await self->drained.async_wait(use_nothrow);
    auto state = co_await asio::this_coro::cancellation_state;
    if (state.cancelled() != asio::cancellation_type::none) co_return;
  }
}

void HttpServer::stop() {
  impl_->stop();
}

void HttpServer::begin_lame_duck() {
  impl_->lame_duck = true;
}

bool HttpServer::lame_duck() const {
  return impl_->lame_duck;
}

bool HttpServer::serving_certificate_loaded() {
  if (!impl_->options.tls) return true;
  return impl_->current_tls_context() != nullptr;
}

const HttpServerStats& HttpServer::stats() const {
  return impl_->stats;
}

std::size_t HttpServer::open_connections() const {
  return impl_->active;
}

asio::awaitable<void> stop_at(std::vector<HttpServer*> servers, Clock::time_point until) {
  asio::steady_timer timer{co_await asio::this_coro::executor, until};
  co_await timer.async_wait(use_nothrow);
  for (HttpServer* server : servers) server->stop();
}

std::string not_ready_reason(bool shutting_down, HttpServer* webhook,
                             const std::function<std::string()>& otherwise) {
  if (shutting_down) return "shutting down";
  if (webhook && !webhook->serving_certificate_loaded()) {
    return "the webhook's serving certificate is not loaded";
  }
  return otherwise ? otherwise() : std::string{};
}

Routes metrics_routes(const metrics::Metrics& metrics) {
  Routes routes;
  routes.emplace("/metrics", [&metrics] {
    Response r;
    r.content_type = std::string{metrics::Metrics::content_type};
    r.body = metrics.serialize();
    return r;
  });
  return routes;
}

Routes health_routes(std::function<std::string()> unhealthy,
                     std::function<std::string()> not_ready) {
  auto check = [](const std::function<std::string()>& probe, int failing_status) {
    std::string reason = probe ? probe() : std::string{};
    if (reason.empty()) return text(200, "ok");
    return text(failing_status, std::move(reason));
  };
  Routes routes;
  routes.emplace("/healthz", [check, probe = std::move(unhealthy)] { return check(probe, 500); });
  routes.emplace("/readyz", [check, probe = std::move(not_ready)] { return check(probe, 503); });
  return routes;
}

}  // namespace gracekeeper::server
