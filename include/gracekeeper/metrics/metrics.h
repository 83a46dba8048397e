// The operator's Prometheus metrics: one registry per process, fed by the
// controller, the informers and the work queues, read by GET /metrics.
//
// Every family is declared in one place (metrics.cpp) and named
// `gracekeeper_...`. Label values are whatever the caller passes; the
// controller passes namespaces, policy names and a fixed set of words.
//
// Not thread-safe beyond what prometheus-cpp guarantees for its own metrics:
// call every member from the io_context thread (docs/architecture.md, "Concurrency").
// prometheus-cpp stays out of this header (pimpl), so including it is cheap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace gracekeeper::kube {
struct InformerCounters;
}

namespace gracekeeper::metrics {

class Metrics {
 public:
  // gracekeeper_build_info{version="..."} is 1 from the start.
  Metrics();
  explicit Metrics(std::string_view version);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // gracekeeper_reconcile_total{controller,result} (counter) and
  // gracekeeper_reconcile_duration_seconds{controller,result} (histogram).
  // controller: "deployment" | "shutdownpolicy"; result: "success" | "error" |
  // "requeue". Those six combinations are exported at 0 from the start so a
  // rate() has a baseline.
  void observe_reconcile(std::string_view controller, std::string_view result, double seconds);

  // gracekeeper_deployments_{managed,compliant,violating}{namespace,policy}
  // (gauges): the Deployments a policy governs.
  void set_deployments(std::string_view ns, std::string_view policy, std::int64_t managed,
                       std::int64_t compliant, std::int64_t violating);
  // gracekeeper_statefulsets_{managed,compliant,violating}{namespace,policy}
  // (gauges): the StatefulSets a policy governs.
  void set_statefulsets(std::string_view ns, std::string_view policy, std::int64_t managed,
                        std::int64_t compliant, std::int64_t violating);

  // gracekeeper_propagation_seconds{namespace,policy,source} (gauge): the
  // propagation figure a policy uses. A policy has one source at a time: a
  // different source replaces the old series.
  void set_propagation(std::string_view ns, std::string_view policy, std::string_view source,
                       double seconds);

  // gracekeeper_propagation_available{namespace,policy} (gauge): 1 while
  // the policy's source answers (MetricsAvailable=True), 0 on a fallback.
  void set_propagation_available(std::string_view ns, std::string_view policy, bool available);

  // A deleted policy: removes its deployments_*, propagation and
  // propagation_available series.
  void forget_policy(std::string_view ns, std::string_view policy);

  // gracekeeper_patches_applied_total{namespace} (counter).
  void count_patch(std::string_view ns);

  // gracekeeper_events_total{type,reason} (counter): events recorded.
  void count_event(std::string_view type, std::string_view reason);

  // gracekeeper_watch_restarts_total{resource} and
  // gracekeeper_relists_total{resource} (counters), from an informer's
  // monotonic counters: adds what grew since the last call for `resource`.
  // Counters lower than last time mean a new informer: they count from 0.
  void update_informer(std::string_view resource, const kube::InformerCounters& counters);

  // gracekeeper_workqueue_depth{controller} (gauge).
  void set_queue_depth(std::string_view controller, std::size_t depth);

  // gracekeeper_endpoint_propagation_seconds{namespace} (histogram): one
  // sample of source Observed, the control plane's part of propagation.
  void observe_endpoint_propagation(std::string_view ns, double seconds);

  // gracekeeper_endpoint_propagation_anomalies_total{reason} (counter):
  // "clamped" (a negative sample: clock skew), "missing" and "garbage" (no
  // usable trigger-time annotation: no sample).
  void count_propagation_anomaly(std::string_view reason, std::uint64_t n);

  // gracekeeper_termination_slack_seconds{namespace,policy} (histogram):
  // preStop wait minus what propagation needed, per audited termination.
  void observe_termination_slack(std::string_view ns, std::string_view policy, double seconds);

  // gracekeeper_terminations_total{namespace,policy,outcome} (counter):
  // outcome "covered", "late" or "unmeasured" (no sample, or a hook of
  // unknown length).
  void count_termination(std::string_view ns, std::string_view policy, std::string_view outcome);

  // gracekeeper_drain_seconds{namespace,policy} (histogram) and
  // gracekeeper_drain_cut_short_total{namespace,policy} (counter): a
  // governed pod's measured drain (audit/drain.h), and whether the kubelet
  // killed it at the grace.
  void observe_drain(std::string_view ns, std::string_view policy, double seconds, bool cut_short);

  // gracekeeper_webhook_admissions_total{outcome} (counter),
  // gracekeeper_webhook_errors_total{reason} (counter: outcome "error" is
  // reason "internal", "bad_request" itself) and
  // gracekeeper_webhook_admission_duration_seconds{opted_in} (histogram):
  // one AdmissionReview answered.
  void observe_admission(std::string_view outcome, bool opted_in, double seconds);

  // gracekeeper_leader (gauge): 1 while this replica leads, else 0.
  void set_leader(bool leading);

  // Everything, in the Prometheus text exposition format 0.0.4.
  std::string serialize() const;

  // The Content-Type of serialize()'s output.
  static constexpr std::string_view content_type = "text/plain; version=0.0.4; charset=utf-8";

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gracekeeper::metrics
