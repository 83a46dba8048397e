#include "gracekeeper/policy/policy_reconciler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gracekeeper/core/time.h"
#include "gracekeeper/log/log.h"
#include "gracekeeper/propagation/observed.h"

namespace gracekeeper::controller {

DeploymentCounts PolicyReconciler::count(const std::string& policy_key) const {
  return count(deps_.deployment_controller, policy_key);
}

DeploymentCounts PolicyReconciler::count(const DeploymentReconciler& controller,
                                         const std::string& policy_key) {
  DeploymentCounts c;
  const auto split = split_key(policy_key);
  const std::string& name = split.second;
  const NamespaceInputs inputs = controller.namespace_inputs(split.first);
  controller.store().in_namespace(
      split.first, [&](const std::string& key, const CachedDeployment& cached) {
        const auto d = controller.counted(key, cached, inputs);
        if (d.policy_key.empty() && std::ranges::binary_search(d.contenders, name)) {
          for (const auto& other : d.contenders) {
            if (other != name) c.shared_with[other].push_back(split_key(key).second);
          }
        }
        if (d.policy_key != policy_key) return;
        ++c.managed;
        c.compliant += d.state.compliant;
        c.pending += d.state.pending;
        c.violations += d.state.violating;
        c.rolling += d.state.rolling;
        c.pods_differ += d.state.pod_differs;
        if (d.state.drain_seconds > c.longest_drain) {
          c.longest_drain = d.state.drain_seconds;
          c.longest_drain_of = split_key(key).second;
        }
        if (!d.state.compliant) {
          c.not_compliant.push_back(split_key(key).second);
          c.only_rolling += d.state.holds_but_rolling();
        }
      });
  return c;
}

std::optional<propagation::LastGood> seed_last_good(const budget::PolicySpec& spec,
                                                    const nlohmann::json& status, TimePoint now) {
  if (spec.propagation.source != budget::PropagationSource::Observed) return std::nullopt;
  if (!status.is_object()) return std::nullopt;
  auto p = status.find("propagation");
  if (p == status.end() || !p->is_object()) return std::nullopt;
  auto source = p->find("source");
  auto seconds = p->find("seconds");
  auto at = p->find("sampledAt");
  if (source == p->end() || *source != "Observed" || seconds == p->end() || !seconds->is_number() ||
      at == p->end() || !at->is_string()) {
    return std::nullopt;
  }
  const double value = seconds->get<double>();
  const auto sampled_at = core::parse_rfc3339(at->get_ref<const std::string&>());
  if (!sampled_at || !std::isfinite(value) || value < 0) return std::nullopt;
  const auto age = now - *sampled_at;
  // Another replica's clock may be a little ahead of ours; far ahead is not a time we wrote.
  if (age < -std::chrono::minutes(1) || age > propagation::kLastGoodMaxAge) return std::nullopt;
  return propagation::LastGood{.seconds = value, .sampled_at = *sampled_at};
}

boost::asio::awaitable<void> PolicyReconciler::measure(const std::string& key,
                                                       const CachedPolicy& policy) {
  const TimePoint now = deps_.clock.now();
  const PolicyMeasurement* before = deps_.propagation.find(key);
  std::optional<propagation::LastGood> last_good =
      before ? before->last_good : std::optional<propagation::LastGood>();
  // Not measured by this process yet (a restart): the figure the status holds.
  const bool seeded = !before && (last_good = seed_last_good(*policy.spec, policy.status, now));
  if (seeded) {
    log::info("propagation: last good value from the status",
              {{"policy", key},
               {"seconds", fmt::format("{}", last_good->seconds)},
               {"sampledAt", core::format_rfc3339(last_good->sampled_at)}});
  }
  const propagation::Measurement m =
      co_await deps_.meter.measure(policy.namespace_, *policy.spec, last_good, now);
  PolicyMeasurement next;
  next.last_good = m.last_good;
  next.generation = policy.generation;
  next.next = now + options_.propagation_refresh;
  next.seeded = (seeded || (before && before->seeded)) && m.fallback;
  PropagationState& s = next.state;
  s.seconds = m.seconds;
  // docs/api.md, "Propagation sources": the source reads Static when a failing source fell back to
  // staticSeconds.
  const bool static_fallback =
      m.fallback && (!m.last_good || now - m.last_good->sampled_at > propagation::kLastGoodMaxAge);
  next.fallback = m.fallback;
  next.static_fallback = static_fallback;
  s.source = static_fallback ? "Static" : m.source;
  s.consumer = m.consumer;
  s.sampled_at = m.sampled_at;
  s.message = m.message;
  s.available = m.metrics_available;
  s.reason = m.reason;
  // `before` may dangle once the book changes: compare first.
  const bool moved =
      !before || before->state.seconds != s.seconds || before->state.available != s.available;
  if (!m.metrics_available) {
    log::warn("propagation source unavailable",
              {{"policy", key}, {"reason", m.reason}, {"message", m.message}});
  } else if (moved) {
    log::info("propagation measured",
              {{"policy", key}, {"source", s.source}, {"seconds", fmt::format("{}", s.seconds)}});
  }
  deps_.metrics.set_propagation(policy.namespace_, policy.name, s.source, s.seconds);
  deps_.metrics.set_propagation_available(policy.namespace_, policy.name, s.available);
  deps_.propagation.put(key, std::move(next));
  if (moved) deps_.namespace_changed(policy.namespace_);
}

boost::asio::awaitable<ReconcileResult> PolicyReconciler::reconcile(std::string key) {
  const auto policy = deps_.policies.get(key);  // a snapshot, unchanged while we wait
  const auto [ns, name] = split_key(key);
  if (!policy) {
    deps_.propagation.erase(key);
    deps_.metrics.forget_policy(ns, name);
    if (terminations_) terminations_->erase(key);
    co_return Result::done();
  }
  StatusInput in;
  in.generation = policy->generation;
  in.now = deps_.clock.now();
  if (!policy->spec) {
    std::string message;
    for (const auto& e : policy->spec.error()) {
      message += (message.empty() ? "" : "; ") + e.format();
    }
    in.invalid_spec = message;
    deps_.propagation.erase(key);
    nlohmann::json status = desired_status(in, policy->status);
    auto written = co_await write_status(*policy, std::move(status), Result::done());
    co_return written;
  }
  const PolicyMeasurement* m = deps_.propagation.find(key);
  if (!m || m->generation != policy->generation || in.now >= m->next) {
    co_await measure(key, *policy);
    m = deps_.propagation.find(key);
  }
  const Result refresh = Result::after(std::max<std::chrono::nanoseconds>(
      m->next - deps_.clock.now(), std::chrono::nanoseconds::zero()));
  if (!deps_.deployments_settled()) {
    co_return Result::after(
        std::min<std::chrono::nanoseconds>(*refresh.requeue_after, options_.settle_poll));
  }
  in.quantile = policy->spec->propagation.quantile;
  in.drain_source = budget::to_string(policy->spec->drain.source);
  in.propagation = m->state;
  in.recommended =
      budget::compute_budget(*policy->spec, m->state.seconds, policy->spec->drain_seconds);
  DeploymentCounts counts = count(key);
  deps_.metrics.set_deployments(ns, name, counts.managed, counts.compliant, counts.violations);
  in.deployments = std::move(counts);
  if (deps_.statefulset_controller) {
    DeploymentCounts stateful = count(*deps_.statefulset_controller, key);
    deps_.metrics.set_statefulsets(ns, name, stateful.managed, stateful.compliant,
                                   stateful.violations);
    in.statefulsets = std::move(stateful);
  }
  if (terminations_) {
    const TerminationCounts t = terminations_->totals(key, policy->status);
    const bool written_before =
        policy->status.is_object() && policy->status.contains("terminations");
    if (t.observed > 0 || t.drained > 0 || written_before) in.terminations = t;
  }
  nlohmann::json status = desired_status(in, policy->status);
  auto written = co_await write_status(*policy, std::move(status), refresh);
  co_return written;
}

// Written at the resourceVersion the status was computed from; a Conflict
// (someone wrote in between) is retried with the next store state.
boost::asio::awaitable<ReconcileResult> PolicyReconciler::write_status(const CachedPolicy& policy,
                                                                       nlohmann::json status,
                                                                       Result then) {
  if (status == policy.status) co_return then;
  auto written = co_await deps_.writer.write_status(policy, std::move(status));
  if (written || written.error().reason == kube::ApiError::Reason::NotFound) co_return then;
  std::string error =
      "status of " + policy.namespace_ + "/" + policy.name + ": " + written.error().format();
  co_return transient(std::move(error));
}

}  // namespace gracekeeper::controller
