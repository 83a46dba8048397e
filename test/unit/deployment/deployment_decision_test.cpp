// decide_deployment called directly, one row per rule: what the stores hold
// about a Deployment (its object, the namespace's policies, their figures,
// a refused write, whether it still rolls) in, the decision out. No
// reconciler, no I/O: the reconciler's and admission's tests cover what
// they do around it.
#include "gracekeeper/deployment/deployment_decision.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "../../support/reconciler_fakes.h"
#include "gracekeeper/core/time.h"

namespace gracekeeper::controller::testing {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;

// What one row starts from: the test World's Deployment and policy, each
// changed by the row.
struct Inputs {
  json deployment = testing::deployment();
  std::vector<json> policies{policy()};
  bool measured = true;  // the policy has a figure (Static)
  double seconds = 4;    // ... of this many seconds
  TimePoint now = kStart;
  bool behind_service = true;  // a Service selects the pods
  bool rolling = false;
  std::optional<BlockedWrite> blocked;
  bool in_request = false;  // an admission request's object
};

// decide_deployment on `in`, with the inputs kept alive for the decision.
DeploymentDecision decide(const Inputs& in) {
  const auto cached = project_deployment(in.deployment);
  EXPECT_TRUE(cached.has_value());
  const auto deployment = cached->project();
  NamespaceInputs ns;
  for (const json& p : in.policies) {
    NamespaceInputs::Policy policy{std::make_shared<const CachedPolicy>(*project_policy(p)), {}};
    if (in.measured) policy.figure = NamespaceInputs::Figure{in.seconds, true};
    ns.policies.push_back(std::move(policy));
  }
  // The fixture's pods carry tier=web.
  if (in.behind_service) {
    ns.services.push_back(std::make_shared<const CachedService>(CachedService{{{"tier", "web"}}}));
  }
  DeploymentFacts facts;
  facts.deployment = &deployment;
  facts.uid = cached->uid;
  facts.generation = cached->generation;
  facts.ns = &ns;
  facts.now = in.now;
  facts.rolling = in.rolling;
  facts.blocked = in.blocked ? &*in.blocked : nullptr;
  facts.in_request = in.in_request;
  return decide_deployment(facts);
}

std::vector<std::string> reasons(const DeploymentDecision& d) {
  std::vector<std::string> out;
  for (const auto& e : d.events) out.push_back(e.reason);
  return out;
}

// The Deployment with the untuned row's write applied (at kStart, with a
// figure of `seconds`), as the server would hold it after the tune.
json tuned(double seconds = 4) {
  Inputs in;
  in.seconds = seconds;
  json d = testing::deployment();
  merge(d, decide(in).write->configuration);
  return d;
}

// tuned(), its grace set back to 30 s by another writer.
json set_back(json d) {
  d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 30;
  return d;
}

const TimePoint kRepairedAt = kStart + std::chrono::seconds(60);

// tuned() set back once and repaired at kRepairedAt, as the server holds it.
json repaired() {
  Inputs in;
  in.deployment = set_back(tuned());
  in.now = kRepairedAt;
  json d = in.deployment;
  merge(d, decide(in).write->configuration);
  return d;
}

// The `setBack` a write records in gracekeeper.dev/applied; "" for none.
std::string recorded_set_back(const DeploymentDecision& d) {
  if (!d.write) return "<no write>";
  const json& a = d.write->configuration["metadata"]["annotations"]["gracekeeper.dev/applied"];
  return json::parse(a.get<std::string>()).value("setBack", "");
}

json& grace_of(json& d) {
  return d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"];
}

// tuned() (grace 46), the grace then raised to 70 by the user, and tuned
// again at a figure of 30 s (grace 85), as the server holds it.
json raised_then_retuned() {
  Inputs in;
  in.deployment = tuned();
  grace_of(in.deployment) = 70;
  in.seconds = 30;
  in.now = kStart + std::chrono::seconds(4000);
  json d = in.deployment;
  merge(d, decide(in).write->configuration);
  return d;
}

struct Row {
  std::string name;
  std::function<void(Inputs&)> given;
  std::function<void(const DeploymentDecision&)> then;
};

// ctest and gtest name a row by its name, not its bytes.
void PrintTo(const Row& row, std::ostream* os) {
  *os << row.name;
}

class DecideDeployment : public ::testing::TestWithParam<Row> {};

TEST_P(DecideDeployment, Decides) {
  Inputs in;
  GetParam().given(in);
  GetParam().then(decide(in));
}

const Row kRows[] = {
    {"AnUntunedDeploymentIsWrittenWithTheBudget", [](Inputs&) {},
     [](const DeploymentDecision& d) {
       EXPECT_EQ(d.policy_key, "shop/default");
       ASSERT_TRUE(d.write);
       const json& spec = d.write->configuration["spec"]["template"]["spec"];
       EXPECT_EQ(spec["terminationGracePeriodSeconds"], 46);
       EXPECT_EQ(spec["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"], 6);
       EXPECT_FALSE(d.write->retune);
       EXPECT_TRUE(d.state.pending);
       EXPECT_FALSE(d.state.compliant);
     }},
    {"ATunedDeploymentIsCompliantAndNotWritten", [](Inputs& in) { in.deployment = tuned(); },
     [](const DeploymentDecision& d) {
       EXPECT_FALSE(d.write);
       EXPECT_TRUE(d.state.compliant);
       EXPECT_FALSE(d.state.pending);
       EXPECT_FALSE(d.state.violating);
     }},
    {"WhileOldPodsRollItIsNotCompliantYet",
     [](Inputs& in) {
       in.deployment = tuned();
       in.rolling = true;
     },
     [](const DeploymentDecision& d) {
       EXPECT_FALSE(d.write);
       EXPECT_TRUE(d.state.rolling);
       EXPECT_FALSE(d.state.compliant);
     }},
    {"WithoutAFigureItWaitsForThePolicy", [](Inputs& in) { in.measured = false; },
     [](const DeploymentDecision& d) {
       EXPECT_TRUE(d.wait_for_policy);
       EXPECT_EQ(d.policy_key, "shop/default");
       EXPECT_FALSE(d.write);
       EXPECT_THAT(d.events, IsEmpty());
     }},
    {"WithoutAPolicyNothingIsWritten", [](Inputs& in) { in.policies.clear(); },
     [](const DeploymentDecision& d) {
       EXPECT_EQ(d.policy_key, "");
       EXPECT_FALSE(d.write);
       EXPECT_EQ(d.events.size(), 1u);
     }},
    {"TwoPoliciesAndNoneNamedAreAmbiguous",
     [](Inputs& in) {
       in.policies = {policy({}, "b-policy"), policy({}, "a-policy")};
     },
     [](const DeploymentDecision& d) {
       EXPECT_EQ(d.policy_key, "");
       EXPECT_THAT(d.contenders, ElementsAre("a-policy", "b-policy"));
       EXPECT_THAT(reasons(d), ElementsAre("AmbiguousPolicy"));
       EXPECT_FALSE(d.write);
     }},
    {"TheNamedPolicyGovernsAmongSeveral",
     [](Inputs& in) {
       in.policies = {policy({}, "b-policy"), policy({}, "a-policy")};
       in.deployment["metadata"]["annotations"]["gracekeeper.dev/policy"] = "b-policy";
     },
     [](const DeploymentDecision& d) {
       EXPECT_EQ(d.policy_key, "shop/b-policy");
       EXPECT_THAT(d.contenders, IsEmpty());
       EXPECT_TRUE(d.write);
     }},
    {"DryRunSaysWhatItWouldWriteAndWritesNothing",
     [](Inputs& in) {
       in.policies = {policy({{"mode", "DryRun"}})};
     },
     [](const DeploymentDecision& d) {
       EXPECT_FALSE(d.write);
       EXPECT_TRUE(d.state.pending);
       EXPECT_THAT(reasons(d), Contains("DryRun"));
     }},
    {"AWriteRefusedTheSameWayIsNotSentAgain",
     [](Inputs& in) {
       in.blocked = BlockedWrite{
           "u-web",
           1,
           decide(Inputs{}).write->plan_hash,
           kube::EventRecord{{}, kube::EventType::Warning, "ApplyRejected", "Tune", "not changed"},
           {}};
     },
     [](const DeploymentDecision& d) {
       EXPECT_FALSE(d.write);
       EXPECT_TRUE(d.blocked);
       EXPECT_THAT(reasons(d), Contains("ApplyRejected"));
     }},
    {"ARefusalOfAnotherGenerationDoesNotBlock",
     [](Inputs& in) {
       in.blocked = BlockedWrite{"u-web", 0, decide(Inputs{}).write->plan_hash, {}, {}};
     },
     [](const DeploymentDecision& d) {
       EXPECT_TRUE(d.write);
       EXPECT_FALSE(d.blocked);
     }},
    {"AShorterFigureWithinTheIntervalIsHeldBackUntilItIsDue",
     [](Inputs& in) {
       in.deployment = tuned(8);  // at kStart: a wait of 12 s
       in.seconds = 1;            // 5 s: 7 s shorter, past the decrease threshold (2 s)
       in.now = kStart + std::chrono::seconds(60);
     },
     [](const DeploymentDecision& d) {
       EXPECT_FALSE(d.write);
       EXPECT_TRUE(d.state.pending);
       ASSERT_TRUE(d.requeue_after);
       EXPECT_EQ(*d.requeue_after, std::chrono::seconds(3540));
     }},
    {"AWaitShorterByLessThanTheThresholdIsNotWorthARollout",
     [](Inputs& in) {
       in.deployment = tuned();  // 6 s
       in.seconds = 1;           // 5 s, the policy's minimum: 1 s shorter
       in.now = kStart + std::chrono::hours(2);
     },
     [](const DeploymentDecision& d) {
       EXPECT_FALSE(d.write);
       EXPECT_FALSE(d.state.pending);
       EXPECT_TRUE(d.state.compliant);
     }},
    {"ALongerFigureIsRepairedAtOnce",
     [](Inputs& in) {
       in.deployment = tuned();
       in.seconds = 8;
       in.now = kStart + std::chrono::seconds(60);
     },
     [](const DeploymentDecision& d) {
       ASSERT_TRUE(d.write);
       EXPECT_TRUE(d.write->retune);
       EXPECT_EQ(
           d.write->configuration["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 52);
     }},
    {"AFieldSetBackIsNamedAndRepaired",
     [](Inputs& in) {
       in.deployment = tuned();
       in.deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 30;
     },
     [](const DeploymentDecision& d) {
       EXPECT_THAT(d.set_back_paths,
                   ElementsAre(".spec.template.spec.terminationGracePeriodSeconds"));
       EXPECT_TRUE(d.write);
     }},
    {"TheRepairOfASetBackRecordsWhenItWasMade",
     [](Inputs& in) {
       in.deployment = set_back(tuned());
       in.now = kRepairedAt;
     },
     [](const DeploymentDecision& d) {
       EXPECT_EQ(recorded_set_back(d), core::format_rfc3339(kRepairedAt));
       EXPECT_FALSE(d.fight_ends_in);
     }},
    {"SetBackAgainWithinTheIntervalOfTheRepairIsAFight",
     [](Inputs& in) {
       in.deployment = set_back(repaired());
       in.now = kRepairedAt + std::chrono::seconds(20);
     },
     [](const DeploymentDecision& d) {
       ASSERT_TRUE(d.write);  // what the fight holds back, for its note
       ASSERT_TRUE(d.fight_ends_in);
       EXPECT_EQ(*d.fight_ends_in, std::chrono::seconds(3580));
     }},
    {"SetBackAgainOnceTheIntervalPassedIsRepairedAgain",
     [](Inputs& in) {
       in.deployment = set_back(repaired());
       in.now = kRepairedAt + std::chrono::seconds(3600);
     },
     [](const DeploymentDecision& d) {
       EXPECT_FALSE(d.fight_ends_in);
       EXPECT_EQ(recorded_set_back(d),
                 core::format_rfc3339(kRepairedAt + std::chrono::seconds(3600)));
     }},
    {"ARequestThatSetsBackIsPatchedNotAFightNorARepair",
     [](Inputs& in) {
       in.deployment = set_back(repaired());
       in.now = kRepairedAt + std::chrono::seconds(20);
       in.in_request = true;
     },
     [](const DeploymentDecision& d) {
       EXPECT_FALSE(d.fight_ends_in);
       EXPECT_EQ(recorded_set_back(d), core::format_rfc3339(kRepairedAt));
     }},
    {"AReTuneKeepsTheRecordedSetBack",
     [](Inputs& in) {
       in.deployment = repaired();
       in.seconds = 8;
       in.now = kRepairedAt + std::chrono::seconds(4000);
     },
     [](const DeploymentDecision& d) {
       ASSERT_TRUE(d.write);
       EXPECT_TRUE(d.set_back.empty());
       EXPECT_EQ(recorded_set_back(d), core::format_rfc3339(kRepairedAt));
     }},
    {"AGraceTheUserRaisedIsNeitherASetBackNorLowered",
     [](Inputs& in) {
       in.deployment = tuned();  // 46 s
       grace_of(in.deployment) = 70;
       in.now = kStart + std::chrono::seconds(4000);
     },
     [](const DeploymentDecision& d) {
       EXPECT_TRUE(d.set_back.empty());
       EXPECT_FALSE(d.write);
     }},
    {"AGraceTheUserRaisedIsRecordedAsTheirs",
     [](Inputs& in) {
       in.deployment = tuned();
       grace_of(in.deployment) = 70;
       in.seconds = 30;  // wait 45 + drain 30 + reserve 10 = 85
       in.now = kStart + std::chrono::seconds(4000);
     },
     [](const DeploymentDecision& d) {
       ASSERT_TRUE(d.write);
       EXPECT_EQ(
           d.write->configuration["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 85);
       const json a =
           json::parse(d.write->configuration["metadata"]["annotations"]["gracekeeper.dev/applied"]
                           .get<std::string>());
       EXPECT_EQ(a["user"]["grace"], 70);
       EXPECT_EQ(recorded_set_back(d), "");
     }},
    {"AGraceTheUserRaisedIsTheFloorWhenTheFigureFalls",
     [](Inputs& in) {
       in.deployment = raised_then_retuned();  // 85 s, the user's 70 recorded
       in.seconds = 4;                         // 46 s would do
       in.now = kStart + std::chrono::seconds(8000);
     },
     [](const DeploymentDecision& d) {
       ASSERT_TRUE(d.write);
       EXPECT_EQ(
           d.write->configuration["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 70);
     }},
    {"AHookTheUserLengthenedIsNoSetBackAndIsKept",
     [](Inputs& in) {
       in.deployment = tuned();  // sleep 6
       in.deployment["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"] =
           json{{"sleep", {{"seconds", 20}}}};
       grace_of(in.deployment) = 60;
       in.policies.front()["spec"]["preStop"]["existing"] = "Replace";
       in.now = kStart + std::chrono::seconds(4000);
     },
     [](const DeploymentDecision& d) {
       EXPECT_TRUE(d.set_back.empty());
       EXPECT_FALSE(d.write);
     }},
    {"AStrategyGracekeeperNeverWroteIsNoSetBack",
     [](Inputs& in) {
       in.deployment = testing::deployment();
       in.deployment["spec"]["strategy"] =
           json::parse(R"({"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})");
       merge(in.deployment, decide(in).write->configuration);
       in.deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] = 1;
       in.now = kStart + std::chrono::seconds(60);
     },
     [](const DeploymentDecision& d) {
       EXPECT_TRUE(d.set_back.empty());
       ASSERT_TRUE(d.write);  // the budget is broken: repaired, but no fight to record
       EXPECT_EQ(recorded_set_back(d), "");
     }},
    {"AWriteThatRepairsNoSetBackFieldRecordsNoSetBack",
     [](Inputs& in) {
       in.deployment = tuned();
       // A hook set back by hand, kept (existing: Keep), and a risen figure.
       in.deployment["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"] =
           json{{"sleep", {{"seconds", 3}}}};
       in.seconds = 8;
       in.now = kStart + std::chrono::seconds(4000);
     },
     [](const DeploymentDecision& d) {
       EXPECT_FALSE(d.set_back.empty());
       ASSERT_TRUE(d.write);
       EXPECT_EQ(recorded_set_back(d), "");
       EXPECT_FALSE(d.fight_ends_in);
     }},
    {"AnInvalidAnnotationLeavesItUnchanged",
     [](Inputs& in) {
       in.deployment["metadata"]["annotations"]["gracekeeper.dev/drain-seconds"] = "x";
     },
     [](const DeploymentDecision& d) {
       EXPECT_FALSE(d.write);
       EXPECT_THAT(reasons(d), Contains("InvalidAnnotation"));
     }},
    {"AnUnreadableObjectIsReportedNotWritten",
     [](Inputs& in) { in.deployment["spec"]["replicas"] = "three"; },
     [](const DeploymentDecision& d) {
       EXPECT_FALSE(d.write);
       EXPECT_THAT(reasons(d), ElementsAre("InvalidDeployment"));
     }},
    {"PodsNoServiceSelectsAreSaidToBeSo", [](Inputs& in) { in.behind_service = false; },
     [](const DeploymentDecision& d) { EXPECT_THAT(reasons(d), Contains("NotBehindService")); }},
    {"BehindAServiceTheyAreNot", [](Inputs&) {},
     [](const DeploymentDecision& d) {
       EXPECT_THAT(reasons(d), Not(Contains("NotBehindService")));
     }},
};

INSTANTIATE_TEST_SUITE_P(Rows, DecideDeployment, ::testing::ValuesIn(kRows),
                         [](const ::testing::TestParamInfo<Row>& info) { return info.param.name; });

}  // namespace
}  // namespace gracekeeper::controller::testing
