// The HTTP server over TLS (the admission webhook's): POST routes, the body
// limit, certificates that rotate or are missing, a stalled handshake. Real
// loopback sockets; certificates made with OpenSSL
// (test/support/self_signed.h).
#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "../../support/self_signed.h"
#include "gracekeeper/server/http_server.h"
#include "gracekeeper/server/tls_source.h"

namespace gracekeeper::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

using test_support::make_certificate;

class FakeSource final : public TlsSource {
 public:
  std::shared_ptr<const ServingCertificate> certificate;
  std::shared_ptr<const ServingCertificate> current() const override { return certificate; }
};

using Body = std::function<asio::awaitable<void>(HttpServer&)>;

void with_https(std::shared_ptr<FakeSource> source, HttpServerOptions options, const Body& body) {
  asio::io_context io;
  options.tls = source;
  PostRoutes post;
  post.emplace("/echo", [](std::string_view b) {
    Response r;
    r.body = "got " + std::to_string(b.size());
    return r;
  });
  auto bound = HttpServer::bind(io.get_executor(), "127.0.0.1:0", {}, std::move(post), options);
  ASSERT_TRUE(bound) << bound.error();
  HttpServer& server = **bound;
  bool run_returned = false;
  bool body_done = false;
  asio::co_spawn(io, server.run(), [&](std::exception_ptr) { run_returned = true; });
  asio::co_spawn(io, body(server), [&](std::exception_ptr e) {
    body_done = true;
    server.stop();
    if (e) ADD_FAILURE() << "test body threw";
  });
  io.run_for(20s);
  EXPECT_TRUE(body_done);
  EXPECT_TRUE(run_returned);
}

struct Reply {
  beast::error_code error;
  int status = 0;
  std::string body;
  long serial = -1;  // of the certificate the server presented
};

// One request over a fresh TLS connection (the client checks nothing: the
// test reads the presented certificate's serial instead).
asio::awaitable<Reply> post(unsigned short port, http::verb method, std::string payload) {
  ssl::context context(ssl::context::tls_client);
  context.set_verify_mode(ssl::verify_none);
  beast::ssl_stream<beast::tcp_stream> stream(co_await asio::this_coro::executor, context);
  Reply out;
  stream.next_layer().expires_after(5s);
  const tcp::endpoint endpoint{asio::ip::address_v4::loopback(), port};
  auto [cec] = co_await stream.next_layer().async_connect(endpoint, use_nothrow);
  auto [hec] = co_await stream.async_handshake(ssl::stream_base::client, use_nothrow);
  if (cec || hec) {
    out.error = cec ? cec : hec;
    co_return out;
  }
  if (X509* peer = SSL_get1_peer_certificate(stream.native_handle())) {
    out.serial = ASN1_INTEGER_get(X509_get_serialNumber(peer));
    X509_free(peer);
  }
  http::request<http::string_body> request{method, "/echo", 11};
  request.set(http::field::host, "127.0.0.1");
  request.body() = std::move(payload);
  request.prepare_payload();
  auto [wec, w] = co_await http::async_write(stream, request, use_nothrow);
  http::response<http::string_body> response;
  beast::flat_buffer buffer;
  auto [rec, r] = co_await http::async_read(stream, buffer, response, use_nothrow);
  out.error = wec ? wec : rec;
  out.status = response.result_int();
  out.body = response.body();
  co_return out;
}

TEST(HttpsServer, ServesPostRoutesOverTls) {
  auto source = std::make_shared<FakeSource>();
  source->certificate = std::make_shared<ServingCertificate>(make_certificate(11, 1));
  with_https(source, {}, [](HttpServer& server) -> asio::awaitable<void> {
    Reply r = co_await post(server.port(), http::verb::post, "hello");
    EXPECT_FALSE(r.error) << r.error.message();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "got 5");
    EXPECT_EQ(r.serial, 11);
    r = co_await post(server.port(), http::verb::get, "");
    EXPECT_EQ(r.status, 405);
  });
}

