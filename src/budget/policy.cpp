// ShutdownPolicy parsing and validation.
//
// In the cluster the CRD schema rejects most bad input, but `plan` and `check`
// read manifests that never met an API server, and the operator cannot assume
// the installed CRD is the current one. So every bound is checked here too, with
// the same numbers as the CRD (the constants below), and every problem is
// reported at once, each with the path of its field.
#include "gracekeeper/budget/policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <utility>

namespace gracekeeper::budget {
namespace {

// Inclusive bounds of an integer field.
struct IntRange {
  std::int64_t min;
  std::int64_t max;
};

// Bounds of a number field; both ends inclusive unless `exclusive`.
struct NumberRange {
  double min;
  double max;
  bool exclusive = false;
};

// Bounds, shared with the CRD schema: keep the two in step.
constexpr NumberRange kStaticSecondsRange{0, 3600};
constexpr NumberRange kQuantileRange{0, 1, /*exclusive=*/true};
constexpr NumberRange kSafetyFactorRange{1, 10};
constexpr IntRange kHealthCheckIntervalSecondsRange{1, 3600};
constexpr IntRange kUnhealthyThresholdRange{1, 100};
constexpr IntRange kWindowSecondsRange{60, 86400};
constexpr IntRange kMinSamplesRange{1, 10000};
constexpr NumberRange kConsumerSyncSecondsRange{0, 3600};
constexpr std::size_t kMaxConsumers = 16;
constexpr std::size_t kMaxConsumerNameLength = 63;
constexpr IntRange kMinSecondsRange{0, 3600};
constexpr IntRange kMaxSecondsRange{1, 3600};
constexpr IntRange kDrainSecondsRange{0, 86400};
constexpr IntRange kDrainWindowSecondsRange{60, 604800};
constexpr IntRange kDrainMaxSecondsRange{1, 86400};  // within kDrainSecondsRange
constexpr IntRange kSidecarDrainSecondsRange{0, 3600};
constexpr IntRange kReserveSecondsRange{0, 3600};
constexpr IntRange kMinIntervalSecondsRange{0, 604800};
constexpr IntRange kDecreaseThresholdSecondsRange{0, 3600};
// maxSurge is never 0: gracekeeper sets maxUnavailable to 0, and a rollout that may
// neither add nor remove a pod cannot make progress. A count is bounded by what the
// Deployment's IntOrString holds (int32).
constexpr IntRange kMaxSurgeCountRange{1, std::numeric_limits<std::int32_t>::max()};
constexpr IntRange kMaxSurgePercentRange{1, 100};

// The longest grace period a valid policy can produce is
// maxSeconds + drainSeconds + sidecarDrainSeconds + reserveSeconds = 97200 s (27 h):
// far inside int32 (terminationGracePeriodSeconds is int64 in the API, and the engine
// adds these as int), so the budget arithmetic cannot overflow for any valid policy.
constexpr std::int64_t kLongestGraceSeconds = kMaxSecondsRange.max + kDrainSecondsRange.max +
                                              kSidecarDrainSecondsRange.max +
                                              kReserveSecondsRange.max;
static_assert(kLongestGraceSeconds <= std::numeric_limits<std::int32_t>::max());
// Likewise the external load balancer delay, interval * threshold, is at most 360000 s.
static_assert(kHealthCheckIntervalSecondsRange.max * kUnhealthyThresholdRange.max <=
              std::numeric_limits<std::int32_t>::max());

// Enum spellings, one table per enum: to_string and the parser both read it, so the
// names accepted and the names printed cannot drift apart.
template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

constexpr std::array kModeNames{
    EnumName<Mode>{Mode::Enforce, "Enforce"},
    EnumName<Mode>{Mode::DryRun, "DryRun"},
};
constexpr std::array kSourceNames{
    EnumName<PropagationSource>{PropagationSource::Static, "Static"},
    EnumName<PropagationSource>{PropagationSource::Prometheus, "Prometheus"},
    EnumName<PropagationSource>{PropagationSource::Observed, "Observed"},
};
constexpr std::array kDrainSourceNames{
    EnumName<DrainSource>{DrainSource::Static, "Static"},
    EnumName<DrainSource>{DrainSource::Observed, "Observed"},
};
constexpr std::array kActionNames{
    EnumName<PreStopAction>{PreStopAction::Auto, "Auto"},
    EnumName<PreStopAction>{PreStopAction::Sleep, "Sleep"},
    EnumName<PreStopAction>{PreStopAction::Exec, "Exec"},
};
constexpr std::array kExistingNames{
    EnumName<ExistingHook>{ExistingHook::Keep, "Keep"},
    EnumName<ExistingHook>{ExistingHook::Replace, "Replace"},
};
constexpr std::array kWithoutServiceNames{
    EnumName<WithoutService>{WithoutService::Skip, "Skip"},
    EnumName<WithoutService>{WithoutService::Wait, "Wait"},
};
using Operator = LabelSelector::Operator;
constexpr std::array kOperatorNames{
    EnumName<Operator>{Operator::In, "In"},
    EnumName<Operator>{Operator::NotIn, "NotIn"},
    EnumName<Operator>{Operator::Exists, "Exists"},
    EnumName<Operator>{Operator::DoesNotExist, "DoesNotExist"},
};

template <typename E, std::size_t N>
std::string_view name_of(const std::array<EnumName<E>, N>& names, E value) {
  for (const auto& entry : names) {
    if (entry.value == value) return entry.name;
  }
  return "Unknown";  // only for a value cast into the enum from outside its range
}

template <typename E, std::size_t N>
std::string list_names(const std::array<EnumName<E>, N>& names) {
  std::string out;
  for (const auto& entry : names) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

// A user's string in a message: quoted, escaped, and cut short so a pasted
// document cannot flood a condition message or an event.
std::string quote(std::string_view text) {
  constexpr std::size_t max_shown = 64;
  std::string shown(text.substr(0, max_shown));
  if (text.size() > max_shown) shown += "...";
  // `replace`: input from YAML may hold invalid UTF-8 and must not throw here.
  return Json(shown).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string number_text(const Json& value) {
  // fmt prints doubles in their shortest exact form (1.5, 4000, 1e+30).
  if (value.is_number_float()) return fmt::format("{}", value.get<double>());
  return value.dump();
}

// What a JSON value is, for "expected X, got Y".
std::string describe(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return value.get<bool>() ? "boolean true" : "boolean false";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "number " + number_text(value);
    case Json::value_t::string:
      return "string " + quote(value.get_ref<const std::string&>());
    default:
      return value.type_name();  // object, array, binary
  }
}

std::string type_error(std::string_view expected, const Json& value) {
  return fmt::format("expected {}, got {}", expected, describe(value));
}

std::string child_path(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  return fmt::format("{}.{}", parent, key);
}

std::string index_path(std::string_view parent, std::size_t index) {
  return fmt::format("{}[{}]", parent, index);
}

// Map keys are written like Kubernetes' field.Path.Key: label keys contain dots.
std::string key_path(std::string_view parent, std::string_view key) {
  return fmt::format("{}[{}]", parent, key);
}

// The integer a JSON number holds, if it holds one: JSON integers and floats that
// are exact integers (YAML `5.0`, or encoders that write every number as a double).
// Values beyond int64 come back clamped, so a range check still rejects them.
std::optional<std::int64_t> integer_of(const Json& value) {
  constexpr double two_to_63 = 9223372036854775808.0;
  constexpr auto int64_max = std::numeric_limits<std::int64_t>::max();
  constexpr auto int64_min = std::numeric_limits<std::int64_t>::min();
  // is_number_integer() is also true for unsigned numbers, so ask for those first.
  if (value.is_number_unsigned()) {
    const auto number = value.get<std::uint64_t>();
    return number > static_cast<std::uint64_t>(int64_max) ? int64_max
                                                          : static_cast<std::int64_t>(number);
  }
  if (value.is_number_integer()) return value.get<std::int64_t>();
  if (!value.is_number_float()) return std::nullopt;
  const double number = value.get<double>();
  if (!std::isfinite(number) || std::trunc(number) != number) return std::nullopt;
  if (number >= two_to_63) return int64_max;
  if (number < -two_to_63) return int64_min;
  return static_cast<std::int64_t>(number);
}

std::optional<std::int64_t> read_integer(const Json& value, const std::string& path, IntRange range,
                                         FieldErrors& errors) {
  const std::optional<std::int64_t> number = integer_of(value);
  if (!number) {
    errors.push_back({path, type_error("an integer", value)});
    return std::nullopt;
  }
  if (*number < range.min || *number > range.max) {
    errors.push_back({path, fmt::format("must be between {} and {} (got {})", range.min, range.max,
                                        number_text(value))});
    return std::nullopt;
  }
  return number;
}

std::optional<double> read_number(const Json& value, const std::string& path, NumberRange range,
                                  FieldErrors& errors) {
  if (!value.is_number()) {
    errors.push_back({path, type_error("a number", value)});
    return std::nullopt;
  }
  const double number = value.get<double>();
  // Written so that NaN (possible only in programmatically built JSON) fails too.
  const bool in_range = range.exclusive ? (number > range.min && number < range.max)
                                        : (number >= range.min && number <= range.max);
  if (!in_range) {
    const std::string bounds = range.exclusive
                                   ? fmt::format("must be > {} and < {}", range.min, range.max)
                                   : fmt::format("must be between {} and {}", range.min, range.max);
    errors.push_back({path, fmt::format("{} (got {})", bounds, number_text(value))});
    return std::nullopt;
  }
  return number;
}

std::optional<std::string> read_string(const Json& value, const std::string& path,
                                       FieldErrors& errors) {
  if (!value.is_string()) {
    errors.push_back({path, type_error("a string", value)});
    return std::nullopt;
  }
  return value.get<std::string>();
}

bool is_blank(std::string_view text) {
  return text.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// Reads the fields of one JSON object at `path` into typed values, appending every
// problem to a shared error list. Each read names its key; a key that was never read
// is an unknown field (finish()), which is how typos are caught.
//
// An absent object and JSON null read as an empty object, so every field keeps its
// default; likewise a null field reads as absent (the API server prunes nulls before
// defaulting). When the value is not an object at all, that one error is reported and
// reads of its fields report nothing more, so a mistake is not repeated per field.
//
// The read(key, field, ...) functions leave `field` untouched when the key is absent:
// the caller passes a field holding its default. They return false when they recorded
// an error.
class ObjectReader {
 public:
  ObjectReader(const Json* value, std::string path, FieldErrors& errors)
      : path_(std::move(path)), errors_(errors) {
    if (value == nullptr || value->is_null()) return;
    if (!value->is_object()) {
      fail(path_, type_error("an object", *value));
      broken_ = true;
      return;
    }
    object_ = value;
  }

  // True when the object was given (not absent, not null, not of the wrong type).
  bool present() const { return object_ != nullptr; }
  std::string path_of(std::string_view key) const { return child_path(path_, key); }
  FieldErrors& errors() { return errors_; }
  void fail(std::string path, std::string message) {
    errors_.push_back({std::move(path), std::move(message)});
  }

  // The value of `key`, or nullptr when it is absent or null. Marks `key` as known.
  const Json* field(std::string_view key) {
    known_.emplace(key);
    if (object_ == nullptr) return nullptr;
    const auto it = object_->find(std::string(key));
    if (it == object_->end() || it->is_null()) return nullptr;
    return &*it;
  }

  bool read(std::string_view key, int& out, IntRange range) {
    const Json* value = field(key);
    if (value == nullptr) return true;
    const auto number = read_integer(*value, path_of(key), range, errors_);
    // Every IntRange above lies within int, so the cast is exact.
    if (number) out = static_cast<int>(*number);
    return number.has_value();
  }

  bool read(std::string_view key, double& out, NumberRange range) {
    const Json* value = field(key);
    if (value == nullptr) return true;
    const auto number = read_number(*value, path_of(key), range, errors_);
    if (number) out = *number;
    return number.has_value();
  }

  bool read(std::string_view key, bool& out) {
    const Json* value = field(key);
    if (value == nullptr) return true;
    if (!value->is_boolean()) {
      fail(path_of(key), type_error("a boolean", *value));
      return false;
    }
    out = value->get<bool>();
    return true;
  }

  bool read(std::string_view key, std::string& out) {
    const Json* value = field(key);
    if (value == nullptr) return true;
    auto text = read_string(*value, path_of(key), errors_);
    if (text) out = std::move(*text);
    return text.has_value();
  }

  // A string that must be given and not blank (names, queries, label keys).
  bool read_non_empty(std::string_view key, std::string& out) {
    const Json* value = field(key);
    if (broken_) return true;
    if (value == nullptr) {
      fail(path_of(key), "must not be empty");
      return false;
    }
    if (!read(key, out)) return false;
    if (is_blank(out)) {
      fail(path_of(key), "must not be empty");
      return false;
    }
    return true;
  }

  enum class Presence { Optional, Required };

  template <typename E, std::size_t N>
  bool read(std::string_view key, E& out, const std::array<EnumName<E>, N>& names,
            Presence presence = Presence::Optional) {
    const Json* value = field(key);
    if (value == nullptr) {
      if (presence == Presence::Optional || broken_) return true;
      fail(path_of(key), fmt::format("required: one of {}", list_names(names)));
      return false;
    }
    if (!value->is_string()) {
      fail(path_of(key),
           type_error(fmt::format("a string (one of {})", list_names(names)), *value));
      return false;
    }
    const auto& text = value->get_ref<const std::string&>();
    // Case-sensitive, as Kubernetes enums are: "dryrun" is a typo, not a synonym.
    const auto match = std::find_if(names.begin(), names.end(),
                                    [&](const EnumName<E>& entry) { return entry.name == text; });
    if (match == names.end()) {
      fail(path_of(key), fmt::format("must be one of {} (got {})", list_names(names), quote(text)));
      return false;
    }
    out = match->value;
    return true;
  }

  // A nested object with fixed fields.
  ObjectReader object(std::string_view key) { return {field(key), path_of(key), errors_}; }

  // An array, or nullptr when absent, null or (reported) of another type.
  const Json* array(std::string_view key) { return typed(key, &Json::is_array, "an array"); }

  // An object whose keys are data rather than field names (matchLabels).
  const Json* map(std::string_view key) { return typed(key, &Json::is_object, "an object"); }

  // Reports every key of the object that no read asked for.
  void finish() {
    if (object_ == nullptr) return;
    for (const auto& [key, value] : object_->items()) {
      if (!known_.contains(key)) fail(path_of(key), "unknown field");
    }
  }

 private:
  const Json* typed(std::string_view key, bool (Json::*is_type)() const noexcept,
                    std::string_view expected) {
    const Json* value = field(key);
    if (value == nullptr) return nullptr;
    if (!(value->*is_type)()) {
      fail(path_of(key), type_error(expected, *value));
      return nullptr;
    }
    return value;
  }

  const Json* object_ = nullptr;
  bool broken_ = false;
  std::string path_;
  FieldErrors& errors_;
  std::set<std::string, std::less<>> known_;
};

LabelSelector::Requirement parse_requirement(ObjectReader reader) {
  LabelSelector::Requirement requirement;
  reader.read_non_empty("key", requirement.key);
  const bool operator_ok =
      reader.read("operator", requirement.op, kOperatorNames, ObjectReader::Presence::Required);
  std::size_t values_given = 0;
  if (const Json* values = reader.array("values")) {
    values_given = values->size();
    for (std::size_t i = 0; i < values->size(); ++i) {
      const std::string path = index_path(reader.path_of("values"), i);
      if (auto value = read_string((*values)[i], path, reader.errors())) {
        requirement.values.push_back(std::move(*value));
      }
    }
  }
  if (operator_ok && reader.present()) {
    const std::string_view op = name_of(kOperatorNames, requirement.op);
    const bool needs_values = requirement.op == Operator::In || requirement.op == Operator::NotIn;
    if (needs_values && values_given == 0) {
      reader.fail(reader.path_of("values"),
                  fmt::format("must not be empty when operator is {}", op));
    } else if (!needs_values && values_given > 0) {
      reader.fail(reader.path_of("values"), fmt::format("must be empty when operator is {}", op));
    }
  }
  reader.finish();
  return requirement;
}

LabelSelector parse_selector(ObjectReader reader) {
  LabelSelector selector;
  if (const Json* labels = reader.map("matchLabels")) {
    const std::string labels_path = reader.path_of("matchLabels");
    for (const auto& [key, value] : labels->items()) {
      if (key.empty()) reader.fail(labels_path, "label keys must not be empty");
      if (auto text = read_string(value, key_path(labels_path, key), reader.errors())) {
        selector.match_labels[key] = std::move(*text);
      }
    }
  }
  if (const Json* expressions = reader.array("matchExpressions")) {
    const std::string expressions_path = reader.path_of("matchExpressions");
    for (std::size_t i = 0; i < expressions->size(); ++i) {
      selector.match_expressions.push_back(parse_requirement(
          {&(*expressions)[i], index_path(expressions_path, i), reader.errors()}));
    }
  }
  reader.finish();
  return selector;
}

std::vector<PrometheusQuery> parse_prometheus_queries(ObjectReader reader) {
  std::vector<PrometheusQuery> queries;
  const Json* list = reader.array("queries");
  reader.finish();
  if (list == nullptr) return queries;
  const std::string list_path = reader.path_of("queries");
  // The name identifies a query in status and metrics, so two queries cannot share one.
  std::map<std::string, std::size_t, std::less<>> first_index_by_name;
  for (std::size_t i = 0; i < list->size(); ++i) {
    ObjectReader item(&(*list)[i], index_path(list_path, i), reader.errors());
    PrometheusQuery query;
    const bool name_ok = item.read_non_empty("name", query.name);
    item.read_non_empty("query", query.query);
    item.finish();
    if (name_ok && item.present()) {
      const auto [first, inserted] = first_index_by_name.emplace(query.name, i);
      if (!inserted) {
        item.fail(item.path_of("name"), fmt::format("duplicate name {} (also queries[{}])",
                                                    quote(query.name), first->second));
      }
    }
    // Kept even when invalid: the count tells "no queries" apart from "bad queries".
    queries.push_back(std::move(query));
  }
  return queries;
}

std::optional<ExternalLoadBalancer> parse_external_load_balancer(ObjectReader reader) {
  ExternalLoadBalancer balancer;
  reader.read("healthCheckIntervalSeconds", balancer.health_check_interval_seconds,
              kHealthCheckIntervalSecondsRange);
  reader.read("unhealthyThreshold", balancer.unhealthy_threshold, kUnhealthyThresholdRange);
  reader.finish();
  // `externalLoadBalancer: {}` means "there is one, with the default rhythm".
  if (!reader.present()) return std::nullopt;
  return balancer;
}

// observed.consumers: each named once, not kube-proxy (consumerSyncSeconds is
// its allowance), with a syncSeconds.
std::vector<DeclaredConsumer> parse_consumers(ObjectReader& reader) {
  std::vector<DeclaredConsumer> consumers;
  const Json* list = reader.array("consumers");
  if (list == nullptr) return consumers;
  const std::string list_path = reader.path_of("consumers");
  if (list->size() > kMaxConsumers) {
    reader.fail(list_path,
                fmt::format("at most {} consumers (got {})", kMaxConsumers, list->size()));
    return consumers;
  }
  std::map<std::string, std::size_t, std::less<>> first_index_by_name;
  for (std::size_t i = 0; i < list->size(); ++i) {
    ObjectReader item(&(*list)[i], index_path(list_path, i), reader.errors());
    DeclaredConsumer consumer;
    const bool name_ok = item.read_non_empty("name", consumer.name);
    if (item.field("syncSeconds") == nullptr && item.present()) {
      item.fail(item.path_of("syncSeconds"), "required: seconds from 0 to 3600");
    }
    item.read("syncSeconds", consumer.sync_seconds, kConsumerSyncSecondsRange);
    item.finish();
    if (!name_ok || !item.present()) continue;
    if (consumer.name.size() > kMaxConsumerNameLength) {
      item.fail(item.path_of("name"), fmt::format("at most {} characters (got {})",
                                                  kMaxConsumerNameLength, consumer.name.size()));
    } else if (consumer.name == kServiceConsumer) {
      item.fail(item.path_of("name"),
                "kube-proxy's allowance is observed.consumerSyncSeconds; name another consumer");
    } else if (const auto [first, inserted] = first_index_by_name.emplace(consumer.name, i);
               !inserted) {
      item.fail(item.path_of("name"), fmt::format("duplicate name {} (also consumers[{}])",
                                                  quote(consumer.name), first->second));
    }
    consumers.push_back(std::move(consumer));
  }
  return consumers;
}

ObservedSource parse_observed(ObjectReader reader) {
  ObservedSource observed;
  reader.read("windowSeconds", observed.window_seconds, kWindowSecondsRange);
  reader.read("minSamples", observed.min_samples, kMinSamplesRange);
  reader.read("consumerSyncSeconds", observed.consumer_sync_seconds, kConsumerSyncSecondsRange);
  observed.consumers = parse_consumers(reader);
  reader.finish();
  return observed;
}

PolicySpec::Propagation parse_propagation(ObjectReader reader) {
  PolicySpec::Propagation propagation;
  reader.read("source", propagation.source, kSourceNames);
  reader.read("staticSeconds", propagation.static_seconds, kStaticSecondsRange);
  reader.read("quantile", propagation.quantile, kQuantileRange);
  ObjectReader prometheus = reader.object("prometheus");
  const std::string queries_path = prometheus.path_of("queries");
  propagation.prometheus_queries = parse_prometheus_queries(std::move(prometheus));
  reader.read("safetyFactor", propagation.safety_factor, kSafetyFactorRange);
  propagation.external_load_balancer =
      parse_external_load_balancer(reader.object("externalLoadBalancer"));
  propagation.observed = parse_observed(reader.object("observed"));
  reader.finish();
  // Queries are allowed with the other sources (kept ready for a switch), but the
  // Prometheus source with none would silently fall back to staticSeconds forever.
  if (propagation.source == PropagationSource::Prometheus &&
      propagation.prometheus_queries.empty()) {
    reader.fail(queries_path, "at least one query is required when source is Prometheus");
  }
  return propagation;
}

PolicySpec::Drain parse_drain(ObjectReader reader) {
  PolicySpec::Drain drain;
  reader.read("source", drain.source, kDrainSourceNames);
  reader.read("quantile", drain.quantile, kQuantileRange);
  reader.read("minSamples", drain.min_samples, kMinSamplesRange);
  reader.read("windowSeconds", drain.window_seconds, kDrainWindowSecondsRange);
  reader.read("maxSeconds", drain.max_seconds, kDrainMaxSecondsRange);
  reader.finish();
  return drain;
}

PolicySpec::PreStop parse_pre_stop(ObjectReader reader) {
  PolicySpec::PreStop pre_stop;
  const bool min_ok = reader.read("minSeconds", pre_stop.min_seconds, kMinSecondsRange);
  const bool max_ok = reader.read("maxSeconds", pre_stop.max_seconds, kMaxSecondsRange);
  reader.read("action", pre_stop.action, kActionNames);
  reader.read("existing", pre_stop.existing, kExistingNames);
  reader.read("withoutService", pre_stop.without_service, kWithoutServiceNames);
  if (min_ok && max_ok && pre_stop.min_seconds > pre_stop.max_seconds) {
    // Blame the field the user wrote: `maxSeconds: 3` alone conflicts with the
    // default minSeconds, and an error on a field they never set would puzzle them.
    if (reader.field("minSeconds") == nullptr) {
      reader.fail(reader.path_of("maxSeconds"),
                  fmt::format("must be >= minSeconds (got {} < {}, the default minSeconds)",
                              pre_stop.max_seconds, pre_stop.min_seconds));
    } else {
      reader.fail(reader.path_of("minSeconds"),
                  fmt::format("must be <= maxSeconds (got {} > {})", pre_stop.min_seconds,
                              pre_stop.max_seconds));
    }
  }
  reader.finish();
  return pre_stop;
}

// An integer >= 1 or a percentage from "1%" to "100%"; `why` ends the
// message of a zero (" because maxUnavailable is 0").
std::optional<IntOrPercent> parse_positive_int_or_percent(const Json& value,
                                                          const std::string& path,
                                                          FieldErrors& errors,
                                                          std::string_view why) {
  constexpr std::string_view expected_text = "an integer or a percentage string like \"25%\"";
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    // Same shape as Kubernetes' IsValidPercent: digits, then '%'.
    const std::string_view digits = std::string_view(text).substr(0, text.size() - 1);
    const bool well_formed =
        text.size() >= 2 && text.back() == '%' &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!well_formed) {
      errors.push_back({path, fmt::format("expected {}, got {}", expected_text, describe(value))});
      return std::nullopt;
    }
    std::int64_t percent = 0;
    const auto [end, error] =
        std::from_chars(digits.data(), digits.data() + digits.size(), percent);
    if (error == std::errc() && percent == 0) {
      errors.push_back({path, fmt::format("must be at least 1%{} (got {})", why, quote(text))});
      return std::nullopt;
    }
    if (error != std::errc() || percent < kMaxSurgePercentRange.min ||
        percent > kMaxSurgePercentRange.max) {
      errors.push_back(
          {path, fmt::format("must be a percentage between {}% and {}% (got {})",
                             kMaxSurgePercentRange.min, kMaxSurgePercentRange.max, quote(text))});
      return std::nullopt;
    }
    return IntOrPercent{percent, true};
  }
  const std::optional<std::int64_t> count = integer_of(value);
  if (!count) {
    errors.push_back({path, fmt::format("expected {}, got {}", expected_text, describe(value))});
    return std::nullopt;
  }
  if (*count < kMaxSurgeCountRange.min) {
    errors.push_back({path, fmt::format("must be >= 1{} (got {})", why, number_text(value))});
    return std::nullopt;
  }
  if (*count > kMaxSurgeCountRange.max) {
    errors.push_back(
        {path, fmt::format("must be <= {} (got {})", kMaxSurgeCountRange.max, number_text(value))});
    return std::nullopt;
  }
  return IntOrPercent{*count, false};
}

PolicySpec::Rollout parse_rollout(ObjectReader reader) {
  PolicySpec::Rollout rollout;
  reader.read("manage", rollout.manage);
  // Validated even with `manage: false`: turning management on later must not
  // suddenly surface an old mistake.
  if (const Json* max_surge = reader.field("maxSurge")) {
    if (auto parsed =
            parse_positive_int_or_percent(*max_surge, reader.path_of("maxSurge"), reader.errors(),
                                          " because maxUnavailable is 0")) {
      rollout.max_surge = *parsed;
    }
  }
  reader.finish();
  return rollout;
}

PolicySpec::Changes parse_changes(ObjectReader reader) {
  PolicySpec::Changes changes;
  reader.read("minIntervalSeconds", changes.min_interval_seconds, kMinIntervalSecondsRange);
  reader.read("decreaseThresholdSeconds", changes.decrease_threshold_seconds,
              kDecreaseThresholdSecondsRange);
  if (const Json* limit = reader.field("maxConcurrentRollouts")) {
    if (auto parsed = parse_positive_int_or_percent(*limit, reader.path_of("maxConcurrentRollouts"),
                                                    reader.errors(), "")) {
      changes.max_concurrent_rollouts = *parsed;
    }
  }
  reader.finish();
  return changes;
}

// apiVersion and kind: a fixed string.
void read_constant(ObjectReader& reader, std::string_view key, std::string_view expected) {
  const Json* value = reader.field(key);
  if (value != nullptr && value->is_string() && value->get_ref<const std::string&>() == expected) {
    return;
  }
  const std::string got = value == nullptr ? "missing" : "got " + describe(*value);
  reader.fail(reader.path_of(key), fmt::format("must be {} ({})", quote(expected), got));
}

}  // namespace

std::string to_string(Mode mode) {
  return std::string(name_of(kModeNames, mode));
}
std::string to_string(PropagationSource source) {
  return std::string(name_of(kSourceNames, source));
}
std::string to_string(DrainSource source) {
  return std::string(name_of(kDrainSourceNames, source));
}
std::string to_string(PreStopAction action) {
  return std::string(name_of(kActionNames, action));
}
std::string to_string(ExistingHook existing) {
  return std::string(name_of(kExistingNames, existing));
}

DeclaredConsumer ObservedSource::slowest_consumer() const {
  DeclaredConsumer slowest{std::string(kServiceConsumer), consumer_sync_seconds};
  for (const auto& consumer : consumers) {
    if (consumer.sync_seconds > slowest.sync_seconds) slowest = consumer;
  }
  return slowest;
}

bool LabelSelector::matches(const std::map<std::string, std::string>& labels) const {
  for (const auto& [key, value] : match_labels) {
    const auto it = labels.find(key);
    if (it == labels.end() || it->second != value) return false;
  }
  for (const auto& requirement : match_expressions) {
    const auto it = labels.find(requirement.key);
    const bool has_key = it != labels.end();
    const bool value_listed =
        has_key && std::find(requirement.values.begin(), requirement.values.end(), it->second) !=
                       requirement.values.end();
    bool satisfied = false;
    switch (requirement.op) {
      case Operator::In:
        satisfied = value_listed;
        break;
      case Operator::NotIn:
        satisfied = !value_listed;  // an absent key is "not in", as in Kubernetes
        break;
      case Operator::Exists:
        satisfied = has_key;
        break;
      case Operator::DoesNotExist:
        satisfied = !has_key;
        break;
    }
    if (!satisfied) return false;
  }
  return true;
}

std::expected<PolicySpec, FieldErrors> parse_policy_spec(const Json& spec) {
  FieldErrors errors;
  ObjectReader reader(&spec, "spec", errors);
  PolicySpec parsed;
  reader.read("mode", parsed.mode, kModeNames);
  parsed.selector = parse_selector(reader.object("selector"));
  parsed.propagation = parse_propagation(reader.object("propagation"));
  parsed.pre_stop = parse_pre_stop(reader.object("preStop"));
  reader.read("drainSeconds", parsed.drain_seconds, kDrainSecondsRange);
  parsed.drain = parse_drain(reader.object("drain"));
  reader.read("sidecarDrainSeconds", parsed.sidecar_drain_seconds, kSidecarDrainSecondsRange);
  reader.read("reserveSeconds", parsed.reserve_seconds, kReserveSecondsRange);
  parsed.rollout = parse_rollout(reader.object("rollout"));
  parsed.changes = parse_changes(reader.object("changes"));
  reader.finish();
  if (!errors.empty()) return std::unexpected(std::move(errors));
  return parsed;
}

std::expected<Policy, FieldErrors> parse_policy(const Json& object) {
  if (!object.is_object()) {
    return std::unexpected(FieldErrors{{"", type_error("a ShutdownPolicy object", object)}});
  }
  FieldErrors errors;
  ObjectReader reader(&object, "", errors);
  read_constant(reader, "apiVersion", kApiVersion);
  read_constant(reader, "kind", kPolicyKind);

  Policy policy;
  // Only name and namespace are ours to check; the rest of metadata (labels, uid,
  // managedFields, ...) belongs to the API server, so metadata is not finish()ed.
  ObjectReader metadata = reader.object("metadata");
  metadata.read_non_empty("name", policy.name);
  metadata.read("namespace", policy.namespace_);

  reader.field("status");  // written by the operator; present on objects read back
  const Json* spec = reader.field("spec");
  auto parsed_spec = parse_policy_spec(spec == nullptr ? Json() : *spec);
  if (parsed_spec) {
    policy.spec = std::move(*parsed_spec);
  } else {
    errors.insert(errors.end(), parsed_spec.error().begin(), parsed_spec.error().end());
  }
  reader.finish();
  if (!errors.empty()) return std::unexpected(std::move(errors));
  return policy;
}

bool is_policy(const Json& object) {
  if (!object.is_object()) return false;
  const auto api_version = object.find("apiVersion");
  const auto kind = object.find("kind");
  if (api_version == object.end() || kind == object.end()) return false;
  if (!api_version->is_string() || !kind->is_string()) return false;
  // Any version of our group counts, so that a policy of another version is
  // reported by parse_policy instead of being taken for an unrelated document.
  const auto& version = api_version->get_ref<const std::string&>();
  return version.starts_with(std::string(kApiGroup) + "/") &&
         kind->get_ref<const std::string&>() == kPolicyKind;
}

}  // namespace gracekeeper::budget
