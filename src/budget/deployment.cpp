#include "gracekeeper/budget/deployment.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "gracekeeper/budget/mesh.h"
#include "gracekeeper/budget/shell.h"
#include "gracekeeper/core/time.h"

namespace gracekeeper::budget {
namespace {

// JSON has no spelling for infinity and NaN (dump() writes null): use YAML's.
std::string number_text(const Json& value) {
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (std::isnan(d)) return ".nan";
    if (std::isinf(d)) return d > 0 ? ".inf" : "-.inf";
  }
  return value.dump();
}

std::string describe(const Json& value) {
  std::string text = number_text(value);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  switch (value.type()) {
    case Json::value_t::string:
      return "string " + text;
    case Json::value_t::boolean:
      return "boolean " + text;
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "a mapping";
    case Json::value_t::array:
      return "a list";
    default:
      return "number " + text;
  }
}

// Reads typed fields out of a decoded object, collecting one error per bad
// field (with its path) instead of stopping at the first.
class Reader {
 public:
  explicit Reader(FieldErrors& errors) : errors_(errors) {}

  void fail(const std::string& path, std::string message) {
    errors_.push_back({path, std::move(message)});
  }

  // The object at `key`, or nullptr when absent/null. Wrong type: error + nullptr.
  const Json* object(const Json& parent, const char* key, const std::string& path) {
    auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) return nullptr;
    if (!it->is_object()) {
      fail(path, "expected a mapping, got " + describe(*it));
      return nullptr;
    }
    return &*it;
  }

  const Json* array(const Json& parent, const char* key, const std::string& path) {
    auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) return nullptr;
    if (!it->is_array()) {
      fail(path, "expected a list, got " + describe(*it));
      return nullptr;
    }
    return &*it;
  }

  std::optional<std::string> string(const Json& parent, const char* key, const std::string& path) {
    auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) {
      fail(path, "expected a string, got " + describe(*it));
      return std::nullopt;
    }
    return it->get<std::string>();
  }

  std::optional<std::int64_t> integer(const Json& parent, const char* key, const std::string& path,
                                      std::int64_t min, std::int64_t max) {
    auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) return std::nullopt;
    if (!it->is_number_integer()) {
      fail(path,
           fmt::format("expected an integer between {} and {}, got {}", min, max, describe(*it)));
      return std::nullopt;
    }
    // Unsigned values above int64 never reach here as signed: check both.
    if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
      fail(path,
           fmt::format("expected an integer between {} and {}, got {}", min, max, it->dump()));
      return std::nullopt;
    }
    const auto value = it->get<std::int64_t>();
    if (value < min || value > max) {
      fail(path, fmt::format("expected an integer between {} and {}, got {}", min, max, value));
      return std::nullopt;
    }
    return value;
  }

  std::vector<std::string> strings(const Json& parent, const char* key, const std::string& path) {
    std::vector<std::string> out;
    const Json* list = array(parent, key, path);
    if (list == nullptr) return out;
    for (std::size_t i = 0; i < list->size(); ++i) {
      const Json& item = (*list)[i];
      if (!item.is_string()) {
        fail(fmt::format("{}[{}]", path, i), "expected a string, got " + describe(item));
        continue;
      }
      out.push_back(item.get<std::string>());
    }
    return out;
  }

  std::map<std::string, std::string> string_map(const Json& parent, const char* key,
                                                const std::string& path) {
    std::map<std::string, std::string> out;
    const Json* map = object(parent, key, path);
    if (map == nullptr) return out;
    for (const auto& [name, value] : map->items()) {
      if (!value.is_string()) {
        std::string hint = value.is_boolean() || value.is_number()
                               ? fmt::format(" (quote it: \"{}\")", value.dump())
                               : "";
        fail(fmt::format("{}[{}]", path, name), "expected a string, got " + describe(value) + hint);
        continue;
      }
      out.emplace(name, value.get<std::string>());
    }
    return out;
  }

  std::optional<IntOrPercent> int_or_percent(const Json& parent, const char* key,
                                             const std::string& path) {
    auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) return std::nullopt;
    constexpr std::int64_t max_value = std::numeric_limits<std::int32_t>::max();
    if (it->is_number_integer()) {
      if (it->is_number_unsigned()
              ? it->get<std::uint64_t>() > max_value
              : (it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > max_value)) {
        fail(path, fmt::format("expected a count between 0 and {} or a percentage, got {}",
                               max_value, it->dump()));
        return std::nullopt;
      }
      return IntOrPercent{it->get<std::int64_t>(), false};
    }
    if (it->is_string()) {
      const auto& text = it->get_ref<const std::string&>();
      std::int64_t value = 0;
      if (text.size() >= 2 && text.back() == '%') {
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size() - 1, value);
        if (ec == std::errc() && end == text.data() + text.size() - 1 && value >= 0 &&
            value <= max_value) {
          return IntOrPercent{value, true};
        }
      }
    }
    fail(path, "expected a count (e.g. 1) or a percentage (e.g. \"25%\"), got " + describe(*it));
    return std::nullopt;
  }

 private:
  FieldErrors& errors_;
};

