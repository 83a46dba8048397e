// The event recorder tells how each write ended (EventRecorder::on_outcome),
// through a Client whose transport answers from a script: a refused create
// drops the series and says so; a written one says so once the server has it.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "gracekeeper/http/transport.h"
#include "gracekeeper/kube/client.h"
#include "gracekeeper/kube/events.h"

namespace gracekeeper::kube {
namespace {

namespace asio = boost::asio;

// Answers each request with the next status (201 when the script is done)
// and keeps what was asked.
class AnsweringTransport final : public http::Transport {
 public:
  std::deque<unsigned> statuses;
  std::vector<std::string> targets;

  asio::awaitable<std::expected<http::Response, http::Error>> send(
      const http::Request& r) override {
    targets.push_back(r.target);
    http::Response response;
    response.status = 201;
    if (!statuses.empty()) {
      response.status = statuses.front();
      statuses.pop_front();
    }
    response.content_type = "application/json";
    response.body =
        response.status < 300
            ? std::string("{}")
            : R"({"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,)"
              R"("message":"events \"web.1\" is forbidden: unable to create new content in namespace shop because it is being terminated"})";
    co_return response;
  }
  asio::awaitable<std::expected<http::StreamResult, http::Error>> stream(
      const http::Request&, const http::ChunkHandler&) override {
    co_return std::unexpected(http::Error{.message = "no streams here"});
  }
};

struct Outcome {
  std::string reason;
  bool written;
};

class EventOutcomeTest : public ::testing::Test {
 protected:
  EventOutcomeTest() {
    auto t = std::make_unique<AnsweringTransport>();
    transport = t.get();
    ClientOptions options;
    options.retry.attempts = 1;  // no retry: the answer is the outcome
    client.emplace(std::move(t), options);
    recorder.emplace(io.get_executor(), *client, EventRecorderOptions{});
    recorder->on_outcome([this](const EventRecord& e, bool written) {
      outcomes.push_back({e.reason, written});
      EXPECT_EQ(e.regarding.name, "web");
    });
  }
  void record(std::string reason) {
    recorder->record({"apps/v1", "Deployment", "shop", "web", "u-1"}, EventType::Warning,
                     std::move(reason), "Check", "a note");
    io.restart();
    io.run();
  }

  asio::io_context io;
  AnsweringTransport* transport = nullptr;
  std::optional<Client> client;
  std::optional<EventRecorder> recorder;
  std::vector<Outcome> outcomes;
};

TEST_F(EventOutcomeTest, ARefusedCreateIsAFailureAndTheNextRecordCreatesAgain) {
  transport->statuses = {403, 403};
  record("BudgetClamped");
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_FALSE(outcomes[0].written);
  EXPECT_EQ(recorder->stats().failed, 1u);
  // Dropped: recorded again (as the ledger does), it is a create again, not a
  // series patch of an Event that was never made.
  record("BudgetClamped");
  record("BudgetClamped");
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_FALSE(outcomes[1].written);
  EXPECT_TRUE(outcomes[2].written);
  ASSERT_EQ(transport->targets.size(), 3u);
  for (const auto& t : transport->targets) {
    EXPECT_EQ(t, "/apis/events.k8s.io/v1/namespaces/shop/events");  // POST each time
  }
  EXPECT_EQ(recorder->stats().created, 1u);
  EXPECT_EQ(recorder->in_flight(), 0u);
}

TEST_F(EventOutcomeTest, ARepeatIsWrittenAsASeriesAndSaysSo) {
  record("BudgetClamped");
  record("BudgetClamped");
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_TRUE(outcomes[0].written);
  EXPECT_TRUE(outcomes[1].written);
  EXPECT_EQ(recorder->stats().patched, 1u);
}

}  // namespace
}  // namespace gracekeeper::kube
