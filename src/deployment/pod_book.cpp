#include "gracekeeper/deployment/pod_book.h"

#include <fmt/format.h>

#include <algorithm>

#include "gracekeeper/budget/engine.h"

namespace gracekeeper::controller {
namespace {

using budget::PreStopHook;

bool same_hook(const PreStopHook& a, const PreStopHook& b) {
  return a.kind == b.kind && a.wait_ms == b.wait_ms && a.length_ms == b.length_ms &&
         (a.kind == PreStopHook::Kind::Sleep || a.kind == PreStopHook::Kind::None ||
          a.json == b.json);
}

const budget::Container* named(const budget::Deployment& d, const std::string& name) {
  auto it = std::ranges::find(d.containers, name, &budget::Container::name);
  return it == d.containers.end() ? nullptr : &*it;
}

}  // namespace

bool PodBook::offer(const std::string& workload, SeenPod pod) {
  auto it = entries_.find(workload);
  if (it != entries_.end() &&
      (it->second.pod->hash == pod.hash || it->second.pod->created > pod.created)) {
    return false;
  }
  Entry& e = entries_[workload];
  e.pod = std::make_shared<const SeenPod>(std::move(pod));
  e.version = ++next_version_;
  return true;
}

std::shared_ptr<const SeenPod> PodBook::find(const std::string& workload) const {
  auto it = entries_.find(workload);
  return it == entries_.end() ? nullptr : it->second.pod;
}

bool PodBook::has(const std::string& workload, std::string_view hash) const {
  auto it = entries_.find(workload);
  return it != entries_.end() && it->second.pod->hash == hash;
}

std::uint64_t PodBook::version(const std::string& workload) const {
  auto it = entries_.find(workload);
  return it == entries_.end() ? 0 : it->second.version;
}

std::vector<std::string> pod_differences(const budget::Deployment& workload,
                                         const budget::Deployment& pod) {
  std::vector<std::string> out;
  for (const budget::Container& c : pod.containers) {
    if (!named(workload, c.name)) {
      out.push_back(fmt::format("container {}: added to the pod{}", c.name,
                                c.sidecar ? " (a native sidecar)" : ""));
    }
  }
  for (const budget::Container& c : workload.containers) {
    const budget::Container* on_pod = named(pod, c.name);
    if (!on_pod) {
      out.push_back(fmt::format("container {}: not on the pod", c.name));
    } else if (!same_hook(c.pre_stop, on_pod->pre_stop)) {
      out.push_back(fmt::format("container {}: preStop {} in the template, {} on the pod", c.name,
                                budget::describe(c.pre_stop), budget::describe(on_pod->pre_stop)));
    }
  }
  if (workload.grace_seconds != pod.grace_seconds) {
    out.push_back(fmt::format("terminationGracePeriodSeconds: {} in the template, {} on the pod",
                              workload.grace_seconds, pod.grace_seconds));
  }
  return out;
}

}  // namespace gracekeeper::controller
