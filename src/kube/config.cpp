// Kubeconfig and in-cluster configuration, following client-go's clientcmd
// where users can see the difference (merge order, which field wins, what a
// missing file means), and refusing, with the field named, what gracekeeper
// cannot do (exec plugins, basic auth, proxies, impersonation) rather than
// ignoring it and failing later with a confusing 401 or connection error.
#include "gracekeeper/kube/config.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <boost/url/parse.hpp>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>

#include "gracekeeper/manifest/document.h"

namespace gracekeeper::kube {
namespace {

namespace fs = std::filesystem;
using manifest::Json;

// Certificates, tokens and kubeconfigs are kilobytes; the bound only stops a
// path such as /dev/zero from being read forever.
constexpr std::size_t kMaxFileBytes = 4u << 20;
constexpr std::string_view kCertificateMarker = "-----BEGIN CERTIFICATE-----";
constexpr std::string_view kWhitespace = " \t\r\n";
constexpr std::string_view kNoPlugins =
    "gracekeeper runs in-cluster with its service account, or with client certificates or a bearer "
    "token (token, tokenFile) from a kubeconfig";

std::unexpected<ConfigError> fail(std::string file, std::string field, std::string message) {
  return std::unexpected(ConfigError{std::move(file), std::move(field), std::move(message)});
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

std::string_view trim(std::string_view text) {
  std::size_t first = text.find_first_not_of(kWhitespace);
  if (first == std::string_view::npos) return {};
  std::size_t last = text.find_last_not_of(kWhitespace);
  return text.substr(first, last - first + 1);
}

// POSIX rather than ifstream: the error code says why (no such file, is a
// directory, permission denied), which is what the user needs to fix it.
std::expected<std::string, std::error_code> read_file(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::unexpected(std::error_code(errno, std::generic_category()));
  std::string text;
  std::array<char, 1u << 16> buffer{};
  while (true) {
    ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      std::error_code error(errno, std::generic_category());
      ::close(fd);
      return std::unexpected(error);
    }
    if (got == 0) break;
    text.append(buffer.data(), static_cast<std::size_t>(got));
    if (text.size() > kMaxFileBytes) {
      ::close(fd);
      return std::unexpected(std::make_error_code(std::errc::file_too_large));
    }
  }
  ::close(fd);
  return text;
}

bool is_missing(const std::error_code& error) {
  return error == std::errc::no_such_file_or_directory;
}

// Standard base64 as Go's encoding/json decodes []byte (StdEncoding, padded).
// Line breaks and blanks are skipped: folded YAML scalars and `base64` without
// -w0 both produce them.
std::expected<std::string, std::string> decode_base64(std::string_view text) {
  auto value_of = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (trim(text).starts_with("-----BEGIN")) {
    return std::unexpected(
        "this is PEM text, but *-data fields hold base64-encoded PEM "
        "(encode it with `base64 -w0`, or use the field without -data and a file path)");
  }
  std::string out;
  std::uint32_t bits = 0;
  int bit_count = 0;
  std::size_t symbols = 0;
  std::size_t padding = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (kWhitespace.find(c) != std::string_view::npos) continue;
    if (c == '=') {
      ++padding;
      ++symbols;
      continue;
    }
    int value = value_of(c);
    if (value < 0) {
      return std::unexpected(
          fmt::format("invalid base64: unexpected character '{}' at offset {}", c, i));
    }
    if (padding > 0) {
      return std::unexpected(fmt::format("invalid base64: data after '=' padding at offset {}", i));
    }
    ++symbols;
    bits = (bits << 6) | static_cast<std::uint32_t>(value);
    bit_count += 6;
    if (bit_count >= 8) {
      bit_count -= 8;
      out.push_back(static_cast<char>((bits >> bit_count) & 0xFF));
    }
  }
  if (symbols % 4 != 0 || padding > 2) {
    return std::unexpected(
        "invalid base64: the length is not a multiple of 4 (truncated, or padding missing)");
  }
  return out;
}

bool looks_like_certificate(std::string_view pem) {
  return pem.find(kCertificateMarker) != std::string_view::npos;
}

// "-----BEGIN PRIVATE KEY-----", "... RSA PRIVATE KEY-----", "... EC PRIVATE KEY-----".
bool looks_like_private_key(std::string_view pem) {
  std::size_t begin = pem.find("-----BEGIN ");
  if (begin == std::string_view::npos) return false;
  std::size_t end = pem.find("-----", begin + 11);
  return end != std::string_view::npos && pem.substr(begin, end - begin).ends_with("PRIVATE KEY");
}

// One kubeconfig entry (the body of a named cluster, user or context) and the
// file it came from: errors name that file, relative paths resolve against it.
struct Entry {
  Json body;
  std::string file;
  fs::path directory;
};

struct MergedConfig {
  std::vector<std::string> files;  // those that existed, in order
  std::map<std::string, Entry> clusters;
  std::map<std::string, Entry> users;
  std::map<std::string, Entry> contexts;
  std::string current_context;
  std::string current_context_file;
};

// Reads an optional string field: absent and null are "", anything but a
// string is an error (a number where a path belongs is a typo worth reporting).
std::expected<std::string, ConfigError> string_field(const Entry& entry, const std::string& prefix,
                                                     const char* key) {
  auto it = entry.body.find(key);
  if (it == entry.body.end() || it->is_null()) return std::string();
  if (!it->is_string()) return fail(entry.file, prefix + key, "must be a string");
  return it->get<std::string>();
}

std::expected<bool, ConfigError> bool_field(const Entry& entry, const std::string& prefix,
                                            const char* key) {
  auto it = entry.body.find(key);
  if (it == entry.body.end() || it->is_null()) return false;
  if (!it->is_boolean()) return fail(entry.file, prefix + key, "must be true or false");
  return it->get<bool>();
}

bool is_set(const Entry& entry, const char* key) {
  auto it = entry.body.find(key);
  if (it == entry.body.end() || it->is_null()) return false;
  if (it->is_string() || it->is_array() || it->is_object()) return !it->empty();
  return true;
}

// Adds one file's clusters, users or contexts: the first file to define a
// name wins (clientcmd's merge), a name defined twice in one file is an error
// (clientcmd refuses to decode such a file).
std::expected<void, ConfigError> merge_section(const Json& root, const std::string& file,
                                               const fs::path& directory, const char* section,
                                               const char* body_key,
                                               std::map<std::string, Entry>& into) {
  auto list = root.find(section);
  if (list == root.end() || list->is_null()) return {};
  if (!list->is_array()) return fail(file, section, "must be a list");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const Json& item = (*list)[i];
    std::string where = fmt::format("{}[{}]", section, i);
    if (!item.is_object()) {
      return fail(file, where, "must be a mapping with name and " + std::string(body_key));
    }
    auto name = item.find("name");
    if (name == item.end() || !name->is_string() || name->get<std::string>().empty()) {
      return fail(file, where + ".name", "must be a non-empty string");
    }
    where = fmt::format("{}[{}]", section, name->get<std::string>());
    if (!seen.insert(name->get<std::string>()).second) {
      return fail(file, where, "the name is defined twice in this file");
    }
    Json body = Json::object();
    if (auto it = item.find(body_key); it != item.end() && !it->is_null()) {
      if (!it->is_object()) return fail(file, where + "." + body_key, "must be a mapping");
      body = *it;
    }
    into.try_emplace(name->get<std::string>(), Entry{std::move(body), file, directory});
  }
  return {};
}

