// The EndpointSlice projection and the termination audit: which endpoints
// turned, the samples they give, the slack of a governed pod's termination,
// one Warning per rollout, and status.terminations.
#include "gracekeeper/audit/termination_audit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <utility>

#include "../../support/reconciler_fakes.h"
#include "gracekeeper/core/time.h"

namespace gracekeeper::controller::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct Ep {
  std::string pod;
  std::optional<bool> ready = true;
  std::optional<bool> terminating = false;
  std::optional<bool> serving = std::nullopt;
};

json slice(const std::vector<Ep>& endpoints, std::optional<std::string> trigger = std::nullopt,
           const std::string& name = "web-abcde") {
  json s = {{"apiVersion", "discovery.k8s.io/v1"},
            {"kind", "EndpointSlice"},
            {"metadata", {{"name", name}, {"namespace", "shop"}}},
            {"addressType", "IPv4"},
            {"endpoints", json::array()}};
  if (trigger) s["metadata"]["annotations"][propagation::kTriggerTimeAnnotation] = *trigger;
  for (const auto& e : endpoints) {
    json c = json::object();
    if (e.ready) c["ready"] = *e.ready;
    if (e.terminating) c["terminating"] = *e.terminating;
    if (e.serving) c["serving"] = *e.serving;
    s["endpoints"].push_back({{"addresses", {"198.18.0.9"}},
                              {"conditions", c},
                              {"targetRef", {{"kind", "Pod"}, {"name", e.pod}}}});
  }
  return s;
}

std::string at(TimePoint t) {
  return core::format_rfc3339(t);  // whole seconds, as the EndpointSlice controller's are
}

json with_pre_stop(json d, int seconds) {
  d["spec"]["template"]["spec"]["containers"][0]["lifecycle"] = {
      {"preStop", {{"sleep", {{"seconds", seconds}}}}}};
  return d;
}

// A World with a governed Deployment "web" (preStop 5 s) and the audit.
struct AuditWorld : World {
  AuditWorld(json spec = {{"propagation",
                           {{"source", "Observed"}, {"observed", {{"consumerSyncSeconds", 1}}}}}})
      : audit({deployments, policies, book, deployment_controller, samples, terminations, events,
               metrics, [this](const std::string& key) { changed.push_back(key); },
               [this] { return active; }, std::nullopt, nullptr,
               [this](const std::string& key) { queued.push_back(key); }, &drains, &pods,
               [this](bool, const std::string& key) { drained.push_back(key); }}) {
    put_policy(policy(spec));
    put_deployment(with_pre_stop(deployment("web"), 5));
  }
  // The informer's step: project against the cached version, then cache;
  // then the audit's loop runs what the projection queued.
  std::optional<CachedSlice> see(const json& object, TimePoint seen) {
    auto out = observe(object, seen);
    run_queued();
    return out;
  }
  std::optional<CachedSlice> observe(const json& object, TimePoint seen) {
    const std::string key = "shop/" + object["metadata"]["name"].get<std::string>();
    auto out = audit.observe(object, cached.contains(key) ? &cached[key] : nullptr, seen);
    if (out) {
      cached[key] = *out;
    } else {
      cached.erase(key);
    }
    return out;
  }
  void run_queued() {
    for (const std::string& key : std::exchange(queued, {})) {
      EXPECT_EQ(audit.reconcile(key), Result::done());
    }
  }
  propagation::SampleBook samples;
  TerminationBook terminations;
  TerminationAudit audit;
  std::vector<std::string> changed;
  std::vector<std::string> queued;   // the audit's work queue
  std::vector<std::string> drained;  // workloads that got a drain sample or a pod
  std::map<std::string, CachedSlice> cached;
  std::map<std::string, CachedPod> pod_cache;  // the Pod informer's cache
  // The Pod informer's step, as see() is the EndpointSlice informer's.
  std::optional<CachedPod> see_pod(const json& object) {
    const std::string key = "shop/" + object["metadata"]["name"].get<std::string>();
    auto out = audit.observe_pod(object, pod_cache.contains(key) ? &pod_cache[key] : nullptr);
    if (out) {
      pod_cache[key] = *out;
    } else {
      pod_cache.erase(key);
    }
    run_queued();
    return out;
  }
  bool active = true;
};

const std::string kPod1 = "web-7d9f8b6c5-x2x4z";
const std::string kPod2 = "web-7d9f8b6c5-bcdfg";
const std::string kNewPod = "web-5c4b8d9f7-zzzzz";

TEST(PodOwner, ReplicaSetPodNames) {
  auto o = pod_owner("checkout-api-7d9f8b6c5-x2x4z");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->deployment, "checkout-api");
  EXPECT_EQ(o->hash, "7d9f8b6c5");
  EXPECT_FALSE(pod_owner("web-0"));                // a StatefulSet's
  EXPECT_FALSE(pod_owner("web-7d9f8b6c5-abcde"));  // vowels are not in the random alphabet
  EXPECT_FALSE(pod_owner("web-7d9f8b6c5-x2x4"));   // suffix of 4
  EXPECT_FALSE(pod_owner("7d9f8b6c5-x2x4z"));      // no Deployment name
  EXPECT_FALSE(pod_owner(""));
}

