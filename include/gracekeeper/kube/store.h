// The informer's storage, after client-go's ThreadSafeStore + Indexer
// (tools/cache/store.go): a map from key to the object's resourceVersion and
// its projection, written only by the informer's list/watch loop and read by
// everyone else.
//
// Values are immutable shared snapshots: get() hands out a
// std::shared_ptr<const T> that stays valid, unchanged, for as long as the
// caller holds it, also across a co_await while the informer replaces the
// entry. Readers never copy to be safe.
//
// Keys are "namespace/name" ("name" for cluster-scoped objects) and kept in
// order, so a namespace's objects are one contiguous range: that order is the
// namespace index (in_namespace). Nothing else is indexed; no controller
// needs more yet.
//
// Single-threaded like the rest of the operator: one io_context thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gracekeeper::kube {

// key -> resourceVersion, ordered: what a store holds, comparable to a LIST.
using VersionMap = std::map<std::string, std::string>;

// What changed between two versions of a store: keys only in `fresh` were
// added, keys in both with a different resourceVersion updated, keys only in
// `old` deleted. Each list is sorted. Used to reconcile after a relist.
struct CacheDiff {
  std::vector<std::string> added;
  std::vector<std::string> updated;
  std::vector<std::string> deleted;
};
CacheDiff diff_cache(const VersionMap& old, const VersionMap& fresh);

// The untyped store; Store<T> is its typed view.
class StoreCore {
 public:
  using Value = std::shared_ptr<const void>;
  struct Entry {
    std::string resource_version;
    Value value;
  };
  using Entries = std::map<std::string, Entry, std::less<>>;

  const Entry* find(std::string_view key) const;
  std::size_t size() const { return entries_.size(); }
  std::vector<std::string> keys() const;  // sorted
  VersionMap versions() const;
  // The entries of namespace `ns` ("ns/..." keys), in key order.
  template <class F>
  void in_namespace(std::string_view ns, F&& visit) const {
    std::string from(ns);
    from += '/';
    std::string to(ns);
    to += '0';  // '0' follows '/': the first key past the namespace
    for (auto it = entries_.lower_bound(from), end = entries_.lower_bound(to); it != end; ++it) {
      visit(it->first, it->second);
    }
  }

  // Writes: the informer's list/watch loop, or a unit test filling a store.
  // true when the key is new.
  bool upsert(std::string key, Entry entry);
  bool erase(std::string_view key);
  // Replaces everything (a relist) and returns what changed.
  CacheDiff replace(Entries fresh);

 private:
  Entries entries_;
};

// A typed view of a StoreCore whose values are all T.
template <class T>
class Store {
 public:
  using Ptr = std::shared_ptr<const T>;
  explicit Store(const StoreCore& core) : core_(&core) {}

  // The cached value, or null.
  Ptr get(std::string_view key) const {
    const StoreCore::Entry* e = core_->find(key);
    return e ? std::static_pointer_cast<const T>(e->value) : nullptr;
  }
  // The resourceVersion of the cached object, or "".
  std::string_view resource_version(std::string_view key) const {
    const StoreCore::Entry* e = core_->find(key);
    return e ? std::string_view(e->resource_version) : std::string_view();
  }
  // visit(key, const T&) for every value of namespace `ns`, in key order.
  template <class F>
  void in_namespace(std::string_view ns, F&& visit) const {
    core_->in_namespace(ns, [&](const std::string& key, const StoreCore::Entry& e) {
      visit(key, *static_cast<const T*>(e.value.get()));
    });
  }
  std::vector<std::pair<std::string, Ptr>> list_namespace(std::string_view ns) const {
    std::vector<std::pair<std::string, Ptr>> out;
    core_->in_namespace(ns, [&](const std::string& key, const StoreCore::Entry& e) {
      out.emplace_back(key, std::static_pointer_cast<const T>(e.value));
    });
    return out;
  }
  std::size_t size() const { return core_->size(); }
  std::vector<std::string> keys() const { return core_->keys(); }

 private:
  const StoreCore* core_;
};

// Fills a store with one value (unit tests, and anything else that builds a
// store by hand).
template <class T>
bool store_value(StoreCore& store, std::string key, std::string resource_version, T value) {
  return store.upsert(std::move(key),
                      {std::move(resource_version), std::make_shared<const T>(std::move(value))});
}

}  // namespace gracekeeper::kube
