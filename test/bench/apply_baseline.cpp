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
//   apply_baseline KUBECONFIG list PAGE_SIZE
//       The LIST any informer of all Deployments starts with: every page of
//       PAGE_SIZE (the operator's page size), one after the other, read and
//       dropped (not parsed). What the control plane spends on it is part of
//       any operator's cold start.
#include <algorithm>
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
};

asio::awaitable<int> populate_worker(kube::Client& client, PopulateState& st) {
  while (st.next < st.todo.size()) {
    const auto [set, i] = st.todo[st.next++];
    json object = deployment(set, i);
    kube::WriteOptions wo;
    wo.field_manager = "operator-bench";
    auto r =
        co_await client.create(kube::resources::deployments, ns_name(i), std::move(object), wo);
    if (r) {
      ++st.created;
    } else if (r.error().reason == kube::ApiError::Reason::AlreadyExists) {
      ++st.existed;
    } else {
      ++st.failed;
      if (st.first_error.empty()) st.first_error = r.error().format();
    }
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
  int done = 0;
  for (int w = 0; w < kPopulateInFlight; ++w) {
    asio::co_spawn(io, populate_worker(client, st), [&](std::exception_ptr e, int) {
      ++done;
      if (e) std::rethrow_exception(e);
    });
  }
  io.restart();
  while (done < kPopulateInFlight) io.run_one();
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

// ---- baseline --------------------------------------------------------------
struct Apply {
  std::string ns;
  std::string name;
  json configuration;
};

struct BaselineState {
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
    options.field_manager = "gracekeeper";
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

int baseline(asio::io_context& io, kube::Client& client, int n, int workers) {
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
    ctx.propagation_seconds = 4;
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
  std::printf("baseline: %d apply configurations built, %.0f bytes each on average; sample:\n%s\n",
              n, double(bytes) / n, st.applies.front().configuration.dump().c_str());
  st.latency_ms.reserve(n);

  // Warm the connection (TLS handshake) the way the operator's first request does.
  (void)drive(io, client.get_raw("/readyz"));
  const std::int64_t start_us = epoch_us();
  const auto t0 = Clock::now();
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
  std::printf("baseline_start_us %lld\nbaseline_end_us %lld\n", static_cast<long long>(start_us),
              static_cast<long long>(st.last_done_us));
  std::printf(
      "baseline: %d applies (%d ok, %d failed), %d in flight, %.3f s, %.0f applies/s; "
      "latency p50 %.1f ms, p99 %.1f ms\n",
      n, st.ok, st.failed, workers, secs, n / (secs > 0 ? secs : 1),
      percentile(st.latency_ms, 0.50), percentile(st.latency_ms, 0.99));
  if (st.failed) {
    std::fprintf(stderr, "apply_baseline: first failure: %s\n", st.first_error.c_str());
    return 1;
  }
  return 0;
}

// ---- list ------------------------------------------------------------------

int list(asio::io_context& io, kube::Client& client, int page_size) {
  const auto t0 = Clock::now();
  std::string token;
  int pages = 0;
  std::size_t bytes = 0;
  do {
    std::string target = "/apis/apps/v1/deployments?limit=" + std::to_string(page_size);
    if (!token.empty()) target += "&continue=" + token;
    auto page = drive(io, client.get_raw(target));
    if (!page) {
      std::fprintf(stderr, "apply_baseline: list: %s\n", page.error().format().c_str());
      return 1;
    }
    ++pages;
    bytes += page->size();
    // The List's metadata comes before its items: the token is near the start.
    token.clear();
    const std::string_view head = std::string_view(*page).substr(0, 1024);
    if (const auto at = head.find("\"continue\":\""); at != std::string_view::npos) {
      const auto from = at + 12;
      token = std::string(head.substr(from, head.find('"', from) - from));
    }
  } while (!token.empty());
  std::printf("list: %d pages of %d, %.1f MB, %.3f s\n", pages, page_size, bytes / 1e6,
              seconds_since(t0));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc >= 3 ? argv[2] : "";
  if (argc != (mode == "list" ? 4 : 5) ||
      (mode != "populate" && mode != "baseline" && mode != "list")) {
    std::fprintf(stderr,
                 "usage: %s KUBECONFIG populate N R | %s KUBECONFIG baseline N WORKERS | "
                 "%s KUBECONFIG list PAGE_SIZE\n",
                 argv[0], argv[0], argv[0]);
    return 2;
  }
  const int a = std::atoi(argv[3]);
  const int b = mode == "list" ? 0 : std::atoi(argv[4]);
  if (a <= 0 || b < 0 || (mode == "baseline" && b <= 0)) {
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
  co.user_agent = "apply-baseline";
  co.max_idle_connections = static_cast<std::size_t>(std::max(b, 4));
  kube::Client client(io.get_executor(), *config, co);
  try {
    if (mode == "list") return list(io, client, a);
    return mode == "populate" ? populate(io, client, a, b) : baseline(io, client, a, b);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "apply_baseline: %s\n", e.what());
    return 1;
  }
}