TEST(HttpsServer, TheBodyLimitIsItsOwn) {
  auto source = std::make_shared<FakeSource>();
  source->certificate = std::make_shared<ServingCertificate>(make_certificate(1, 1));
  HttpServerOptions options;
  options.max_body_bytes = 1024 * 1024;
  with_https(source, options, [](HttpServer& server) -> asio::awaitable<void> {
    Reply r = co_await post(server.port(), http::verb::post, std::string(512 * 1024, 'x'));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "got 524288");
    r = co_await post(server.port(), http::verb::post, std::string(2 * 1024 * 1024, 'x'));
    EXPECT_EQ(r.status, 413);
    r = co_await post(server.port(), http::verb::post, "after");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(server.stats().bad_requests, 1u);
  });
}

TEST(HttpsServer, ANewGenerationBuildsOneNewContextAndServesTheNewCertificate) {
  auto source = std::make_shared<FakeSource>();
  source->certificate = std::make_shared<ServingCertificate>(make_certificate(1, 1));
  with_https(source, {}, [&](HttpServer& server) -> asio::awaitable<void> {
    for (int i = 0; i < 3; ++i) {
      Reply r = co_await post(server.port(), http::verb::post, "a");
      EXPECT_EQ(r.serial, 1);
    }
    EXPECT_EQ(server.stats().tls_contexts, 1u);
    source->certificate = std::make_shared<ServingCertificate>(make_certificate(2, 2));
    Reply r = co_await post(server.port(), http::verb::post, "b");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.serial, 2);
    EXPECT_EQ(server.stats().tls_contexts, 2u);
    // A broken next certificate: the current one keeps serving.
    auto broken = make_certificate(3, 3);
    broken.key_pem = make_certificate(4, 3).key_pem;  // not this certificate's key
    source->certificate = std::make_shared<ServingCertificate>(broken);
    r = co_await post(server.port(), http::verb::post, "c");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.serial, 2);
    EXPECT_EQ(server.stats().tls_failures, 1u);
  });
}

TEST(HttpsServer, WithoutACertificateConnectionsAreClosedUntilOneComes) {
  auto source = std::make_shared<FakeSource>();
  with_https(source, {}, [&](HttpServer& server) -> asio::awaitable<void> {
    Reply r = co_await post(server.port(), http::verb::post, "a");
    EXPECT_TRUE(r.error);
    EXPECT_EQ(server.stats().tls_failures, 1u);
    source->certificate = std::make_shared<ServingCertificate>(make_certificate(5, 1));
    r = co_await post(server.port(), http::verb::post, "a");
    EXPECT_FALSE(r.error) << r.error.message();
    EXPECT_EQ(r.serial, 5);
  });
}

// Readiness waits for the webhook's serving certificate: without one the
// API server's calls would fail their handshake (failurePolicy Ignore: the
// deploy goes through without its budget).
TEST(HttpsServer, NotReadyUntilTheServingCertificateLoads) {
  auto source = std::make_shared<FakeSource>();
  with_https(source, {}, [&](HttpServer& server) -> asio::awaitable<void> {
    auto caches_synced = [] { return std::string{}; };
    EXPECT_FALSE(server.serving_certificate_loaded());
    EXPECT_EQ(not_ready_reason(false, &server, caches_synced),
              "the webhook's serving certificate is not loaded");
    auto broken = std::make_shared<ServingCertificate>();
    broken->cert_pem = "not a certificate";
    broken->key_pem = "not a key";
    broken->generation = 1;
    source->certificate = broken;
    EXPECT_FALSE(server.serving_certificate_loaded()) << "a certificate that does not load";
    source->certificate = std::make_shared<ServingCertificate>(make_certificate(7, 2));
    EXPECT_TRUE(server.serving_certificate_loaded());
    EXPECT_EQ(not_ready_reason(false, &server, caches_synced), "");
    EXPECT_EQ(not_ready_reason(true, &server, caches_synced), "shutting down");
    auto reply = co_await post(server.port(), http::verb::post, "abc");
    EXPECT_EQ(reply.status, 200) << reply.error.message();
    // A plain server has no certificate to wait for.
    EXPECT_EQ(not_ready_reason(false, nullptr, caches_synced), "");
  });
}

