#include "gracekeeper/budget/drain.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace gracekeeper::budget {

std::optional<DrainFigure> drain_figure(std::span<const DrainSample> samples,
                                        const PolicySpec::Drain& spec,
                                        std::chrono::system_clock::time_point now) {
  const auto oldest = now - std::chrono::seconds(spec.window_seconds);
  std::vector<double> values;
  DrainFigure figure;
  for (const DrainSample& s : samples) {
    if (s.at < oldest) continue;
    values.push_back(s.cut_short ? s.seconds * kCutShortFactor : s.seconds);
    figure.cut_short = figure.cut_short || s.cut_short;
  }
  figure.samples = values.size();
  if (values.empty() ||
      (values.size() < static_cast<std::size_t>(spec.min_samples) && !figure.cut_short)) {
    return std::nullopt;
  }
  // Nearest rank: the smallest value with at least `quantile` of the
  // samples at or below it.
  std::ranges::sort(values);
  const auto rank =
      static_cast<std::size_t>(std::ceil(spec.quantile * static_cast<double>(values.size())));
  const double q = values[std::clamp<std::size_t>(rank, 1, values.size()) - 1];
  const auto seconds = static_cast<std::int64_t>(std::ceil(std::max(q, 0.0)));
  figure.capped = seconds > spec.max_seconds;
  figure.seconds = std::min<std::int64_t>(seconds, spec.max_seconds);
  return figure;
}

void DrainBook::add(const std::string& workload, const DrainSample& sample) {
  auto& kept = samples_[workload];
  kept.push_back(sample);
  if (kept.size() > kSamplesKept) kept.erase(kept.begin());
}

std::span<const DrainSample> DrainBook::samples(const std::string& workload) const {
  auto it = samples_.find(workload);
  if (it == samples_.end()) return {};
  return it->second;
}

}  // namespace gracekeeper::budget
