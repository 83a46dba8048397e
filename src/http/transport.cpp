// HTTPS: TLS with SNI and peer + host name verification, client
// certificates from memory, a bearer token read per request, and a small
// pool of keep-alive connections. The HTTP exchange is in exchange.h.
//
// Plain HTTP (a TCP stream, no TLS) only when the endpoint sets
// allow_plain_http: for in-cluster services such as Prometheus, never for the
// API server.
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/url/parse.hpp>
#include <cerrno>
#include <deque>
#include <utility>

#include "exchange.h"

namespace gracekeeper::http {
namespace {

using namespace detail;  // the exchange (exchange.h)

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;

bool is_ip_literal(const std::string& host) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

// The reason OpenSSL gives for a failed handshake, with the certificate
// verification result when that is what failed ("certificate verify failed:
// unable to get local issuer certificate").
std::string tls_failure(SSL* ssl, const beast::error_code& ec) {
  std::string text = describe(ec);
  if (ec.category() == asio::error::get_ssl_category()) {
    long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      text += std::string{": "} + X509_verify_cert_error_string(verify);
    }
  }
  return text;
}

class TlsTransport final : public Transport {
 public:
  TlsTransport(asio::any_io_executor executor, Endpoint endpoint, const Options& options)
      : executor_(std::move(executor)),
        endpoint_(std::move(endpoint)),
        options_(options),
        tls_(ssl::context::tls_client) {
    setup_endpoint();
    if (setup_error_.empty() && !plain_) setup_tls();
  }

  asio::awaitable<std::expected<Response, Error>> send(const Request& r) override {
    auto head = request_head();
    if (!head) co_return std::unexpected(std::move(head.error()));
    const auto wire = make_wire_request(r, *head);
    for (int attempt = 0;; ++attempt) {
      auto conn = co_await acquire();
      if (!conn) co_return std::unexpected(std::move(conn.error()));
      auto& [c, reused] = *conn;
      auto run = [&](auto& stream) {
        return exchange(stream, c->buffer, wire, options_.timeouts, options_.max_body_bytes);
      };
      std::expected<Exchanged, Error> out;
      if (c->tls) {
        out = co_await run(*c->tls);
      } else {
        out = co_await run(*c->plain);
      }
      if (out) {
        if (out->reusable) release(std::move(c));
        co_return std::move(out->response);
      }
      // A pooled connection the server closed while it sat idle fails before
      // any answer arrives. Send again on a new connection, once, when that
      // cannot do anything twice: the request is idempotent, or it did not
      // go out whole (the server never acts on half a request).
      const bool stale = reused && !out.error().received_any;
      if (attempt == 0 && stale && (r.idempotent || !out.error().request_written)) continue;
      co_return std::unexpected(std::move(out.error()));
    }
  }

  asio::awaitable<std::expected<StreamResult, Error>> stream(
      const Request& r, const ChunkHandler& on_chunk) override {
    auto head = request_head();
    if (!head) co_return std::unexpected(std::move(head.error()));
    const auto wire = make_wire_request(r, *head);
    // A watch holds its connection for minutes: always a new one, and it is
    // not returned to the pool (its end is not a request boundary we trust).
    auto conn = co_await connect();
    if (!conn) co_return std::unexpected(std::move(conn.error()));
    Connection& c = **conn;
    auto run = [&](auto& stream) {
      return exchange_streaming(stream, c.buffer, wire, options_.timeouts, options_.max_body_bytes,
                                on_chunk);
    };
    if (c.tls) co_return co_await run(*c.tls);
    co_return co_await run(*c.plain);
  }

 private:
  // Exactly one of `tls` and `plain` is set.
  struct Connection {
    Connection(const asio::any_io_executor& ex, ssl::context* tls_context) {
      if (tls_context) {
        tls.emplace(ex, *tls_context);
      } else {
        plain.emplace(ex);
      }
    }
    beast::tcp_stream& tcp() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
    std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
    std::optional<beast::tcp_stream> plain;
    beast::flat_buffer buffer;
    Clock::time_point idle_since;
  };
  using ConnectionPtr = std::unique_ptr<Connection>;

  Error setup_failure(std::string message) const {
    return Error{.kind = ErrorKind::Transport, .message = std::move(message)};
  }

  void setup_endpoint() {
    auto url = boost::urls::parse_uri(endpoint_.url);
    plain_ = url && endpoint_.allow_plain_http && url->scheme() == "http";
    if (!url || (url->scheme() != "https" && !plain_) || url->host_address().empty()) {
      setup_error_ = "server \"" + endpoint_.url +
                     (endpoint_.allow_plain_http ? "\" is not an http:// or https:// URL"
                                                 : "\" is not an https:// URL");
      return;
    }
    host_ = url->host_address();
    port_ = url->has_port() ? std::string{url->port()} : plain_ ? "80" : "443";
    const bool v6 = url->host_type() == boost::urls::host_type::ipv6;
    head_.host = (v6 ? "[" + host_ + "]" : host_) + (url->has_port() ? ":" + port_ : "");
    head_.path_prefix = std::string{url->encoded_path()};
    while (!head_.path_prefix.empty() && head_.path_prefix.back() == '/') {
      head_.path_prefix.pop_back();
    }
    head_.user_agent = options_.user_agent;
    verify_name_ = endpoint_.tls.server_name.empty() ? host_ : endpoint_.tls.server_name;
  }

