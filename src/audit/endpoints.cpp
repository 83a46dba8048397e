#include "gracekeeper/audit/endpoints.h"

#include <algorithm>

#include "gracekeeper/core/json.h"
#include "gracekeeper/propagation/observed.h"

namespace gracekeeper::controller {
namespace {

using core::member;

bool flag(const nlohmann::json* conditions, const char* key, bool absent) {
  const nlohmann::json* v = conditions ? member(*conditions, key) : nullptr;
  return v && v->is_boolean() ? v->get<bool>() : absent;
}

// The ReplicaSet controller's alphabet for hashes and random suffixes
// (k8s.io/apimachinery/pkg/util/rand: no vowels, no 0, 1, 3).
bool safe_encoded(std::string_view s) {
  static constexpr std::string_view alphabet = "bcdfghjklmnpqrstvwxz2456789";
  return !s.empty() &&
         std::ranges::all_of(s, [](char c) { return alphabet.find(c) != std::string_view::npos; });
}

}  // namespace

std::vector<std::string> endpoint_slice_fields() {
  return {"metadata.name",        "metadata.namespace",       "metadata.annotations",
          "endpoints.conditions", "endpoints.targetRef.kind", "endpoints.targetRef.name"};
}

SliceChange read_slice(const nlohmann::json& object) {
  SliceChange out;
  const nlohmann::json* metadata = member(object, "metadata");
  if (const auto* ns = metadata ? member(*metadata, "namespace") : nullptr; ns && ns->is_string()) {
    out.ns = ns->get<std::string>();
  }
  if (const auto* annotations = metadata ? member(*metadata, "annotations") : nullptr) {
    if (const auto* t = member(*annotations, propagation::kTriggerTimeAnnotation)) {
      // Not a string is garbage too: kept as text, so it is reported as such.
      out.trigger = t->is_string() ? t->get<std::string>() : t->dump();
    }
  }
  const nlohmann::json* endpoints = member(object, "endpoints");
  if (!endpoints || !endpoints->is_array()) return out;
  out.endpoints.reserve(endpoints->size());
  for (const auto& e : *endpoints) {
    const nlohmann::json* ref = member(e, "targetRef");
    const nlohmann::json* kind = ref ? member(*ref, "kind") : nullptr;
    const nlohmann::json* name = ref ? member(*ref, "name") : nullptr;
    if (!kind || !name || *kind != "Pod" || !name->is_string()) continue;
    const nlohmann::json* conditions = member(e, "conditions");
    out.endpoints.push_back({name->get<std::string>(), flag(conditions, "ready", true),
                             flag(conditions, "serving", true),
                             flag(conditions, "terminating", false)});
  }
  return out;
}

std::optional<PodOwner> pod_owner(std::string_view pod) {
  const auto last = pod.rfind('-');
  if (last == std::string_view::npos || pod.size() - last - 1 != 5) return std::nullopt;
  const std::string_view rs = pod.substr(0, last);
  const auto dash = rs.rfind('-');
  if (dash == std::string_view::npos || dash == 0) return std::nullopt;
  const std::string_view hash = rs.substr(dash + 1);
  if (!safe_encoded(pod.substr(last + 1)) || !safe_encoded(hash) || hash.size() > 10) {
    return std::nullopt;
  }
  return PodOwner{std::string(rs.substr(0, dash)), std::string(hash)};
}

std::uint64_t pod_id(std::string_view pod) {
  std::uint64_t h = 14695981039346656037ull;
  for (const char c : pod) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

CachedSlice cache_slice(const std::vector<SeenEndpoint>& endpoints) {
  CachedSlice out;
  out.endpoints.reserve(endpoints.size());
  for (const SeenEndpoint& e : endpoints) {
    out.endpoints.push_back({pod_id(e.pod), e.ready, e.serving, e.terminating});
  }
  return out;
}

std::vector<Turned> turned(const CachedSlice* before, const std::vector<SeenEndpoint>& after) {
  std::vector<Turned> out;
  if (!before) return out;  // first sight: nothing is known to have changed
  const CachedSlice now = cache_slice(after);
  for (const CachedEndpoint& was : before->endpoints) {
    auto it = std::ranges::find(now.endpoints, was.pod, &CachedEndpoint::pod);
    if (it == now.endpoints.end()) {
      if (was.ready || was.serving) out.push_back({"", false});
      continue;
    }
    const bool began_terminating = !was.terminating && it->terminating;
    if ((was.ready && !it->ready) || (was.serving && !it->serving) || began_terminating) {
      const auto i = static_cast<std::size_t>(it - now.endpoints.begin());
      out.push_back({after[i].pod, began_terminating});
    }
  }
  return out;
}

}  // namespace gracekeeper::controller