// Reads and merges one file. `missing_is_ok` is how a KUBECONFIG list treats a
// file that does not exist; any other read error still counts.
std::expected<bool, ConfigError> merge_file(const fs::path& path, bool missing_is_ok,
                                            MergedConfig& merged) {
  std::string file = path.string();
  auto text = read_file(path);
  if (!text) {
    if (missing_is_ok && is_missing(text.error())) return false;
    return fail(file, "", "cannot read: " + text.error().message());
  }
  auto documents = manifest::read_text(std::move(*text), file);
  if (!documents) {
    const manifest::Error& error = documents.error();
    if (error.position.line == 0) return fail(file, "", error.message);
    return fail(file, "",
                fmt::format("line {}, column {}: {}", error.position.line, error.position.column,
                            error.message));
  }
  merged.files.push_back(file);
  // An empty file is an empty configuration, as clientcmd reads it.
  if (documents->empty()) return true;
  if (documents->size() > 1) {
    return fail(file, "",
                fmt::format("expected one kubeconfig document, found {}", documents->size()));
  }
  const Json& root = documents->front().value;
  if (auto kind = root.find("kind");
      kind != root.end() && !kind->is_null() && *kind != Json("Config")) {
    return fail(file, "kind", fmt::format("is {}, a kubeconfig has kind Config", kind->dump()));
  }
  fs::path directory = fs::absolute(path).parent_path();
  for (auto [section, body_key, into] : {std::tuple{"clusters", "cluster", &merged.clusters},
                                         std::tuple{"users", "user", &merged.users},
                                         std::tuple{"contexts", "context", &merged.contexts}}) {
    if (auto added = merge_section(root, file, directory, section, body_key, *into); !added) {
      return std::unexpected(std::move(added).error());
    }
  }
  if (auto current = root.find("current-context"); current != root.end() && !current->is_null()) {
    if (!current->is_string()) return fail(file, "current-context", "must be a string");
    if (merged.current_context.empty() && !current->get<std::string>().empty()) {
      merged.current_context = current->get<std::string>();
      merged.current_context_file = file;
    }
  }
  return true;
}

