// The event recorder against a real kube-apiserver (test/cluster/up).
// Usage: integration_kube_events CLUSTER_DIR [gtest flags]
#include "gracekeeper/kube/events.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "../../support/run_on.h"
#include "gracekeeper/kube/client.h"
#include "gracekeeper/kube/config.h"

namespace gracekeeper::kube {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using nlohmann::json;

fs::path g_cluster_dir;

using test_support::run_on;

class EventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KubeconfigOptions kc;
    kc.files = {g_cluster_dir / "kubeconfig"};
    auto config = load_kubeconfig(kc);
    ASSERT_TRUE(config) << config.error().format();
    client_ = std::make_unique<Client>(io_.get_executor(), *config);
    std::random_device rd;
    name_ = "ev-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 100000);
    // A real object to be about, so the reference has a real uid.
    json cm = {{"apiVersion", "v1"},
               {"kind", "ConfigMap"},
               {"metadata", {{"name", name_}, {"namespace", "default"}}}};
    auto created = run_on(io_, client_->create(resources::config_maps, "default", cm));
    ASSERT_TRUE(created) << created.error().format();
    ref_ = {"v1", "ConfigMap", "default", name_, (*created)["metadata"]["uid"]};
    EventRecorderOptions options;
    options.reporting_instance = "gracekeeper-test-0";
    recorder_ = std::make_unique<EventRecorder>(io_.get_executor(), *client_, options);
  }

  void TearDown() override {
    if (client_) run_on(io_, client_->remove(resources::config_maps, "default", name_));
  }

  // Runs the executor until every write has finished.
  void drain() {
    io_.restart();
    io_.run();
    ASSERT_EQ(recorder_->in_flight(), 0u);
  }

  // events.k8s.io/v1 Events about our ConfigMap.
  std::vector<json> events_about() {
    auto list = run_on(io_, client_->list(events_v1, "default"));
    EXPECT_TRUE(list) << list.error().format();
    std::vector<json> out;
    if (!list) return out;
    for (auto& item : (*list)["items"]) {
      if (item["regarding"].value("uid", "") == ref_.uid) out.push_back(item);
    }
    return out;
  }

  asio::io_context io_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<EventRecorder> recorder_;
  std::string name_;
  ObjectRef ref_;
};

TEST_F(EventsTest, RepeatsBecomeOneEventWithASeries) {
  const std::string note = "annotation gracekeeper.dev/drain-seconds: \"ten\" is not a number";
  recorder_->record(ref_, EventType::Warning, "InvalidAnnotation", "Tune", note);
  drain();
  auto events = events_about();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].contains("series")) << events[0].dump();

  for (int i = 2; i <= 5; ++i) {
    recorder_->record(ref_, EventType::Warning, "InvalidAnnotation", "Tune", note);
    drain();
  }
  events = events_about();
  ASSERT_EQ(events.size(), 1u);
  const json& e = events[0];
  EXPECT_EQ(e["series"]["count"], 5) << e.dump();
  EXPECT_TRUE(e["series"].contains("lastObservedTime"));
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_EQ(e["reason"], "InvalidAnnotation");
  EXPECT_EQ(e["action"], "Tune");
  EXPECT_EQ(e["note"], note);
  EXPECT_EQ(e["reportingController"], "gracekeeper.dev/operator");
  EXPECT_EQ(e["reportingInstance"], "gracekeeper-test-0");
  EXPECT_EQ(e["regarding"]["kind"], "ConfigMap");
  EXPECT_EQ(e["regarding"]["name"], name_);
  EXPECT_EQ(e["regarding"]["namespace"], "default");
  EXPECT_EQ(recorder_->stats().created, 1u);
  EXPECT_EQ(recorder_->stats().patched, 4u);
  EXPECT_EQ(recorder_->stats().failed, 0u);

  // What kubectl describe reads: the core/v1 view of the same Event.
  auto core = run_on(
      io_, client_->get(resources::events, "default", e["metadata"]["name"].get<std::string>()));
  ASSERT_TRUE(core) << core.error().format();
  EXPECT_EQ((*core)["involvedObject"]["uid"], ref_.uid);
  EXPECT_EQ((*core)["reason"], "InvalidAnnotation");
  EXPECT_EQ((*core)["message"], note);
  EXPECT_EQ((*core)["type"], "Warning");
  std::cout << "    core/v1 view: count=" << core->value("count", 0)
            << " reportingComponent=" << core->value("reportingComponent", "") << "\n";

  // Another note is another Event.
  recorder_->record(ref_, EventType::Warning, "InvalidAnnotation", "Tune", "another note");
  drain();
  events = events_about();
  ASSERT_EQ(events.size(), 2u);
  int with_series = 0;
  for (auto& ev : events) {
    if (ev["note"] == "another note") {
      EXPECT_FALSE(ev.contains("series"));
    }
    if (ev.contains("series")) ++with_series;
  }
  EXPECT_EQ(with_series, 1);
}

