// What the operator keeps of each Service: the selector, the one thing that
// decides whether a Deployment's pods are behind it (docs/api.md, "Checks that are
// reported": NotBehindService).
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gracekeeper/kube/client.h"

namespace gracekeeper::controller {

// A Service that selects pods. The EndpointSlice controller gives endpoints
// only to a Service with a selector that is not of type ExternalName, and
// then to every pod whose labels carry all of the selector's pairs, whatever
// ports the pods declare. Those are the only Services cached; the ports do
// not change which pods are selected, so they are not kept.
struct CachedService {
  std::map<std::string, std::string> selector;  // never empty
};

// The members project_service reads, as kube::FieldSet paths.
std::vector<std::string> service_fields();

// nullopt for a Service that selects no pods (no selector, an empty one, or
// type ExternalName): it is not cached.
std::optional<CachedService> project_service(const nlohmann::json& object);

// The EndpointSlice controller's rule: every pair of the selector is among
// the pod's labels.
bool selects(const CachedService&, const std::map<std::string, std::string>& pod_labels);

}  // namespace gracekeeper::controller
