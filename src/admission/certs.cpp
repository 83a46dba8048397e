// Self-managed webhook certificates (certs.h): the PKI with OpenSSL's C API,
// the decision as a pure function of the Secret and the time, and the loop
// that keeps the Secret, the caBundle and TlsSource::current() in step.
#include "gracekeeper/admission/certs.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <ctime>
#include <nlohmann/json.hpp>

#include "gracekeeper/core/time.h"
#include "gracekeeper/kube/client.h"
#include "gracekeeper/log/log.h"

namespace gracekeeper::webhook {
namespace {

namespace asio = boost::asio;
using std::chrono::seconds;

const kube::Resource kSecrets{"", "v1", "secrets", true};
const kube::Resource kMutatingWebhooks{"admissionregistration.k8s.io", "v1",
                                       "mutatingwebhookconfigurations", false};
constexpr std::size_t kMaxCas = 4;  // garbage written again and again cannot grow the bundle

template <class T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using StorePtr = std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
using NamePtr = std::unique_ptr<X509_NAME, Deleter<X509_NAME, X509_NAME_free>>;

// The oldest error OpenSSL queued, and the queue emptied.
std::string openssl_error(std::string_view what) {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return std::string(what);
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return fmt::format("{}: {}", what, text);
}

bool is_ip(std::string_view name) {
  std::string text(name);
  unsigned char buffer[16];
  return inet_pton(AF_INET, text.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, text.c_str(), buffer) == 1;
}

std::string to_pem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(size));
}

std::string to_pem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(size));
}

// Every certificate of a PEM text; null entries for blocks that are not one.
std::expected<std::vector<X509Ptr>, std::string> read_pem_certificates(std::string_view pem) {
  std::vector<X509Ptr> out;
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  for (;;) {
    X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (cert == nullptr) {
      const unsigned long code = ERR_peek_last_error();
      if (ERR_GET_REASON(code) == PEM_R_NO_START_LINE) {
        ERR_clear_error();
        break;  // the end of the text
      }
      return std::unexpected(openssl_error(fmt::format("certificate {}", out.size() + 1)));
    }
    out.emplace_back(cert);
  }
  if (out.empty()) return std::unexpected("no PEM certificate");
  return out;
}

std::expected<KeyPtr, std::string> read_pem_key(std::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  if (key == nullptr) return std::unexpected(openssl_error("no PEM private key"));
  return KeyPtr(key);
}

TimePoint to_time_point(const ASN1_TIME* t) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return {};
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

KeyPtr new_key() {
  return KeyPtr(EVP_EC_gen("P-256"));
}

bool add_extension(X509* cert, X509V3_CTX* ctx, int nid, const std::string& value) {
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, ctx, nid, value.c_str());
  if (ext == nullptr) return false;
  const bool added = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return added;
}

// A certificate for `key`, signed by `issuer_key` (issuer null: self-signed).
std::expected<X509Ptr, std::string> build(EVP_PKEY* key, const std::string& common_name,
                                          X509* issuer, EVP_PKEY* issuer_key, TimePoint not_before,
                                          TimePoint not_after,
                                          const std::vector<std::pair<int, std::string>>& exts) {
  X509Ptr cert(X509_new());
  std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>> serial(BN_new());
  if (!cert || !serial || X509_set_version(cert.get(), X509_VERSION_3) != 1 ||
      BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr) {
    return std::unexpected(openssl_error("certificate"));
  }
  ASN1_TIME_set(X509_getm_notBefore(cert.get()), std::chrono::system_clock::to_time_t(not_before));
  ASN1_TIME_set(X509_getm_notAfter(cert.get()), std::chrono::system_clock::to_time_t(not_after));
  NamePtr name(X509_NAME_new());
  X509_NAME_add_entry_by_txt(name.get(), "O", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>("gracekeeper"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name.get(), "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_set_subject_name(cert.get(), name.get());
  X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : name.get());
  X509_set_pubkey(cert.get(), key);
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer != nullptr ? issuer : cert.get(), cert.get(), nullptr, nullptr, 0);
  for (const auto& [nid, value] : exts) {
    if (!add_extension(cert.get(), &ctx, nid, value)) {
      return std::unexpected(openssl_error(fmt::format("extension {}", OBJ_nid2sn(nid))));
    }
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) {
    return std::unexpected(openssl_error("signing"));
  }
  return cert;
}