TEST(Turned, ReadyToNotReadyTerminatingOrGone) {
  // {pod, ready, serving, terminating}
  CachedSlice before = cache_slice({{"a", true, true, false},
                                    {"b", true, true, false},
                                    {"c", true, true, false},
                                    {"d", false, false, false},
                                    {"e", false, false, false}});
  std::vector<SeenEndpoint> after{
      {"a", true, true, false}, {"b", false, true, true}, {"d", false, false, true}};
  auto t = turned(&before, after);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].pod, "b");
  EXPECT_TRUE(t[0].began_terminating);
  EXPECT_EQ(t[1].pod, "");  // c, gone while ready: only its hash was kept
  EXPECT_FALSE(t[1].began_terminating);
  EXPECT_EQ(t[2].pod, "d");  // not ready before (probe), now terminating
  EXPECT_TRUE(t[2].began_terminating);
  EXPECT_THAT(turned(nullptr, after), IsEmpty());  // first sight: no change known
  // b, terminating already, turns not serving: a change, not a new termination.
  CachedSlice terminating = cache_slice(after);
  std::vector<SeenEndpoint> later{{"a", true, true, false}, {"b", false, false, true}};
  auto u = turned(&terminating, later);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].pod, "b");
  EXPECT_FALSE(u[0].began_terminating);
}

TEST(ReadSlice, KeepsPodNamesAndConditionsOnlyAndNeverThrows) {
  json s = slice({{"p", std::nullopt, std::nullopt}}, "2026-12-01T18:00:00Z");
  SliceChange c = read_slice(s);
  EXPECT_EQ(c.ns, "shop");
  EXPECT_EQ(c.trigger, "2026-12-01T18:00:00Z");
  ASSERT_EQ(c.endpoints.size(), 1u);
  EXPECT_TRUE(c.endpoints[0].ready);  // absent: the API says interpret as ready
  EXPECT_FALSE(c.endpoints[0].terminating);
  for (json bad : {json(nullptr), json("x"), json::parse(R"({"endpoints": 3})"),
                   json::parse(R"({"endpoints": [1, {"targetRef": "x"},
                       {"targetRef": {"kind": "Node", "name": "n"}},
                       {"targetRef": {"kind": "Pod", "name": 7}},
                       {"targetRef": {"kind": "Pod", "name": "ok"}, "conditions": {"ready": "yes"}}],
                       "metadata": {"annotations": {"endpoints.kubernetes.io/last-change-trigger-time": 5}}})")}) {
    SliceChange b = read_slice(bad);
    EXPECT_LE(b.endpoints.size(), 1u);
  }
  SliceChange odd = read_slice(json::parse(
      R"({"metadata": {"annotations": {"endpoints.kubernetes.io/last-change-trigger-time": 5}},
          "endpoints": [{"targetRef": {"kind": "Pod", "name": "ok"}, "conditions": {"ready": "yes"}}]})"));
  EXPECT_EQ(odd.trigger, "5");  // not a string: reported as garbage later
  ASSERT_EQ(odd.endpoints.size(), 1u);
  EXPECT_TRUE(odd.endpoints[0].ready);
}

TEST(TerminationAudit, OnlyEndpointsOfCachedDeploymentsAreKept) {
  AuditWorld w;
  auto kept = w.see(slice({{kPod1}, {"other-7d9f8b6c5-x2x4z"}, {"web-0"}}), kStart);
  ASSERT_TRUE(kept);
  ASSERT_EQ(kept->endpoints.size(), 1u);
  EXPECT_EQ(kept->endpoints[0].pod, pod_id(kPod1));
  EXPECT_FALSE(w.see(slice({{"other-7d9f8b6c5-x2x4z"}}, std::nullopt, "other-x"), kStart));
  EXPECT_EQ(w.samples.counters().samples, 0u);  // first sight: no sample
}

TEST(TerminationAudit, ASampleAndACoveredTermination) {
  AuditWorld w;
  w.see(slice({{kPod1}, {kPod2}}), kStart);
  // The pod was deleted at kStart + 10 s; gracekeeper sees it 2 s later.
  const TimePoint trigger = kStart + 10s;
  w.see(slice({{kPod1, false, true}, {kPod2}}, at(trigger)), trigger + 2s);
  EXPECT_EQ(w.samples.counters().samples, 1u);
  auto window = w.samples.window("shop", 3600s, 0.99, trigger + 2s);
  EXPECT_EQ(window.count, 1u);
  EXPECT_FLOAT_EQ(*window.quantile, 2);
  // Slack 5 - (2 + 1) = 2: covered.
  auto t = w.terminations.totals("shop/default", json());
  EXPECT_EQ(t.observed, 1);
  EXPECT_EQ(t.late, 0);
  EXPECT_THAT(w.changed, ElementsAre("shop/default"));
  EXPECT_THAT(w.events.recorded, IsEmpty());
  const std::string metrics = w.metrics.serialize();
  EXPECT_THAT(
      metrics,
      HasSubstr(
          R"(gracekeeper_terminations_total{namespace="shop",outcome="covered",policy="default"} 1)"));
  EXPECT_THAT(metrics,
              HasSubstr(R"(gracekeeper_endpoint_propagation_seconds_count{namespace="shop"} 1)"));
  EXPECT_THAT(
      metrics,
      HasSubstr(
          R"(gracekeeper_termination_slack_seconds_sum{namespace="shop",policy="default"} 2)"));
}

