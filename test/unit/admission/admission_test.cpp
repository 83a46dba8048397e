// The admission webhook's decision on AdmissionReviews built here, against
// the World's stores: the patch gives exactly what the reconciler writes,
// and everything that is not a governed Deployment is allowed unchanged.
#include "gracekeeper/admission/admission.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../../support/reconciler_fakes.h"

namespace gracekeeper::controller::testing {
namespace {

using ::testing::HasSubstr;
using Outcome = AdmissionAnswer::Outcome;

std::string decode_base64(const std::string& in) {
  static const std::string alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::uint32_t bits = 0;
  int count = 0;
  for (char c : in) {
    if (c == '=') break;
    bits = (bits << 6) | static_cast<std::uint32_t>(alphabet.find(c));
    if ((count += 6) >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xff);
    }
  }
  return out;
}

json review(const json& object, const std::string& operation = "CREATE") {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request",
           {{"uid", "r-1"},
            {"kind", {{"group", "apps"}, {"version", "v1"}, {"kind", "Deployment"}}},
            {"resource", {{"group", "apps"}, {"version", "v1"}, {"resource", "deployments"}}},
            {"namespace", "shop"},
            {"operation", operation},
            {"dryRun", false},
            {"object", object}}}};
}

class AdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world.put_policy(policy());
    ASSERT_TRUE(world.reconcile_policy("shop/default"));  // measured: 4 s, status written
  }
  AdmissionInputs inputs(const PropagationBook* book) const {
    AdmissionInputs in{world.policies, world.services, book, {}, world.clock.now()};
    in.capabilities.native_sleep = true;
    in.own_user = kOperator;
    return in;
  }
  static constexpr const char* kOperator = "system:serviceaccount:gracekeeper-system:gracekeeper";
  AdmissionAnswer admit_review(const json& r, const PropagationBook* book) {
    return admit(r.dump(), inputs(book));
  }
  AdmissionAnswer admit_review(const json& r) { return admit_review(r, &world.book); }
  // The answer's response, checked for what every answer carries.
  static json response(const AdmissionAnswer& a) {
    EXPECT_EQ(a.status, 200) << a.body;
    const json r = json::parse(a.body);
    EXPECT_EQ(r["apiVersion"], "admission.k8s.io/v1");
    EXPECT_EQ(r["kind"], "AdmissionReview");
    EXPECT_EQ(r["response"]["uid"], "r-1");
    EXPECT_EQ(r["response"]["allowed"], true);
    return r["response"];
  }
  // The object as the API server stores it after the answer's patch.
  static json patched(const json& object, const AdmissionAnswer& a) {
    const json r = response(a);
    if (!r.contains("patch")) return object;
    EXPECT_EQ(r["patchType"], "JSONPatch");
    return object.patch(json::parse(decode_base64(r["patch"].get<std::string>())));
  }
  World world;
};

TEST_F(AdmissionTest, ACreatedDeploymentIsStoredAsTheReconcilerWouldWriteIt) {
  const json original = deployment();
  const AdmissionAnswer a = admit_review(review(original));
  EXPECT_EQ(a.outcome, Outcome::Patched);
  EXPECT_TRUE(a.opted_in);
  const json admitted = patched(original, a);

  // What the reconciler writes for the same object, at the same time.
  world.put_deployment(original);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  ASSERT_EQ(world.writer.calls.size(), 1u);
  json written = world.objects.at("shop/web");
  written["metadata"]["generation"] = original["metadata"]["generation"];
  written["metadata"].erase("resourceVersion");  // the server's, not admission's
  EXPECT_EQ(admitted, written) << "admitted: " << admitted.dump(1)
                               << "\nreconciler: " << written.dump(1);

  // Stored as admitted, the reconciler has nothing left to do.
  World fresh;
  fresh.put_policy(policy());
  ASSERT_TRUE(fresh.reconcile_policy("shop/default"));
  fresh.put_deployment(admitted);
  ASSERT_TRUE(fresh.reconcile_deployment("shop/web"));
  EXPECT_TRUE(fresh.writer.calls.empty());
}

