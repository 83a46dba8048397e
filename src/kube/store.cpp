#include "gracekeeper/kube/store.h"

namespace gracekeeper::kube {

CacheDiff diff_cache(const VersionMap& old, const VersionMap& fresh) {
  CacheDiff d;
  for (const auto& [key, rv] : fresh) {
    auto it = old.find(key);
    if (it == old.end()) {
      d.added.push_back(key);
    } else if (it->second != rv) {
      d.updated.push_back(key);
    }
  }
  for (const auto& [key, rv] : old) {
    if (!fresh.contains(key)) d.deleted.push_back(key);
  }
  return d;
}

const StoreCore::Entry* StoreCore::find(std::string_view key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<std::string> StoreCore::keys() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [key, entry] : entries_) out.push_back(key);
  return out;
}

VersionMap StoreCore::versions() const {
  VersionMap out;
  for (const auto& [key, entry] : entries_)
    out.emplace_hint(out.end(), key, entry.resource_version);
  return out;
}

bool StoreCore::upsert(std::string key, Entry entry) {
  return entries_.insert_or_assign(std::move(key), std::move(entry)).second;
}

bool StoreCore::erase(std::string_view key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  entries_.erase(it);
  return true;
}

CacheDiff StoreCore::replace(Entries fresh) {
  VersionMap fresh_versions;
  for (const auto& [key, entry] : fresh) {
    fresh_versions.emplace_hint(fresh_versions.end(), key, entry.resource_version);
  }
  CacheDiff diff = diff_cache(versions(), fresh_versions);
  entries_ = std::move(fresh);
  return diff;
}

}  // namespace gracekeeper::kube