TEST(TerminationAudit, LateTerminationsWarnOncePerRollout) {
  AuditWorld w;
  w.see(slice({{kPod1}, {kPod2}, {kNewPod}}), kStart);
  const TimePoint trigger = kStart + 10s;
  // Seen 4.5 s after the trigger: 5 - (4.5 + 1) = -0.5, late.
  w.see(slice({{kPod1, false, true}, {kPod2}, {kNewPod}}, at(trigger)), trigger + 4500ms);
  ASSERT_EQ(w.events.recorded.size(), 1u);
  const auto& e = w.events.recorded[0];
  EXPECT_EQ(e.reason, "PropagationOutlastedPreStop");
  EXPECT_EQ(e.type, kube::EventType::Warning);
  EXPECT_EQ(e.regarding.kind, "Deployment");
  EXPECT_EQ(e.regarding.name, "web");
  EXPECT_EQ(e.regarding.uid, "u-web");
  EXPECT_THAT(e.note, HasSubstr("preStop wait of 5s"));
  EXPECT_THAT(e.note, HasSubstr("7d9f8b6c5"));
  EXPECT_THAT(e.note, HasSubstr("by 0.50s"));
  // The same rollout's next pod: counted, not reported again.
  w.see(slice({{kPod1, false, true}, {kPod2, false, true}, {kNewPod}}, at(trigger + 5s)),
        trigger + 11s);
  EXPECT_EQ(w.events.recorded.size(), 1u);
  // Another rollout (ReplicaSet hash): reported again.
  w.see(slice({{kPod1, false, true}, {kPod2, false, true}, {kNewPod, false, true}},
              at(trigger + 20s)),
        trigger + 30s);
  EXPECT_EQ(w.events.recorded.size(), 2u);
  auto t = w.terminations.totals("shop/default", json());
  EXPECT_EQ(t.observed, 3);
  EXPECT_EQ(t.late, 3);
  EXPECT_EQ(t.last_late_at, trigger + 30s);
}

TEST(TerminationAudit, AnOldRolloutsPodsKeepTheirOwnWait) {
  AuditWorld w;
  w.see(slice({{kPod1}, {kPod2}}), kStart);  // rollout 7d9f8b6c5 serving with a wait of 5
  w.put_deployment(with_pre_stop(deployment("web"), 20));  // a new template: a rollout
  w.see(slice({{kPod1}, {kPod2}, {kNewPod, false}}), kStart + 1s);
  w.see(slice({{kPod1}, {kPod2}, {kNewPod}}), kStart + 2s);
  // The old pod terminates under the new template: its own wait, 5, counts.
  w.see(slice({{kPod1, false, true}, {kPod2}, {kNewPod}}, at(kStart + 10s)), kStart + 15s);
  EXPECT_EQ(w.terminations.totals("shop/default", json()).late, 1);  // 5 - (5 + 1)
  // The new rollout's pod has 20: covered.
  w.see(slice({{kPod1, false, true}, {kPod2}, {kNewPod, false, true}}, at(kStart + 20s)),
        kStart + 25s);
  auto t = w.terminations.totals("shop/default", json());
  EXPECT_EQ(t.observed, 2);
  EXPECT_EQ(t.late, 1);
}

// Issue 36: a StatefulSet's pods ("db-0") are audited too. A pod keeps its
// name across rollouts, so its wait is the one it was seen serving with,
// until it turns terminating; recreated, it serves with the new template's.
TEST(TerminationAudit, AStatefulSetsPodsAreAuditedWithTheirOwnWait) {
  AuditWorld w;
  json db = with_pre_stop(deployment("db"), 5);
  db["kind"] = "StatefulSet";
  db["metadata"]["uid"] = "u-db";
  w.put_deployment(db);
  DeploymentReconciler statefulsets({w.deployments,
                                     w.policies,
                                     w.services,
                                     w.book,
                                     w.writer,
                                     w.events,
                                     w.clock,
                                     w.metrics,
                                     [](const std::string&) {},
                                     {},
                                     "StatefulSet"});
  std::vector<std::string> queued;
  TerminationAudit audit({w.deployments, w.policies, w.book, w.deployment_controller, w.samples,
                          w.terminations, w.events, w.metrics, [](const std::string&) {},
                          [] { return true; }, w.deployments, &statefulsets,
                          [&queued](const std::string& key) { queued.push_back(key); }});
  std::optional<CachedSlice> cached;
  auto see = [&](const json& object, TimePoint seen) {
    cached = audit.observe(object, cached ? &*cached : nullptr, seen);
    for (const std::string& key : std::exchange(queued, {})) (void)audit.reconcile(key);
  };
  see(slice({{"db-0"}, {"db-1"}}, std::nullopt, "db-x"), kStart);
  ASSERT_TRUE(cached);
  EXPECT_EQ(cached->endpoints.size(), 2u);
  db = with_pre_stop(db, 20);  // a new template: the controller replaces db-1, then db-0
  db["metadata"]["generation"] = 2;
  w.put_deployment(db);
  // db-1 terminates with the wait it served with: 5 - (5 + 1), late.
  see(slice({{"db-0"}, {"db-1", false, true}}, at(kStart + 10s), "db-x"), kStart + 15s);
  ASSERT_EQ(w.events.recorded.size(), 1u);
  const auto& e = w.events.recorded[0];
  EXPECT_EQ(e.reason, "PropagationOutlastedPreStop");
  EXPECT_EQ(e.regarding.kind, "StatefulSet");
  EXPECT_EQ(e.regarding.name, "db");
  EXPECT_EQ(e.regarding.uid, "u-db");
  EXPECT_THAT(e.note, HasSubstr("pod db-1 (StatefulSet generation 2)"));
  EXPECT_THAT(e.note, HasSubstr("preStop wait of 5s"));
  // Recreated under its name with the new template, then db-0 goes (late,
  // the same rollout: not reported again).
  see(slice({{"db-0"}}, std::nullopt, "db-x"), kStart + 16s);
  see(slice({{"db-0"}, {"db-1"}}, std::nullopt, "db-x"), kStart + 20s);
  see(slice({{"db-0", false, true}, {"db-1"}}, at(kStart + 30s), "db-x"), kStart + 35s);
  EXPECT_EQ(w.events.recorded.size(), 1u);
  // The new db-1 has 20: covered.
  see(slice({{"db-1", false, true}}, at(kStart + 40s), "db-x"), kStart + 45s);
  auto t = w.terminations.totals("shop/default", json());
  EXPECT_EQ(t.observed, 3);
  EXPECT_EQ(t.late, 2);
}

