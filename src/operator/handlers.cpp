#include "handlers.h"

#include "gracekeeper/deployment/deployment_reconciler.h"  // split_key

namespace gracekeeper::controller {

void EnqueueRules::enqueue_namespace(const std::string& ns) {
  deployments_.in_namespace(
      ns, [&](const std::string& key, const CachedDeployment&) { deployment_queue_.add(key); });
}

void EnqueueRules::enqueue_policies(const std::string& ns) {
  policies_.in_namespace(ns, [&](const std::string& key, const CachedPolicy&) {
    policy_queue_.add_after(key, status_delay_);
  });
}

void EnqueueRules::enqueue_all_policies() {
  for (const auto& key : policies_.keys()) policy_queue_.add(key);
}

kube::InformerHandlers EnqueueRules::deployment_handlers() {
  auto changed = [this](const std::string& key) {
    deployment_queue_.add(key);
    enqueue_policies(split_key(key).first);
  };
  return {changed, changed, changed};
}

kube::InformerHandlers EnqueueRules::policy_handlers() {
  auto changed = [this](const std::string& key) {
    policy_queue_.add(key);
    const auto policy = policies_.get(key);
    const std::int64_t generation = policy ? policy->generation : -1;
    auto [it, inserted] = generation_seen_.try_emplace(key, generation);
    if (inserted || it->second != generation) {
      it->second = generation;
      enqueue_namespace(split_key(key).first);
      enqueue_policies(split_key(key).first);  // which policy governs what may have moved
    }
  };
  return {changed, changed, [this](const std::string& key) {
            generation_seen_.erase(key);
            policy_queue_.add(key);
            enqueue_namespace(split_key(key).first);
            enqueue_policies(split_key(key).first);
          }};
}

kube::InformerHandlers EnqueueRules::service_handlers() {
  auto changed = [this](const std::string& key) {
    const std::string ns = split_key(key).first;
    enqueue_namespace(ns);
    enqueue_policies(ns);
  };
  return {changed, changed, changed};
}

}  // namespace gracekeeper::controller