// Absent or null: a required field is missing. (A present field of the wrong
// type has already been reported by the Reader.)
bool missing(const Json& parent, const char* key) {
  auto it = parent.find(key);
  return it == parent.end() || it->is_null();
}

std::string port_text(const Json& handler) {
  auto it = handler.find("port");
  if (it == handler.end()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

Probe read_probe(Reader& reader, const Json& container, const char* key, const std::string& path) {
  Probe probe;
  const Json* spec = reader.object(container, key, path);
  if (spec == nullptr) return probe;
  if (const Json* http = reader.object(*spec, "httpGet", path + ".httpGet")) {
    probe.kind = Probe::Kind::HttpGet;
    probe.target = "http:" + port_text(*http) +
                   reader.string(*http, "path", path + ".httpGet.path").value_or("/");
  } else if (const Json* tcp = reader.object(*spec, "tcpSocket", path + ".tcpSocket")) {
    probe.kind = Probe::Kind::TcpSocket;
    probe.target = "tcp:" + port_text(*tcp);
  } else if (const Json* grpc = reader.object(*spec, "grpc", path + ".grpc")) {
    probe.kind = Probe::Kind::Grpc;
    probe.target = "grpc:" + port_text(*grpc) + "/" +
                   reader.string(*grpc, "service", path + ".grpc.service").value_or("");
  } else if (const Json* exec = reader.object(*spec, "exec", path + ".exec")) {
    probe.kind = Probe::Kind::Exec;
    probe.target = "exec:";
    for (const auto& arg : reader.strings(*exec, "command", path + ".exec.command")) {
      probe.target += arg + " ";
    }
  }
  return probe;
}

PreStopHook read_pre_stop(Reader& reader, const Json& container, const std::string& path) {
  PreStopHook hook;
  const Json* lifecycle = reader.object(container, "lifecycle", path + ".lifecycle");
  if (lifecycle == nullptr) return hook;
  const std::string hook_path = path + ".lifecycle.preStop";
  const Json* pre_stop = reader.object(*lifecycle, "preStop", hook_path);
  // An empty `lifecycle: {}` is recorded as such, so that revert gives it back.
  if (pre_stop == nullptr && lifecycle->empty()) hook.json = "{}";
  if (pre_stop == nullptr) return hook;
  if (!pre_stop->empty()) hook.json = pre_stop->dump();
  if (const Json* sleep = reader.object(*pre_stop, "sleep", hook_path + ".sleep")) {
    hook.kind = PreStopHook::Kind::Sleep;
    hook.seconds = reader.integer(*sleep, "seconds", hook_path + ".sleep.seconds", 0,
                                  std::numeric_limits<std::int64_t>::max());
    if (!hook.seconds) reader.fail(hook_path + ".sleep.seconds", "required: the sleep duration");
    if (hook.seconds) hook.wait_ms = hook.length_ms = milliseconds_of(*hook.seconds);
  } else if (const Json* exec = reader.object(*pre_stop, "exec", hook_path + ".exec")) {
    auto command = reader.strings(*exec, "command", hook_path + ".exec.command");
    hook.kind = PreStopHook::Kind::Exec;
    if (auto length = exec_hook_length(command)) {
      hook.wait_ms = length->wait_ms;
      hook.length_ms = length->length_ms;
      if (hook.wait_ms) hook.seconds = *hook.wait_ms / 1000;
      if (length->only_sleeps) hook.kind = PreStopHook::Kind::ExecSleep;
    }
  } else if (pre_stop->contains("httpGet")) {
    hook.kind = PreStopHook::Kind::HttpGet;
  } else if (pre_stop->contains("tcpSocket")) {
    hook.kind = PreStopHook::Kind::TcpSocket;
  } else if (!pre_stop->empty()) {
    reader.fail(hook_path, "expected one of sleep, exec, httpGet or tcpSocket");
  }
  return hook;
}

// An istio-proxy's variables of its shutdown, as the injector set them (a
// value from a Secret or field is not read: the mesh's defaults apply).
void read_proxy_env(Reader& reader, const Json& item, const std::string& path,
                    Container& container) {
  const Json* env = reader.array(item, "env", path + ".env");
  if (env == nullptr) return;
  for (const Json& variable : *env) {
    if (!variable.is_object()) continue;
    auto name = variable.find("name");
    auto value = variable.find("value");
    if (name == variable.end() || !name->is_string() || value == variable.end() ||
        !value->is_string() || !is_proxy_env(name->get_ref<const std::string&>())) {
      continue;
    }
    container.proxy_env[name->get<std::string>()] = value->get<std::string>();
  }
}

// The mesh annotations among a pod's (a template's) annotations.
void read_mesh_annotations(Reader& reader, const Json& metadata, const std::string& path,
                           Deployment& out) {
  const Json* annotations = reader.object(metadata, "annotations", path);
  if (annotations == nullptr) return;
  for (const char* name : {kIstioProxyConfig, kLinkerdWaitBeforeExit}) {
    if (auto value = reader.string(*annotations, name, fmt::format("{}[{}]", path, name))) {
      out.pod_annotations[name] = *value;
    }
  }
}

Container read_container(Reader& reader, const Json& item, const std::string& path) {
  Container container;
  if (!item.is_object()) {
    reader.fail(path, "expected a container (a mapping), got " + describe(item));
    return container;
  }
  container.name = reader.string(item, "name", path + ".name").value_or("");
  if (container.name.empty() && (missing(item, "name") || item["name"].is_string())) {
    reader.fail(path + ".name", "required: every container needs a name");
  }
  if (const Json* ports = reader.array(item, "ports", path + ".ports")) {
    container.has_ports = !ports->empty();
  }
  container.command = reader.strings(item, "command", path + ".command");
  container.args = reader.strings(item, "args", path + ".args");
  container.pre_stop = read_pre_stop(reader, item, path);
  container.readiness = read_probe(reader, item, "readinessProbe", path + ".readinessProbe");
  container.liveness = read_probe(reader, item, "livenessProbe", path + ".livenessProbe");
  if (proxy_mesh(container.name) == Mesh::Istio) read_proxy_env(reader, item, path, container);
  return container;
}

// `user` in the applied annotation. A part that does not read is left
// unrecorded: revert then leaves that field as it is, never guesses.
UserValues parse_user_values(const Json& value) {
  UserValues user;
  if (auto it = value.find("grace");
      it != value.end() && it->is_number_integer() && it->get<std::int64_t>() >= 0) {
    user.grace_seconds = it->get<std::int64_t>();
  }
  if (value.contains("maxSurge") && value.contains("maxUnavailable")) {
    FieldErrors errors;
    Reader reader(errors);
    auto surge = reader.int_or_percent(value, "maxSurge", "maxSurge");
    auto unavailable = reader.int_or_percent(value, "maxUnavailable", "maxUnavailable");
    if (surge && unavailable && errors.empty()) {
      user.strategy = Strategy{Strategy::Type::RollingUpdate, *surge, *unavailable};
    }
  }
  if (auto it = value.find("preStop"); it != value.end() && it->is_object()) {
    for (const auto& [name, hook] : it->items()) {
      if (hook.is_null()) {
        user.pre_stop.emplace(name, std::nullopt);
      } else if (hook.is_object()) {  // {}: no hook, in an empty `lifecycle: {}`
        user.pre_stop.emplace(name, hook.dump());
      }
    }
  }
  if (auto it = value.find("annotations"); it != value.end() && it->is_object()) {
    for (const auto& [name, text] : it->items()) {
      if (!is_mesh_annotation(name)) continue;
      if (text.is_null()) {
        user.annotations.emplace(name, std::nullopt);
      } else if (text.is_string()) {
        user.annotations.emplace(name, text.get<std::string>());
      }
    }
  }
  return user;
}

// The applied annotation is ours; an unreadable one is treated as absent
// (then nothing counts as owned, which only makes gracekeeper more careful).
std::optional<AppliedRecord> parse_applied(const std::string& text) {
  Json value = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!value.is_object()) return std::nullopt;
  AppliedRecord record;
  auto number = [&](const char* key) -> std::optional<double> {
    auto it = value.find(key);
    if (it == value.end() || !it->is_number()) return std::nullopt;
    return it->get<double>();
  };
  auto pre_stop = number("preStop");
  auto grace = number("grace");
  if (!pre_stop || !grace || *pre_stop < 0 || *grace < 0 || *pre_stop > 1e9 || *grace > 1e12) {
    return std::nullopt;
  }
  record.pre_stop_seconds = static_cast<std::int64_t>(*pre_stop);
  record.grace_seconds = static_cast<std::int64_t>(*grace);
  record.propagation_seconds = number("propagation").value_or(0);
  if (auto drain = number("drain"); drain && *drain >= 0 && *drain <= 86400) {
    record.drain_seconds = static_cast<std::int64_t>(*drain);
  }
  if (auto it = value.find("graceOwned"); it != value.end() && it->is_boolean()) {
    record.grace_owned = it->get<bool>();
  }
  if (auto it = value.find("policy"); it != value.end() && it->is_string()) {
    record.policy = it->get<std::string>();
  }
  if (auto it = value.find("containers"); it != value.end() && it->is_array()) {
    for (const auto& name : *it) {
      if (name.is_string()) record.containers.push_back(name.get<std::string>());
    }
  }
  if (auto it = value.find("waits"); it != value.end() && it->is_object()) {
    record.waits.emplace();
    for (const auto& [name, seconds] : it->items()) {
      if (seconds.is_number_integer() && seconds.get<std::int64_t>() >= 0) {
        record.waits->emplace(name, seconds.get<std::int64_t>());
      }
    }
  }
  if (auto it = value.find("time"); it != value.end() && it->is_string()) {
    record.time = core::parse_rfc3339(it->get<std::string>());
  }
  if (auto it = value.find("setBack"); it != value.end() && it->is_string()) {
    record.set_back = core::parse_rfc3339(it->get<std::string>());
  }
  if (auto it = value.find("mesh"); it != value.end() && it->is_object()) {
    for (const auto& [name, text] : it->items()) {
      if (is_mesh_annotation(name) && text.is_string()) record.mesh[name] = text.get<std::string>();
    }
  }
  if (auto it = value.find("user"); it != value.end() && it->is_object()) {
    record.user = parse_user_values(*it);
  }
  return record;
}

}  // namespace

