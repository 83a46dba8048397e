// Which Events were reported for each Deployment's current state, so that a
// state is reported once, not on every reconcile (the Kubernetes Event API
// aggregates repeats, but each repeat is still a write). An Event that no
// longer applies is forgotten, so it is reported again if it comes back.
//
// Kept small, one entry per Deployment with Events: hashes of
// "reason\x1fnote". Seeded at start from the Events this operator reported
// before (operator.cpp), so a restart does not report them again.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gracekeeper/kube/events.h"

namespace gracekeeper::controller {

class EventLedger {
 public:
  // The Events of `key`'s current state that were not reported for it yet;
  // the ledger now holds exactly `events` for it.
  std::vector<kube::EventRecord> unreported(const std::string& key,
                                            std::vector<kube::EventRecord> events);
  // Records `events` as reported for `key`'s state (e.g. folded into Tuned).
  void mark(const std::string& key, const std::vector<kube::EventRecord>& events);
  void forget(const std::string& key) { reported_.erase(key); }
  // Deployment key -> "reason\x1fnote".
  void seed(const std::multimap<std::string, std::string>& reported);
  std::size_t size() const { return reported_.size(); }

  static std::size_t hash(std::string_view reason, std::string_view note);

 private:
  std::unordered_map<std::string, std::vector<std::size_t>> reported_;
};

}  // namespace gracekeeper::controller
