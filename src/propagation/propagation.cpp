// The pure parts of the propagation sources: decoding a Prometheus answer,
// combining per-query results with the fallback rules, and the measurement
// step around them.
#include "gracekeeper/propagation/propagation.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <exception>
#include <nlohmann/json.hpp>

#include "fallback.h"
#include "gracekeeper/core/json.h"
#include "gracekeeper/core/time.h"
#include "gracekeeper/propagation/observed.h"

namespace gracekeeper::propagation {

namespace {

using nlohmann::json;
using Clock = std::chrono::system_clock;

QueryError error(std::string reason, std::string message) {
  return QueryError{std::move(reason), std::move(message)};
}

std::string_view json_type(const json& j) {
  return j.is_string() ? "string" : j.is_number() ? "number" : j.type_name();
}

// A sample value as Prometheus writes it: a string ("3.5", "NaN", "+Inf").
std::expected<double, QueryError> sample_value(const json& v) {
  double value = 0;
  std::string text;
  if (v.is_number()) {  // not what Prometheus sends, but unambiguous
    value = v.get<double>();
    text = v.dump();
  } else if (v.is_string()) {
    text = v.get<std::string>();
    if (text == "NaN") {
      return std::unexpected(
          error("NotANumber", "the query gave NaN (e.g. no events in the rate() range: 0/0)"));
    }
    if (text == "+Inf" || text == "Inf") {
      return std::unexpected(error(
          "NotANumber", "the query gave +Inf (e.g. a quantile above the highest finite bucket)"));
    }
    if (text == "-Inf") return std::unexpected(error("NotANumber", "the query gave -Inf"));
    const char* end = text.data() + text.size();
    auto [p, ec] = std::from_chars(text.data(), end, value);
    if (ec != std::errc{} || p != end || text.empty()) {
      return std::unexpected(
          error("BadResponse", "sample value \"" + text.substr(0, 50) + "\" is not a number"));
    }
  } else {
    return std::unexpected(
        error("BadResponse", "sample value is a " + std::string{json_type(v)} + ", not a string"));
  }
  if (std::isnan(value) || std::isinf(value)) {
    return std::unexpected(error("NotANumber", "the query gave " + text));
  }
  if (value < 0) return std::unexpected(error("Negative", "the query gave " + text + " (< 0)"));
  return value;
}

// [timestamp, "value"]
std::expected<double, QueryError> pair_value(const json& pair) {
  if (!pair.is_array() || pair.size() != 2) {
    return std::unexpected(error("BadResponse", "a sample is not a [time, value] pair"));
  }
  return sample_value(pair[1]);
}

using core::string_member;

}  // namespace

namespace detail {

// "3.472s", "10s".
std::string seconds_text(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  std::string t = buf;
  if (t.find('.') != std::string::npos) {
    while (t.back() == '0') t.pop_back();
    if (t.back() == '.') t.pop_back();
  }
  return t + "s";
}

std::string age_text(Clock::duration d) {
  auto s = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  if (s < 0) return "in the future";
  if (s < 120) return std::to_string(s) + "s ago";
  if (s < 7200) return std::to_string(s / 60) + "m ago";
  return std::to_string(s / 3600) + "h ago";
}

bool usable(const std::optional<LastGood>& last_good, Clock::time_point now) {
  // A time slightly in the future (clock steps) still counts as recent.
  return last_good && now - last_good->sampled_at <= kLastGoodMaxAge;
}

// The fallback figure: the last good value while recent, else staticSeconds.
// `why` starts the message; `floor` (from queries that did succeed) raises it.
Measurement fall_back(const budget::PolicySpec& spec, std::string reason, std::string why,
                      const std::optional<LastGood>& last_good, Clock::time_point now,
                      const std::optional<Floor>& floor) {
  Measurement m;
  m.source = budget::to_string(spec.propagation.source);
  m.metrics_available = false;
  m.reason = std::move(reason);
  m.fallback = true;
  m.last_good = last_good;
  std::string used;
  if (usable(last_good, now)) {
    m.seconds = last_good->seconds;
    m.sampled_at = last_good->sampled_at;
    used = "using the last good value " + seconds_text(last_good->seconds) + " measured at " +
           core::format_rfc3339(last_good->sampled_at) + " (" +
           age_text(now - last_good->sampled_at) + ")";
  } else {
    m.seconds = spec.propagation.static_seconds;
    m.sampled_at = now;
    used = "using staticSeconds " + seconds_text(m.seconds) +
           (last_good ? " (the last good value is from " +
                            core::format_rfc3339(last_good->sampled_at) + ", older than 1h)"
                      : " (no good value in the last hour)");
  }
  if (floor && floor->seconds > m.seconds) {
    used += ", raised to " + seconds_text(floor->seconds) + " " + floor->text;
    m.seconds = floor->seconds;
    m.consumer = floor->consumer;
    if (floor->measured) m.sampled_at = now;
  }
  m.message = why + "; " + used;
  return m;
}

}  // namespace detail

namespace {

using detail::fall_back;
using detail::seconds_text;

}  // namespace

std::expected<double, QueryError> parse_query_response(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    std::string start{body.substr(0, 100)};
    return std::unexpected(error(
        "BadResponse", "not a Prometheus API response: " + (start.empty() ? "empty body" : start)));
  }
  const std::string status = string_member(j, "status");
  if (status == "error") {
    std::string type = string_member(j, "errorType");
    std::string text = string_member(j, "error");
    if (text.empty()) text = "no error text";
    return std::unexpected(error("QueryFailed", type.empty() ? text : type + ": " + text));
  }
  if (status != "success") {
    return std::unexpected(error("BadResponse", "response status is \"" + status.substr(0, 50) +
                                                    "\", not success or error"));
  }
  auto data = j.find("data");
  if (data == j.end() || !data->is_object()) {
    return std::unexpected(error("BadResponse", "response has no data object"));
  }
  const std::string type = string_member(*data, "resultType");
  auto result = data->find("result");
  if (result == data->end()) return std::unexpected(error("BadResponse", "response has no result"));
  if (type == "scalar") return pair_value(*result);
  if (type == "vector") {
    if (!result->is_array()) {
      return std::unexpected(error("BadResponse", "vector result is not an array"));
    }
    if (result->empty()) {
      return std::unexpected(error("EmptyResult", "the query returned no series"));
    }
    if (result->size() > 1) {
      return std::unexpected(error("NotScalar", "the query returned " +
                                                    std::to_string(result->size()) +
                                                    " series, expected one (aggregate it, e.g. "
                                                    "max(...) or sum by (le))"));
    }
    const json& sample = (*result)[0];
    if (!sample.is_object())
      return std::unexpected(error("BadResponse", "sample is not an object"));
    if (auto v = sample.find("value"); v != sample.end()) return pair_value(*v);
    if (sample.contains("histogram")) {
      return std::unexpected(
          error("NotScalar", "the query returned a native histogram, not a number"));
    }
    return std::unexpected(error("BadResponse", "sample has no value"));
  }
  if (type == "matrix" || type == "string") {
    return std::unexpected(error("NotScalar", "the query returned a " + type +
                                                  (type == "matrix" ? " (a range vector)" : "") +
                                                  ", expected a scalar or one series"));
  }
  return std::unexpected(error("BadResponse", "unknown resultType \"" + type.substr(0, 50) + "\""));
}