  void setup_tls() {
    boost::system::error_code ec;
    tls_.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                         ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                     ec);
    if (endpoint_.tls.certificate_authority) {
      tls_.add_certificate_authority(asio::buffer(endpoint_.tls.certificate_authority->text), ec);
      if (ec) {
        setup_error_ = "certificate authority (" + endpoint_.tls.certificate_authority->origin +
                       "): " + ec.message();
        return;
      }
    } else {
      tls_.set_default_verify_paths(ec);
    }
    if (endpoint_.tls.client_certificate) {
      tls_.use_certificate_chain(asio::buffer(endpoint_.tls.client_certificate->text), ec);
      if (ec) {
        setup_error_ = "client certificate (" + endpoint_.tls.client_certificate->origin +
                       "): " + ec.message();
        return;
      }
    }
    if (endpoint_.tls.client_key) {
      tls_.use_private_key(asio::buffer(endpoint_.tls.client_key->text), ssl::context::pem, ec);
      if (ec) {
        setup_error_ = "client key (" + endpoint_.tls.client_key->origin + "): " + ec.message();
        return;
      }
    }
    // Verification is on unless the endpoint explicitly turned it off.
    tls_.set_verify_mode(endpoint_.tls.insecure_skip_verify ? ssl::verify_none : ssl::verify_peer);
  }

  std::expected<RequestHead, Error> request_head() const {
    if (!setup_error_.empty()) return std::unexpected(setup_failure(setup_error_));
    RequestHead head = head_;
    if (endpoint_.token) {
      auto token = endpoint_.token();
      if (!token) return std::unexpected(setup_failure("bearer token: " + token.error()));
      if (!token->empty()) head.authorization = "Bearer " + *token;
    }
    return head;
  }

  // Still usable: nothing to read and not closed. A server closes idle
  // keep-alive connections; finding that out here avoids sending into a
  // closed socket.
  static bool looks_open(Connection& c) {
    if (c.buffer.size() != 0) return false;
    auto& socket = c.tcp().socket();
    char byte;
    ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  asio::awaitable<std::expected<std::pair<ConnectionPtr, bool>, Error>> acquire() {
    while (!idle_.empty()) {
      ConnectionPtr c = std::move(idle_.back());
      idle_.pop_back();
      if (Clock::now() - c->idle_since < options_.max_idle_time && looks_open(*c)) {
        co_return std::pair{std::move(c), true};
      }
      // Dropped without a TLS close_notify: the peer closed already or it
      // idled too long; closing the socket is enough.
    }
    auto fresh = co_await connect();
    if (!fresh) co_return std::unexpected(std::move(fresh.error()));
    co_return std::pair{std::move(*fresh), false};
  }

  void release(ConnectionPtr c) {
    c->idle_since = Clock::now();
    idle_.push_back(std::move(c));
    while (idle_.size() > options_.max_idle_connections) idle_.pop_front();
  }

  asio::awaitable<std::expected<ConnectionPtr, Error>> connect() {
    const std::string where = host_ + ":" + port_;
    tcp::resolver resolver(executor_);
    auto flags = is_ip_literal(host_) ? tcp::resolver::numeric_host : tcp::resolver::flags{};
    auto [rec, endpoints] = co_await resolver.async_resolve(host_, port_, flags, use_nothrow);
    if (rec) co_return std::unexpected(setup_failure("resolving " + host_ + ": " + rec.message()));

    auto c = std::make_unique<Connection>(executor_, plain_ ? nullptr : &tls_);
    if (plain_) {
      auto& tcp_stream = c->tcp();
      tcp_stream.expires_after(options_.timeouts.connect);
      auto [cec, ep] = co_await tcp_stream.async_connect(endpoints, use_nothrow);
      tcp_stream.expires_never();
      if (cec)
        co_return std::unexpected(setup_failure("connecting to " + where + ": " + describe(cec)));
      tcp_stream.socket().set_option(tcp::no_delay(true));
      co_return c;
    }
    SSL* ssl = c->tls->native_handle();
    // SNI carries host names only (RFC 6066), never an IP address.
    if (!is_ip_literal(verify_name_)) SSL_set_tlsext_host_name(ssl, verify_name_.c_str());
    if (!endpoint_.tls.insecure_skip_verify) {
      // OpenSSL checks the name during the handshake, so a mismatch fails it
      // with X509_V_ERR_HOSTNAME_MISMATCH / IP_ADDRESS_MISMATCH.
      int ok = is_ip_literal(verify_name_)
                   ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), verify_name_.c_str())
                   : SSL_set1_host(ssl, verify_name_.c_str());
      if (ok != 1) co_return std::unexpected(setup_failure("bad TLS name " + verify_name_));
    }

    auto& tcp_stream = c->tcp();
    tcp_stream.expires_after(options_.timeouts.connect);
    auto [cec, ep] = co_await tcp_stream.async_connect(endpoints, use_nothrow);
    if (cec)
      co_return std::unexpected(setup_failure("connecting to " + where + ": " + describe(cec)));
    tcp_stream.socket().set_option(tcp::no_delay(true));

    tcp_stream.expires_after(options_.timeouts.handshake);
    auto [hec] = co_await c->tls->async_handshake(ssl::stream_base::client, use_nothrow);
    tcp_stream.expires_never();
    if (hec) {
      co_return std::unexpected(
          setup_failure("TLS handshake with " + where + ": " + tls_failure(ssl, hec)));
    }
    co_return c;
  }

  asio::any_io_executor executor_;
  Endpoint endpoint_;
  Options options_;
  ssl::context tls_;
  std::string setup_error_;  // bad URL or PEM: every request fails with it
  bool plain_ = false;       // http:// (allowed by the endpoint): no TLS
  std::string host_;
  std::string port_;
  std::string verify_name_;
  RequestHead head_;
  std::deque<ConnectionPtr> idle_;  // most recently used at the back
};

}  // namespace

std::unique_ptr<Transport> make_transport(asio::any_io_executor executor, Endpoint endpoint,
                                          const Options& options) {
  return std::make_unique<TlsTransport>(std::move(executor), std::move(endpoint), options);
}

}  // namespace gracekeeper::http
