// What the policy reconciler measured, per policy ("ns/name"): the figure
// the Deployment reconciler plans with. Written by the policy reconciler
// only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "gracekeeper/deployment/status.h"
#include "gracekeeper/propagation/propagation.h"

namespace gracekeeper::controller {

struct PolicyMeasurement {
  PropagationState state;
  std::optional<propagation::LastGood> last_good;
  std::int64_t generation = -1;  // the policy generation it was measured for
  TimePoint next{};              // when to measure again
  // `state.seconds` is not a fresh measurement: the source failed (or had
  // too few samples) and the figure is the last good value or staticSeconds.
  bool fallback = false;
  // ... and it is staticSeconds: no good value in the last hour (the status
  // then reads source Static).
  bool static_fallback = false;
  // The last good value was seeded from the policy's status as the server
  // had it (a restart; seed_last_good()), not measured by this process.
  bool seeded = false;
};

class PropagationBook {
 public:
  const PolicyMeasurement* find(std::string_view policy_key) const {
    auto it = entries_.find(policy_key);
    return it == entries_.end() ? nullptr : &it->second;
  }
  const PropagationState* state(std::string_view policy_key) const {
    const PolicyMeasurement* m = find(policy_key);
    return m ? &m->state : nullptr;
  }
  void put(std::string policy_key, PolicyMeasurement m) {
    entries_.insert_or_assign(std::move(policy_key), std::move(m));
  }
  void erase(std::string_view policy_key) {
    if (auto it = entries_.find(policy_key); it != entries_.end()) entries_.erase(it);
  }

 private:
  std::map<std::string, PolicyMeasurement, std::less<>> entries_;
};

}  // namespace gracekeeper::controller
