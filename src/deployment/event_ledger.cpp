#include "gracekeeper/deployment/event_ledger.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <system_error>

namespace gracekeeper::controller {

std::uint64_t EventLedger::hash(std::string_view reason, std::string_view note) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto add = [&h](char c) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  };
  for (char c : reason) add(c);
  add('\x1f');
  for (char c : note) add(c);
  return h;
}

void EventLedger::stamp(kube::EventRecord& event, const std::vector<kube::EventRecord>& folded) {
  std::string value = fmt::format("{:016x}", hash(event.reason, event.note));
  for (const auto& e : folded) value += fmt::format(",{:016x}", hash(e.reason, e.note));
  event.annotations.insert_or_assign(std::string(kReportsAnnotation), std::move(value));
}

std::vector<std::uint64_t> EventLedger::reports(
    const std::map<std::string, std::string>& annotations, std::string_view reason,
    std::string_view note) {
  const auto found = annotations.find(std::string(kReportsAnnotation));
  if (found == annotations.end()) return {hash(reason, note)};
  std::vector<std::uint64_t> out;
  std::string_view rest = found->second;
  while (!rest.empty() && out.size() < kMaxReports) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    std::uint64_t h = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), h, 16);
    if (item.size() == 16 && error == std::errc() && end == item.data() + item.size()) {
      out.push_back(h);
    }
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return out;
}

std::vector<kube::EventRecord> EventLedger::unreported(const std::string& key,
                                                       std::vector<kube::EventRecord> events) {
  std::vector<kube::EventRecord> out;
  auto found = reported_.find(key);
  Entry fresh;
  Entry& entry = found == reported_.end() ? fresh : found->second;
  if (entry.once && entry.once->status == Status::Failed && entry.once_failed) {
    out.push_back(std::move(*entry.once_failed));
    entry.once_failed.reset();
    entry.once->status = Status::InFlight;
  }
  std::vector<Seen> now;
  for (auto& e : events) {
    const std::uint64_t h = hash(e.reason, e.note);
    if (std::ranges::any_of(now, [h](const Seen& s) { return s.hash == h; })) {
      continue;  // twice in one state
    }
    auto before = std::ranges::find_if(entry.state, [h](const Seen& s) { return s.hash == h; });
    if (before != entry.state.end() && before->status != Status::Failed) {
      now.push_back(*before);
      continue;
    }
    now.push_back({h, Status::InFlight});
    out.push_back(std::move(e));
  }
  entry.state = std::move(now);
  if (entry.state.empty() && !entry.once) {
    if (found != reported_.end()) reported_.erase(found);
  } else if (found == reported_.end()) {
    reported_.emplace(key, std::move(fresh));
  }
  return out;
}

void EventLedger::mark(const std::string& key, const std::vector<kube::EventRecord>& events) {
  std::vector<Seen> state;
  for (const auto& e : events) state.push_back({hash(e.reason, e.note), Status::Reported});
  auto found = reported_.find(key);
  if (found == reported_.end()) {
    if (!state.empty()) reported_[key].state = std::move(state);
    return;
  }
  found->second.state = std::move(state);
  if (found->second.state.empty() && !found->second.once) reported_.erase(found);
}

void EventLedger::once(const std::string& key, const kube::EventRecord& event) {
  Entry& entry = reported_[key];
  entry.once = Seen{hash(event.reason, event.note), Status::InFlight};
  entry.once_failed.reset();
}

std::optional<std::chrono::seconds> EventLedger::outcome(const std::string& key,
                                                         const kube::EventRecord& event,
                                                         bool written) {
  auto found = reported_.find(key);
  if (found == reported_.end()) return std::nullopt;
  Entry& entry = found->second;
  const std::uint64_t h = hash(event.reason, event.note);
  Status* status = nullptr;
  bool is_once = false;
  if (entry.once && entry.once->hash == h) {
    status = &entry.once->status;
    is_once = true;
  } else if (auto seen =
                 std::ranges::find_if(entry.state, [h](const Seen& s) { return s.hash == h; });
             seen != entry.state.end()) {
    status = &seen->status;
  }
  // Not (or no longer) one of this key's Events, or already settled.
  if (!status || *status != Status::InFlight) return std::nullopt;
  if (written) {
    entry.failures = 0;
    if (!is_once) {
      *status = Status::Reported;
      return std::nullopt;
    }
    entry.once.reset();
    if (entry.state.empty()) reported_.erase(found);
    return std::nullopt;
  }
  *status = Status::Failed;
  if (is_once) entry.once_failed = std::make_unique<kube::EventRecord>(event);
  if (entry.failures < 31) ++entry.failures;
  const auto delay = kRetryFirst * (std::int64_t{1} << std::min<int>(entry.failures - 1, 16));
  return std::min<std::chrono::seconds>(delay, kRetryMax);
}

void EventLedger::seed(const std::multimap<std::string, std::uint64_t>& reported) {
  for (const auto& [key, h] : reported) reported_[key].state.push_back({h, Status::Reported});
}

std::size_t EventLedger::failed() const {
  std::size_t n = 0;
  for (const auto& [key, entry] : reported_) {
    n += static_cast<std::size_t>(std::ranges::count_if(
        entry.state, [](const Seen& s) { return s.status == Status::Failed; }));
    if (entry.once && entry.once->status == Status::Failed) ++n;
  }
  return n;
}

}  // namespace gracekeeper::controller
