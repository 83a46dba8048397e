#include "gracekeeper/admission/tls_directory.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <system_error>

namespace gracekeeper::webhook {
namespace {

namespace fs = std::filesystem;

// A PEM file is a few KiB; more is not a certificate.
constexpr std::uintmax_t kMaxFileBytes = std::uintmax_t{1024} * 1024;

std::string stamp(const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) return "missing";
  const auto time = fs::last_write_time(file, ec);
  return fmt::format("{}@{}", size, ec ? 0 : time.time_since_epoch().count());
}

std::string read(const fs::path& file, std::string& error) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) {
    error = fmt::format("{}: {}", file.string(), ec.message());
    return {};
  }
  if (size > kMaxFileBytes) {
    error = fmt::format("{}: {} bytes, more than a certificate", file.string(), size);
    return {};
  }
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) {
    error = fmt::format("{}: cannot be read", file.string());
    return {};
  }
  return text.str();
}

}  // namespace

TlsDirectory::TlsDirectory(fs::path dir) : dir_(std::move(dir)) {}

std::string TlsDirectory::reload() const {
  const fs::path cert = dir_ / "tls.crt";
  const fs::path key = dir_ / "tls.key";
  checked_ = std::chrono::steady_clock::now();
  const std::string seen = stamp(cert) + " " + stamp(key);
  std::string error;
  std::string cert_pem = read(cert, error);
  std::string key_pem = error.empty() ? read(key, error) : std::string();
  if (error.empty() && (cert_pem.find("-----BEGIN") == std::string::npos ||
                        key_pem.find("-----BEGIN") == std::string::npos)) {
    error = fmt::format("{}: tls.crt and tls.key must be PEM", dir_.string());
  }
  if (!error.empty()) return error;
  seen_ = seen;
  if (current_ && current_->cert_pem == cert_pem && current_->key_pem == key_pem) return {};
  auto next = std::make_shared<server::ServingCertificate>();
  next->cert_pem = std::move(cert_pem);
  next->key_pem = std::move(key_pem);
  next->generation = current_ ? current_->generation + 1 : 1;
  current_ = std::move(next);
  return {};
}

std::shared_ptr<const server::ServingCertificate> TlsDirectory::current() const {
  const auto now = std::chrono::steady_clock::now();
  if (!current_ || now - checked_ >= std::chrono::seconds(1)) {
    checked_ = now;
    const std::string seen = stamp(dir_ / "tls.crt") + " " + stamp(dir_ / "tls.key");
    if (seen != seen_) reload();
  }
  return current_;
}

}  // namespace gracekeeper::webhook