TEST(TerminationAudit, ConsumerSyncDecides) {
  // Seen 1 s after the trigger, wait 5: consumerSyncSeconds 0 covers it,
  // 5 does not.
  for (auto [sync, late] : {std::pair{0, false}, std::pair{5, true}}) {
    AuditWorld w(json{
        {"propagation", {{"source", "Observed"}, {"observed", {{"consumerSyncSeconds", sync}}}}}});
    w.see(slice({{kPod1}}), kStart);
    w.see(slice({{kPod1, false, true}}, at(kStart + 10s)), kStart + 11s);
    EXPECT_EQ(w.terminations.totals("shop/default", json()).late, late ? 1 : 0) << sync;
  }
}

TEST(TerminationAudit, TheSlowestDeclaredConsumerDecides) {
  // Seen 1 s after the trigger, wait 5, kube-proxy's allowance 1: an ingress
  // declared at 3 s still covers it, one at 4.5 s does not, and the Warning
  // names it.
  for (auto [ingress, late] : {std::pair{3.0, false}, std::pair{4.5, true}}) {
    AuditWorld w(json{{"propagation",
                       {{"source", "Observed"},
                        {"observed",
                         {{"consumerSyncSeconds", 1},
                          {"consumers", {{{"name", "traefik"}, {"syncSeconds", ingress}}}}}}}}});
    w.see(slice({{kPod1}}), kStart);
    w.see(slice({{kPod1, false, true}}, at(kStart + 10s)), kStart + 11s);
    EXPECT_EQ(w.terminations.totals("shop/default", json()).late, late ? 1 : 0) << ingress;
    if (late) {
      ASSERT_EQ(w.events.recorded.size(), 1u);
      EXPECT_THAT(w.events.recorded[0].note, HasSubstr("traefik's syncSeconds 4.50s"));
    }
  }
}

TEST(TerminationAudit, WithPrometheusTheCurrentFigureCountsToo) {
  AuditWorld w(json{{"propagation",
                     {{"source", "Prometheus"},
                      {"prometheus", {{"queries", {{{"name", "kube-proxy"}, {"query", "x"}}}}}}}}});
  PolicyMeasurement m;
  m.state.seconds = 6;  // kube-proxy's p99 is above the 5 s wait
  m.state.available = true;
  m.state.source = "Prometheus";
  w.book.put("shop/default", m);
  w.see(slice({{kPod1}}), kStart);
  w.see(slice({{kPod1, false, true}}, at(kStart + 10s)), kStart + 10s);  // no lag seen
  EXPECT_EQ(w.terminations.totals("shop/default", json()).late, 1);
  ASSERT_EQ(w.events.recorded.size(), 1u);
  EXPECT_THAT(w.events.recorded[0].note, HasSubstr("the Prometheus figure 6.00s"));
}

TEST(TerminationAudit, SkewIsClampedAndCounted) {
  AuditWorld w;
  w.see(slice({{kPod1}}), kStart);
  // The controller manager's clock is 3 s ahead.
  w.see(slice({{kPod1, false, true}}, at(kStart + 13s)), kStart + 10s);
  EXPECT_EQ(w.samples.counters().clamped, 1u);
  EXPECT_FLOAT_EQ(*w.samples.window("shop", 3600s, 0.99, kStart + 10s).quantile, 0);
  EXPECT_THAT(w.metrics.serialize(),
              HasSubstr(R"(gracekeeper_endpoint_propagation_anomalies_total{reason="clamped"} 1)"));
  EXPECT_EQ(w.terminations.totals("shop/default", json()).late, 0);  // 5 - (0 + 1)
}