// The not_before given to a certificate issued at `now`: a little earlier,
// for clocks behind ours (a tenth of its life, at most a minute).
TimePoint backdated(TimePoint now, seconds validity) {
  return now - std::min<seconds>(seconds(60), validity / 10);
}

struct Ca {
  X509Ptr cert;
  TimePoint not_before, not_after;
};

// The CA of `bundle` that issued `cert` (its signature verifies), or null.
const Ca* issuer_of(X509* cert, const std::vector<Ca>& bundle) {
  for (const auto& ca : bundle) {
    if (X509_check_issued(ca.cert.get(), cert) == X509_V_OK &&
        X509_verify(cert, X509_get0_pubkey(ca.cert.get())) == 1) {
      return &ca;
    }
  }
  return nullptr;
}

std::expected<void, std::string> verify_chain(X509* cert, const std::vector<X509*>& cas,
                                              std::string_view name, TimePoint at) {
  StorePtr store(X509_STORE_new());
  for (X509* ca : cas) X509_STORE_add_cert(store.get(), ca);
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_CTX_init(ctx.get(), store.get(), cert, nullptr) != 1) {
    return std::unexpected(openssl_error("verify"));
  }
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx.get());
  X509_VERIFY_PARAM_set_time(param, std::chrono::system_clock::to_time_t(at));
  X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
  const std::string text(name);
  if (is_ip(name)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, text.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, text.c_str(), text.size());
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return std::unexpected(fmt::format("{} (for {})", X509_verify_cert_error_string(error), name));
  }
  return {};
}

// The SANs of a certificate, sorted: DNS names and IP addresses as text.
std::vector<std::string> sans_of(X509* cert) {
  std::vector<std::string> out;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type == GEN_DNS) {
      out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
                       static_cast<std::size_t>(ASN1_STRING_length(n->d.dNSName)));
    } else if (n->type == GEN_IPADD) {
      char text[INET6_ADDRSTRLEN] = {};
      const int length = ASN1_STRING_length(n->d.iPAddress);
      inet_ntop(length == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(n->d.iPAddress), text,
                sizeof text);
      out.emplace_back(text);
    }
  }
  GENERAL_NAMES_free(names);
  std::sort(out.begin(), out.end());
  return out;
}

