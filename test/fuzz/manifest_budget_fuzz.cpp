// libFuzzer target over what `gracekeeper plan` does offline: read manifests,
// write them back, project Deployments, plan, apply, write, read again, re-plan.
//
// Besides the sanitizers' findings, it aborts when one of these properties breaks:
//  - the reader never throws (errors are values), and every error formats;
//  - writing the documents with to_yaml_stream and reading them back gives the
//    same documents, types and key order included;
//  - a Deployment with a plan applied, written with to_yaml and read back, still
//    projects, and planning it again (same policy, propagation, capabilities)
//    changes nothing: `plan` run on its own output is a no-op;
//  - the projection of a Deployment once planned (apply_plan on the
//    projection) is what the applied object projects as;
//  - project_deployment / parse_policy never fail without an error, and every
//    field error they report can be located in the source;
//  - an in-place edit (`plan -w`) reads back as the planned object, and so do
//    the items of a List edited one by one (SourceEditor::edit_item);
//  - a JSON object read by the streaming JSON reader gives what the YAML
//    reader gives for the same text;
//  - a List read item by item (ListItems::OneByOne) gives the same documents
//    as read whole, once its items are put back.
//
// Run it with hack/fuzz; reproduce a finding with
//   build-fuzz/manifest_budget_fuzz CRASH_FILE
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gracekeeper/budget/apply.h"
#include "gracekeeper/budget/deployment.h"
#include "gracekeeper/budget/engine.h"
#include "gracekeeper/budget/policy.h"
#include "gracekeeper/manifest/document.h"
#include "gracekeeper/manifest/edit.h"
#include "gracekeeper/manifest/writer.h"

namespace {

namespace budget = gracekeeper::budget;
namespace manifest = gracekeeper::manifest;
using Json = manifest::Json;

// Small enough that alias bombs and huge inputs fail fast; depth as in production.
const manifest::Limits kLimits{
    .max_input_bytes = 1u << 20,
    .max_depth = 100,
    .max_alias_nodes = 1u << 14,
};
// Re-reading written text: aliases are expanded by then, so it may be larger.
const manifest::Limits kRereadLimits{};

constexpr std::size_t kMaxPolicies = 2;

[[noreturn]] void violation(const std::string& what, const std::string& detail) {
  std::fprintf(stderr, "\n==== manifest_budget_fuzz: PROPERTY VIOLATED: %s\n%s\n====\n",
               what.c_str(), detail.c_str());
  std::abort();
}

// Equality that keeps types apart (1 vs 1.0), compares NaN equal to NaN and
// tells -0.0 from 0.0: what a faithful YAML round trip must preserve.
// With `ordered` false, the keys of a mapping may come in another order (YAML
// mappings are unordered; an in-place edit may add a key through a merge key).
bool same(const Json& a, const Json& b, bool ordered = true) {
  if (a.is_number_integer() && b.is_number_integer()) return a == b;
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Json::value_t::object: {
      if (a.size() != b.size()) return false;
      if (!ordered) {
        for (auto ia = a.begin(); ia != a.end(); ++ia) {
          auto ib = b.find(ia.key());
          if (ib == b.end() || !same(*ia, *ib, false)) return false;
        }
        return true;
      }
      for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
        if (ia.key() != ib.key() || !same(*ia, *ib)) return false;
      }
      return true;
    }
    case Json::value_t::array: {
      if (a.size() != b.size()) return false;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (!same(a[i], b[i], ordered)) return false;
      }
      return true;
    }
    case Json::value_t::number_float: {
      const double x = a.get<double>();
      const double y = b.get<double>();
      if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
      return x == y && std::signbit(x) == std::signbit(y);
    }
    default:
      return a == b;
  }
}

std::string dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Knobs for planning, derived from the input so that the fuzzer can steer them.
struct Knobs {
  double propagation_seconds = 0;  // within --propagation-seconds' range, 0..3600
  bool native_sleep = true;
  std::optional<bool> behind_service;
};

