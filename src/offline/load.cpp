#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <map>
#include <set>
#include <unordered_map>

#include "gracekeeper/budget/deployment.h"
#include "gracekeeper/budget/policy.h"
#include "gracekeeper/core/json.h"
#include "gracekeeper/offline/offline.h"

namespace gracekeeper::offline {
namespace {

using budget::Json;

constexpr std::size_t kMaxReportedErrors = 50;
const budget::PolicySpec kDefaultPolicy{};

struct NamedPolicy {
  budget::Policy policy;
  std::string origin;  // file:line, for notes
};

// A Service's pod selector, to tell whether a Deployment is behind one.
struct ServiceSelector {
  std::string namespace_;
  std::map<std::string, std::string> selector;
};

std::string field_error(const manifest::Document& document, const budget::FieldError& error) {
  const manifest::Position where =
      error.path.empty() ? document.position
                         : manifest::locate(document, manifest::split_field_path(error.path));
  return fmt::format("{}: {}", where.format(), error.format());
}

std::string string_at(const Json& object, const char* parent, const char* key) {
  const Json* p = core::member(object, parent);
  return p != nullptr ? core::string_member(*p, key) : std::string();
}

bool namespaces_compatible(const std::string& a, const std::string& b) {
  return a.empty() || b.empty() || a == b;
}

// "items[2].items[0]": where an object sits inside (nested) Lists.
std::string items_path(const std::vector<std::size_t>& items) {
  std::string path;
  for (std::size_t i : items) path += fmt::format("{}items[{}]", path.empty() ? "" : ".", i);
  return path;
}

std::vector<std::string> items_segments(const std::vector<std::size_t>& items) {
  std::vector<std::string> segments;
  for (std::size_t i : items) {
    segments.push_back("items");
    segments.push_back(std::to_string(i));
  }
  return segments;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// `kind: List` as `kubectl get -o yaml` writes it, or a typed list (DeploymentList).
bool is_list(const Json& value) {
  auto kind = value.find("kind");
  if (kind == value.end() || !kind->is_string()) return false;
  const auto& text = kind->get_ref<const std::string&>();
  return text == "List" || (text.size() > 4 && text.ends_with("List"));
}

bool has_type_fields(const Json& value) {
  if (!value.is_object()) return false;
  auto kind = value.find("kind");
  auto api_version = value.find("apiVersion");
  return kind != value.end() && kind->is_string() && api_version != value.end() &&
         api_version->is_string();
}

// Kinds gracekeeper acts on, for telling a misspelt kind from an unrelated one.
constexpr std::array<std::string_view, 7> kKnownKinds{
    "Deployment", "StatefulSet", "DaemonSet", "Pod", "ShutdownPolicy", "Service", "List"};

// An apps/v1 workload gracekeeper does not govern, opted in all the same.
bool is_opted_in_daemonset(const Json& value) {
  if (value.value("kind", "") != "DaemonSet" ||
      !value.value("apiVersion", "").starts_with("apps/")) {
    return false;
  }
  auto metadata = value.find("metadata");
  if (metadata == value.end() || !metadata->is_object()) return false;
  return string_at(*metadata, "annotations", budget::kAnnotationEnabled) == "true";
}

class Evaluator {
 public:
  Evaluator(const Options& options, const EvaluatedSink& sink) : options_(options), sink_(sink) {}

  // Takes one document of the input; false when input errors have piled up.
  bool take(const manifest::Document& document, std::size_t source) {
    if (document.item) return take_item(document, source);
    if (staged_ && document.items_recalled) unstage();  // they were not objects
    staged_.reset();
    ++loaded_.document_count;
    if (!has_type_fields(document.value)) {
      error(fmt::format("{}: expected a Kubernetes object with string fields apiVersion and kind",
                        document.position.format()));
    } else {
      take_any(document, document.value, {source, document.index, {}}, document.position);
    }
    return errors_.size() < kMaxReportedErrors;
  }

  void take_policy_file(manifest::Document&& document) {
    if (!budget::is_policy(document.value)) {
      error(
          fmt::format("{}: expected a ShutdownPolicy (apiVersion {}, kind {}) in the --policy file",
                      document.position.format(), budget::kApiVersion, budget::kPolicyKind));
      return;
    }
    take_policy(document, document.value, {});
  }

  std::expected<Loaded, InputErrors> finish() {
    if (!errors_.empty()) return std::unexpected(std::move(errors_));
    for (auto& pending : pending_) {
      evaluate(pending);
      pending = Pending{};  // release the projection as soon as it is planned
    }
    for (auto& unsupported : unsupported_) emit(std::move(unsupported));
    loaded_.notes.insert(loaded_.notes.end(), notes_.begin(), notes_.end());
    return std::move(loaded_);
  }

  void error(std::string message) { errors_.push_back(std::move(message)); }

  // An item of a List read item by item (manifest::ListItems::OneByOne),
  // taken as take_any takes the items of a List read whole. What it adds is
  // staged until the List itself is read: if that turns out not to be a
  // List, it is taken back.
  bool take_item(const manifest::Document& item, std::size_t source) {
    if (!staged_) {
      staged_ = Staged{errors_.size(),
                       policies_.size(),
                       pending_.size(),
                       services_.size(),
                       unsupported_.size(),
                       loaded_.skipped,
                       {}};
    }
    if (!has_type_fields(item.value)) {
      error(
          fmt::format("{}: items[{}]: expected a Kubernetes object (a mapping with apiVersion "
                      "and kind), got {}",
                      item.position.format(), *item.item, budget::describe_value(item.value)));
    } else {
      take_any(item, item.value, {source, item.index, {*item.item}}, item.position);
    }
    return errors_.size() < kMaxReportedErrors;
  }
  bool has_errors() const { return !errors_.empty(); }
  Loaded& loaded() { return loaded_; }

 private:
  struct Pending {
    manifest::Position position;
    budget::Deployment deployment;
    ObjectAddress address;
  };

  // What the items of the List being read added, to take it back.
  struct Staged {
    std::size_t errors, policies, pending, services, unsupported, skipped;
    std::vector<std::string> seen;
  };

  void unstage() {
    auto cut = [](auto& v, std::size_t size) {
      v.erase(v.begin() + static_cast<std::ptrdiff_t>(size), v.end());
    };
    cut(errors_, staged_->errors);
    cut(policies_, staged_->policies);
    cut(pending_, staged_->pending);
    cut(services_, staged_->services);
    cut(unsupported_, staged_->unsupported);
    loaded_.skipped = staged_->skipped;
    for (const auto& key : staged_->seen) seen_.erase(key);
  }

  // An object that passed has_type_fields: a List (whose items are taken
  // one by one, nested Lists included) or a single object.
  void take_any(const manifest::Document& document, const Json& value, const ObjectAddress& address,
                const manifest::Position& position) {
    if (!is_list(value)) {
      take_object(document, value, address, position);
      return;
    }
    auto items = value.find("items");
    if (items == value.end() || items->is_null()) return;  // an empty List
    const std::string path = items_path(address.items);
    const std::string where = path.empty() ? "items" : path + ".items";
    if (!items->is_array()) {
      error(field_error(document, {where, "expected a list of Kubernetes objects, got " +
                                              budget::describe_value(*items)}));
      return;
    }
    // Read item by item, a List comes with its items taken already.
    if (items->empty()) return;
    // One parse for every item's position: a List of thousands stays linear.
    std::vector<std::string> segments = items_segments(address.items);
    segments.push_back("items");
    const auto positions = manifest::locate_items(document, segments, items->size());
    for (std::size_t i = 0; i < items->size(); ++i) {
      const Json& item = (*items)[i];
      ObjectAddress inner = address;
      inner.items.push_back(i);
      if (!has_type_fields(item)) {
        error(
            fmt::format("{}: {}[{}]: expected a Kubernetes object (a mapping with apiVersion "
                        "and kind), got {}",
                        positions[i].format(), where, i, budget::describe_value(item)));
        if (errors_.size() >= kMaxReportedErrors) return;
        continue;
      }
      take_any(document, item, inner, positions[i]);
    }
  }

  void take_object(const manifest::Document& document, const Json& value,
                   const ObjectAddress& address, const manifest::Position& position) {
    if (!check_identity(value, position)) return;
    if (budget::is_policy(value)) {
      take_policy(document, value, address.items);
    } else if (budget::is_deployment(value) || budget::is_statefulset(value) ||
               budget::is_pod(value)) {
      take_deployment(document, value, address, position);
    } else if (is_opted_in_daemonset(value)) {
      take_unsupported(value, address, position);
    } else if (value.value("kind", "") == "Service") {
      take_service(value);
    }
  }

  // Kinds and versions gracekeeper would otherwise pass over without a word,
  // and the same object given twice (which one would `kubectl apply` keep?).
  bool check_identity(const Json& value, const manifest::Position& position) {
    const std::string kind = value.value("kind", "");
    const std::string api_version = value.value("apiVersion", "");
    for (std::string_view known : kKnownKinds) {
      if (kind != known && equals_ignoring_case(kind, known)) {
        error(fmt::format("{}: kind \"{}\": kinds are case-sensitive; expected {}",
                          position.format(), kind, known));
        return false;
      }
    }
    if (kind == "Deployment" && api_version.starts_with("extensions/")) {
      error(
          fmt::format("{}: Deployment of apiVersion \"{}\": Kubernetes serves Deployments as "
                      "apps/v1 (extensions/v1beta1 was removed in 1.16)",
                      position.format(), api_version));
      return false;
    }
    const std::string name = string_at(value, "metadata", "name");
    if (name.empty()) return true;
    const std::string key = fmt::format("{} {}/{}/{}", api_version.substr(0, api_version.find('/')),
                                        kind, string_at(value, "metadata", "namespace"), name);
    auto [it, inserted] = seen_.emplace(key, position.format());
    if (inserted && staged_) staged_->seen.push_back(key);
    if (!inserted) {
      const std::string ns = string_at(value, "metadata", "namespace");
      error(fmt::format("{}: duplicate object: {} {} is also at {}", position.format(), kind,
                        ns.empty() ? name : ns + "/" + name, it->second));
      return false;
    }
    return true;
  }

  // Errors inside a List item are located under `items[i]`.
  std::string item_error(const manifest::Document& document, const std::vector<std::size_t>& items,
                         budget::FieldError e) {
    const std::string prefix = items_path(items);
    if (!prefix.empty()) e.path = prefix + (e.path.empty() ? "" : ".") + e.path;
    return field_error(document, e);
  }

  void take_policy(const manifest::Document& document, const Json& value,
                   const std::vector<std::size_t>& items) {
    auto policy = budget::parse_policy(value);
    if (!policy) {
      for (const auto& e : policy.error()) error(item_error(document, items, e));
      return;
    }
    policies_.push_back({std::move(*policy), document.position.format()});
  }

  void take_deployment(const manifest::Document& document, const Json& value,
                       const ObjectAddress& address, const manifest::Position& position) {
    auto deployment = budget::project_deployment(value);
    if (!deployment) {
      for (const auto& e : deployment.error()) error(item_error(document, address.items, e));
      return;
    }
    // --all takes in every Deployment; a StatefulSet only when opted in. A
    // Pod is always judged: it has no opt-in of its own (the annotation is
    // its workload's), and one is given to see what runs.
    if (deployment->kind != "Pod" && !budget::opted_in(*deployment)) {
      if (deployment->kind != "Deployment") return;
      if (!options_.all) {
        ++loaded_.skipped;
        return;
      }
    }
    pending_.push_back({position, std::move(*deployment), address});
  }

  // Reported, never changed: one pod per node, replaced by the DaemonSet
  // controller; its rollout and the node drain are not what gracekeeper budgets.
  void take_unsupported(const Json& value, const ObjectAddress& address,
                        const manifest::Position& position) {
    Evaluated out;
    out.position = position;
    out.address = address;
    out.deployment.kind = value.value("kind", "");
    out.deployment.name = string_at(value, "metadata", "name");
    out.deployment.namespace_ = string_at(value, "metadata", "namespace");
    out.policy_name = "(none)";
    out.plan.findings.push_back(
        {"UnsupportedKind", budget::Severity::Info, "",
         fmt::format("gracekeeper.dev/enabled is set, but gracekeeper governs Deployments "
                     "(and, offline, StatefulSets) only: this {} is not checked or changed",
                     out.deployment.kind)});
    unsupported_.push_back(std::move(out));
  }

  void take_service(const Json& value) {
    ServiceSelector service{string_at(value, "metadata", "namespace"), {}};
    auto spec = value.find("spec");
    // An ExternalName Service gets no endpoints (the EndpointSlice
    // controller's rule, as in the operator): it selects nothing.
    const bool external_name = spec != value.end() && spec->is_object() && spec->contains("type") &&
                               (*spec)["type"] == "ExternalName";
    if (spec != value.end() && spec->is_object() && !external_name) {
      auto selector = spec->find("selector");
      if (selector != spec->end() && selector->is_object()) {
        for (const auto& [k, v] : selector->items()) {
          if (v.is_string()) service.selector.emplace(k, v.get<std::string>());
        }
      }
    }
    services_.push_back(std::move(service));
  }

  // nullopt when the input has no Services at all: then it is unknown.
  std::optional<bool> behind_service(const budget::Deployment& d) const {
    if (services_.empty()) return std::nullopt;
    for (const auto& s : services_) {
      if (s.selector.empty() || !namespaces_compatible(s.namespace_, d.namespace_)) continue;
      bool all = true;
      for (const auto& [k, v] : s.selector) {
        auto it = d.pod_labels.find(k);
        all = all && it != d.pod_labels.end() && it->second == v;
      }
      if (all) return true;
    }
    return false;
  }

  // The governing policy, nullptr for the defaults, or a finding explaining why none applies.
  std::expected<const NamedPolicy*, budget::Finding> choose_policy(const budget::Deployment& d) {
    auto named = d.annotations.find(budget::kAnnotationPolicy);
    if (policies_.empty()) {
      // A policy named but absent is reported and the Deployment left as it
      // is (docs/api.md, "Command line"): the defaults are not what its owner asked for.
      if (named != d.annotations.end()) {
        return std::unexpected(budget::Finding{
            "PolicyNotFound", budget::Severity::Warning, "",
            fmt::format("no ShutdownPolicy named \"{}\" among the inputs (pass it with "
                        "--policy); left unchanged",
                        named->second)});
      }
      return nullptr;
    }
    std::vector<const NamedPolicy*> in_scope;
    std::vector<budget::PolicyCandidate> candidates;
    for (const auto& p : policies_) {
      if (!namespaces_compatible(p.policy.namespace_, d.namespace_)) continue;
      in_scope.push_back(&p);
      candidates.push_back({p.policy.name, &p.policy.spec.selector, p.origin});
    }
    auto chosen = budget::select_policy(d, candidates, "among the inputs");
    if (!chosen) return std::unexpected(std::move(chosen.error()));
    return in_scope[*chosen];
  }

  void evaluate(Pending& pending) {
    Evaluated out;
    out.position = pending.position;
    out.address = std::move(pending.address);
    auto chosen = choose_policy(pending.deployment);
    if (!chosen) {
      // No policy can be chosen (none matches, several do, or the one named
      // is absent): offline this is an error, so `check` exits 1 instead of
      // passing a Deployment it did not evaluate (docs/offline.md).
      out.policy_name = "(none)";
      out.plan.findings.push_back(chosen.error());
      out.plan.findings.back().severity = budget::Severity::Error;
      out.deployment = std::move(pending.deployment);
      emit(std::move(out));
      return;
    }
    const NamedPolicy* policy = *chosen;
    const budget::PolicySpec& spec = policy ? policy->policy.spec : kDefaultPolicy;
    out.policy_name = policy ? (policy->policy.namespace_.empty()
                                    ? policy->policy.name
                                    : policy->policy.namespace_ + "/" + policy->policy.name)
                             : "(defaults)";
    if (!options_.propagation_seconds &&
        spec.propagation.source != budget::PropagationSource::Static &&
        noted_.insert("source:" + out.policy_name).second) {
      notes_.push_back(fmt::format(
          "policy {}: source {} is read by `gracekeeper run`; offline the staticSeconds fallback "
          "({}s) is used (set --propagation-seconds)",
          out.policy_name, budget::to_string(spec.propagation.source),
          spec.propagation.static_seconds));
    }

    budget::Context context;
    context.policy = &spec;
    context.policy_name = out.policy_name;
    context.propagation_seconds =
        options_.propagation_seconds.value_or(spec.propagation.static_seconds);
    const int minor = options_.kubernetes_minor;
    context.capabilities.native_sleep = minor < 0 || minor >= 30;
    context.capabilities.statefulset_max_unavailable = minor < 0 || minor >= 35;
    context.behind_service = behind_service(pending.deployment);
    out.plan = budget::plan(pending.deployment, context);
    // A Pod's preStop and grace cannot change: judged, never planned (the
    // fix is its workload's template).
    if (pending.deployment.kind == "Pod") out.plan.changes.clear();
    out.applied = out.plan.changed() && spec.mode == budget::Mode::Enforce;
    out.deployment = std::move(pending.deployment);
    emit(std::move(out));
  }

  void emit(Evaluated&& evaluated) {
    if (sink_) {
      sink_(std::move(evaluated));
    } else {
      loaded_.deployments.push_back(std::move(evaluated));
    }
  }

  const Options& options_;
  const EvaluatedSink& sink_;
  Loaded loaded_;
  InputErrors errors_;
  std::vector<NamedPolicy> policies_;
  std::vector<ServiceSelector> services_;
  std::vector<Pending> pending_;
  std::vector<Evaluated> unsupported_;
  std::vector<std::string> notes_;
  std::set<std::string> noted_;
  std::unordered_map<std::string, std::string> seen_;  // object identity -> where first seen
  std::optional<Staged> staged_;
};

// Reads one source and hands each document to `take`; the text, when read.
template <typename Take>
std::shared_ptr<const std::string> read_documents(const manifest::Source& source,
                                                  std::istream& stdin_stream, Evaluator& evaluator,
                                                  manifest::ReadBudget& budget, std::size_t& count,
                                                  manifest::ListItems lists, Take take) {
  auto text = manifest::read_source(source, stdin_stream);
  if (!text) {
    evaluator.error(text.error().format());
    return nullptr;
  }
  auto shared = std::make_shared<const std::string>(std::move(*text));
  auto result = manifest::for_each_document(
      shared, source.name,
      [&](manifest::Document&& document) {
        if (!document.item) ++count;
        return take(std::move(document));
      },
      {}, &budget, lists);
  if (!result) evaluator.error(result.error().format());
  return shared;
}

}  // namespace

std::expected<Loaded, InputErrors> load_and_evaluate(const Options& options,
                                                     std::istream& stdin_stream, bool keep_sources,
                                                     const EvaluatedSink& sink) {
  Evaluator evaluator(options, sink);
  // One alias budget for every file: the limit holds over the whole input.
  manifest::ReadBudget budget;

  for (const auto& file : options.policy_files) {
    auto sources = manifest::expand_inputs({file});
    if (!sources) return std::unexpected(InputErrors{sources.error().format()});
    for (const auto& source : *sources) {
      std::size_t count = 0;
      read_documents(source, stdin_stream, evaluator, budget, count, manifest::ListItems::Whole,
                     [&](manifest::Document&& d) {
                       evaluator.take_policy_file(std::move(d));
                       return true;
                     });
      if (count == 0) {
        evaluator.error(
            fmt::format("{}: expected a ShutdownPolicy, found no document", source.name));
      }
    }
  }

  auto sources = manifest::expand_inputs(options.files);
  if (!sources) return std::unexpected(InputErrors{sources.error().format()});
  std::size_t total = 0;
  for (const auto& source : *sources) {
    const std::size_t index = evaluator.loaded().sources.size();
    // A List item by item: a `kubectl get -o yaml` List of thousands is not
    // held decoded whole.
    auto text = read_documents(source, stdin_stream, evaluator, budget, total,
                               manifest::ListItems::OneByOne,
                               [&](manifest::Document&& d) { return evaluator.take(d, index); });
    evaluator.loaded().sources.push_back(
        SourceText{source.name, source.path, keep_sources ? std::move(text) : nullptr});
  }
  if (total == 0 && !evaluator.has_errors()) {
    std::string names;
    for (const auto& s : *sources) names += (names.empty() ? "" : ", ") + s.name;
    evaluator.error(fmt::format("{}: no Kubernetes objects found (the input is empty)", names));
  }
  return evaluator.finish();
}

}  // namespace gracekeeper::offline
