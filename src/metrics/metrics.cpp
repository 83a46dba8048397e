#include "gracekeeper/metrics/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <array>
#include <map>
#include <utility>

#include "gracekeeper/kube/informer.h"

namespace gracekeeper::metrics {

namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;

constexpr std::array<std::string_view, 2> kControllers{"deployment", "shutdownpolicy"};
constexpr std::array<std::string_view, 3> kResults{"success", "error", "requeue"};

// Reconciles are mostly milliseconds (cache reads, one patch); the tail is a
// slow API server or a Prometheus query timing out.
const Histogram::BucketBoundaries& reconcile_buckets() {
  static const Histogram::BucketBoundaries buckets{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                   0.5,   1,     2.5,  5,     10,   30,  60};
  return buckets;
}

// Endpoint propagation: sub-second on a quiet control plane, seconds under
// load or with a slow EndpointSlice controller.
const Histogram::BucketBoundaries& propagation_buckets() {
  static const Histogram::BucketBoundaries buckets{0.05, 0.1, 0.25, 0.5, 1,  2,
                                                   3,    5,   10,   20,  30, 60};
  return buckets;
}

// Slack: negative is late.
const Histogram::BucketBoundaries& slack_buckets() {
  static const Histogram::BucketBoundaries buckets{-30, -10, -5, -2, -1, 0, 1, 2, 5, 10, 30, 60};
  return buckets;
}

const Histogram::BucketBoundaries& drain_buckets() {
  static const Histogram::BucketBoundaries buckets{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600};
  return buckets;
}

// Admissions are answered from memory: tens of microseconds to a few
// milliseconds; the API server's own timeout is seconds.
const Histogram::BucketBoundaries& admission_buckets() {
  static const Histogram::BucketBoundaries buckets{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                   0.01,   0.025,   0.05,   0.1,   0.5};
  return buckets;
}

Labels labels(std::initializer_list<std::pair<std::string_view, std::string_view>> pairs) {
  Labels out;
  for (auto [k, v] : pairs) out.emplace(std::string{k}, std::string{v});
  return out;
}

template <class T>
void remove_series(Family<T>& family, const Labels& l) {
  if (family.Has(l)) family.Remove(&family.Add(l));
}

}  // namespace

struct Metrics::Impl {
  prometheus::Registry registry;