TEST_F(EventsTest, BurstBeforeTheFirstWriteIsCoalesced) {
  for (int i = 0; i < 3; ++i) {
    recorder_->record(ref_, EventType::Normal, "Tuned", "Tune", "preStop 0 -> 15 s");
  }
  drain();
  auto events = events_about();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["series"]["count"], 3);
  EXPECT_EQ(events[0]["type"], "Normal");
  EXPECT_EQ(recorder_->stats().created, 1u);
  EXPECT_EQ(recorder_->stats().patched, 0u);
  EXPECT_EQ(recorder_->stats().failed, 0u);
}

TEST_F(EventsTest, FailuresAreCountedNotThrown) {
  ObjectRef bad = ref_;
  bad.namespace_ = "no-such-namespace-" + name_;
  recorder_->record(bad, EventType::Warning, "X", "Tune", "into a namespace that does not exist");
  drain();
  EXPECT_EQ(recorder_->stats().failed, 1u);
  EXPECT_EQ(recorder_->stats().created, 0u);
}

// While the operator's queue has work, events wait (they must not slow down
// the work they report), then go out when it is done.
TEST_F(EventsTest, WaitWhileBusyThenAreWritten) {
  bool busy = true;
  EventRecorderOptions options;
  options.reporting_instance = "gracekeeper-test-0";
  options.busy = [&] { return busy; };
  recorder_ = std::make_unique<EventRecorder>(io_.get_executor(), *client_, options);
  recorder_->record(ref_, EventType::Normal, "Tuned", "Tune", "deferred");
  io_.restart();
  io_.run_for(std::chrono::milliseconds(400));
  // (Not asked of the server: listing runs the executor until all work is done.)
  EXPECT_EQ(recorder_->in_flight(), 1u);
  EXPECT_EQ(recorder_->stats().created + recorder_->stats().failed, 0u) << "written while busy";
  busy = false;
  const auto freed = std::chrono::steady_clock::now();
  drain();
  EXPECT_LT(std::chrono::steady_clock::now() - freed, std::chrono::seconds(5));
  auto events = events_about();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["note"], "deferred");
}

// ... but never longer than max_defer: a queue that is never empty does not
// silence them. They are then written one at a time, not max_writers, and
// one per overdue_interval: a trickle beside the work.
TEST_F(EventsTest, WaitAtMostMaxDeferThenOneAtATime) {
  EventRecorderOptions options;
  options.reporting_instance = "gracekeeper-test-0";
  options.busy = [] { return true; };
  options.max_defer = std::chrono::milliseconds(300);
  options.overdue_interval = std::chrono::milliseconds(200);
  options.max_writers = 4;
  recorder_ = std::make_unique<EventRecorder>(io_.get_executor(), *client_, options);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) {
    recorder_->record(ref_, EventType::Normal, "Tuned", "Tune",
                      "busy forever " + std::to_string(i));
  }
  std::size_t most_writing = 0;
  io_.restart();
  // One handler at a time: every writer started is seen.
  while (recorder_->in_flight() > 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    io_.run_one_for(std::chrono::milliseconds(5));
    most_writing = std::max(most_writing, recorder_->writing());
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(recorder_->in_flight(), 0u);
  EXPECT_GE(waited, std::chrono::milliseconds(300 + 3 * 200));
  EXPECT_EQ(most_writing, 1u);
  EXPECT_EQ(recorder_->stats().created, 4u);
  ASSERT_EQ(events_about().size(), 4u);
}

}  // namespace
}  // namespace gracekeeper::kube

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::cerr << "usage: integration_kube_events CLUSTER_DIR [gtest flags]\n";
    return 2;
  }
  gracekeeper::kube::g_cluster_dir = argv[1];
  return RUN_ALL_TESTS();
}
