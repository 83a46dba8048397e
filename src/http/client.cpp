// The retry rule and backoff (see include/gracekeeper/http/client.h).
#include "gracekeeper/http/client.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <functional>
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

// The longest Retry-After obeyed: a server asking for more is waited for
// this long (then it refuses again, or not).
constexpr std::chrono::seconds kMaxRetryAfter{60};

// What a Retry-After holds: this method on this path, whatever the query
// (a watch asks for a new random timeoutSeconds every time; an apply's
// fieldManager is no other request). A POST's path is a collection that
// every create shares: there the body tells one create from another, so
// that a create refused does not hold other creates back (they would all
// wake together when it ends and be refused together again).
std::string hold_key(const Request& req) {
  std::string_view path = req.target;
  path = path.substr(0, path.find('?'));
  std::string key =
      std::string{boost::beast::http::to_string(req.method)} + " " + std::string{path};
  if (req.method == Verb::post) key += " #" + std::to_string(std::hash<std::string>{}(req.body));
  return key;
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

std::chrono::milliseconds Client::held_for(const Request& req) const {
  auto it = held_until_.find(hold_key(req));
  if (it == held_until_.end()) return std::chrono::milliseconds::zero();
  return std::max(std::chrono::milliseconds::zero(),
                  std::chrono::ceil<std::chrono::milliseconds>(it->second - Clock::now()));
}

void Client::hold(const std::string& key, std::optional<std::chrono::seconds> retry_after) {
  if (!retry_after || *retry_after <= std::chrono::seconds::zero()) return;
  const auto now = Clock::now();
  // Holds that have passed go first: the map keeps only live ones, at most
  // one per request the server throttled in the last minute.
  std::erase_if(held_until_, [&](const auto& h) { return h.second <= now; });
  auto until = now + std::min<std::chrono::seconds>(*retry_after, kMaxRetryAfter);
  auto& slot = held_until_[key];
  slot = std::max(slot, until);
}

asio::awaitable<bool> Client::wait_hold(const std::string& key) {
  for (;;) {
    auto it = held_until_.find(key);
    if (it == held_until_.end()) co_return true;
    const auto until = it->second;
    if (until <= Clock::now()) {
      held_until_.erase(it);
      co_return true;
    }
    // (Named locals around co_await: GCC 12 mishandles temporaries there.)
    auto executor = co_await asio::this_coro::executor;
    asio::steady_timer timer(executor, until);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return false;
    // Another answer may have pushed the hold further meanwhile: look again.
  }
}

namespace {
Error cancelled_while_held() {
  return Error{.kind = ErrorKind::Transport,
               .message = "cancelled while waiting for the server's Retry-After"};
}
}  // namespace

asio::awaitable<std::expected<Response, Error>> Client::send(Request req, Classifier classify) {
  const auto& retry = options_.retry;
  const std::string key = hold_key(req);
  if (!co_await wait_hold(key)) co_return std::unexpected(cancelled_while_held());
  for (int attempt = 1;; ++attempt) {
    auto answer = co_await transport_->send(req);
    Verdict verdict;
    if (answer) {
      if (answer->status >= 200 && answer->status <= 299) co_return answer;
      verdict = classify(*answer);
      hold(key, verdict.retry_after);
    } else {
      verdict.retry = verdict_for(answer.error());
    }
    if (attempt >= retry.attempts || !may_retry(verdict.retry, req.idempotent)) co_return answer;
    // Exponential backoff with jitter (half to all of the step), so clients
    // that failed together do not come back together; the hold (Retry-After)
    // is a floor.
    auto step =
        std::min(retry.max_backoff, retry.initial_backoff * (1 << std::min(attempt - 1, 16)));
    auto wait =
        step / 2 + std::chrono::milliseconds{splitmix64(jitter_state_) %
                                             static_cast<std::uint64_t>(step.count() / 2 + 1)};
    auto executor = co_await asio::this_coro::executor;
    asio::steady_timer timer(executor, wait);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return answer;  // cancelled while waiting: the last answer or failure
    if (!co_await wait_hold(key)) co_return answer;
  }
}

asio::awaitable<std::expected<StreamResult, Error>> Client::stream(Request req,
                                                                   ChunkHandler on_chunk) {
  const std::string key = hold_key(req);
  if (!co_await wait_hold(key)) co_return std::unexpected(cancelled_while_held());
  auto result = co_await transport_->stream(req, on_chunk);
  if (result && result->refused) hold(key, classify_by_status(*result->refused).retry_after);
  co_return result;
}

}  // namespace gracekeeper::http
