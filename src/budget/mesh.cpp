#include "gracekeeper/budget/mesh.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "gracekeeper/budget/deployment.h"
#include "gracekeeper/budget/engine.h"  // describe
#include "gracekeeper/manifest/document.h"

namespace gracekeeper::budget {
namespace {

// Istio's default terminationDrainDuration and MINIMUM_DRAIN_DURATION.
constexpr std::int64_t kIstioDefaultDrainMs = 5000;
// A day: longer is no drain, and sums stay far from overflow.
constexpr std::int64_t kMaxDurationMs = 86'400'000;

// Istio's shutdown settings, each from the first place that sets it: the
// proxy's environment, PROXY_CONFIG, the pod's annotation, the default.
struct IstioShutdown {
  std::optional<std::int64_t> termination_drain_ms;
  std::string termination_drain_from;
  std::optional<bool> exit_on_zero;
  std::string exit_on_zero_from;
  std::optional<std::int64_t> minimum_drain_ms;
  std::string minimum_drain_from;
};

// strconv.ParseBool, which the Istio agent reads its variables with.
std::optional<bool> parse_go_bool(std::string_view text) {
  for (std::string_view t : {"1", "t", "T", "TRUE", "true", "True"})
    if (text == t) return true;
  for (std::string_view f : {"0", "f", "F", "FALSE", "false", "False"})
    if (text == f) return false;
  return std::nullopt;
}

std::string seconds_text(std::int64_t ms) {
  if (ms % 1000 == 0) return fmt::format("{}s", ms / 1000);
  return fmt::format("{}ms", ms);
}

std::expected<void, std::string> set_exit_on_zero(IstioShutdown& out, const std::string& text,
                                                  std::string_view from) {
  if (out.exit_on_zero) return {};
  auto value = parse_go_bool(text);
  if (!value) {
    return std::unexpected(
        fmt::format("{} {}: expected true or false, got \"{}\"", from, kIstioExitOnZeroEnv, text));
  }
  out.exit_on_zero = *value;
  out.exit_on_zero_from = from;
  return {};
}

std::expected<void, std::string> set_minimum_drain(IstioShutdown& out, const std::string& text,
                                                   std::string_view from) {
  if (out.minimum_drain_ms) return {};
  auto value = parse_duration_ms(text);
  if (!value) {
    return std::unexpected(fmt::format("{} {}: expected a duration such as \"5s\", got \"{}\"",
                                       from, kIstioMinimumDrainEnv, text));
  }
  out.minimum_drain_ms = *value;
  out.minimum_drain_from = from;
  return {};
}

// The shutdown fields of a decoded ProxyConfig (PROXY_CONFIG, the annotation).
std::expected<void, std::string> read_proxy_config(const Json& config, std::string_view from,
                                                   IstioShutdown& out) {
  if (config.is_null()) return {};
  if (!config.is_object()) {
    return std::unexpected(fmt::format("{}: expected a ProxyConfig (a mapping), got {}", from,
                                       describe_value(config)));
  }
  if (auto it = config.find("terminationDrainDuration");
      it != config.end() && !out.termination_drain_ms) {
    auto ms = it->is_string() ? parse_duration_ms(it->get_ref<const std::string&>()) : std::nullopt;
    if (!ms) {
      return std::unexpected(
          fmt::format("{}: terminationDrainDuration: expected a duration such as \"30s\", got {}",
                      from, describe_value(*it)));
    }
    out.termination_drain_ms = *ms;
    out.termination_drain_from = from;
  }
  auto metadata = config.find("proxyMetadata");
  if (metadata == config.end() || metadata->is_null()) return {};
  if (!metadata->is_object()) {
    return std::unexpected(fmt::format("{}: proxyMetadata: expected a mapping, got {}", from,
                                       describe_value(*metadata)));
  }
  for (const auto& [name, value] : metadata->items()) {
    if (name != kIstioExitOnZeroEnv && name != kIstioMinimumDrainEnv) continue;
    if (!value.is_string()) {
      return std::unexpected(fmt::format("{}: proxyMetadata.{}: expected a string, got {}", from,
                                         name, describe_value(value)));
    }
    const auto& text = value.get_ref<const std::string&>();
    auto read = name == kIstioExitOnZeroEnv ? set_exit_on_zero(out, text, from)
                                            : set_minimum_drain(out, text, from);
    if (!read) return read;
  }
  return {};
}

// The annotation's value: ProxyConfig as YAML (or JSON, which is YAML too).
std::expected<Json, std::string> decode_annotation(const std::string& text) {
  const std::string from = fmt::format("annotation {}", kIstioProxyConfig);
  auto documents = manifest::read_text(text, from);
  if (!documents) return std::unexpected(documents.error().format());
  if (documents->empty()) return Json();
  if (documents->size() > 1) {
    return std::unexpected(from + ": expected one ProxyConfig, got several YAML documents");
  }
  return std::move(documents->front().value);
}

// The proxy's environment: its two variables, then PROXY_CONFIG.
std::expected<void, std::string> read_proxy_env(const Container& proxy, IstioShutdown& out) {
  const std::string env_from = fmt::format("{}'s env", proxy.name);
  if (auto it = proxy.proxy_env.find(kIstioExitOnZeroEnv); it != proxy.proxy_env.end()) {
    if (auto read = set_exit_on_zero(out, it->second, env_from); !read) return read;
  }
  if (auto it = proxy.proxy_env.find(kIstioMinimumDrainEnv); it != proxy.proxy_env.end()) {
    if (auto read = set_minimum_drain(out, it->second, env_from); !read) return read;
  }
  auto it = proxy.proxy_env.find(kIstioProxyConfigEnv);
  if (it == proxy.proxy_env.end()) return {};
  const Json config = Json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) {
    return std::unexpected(
        fmt::format("{} {}: expected ProxyConfig as JSON", env_from, kIstioProxyConfigEnv));
  }
  return read_proxy_config(config, env_from + " " + kIstioProxyConfigEnv, out);
}

std::expected<void, std::string> read_annotation(
    const std::map<std::string, std::string>& pod_annotations, IstioShutdown& out) {
  auto it = pod_annotations.find(kIstioProxyConfig);
  if (it == pod_annotations.end()) return {};
  auto config = decode_annotation(it->second);
  if (!config) return std::unexpected(config.error());
  return read_proxy_config(*config, kIstioProxyConfig, out);
}

std::expected<IstioShutdown, std::string> istio_shutdown(
    const Container& proxy, const std::map<std::string, std::string>& pod_annotations,
    Precedence precedence) {
  IstioShutdown out;
  const bool planned = precedence == Precedence::AsPlanned;
  if (auto read = planned ? read_annotation(pod_annotations, out) : read_proxy_env(proxy, out);
      !read) {
    return std::unexpected(read.error());
  }
  if (auto read = planned ? read_proxy_env(proxy, out) : read_annotation(pod_annotations, out);
      !read) {
    return std::unexpected(read.error());
  }
  return out;
}

// The proxy's own preStop wait, in milliseconds (0 without a hook).
std::expected<std::int64_t, std::string> hook_wait_ms(const Container& proxy) {
  if (proxy.pre_stop.kind == PreStopHook::Kind::None) return 0;
  if (proxy.pre_stop.wait_ms) return *proxy.pre_stop.wait_ms;
  return std::unexpected(
      fmt::format("{}'s preStop hook ({}) waits for a length gracekeeper "
                  "cannot know",
                  proxy.name, describe(proxy.pre_stop)));
}

std::expected<ProxyStay, std::string> istio_stay(
    const Container& proxy, const std::map<std::string, std::string>& pod_annotations,
    Precedence precedence) {
  auto hook = hook_wait_ms(proxy);
  if (!hook) return std::unexpected(hook.error());
  auto shutdown = istio_shutdown(proxy, pod_annotations, precedence);
  if (!shutdown) return std::unexpected(shutdown.error());
  const auto figure = [](std::optional<std::int64_t> ms, const std::string& from) {
    return fmt::format("{} ({})", seconds_text(ms.value_or(kIstioDefaultDrainMs)),
                       ms ? from : "Istio's default");
  };
  const std::int64_t drain = shutdown->termination_drain_ms.value_or(kIstioDefaultDrainMs);
  ProxyStay stay;
  stay.mesh = Mesh::Istio;
  const std::string hook_part =
      *hook > 0 ? fmt::format("its preStop wait {} and ", seconds_text(*hook)) : "";
  if (shutdown->exit_on_zero.value_or(false)) {
    const std::int64_t minimum = shutdown->minimum_drain_ms.value_or(kIstioDefaultDrainMs);
    stay.serves_ms = *hook + minimum;
    stay.follows_connections_until_ms = *hook + std::max(drain, minimum);
    stay.drain_after_app_ms = minimum;
    stay.source = fmt::format(
        "{}{} {} ({}), then while connections are open, up to terminationDrainDuration {}",
        hook_part, kIstioMinimumDrainEnv,
        figure(shutdown->minimum_drain_ms, shutdown->minimum_drain_from), kIstioExitOnZeroEnv,
        figure(shutdown->termination_drain_ms, shutdown->termination_drain_from));
  } else {
    stay.serves_ms = *hook + drain;
    stay.drain_after_app_ms = drain;
    stay.source =
        fmt::format("{}terminationDrainDuration {}", hook_part,
                    figure(shutdown->termination_drain_ms, shutdown->termination_drain_from));
  }
  return stay;
}

// linkerd-proxy stops taking connections at SIGTERM: its stay is its preStop
// wait, which the injector writes from the annotation (as it runs: the
// hook; as planned, or on a template without one: the annotation).
std::expected<ProxyStay, std::string> linkerd_stay(
    const Container& proxy, const std::map<std::string, std::string>& pod_annotations,
    Precedence precedence) {
  auto hook = hook_wait_ms(proxy);
  if (!hook) return std::unexpected(hook.error());
  ProxyStay stay;
  stay.mesh = Mesh::Linkerd;
  stay.serves_ms = *hook;
  stay.source =
      *hook > 0 ? fmt::format("its preStop wait {}", seconds_text(*hook)) : "no wait before exit";
  auto it = pod_annotations.find(kLinkerdWaitBeforeExit);
  const bool hooked = proxy.pre_stop.kind != PreStopHook::Kind::None;
  if (it == pod_annotations.end() || (hooked && precedence == Precedence::AsRuns)) return stay;
  std::int64_t seconds = -1;
  const std::string& text = it->second;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (ec != std::errc() || end != text.data() + text.size() || seconds < 0 ||
      seconds > kMaxDurationMs / 1000) {
    return std::unexpected(
        fmt::format("annotation {}: expected a whole number of seconds, got "
                    "\"{}\"",
                    kLinkerdWaitBeforeExit, text));
  }
  stay.serves_ms = seconds * 1000;
  stay.source = fmt::format("{} {}", kLinkerdWaitBeforeExit, seconds);
  return stay;
}

}  // namespace

