// Test helper: runs one coroutine to completion on an io_context and returns
// its result (rethrowing what it threw), so a test body reads top to bottom.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <exception>
#include <optional>
#include <utility>

namespace gracekeeper::test_support {

template <class T>
T run_on(boost::asio::io_context& io, boost::asio::awaitable<T> task) {
  std::optional<T> out;
  std::exception_ptr error;
  boost::asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T value) {
    error = e;
    if (!e) out.emplace(std::move(value));
  });
  io.restart();
  io.run();
  if (error) std::rethrow_exception(error);
  return std::move(*out);
}

}  // namespace gracekeeper::test_support
