// In-memory implementations of the reconcilers' ports
// (include/gracekeeper/deployment/ports.h) and a small world to drive them: stores filled by hand,
// a fake clock, a writer that applies what it is sent to the stored object (as the API server's
// watch would bring it back), and recorders of what was sent.
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gracekeeper/deployment/cache.h"
#include "gracekeeper/deployment/deployment_reconciler.h"
#include "gracekeeper/deployment/ports.h"
#include "gracekeeper/kube/store.h"
#include "gracekeeper/metrics/metrics.h"
#include "gracekeeper/policy/policy_reconciler.h"

namespace gracekeeper::controller::testing {

using nlohmann::json;
namespace asio = boost::asio;

inline const TimePoint kStart = std::chrono::sys_days(std::chrono::year{2026} / 12 / 1);

class FakeClock final : public Clock {
 public:
  TimePoint now() const override { return now_; }
  void advance(std::chrono::nanoseconds d) {
    now_ += std::chrono::duration_cast<std::chrono::system_clock::duration>(d);
  }

 private:
  TimePoint now_ = kStart;
};

// Merges an apply configuration into an object the way server-side apply
// does for these fields: objects member by member, lists of named objects
// (containers) by name, everything else replaced.
inline void merge(json& into, const json& patch) {
  if (!patch.is_object() || !into.is_object()) {
    into = patch;
    return;
  }
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    json& target = into[it.key()];
    const json& value = it.value();
    if (value.is_array() && target.is_array() && !value.empty() && value[0].contains("name")) {
      for (const auto& item : value) {
        auto same = std::find_if(target.begin(), target.end(), [&](const json& t) {
          return t.value("name", "") == item["name"];
        });
        if (same == target.end()) {
          target.push_back(item);
        } else {
          merge(*same, item);
        }
      }
    } else if (value.is_object()) {
      merge(target, value);
    } else {
      target = value;
    }
  }
}

class World;

class FakeWriter final : public DeploymentWriter {
 public:
  explicit FakeWriter(World& world) : world_(world) {}
  struct Call {
    std::string key;
    json configuration;
    bool force = false;
    bool replace_hooks = false;
  };
  std::vector<Call> calls;
  // Scripted answers, in order; when empty, every write succeeds.
  std::deque<Written> answers;

  asio::awaitable<Written> apply(const std::string& ns, const std::string& name,
                                 const json& configuration, bool force) override;
  asio::awaitable<Written> replace_hooks(const std::string& ns, const std::string& name,
                                         const json& configuration) override;
  // The stored object's managedFields; counted.
  int reads = 0;
  asio::awaitable<std::expected<json, kube::ApiError>> managed_fields(
      const std::string& ns, const std::string& name) override;

 private:
  asio::awaitable<Written> answer(Call call);
  World& world_;
};

class FakeStatusWriter final : public StatusWriter {
 public:
  explicit FakeStatusWriter(World& world) : world_(world) {}
  std::vector<json> written;
  std::deque<Written> answers;  // scripted, in order; when empty, every write succeeds
  asio::awaitable<Written> write_status(const CachedPolicy& policy, json status) override;

 private:
  World& world_;
};

// Each Event is written at once, unless `failures` says the next writes
// fail: the outcome is told before record() returns.
class FakeEvents final : public EventSink {
 public:
  std::vector<kube::EventRecord> recorded;
  int failures = 0;  // the next writes that fail
  void record(kube::EventRecord e) override {
    recorded.push_back(e);
    const bool written = failures <= 0;
    if (!written) --failures;
    if (outcome) outcome(e, written);
  }
  void on_outcome(Outcome o) override {
    if (!outcome) {
      outcome = std::move(o);
      return;
    }
    outcome = [first = std::move(outcome), second = std::move(o)](const kube::EventRecord& e,
                                                                  bool written) {
      first(e, written);
      second(e, written);
    };
  }
  Outcome outcome;
  std::vector<std::string> reasons() const {
    std::vector<std::string> out;
    for (const auto& e : recorded) out.push_back(e.reason);
    return out;
  }
};

class FakeMeter final : public PropagationMeter {
 public:
  double seconds = 4;
  // false: the source failed and `seconds` is its fallback (MetricsAvailable=False).
  bool available = true;
  int calls = 0;
  asio::awaitable<propagation::Measurement> measure(const std::string&, const budget::PolicySpec&,
                                                    const std::optional<propagation::LastGood>&,
                                                    TimePoint now) override {
    ++calls;
    propagation::Measurement m;
    m.seconds = seconds;
    m.source = "Static";
    m.reason = available ? "StaticSource" : "QueryFailed";
    m.metrics_available = available;
    m.fallback = !available;
    m.sampled_at = now;
    co_return m;
  }
};

