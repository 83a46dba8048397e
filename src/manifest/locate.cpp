// Finds the line of a field for an error message. Only used when something is
// reported, so it re-parses the source; it builds a small tree of positions for
// the one document asked for, with aliases shared rather than expanded.
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <charconv>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gracekeeper/manifest/document.h"
#include "yaml_support.h"

namespace gracekeeper::manifest {
namespace {

struct PositionNode;
using NodePtr = std::shared_ptr<PositionNode>;

struct PositionNode {
  YAML::Mark mark;
  bool is_map = false;
  struct Entry {
    std::string key;
    YAML::Mark key_mark;
    NodePtr value;
  };
  std::vector<Entry> entries;
  std::vector<NodePtr> items;
  std::vector<NodePtr> merged;  // sources of `<<` keys, searched after the entries
};

class PositionTreeBuilder final : public YAML::EventHandler {
 public:
  NodePtr root() const { return root_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    scalar(mark, anchor, "", false);
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& text) override {
    scalar(mark, anchor, text, tag == "?" && text == "<<");
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    NodePtr node = anchor < anchors_.size() ? anchors_[anchor] : nullptr;
    if (!node) node = leaf(mark);
    if (key_expected()) {
      open_.back().key = {"", mark, false};
      open_.back().expect_key = false;
      return;
    }
    attach(node);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, anchor, false);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, anchor, true);
  }
  void OnMapEnd() override { close(); }

 private:
  struct PendingKey {
    std::string text;
    YAML::Mark mark;
    bool merge = false;
  };
  struct Open {
    NodePtr node;
    bool expect_key = true;
    PendingKey key;
  };

  static NodePtr leaf(const YAML::Mark& mark) {
    auto node = std::make_shared<PositionNode>();
    node->mark = mark;
    return node;
  }

  bool key_expected() const {
    return !open_.empty() && open_.back().node->is_map && open_.back().expect_key;
  }

  void remember(YAML::anchor_t anchor, const NodePtr& node) {
    if (anchor == YAML::NullAnchor) return;
    if (anchor >= anchors_.size()) anchors_.resize(anchor + 1);
    anchors_[anchor] = node;
  }

  void scalar(const YAML::Mark& mark, YAML::anchor_t anchor, const std::string& text, bool merge) {
    NodePtr node = leaf(mark);
    remember(anchor, node);
    if (key_expected()) {
      open_.back().key = {text, mark, merge};
      open_.back().expect_key = false;
      return;
    }
    attach(node);
  }

  void open(const YAML::Mark& mark, YAML::anchor_t anchor, bool is_map) {
    NodePtr node = leaf(mark);
    node->is_map = is_map;
    remember(anchor, node);
    if (key_expected()) {
      // Kubernetes keys are strings; a complex key never matches a path.
      open_.back().key = {"", mark, false};
    }
    open_.push_back(Open{node, true, {}});
  }

  void close() {
    Open done = std::move(open_.back());
    open_.pop_back();
    if (!open_.empty() && open_.back().node->is_map && open_.back().expect_key) {
      open_.back().expect_key = false;  // that container was a key
      return;
    }
    attach(done.node);
  }

  void attach(const NodePtr& node) {
    if (open_.empty()) {
      root_ = node;
      return;
    }
    Open& parent = open_.back();
    if (!parent.node->is_map) {
      parent.node->items.push_back(node);
      return;
    }
    parent.expect_key = true;
    if (parent.key.merge) {
      if (node->is_map) {
        parent.node->merged.push_back(node);
      } else {
        for (const NodePtr& item : node->items) parent.node->merged.push_back(item);
      }
      return;
    }
    parent.node->entries.push_back({std::move(parent.key.text), parent.key.mark, node});
  }

  std::vector<Open> open_;
  std::vector<NodePtr> anchors_;
  NodePtr root_;
};

