// apply_baseline: the operator benchmark's population and its physical-limit
// baseline (test/bench/operator-bench drives it). Prints figures; never fails
// on time (exit 1 only when something could not run, 2 on bad usage).
//
//   apply_baseline KUBECONFIG populate N R
//       100 namespaces gk-bench-*, each with a ShutdownPolicy "default", and
//       N opted-in Deployments on-*, N not opted in off-*, R not opted in
//       react-* (see operator_bench_common.h); 32 creates in flight;
//       idempotent (AlreadyExists is fine).
//   apply_baseline KUBECONFIG baseline N WORKERS
//       The same N server-side applies the operator makes, with nothing else:
//       for each off-<i> the apply configuration the operator computes
//       (budget::plan + budget::apply_configuration, field manager
//       "gracekeeper", the namespace's policy) is built before the clock
//       starts, then WORKERS coroutines on one io_context send them, one
//       forced apply per Deployment (the fields belong to the creating Update
//       manager until then). No informer, no queue, no events. User agent
//       "apply-baseline", so the audit log tells it from the operator.
//   apply_baseline KUBECONFIG floor N WORKERS
//       What any operator makes the control plane do, with no logic: the
//       LIST of all Deployments in pages of 100, then a watch on all of them
//       from the LIST's resourceVersion (events read and dropped), while the
//       same N applies as `baseline` go out, WORKERS in flight, all on one
//       io_context as in the operator. Run after `baseline`, on the same
//       off-<i>: field manager "gracekeeper-floor" and propagation 5 s, so
//       each apply again changes values another applier owns and is forced.
//   apply_baseline KUBECONFIG services N
//       For each on-<i> of `populate`, what a served Deployment brings: a
//       headless Service on-<i> selecting it, and one EndpointSlice of that
//       Service with one ready endpoint, a pod named as the ReplicaSet
//       controller names them (no controller runs: the slice is written by
//       hand, managed-by "operator-bench"). Idempotent. For the operator's
//       memory with a Service per Deployment (test/bench/service-memory).
//   apply_baseline KUBECONFIG pods N PER
//       For each on-<i> of `populate`, PER serving pods named as the ReplicaSet
//       controller names them, with the labels, probes, resources and preStop
//       hook of a typical pod (no scheduler runs: they stay Pending), and the
//       namespaces' default ServiceAccounts the API server's admission looks
//       up (no controller makes them). Idempotent. For the operator's memory
//       with its Pod informer (test/bench/service-memory).
//   apply_baseline KUBECONFIG list PAGE_SIZE
//       The LIST any informer of all Deployments starts with: every page of
//       PAGE_SIZE (the operator's page size), one after the other, read and
//       dropped (not parsed). What the control plane spends on it is part of
//       any operator's cold start.
#include <algorithm>
#include <array>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/budget/apply.h"
#include "gracekeeper/budget/deployment.h"
#include "gracekeeper/budget/engine.h"
#include "gracekeeper/budget/policy.h"
#include "gracekeeper/kube/config.h"
#include "operator_bench_common.h"

using namespace gk_bench;
namespace budget = gracekeeper::budget;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kPopulateInFlight = 32;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- populate --------------------------------------------------------------
struct PopulateState {
  std::vector<std::pair<std::string, int>> todo;  // (set, index)
  std::size_t next = 0;
  int created = 0;
  int existed = 0;
  int failed = 0;
  std::string first_error;

  // Counts one create: made, already there (idempotent runs), or failed.
  template <typename Result>
  void record(const Result& r) {
    if (r) {
      ++created;
    } else if (r.error().reason == kube::ApiError::Reason::AlreadyExists) {
      ++existed;
    } else {
      ++failed;
      if (first_error.empty()) first_error = r.error().format();
    }
  }
};

