// The narrow interfaces the reconcilers talk to the world through. Each has
// one real implementation (src/operator/kube_ports.cpp, on kube::Client and
// the event recorder); the unit tests drive the reconcilers with in-memory
// ones and a fake clock (test/support/reconciler_fakes.h).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <expected>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "gracekeeper/kube/error.h"
#include "gracekeeper/kube/events.h"
#include "gracekeeper/propagation/propagation.h"

namespace gracekeeper::controller {

struct CachedPolicy;
using TimePoint = std::chrono::system_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
};

// Writes the fields gracekeeper owns on a Deployment.
class DeploymentWriter {
 public:
  // What the server answered to a write: the written object's
  // metadata.generation (nullopt: the answer did not say). The same as
  // before the write: the write changed nothing (server-side apply of what
  // the object already holds, or a mutating webhook undid it).
  struct WrittenObject {
    std::optional<std::int64_t> generation{};
  };
  using Written = std::expected<WrittenObject, kube::ApiError>;
  virtual ~DeploymentWriter() = default;
  // Server-side apply of `configuration` with gracekeeper's field manager.
  virtual boost::asio::awaitable<Written> apply(const std::string& ns, const std::string& name,
                                                const nlohmann::json& configuration,
                                                bool force) = 0;
  // Swaps the preStop hooks of `configuration` in with one JSON patch
  // (takeover.h), for a hook gracekeeper replaces under another manager.
  virtual boost::asio::awaitable<Written> replace_hooks(const std::string& ns,
                                                        const std::string& name,
                                                        const nlohmann::json& configuration) = 0;
  // The Deployment's metadata.managedFields as the server has them now (one
  // GET; the informer keeps only the managers): whether the fields of a
  // refused write are still another applier's.
  virtual boost::asio::awaitable<std::expected<nlohmann::json, kube::ApiError>> managed_fields(
      const std::string& ns, const std::string& name) = 0;
};

// Writes a ShutdownPolicy's status (PUT .../status at the cached
// resourceVersion; a Conflict comes back as an error).
class StatusWriter {
 public:
  using Written = std::expected<void, kube::ApiError>;
  virtual ~StatusWriter() = default;
  virtual boost::asio::awaitable<Written> write_status(const CachedPolicy&,
                                                       nlohmann::json status) = 0;
};

// Records Events; they are written later. How each write ended is told to
// the one Outcome set (the Deployment reconciler's ledger): written, or
// failed and dropped (nothing retries it but the caller).
class EventSink {
 public:
  using Outcome = std::function<void(const kube::EventRecord&, bool written)>;
  virtual ~EventSink() = default;
  virtual void record(kube::EventRecord) = 0;
  virtual void on_outcome(Outcome) = 0;
};

// Measures a policy's propagation figure (propagation::measure; source
// Observed reads the samples of the policy's namespace).
class PropagationMeter {
 public:
  virtual ~PropagationMeter() = default;
  virtual boost::asio::awaitable<propagation::Measurement> measure(
      const std::string& policy_namespace, const budget::PolicySpec&,
      const std::optional<propagation::LastGood>&, TimePoint now) = 0;
};

}  // namespace gracekeeper::controller
