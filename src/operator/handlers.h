// What the informers' handlers do: they only enqueue keys
// (sample-controller), and this is which keys each change concerns.
//
//  - a Deployment changed: the Deployment, and (after status_delay, so a
//    burst is one status) the policies of its namespace, whose counts may
//    have moved;
//  - a Service came, went or changed: every Deployment of its namespace
//    (whether its pods are behind a Service may have changed; Services
//    change rarely, and the handler has only the key, not the old selector);
//  - a policy's spec changed (a new generation; our own status writes are
//    not a change of spec), or a policy came or went: the policy, every
//    Deployment of its namespace, and (after status_delay) the namespace's
//    other policies, whose counts and conflicts may have moved.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "gracekeeper/deployment/cache.h"
#include "gracekeeper/kube/informer.h"
#include "gracekeeper/kube/store.h"
#include "gracekeeper/kube/workqueue.h"

namespace gracekeeper::controller {

class EnqueueRules {
 public:
  EnqueueRules(kube::Store<CachedDeployment> deployments, kube::Store<CachedPolicy> policies,
               kube::AsyncWorkQueue& deployment_queue, kube::AsyncWorkQueue& policy_queue,
               std::chrono::milliseconds status_delay = std::chrono::seconds(1))
      : deployments_(deployments),
        policies_(policies),
        deployment_queue_(deployment_queue),
        policy_queue_(policy_queue),
        status_delay_(status_delay) {}

  kube::InformerHandlers deployment_handlers();
  kube::InformerHandlers policy_handlers();
  kube::InformerHandlers service_handlers();

  void enqueue_namespace(const std::string& ns);  // its Deployments
  void enqueue_policies(const std::string& ns);   // its policies, after status_delay
  void enqueue_all_policies();

 private:
  kube::Store<CachedDeployment> deployments_;
  kube::Store<CachedPolicy> policies_;
  kube::AsyncWorkQueue& deployment_queue_;
  kube::AsyncWorkQueue& policy_queue_;
  std::chrono::milliseconds status_delay_;
  // The generation each policy had at its last event: controller-runtime's
  // GenerationChangedPredicate, since handlers get keys, not old and new.
  std::unordered_map<std::string, std::int64_t> generation_seen_;
};

}  // namespace gracekeeper::controller
