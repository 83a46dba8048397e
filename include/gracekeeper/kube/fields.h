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
//
// `wanted`, when given, looks at an object's metadata (as filtered) first:
// an object it refuses is reduced to its metadata, and a reader skips the
// rest of its text unbuilt (Kubernetes writes metadata before spec and
// status). The operator's Deployment informer refuses the Deployments that
// have not opted in: of those only the metadata it reads is built.
class FieldSet {
 public:
  struct Node {
    bool whole = true;  // named by a path: kept as it is, members and all
    std::map<std::string, Node, std::less<>> members;  // otherwise only these are kept
  };
  using Wanted = std::function<bool(const nlohmann::json& metadata)>;

  FieldSet() = default;
  explicit FieldSet(const std::vector<std::string>& paths, Wanted wanted = {});

  bool keeps_everything() const { return root_.whole && !wanted_; }
  const Node& root() const { return root_; }
  const Wanted& wanted() const { return wanted_; }

  // A copy of `value` with only the members the set names; an object whose
  // metadata `wanted` refuses keeps only its metadata.
  nlohmann::json filter(const nlohmann::json& value) const;

 private:
  Node root_;
  Wanted wanted_;
};

}  // namespace gracekeeper::kube
