// Changing the handler of an existing preStop hook (`httpGet` or `exec` ->
// `sleep`): a user's hook under `existing: Replace`, or an `exec sleep` that
// was written (by gracekeeper's `plan` or by hand) before the API server had
// the native action. A server-side apply cannot remove a field another
// manager owns: applying `sleep` next to the old handler keeps both (even
// when gracekeeper first takes the old value over, ownership of an equal
// value is only shared), and the API server rejects two handlers. So this
// case is written as a JSON patch (an update by manager `gracekeeper`) that
// swaps the hooks and sets the other owned fields in the same request: still
// one template change, one rollout. Later server-side applies take those
// fields back from gracekeeper's update entry like from any other updater.
#pragma once

#include <nlohmann/json.hpp>

#include "gracekeeper/budget/deployment.h"
#include "gracekeeper/budget/engine.h"

namespace gracekeeper::controller {

// Whether applying `plan` replaces an existing hook by one of another
// handler (sleep, exec, httpGet, tcpSocket).
bool changes_handler(const budget::Deployment&, const budget::Plan&);

// The RFC 6902 patch that turns `current` (the object on the server) into
// what the apply `configuration` describes: it tests the resourceVersion
// (so it changes only the object it was computed from), then sets the
// strategy, the grace period, each configured container's whole preStop
// (replacing any other handler) and the applied annotation.
nlohmann::json replacement_patch(const nlohmann::json& current,
                                 const nlohmann::json& configuration);

// The same without the resourceVersion test: the admission webhook's patch,
// applied by the API server to the object being admitted (which has no
// resourceVersion on CREATE).
nlohmann::json owned_fields_patch(const nlohmann::json& current,
                                  const nlohmann::json& configuration);

}  // namespace gracekeeper::controller