Knobs knobs_for(const std::uint8_t* data, std::size_t size) {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a
  for (std::size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  Knobs k;
  switch (h & 7) {
    case 0:
      k.propagation_seconds = 0;
      break;
    case 1:
      k.propagation_seconds = 3600;
      break;
    case 2:
      k.propagation_seconds = 10;  // the default staticSeconds
      break;
    default:
      k.propagation_seconds = static_cast<double>((h >> 8) % 360001) / 100.0;
  }
  k.native_sleep = ((h >> 3) & 1) != 0;
  switch ((h >> 4) & 3) {
    case 0:
      k.behind_service = true;
      break;
    case 1:
      k.behind_service = false;
      break;
    default:
      k.behind_service = std::nullopt;
  }
  return k;
}

void locate_errors(const manifest::Document& document, const budget::FieldErrors& errors) {
  for (const auto& error : errors) {
    (void)error.format();
    if (error.path.empty()) continue;
    const manifest::Position where =
        manifest::locate(document, manifest::split_field_path(error.path));
    (void)where.format();
  }
}

// The documents, written as one stream and read back, are the same documents.
void check_stream_round_trip(const std::vector<manifest::Document>& documents) {
  std::vector<Json> values;
  values.reserve(documents.size());
  for (const auto& d : documents) values.push_back(d.value);
  const std::string yaml = manifest::to_yaml_stream(values);
  auto reread = manifest::read_text(yaml, "written.yaml", kRereadLimits);
  if (!reread) {
    violation("to_yaml_stream output does not read back",
              reread.error().format() + "\n--- written:\n" + yaml);
  }
  if (reread->size() != values.size()) {
    violation("to_yaml_stream output reads back as a different number of documents",
              std::to_string(values.size()) + " written, " + std::to_string(reread->size()) +
                  " read\n--- written:\n" + yaml);
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!same(values[i], (*reread)[i].value)) {
      violation("to_yaml_stream round trip changed a document",
                "document " + std::to_string(i) + "\n--- before: " + dump(values[i]) +
                    "\n--- after:  " + dump((*reread)[i].value) + "\n--- written:\n" + yaml);
    }
  }
}

std::string describe_changes(const budget::Plan& plan) {
  std::string out;
  for (const auto& c : plan.changes) out += "  " + c.field + ": " + c.from + " -> " + c.to + "\n";
  return out;
}

// `plan -w`: the source text, edited in place, reads back as the applied
// object, at the same document index.
void check_in_place_edit(const manifest::Document& document, const Json& applied) {
  const auto edit = manifest::edit_document(document, applied);
  const std::string edited = manifest::apply_edits(*document.source, edit.edits);
  auto edited_docs = manifest::read_text(edited, "edited.yaml", kRereadLimits);
  if (!edited_docs) {
    violation("an in-place edit does not read back",
              edited_docs.error().format() + "\n--- edited:\n" + edited);
  }
  bool found = false;
  for (const auto& d : *edited_docs) {
    if (d.index != document.index) continue;
    found = true;
    if (!same(d.value, applied, /*ordered=*/false)) {
      violation("an in-place edit reads back as another object",
                "--- wanted: " + dump(applied) + "\n--- read: " + dump(d.value) +
                    "\n--- edited:\n" + edited);
    }
  }
  if (!found) violation("an in-place edit lost its document", edited);
}

