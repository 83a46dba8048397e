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

// The annotation value: {"policy","preStop","grace","propagation","time"} as compact JSON.
std::string applied_annotation(const Plan&, const std::string& policy_name,
                               std::chrono::system_clock::time_point time);

// Applies `plan` to `deployment` in place when plan.changed(); otherwise does nothing.
void apply_plan(Json& deployment, const Plan& plan, const std::string& policy_name,
                std::chrono::system_clock::time_point time);

}  // namespace gracekeeper::budget
