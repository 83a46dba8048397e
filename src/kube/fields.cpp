#include "gracekeeper/kube/fields.h"

#include <string_view>
#include <utility>

namespace gracekeeper::kube {

FieldSet::FieldSet(const std::vector<std::string>& paths, Wanted wanted)
    : wanted_(std::move(wanted)) {
  if (paths.empty()) return;
  root_.whole = false;
  for (std::string_view path : paths) {
    Node* node = &root_;
    for (;;) {
      const auto dot = path.find('.');
      auto [it, inserted] = node->members.try_emplace(std::string(path.substr(0, dot)));
      node = &it->second;
      if (dot == std::string_view::npos) {  // named: kept whole, whatever longer paths say
        node->whole = true;
        node->members.clear();
        break;
      }
      if (node->whole && !inserted) break;  // a shorter path keeps it whole already
      node->whole = false;
      path.remove_prefix(dot + 1);
    }
  }
}

namespace {

nlohmann::json filter_value(const nlohmann::json& value, const FieldSet::Node& node) {
  if (node.whole) return value;
  if (value.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [name, member] : node.members) {
      if (auto it = value.find(name); it != value.end()) out[name] = filter_value(*it, member);
    }
    return out;
  }
  if (value.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& element : value) out.push_back(filter_value(element, node));
    return out;
  }
  return value;  // not what the paths expect: kept, for the reader to report
}

}  // namespace

nlohmann::json FieldSet::filter(const nlohmann::json& value) const {
  nlohmann::json out = filter_value(value, root_);
  if (!wanted_ || !out.is_object()) return out;
  auto metadata = out.find("metadata");
  if (metadata == out.end() || !metadata->is_object() || wanted_(*metadata)) return out;
  nlohmann::json reduced = nlohmann::json::object();
  reduced["metadata"] = std::move(*metadata);
  return reduced;
}

}  // namespace gracekeeper::kube