TEST(HttpsServer, AStalledHandshakeIsCutByTheTimeout) {
  auto source = std::make_shared<FakeSource>();
  source->certificate = std::make_shared<ServingCertificate>(make_certificate(1, 1));
  HttpServerOptions options;
  options.timeout = 200ms;
  with_https(source, options, [&](HttpServer& server) -> asio::awaitable<void> {
    beast::tcp_stream raw(co_await asio::this_coro::executor);
    co_await raw.async_connect(tcp::endpoint{asio::ip::address_v4::loopback(), server.port()},
                               asio::use_awaitable);
    const auto start = std::chrono::steady_clock::now();
    char scratch[64];
    raw.expires_after(5s);
    auto [ec, n] = co_await raw.async_read_some(asio::buffer(scratch), use_nothrow);
    EXPECT_TRUE(ec);  // closed by the server
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
    EXPECT_EQ(server.stats().timeouts, 1u);
    Reply r = co_await post(server.port(), http::verb::post, "still serving");
    EXPECT_EQ(r.status, 200);
  });
}

struct Handshake {
  beast::error_code error;
  std::string version;  // negotiated, e.g. "TLSv1.2"
  std::string cipher;
};

// A TLS handshake by an OpenSSL client limited to versions [min, max] and,
// when given, to `ciphers` (TLS 1.2). Security level 0, so the client itself
// would speak TLS 1.1: a refusal is the server's.
asio::awaitable<Handshake> handshake(unsigned short port, int min, int max,
                                     std::string ciphers = "") {
  ssl::context context(ssl::context::tls_client);
  context.set_verify_mode(ssl::verify_none);
  SSL_CTX* native = context.native_handle();
  SSL_CTX_set_security_level(native, 0);
  SSL_CTX_set_min_proto_version(native, min);
  SSL_CTX_set_max_proto_version(native, max);
  if (ciphers.empty()) ciphers = "DEFAULT:@SECLEVEL=0";
  EXPECT_EQ(SSL_CTX_set_cipher_list(native, ciphers.c_str()), 1) << ciphers;
  beast::ssl_stream<beast::tcp_stream> stream(co_await asio::this_coro::executor, context);
  stream.next_layer().expires_after(5s);
  const tcp::endpoint endpoint{asio::ip::address_v4::loopback(), port};
  Handshake out;
  auto [cec] = co_await stream.next_layer().async_connect(endpoint, use_nothrow);
  if (cec) {
    out.error = cec;
    co_return out;
  }
  auto [hec] = co_await stream.async_handshake(ssl::stream_base::client, use_nothrow);
  out.error = hec;
  if (!hec) {
    out.version = SSL_get_version(stream.native_handle());
    out.cipher = SSL_CIPHER_get_name(SSL_get_current_cipher(stream.native_handle()));
  }
  co_return out;
}

TEST(HttpsServer, TlsOneOneIsRefusedAndOneTwoAndOneThreeServed) {
  auto source = std::make_shared<FakeSource>();
  source->certificate = std::make_shared<ServingCertificate>(make_certificate(1, 1));
  with_https(source, {}, [&](HttpServer& server) -> asio::awaitable<void> {
    auto old = co_await handshake(server.port(), TLS1_1_VERSION, TLS1_1_VERSION);
    EXPECT_TRUE(old.error) << "TLS 1.1 was accepted: " << old.version;
    EXPECT_EQ(server.stats().tls_failures, 1u);  // the server refused it
    auto v12 = co_await handshake(server.port(), TLS1_2_VERSION, TLS1_2_VERSION);
    EXPECT_FALSE(v12.error) << v12.error.message();
    EXPECT_EQ(v12.version, "TLSv1.2");
    auto v13 = co_await handshake(server.port(), TLS1_3_VERSION, TLS1_3_VERSION);
    EXPECT_FALSE(v13.error) << v13.error.message();
    EXPECT_EQ(v13.version, "TLSv1.3");
  });
}

