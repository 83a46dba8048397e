#include "controller_loop.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "gracekeeper/log/log.h"

namespace gracekeeper::controller {

void ControllerLoop::run(std::size_t workers) {
  queue_.run_workers(std::max<std::size_t>(workers, 1),
                     [this](std::string key) { return process(std::move(key)); });
}

boost::asio::awaitable<bool> ControllerLoop::process(std::string key) {
  const auto start = std::chrono::steady_clock::now();
  ReconcileResult result = transient("no result");
  try {
    result = co_await reconcile_(key);
  } catch (const std::exception& e) {
    result = transient(e.what());
  }
  metrics_.observe_reconcile(
      name_, result ? "success" : "error",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (result) {
    if (result->requeue_after) queue_.add_after(key, *result->requeue_after);
    co_return true;
  }
  const bool terminal = result.error().kind == ReconcileError::Kind::Terminal;
  log::warn(terminal ? "reconcile failed" : "reconcile failed, will retry",
            {{"controller", name_}, {"key", key}, {"error", result.error().message}});
  co_return terminal;
}

}  // namespace gracekeeper::controller