// Normalised as sans_of writes them (an IPv6 address in its short form).
std::vector<std::string> wanted_sans(const CertOptions& o) {
  std::vector<std::string> out;
  for (const auto& name : serving_names(o)) {
    unsigned char buffer[16];
    char text[INET6_ADDRSTRLEN] = {};
    if (inet_pton(AF_INET6, name.c_str(), buffer) == 1) {
      inet_ntop(AF_INET6, buffer, text, sizeof text);
      out.emplace_back(text);
    } else {
      out.push_back(name);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The CAs of ca.crt still valid at `now`, newest first; `why` gets what was dropped.
std::vector<Ca> usable_cas(std::string_view ca_crt, TimePoint now, std::vector<std::string>& why) {
  std::vector<Ca> out;
  if (ca_crt.empty()) return out;
  auto certs = read_pem_certificates(ca_crt);
  if (!certs) {
    why.push_back("ca.crt: " + certs.error());
    return out;
  }
  for (auto& cert : *certs) {
    const TimePoint not_before = to_time_point(X509_get0_notBefore(cert.get()));
    const TimePoint not_after = to_time_point(X509_get0_notAfter(cert.get()));
    Ca ca{std::move(cert), not_before, not_after};
    if (X509_check_ca(ca.cert.get()) == 0) {
      why.push_back("ca.crt: a certificate that is not a CA, dropped");
    } else if (now >= ca.not_after) {
      why.push_back("ca.crt: a CA expired at " + core::format_rfc3339(ca.not_after) + ", dropped");
    } else {
      out.push_back(std::move(ca));
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Ca& a, const Ca& b) { return a.not_before > b.not_before; });
  if (out.size() > kMaxCas) out.resize(kMaxCas);
  return out;
}

std::string bundle_pem(const std::vector<Ca>& cas) {
  std::string out;
  for (const auto& ca : cas) out += to_pem(ca.cert.get());
  return out;
}

}  // namespace

std::vector<std::string> serving_names(const CertOptions& o) {
  std::vector<std::string> names{
      fmt::format("{}.{}.svc", o.service_name, o.namespace_),
      fmt::format("{}.{}.svc.cluster.local", o.service_name, o.namespace_)};
  names.insert(names.end(), o.extra_sans.begin(), o.extra_sans.end());
  return names;
}

std::expected<void, std::string> check_san(std::string_view name) {
  if (is_ip(name)) return {};
  std::string_view rest = name;
  if (rest.starts_with("*.")) rest.remove_prefix(2);
  if (rest.empty() || rest.size() > 253) {
    return std::unexpected(fmt::format("\"{}\" is neither an IP address nor a DNS name", name));
  }
  std::size_t start = 0;
  while (start <= rest.size()) {
    const std::size_t dot = std::min(rest.find('.', start), rest.size());
    const std::string_view label = rest.substr(start, dot - start);
    const bool ok = !label.empty() && label.size() <= 63 && label.front() != '-' &&
                    label.back() != '-' && std::all_of(label.begin(), label.end(), [](char c) {
                      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
                    });
    if (!ok) {
      return std::unexpected(fmt::format(
          "\"{}\" is neither an IP address nor a DNS name (lower-case RFC 1123 labels)", name));
    }
    start = dot + 1;
  }
  return {};
}

TimePoint renewal_time(TimePoint not_before, TimePoint not_after) {
  return not_before + (not_after - not_before) * 2 / 3;
}

std::expected<IssuedPair, std::string> issue_ca(TimePoint not_before, TimePoint not_after) {
  KeyPtr key = new_key();
  if (!key) return std::unexpected(openssl_error("generating the CA key"));
  const std::string cn =
      fmt::format("gracekeeper-webhook-ca-{}", std::chrono::system_clock::to_time_t(not_before));
  auto cert = build(key.get(), cn, nullptr, key.get(), not_before, not_after,
                    {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                     {NID_key_usage, "critical,keyCertSign,cRLSign"},
                     {NID_subject_key_identifier, "hash"}});
  if (!cert) return std::unexpected(cert.error());
  return IssuedPair{to_pem(cert->get()), to_pem(key.get())};
}

std::expected<IssuedPair, std::string> issue_serving(const IssuedPair& ca,
                                                     const std::vector<std::string>& names,
                                                     TimePoint not_before, TimePoint not_after) {
  auto ca_certs = read_pem_certificates(ca.cert_pem);
  if (!ca_certs) return std::unexpected("the CA: " + ca_certs.error());
  auto ca_key = read_pem_key(ca.key_pem);
  if (!ca_key) return std::unexpected("the CA key: " + ca_key.error());
  if (names.empty()) return std::unexpected("a serving certificate needs a name");
  KeyPtr key = new_key();
  if (!key) return std::unexpected(openssl_error("generating the serving key"));
  std::string sans;
  for (const auto& name : names) {
    if (!sans.empty()) sans += ',';
    sans += (is_ip(name) ? "IP:" : "DNS:") + name;
  }
  X509* issuer = ca_certs->front().get();
  auto cert = build(key.get(), names.front(), issuer, ca_key->get(), not_before, not_after,
                    {{NID_basic_constraints, "critical,CA:FALSE"},
                     {NID_key_usage, "critical,digitalSignature"},
                     {NID_ext_key_usage, "serverAuth"},
                     {NID_subject_key_identifier, "hash"},
                     {NID_authority_key_identifier, "keyid:always"},
                     {NID_subject_alt_name, sans}});
  if (!cert) return std::unexpected(cert.error());
  return IssuedPair{to_pem(cert->get()), to_pem(key.get())};
}

std::expected<std::vector<CertificateInfo>, std::string> read_certificates(std::string_view pem) {
  auto certs = read_pem_certificates(pem);
  if (!certs) return std::unexpected(certs.error());
  std::vector<CertificateInfo> out;
  for (const auto& cert : *certs) {
    CertificateInfo info;
    info.not_before = to_time_point(X509_get0_notBefore(cert.get()));
    info.not_after = to_time_point(X509_get0_notAfter(cert.get()));
    info.is_ca = X509_check_ca(cert.get()) != 0;
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    X509_digest(cert.get(), EVP_sha256(), digest, &size);
    for (unsigned int i = 0; i < size; ++i) info.sha256 += fmt::format("{:02x}", digest[i]);
    char line[256] = {};
    X509_NAME_oneline(X509_get_subject_name(cert.get()), line, sizeof line);
    info.subject = line;
    out.push_back(std::move(info));
  }
  return out;
}

std::expected<void, std::string> verify_serving(std::string_view cert_pem,
                                                std::string_view ca_bundle_pem,
                                                std::string_view name, TimePoint at) {
  auto certs = read_pem_certificates(cert_pem);
  if (!certs) return std::unexpected("the serving certificate: " + certs.error());
  auto cas = read_pem_certificates(ca_bundle_pem);
  if (!cas) return std::unexpected("the CA bundle: " + cas.error());
  std::vector<X509*> roots;
  for (const auto& ca : *cas) roots.push_back(ca.get());
  return verify_chain(certs->front().get(), roots, name, at);
}

std::string encode_base64(std::string_view data) {
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(data.data()),
                                static_cast<int>(data.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::optional<std::string> decode_base64(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(3 * text.size() / 4 + 1, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  std::size_t size = static_cast<std::size_t>(n);
  // EVP_DecodeBlock counts the padding as zero bytes.
  if (text.ends_with("==")) {
    size -= 2;
  } else if (text.ends_with("=")) {
    size -= 1;
  }
  out.resize(size);
  return out;
}

bool serving_usable(const CertSecret& s, const CertOptions& o, TimePoint now) {
  auto certs = read_pem_certificates(s.tls_crt);
  auto key = read_pem_key(s.tls_key);
  if (!certs || !key) return false;
  if (X509_check_private_key(certs->front().get(), key->get()) != 1) {
    ERR_clear_error();
    return false;
  }
  return std::ranges::all_of(serving_names(o), [&](const std::string& name) {
    return verify_serving(s.tls_crt, s.ca_crt, name, now).has_value();
  });
}

namespace {

// The key of the signing CA, the newest of `cas`: null when ca.key is not
// its key, or the CA is due for renewal (`why` says which).
KeyPtr signing_key(const std::vector<Ca>& cas, bool exists, const CertSecret& held, TimePoint now,
                   std::vector<std::string>& why) {
  KeyPtr ca_key;
  if (!cas.empty()) {
    auto key = read_pem_key(held.ca_key);
    if (!key) {
      why.push_back("ca.key: " + key.error());
    } else if (X509_check_private_key(cas.front().cert.get(), key->get()) != 1) {
      ERR_clear_error();
      why.push_back("ca.key is not the key of the newest CA in ca.crt");
    } else {
      ca_key = std::move(*key);
    }
  } else if (exists) {
    why.push_back("ca.crt holds no usable CA");
  }
  if (ca_key && now >= renewal_time(cas.front().not_before, cas.front().not_after)) {
    why.push_back("the CA is due for renewal (it expires " +
                  core::format_rfc3339(cas.front().not_after) + ")");
    ca_key.reset();
  }
  return ca_key;
}

// Puts a signing CA in front of `cas` with its key in `ca_key`: a new one
// when `ca_key` is null. Returns when the signing CA was introduced.
std::expected<TimePoint, std::string> ensure_signing_ca(std::vector<Ca>& cas, KeyPtr& ca_key,
                                                        const CertOptions& o, TimePoint now) {
  if (ca_key) {
    // not_before was backdated when it was issued.
    const TimePoint not_before = cas.front().not_before;
    return not_before +
           std::min<seconds>(
               seconds(60),
               std::chrono::duration_cast<seconds>(cas.front().not_after - not_before) / 10);
  }
  const TimePoint not_before = backdated(now, o.ca_validity);
  auto ca = issue_ca(not_before, now + o.ca_validity);
  if (!ca) return std::unexpected(ca.error());
  auto certs = read_pem_certificates(ca->cert_pem);
  auto key = read_pem_key(ca->key_pem);
  if (!certs || !key) return std::unexpected("reading back a new CA");
  cas.insert(cas.begin(), Ca{std::move(certs->front()), not_before, now + o.ca_validity});
  if (cas.size() > kMaxCas) cas.resize(kMaxCas);
  ca_key = std::move(*key);
  return now;
}

// ca.key as the Secret should hold it.
std::string ca_key_pem(EVP_PKEY* ca_key, bool exists, const CertSecret& held) {
  std::string pem = to_pem(ca_key);
  if (exists && held.ca_key != pem) {
    // The same key, written differently (e.g. SEC1 instead of PKCS#8) is not a change.
    auto key = read_pem_key(held.ca_key);
    if (key && EVP_PKEY_eq(key->get(), ca_key) == 1) pem = held.ca_key;
    ERR_clear_error();
  }
  return pem;
}

// The Secret's serving certificate, as checked against the CAs.
struct HeldServing {
  std::string unusable;              // why it cannot be kept; empty if it can
  std::optional<TimePoint> renewal;  // when it is due, if usable
  bool from_signer = false;          // issued by the signing CA, cas.front()
};

HeldServing check_serving(const CertSecret& held, const std::vector<Ca>& cas, const CertOptions& o,
                          TimePoint now) {
  HeldServing s;
  auto serving = read_pem_certificates(held.tls_crt);
  auto serving_key = read_pem_key(held.tls_key);
  std::vector<X509*> roots;
  for (const auto& ca : cas) roots.push_back(ca.cert.get());
  if (held.tls_crt.empty()) {
    s.unusable = "there is no serving certificate";
  } else if (!serving) {
    s.unusable = "tls.crt: " + serving.error();
  } else if (!serving_key) {
    s.unusable = "tls.key: " + serving_key.error();
  } else if (X509_check_private_key(serving->front().get(), serving_key->get()) != 1) {
    ERR_clear_error();
    s.unusable = "tls.key is not the key of tls.crt";
  } else if (sans_of(serving->front().get()) != wanted_sans(o)) {
    s.unusable = "the serving certificate's names are not the ones wanted";
  } else if (auto ok = verify_chain(serving->front().get(), roots, serving_names(o).front(), now);
             !ok) {
    s.unusable = "the serving certificate does not verify with ca.crt: " + ok.error();
  } else {
    X509* cert = serving->front().get();
    const TimePoint not_before = to_time_point(X509_get0_notBefore(cert));
    const TimePoint not_after = to_time_point(X509_get0_notAfter(cert));
    s.renewal = renewal_time(not_before, not_after);
    s.from_signer = issuer_of(cert, cas) == &cas.front();
    // Its CA must outlive it: a CA dropped from the bundle at expiry takes
    // its serving certificates with it.
    if (const Ca* issuer = issuer_of(cert, cas)) {
      s.renewal = std::min(*s.renewal, renewal_time(not_before, issuer->not_after));
    }
  }
  return s;
}

// Whether the serving certificate must be issued again (`why` says why).
// `waiting_for_trust`: it is due, but kept until the new CA is trusted.
bool must_reissue(const HeldServing& s, TimePoint now, TimePoint trusted_from,
                  bool& waiting_for_trust, std::vector<std::string>& why) {
  if (!s.unusable.empty()) {
    why.push_back(s.unusable);
    return true;
  }
  if (now < *s.renewal) return false;
  if (s.from_signer || now >= trusted_from) {
    why.push_back("the serving certificate is due for renewal");
    return true;
  }
  // The new CA is not in every caBundle yet; the old certificate stays
  // valid until then.
  waiting_for_trust = true;
  return false;
}

// Issues a serving certificate into `secret` (whose ca.key is the signer's).
// Returns when it is due for renewal.
std::expected<TimePoint, std::string> reissue_serving(CertSecret& secret, const Ca& signer,
                                                      const CertOptions& o, TimePoint now) {
  const TimePoint not_after = std::min(now + o.serving_validity, signer.not_after);
  IssuedPair ca{to_pem(signer.cert.get()), secret.ca_key};
  auto issued = issue_serving(ca, serving_names(o), backdated(now, o.serving_validity), not_after);
  if (!issued) return std::unexpected(issued.error());
  secret.tls_crt = issued->cert_pem;
  secret.tls_key = issued->key_pem;
  return renewal_time(backdated(now, o.serving_validity), not_after);
}

// What falls due next: a renewal, a CA to drop, a new CA becoming trusted.
TimePoint next_check(const std::vector<Ca>& cas, TimePoint serving_due, TimePoint now) {
  const Ca& signer = cas.front();
  TimePoint next = std::min(serving_due, renewal_time(signer.not_before, signer.not_after));
  for (const auto& ca : cas) next = std::min(next, ca.not_after);
  return std::max(next, now + seconds(1));
}

}  // namespace

std::expected<CertDecision, std::string> decide_certificates(
    const std::optional<CertSecret>& current, const CertOptions& o, TimePoint now) {
  CertDecision d;
  const CertSecret held = current.value_or(CertSecret{});
  if (!current) d.why.push_back("the Secret does not exist");
  std::vector<Ca> cas = usable_cas(held.ca_crt, now, d.why);

  // The signing CA: the newest, if ca.key is its key and it is not due.
  KeyPtr ca_key = signing_key(cas, current.has_value(), held, now, d.why);
  const auto ca_introduced = ensure_signing_ca(cas, ca_key, o, now);
  if (!ca_introduced) return std::unexpected(ca_introduced.error());
  d.secret.ca_crt = bundle_pem(cas);
  d.secret.ca_key = ca_key_pem(ca_key.get(), current.has_value(), held);
  const Ca& signer = cas.front();
  const TimePoint trusted_from = *ca_introduced + o.trust_delay;

  // The serving certificate: kept while it is usable and not due.
  const HeldServing serving = check_serving(held, cas, o, now);
  std::optional<TimePoint> serving_renewal = serving.renewal;
  bool waiting_for_trust = false;
  if (must_reissue(serving, now, trusted_from, waiting_for_trust, d.why)) {
    auto renewal = reissue_serving(d.secret, signer, o, now);
    if (!renewal) return std::unexpected(renewal.error());
    serving_renewal = *renewal;
  } else {
    d.secret.tls_crt = held.tls_crt;
    d.secret.tls_key = held.tls_key;
  }
  d.changed = !current || d.secret != held;
  if (!d.changed) d.why.clear();
  d.next_check = next_check(cas, waiting_for_trust ? trusted_from : *serving_renewal, now);
  return d;
}

// ---- the loop ----

SelfManagedCertificates::SelfManagedCertificates(kube::Client& client, CertOptions options,
                                                 Clock clock)
    : client_(client), options_(std::move(options)), clock_(std::move(clock)) {}

SelfManagedCertificates::~SelfManagedCertificates() = default;

std::shared_ptr<const server::ServingCertificate> SelfManagedCertificates::current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

void SelfManagedCertificates::report(const std::string& topic, const std::string& problem) {
  std::string& last = topic == "secret" ? reported_secret_ : reported_bundle_;
  if (problem == last) return;
  last = problem;
  const std::string what = topic == "secret" ? options_.namespace_ + "/" + options_.secret_name
                                             : options_.webhook_config;
  if (problem.empty()) {
    log::info(topic == "secret" ? "webhook certificates ready" : "webhook caBundle in place",
              {{topic == "secret" ? "secret" : "mutatingWebhookConfiguration", what}});
  } else {
    log::warn(topic == "secret" ? "webhook certificates not ready" : "webhook caBundle not patched",
              {{topic == "secret" ? "secret" : "mutatingWebhookConfiguration", what},
               {"error", problem}});
  }
}

void SelfManagedCertificates::publish(const CertSecret& secret) {
  std::lock_guard lock(mutex_);
  if (current_ && current_->cert_pem == secret.tls_crt && current_->key_pem == secret.tls_key) {
    return;
  }
  auto next = std::make_shared<server::ServingCertificate>();
  next->cert_pem = secret.tls_crt;
  next->key_pem = secret.tls_key;
  next->generation = current_ ? current_->generation + 1 : 1;
  current_ = std::move(next);
  auto info = read_certificates(secret.tls_crt);
  log::info(
      "webhook serving certificate loaded",
      {{"generation", std::to_string(current_->generation)},
       {"sha256", info ? info->front().sha256 : std::string("?")},
       {"notAfter", info ? core::format_rfc3339(info->front().not_after) : std::string("?")}});
}

namespace {

std::optional<CertSecret> secret_data(const nlohmann::json& secret) {
  CertSecret out;
  const auto data = secret.value("data", nlohmann::json::object());
  if (!data.is_object()) return out;
  auto field = [&](const char* key) {
    auto it = data.find(key);
    if (it == data.end() || !it->is_string()) return std::string();
    return decode_base64(it->get<std::string>()).value_or(std::string());
  };
  out.tls_crt = field("tls.crt");
  out.tls_key = field("tls.key");
  out.ca_crt = field("ca.crt");
  out.ca_key = field("ca.key");
  return out;
}

nlohmann::json secret_object(const CertOptions& o, const CertSecret& s) {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata",
           {{"name", o.secret_name},
            {"namespace", o.namespace_},
            {"labels", {{"app.kubernetes.io/managed-by", "gracekeeper"}}}}},
          {"type", "kubernetes.io/tls"},
          {"data",
           {{"tls.crt", encode_base64(s.tls_crt)},
            {"tls.key", encode_base64(s.tls_key)},
            {"ca.crt", encode_base64(s.ca_crt)},
            {"ca.key", encode_base64(s.ca_key)}}}};
}

// What the Secret read holds: nullopt when there is none, an error when it
// cannot be read or cannot hold certificates.
std::expected<std::optional<CertSecret>, std::string> held_secret(const kube::Result& read,
                                                                  const std::string& where) {
  if (!read) {
    if (read.error().reason == kube::ApiError::Reason::NotFound) return std::nullopt;
    return std::unexpected(fmt::format("reading Secret {}: {}", where, read.error().format()));
  }
  const std::string type = read->value("type", "");
  if (type != "kubernetes.io/tls") {
    return std::unexpected(fmt::format(
        "Secret {} has type \"{}\", not kubernetes.io/tls (a type cannot be changed): delete "
        "it, or name another with --webhook-cert-secret",
        where, type));
  }
  return secret_data(*read);
}

// The Secret as read, with new data: others' labels and annotations stay,
// and the resourceVersion makes the PUT conditional.
nlohmann::json secret_as_read(const CertOptions& o, const CertSecret& s, nlohmann::json read) {
  const std::string resource_version =
      read.value("metadata", nlohmann::json::object()).value("resourceVersion", "");
  nlohmann::json object = std::move(read);
  object["data"] = std::move(secret_object(o, s)["data"]);
  object["metadata"].erase("managedFields");
  object["metadata"]["resourceVersion"] = resource_version;
  return object;
}

// The reasons of a decision, for the log.
std::string joined(const std::vector<std::string>& why) {
  std::string out;
  for (const auto& w : why) out += (out.empty() ? "" : "; ") + w;
  return out;
}

}  // namespace

asio::awaitable<std::expected<CertSecret, std::string>>
SelfManagedCertificates::reconcile_secret() {
  const std::string where = options_.namespace_ + "/" + options_.secret_name;
  // Another replica's write between our read and write is a 409: read it.
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto read = co_await client_.get(kSecrets, options_.namespace_, options_.secret_name);
    auto parsed = held_secret(read, where);
    if (!parsed) co_return std::unexpected(parsed.error());
    const std::optional<CertSecret> held = std::move(*parsed);
    const TimePoint now = clock_();
    auto decision = decide_certificates(held, options_, now);
    if (!decision) co_return std::unexpected(decision.error());
    next_ = decision->next_check;
    if (!decision->changed) co_return decision->secret;

    kube::WriteOptions write;
    write.field_manager = "gracekeeper";
    write.read_object = false;
    kube::Result written;
    if (held) {
      written = co_await client_.replace(
          kSecrets, options_.namespace_, options_.secret_name,
          secret_as_read(options_, decision->secret, std::move(*read)), write);
    } else {
      written = co_await client_.create(kSecrets, options_.namespace_,
                                        secret_object(options_, decision->secret), write);
    }
    if (written) {
      log::info(held ? "webhook certificates renewed" : "webhook certificates created",
                {{"secret", where}, {"why", joined(decision->why)}});
      co_return decision->secret;
    }
    const auto reason = written.error().reason;
    if (reason != kube::ApiError::Reason::Conflict &&
        reason != kube::ApiError::Reason::AlreadyExists) {
      // A renewal refused (RBAC, a quota): the certificate the Secret holds
      // is served while it is still good.
      if (held && serving_usable(*held, options_, now)) usable_held_ = *held;
      co_return std::unexpected(
          fmt::format("writing Secret {}: {}", where, written.error().format()));
    }
    log::debug("another replica wrote the webhook certificates first", {{"secret", where}});
  }
  co_return std::unexpected(fmt::format("Secret {}: still conflicting after 5 reads", where));
}

asio::awaitable<void> SelfManagedCertificates::patch_ca_bundle(const std::string& ca_crt) {
  if (options_.webhook_config.empty()) co_return;
  auto read = co_await client_.get(kMutatingWebhooks, "", options_.webhook_config);
  if (!read) {
    report("bundle", read.error().reason == kube::ApiError::Reason::NotFound
                         ? "the MutatingWebhookConfiguration does not exist (yet)"
                         : read.error().format());
    co_return;
  }
  const std::string bundle = encode_base64(ca_crt);
  nlohmann::json patch = nlohmann::json::array();
  const auto& metadata = read->value("metadata", nlohmann::json::object());
  patch.push_back({{"op", "test"},
                   {"path", "/metadata/resourceVersion"},
                   {"value", metadata.value("resourceVersion", "")}});
  const auto webhooks = read->value("webhooks", nlohmann::json::array());
  for (std::size_t i = 0; webhooks.is_array() && i < webhooks.size(); ++i) {
    const auto& client = webhooks[i].value("clientConfig", nlohmann::json::object());
    if (client.is_object() && client.value("caBundle", "") == bundle) continue;
    patch.push_back({{"op", "add"},
                     {"path", fmt::format("/webhooks/{}/clientConfig/caBundle", i)},
                     {"value", bundle}});
  }
  if (patch.size() == 1) {
    report("bundle", "");
    co_return;
  }
  kube::WriteOptions write;
  write.field_manager = "gracekeeper";
  write.read_object = false;
  auto patched =
      co_await client_.json_patch(kMutatingWebhooks, "", options_.webhook_config, patch, write);
  if (!patched) {
    // A failed test (someone changed it meanwhile) is tried again on the next pass.
    report("bundle", "patching: " + patched.error().format());
    co_return;
  }
  log::info("webhook caBundle patched", {{"mutatingWebhookConfiguration", options_.webhook_config},
                                         {"webhooks", std::to_string(patch.size() - 1)}});
  report("bundle", "");
}

asio::awaitable<TimePoint> SelfManagedCertificates::sync() {
  next_ = clock_() + options_.resync;
  usable_held_.reset();
  auto secret = co_await reconcile_secret();
  if (!secret) {
    report("secret", secret.error());
    if (usable_held_) publish(*usable_held_);
    co_return clock_() + std::min<seconds>(options_.resync, seconds(5));
  }
  report("secret", "");
  publish(*secret);
  co_await patch_ca_bundle(secret->ca_crt);
  co_return std::min(next_, clock_() + options_.resync);
}

asio::awaitable<void> SelfManagedCertificates::run() {
  timer_.emplace(co_await asio::this_coro::executor);
  while (!stopped_) {
    const TimePoint next = co_await sync();
    if (stopped_) break;
    timer_->expires_after(std::max<std::chrono::nanoseconds>(next - clock_(), seconds(0)));
    boost::system::error_code ec;
    co_await timer_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

void SelfManagedCertificates::stop() {
  stopped_ = true;
  if (timer_) timer_->cancel();
}

}  // namespace gracekeeper::webhook