  // Every family the operator exports, in one list.
  Family<Counter>& reconcile_total =
      prometheus::BuildCounter()
          .Name("gracekeeper_reconcile_total")
          .Help("Reconciles by controller and result (success, error, requeue).")
          .Register(registry);
  Family<Histogram>& reconcile_duration =
      prometheus::BuildHistogram()
          .Name("gracekeeper_reconcile_duration_seconds")
          .Help("Time spent in one reconcile, by controller and result.")
          .Register(registry);
  Family<Gauge>& deployments_managed = prometheus::BuildGauge()
                                           .Name("gracekeeper_deployments_managed")
                                           .Help("Deployments governed by a ShutdownPolicy.")
                                           .Register(registry);
  Family<Gauge>& deployments_compliant =
      prometheus::BuildGauge()
          .Name("gracekeeper_deployments_compliant")
          .Help("Governed Deployments whose shutdown settings match the policy's budget.")
          .Register(registry);
  Family<Gauge>& deployments_violating =
      prometheus::BuildGauge()
          .Name("gracekeeper_deployments_violating")
          .Help("Governed Deployments with at least one error finding.")
          .Register(registry);
  Family<Gauge>& statefulsets_managed = prometheus::BuildGauge()
                                            .Name("gracekeeper_statefulsets_managed")
                                            .Help("StatefulSets governed by a ShutdownPolicy.")
                                            .Register(registry);
  Family<Gauge>& statefulsets_compliant =
      prometheus::BuildGauge()
          .Name("gracekeeper_statefulsets_compliant")
          .Help("Governed StatefulSets whose shutdown settings match the policy's budget.")
          .Register(registry);
  Family<Gauge>& statefulsets_violating =
      prometheus::BuildGauge()
          .Name("gracekeeper_statefulsets_violating")
          .Help("Governed StatefulSets with at least one error finding.")
          .Register(registry);
  Family<Gauge>& propagation =
      prometheus::BuildGauge()
          .Name("gracekeeper_propagation_seconds")
          .Help("Endpoint propagation time a ShutdownPolicy budgets for, by source.")
          .Register(registry);
  Family<Gauge>& propagation_available =
      prometheus::BuildGauge()
          .Name("gracekeeper_propagation_available")
          .Help(
              "1 while a ShutdownPolicy's propagation source answers (MetricsAvailable=True), "
              "0 while it budgets a fallback.")
          .Register(registry);
  Family<Counter>& patches =
      prometheus::BuildCounter()
          .Name("gracekeeper_patches_applied_total")
          .Help("Server-side apply patches gracekeeper applied to Deployments.")
          .Register(registry);
  Family<Counter>& events = prometheus::BuildCounter()
                                .Name("gracekeeper_events_total")
                                .Help("Kubernetes events recorded, by type and reason.")
                                .Register(registry);
  Family<Counter>& watch_restarts = prometheus::BuildCounter()
                                        .Name("gracekeeper_watch_restarts_total")
                                        .Help("Watches re-opened after the first one, by resource.")
                                        .Register(registry);
  Family<Counter>& relists =
      prometheus::BuildCounter()
          .Name("gracekeeper_relists_total")
          .Help("Relists forced by 410 Gone (an expired resourceVersion), by resource.")
          .Register(registry);
  Family<Histogram>& endpoint_propagation =
      prometheus::BuildHistogram()
          .Name("gracekeeper_endpoint_propagation_seconds")
          .Help("Seen EndpointSlice change minus its last-change-trigger-time, by namespace.")
          .Register(registry);
  Family<Counter>& propagation_anomalies =
      prometheus::BuildCounter()
          .Name("gracekeeper_endpoint_propagation_anomalies_total")
          .Help(
              "Propagation samples clamped to 0 (clock skew), dropped (missing or garbage "
              "trigger time), or left out of the figure (implausible), by reason.")
          .Register(registry);
  Family<Histogram>& termination_slack =
      prometheus::BuildHistogram()
          .Name("gracekeeper_termination_slack_seconds")
          .Help("preStop wait minus the propagation it had to cover, per audited termination.")
          .Register(registry);
  Family<Counter>& terminations =
      prometheus::BuildCounter()
          .Name("gracekeeper_terminations_total")
          .Help("Audited terminations of governed pods, by outcome (covered, late, unmeasured).")
          .Register(registry);
  Family<Histogram>& drains =
      prometheus::BuildHistogram()
          .Name("gracekeeper_drain_seconds")
          .Help(
              "SIGTERM to the last app container's exit, per measured termination of a "
              "governed pod (a kill at the grace counts the time the pod was given).")
          .Register(registry);
  Family<Counter>& drains_cut_short =
      prometheus::BuildCounter()
          .Name("gracekeeper_drain_cut_short_total")
          .Help("Measured terminations of governed pods that the kubelet killed at the grace.")
          .Register(registry);
  Family<Gauge>& queue_depth = prometheus::BuildGauge()
                                   .Name("gracekeeper_workqueue_depth")
                                   .Help("Keys waiting in a controller's work queue.")
                                   .Register(registry);
  Family<Counter>& admissions =
      prometheus::BuildCounter()
          .Name("gracekeeper_webhook_admissions_total")
          .Help(
              "AdmissionReviews answered, by outcome (patched, unchanged, ignored, error, "
              "bad_request).")
          .Register(registry);
  Family<Counter>& webhook_errors =
      prometheus::BuildCounter()
          .Name("gracekeeper_webhook_errors_total")
          .Help(
              "AdmissionReviews allowed unchanged after an internal error (reason internal), or "
              "refused as no AdmissionReview v1 (reason bad_request).")
          .Register(registry);
  Family<Histogram>& admission_duration =
      prometheus::BuildHistogram()
          .Name("gracekeeper_webhook_admission_duration_seconds")
          .Help("Time to decide one AdmissionReview, from its body to the answer, by opted_in.")
          .Register(registry);
  Family<Gauge>& leader = prometheus::BuildGauge()
                              .Name("gracekeeper_leader")
                              .Help("1 while this replica holds the leader lease, else 0.")
                              .Register(registry);
  Family<Gauge>& build_info = prometheus::BuildGauge()
                                  .Name("gracekeeper_build_info")
                                  .Help("Always 1; the version label says which build runs.")
                                  .Register(registry);

