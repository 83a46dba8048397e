// The offline front door of the budget engine: manifests in, planned
// manifests or findings out, the way `plan` and `check` use it (the command
// line and its output are cli's). Loading and planning are load.cpp; the
// second pass, which writes the planned manifests, is second_pass.cpp.
#pragma once

#include <chrono>
#include <deque>
#include <expected>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gracekeeper/budget/engine.h"
#include "gracekeeper/manifest/document.h"
#include "gracekeeper/offline/options.h"

namespace gracekeeper::offline {

// Everything that makes input unusable (exit 2), each naming file and line.
using InputErrors = std::vector<std::string>;

// Where an object is: which input, which document in it, and the path of
// `items` indices through (possibly nested) Lists; empty for the document itself.
struct ObjectAddress {
  std::size_t source = 0;  // index into Loaded::sources
  int document = 0;        // manifest::Document::index
  std::vector<std::size_t> items;
};

// One Deployment and what the engine decided for it.
struct Evaluated {
  manifest::Position position;
  ObjectAddress address;
  budget::Deployment deployment;
  std::string policy_name;  // "ns/name", or "(defaults)"
  budget::Plan plan;
  bool applied = false;  // plan.changed() and the policy is not DryRun
};

// An input as read, kept for `plan`'s second pass (the text is shared with
// the documents read from it, not copied).
struct SourceText {
  std::string name;
  std::filesystem::path path;  // empty for stdin
  std::shared_ptr<const std::string> text;
};

struct Loaded {
  std::vector<SourceText> sources;     // every input (texts only with keep_sources)
  std::size_t document_count = 0;      // documents read, over every input
  std::vector<Evaluated> deployments;  // the selected Deployments (without a sink)
  std::size_t skipped = 0;             // Deployments not opted in
  std::vector<std::string> notes;      // stderr notes (policy fallbacks, ...)
};

// Reads every input, then plans each selected Deployment. Decoded documents
// are dropped as soon as they are evaluated (bounded memory on large inputs);
// with keep_sources the texts stay, for `plan` to edit.
//
// With a sink, each evaluated Deployment goes to the sink as soon as it is
// planned instead of into Loaded::deployments, so `check` never holds every
// plan and finding at once. The sink only runs once the whole input has been
// read without errors: exit 2 still means nothing was printed.
using EvaluatedSink = std::function<void(Evaluated&&)>;
std::expected<Loaded, InputErrors> load_and_evaluate(const Options& options,
                                                     std::istream& stdin_stream, bool keep_sources,
                                                     const EvaluatedSink& sink = {});

// A planned change, kept for the second pass without the projection.
struct PlannedChange {
  ObjectAddress address;
  std::string policy_name;
  budget::Plan plan;
};

// The planned changes of one input, in document order: kept for every
// changed Deployment until the second pass, and dropped there as each is
// applied. A deque: a vector would hold up to twice their room, and a copy
// of them all as it grows.
using Planned = std::deque<PlannedChange>;

// -o json: every document, planned, as one JSON value (a List when several),
// written as it is produced rather than built whole. `changes` (by input)
// are dropped as they are applied.
void write_json(const Loaded& loaded, std::vector<Planned>& changes,
                std::chrono::system_clock::time_point now, std::ostream& out);

// The YAML output of plan: each input with its edits applied, written to
// `out`, or as a diff, or back to its file (in_place). Every edited file is
// read back before anything is written: when one does not read, no file is
// written, nothing goes to `out`, and the error names the input. Returns
// the documents that could not be edited in place and were written out
// whole ("file:line").
std::expected<std::vector<std::string>, std::string> write_edited(
    const Options& options, Loaded& loaded, std::vector<Planned>& by_source,
    std::chrono::system_clock::time_point now, std::ostream& out);

}  // namespace gracekeeper::offline
