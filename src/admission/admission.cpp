#include "gracekeeper/admission/admission.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <exception>
#include <expected>
#include <nlohmann/json.hpp>

#include "gracekeeper/core/json.h"
#include "gracekeeper/deployment/deployment_decision.h"
#include "gracekeeper/deployment/takeover.h"
#include "gracekeeper/kube/watch_decoder.h"

namespace gracekeeper::controller {
namespace {

using nlohmann::json;

// Deeper nesting is no Deployment; the limit keeps the recursive parts of
// nlohmann (copy, compare, destroy) far from the stack's end.
constexpr std::size_t kMaxDepth = 128;

std::string base64(std::string_view in) {
  static constexpr char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const auto n = (std::uint32_t(std::uint8_t(in[i])) << 16) |
                   (std::uint32_t(std::uint8_t(in[i + 1])) << 8) | std::uint8_t(in[i + 2]);
    out += alphabet[(n >> 18) & 63];
    out += alphabet[(n >> 12) & 63];
    out += alphabet[(n >> 6) & 63];
    out += alphabet[n & 63];
  }
  if (i < in.size()) {
    std::uint32_t n = std::uint32_t(std::uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) n |= std::uint32_t(std::uint8_t(in[i + 1])) << 8;
    out += alphabet[(n >> 18) & 63];
    out += alphabet[(n >> 12) & 63];
    out += i + 1 < in.size() ? alphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

using core::string_member;

AdmissionAnswer bad_request(int status, std::string why) {
  AdmissionAnswer a;
  a.outcome = AdmissionAnswer::Outcome::BadRequest;
  a.status = status;
  a.body = why + "\n";
  a.error = std::move(why);
  return a;
}

// The review to answer: allowed, with the patch when there is one.
std::string review(const std::string& uid, const json* patch, const std::string* warning) {
  json response{{"uid", uid}, {"allowed", true}};
  if (patch) {
    response["patchType"] = "JSONPatch";
    response["patch"] = base64(patch->dump());
  }
  if (warning) response["warnings"] = json::array({*warning});
  return json{{"apiVersion", "admission.k8s.io/v1"},
              {"kind", "AdmissionReview"},
              {"response", std::move(response)}}
      .dump();
}

// The kind of the request's object when it is a Deployment or StatefulSet of
// apps/v1 being created or updated; "" otherwise.
std::string workload_write(const json& request) {
  const auto kind = request.find("kind");
  if (kind == request.end() || string_member(*kind, "group") != "apps" ||
      string_member(*kind, "version") != "v1") {
    return {};
  }
  std::string name = string_member(*kind, "kind");
  if (name != "Deployment" && name != "StatefulSet") return {};
  const std::string operation = string_member(request, "operation");
  if (operation != "CREATE" && operation != "UPDATE") return {};
  const auto object = request.find("object");
  if (object == request.end() || !object->is_object()) return {};
  return name;
}

// Whether the request is a write of gracekeeper's own reconciler: its
// server-side apply or hook patch, both under field manager "gracekeeper",
// sent as the operator's own user. Any client can name the field manager.
bool own_write(const json& request, const std::string& own_user) {
  if (own_user.empty()) return false;
  const auto options = request.find("options");
  const auto user = request.find("userInfo");
  return options != request.end() && options->is_object() &&
         string_member(*options, "fieldManager") == kFieldManager && user != request.end() &&
         user->is_object() && string_member(*user, "username") == own_user;
}

// The operations that remove gracekeeper's own hooks the plan no longer
// states (ContainerPlan::Action::Remove: the wait fell to 0), as the
// reconciler's server-side apply drops them: a container whose hook is
// gracekeeper's (`deployment`, projected from `object`) and that
// `configuration` leaves out loses its preStop, and its lifecycle when
// nothing else is in it (budget::apply_plan does the same).
json hook_removals(const json& object, const budget::Deployment& deployment,
                   const json& configuration) {
  json ops = json::array();
  const json::json_pointer stated_at("/spec/template/spec/containers");
  const json stated = configuration.contains(stated_at) && configuration[stated_at].is_array()
                          ? configuration[stated_at]
                          : json::array();
  const json& containers = object["spec"]["template"]["spec"]["containers"];
  if (!containers.is_array()) return ops;
  for (std::size_t i = 0; i < containers.size(); ++i) {
    const std::string name = string_member(containers[i], "name");
    const auto projected = std::ranges::find(deployment.containers, name, &budget::Container::name);
    if (projected == deployment.containers.end() || projected->sidecar ||
        !projected->pre_stop.owned) {
      continue;
    }
    if (std::ranges::any_of(stated,
                            [&](const json& c) { return string_member(c, "name") == name; })) {
      continue;
    }
    const auto lifecycle = containers[i].find("lifecycle");
    if (lifecycle == containers[i].end() || !lifecycle->is_object() ||
        !lifecycle->contains("preStop")) {
      continue;
    }
    const std::string at = "/spec/template/spec/containers/" + std::to_string(i) + "/lifecycle";
    ops.push_back({{"op", "remove"}, {"path", lifecycle->size() == 1 ? at : at + "/preStop"}});
  }
  return ops;
}

std::optional<NamespaceInputs::Figure> admission_figure(const AdmissionInputs& in,
                                                        const CachedPolicy& p) {
  auto s = policy_propagation(in.propagation, p);
  if (!s) return std::nullopt;
  return NamespaceInputs::Figure{s->seconds, s->available};
}

// The applied annotation as `object` has it, when the new one differs from it
// only in its time: the fields were set back and are restored to what
// gracekeeper wrote before (a re-applied manifest), which is no new tune. The
// old value is kept, so the object is stored exactly as it was (a Deployment's
// generation counts annotation changes too) and churn control still sees the
// time of the last real change.
std::optional<std::string> unchanged_record(const json& object, const std::string& wanted) {
  const auto& annotations = object["metadata"].value("annotations", json::object());
  const std::string current = string_member(annotations, budget::kAnnotationApplied);
  if (current.empty()) return std::nullopt;
  json a = json::parse(current, nullptr, /*allow_exceptions=*/false);
  json b = json::parse(wanted, nullptr, /*allow_exceptions=*/false);
  if (!a.is_object() || !b.is_object()) return std::nullopt;
  a.erase("time");
  b.erase("time");
  if (a != b) return std::nullopt;
  return current;
}

// The decision on `object` (an opted-in Deployment): the patch of the
// current plan, or null when there is nothing to write.
// The old object's pod template, read again from the body (the first parse
// dropped the old object); null when there is none.
json old_template(std::string_view body) {
  const json document = json::parse(body, nullptr, /*allow_exceptions=*/false);
  const json::json_pointer at("/request/oldObject/spec/template");
  return document.is_object() && document.contains(at) ? document[at] : json();
}

// The Deployment of the request in namespace `ns`, projected from the same
// view as the reconciler's: the budget fields through MessagePack, as the
// cache keeps them (cache.cpp).
std::expected<budget::Deployment, budget::FieldErrors> admitted_deployment(const json& object,
                                                                           const std::string& kind,
                                                                           const std::string& ns) {
  json fields = budget_fields(object);
  fields["kind"] = kind;
  fields["metadata"]["namespace"] = ns;
  if (string_member(fields["metadata"], "name").empty()) {
    fields["metadata"]["name"] = string_member(object["metadata"], "generateName");
  }
  const budget::Json view = budget::Json::from_msgpack(json::to_msgpack(fields));
  return CachedDeployment::project(view);
}

std::optional<json> plan_patch(const json& object, const std::string& kind,
                               const std::string& request_namespace, std::string_view body,
                               const AdmissionInputs& in, AdmissionAnswer& answer) {
  // On CREATE the namespace, and with generateName the name, are not set yet.
  const std::string ns = string_member(object["metadata"], "namespace").empty()
                             ? request_namespace
                             : string_member(object["metadata"], "namespace");
  const auto deployment = admitted_deployment(object, kind, ns);

  const NamespaceInputs inputs = namespace_inputs(
      in.policies, in.services, ns,
      [&in](const CachedPolicy& p) { return admission_figure(in, p); }, in.capabilities);
  DeploymentFacts facts;
  facts.deployment = &deployment;
  facts.uid = string_member(object["metadata"], "uid");
  facts.ns = &inputs;
  facts.now = in.now;
  facts.in_request = true;
  const DeploymentDecision decision = decide_deployment(facts);
  answer.outcome = decision.policy_key.empty() ? AdmissionAnswer::Outcome::Ignored
                                               : AdmissionAnswer::Outcome::Unchanged;
  if (!decision.write) return std::nullopt;
  // A re-tune (a new figure or policy) that this request neither triggers
  // (nothing set back) nor rides on (the pod template unchanged, so no
  // rollout of its own) is left to the reconciler, which rolls re-tunes out
  // at most changes.maxConcurrentRollouts at a time. Rare: the old object is
  // read only then.
  if (decision.write->retune && decision.set_back.empty()) {
    const json::json_pointer at("/spec/template");
    const json old = old_template(body);
    if (!old.is_null() && object.contains(at) && object[at] == old) return std::nullopt;
  }
  json configuration = decision.write->configuration;
  const json::json_pointer at =
      json::json_pointer("/metadata/annotations") / std::string(budget::kAnnotationApplied);
  if (configuration.contains(at) && configuration[at].is_string()) {
    if (auto kept = unchanged_record(object, configuration[at].get<std::string>())) {
      configuration[at] = *kept;
    }
  }
  json patch = owned_fields_patch(object, configuration);
  for (auto& op : hook_removals(object, *deployment, configuration)) patch.push_back(std::move(op));
  // Only the owned fields' values as they are (a dry-run of the manifest
  // just applied, say): nothing to change.
  if (object.patch(patch) == object) return std::nullopt;
  return patch;
}

// The request of an AdmissionReview, with its uid: a Bad Request answer
// when the body is none.
std::expected<json, AdmissionAnswer> read_request(std::string_view body) {
  if (body.size() > kMaxAdmissionBytes) {
    return std::unexpected(
        bad_request(413, fmt::format("AdmissionReview of {} bytes: the limit is {} bytes",
                                     body.size(), kMaxAdmissionBytes)));
  }
  if (!kube::json_within_depth(body, kMaxDepth)) {
    return std::unexpected(
        bad_request(400, fmt::format("AdmissionReview nested deeper than {}", kMaxDepth)));
  }
  // The old object is never read: it is dropped while parsing, which halves
  // what an UPDATE costs.
  const json::parser_callback_t drop_old = [](int depth, json::parse_event_t event, json& parsed) {
    return !(event == json::parse_event_t::key && depth == 2 && parsed == "oldObject");
  };
  json document;
  try {
    document = json::parse(body, drop_old);
  } catch (const json::exception& e) {
    return std::unexpected(bad_request(400, std::string("malformed JSON: ") + e.what()));
  }
  if (!document.is_object())
    return std::unexpected(bad_request(400, "the body is not a JSON object"));
  const std::string api_version = string_member(document, "apiVersion");
  if (api_version != "admission.k8s.io/v1" ||
      string_member(document, "kind") != "AdmissionReview") {
    return std::unexpected(bad_request(
        400, fmt::format("expected an AdmissionReview of admission.k8s.io/v1, got kind \"{}\" of "
                         "apiVersion \"{}\" (register the webhook with admissionReviewVersions: "
                         "[v1])",
                         string_member(document, "kind"), api_version)));
  }
  const auto request = document.find("request");
  if (request == document.end() || !request->is_object()) {
    return std::unexpected(bad_request(400, "the AdmissionReview has no request"));
  }
  if (string_member(*request, "uid").empty()) {
    return std::unexpected(bad_request(400, "the AdmissionReview's request has no uid"));
  }
  return std::move(*request);
}

// Admitted as it is, though opted in: `error` for the metrics and the log,
// `warning` for whoever applied it.
void admit_unchanged(AdmissionAnswer& answer, const std::string& uid, std::string error,
                     const std::string& warning) {
  answer.outcome = AdmissionAnswer::Outcome::Error;
  answer.error = std::move(error);
  answer.body = review(uid, nullptr, &warning);
}

}  // namespace

std::string_view to_string(AdmissionAnswer::Outcome o) {
  switch (o) {
    case AdmissionAnswer::Outcome::Patched:
      return "patched";
    case AdmissionAnswer::Outcome::Unchanged:
      return "unchanged";
    case AdmissionAnswer::Outcome::Ignored:
      return "ignored";
    case AdmissionAnswer::Outcome::Error:
      return "error";
    case AdmissionAnswer::Outcome::BadRequest:
      return "bad_request";
  }
  return "error";
}

std::optional<PropagationState> status_propagation(const CachedPolicy& p) {
  const json& status = p.status;
  if (!status.is_object() || status.value("observedGeneration", std::int64_t{-1}) != p.generation) {
    return std::nullopt;
  }
  const auto propagation = status.find("propagation");
  if (propagation == status.end() || !propagation->is_object()) return std::nullopt;
  const auto seconds = propagation->find("seconds");
  if (seconds == propagation->end() || !seconds->is_number()) return std::nullopt;
  PropagationState s;
  s.seconds = seconds->get<double>();
  s.source = string_member(*propagation, "source");
  if (const auto conditions = status.find("conditions");
      conditions != status.end() && conditions->is_array()) {
    for (const auto& c : *conditions) {
      if (string_member(c, "type") == "MetricsAvailable") {
        s.available = string_member(c, "status") == "True";
      }
    }
  }
  return s;
}

std::optional<PropagationState> policy_propagation(const PropagationBook* book,
                                                   const CachedPolicy& p) {
  if (book) {
    if (const PropagationState* mine = book->state(p.namespace_ + "/" + p.name)) return *mine;
  }
  return status_propagation(p);
}

AdmissionAnswer admit(std::string_view body, const AdmissionInputs& in) {
  auto read = read_request(body);
  if (!read) return std::move(read.error());
  json& request = *read;
  const std::string uid = string_member(request, "uid");

  AdmissionAnswer answer;
  const std::string kind = workload_write(request);
  if (kind.empty()) {
    answer.body = review(uid, nullptr, nullptr);
    return answer;
  }
  const json& object = request["object"];
  const auto metadata = object.find("metadata");
  if (metadata == object.end() || !opted_in(*metadata)) {
    answer.body = review(uid, nullptr, nullptr);
    return answer;
  }
  answer.opted_in = true;
  if (own_write(request, in.own_user)) {
    // The reconciler's own write is its plan, on the leader's newest figure;
    // a replica planning it again from the status could undo a re-tune the
    // status does not show yet.
    answer.body = review(uid, nullptr, nullptr);
    return answer;
  }
  if (!in.not_ready.empty()) {
    admit_unchanged(
        answer, uid, in.not_ready,
        fmt::format(
            "gracekeeper is not ready ({}); admitted unchanged, the operator tunes it later",
            in.not_ready));
    return answer;
  }
  try {
    const auto patch =
        plan_patch(object, kind, string_member(request, "namespace"), body, in, answer);
    if (patch) answer.outcome = AdmissionAnswer::Outcome::Patched;
    answer.body = review(uid, patch ? &*patch : nullptr, nullptr);
  } catch (const std::exception& e) {
    admit_unchanged(answer, uid, e.what(),
                    fmt::format("gracekeeper could not plan this {} ({}); admitted unchanged, the "
                                "operator tunes it later",
                                kind, e.what()));
  }
  return answer;
}

}  // namespace gracekeeper::controller
