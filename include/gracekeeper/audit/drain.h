// A pod's drain, read from its last status (docs/api.md, "The measured
// drain"). The kubelet runs the preStop hook, then sends SIGTERM, then
// SIGKILL at the grace, all counted from the deletion:
//
//   deletion  = metadata.deletionTimestamp - metadata.deletionGracePeriodSeconds
//   SIGTERM   = deletion + min(the pod's preStop wait, the grace)
//   drain     = the last app container's terminated.finishedAt - SIGTERM
//   cut short = an app container exited 137 (SIGKILL) at the grace
//
// The wait is read from the pod itself (what the kubelet ran), as the
// termination audit reads a template's (pod_wait). Timestamps are whole
// seconds: a drain is known to a second.
#pragma once

#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gracekeeper/budget/deployment.h"
#include "gracekeeper/budget/drain.h"

namespace gracekeeper::controller {

struct MeasuredDrain {
  budget::DrainSample sample;
  std::string container;  // the app container that drained longest, or was killed
  std::int64_t grace = 0;
  std::int64_t wait = 0;  // the preStop wait before SIGTERM
  std::int64_t exit_code = 0;
};

// The drain of a deleted pod (`kubectl get pod -o json`); nullopt while an
// app container still runs. An error says why it cannot be measured (a
// hook of unknown length, a deletion with no grace, an unreadable status).
std::expected<std::optional<MeasuredDrain>, std::string> measure_drain(const nlohmann::json& pod);

// A Pod (`kubectl get pod -o json`, or its informer's projection) as the
// budget engine reads one: its containers, hooks and grace.
std::expected<budget::Deployment, budget::FieldErrors> read_pod(const nlohmann::json& pod);

// The members of a Pod that measure_drain reads (kube::FieldSet paths).
std::vector<std::string> pod_drain_fields();

// Whether a Pod's metadata says it is being deleted: the pods the drain
// informer builds in full.
bool pod_terminating(const nlohmann::json& metadata);

}  // namespace gracekeeper::controller
