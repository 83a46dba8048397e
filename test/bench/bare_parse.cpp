// bench_bare_parse: the floor for `gracekeeper check` on a large manifest file.
//
//   bench_bare_parse FILE            read FILE, YAML::LoadAll on the string
//   bench_bare_parse --events FILE   read FILE, YAML::Parser with a no-op
//                                    EventHandler over the text in memory
//                                    (yaml-cpp's scanner and parser alone, no
//                                    node tree, no second copy of the text)
//
// Prints one line: mode, documents, bytes, and the seconds spent reading and
// parsing (the benchmark script times the whole process as well, so process
// start-up and teardown are counted the same way as for gracekeeper).
// Exit 0 on success, 2 on unreadable or malformed input.

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

namespace {

class NullHandler final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override { ++events; }
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { ++events; }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string& value) override {
    ++events;
    bytes += value.size();
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    ++events;
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    ++events;
  }
  void OnMapEnd() override {}

  unsigned long long events = 0;
  unsigned long long bytes = 0;
};

// A read-only stream over text already in memory, without the copy that
// std::istringstream makes (gracekeeper's reader streams the same way).
class MemoryBuf final : public std::streambuf {
 public:
  explicit MemoryBuf(const std::string& text) {
    char* begin = const_cast<char*>(text.data());
    setg(begin, begin, begin + text.size());
  }
};

// Reads the whole file into `out` with one allocation of its exact size.
bool ReadFile(const char* path, std::string& out) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return false;
  const std::streamoff size = in.tellg();
  if (size < 0) return false;
  out.resize(static_cast<std::size_t>(size));
  in.seekg(0);
  return static_cast<bool>(in.read(out.data(), size));
}

int Usage() {
  std::fprintf(stderr, "usage: bench_bare_parse [--events] FILE\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool events = false;
  const char* path = nullptr;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--events") {
      events = true;
    } else if (arg == "-h" || arg == "--help") {
      Usage();
      return 0;
    } else if (!path && !arg.starts_with("-")) {
      path = argv[i];
    } else {
      return Usage();
    }
  }
  if (!path) return Usage();

  const auto start = std::chrono::steady_clock::now();
  std::string text;
  if (!ReadFile(path, text)) {
    std::fprintf(stderr, "bench_bare_parse: cannot read %s\n", path);
    return 2;
  }
  unsigned long long documents = 0;
  unsigned long long node_events = 0;
  try {
    if (events) {
      MemoryBuf buf(text);
      std::istream in(&buf);
      YAML::Parser parser(in);
      NullHandler handler;
      while (parser.HandleNextDocument(handler)) ++documents;
      node_events = handler.events;
    } else {
      const std::vector<YAML::Node> docs = YAML::LoadAll(text);
      documents = docs.size();
    }
  } catch (const YAML::Exception& e) {
    std::fprintf(stderr, "bench_bare_parse: %s: %s\n", path, e.what());
    return 2;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("mode=%s documents=%llu bytes=%zu", events ? "events" : "loadall", documents,
              text.size());
  if (events) std::printf(" events=%llu", node_events);
  std::printf(" seconds=%.3f\n", seconds);
  return 0;
}
