// The pods as the kubelet runs them (docs/api.md, "Pods that differ from
// their template"): per governed workload, one pod of its newest template
// (pod-template-hash, or a StatefulSet's controller-revision-hash), read as
// the budget engine reads a Pod. Written by the Pod informer's projection
// (TerminationAudit::observe_pod), read by the workload's decision.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gracekeeper/budget/deployment.h"

namespace gracekeeper::controller {

struct SeenPod {
  std::string name;
  std::string hash;  // the template it was made from
  std::chrono::system_clock::time_point created{};
  budget::Deployment pod;  // kind Pod
};

class PodBook {
 public:
  // Keeps `pod` for `workload` ("Deployment/ns/name") unless a pod of the
  // same template, or of a newer one, is kept already; true when kept.
  bool offer(const std::string& workload, SeenPod pod);
  // The kept pod; null when none.
  std::shared_ptr<const SeenPod> find(const std::string& workload) const;
  // A pod of this template is kept: another one has nothing new to say.
  bool has(const std::string& workload, std::string_view hash) const;
  // Changes whenever the kept pod does (0: none), for memos of decisions.
  std::uint64_t version(const std::string& workload) const;
  void erase(const std::string& workload) { entries_.erase(workload); }
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::shared_ptr<const SeenPod> pod;
    std::uint64_t version = 0;
  };
  std::unordered_map<std::string, Entry> entries_;
  std::uint64_t next_version_ = 0;
};

// What differs between a workload's template and a pod made from it, in
// what the budget reads: containers added or removed (by a mesh injector,
// a policy engine), the grace, each container's preStop hook. One line each,
// "container istio-proxy: added to the pod", "terminationGracePeriodSeconds:
// 46 in the template, 10 on the pod".
std::vector<std::string> pod_differences(const budget::Deployment& workload,
                                         const budget::Deployment& pod);

}  // namespace gracekeeper::controller
