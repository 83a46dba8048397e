// Glue between yaml-cpp and the module's types; private to src/manifest.
#pragma once

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>

#include <istream>
#include <streambuf>
#include <string>
#include <string_view>

#include "gracekeeper/manifest/document.h"

namespace gracekeeper::manifest::detail {

// An istream over text that is already in memory: yaml-cpp reads through a
// std::istream, and an istringstream would copy the whole input once more.
class MemoryStream final : public std::istream {
 public:
  explicit MemoryStream(std::string_view text) : std::istream(nullptr), buffer_(text) {
    rdbuf(&buffer_);
  }

 private:
  class Buffer final : public std::streambuf {
   public:
    explicit Buffer(std::string_view text) {
      // The get area is only read: nothing here writes through this pointer.
      char* begin = const_cast<char*>(text.data());
      setg(begin, begin, begin + text.size());
    }
  };
  Buffer buffer_;
};

// yaml-cpp marks are 0-based; ours are 1-based with 0 meaning unknown.
inline Position position_at(std::string_view file, const YAML::Mark& mark) {
  Position p{std::string(file), 0, 0};
  if (!mark.is_null() && mark.line >= 0) {
    p.line = mark.line + 1;
    p.column = mark.column + 1;
  }
  return p;
}

// Rewrites yaml-cpp's terse messages ("end of map not found") as what the
// reader expected to see, which is what a user can act on.
std::string describe_yaml_error(const YAML::Exception& e, int max_depth);

// Ignores every event: for parsing past documents nobody reads.
class SkipEvents final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace gracekeeper::manifest::detail
