// A leader-election candidate for integration_kube_leader.
// Usage: leader_candidate KUBECONFIG IDENTITY NAMESPACE LEASE_NAME
//                         [LEASE_MS RENEW_MS RETRY_MS]   (default 4000 3000 1000)
// Prints "<unix ms> LEADING <identity>" / "<unix ms> STOPPED <identity>" /
// "<unix ms> RELEASED <identity>" lines; on SIGTERM or SIGINT it stops,
// releases the lease and exits 0.
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>

#include "gracekeeper/kube/client.h"
#include "gracekeeper/kube/config.h"
#include "gracekeeper/kube/leader_election.h"

namespace asio = boost::asio;
namespace kube = gracekeeper::kube;

namespace {

void say(const std::string& what, const std::string& identity) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  std::cout << ms << " " << what << " " << identity << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 8) {
    std::cerr << "usage: leader_candidate KUBECONFIG IDENTITY NAMESPACE LEASE_NAME "
                 "[LEASE_MS RENEW_MS RETRY_MS]\n";
    return 2;
  }
  kube::KubeconfigOptions kc;
  kc.files = {argv[1]};
  auto config = kube::load_kubeconfig(kc);
  if (!config) {
    std::cerr << config.error().format() << "\n";
    return 2;
  }

  kube::LeaderElectionConfig le;
  le.identity = argv[2];
  le.namespace_ = argv[3];
  le.name = argv[4];
  le.lease_duration = std::chrono::milliseconds(argc == 8 ? std::atoi(argv[5]) : 4000);
  le.renew_deadline = std::chrono::milliseconds(argc == 8 ? std::atoi(argv[6]) : 3000);
  le.retry_period = std::chrono::milliseconds(argc == 8 ? std::atoi(argv[7]) : 1000);
  le.on_started_leading = [id = le.identity] { say("LEADING", id); };
  le.on_stopped_leading = [id = le.identity] { say("STOPPED", id); };
  le.on_new_leader = [id = le.identity](const std::string& holder) {
    if (holder != id) say("OBSERVED " + holder + " by", id);
  };

  asio::io_context io;
  kube::Client client(io.get_executor(), *config);
  kube::LeaderElector elector(client, le);
  asio::cancellation_signal stop;
  bool stopping = false;

  int exit_code = 0;
  // Runs the elector again after a lost leadership, until a signal.
  auto campaign = [&]() -> asio::awaitable<void> {
    for (;;) co_await elector.run();
  };
  // A named closure: a coroutine lambda must outlive its coroutine.
  auto release = [&]() -> asio::awaitable<void> {
    auto released = co_await elector.release();
    if (released) {
      say("RELEASED", le.identity);
    } else {
      std::cerr << "release: " << released.error().format() << "\n";
      exit_code = 1;
    }
    io.stop();
  };
  asio::co_spawn(io, campaign(),
                 asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr error) {
                   if (stopping) {
                     asio::co_spawn(io, release(), asio::detached);
                     return;
                   }
                   try {
                     if (error) std::rethrow_exception(error);
                   } catch (const std::exception& x) {
                     std::cerr << "leader election failed: " << x.what() << "\n";
                   }
                   exit_code = 1;
                   io.stop();
                 }));

  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec) return;
    stopping = true;
    stop.emit(asio::cancellation_type::terminal);
  });
  io.run();
  return exit_code;
}
