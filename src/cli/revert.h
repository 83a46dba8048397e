// `gracekeeper revert`: the way back from a tuned Deployment to the user's own
// values (API.md "Command line"). The plan is pure: the Deployment as the API
// server returns it -> the one write that reverts it.
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

// Plans the revert of one Deployment object (apps/v1, as read from the API
// server). An error names what is wrong with the object.
std::expected<RevertPlan, std::string> plan_revert(const budget::Json& deployment);

// `gracekeeper revert [flags] [DEPLOYMENT...]`: 0 when every Deployment was
// reverted (or had nothing to revert), 1 when one could not be, 2 for usage.
int revert_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace gracekeeper::cli
