// Kubernetes manifests as decoded documents that remember where they came from.
// Reading is bounded: an alias bomb, a deeply nested document or a huge file
// fails fast with an error naming the file and line, never exhausts memory.
#pragma once

#include <cstddef>
#include <expected>
#include <filesystem>
#include <functional>
#include <istream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace gracekeeper::manifest {

using Json = nlohmann::ordered_json;

// Where something is: 1-based line and column; line 0 when unknown.
struct Position {
  std::string file;  // "-" for standard input
  int line = 0;
  int column = 0;
  // "file:line:column", "file:line" or "file"
  std::string format() const;
};

// A reading error: `file:line:column: message`.
struct Error {
  Position position;
  std::string message;
  std::string format() const;
};

struct Document {
  Json value;
  Position position;  // where the document's content starts
  int index = 0;      // 0-based document number within its source
  // The text it was read from, kept (shared, not copied) so that `locate` can
  // find the line of a field when an error about it is reported.
  std::shared_ptr<const std::string> source;
};

struct Limits {
  std::size_t max_input_bytes = 256u << 20;  // one file or stdin
  int max_depth = 100;                       // nesting of mappings/sequences
  // Nodes that aliases may add to a single document, counted at every use.
  // Nodes written out in the text are bounded by max_input_bytes already, and
  // a `kubectl get -o yaml` List of thousands of objects is one document.
  std::size_t max_nodes_per_document = 1u << 20;
};

// Reads every document of `text`. Empty documents (a lone `---`, comments
// only) are skipped. Tags other than the YAML core schema are rejected. Scalars are
// resolved like Kubernetes' YAML decoder (YAML 1.1-ish core: plain `123` is an
// integer, `true`/`false` booleans, `null`/`~`/empty null, quoted is always a string).
std::expected<std::vector<Document>, Error> read_text(std::string text, std::string_view name,
                                                      const Limits& = {});

// Calls `sink` for each document as soon as it is read (bounded memory for
// large inputs). Stops at the first reading error, or when sink returns false.
using DocumentSink = std::function<bool(Document&&)>;
std::expected<void, Error> for_each_document(std::string text, std::string_view name,
                                             const DocumentSink& sink, const Limits& = {});

// Expands command-line inputs: "-" is standard input, a directory is walked
// recursively for *.yaml, *.yml and *.json in sorted order, a file is itself.
// A missing path, an unreadable file or a directory with no manifests is an error.
struct Source {
  std::string name;            // as it should appear in messages
  std::filesystem::path path;  // empty for stdin
};
std::expected<std::vector<Source>, Error> expand_inputs(const std::vector<std::string>& args);

// Reads a source whole (stdin included), bounded by limits.max_input_bytes.
std::expected<std::string, Error> read_source(const Source&, std::istream& stdin_stream,
                                              const Limits& = {});

// The position of a field inside a document, by path segments ("spec",
// "template", "spec", "containers", "0", "name"). Falls back to the deepest
// existing ancestor, then to the document's own position.
Position locate(const Document&, const std::vector<std::string>& path);

// Parses a dotted field path as used in FieldError ("spec.containers[1].name")
// into segments for `locate`.
std::vector<std::string> split_field_path(std::string_view dotted);

}  // namespace gracekeeper::manifest
