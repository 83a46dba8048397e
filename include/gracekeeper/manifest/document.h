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
#include <optional>
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

// A List as the reader tells one, whose items it reads one by one: `kind:
// List` or a typed list (DeploymentList), with a string apiVersion.
bool is_list_object(const Json& value);

struct Document {
  Json value;
  Position position;  // where the document's content starts
  int index = 0;      // 0-based document number within its source
  // The text it was read from, kept (shared, not copied) so that `locate` can
  // find the line of a field when an error about it is reported.
  std::shared_ptr<const std::string> source;
  // Read with ListItems::OneByOne, an item of a List document's `items`
  // comes as a document of its own, as soon as it is read: this is its
  // index there (`index` is the List's). The List itself comes after its
  // items, with `items` empty.
  std::optional<std::size_t> item;
  // The document had a top-level `items` sequence handed out item by item,
  // but is not a List (its kind or apiVersion says otherwise): it comes
  // whole, and the items handed out for it were not objects of their own.
  bool items_recalled = false;
};

// How for_each_document hands out a List (`kind: List` or `kind: FooList`,
// with a string apiVersion, as `kubectl get -o yaml` writes it).
enum class ListItems {
  Whole,     // one document, items and all
  OneByOne,  // each item of its top-level `items` on its own, then the List:
             // memory bounded by the largest item, not the List
};

struct Limits {
  std::size_t max_input_bytes = 256u << 20;  // one file or stdin
  int max_depth = 100;                       // nesting of mappings/sequences
  // One outermost flow collection (`[...]`, `{...}`) read by yaml-cpp, in
  // bytes: yaml-cpp holds every token of one until it closes (~16x the
  // text). The API server refuses a request body over 3 MiB, so no object
  // this large can be applied. Text the JSON path reads (a file that is one
  // strict JSON object) is not limited.
  std::size_t max_flow_bytes = 3u << 20;
  // Nodes that aliases may add over the whole input (every document of a
  // text, and every text read with the same ReadBudget), counted at every
  // use. Nodes written out in the text are bounded by max_input_bytes
  // already. 256 Ki nodes cost about 30 MB decoded; real manifests reuse a
  // few env or label blocks and stay far below.
  std::size_t max_alias_nodes = 1u << 18;
  // Text that aliases may repeat over the whole input (a large anchored
  // string used many times), likewise.
  std::size_t max_alias_bytes = 32u << 20;
};

// What several reads have spent of the limits that hold over a whole input.
struct ReadBudget {
  std::size_t alias_nodes = 0;
  std::size_t alias_bytes = 0;
};

// Reads every document of `text`. Empty documents (a lone `---`, comments
// only) are skipped. Tags other than the YAML core schema are rejected. Scalars are
// resolved like Kubernetes' YAML decoder (YAML 1.1-ish core: plain `123` is an
// integer, `true`/`false` booleans, `null`/`~`/empty null, quoted is always a string).
std::expected<std::vector<Document>, Error> read_text(std::string text, std::string_view name,
                                                      const Limits& = {}, ReadBudget* = nullptr);

// Calls `sink` for each document as soon as it is read (bounded memory for
// large inputs). Stops at the first reading error, or when sink returns false.
using DocumentSink = std::function<bool(Document&&)>;
// With a budget, alias expansion is counted against it and it is updated, so
// that the limit holds over several texts (all the files of one command).
// Never throws: running out of memory is an error like any other.
std::expected<void, Error> for_each_document(std::string text, std::string_view name,
                                             const DocumentSink& sink, const Limits& = {},
                                             ReadBudget* = nullptr, ListItems = ListItems::Whole);
// The same over text that is already shared (the documents keep it).
std::expected<void, Error> for_each_document(std::shared_ptr<const std::string> text,
                                             std::string_view name, const DocumentSink& sink,
                                             const Limits& = {}, ReadBudget* = nullptr,
                                             ListItems = ListItems::Whole);

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

// The positions of the first `count` items of the sequence at `path`, from
// one parse (locating each item on its own would re-read the document per
// item: quadratic on a List of thousands). Missing items get the position of
// the deepest existing ancestor.
std::vector<Position> locate_items(const Document&, const std::vector<std::string>& path,
                                   std::size_t count);

// Parses a dotted field path as used in FieldError ("spec.containers[1].name")
// into segments for `locate`.
std::vector<std::string> split_field_path(std::string_view dotted);

}  // namespace gracekeeper::manifest
