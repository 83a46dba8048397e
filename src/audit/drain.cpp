#include "gracekeeper/audit/drain.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "gracekeeper/audit/termination_audit.h"  // pod_wait
#include "gracekeeper/budget/deployment.h"
#include "gracekeeper/budget/mesh.h"
#include "gracekeeper/core/json.h"
#include "gracekeeper/core/time.h"

namespace gracekeeper::controller {
namespace {

using std::chrono::seconds;

// SIGKILL's exit code, as the runtime reports a killed container.
constexpr std::int64_t kKilledExitCode = 137;
// finishedAt and deletionTimestamp are whole seconds, and the kubelet kills
// a little after the deadline the API server set: a kill this close to it
// (or later) is the kill at the grace.
constexpr seconds kKillTolerance{2};

std::optional<std::chrono::system_clock::time_point> time_member(const nlohmann::json& object,
                                                                 const char* key) {
  return core::parse_rfc3339(core::string_member(object, key));
}

const nlohmann::json* terminated_state(const nlohmann::json& statuses, const std::string& name) {
  if (!statuses.is_array()) return nullptr;
  for (const auto& s : statuses) {
    if (core::string_member(s, "name") != name) continue;
    const auto* state = core::member(s, "state");
    return state != nullptr ? core::member(*state, "terminated") : nullptr;
  }
  return nullptr;
}

}  // namespace

std::expected<std::optional<MeasuredDrain>, std::string> measure_drain(const nlohmann::json& pod) {
  static const nlohmann::json none;
  const auto* metadata = core::member(pod, "metadata");
  if (metadata == nullptr) return std::unexpected("no metadata");
  const auto deadline = time_member(*metadata, "deletionTimestamp");
  if (!deadline) return std::optional<MeasuredDrain>();  // not being deleted
  const std::int64_t grace = core::int_member(*metadata, "deletionGracePeriodSeconds", -1);
  if (grace <= 0) return std::unexpected("deleted without a grace period: nothing drained");

  const auto read = read_pod(pod);
  if (!read) return std::unexpected("unreadable pod spec: " + read.error().front().format());
  const auto wait = pod_wait(*read);
  if (!wait) return std::unexpected("a preStop hook of unknown length: SIGTERM's time is unknown");

  MeasuredDrain out;
  out.grace = grace;
  out.wait = std::min(*wait, grace);
  const auto deletion = *deadline - seconds(grace);
  const auto sigterm = deletion + seconds(out.wait);
  const auto* status = core::member(pod, "status");
  const nlohmann::json& statuses =
      status != nullptr && core::member(*status, "containerStatuses") != nullptr
          ? *core::member(*status, "containerStatuses")
          : none;
  std::optional<std::chrono::system_clock::time_point> last;
  double longest = -1;
  for (const budget::Container& c : read->containers) {
    // A native sidecar stops after the app containers; a mesh proxy's stay
    // is its mesh's (ProxyExitsEarly), not the app's drain.
    if (c.sidecar || budget::proxy_mesh(c.name)) continue;
    const auto* terminated = terminated_state(statuses, c.name);
    if (terminated == nullptr) return std::optional<MeasuredDrain>();  // still running
    const auto finished = time_member(*terminated, "finishedAt");
    if (!finished) {
      return std::unexpected(fmt::format("container {}: no terminated.finishedAt", c.name));
    }
    const std::int64_t exit_code = core::int_member(*terminated, "exitCode");
    const double drained =
        std::max(0.0, std::chrono::duration<double>(*finished - sigterm).count());
    const bool killed = exit_code == kKilledExitCode && *finished >= *deadline - kKillTolerance;
    last = std::max(last.value_or(*finished), *finished);
    if (out.sample.cut_short) continue;  // the first killed container names the sample
    if (killed || drained > longest) {
      out.container = c.name;
      out.exit_code = exit_code;
      longest = drained;
      out.sample.cut_short = killed;
    }
  }
  if (!last) return std::unexpected("no app container");
  out.sample.at = *last;
  // Killed: its drain was at least the time it was given after SIGTERM.
  out.sample.seconds =
      out.sample.cut_short ? static_cast<double>(grace - out.wait) : std::max(longest, 0.0);
  return std::optional<MeasuredDrain>(std::move(out));
}

std::expected<budget::Deployment, budget::FieldErrors> read_pod(const nlohmann::json& pod) {
  budget::Json object(pod);
  // A list's items carry neither: the informer's projection may lack them.
  object["apiVersion"] = "v1";
  object["kind"] = "Pod";
  return budget::project_deployment(object);
}

std::vector<std::string> pod_drain_fields() {
  return {"metadata.name",
          "metadata.namespace",
          "metadata.uid",
          "metadata.annotations",
          "metadata.labels",
          "metadata.creationTimestamp",
          "metadata.deletionTimestamp",
          "metadata.deletionGracePeriodSeconds",
          "spec.containers",
          "spec.initContainers",
          "spec.terminationGracePeriodSeconds",
          "status.containerStatuses"};
}

bool pod_terminating(const nlohmann::json& metadata) {
  const auto* deletion = core::member(metadata, "deletionTimestamp");
  return deletion != nullptr && deletion->is_string();
}

}  // namespace gracekeeper::controller