  Gauge& leader_gauge = leader.Add({});

  // The source each policy's propagation series carries, to replace it.
  std::map<std::pair<std::string, std::string>, std::string> propagation_sources;
  // Each informer's counters at the last update_informer, for deltas.
  std::map<std::string, kube::InformerCounters, std::less<>> informer_seen;
};

Metrics::Metrics() : Metrics("unknown") {}

Metrics::Metrics(std::string_view version) : impl_(std::make_unique<Impl>()) {
  impl_->build_info.Add(labels({{"version", version}})).Set(1);
  impl_->leader_gauge.Set(0);
  for (auto controller : kControllers) {
    for (auto result : kResults) {
      auto l = labels({{"controller", controller}, {"result", result}});
      impl_->reconcile_total.Add(l);
      impl_->reconcile_duration.Add(l, reconcile_buckets());
    }
  }
}

Metrics::~Metrics() = default;

void Metrics::observe_reconcile(std::string_view controller, std::string_view result,
                                double seconds) {
  auto l = labels({{"controller", controller}, {"result", result}});
  impl_->reconcile_total.Add(l).Increment();
  impl_->reconcile_duration.Add(l, reconcile_buckets()).Observe(seconds);
}

void Metrics::set_deployments(std::string_view ns, std::string_view policy, std::int64_t managed,
                              std::int64_t compliant, std::int64_t violating) {
  auto l = labels({{"namespace", ns}, {"policy", policy}});
  impl_->deployments_managed.Add(l).Set(static_cast<double>(managed));
  impl_->deployments_compliant.Add(l).Set(static_cast<double>(compliant));
  impl_->deployments_violating.Add(l).Set(static_cast<double>(violating));
}

void Metrics::set_statefulsets(std::string_view ns, std::string_view policy, std::int64_t managed,
                               std::int64_t compliant, std::int64_t violating) {
  auto l = labels({{"namespace", ns}, {"policy", policy}});
  impl_->statefulsets_managed.Add(l).Set(static_cast<double>(managed));
  impl_->statefulsets_compliant.Add(l).Set(static_cast<double>(compliant));
  impl_->statefulsets_violating.Add(l).Set(static_cast<double>(violating));
}

void Metrics::set_propagation(std::string_view ns, std::string_view policy, std::string_view source,
                              double seconds) {
  auto [it, inserted] = impl_->propagation_sources.try_emplace(
      std::pair{std::string{ns}, std::string{policy}}, std::string{source});
  if (!inserted && it->second != source) {
    remove_series(impl_->propagation,
                  labels({{"namespace", ns}, {"policy", policy}, {"source", it->second}}));
    it->second = std::string{source};
  }
  impl_->propagation.Add(labels({{"namespace", ns}, {"policy", policy}, {"source", source}}))
      .Set(seconds);
}

void Metrics::set_propagation_available(std::string_view ns, std::string_view policy,
                                        bool available) {
  impl_->propagation_available.Add(labels({{"namespace", ns}, {"policy", policy}}))
      .Set(available ? 1 : 0);
}

