// Heap bytes per opted-in Deployment of the operator, measured with glibc's
// mallinfo2 around building N of them:
// 1. the informer cache: the projection
//    (include/gracekeeper/deployment/cache.h) of the benchmark's Deployment
//    (operator_bench_common.h), keyed as the informer keys it;
// 2. the Events waiting in the event recorder while the operator is busy:
//    the budget engine's plan of the same Deployment under the benchmark's
//    policy gives a Tuned note and findings, as the reconciler words them.
//    (The operator reports the findings of the tuned Deployment, about 1.5
//    per Deployment in operator-bench; these are the untuned one's, more of
//    them. The figure per Event is the one to read.) Waiting Events are
//    kept in chunks of their own (kube::HeldEvents), counted besides the heap.
// Usage: projection_memory [N]
#include <fmt/core.h>
#include <malloc.h>

#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>

#include "gracekeeper/budget/engine.h"
#include "gracekeeper/budget/policy.h"
#include "gracekeeper/deployment/cache.h"  // the projection measured
#include "gracekeeper/kube/events.h"
#include "operator_bench_common.h"

namespace {

std::size_t heap_in_use() {
  return mallinfo2().uordblks;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 10000;
  if (n <= 0) {
    std::fprintf(stderr, "usage: %s [N > 0]\n", argv[0]);
    return 2;
  }
  std::size_t json_bytes = 0;
  const std::size_t before = heap_in_use();
  std::unordered_map<std::string, gracekeeper::controller::CachedDeployment> cache;
  for (int i = 0; i < n; ++i) {
    auto object = gk_bench::deployment("on", i);
    object["metadata"]["uid"] = "0c9a3f52-6f0e-4d2b-9d7e-" + std::to_string(100000000000 + i);
    object["metadata"]["generation"] = 1;
    json_bytes += object.dump().size();
    auto projected = gracekeeper::controller::project_deployment(object);
    if (!projected || !projected->project()) {
      std::fprintf(stderr, "projection_memory: Deployment %d was not projected\n", i);
      return 1;
    }
    cache.emplace(object["metadata"]["namespace"].get<std::string>() + "/" +
                      object["metadata"]["name"].get<std::string>(),
                  std::move(*projected));
  }
  const std::size_t after = heap_in_use();
  std::printf(
      "projection_memory: %d Deployments (%.0f B of JSON each): %.0f heap bytes per cached "
      "projection, %.1f MiB in all\n",
      n, double(json_bytes) / n, double(after - before) / n,
      double(after - before) / (1024.0 * 1024.0));

  // 1b. The same object as an opted-in StatefulSet (its updateStrategy and
  // serviceName instead of a strategy), cached by the StatefulSet informer
  // in the same projection, with the ratio to the Deployment's.
  std::size_t sts_json_bytes = 0;
  const std::size_t sts_before = heap_in_use();
  std::unordered_map<std::string, gracekeeper::controller::CachedDeployment> sts_cache;
  for (int i = 0; i < n; ++i) {
    auto object = gk_bench::deployment("on", i);
    object["kind"] = "StatefulSet";
    object["spec"].erase("strategy");
    object["spec"]["serviceName"] = object["metadata"]["name"];
    object["spec"]["updateStrategy"] = {{"type", "RollingUpdate"},
                                        {"rollingUpdate", {{"partition", 0}}}};
    object["spec"]["podManagementPolicy"] = "OrderedReady";
    object["metadata"]["uid"] = "0c9a3f52-6f0e-4d2b-9d7e-" + std::to_string(100000000000 + i);
    object["metadata"]["generation"] = 1;
    sts_json_bytes += object.dump().size();
    auto projected = gracekeeper::controller::project_statefulset(object);
    if (!projected || !projected->project() || projected->project()->kind != "StatefulSet") {
      std::fprintf(stderr, "projection_memory: StatefulSet %d was not projected\n", i);
      return 1;
    }
    sts_cache.emplace(object["metadata"]["namespace"].get<std::string>() + "/" +
                          object["metadata"]["name"].get<std::string>(),
                      std::move(*projected));
  }
  const std::size_t sts_after = heap_in_use();
  std::printf(
      "projection_memory: %d StatefulSets (%.0f B of JSON each): %.0f heap bytes per cached "
      "projection, %.2fx the Deployment's\n",
      n, double(sts_json_bytes) / n, double(sts_after - sts_before) / n,
      double(sts_after - sts_before) / double(after - before));
  sts_cache.clear();

  // 2. Waiting Events: a recorder that is always busy, so nothing is written
  // (the io_context never runs).
  namespace budget = gracekeeper::budget;
  namespace kube = gracekeeper::kube;
  auto spec = budget::parse_policy_spec(budget::Json(gk_bench::policy_spec()));
  if (!spec) {
    std::fprintf(stderr, "projection_memory: the benchmark's policy does not parse\n");
    return 1;
  }
  budget::Context ctx;
  ctx.policy = &*spec;
  ctx.policy_name = "default";
  ctx.propagation_seconds = 4;
  ctx.now = std::chrono::system_clock::now();
  std::vector<kube::EventRecord> records;
  for (int i = 0; i < n; ++i) {
    auto object = gk_bench::deployment("on", i);
    auto d = budget::project_deployment(budget::Json(object));
    if (!d) return 1;
    const budget::Plan plan = budget::plan(*d, ctx);
    const kube::ObjectRef ref{"apps/v1", "Deployment", d->namespace_, d->name,
                              "0c9a3f52-6f0e-4d2b-9d7e-" + std::to_string(100000000000 + i)};
    std::string changes;
    for (const auto& c : plan.changes) {
      changes += fmt::format("{}{}: {} -> {}", changes.empty() ? "" : ", ", c.field, c.from, c.to);
    }
    records.push_back({ref, kube::EventType::Normal, "Tuned", "Tune",
                       changes + " (policy default, propagation 4s)"});
    for (const auto& f : plan.findings) {
      records.push_back(
          {ref,
           f.severity == budget::Severity::Info ? kube::EventType::Normal
                                                : kube::EventType::Warning,
           f.code, "Check",
           f.container.empty() ? f.message : "container " + f.container + ": " + f.message});
    }
  }
  std::size_t note_bytes = 0;
  for (const auto& r : records) note_bytes += r.note.size();
  auto* io = new boost::asio::io_context;  // left to the end of the process: never run
  gracekeeper::kube::ClusterConfig config;
  config.server = "http://127.0.0.1:9";
  config.allow_plain_http = true;
  auto* client = new kube::Client(io->get_executor(), config);
  kube::EventRecorderOptions options;
  options.busy = [] { return true; };
  const std::size_t events_before = heap_in_use();
  auto* recorder = new kube::EventRecorder(io->get_executor(), *client, options);
  for (const auto& r : records) recorder->record(r);
  const std::size_t events_after = heap_in_use();
  const std::size_t chunks = recorder->held().chunk_bytes();
  std::printf(
      "projection_memory: %zu Events waiting (%.1f per Deployment, notes of %.0f B, %zu distinct): "
      "%.0f bytes per Event (%.0f heap + %.0f in its chunks), %.1f MiB in all\n",
      recorder->in_flight(), double(records.size()) / n, double(note_bytes) / records.size(),
      recorder->held().distinct_notes(),
      double(events_after - events_before + chunks) / records.size(),
      double(events_after - events_before) / records.size(), double(chunks) / records.size(),
      double(events_after - events_before + chunks) / (1024.0 * 1024.0));
  return 0;
}
