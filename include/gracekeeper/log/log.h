// Structured logs (spdlog): one JSON object per line, or `key=value` text.
// Fields are passed as pairs so both formats show the same data.
//
// The one logger of the program, at the bottom of the module graph: http,
// kube, propagation, server and controller all write through it, so every
// line on stderr is one record in the configured format.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace gracekeeper::log {

enum class Level { Debug, Info, Warn, Error };

using Field = std::pair<std::string_view, std::string>;

// Sets the format ("json" or "text") and the minimum level; false names nothing valid.
bool configure(std::string_view format, std::string_view level);

void write(Level, std::string_view message, std::initializer_list<Field> fields = {});
inline void debug(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::Debug, m, f);
}
inline void info(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::Info, m, f);
}
inline void warn(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::Warn, m, f);
}
inline void error(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::Error, m, f);
}

}  // namespace gracekeeper::log

// Until src/controller/log.h (a forwarder) goes: controller code names it
// controller::log.
namespace gracekeeper::controller {
namespace log = gracekeeper::log;
}
