// Structured logs (spdlog): one JSON object per line, or `key=value` text.
// Fields are passed as pairs so both formats show the same data.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace gracekeeper::controller::log {

enum class Level { debug, info, warn, error };

using Field = std::pair<std::string_view, std::string>;

// Sets the format ("json" or "text") and the minimum level; false names nothing valid.
bool configure(std::string_view format, std::string_view level);

void write(Level, std::string_view message, std::initializer_list<Field> fields = {});
inline void debug(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::debug, m, f);
}
inline void info(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::info, m, f);
}
inline void warn(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::warn, m, f);
}
inline void error(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::error, m, f);
}

}  // namespace gracekeeper::controller::log