std::string to_string(Mesh mesh) {
  return mesh == Mesh::Istio ? "Istio" : "Linkerd";
}

std::optional<Mesh> proxy_mesh(std::string_view container_name) {
  if (container_name == "istio-proxy") return Mesh::Istio;
  if (container_name == "linkerd-proxy") return Mesh::Linkerd;
  return std::nullopt;
}

bool is_mesh_annotation(std::string_view name) {
  return name == kIstioProxyConfig || name == kLinkerdWaitBeforeExit;
}

bool is_proxy_env(std::string_view name) {
  return name == kIstioProxyConfigEnv || name == kIstioExitOnZeroEnv ||
         name == kIstioMinimumDrainEnv;
}

std::expected<ProxyStay, std::string> proxy_stay(
    const Container& proxy, Mesh mesh, const std::map<std::string, std::string>& pod_annotations,
    Precedence precedence) {
  return mesh == Mesh::Istio ? istio_stay(proxy, pod_annotations, precedence)
                             : linkerd_stay(proxy, pod_annotations, precedence);
}

const char* mesh_annotation(Mesh mesh) {
  return mesh == Mesh::Istio ? kIstioProxyConfig : kLinkerdWaitBeforeExit;
}

std::string annotation_field(std::string_view name) {
  return fmt::format("annotations[{}]", name);
}

