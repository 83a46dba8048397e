// Certificates for the TLS tests (the HTTPS server's, TlsDirectory's), made
// with OpenSSL's C API.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdint>
#include <string>

#include "gracekeeper/server/tls_source.h"

namespace gracekeeper::test_support {

// A self-signed P-256 certificate with this serial, as PEM.
inline server::ServingCertificate make_certificate(long serial, std::uint64_t generation) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
  X509_gmtime_adj(X509_getm_notBefore(x), -60);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509_sign(x, key, EVP_sha256());
  auto pem = [](auto write) {
    BIO* bio = BIO_new(BIO_s_mem());
    write(bio);
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    std::string out(data, static_cast<std::size_t>(n));
    BIO_free(bio);
    return out;
  };
  server::ServingCertificate c;
  c.cert_pem = pem([&](BIO* b) { PEM_write_bio_X509(b, x); });
  c.key_pem =
      pem([&](BIO* b) { PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr); });
  c.generation = generation;
  X509_free(x);
  EVP_PKEY_free(key);
  return c;
}

}  // namespace gracekeeper::test_support