TEST(HttpsServer, MinimumVersionOneThreeRefusesOneTwo) {
  auto source = std::make_shared<FakeSource>();
  source->certificate = std::make_shared<ServingCertificate>(make_certificate(1, 1));
  HttpServerOptions options;
  options.tls_min_version = TlsVersion::Tls13;
  with_https(source, options, [&](HttpServer& server) -> asio::awaitable<void> {
    auto v12 = co_await handshake(server.port(), TLS1_2_VERSION, TLS1_2_VERSION);
    EXPECT_TRUE(v12.error) << "TLS 1.2 was accepted";
    auto v13 = co_await handshake(server.port(), TLS1_2_VERSION, TLS1_3_VERSION);
    EXPECT_FALSE(v13.error) << v13.error.message();
    EXPECT_EQ(v13.version, "TLSv1.3");
    Reply r = co_await post(server.port(), http::verb::post, "abc");
    EXPECT_EQ(r.status, 200) << r.error.message();
  });
}

TEST(HttpsServer, CipherSuitesLimitTlsOneTwo) {
  auto source = std::make_shared<FakeSource>();
  source->certificate = std::make_shared<ServingCertificate>(make_certificate(1, 1));
  HttpServerOptions options;
  auto list = parse_cipher_suites("ECDHE-ECDSA-AES256-GCM-SHA384");
  ASSERT_TRUE(list) << list.error();
  options.tls_cipher_suites = *list;
  with_https(source, options, [&](HttpServer& server) -> asio::awaitable<void> {
    auto other = co_await handshake(server.port(), TLS1_2_VERSION, TLS1_2_VERSION,
                                    "ECDHE-ECDSA-AES128-GCM-SHA256");
    EXPECT_TRUE(other.error) << "a suite not in the list was negotiated: " << other.cipher;
    auto listed = co_await handshake(server.port(), TLS1_2_VERSION, TLS1_2_VERSION,
                                     "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384");
    EXPECT_FALSE(listed.error) << listed.error.message();
    EXPECT_EQ(listed.cipher, "ECDHE-ECDSA-AES256-GCM-SHA384");
  });
}

TEST(HttpsServer, TlsFlagValuesAreChecked) {
  EXPECT_EQ(parse_tls_version("1.2"), TlsVersion::Tls12);
  EXPECT_EQ(parse_tls_version("VersionTLS13"), TlsVersion::Tls13);
  EXPECT_EQ(parse_tls_version("1.1").error(), "expected 1.2 or 1.3, got \"1.1\"");
  EXPECT_EQ(parse_cipher_suites("ECDHE-ECDSA-AES128-GCM-SHA256,ECDHE-RSA-AES128-GCM-SHA256"),
            "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256");
  auto typo = parse_cipher_suites("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA257");
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().find("\"ECDHE-RSA-AES128-GCM-SHA257\""), std::string::npos)
      << typo.error();
  EXPECT_FALSE(parse_cipher_suites("HIGH"));  // a keyword, not a suite
  auto v13 = parse_cipher_suites("TLS_AES_128_GCM_SHA256");
  ASSERT_FALSE(v13);
  EXPECT_NE(v13.error().find("TLS 1.3 suites are not configurable"), std::string::npos);
  EXPECT_FALSE(parse_cipher_suites(""));
}

}  // namespace
}  // namespace gracekeeper::server
