// The offline front door of the budget engine: manifests in, planned
// manifests or findings out. Shared by `plan` and `check`.
#pragma once

#include <expected>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "gracekeeper/budget/engine.h"
#include "gracekeeper/manifest/document.h"

namespace gracekeeper::cli {

// Everything that makes input unusable (exit 2), each naming file and line.
using InputErrors = std::vector<std::string>;

// One Deployment and what the engine decided for it.
struct Evaluated {
  manifest::Position position;
  budget::Deployment deployment;
  std::string policy_name;  // "ns/name", or "(defaults)"
  budget::Plan plan;
  bool applied = false;             // plan.changed() and the policy is not DryRun
  std::size_t document = 0;         // index into Loaded::documents, for `plan`
  std::optional<std::size_t> item;  // index into the document's `items` when it is a List
};

struct Loaded {
  std::vector<manifest::Document> documents;  // every input document, in order (plan only)
  std::vector<Evaluated> deployments;         // the selected Deployments
  std::size_t skipped = 0;                    // Deployments not opted in
  std::vector<std::string> notes;             // stderr notes (policy fallbacks, ...)
};

// Reads every input, then plans each selected Deployment. With keep_documents
// false the decoded documents are dropped as soon as they are evaluated
// (`check` on large inputs runs in bounded memory).
//
// With a sink, each evaluated Deployment goes to the sink as soon as it is
// planned instead of into Loaded::deployments, so `check` never holds every
// plan and finding at once. The sink only runs once the whole input has been
// read without errors: exit 2 still means nothing was printed.
using EvaluatedSink = std::function<void(Evaluated&&)>;
std::expected<Loaded, InputErrors> load_and_evaluate(const OfflineOptions& options,
                                                     std::istream& stdin_stream,
                                                     bool keep_documents,
                                                     const EvaluatedSink& sink = {});

}  // namespace gracekeeper::cli