// The files to read and whether a missing one is skipped (KUBECONFIG) or an
// error (given explicitly, or the default ~/.kube/config).
struct FileList {
  std::vector<fs::path> paths;
  bool from_environment = false;
};

std::expected<FileList, ConfigError> files_to_read(const KubeconfigOptions& options) {
  if (!options.files.empty()) return FileList{options.files, false};
  const char* environment = std::getenv("KUBECONFIG");
  if (environment != nullptr && *environment != '\0') {
    FileList list{{}, true};
    std::set<std::string> seen;
    std::string_view rest = environment;
    while (true) {
      std::size_t colon = rest.find(':');
      std::string item(rest.substr(0, colon));
      // Empty entries (`a::b`, a trailing colon) and repeats are dropped, as
      // clientcmd does.
      if (!item.empty() && seen.insert(item).second) list.paths.emplace_back(item);
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
    if (!list.paths.empty()) return list;
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    return fail("", "HOME", "is not set, so ~/.kube/config cannot be found; set KUBECONFIG");
  }
  return FileList{{fs::path(home) / ".kube" / "config"}, false};
}

std::expected<MergedConfig, ConfigError> merge_files(const KubeconfigOptions& options) {
  auto list = files_to_read(options);
  if (!list) return std::unexpected(std::move(list).error());
  MergedConfig merged;
  for (const fs::path& path : list->paths) {
    if (auto read = merge_file(path, list->from_environment, merged); !read) {
      return std::unexpected(std::move(read).error());
    }
  }
  if (merged.files.empty()) {
    std::vector<std::string> names;
    for (const fs::path& path : list->paths) names.push_back(path.string());
    return fail("", "KUBECONFIG", "none of its files exist: " + join(names, ", "));
  }
  return merged;
}

std::string available(const std::map<std::string, Entry>& entries) {
  if (entries.empty()) return "none are defined";
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries) names.push_back(name);
  return "available: " + join(names, ", ");
}

// A path from the kubeconfig, relative to the kubeconfig that holds it.
fs::path resolve(const Entry& entry, const std::string& path) {
  fs::path p(path);
  return p.is_absolute() ? p : entry.directory / p;
}

enum class PemKind { Certificate, PrivateKey };

// Reads `<key>-data` (base64, wins as in client-go) or else `<key>` (a path).
std::expected<std::optional<Pem>, ConfigError> load_pem(const Entry& entry,
                                                        const std::string& prefix,
                                                        const std::string& key, PemKind kind) {
  std::string data_key = key + "-data";
  auto data = string_field(entry, prefix, data_key.c_str());
  if (!data) return std::unexpected(std::move(data).error());
  auto path = string_field(entry, prefix, key.c_str());
  if (!path) return std::unexpected(std::move(path).error());
  Pem pem;
  std::string field;
  std::string what;  // the subject of a "not PEM" message
  if (!data->empty()) {
    field = prefix + data_key;
    auto decoded = decode_base64(*data);
    if (!decoded) return fail(entry.file, field, std::move(decoded).error());
    pem = Pem{std::move(*decoded), "kubeconfig field " + field};
    what = "the decoded value";
  } else if (!path->empty()) {
    field = prefix + key;
    fs::path resolved = resolve(entry, *path);
    auto text = read_file(resolved);
    if (!text) {
      return fail(entry.file, field,
                  fmt::format("cannot read {}: {}", resolved.string(), text.error().message()));
    }
    pem = Pem{std::move(*text), "file " + resolved.string()};
    what = resolved.string();
  } else {
    return std::optional<Pem>();
  }
  if (kind == PemKind::Certificate && !looks_like_certificate(pem.text)) {
    return fail(
        entry.file, field,
        fmt::format("{} is not a PEM certificate (no \"{}\" line)", what, kCertificateMarker));
  }
  if (kind == PemKind::PrivateKey && !looks_like_private_key(pem.text)) {
    return fail(entry.file, field,
                fmt::format("{} is not a PEM private key (no \"-----BEGIN ... PRIVATE KEY-----\" "
                            "line)",
                            what));
  }
  return std::optional<Pem>(std::move(pem));
}

