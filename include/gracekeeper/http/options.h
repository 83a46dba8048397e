// What an http::Client is configured with (timeouts, retries, the pool), and
// the streaming callback. A light header: no Asio, no Beast, so the kube
// client's public header can carry these types (kube::ClientOptions is
// http::Options).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace gracekeeper::http {

struct Timeouts {
  std::chrono::milliseconds connect{10'000};      // TCP connect, all resolved addresses
  std::chrono::milliseconds handshake{10'000};    // TLS handshake
  std::chrono::milliseconds write{30'000};        // sending the request
  std::chrono::milliseconds read_header{60'000};  // from request sent to response header
  std::chrono::milliseconds request{120'000};     // whole non-streamed request, body included
  // Streams (Kubernetes watches): the longest silence between two reads of
  // the body. The API server sends bookmarks about once a minute, so a
  // silence much longer than that means a dead connection.
  std::chrono::milliseconds watch_idle{150'000};
};

struct RetryPolicy {
  int attempts = 4;  // total tries, including the first; 1 disables retries
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{5'000};
};

struct Options {
  Timeouts timeouts{};
  RetryPolicy retry{};
  std::size_t max_idle_connections = 4;
  std::chrono::seconds max_idle_time{60};  // idle pooled connections older than this are closed
  std::size_t max_body_bytes = 64u << 20;  // non-streamed responses larger than this fail
  std::string user_agent = "gracekeeper";
};

// How a stream ended when it did not fail.
enum class StreamEnd {
  Closed,   // the server ended the body
  Stopped,  // the chunk handler returned false
};

// Gets each piece of a streamed body as it arrives. Pieces follow the wire's
// chunking, not any message boundaries. Return false to stop the stream.
using ChunkHandler = std::function<bool(std::string_view)>;

}  // namespace gracekeeper::http
