// The retry rule and backoff (see include/gracekeeper/http/client.h).
#include "gracekeeper/http/client.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <random>

namespace gracekeeper::http {
namespace {

namespace asio = boost::asio;

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

bool may_retry(Retry verdict, bool idempotent) {
  return verdict == Retry::Always || (verdict == Retry::IfIdempotent && idempotent);
}

// A failure with no answer: transport failures are transient (before the
// request went out whole, always safe to repeat); a bad answer is not.
Retry verdict_for(const Error& e) {
  if (e.kind != ErrorKind::Transport) return Retry::Never;
  return e.request_written ? Retry::IfIdempotent : Retry::Always;
}

}  // namespace

Verdict classify_by_status(const Response& r) {
  Verdict v{.retry_after = r.retry_after};
  if (r.status == 429) {
    v.retry = Retry::Always;
  } else if (r.status == 408 || (r.status >= 500 && r.status <= 599)) {
    v.retry = Retry::IfIdempotent;
  }
  return v;
}

Client::Client(asio::any_io_executor executor, Endpoint endpoint, Options options)
    : Client(make_transport(std::move(executor), std::move(endpoint), options), options) {}

Client::Client(std::unique_ptr<Transport> transport, Options options)
    : transport_(std::move(transport)), options_(std::move(options)) {
  jitter_state_ = (std::uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

Client::~Client() = default;

asio::awaitable<std::expected<Response, Error>> Client::send(Request req, Classifier classify) {
  const auto& retry = options_.retry;
  for (int attempt = 1;; ++attempt) {
    auto answer = co_await transport_->send(req);
    Verdict verdict;
    if (answer) {
      if (answer->status >= 200 && answer->status <= 299) co_return answer;
      verdict = classify(*answer);
    } else {
      verdict.retry = verdict_for(answer.error());
    }
    if (attempt >= retry.attempts || !may_retry(verdict.retry, req.idempotent)) co_return answer;
    // Exponential backoff with jitter (half to all of the step), so clients
    // that failed together do not come back together; Retry-After is a floor.
    auto step =
        std::min(retry.max_backoff, retry.initial_backoff * (1 << std::min(attempt - 1, 16)));
    auto wait =
        step / 2 + std::chrono::milliseconds{splitmix64(jitter_state_) %
                                             static_cast<std::uint64_t>(step.count() / 2 + 1)};
    if (verdict.retry_after) {
      wait = std::max<std::chrono::milliseconds>(
          wait,
          std::min<std::chrono::milliseconds>(*verdict.retry_after, std::chrono::seconds{60}));
    }
    // (Named locals around co_await: GCC 12 mishandles temporaries there.)
    auto executor = co_await asio::this_coro::executor;
    asio::steady_timer timer(executor, wait);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return answer;  // cancelled while waiting: the last answer or failure
  }
}

asio::awaitable<std::expected<StreamResult, Error>> Client::stream(Request req,
                                                                   ChunkHandler on_chunk) {
  co_return co_await transport_->stream(req, on_chunk);
}

}  // namespace gracekeeper::http