// https://host[:port][/path], with no userinfo, query or fragment; trailing
// slashes removed so paths can be appended.
std::expected<std::string, std::string> check_server(std::string server) {
  if (server.find("://") == std::string::npos) {
    return std::unexpected("must be an absolute URL such as https://host:6443");
  }
  auto url = boost::urls::parse_uri(server);
  if (!url) return std::unexpected("is not a valid URL: " + url.error().message());
  std::string scheme = url->scheme();
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme == "http") {
    return std::unexpected(
        "plain http is not supported: gracekeeper always talks TLS to the API server; use "
        "https://");
  }
  if (scheme != "https") {
    return std::unexpected(fmt::format("unsupported scheme \"{}\": use https://", scheme));
  }
  if (url->host().empty()) return std::unexpected("has no host");
  if (url->has_port()) {
    std::string_view port = url->port();
    bool digits = !port.empty() && port.size() <= 5 &&
                  port.find_first_not_of("0123456789") == std::string_view::npos;
    if (!digits || std::stoi(std::string(port)) == 0 || std::stoi(std::string(port)) > 65535) {
      return std::unexpected(fmt::format("has an invalid port \"{}\"", port));
    }
  }
  if (url->has_userinfo()) return std::unexpected("must not contain credentials (user@)");
  if (url->has_query() || url->has_fragment()) {
    return std::unexpected("must not have a query or fragment");
  }
  // The scheme is case-insensitive; the transport need only know one spelling.
  server.replace(0, scheme.size(), scheme);
  while (server.ends_with('/') && !server.ends_with("://")) server.pop_back();
  return server;
}

std::expected<void, ConfigError> apply_cluster(const std::string& name, const Entry& entry,
                                               ClusterConfig& config) {
  std::string prefix = fmt::format("clusters[{}].cluster.", name);
  auto server = string_field(entry, prefix, "server");
  if (!server) return std::unexpected(std::move(server).error());
  if (server->empty()) return fail(entry.file, prefix + "server", "is not set");
  auto checked = check_server(std::move(*server));
  if (!checked) return fail(entry.file, prefix + "server", std::move(checked).error());
  config.server = std::move(*checked);

  if (is_set(entry, "proxy-url")) {
    return fail(entry.file, prefix + "proxy-url",
                "proxies are not supported; gracekeeper connects to the API server directly");
  }
  auto server_name = string_field(entry, prefix, "tls-server-name");
  if (!server_name) return std::unexpected(std::move(server_name).error());
  config.tls_server_name = std::move(*server_name);

  auto insecure = bool_field(entry, prefix, "insecure-skip-tls-verify");
  if (!insecure) return std::unexpected(std::move(insecure).error());
  auto ca = load_pem(entry, prefix, "certificate-authority", PemKind::Certificate);
  if (!ca) return std::unexpected(std::move(ca).error());
  // client-go refuses the combination ("specifying a root certificates file
  // with the insecure flag is not allowed"): one of the two is a mistake.
  if (*insecure && *ca) {
    return fail(entry.file, prefix + "insecure-skip-tls-verify",
                "cannot be true together with certificate-authority(-data); remove one of them");
  }
  config.insecure_skip_tls_verify = *insecure;
  config.certificate_authority = std::move(*ca);
  return {};
}

std::expected<void, ConfigError> reject_unsupported_auth(const Entry& entry,
                                                         const std::string& prefix) {
  if (is_set(entry, "exec")) {
    return fail(entry.file, prefix + "exec",
                fmt::format("exec credential plugins are not supported; {}", kNoPlugins));
  }
  if (is_set(entry, "auth-provider")) {
    return fail(entry.file, prefix + "auth-provider",
                fmt::format("auth-provider plugins are not supported; {}", kNoPlugins));
  }
  for (const char* key : {"username", "password"}) {
    if (is_set(entry, key)) {
      return fail(entry.file, prefix + key,
                  "basic authentication is not supported (Kubernetes removed it in 1.19); use a "
                  "client certificate or a bearer token");
    }
  }
  // Ignoring impersonation would silently act with the real identity's rights.
  for (const char* key : {"as", "as-uid", "as-groups", "as-user-extra"}) {
    if (is_set(entry, key)) {
      return fail(entry.file, prefix + key, "impersonation is not supported");
    }
  }
  return {};
}