TEST(TerminationAudit, MissingOrGarbageTriggerTimeIsACountedDrop) {
  AuditWorld w;
  w.see(slice({{kPod1}, {kPod2}}), kStart);
  w.see(slice({{kPod1, false, true}, {kPod2}}), kStart + 1s);  // no annotation
  w.see(slice({{kPod1, false, true}, {kPod2, false, true}}, "last tuesday"), kStart + 2s);
  EXPECT_EQ(w.samples.counters().samples, 0u);
  EXPECT_EQ(w.samples.counters().missing, 1u);
  EXPECT_EQ(w.samples.counters().garbage, 1u);
  const std::string metrics = w.metrics.serialize();
  EXPECT_THAT(metrics,
              HasSubstr(R"(gracekeeper_endpoint_propagation_anomalies_total{reason="missing"} 1)"));
  EXPECT_THAT(metrics,
              HasSubstr(R"(gracekeeper_endpoint_propagation_anomalies_total{reason="garbage"} 1)"));
  EXPECT_THAT(metrics, HasSubstr(R"(outcome="unmeasured",policy="default"} 2)"));
  EXPECT_EQ(w.terminations.totals("shop/default", json()).observed, 0);
  EXPECT_THAT(w.events.recorded, IsEmpty());
}

TEST(TerminationAudit, ADeletionWithoutTriggerTimeStandsOnTheNamespacesSamples) {
  AuditWorld w;
  w.see(slice({{kPod1}, {kPod2}}), kStart);
  // kPod2's readiness fails: a sample of 4.5 s, not a termination.
  w.see(slice({{kPod1}, {kPod2, false, false}}, at(kStart + 10s)), kStart + 14500ms);
  EXPECT_EQ(w.samples.counters().samples, 1u);
  EXPECT_EQ(w.terminations.totals("shop/default", json()).observed, 0);
  // kPod1 is deleted: terminating at once, the annotation gone (the pod's
  // Ready condition has not changed yet), as the EndpointSlice controller does.
  w.see(slice({{kPod1, false, true}, {kPod2, false, false}}), kStart + 20s);
  auto t = w.terminations.totals("shop/default", json());
  EXPECT_EQ(t.observed, 1);
  EXPECT_EQ(t.late, 1);  // 5 - (4.5 + 1)
  ASSERT_EQ(w.events.recorded.size(), 1u);
  EXPECT_THAT(w.events.recorded[0].note, HasSubstr("the namespace's observed quantile"));
  // Then the kubelet marks it not ready: serving false, with a trigger time:
  // a sample, and no second audit.
  w.see(slice({{kPod1, false, true, false}, {kPod2, false, false}}, at(kStart + 21s)),
        kStart + 21500ms);
  EXPECT_EQ(w.samples.counters().samples, 2u);
  EXPECT_EQ(w.terminations.totals("shop/default", json()).observed, 1);
}

TEST(TerminationAudit, AStandbyTakesSamplesButNeitherCountsNorReports) {
  AuditWorld w;
  w.active = false;
  w.see(slice({{kPod1}}), kStart);
  w.see(slice({{kPod1, false, true}}, at(kStart)), kStart + 9s);
  EXPECT_EQ(w.samples.counters().samples, 1u);
  EXPECT_EQ(w.terminations.totals("shop/default", json()).observed, 0);
  EXPECT_THAT(w.events.recorded, IsEmpty());
  EXPECT_EQ(w.audit.pending(), 0u);  // nothing queued either
}

// The projection only notes a termination and queues it; the loop's
// reconcile audits it, once, with what the moment of the change knew.
TEST(TerminationAudit, TheProjectionQueuesAndTheReconcileAudits) {
  AuditWorld w;
  w.see(slice({{kPod1}, {kPod2}}), kStart);
  const TimePoint trigger = kStart + 10s;
  w.observe(slice({{kPod1, false, true}, {kPod2}}, at(trigger)), trigger + 4500ms);
  EXPECT_EQ(w.samples.counters().samples, 1u);  // the sample: at watch time
  EXPECT_THAT(w.queued, ElementsAre("shop/" + kPod1));
  EXPECT_EQ(w.audit.pending(), 1u);
  EXPECT_EQ(w.terminations.totals("shop/default", json()).observed, 0);
  EXPECT_THAT(w.events.recorded, IsEmpty());
  // The template changes before the loop runs: the pod's own wait (5 s)
  // and the time it was seen still decide: 5 - (4.5 + 1), late.
  w.put_deployment(with_pre_stop(deployment("web"), 30));
  w.run_queued();
  auto t = w.terminations.totals("shop/default", json());
  EXPECT_EQ(t.observed, 1);
  EXPECT_EQ(t.late, 1);
  EXPECT_EQ(t.last_late_at, trigger + 4500ms);
  ASSERT_EQ(w.events.recorded.size(), 1u);
  EXPECT_THAT(w.events.recorded[0].note, HasSubstr("preStop wait of 5s"));
  // Audited once: the key again (a retry, a duplicate) finds nothing.
  EXPECT_EQ(w.audit.pending(), 0u);
  EXPECT_EQ(w.audit.reconcile("shop/" + kPod1), Result::done());
  EXPECT_EQ(w.terminations.totals("shop/default", json()).observed, 1);
  EXPECT_EQ(w.audit.reconcile("shop/unknown"), Result::done());
}

