// The members of an object a reader needs, so that the rest of a large
// object is never built as a JSON tree: informers parse each LIST item and
// watch event with it (InformerOptions::fields), and the operator's cache
// copies with it what the budget engine reads.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gracekeeper::kube {

// Built from dotted paths: {"metadata.name", "spec.template.spec.containers.ports"}
// keeps metadata.name and, of each container, its ports (whole). Arrays are
// transparent: a path goes on into each element. A value of another type
// where a path expects an object (a string "spec", say) is kept whole, so
// a reader still sees, and can report, what it did not expect. No paths:
// everything is kept.
class FieldSet {
 public:
  struct Node {
    bool whole = true;  // named by a path: kept as it is, members and all
    std::map<std::string, Node, std::less<>> members;  // otherwise only these are kept
  };

  FieldSet() = default;
  explicit FieldSet(const std::vector<std::string>& paths);

  bool keeps_everything() const { return root_.whole; }
  const Node& root() const { return root_; }

  // A copy of `value` with only the members the set names.
  nlohmann::json filter(const nlohmann::json& value) const;

 private:
  Node root_;
};

}  // namespace gracekeeper::kube