std::expected<void, ConfigError> apply_user(const std::string& name, const Entry& entry,
                                            ClusterConfig& config) {
  std::string prefix = fmt::format("users[{}].user.", name);
  if (auto supported = reject_unsupported_auth(entry, prefix); !supported) return supported;

  auto certificate = load_pem(entry, prefix, "client-certificate", PemKind::Certificate);
  if (!certificate) return std::unexpected(std::move(certificate).error());
  auto key = load_pem(entry, prefix, "client-key", PemKind::PrivateKey);
  if (!key) return std::unexpected(std::move(key).error());
  if (certificate->has_value() != key->has_value()) {
    const char* missing = *certificate ? "client-key" : "client-certificate";
    const char* present = *certificate ? "client-certificate" : "client-key";
    return fail(entry.file, prefix + missing,
                fmt::format("is not set (nor {}-data), but {} is: a client certificate and its "
                            "key are needed together",
                            missing, present));
  }
  config.client_certificate = std::move(*certificate);
  config.client_key = std::move(*key);

  auto token = string_field(entry, prefix, "token");
  if (!token) return std::unexpected(std::move(token).error());
  auto token_file = string_field(entry, prefix, "tokenFile");
  if (!token_file) return std::unexpected(std::move(token_file).error());
  // A static token wins over tokenFile, as it does for client-go's first request.
  if (!token->empty()) {
    config.token = std::move(*token);
  } else if (!token_file->empty()) {
    fs::path path = resolve(entry, *token_file);
    // Read now so that a wrong path is reported at startup, with its field.
    if (auto text = read_file(path); !text) {
      return fail(entry.file, prefix + "tokenFile",
                  fmt::format("cannot read {}: {}", path.string(), text.error().message()));
    }
    config.token_file = std::move(path);
  }
  return {};
}

std::expected<std::string, ConfigError> select_context(const MergedConfig& merged,
                                                       const KubeconfigOptions& options) {
  if (!options.context.empty()) {
    if (!merged.contexts.contains(options.context)) {
      return fail(
          join(merged.files, ":"), "",
          fmt::format("context \"{}\" not found; {}", options.context, available(merged.contexts)));
    }
    return options.context;
  }
  if (merged.current_context.empty()) {
    return fail(join(merged.files, ":"), "current-context",
                fmt::format("is not set and no context was given; {}", available(merged.contexts)));
  }
  if (!merged.contexts.contains(merged.current_context)) {
    return fail(merged.current_context_file, "current-context",
                fmt::format("context \"{}\" not found; {}", merged.current_context,
                            available(merged.contexts)));
  }
  return merged.current_context;
}

std::expected<std::string, ConfigError> port_from(const char* variable, const char* value) {
  std::string_view port = value;
  bool digits = !port.empty() && port.size() <= 5 &&
                port.find_first_not_of("0123456789") == std::string_view::npos;
  if (!digits || std::stoi(std::string(port)) == 0 || std::stoi(std::string(port)) > 65535) {
    return fail("", variable, fmt::format("\"{}\" is not a port number", port));
  }
  return std::string(port);
}

}  // namespace

std::string ConfigError::format() const {
  std::string out;
  for (const std::string* part : {&file, &field, &message}) {
    if (part->empty()) continue;
    if (!out.empty()) out += ": ";
    out += *part;
  }
  return out;
}

