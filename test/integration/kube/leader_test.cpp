// Leader election between leader_candidate processes against a real
// kube-apiserver (test/cluster/up). Timings of the candidates: lease 4 s,
// renew deadline 3 s, retry 1 s.
// Usage: integration_kube_leader CLUSTER_DIR [gtest flags]
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gracekeeper/kube/client.h"
#include "gracekeeper/kube/config.h"
#include "gracekeeper/kube/leader_election.h"

extern char** environ;

#include "../../support/run_on.h"

namespace gracekeeper::kube {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

fs::path g_cluster_dir;

constexpr auto kLease = 4000ms;
constexpr auto kRenew = 3000ms;
constexpr auto kRetry = 1000ms;

using test_support::run_on;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Candidate {
  std::string identity;
  pid_t pid = -1;
  fs::path log;
};

class LeaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KubeconfigOptions kc;
    kc.files = {g_cluster_dir / "kubeconfig"};
    auto config = load_kubeconfig(kc);
    ASSERT_TRUE(config) << config.error().format();
    client_ = std::make_unique<Client>(io_.get_executor(), *config);
    std::random_device rd;
    lease_ = "le-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 100000);
    dir_ = fs::temp_directory_path() / lease_;
    fs::create_directories(dir_);
  }

  void TearDown() override {
    for (auto& c : candidates_) {
      if (c.pid > 0) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
        c.pid = -1;
      }
      if (HasFailure()) std::cout << "--- " << c.identity << ":\n" << read_file(c.log);
    }
    if (client_) run_on(io_, client_->remove(resources::leases, "default", lease_));
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  Candidate& start(const std::string& identity) {
    Candidate c;
    c.identity = identity;
    c.log = dir_ / (identity + ".log");
    std::string kubeconfig = (g_cluster_dir / "kubeconfig").string();
    std::vector<std::string> args = {GK_LEADER_CANDIDATE,
                                     kubeconfig,
                                     identity,
                                     "default",
                                     lease_,
                                     std::to_string(kLease.count()),
                                     std::to_string(kRenew.count()),
                                     std::to_string(kRetry.count())};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(rc, 0) << "posix_spawn " << argv[0];
    c.pid = pid;
    candidates_.push_back(c);
    return candidates_.back();
  }

  // "" when absent or released.
  std::string holder() {
    auto got = run_on(io_, client_->get(resources::leases, "default", lease_));
    if (!got) return got.error().reason == ApiError::Reason::NotFound ? "" : "<error>";
    return lease_record_from_json(*got).holder_identity;
  }

  // Polls until the holder is `identity`; returns how long it took.
  std::optional<std::chrono::milliseconds> wait_for_holder(const std::string& identity,
                                                           std::chrono::milliseconds limit) {
    auto start = SteadyClock::now();
    while (SteadyClock::now() - start < limit) {
      if (holder() == identity) {
        return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start);
      }
      std::this_thread::sleep_for(50ms);
    }
    return std::nullopt;
  }

  // Lines of a candidate's log that contain `word`.
  static int count_lines(const Candidate& c, const std::string& word) {
    std::istringstream in(read_file(c.log));
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.find(" " + word + " ") != std::string::npos) ++n;
    }
    return n;
  }

  static void signal_and_reap(Candidate& c, int sig) {
    ::kill(c.pid, sig);
    int status = 0;
    ::waitpid(c.pid, &status, 0);
    c.pid = -1;
    if (sig == SIGTERM) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << c.identity << " status " << status;
    }
  }

  asio::io_context io_;
  std::unique_ptr<Client> client_;
  std::string lease_;
  fs::path dir_;
  std::deque<Candidate> candidates_;  // stable references: start() keeps them valid
};

TEST_F(LeaderTest, OneLeaderFailoverOnKillAndFastHandOverOnTerm) {
  start("cand-a");
  start("cand-b");
  std::map<std::string, int> seen;
  auto start_time = SteadyClock::now();
  // A leader within a retry or two, then exactly one, unchanged, for ~10 s.
  std::string first;
  while (SteadyClock::now() - start_time < 10s) {
    std::string h = holder();
    if (!h.empty()) {
      ++seen[h];
      if (first.empty()) first = h;
    } else {
      EXPECT_TRUE(first.empty()) << "lease lost its holder after " << first;
      EXPECT_LT(SteadyClock::now() - start_time, 5s) << "no leader elected";
    }
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(seen.size(), 1u) << "holder changed without a failure";
  EXPECT_TRUE(first == "cand-a" || first == "cand-b") << first;
  Candidate* leader = &candidates_[first == "cand-a" ? 0 : 1];
  Candidate* follower = &candidates_[first == "cand-a" ? 1 : 0];
  EXPECT_EQ(count_lines(*leader, "LEADING"), 1);
  EXPECT_EQ(count_lines(*follower, "LEADING"), 0);
  EXPECT_EQ(count_lines(*leader, "STOPPED"), 0);

  // SIGKILL: nothing releases the lease; the follower takes over once it
  // expires (at most lease duration after the kill) plus one retry.
  signal_and_reap(*leader, SIGKILL);
  auto took = wait_for_holder(follower->identity, kLease + kRetry + 3s);
  ASSERT_TRUE(took) << "no takeover after SIGKILL";
  std::cout << "    takeover after SIGKILL: " << took->count() << " ms (lease " << kLease.count()
            << " ms, retry " << kRetry.count() << " ms)\n";
  EXPECT_LE(*took, kLease + kRetry + 500ms);
  EXPECT_GE(*took, kLease - kRetry - 500ms) << "taken before the lease expired";

  // A new second candidate; SIGTERM releases the lease, so the new one
  // takes over at its next retry, long before a lease duration.
  Candidate& third = start("cand-c");
  // Half a retry off the new candidate's retry phase, so the figure below
  // is not a lucky alignment.
  std::this_thread::sleep_for(2500ms);
  ASSERT_EQ(holder(), follower->identity);
  EXPECT_EQ(count_lines(third, "LEADING"), 0);
  signal_and_reap(*follower, SIGTERM);
  auto handed = wait_for_holder(third.identity, kLease + kRetry + 3s);
  ASSERT_TRUE(handed) << "no takeover after SIGTERM";
  std::cout << "    takeover after SIGTERM (released lease): " << handed->count() << " ms\n";
  EXPECT_LE(*handed, kRetry + 500ms);
  EXPECT_EQ(count_lines(*follower, "RELEASED"), 1);
  EXPECT_EQ(count_lines(*follower, "STOPPED"), 1);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(count_lines(third, "LEADING"), 1);
}

}  // namespace
}  // namespace gracekeeper::kube

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::cerr << "usage: integration_kube_leader CLUSTER_DIR [gtest flags]\n";
    return 2;
  }
  gracekeeper::kube::g_cluster_dir = argv[1];
  return RUN_ALL_TESTS();
}
