#include "event_ledger.h"

#include <algorithm>
#include <functional>

namespace gracekeeper::controller {

std::size_t EventLedger::hash(std::string_view reason, std::string_view note) {
  std::string key;
  key.reserve(reason.size() + 1 + note.size());
  key.append(reason).append(1, '\x1f').append(note);
  return std::hash<std::string>{}(key);
}

std::vector<kube::EventRecord> EventLedger::unreported(const std::string& key,
                                                       std::vector<kube::EventRecord> events) {
  std::vector<std::size_t> now;
  std::vector<kube::EventRecord> out;
  auto found = reported_.find(key);
  for (auto& e : events) {
    const std::size_t h = hash(e.reason, e.note);
    if (std::ranges::find(now, h) != now.end()) continue;  // twice in one state
    now.push_back(h);
    const bool before =
        found != reported_.end() && std::ranges::find(found->second, h) != found->second.end();
    if (!before) out.push_back(std::move(e));
  }
  if (now.empty()) {
    if (found != reported_.end()) reported_.erase(found);
  } else {
    reported_.insert_or_assign(key, std::move(now));
  }
  return out;
}

void EventLedger::mark(const std::string& key, const std::vector<kube::EventRecord>& events) {
  std::vector<std::size_t> hashes;
  for (const auto& e : events) hashes.push_back(hash(e.reason, e.note));
  if (hashes.empty()) {
    reported_.erase(key);
  } else {
    reported_.insert_or_assign(key, std::move(hashes));
  }
}

void EventLedger::seed(const std::multimap<std::string, std::string>& reported) {
  for (const auto& [key, event] : reported) {
    const auto sep = event.find('\x1f');
    const std::string_view e(event);
    reported_[key].push_back(sep == std::string::npos ? hash(e, "")
                                                      : hash(e.substr(0, sep), e.substr(sep + 1)));
  }
}

}  // namespace gracekeeper::controller
