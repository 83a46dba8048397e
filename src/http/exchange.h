// The HTTP/1.1 exchange itself, private to gk_http and the tests: a template
// over the stream type, so the same code runs on ssl_stream<tcp_stream>,
// tcp_stream and beast::test::stream. Timeouts are armed on the stream's
// lowest layer before every step when it has a timer (tcp_stream); streams
// without one (test streams) simply have no timeouts.
#pragma once

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/beast/http/write.hpp>
#include <charconv>
#include <chrono>
#include <expected>
#include <optional>
#include <string>

#include "gracekeeper/http/transport.h"

namespace gracekeeper::http::detail {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using Clock = std::chrono::steady_clock;
inline constexpr auto use_nothrow = boost::asio::as_tuple(boost::asio::use_awaitable);

// What goes into every request besides Request.
struct RequestHead {
  std::string host{};           // Host header: "host:port"
  std::string path_prefix{};    // the server URL's path, "" usually
  std::string authorization{};  // "Bearer ..." or ""
  std::string user_agent{};
};

inline bhttp::request<bhttp::string_body> make_wire_request(const Request& r,
                                                            const RequestHead& head) {
  bhttp::request<bhttp::string_body> req{r.method, head.path_prefix + r.target, 11};
  req.set(bhttp::field::host, head.host);
  req.set(bhttp::field::user_agent, head.user_agent);
  req.set(bhttp::field::accept, r.accept);
  if (!head.authorization.empty()) req.set(bhttp::field::authorization, head.authorization);
  if (!r.content_type.empty()) {
    req.set(bhttp::field::content_type, r.content_type);
    req.body() = r.body;
  }
  req.keep_alive(true);
  req.prepare_payload();
  return req;
}

template <class Stream>
void arm_timeout(Stream& stream, Clock::duration d) {
  if constexpr (requires { beast::get_lowest_layer(stream).expires_after(d); }) {
    beast::get_lowest_layer(stream).expires_after(d);
  }
}

template <class Stream>
void disarm_timeout(Stream& stream) {
  if constexpr (requires { beast::get_lowest_layer(stream).expires_never(); }) {
    beast::get_lowest_layer(stream).expires_never();
  }
}

inline std::string describe(const beast::error_code& ec) {
  if (ec == beast::error::timeout) return "timed out";
  return ec.message();
}

inline std::optional<std::chrono::seconds> parse_retry_after(std::string_view v) {
  // Only the delta-seconds form; the API server never sends an HTTP date.
  long s = 0;
  auto [p, e] = std::from_chars(v.data(), v.data() + v.size(), s);
  if (e != std::errc{} || s < 0) return std::nullopt;
  return std::chrono::seconds{s};
}

inline Response to_response(bhttp::response<bhttp::string_body>& m) {
  Response r;
  r.status = m.result_int();
  r.content_type = std::string{m[bhttp::field::content_type]};
  if (auto it = m.find(bhttp::field::retry_after); it != m.end()) {
    r.retry_after = parse_retry_after(it->value());
  }
  r.body = std::move(m.body());
  return r;
}

struct Exchanged {
  Response response;
  bool reusable = false;  // the connection can carry another request
};

// Writes `req`, reads the whole answer (body at most `max_body` bytes).
template <class Stream>
boost::asio::awaitable<std::expected<Exchanged, Error>> exchange(
    Stream& stream, beast::flat_buffer& buffer, const bhttp::request<bhttp::string_body>& req,
    const Timeouts& timeouts, std::size_t max_body) {
  const auto deadline = Clock::now() + timeouts.request;
  // Each step gets its own limit, but never beyond the whole request's deadline.
  auto step = [&](Clock::duration limit) {
    return std::clamp<Clock::duration>(deadline - Clock::now(), Clock::duration::zero(), limit);
  };
  Error failure;
  arm_timeout(stream, step(timeouts.write));
  auto [wec, wn] = co_await bhttp::async_write(stream, req, use_nothrow);
  if (wec) {
    failure.message = "sending the request: " + describe(wec);
    co_return std::unexpected(std::move(failure));
  }
  failure.request_written = true;

  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(max_body);
  arm_timeout(stream, step(timeouts.read_header));
  auto [hec, hn] = co_await bhttp::async_read_header(stream, buffer, parser, use_nothrow);
  if (!hec) {
    arm_timeout(stream, step(timeouts.request));
    auto [bec, bn] = co_await bhttp::async_read(stream, buffer, parser, use_nothrow);
    hec = bec;
  }
  disarm_timeout(stream);
  if (hec) {
    failure.received_any = parser.got_some();
    if (hec == bhttp::error::body_limit) {
      failure.kind = ErrorKind::BadResponse;
      failure.message = "response body larger than " + std::to_string(max_body) + " bytes";
    } else if (hec.category() == make_error_code(bhttp::error::end_of_stream).category() &&
               hec != bhttp::error::end_of_stream && hec != bhttp::error::partial_message) {
      failure.kind = ErrorKind::BadResponse;
      failure.message = "malformed HTTP response: " + hec.message();
    } else {
      failure.message = std::string{parser.is_header_done() ? "reading the response body: "
                                                            : "reading the response: "} +
                        describe(hec);
    }
    co_return std::unexpected(std::move(failure));
  }
  Exchanged out;
  out.reusable = parser.get().keep_alive();
  out.response = to_response(parser.get());
  co_return out;
}

// The error answer (a Status) to a streaming request: small, read whole.
template <class Stream>
boost::asio::awaitable<std::expected<StreamResult, Error>> read_refusal(
    Stream& stream, beast::flat_buffer& buffer, bhttp::response_parser<bhttp::string_body>& parser,
    const Timeouts& timeouts, std::size_t max_error_body) {
  parser.body_limit(max_error_body);
  arm_timeout(stream, timeouts.request);
  auto [bec, bn] = co_await bhttp::async_read(stream, buffer, parser, use_nothrow);
  disarm_timeout(stream);
  if (bec) {
    Error failure;
    failure.request_written = true;
    failure.received_any = true;
    failure.message = "reading the error response: " + describe(bec);
    co_return std::unexpected(std::move(failure));
  }
  StreamResult refused{.refused = to_response(parser.get())};
  co_return refused;
}

// A 2xx answer's body, handed to `on_chunk` as it arrives until it ends or
// `on_chunk` says stop (exchange_streaming).
template <class Stream>
boost::asio::awaitable<std::expected<StreamResult, Error>> read_streamed_body(
    Stream& stream, beast::flat_buffer& buffer, bhttp::response_parser<bhttp::string_body>& parser,
    const Timeouts& timeouts, const ChunkHandler& on_chunk) {
  bool stopped = false;
  auto on_chunk_body = [&](std::uint64_t /*remain*/, std::string_view data,
                           beast::error_code& ec) -> std::size_t {
    if (!stopped && !data.empty() && !on_chunk(data)) {
      stopped = true;
      ec = boost::asio::error::operation_aborted;  // ends the read; we check `stopped` first
    }
    return data.size();
  };
  parser.on_chunk_body(on_chunk_body);
  while (!parser.is_done()) {
    arm_timeout(stream, timeouts.watch_idle);
    auto [ec, n] = co_await bhttp::async_read_some(stream, buffer, parser, use_nothrow);
    if (stopped) break;
    if (ec) {
      disarm_timeout(stream);
      Error failure;
      failure.request_written = true;
      failure.received_any = true;
      failure.message = "reading the watch stream: " + describe(ec);
      co_return std::unexpected(std::move(failure));
    }
    if (!parser.chunked()) {  // a plain body accumulates; pass it on and drop it
      auto& body = parser.get().body();
      if (!body.empty()) {
        stopped = !on_chunk(body);
        body.clear();
        if (stopped) break;
      }
    }
  }
  disarm_timeout(stream);
  StreamResult result{.end = stopped ? StreamEnd::Stopped : StreamEnd::Closed};
  co_return result;
}

// Writes `req` and, when the answer is 2xx, hands its body to `on_chunk` as
// it arrives: chunk data as the parser's on_chunk_body callback sees it (that
// is how Beast reads a chunked stream), or the raw body for a response that
// is not chunked. Reads time out after `timeouts.watch_idle` of silence.
template <class Stream>
boost::asio::awaitable<std::expected<StreamResult, Error>> exchange_streaming(
    Stream& stream, beast::flat_buffer& buffer, const bhttp::request<bhttp::string_body>& req,
    const Timeouts& timeouts, std::size_t max_error_body, const ChunkHandler& on_chunk) {
  Error failure;
  arm_timeout(stream, timeouts.write);
  auto [wec, wn] = co_await bhttp::async_write(stream, req, use_nothrow);
  if (wec) {
    failure.message = "sending the request: " + describe(wec);
    co_return std::unexpected(std::move(failure));
  }
  failure.request_written = true;

  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(boost::none);  // a watch is unbounded; each piece goes to the handler
  arm_timeout(stream, timeouts.read_header);
  auto [hec, hn] = co_await bhttp::async_read_header(stream, buffer, parser, use_nothrow);
  if (hec) {
    failure.received_any = parser.got_some();
    failure.message = "reading the response: " + describe(hec);
    co_return std::unexpected(std::move(failure));
  }
  const unsigned status = parser.get().result_int();
  if (status < 200 || status > 299) {
    auto refused = co_await read_refusal(stream, buffer, parser, timeouts, max_error_body);
    co_return refused;
  }
  // The parser keeps a reference to read_streamed_body's chunk callback,
  // which ends with that coroutine: the parser is not read with after it.
  auto streamed = co_await read_streamed_body(stream, buffer, parser, timeouts, on_chunk);
  co_return streamed;
}

}  // namespace gracekeeper::http::detail
