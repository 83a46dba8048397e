#include "gracekeeper/kube/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace gracekeeper::kube {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Only the markers are checked at load time; TLS parses the real thing later.
const std::string kCa = "-----BEGIN CERTIFICATE-----\nQ0EK\n-----END CERTIFICATE-----\n";
const std::string kCa2 = "-----BEGIN CERTIFICATE-----\nQ0EyCg==\n-----END CERTIFICATE-----\n";
const std::string kCert = "-----BEGIN CERTIFICATE-----\nY2VydAo=\n-----END CERTIFICATE-----\n";
const std::string kKey = "-----BEGIN EC PRIVATE KEY-----\na2V5Cg==\n-----END EC PRIVATE KEY-----\n";

std::string base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    unsigned v =
        (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
    for (int shift : {18, 12, 6, 0}) out += kAlphabet[(v >> shift) & 63];
  }
  if (in.size() - i == 1) {
    unsigned v = (unsigned char)in[i] << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (in.size() - i == 2) {
    unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// A one-cluster, one-user, one-context kubeconfig with the given extra lines
// under cluster and user.
std::string simple_config(const std::string& cluster_extra = "",
                          const std::string& user_extra = "    token: secret\n",
                          const std::string& server = "https://api.example:6443") {
  return "apiVersion: v1\n"
         "kind: Config\n"
         "current-context: main\n"
         "clusters:\n"
         "- name: c\n"
         "  cluster:\n"
         "    server: " +
         server + "\n" + cluster_extra +
         "users:\n"
         "- name: u\n"
         "  user:\n" +
         user_extra +
         "contexts:\n"
         "- name: main\n"
         "  context:\n"
         "    cluster: c\n"
         "    user: u\n";
}

class KubeConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("kube-config-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      if (value != nullptr) saved_[name] = value;
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kVariables) {
      if (auto it = saved_.find(name); it != saved_.end()) {
        ::setenv(name, it->second.c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
    fs::remove_all(root_);
  }

  fs::path write(const std::string& relative, const std::string& text) {
    fs::path path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    return path;
  }

  ClusterConfig load_ok(const KubeconfigOptions& options) {
    auto config = load_kubeconfig(options);
    EXPECT_TRUE(config) << config.error().format();
    return config ? *config : ClusterConfig{};
  }
  ClusterConfig load_ok(const fs::path& file) { return load_ok(KubeconfigOptions{{file}, ""}); }

  ConfigError load_error(const KubeconfigOptions& options) {
    auto config = load_kubeconfig(options);
    EXPECT_FALSE(config) << "loaded context " << config->context;
    return config ? ConfigError{} : config.error();
  }
  ConfigError load_error(const fs::path& file) { return load_error(KubeconfigOptions{{file}, ""}); }

  static constexpr const char* kVariables[] = {"KUBECONFIG", "HOME", "KUBERNETES_SERVICE_HOST",
                                               "KUBERNETES_SERVICE_PORT"};
  fs::path root_;
  std::map<std::string, std::string> saved_;
};

TEST_F(KubeConfig, LoadsASimpleConfig) {
  ClusterConfig config = load_ok(write("config", simple_config()));
  EXPECT_EQ(config.server, "https://api.example:6443");
  EXPECT_EQ(config.context, "main");
  EXPECT_EQ(config.namespace_, "default");
  EXPECT_EQ(config.token, "secret");
  EXPECT_FALSE(config.certificate_authority);
  EXPECT_FALSE(config.insecure_skip_tls_verify);
  EXPECT_FALSE(config.client_certificate);
  EXPECT_FALSE(config.token_file);
}

TEST_F(KubeConfig, FirstFileWinsForEachNameAcrossTheList) {
  fs::path first = write("one/config",
                         "current-context: a\n"
                         "clusters:\n"
                         "- name: shared\n"
                         "  cluster: {server: https://first:6443}\n"
                         "users:\n"
                         "- name: shared\n"
                         "  user: {token: first-token}\n"
                         "contexts:\n"
                         "- name: a\n"
                         "  context: {cluster: shared, user: shared, namespace: one}\n");
  fs::path second = write("two/config",
                          "current-context: b\n"
                          "clusters:\n"
                          "- name: shared\n"
                          "  cluster: {server: https://second:6443}\n"
                          "- name: only-second\n"
                          "  cluster: {server: https://only-second:6443}\n"
                          "users:\n"
                          "- name: shared\n"
                          "  user: {token: second-token}\n"
                          "contexts:\n"
                          "- name: a\n"
                          "  context: {cluster: only-second, user: shared, namespace: two}\n"
                          "- name: b\n"
                          "  context: {cluster: only-second, user: shared}\n");
  ::setenv("KUBECONFIG", (first.string() + ":" + second.string()).c_str(), 1);
  ClusterConfig config = load_ok(KubeconfigOptions{});
  EXPECT_EQ(config.context, "a");  // current-context of the first file
  EXPECT_EQ(config.server, "https://first:6443");
  EXPECT_EQ(config.token, "first-token");
  EXPECT_EQ(config.namespace_, "one");

  // A context from the second file still uses the first file's user "shared".
  config = load_ok(KubeconfigOptions{{}, "b"});
  EXPECT_EQ(config.server, "https://only-second:6443");
  EXPECT_EQ(config.token, "first-token");

  // Reversed order, reversed winners.
  ::setenv("KUBECONFIG", (second.string() + ":" + first.string()).c_str(), 1);
  config = load_ok(KubeconfigOptions{});
  EXPECT_EQ(config.context, "b");
  EXPECT_EQ(config.token, "second-token");
}

TEST_F(KubeConfig, CurrentContextComesFromTheSecondFileWhenTheFirstHasNone) {
  fs::path first = write("one", simple_config());
  std::string text = simple_config();
  text.erase(text.find("current-context: main\n"), 22);
  write("one", text);
  fs::path second = write("two",
                          "current-context: main\n"
                          "preferences: {}\n");
  ClusterConfig config = load_ok(KubeconfigOptions{{first, second}, ""});
  EXPECT_EQ(config.context, "main");
  EXPECT_EQ(config.server, "https://api.example:6443");
}

TEST_F(KubeConfig, ExplicitContextOverridesCurrentContext) {
  fs::path file = write("config",
                        "current-context: a\n"
                        "clusters:\n"
                        "- {name: ca, cluster: {server: 'https://a'}}\n"
                        "- {name: cb, cluster: {server: 'https://b:443/prefix/'}}\n"
                        "contexts:\n"
                        "- {name: a, context: {cluster: ca}}\n"
                        "- {name: b, context: {cluster: cb, namespace: team-b}}\n");
  ClusterConfig config = load_ok(KubeconfigOptions{{file}, "b"});
  EXPECT_EQ(config.context, "b");
  EXPECT_EQ(config.server, "https://b:443/prefix");  // trailing slash dropped
  EXPECT_EQ(config.namespace_, "team-b");
  EXPECT_EQ(config.token, "");  // no user: anonymous, as kubectl allows
}

TEST_F(KubeConfig, KubeconfigListSkipsMissingFiles) {
  fs::path file = write("config", simple_config());
  std::string list = (root_ / "missing").string() + "::" + file.string() + ":" + file.string();
  ::setenv("KUBECONFIG", list.c_str(), 1);
  EXPECT_EQ(load_ok(KubeconfigOptions{}).server, "https://api.example:6443");
}

TEST_F(KubeConfig, KubeconfigListWithEveryFileMissingNamesThem) {
  std::string a = (root_ / "a").string();
  std::string b = (root_ / "b").string();
  ::setenv("KUBECONFIG", (a + ":" + b).c_str(), 1);
  ConfigError error = load_error(KubeconfigOptions{});
  EXPECT_EQ(error.field, "KUBECONFIG");
  EXPECT_THAT(error.message, AllOf(HasSubstr(a), HasSubstr(b)));
}

TEST_F(KubeConfig, DefaultsToHomeKubeConfig) {
  write("home/.kube/config", simple_config());
  ::setenv("HOME", (root_ / "home").c_str(), 1);
  EXPECT_EQ(load_ok(KubeconfigOptions{}).context, "main");
  ::setenv("KUBECONFIG", "", 1);  // empty is unset, as for kubectl
  EXPECT_EQ(load_ok(KubeconfigOptions{}).context, "main");
}

TEST_F(KubeConfig, ExplicitMissingFileIsAnError) {
  fs::path present = write("config", simple_config());
  fs::path missing = root_ / "nope";
  ConfigError error = load_error(KubeconfigOptions{{present, missing}, ""});
  EXPECT_EQ(error.file, missing.string());
  EXPECT_THAT(error.message, HasSubstr("No such file or directory"));
  EXPECT_EQ(error.format(), missing.string() + ": cannot read: No such file or directory");
}

TEST_F(KubeConfig, RelativePathsResolveAgainstTheirOwnFile) {
  write("clusters/pki/ca.crt", kCa);
  write("users/pki/client.crt", kCert);
  write("users/pki/client.key", kKey);
  write("users/token", "from-file\n");
  fs::path clusters = write("clusters/config",
                            "clusters:\n"
                            "- name: c\n"
                            "  cluster:\n"
                            "    server: https://api:6443\n"
                            "    certificate-authority: pki/ca.crt\n");
  fs::path users = write("users/config",
                         "users:\n"
                         "- name: u\n"
                         "  user:\n"
                         "    client-certificate: pki/client.crt\n"
                         "    client-key: ./pki/client.key\n"
                         "    tokenFile: token\n"
                         "contexts:\n"
                         "- {name: x, context: {cluster: c, user: u}}\n"
                         "current-context: x\n");
  ClusterConfig config = load_ok(KubeconfigOptions{{clusters, users}, ""});
  ASSERT_TRUE(config.certificate_authority);
  EXPECT_EQ(config.certificate_authority->text, kCa);
  EXPECT_EQ(config.certificate_authority->origin,
            "file " + (root_ / "clusters/pki/ca.crt").string());
  ASSERT_TRUE(config.client_certificate && config.client_key);
  EXPECT_EQ(config.client_certificate->text, kCert);
  EXPECT_EQ(config.client_key->text, kKey);
  ASSERT_TRUE(config.token_file);
  EXPECT_EQ(*config.token_file, root_ / "users/token");
  EXPECT_EQ(current_token(config).value(), "from-file");
}

TEST_F(KubeConfig, CertificateAuthorityDataWinsOverTheFile) {
  write("ca.crt", kCa);
  fs::path file = write("config", simple_config("    certificate-authority: ca.crt\n"
                                                "    certificate-authority-data: " +
                                                base64(kCa2) + "\n"));
  ClusterConfig config = load_ok(file);
  ASSERT_TRUE(config.certificate_authority);
  EXPECT_EQ(config.certificate_authority->text, kCa2);
  EXPECT_EQ(config.certificate_authority->origin,
            "kubeconfig field clusters[c].cluster.certificate-authority-data");
}

TEST_F(KubeConfig, InsecureSkipTlsVerifyAndServerName) {
  ClusterConfig config = load_ok(write("a", simple_config("    insecure-skip-tls-verify: true\n"
                                                          "    tls-server-name: kubernetes\n")));
  EXPECT_TRUE(config.insecure_skip_tls_verify);
  EXPECT_EQ(config.tls_server_name, "kubernetes");
  EXPECT_FALSE(config.certificate_authority);

  config = load_ok(write("b", simple_config("    insecure-skip-tls-verify: false\n")));
  EXPECT_FALSE(config.insecure_skip_tls_verify);
}

TEST_F(KubeConfig, InsecureTogetherWithACertificateAuthorityIsAnError) {
  fs::path file = write("config", simple_config("    insecure-skip-tls-verify: true\n"
                                                "    certificate-authority-data: " +
                                                base64(kCa) + "\n"));
  ConfigError error = load_error(file);
  EXPECT_EQ(error.file, file.string());
  EXPECT_EQ(error.field, "clusters[c].cluster.insecure-skip-tls-verify");
}

TEST_F(KubeConfig, ClientCertificateAndKeyFromData) {
  fs::path file =
      write("config", simple_config("", "    client-certificate-data: " + base64(kCert) +
                                            "\n"
                                            "    client-key-data: " +
                                            base64(kKey) + "\n"));
  ClusterConfig config = load_ok(file);
  ASSERT_TRUE(config.client_certificate && config.client_key);
  EXPECT_EQ(config.client_certificate->text, kCert);
  EXPECT_EQ(config.client_key->text, kKey);
  EXPECT_EQ(config.client_key->origin, "kubeconfig field users[u].user.client-key-data");
  EXPECT_EQ(config.token, "");
  EXPECT_EQ(current_token(config).value(), "");
}

TEST_F(KubeConfig, ClientCertificateAndKeyFromAbsolutePaths) {
  fs::path cert = write("elsewhere/tls.crt", kCert);
  fs::path key =
      write("elsewhere/tls.key", "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n");
  fs::path file =
      write("dir/config", simple_config("", "    client-certificate: " + cert.string() +
                                                "\n    client-key: " + key.string() + "\n"));
  ClusterConfig config = load_ok(file);
  ASSERT_TRUE(config.client_certificate && config.client_key);
  EXPECT_EQ(config.client_certificate->origin, "file " + cert.string());
  EXPECT_EQ(config.client_key->origin, "file " + key.string());
}

TEST_F(KubeConfig, StaticTokenWinsOverTokenFile) {
  fs::path file = write("config", simple_config("",
                                                "    token: static\n"
                                                "    tokenFile: does-not-matter\n"));
  ClusterConfig config = load_ok(file);
  EXPECT_EQ(current_token(config).value(), "static");
  EXPECT_FALSE(config.token_file);
}

TEST_F(KubeConfig, TokenFileIsReReadAfterRotation) {
  fs::path token = write("token", "  first\n");
  ClusterConfig config = load_ok(write("config", simple_config("", "    tokenFile: token\n")));
  EXPECT_EQ(config.token_refresh, std::chrono::seconds(60));
  EXPECT_EQ(current_token(config).value(), "first");
  write("token", "second\n");
  EXPECT_EQ(current_token(config).value(), "second");

  write("token", " \n");
  auto empty = current_token(config);
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().file, token.string());
  EXPECT_THAT(empty.error().message, HasSubstr("empty"));

  fs::remove(token);
  auto gone = current_token(config);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().file, token.string());
  EXPECT_THAT(gone.error().message, HasSubstr("No such file"));
}

TEST_F(KubeConfig, UnknownContextListsTheAvailableOnes) {
  fs::path file = write("config", simple_config());
  ConfigError error = load_error(KubeconfigOptions{{file}, "prod"});
  EXPECT_EQ(error.file, file.string());
  EXPECT_THAT(error.message, AllOf(HasSubstr("\"prod\""), HasSubstr("available: main")));

  std::string text = simple_config();
  text.replace(text.find("current-context: main"), 21, "current-context: gone");
  write("config", text);
  error = load_error(file);
  EXPECT_EQ(error.file, file.string());
  EXPECT_EQ(error.field, "current-context");
  EXPECT_THAT(error.message, AllOf(HasSubstr("\"gone\""), HasSubstr("available: main")));
}

TEST_F(KubeConfig, NoCurrentContextAndNoneGiven) {
  std::string text = simple_config();
  text.erase(text.find("current-context: main\n"), 22);
  fs::path file = write("config", text);
  ConfigError error = load_error(file);
  EXPECT_EQ(error.file, file.string());
  EXPECT_EQ(error.field, "current-context");
}

TEST_F(KubeConfig, ContextReferencingAMissingUserOrCluster) {
  std::string text = simple_config();
  text.replace(text.find("user: u"), 7, "user: nobody");
  fs::path file = write("config", text);
  ConfigError error = load_error(file);
  EXPECT_EQ(error.file, file.string());
  EXPECT_EQ(error.field, "contexts[main].context.user");
  EXPECT_THAT(error.message, AllOf(HasSubstr("\"nobody\""), HasSubstr("available: u")));

  text = simple_config();
  text.replace(text.find("cluster: c\n"), 10, "cluster: nowhere");
  write("config", text);
  error = load_error(file);
  EXPECT_EQ(error.field, "contexts[main].context.cluster");
  EXPECT_THAT(error.message, HasSubstr("\"nowhere\""));
}

TEST_F(KubeConfig, ErrorsNameTheFileThatDefinesTheEntry) {
  fs::path contexts = write("contexts",
                            "current-context: x\n"
                            "contexts:\n- {name: x, context: {cluster: c}}\n");
  fs::path clusters = write("clusters", "clusters:\n- {name: c, cluster: {server: ftp://h}}\n");
  ConfigError error = load_error(KubeconfigOptions{{contexts, clusters}, ""});
  EXPECT_EQ(error.file, clusters.string());
  EXPECT_EQ(error.field, "clusters[c].cluster.server");
}

TEST_F(KubeConfig, BadBase64IsNamed) {
  fs::path file = write("config", simple_config("    certificate-authority-data: 'abc%def'\n"));
  ConfigError error = load_error(file);
  EXPECT_EQ(error.file, file.string());
  EXPECT_EQ(error.field, "clusters[c].cluster.certificate-authority-data");
  EXPECT_THAT(error.message, HasSubstr("invalid base64"));

  write("config", simple_config("    certificate-authority-data: abcde\n"));
  EXPECT_THAT(load_error(file).message, HasSubstr("multiple of 4"));
}

TEST_F(KubeConfig, PemTextInADataFieldGetsAHint) {
  fs::path file =
      write("config", simple_config("", "    client-certificate-data: |\n" +
                                            std::string("      -----BEGIN "
                                                        "CERTIFICATE-----\n") +
                                            "    client-key-data: " + base64(kKey) + "\n"));
  ConfigError error = load_error(file);
  EXPECT_EQ(error.field, "users[u].user.client-certificate-data");
  EXPECT_THAT(error.message, HasSubstr("base64"));
}

TEST_F(KubeConfig, CertificateAuthorityThatIsNotPem) {
  fs::path file =
      write("config", simple_config("    certificate-authority-data: " + base64("hello") + "\n"));
  ConfigError error = load_error(file);
  EXPECT_EQ(error.file, file.string());
  EXPECT_EQ(error.field, "clusters[c].cluster.certificate-authority-data");
  EXPECT_THAT(error.message, HasSubstr("not a PEM certificate"));

  write("ca.crt", "not pem");
  write("config", simple_config("    certificate-authority: ca.crt\n"));
  error = load_error(file);
  EXPECT_EQ(error.field, "clusters[c].cluster.certificate-authority");
  EXPECT_THAT(error.message, HasSubstr((root_ / "ca.crt").string()));

  write("config", simple_config("    certificate-authority: missing.crt\n"));
  error = load_error(file);
  EXPECT_EQ(error.field, "clusters[c].cluster.certificate-authority");
  EXPECT_THAT(error.message, HasSubstr("No such file or directory"));
}

TEST_F(KubeConfig, ClientCertificateWithoutKey) {
  fs::path file =
      write("config", simple_config("", "    client-certificate-data: " + base64(kCert) + "\n"));
  ConfigError error = load_error(file);
  EXPECT_EQ(error.file, file.string());
  EXPECT_EQ(error.field, "users[u].user.client-key");
  EXPECT_THAT(error.message, HasSubstr("client-certificate"));

  write("config", simple_config("", "    client-key-data: " + base64(kKey) + "\n"));
  EXPECT_EQ(load_error(file).field, "users[u].user.client-certificate");

  write("config", simple_config("", "    client-certificate-data: " + base64(kCert) +
                                        "\n    client-key-data: " + base64(kCert) + "\n"));
  error = load_error(file);
  EXPECT_EQ(error.field, "users[u].user.client-key-data");
  EXPECT_THAT(error.message, HasSubstr("not a PEM private key"));
}

TEST_F(KubeConfig, UnreadableTokenFileIsNamedWithTheReason) {
  // chmod 000 means nothing to root: a directory and a dangling symlink fail for anyone.
  fs::create_directories(root_ / "token-dir");
  fs::path file = write("config", simple_config("", "    tokenFile: token-dir\n"));
  ConfigError error = load_error(file);
  EXPECT_EQ(error.file, file.string());
  EXPECT_EQ(error.field, "users[u].user.tokenFile");
  EXPECT_THAT(error.message,
              AllOf(HasSubstr((root_ / "token-dir").string()), HasSubstr("Is a directory")));

  fs::create_symlink(root_ / "nowhere", root_ / "dangling");
  write("config", simple_config("", "    tokenFile: dangling\n"));
  error = load_error(file);
  EXPECT_EQ(error.field, "users[u].user.tokenFile");
  EXPECT_THAT(error.message, HasSubstr("No such file or directory"));
}

TEST_F(KubeConfig, ExecPluginIsRefusedWithAReason) {
  fs::path file = write("config", simple_config("",
                                                "    exec:\n"
                                                "      apiVersion: "
                                                "client.authentication.k8s.io/v1\n"
                                                "      command: aws\n"));
  ConfigError error = load_error(file);
  EXPECT_EQ(error.file, file.string());
  EXPECT_EQ(error.field, "users[u].user.exec");
  EXPECT_THAT(error.message, AllOf(HasSubstr("not supported"), HasSubstr("in-cluster")));

  write("config", simple_config("", "    auth-provider: {name: oidc}\n"));
  EXPECT_EQ(load_error(file).field, "users[u].user.auth-provider");
}

TEST_F(KubeConfig, UnsupportedEntriesOfOtherContextsDoNotMatter) {
  std::string text = simple_config() +
                     "- name: cloud\n"
                     "  context: {cluster: c, user: eks}\n";
  text.insert(text.find("contexts:"), "- name: eks\n  user: {exec: {command: aws}}\n");
  EXPECT_EQ(load_ok(write("config", text)).token, "secret");
}

TEST_F(KubeConfig, BasicAuthAndImpersonationAreRefused) {
  fs::path file = write("config", simple_config("",
                                                "    username: admin\n"
                                                "    password: hunter2\n"));
  ConfigError error = load_error(file);
  EXPECT_EQ(error.field, "users[u].user.username");
  EXPECT_THAT(error.message, HasSubstr("basic authentication is not supported"));

  write("config", simple_config("", "    token: t\n    as: someone-else\n"));
  EXPECT_EQ(load_error(file).field, "users[u].user.as");
}

TEST_F(KubeConfig, MissingServer) {
  fs::path file = write("config",
                        "current-context: x\n"
                        "clusters:\n- {name: c, cluster: {certificate-authority-data: ''}}\n"
                        "contexts:\n- {name: x, context: {cluster: c}}\n");
  ConfigError error = load_error(file);
  EXPECT_EQ(error.file, file.string());
  EXPECT_EQ(error.field, "clusters[c].cluster.server");
  EXPECT_EQ(error.message, "is not set");
}

TEST_F(KubeConfig, UnsupportedServerUrls) {
  fs::path file = write("config", simple_config("", "", "ftp://api:21"));
  ConfigError error = load_error(file);
  EXPECT_EQ(error.file, file.string());
  EXPECT_EQ(error.field, "clusters[c].cluster.server");
  EXPECT_THAT(error.message, HasSubstr("unsupported scheme \"ftp\""));

  write("config", simple_config("", "", "http://localhost:8001"));
  EXPECT_THAT(load_error(file).message, HasSubstr("plain http is not supported"));
  write("config", simple_config("", "", "10.0.0.1:6443"));
  EXPECT_THAT(load_error(file).message, HasSubstr("absolute URL"));
  write("config", simple_config("", "", "https://api:99999"));
  EXPECT_THAT(load_error(file).message, HasSubstr("invalid port"));
  write("config", simple_config("", "", "HTTPS://[::1]:6443"));
  EXPECT_EQ(load_ok(file).server, "https://[::1]:6443");
}

TEST_F(KubeConfig, MalformedFilesAreNamed) {
  fs::path file = write("config", "clusters: [\n");
  ConfigError error = load_error(file);
  EXPECT_EQ(error.file, file.string());
  EXPECT_THAT(error.message, HasSubstr("line"));

  write("config", "clusters: {c: {server: https://x}}\n");
  error = load_error(file);
  EXPECT_EQ(error.field, "clusters");
  EXPECT_EQ(error.message, "must be a list");

  write("config",
        "clusters:\n- {name: c, cluster: {server: https://a}}\n"
        "- {name: c, cluster: {server: https://b}}\n");
  EXPECT_EQ(load_error(file).field, "clusters[c]");

  write("config", "apiVersion: apps/v1\nkind: Deployment\n");
  EXPECT_EQ(load_error(file).field, "kind");

  write("config", simple_config("    insecure-skip-tls-verify: 'yes'\n"));
  EXPECT_EQ(load_error(file).field, "clusters[c].cluster.insecure-skip-tls-verify");
}

TEST_F(KubeConfig, InClusterHappyPath) {
  fs::path sa = root_ / "sa";
  write("sa/ca.crt", kCa);
  write("sa/token", "pod-token\n");
  write("sa/namespace", "gracekeeper-system\n");
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto config = load_in_cluster(sa);
  ASSERT_TRUE(config) << config.error().format();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  ASSERT_TRUE(config->certificate_authority);
  EXPECT_EQ(config->certificate_authority->text, kCa);
  EXPECT_EQ(config->namespace_, "gracekeeper-system");
  EXPECT_EQ(config->context, "");
  EXPECT_EQ(config->token, "");
  EXPECT_EQ(config->token_refresh, std::chrono::seconds(60));
  ASSERT_TRUE(config->token_file);
  EXPECT_EQ(*config->token_file, sa / "token");
  EXPECT_EQ(current_token(*config).value(), "pod-token");
  write("sa/token", "rotated");
  EXPECT_EQ(current_token(*config).value(), "rotated");
}

TEST_F(KubeConfig, InClusterIpv6AndDefaultNamespace) {
  write("sa/ca.crt", kCa);
  write("sa/token", "t");
  ::setenv("KUBERNETES_SERVICE_HOST", "fd00:10:96::1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
  auto config = load_in_cluster(root_ / "sa");
  ASSERT_TRUE(config) << config.error().format();
  EXPECT_EQ(config->server, "https://[fd00:10:96::1]:6443");
  EXPECT_EQ(config->namespace_, "default");
}

TEST_F(KubeConfig, InClusterWithoutEnvironment) {
  write("sa/ca.crt", kCa);
  write("sa/token", "t");
  auto config = load_in_cluster(root_ / "sa");
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().field, "KUBERNETES_SERVICE_HOST");
  EXPECT_THAT(config.error().format(), HasSubstr("KUBERNETES_SERVICE_HOST: is not set"));

  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  config = load_in_cluster(root_ / "sa");
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().field, "KUBERNETES_SERVICE_PORT");

  ::setenv("KUBERNETES_SERVICE_PORT", "https", 1);
  config = load_in_cluster(root_ / "sa");
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().field, "KUBERNETES_SERVICE_PORT");
}

TEST_F(KubeConfig, InClusterMissingFiles) {
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  write("sa/token", "t");
  auto config = load_in_cluster(root_ / "sa");
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().file, (root_ / "sa/ca.crt").string());
  EXPECT_THAT(config.error().message, HasSubstr("No such file or directory"));

  write("sa/ca.crt", kCa);
  fs::remove(root_ / "sa/token");
  config = load_in_cluster(root_ / "sa");
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().file, (root_ / "sa/token").string());
}

TEST(ConfigError, FormatOmitsEmptyParts) {
  EXPECT_EQ((ConfigError{"/f", "users[a].user.token", "bad"}.format()),
            "/f: users[a].user.token: bad");
  EXPECT_EQ((ConfigError{"", "KUBERNETES_SERVICE_HOST", "is not set"}.format()),
            "KUBERNETES_SERVICE_HOST: is not set");
  EXPECT_EQ((ConfigError{"/f", "", "cannot read"}.format()), "/f: cannot read");
  EXPECT_EQ((ConfigError{"", "", "m"}.format()), "m");
}

}  // namespace
}  // namespace gracekeeper::kube
