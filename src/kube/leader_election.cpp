#include "gracekeeper/kube/leader_election.h"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <variant>

#include "gracekeeper/core/json.h"
#include "gracekeeper/core/time.h"

namespace gracekeeper::kube {

namespace asio = boost::asio;
using nlohmann::json;
using std::chrono::steady_clock;

LeaseRecord lease_record_from_json(const json& lease) {
  LeaseRecord r;
  auto spec = lease.find("spec");
  if (spec == lease.end() || !spec->is_object()) return r;
  auto string_of = [&](const char* key) { return core::string_member(*spec, key); };
  auto int_of = [&](const char* key) { return core::int_member(*spec, key); };
  r.holder_identity = string_of("holderIdentity");
  r.lease_duration_seconds = int_of("leaseDurationSeconds");
  r.lease_transitions = int_of("leaseTransitions");
  r.acquire_time = core::parse_rfc3339(string_of("acquireTime"));
  r.renew_time = core::parse_rfc3339(string_of("renewTime"));
  return r;
}

json lease_spec_to_json(const LeaseRecord& r) {
  json spec = json::object();
  // An empty holder is sent as an empty string: a merge with the old spec
  // never happens (PUT replaces), and client-go writes it the same way.
  spec["holderIdentity"] = r.holder_identity;
  spec["leaseDurationSeconds"] = r.lease_duration_seconds;
  spec["leaseTransitions"] = r.lease_transitions;
  if (r.acquire_time) spec["acquireTime"] = core::format_rfc3339_micro(*r.acquire_time);
  if (r.renew_time) spec["renewTime"] = core::format_rfc3339_micro(*r.renew_time);
  return spec;
}

bool lease_valid(const LeaseRecord& r, steady_clock::time_point observed_at,
                 steady_clock::time_point now) {
  if (r.holder_identity.empty()) return false;
  return observed_at + std::chrono::seconds(r.lease_duration_seconds) > now;
}

bool same_record(const LeaseRecord& a, const LeaseRecord& b) {
  return a.holder_identity == b.holder_identity &&
         a.lease_duration_seconds == b.lease_duration_seconds && a.acquire_time == b.acquire_time &&
         a.renew_time == b.renew_time && a.lease_transitions == b.lease_transitions;
}

namespace {

std::int64_t whole_seconds_up(std::chrono::milliseconds d) {
  return (d.count() + 999) / 1000;
}

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(asio::use_awaitable);
}

}  // namespace

LeaderElector::LeaderElector(Client& client, LeaderElectionConfig config)
    : client_(client), config_(std::move(config)) {}

// Like client-go, the time of observation is this process's own: a record
// seen again unchanged keeps the time it was first seen.
void LeaderElector::observe(const LeaseRecord& r) {
  bool changed = r.holder_identity != observed_.holder_identity;
  if (!observed_once_ || !same_record(r, observed_)) observed_time_ = config_.clocks.monotonic();
  observed_once_ = true;
  observed_ = r;
  if (changed && !r.holder_identity.empty() && config_.on_new_leader) {
    config_.on_new_leader(r.holder_identity);
  }
}

bool LeaderElector::held_by_another() const {
  return observed_.holder_identity != config_.identity &&
         lease_valid(observed_, observed_time_, config_.clocks.monotonic());
}

void LeaderElector::stop_leading() {
  if (!leading_) return;
  leading_ = false;
  if (config_.on_stopped_leading) config_.on_stopped_leading();
}