// Runs kPopulateInFlight copies of `worker()` on `io` until all have ended.
template <typename MakeWorker>
void run_in_flight(asio::io_context& io, MakeWorker make_worker) {
  int done = 0;
  for (int w = 0; w < kPopulateInFlight; ++w) {
    asio::co_spawn(io, make_worker(), [&](std::exception_ptr e, int) {
      ++done;
      if (e) std::rethrow_exception(e);
    });
  }
  io.restart();
  while (done < kPopulateInFlight) io.run_one();
}

asio::awaitable<int> populate_worker(kube::Client& client, PopulateState& st) {
  while (st.next < st.todo.size()) {
    const auto [set, i] = st.todo[st.next++];
    json object = deployment(set, i);
    kube::WriteOptions wo;
    wo.field_manager = "operator-bench";
    st.record(
        co_await client.create(kube::resources::deployments, ns_name(i), std::move(object), wo));
  }
  co_return 0;
}

int populate(asio::io_context& io, kube::Client& client, int n, int r) {
  const auto t0 = Clock::now();
  for (int k = 0; k < kNamespaces; ++k) {
    json ns = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns_name(k)}}}};
    auto made = drive(io, client.create(kube::resources::namespaces, "", ns));
    if (!made && made.error().reason != kube::ApiError::Reason::AlreadyExists) {
      std::fprintf(stderr, "apply_baseline: namespace %s: %s\n", ns_name(k).c_str(),
                   made.error().format().c_str());
      return 1;
    }
    // One Service selecting every Deployment of the namespace: pods no
    // Service selects get no preStop wait (the peer does not look).
    json service = {{"apiVersion", "v1"},
                    {"kind", "Service"},
                    {"metadata", {{"name", "bench"}, {"namespace", ns_name(k)}}},
                    {"spec",
                     {{"clusterIP", "None"},  // headless: no address to allocate
                      {"selector", {{"app.kubernetes.io/part-of", "bench-suite"}}},
                      {"ports", {{{"port", 80}, {"targetPort", 8080}}}}}}};
    auto s = drive(io, client.create(kube::resources::services, ns_name(k), service));
    if (!s && s.error().reason != kube::ApiError::Reason::AlreadyExists) {
      std::fprintf(stderr, "apply_baseline: service in %s: %s\n", ns_name(k).c_str(),
                   s.error().format().c_str());
      return 1;
    }
    auto p = drive(io, client.create(shutdown_policies, ns_name(k), policy(k)));
    if (!p && p.error().reason != kube::ApiError::Reason::AlreadyExists) {
      std::fprintf(stderr, "apply_baseline: policy in %s: %s\n", ns_name(k).c_str(),
                   p.error().format().c_str());
      return 1;
    }
  }
  std::printf("sample Deployment JSON: %zu bytes, %zu bytes with the sidecar\n",
              deployment("on", 1).dump().size(), deployment("on", 3).dump().size());
  PopulateState st;
  st.todo.reserve(2 * n + r);
  for (int i = 0; i < n; ++i) {
    st.todo.emplace_back("on", i);
    st.todo.emplace_back("off", i);
  }
  for (int j = 0; j < r; ++j) st.todo.emplace_back("react", j);
  run_in_flight(io, [&] { return populate_worker(client, st); });
  const double secs = seconds_since(t0);
  std::printf(
      "populate: %zu Deployments (%d on, %d off, %d react) in %d namespaces: %d created, %d "
      "already existed, %d failed in %.1f s (%.0f creates/s)\n",
      st.todo.size(), n, n, r, kNamespaces, st.created, st.existed, st.failed, secs,
      st.created / (secs > 0 ? secs : 1));
  if (st.failed) {
    std::fprintf(stderr, "apply_baseline: first failure: %s\n", st.first_error.c_str());
    return 1;
  }
  return 0;
}

// ---- a Service and an EndpointSlice per opted-in Deployment ----------------
const kube::Resource endpoint_slices{"discovery.k8s.io", "v1", "endpointslices", true};

