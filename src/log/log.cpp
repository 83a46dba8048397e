#include "gracekeeper/log/log.h"

#include <fmt/chrono.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <nlohmann/json.hpp>

namespace gracekeeper::log {
namespace {

bool json_format = true;

spdlog::logger& logger() {
  // stderr, unsynchronised: everything logs from the io_context thread.
  static auto instance = [] {
    auto l = std::make_shared<spdlog::logger>("gracekeeper",
                                              std::make_shared<spdlog::sinks::stderr_sink_st>());
    l->set_pattern("%v");  // the line is formatted below, so both formats agree
    l->flush_on(spdlog::level::trace);
    return l;
  }();
  return *instance;
}

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::Debug:
      return spdlog::level::debug;
    case Level::Info:
      return spdlog::level::info;
    case Level::Warn:
      return spdlog::level::warn;
    case Level::Error:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

std::string_view name(Level level) {
  switch (level) {
    case Level::Debug:
      return "debug";
    case Level::Info:
      return "info";
    case Level::Warn:
      return "warn";
    case Level::Error:
      return "error";
  }
  return "info";
}

std::string timestamp() {
  const auto now = std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", now);
}

// Text values with spaces or quotes are quoted, as logfmt does.
std::string text_value(const std::string& v) {
  if (!v.empty() && v.find_first_of(" \"=\t\n") == std::string::npos) return v;
  return nlohmann::json(v).dump();
}

}  // namespace

bool configure(std::string_view format, std::string_view level) {
  if (format != "json" && format != "text") return false;
  json_format = format == "json";
  if (level == "debug") {
    logger().set_level(spdlog::level::debug);
  } else if (level == "info") {
    logger().set_level(spdlog::level::info);
  } else if (level == "warn") {
    logger().set_level(spdlog::level::warn);
  } else if (level == "error") {
    logger().set_level(spdlog::level::err);
  } else {
    return false;
  }
  return true;
}

void write(Level level, std::string_view message, std::initializer_list<Field> fields) {
  if (!logger().should_log(to_spdlog(level))) return;
  std::string line;
  if (json_format) {
    nlohmann::ordered_json j{{"ts", timestamp()}, {"level", name(level)}, {"msg", message}};
    for (const auto& [k, v] : fields) j[std::string(k)] = v;
    line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    line = timestamp() + " " + std::string(name(level)) + " " + std::string(message);
    for (const auto& [k, v] : fields) line += " " + std::string(k) + "=" + text_value(v);
  }
  logger().log(to_spdlog(level), line);
}

}  // namespace gracekeeper::log
