// TLS against a loopback server with a certificate made in memory: trust,
// name verification, PEM errors naming their origin, and pooling over TLS.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gracekeeper/http/client.h"
#include "loopback.h"

namespace gracekeeper::http {
namespace {

using namespace std::chrono_literals;
using namespace test;
using ::testing::HasSubstr;

class TlsTest : public ::testing::Test {
 protected:
  std::expected<Response, Error> get(Endpoint e) {
    Options o;
    o.retry.attempts = 1;
    Client c(io_.get_executor(), std::move(e), o);
    return run(io_, c.send(Request{.target = "/x"}));
  }
  Endpoint trusting() {
    Endpoint e{.url = server_.url()};
    e.tls.certificate_authority = Pem{cert_.certificate, "test CA"};
    return e;
  }

  asio::io_context io_;
  static inline const SelfSigned cert_ = make_self_signed("IP:127.0.0.1");
  LoopbackServer server_{io_, &cert_};
};

TEST_F(TlsTest, ATrustedServerAnswersAndItsConnectionIsPooled) {
  Options o;
  Client c(io_.get_executor(), trusting(), o);
  for (int i = 0; i < 3; ++i) {
    auto r = run(io_, c.send(Request{.target = "/x"}));
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, 200u);
  }
  EXPECT_EQ(server_.connections, 1);
}

TEST_F(TlsTest, AnUntrustedCertificateFailsTheHandshake) {
  auto r = get(Endpoint{.url = server_.url()});  // the system store does not know it
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::Transport);
  EXPECT_THAT(r.error().message, HasSubstr("TLS handshake with 127.0.0.1:"));
  EXPECT_THAT(r.error().message, HasSubstr("certificate verify failed"));
}

TEST_F(TlsTest, AnotherNameThanTheCertificatesFails) {
  Endpoint e = trusting();
  e.tls.server_name = "api.example";
  auto r = get(std::move(e));
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("hostname mismatch"));
}

TEST_F(TlsTest, InsecureSkipVerifyAcceptsAnyCertificate) {
  Endpoint e{.url = server_.url()};
  e.tls.insecure_skip_verify = true;
  auto r = get(std::move(e));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200u);
}

TEST_F(TlsTest, AGarbageCertificateAuthorityIsNamedByItsOrigin) {
  Endpoint e{.url = server_.url()};
  e.tls.certificate_authority = Pem{"not a certificate", "file /etc/ca.pem"};
  auto r = get(std::move(e));
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("certificate authority (file /etc/ca.pem)"));
  EXPECT_EQ(server_.connections, 0);
}

TEST_F(TlsTest, AGarbageClientKeyIsNamedByItsOrigin) {
  Endpoint e = trusting();
  e.tls.client_certificate = Pem{cert_.certificate, "client cert"};
  e.tls.client_key = Pem{"garbage", "kubeconfig field users[x].user.client-key-data"};
  auto r = get(std::move(e));
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message,
              HasSubstr("client key (kubeconfig field users[x].user.client-key-data)"));
}

TEST_F(TlsTest, HttpsToAPlainHttpServerFailsTheHandshake) {
  LoopbackServer plain(io_);
  auto r = get(Endpoint{.url = "https://127.0.0.1:" + std::to_string(plain.port())});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::Transport);
  EXPECT_THAT(r.error().message, HasSubstr("TLS handshake with 127.0.0.1:"));
}

TEST_F(TlsTest, PlainHttpOnlyWhenTheEndpointAllowsIt) {
  LoopbackServer plain(io_);
  auto refused = get(Endpoint{.url = plain.url()});
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message, HasSubstr("is not an https:// URL"));
  EXPECT_EQ(plain.connections, 0);
  auto allowed = get(Endpoint{.url = plain.url(), .allow_plain_http = true});
  ASSERT_TRUE(allowed) << allowed.error().message;
}

}  // namespace
}  // namespace gracekeeper::http
