// Self-managed webhook certificates: the chain verifies for every name, the
// renewal times on a fake clock, garbage in the Secret replaced without a
// crash, and a CA rotation that keeps the old CA in the bundle until every
// serving certificate it signed has been replaced.
#include "gracekeeper/admission/certs.h"

#include <gtest/gtest.h>

using namespace std::chrono_literals;

namespace gracekeeper::webhook {
namespace {

const TimePoint kStart = std::chrono::sys_days(std::chrono::year{2026} / 12 / 1);

CertOptions options() {
  CertOptions o;
  o.namespace_ = "gracekeeper-system";
  o.secret_name = "gracekeeper-webhook-certs";
  o.service_name = "gracekeeper-webhook";
  o.extra_sans = {"127.0.0.1", "::1", "localhost"};
  return o;
}

CertDecision decide(const std::optional<CertSecret>& held, const CertOptions& o, TimePoint now) {
  auto d = decide_certificates(held, o, now);
  EXPECT_TRUE(d.has_value()) << d.error();
  return d.value_or(CertDecision{});
}

std::size_t count_cas(const CertSecret& s) {
  auto cas = read_certificates(s.ca_crt);
  return cas ? cas->size() : 0;
}

TEST(Certs, TheChainVerifiesForEveryNameAndNoOther) {
  const CertOptions o = options();
  const CertDecision d = decide(std::nullopt, o, kStart);
  ASSERT_TRUE(d.changed);
  EXPECT_EQ(count_cas(d.secret), 1u);
  for (const auto& name : {"gracekeeper-webhook.gracekeeper-system.svc",
                           "gracekeeper-webhook.gracekeeper-system.svc.cluster.local", "127.0.0.1",
                           "::1", "localhost"}) {
    auto ok = verify_serving(d.secret.tls_crt, d.secret.ca_crt, name, kStart);
    EXPECT_TRUE(ok.has_value()) << name << ": " << ok.error();
  }
  auto other = verify_serving(d.secret.tls_crt, d.secret.ca_crt, "evil.example", kStart);
  ASSERT_FALSE(other.has_value());
  EXPECT_NE(other.error().find("mismatch"), std::string::npos) << other.error();
  EXPECT_FALSE(verify_serving(d.secret.tls_crt, d.secret.ca_crt, "10.0.0.1", kStart));
  // Another CA does not verify it.
  const CertDecision stranger = decide(std::nullopt, o, kStart);
  EXPECT_FALSE(verify_serving(d.secret.tls_crt, stranger.secret.ca_crt, "localhost", kStart));
  // Nor after it expired.
  EXPECT_FALSE(verify_serving(d.secret.tls_crt, d.secret.ca_crt, "localhost", kStart + 366 * 24h));
}

TEST(Certs, ValidityAndRenewalTimes) {
  EXPECT_EQ(renewal_time(kStart, kStart + 300s), kStart + 200s);
  const CertOptions o = options();
  const CertDecision d = decide(std::nullopt, o, kStart);
  auto serving = read_certificates(d.secret.tls_crt);
  auto ca = read_certificates(d.secret.ca_crt);
  ASSERT_TRUE(serving && ca);
  EXPECT_FALSE(serving->front().is_ca);
  EXPECT_TRUE(ca->front().is_ca);
  EXPECT_EQ(serving->front().not_after, kStart + 365 * 24h);
  EXPECT_EQ(serving->front().not_before, kStart - 60s);  // backdated for clocks behind
  EXPECT_EQ(ca->front().not_after, kStart + 3650 * 24h);
  // The serving certificate is due at 2/3 of its life.
  const TimePoint due = renewal_time(kStart - 60s, kStart + 365 * 24h);
  EXPECT_EQ(d.next_check, due);

  // Nothing changes before then, and the Secret is not written.
  const CertDecision before = decide(d.secret, o, due - 1s);
  EXPECT_FALSE(before.changed);
  EXPECT_EQ(before.secret, d.secret);
  EXPECT_TRUE(before.why.empty());
  // At the renewal time: a new serving certificate from the same CA.
  const CertDecision renewed = decide(d.secret, o, due);
  ASSERT_TRUE(renewed.changed);
  EXPECT_EQ(renewed.secret.ca_crt, d.secret.ca_crt);
  EXPECT_EQ(renewed.secret.ca_key, d.secret.ca_key);
  EXPECT_NE(renewed.secret.tls_crt, d.secret.tls_crt);
  EXPECT_NE(renewed.secret.tls_key, d.secret.tls_key);
  EXPECT_TRUE(verify_serving(renewed.secret.tls_crt, d.secret.ca_crt, "localhost", due));
  EXPECT_EQ(renewed.why, std::vector<std::string>{"the serving certificate is due for renewal"});
}

TEST(Certs, ShortValidityForTests) {
  CertOptions o = options();
  o.serving_validity = 30s;
  o.ca_validity = 90s;
  const CertDecision d = decide(std::nullopt, o, kStart);
  auto serving = read_certificates(d.secret.tls_crt);
  ASSERT_TRUE(serving);
  EXPECT_EQ(serving->front().not_before, kStart - 3s);  // a tenth of its life
  EXPECT_EQ(d.next_check, renewal_time(kStart - 3s, kStart + 30s));
}

// A CA at 2/3 of its life: a new CA joins the bundle, the old one stays; the
// serving certificate moves to the new CA only after the trust delay; a
// client holding either bundle trusts the server at every step.
TEST(Certs, CaRotationKeepsTheOldCaInTheBundle) {
  CertOptions o = options();
  o.serving_validity = 10 * 24h;
  o.ca_validity = 30 * 24h;
  o.trust_delay = 60s;
  TimePoint now = kStart;
  CertDecision d = decide(std::nullopt, o, now);
  const std::string first_ca = d.secret.ca_crt;
  // Renew the serving certificate as it falls due until the CA is due.
  for (int i = 0; i < 100; ++i) {
    now = d.next_check;
    d = decide(d.secret, o, now);
    if (count_cas(d.secret) > 1) break;
    EXPECT_EQ(d.secret.ca_crt, first_ca);
  }
  ASSERT_EQ(count_cas(d.secret), 2u);
  EXPECT_NE(std::find(d.why.begin(), d.why.end(),
                      "the CA is due for renewal (it expires 2026-12-31T00:00:00Z)"),
            d.why.end())
      << ::testing::PrintToString(d.why);
  EXPECT_GE(now, renewal_time(kStart - 60s, kStart + 30 * 24h));
  // The old CA stays; the new one is first and signs.
  EXPECT_NE(d.secret.ca_crt.find(first_ca), std::string::npos);
  EXPECT_FALSE(d.secret.ca_crt.starts_with(first_ca));
  const std::string bundle = d.secret.ca_crt;

  // The serving certificate is kept (by the old CA) until the new CA has been
  // trusted for trust_delay, even if it is due meanwhile.
  const std::string old_serving = d.secret.tls_crt;
  EXPECT_TRUE(verify_serving(old_serving, first_ca, "localhost", now));
  EXPECT_TRUE(verify_serving(old_serving, bundle, "localhost", now));
  CertDecision later = decide(d.secret, o, now + 30s);
  EXPECT_EQ(later.secret.tls_crt, old_serving);
  // Then it moves to the new CA, when it falls due.
  TimePoint t = now;
  while (later.secret.tls_crt == old_serving && t < now + 30 * 24h) {
    t = later.next_check;
    later = decide(later.secret, o, t);
  }
  ASSERT_NE(later.secret.tls_crt, old_serving);
  EXPECT_GE(t, now + 60s);
  EXPECT_TRUE(verify_serving(later.secret.tls_crt, bundle, "localhost", t));
  EXPECT_FALSE(verify_serving(later.secret.tls_crt, first_ca, "localhost", t));
  EXPECT_EQ(later.secret.ca_crt, bundle);  // the old CA still there

  // The old CA leaves the bundle when it expires, not before; every serving
  // certificate it signed has been replaced by then.
  auto cas = read_certificates(first_ca);
  ASSERT_TRUE(cas);
  const TimePoint old_expiry = cas->front().not_after;
  CertDecision end = later;
  while (t < old_expiry) {
    t = std::min(end.next_check, old_expiry);
    end = decide(end.secret, o, t);
    EXPECT_TRUE(verify_serving(end.secret.tls_crt, end.secret.ca_crt, "localhost", t));
    if (t < old_expiry) EXPECT_EQ(count_cas(end.secret), 2u);
  }
  EXPECT_EQ(count_cas(end.secret), 1u);
  EXPECT_EQ(end.secret.ca_crt.find(first_ca), std::string::npos);
}

TEST(Certs, AServingCertificateNeverOutlivesItsCa) {
  CertOptions o = options();
  o.serving_validity = 365 * 24h;
  o.ca_validity = 30 * 24h;
  const CertDecision d = decide(std::nullopt, o, kStart);
  auto serving = read_certificates(d.secret.tls_crt);
  auto ca = read_certificates(d.secret.ca_crt);
  ASSERT_TRUE(serving && ca);
  EXPECT_EQ(serving->front().not_after, ca->front().not_after);
}

TEST(Certs, GarbageInTheSecretIsReplaced) {
  const CertOptions o = options();
  const CertDecision good = decide(std::nullopt, o, kStart);
  struct Case {
    const char* what;
    CertSecret secret;
    const char* why;
    bool same_ca;
  };
  CertSecret junk_tls = good.secret;
  junk_tls.tls_crt = "not a certificate";
  CertSecret junk_key = good.secret;
  junk_key.tls_key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
  CertSecret swapped = good.secret;
  swapped.tls_key = good.secret.ca_key;
  CertSecret junk_ca = good.secret;
  junk_ca.ca_crt = "\x01\x02garbage";
  CertSecret junk_ca_key = good.secret;
  junk_ca_key.ca_key = "";
  CertSecret serving_as_ca = good.secret;
  serving_as_ca.ca_crt = good.secret.tls_crt;
  const std::vector<Case> cases{
      {"tls.crt junk", junk_tls, "tls.crt: no PEM certificate", true},
      {"tls.key junk", junk_key, "tls.key: ", true},
      {"tls.key of another certificate", swapped, "tls.key is not the key of tls.crt", true},
      {"ca.crt junk", junk_ca, "ca.crt: no PEM certificate", false},
      {"ca.key empty", junk_ca_key, "ca.key: ", false},
      {"a serving certificate as ca.crt", serving_as_ca, "not a CA", false},
      {"everything empty", CertSecret{}, "there is no serving certificate", false},
  };
  for (const auto& c : cases) {
    const CertDecision d = decide(c.secret, o, kStart + 1h);
    EXPECT_TRUE(d.changed) << c.what;
    std::string why;
    for (const auto& w : d.why) why += w + "; ";
    EXPECT_NE(why.find(c.why), std::string::npos) << c.what << ": " << why;
    EXPECT_TRUE(verify_serving(d.secret.tls_crt, d.secret.ca_crt, "localhost", kStart + 1h))
        << c.what;
    EXPECT_EQ(d.secret.ca_crt == good.secret.ca_crt, c.same_ca) << c.what;
    // And what it wrote is stable.
    EXPECT_FALSE(decide(d.secret, o, kStart + 1h).changed) << c.what;
  }
}

TEST(Certs, ACertificateForOtherNamesIsReissued) {
  CertOptions o = options();
  const CertDecision d = decide(std::nullopt, o, kStart);
  o.extra_sans = {"127.0.0.1"};
  const CertDecision fewer = decide(d.secret, o, kStart + 1s);
  EXPECT_TRUE(fewer.changed);
  EXPECT_EQ(fewer.secret.ca_crt, d.secret.ca_crt);
  EXPECT_FALSE(verify_serving(fewer.secret.tls_crt, fewer.secret.ca_crt, "localhost", kStart + 1s));
  o.service_name = "renamed";
  const CertDecision renamed = decide(fewer.secret, o, kStart + 2s);
  EXPECT_TRUE(verify_serving(renamed.secret.tls_crt, renamed.secret.ca_crt,
                             "renamed.gracekeeper-system.svc", kStart + 2s));
}

TEST(Certs, ExpiredCertificatesAreReplaced) {
  const CertOptions o = options();
  const CertDecision d = decide(std::nullopt, o, kStart);
  const TimePoint later = kStart + 20 * 365 * 24h;
  const CertDecision again = decide(d.secret, o, later);
  EXPECT_TRUE(again.changed);
  EXPECT_EQ(count_cas(again.secret), 1u);
  EXPECT_NE(again.secret.ca_crt, d.secret.ca_crt);
  EXPECT_TRUE(verify_serving(again.secret.tls_crt, again.secret.ca_crt, "localhost", later));
}

TEST(Certs, AServableCertificate) {
  CertOptions o = options();
  const CertDecision d = decide(std::nullopt, o, kStart);
  EXPECT_TRUE(serving_usable(d.secret, o, kStart));
  // Still servable when due for renewal (a renewal that cannot be written).
  EXPECT_TRUE(serving_usable(d.secret, o, kStart + 300 * 24h));
  EXPECT_FALSE(serving_usable(d.secret, o, kStart + 366 * 24h));
  CertSecret swapped = d.secret;
  swapped.tls_key = d.secret.ca_key;
  EXPECT_FALSE(serving_usable(swapped, o, kStart));
  CertSecret junk = d.secret;
  junk.ca_crt = "junk";
  EXPECT_FALSE(serving_usable(junk, o, kStart));
  o.extra_sans.push_back("other.example");
  EXPECT_FALSE(serving_usable(d.secret, o, kStart));
}

TEST(Certs, ExtraSans) {
  EXPECT_TRUE(check_san("127.0.0.1"));
  EXPECT_TRUE(check_san("::1"));
  EXPECT_TRUE(check_san("webhook.example.com"));
  EXPECT_TRUE(check_san("*.example.com"));
  EXPECT_FALSE(check_san(""));
  EXPECT_FALSE(check_san("Upper.example"));
  EXPECT_FALSE(check_san("a..b"));
  EXPECT_FALSE(check_san("-a.b"));
  EXPECT_FALSE(check_san("a b"));
  EXPECT_NE(check_san("x_y").error().find("neither an IP address nor a DNS name"),
            std::string::npos);
}

TEST(Certs, Base64) {
  for (std::string text : {"", "a", "ab", "abc", "abcd", "\x00\xff\x10"}) {
    EXPECT_EQ(decode_base64(encode_base64(text)), text);
  }
  EXPECT_EQ(encode_base64("ab"), "YWI=");
  EXPECT_FALSE(decode_base64("YWI"));
  EXPECT_FALSE(decode_base64("Y!I="));
}

}  // namespace
}  // namespace gracekeeper::webhook
