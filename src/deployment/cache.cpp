#include "gracekeeper/deployment/cache.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

#include "gracekeeper/budget/mesh.h"
#include "gracekeeper/core/json.h"
#include "gracekeeper/kube/fields.h"

namespace gracekeeper::controller {
namespace {

using core::int_member;
using core::member;
using core::string_member;

// The cached source is deflated with a preset dictionary: a Deployment's
// budget fields written as MessagePack like the source, holding the field
// names the engine reads and the values the API defaults them to. Deflate
// finds those here instead of in the object, so what is kept is mostly the
// Deployment's own names and numbers: the benchmark's 961 bytes of
// MessagePack become 267 at level 6 (a few percent more at level 1, below).
// Nothing in it comes from a particular cluster, and changing it is safe:
// the cache lives only in memory.
const std::vector<std::uint8_t>& dictionary() {
  static const std::vector<std::uint8_t> bytes =
      nlohmann::json::to_msgpack(nlohmann::json::parse(R"({
    "metadata": {"name": "", "namespace": "", "labels": {
        "app.kubernetes.io/name": "", "app.kubernetes.io/instance": "",
        "app.kubernetes.io/part-of": "", "app.kubernetes.io/component": "", "app": ""},
      "annotations": {"gracekeeper.dev/enabled": "true", "gracekeeper.dev/applied":
        "{\"preStop\":,\"grace\":,\"propagation\":,\"graceOwned\":true,\"policy\":\"\",\"containers\":[\"\"],\"time\":\"Z\"}"}},
    "spec": {"replicas": 1,
      "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
      "template": {"spec": {"terminationGracePeriodSeconds": 30, "containers": [{
        "name": "", "command": [""], "args": [""],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http", "scheme": "HTTP"},
          "tcpSocket": {"port": ""}, "exec": {"command": [""]}, "grpc": {"port": 1, "service": ""},
          "initialDelaySeconds": 1, "periodSeconds": 1, "timeoutSeconds": 1,
          "successThreshold": 1, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/", "port": "http"}, "initialDelaySeconds": 1,
          "periodSeconds": 1, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
        "lifecycle": {"preStop": {"sleep": {"seconds": 1}, "exec": {"command": ["sleep", ""]}}}}]}}}})"));
  return bytes;
}

// Raw deflate (no header or checksum: the bytes never leave the process)
// with a 4 KiB window, which holds the dictionary and a typical source, and
// zlib's smallest tables that still find its matches: about 20 KiB of state
// per thread, reused. Level 1: level 6 made sources 4-7% smaller but took
// 1.6x as long, and deflating was 7% of the operator's CPU in a cold start at
// 5,000 (docs/performance.md).
constexpr int kWindowBits = -12;
constexpr int kMemLevel = 2;

struct Deflater {
  z_stream z{};
  Deflater() {
    if (deflateInit2(&z, 1, Z_DEFLATED, kWindowBits, kMemLevel, Z_DEFAULT_STRATEGY) != Z_OK) {
      throw std::bad_alloc();
    }
  }
  ~Deflater() { deflateEnd(&z); }
};

struct Inflater {
  z_stream z{};
  Inflater() {
    if (inflateInit2(&z, kWindowBits) != Z_OK) throw std::bad_alloc();
  }
  ~Inflater() { inflateEnd(&z); }
};

// Scratch buffers reused from one Deployment to the next: a source is
// packed, deflated and inflated once or twice per watch event and decision,
// and a fresh buffer of a kilobyte or more each time made glibc consolidate
// its free lists on every one (3.5% of the operator's CPU in a cold start).
// One that grew past 64 KiB for an unusual Deployment is given back.
template <class Buffer>
struct Scratch {
  Buffer buffer;
  Buffer& get() {
    buffer.clear();
    return buffer;
  }
  void release_if_large() {
    if (buffer.capacity() > (64u << 10)) Buffer().swap(buffer);
  }
};

std::string deflate_source(const std::vector<std::uint8_t>& data) {
  thread_local Deflater d;
  thread_local Scratch<std::string> scratch;
  deflateReset(&d.z);
  deflateSetDictionary(&d.z, dictionary().data(), static_cast<uInt>(dictionary().size()));
  std::string& out = scratch.get();
  out.resize(deflateBound(&d.z, static_cast<uLong>(data.size())));
  d.z.next_in = const_cast<Bytef*>(data.data());
  d.z.avail_in = static_cast<uInt>(data.size());
  d.z.next_out = reinterpret_cast<Bytef*>(out.data());
  d.z.avail_out = static_cast<uInt>(out.size());
  // deflateBound is enough for Z_FINISH in one call: Z_STREAM_END.
  if (deflate(&d.z, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate failed");
  std::string exact(out.data(), out.size() - d.z.avail_out);
  scratch.release_if_large();
  return exact;
}

// Fills `out`; false when `data` does not inflate (it always does:
// deflate_source wrote it).
bool inflate_source(const std::string& data, std::vector<std::uint8_t>& out) {
  thread_local Inflater i;
  inflateReset(&i.z);
  if (inflateSetDictionary(&i.z, dictionary().data(), static_cast<uInt>(dictionary().size())) !=
      Z_OK) {
    return false;
  }
  out.resize(data.size() * 4 + 256);
  i.z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  i.z.avail_in = static_cast<uInt>(data.size());
  std::size_t written = 0;
  for (;;) {
    i.z.next_out = out.data() + written;
    i.z.avail_out = static_cast<uInt>(out.size() - written);
    const int rc = inflate(&i.z, Z_FINISH);
    written = out.size() - i.z.avail_out;
    if (rc == Z_STREAM_END) break;
    if (rc != Z_BUF_ERROR && rc != Z_OK) return false;
    if (i.z.avail_in == 0 && i.z.avail_out != 0) return false;  // cut short
    out.resize(out.size() * 2);
  }
  out.resize(written);
  return true;
}

// What budget::project_deployment (src/budget/deployment.cpp) reads of a
// Deployment; the unit test checks that it gives the same projection of
// every Deployment it has with these fields as with the whole object.
const std::vector<std::string> kBudgetFields = {
    "kind",  // Deployment or StatefulSet (set by the projection: LIST items carry none)
    "metadata.name",
    "metadata.namespace",
    "metadata.labels",
    "metadata.annotations",  // only gracekeeper's are kept: see budget_fields
    "spec.replicas",
    "spec.strategy",
    // A StatefulSet's, reported (budget::StatefulUpdate).
    "spec.updateStrategy",
    "spec.podManagementPolicy",
    // Which Services select the pods (services.h): whether a wait is needed at all.
    "spec.template.metadata.labels",
    // Mesh proxies (budget/mesh.h): the meshes' annotations and an
    // istio-proxy's variables of its shutdown only, see budget_fields.
    "spec.template.metadata.annotations",
    "spec.template.spec.containers.env",
    "spec.template.spec.initContainers.env",
    "spec.template.spec.terminationGracePeriodSeconds",
    "spec.template.spec.containers.name",
    "spec.template.spec.containers.ports",
    "spec.template.spec.containers.command",
    "spec.template.spec.containers.args",
    "spec.template.spec.containers.lifecycle",
    "spec.template.spec.containers.readinessProbe",
    "spec.template.spec.containers.livenessProbe",
    // Native sidecars (restartPolicy: Always): budgeted, never given the wait.
    "spec.template.spec.initContainers.name",
    "spec.template.spec.initContainers.restartPolicy",
    "spec.template.spec.initContainers.ports",
    "spec.template.spec.initContainers.command",
    "spec.template.spec.initContainers.args",
    "spec.template.spec.initContainers.lifecycle",
    "spec.template.spec.initContainers.readinessProbe",
    "spec.template.spec.initContainers.livenessProbe",
};

}  // namespace

std::vector<std::string> statefulset_fields() {
  std::vector<std::string> fields = kBudgetFields;
  for (const char* field : {"metadata.uid", "metadata.generation", "metadata.managedFields.manager",
                            "metadata.managedFields.operation", "status.observedGeneration",
                            "status.replicas", "status.updatedReplicas", "status.availableReplicas",
                            "status.currentRevision", "status.updateRevision"}) {
    fields.emplace_back(field);
  }
  return fields;
}

std::vector<std::string> deployment_fields() {
  std::vector<std::string> fields = kBudgetFields;
  for (const char* field : {"metadata.uid", "metadata.generation", "metadata.managedFields.manager",
                            "metadata.managedFields.operation", "status.observedGeneration",
                            "status.replicas", "status.updatedReplicas", "status.availableReplicas",
                            "status.terminatingReplicas", "spec.paused", "status.conditions.type",
                            "status.conditions.status", "status.conditions.reason"}) {
    fields.emplace_back(field);
  }
  return fields;
}

namespace {

// The member `key` of `object` when it is a mapping that has it; else null.
template <typename J>
J* member_of(J* object, const char* key) {
  if (object == nullptr || !object->is_object()) return nullptr;
  auto it = object->find(key);
  return it == object->end() ? nullptr : &*it;
}

// Of the pod template's annotations, the meshes'; of the containers'
// environment, an istio-proxy's variables of its shutdown: what
// budget::project_deployment reads of them (budget/mesh.h).
void keep_mesh_fields(nlohmann::json& out) {
  auto* pod_template = member_of(member_of(&out, "spec"), "template");
  if (auto* annotations = member_of(member_of(pod_template, "metadata"), "annotations");
      annotations != nullptr && annotations->is_object()) {
    for (auto it = annotations->begin(); it != annotations->end();) {
      it = budget::is_mesh_annotation(it.key()) ? std::next(it) : annotations->erase(it);
    }
  }
  auto* pod_spec = member_of(pod_template, "spec");
  for (const char* list : {"containers", "initContainers"}) {
    auto* containers = member_of(pod_spec, list);
    if (containers == nullptr || !containers->is_array()) continue;
    for (auto& container : *containers) {
      if (!container.is_object() || !container.contains("env")) continue;
      auto name = container.find("name");
      const bool istio =
          name != container.end() && name->is_string() &&
          budget::proxy_mesh(name->get_ref<const std::string&>()) == budget::Mesh::Istio;
      auto& env = container["env"];
      if (!istio) {
        container.erase("env");
      } else if (env.is_array()) {
        nlohmann::json kept = nlohmann::json::array();
        for (auto& variable : env) {
          const auto* n = member_of(&variable, "name");
          if (n != nullptr && n->is_string() &&
              budget::is_proxy_env(n->get_ref<const std::string&>())) {
            kept.push_back(std::move(variable));
          }
        }
        env = std::move(kept);
      }
    }
  }
}

}  // namespace

nlohmann::json budget_fields(const nlohmann::json& object) {
  static const kube::FieldSet fields(kBudgetFields);
  nlohmann::json out = fields.filter(object);
  keep_mesh_fields(out);
  // Only gracekeeper's own annotations are read; kubectl's
  // last-applied-configuration alone can be the size of the whole object.
  if (auto metadata = out.find("metadata"); metadata != out.end() && metadata->is_object()) {
    if (auto annotations = metadata->find("annotations");
        annotations != metadata->end() && annotations->is_object()) {
      for (auto it = annotations->begin(); it != annotations->end();) {
        if (!it.key().starts_with("gracekeeper.dev/") && it->is_string()) {
          it = annotations->erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  return out;
}

budget::Json CachedDeployment::object() const {
  thread_local Scratch<std::vector<std::uint8_t>> scratch;
  std::vector<std::uint8_t>& packed = scratch.get();
  if (!inflate_source(source, packed)) packed.clear();  // from_msgpack: discarded
  budget::Json object = budget::Json::from_msgpack(packed, /*strict=*/true,
                                                   /*allow_exceptions=*/false);
  scratch.release_if_large();
  return object;
}

std::expected<budget::Deployment, budget::FieldErrors> CachedDeployment::project(
    const budget::Json& object) {
  if (object.is_discarded()) {  // not possible: `source` is written by project_deployment
    return std::unexpected(budget::FieldErrors{{"", "the cached Deployment is unreadable"}});
  }
  return budget::project_deployment(object);
}

std::expected<budget::Deployment, budget::FieldErrors> CachedDeployment::project() const {
  return project(object());
}

bool opted_in(const nlohmann::json& metadata) {
  const nlohmann::json* annotations = member(metadata, "annotations");
  return annotations && string_member(*annotations, budget::kAnnotationEnabled) == "true";
}

bool RolloutStatus::complete(std::int64_t generation) const {
  if (observed_generation < generation) return false;
  if (deadline_exceeded) return true;
  if (stateful) {
    // Pods below the partition keep the old template: done once the others
    // are new and every pod is available. OnDelete never rolls by itself.
    return on_delete || (updated >= std::max<std::int64_t>(desired - partition, 0) &&
                         available >= desired && replicas <= desired);
  }
  return updated >= desired && replicas <= updated && available >= updated;
}

bool RolloutStatus::replacing(std::int64_t generation) const {
  if (observed_generation < generation) return true;
  if (stateful) {
    // Pods below the partition keep the old revision for good: the
    // revisions then stay apart, so count the pods above it.
    if (partition > 0) return updated < std::max<std::int64_t>(desired - partition, 0);
    return revisions_differ || updated < desired;
  }
  if (updated < desired || replicas > updated) return true;
  // Every pod is new: replacing until the new ones are available for the
  // first time (the controller then says NewReplicaSetAvailable, and keeps
  // saying it when a pod is lost later).
  return available < desired && progressing_reason != "NewReplicaSetAvailable";
}

bool RolloutStatus::in_flight(std::int64_t generation) const {
  return !paused && !on_delete && !deadline_exceeded && replacing(generation);
}

bool RolloutStatus::rolling(std::int64_t generation) const {
  // Never observed by the Deployment controller: it has made no pod yet,
  // so no pod of an older template exists either.
  if (observed_generation == 0) return false;
  return observed_generation < generation || replicas > updated || terminating > 0;
}

RolloutStatus rollout_status(const nlohmann::json& object) {
  RolloutStatus r;
  if (const auto* spec = member(object, "spec"); spec && member(*spec, "replicas")) {
    r.desired = int_member(*spec, "replicas");
  }
  if (const auto* spec = member(object, "spec")) {
    if (const auto* paused = member(*spec, "paused"); paused && paused->is_boolean()) {
      r.paused = paused->get<bool>();
    }
  }
  const nlohmann::json* status = member(object, "status");
  if (!status) return r;
  r.observed_generation = int_member(*status, "observedGeneration");
  r.replicas = int_member(*status, "replicas");
  r.updated = int_member(*status, "updatedReplicas");
  r.available = int_member(*status, "availableReplicas");
  r.terminating = int_member(*status, "terminatingReplicas");
  if (const auto* conditions = member(*status, "conditions");
      conditions && conditions->is_array()) {
    for (const auto& c : *conditions) {
      if (string_member(c, "type") != "Progressing") continue;
      r.progressing_reason = string_member(c, "reason");
      r.deadline_exceeded |= string_member(c, "status") == "False" &&
                             r.progressing_reason == "ProgressDeadlineExceeded";
    }
  }
  return r;
}

namespace {

// What a StatefulSet's status and updateStrategy say of its rollout. Its
// status has no terminating count: a pod of the old template that is still
// shutting down is counted in replicas, not in updatedReplicas.
RolloutStatus stateful_rollout_status(const nlohmann::json& object) {
  RolloutStatus r = rollout_status(object);
  r.stateful = true;
  r.paused = false;  // a StatefulSet has no spec.paused
  if (const auto* status = member(object, "status")) {
    const std::string current = string_member(*status, "currentRevision");
    const std::string update = string_member(*status, "updateRevision");
    r.revisions_differ = !update.empty() && current != update;
  }
  if (const auto* spec = member(object, "spec")) {
    if (const auto* strategy = member(*spec, "updateStrategy")) {
      r.on_delete = string_member(*strategy, "type") == "OnDelete";
      if (const auto* rolling = member(*strategy, "rollingUpdate")) {
        r.partition = std::max<std::int64_t>(int_member(*rolling, "partition"), 0);
      }
    }
  }
  return r;
}

std::optional<CachedDeployment> project_workload(const nlohmann::json& object, const char* kind) {
  const nlohmann::json* metadata = member(object, "metadata");
  // Decided on the raw object, so workloads that are not opted in cost
  // nothing beyond this lookup.
  if (!metadata || !opted_in(*metadata)) return std::nullopt;
  const bool stateful = std::string_view(kind) == "StatefulSet";
  CachedDeployment out;
  out.uid = string_member(*metadata, "uid");
  out.generation = int_member(*metadata, "generation");
  if (const auto* fields = member(*metadata, "managedFields"); fields && fields->is_array()) {
    for (const auto& entry : *fields) {
      std::string manager = string_member(entry, "manager");
      if (string_member(entry, "operation") == "Apply" && !manager.empty() &&
          manager != kFieldManager) {
        out.appliers.push_back(std::move(manager));
      }
    }
    std::ranges::sort(out.appliers);
    out.appliers.erase(std::unique(out.appliers.begin(), out.appliers.end()), out.appliers.end());
  }
  out.rollout = stateful ? stateful_rollout_status(object) : rollout_status(object);
  if (const auto* annotations = member(*metadata, "annotations")) {
    const std::string applied = string_member(*annotations, budget::kAnnotationApplied);
    const auto record = nlohmann::json::parse(applied, nullptr, /*allow_exceptions=*/false);
    out.tuned_by = string_member(record, "policy");  // "" when unreadable
  }
  thread_local Scratch<std::vector<std::uint8_t>> scratch;
  std::vector<std::uint8_t>& packed = scratch.get();
  nlohmann::json fields = budget_fields(object);
  fields["kind"] = kind;
  nlohmann::json::to_msgpack(fields, packed);
  out.source = deflate_source(packed);
  scratch.release_if_large();
  return out;
}

}  // namespace

std::optional<CachedDeployment> project_deployment(const nlohmann::json& object) {
  return project_workload(object, "Deployment");
}

std::optional<CachedDeployment> project_statefulset(const nlohmann::json& object) {
  return project_workload(object, "StatefulSet");
}

std::optional<CachedPolicy> project_policy(const nlohmann::json& object) {
  const nlohmann::json* metadata = member(object, "metadata");
  if (!metadata) return std::nullopt;
  const nlohmann::json* spec = member(object, "spec");
  const nlohmann::json* status = member(object, "status");
  CachedPolicy out{string_member(*metadata, "name"),
                   string_member(*metadata, "namespace"),
                   string_member(*metadata, "uid"),
                   string_member(*metadata, "resourceVersion"),
                   int_member(*metadata, "generation"),
                   budget::parse_policy_spec(spec ? budget::Json(*spec) : budget::Json()),
                   status ? *status : nlohmann::json()};
  return out;
}

}  // namespace gracekeeper::controller
