#include "gracekeeper/admission/identity.h"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

#include "gracekeeper/core/json.h"
#include "gracekeeper/log/log.h"

namespace gracekeeper::webhook {

namespace {

const kube::Resource kSelfSubjectReviews{"authentication.k8s.io", "v1", "selfsubjectreviews",
                                         false};

}  // namespace

std::expected<std::string, std::string> self_subject_user(const nlohmann::json& review) {
  const nlohmann::json::json_pointer at("/status/userInfo/username");
  if (!review.is_object() || !review.contains(at) || !review[at].is_string()) {
    return std::unexpected("the SelfSubjectReview's answer has no status.userInfo.username");
  }
  std::string user = review[at].get<std::string>();
  if (user.empty()) {
    return std::unexpected("the SelfSubjectReview's answer has an empty status.userInfo.username");
  }
  return user;
}

boost::asio::awaitable<std::expected<std::string, std::string>> ask_own_user(kube::Client& client) {
  nlohmann::json review{{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "SelfSubjectReview"}};
  auto answer = co_await client.create(kSelfSubjectReviews, "", std::move(review));
  if (!answer) co_return std::unexpected("SelfSubjectReview: " + answer.error().format());
  co_return self_subject_user(*answer);
}

boost::asio::awaitable<void> learn_own_user(kube::Client& client, std::string& user,
                                            const bool& stopping) {
  std::chrono::seconds wait{5};
  while (!stopping) {
    auto found = co_await ask_own_user(client);
    if (found) {
      user = std::move(*found);
      log::info("the webhook's own writes are this user's, under field manager gracekeeper",
                {{"user", user}});
      co_return;
    }
    log::warn(
        "cannot learn the operator's user: until then the webhook plans every write, "
        "gracekeeper's own too",
        {{"error", found.error()}, {"retryInSeconds", std::to_string(wait.count())}});
    boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor, wait);
    co_await timer.async_wait(boost::asio::use_awaitable);
    wait = std::min<std::chrono::seconds>(wait * 2, std::chrono::minutes(5));
  }
}

}  // namespace gracekeeper::webhook