std::optional<std::int64_t> recorded_wait(const AppliedRecord& record, const std::string& name) {
  if (record.waits) {
    auto it = record.waits->find(name);
    if (it == record.waits->end()) return std::nullopt;
    return it->second;
  }
  const bool listed = std::find(record.containers.begin(), record.containers.end(), name) !=
                      record.containers.end();
  if (!listed) return std::nullopt;
  return record.pre_stop_seconds;
}

bool lengthened_by_user(const AppliedRecord& record, const Container& container) {
  const PreStopHook& hook = container.pre_stop;
  const auto recorded = recorded_wait(record, container.name);
  if (container.sidecar || !recorded || *recorded == 0 || hook.owned || !hook.wait_ms) {
    return false;
  }
  return *hook.wait_ms >= milliseconds_of(*recorded);
}

namespace {

// A hook is gracekeeper's when it is a sleep of exactly the length recorded
// for its container: a hook the user changed since is the user's.
void mark_owned_hooks(Deployment& deployment) {
  if (!deployment.applied) return;
  const auto& record = *deployment.applied;
  for (auto& container : deployment.containers) {
    const auto& hook = container.pre_stop;
    const bool sleeps =
        hook.kind == PreStopHook::Kind::Sleep || hook.kind == PreStopHook::Kind::ExecSleep;
    const auto recorded = recorded_wait(record, container.name);
    container.pre_stop.owned = !container.sidecar && recorded && sleeps &&
                               hook.length_ms == milliseconds_of(*recorded) &&
                               hook.wait_ms == hook.length_ms;
  }
}

}  // namespace

