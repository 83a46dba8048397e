// controller-runtime's reconcile contract (pkg/reconcile), in C++: a
// reconcile ends "done", "come back after D", or with an error that is
// either transient (retry with the queue's backoff) or terminal (log it and
// wait for the next change: retrying cannot help).
#pragma once

#include <chrono>
#include <expected>
#include <optional>
#include <string>

namespace gracekeeper::controller {

struct Result {
  // nullopt: done until something changes.
  std::optional<std::chrono::nanoseconds> requeue_after;

  static Result done() { return {}; }
  static Result after(std::chrono::nanoseconds delay) { return {delay}; }
  bool operator==(const Result&) const = default;
};

struct ReconcileError {
  enum class Kind { Transient, Terminal };
  Kind kind = Kind::Transient;
  std::string message;
};

using ReconcileResult = std::expected<Result, ReconcileError>;

inline ReconcileResult transient(std::string message) {
  return std::unexpected(ReconcileError{ReconcileError::Kind::Transient, std::move(message)});
}

// The earlier of two requeues (nullopt = none).
inline std::optional<std::chrono::nanoseconds> earliest(std::optional<std::chrono::nanoseconds> a,
                                                        std::optional<std::chrono::nanoseconds> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

}  // namespace gracekeeper::controller
