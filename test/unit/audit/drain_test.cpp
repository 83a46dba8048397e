// A deleted pod's drain, read from its last status (audit/drain.h).
#include "gracekeeper/audit/drain.h"

#include <gtest/gtest.h>

#include "gracekeeper/core/time.h"

namespace gracekeeper::controller {
namespace {

using json = nlohmann::json;

// Deleted at 12:00:00 with a grace of 20 s (deletionTimestamp 12:00:20),
// a preStop sleep of 5 s: SIGTERM at 12:00:05.
json pod(json statuses, json pre_stop = json{{"sleep", {{"seconds", 5}}}}) {
  json app{
      {"name", "app"}, {"image", "app:1"}, {"ports", json::array({{{"containerPort", 8080}}})}};
  if (!pre_stop.is_null()) app["lifecycle"] = {{"preStop", pre_stop}};
  return json{{"metadata",
               {{"name", "web-6d4b9c7f5d-abcde"},
                {"namespace", "shop"},
                {"deletionTimestamp", "2026-12-07T12:00:20Z"},
                {"deletionGracePeriodSeconds", 20}}},
              {"spec", {{"terminationGracePeriodSeconds", 20}, {"containers", json::array({app})}}},
              {"status", {{"containerStatuses", std::move(statuses)}}}};
}

json terminated(const std::string& name, const std::string& finished, int exit_code) {
  return json{
      {"name", name},
      {"state",
       {{"terminated", {{"exitCode", exit_code}, {"finishedAt", finished}, {"reason", "Error"}}}}}};
}

TEST(MeasureDrain, SigtermToExit) {
  const auto m = measure_drain(pod(json::array({terminated("app", "2026-12-07T12:00:12Z", 0)})));
  ASSERT_TRUE(m.has_value()) << m.error();
  ASSERT_TRUE(m->has_value());
  EXPECT_EQ((*m)->sample.seconds, 7);  // 12:00:05 -> 12:00:12
  EXPECT_FALSE((*m)->sample.cut_short);
  EXPECT_EQ((*m)->container, "app");
  EXPECT_EQ((*m)->wait, 5);
  EXPECT_EQ((*m)->grace, 20);
  EXPECT_EQ((*m)->sample.at, *core::parse_rfc3339("2026-12-07T12:00:12Z"));
}

TEST(MeasureDrain, AKillAtTheGraceIsCutShortWithTheTimeItWasGiven) {
  const auto m = measure_drain(pod(json::array({terminated("app", "2026-12-07T12:00:21Z", 137)})));
  ASSERT_TRUE(m.has_value() && m->has_value());
  EXPECT_TRUE((*m)->sample.cut_short);
  EXPECT_EQ((*m)->sample.seconds, 15);  // grace 20 - preStop 5
  EXPECT_EQ((*m)->exit_code, 137);
}

TEST(MeasureDrain, A137LongBeforeTheGraceIsNoKillAtTheGrace) {
  // The app killed itself (or OOM) 10 s in: not the kubelet's kill.
  const auto m = measure_drain(pod(json::array({terminated("app", "2026-12-07T12:00:10Z", 137)})));
  ASSERT_TRUE(m.has_value() && m->has_value());
  EXPECT_FALSE((*m)->sample.cut_short);
  EXPECT_EQ((*m)->sample.seconds, 5);
}

TEST(MeasureDrain, NothingWhileAnAppContainerRunsOrThePodIsNotDeleted) {
  json running{{"name", "app"}, {"state", {{"running", {{"startedAt", "2026-12-07T11:00:00Z"}}}}}};
  const auto m = measure_drain(pod(json::array({running})));
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->has_value());
  json serving = pod(json::array({terminated("app", "2026-12-07T12:00:12Z", 0)}));
  serving["metadata"].erase("deletionTimestamp");
  EXPECT_FALSE(pod_terminating(serving["metadata"]));
  ASSERT_TRUE(measure_drain(serving).has_value());
  EXPECT_FALSE(measure_drain(serving)->has_value());
}

TEST(MeasureDrain, WhatCannotBeMeasuredSaysWhy) {
  const auto unknown_hook =
      measure_drain(pod(json::array({terminated("app", "2026-12-07T12:00:12Z", 0)}),
                        json{{"exec", {{"command", json::array({"/bin/drain"})}}}}));
  ASSERT_FALSE(unknown_hook.has_value());
  EXPECT_NE(unknown_hook.error().find("unknown length"), std::string::npos);

  json forced = pod(json::array({terminated("app", "2026-12-07T12:00:00Z", 137)}));
  forced["metadata"]["deletionGracePeriodSeconds"] = 0;
  ASSERT_FALSE(measure_drain(forced).has_value());

  json no_time = pod(json::array({terminated("app", "", 0)}));
  ASSERT_FALSE(measure_drain(no_time).has_value());
  EXPECT_NE(measure_drain(no_time).error().find("container app"), std::string::npos);
}

TEST(MeasureDrain, TheLongestAppContainerNativeSidecarsLeftOut) {
  json p = pod(json::array({terminated("app", "2026-12-07T12:00:09Z", 0),
                            terminated("worker", "2026-12-07T12:00:14Z", 0)}));
  p["spec"]["containers"].push_back({{"name", "worker"}, {"image", "w:1"}});
  p["spec"]["initContainers"] =
      json::array({{{"name", "proxy"}, {"image", "p:1"}, {"restartPolicy", "Always"}}});
  const auto m = measure_drain(p);
  ASSERT_TRUE(m.has_value() && m->has_value()) << (m ? "" : m.error());
  EXPECT_EQ((*m)->container, "worker");
  EXPECT_EQ((*m)->sample.seconds, 9);
}

TEST(MeasureDrain, AMeshProxyIsNoAppContainer) {
  // istio-proxy got SIGTERM at the deletion and was killed at the grace: the
  // app's drain is still 4 s, and no kill of the app's.
  json p = pod(json::array({terminated("app", "2026-12-07T12:00:09Z", 0),
                            terminated("istio-proxy", "2026-12-07T12:00:20Z", 137)}));
  p["spec"]["containers"].push_back({{"name", "istio-proxy"},
                                     {"image", "proxyv2:1"},
                                     {"ports", json::array({{{"containerPort", 15090}}})}});
  const auto m = measure_drain(p);
  ASSERT_TRUE(m.has_value() && m->has_value()) << (m ? "" : m.error());
  EXPECT_EQ((*m)->container, "app");
  EXPECT_EQ((*m)->sample.seconds, 4);
  EXPECT_FALSE((*m)->sample.cut_short);
}

}  // namespace
}  // namespace gracekeeper::controller
