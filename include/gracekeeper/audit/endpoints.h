// What the operator keeps of an EndpointSlice, for source Observed and the
// termination audit (docs/api.md, "The termination audit"): per endpoint of an opted-in
// Deployment's pod, a 64-bit hash of the pod's name and two conditions, 16 bytes. Nothing else: no
// addresses, no ports, no topology, no names (the change that needs a name, an endpoint turning
// terminating, brings it). Slices without such an endpoint are not cached.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/kube/client.h"

namespace gracekeeper::controller {

inline const kube::Resource endpoint_slices{"discovery.k8s.io", "v1", "endpointslices", true};

// An endpoint as a change brings it.
struct SeenEndpoint {
  std::string pod;  // targetRef.name of a targetRef of kind Pod
  // conditions: an absent ready or serving is true (the API's "unknown,
  // interpret as ready"), an absent terminating false.
  bool ready = true;
  bool serving = true;
  bool terminating = false;
};

// FNV-1a of a pod's name: what the cache keeps instead of the name.
std::uint64_t pod_id(std::string_view pod);

struct CachedEndpoint {
  std::uint64_t pod = 0;  // pod_id
  bool ready = true;
  bool serving = true;
  bool terminating = false;
};

struct CachedSlice {
  std::vector<CachedEndpoint> endpoints;
};
CachedSlice cache_slice(const std::vector<SeenEndpoint>&);

// A slice as one change brings it, before the filter.
struct SliceChange {
  std::string ns;
  std::optional<std::string> trigger;   // endpoints.kubernetes.io/last-change-trigger-time
  std::vector<SeenEndpoint> endpoints;  // every endpoint with a Pod targetRef
};

// The members of an EndpointSlice that read_slice reads (kube::FieldSet
// paths): the informer builds nothing else.
std::vector<std::string> endpoint_slice_fields();

// Never throws; what is not as expected (a condition that is not a
// boolean, an endpoint without a Pod targetRef) is skipped.
SliceChange read_slice(const nlohmann::json& object);

// The Deployment and ReplicaSet hash of a pod named by the ReplicaSet
// controller: "<deployment>-<pod-template-hash>-<5 random>". nullopt for
// other names (a StatefulSet's "web-0", a pod whose name was cut to 63).
struct PodOwner {
  std::string deployment;
  std::string hash;  // the pod-template-hash: one rollout
};
std::optional<PodOwner> pod_owner(std::string_view pod);

// An endpoint that changed towards leaving in this change: ready or serving
// turned false, terminating turned true, or it is gone while it was ready or
// serving. A pod's deletion is usually two changes: terminating (ready
// false) at once, serving false when the kubelet marks the pod not ready.
struct Turned {
  std::string pod;                 // "" when it is gone (only its hash was kept)
  bool began_terminating = false;  // terminating turned true: the pod is being deleted
};
std::vector<Turned> turned(const CachedSlice* before, const std::vector<SeenEndpoint>& after);

}  // namespace gracekeeper::controller
