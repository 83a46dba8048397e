// The measured drain (docs/api.md, "The measured drain"): how long a
// workload's app took from SIGTERM to exit, as its pods' terminations show
// it, and the figure a policy with drain.source Observed plans the grace
// with. Pure: no I/O; the termination audit takes the samples.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gracekeeper/budget/policy.h"

namespace gracekeeper::budget {

// One pod's termination.
struct DrainSample {
  std::chrono::system_clock::time_point at;  // when the last app container exited
  // SIGTERM to the last app container's exit, in seconds. For a pod the
  // kubelet killed at the grace (`cut_short`), the time it was given: its
  // drain was at least this long.
  double seconds = 0;
  bool cut_short = false;
  bool operator==(const DrainSample&) const = default;
};

// What a cut-short sample counts as in the quantile: twice the time it was
// given, so that each kill at least doubles the drain the next pods get.
inline constexpr double kCutShortFactor = 2;

struct DrainFigure {
  std::int64_t seconds = 0;  // ceil(quantile), at most drain.maxSeconds
  std::size_t samples = 0;   // in the window
  bool cut_short = false;    // one of them was killed at the grace
  bool capped = false;       // the quantile was above drain.maxSeconds
};

// The figure of `samples` (oldest first) under `spec` at `now`: the
// quantile of those in the window, once there are minSamples of them or one
// was cut short; nullopt otherwise.
std::optional<DrainFigure> drain_figure(std::span<const DrainSample> samples,
                                        const PolicySpec::Drain& spec,
                                        std::chrono::system_clock::time_point now);

// A workload's key in the DrainBook and the PodBook: "Deployment/ns/name".
inline std::string workload_key(std::string_view kind, std::string_view key) {
  return std::string(kind) + "/" + std::string(key);
}

// The measured drains per workload ("Deployment/ns/name"), the last
// kSamplesKept of each.
class DrainBook {
 public:
  static constexpr std::size_t kSamplesKept = 64;
  void add(const std::string& workload, const DrainSample&);
  // Oldest first; empty when none.
  std::span<const DrainSample> samples(const std::string& workload) const;
  void erase(const std::string& workload) { samples_.erase(workload); }

 private:
  // A deque's elements are not contiguous: a vector, trimmed from the front.
  std::unordered_map<std::string, std::vector<DrainSample>> samples_;
};

}  // namespace gracekeeper::budget
