// Which Events were reported for each Deployment's current state, so that a
// state is reported once, not on every reconcile (the Kubernetes Event API
// aggregates repeats, but each repeat is still a write). An Event that no
// longer applies is forgotten, so it is reported again if it comes back.
//
// An Event counts as reported once the server has it: until the recorder
// says how its write ended (outcome()), it is in flight, and reported
// neither again nor for good. A write that failed leaves it unreported: the
// next reconcile of the Deployment records it again, and outcome() says
// when that reconcile should come (backoff). What waits is bounded by what
// the ledger holds anyway: the Events of each Deployment's current state,
// plus its last Tuned Event (a one-time Event: no state brings it back).
//
// Kept small, one entry per Deployment with Events: hashes of
// "reason\x1fnote". Seeded at start from the Events this operator reported
// before (operator.cpp), so a restart does not report them again: each of
// its Events carries, in the annotation gracekeeper.dev/reports, the hashes
// of what it reports (a Tuned Event: itself and the findings folded into
// its note), so nothing is read back from an Event's prose.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gracekeeper/kube/events.h"

namespace gracekeeper::controller {

class EventLedger {
 public:
  // The Events of `key`'s current state that are neither reported nor in
  // flight (with a Tuned Event whose write failed, first); they are in
  // flight now. The ledger now holds exactly `events` for it.
  std::vector<kube::EventRecord> unreported(const std::string& key,
                                            std::vector<kube::EventRecord> events);
  // Records `events` as reported for `key`'s state (e.g. folded into Tuned).
  void mark(const std::string& key, const std::vector<kube::EventRecord>& events);
  // A one-time Event (Tuned) in flight for `key`, replacing an older one:
  // recorded again by unreported() after a failed write, until written.
  void once(const std::string& key, const kube::EventRecord& event);
  // How the write of one of `key`'s Events ended. After a failure, the
  // delay after which `key` should be reconciled to record it again
  // (doubling from kRetryFirst to kRetryMax with each failure in a row);
  // nullopt otherwise, or when the Event no longer applies.
  std::optional<std::chrono::seconds> outcome(const std::string& key,
                                              const kube::EventRecord& event, bool written);
  void forget(const std::string& key) { reported_.erase(key); }
  // Deployment key -> hash() of an Event reported before.
  void seed(const std::multimap<std::string, std::uint64_t>& reported);
  std::size_t size() const { return reported_.size(); }
  // Events of all keys whose write failed and that wait to be recorded again.
  std::size_t failed() const;

  // FNV-1a of "reason\x1fnote": the same in every build, since the hashes
  // outlive the process in the Events' annotation.
  static std::uint64_t hash(std::string_view reason, std::string_view note);
  static constexpr std::string_view kReportsAnnotation = "gracekeeper.dev/reports";
  // Writes into `event`'s annotation what it reports: itself, and the
  // Events folded into it (16 hex digits each, comma-separated).
  static void stamp(kube::EventRecord& event, const std::vector<kube::EventRecord>& folded = {});
  // What an Event written before reports, from its annotations: the hashes
  // of the annotation (well-formed ones, at most kMaxReports), or, without
  // the annotation (an older operator's Event), its own hash.
  static std::vector<std::uint64_t> reports(const std::map<std::string, std::string>& annotations,
                                            std::string_view reason, std::string_view note);
  static constexpr std::size_t kMaxReports = 64;

  static constexpr std::chrono::seconds kRetryFirst{2};
  static constexpr std::chrono::seconds kRetryMax{300};

 private:
  enum class Status : std::uint8_t { InFlight, Reported, Failed };
  struct Seen {
    std::uint64_t hash = 0;
    Status status = Status::Reported;
  };
  struct Entry {
    std::vector<Seen> state;
    // A Tuned Event not written yet: its hash while in flight (a cold start
    // has one per Deployment), the whole record only once its write failed.
    std::optional<Seen> once;
    std::unique_ptr<kube::EventRecord> once_failed;
    std::uint8_t failures = 0;  // failed writes in a row: the backoff
  };
  std::unordered_map<std::string, Entry> reported_;
};

}  // namespace gracekeeper::controller