TEST_F(AdmissionTest, ASecondAdmissionOfThePatchedObjectChangesNothing) {
  const json admitted = patched(deployment(), admit_review(review(deployment())));
  const AdmissionAnswer again = admit_review(review(admitted, "UPDATE"));
  EXPECT_EQ(again.outcome, Outcome::Unchanged);
  EXPECT_FALSE(response(again).contains("patch"));
}

TEST_F(AdmissionTest, AnUpdateThatSetsTheFieldsBackIsTunedAgainKeepingTheUsersValues) {
  const json admitted = patched(deployment(), admit_review(review(deployment())));
  // `kubectl apply -f` of the original manifest: the grace and strategy back.
  json reapplied = admitted;
  reapplied["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 30;
  reapplied["spec"]["strategy"] = {
      {"type", "RollingUpdate"},
      {"rollingUpdate", {{"maxSurge", "25%"}, {"maxUnavailable", "25%"}}}};
  world.clock.advance(std::chrono::hours(1));
  const AdmissionAnswer a = admit_review(review(reapplied, "UPDATE"));
  EXPECT_EQ(a.outcome, Outcome::Patched);
  const json stored = patched(reapplied, a);
  // Stored exactly as before, the record's time included: no new tune, and
  // no new generation (a Deployment's counts annotation changes).
  EXPECT_EQ(stored, admitted);
  const json applied =
      json::parse(stored["metadata"]["annotations"]["gracekeeper.dev/applied"].get<std::string>());
  EXPECT_EQ(applied["user"]["grace"], 30) << applied.dump();
}

TEST_F(AdmissionTest, ADeployThatDropsAProxysBudgetGetsItBack) {
  // A template injected by hand with Istio's proxy: admitted with the
  // proxy's budget in proxy.istio.io/config (docs/api.md, "Mesh proxies").
  json original = deployment();
  original["spec"]["template"]["spec"]["containers"].push_back(
      json::parse(R"({"name": "istio-proxy", "image": "proxyv2:1"})"));
  const json admitted = patched(original, admit_review(review(original)));
  const json::json_pointer at("/spec/template/metadata/annotations/proxy.istio.io~1config");
  ASSERT_TRUE(admitted.contains(at)) << admitted.dump(1);
  // A deploy that drops the annotation (a replace of the user's manifest)
  // is stored with it again, as it was.
  json dropped = admitted;
  dropped["spec"]["template"]["metadata"]["annotations"].erase("proxy.istio.io/config");
  world.clock.advance(std::chrono::hours(1));
  const json stored = patched(dropped, admit_review(review(dropped, "UPDATE")));
  EXPECT_EQ(stored[at], admitted[at]);
  EXPECT_EQ(stored, admitted);  // the record's time too: no new tune
}

TEST_F(AdmissionTest, AReTuneRidesOnADeployButStartsNoRolloutOfItsOwn) {
  const json tuned = patched(deployment(), admit_review(review(deployment())));
  // The figure rises: a re-tune is due, which the reconciler rolls out within
  // changes.maxConcurrentRollouts.
  world.meter.seconds = 10;
  world.clock.advance(std::chrono::hours(1));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));

  // An update that does not change the pod template (a label): no rollout
  // of its own, so the re-tune is not started here.
  json labelled = tuned;
  labelled["metadata"]["labels"] = {{"team", "shop"}};
  json r = review(labelled, "UPDATE");
  r["request"]["oldObject"] = tuned;
  const AdmissionAnswer quiet = admit_review(r);
  EXPECT_EQ(quiet.outcome, Outcome::Unchanged);
  EXPECT_FALSE(response(quiet).contains("patch"));

  // A deploy (a new image) rolls out anyway: the re-tune rides along.
  json deployed = tuned;
  deployed["spec"]["template"]["spec"]["containers"][0]["image"] = "app:2";
  r = review(deployed, "UPDATE");
  r["request"]["oldObject"] = tuned;
  const AdmissionAnswer ride = admit_review(r);
  EXPECT_EQ(ride.outcome, Outcome::Patched);
  EXPECT_GT(patched(deployed, ride)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
            tuned["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]);
}

TEST_F(AdmissionTest, AFollowerPlansWithTheFigureInThePolicysStatus) {
  const PropagationBook empty;  // a replica that does not lead has measured nothing
  const AdmissionAnswer leader = admit_review(review(deployment()));
  const AdmissionAnswer follower = admit_review(review(deployment()), &empty);
  EXPECT_EQ(follower.outcome, Outcome::Patched);
  EXPECT_EQ(response(follower)["patch"], response(leader)["patch"]);

  // A status of an older generation is no figure: left to the reconciler.
  json p = world.policy_objects.at("shop/default");
  p["metadata"]["generation"] = 2;
  world.put_policy(p);
  const AdmissionAnswer stale = admit_review(review(deployment()), &empty);
  EXPECT_EQ(stale.outcome, Outcome::Unchanged);
  EXPECT_FALSE(response(stale).contains("patch"));
}

// The leader's re-tune must not be planned again by a follower, whose figure
// (the policy's status) can lag: a write under gracekeeper's own field
// manager, sent by the operator's own user, is allowed as it is. The same
// object from anyone else is planned.
TEST_F(AdmissionTest, TheReconcilersOwnWriteIsAllowedAsItIs) {
  const PropagationBook empty;  // a follower
  json r = review(deployment(), "UPDATE");
  r["request"]["options"] = {{"kind", "PatchOptions"},
                             {"apiVersion", "meta.k8s.io/v1"},
                             {"fieldManager", "gracekeeper"},
                             {"force", true}};
  r["request"]["userInfo"] = {{"username", kOperator}, {"groups", {"system:serviceaccounts"}}};
  const AdmissionAnswer own = admit_review(r, &empty);
  EXPECT_EQ(own.outcome, Outcome::Ignored);
  EXPECT_TRUE(own.opted_in);
  EXPECT_FALSE(response(own).contains("patch"));

  r["request"]["options"]["fieldManager"] = "kubectl-client-side-apply";
  const AdmissionAnswer theirs = admit_review(r, &empty);
  EXPECT_EQ(theirs.outcome, Outcome::Patched);
  r["request"]["options"] = "garbage";  // no options object: planned as anyone's
  EXPECT_EQ(admit_review(r, &empty).outcome, Outcome::Patched);
}

// Issue 45, item 9: any client can name field manager gracekeeper; only the
// operator's own user makes a write gracekeeper's own. Anyone else's is
// mutated like any other, and so is every write while the operator's user
// is not known.
TEST_F(AdmissionTest, TheFieldManagerGracekeeperFromAnotherUserIsPlanned) {
  json r = review(deployment(), "CREATE");
  r["request"]["options"] = {
      {"kind", "PatchOptions"}, {"apiVersion", "meta.k8s.io/v1"}, {"fieldManager", "gracekeeper"}};
  r["request"]["userInfo"] = {{"username", "mallory"}};
  const AdmissionAnswer theirs = admit_review(r);
  EXPECT_EQ(theirs.outcome, Outcome::Patched);
  EXPECT_EQ(patched(deployment(), theirs)["spec"]["template"]["spec"]["containers"][0]["lifecycle"]
                                         ["preStop"]["sleep"]["seconds"],
            6);
  // A name that only starts like the operator's, a user name of another
  // type, none at all: planned.
  for (const json& user : {json{{"username", std::string(kOperator) + "x"}}, json{{"username", 7}},
                           json::object(), json("garbage")}) {
    r["request"]["userInfo"] = user;
    EXPECT_EQ(admit_review(r).outcome, Outcome::Patched) << user.dump();
  }
  r["request"].erase("userInfo");
  EXPECT_EQ(admit_review(r).outcome, Outcome::Patched);

  // The operator's user while the operator does not know it yet: planned too.
  r["request"]["userInfo"] = {{"username", kOperator}};
  AdmissionInputs unknown = inputs(&world.book);
  unknown.own_user.clear();
  EXPECT_EQ(admit(r.dump(), unknown).outcome, Outcome::Patched);
  EXPECT_EQ(admit_review(r).outcome, Outcome::Ignored);
}

// Issue 45, item 9: when the wait falls to 0 (a figure of 0 s, minSeconds
// 0), the plan removes gracekeeper's own hook; the patch removed nothing,
// so the admitted object kept `sleep 6` with a record that no longer
// claims it: a hook of the user's, for good.
TEST_F(AdmissionTest, ADeployAfterTheWaitFellToZeroRemovesGracekeepersHook) {
  json p = policy({{"preStop", {{"minSeconds", 0}}}});
  world.put_policy(p);
  world.meter.seconds = 4;
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  json original = deployment();
  original["spec"]["template"]["spec"]["containers"].push_back(
      {{"name", "proxy"},
       {"image", "proxy:1"},
       {"lifecycle", {{"postStart", {{"exec", {{"command", {"true"}}}}}}}}});
  const json tuned = patched(original, admit_review(review(original)));
  const json& tuned_containers = tuned["spec"]["template"]["spec"]["containers"];
  ASSERT_EQ(tuned_containers[0]["lifecycle"]["preStop"]["sleep"]["seconds"], 6) << tuned.dump();
  ASSERT_EQ(tuned_containers[1]["lifecycle"]["preStop"]["sleep"]["seconds"], 6) << tuned.dump();

  // The figure falls to 0: the wait is 0. An hour on (churn control), a deploy.
  world.meter.seconds = 0;
  world.clock.advance(std::chrono::hours(1));
  ASSERT_TRUE(world.reconcile_policy("shop/default"));
  json deployed = tuned;
  deployed["spec"]["template"]["spec"]["containers"][0]["image"] = "app:2";
  json r = review(deployed, "UPDATE");
  r["request"]["oldObject"] = tuned;
  const AdmissionAnswer a = admit_review(r);
  ASSERT_EQ(a.outcome, Outcome::Patched);
  const json stored = patched(deployed, a);
  const json& containers = stored["spec"]["template"]["spec"]["containers"];
  EXPECT_FALSE(containers[0].contains("lifecycle")) << containers[0].dump();  // none left
  EXPECT_EQ(containers[1]["lifecycle"],
            json({{"postStart", {{"exec", {{"command", {"true"}}}}}}}))  // the user's stays
      << containers[1].dump();
  EXPECT_EQ(stored["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 0 + 30 + 10);
  EXPECT_EQ(containers[0]["image"], "app:2");

  // Stored so, nothing is left to do: for the webhook, and for the reconciler.
  const AdmissionAnswer again = admit_review(review(stored, "UPDATE"));
  EXPECT_EQ(again.outcome, Outcome::Unchanged);
  EXPECT_FALSE(response(again).contains("patch"));
  world.put_deployment(stored);
  ASSERT_TRUE(world.reconcile_deployment("shop/web"));
  EXPECT_TRUE(world.writer.calls.empty()) << world.writer.calls[0].configuration.dump();
}

TEST_F(AdmissionTest, ADryRunRequestIsMutatedTheSameWay) {
  json r = review(deployment());
  const AdmissionAnswer real = admit_review(r);
  r["request"]["dryRun"] = true;
  const AdmissionAnswer dry = admit_review(r);
  EXPECT_EQ(dry.outcome, Outcome::Patched);
  EXPECT_EQ(response(dry)["patch"], response(real)["patch"]);
}

TEST_F(AdmissionTest, AnUpdatesOldObjectIsNotRead) {
  json r = review(deployment(), "UPDATE");
  r["request"]["oldObject"] = {{"garbage", json::array({1, 2, 3})}};
  EXPECT_EQ(admit_review(r).outcome, Outcome::Patched);
}

TEST_F(AdmissionTest, NotOptedInIsAllowedUnchanged) {
  json d = deployment();
  d["metadata"]["annotations"].erase("gracekeeper.dev/enabled");
  const AdmissionAnswer a = admit_review(review(d));
  EXPECT_EQ(a.outcome, Outcome::Ignored);
  EXPECT_FALSE(a.opted_in);
  EXPECT_FALSE(response(a).contains("patch"));
  d["metadata"]["annotations"]["gracekeeper.dev/enabled"] = "false";
  EXPECT_FALSE(response(admit_review(review(d))).contains("patch"));
}

TEST_F(AdmissionTest, WithoutAGoverningPolicyTheObjectIsAllowedUnchanged) {
  json d = deployment();
  d["metadata"]["namespace"] = "elsewhere";
  json r = review(d);
  r["request"]["namespace"] = "elsewhere";
  const AdmissionAnswer a = admit_review(r);
  EXPECT_EQ(a.outcome, Outcome::Ignored);
  EXPECT_FALSE(response(a).contains("patch"));
}

TEST_F(AdmissionTest, ADryRunPolicyChangesNothing) {
  world.put_policy(policy({{"mode", "DryRun"}}));
  const AdmissionAnswer a = admit_review(review(deployment()));
  EXPECT_EQ(a.outcome, Outcome::Unchanged);
  EXPECT_FALSE(response(a).contains("patch"));
}

TEST_F(AdmissionTest, ACreateWithoutNamespaceOrNameUsesTheRequestsNamespace) {
  json d = deployment();
  d["metadata"].erase("namespace");
  d["metadata"].erase("name");
  d["metadata"].erase("uid");
  d["metadata"]["generateName"] = "web-";
  const AdmissionAnswer a = admit_review(review(d));
  EXPECT_EQ(a.outcome, Outcome::Patched);
  const json stored = patched(d, a);
  EXPECT_EQ(stored["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 46);
  EXPECT_FALSE(stored["metadata"].contains("namespace"));  // the API server sets it
}

// Issue 36: an opted-in StatefulSet is admitted with the budget like a
// Deployment: grace and wait, and no strategy of either kind.
TEST_F(AdmissionTest, AStatefulSetIsAdmittedWithTheBudget) {
  json d = deployment();
  d["kind"] = "StatefulSet";
  d["spec"]["updateStrategy"] = {{"type", "RollingUpdate"}};
  json r = review(d);
  r["request"]["kind"]["kind"] = "StatefulSet";
  const AdmissionAnswer a = admit_review(r);
  EXPECT_EQ(a.outcome, Outcome::Patched);
  const json stored = patched(d, a);
  EXPECT_EQ(stored["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 46);
  EXPECT_EQ(stored["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["sleep"]
                  ["seconds"],
            6);
  EXPECT_FALSE(stored["spec"].contains("strategy"));
  EXPECT_EQ(stored["spec"]["updateStrategy"], d["spec"]["updateStrategy"]);
}

TEST_F(AdmissionTest, OtherKindsAndOperationsAreAllowedUnchanged) {
  json r = review(deployment());
  r["request"]["kind"]["kind"] = "DaemonSet";
  EXPECT_EQ(admit_review(r).outcome, Outcome::Ignored);
  EXPECT_FALSE(response(admit_review(r)).contains("patch"));
  r = review(deployment(), "DELETE");
  EXPECT_EQ(admit_review(r).outcome, Outcome::Ignored);
  r = review(deployment());
  r["request"]["kind"]["version"] = "v1beta2";
  EXPECT_EQ(admit_review(r).outcome, Outcome::Ignored);
  r = review(deployment());
  r["request"]["object"] = "not an object";
  EXPECT_EQ(admit_review(r).outcome, Outcome::Ignored);
  r = review(deployment());
  r["request"]["object"]["metadata"] = json::array();
  EXPECT_EQ(admit_review(r).outcome, Outcome::Ignored);
}

TEST_F(AdmissionTest, AnUnreadableDeploymentIsAllowedUnchanged) {
  json d = deployment();
  d["spec"]["template"]["spec"]["containers"] = "not a list";
  const AdmissionAnswer a = admit_review(review(d));
  EXPECT_EQ(a.outcome, Outcome::Ignored);  // no policy is chosen for what cannot be read
  EXPECT_FALSE(response(a).contains("patch"));
}

TEST_F(AdmissionTest, BadRequestsGetA4xxNamingWhatIsWrong) {
  auto expect_bad = [&](const std::string& body, int status, const std::string& says) {
    const AdmissionAnswer a = admit(body, inputs(&world.book));
    EXPECT_EQ(a.outcome, Outcome::BadRequest) << body.substr(0, 80);
    EXPECT_EQ(a.status, status) << body.substr(0, 80);
    EXPECT_THAT(a.error, HasSubstr(says));
  };
  expect_bad("{\"apiVersion\": ", 400, "malformed JSON");
  expect_bad("", 400, "malformed JSON");
  expect_bad("[1, 2]", 400, "not a JSON object");
  json r = review(deployment());
  r["apiVersion"] = "admission.k8s.io/v1beta1";
  expect_bad(r.dump(), 400, "admissionReviewVersions: [v1]");
  r = review(deployment());
  r["kind"] = "Deployment";
  expect_bad(r.dump(), 400, "got kind \"Deployment\"");
  r = review(deployment());
  r["request"].erase("uid");
  expect_bad(r.dump(), 400, "no uid");
  r = review(deployment());
  r["request"]["uid"] = 7;
  expect_bad(r.dump(), 400, "no uid");
  r = review(deployment());
  r.erase("request");
  expect_bad(r.dump(), 400, "no request");
  expect_bad(std::string(10000, '[') + std::string(10000, ']'), 400, "nested deeper");
  expect_bad(std::string(kMaxAdmissionBytes + 1, ' '), 413, "the limit is");
}

TEST_F(AdmissionTest, TheBodyLimitIsControllerRuntimes7MiB) {
  EXPECT_EQ(kMaxAdmissionBytes, std::size_t{7} << 20);
  // At the limit the body is read (and is no JSON); one byte more is 413.
  const AdmissionAnswer at = admit(std::string(kMaxAdmissionBytes, ' '), inputs(&world.book));
  EXPECT_EQ(at.status, 400) << at.error;
  const AdmissionAnswer over = admit(std::string(kMaxAdmissionBytes + 1, ' '), inputs(&world.book));
  EXPECT_EQ(over.status, 413) << over.error;
}

TEST_F(AdmissionTest, AnUpdateOfA1Point4MBDeploymentIsAdmittedAndMutated) {
  json big = deployment();
  json& env = big["spec"]["template"]["spec"]["containers"][0]["env"];
  env = json::array();
  for (int i = 0; big.dump().size() < 1'400'000;) {
    for (int k = 0; k < 100; ++k, ++i) {
      env.push_back({{"name", "CONFIG_" + std::to_string(i)}, {"value", std::string(128, 'v')}});
    }
  }
  const json admitted = patched(big, admit_review(review(big)));
  // `kubectl apply` of the original manifest again: an UPDATE whose review
  // carries the old object too (2.8 MB in all).
  json r = review(big, "UPDATE");
  r["request"]["oldObject"] = admitted;
  const std::string body = r.dump();
  EXPECT_GT(body.size(), std::size_t{2'800'000});
  const AdmissionAnswer a = admit(body, inputs(&world.book));
  EXPECT_EQ(a.outcome, Outcome::Patched) << a.error;
  const json stored = patched(big, a);
  EXPECT_EQ(stored, admitted);
  EXPECT_NE(stored["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
            big["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]);
}

TEST_F(AdmissionTest, BeforeTheStoresSyncedAnOptedInDeploymentIsAllowedWithAWarning) {
  AdmissionInputs in = inputs(&world.book);
  in.not_ready = "caches not synced";
  const AdmissionAnswer a = admit(review(deployment()).dump(), in);
  EXPECT_EQ(a.outcome, Outcome::Error);
  EXPECT_EQ(a.error, "caches not synced");
  const json r = response(a);
  EXPECT_FALSE(r.contains("patch"));
  ASSERT_EQ(r["warnings"].size(), 1u);
  EXPECT_THAT(r["warnings"][0].get<std::string>(), HasSubstr("admitted unchanged"));
}

TEST(StatusPropagation, ReadsTheFigureAndWhetherMetricsAreAvailable) {
  CachedPolicy p;
  p.generation = 3;
  p.status = json::parse(R"({"observedGeneration": 3,
    "propagation": {"seconds": 2.5, "source": "Prometheus"},
    "conditions": [{"type": "MetricsAvailable", "status": "False"}]})");
  const auto s = status_propagation(p);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->seconds, 2.5);
  EXPECT_EQ(s->source, "Prometheus");
  EXPECT_FALSE(s->available);
  p.status["propagation"]["seconds"] = "2.5";
  EXPECT_FALSE(status_propagation(p));
  p.status = nullptr;
  EXPECT_FALSE(status_propagation(p));
}

}  // namespace
}  // namespace gracekeeper::controller::testing