std::expected<std::string, std::string> handed_budget(
    const Container& proxy, Mesh mesh, const std::map<std::string, std::string>& pod_annotations,
    std::int64_t wait_seconds, std::int64_t stay_seconds) {
  if (mesh == Mesh::Linkerd) {
    auto stay = linkerd_stay(proxy, pod_annotations, Precedence::AsPlanned);
    if (!stay) return std::unexpected(stay.error());
    return std::to_string(std::max(seconds_covering(stay->serves_ms), stay_seconds));
  }
  auto shutdown = istio_shutdown(proxy, pod_annotations, Precedence::AsPlanned);
  if (!shutdown) return std::unexpected(shutdown.error());
  Json config = Json::object();
  if (auto it = pod_annotations.find(kIstioProxyConfig); it != pod_annotations.end()) {
    auto decoded = decode_annotation(it->second);
    if (!decoded) return std::unexpected(decoded.error());
    if (decoded->is_object()) config = std::move(*decoded);
  }
  const std::int64_t drain = shutdown->termination_drain_ms.value_or(kIstioDefaultDrainMs);
  if (drain < stay_seconds * 1000) {
    config["terminationDrainDuration"] = fmt::format("{}s", stay_seconds);
  }
  // Turned off in the annotation itself: the user's choice, a fixed drain.
  if (shutdown->exit_on_zero == false && shutdown->exit_on_zero_from == kIstioProxyConfig) {
    return config.dump();
  }
  if (!shutdown->exit_on_zero.value_or(false)) {
    config["proxyMetadata"][kIstioExitOnZeroEnv] = "true";
  }
  const std::int64_t minimum = shutdown->minimum_drain_ms.value_or(kIstioDefaultDrainMs);
  if (minimum < wait_seconds * 1000) {
    config["proxyMetadata"][kIstioMinimumDrainEnv] = fmt::format("{}s", wait_seconds);
  }
  return config.dump();
}

