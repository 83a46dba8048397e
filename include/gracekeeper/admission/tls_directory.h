// The admission webhook's certificate from a directory holding tls.crt and
// tls.key: a mounted kubernetes.io/tls Secret, e.g. cert-manager's
// (--webhook-cert-dir). The files are looked at again at most once a second
// when a connection asks; new contents make a new generation, so a renewed
// certificate serves without a restart.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "gracekeeper/server/tls_source.h"

namespace gracekeeper::webhook {

class TlsDirectory final : public server::TlsSource {
 public:
  explicit TlsDirectory(std::filesystem::path dir);
  std::shared_ptr<const server::ServingCertificate> current() const override;
  // Reads the files now; "" when both were read, else what is wrong with
  // which file. The last good pair keeps serving meanwhile.
  std::string reload() const;

 private:
  std::filesystem::path dir_;
  mutable std::shared_ptr<const server::ServingCertificate> current_;
  mutable std::string seen_;  // the files' sizes and times at the last read
  mutable std::chrono::steady_clock::time_point checked_{};
};

}  // namespace gracekeeper::webhook