json bench_service(int i) {
  const std::string name = "on-" + std::to_string(i);
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", {{"name", name}, {"namespace", ns_name(i)}}},
          {"spec",
           {{"clusterIP", "None"},
            {"selector", {{"app.kubernetes.io/name", name}}},
            {"ports", {{{"port", 80}, {"targetPort", 8080}}}}}}};
}

json bench_slice(int i) {
  const std::string name = "on-" + std::to_string(i);
  const std::string address =
      "198.18." + std::to_string((i / 250) % 256) + "." + std::to_string(i % 250 + 1);
  return {{"apiVersion", "discovery.k8s.io/v1"},
          {"kind", "EndpointSlice"},
          {"metadata",
           {{"name", name + "-x7k2p"},
            {"namespace", ns_name(i)},
            {"labels",
             {{"kubernetes.io/service-name", name},
              {"endpointslice.kubernetes.io/managed-by", "operator-bench"}}}}},
          {"addressType", "IPv4"},
          {"endpoints",
           {{{"addresses", {address}},
             {"conditions", {{"ready", true}, {"serving", true}, {"terminating", false}}},
             {"targetRef",
              {{"kind", "Pod"}, {"namespace", ns_name(i)}, {"name", name + "-5d8f7c9b4-q2w4r"}}}}}},
          {"ports", {{{"name", "http"}, {"port", 8080}, {"protocol", "TCP"}}}}};
}

asio::awaitable<int> services_worker(kube::Client& client, int n, int& next, PopulateState& st) {
  while (next < n) {
    const int i = next++;
    for (int k = 0; k < 2; ++k) {
      const auto& resource = k == 0 ? kube::resources::services : endpoint_slices;
      json object = k == 0 ? bench_service(i) : bench_slice(i);
      kube::WriteOptions wo;
      wo.field_manager = "operator-bench";
      st.record(co_await client.create(resource, ns_name(i), std::move(object), wo));
    }
  }
  co_return 0;
}

int services(asio::io_context& io, kube::Client& client, int n) {
  const auto t0 = Clock::now();
  PopulateState st;
  int next = 0;
  run_in_flight(io, [&] { return services_worker(client, n, next, st); });
  std::printf(
      "services: %d Services and %d EndpointSlices: %d created, %d already existed, %d failed "
      "in %.1f s\n",
      n, n, st.created, st.existed, st.failed, seconds_since(t0));
  if (st.failed) {
    std::fprintf(stderr, "apply_baseline: first failure: %s\n", st.first_error.c_str());
    return 1;
  }
  return 0;
}

// ---- pods of the opted-in Deployments ---------------------------------------
// Suffixes from the ReplicaSet controller's alphabet (no vowels).
constexpr std::array<const char*, 8> kPodSuffixes{"q2w4r", "x7k2p", "b9m4t", "z5n8d",
                                                  "c6v7h", "f4g9k", "j2l5s", "w8x6b"};

json bench_pod(int i, int p) {
  const std::string name = "on-" + std::to_string(i);
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name + "-5d8f7c9b4-" + kPodSuffixes[p]},
            {"namespace", ns_name(i)},
            {"labels",
             {{"app.kubernetes.io/name", name},
              {"app.kubernetes.io/part-of", "operator-bench"},
              {"pod-template-hash", "5d8f7c9b4"}}},
            {"annotations", {{"kubectl.kubernetes.io/restartedAt", "2026-12-07T10:00:00Z"}}}}},
          {"spec",
           {{"automountServiceAccountToken", false},
            {"terminationGracePeriodSeconds", 46},
            {"containers",
             {{{"name", "app"},
               {"image", "bench/app:1.0.0"},
               {"ports", {{{"name", "http"}, {"containerPort", 8080}}}},
               {"env",
                {{{"name", "POD_NAME"},
                  {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}},
                 {{"name", "JAVA_TOOL_OPTIONS"}, {"value", "-XX:MaxRAMPercentage=75"}}}},
               {"resources",
                {{"requests", {{"cpu", "100m"}, {"memory", "256Mi"}}},
                 {"limits", {{"memory", "512Mi"}}}}},
               {"readinessProbe",
                {{"httpGet", {{"path", "/ready"}, {"port", 8080}}}, {"periodSeconds", 2}}},
               {"livenessProbe",
                {{"httpGet", {{"path", "/live"}, {"port", 8080}}}, {"periodSeconds", 10}}},
               {"lifecycle", {{"preStop", {{"sleep", {{"seconds", 6}}}}}}}}}}}}};
}