void set_applied_annotation(Deployment& deployment, std::string text) {
  deployment.applied = parse_applied(text);
  deployment.annotations[kAnnotationApplied] = std::move(text);
  for (auto& container : deployment.containers) container.pre_stop.owned = false;
  mark_owned_hooks(deployment);
}

std::string describe_value(const Json& value) {
  return describe(value);
}

bool is_deployment(const Json& object) {
  if (!object.is_object()) return false;
  auto kind = object.find("kind");
  auto api_version = object.find("apiVersion");
  return kind != object.end() && *kind == "Deployment" && api_version != object.end() &&
         api_version->is_string() && api_version->get<std::string>().starts_with("apps/");
}

bool is_statefulset(const Json& object) {
  if (!object.is_object()) return false;
  auto kind = object.find("kind");
  auto api_version = object.find("apiVersion");
  return kind != object.end() && *kind == "StatefulSet" && api_version != object.end() &&
         api_version->is_string() && api_version->get<std::string>().starts_with("apps/");
}

bool is_pod(const Json& object) {
  if (!object.is_object()) return false;
  auto kind = object.find("kind");
  auto api_version = object.find("apiVersion");
  return kind != object.end() && *kind == "Pod" && api_version != object.end() &&
         *api_version == "v1";
}

bool opted_in(const Deployment& deployment) {
  auto it = deployment.annotations.find(kAnnotationEnabled);
  return it != deployment.annotations.end() && it->second == "true";
}

