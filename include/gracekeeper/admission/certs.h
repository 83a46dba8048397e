// The admission webhook's serving certificates, managed by gracekeeper itself
// (`gracekeeper run --webhook-cert-secret NAME`): a CA and a serving
// certificate signed by it, kept in one Secret of type kubernetes.io/tls in
// gracekeeper's namespace, and the caBundle of every webhook of its
// MutatingWebhookConfiguration patched to match.
//
// Every replica runs the same loop (it serves admissions whether or not it
// leads): read the Secret, decide (a pure function of the Secret and the
// time), write it back only when something is due, conditional on its
// resourceVersion (create-if-absent; a 409 means another replica won: read
// its Secret), patch the caBundle when it differs, and publish the Secret's
// serving certificate through TlsSource::current(). The loop runs again when
// something falls due and at least every `resync`, which is also how a reset
// caBundle is patched back and how replicas pick up each other's rotations.
//
// Rotation without a failed admission:
// - the serving certificate is renewed at 2/3 of its life, by the newest CA;
// - a CA is renewed at 2/3 of its life: the new CA goes into ca.crt (and the
//   caBundle) beside the old one, which stays until it expires; the serving
//   certificate moves to the new CA only once that CA has been in the bundle
//   for `trust_delay`, so the API server trusts both the old and the new
//   serving certificate while replicas switch;
// - a serving certificate never outlives the CA that signed it.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/server/tls_source.h"

namespace gracekeeper::kube {
class Client;
}

namespace gracekeeper::webhook {

using TimePoint = std::chrono::system_clock::time_point;
using Clock = std::function<TimePoint()>;

struct CertOptions {
  std::string namespace_{};      // the Secret's and the Service's namespace
  std::string secret_name{};     // --webhook-cert-secret
  std::string service_name{};    // --webhook-service: the SANs <service>.<ns>.svc[.cluster.local]
  std::string webhook_config{};  // --webhook-config: "" patches no caBundle
  std::vector<std::string> extra_sans{};  // --webhook-cert-extra-san: DNS names or IP addresses
  std::chrono::seconds serving_validity{std::chrono::hours(24 * 365)};
  std::chrono::seconds ca_validity{std::chrono::hours(24 * 365 * 10)};
  // A new CA signs serving certificates only after it has been in the
  // caBundle this long (the caBundle reaches the API server's webhook client
  // within a second; every replica patches it within a resync).
  std::chrono::seconds trust_delay{60};
  std::chrono::seconds resync{30};  // read the Secret and the caBundle at least this often
};

// The names the serving certificate is valid for: <service>.<ns>.svc,
// <service>.<ns>.svc.cluster.local, then the extra SANs.
std::vector<std::string> serving_names(const CertOptions&);
// An extra SAN must be an IP address or a DNS name (RFC 1123 labels,
// optionally a leading "*."); the error says why not.
std::expected<void, std::string> check_san(std::string_view);

// What the Secret holds (data keys tls.crt, tls.key, ca.crt, ca.key), PEM.
struct CertSecret {
  std::string tls_crt{};  // the serving certificate
  std::string tls_key{};  // its key
  std::string ca_crt{};   // every CA still trusted, newest first: the caBundle
  std::string ca_key{};   // the key of the newest CA, the one that signs
  bool operator==(const CertSecret&) const = default;
};

// The serving certificate of `s` can be served at `now`: its key matches and
// it verifies against ca.crt for every name.
bool serving_usable(const CertSecret& s, const CertOptions&, TimePoint now);

// The time a certificate valid [not_before, not_after) is renewed: at 2/3 of its life.
TimePoint renewal_time(TimePoint not_before, TimePoint not_after);

struct CertDecision {
  CertSecret secret{};             // what the Secret should hold
  bool changed = false;            // differs from what it holds
  std::vector<std::string> why{};  // what was due or wrong, for the log
  TimePoint next_check{};          // when something falls due next
};

// Decides what the Secret must hold at `now`: nothing missing, expired,
// unreadable or due for renewal. Garbage in any key is replaced (and said
// in `why`), never trusted. An error only when OpenSSL cannot generate a key.
std::expected<CertDecision, std::string> decide_certificates(const std::optional<CertSecret>&,
                                                             const CertOptions&, TimePoint now);

// The PKI underneath (ECDSA P-256, SHA-256), exposed for tests.
struct IssuedPair {
  std::string cert_pem{};
  std::string key_pem{};
};
std::expected<IssuedPair, std::string> issue_ca(TimePoint not_before, TimePoint not_after);
std::expected<IssuedPair, std::string> issue_serving(const IssuedPair& ca,
                                                     const std::vector<std::string>& names,
                                                     TimePoint not_before, TimePoint not_after);
struct CertificateInfo {
  TimePoint not_before{};
  TimePoint not_after{};
  bool is_ca = false;
  std::string subject{};  // one line, e.g. "/O=gracekeeper/CN=gracekeeper-webhook-ca-1733089200"
  std::string sha256{};   // of the DER, lower-case hex: `openssl x509 -fingerprint -sha256`
};
// Every certificate of a PEM text, in order; an error names the block that
// is not a certificate.
std::expected<std::vector<CertificateInfo>, std::string> read_certificates(std::string_view pem);
// Verifies the serving chain against `ca_bundle_pem` at `at`
// (X509_verify_cert) for `name` (a DNS name or an IP address); the error is
// OpenSSL's reason.
std::expected<void, std::string> verify_serving(std::string_view cert_pem,
                                                std::string_view ca_bundle_pem,
                                                std::string_view name, TimePoint at);

// Standard padded base64, as Kubernetes encodes Secret data and caBundle.
std::string encode_base64(std::string_view);
std::optional<std::string> decode_base64(std::string_view);

// The running part: one per process, on the client's io_context.
class SelfManagedCertificates final : public server::TlsSource {
 public:
  SelfManagedCertificates(kube::Client&, CertOptions,
                          Clock clock = &std::chrono::system_clock::now);
  ~SelfManagedCertificates() override;

  std::shared_ptr<const server::ServingCertificate> current() const override;

  // One pass: read (and if due, write) the Secret, publish its serving
  // certificate, patch the caBundle. Returns when the next pass is due.
  boost::asio::awaitable<TimePoint> sync();
  // sync() until stop(); errors are logged and retried.
  boost::asio::awaitable<void> run();
  void stop();

 private:
  boost::asio::awaitable<std::expected<CertSecret, std::string>> reconcile_secret();
  boost::asio::awaitable<void> patch_ca_bundle(const std::string& ca_crt);
  void publish(const CertSecret&);
  void report(const std::string& topic, const std::string& problem);

  kube::Client& client_;
  CertOptions options_;
  Clock clock_;
  TimePoint next_{};
  mutable std::mutex mutex_;  // current_: the server may read it from another thread
  std::shared_ptr<const server::ServingCertificate> current_;
  std::optional<CertSecret> usable_held_;  // served when a due renewal cannot be written
  std::optional<boost::asio::steady_timer> timer_;
  bool stopped_ = false;
  std::string reported_secret_, reported_bundle_;  // the last problem logged, logged once
};

}  // namespace gracekeeper::webhook