TEST(TerminationAudit, UngovernedAndUnknownWaitsAreNotAudited) {
  AuditWorld w;
  json hooked = deployment("hooked");
  hooked["spec"]["template"]["spec"]["containers"][0]["lifecycle"] = {
      {"preStop", {{"httpGet", {{"path", "/drain"}, {"port", 8080}}}}}};
  w.put_deployment(hooked);
  const std::string pod = "hooked-7d9f8b6c5-x2x4z";
  w.see(slice({{pod}}, std::nullopt, "hooked-x"), kStart);
  w.see(slice({{pod, false, true}}, at(kStart), "hooked-x"), kStart + 9s);
  EXPECT_EQ(w.samples.counters().samples, 1u);  // a sample all the same
  EXPECT_EQ(w.terminations.totals("shop/default", json()).observed, 0);
  EXPECT_THAT(w.metrics.serialize(), HasSubstr(R"(outcome="unmeasured")"));
}

TEST(PodWait, ShortestKnownWaitOfTheServingContainers) {
  auto d = CachedDeployment::project(budget::Json(with_pre_stop(deployment("web"), 7)));
  ASSERT_TRUE(d);
  EXPECT_EQ(pod_wait(*d), 7);
  auto none = CachedDeployment::project(budget::Json(deployment("web")));
  EXPECT_EQ(pod_wait(*none), 0);
}

// app (port 8080, sleep 7) and a native sidecar that serves too (port
// 15001), without a hook: it never gets the wait, so it does not set it.
json with_serving_sidecar(json d) {
  d = with_pre_stop(std::move(d), 7);
  d["spec"]["template"]["spec"]["initContainers"] = json::parse(R"([
    {"name": "proxy", "image": "proxy:1", "restartPolicy": "Always",
     "ports": [{"containerPort": 15001}]}])");
  return d;
}

TEST(PodWait, NativeSidecarsNeverSetTheWait) {
  auto d = CachedDeployment::project(budget::Json(with_serving_sidecar(deployment("web"))));
  ASSERT_TRUE(d);
  EXPECT_EQ(pod_wait(*d), 7);
  // Even when no app container declares a port.
  json portless = with_serving_sidecar(deployment("web"));
  portless["spec"]["template"]["spec"]["containers"][0].erase("ports");
  portless["spec"]["template"]["spec"]["containers"][0].erase("readinessProbe");
  auto p = CachedDeployment::project(budget::Json(portless));
  ASSERT_TRUE(p);
  EXPECT_EQ(pod_wait(*p), 7);
}

TEST(PodWait, AMeshProxyNeverSetsTheWait) {
  // An injected istio-proxy declares ports and has no hook: the pod's wait
  // is still the app's.
  json d = with_pre_stop(deployment("web"), 7);
  d["spec"]["template"]["spec"]["containers"].push_back(json::parse(
      R"({"name": "istio-proxy", "image": "proxyv2:1", "ports": [{"containerPort": 15090}]})"));
  auto projected = CachedDeployment::project(budget::Json(d));
  ASSERT_TRUE(projected);
  EXPECT_EQ(pod_wait(*projected), 7);
}

