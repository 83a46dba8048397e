// Writes a Plan into a Deployment object (decoded JSON): the fields gracekeeper
// owns (spec.strategy, terminationGracePeriodSeconds, target containers'
// lifecycle.preStop) and the `gracekeeper.dev/applied` annotation. Everything
// else in the object is left exactly as it was.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "gracekeeper/budget/engine.h"

namespace gracekeeper::budget {

// The annotation value as compact JSON: {"policy","preStop","grace","graceOwned",
// "propagation","containers","waits","time","user"}; `waits` maps each container whose
// hook is gracekeeper's to its wait; `user` holds the user's own values
// (plan.user: grace, maxSurge, maxUnavailable, preStop per container, null
// for none), left out when plan.user is nullopt.
std::string applied_annotation(const Plan&, const std::string& policy_name,
                               std::chrono::system_clock::time_point time);

// Applies `plan` to `deployment` in place when plan.changed(); otherwise does nothing.
void apply_plan(Json& deployment, const Plan& plan, const std::string& policy_name,
                std::chrono::system_clock::time_point time);

// The projection of the Deployment once `plan` is applied to it: what
// project_deployment reads of the object apply_plan writes, without the
// object (the Tuned Event's findings are planned on it).
Deployment apply_plan(Deployment current, const Plan& plan, const std::string& policy_name,
                      std::chrono::system_clock::time_point time);

// The server-side apply configuration for `plan` on `current` (the cluster's
// object, by namespace and name): apiVersion, kind, metadata.name/namespace,
// the applied annotation, and every field gracekeeper owns on it, not only
// the ones that change. A field an apply leaves out is released, and when no
// other manager owns it the server removes it, so each apply must carry the
// whole set: the strategy (when managed), the grace, and the preStop hook of
// every container whose hook is gracekeeper's.
Json apply_configuration(const Deployment& current, const Plan& plan,
                         const std::string& policy_name,
                         std::chrono::system_clock::time_point time);

}  // namespace gracekeeper::budget
