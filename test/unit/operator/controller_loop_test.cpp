// The loop every reconciler runs under: what each kind of result tells the
// work queue, and that every reconcile is counted, with a real queue on a
// real io_context.
#include "../../../src/operator/controller_loop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <stdexcept>

namespace gracekeeper::controller {
namespace {

namespace asio = boost::asio;
using ::testing::HasSubstr;

class ControllerLoopTest : public ::testing::Test {
 protected:
  // Runs one key through the loop with `result` as the reconcile's answer
  // (a throwing reconcile when `throws`); what process() returned.
  bool process(ReconcileResult result, bool throws = false) {
    ControllerLoop loop("test", queue, metrics,
                        [&](std::string key) -> asio::awaitable<ReconcileResult> {
                          seen.push_back(key);
                          if (throws) throw std::runtime_error("boom");
                          co_return result;
                        });
    std::optional<bool> answer;
    asio::co_spawn(io, loop.process("shop/web"), [&](std::exception_ptr e, bool ok) {
      if (e) std::rethrow_exception(e);
      answer = ok;
    });
    io.restart();
    while (!answer && io.run_one_for(std::chrono::seconds(5)) > 0) {
    }
    EXPECT_TRUE(answer.has_value());
    return answer.value_or(false);
  }

  asio::io_context io;
  kube::AsyncWorkQueue queue{io.get_executor()};
  metrics::Metrics metrics{"1.0.0"};
  std::vector<std::string> seen;
};

TEST_F(ControllerLoopTest, EachResultTellsTheQueueWhatToDo) {
  EXPECT_TRUE(process(Result::done()));  // forget the backoff
  EXPECT_EQ(queue.core().waiting(), 0u);
  EXPECT_TRUE(process(Result::after(std::chrono::hours(1))));  // and come back later
  EXPECT_EQ(queue.core().waiting(), 1u);
  EXPECT_FALSE(process(transient("the server is away")));  // retried with backoff
  EXPECT_TRUE(process(std::unexpected(ReconcileError{ReconcileError::Kind::Terminal, "bad"})));
  EXPECT_FALSE(process(Result::done(), /*throws=*/true));  // an exception is transient
  EXPECT_EQ(seen.size(), 5u);
  queue.shut_down();
}

TEST_F(ControllerLoopTest, EveryReconcileIsCountedUnderTheLoopsName) {
  process(Result::done());
  process(Result::after(std::chrono::seconds(1)));
  process(transient("x"));
  process(Result::done(), /*throws=*/true);
  const std::string text = metrics.serialize();
  EXPECT_THAT(text,
              HasSubstr(R"(gracekeeper_reconcile_total{controller="test",result="success"} 2)"));
  EXPECT_THAT(text,
              HasSubstr(R"(gracekeeper_reconcile_total{controller="test",result="error"} 2)"));
  queue.shut_down();
}

}  // namespace
}  // namespace gracekeeper::controller
