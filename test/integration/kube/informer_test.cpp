// The informer against a real kube-apiserver (test/cluster/up): it must stay
// equal to a fresh LIST through changes, an API server restart and a 410.
// Usage: integration_kube_informer CLUSTER_DIR [gtest flags]
#include "gracekeeper/kube/informer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>

#include "../../support/proxy_cutting.h"
#include "../../support/reflector_access.h"
#include "gracekeeper/kube/client.h"
#include "gracekeeper/kube/config.h"

namespace gracekeeper::kube {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

fs::path g_cluster_dir;
fs::path g_scripts;  // test/cluster

json config_map(const std::string& name, const std::string& v) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}}},
          {"data", {{"v", v}}}};
}

std::optional<std::string> project_v(const json& o) {
  auto data = o.find("data");
  if (data == o.end() || !data->is_object()) return std::string{};
  return data->value("v", "");
}

VersionMap versions_of(const json& list) {
  VersionMap out;
  for (const auto& item : list.at("items")) {
    out.emplace(object_key(item), item["metadata"]["resourceVersion"].get<std::string>());
  }
  return out;
}

class InformerIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    KubeconfigOptions ko;
    ko.files = {g_cluster_dir / "kubeconfig"};
    auto config = load_kubeconfig(ko);
    ASSERT_TRUE(config) << config.error().format();
    client_.emplace(io_.get_executor(), *config);
    std::random_device rd;
    ns_ = "informer-" + std::to_string(rd() % 1000000);
    json ns = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns_}}}};
    auto created = drive(client_->create(resources::namespaces, "", ns));
    ASSERT_TRUE(created) << created.error().format();

    make_informer(*client_);
  }

  // The informer under test, on `client` (the direct one, or one through a proxy).
  void make_informer(Client& client) {
    InformerOptions o;
    o.namespace_ = ns_;
    o.page_size = 3;  // several pages with a handful of objects
    // Shorter than production so the outage test does not wait 30 s.
    o.initial_backoff = 200ms;
    o.max_backoff = 2s;
    informer_.emplace(client, resources::config_maps, o, project_v);
    InformerHandlers h;
    h.on_add = [this](const std::string& k) { log_.push_back("add " + k); };
    h.on_update = [this](const std::string& k) { log_.push_back("update " + k); };
    h.on_delete = [this](const std::string& k) { log_.push_back("delete " + k); };
    informer_->add_handlers(h);
  }

  void TearDown() override {
    stop_informer();
    if (client_) (void)drive(client_->remove(resources::namespaces, "", ns_));
  }

  void start_informer() {
    running_ = true;
    asio::co_spawn(io_, informer_->run(), [this](std::exception_ptr e) {
      running_ = false;
      if (e) std::rethrow_exception(e);
    });
  }
  void stop_informer() {
    if (!running_) return;
    informer_->stop();
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (running_ && std::chrono::steady_clock::now() < deadline) io_.run_one_for(100ms);
    EXPECT_FALSE(running_) << "run() did not end after stop()";
  }

  // Runs `task` to completion while the informer keeps running on io_.
  template <class T>
  T drive(asio::awaitable<T> task) {
    std::optional<T> out;
    std::exception_ptr error;
    asio::co_spawn(io_, std::move(task), [&](std::exception_ptr e, T value) {
      error = e;
      if (!e) out.emplace(std::move(value));
    });
    while (!out && !error) {
      if (io_.stopped()) io_.restart();
      io_.run_one_for(100ms);
    }
    if (error) std::rethrow_exception(error);
    return std::move(*out);
  }

  // Polls `pred` while the informer runs.
  bool run_until(const std::function<bool()>& pred, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (io_.stopped()) io_.restart();
      io_.run_one_for(50ms);
    }
    return true;
  }

  // Converged: the cache's keys and resourceVersions equal a fresh LIST.
  bool converged(std::chrono::seconds timeout = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    VersionMap listed;
    while (std::chrono::steady_clock::now() < deadline) {
      auto list = drive(client_->list_all(resources::config_maps, ns_));
      if (list) {
        listed = versions_of(*list);
        if (informer_->has_synced() && listed == informer_->versions()) return true;
      }
      run_until([] { return false; }, 1s);  // let the informer catch up
    }
    ADD_FAILURE() << "not converged: list has " << listed.size() << " objects, cache "
                  << informer_->size() << "; last error: " << informer_->last_error();
    return false;
  }

  void create(const std::string& name, const std::string& v, const std::string& blob = {}) {
    json object = config_map(name, v);
    if (!blob.empty()) object["data"]["blob"] = blob;
    auto r = drive(client_->create(resources::config_maps, ns_, object));
    ASSERT_TRUE(r) << r.error().format();
  }
  void update(const std::string& name, const std::string& v) {
    json patch = {{"data", {{"v", v}}}};
    auto r = drive(client_->merge_patch(resources::config_maps, ns_, name, patch));
    ASSERT_TRUE(r) << r.error().format();
  }
  void remove(const std::string& name) {
    auto r = drive(client_->remove(resources::config_maps, ns_, name));
    ASSERT_TRUE(r) << r.error().format();
  }
  std::string key(const std::string& name) const { return ns_ + "/" + name; }
  bool logged(const std::string& line) const {
    return std::find(log_.begin(), log_.end(), line) != log_.end();
  }

  asio::io_context io_;
  std::optional<Client> client_;
  std::optional<Client> proxied_client_;  // declared before the informer that may use it
  std::optional<Informer<std::string>> informer_;
  std::string ns_;
  std::vector<std::string> log_;
  bool running_ = false;
};

