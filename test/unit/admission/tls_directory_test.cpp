// The certificate directory source (--webhook-cert-dir): the pair read, a
// new generation only when the files change, the last good pair kept.
#include "gracekeeper/admission/tls_directory.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../../support/self_signed.h"

namespace gracekeeper::webhook {
namespace {

using test_support::make_certificate;

TEST(TlsDirectory, ReadsThePairAndMakesANewGenerationOnlyWhenItChanges) {
  char name[] = "/tmp/gk-tls-XXXXXX";
  ASSERT_NE(::mkdtemp(name), nullptr);
  const std::filesystem::path dir = name;
  auto write = [&](const server::ServingCertificate& c) {
    std::ofstream(dir / "tls.crt") << c.cert_pem;
    std::ofstream(dir / "tls.key") << c.key_pem;
  };
  TlsDirectory source(dir);
  EXPECT_EQ(source.current(), nullptr);
  EXPECT_NE(source.reload().find("tls.crt"), std::string::npos);

  const auto first = make_certificate(1, 0);
  write(first);
  EXPECT_EQ(source.reload(), "");
  ASSERT_NE(source.current(), nullptr);
  EXPECT_EQ(source.current()->generation, 1u);
  EXPECT_EQ(source.current()->cert_pem, first.cert_pem);
  EXPECT_EQ(source.reload(), "");
  EXPECT_EQ(source.current()->generation, 1u);  // the same files: the same generation

  const auto second = make_certificate(2, 0);
  write(second);
  EXPECT_EQ(source.reload(), "");
  EXPECT_EQ(source.current()->generation, 2u);
  EXPECT_EQ(source.current()->key_pem, second.key_pem);

  std::ofstream(dir / "tls.key") << "garbage";
  EXPECT_NE(source.reload().find("PEM"), std::string::npos);
  EXPECT_EQ(source.current()->generation, 2u);  // the last good pair keeps serving
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gracekeeper::webhook
