// The Prometheus HTTP API client: one instant query per call, over an
// http::Client (connection pool, timeouts, TLS; plain HTTP allowed here
// because Prometheus in a cluster usually serves http://).
#include <boost/url/parse.hpp>
#include <boost/url/url.hpp>
#include <fstream>
#include <sstream>

#include "gracekeeper/http/client.h"
#include "gracekeeper/http/encoding.h"
#include "gracekeeper/propagation/propagation.h"

namespace gracekeeper::propagation {

namespace {

namespace asio = boost::asio;

class HttpPrometheus final : public Prometheus {
 public:
  HttpPrometheus(asio::any_io_executor executor, http::Endpoint endpoint, http::Options options)
      : url_(endpoint.url), client_(std::move(executor), std::move(endpoint), std::move(options)) {}

  asio::awaitable<std::expected<double, QueryError>> query(std::string promql) override {
    const std::string where = url_ + "/api/v1/query, query " + promql + ": ";
    http::Request request{.target = "/api/v1/query"};
    http::add_query(request.target, "query", promql);
    auto answer = co_await client_.send(std::move(request));
    if (!answer) {
      const auto& e = answer.error();
      std::string reason = e.kind == http::ErrorKind::Transport ? "Unreachable" : "BadResponse";
      co_return std::unexpected(QueryError{std::move(reason), where + e.message});
    }
    const bool ok = answer->status >= 200 && answer->status <= 299;
    auto value = parse_query_response(answer->body);
    if (value) {
      if (ok) co_return *value;
      co_return std::unexpected(
          QueryError{"HttpError", where + "HTTP " + std::to_string(answer->status)});
    }
    QueryError e = std::move(value.error());
    // Prometheus answers a bad query with 400/422/503 and its error JSON;
    // anything else that is not 2xx is not Prometheus speaking (a proxy, an
    // ingress' 404, an auth failure).
    if (!ok && e.reason != "QueryFailed") {
      std::string start = answer->body.substr(0, 200);
      co_return std::unexpected(QueryError{
          "HttpError",
          where + "HTTP " + std::to_string(answer->status) + (start.empty() ? "" : ": " + start)});
    }
    if (!ok) e.message = "HTTP " + std::to_string(answer->status) + ": " + e.message;
    e.message = where + e.message;
    co_return std::unexpected(std::move(e));
  }

 private:
  std::string url_;
  http::Client client_;
};

std::expected<std::string, std::string> read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::unexpected(file.string() + ": cannot read it");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return std::unexpected(file.string() + ": cannot read it");
  return text.str();
}

// The token file's content, trimmed; read for every query (rotation).
std::expected<std::string, std::string> read_token(const std::filesystem::path& file) {
  auto text = read_text(file);
  if (!text) return text;
  const auto first = text->find_first_not_of(" \t\r\n");
  if (first == std::string::npos)
    return std::unexpected(file.string() + ": the token file is empty");
  const auto last = text->find_last_not_of(" \t\r\n");
  return text->substr(first, last - first + 1);
}

}  // namespace

std::expected<std::unique_ptr<Prometheus>, std::string> make_prometheus(
    asio::any_io_executor executor, PrometheusConfig config) {
  const std::string what = "Prometheus URL \"" + config.url + "\"";
  auto url = boost::urls::parse_absolute_uri(config.url);
  if (!url) return std::unexpected(what + ": not an absolute URL");
  const bool https = url->scheme_id() == boost::urls::scheme::https;
  if (!https && url->scheme_id() != boost::urls::scheme::http) {
    return std::unexpected(what + ": must start with http:// or https://");
  }
  if (url->host_address().empty()) return std::unexpected(what + ": has no host");
  if (url->has_userinfo()) {
    return std::unexpected(what + ": must not carry credentials; use a bearer token file");
  }
  if (url->has_query() || url->has_fragment()) {
    return std::unexpected(what + ": must not have a query or fragment (a path prefix is fine)");
  }
  if (config.timeout <= std::chrono::milliseconds::zero()) {
    return std::unexpected("Prometheus timeout must be positive");
  }

  http::Endpoint endpoint;
  boost::urls::url normalized(*url);
  normalized.normalize_scheme();  // "HTTP://" works; the transport compares it as written
  endpoint.url = std::string{normalized.buffer()};
  while (endpoint.url.ends_with('/')) endpoint.url.pop_back();
  endpoint.allow_plain_http = !https;
  if (config.ca_file) {
    if (!https) return std::unexpected(what + ": a CA file is set but the URL is not https://");
    auto pem = read_text(*config.ca_file);
    if (!pem) return std::unexpected("Prometheus CA file " + pem.error());
    if (pem->find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      return std::unexpected("Prometheus CA file " + config.ca_file->string() +
                             ": no PEM certificate in it");
    }
    endpoint.tls.certificate_authority = http::Pem{*pem, "file " + config.ca_file->string()};
  }
  if (config.bearer_token_file) {
    // Read once now so a wrong path fails at startup; it is read again for
    // every query (rotation).
    auto token = read_token(*config.bearer_token_file);
    if (!token) return std::unexpected("Prometheus bearer token: " + token.error());
    endpoint.token = [file = *config.bearer_token_file] { return read_token(file); };
  }

  http::Options options;
  options.timeouts.connect = config.timeout;
  options.timeouts.handshake = config.timeout;
  options.timeouts.write = config.timeout;
  options.timeouts.read_header = config.timeout;
  options.timeouts.request = config.timeout;
  // No retries here: a measurement is repeated on the next reconcile anyway,
  // and a failed one falls back (docs/api.md, "The budget"). A pooled connection that Prometheus
  // closed is still re-sent once by the transport.
  options.retry.attempts = 1;
  options.max_idle_connections = 2;
  options.max_body_bytes = 8u << 20;
  return std::make_unique<HttpPrometheus>(std::move(executor), std::move(endpoint),
                                          std::move(options));
}

}  // namespace gracekeeper::propagation
