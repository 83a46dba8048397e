// reaction_watcher: the operator's reaction latency, seen by a separate
// watcher (test/bench/operator-bench drives it). Prints figures; never fails
// on time (exit 1 only when something could not run, 2 on bad usage).
//
//   reaction_watcher KUBECONFIG optin R GAP_MS TIMEOUT_S
//       Watches the react-* Deployments (label bench.gracekeeper.dev/set=react,
//       all namespaces), then opts them in one at a time (a merge patch adding
//       gracekeeper.dev/enabled: "true"), each after the previous one was
//       patched (or TIMEOUT_S passed) and GAP_MS more. Latency per Deployment:
//       from the watch event carrying the opt-in to the first watch event
//       carrying gracekeeper's applied annotation; both times are taken by
//       this process as the events arrive, so both sides pay the same watch
//       delivery delay. Also from sending the opt-in patch.
//   reaction_watcher KUBECONFIG propagation NAMESPACE STATIC_SECONDS TIMEOUT_S
//       Watches the opted-in Deployments of NAMESPACE, then changes the
//       namespace's policy to staticSeconds STATIC_SECONDS. Latency per
//       Deployment: from sending that patch to the watch event where its
//       applied annotation changed (every Deployment of the namespace re-tunes).
#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "gracekeeper/kube/config.h"
#include "gracekeeper/kube/watch_decoder.h"
#include "operator_bench_common.h"

using namespace gk_bench;

namespace {

std::string annotation(const json& object, const char* key) {
  const json* meta = object.contains("metadata") ? &object["metadata"] : nullptr;
  if (!meta || !meta->contains("annotations")) return {};
  const json& a = (*meta)["annotations"];
  auto it = a.find(key);
  return it != a.end() && it->is_string() ? it->get<std::string>() : std::string();
}

struct Seen {
  std::int64_t optin_us = 0;    // first event with the opt-in annotation
  std::int64_t patched_us = 0;  // first event with a new applied annotation
  std::string applied_before;   // the applied annotation when the watch started
};

struct Watcher {
  std::map<std::string, Seen> seen;  // key "ns/name"
  std::string error;
  bool ended = false;
  std::uint64_t events = 0;
  kube::WatchDecoder decoder;

  bool on_chunk(std::string_view bytes) {
    const std::int64_t now = epoch_us();
    if (auto r = decoder.feed(bytes); !r) {
      error = r.error().format();
      return false;
    }
    while (auto e = decoder.next()) {
      if (e->type != kube::WatchEventType::Added && e->type != kube::WatchEventType::Modified) {
        continue;
      }
      ++events;
      const json& meta = e->object["metadata"];
      const std::string key =
          meta.value("namespace", std::string()) + "/" + meta.value("name", std::string());
      Seen& s = seen[key];
      if (!s.optin_us && annotation(e->object, kEnabled) == "true") s.optin_us = now;
      const std::string applied = annotation(e->object, kApplied);
      if (!s.patched_us && !applied.empty() && applied != s.applied_before) s.patched_us = now;
    }
    return true;
  }
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(q * double(v.size())));
  return v[i];
}

void summary(const char* what, const std::vector<double>& ms) {
  std::printf("%s: n %zu, p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms\n", what, ms.size(),
              percentile(ms, 0.50), percentile(ms, 0.90), percentile(ms, 0.99),
              ms.empty() ? 0.0 : *std::max_element(ms.begin(), ms.end()));
}

// Lists (for the resourceVersion and the state before), then watches from there.
bool start_watch(asio::io_context& io, kube::Client& client, Watcher& w, const std::string& ns,
                 const std::string& selector) {
  kube::ListOptions lo;
  lo.label_selector = selector;
  auto list = drive(io, client.list(kube::resources::deployments, ns, lo));
  if (!list) {
    std::fprintf(stderr, "reaction_watcher: list: %s\n", list.error().format().c_str());
    return false;
  }
  for (const auto& item : (*list)["items"]) {
    const json& meta = item["metadata"];
    Seen& s =
        w.seen[meta.value("namespace", std::string()) + "/" + meta.value("name", std::string())];
    s.applied_before = annotation(item, kApplied);
    if (annotation(item, kEnabled) == "true") s.optin_us = -1;  // opted in before we started
  }
  kube::WatchOptions wo;
  wo.resource_version = (*list)["metadata"].value("resourceVersion", std::string());
  wo.label_selector = selector;
  wo.timeout = std::chrono::seconds(1800);
  asio::co_spawn(
      io,
      [&client, &w, ns, wo]() -> asio::awaitable<void> {
        auto r = co_await client.watch(kube::resources::deployments, ns, wo,
                                       [&w](std::string_view b) { return w.on_chunk(b); });
        if (!r) w.error = r.error().format();
        w.ended = true;
      },
      asio::detached);
  return true;
}

// Runs the io_context until `done()` or the deadline.
template <class F>
bool run_until(asio::io_context& io, F done, std::chrono::steady_clock::time_point deadline) {
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    io.restart();
    io.run_one_for(std::chrono::milliseconds(5));
  }
  return true;
}