std::expected<ClusterConfig, ConfigError> load_kubeconfig(const KubeconfigOptions& options) {
  auto merged = merge_files(options);
  if (!merged) return std::unexpected(std::move(merged).error());
  auto context_name = select_context(*merged, options);
  if (!context_name) return std::unexpected(std::move(context_name).error());

  // Only the selected context, its cluster and its user are checked, as
  // kubectl does: a broken entry for another cluster must not get in the way.
  const Entry& context = merged->contexts.at(*context_name);
  std::string prefix = fmt::format("contexts[{}].context.", *context_name);
  auto cluster_name = string_field(context, prefix, "cluster");
  if (!cluster_name) return std::unexpected(std::move(cluster_name).error());
  auto user_name = string_field(context, prefix, "user");
  if (!user_name) return std::unexpected(std::move(user_name).error());
  auto namespace_name = string_field(context, prefix, "namespace");
  if (!namespace_name) return std::unexpected(std::move(namespace_name).error());

  if (cluster_name->empty()) return fail(context.file, prefix + "cluster", "is not set");
  auto cluster = merged->clusters.find(*cluster_name);
  if (cluster == merged->clusters.end()) {
    return fail(
        context.file, prefix + "cluster",
        fmt::format("cluster \"{}\" not found; {}", *cluster_name, available(merged->clusters)));
  }
  ClusterConfig config;
  config.context = *context_name;
  config.namespace_ = namespace_name->empty() ? "default" : std::move(*namespace_name);
  if (auto applied = apply_cluster(cluster->first, cluster->second, config); !applied) {
    return std::unexpected(std::move(applied).error());
  }
  // A context without a user is anonymous access, which clientcmd allows.
  if (!user_name->empty()) {
    auto user = merged->users.find(*user_name);
    if (user == merged->users.end()) {
      return fail(context.file, prefix + "user",
                  fmt::format("user \"{}\" not found; {}", *user_name, available(merged->users)));
    }
    if (auto applied = apply_user(user->first, user->second, config); !applied) {
      return std::unexpected(std::move(applied).error());
    }
  }
  return config;
}

std::expected<ClusterConfig, ConfigError> load_in_cluster(const fs::path& root) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  for (auto [variable, value] :
       {std::pair{"KUBERNETES_SERVICE_HOST", host}, std::pair{"KUBERNETES_SERVICE_PORT", port}}) {
    if (value == nullptr || *value == '\0') {
      return fail("", variable,
                  "is not set: not running in a Kubernetes pod (outside a cluster, use a "
                  "kubeconfig)");
    }
  }
  auto checked_port = port_from("KUBERNETES_SERVICE_PORT", port);
  if (!checked_port) return std::unexpected(std::move(checked_port).error());
  std::string host_part = host;
  if (host_part.find(':') != std::string::npos && !host_part.starts_with('[')) {
    host_part = "[" + host_part + "]";  // an IPv6 address
  }

  ClusterConfig config;
  config.server = fmt::format("https://{}:{}", host_part, *checked_port);
  fs::path ca_path = root / "ca.crt";
  auto ca = read_file(ca_path);
  if (!ca) return fail(ca_path.string(), "", "cannot read: " + ca.error().message());
  if (!looks_like_certificate(*ca)) {
    return fail(ca_path.string(), "",
                fmt::format("is not a PEM certificate (no \"{}\" line)", kCertificateMarker));
  }
  config.certificate_authority = Pem{std::move(*ca), "file " + ca_path.string()};

  fs::path token_path = root / "token";
  if (auto token = read_file(token_path); !token) {
    return fail(token_path.string(), "", "cannot read: " + token.error().message());
  }
  config.token_file = token_path;
  config.token_refresh = std::chrono::seconds(60);

  fs::path namespace_path = root / "namespace";
  config.namespace_ = "default";
  if (auto text = read_file(namespace_path); text) {
    if (std::string_view name = trim(*text); !name.empty()) config.namespace_ = name;
  } else if (!is_missing(text.error())) {
    return fail(namespace_path.string(), "", "cannot read: " + text.error().message());
  }
  return config;
}

std::expected<std::string, ConfigError> current_token(const ClusterConfig& config) {
  if (!config.token.empty()) return config.token;
  if (!config.token_file) return std::string();
  std::string file = config.token_file->string();
  auto text = read_file(*config.token_file);
  if (!text) return fail(file, "", "cannot read the token: " + text.error().message());
  std::string_view token = trim(*text);
  if (token.empty()) return fail(file, "", "the token file is empty");
  return std::string(token);
}

std::expected<ClusterConfig, ConfigError> load_config(
    const std::optional<std::filesystem::path>& kubeconfig, const std::string& context) {
  if (!kubeconfig && context.empty() && std::getenv("KUBERNETES_SERVICE_HOST")) {
    return load_in_cluster();
  }
  KubeconfigOptions k;
  if (kubeconfig) k.files = {*kubeconfig};
  k.context = context;
  return load_kubeconfig(k);
}

}  // namespace gracekeeper::kube