TEST_F(InformerIntegration, FollowsAddsUpdatesDeletes) {
  for (int i = 0; i < 7; ++i) create("pre-" + std::to_string(i), "0");
  start_informer();
  ASSERT_TRUE(run_until([&] { return informer_->has_synced(); }, 60s));
  EXPECT_EQ(informer_->size(), 7u);  // paginated: 3 per page

  create("a", "1");
  create("b", "1");
  update("a", "2");
  remove("pre-0");
  ASSERT_TRUE(converged());
  ASSERT_NE(informer_->get(key("a")), nullptr);
  EXPECT_EQ(*informer_->get(key("a")), "2");
  EXPECT_EQ(informer_->get(key("pre-0")), nullptr);
  EXPECT_TRUE(logged("add " + key("b")));
  EXPECT_TRUE(logged("update " + key("a")));
  EXPECT_TRUE(logged("delete " + key("pre-0")));
  EXPECT_EQ(informer_->counters().lists, 1u);
  EXPECT_EQ(informer_->counters().relists, 0u);
}

TEST_F(InformerIntegration, SurvivesApiServerRestart) {
  create("before", "1");
  start_informer();
  ASSERT_TRUE(run_until([&] { return informer_->has_synced(); }, 60s));

  // The restart runs in the background; the informer runs meanwhile.
  const fs::path done = g_cluster_dir / ("restart-done-" + ns_);
  fs::remove(done);
  std::string cmd = "(" + (g_scripts / "restart-apiserver").string() + " '" +
                    g_cluster_dir.string() + "' --down-seconds 15 > '" + done.string() +
                    ".log' 2>&1; echo $? > '" + done.string() + "') &";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ASSERT_TRUE(run_until([&] { return fs::exists(done) && fs::file_size(done) > 0; }, 180s));
  std::ifstream rc(done);
  int status = -1;
  rc >> status;
  ASSERT_EQ(status, 0) << "restart-apiserver failed, see " << done << ".log";

  create("after", "1");
  update("before", "2");
  ASSERT_TRUE(converged(120s));
  EXPECT_EQ(*informer_->get(key("before")), "2");
  EXPECT_GE(informer_->counters().watch_restarts, 1u);
  EXPECT_GE(informer_->counters().watch_errors + informer_->counters().relists, 1u);
  std::cerr << "after restart: lists=" << informer_->counters().lists
            << " relists=" << informer_->counters().relists
            << " watch_restarts=" << informer_->counters().watch_restarts
            << " watch_errors=" << informer_->counters().watch_errors << "\n";
}

TEST_F(InformerIntegration, RelistsAfterCompactionAndEmitsTheGap) {
  create("kept", "1");
  create("changed", "1");
  create("deleted", "1");
  start_informer();
  ASSERT_TRUE(run_until([&] { return informer_->has_synced(); }, 60s));
  ASSERT_TRUE(converged());
  const std::string before_gap = informer_->resource_version();

  // The informer misses everything from here on (a partition, say)...
  stop_informer();
  log_.clear();
  create("added", "1");
  update("changed", "2");
  remove("deleted");
  // ... and its resourceVersion is compacted away in etcd.
  std::string cmd =
      (g_scripts / "compact").string() + " '" + g_cluster_dir.string() + "' > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);

  // Test hook: resume watching from an old, compacted resourceVersion. The
  // API server's watch cache only serves versions since it started, so "1"
  // is refused with 410 whether or not the cache still holds before_gap.
  ReflectorTestAccess::restart_watch_from(informer_->reflector(), "1");
  start_informer();
  ASSERT_TRUE(converged());
  EXPECT_GE(informer_->counters().relists, 1u);
  EXPECT_TRUE(logged("add " + key("added")));
  EXPECT_TRUE(logged("update " + key("changed")));
  EXPECT_TRUE(logged("delete " + key("deleted")));
  EXPECT_FALSE(logged("update " + key("kept")));
  EXPECT_EQ(*informer_->get(key("changed")), "2");
  EXPECT_NE(informer_->resource_version(), before_gap);
}