// A namespace "shop" with stores, ports and both reconcilers.
class World {
 public:
  World()
      : deployments(deployment_core),
        policies(policy_core),
        services(service_core),
        deployment_controller({deployments,
                               policies,
                               services,
                               book,
                               writer,
                               events,
                               clock,
                               metrics,
                               [this](const std::string& key) { policies_changed.push_back(key); },
                               [this](const std::string& key, std::chrono::nanoseconds after) {
                                 requeued.emplace_back(key, after);
                               },
                               "Deployment",
                               {},
                               {},
                               std::chrono::seconds(600),
                               &drains,
                               &pods}),
        policy_controller({policies, deployments, book, meter, status_writer, clock, metrics,
                           deployment_controller,
                           [this](const std::string& ns) { namespaces_changed.push_back(ns); },
                           [this] { return settled; }},
                          {}) {
    budget::Capabilities c;
    c.native_sleep = true;
    deployment_controller.set_capabilities(c);
    // The fixture's Deployments are behind this Service (deployment()).
    put_service("web", {{"tier", "web"}});
  }

  void put_service(const std::string& name, std::map<std::string, std::string> selector) {
    kube::store_value(service_core, "shop/" + name, std::to_string(++version),
                      CachedService{std::move(selector)});
  }

  // A change on the server, and its watch event, as the informer stores
  // it: a new resourceVersion.
  void put_deployment(json object) {
    const std::string key = object["metadata"]["namespace"].get<std::string>() + "/" +
                            object["metadata"]["name"].get<std::string>();
    object["metadata"]["resourceVersion"] = std::to_string(++version);
    objects[key] = object;
    deliver_deployment(std::move(object));
  }
  // A watch event only, as it was at its resourceVersion: one that comes
  // late (the server already holds a newer object) leaves a stale snapshot.
  void deliver_deployment(json object) {
    const std::string key = object["metadata"]["namespace"].get<std::string>() + "/" +
                            object["metadata"]["name"].get<std::string>();
    const std::string resource_version = object["metadata"].value("resourceVersion", "");
    auto cached = object.value("kind", "") == "StatefulSet" ? project_statefulset(object)
                                                            : project_deployment(object);
    if (cached) {
      kube::store_value(deployment_core, key, resource_version, std::move(*cached));
    } else {
      deployment_core.erase(key);
    }
  }
  void put_policy(json object) {
    const std::string key = object["metadata"]["namespace"].get<std::string>() + "/" +
                            object["metadata"]["name"].get<std::string>();
    policy_objects[key] = object;
    auto cached = project_policy(object);
    kube::store_value(policy_core, key, std::to_string(++version), std::move(*cached));
  }

  template <class T>
  T run(asio::awaitable<T> op) {
    auto future = asio::co_spawn(io, std::move(op), asio::use_future);
    io.restart();
    io.run();
    return future.get();
  }
  ReconcileResult reconcile_deployment(const std::string& key) {
    return run(deployment_controller.reconcile(key));
  }
  ReconcileResult reconcile_policy(const std::string& key) {
    return run(policy_controller.reconcile(key));
  }

  asio::io_context io;
  std::int64_t version = 100;
  std::map<std::string, json> objects;
  std::map<std::string, json> policy_objects;
  kube::StoreCore deployment_core;
  kube::StoreCore policy_core;
  kube::StoreCore service_core;
  kube::Store<CachedDeployment> deployments;
  kube::Store<CachedPolicy> policies;
  kube::Store<CachedService> services;
  PropagationBook book;
  budget::DrainBook drains;  // the measured drains the Deployment controller plans with
  PodBook pods;              // the pods as the kubelet runs them
  FakeClock clock;
  FakeWriter writer{*this};
  FakeStatusWriter status_writer{*this};
  FakeEvents events;
  FakeMeter meter;
  metrics::Metrics metrics;
  bool settled = true;
  std::vector<std::string> policies_changed;
  std::vector<std::string> namespaces_changed;
  std::vector<std::pair<std::string, std::chrono::nanoseconds>> requeued;
  DeploymentReconciler deployment_controller;
  PolicyReconciler policy_controller;
};

