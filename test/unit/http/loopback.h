// Test helpers for the http layer: a scripted HTTP/1.1 server on 127.0.0.1
// (plain or TLS, real sockets), a self-signed certificate made in memory,
// and a way to run one coroutine while the server keeps accepting.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace gracekeeper::http::test {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
inline constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);
using WireRequest = bhttp::request<bhttp::string_body>;

inline std::string response(int status, std::string_view body, std::string_view headers = "") {
  return "HTTP/1.1 " + std::to_string(status) +
         " X\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + std::string{headers} + "\r\n" + std::string{body};
}

// A self-signed certificate for `san` ("IP:127.0.0.1", "DNS:localhost"), PEM.
struct SelfSigned {
  std::string certificate;
  std::string key;
};

inline SelfSigned make_self_signed(const char* san) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  if (!key || !x) throw std::runtime_error("OpenSSL: key or certificate");
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("gk-test"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
  for (auto [nid, value] : {std::pair{NID_subject_alt_name, san},
                            std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(x, key, EVP_sha256());
  auto pem = [](auto write) {
    BIO* bio = BIO_new(BIO_s_mem());
    write(bio);
    char* data = nullptr;
    long n = BIO_get_mem_data(bio, &data);
    std::string out(data, static_cast<std::size_t>(n));
    BIO_free(bio);
    return out;
  };
  SelfSigned out{pem([&](BIO* b) { PEM_write_bio_X509(b, x); }), pem([&](BIO* b) {
                   PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr);
                 })};
  X509_free(x);
  EVP_PKEY_free(key);
  return out;
}

// Answers every request with respond(request) (raw bytes) on 127.0.0.1; TLS
// when given a certificate. Counts connections and records requests.
class LoopbackServer {
 public:
  explicit LoopbackServer(asio::io_context& io, const SelfSigned* tls = nullptr)
      : acceptor_(io, tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}),
        tls_(asio::ssl::context::tls_server) {
    if (tls) {
      tls_.use_certificate_chain(asio::buffer(tls->certificate));
      tls_.use_private_key(asio::buffer(tls->key), asio::ssl::context::pem);
      use_tls_ = true;
    }
    asio::co_spawn(io, accept_loop(), asio::detached);
  }
  unsigned short port() const { return acceptor_.local_endpoint().port(); }
  std::string url() const {
    return std::string{use_tls_ ? "https" : "http"} + "://127.0.0.1:" + std::to_string(port());
  }

  std::function<std::string(const WireRequest&)> respond = [](const WireRequest&) {
    return response(200, "ok");
  };
  bool close_after_response = false;  // close without saying so (no Connection: close)
  std::vector<WireRequest> requests;
  int connections = 0;

 private:
  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(use_nothrow);
      if (ec) co_return;
      ++connections;
      auto ex = acceptor_.get_executor();
      if (use_tls_) {
        asio::co_spawn(ex, serve_tls(std::move(socket)), asio::detached);
      } else {
        asio::co_spawn(ex, serve(std::make_unique<tcp::socket>(std::move(socket))), asio::detached);
      }
    }
  }
  asio::awaitable<void> serve_tls(tcp::socket socket) {
    auto stream = std::make_unique<asio::ssl::stream<tcp::socket>>(std::move(socket), tls_);
    auto [ec] = co_await stream->async_handshake(asio::ssl::stream_base::server, use_nothrow);
    if (ec) co_return;
    co_await serve(std::move(stream));
  }
  template <class Stream>
  asio::awaitable<void> serve(std::unique_ptr<Stream> stream) {
    boost::beast::flat_buffer buffer;
    for (;;) {
      WireRequest req;
      auto [ec, n] = co_await bhttp::async_read(*stream, buffer, req, use_nothrow);
      if (ec) co_return;
      requests.push_back(req);
      const std::string raw = respond(req);
      auto [wec, wn] = co_await asio::async_write(*stream, asio::buffer(raw), use_nothrow);
      if (wec || close_after_response) co_return;  // the socket closes with the stream
    }
  }

  tcp::acceptor acceptor_;
  asio::ssl::context tls_;
  bool use_tls_ = false;
};

// Runs `task` until it finishes (the server's accept loop keeps running).
template <class T>
T run(asio::io_context& io, asio::awaitable<T> task) {
  std::optional<T> out;
  std::exception_ptr error;
  asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T value) {
    error = e;
    if (!e) out.emplace(std::move(value));
    io.stop();
  });
  io.restart();
  io.run();
  if (error) std::rethrow_exception(error);
  return std::move(*out);
}

// A port nothing listens on (bound, then released).
inline unsigned short closed_port(asio::io_context& io) {
  tcp::acceptor probe(io, {asio::ip::make_address("127.0.0.1"), 0});
  return probe.local_endpoint().port();
}

}  // namespace gracekeeper::http::test