Measurement combine(const budget::PolicySpec& spec, const QueryResults& results,
                    const std::optional<LastGood>& last_good, Clock::time_point now) {
  if (results.empty()) {
    return fall_back(spec, "NoQueries", "the policy has no Prometheus queries", last_good, now);
  }
  std::optional<double> best;  // max of the successful queries
  std::string slowest;         // its query's name (the first of equals)
  std::string figures;         // "kube-proxy 3.2s, ingress 1.1s"
  std::string failures;        // "query "x": Reason: message; ..."
  std::string first_reason;
  for (const auto& [name, result] : results) {
    if (result) {
      if (!best || *result > *best) {
        best = *result;
        slowest = name;
      }
      if (!figures.empty()) figures += ", ";
      figures += name + " " + seconds_text(*result);
    } else {
      if (first_reason.empty()) first_reason = result.error().reason;
      if (!failures.empty()) failures += "; ";
      failures +=
          "query \"" + name + "\": " + result.error().reason + ": " + result.error().message;
    }
  }
  if (!first_reason.empty()) {
    std::optional<detail::Floor> floor;
    if (best) {
      floor = detail::Floor{.seconds = *best,
                            .text = "by the queries that did answer (they are a lower bound)",
                            .measured = true};
    }
    return fall_back(spec, first_reason, failures, last_good, now, floor);
  }
  Measurement m;
  m.seconds = *best;
  m.source = budget::to_string(spec.propagation.source);
  m.consumer = slowest;
  m.metrics_available = true;
  m.reason = "QuerySucceeded";
  m.message = results.size() == 1 ? figures
                                  : figures + "; the slowest consumer wins: " + seconds_text(*best);
  m.sampled_at = now;
  m.fallback = false;
  m.last_good = LastGood{.seconds = *best, .sampled_at = now};
  return m;
}

boost::asio::awaitable<Measurement> measure(const budget::PolicySpec& spec, Prometheus* prometheus,
                                            std::optional<LastGood> last_good,
                                            Clock::time_point now) {
  using budget::PropagationSource;
  switch (spec.propagation.source) {
    case PropagationSource::Static: {
      Measurement m;
      m.seconds = spec.propagation.static_seconds;
      m.source = budget::to_string(spec.propagation.source);
      m.metrics_available = true;
      m.reason = "StaticSource";
      m.message = "staticSeconds " + seconds_text(m.seconds);
      m.sampled_at = now;
      m.last_good = last_good;
      co_return m;
    }
    case PropagationSource::Observed:
      // The samples are the operator's (observed.h); here there are none.
      co_return observed_measurement(spec, Window{}, last_good, now);
    case PropagationSource::Prometheus:
      break;
  }
  if (prometheus == nullptr) {
    co_return fall_back(spec, "PrometheusNotConfigured",
                        "the operator has no Prometheus URL (--prometheus-url)", last_good, now);
  }
  QueryResults results;
  bool unreachable = false;
  for (const auto& q : spec.propagation.prometheus_queries) {
    std::expected<double, QueryError> r;
    if (unreachable) {
      r = std::unexpected(error("Unreachable", "not sent: Prometheus was unreachable"));
    } else {
      std::string promql = q.query;
      try {
        r = co_await prometheus->query(std::move(promql));
      } catch (const std::exception& e) {  // an implementation that throws: a value here
        r = std::unexpected(error("BadResponse", std::string{"query failed: "} + e.what()));
      }
      unreachable = !r && r.error().reason == "Unreachable";
    }
    results.emplace_back(q.name, std::move(r));
  }
  co_return combine(spec, results, last_good, now);
}

}  // namespace gracekeeper::propagation
