// Test helper: a TCP proxy between a client and a real server that forwards
// bytes both ways unchanged (TLS passes through: the client still verifies
// the server's own certificate), on its own thread and io_context.
//
// On command it cuts a connection in the middle of what the server sends:
// cut_after(n) forwards exactly n more server->client bytes of whichever
// connection first passes that mark, withholds the rest of that read and
// closes both sides (FIN, no TLS close_notify). With a server message larger
// than n (a big watch event spans many TLS records), the client is left with
// part of a TLS record and part of an HTTP chunk. Optionally the proxy then
// refuses new connections (accepts and closes them at once) until resume(),
// so the client stays cut off for as long as the test wants.
#pragma once

#include <algorithm>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace gracekeeper::test_support {

class CuttingProxy {
 public:
  // What a cut did, for assertions.
  struct Cut {
    std::size_t forwarded = 0;  // server->client bytes passed on since cut_after() (== n)
    std::size_t withheld = 0;   // bytes of the same read that were dropped (> 0)
  };

  CuttingProxy(const std::string& upstream_host, std::uint16_t upstream_port)
      : upstream_(boost::asio::ip::make_address(upstream_host), upstream_port),
        acceptor_(io_, {boost::asio::ip::make_address("127.0.0.1"), 0}),
        guard_(io_.get_executor()) {
    boost::asio::co_spawn(io_, accept_loop(), boost::asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }

  ~CuttingProxy() {
    boost::asio::post(io_, [this] {
      boost::system::error_code ignored;
      acceptor_.close(ignored);
      for (auto& weak : connections_) {
        if (auto c = weak.lock()) c->close();
      }
    });
    guard_.reset();
    thread_.join();
  }

  CuttingProxy(const CuttingProxy&) = delete;
  CuttingProxy& operator=(const CuttingProxy&) = delete;

  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }

  // Arms one cut (see above); `then_refuse`: refuse connections after it.
  void cut_after(std::size_t bytes, bool then_refuse) {
    boost::asio::post(io_, [this, bytes, then_refuse] {
      ++generation_;
      threshold_ = bytes;
      refuse_after_cut_ = then_refuse;
      armed_ = true;
    });
  }
  // Accepts connections again.
  void resume() {
    boost::asio::post(io_, [this] { refusing_ = false; });
  }

  std::size_t cuts() const { return cuts_.load(); }
  std::size_t refused() const { return refused_.load(); }
  std::size_t accepted() const { return accepted_.load(); }
  std::optional<Cut> last_cut() const {
    std::lock_guard lock(mutex_);
    return last_cut_;
  }

 private:
  using tcp = boost::asio::ip::tcp;
  static constexpr auto nothrow = boost::asio::as_tuple(boost::asio::use_awaitable);

  struct Connection {
    explicit Connection(tcp::socket c) : client(std::move(c)), server(client.get_executor()) {}
    void close() {
      boost::system::error_code ignored;
      client.close(ignored);
      server.close(ignored);
    }
    tcp::socket client;
    tcp::socket server;
    std::uint64_t generation = 0;  // the cut_after() the count below is for
    std::size_t since_armed = 0;   // server->client bytes since then
  };

  boost::asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(nothrow);
      if (ec) co_return;  // closed
      if (refusing_) {
        ++refused_;
        boost::system::error_code ignored;
        socket.close(ignored);
        continue;
      }
      ++accepted_;
      auto c = std::make_shared<Connection>(std::move(socket));
      connections_.push_back(c);
      boost::asio::co_spawn(io_, serve(c), boost::asio::detached);
    }
  }

  boost::asio::awaitable<void> serve(std::shared_ptr<Connection> c) {
    auto [ec] = co_await c->server.async_connect(upstream_, nothrow);
    if (ec) {
      c->close();
      co_return;
    }
    boost::asio::co_spawn(io_, pump(c, /*to_client=*/false), boost::asio::detached);
    co_await pump(c, /*to_client=*/true);
  }

  // Copies one direction until either side closes, then closes both.
  boost::asio::awaitable<void> pump(std::shared_ptr<Connection> c, bool to_client) {
    tcp::socket& from = to_client ? c->server : c->client;
    tcp::socket& to = to_client ? c->client : c->server;
    std::vector<char> buffer(64 * 1024);
    for (;;) {
      auto [rec, n] = co_await from.async_read_some(boost::asio::buffer(buffer), nothrow);
      if (rec) break;
      std::size_t send = n;
      bool cut = false;
      if (to_client && armed_) {
        if (c->generation != generation_) {
          c->generation = generation_;
          c->since_armed = 0;
        }
        if (c->since_armed + n > threshold_ && n >= 2) {
          // Always a part: at least one byte forwarded, at least one withheld.
          send = std::clamp<std::size_t>(threshold_ - c->since_armed, 1, n - 1);
          cut = true;
        }
        c->since_armed += send;
      }
      auto [wec, written] =
          co_await boost::asio::async_write(to, boost::asio::buffer(buffer.data(), send), nothrow);
      if (wec) break;
      if (cut) {
        armed_ = false;
        if (refuse_after_cut_) refusing_ = true;
        {
          std::lock_guard lock(mutex_);
          last_cut_ = Cut{c->since_armed, n - send};
        }
        ++cuts_;
        break;
      }
    }
    c->close();
  }

  boost::asio::io_context io_;
  tcp::endpoint upstream_;
  tcp::acceptor acceptor_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::thread thread_;

  // Used on the proxy's thread only.
  std::vector<std::weak_ptr<Connection>> connections_;
  bool armed_ = false;
  bool refuse_after_cut_ = false;
  bool refusing_ = false;
  std::size_t threshold_ = 0;
  std::uint64_t generation_ = 0;

  // Read by the test's thread.
  std::atomic<std::size_t> cuts_{0};
  std::atomic<std::size_t> refused_{0};
  std::atomic<std::size_t> accepted_{0};
  mutable std::mutex mutex_;
  std::optional<Cut> last_cut_;
};

}  // namespace gracekeeper::test_support
