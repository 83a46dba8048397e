// Plain value types shared by the budget engine, the policy parser and
// (later) the operator. No I/O, no Kubernetes client.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace gracekeeper::budget {

// Decoded Kubernetes objects keep their key order so `plan` output reads like its input.
using Json = nlohmann::ordered_json;

// A problem with one field of an object, named by its dotted path
// (`spec.preStop.minSeconds`, `spec.template.spec.containers[1].name`).
struct FieldError {
  std::string path;
  std::string message;

  // "path: message"
  std::string format() const;
  bool operator==(const FieldError&) const = default;
};
using FieldErrors = std::vector<FieldError>;

// Kubernetes IntOrString restricted to what rollout fields accept: a count or a percentage.
struct IntOrPercent {
  std::int64_t value = 0;
  bool percent = false;

  // Resolves against a replica count the way the Deployment controller does:
  // percentages round up for maxSurge (round_up=true) and down for maxUnavailable.
  std::int64_t resolve(std::int64_t replicas, bool round_up) const;
  bool is_zero() const { return value == 0; }
  // "1" or "25%"
  std::string to_string() const;
  bool operator==(const IntOrPercent&) const = default;
};

}  // namespace gracekeeper::budget