// A strict JSON object is read by its own streaming parser (json_fast.cpp):
// it must give what the YAML reader gives for the same text (a comment line
// in front sends it there), errors included.
void check_json_reader(const std::string& text) {
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] != '{') return;
  auto direct = manifest::read_text(text, "fuzz.json", kLimits);
  auto yaml = manifest::read_text("#\n" + text, "fuzz.json", kLimits);
  // Strict JSON that yaml-cpp cannot read (a key and its `:` on two lines,
  // which YAML 1.2 allows in a flow mapping too) is read as JSON, as kubectl
  // reads it: the JSON reader may accept what yaml-cpp rejects, only JSON.
  if (direct && !yaml && Json::accept(text)) return;
  if (direct.has_value() != yaml.has_value()) {
    violation("the JSON reader and the YAML reader disagree on whether the input reads",
              (direct ? std::string("JSON reader: ok") : direct.error().format()) + "\n" +
                  (yaml ? std::string("YAML reader: ok") : yaml.error().format()) +
                  "\n--- input:\n" + text);
  }
  if (!direct) return;
  if (direct->size() != yaml->size()) {
    violation("the JSON reader and the YAML reader read different document counts", text);
  }
  for (std::size_t i = 0; i < direct->size(); ++i) {
    if (!same((*direct)[i].value, (*yaml)[i].value)) {
      violation("the JSON reader and the YAML reader read different values",
                "--- JSON reader: " + dump((*direct)[i].value) +
                    "\n--- YAML reader: " + dump((*yaml)[i].value) + "\n--- input:\n" + text);
    }
  }
}

// Read item by item, the documents are those read whole: a List's items,
// handed out before it, put back into its `items`; an object that was not a
// List after all comes whole (the items handed out for it recalled).
void check_list_items(const std::string& text, const std::vector<manifest::Document>& whole) {
  std::vector<Json> documents;
  Json items = Json::array();
  auto done = manifest::for_each_document(
      text, "fuzz.yaml",
      [&](manifest::Document&& d) {
        if (d.item) {
          if (*d.item != items.size()) violation("List items out of order", text);
          items.push_back(std::move(d.value));
          return true;
        }
        if (!items.empty() && !d.items_recalled) d.value["items"] = std::move(items);
        items = Json::array();
        documents.push_back(std::move(d.value));
        return true;
      },
      kLimits, nullptr, manifest::ListItems::OneByOne);
  if (!done) violation("a List read item by item fails where read whole it does not", text);
  if (documents.size() != whole.size()) {
    violation("a List read item by item gives another number of documents", text);
  }
  for (std::size_t i = 0; i < whole.size(); ++i) {
    if (!same(documents[i], whole[i].value)) {
      violation("a List read item by item differs from the List read whole",
                "--- item by item: " + dump(documents[i]) + "\n--- whole: " + dump(whole[i].value) +
                    "\n--- input:\n" + text);
    }
  }
}

// The Deployment `value` with the default plan applied; nothing when it
// does not project or the plan changes nothing.
std::optional<Json> planned(const Json& value, const Knobs& knobs) {
  if (!budget::is_deployment(value)) return std::nullopt;
  auto deployment = budget::project_deployment(value);
  if (!deployment) return std::nullopt;
  const budget::PolicySpec defaults{};
  budget::Context context;
  context.policy = &defaults;
  context.policy_name = "(defaults)";
  context.propagation_seconds = knobs.propagation_seconds;
  context.capabilities.native_sleep = knobs.native_sleep;
  context.behind_service = knobs.behind_service;
  const budget::Plan plan = budget::plan(*deployment, context);
  if (!plan.changed()) return std::nullopt;
  using namespace std::chrono;
  Json applied = value;
  budget::apply_plan(applied, plan, "(defaults)", sys_days{year{2026} / 1 / 15} + hours{12});
  return applied;
}

