// `gracekeeper revert`: the way back from a tuned Deployment or StatefulSet to
// the user's own values (docs/api.md, "Command line"). The plan is pure: the object
// as the API server returns it -> the one write that reverts it.
#pragma once

#include <expected>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/budget/engine.h"

namespace gracekeeper::cli {

// The field manager whose ownership revert releases, and the one its own
// write is made by (an Update: it ends up owning the values it restored, as
// `kubectl edit` would, so a later server-side apply of the same values
// meets no conflict).
inline constexpr const char* kRevertFieldManager = "gracekeeper-revert";
inline constexpr const char* kOperatorFieldManager = "gracekeeper";

struct RevertPlan {
  // Carries `gracekeeper.dev/applied` or fields owned by gracekeeper: there
  // is something to revert. Otherwise the patch is empty.
  bool tuned = false;
  // Restored fields, `field: from -> to` as in `plan`'s summary.
  std::vector<budget::Change> changes;
  // Fields left as they are, and why (not recorded, changed since).
  std::vector<std::string> notes;
  // One RFC 6902 JSON patch: the resourceVersion read (the write fails with
  // Conflict if the Deployment changed since), the user's values, the
  // annotations removed, managedFields without gracekeeper's entries.
  budget::Json patch = budget::Json::array();
};

// Plans the revert of one Deployment or StatefulSet object (apps/v1, as read
// from the API server). A StatefulSet's strategy is never written (it has no
// spec.strategy; gracekeeper never changes its spec.updateStrategy). An error
// names what is wrong with the object.
std::expected<RevertPlan, std::string> plan_revert(const budget::Json& object);

// One object named on the command line: NAME (a Deployment), or KIND/NAME with
// KIND as kubectl spells it (deployment, deployments, deploy, statefulset,
// statefulsets, sts; any case; with or without ".apps").
struct RevertTarget {
  std::string kind;  // "Deployment" or "StatefulSet"
  std::string name;
  bool operator==(const RevertTarget&) const = default;
};

// An object name as the API server takes one in a path: lower-case letters,
// digits, '-' and '.', at most 253 characters.
bool is_object_name(std::string_view name);

// An error names what is wrong: the kind, or the name (only lower-case
// letters, digits, '-' and '.', as the API server's object names).
std::expected<RevertTarget, std::string> parse_revert_target(std::string_view argument);

// `gracekeeper revert [flags] [NAME | deployment/NAME | statefulset/NAME ...]`:
// 0 when every object was reverted (or had nothing to revert), 1 when one
// could not be, 2 for usage.
int revert_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace gracekeeper::cli