asio::awaitable<bool> LeaderElector::try_acquire_or_renew() {
  auto now = config_.clocks.wall();
  LeaseRecord mine;
  mine.holder_identity = config_.identity;
  mine.lease_duration_seconds = whole_seconds_up(config_.lease_duration);
  mine.acquire_time = now;
  mine.renew_time = now;

  auto got = co_await client_.get(resources::leases, config_.namespace_, config_.name);
  if (!got) {
    if (got.error().reason != ApiError::Reason::NotFound) co_return false;
    json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", config_.name}, {"namespace", config_.namespace_}}},
                  {"spec", lease_spec_to_json(mine)}};
    auto created = co_await client_.create(resources::leases, config_.namespace_, std::move(lease));
    if (!created) co_return false;  // AlreadyExists: another candidate was faster
    observed_resource_version_ = (*created)["metadata"].value("resourceVersion", "");
    observe(mine);
    co_return true;
  }

  LeaseRecord current = lease_record_from_json(*got);
  observed_resource_version_ = (*got)["metadata"].value("resourceVersion", "");
  observe(current);
  bool ours = current.holder_identity == config_.identity;
  if (!ours && held_by_another()) co_return false;

  if (ours) {
    mine.acquire_time = current.acquire_time ? current.acquire_time : now;
    mine.lease_transitions = current.lease_transitions;
  } else {
    mine.lease_transitions = current.lease_transitions + 1;
  }
  json lease = *got;
  lease["spec"] = lease_spec_to_json(mine);  // keeps metadata.resourceVersion: conditional PUT
  auto replaced = co_await client_.replace(resources::leases, config_.namespace_, config_.name,
                                           std::move(lease));
  if (!replaced) co_return false;  // Conflict: someone else wrote it first
  observed_resource_version_ = (*replaced)["metadata"].value("resourceVersion", "");
  observe(mine);
  co_return true;
}

asio::awaitable<void> LeaderElector::run() {
  using namespace asio::experimental::awaitable_operators;
  auto executor = co_await asio::this_coro::executor;
  try {
    // Acquire. An attempt that took longer than a renewal may (renew
    // deadline less the retry period: its request sat in a stopped API
    // server, until the client's own timeouts) does not lead yet: the renew
    // deadline counts from the attempt's start, so that leader would step
    // down at its first renewal. Holding the Lease now, it renews at once
    // and leads from that quick answer.
    const auto slow = config_.renew_deadline - config_.retry_period;
    auto acquired_at = config_.clocks.monotonic();
    for (;;) {
      acquired_at = config_.clocks.monotonic();
      const bool took = co_await try_acquire_or_renew();
      if (took && config_.clocks.monotonic() - acquired_at <= slow) break;
      if (!took) co_await sleep_for(config_.retry_period);
    }
    leading_ = true;
    if (config_.on_started_leading) config_.on_started_leading();

    // Renew; each attempt is bounded by the time left before the deadline,
    // so a hanging request cannot keep a stale leader acting. The deadline
    // counts from the start of the last successful attempt (see the header).
    auto last_renew = acquired_at;
    for (;;) {
      co_await sleep_for(config_.retry_period);
      const auto attempt_start = config_.clocks.monotonic();
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          last_renew + config_.renew_deadline - attempt_start);
      if (left.count() <= 0) break;
      asio::steady_timer deadline(executor, left);
      auto attempt = co_await (try_acquire_or_renew() || deadline.async_wait(asio::use_awaitable));
      if (attempt.index() == 0 && std::get<0>(attempt)) {
        last_renew = attempt_start;
        continue;
      }
      // Another candidate wrote itself in: it judged the lease expired, and
      // this one has lost it. No point retrying.
      if (!observed_.holder_identity.empty() && observed_.holder_identity != config_.identity) {
        break;
      }
    }
    stop_leading();
  } catch (...) {
    stop_leading();
    throw;
  }
}

asio::awaitable<std::expected<void, ApiError>> LeaderElector::release() {
  auto got = co_await client_.get(resources::leases, config_.namespace_, config_.name);
  if (!got) co_return std::unexpected(got.error());
  LeaseRecord current = lease_record_from_json(*got);
  if (current.holder_identity != config_.identity) co_return std::expected<void, ApiError>{};
  auto now = config_.clocks.wall();
  LeaseRecord released;
  released.lease_duration_seconds = 1;
  released.acquire_time = now;
  released.renew_time = now;
  released.lease_transitions = current.lease_transitions;
  json lease = *got;
  lease["spec"] = lease_spec_to_json(released);
  auto replaced = co_await client_.replace(resources::leases, config_.namespace_, config_.name,
                                           std::move(lease));
  if (!replaced) co_return std::unexpected(replaced.error());
  observe(released);
  stop_leading();
  co_return std::expected<void, ApiError>{};
}

}  // namespace gracekeeper::kube