// `plan -w` on a List: its items, read and edited one by one, read back as
// the planned items, and the rest of the text as it was.
void check_item_edits(const std::string& text, const std::vector<manifest::Document>& whole,
                      const Knobs& knobs) {
  std::shared_ptr<const std::string> source;
  std::vector<int> lists;  // documents whose items come one by one
  std::size_t handed = 0;
  (void)manifest::for_each_document(
      text, "fuzz.yaml",
      [&](manifest::Document&& d) {
        source = d.source;
        if (d.item) {
          ++handed;
        } else {
          // A List that only the YAML reader reads (JSON-looking text the
          // JSON reader gave up on) comes whole after the items handed out
          // so far, recalled: `plan` edits those, then the rest from it.
          if (handed > 0 && (!d.items_recalled || manifest::is_list_object(d.value)))
            lists.push_back(d.index);
          handed = 0;
        }
        return true;
      },
      kLimits, nullptr, manifest::ListItems::OneByOne);
  if (lists.empty() || !source) return;
  manifest::SourceEditor editor(source);
  std::vector<manifest::TextEdit> edits;
  std::map<std::pair<int, std::size_t>, Json> wanted;
  std::vector<int> edited_lists;
  std::size_t items_seen = 0;  // of the document being read
  auto edit_item = [&](manifest::Document&& d) {
    auto applied = planned(d.value, knobs);
    if (!applied) return;
    if (edited_lists.empty() || edited_lists.back() != d.index) {
      if (!editor.edits_items(d.index)) return;
      edited_lists.push_back(d.index);
    }
    const std::size_t item = *d.item;
    const int index = d.index;
    auto edit = editor.edit_item(std::move(d), *applied);
    if (edit.edits.empty()) violation("an item with changes got no edit", text);
    edits.insert(edits.end(), edit.edits.begin(), edit.edits.end());
    wanted[{index, item}] = std::move(*applied);
  };
  (void)manifest::for_each_document(
      text, "fuzz.yaml",
      [&](manifest::Document&& d) {
        if (std::find(lists.begin(), lists.end(), d.index) == lists.end()) return true;
        if (d.item) {
          ++items_seen;
          edit_item(std::move(d));
          return true;
        }
        const std::size_t seen = std::exchange(items_seen, 0);
        // Recalled: the items not handed out come with it (as edit_source
        // in src/cli/cli.cpp takes them), once one handed out was edited.
        if (!d.items_recalled || edited_lists.empty() || edited_lists.back() != d.index ||
            !d.value.contains("items") || !d.value["items"].is_array()) {
          return true;
        }
        Json& items = d.value["items"];
        for (std::size_t k = seen; k < items.size(); ++k) {
          edit_item(
              manifest::Document{std::move(items[k]), d.position, d.index, d.source, k, false});
        }
        return true;
      },
      kLimits, nullptr, manifest::ListItems::OneByOne);
  if (edits.empty()) return;
  const std::string edited = manifest::apply_edits(*source, edits);
  auto again = manifest::read_text(edited, "edited.yaml", kRereadLimits);
  if (!again) {
    violation("a List edited item by item does not read back",
              again.error().format() + "\n--- edited:\n" + edited);
  }
  if (again->size() != whole.size()) {
    violation("a List edited item by item reads back as another number of documents", edited);
  }
  for (std::size_t i = 0; i < whole.size(); ++i) {
    const Json& before = whole[i].value;
    const Json& after = (*again)[i].value;
    const int index = whole[i].index;
    if (std::find(edited_lists.begin(), edited_lists.end(), index) == edited_lists.end()) {
      if (!same(before, after)) violation("an edit changed a document it was not for", edited);
      continue;
    }
    if (!after.is_object() || !after.contains("items") || !after["items"].is_array() ||
        after["items"].size() != before["items"].size()) {
      violation("a List edited item by item lost items", edited);
    }
    for (std::size_t k = 0; k < before["items"].size(); ++k) {
      auto w = wanted.find({index, k});
      const Json& expected = w == wanted.end() ? before["items"][k] : w->second;
      if (!same(after["items"][k], expected, /*ordered=*/false)) {
        violation("an item edited on its own reads back as another object",
                  "--- wanted: " + dump(expected) + "\n--- read: " + dump(after["items"][k]) +
                      "\n--- edited:\n" + edited);
      }
    }
  }
}