std::string key(const Deployment& deployment) {
  return deployment.namespace_.empty() ? deployment.name
                                       : deployment.namespace_ + "/" + deployment.name;
}

namespace {

// The parts of a Deployment that project_deployment reads, one function each.
void read_strategy(Reader& reader, const Json& spec, Strategy& strategy) {
  if (const Json* object = reader.object(spec, "strategy", "spec.strategy")) {
    const auto type =
        reader.string(*object, "type", "spec.strategy.type").value_or("RollingUpdate");
    if (type == "Recreate") {
      strategy.type = Strategy::Type::Recreate;
    } else if (type != "RollingUpdate") {
      reader.fail("spec.strategy.type",
                  fmt::format("expected RollingUpdate or Recreate, got \"{}\"", type));
    }
    if (const Json* rolling =
            reader.object(*object, "rollingUpdate", "spec.strategy.rollingUpdate")) {
      if (auto surge =
              reader.int_or_percent(*rolling, "maxSurge", "spec.strategy.rollingUpdate.maxSurge")) {
        strategy.max_surge = *surge;
      }
      if (auto unavailable = reader.int_or_percent(*rolling, "maxUnavailable",
                                                   "spec.strategy.rollingUpdate.maxUnavailable")) {
        strategy.max_unavailable = *unavailable;
      }
    }
  }
}

void read_stateful_update(Reader& reader, const Json& spec, StatefulUpdate& update) {
  if (const Json* object = reader.object(spec, "updateStrategy", "spec.updateStrategy")) {
    const auto type =
        reader.string(*object, "type", "spec.updateStrategy.type").value_or("RollingUpdate");
    if (type == "OnDelete") {
      update.on_delete = true;
    } else if (type != "RollingUpdate") {
      reader.fail("spec.updateStrategy.type",
                  fmt::format("expected RollingUpdate or OnDelete, got \"{}\"", type));
    }
    if (const Json* rolling =
            reader.object(*object, "rollingUpdate", "spec.updateStrategy.rollingUpdate")) {
      update.partition =
          reader
              .integer(*rolling, "partition", "spec.updateStrategy.rollingUpdate.partition", 0,
                       std::numeric_limits<std::int32_t>::max())
              .value_or(0);
      if (auto unavailable = reader.int_or_percent(
              *rolling, "maxUnavailable", "spec.updateStrategy.rollingUpdate.maxUnavailable")) {
        update.max_unavailable = *unavailable;
      }
    }
  }
  const auto policy = reader.string(spec, "podManagementPolicy", "spec.podManagementPolicy")
                          .value_or("OrderedReady");
  if (policy == "Parallel") {
    update.parallel = true;
  } else if (policy != "OrderedReady") {
    reader.fail("spec.podManagementPolicy",
                fmt::format("expected OrderedReady or Parallel, got \"{}\"", policy));
  }
}

void check_unique_name(Reader& reader, const Container& container, const Deployment& out,
                       const std::string& path) {
  // Kubernetes rejects two containers with one name (init containers
  // included); gracekeeper addresses them by name.
  for (const auto& earlier : out.containers) {
    if (!container.name.empty() && earlier.name == container.name) {
      reader.fail(path + ".name", fmt::format("duplicate container name \"{}\"", container.name));
    }
  }
}

// Native sidecars: initContainers with `restartPolicy: Always`. A plain init
// container has exited before the app starts and is not read.
void read_sidecars(Reader& reader, const Json& pod_spec, Deployment& out, std::string_view at) {
  const Json* init = reader.array(pod_spec, "initContainers", fmt::format("{}.initContainers", at));
  if (init == nullptr) return;
  for (std::size_t i = 0; i < init->size(); ++i) {
    const std::string path = fmt::format("{}.initContainers[{}]", at, i);
    const Json& item = (*init)[i];
    if (!item.is_object()) {
      reader.fail(path, "expected a container (a mapping), got " + describe(item));
      continue;
    }
    const auto restart = reader.string(item, "restartPolicy", path + ".restartPolicy");
    if (restart != "Always") continue;
    Container container = read_container(reader, item, path);
    container.sidecar = true;
    check_unique_name(reader, container, out, path);
    out.containers.push_back(std::move(container));
  }
}

// A pod spec at `at`: "spec.template.spec" in a workload, "spec" in a Pod.
void read_pod_spec(Reader& reader, const Json& pod_spec, Deployment& out,
                   std::string_view at = "spec.template.spec") {
  if (auto grace = reader.integer(pod_spec, "terminationGracePeriodSeconds",
                                  fmt::format("{}.terminationGracePeriodSeconds", at), 0,
                                  std::numeric_limits<std::int64_t>::max())) {
    out.grace_seconds = *grace;
    out.grace_set = true;
  }
  const std::string list = fmt::format("{}.containers", at);
  const Json* containers = reader.array(pod_spec, "containers", list);
  if (containers == nullptr || containers->empty()) {
    if (containers != nullptr || missing(pod_spec, "containers")) {
      reader.fail(list, "required: at least one container");
    }
  } else {
    for (std::size_t i = 0; i < containers->size(); ++i) {
      const std::string path = fmt::format("{}[{}]", list, i);
      Container container = read_container(reader, (*containers)[i], path);
      check_unique_name(reader, container, out, path);
      out.containers.push_back(std::move(container));
    }
  }
  read_sidecars(reader, pod_spec, out, at);
}

// The object's metadata: its name (required), namespace, labels and
// annotations.
void read_metadata(Reader& reader, const Json& object, Deployment& out) {
  if (const Json* metadata = reader.object(object, "metadata", "metadata")) {
    out.name = reader.string(*metadata, "name", "metadata.name").value_or("");
    out.namespace_ = reader.string(*metadata, "namespace", "metadata.namespace").value_or("");
    out.labels = reader.string_map(*metadata, "labels", "metadata.labels");
    out.annotations = reader.string_map(*metadata, "annotations", "metadata.annotations");
  }
  if (out.name.empty()) {
    reader.fail("metadata.name", fmt::format("required: a {} needs a name", out.kind));
  }
}

// spec.template: the pod's labels and spec (both required).
void read_pod_template(Reader& reader, const Json& spec, Deployment& out) {
  const Json* pod_template = reader.object(spec, "template", "spec.template");
  const Json* pod_spec =
      pod_template ? reader.object(*pod_template, "spec", "spec.template.spec") : nullptr;
  if (pod_template == nullptr && missing(spec, "template")) {
    reader.fail("spec.template", fmt::format("required: a {} needs a pod template", out.kind));
  } else if (pod_template != nullptr && pod_spec == nullptr && missing(*pod_template, "spec")) {
    reader.fail("spec.template.spec", "required: the pod template needs a spec with containers");
  }
  if (pod_template != nullptr) {
    if (const Json* pod_metadata =
            reader.object(*pod_template, "metadata", "spec.template.metadata")) {
      out.pod_labels = reader.string_map(*pod_metadata, "labels", "spec.template.metadata.labels");
      read_mesh_annotations(reader, *pod_metadata, "spec.template.metadata.annotations", out);
    }
  }
  if (pod_spec != nullptr) read_pod_spec(reader, *pod_spec, out);
}

}  // namespace

