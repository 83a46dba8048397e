// Command-line inputs: files, directories of manifests, and standard input.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "gracekeeper/manifest/document.h"

namespace gracekeeper::manifest {
namespace {

namespace fs = std::filesystem;

// "No such file or directory" reads oddly after "FILE: "; lower-case it.
std::string reason(const std::error_code& ec) {
  std::string text = ec.message();
  if (!text.empty() && std::isupper(static_cast<unsigned char>(text[0])) &&
      (text.size() < 2 || !std::isupper(static_cast<unsigned char>(text[1])))) {
    text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  }
  return text;
}

Error error_for(std::string name, std::string message) {
  return Error{Position{std::move(name)}, std::move(message)};
}

bool is_manifest_name(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".yaml" || ext == ".yml" || ext == ".json";
}

bool is_hidden(const fs::path& path) {
  std::string name = path.filename().string();
  return name.size() > 1 && name[0] == '.' && name != "..";
}

std::expected<void, Error> walk_directory(const std::string& arg, std::vector<Source>& out) {
  std::error_code ec;
  std::vector<fs::path> found;
  fs::recursive_directory_iterator it(arg, fs::directory_options::none, ec);
  if (ec) return std::unexpected(error_for(arg, reason(ec)));
  for (const fs::recursive_directory_iterator end; it != end;) {
    fs::path path = it->path();
    // A broken symlink is neither a file nor a directory: skipped, not an error.
    std::error_code type_error;
    if (is_hidden(path)) {
      // Hidden entries are editor backups, VCS metadata (.git) and the like.
      if (it->is_directory(type_error)) it.disable_recursion_pending();
    } else if (it->is_regular_file(type_error) && is_manifest_name(path)) {
      found.push_back(path);
    }
    // Fails when a subdirectory (this entry) cannot be opened.
    it.increment(ec);
    if (ec) return std::unexpected(error_for(path.string(), reason(ec)));
  }
  if (found.empty()) {
    return std::unexpected(
        error_for(arg, "no manifests (*.yaml, *.yml, *.json) in this directory"));
  }
  // path's ordering compares element by element, so a directory's files stay
  // together ("a/b.yaml" before "a-c.yaml"), as in a listing.
  std::sort(found.begin(), found.end());
  for (fs::path& path : found) {
    std::string name = path.string();
    out.push_back(Source{std::move(name), std::move(path)});
  }
  return {};
}

// Reads at most `limit` bytes plus one, so that an oversized input is noticed
// without being held in memory.
template <typename ReadChunk>
std::expected<std::string, Error> read_bounded(const std::string& name, std::size_t limit,
                                               ReadChunk read_chunk) {
  std::string text;
  constexpr std::size_t chunk = 1u << 16;
  while (true) {
    std::size_t before = text.size();
    text.resize(before + chunk);
    auto got = read_chunk(text.data() + before, chunk);
    if (!got) return std::unexpected(error_for(name, std::move(got).error()));
    text.resize(before + *got);
    if (text.size() > limit) {
      return std::unexpected(
          error_for(name, fmt::format("input is larger than the limit of {} bytes", limit)));
    }
    if (*got == 0) break;
  }
  text.shrink_to_fit();
  return text;
}

}  // namespace

std::expected<std::vector<Source>, Error> expand_inputs(const std::vector<std::string>& args) {
  std::vector<Source> sources;
  for (const std::string& arg : args) {
    if (arg == "-") {
      sources.push_back(Source{"-", {}});
      continue;
    }
    std::error_code ec;
    fs::file_status status = fs::status(arg, ec);
    if (ec || !fs::exists(status)) {
      if (!ec || ec == std::errc::no_such_file_or_directory) {
        return std::unexpected(error_for(arg, "no such file or directory"));
      }
      return std::unexpected(error_for(arg, reason(ec)));
    }
    if (fs::is_directory(status)) {
      if (auto walked = walk_directory(arg, sources); !walked) {
        return std::unexpected(std::move(walked).error());
      }
      continue;
    }
    sources.push_back(Source{arg, fs::path(arg)});
  }
  return sources;
}

std::expected<std::string, Error> read_source(const Source& source, std::istream& stdin_stream,
                                              const Limits& limits) {
  using Chunk = std::expected<std::size_t, std::string>;
  if (source.path.empty()) {
    return read_bounded(source.name, limits.max_input_bytes, [&](char* data, std::size_t size) {
      stdin_stream.read(data, static_cast<std::streamsize>(size));
      if (stdin_stream.bad()) return Chunk(std::unexpected("cannot read standard input"));
      return Chunk(static_cast<std::size_t>(stdin_stream.gcount()));
    });
  }
  // stdio rather than ifstream: it reports why (errno) an open or read failed.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(source.path.c_str(), "rb"),
                                                       &std::fclose);
  if (!file) {
    return std::unexpected(error_for(
        source.name, fmt::format("cannot read: {}", reason({errno, std::generic_category()}))));
  }
  return read_bounded(source.name, limits.max_input_bytes, [&](char* data, std::size_t size) {
    std::size_t got = std::fread(data, 1, size, file.get());
    if (got == 0 && std::ferror(file.get())) {
      return Chunk(std::unexpected(
          fmt::format("cannot read: {}", reason({errno, std::generic_category()}))));
    }
    return Chunk(got);
  });
}

}  // namespace gracekeeper::manifest