int optin(asio::io_context& io, kube::Client& client, int r, int gap_ms, int timeout_s) {
  Watcher w;
  const std::string selector = std::string(kSetLabel) + "=react";
  if (!start_watch(io, client, w, "", selector)) return 1;
  // Let the watch request reach the server before the first opt-in.
  run_until(
      io, [] { return false; }, std::chrono::steady_clock::now() + std::chrono::milliseconds(500));
  std::vector<double> from_event, from_send;
  int missed = 0, skipped = 0;
  for (int j = 0; j < r; ++j) {
    const std::string name = "react-" + std::to_string(j);
    const std::string key = ns_name(j) + "/" + name;
    if (w.seen[key].optin_us) {
      ++skipped;  // opted in by an earlier run
      continue;
    }
    const std::int64_t send_us = epoch_us();
    json patch = {{"metadata", {{"annotations", {{kEnabled, "true"}}}}}};
    bool patched = false;
    asio::co_spawn(
        io,
        [&client, &patched, patch, name, j]() -> asio::awaitable<void> {
          kube::WriteOptions wo;
          wo.field_manager = "operator-bench";
          auto res = co_await client.merge_patch(kube::resources::deployments, ns_name(j), name,
                                                 patch, wo);
          if (!res)
            std::fprintf(stderr, "opt-in %s: %s\n", name.c_str(), res.error().format().c_str());
          patched = true;
        },
        asio::detached);
    const bool ok = run_until(
        io, [&] { return (w.seen[key].patched_us != 0 && patched) || w.ended; },
        std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s));
    if (w.ended) {
      std::fprintf(stderr, "reaction_watcher: the watch ended: %s\n", w.error.c_str());
      return 1;
    }
    const Seen& s = w.seen[key];
    if (!ok || !s.optin_us) {
      ++missed;
    } else {
      from_event.push_back(double(s.patched_us - s.optin_us) / 1000.0);
      from_send.push_back(double(s.patched_us - send_us) / 1000.0);
    }
    run_until(
        io, [] { return false; },
        std::chrono::steady_clock::now() + std::chrono::milliseconds(gap_ms));
  }
  std::printf(
      "opt-in reaction: %d Deployments opted in one at a time (%d ms apart), %d not "
      "patched within %d s, %d skipped (opted in before), %llu watch events\n",
      r - skipped, gap_ms, missed, timeout_s, skipped, static_cast<unsigned long long>(w.events));
  summary("optin_event_to_patch_event", from_event);
  summary("optin_send_to_patch_event", from_send);
  std::fflush(stdout);
  std::_Exit(missed ? 1 : 0);  // the watch coroutine is still running: no orderly teardown
}

int propagation(asio::io_context& io, kube::Client& client, const std::string& ns,
                int static_seconds, int timeout_s) {
  Watcher w;
  const std::string selector = std::string(kSetLabel) + "=on";
  if (!start_watch(io, client, w, ns, selector)) return 1;
  const std::size_t n = w.seen.size();
  run_until(
      io, [] { return false; }, std::chrono::steady_clock::now() + std::chrono::milliseconds(500));
  const std::int64_t send_us = epoch_us();
  json patch = {{"spec", {{"propagation", {{"staticSeconds", static_seconds}}}}}};
  kube::WriteOptions wo;
  wo.field_manager = "operator-bench";
  auto res = drive(io, client.merge_patch(shutdown_policies, ns, "default", patch, wo));
  if (!res) {
    std::fprintf(stderr, "reaction_watcher: policy patch: %s\n", res.error().format().c_str());
    return 1;
  }
  const std::int64_t ack_us = epoch_us();
  auto all_patched = [&] {
    return std::all_of(w.seen.begin(), w.seen.end(),
                       [](const auto& kv) { return kv.second.patched_us != 0; }) ||
           w.ended;
  };
  run_until(io, all_patched, std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s));
  std::vector<double> ms;
  for (const auto& [key, s] : w.seen) {
    if (s.patched_us) ms.push_back(double(s.patched_us - send_us) / 1000.0);
  }
  std::printf(
      "propagation reaction: policy %s/default staticSeconds -> %d (patch acknowledged "
      "after %.1f ms); %zu of %zu opted-in Deployments re-tuned within %d s\n",
      ns.c_str(), static_seconds, double(ack_us - send_us) / 1000.0, ms.size(), n, timeout_s);
  summary("policy_send_to_patch_event", ms);
  std::fflush(stdout);
  std::_Exit(ms.size() == n ? 0 : 1);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc >= 3 ? argv[2] : "";
  if (argc != 6 || (mode != "optin" && mode != "propagation")) {
    std::fprintf(stderr,
                 "usage: %s KUBECONFIG optin R GAP_MS TIMEOUT_S\n"
                 "       %s KUBECONFIG propagation NAMESPACE STATIC_SECONDS TIMEOUT_S\n",
                 argv[0], argv[0]);
    return 2;
  }
  kube::KubeconfigOptions ko;
  ko.files = {argv[1]};
  auto config = kube::load_kubeconfig(ko);
  if (!config) {
    std::fprintf(stderr, "reaction_watcher: %s\n", config.error().format().c_str());
    return 1;
  }
  asio::io_context io(1);
  kube::ClientOptions co;
  co.user_agent = "reaction-watcher";
  kube::Client client(io.get_executor(), *config, co);
  try {
    if (mode == "optin") {
      return optin(io, client, std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]));
    }
    return propagation(io, client, argv[3], std::atoi(argv[4]), std::atoi(argv[5]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reaction_watcher: %s\n", e.what());
    return 1;
  }
}