// Looks up a key, then in the mappings merged with `<<` (bounded: merge
// sources are themselves documents' nodes, but may merge each other).
const PositionNode::Entry* find_entry(const PositionNode& node, const std::string& key,
                                      int budget = 64) {
  for (const auto& entry : node.entries) {
    if (entry.key == key) return &entry;
  }
  if (budget <= 0) return nullptr;
  for (const NodePtr& source : node.merged) {
    if (const auto* entry = find_entry(*source, key, budget - 1)) return entry;
  }
  return nullptr;
}

Position to_position(const std::string& file, const YAML::Mark& mark, const Position& fallback) {
  Position p = detail::position_at(file, mark);
  return p.line > 0 ? p : fallback;
}

// Parses the document's source again into a tree of positions; nullptr when
// it no longer parses.
NodePtr position_tree(const Document& doc) {
  if (!doc.source) return nullptr;
  try {
    detail::MemoryStream stream(*doc.source);
    YAML::Parser parser(stream);
    detail::SkipEvents skip;
    for (int i = 0; i < doc.index; ++i) {
      if (!parser.HandleNextDocument(skip)) return nullptr;
    }
    PositionTreeBuilder builder;
    if (!parser.HandleNextDocument(builder)) return nullptr;
    return builder.root();
  } catch (...) {
    // Only reached for a source that no longer parses; callers fall back to
    // the document's own position.
    return nullptr;
  }
}

// Follows `path` from `node` as far as it exists; `best` is the position of
// the deepest node reached.
const PositionNode* descend(const PositionNode* node, const std::vector<std::string>& path,
                            const std::string& file, Position& best, bool& complete) {
  complete = false;
  for (const std::string& segment : path) {
    if (node->is_map) {
      const auto* entry = find_entry(*node, segment);
      if (entry == nullptr) return node;
      best = to_position(file, entry->key_mark, best);
      node = entry->value.get();
      continue;
    }
    std::size_t index = 0;
    auto [end, ec] = std::from_chars(segment.data(), segment.data() + segment.size(), index);
    if (ec != std::errc() || end != segment.data() + segment.size() ||
        index >= node->items.size()) {
      return node;
    }
    node = node->items[index].get();
    best = to_position(file, node->mark, best);
  }
  complete = true;
  return node;
}

}  // namespace

Position locate(const Document& doc, const std::vector<std::string>& path) {
  const NodePtr root = position_tree(doc);
  if (!root) return doc.position;
  Position best = to_position(doc.position.file, root->mark, doc.position);
  bool complete = false;
  descend(root.get(), path, doc.position.file, best, complete);
  return best;
}

std::vector<Position> locate_items(const Document& doc, const std::vector<std::string>& path,
                                   std::size_t count) {
  std::vector<Position> out(count, doc.position);
  const NodePtr root = position_tree(doc);
  if (!root) return out;
  Position best = to_position(doc.position.file, root->mark, doc.position);
  bool complete = false;
  const PositionNode* list = descend(root.get(), path, doc.position.file, best, complete);
  for (std::size_t i = 0; i < count; ++i) {
    out[i] = complete && !list->is_map && i < list->items.size()
                 ? to_position(doc.position.file, list->items[i]->mark, best)
                 : best;
  }
  return out;
}

std::vector<std::string> split_field_path(std::string_view dotted) {
  std::vector<std::string> segments;
  std::string current;
  auto flush = [&] {
    if (!current.empty()) segments.push_back(std::move(current));
    current.clear();
  };
  for (std::size_t i = 0; i < dotted.size(); ++i) {
    char c = dotted[i];
    if (c == '.') {
      flush();
    } else if (c == '[') {
      flush();
      std::size_t close = dotted.find(']', i + 1);
      if (close == std::string_view::npos) close = dotted.size();
      std::string_view inside = dotted.substr(i + 1, close - i - 1);
      // Also accept the quoted form, `annotations["gracekeeper.dev/policy"]`.
      if (inside.size() >= 2 && (inside.front() == '"' || inside.front() == '\'') &&
          inside.back() == inside.front()) {
        inside = inside.substr(1, inside.size() - 2);
      }
      segments.emplace_back(inside);
      i = close;
    } else {
      current.push_back(c);
    }
  }
  flush();
  return segments;
}

}  // namespace gracekeeper::manifest