std::expected<Deployment, FieldErrors> project_deployment(const Json& object) {
  FieldErrors errors;
  Reader reader(errors);
  Deployment out;

  if (!object.is_object()) {
    return std::unexpected(FieldErrors{{"", "expected a Deployment object (a mapping)"}});
  }
  if (auto kind = object.find("kind");
      kind != object.end() && (*kind == "StatefulSet" || *kind == "Pod")) {
    out.kind = kind->get<std::string>();
  }
  read_metadata(reader, object, out);

  const Json* spec = reader.object(object, "spec", "spec");
  if (spec == nullptr) {
    if (missing(object, "spec"))
      reader.fail("spec", fmt::format("required: a {} needs a spec", out.kind));
    return std::unexpected(std::move(errors));
  }
  if (out.kind == "Pod") {
    // What runs: the pod's own spec (after every mutating webhook), its
    // labels; no replicas, no rollout.
    out.pod_labels = out.labels;
    for (const auto& [name, value] : out.annotations) {
      if (is_mesh_annotation(name)) out.pod_annotations[name] = value;
    }
    read_pod_spec(reader, *spec, out, "spec");
    if (!errors.empty()) return std::unexpected(std::move(errors));
    return out;
  }
  out.replicas =
      reader
          .integer(*spec, "replicas", "spec.replicas", 0, std::numeric_limits<std::int32_t>::max())
          .value_or(kDefaultReplicas);

  if (out.kind == "Deployment") {
    read_strategy(reader, *spec, out.strategy);
  } else {
    read_stateful_update(reader, *spec, out.stateful);
  }

  read_pod_template(reader, *spec, out);

  if (!errors.empty()) return std::unexpected(std::move(errors));
  if (auto it = out.annotations.find(kAnnotationApplied); it != out.annotations.end()) {
    out.applied = parse_applied(it->second);
  }
  mark_owned_hooks(out);
  return out;
}

}  // namespace gracekeeper::budget