std::string proxy_advice(Mesh mesh, std::int64_t wait_seconds, std::int64_t stay_seconds) {
  if (mesh == Mesh::Linkerd) {
    return fmt::format("{}: \"{}\"", kLinkerdWaitBeforeExit, stay_seconds);
  }
  const Json config{
      {"terminationDrainDuration", fmt::format("{}s", stay_seconds)},
      {"proxyMetadata", Json{{kIstioExitOnZeroEnv, "true"},
                             {kIstioMinimumDrainEnv, fmt::format("{}s", wait_seconds)}}}};
  return fmt::format("{}: '{}'", kIstioProxyConfig, config.dump());
}

std::optional<std::int64_t> parse_duration_ms(std::string_view text) {
  if (text == "0") return 0;
  if (text.empty()) return std::nullopt;
  double total_ms = 0;
  while (!text.empty()) {
    std::size_t digits = 0;
    while (digits < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
      ++digits;
    }
    double value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + digits, value);
    if (digits == 0 || ec != std::errc() || end != text.data() + digits) return std::nullopt;
    text.remove_prefix(digits);
    std::size_t unit_length = 0;
    while (unit_length < text.size() && std::isalpha(static_cast<unsigned char>(text[unit_length])))
      ++unit_length;
    const std::string_view unit = text.substr(0, unit_length);
    text.remove_prefix(unit_length);
    double scale = 0;
    if (unit == "h") {
      scale = 3'600'000;
    } else if (unit == "m") {
      scale = 60'000;
    } else if (unit == "s") {
      scale = 1000;
    } else if (unit == "ms") {
      scale = 1;
    } else if (unit == "us") {
      scale = 1e-3;
    } else if (unit == "ns") {
      scale = 1e-6;
    } else {
      return std::nullopt;
    }
    total_ms += value * scale;
    if (total_ms > static_cast<double>(kMaxDurationMs)) return kMaxDurationMs;
  }
  return static_cast<std::int64_t>(std::floor(total_ms));
}

}  // namespace gracekeeper::budget
