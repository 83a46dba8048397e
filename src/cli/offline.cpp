#include "offline.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>

#include "gracekeeper/budget/deployment.h"
#include "gracekeeper/budget/policy.h"

namespace gracekeeper::cli {
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
  auto p = object.find(parent);
  if (p == object.end() || !p->is_object()) return "";
  auto v = p->find(key);
  return v != p->end() && v->is_string() ? v->get<std::string>() : "";
}

bool namespaces_compatible(const std::string& a, const std::string& b) {
  return a.empty() || b.empty() || a == b;
}

class Evaluator {
 public:
  Evaluator(const OfflineOptions& options, bool keep_documents, const EvaluatedSink& sink)
      : options_(options), keep_documents_(keep_documents), sink_(sink) {}

  // Takes one document of the input; false when input errors have piled up.
  bool take(manifest::Document&& document) {
    const Json& value = document.value;
    auto kind = value.find("kind");
    auto api_version = value.find("apiVersion");
    if (kind == value.end() || !kind->is_string() || api_version == value.end() ||
        !api_version->is_string()) {
      error(fmt::format("{}: expected a Kubernetes object with string fields apiVersion and kind",
                        document.position.format()));
    } else if (*kind == "List" && value.contains("items") && value["items"].is_array()) {
      // `kubectl get -o yaml` output: the objects are the items.
      const Json& items = value["items"];
      for (std::size_t i = 0; i < items.size(); ++i) take_object(document, items[i], i);
    } else {
      take_object(document, value, std::nullopt);
    }
    if (keep_documents_) {
      loaded_.documents.push_back(std::move(document));
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
    take_policy(document, document.value, std::nullopt);
  }

  std::expected<Loaded, InputErrors> finish() {
    if (!errors_.empty()) return std::unexpected(std::move(errors_));
    for (auto& pending : pending_) {
      evaluate(pending);
      pending = Pending{};  // release the projection as soon as it is planned
    }
    loaded_.notes.insert(loaded_.notes.end(), notes_.begin(), notes_.end());
    return std::move(loaded_);
  }

  void error(std::string message) { errors_.push_back(std::move(message)); }
  bool has_errors() const { return !errors_.empty(); }

 private:
  struct Pending {
    manifest::Position position;
    budget::Deployment deployment;
    std::size_t document;
    std::optional<std::size_t> item;
  };

  void take_object(const manifest::Document& document, const Json& value,
                   std::optional<std::size_t> item) {
    if (budget::is_policy(value)) {
      take_policy(document, value, item);
    } else if (budget::is_deployment(value)) {
      take_deployment(document, value, item);
    } else if (value.is_object() && value.value("kind", "") == "Service") {
      take_service(value);
    }
  }

  // Errors inside a List item are located under `items[i]`.
  std::string item_error(const manifest::Document& document, std::optional<std::size_t> item,
                         budget::FieldError e) {
    if (item) e.path = fmt::format("items[{}]{}{}", *item, e.path.empty() ? "" : ".", e.path);
    return field_error(document, e);
  }

  void take_policy(const manifest::Document& document, const Json& value,
                   std::optional<std::size_t> item) {
    auto policy = budget::parse_policy(value);
    if (!policy) {
      for (const auto& e : policy.error()) error(item_error(document, item, e));
      return;
    }
    policies_.push_back({std::move(*policy), document.position.format()});
  }

  void take_deployment(const manifest::Document& document, const Json& value,
                       std::optional<std::size_t> item) {
    auto deployment = budget::project_deployment(value);
    if (!deployment) {
      for (const auto& e : deployment.error()) error(item_error(document, item, e));
      return;
    }
    if (!options_.all && !budget::opted_in(*deployment)) {
      ++loaded_.skipped;
      return;
    }
    manifest::Position position = document.position;
    if (item) {
      position = manifest::locate(document, {"items", std::to_string(*item)});
    }
    pending_.push_back({position, std::move(*deployment), loaded_.documents.size(), item});
  }

  void take_service(const Json& value) {
    ServiceSelector service{string_at(value, "metadata", "namespace"), {}};
    auto spec = value.find("spec");
    if (spec != value.end() && spec->is_object()) {
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
      if (named != d.annotations.end() && noted_.insert(named->second).second) {
        notes_.push_back(fmt::format(
            "policy \"{}\" is not among the inputs: using the default policy (pass --policy)",
            named->second));
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
    out.document = pending.document;
    out.item = pending.item;
    auto chosen = choose_policy(pending.deployment);
    if (!chosen) {
      out.policy_name = "(none)";
      out.plan.findings.push_back(chosen.error());
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
    context.capabilities.native_sleep = options_.kubernetes_minor >= 30;
    context.behind_service = behind_service(pending.deployment);
    out.plan = budget::plan(pending.deployment, context);
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

  const OfflineOptions& options_;
  bool keep_documents_;
  const EvaluatedSink& sink_;
  Loaded loaded_;
  InputErrors errors_;
  std::vector<NamedPolicy> policies_;
  std::vector<ServiceSelector> services_;
  std::vector<Pending> pending_;
  std::vector<std::string> notes_;
  std::set<std::string> noted_;
};

// Reads one source and hands each document to `take`; false on a reading error.
template <typename Take>
bool read_documents(const manifest::Source& source, std::istream& stdin_stream,
                    Evaluator& evaluator, std::size_t& count, Take take) {
  auto text = manifest::read_source(source, stdin_stream);
  if (!text) {
    evaluator.error(text.error().format());
    return false;
  }
  auto result = manifest::for_each_document(std::move(*text), source.name,
                                            [&](manifest::Document&& document) {
                                              ++count;
                                              return take(std::move(document));
                                            });
  if (!result) {
    evaluator.error(result.error().format());
    return false;
  }
  return true;
}

}  // namespace

std::expected<Loaded, InputErrors> load_and_evaluate(const OfflineOptions& options,
                                                     std::istream& stdin_stream,
                                                     bool keep_documents,
                                                     const EvaluatedSink& sink) {
  Evaluator evaluator(options, keep_documents, sink);
  InputErrors errors;

  for (const auto& file : options.policy_files) {
    auto sources = manifest::expand_inputs({file});
    if (!sources) return std::unexpected(InputErrors{sources.error().format()});
    for (const auto& source : *sources) {
      std::size_t count = 0;
      read_documents(source, stdin_stream, evaluator, count, [&](manifest::Document&& d) {
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
    read_documents(source, stdin_stream, evaluator, total,
                   [&](manifest::Document&& d) { return evaluator.take(std::move(d)); });
  }
  if (total == 0 && !evaluator.has_errors()) {
    std::string names;
    for (const auto& s : *sources) names += (names.empty() ? "" : ", ") + s.name;
    evaluator.error(fmt::format("{}: no Kubernetes objects found (the input is empty)", names));
  }
  return evaluator.finish();
}

}  // namespace gracekeeper::cli