asio::awaitable<int> pods_worker(kube::Client& client, int n, int per, int& next,
                                 PopulateState& st) {
  while (next < n * per) {
    const int k = next++;
    kube::WriteOptions wo;
    wo.field_manager = "operator-bench";
    st.record(co_await client.create(kube::resources::pods, ns_name(k / per),
                                     bench_pod(k / per, k % per), wo));
  }
  co_return 0;
}

int pods(asio::io_context& io, kube::Client& client, int n, int per) {
  const auto t0 = Clock::now();
  PopulateState st;
  const kube::Resource service_accounts{"", "v1", "serviceaccounts", true};
  for (int k = 0; k < kNamespaces; ++k) {
    json account{{"apiVersion", "v1"},
                 {"kind", "ServiceAccount"},
                 {"metadata", {{"name", "default"}, {"namespace", ns_name(k)}}}};
    st.record(drive(io, client.create(service_accounts, ns_name(k), account)));
  }
  int next = 0;
  run_in_flight(io, [&] { return pods_worker(client, n, per, next, st); });
  std::printf(
      "pods: %d pods (%d per Deployment): %d created, %d already existed, %d failed "
      "in %.1f s\n",
      n * per, per, st.created, st.existed, st.failed, seconds_since(t0));
  if (st.failed) {
    std::fprintf(stderr, "apply_baseline: first failure: %s\n", st.first_error.c_str());
    return 1;
  }
  return 0;
}

// ---- the applies ---------------------------------------------------------
struct Apply {
  std::string ns;
  std::string name;
  json configuration;
};

struct BaselineState {
  std::string field_manager;
  std::vector<Apply> applies;
  std::size_t next = 0;
  int ok = 0;
  int failed = 0;
  std::string first_error;
  std::vector<double> latency_ms;
  std::int64_t last_done_us = 0;
};

asio::awaitable<int> baseline_worker(kube::Client& client, BaselineState& st) {
  while (st.next < st.applies.size()) {
    Apply& a = st.applies[st.next++];
    kube::ApplyOptions options;
    options.field_manager = st.field_manager;
    options.force = true;
    options.read_object = false;  // as the operator sends them
    const auto t0 = Clock::now();
    auto r = co_await client.apply(kube::resources::deployments, a.ns, a.name,
                                   std::move(a.configuration), options);
    st.latency_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    st.last_done_us = epoch_us();
    if (r) {
      ++st.ok;
    } else {
      ++st.failed;
      if (st.first_error.empty()) st.first_error = r.error().format();
    }
  }
  co_return 0;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(q * double(v.size())));
  return v[i];
}

// ---- list and watch ------------------------------------------------------

// `"name":"value"` near the start of a List page, where its metadata is
// (resourceVersion, continue); empty when absent.
std::string head_member(std::string_view page, std::string_view name) {
  const std::string_view head = page.substr(0, 1024);
  const std::string needle = "\"" + std::string(name) + "\":\"";
  const auto at = head.find(needle);
  if (at == std::string_view::npos) return {};
  const auto from = at + needle.size();
  return std::string(head.substr(from, head.find('"', from) - from));
}

struct Listed {
  int pages = 0;
  std::size_t bytes = 0;
  std::string resource_version;  // of the first page: the snapshot every page is from
  std::string error;
};