TEST(PodWait, OnlyTheContainersTheAnnotationNamesGetTheWait) {
  // app: port, sleep 3; api: port, sleep 9; worker: no port, no hook.
  json d = with_pre_stop(deployment("web"), 3);
  d["spec"]["template"]["spec"]["containers"].push_back(json::parse(R"(
    {"name": "api", "image": "api:1", "ports": [{"containerPort": 9090}],
     "lifecycle": {"preStop": {"sleep": {"seconds": 9}}}})"));
  d["spec"]["template"]["spec"]["containers"].push_back(
      json::parse(R"({"name": "worker", "image": "worker:1"})"));
  auto wait_with = [&](std::optional<std::string> annotation) {
    json copy = d;
    if (annotation) copy["metadata"]["annotations"]["gracekeeper.dev/containers"] = *annotation;
    auto projected = CachedDeployment::project(budget::Json(copy));
    EXPECT_TRUE(projected);
    return pod_wait(*projected);
  };
  EXPECT_EQ(wait_with(std::nullopt), 3);  // the serving containers: app and api
  EXPECT_EQ(wait_with("api"), 9);
  EXPECT_EQ(wait_with(" api , app "), 3);
  EXPECT_EQ(wait_with("worker"), 0);
  EXPECT_EQ(wait_with("nobody"), 3);  // invalid (reported by the engine): the default
}

TEST(TerminationAudit, APodWithANativeSidecarIsAuditedAgainstTheAppsWait) {
  AuditWorld w;
  w.put_deployment(with_serving_sidecar(deployment("web")));
  w.see(slice({{kPod1}}), kStart);
  w.see(slice({{kPod1, false, true}}, at(kStart + 10s)), kStart + 13s);
  auto t = w.terminations.totals("shop/default", json());
  EXPECT_EQ(t.observed, 1);
  EXPECT_EQ(t.late, 0);  // 7 - (3 + 1); the sidecar's 0 would make it late
  EXPECT_THAT(w.events.recorded, IsEmpty());
}

// A slice change 400 s after its trigger (a stuck controller, a clock far
// ahead): above maxSeconds / safetyFactor = 40 s, dropped from the figure
// and counted, but the termination is still audited on what was seen.
TEST(TerminationAudit, AnImplausibleSampleIsDroppedFromTheFigureAndCounted) {
  AuditWorld w;
  w.see(slice({{kPod1}, {kPod2}}), kStart);
  w.see(slice({{kPod1, false, true}, {kPod2, false, true}}, at(kStart + 10s)), kStart + 410s);
  EXPECT_EQ(w.samples.counters().implausible, 2u);
  auto window = w.samples.window("shop", 3600s, 0.99, kStart + 410s);
  EXPECT_EQ(window.count, 0u);
  EXPECT_FALSE(window.quantile);
  const std::string metrics = w.metrics.serialize();
  EXPECT_THAT(
      metrics,
      HasSubstr(R"(gracekeeper_endpoint_propagation_anomalies_total{reason="implausible"} 2)"));
  EXPECT_EQ(w.terminations.totals("shop/default", json()).late, 2);

  // A policy that allows a wait that long (maxSeconds 900: 600 s) keeps it.
  AuditWorld slow(
      json{{"propagation", {{"source", "Observed"}}}, {"preStop", {{"maxSeconds", 900}}}});
  slow.see(slice({{kPod1}}), kStart);
  slow.see(slice({{kPod1, false, true}}, at(kStart + 10s)), kStart + 410s);
  EXPECT_EQ(slow.samples.counters().implausible, 0u);
  EXPECT_FLOAT_EQ(*slow.samples.window("shop", 3600s, 0.99, kStart + 410s).quantile, 400);
}

TEST(TerminationBook, GoesOnFromTheWrittenStatus) {
  TerminationBook book;
  book.count("shop/default", true, kStart + 5s);
  json status = {
      {"terminations", {{"observed", 10}, {"late", 2}, {"lastLateAt", "2026-11-30T00:00:00Z"}}}};
  auto t = book.totals("shop/default", status);
  EXPECT_EQ(t.observed, 11);
  EXPECT_EQ(t.late, 3);
  EXPECT_EQ(t.last_late_at, kStart + 5s);
  // The base is read once: the next status already holds our counts.
  book.count("shop/default", false, kStart + 6s);
  json written = {{"terminations", {{"observed", 11}, {"late", 3}}}};
  EXPECT_EQ(book.totals("shop/default", written).observed, 12);
  EXPECT_EQ(read_terminations(json::parse(R"({"terminations": {"observed": "x", "late": -3}})")),
            TerminationCounts{});
}

TEST(TerminationAudit, ThePolicyStatusCarriesTheCounts) {
  AuditWorld w;
  w.policy_controller.set_terminations(&w.terminations);
  ASSERT_TRUE(w.reconcile_policy("shop/default"));
  EXPECT_FALSE(w.status_writer.written.back().contains("terminations"));  // none audited yet
  w.see(slice({{kPod1}}), kStart);
  w.see(slice({{kPod1, false, true}}, at(kStart)), kStart + 9s);
  w.clock.advance(1s);
  ASSERT_TRUE(w.reconcile_policy("shop/default"));
  const json& status = w.status_writer.written.back();
  ASSERT_TRUE(status.contains("terminations"));
  EXPECT_EQ(status["terminations"]["observed"], 1);
  EXPECT_EQ(status["terminations"]["late"], 1);
  EXPECT_EQ(status["terminations"]["lastLateAt"], core::format_rfc3339(kStart + 9s));
}

// A pod of web deleted at kStart with a 20 s grace after its 5 s wait.
json deleted_pod(const std::string& name, std::optional<std::pair<int, int>> exit_after = {}) {
  json app{{"name", "app"},
           {"image", "app:1"},
           {"ports", json::array({{{"containerPort", 8080}}})},
           {"lifecycle", {{"preStop", {{"sleep", {{"seconds", 5}}}}}}}};
  json status{{"name", "app"}, {"state", {{"running", json::object()}}}};
  if (exit_after) {
    status["state"] = {{"terminated",
                        {{"exitCode", exit_after->second},
                         {"finishedAt", at(kStart + std::chrono::seconds(exit_after->first))}}}};
  }
  return json{{"metadata",
               {{"name", name},
                {"namespace", "shop"},
                {"deletionTimestamp", at(kStart + 20s)},
                {"deletionGracePeriodSeconds", 20}}},
              {"spec", {{"containers", json::array({app})}}},
              {"status", {{"containerStatuses", json::array({status})}}}};
}

TEST(DrainAudit, APodKilledAtTheGraceIsASampleAWarningAndACount) {
  AuditWorld w;
  // Still draining: cached, nothing measured.
  auto first = w.see_pod(deleted_pod(kPod1));
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->measured);
  EXPECT_TRUE(w.drains.samples("Deployment/shop/web").empty());
  // Killed at the grace: a sample of the 15 s it had after SIGTERM.
  auto killed = w.see_pod(deleted_pod(kPod1, std::pair{21, 137}));
  ASSERT_TRUE(killed && killed->measured);
  const auto samples = w.drains.samples("Deployment/shop/web");
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_TRUE(samples[0].cut_short);
  EXPECT_EQ(samples[0].seconds, 15);
  EXPECT_THAT(w.drained, ElementsAre("shop/web"));
  ASSERT_THAT(w.events.reasons(), ElementsAre("DrainCutShort"));
  EXPECT_THAT(w.events.recorded[0].note, HasSubstr("container app was killed at the grace"));
  EXPECT_THAT(w.events.recorded[0].note, HasSubstr("raise drainSeconds"));
  const auto t = w.terminations.totals("shop/default", json());
  EXPECT_EQ(t.drained, 1);
  EXPECT_EQ(t.cut_short, 1);
  EXPECT_TRUE(t.last_cut_short_at);
  EXPECT_THAT(
      w.metrics.serialize(),
      HasSubstr(R"(gracekeeper_drain_cut_short_total{namespace="shop",policy="default"} 1)"));
  // In the policy's status, and from there after a restart.
  w.policy_controller.set_terminations(&w.terminations);
  w.clock.advance(1s);
  ASSERT_TRUE(w.reconcile_policy("shop/default"));
  ASSERT_FALSE(w.status_writer.written.empty());
  const json status = w.status_writer.written.back();
  ASSERT_TRUE(status.contains("terminations")) << status.dump();
  EXPECT_EQ(status["terminations"]["drained"], 1);
  EXPECT_EQ(status["terminations"]["cutShort"], 1);
  EXPECT_EQ(status["terminations"]["lastCutShortAt"], at(kStart + 21s));
  TerminationBook restarted;
  const auto again = restarted.totals("shop/default", status);
  EXPECT_EQ(again.drained, 1);
  EXPECT_EQ(again.cut_short, 1);
  EXPECT_EQ(again.last_cut_short_at, kStart + 21s);
  // The next event of the same pod (its deletion) measures nothing again.
  w.see_pod(deleted_pod(kPod1, std::pair{21, 137}));
  EXPECT_EQ(w.drains.samples("Deployment/shop/web").size(), 1u);
  EXPECT_EQ(w.events.recorded.size(), 1u);
}