inline asio::awaitable<DeploymentWriter::Written> FakeWriter::answer(Call call) {
  calls.push_back(call);
  if (!answers.empty()) {
    Written w = std::move(answers.front());
    answers.pop_front();
    // A refusal, or an answer with a generation: the server's word. The
    // stored object stays as it is, but for its resourceVersion when the
    // answer says it is at a newer generation (the watch has not brought
    // it yet).
    if (w && w->generation) {
      json& stored = world_.objects.at(call.key);
      if (*w->generation > stored.at("metadata").value("generation", std::int64_t{1})) {
        stored["metadata"]["resourceVersion"] = std::to_string(++world_.version);
      }
    }
    if (!w || w->generation) co_return w;
  }
  // Accepted: the watch brings the object back, written, with a new
  // generation; unless the write changed nothing, as the server does.
  const json& stored = world_.objects.at(call.key);
  const std::int64_t generation = stored.at("metadata").value("generation", 1);
  // The precondition in the body: a write decided on an older version.
  const auto& metadata = call.configuration.value("metadata", json::object());
  if (metadata.contains("resourceVersion") &&
      metadata["resourceVersion"] != stored.at("metadata").value("resourceVersion", json())) {
    kube::ApiError e;
    e.reason = kube::ApiError::Reason::Conflict;
    e.http_status = 409;
    e.message = "the object has been modified; please apply your changes to the latest version";
    co_return std::unexpected(std::move(e));
  }
  json object = stored;
  merge(object, call.configuration);
  if (object == stored) co_return WrittenObject{generation};
  object["metadata"]["generation"] = generation + 1;
  world_.put_deployment(object);
  co_return WrittenObject{generation + 1};
}

inline asio::awaitable<DeploymentWriter::Written> FakeWriter::apply(const std::string& ns,
                                                                    const std::string& name,
                                                                    const json& configuration,
                                                                    bool force) {
  Call call{ns + "/" + name, configuration, force, false};
  auto written = co_await answer(std::move(call));
  co_return written;
}

inline asio::awaitable<DeploymentWriter::Written> FakeWriter::replace_hooks(
    const std::string& ns, const std::string& name, const json& configuration) {
  Call call{ns + "/" + name, configuration, true, true};
  auto written = co_await answer(std::move(call));
  co_return written;
}

inline asio::awaitable<std::expected<json, kube::ApiError>> FakeWriter::managed_fields(
    const std::string& ns, const std::string& name) {
  ++reads;
  co_return world_.objects.at(ns + "/" + name)["metadata"].value("managedFields", json::array());
}

inline asio::awaitable<StatusWriter::Written> FakeStatusWriter::write_status(
    const CachedPolicy& policy, json status) {
  if (!answers.empty()) {
    Written w = std::move(answers.front());
    answers.pop_front();
    if (!w) co_return w;
  }
  written.push_back(status);
  json object = world_.policy_objects.at(policy.namespace_ + "/" + policy.name);
  object["status"] = status;
  world_.put_policy(object);
  co_return Written{};
}

inline json policy(json spec = json::object(), const std::string& name = "default") {
  json s = {{"propagation", {{"source", "Static"}, {"staticSeconds", 4}}}};
  merge(s, spec);
  return {{"apiVersion", "gracekeeper.dev/v1alpha1"},
          {"kind", "ShutdownPolicy"},
          {"metadata",
           {{"name", name},
            {"namespace", "shop"},
            {"uid", "p-" + name},
            {"generation", 1},
            {"resourceVersion", "1"}}},
          {"spec", s}};
}

// An opted-in Deployment with no preStop hook, the default grace and
// strategy: everything in it breaks the budget. Its pods are behind the
// World's Service (tier: web).
inline json deployment(const std::string& name = "web") {
  json d = json::parse(R"({
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"namespace": "shop", "generation": 1,
                 "annotations": {"gracekeeper.dev/enabled": "true"}},
    "spec": {"replicas": 3, "template": {"metadata": {"labels": {"tier": "web"}}, "spec": {"containers": [
      {"name": "app", "image": "app:1", "ports": [{"containerPort": 8080}],
       "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}}]}}}})");
  d["metadata"]["name"] = name;
  d["metadata"]["uid"] = "u-" + name;
  return d;
}

// The Deployment controller finished the rollout of the stored generation.
inline void rollout_done(World& world, const std::string& key) {
  json object = world.objects.at(key);
  const std::int64_t replicas = object["spec"].value("replicas", 1);
  object["status"] = {{"observedGeneration", object["metadata"]["generation"]},
                      {"replicas", replicas},
                      {"updatedReplicas", replicas},
                      {"availableReplicas", replicas}};
  world.put_deployment(object);
}

// A field of the status condition of that type; "" when there is none.
inline std::string condition(const json& status, const std::string& type, const char* field) {
  for (const auto& c : status.value("conditions", json::array())) {
    if (c.value("type", "") == type) return c.value(field, "");
  }
  return "";
}

inline kube::ApiError api_error(kube::ApiError::Reason reason, std::string message,
                                std::vector<kube::ApiError::Cause> causes = {}) {
  kube::ApiError e;
  e.reason = reason;
  e.message = std::move(message);
  e.causes = std::move(causes);
  return e;
}

}  // namespace gracekeeper::controller::testing