// Every page of all Deployments, read and dropped (not parsed).
asio::awaitable<Listed> list_pages(kube::Client& client, int page_size) {
  Listed out;
  std::string token;
  do {
    std::string target = "/apis/apps/v1/deployments?limit=" + std::to_string(page_size);
    if (!token.empty()) target += "&continue=" + token;
    auto page = co_await client.get_raw(target);
    if (!page) {
      out.error = page.error().format();
      co_return out;
    }
    if (out.pages++ == 0) out.resource_version = head_member(*page, "resourceVersion");
    out.bytes += page->size();
    token = head_member(*page, "continue");
  } while (!token.empty());
  co_return out;
}

// The floor's reader: the LIST, then a watch from its resourceVersion until
// cancelled.
struct Watched {
  Listed listed;
  std::size_t watch_bytes = 0;
};

asio::awaitable<int> list_and_watch(kube::Client& client, Watched& w) {
  w.listed = co_await list_pages(client, 100);
  if (!w.listed.error.empty()) co_return 1;
  kube::WatchOptions options;
  options.resource_version = w.listed.resource_version;
  options.timeout = std::chrono::seconds(3600);
  auto end =
      co_await client.watch(kube::resources::deployments, "", options, [&](std::string_view chunk) {
        w.watch_bytes += chunk.size();
        return true;
      });
  co_return end ? 0 : 1;
}

// ---- baseline and floor ----------------------------------------------------

int baseline(asio::io_context& io, kube::Client& client, int n, int workers, bool floor) {
  const char* mode = floor ? "floor" : "baseline";
  auto version = drive(io, client.server_version());
  if (!version) {
    std::fprintf(stderr, "apply_baseline: server version: %s\n", version.error().format().c_str());
    return 1;
  }
  int major = 0, minor = 0;
  std::sscanf(version->major.c_str(), "%d", &major);
  std::sscanf(version->minor.c_str(), "%d", &minor);
  auto spec = budget::parse_policy_spec(budget::Json(policy_spec()));
  if (!spec) {
    std::fprintf(stderr, "apply_baseline: the policy spec does not parse\n");
    return 1;
  }
  // Built before the clock starts: the configurations the operator would send.
  BaselineState st;
  st.field_manager = floor ? "gracekeeper-floor" : "gracekeeper";
  st.applies.reserve(n);
  const auto now = std::chrono::system_clock::now();
  std::size_t bytes = 0;
  for (int i = 0; i < n; ++i) {
    auto d = budget::project_deployment(budget::Json(deployment("off", i)));
    if (!d) {
      std::fprintf(stderr, "apply_baseline: off-%d does not project\n", i);
      return 1;
    }
    budget::Context ctx;
    ctx.policy = &*spec;
    ctx.policy_name = "default";
    ctx.propagation_seconds = floor ? 5 : 4;
    ctx.capabilities.native_sleep = major > 1 || (major == 1 && minor >= 30);
    ctx.now = now;
    budget::Plan plan = budget::plan(*d, ctx);
    if (!plan.changed()) {
      std::fprintf(stderr, "apply_baseline: off-%d: the plan changes nothing\n", i);
      return 1;
    }
    json configuration(budget::apply_configuration(*d, plan, "default", now));
    bytes += configuration.dump().size();
    st.applies.push_back({d->namespace_, d->name, std::move(configuration)});
  }
  std::printf("%s: %d apply configurations built, %.0f bytes each on average; sample:\n%s\n", mode,
              n, double(bytes) / n, st.applies.front().configuration.dump().c_str());
  st.latency_ms.reserve(n);

  // Warm the connection (TLS handshake) the way the operator's first request does.
  (void)drive(io, client.get_raw("/readyz"));
  const std::int64_t start_us = epoch_us();
  const auto t0 = Clock::now();
  Watched watched;
  asio::cancellation_signal stop_reader;
  bool reader_done = !floor;
  if (floor) {
    asio::co_spawn(io, list_and_watch(client, watched),
                   asio::bind_cancellation_slot(
                       stop_reader.slot(), [&](std::exception_ptr, int) { reader_done = true; }));
  }
  int done = 0;
  for (int w = 0; w < workers; ++w) {
    asio::co_spawn(io, baseline_worker(client, st), [&](std::exception_ptr e, int) {
      ++done;
      if (e) std::rethrow_exception(e);
    });
  }
  io.restart();
  while (done < workers) io.run_one();
  const double secs = seconds_since(t0);
  stop_reader.emit(asio::cancellation_type::terminal);
  while (!reader_done) io.run_one();
  std::printf("%s_start_us %lld\n%s_end_us %lld\n", mode, static_cast<long long>(start_us), mode,
              static_cast<long long>(st.last_done_us));
  std::printf(
      "%s: %d applies (%d ok, %d failed), %d in flight, %.3f s, %.0f applies/s; "
      "latency p50 %.1f ms, p99 %.1f ms\n",
      mode, n, st.ok, st.failed, workers, secs, n / (secs > 0 ? secs : 1),
      percentile(st.latency_ms, 0.50), percentile(st.latency_ms, 0.99));
  if (floor) {
    std::printf("floor: listed %d pages, %.1f MB%s; watched %.1f MB of events\n",
                watched.listed.pages, watched.listed.bytes / 1e6,
                watched.listed.error.empty() ? "" : (" (" + watched.listed.error + ")").c_str(),
                watched.watch_bytes / 1e6);
  }
  if (st.failed) {
    std::fprintf(stderr, "apply_baseline: first failure: %s\n", st.first_error.c_str());
    return 1;
  }
  return 0;
}

