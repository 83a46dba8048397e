// Errors from the Kubernetes API, as values: what went wrong (a Reason a
// caller can branch on), the HTTP status, the server's message and, for
// validation and apply conflicts, the per-field causes. Decoded from the
// metav1.Status body the API server sends with every error response; when
// there is no Status body (a proxy's HTML page, a cut connection) the reason
// comes from the HTTP status or the failure itself.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gracekeeper::kube {

struct ApiError {
  enum class Reason {
    NotFound,
    AlreadyExists,
    Conflict,  // resourceVersion mismatch, or a server-side apply field conflict
    Gone,      // 410, or reason Expired: the resourceVersion/continue token is too old
    Invalid,   // 422: see causes
    TooManyRequests,
    Unauthorized,
    Forbidden,
    Timeout,      // the server gave up (504, reason Timeout/ServerTimeout)
    ServerError,  // other 5xx
    Transport,    // connect, TLS, I/O, timeouts on our side: no answer from the server
    BadResponse,  // an answer we cannot use (not JSON, too large, malformed HTTP)
    Other,
  };
  // One entry of Status.details.causes, e.g. for a failed apply:
  // {field ".data.key", reason "FieldManagerConflict", message `conflict with "a"`}.
  struct Cause {
    std::string field{};
    std::string reason{};
    std::string message{};
  };

  Reason reason = Reason::Other;
  int http_status = 0;  // 0 when no response arrived
  std::string message{};
  std::string status_reason{};  // Status.reason as the server wrote it ("" if none)
  std::vector<Cause> causes{};
  std::optional<std::chrono::seconds>
      retry_after{};  // from Retry-After or details.retryAfterSeconds

  // "Conflict (409): Apply failed with 1 conflict: ... [.data.key: conflict with \"a\"]"
  std::string format() const;
  // Worth retrying the same request later: TooManyRequests, Timeout,
  // ServerError, Transport. The client decides whether it may (see client.h).
  bool transient() const;
};

std::string_view to_string(ApiError::Reason);

// Builds an ApiError from an HTTP error response; the body is decoded as a
// metav1.Status when it is one, otherwise its start becomes the message.
ApiError decode_api_error(int http_status, std::string_view body,
                          std::optional<std::chrono::seconds> retry_after = std::nullopt);

}  // namespace gracekeeper::kube