void Metrics::forget_policy(std::string_view ns, std::string_view policy) {
  auto l = labels({{"namespace", ns}, {"policy", policy}});
  remove_series(impl_->propagation_available, l);
  remove_series(impl_->deployments_managed, l);
  remove_series(impl_->deployments_compliant, l);
  remove_series(impl_->deployments_violating, l);
  remove_series(impl_->statefulsets_managed, l);
  remove_series(impl_->statefulsets_compliant, l);
  remove_series(impl_->statefulsets_violating, l);
  if (impl_->termination_slack.Has(l)) {
    impl_->termination_slack.Remove(&impl_->termination_slack.Add(l, slack_buckets()));
  }
  for (std::string_view outcome : {"covered", "late", "unmeasured"}) {
    Labels with = l;
    with.emplace("outcome", outcome);
    remove_series(impl_->terminations, with);
  }
  if (impl_->drains.Has(l)) impl_->drains.Remove(&impl_->drains.Add(l, drain_buckets()));
  remove_series(impl_->drains_cut_short, l);
  auto it = impl_->propagation_sources.find(std::pair{std::string{ns}, std::string{policy}});
  if (it != impl_->propagation_sources.end()) {
    l.emplace("source", it->second);
    remove_series(impl_->propagation, l);
    impl_->propagation_sources.erase(it);
  }
}

void Metrics::count_patch(std::string_view ns) {
  impl_->patches.Add(labels({{"namespace", ns}})).Increment();
}

void Metrics::count_event(std::string_view type, std::string_view reason) {
  impl_->events.Add(labels({{"type", type}, {"reason", reason}})).Increment();
}

void Metrics::update_informer(std::string_view resource, const kube::InformerCounters& now) {
  auto it = impl_->informer_seen.find(resource);
  if (it == impl_->informer_seen.end()) {
    it = impl_->informer_seen.emplace(std::string{resource}, kube::InformerCounters{}).first;
  }
  auto delta = [](std::uint64_t now, std::uint64_t before) {
    return now >= before ? now - before : now;  // lower: a new informer, counting from 0
  };
  auto l = labels({{"resource", resource}});
  impl_->watch_restarts.Add(l).Increment(
      static_cast<double>(delta(now.watch_restarts, it->second.watch_restarts)));
  impl_->relists.Add(l).Increment(static_cast<double>(delta(now.relists, it->second.relists)));
  it->second = now;
}

void Metrics::set_queue_depth(std::string_view controller, std::size_t depth) {
  impl_->queue_depth.Add(labels({{"controller", controller}})).Set(static_cast<double>(depth));
}

void Metrics::observe_endpoint_propagation(std::string_view ns, double seconds) {
  impl_->endpoint_propagation.Add(labels({{"namespace", ns}}), propagation_buckets())
      .Observe(seconds);
}

void Metrics::count_propagation_anomaly(std::string_view reason, std::uint64_t n) {
  impl_->propagation_anomalies.Add(labels({{"reason", reason}})).Increment(static_cast<double>(n));
}

void Metrics::observe_termination_slack(std::string_view ns, std::string_view policy,
                                        double seconds) {
  impl_->termination_slack.Add(labels({{"namespace", ns}, {"policy", policy}}), slack_buckets())
      .Observe(seconds);
}

void Metrics::count_termination(std::string_view ns, std::string_view policy,
                                std::string_view outcome) {
  impl_->terminations.Add(labels({{"namespace", ns}, {"policy", policy}, {"outcome", outcome}}))
      .Increment();
}

void Metrics::observe_drain(std::string_view ns, std::string_view policy, double seconds,
                            bool cut_short) {
  const auto l = labels({{"namespace", ns}, {"policy", policy}});
  impl_->drains.Add(l, drain_buckets()).Observe(seconds);
  if (cut_short) impl_->drains_cut_short.Add(l).Increment();
}

void Metrics::observe_admission(std::string_view outcome, bool opted_in, double seconds) {
  impl_->admissions.Add(labels({{"outcome", outcome}})).Increment();
  if (outcome == "error" || outcome == "bad_request") {
    impl_->webhook_errors.Add(labels({{"reason", outcome == "error" ? "internal" : outcome}}))
        .Increment();
  }
  impl_->admission_duration
      .Add(labels({{"opted_in", opted_in ? "true" : "false"}}), admission_buckets())
      .Observe(seconds);
}

void Metrics::set_leader(bool leading) {
  impl_->leader_gauge.Set(leading ? 1 : 0);
}

std::string Metrics::serialize() const {
  return prometheus::TextSerializer{}.Serialize(impl_->registry.Collect());
}

}  // namespace gracekeeper::metrics