int list(asio::io_context& io, kube::Client& client, int page_size) {
  const auto t0 = Clock::now();
  const Listed listed = drive(io, list_pages(client, page_size));
  if (!listed.error.empty()) {
    std::fprintf(stderr, "apply_baseline: list: %s\n", listed.error.c_str());
    return 1;
  }
  std::printf("list: %d pages of %d, %.1f MB, %.3f s\n", listed.pages, page_size,
              listed.bytes / 1e6, seconds_since(t0));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc >= 3 ? argv[2] : "";
  const bool one_number = mode == "list" || mode == "services";
  if (argc != (one_number ? 4 : 5) ||
      (mode != "populate" && mode != "baseline" && mode != "floor" && mode != "list" &&
       mode != "services" && mode != "pods")) {
    std::fprintf(stderr,
                 "usage: %s KUBECONFIG populate N R | %s KUBECONFIG baseline|floor N WORKERS | "
                 "%s KUBECONFIG list PAGE_SIZE | %s KUBECONFIG services N | "
                 "%s KUBECONFIG pods N PER\n",
                 argv[0], argv[0], argv[0], argv[0], argv[0]);
    return 2;
  }
  const int a = std::atoi(argv[3]);
  const int b = one_number ? 0 : std::atoi(argv[4]);
  if (a <= 0 || b < 0 || ((mode == "baseline" || mode == "floor") && b <= 0) ||
      (mode == "pods" && (b <= 0 || b > static_cast<int>(kPodSuffixes.size())))) {
    std::fprintf(stderr, "apply_baseline: bad numbers\n");
    return 2;
  }
  kube::KubeconfigOptions ko;
  ko.files = {argv[1]};
  auto config = kube::load_kubeconfig(ko);
  if (!config) {
    std::fprintf(stderr, "apply_baseline: %s\n", config.error().format().c_str());
    return 1;
  }
  asio::io_context io(1);
  kube::ClientOptions co;
  co.user_agent =
      mode == "floor" ? "apply-floor" : "apply-baseline";  // the audit log tells them apart
  co.max_idle_connections = static_cast<std::size_t>(std::max(b, 4));
  kube::Client client(io.get_executor(), *config, co);
  try {
    if (mode == "list") return list(io, client, a);
    if (mode == "services") return services(io, client, a);
    if (mode == "pods") return pods(io, client, a, b);
    if (mode == "populate") return populate(io, client, a, b);
    return baseline(io, client, a, b, mode == "floor");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "apply_baseline: %s\n", e.what());
    return 1;
  }
}