// Plan, apply, write, read back, plan again: the second plan must change nothing.
void plan_apply_replan(const manifest::Document& document, const budget::Deployment& deployment,
                       const budget::PolicySpec& policy, const std::string& policy_name,
                       const Knobs& knobs) {
  budget::Context context;
  context.policy = &policy;
  context.policy_name = policy_name;
  context.propagation_seconds = knobs.propagation_seconds;
  context.capabilities.native_sleep = knobs.native_sleep;
  context.behind_service = knobs.behind_service;
  context.now = std::nullopt;  // offline: no churn control

  const budget::Plan first = budget::plan(deployment, context);
  for (const auto& finding : first.findings) (void)budget::to_string(finding.severity);
  if (!first.changed()) return;

  using namespace std::chrono;
  const system_clock::time_point when = sys_days{year{2026} / 1 / 15} + hours{12};
  Json applied = document.value;
  budget::apply_plan(applied, first, policy_name, when);

  check_in_place_edit(document, applied);

  const std::string yaml = manifest::to_yaml(applied);
  auto reread = manifest::read_text(yaml, "applied.yaml", kRereadLimits);
  if (!reread) {
    violation("an applied Deployment written with to_yaml does not read back",
              reread.error().format() + "\n--- written:\n" + yaml);
  }
  if (reread->size() != 1) {
    violation("an applied Deployment written with to_yaml reads back as " +
                  std::to_string(reread->size()) + " documents",
              yaml);
  }
  const Json& again = reread->front().value;
  if (!same(applied, again)) {
    violation("to_yaml round trip changed an applied Deployment",
              "--- before: " + dump(applied) + "\n--- after:  " + dump(again));
  }
  if (!budget::is_deployment(again)) {
    violation("an applied Deployment is no longer a Deployment", dump(again));
  }
  auto projected = budget::project_deployment(again);
  if (!projected) {
    std::string errors;
    for (const auto& e : projected.error()) errors += "  " + e.format() + "\n";
    violation("an applied Deployment no longer projects",
              errors + "--- input: " + dump(document.value) + "\n--- applied: " + dump(again));
  }
  if (budget::apply_plan(deployment, first, policy_name, when) != *projected) {
    violation("the projection of a Deployment once planned differs from the applied object's",
              "--- input: " + dump(document.value) + "\n--- applied: " + dump(again));
  }
  const budget::Plan second = budget::plan(*projected, context);
  if (second.changed()) {
    violation("planning an applied Deployment again changes it (plan is not idempotent)",
              "policy " + policy_name + ", propagation " +
                  std::to_string(knobs.propagation_seconds) + "s, native sleep " +
                  (knobs.native_sleep ? "yes" : "no") + ", behind service " +
                  (knobs.behind_service ? (*knobs.behind_service ? "yes" : "no") : "unknown") +
                  "\n--- first plan:\n" + describe_changes(first) + "--- second plan:\n" +
                  describe_changes(second) + "--- input: " + dump(document.value) +
                  "\n--- applied: " + dump(applied));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  check_json_reader(text);
  auto documents = manifest::read_text(text, "fuzz.yaml", kLimits);
  if (!documents) {
    (void)documents.error().format();
    return 0;
  }
  check_list_items(text, *documents);
  check_stream_round_trip(*documents);

  const Knobs knobs = knobs_for(data, size);
  check_item_edits(text, *documents, knobs);
  const budget::PolicySpec defaults{};
  std::vector<budget::Policy> policies;
  for (const auto& document : *documents) {
    if (!budget::is_policy(document.value)) continue;
    auto policy = budget::parse_policy(document.value);
    if (!policy) {
      if (policy.error().empty()) {
        violation("parse_policy failed without an error", dump(document.value));
      }
      locate_errors(document, policy.error());
    } else if (policies.size() < kMaxPolicies) {
      policies.push_back(std::move(*policy));
    }
  }

  for (const auto& document : *documents) {
    if (!budget::is_deployment(document.value)) continue;
    auto deployment = budget::project_deployment(document.value);
    if (!deployment) {
      // An empty error list would make `plan`/`check` skip the object silently.
      if (deployment.error().empty()) {
        violation("project_deployment failed without an error", dump(document.value));
      }
      locate_errors(document, deployment.error());
      continue;
    }
    (void)budget::opted_in(*deployment);
    (void)budget::key(*deployment);
    plan_apply_replan(document, *deployment, defaults, "(defaults)", knobs);
    // The policies of the input too: idempotence must hold for any valid policy.
    for (const auto& policy : policies) {
      plan_apply_replan(document, *deployment, policy.spec, policy.name, knobs);
    }
  }
  return 0;
}
