// The real implementations of the ports (kube_ports.h).
#include "kube_ports.h"

#include <utility>

#include "gracekeeper/core/json.h"
#include "gracekeeper/deployment/cache.h"
#include "gracekeeper/deployment/takeover.h"
#include "gracekeeper/kube/client.h"
#include "gracekeeper/kube/events.h"
#include "gracekeeper/propagation/observed.h"

namespace gracekeeper::controller {
namespace {

namespace asio = boost::asio;

class SystemClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::system_clock::now(); }
};

// The generation of a write's answer read with read_object = false.
DeploymentWriter::WrittenObject written_object(const nlohmann::json& answer) {
  const nlohmann::json* metadata = core::member(answer, "metadata");
  const std::int64_t generation = metadata ? core::int_member(*metadata, "generation") : 0;
  if (generation <= 0) return {};  // none: a written object's generation is at least 1
  return {generation};
}

std::string resource_version(const nlohmann::json& object) {
  const nlohmann::json* metadata = core::member(object, "metadata");
  return metadata ? core::string_member(*metadata, "resourceVersion") : std::string();
}

class KubeDeploymentWriter final : public DeploymentWriter {
 public:
  KubeDeploymentWriter(kube::Client& client, kube::Resource resource)
      : client_(client), resource_(std::move(resource)) {}

  asio::awaitable<Written> apply(const std::string& ns, const std::string& name,
                                 const nlohmann::json& configuration, bool force) override {
    kube::ApplyOptions options;
    options.field_manager = kFieldManager;
    options.force = force;
    options.read_object = false;  // the informer's watch brings the patched Deployment
    auto result = co_await client_.apply(resource_, ns, name, configuration, options);
    if (!result) co_return std::unexpected(std::move(result.error()));
    co_return written_object(*result);
  }

  asio::awaitable<Written> replace_hooks(const std::string& ns, const std::string& name,
                                         const nlohmann::json& configuration) override {
    auto current = co_await client_.get(resource_, ns, name, std::string());
    if (!current) co_return std::unexpected(std::move(current.error()));
    // The precondition an apply sends in its body (the snapshot's
    // resourceVersion), checked here; the patch's own test op guards the
    // time between this read and the write.
    const std::string wanted = resource_version(configuration);
    if (!wanted.empty() && resource_version(*current) != wanted) {
      kube::ApiError stale;
      stale.reason = kube::ApiError::Reason::Conflict;
      stale.http_status = 409;
      stale.message = "the object has been modified since resourceVersion " + wanted;
      co_return std::unexpected(std::move(stale));
    }
    kube::WriteOptions options;
    options.field_manager = kFieldManager;
    options.read_object = false;
    auto result = co_await client_.json_patch(resource_, ns, name,
                                              replacement_patch(*current, configuration), options);
    if (!result) co_return std::unexpected(std::move(result.error()));
    co_return written_object(*result);
  }

  asio::awaitable<std::expected<nlohmann::json, kube::ApiError>> managed_fields(
      const std::string& ns, const std::string& name) override {
    auto current = co_await client_.get(resource_, ns, name, std::string());
    if (!current) co_return std::unexpected(std::move(current.error()));
    const auto metadata = current->find("metadata");
    if (metadata == current->end() || !metadata->is_object()) co_return nlohmann::json::array();
    auto fields = metadata->find("managedFields");
    if (fields == metadata->end()) co_return nlohmann::json::array();
    co_return std::move(*fields);
  }

 private:
  kube::Client& client_;
  kube::Resource resource_;
};

class KubeStatusWriter final : public StatusWriter {
 public:
  explicit KubeStatusWriter(kube::Client& client) : client_(client) {}

  asio::awaitable<Written> write_status(const CachedPolicy& policy,
                                        nlohmann::json status) override {
    nlohmann::json object{{"apiVersion", "gracekeeper.dev/v1alpha1"},
                          {"kind", "ShutdownPolicy"},
                          {"metadata",
                           {{"name", policy.name},
                            {"namespace", policy.namespace_},
                            {"resourceVersion", policy.resource_version}}},
                          {"status", std::move(status)}};
    kube::WriteOptions options;
    options.field_manager = kFieldManager;
    options.read_object = false;  // the informer's watch brings the new status
    auto result = co_await client_.update_status(shutdown_policies, policy.namespace_, policy.name,
                                                 std::move(object), options);
    if (!result) co_return std::unexpected(std::move(result.error()));
    co_return Written{};
  }

 private:
  kube::Client& client_;
};

class RecorderSink final : public EventSink {
 public:
  explicit RecorderSink(kube::EventRecorder& recorder) : recorder_(recorder) {}
  void record(kube::EventRecord e) override { recorder_.record(std::move(e)); }
  void on_outcome(Outcome outcome) override { recorder_.on_outcome(std::move(outcome)); }

 private:
  kube::EventRecorder& recorder_;
};

class Meter final : public PropagationMeter {
 public:
  Meter(propagation::Prometheus* prometheus, const propagation::SampleBook* samples)
      : prometheus_(prometheus), samples_(samples) {}
  asio::awaitable<propagation::Measurement> measure(
      const std::string& ns, const budget::PolicySpec& spec,
      const std::optional<propagation::LastGood>& last_good, TimePoint now) override {
    if (spec.propagation.source == budget::PropagationSource::Observed && samples_) {
      const auto& o = spec.propagation.observed;
      const propagation::Window window = samples_->window(
          ns, std::chrono::seconds(o.window_seconds), spec.propagation.quantile, now);
      co_return propagation::observed_measurement(spec, window, last_good, now);
    }
    co_return co_await propagation::measure(spec, prometheus_, last_good, now);
  }

 private:
  propagation::Prometheus* prometheus_;
  const propagation::SampleBook* samples_;
};

}  // namespace

std::unique_ptr<Clock> system_clock() {
  return std::make_unique<SystemClock>();
}
std::unique_ptr<DeploymentWriter> kube_deployment_writer(kube::Client& c,
                                                         const kube::Resource& resource) {
  return std::make_unique<KubeDeploymentWriter>(c, resource);
}
std::unique_ptr<StatusWriter> kube_status_writer(kube::Client& c) {
  return std::make_unique<KubeStatusWriter>(c);
}
std::unique_ptr<EventSink> recorder_sink(kube::EventRecorder& r) {
  return std::make_unique<RecorderSink>(r);
}
std::unique_ptr<PropagationMeter> propagation_meter(propagation::Prometheus* p,
                                                    const propagation::SampleBook* samples) {
  return std::make_unique<Meter>(p, samples);
}

}  // namespace gracekeeper::controller