TEST_F(InformerIntegration, RecoversFromAWatchCutInTheMiddleOfAChunk) {
  // The informer talks to the API server through a proxy; the test's own
  // writes and LISTs go straight to the server.
  KubeconfigOptions ko;
  ko.files = {g_cluster_dir / "kubeconfig"};
  auto config = load_kubeconfig(ko);
  ASSERT_TRUE(config) << config.error().format();
  const auto colon = config->server.rfind(':');
  ASSERT_TRUE(config->server.starts_with("https://127.0.0.1:")) << config->server;
  const auto server_port = static_cast<std::uint16_t>(std::stoi(config->server.substr(colon + 1)));
  test_support::CuttingProxy proxy("127.0.0.1", server_port);
  // TLS goes through the proxy untouched, and the API server's certificate
  // (test/cluster/up) has IP:127.0.0.1 among its names, so the client still
  // verifies it, host name included, at the proxy's address.
  ClusterConfig proxied = *config;
  proxied.server = "https://127.0.0.1:" + std::to_string(proxy.port());
  proxied_client_.emplace(io_.get_executor(), proxied);
  make_informer(*proxied_client_);

  for (int i = 0; i < 5; ++i) create("pre-" + std::to_string(i), "0");
  start_informer();
  ASSERT_TRUE(run_until([&] { return informer_->has_synced(); }, 60s));
  ASSERT_TRUE(converged());
  // The streaming list's connection, which goes on as the watch.
  ASSERT_TRUE(run_until([&] { return proxy.accepted() >= 1; }, 10s)) << proxy.accepted();
  const auto errors_before = informer_->counters().watch_errors;

  // A ConfigMap of 300 KB: its ADDED event is one HTTP chunk spread over
  // some twenty TLS records. The proxy forwards the first 100,000 bytes of
  // it, which ends inside a record and inside the chunk, and then closes
  // the connection and refuses new ones: the informer is cut off.
  proxy.cut_after(100'000, /*then_refuse=*/true);
  const std::string blob(300'000, 'x');
  create("big", "1", blob);
  ASSERT_TRUE(run_until([&] { return proxy.cuts() == 1; }, 30s)) << "the watch was not cut";
  ASSERT_TRUE(proxy.last_cut());
  EXPECT_EQ(proxy.last_cut()->forwarded, 100'000u);
  EXPECT_GT(proxy.last_cut()->withheld, 0u);

  // Changes while it is cut off.
  create("during", "1");
  update("pre-1", "2");
  remove("pre-2");
  update("big", "2");
  ASSERT_TRUE(run_until(
      [&] { return informer_->counters().watch_errors > errors_before && proxy.refused() >= 1; },
      30s))
      << "the informer did not notice the cut or did not try to reconnect; last error: "
      << informer_->last_error();
  EXPECT_THAT(informer_->last_error(), ::testing::HasSubstr("reading the watch stream"));
  // Nothing of the half-received event, nor of what followed, reached the cache.
  EXPECT_EQ(informer_->get(key("big")), nullptr);
  EXPECT_EQ(informer_->get(key("during")), nullptr);
  ASSERT_NE(informer_->get(key("pre-1")), nullptr);
  EXPECT_EQ(*informer_->get(key("pre-1")), "0");
  std::cerr << "cut off: " << informer_->last_error() << "\n";

  // Back on, with more changes after the reconnection.
  proxy.resume();
  create("after", "1");
  update("during", "2");
  remove("pre-3");
  ASSERT_TRUE(converged());
  ASSERT_NE(informer_->get(key("big")), nullptr);
  EXPECT_EQ(*informer_->get(key("big")), "2");
  EXPECT_EQ(*informer_->get(key("during")), "2");
  EXPECT_EQ(*informer_->get(key("pre-1")), "2");
  EXPECT_EQ(informer_->get(key("pre-2")), nullptr);
  EXPECT_EQ(informer_->get(key("pre-3")), nullptr);
  EXPECT_TRUE(logged("add " + key("big")));
  EXPECT_TRUE(logged("delete " + key("pre-2")));
  // Recovered by watching again from its resourceVersion, not by a relist.
  EXPECT_EQ(informer_->counters().lists, 1u);
  EXPECT_EQ(informer_->counters().relists, 0u);
  EXPECT_GE(informer_->counters().watch_restarts, 2u);
  std::cerr << "after the cut: watch_restarts=" << informer_->counters().watch_restarts
            << " watch_errors=" << informer_->counters().watch_errors
            << " refused connections=" << proxy.refused() << "\n";
  stop_informer();  // before the proxy goes
}

}  // namespace
}  // namespace gracekeeper::kube

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::cerr << "usage: integration_kube_informer CLUSTER_DIR [gtest flags]\n";
    return 2;
  }
  gracekeeper::kube::g_cluster_dir = argv[1];
  gracekeeper::kube::g_scripts = std::filesystem::path{GK_CLUSTER_SCRIPTS};
  return RUN_ALL_TESTS();
}
