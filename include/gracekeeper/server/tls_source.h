// Where the admission webhook's HTTPS server gets its serving certificate.
//
// Two implementations: a directory holding tls.crt and tls.key (a mounted
// Secret, e.g. cert-manager's), re-read when the files change; and the
// certificates gracekeeper manages itself in a Secret (a CA and a serving
// certificate, rotated before expiry). The server asks for current() when it
// accepts a connection and builds a new TLS context only when the generation
// changes, so a rotation needs no restart and drops no connection.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace gracekeeper::server {

struct ServingCertificate {
  std::string cert_pem;  // the serving certificate, then any intermediates
  std::string key_pem;   // its private key
  // Changes whenever cert_pem or key_pem changes; starts at 1.
  std::uint64_t generation = 0;
};

class TlsSource {
 public:
  virtual ~TlsSource() = default;
  // Null until a certificate is available: the server then refuses TLS
  // handshakes, and the API server applies failurePolicy: Ignore.
  virtual std::shared_ptr<const ServingCertificate> current() const = 0;
};

}  // namespace gracekeeper::server
