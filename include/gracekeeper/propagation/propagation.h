// Where the operator gets the endpoint-propagation figure of a ShutdownPolicy
// (docs/api.md, "Propagation sources"): staticSeconds, the Prometheus HTTP API, or observed
// EndpointSlice changes (observed.h), with the fallback rules for when the
// source fails.
//
// Layers, each testable on its own:
//  * parse_query_response: pure, decodes one /api/v1/query answer;
//  * Prometheus: one query over HTTP (make_prometheus), an interface so tests
//    can fake it;
//  * combine: pure, turns per-query results into the Measurement;
//  * measure: the whole step for one policy.
//
// Security (docs/api.md, "ShutdownPolicy spec"): the Prometheus address, CA and credentials come
// from the operator's own flags (PrometheusConfig); a policy only chooses queries.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <expected>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gracekeeper/budget/policy.h"

namespace gracekeeper::propagation {

// How the operator reaches Prometheus: its own flags, never from a policy.
struct PrometheusConfig {
  std::string url{};  // http:// or https://, may have a path prefix (http://host/prometheus)
  std::optional<std::filesystem::path> ca_file{};  // PEM; https:// only; else the system store
  // Sent as "Authorization: Bearer <content>"; re-read for every query so a
  // rotated token is picked up.
  std::optional<std::filesystem::path> bearer_token_file{};
  std::chrono::milliseconds timeout{10'000};  // connect, TLS handshake, and the whole query
};

// Why a query gave no usable figure. `reason` is one of:
//   Unreachable  no answer: connect, TLS, I/O, timeout (or not attempted because
//                an earlier query of the same measurement found Prometheus unreachable)
//   HttpError    a non-2xx answer that is not a Prometheus API error (a proxy, 401, 404)
//   QueryFailed  Prometheus answered {"status":"error"}: bad syntax, execution error;
//                the message carries its errorType and error text
//   EmptyResult  an empty vector: no series match (wrong metric, no scrape yet)
//   NotANumber   NaN, +Inf or -Inf: e.g. no traffic in the rate() range (0/0), or a
//                quantile above the highest finite histogram bucket
//   NotScalar    several series, a range vector (matrix), a string, a native histogram
//   Negative     a negative figure
//   BadResponse  an answer that is not a Prometheus API response (not JSON, a
//                value that is not a number, fields missing)
struct QueryError {
  std::string reason{};
  std::string message{};
};

// One PromQL instant query that yields seconds. A seam for unit tests.
class Prometheus {
 public:
  virtual ~Prometheus() = default;
  virtual boost::asio::awaitable<std::expected<double, QueryError>> query(std::string promql) = 0;
};

// GET <url>/api/v1/query?query=<promql> over an http::Client:
// plain HTTP for http://, TLS (peer and host name verified) for https://.
// The error is a startup misconfiguration (bad URL, unreadable CA or token
// file), naming the URL or the file. Query errors name the URL and the query.
// The returned object lives on `executor`'s thread and must outlive its queries.
std::expected<std::unique_ptr<Prometheus>, std::string> make_prometheus(
    boost::asio::any_io_executor executor, PrometheusConfig config);

// Pure: decodes a /api/v1/query answer (any HTTP status): a scalar, or an
// instant vector with exactly one sample; finite and >= 0.
std::expected<double, QueryError> parse_query_response(std::string_view body);

// The last fresh measurement, kept by the caller between measurements.
struct LastGood {
  double seconds = 0;
  std::chrono::system_clock::time_point sampled_at{};
};

// A last good value is used as a fallback while it is at most this old (docs/api.md,
// "The budget").
inline constexpr std::chrono::hours kLastGoodMaxAge{1};

struct Measurement {
  double seconds = 0;    // the figure to use: measured, last good, or staticSeconds
  std::string source{};  // "Static", "Prometheus" or "Observed" (the policy's source)
  // The consumer whose figure is `seconds`: the slowest query's name
  // (Prometheus), kube-proxy or a declared consumer (Observed); empty for
  // Static and for a fallback.
  std::string consumer{};
  bool metrics_available = true;  // condition MetricsAvailable (Static: true, reason StaticSource)
  // Condition reason, UpperCamelCase: QuerySucceeded, StaticSource,
  // PrometheusNotConfigured, NoQueries, SamplesSufficient, TooFewSamples, or the
  // QueryError reason of the first query that failed.
  std::string reason{};
  // Human text. On success, each query's figure by name; on failure, every
  // failed query by name with its error, and which fallback was used.
  std::string message{};
  // When `seconds` was measured: now for a fresh measurement (and for Static
  // and the staticSeconds fallback), the last good value's time when that is
  // used.
  std::chrono::system_clock::time_point sampled_at{};
  bool fallback = false;  // `seconds` is not a fresh measurement of every query
  // What to remember for next time: the fresh figure on success, otherwise
  // the `last_good` passed in, unchanged.
  std::optional<LastGood> last_good{};
};

// One result per query of the policy, in the policy's order: (query name, result).
using QueryResults = std::vector<std::pair<std::string, std::expected<double, QueryError>>>;

// Pure core of the Prometheus source: combines per-query results with the
// rules of docs/operator.md, "Running the operator" (Prometheus).
//  * Every query succeeded: the slowest consumer wins, seconds = max.
//  * Any query failed: the whole measurement fails, even when others
//    succeeded: the max of the rest would silently drop the failed consumer,
//    which may be the slowest one, and shrink the wait. The figure is the
//    fallback: the last good value if it is at most kLastGoodMaxAge old,
//    else staticSeconds.
//  * Never lower because Prometheus failed: the queries that did succeed are
//    a lower bound of the true maximum, so on failure seconds =
//    max(fallback, max of the successful queries). A failure can hold or
//    raise the figure relative to what was just measured, never lower it.
//  * No results at all (a Prometheus source without queries): fallback,
//    reason NoQueries.
Measurement combine(const budget::PolicySpec& spec, const QueryResults& results,
                    const std::optional<LastGood>& last_good,
                    std::chrono::system_clock::time_point now);

// The whole step for one policy:
//  * Static: staticSeconds, reason StaticSource, metrics_available true.
//  * Prometheus: every query in order, then combine(). Once a query finds
//    Prometheus Unreachable the remaining ones are not sent (they would wait
//    for the same timeout) and count as Unreachable. `prometheus` is null
//    when the operator has no --prometheus-url: fallback, reason
//    PrometheusNotConfigured.
//  * Observed: without the operator's samples (observed.h, which the
//    operator's meter reads instead), none: fallback, reason TooFewSamples.
// Fallback means the last good value (at most kLastGoodMaxAge old), else
// staticSeconds, with metrics_available false. `spec` and `*prometheus` must
// stay alive until the returned awaitable completes (co_await it directly).
boost::asio::awaitable<Measurement> measure(const budget::PolicySpec& spec, Prometheus* prometheus,
                                            std::optional<LastGood> last_good,
                                            std::chrono::system_clock::time_point now);

}  // namespace gracekeeper::propagation