TEST(DrainAudit, OnlyTerminatingPodsOfCachedWorkloadsAreKept) {
  AuditWorld w;
  json serving = deleted_pod(kPod1);
  serving["metadata"].erase("deletionTimestamp");
  EXPECT_FALSE(w.see_pod(serving));
  EXPECT_FALSE(w.see_pod(deleted_pod("other-7d9f8b6c5-x2x4z", std::pair{9, 0})));
  EXPECT_FALSE(w.audit.observe_pod(json("garbage"), nullptr));
  EXPECT_FALSE(w.audit.observe_pod(json{{"metadata", 5}}, nullptr));
  // A standby measures (its samples are ready when it leads) but reports nothing.
  w.active = false;
  ASSERT_TRUE(w.see_pod(deleted_pod(kPod2, std::pair{12, 0})));
  EXPECT_EQ(w.drains.samples("Deployment/shop/web").size(), 1u);
  EXPECT_EQ(w.drains.samples("Deployment/shop/web")[0].seconds, 7);
  EXPECT_THAT(w.events.recorded, IsEmpty());
  EXPECT_EQ(w.terminations.totals("shop/default", json()).drained, 0);
}

TEST(PodAudit, AServingPodIsReadOncePerTemplate) {
  AuditWorld w;
  json serving = deleted_pod(kPod1);
  serving["metadata"].erase("deletionTimestamp");
  serving["metadata"]["creationTimestamp"] = at(kStart);
  serving["spec"]["terminationGracePeriodSeconds"] = 10;
  EXPECT_TRUE(w.audit.wants_pod(serving["metadata"]));
  EXPECT_FALSE(w.see_pod(serving));  // nothing cached
  const auto kept = w.pods.find("Deployment/shop/web");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->name, kPod1);
  EXPECT_EQ(kept->hash, "7d9f8b6c5");
  EXPECT_EQ(kept->pod.grace_seconds, 10);
  EXPECT_THAT(w.drained, ElementsAre("shop/web"));
  // Another pod of the same template: built as metadata only, and nothing new.
  json sibling = serving;
  sibling["metadata"]["name"] = kPod2;
  EXPECT_FALSE(w.audit.wants_pod(sibling["metadata"]));
  w.see_pod(sibling);
  EXPECT_EQ(w.pods.find("Deployment/shop/web")->name, kPod1);
  EXPECT_EQ(w.drained.size(), 1u);
  // A pod of a new template, and pods of workloads not cached.
  json next = serving;
  next["metadata"]["name"] = kNewPod;
  next["metadata"]["creationTimestamp"] = at(kStart + 60s);
  EXPECT_TRUE(w.audit.wants_pod(next["metadata"]));
  w.see_pod(next);
  EXPECT_EQ(w.pods.find("Deployment/shop/web")->name, kNewPod);
  json other = serving;
  other["metadata"]["name"] = "other-7d9f8b6c5-x2x4z";
  EXPECT_FALSE(w.audit.wants_pod(other["metadata"]));
  EXPECT_EQ(w.pods.size(), 1u);
  // A terminating pod is always read in full (its drain).
  EXPECT_TRUE(w.audit.wants_pod(deleted_pod(kPod2)["metadata"]));
}

}  // namespace
}  // namespace gracekeeper::controller::testing
