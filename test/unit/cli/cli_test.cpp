// The offline commands, run in-process on real files: the articles' scenario,
// idempotence, and the table of unusable inputs (exit 2, nothing on stdout).
#include "gracekeeper/cli/cli.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace gracekeeper::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int code = 0;
  std::string out;
  std::string err;
};

Result run(std::vector<std::string> args, const std::string& stdin_text = "") {
  std::vector<std::string_view> views(args.begin(), args.end());
  std::istringstream in(stdin_text);
  std::ostringstream out, err;
  const int code = main(views, Streams{in, out, err});
  return {code, out.str(), err.str()};
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gk-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ::setenv("SOURCE_DATE_EPOCH", "1790000000", 1);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }

  fs::path dir_;
};

// The articles' situation: 3 replicas, grace 30, no preStop, default rolling update, 30 s drain.
constexpr const char* kArticle = R"(apiVersion: apps/v1
kind: Deployment
metadata:
  name: checkout
  namespace: shop-prod
  annotations:
    gracekeeper.dev/enabled: "true"
    gracekeeper.dev/drain-seconds: "30"
spec:
  replicas: 3
  selector:
    matchLabels: {app: checkout}
  template:
    metadata:
      labels: {app: checkout}
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: checkout
        image: checkout:1.4.2
        ports:
        - containerPort: 8080
        readinessProbe:
          httpGet: {path: /actuator/health/readiness, port: 8080}
        livenessProbe:
          httpGet: {path: /actuator/health/liveness, port: 8080}
)";

std::string with_indent(const std::string& text, const std::string& indent) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) out += indent + line + "\n";
  return out;
}

constexpr const char* kPolicy = R"(apiVersion: gracekeeper.dev/v1alpha1
kind: ShutdownPolicy
metadata: {name: default, namespace: shop-prod}
spec:
  propagation: {staticSeconds: 4}
)";

TEST_F(CliTest, CheckReportsTheArticlesSituation) {
  const auto file = write("checkout.yaml", kArticle);
  auto r = run({"check", "-f", file});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.out, HasSubstr(file + ":1:1: error NoPreStopWait: Deployment shop-prod/checkout"));
  EXPECT_THAT(r.out, HasSubstr("error BudgetExceeded"));
  // 25% of 3 replicas is 0 pods as the Deployment controller rounds it.
  EXPECT_THAT(r.out, HasSubstr("warning CapacityDropOnRollout"));
  EXPECT_THAT(r.out, HasSubstr("takes 0 of 3 replicas down now, but 1 from 4 replicas on"));
  EXPECT_THAT(r.err, HasSubstr("2 error(s), 1 warning(s)"));
}

TEST_F(CliTest, PlanProducesAManifestThatCheckAcceptsAndIsIdempotent) {
  const auto file = write("checkout.yaml", kArticle);
  auto planned = run({"plan", "-f", file});
  ASSERT_EQ(planned.code, 0) << planned.err;
  EXPECT_THAT(planned.err, HasSubstr("containers[checkout].preStop: none -> sleep 15s"));
  EXPECT_THAT(planned.err, HasSubstr("terminationGracePeriodSeconds: 30s -> 55s"));

  const auto planned_file = write("planned.yaml", planned.out);
  auto checked = run({"check", "-f", planned_file});
  EXPECT_EQ(checked.code, 0) << checked.out << checked.err;

  auto again = run({"plan", "-f", planned_file});
  ASSERT_EQ(again.code, 0);
  EXPECT_EQ(again.out, planned.out);
  EXPECT_THAT(again.err, HasSubstr("0 Deployment(s) changed"));
}

TEST_F(CliTest, PolicyFromFileFromInputsAndPropagationFlag) {
  const auto file = write("checkout.yaml", kArticle);
  const auto policy = write("policy.yaml", kPolicy);
  auto with_file = run({"plan", "-f", file, "--policy", policy});
  EXPECT_THAT(with_file.err, HasSubstr("none -> sleep 6s"));  // ceil(1.5 * 4)

  const auto both = write("both.yaml", std::string(kPolicy) + "---\n" + kArticle);
  auto from_inputs = run({"plan", "-f", both});
  EXPECT_THAT(from_inputs.err, HasSubstr("none -> sleep 6s"));

  auto flag = run({"plan", "-f", both, "--propagation-seconds", "20"});
  EXPECT_THAT(flag.err, HasSubstr("none -> sleep 30s"));
}

TEST_F(CliTest, StdinJsonOutputAndOldClusters) {
  auto r = run({"plan", "-f", "-", "-o", "json", "--kubernetes-version", "1.29"}, kArticle);
  ASSERT_EQ(r.code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(
      doc["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"],
      nlohmann::json::parse(R"(["sleep", "15"])"));
}

TEST_F(CliTest, OnlyOptedInDeploymentsUnlessAll) {
  std::string other = kArticle;
  other.replace(other.find("    gracekeeper.dev/enabled: \"true\"\n"),
                std::string("    gracekeeper.dev/enabled: \"true\"\n").size(), "");
  const auto file = write("other.yaml", other);
  auto r = run({"check", "-f", file});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("1 not opted in"));
  auto all = run({"check", "-f", file, "--all", "-o", "json"});
  EXPECT_EQ(all.code, 1);
  auto findings = nlohmann::json::parse(all.out);
  ASSERT_FALSE(findings.empty());
  EXPECT_EQ(findings[0]["object"]["name"], "checkout");
  EXPECT_EQ(findings[0]["line"], 1);
}

TEST_F(CliTest, ListsFromKubectlAreLookedInto) {
  // The same Deployment planned on its own, to compare with the List item.
  auto deployment = nlohmann::json::parse(run({"plan", "-f", "-", "-o", "json"}, kArticle).out);
  const std::string list = std::string(
                               "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  "
                               "kind: ConfigMap\n  metadata: {name: x}\n- ") +
                           with_indent(kArticle, "  ").substr(2);
  const auto file = write("list.yaml", list);
  auto checked = run({"check", "-f", file});
  EXPECT_EQ(checked.code, 1) << checked.err;
  EXPECT_THAT(checked.out, HasSubstr(file + ":7:3: error NoPreStopWait"));
  auto planned = run({"plan", "-f", file, "-o", "json"});
  ASSERT_EQ(planned.code, 0) << planned.err;
  auto out = nlohmann::json::parse(planned.out);
  EXPECT_EQ(out["kind"], "List");
  EXPECT_EQ(out["items"][1]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 55);
  EXPECT_EQ(out["items"][1], deployment);
}

TEST_F(CliTest, OtherObjectsPassThroughUnchanged) {
  const std::string config =
      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: \"on\"\n  "
      "count: \"3\"\n";
  const auto file = write("cm.yaml", config);
  auto r = run({"plan", "-f", file});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, config);
}

TEST_F(CliTest, DirectoriesAreReadRecursively) {
  write("deploy/app/checkout.yaml", kArticle);
  write("deploy/policy.yml", kPolicy);
  write("deploy/README.md", "not a manifest");
  auto r = run({"check", "-f", (dir_ / "deploy").string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("needs a wait of 6s"));
}

TEST_F(CliTest, TwoMatchingPoliciesChangeNothing) {
  const std::string second =
      std::string(kPolicy).replace(std::string(kPolicy).find("default"), 7, "second");
  const auto file = write("two.yaml", std::string(kPolicy) + "---\n" + second + "---\n" + kArticle);
  auto r = run({"plan", "-f", file});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("AmbiguousPolicy"));
  EXPECT_THAT(r.err, HasSubstr("0 Deployment(s) changed"));
}

TEST_F(CliTest, VersionAndHelp) {
  EXPECT_EQ(run({"version"}).code, 0);
  EXPECT_THAT(run({"version"}).out, HasSubstr("gracekeeper "));
  EXPECT_EQ(run({"check", "--help"}).code, 0);
  EXPECT_THAT(run({"plan", "--help"}).out, HasSubstr("--propagation-seconds"));
  EXPECT_EQ(run({}).code, 2);
  EXPECT_EQ(run({"frobnicate"}).code, 2);
}

// `run`: bad flags are exit 2 naming the flag, before anything connects; a
// kubeconfig that does not exist is a startup failure naming the file.
TEST_F(CliTest, RunFlagsAreCheckedBeforeStarting) {
  EXPECT_EQ(run({"run", "--help"}).code, 0);
  EXPECT_THAT(run({"run", "--help"}).out, HasSubstr("--prometheus-url"));
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"run", "--workers", "0"},
       "flag --workers: expected a whole number from 1 to 256, got \"0\""},
      {{"run", "--workers=many"}, "flag --workers: expected a whole number"},
      {{"run", "--log-format", "xml"}, "flag --log-format: expected json or text, got \"xml\""},
      {{"run", "--log-level", "loud"}, "flag --log-level: expected debug, info, warn or error"},
      {{"run", "--lease-duration", "-3"}, "flag --lease-duration: expected a whole number"},
      {{"run", "--leader-elect=yes"}, "flag --leader-elect takes no value"},
      {{"run", "--kubeconfig"}, "flag --kubeconfig needs a value"},
      {{"run", "--min-kubelet-version", "2.0"},
       "flag --min-kubelet-version: expected a version like 1.29, got \"2.0\""},
      {{"run", "--min-kubelet-version=1.x"}, "flag --min-kubelet-version: expected a version"},
      {{"run", "--webhook-port", "70000"},
       "flag --webhook-port: expected a whole number from 0 to 65535, got \"70000\""},
      {{"run", "--webhook-port", "9443"}, "--webhook-port needs --webhook-cert-dir"},
      {{"run", "--shutdown-lame-duck-seconds", "601"},
       "flag --shutdown-lame-duck-seconds: expected a whole number from 0 to 600, got \"601\""},
      {{"run", "--metrics-secure=yes"}, "flag --metrics-secure takes no value"},
      {{"run", "--metrics-secure", "--metrics-bind-address", "0"},
       "--metrics-secure needs --metrics-bind-address"},
      {{"run", "--tls-min-version", "1.1"},
       "flag --tls-min-version: expected 1.2 or 1.3, got \"1.1\""},
      {{"run", "--tls-cipher-suites", "ECDHE-RSA-AES128-GCM-SHA256,RC4-MD55"},
       "flag --tls-cipher-suites: unknown TLS 1.2 cipher suite \"RC4-MD55\""},
      {{"run", "--tls-cipher-suites", "TLS_AES_128_GCM_SHA256"},
       "TLS 1.3 suites are not configurable"},
      {{"run", "--tls-min-version", "1.3", "--tls-cipher-suites", "ECDHE-RSA-AES128-GCM-SHA256"},
       "--tls-cipher-suites names TLS 1.2 suites, and --tls-min-version 1.3 refuses TLS 1.2"},
      {{"run", "--rollout-stall-timeout", "0"},
       "flag --rollout-stall-timeout: expected a whole number from 1 to 86400, got \"0\""},
      {{"run", "--frobnicate", "1"}, "unknown flag --frobnicate"},
      {{"run", "extra"}, "unexpected argument \"extra\""},
      {{"run", "--leader-elect", "--lease-duration", "5", "--renew-deadline", "10"},
       "--lease-duration > --renew-deadline > --retry-period"},
  };
  for (const auto& c : cases) {
    auto r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.message;
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_EQ(r.out, "");
  }
  auto missing = run({"run", "--kubeconfig", "/nonexistent/kubeconfig", "--log-format", "text"});
  EXPECT_EQ(missing.code, 1);
}

TEST_F(CliTest, WebhookCertificateFlagsAreChecked) {
  EXPECT_THAT(run({"run", "--help"}).out, HasSubstr("--webhook-cert-secret"));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run", "--webhook-cert-secret", "certs"}, "--webhook-cert-secret needs --webhook-service"},
      {{"run", "--webhook-cert-extra-san", "a_b"},
       "flag --webhook-cert-extra-san: \"a_b\" is neither an IP address nor a DNS name"},
      {{"run", "--webhook-cert-validity", "5"}, "must be at least 10 seconds"},
      {{"run", "--webhook-ca-validity", "x"},
       "flag --webhook-ca-validity: expected a whole number"},
  };
  for (const auto& [args, message] : cases) {
    auto r = run(args);
    EXPECT_EQ(r.code, 2) << message;
    EXPECT_THAT(r.err, HasSubstr(message));
  }
}

// Unusable input: exit 2, a message naming the file, the line and what was
// expected, and nothing at all on stdout.
struct BadInput {
  const char* name;
  std::string content;                // written to input.yaml (or used as stdin for "-")
  std::vector<std::string> args;      // {} means: plan -f input.yaml
  std::vector<std::string> expected;  // substrings of stderr; "@" stands for the input path
};

std::string nested(int depth) {
  return "apiVersion: v1\nkind: ConfigMap\ndata: " + std::string(depth, '[') +
         std::string(depth, ']') + "\n";
}

std::string alias_bomb() {
  std::string text =
      "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\nx0: &a0 [lol, lol]\n";
  for (int i = 1; i < 40; ++i) {
    text += "x" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 9; ++j) text += (j ? ", *a" : "*a") + std::to_string(i - 1);
    text += "]\n";
  }
  return text;
}

// Documents each well under a per-document limit, over the whole-input one
// together (issue 20: twenty such documents cost 1.1 GB).
std::string alias_spread(int documents) {
  std::string text;
  for (int d = 0; d < documents; ++d) {
    text += "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m" + std::to_string(d) +
            "}\ndata:\n  a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n  b: [";
    for (int i = 0; i < 10000; ++i) text += i ? ", *a" : "*a";
    text += "]\n---\n";
  }
  return text;
}

std::string with(std::string base, const std::string& from, const std::string& to) {
  const auto at = base.find(from);
  if (at == std::string::npos) throw std::runtime_error("fixture does not contain: " + from);
  return base.replace(at, from.size(), to);
}

std::vector<BadInput> bad_inputs() {
  const std::string a = kArticle;
  const std::string grace = "terminationGracePeriodSeconds: 30";
  return {
      {"broken_yaml", "apiVersion: v1\nkind: ConfigMap\ndata:\n  a: \"unterminated\n", {}, {"@:"}},
      {"bad_indentation", "apiVersion: v1\nkind: ConfigMap\n data: x\n  - y\n", {}, {"@:"}},
      {"grace_not_a_number",
       with(a, grace, "terminationGracePeriodSeconds: abc"),
       {},
       {"@:17:", "spec.template.spec.terminationGracePeriodSeconds", "expected an integer"}},
      {"grace_negative",
       with(a, grace, "terminationGracePeriodSeconds: -5"),
       {},
       {"@:17:", "terminationGracePeriodSeconds", "between 0 and"}},
      {"grace_overflows_int64",
       with(a, grace, "terminationGracePeriodSeconds: 99999999999999999999999"),
       {},
       {"@:17:"}},
      {"replicas_too_large",
       with(a, "replicas: 3", "replicas: 4294967296"),
       {},
       {"@:10:", "spec.replicas", "between 0 and 2147483647"}},
      {"replicas_float",
       with(a, "replicas: 3", "replicas: 2.5"),
       {},
       {"@:10:", "spec.replicas", "expected an integer"}},
      {"no_pod_template",
       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicas: 1\n",
       {},
       {"@:4:", "spec.template", "pod template"}},
      {"no_containers",
       with(a, "      containers:", "      containers: []\n      x:"),
       {},
       {"@:", "containers", "at least one container"}},
      {"container_without_name",
       with(a, "      - name: checkout\n", "      - \n"),
       {},
       {"@:", "containers[0].name", "required"}},
      {"annotation_not_a_string",
       with(a, "gracekeeper.dev/enabled: \"true\"", "gracekeeper.dev/enabled: true"),
       {},
       {"@:7:", "metadata.annotations[gracekeeper.dev/enabled]", "expected a string"}},
      {"bad_max_unavailable",
       with(a, "  replicas: 3\n",
            "  replicas: 3\n  strategy:\n    rollingUpdate: {maxUnavailable: lots}\n"),
       {},
       {"@:12:", "maxUnavailable", "percentage"}},
      {"empty_file", "", {}, {"@", "no Kubernetes objects"}},
      {"comments_only",
       "# nothing here\n---\n# still nothing\n",
       {},
       {"@", "no Kubernetes objects"}},
      {"binary_garbage",
       std::string("\x7f"
                   "ELF\x02\x01\x01\0\0\0\xff\xfe",
                   12),
       {},
       {"@:"}},
      {"alias_bomb", alias_bomb(), {}, {"@:"}},
      {"deep_nesting", nested(100000), {}, {"@:3:"}},
      {"not_an_object", "- just\n- a list\n", {}, {"@:1:", "mapping"}},
      {"missing_kind",
       "apiVersion: v1\nmetadata: {name: x}\n",
       {},
       {"@:1:", "apiVersion and kind"}},
      {"duplicate_key", "apiVersion: v1\nkind: ConfigMap\nkind: Secret\n", {}, {"@:3:", "kind"}},
      {"policy_min_above_max",
       with(kPolicy, "  propagation: {staticSeconds: 4}\n",
            "  preStop: {minSeconds: 30, maxSeconds: 20}\n"),
       {},
       {"@:5:", "spec.preStop.minSeconds", "must be <= maxSeconds (got 30 > 20)"}},
      {"policy_quantile",
       with(kPolicy, "staticSeconds: 4", "quantile: 1.5"),
       {},
       {"@:5:", "spec.propagation.quantile"}},
      {"policy_unknown_mode",
       std::string(kPolicy) + "  mode: Yolo\n",
       {},
       {"@:6:", "spec.mode", "Yolo"}},
      {"policy_unknown_field",
       std::string(kPolicy) + "  drainSecond: 5\n",
       {},
       {"@:6:", "spec.drainSecond", "unknown field"}},
      {"unknown_flag",
       kArticle,
       {"check", "-f", "@", "--frobnicate"},
       {"unknown flag --frobnicate"}},
      {"missing_file",
       "",
       {"check", "-f", "/nonexistent/deploy.yaml"},
       {"/nonexistent/deploy.yaml", "no such file"}},
      {"bad_propagation_flag",
       kArticle,
       {"plan", "-f", "@", "--propagation-seconds", "soon"},
       {"--propagation-seconds", "soon"}},
      {"bad_output_flag",
       kArticle,
       {"plan", "-f", "@", "-o", "xml"},
       {"-o", "yaml or json", "xml"}},
      {"policy_file_without_policy",
       kArticle,
       {"plan", "-f", "@", "--policy", "@"},
       {"@:1:", "expected a ShutdownPolicy"}},
      {"no_input_flag", "", {"check"}, {"no input"}},
      // Issue 20's hostile classes.
      {"aliases_across_documents", alias_spread(3), {}, {"@:", "counted over all documents"}},
      {"unclosed_brackets",
       "apiVersion: v1\nkind: ConfigMap\ndata: " + std::string(200000, '['),
       {},
       {"@:3:107:", "nesting is deeper than 100 levels"}},
      {"list_items_not_a_list",
       "apiVersion: v1\nkind: List\nitems: 5\n",
       {},
       {"@:3:", "items: expected a list of Kubernetes objects, got number 5"}},
      {"list_items_wrong_types",
       "apiVersion: v1\nkind: List\nitems: [null, 3, \"x\"]\n",
       {},
       {"items[0]: expected a Kubernetes object", "got null", "items[1]", "got number 3",
        "items[2]", "got string \"x\""}},
      {"nested_list_bad_item",
       "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: List\n  items: [7]\n",
       {},
       {"@:6:", "items[0].items[0]: expected a Kubernetes object"}},
      {"extensions_deployment",
       with(a, "apiVersion: apps/v1", "apiVersion: extensions/v1beta1"),
       {},
       {"@:1:1:", "extensions/v1beta1", "apps/v1"}},
      {"lowercase_kind",
       with(a, "kind: Deployment", "kind: deployment"),
       {},
       {"@:1:1:", "kind \"deployment\": kinds are case-sensitive; expected Deployment"}},
      {"duplicate_objects",
       std::string(kArticle) + "---\n" + kArticle,
       {},
       {"@:28:1: duplicate object: Deployment shop-prod/checkout is also at "}},
      {"grace_infinite",
       with(a, grace, "terminationGracePeriodSeconds: .inf"),
       {},
       {"@:17:", "got number .inf"}},
      {"grace_nan", with(a, grace, "terminationGracePeriodSeconds: .nan"), {}, {"got number .nan"}},
      {"utf32", std::string("\xFF\xFE\0\0k\0\0\0", 8), {}, {"@:1:1:", "UTF-32"}},
      {"truncated_json",
       "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{\"a\": ",
       {},
       {"@:1:"}},
      {"version_with_flag", "", {"version", "--frob"}, {"unexpected argument \"--frob\""}},
      {"in_place_on_stdin", kArticle, {"plan", "-f", "-", "-w"}, {"cannot write back"}},
      {"stdin_broken", "kind: [\n", {"check", "-f", "-"}, {"-:"}},
  };
}

// A user hook near 2^63 once made the budget's sum wrap, and `check` passed
// a budget that does not hold. Now the hook is bounded (a finding) and every
// sum saturates.
TEST_F(CliTest, HugeHookSecondsAreAFindingNotAnOverflow) {
  const std::string hook =
      "        lifecycle:\n          preStop:\n            sleep: {seconds: 9223372036854775800}\n";
  const auto file = write(
      "hook.yaml", with(kArticle, "        readinessProbe:", hook + "        readinessProbe:"));
  auto r = run({"check", "-f", file});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("error PreStopOutOfRange: Deployment shop-prod/checkout container "
                               "checkout: the preStop hook waits 9223372036854775800s"));
  auto planned = run({"plan", "-f", file});
  EXPECT_EQ(planned.code, 0);
  EXPECT_THAT(planned.err, HasSubstr("PreStopOutOfRange"));
  EXPECT_THAT(planned.err, HasSubstr("0 Deployment(s) changed"));
  std::ifstream in(file);
  EXPECT_EQ(planned.out, std::string(std::istreambuf_iterator<char>(in), {}));
}

// Names come from the input: escaped in text output, so they cannot forge a
// finding line or drive the terminal.
TEST_F(CliTest, ControlCharactersAreEscapedInTextOutput) {
  const auto file =
      write("evil.yaml", with(kArticle, "  name: checkout\n",
                              "  name: \"x\\nforged.yaml:1:1: info Fine: all good\\r\\e[2J\"\n"));
  auto r = run({"check", "-f", file});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("Deployment shop-prod/x\\nforged.yaml:1:1: info Fine: all "
                               "good\\r\\u001b[2J: "));
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  EXPECT_EQ(r.out.find('\r'), std::string::npos);
  for (std::size_t at = 0; (at = r.out.find('\n', at)) != std::string::npos; ++at) {
    EXPECT_TRUE(at + 1 == r.out.size() || r.out.compare(at + 1, file.size(), file) == 0)
        << "a line that does not start with the file name";
  }
  auto planned = run({"plan", "-f", file});
  EXPECT_EQ(planned.err.find('\x1b'), std::string::npos);
  EXPECT_THAT(planned.err, HasSubstr("Deployment shop-prod/x\\nforged"));
}

// docs/api.md, "Command line": a Deployment that names a policy that is not there is reported
// (PolicyNotFound) and left as it is, not planned with the defaults.
TEST_F(CliTest, NamedButAbsentPolicyLeavesTheDeploymentUnchanged) {
  const std::string text =
      with(kArticle, "    gracekeeper.dev/enabled: \"true\"\n",
           "    gracekeeper.dev/enabled: \"true\"\n    gracekeeper.dev/policy: strict\n");
  const auto file = write("named.yaml", text);
  auto r = run({"plan", "-f", file});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, text);
  EXPECT_THAT(r.err, HasSubstr("PolicyNotFound: no ShutdownPolicy named \"strict\""));
  EXPECT_THAT(r.err, HasSubstr("0 Deployment(s) changed"));
  auto checked = run({"check", "-f", file});
  EXPECT_EQ(checked.code, 1);  // not evaluated: never a silent pass
  EXPECT_THAT(checked.out, HasSubstr("error PolicyNotFound"));
}

// Issue 18 item 6: `check` with no policy it can choose exits 1 naming why;
// `plan` leaves the Deployment as it is.
TEST_F(CliTest, CheckWithNoChoosablePolicyExitsOne) {
  const std::string misspelt =
      with(kArticle, "    gracekeeper.dev/enabled: \"true\"\n",
           "    gracekeeper.dev/enabled: \"true\"\n    gracekeeper.dev/policy: defualt\n");
  const std::string second =
      std::string(kPolicy).replace(std::string(kPolicy).find("default"), 7, "second");
  const std::string other_selector =
      with(kPolicy, "spec:\n", "spec:\n  selector: {matchLabels: {tier: batch}}\n");
  struct Case {
    std::string name, text, code;
  };
  for (const auto& c :
       {Case{"misspelt", std::string(kPolicy) + "---\n" + misspelt, "PolicyNotFound"},
        Case{"ambiguous", std::string(kPolicy) + "---\n" + second + "---\n" + kArticle,
             "AmbiguousPolicy"},
        Case{"none", other_selector + "---\n" + kArticle, "NoMatchingPolicy"}}) {
    SCOPED_TRACE(c.name);
    const auto file = write(c.name + ".yaml", c.text);
    auto checked = run({"check", "-f", file});
    EXPECT_EQ(checked.code, 1) << checked.out << checked.err;
    EXPECT_THAT(checked.out, HasSubstr("error " + c.code + ": Deployment shop-prod/checkout"));
    EXPECT_THAT(checked.err, HasSubstr("1 error(s)"));
    auto planned = run({"plan", "-f", file});
    EXPECT_EQ(planned.code, 0);
    EXPECT_EQ(planned.out, c.text);
    EXPECT_THAT(planned.err, HasSubstr(c.code));
    EXPECT_THAT(planned.err, HasSubstr("0 Deployment(s) changed"));
  }
}

// Issue 18 item 12: an opted-in StatefulSet gets its wait and grace (no
// strategy: it replaces one pod at a time); a DaemonSet is reported, not governed.
TEST_F(CliTest, StatefulSetsArePlannedAndDaemonSetsReported) {
  const std::string sts = with(kArticle, "kind: Deployment", "kind: StatefulSet");
  const auto file = write("sts.yaml", sts);
  auto checked = run({"check", "-f", file});
  EXPECT_EQ(checked.code, 1);
  EXPECT_THAT(checked.out, HasSubstr("error NoPreStopWait: StatefulSet shop-prod/checkout"));
  EXPECT_THAT(checked.out, Not(HasSubstr("CapacityDropOnRollout")));
  auto planned = run({"plan", "-f", file});
  ASSERT_EQ(planned.code, 0) << planned.err;
  EXPECT_THAT(planned.err, HasSubstr("StatefulSet shop-prod/checkout (policy (defaults)):"));
  EXPECT_THAT(planned.out, HasSubstr("seconds: 15"));
  EXPECT_THAT(planned.out, HasSubstr("terminationGracePeriodSeconds: 55"));
  EXPECT_THAT(planned.out, Not(HasSubstr("maxUnavailable")));
  const auto planned_file = write("sts-planned.yaml", planned.out);
  EXPECT_EQ(run({"check", "-f", planned_file}).code, 0);

  const std::string ds = with(kArticle, "kind: Deployment", "kind: DaemonSet");
  const auto ds_file = write("ds.yaml", ds);
  auto reported = run({"check", "-f", ds_file, "-o", "json"});
  EXPECT_EQ(reported.code, 0) << reported.err;
  auto findings = nlohmann::json::parse(reported.out);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0]["code"], "UnsupportedKind");
  EXPECT_EQ(findings[0]["severity"], "info");
  EXPECT_EQ(findings[0]["object"]["kind"], "DaemonSet");
  auto untouched = run({"plan", "-f", ds_file});
  EXPECT_EQ(untouched.out, ds);
  EXPECT_THAT(untouched.err, HasSubstr("UnsupportedKind"));

  // Not opted in: neither is mentioned.
  const std::string quiet = with(ds, "    gracekeeper.dev/enabled: \"true\"\n", "");
  auto silent = run({"check", "-f", write("quiet.yaml", quiet)});
  EXPECT_EQ(silent.code, 0);
  EXPECT_EQ(silent.out, "");
}

// Issue 45 item 8: --kubernetes-version decides whether a StatefulSet's
// maxUnavailable is honoured (1.35), and the summary names each kind.
TEST_F(CliTest, KubernetesVersionDecidesStatefulSetMaxUnavailable) {
  std::string sts = with(kArticle, "kind: Deployment", "kind: StatefulSet");
  sts += std::string("---\n") + kArticle;  // and a Deployment
  sts = with(sts, "spec:\n  replicas: 3\n",
             "spec:\n  replicas: 3\n  updateStrategy:\n    rollingUpdate: {maxUnavailable: 2}\n");
  const auto file = write("sts.yaml", sts);
  auto current = run({"check", "-f", file});
  EXPECT_THAT(current.out, HasSubstr("warning CapacityDropOnRollout: StatefulSet"));
  EXPECT_THAT(current.err, HasSubstr("in 1 Deployment(s) and 1 StatefulSet(s)"));
  auto old = run({"check", "--kubernetes-version", "1.34", "-f", file});
  EXPECT_THAT(old.out, Not(HasSubstr("warning CapacityDropOnRollout: StatefulSet")));
  EXPECT_THAT(run({"check", "--kubernetes-version", "1.35", "-f", file}).out,
              HasSubstr("warning CapacityDropOnRollout: StatefulSet"));
  const std::string only = with(kArticle, "kind: Deployment", "kind: StatefulSet");
  EXPECT_THAT(run({"check", "-f", write("only.yaml", only)}).err,
              HasSubstr(" info in 1 StatefulSet(s)\n"));
}

// Issue 45 item 1: hook scripts read as the shell runs them, end to end.
// Each hook below was once counted as a wait, and `check` passed it; each is
// now PreStopUnknownLength. A hook whose `exec` has only redirections runs
// on after it, and the grace `plan` gives covers the whole 75 s.

// The articles' Deployment with one exec preStop hook (its command as a
// JSON list); with the default policy the wait is 15 s and the reserve 10 s.
std::string with_exec_hook(const std::string& command) {
  return with(kArticle, "        - containerPort: 8080\n",
              "        - containerPort: 8080\n        lifecycle:\n          preStop:\n"
              "            exec:\n              command: " +
                  command + "\n");
}

TEST_F(CliTest, HooksThatMayActBeforeTheSleepAreOfUnknownLength) {
  const char* hooks[] = {
      R"j(["sh", "-nc", "sleep 30"])j",
      R"j(["bash", "-rc", "/bin/sleep 30"])j",
      R"j(["sh", "-c", "X=$(nginx -s quit) sleep 30"])j",
      R"j(["sh", "-c", "X=$(nginx -s quit); sleep 20"])j",
      R"j(["sh", "-c", "sleep 20 >$(nginx -s quit)"])j",
      R"j(["bash", "-c", "echo quit > /dev/tcp/127.0.0.1/9000; sleep 30"])j",
      R"j(["sh", "-c", "printf x > /run/app.ctl; sleep 20"])j",
  };
  int i = 0;
  for (const char* hook : hooks) {
    SCOPED_TRACE(hook);
    const auto file = write("hook-" + std::to_string(i) + ".yaml", with_exec_hook(hook));
    auto checked = run({"check", "-f", file});
    EXPECT_THAT(checked.out, HasSubstr("PreStopUnknownLength")) << checked.out << checked.err;
    // Planned (the user's hook is kept), `check` still warns: never the wait.
    auto planned = run({"plan", "-f", file});
    ASSERT_EQ(planned.code, 0) << planned.err;
    EXPECT_THAT(planned.err, HasSubstr("PreStopUnknownLength"));
    EXPECT_THAT(planned.err, HasSubstr("not known to hold"));
    auto again =
        run({"check", "-f", write("planned-" + std::to_string(i++) + ".yaml", planned.out)});
    EXPECT_EQ(again.code, 0) << again.out << again.err;
    EXPECT_THAT(again.out, HasSubstr("warning PreStopUnknownLength"));
  }
}

TEST_F(CliTest, AnExecWithOnlyRedirectionsDoesNotEndTheHook) {
  const auto file =
      write("exec.yaml",
            with_exec_hook(R"j(["sh", "-c", "sleep 15; exec >/proc/1/fd/1 2>&1; sleep 60"])j"));
  auto planned = run({"plan", "-f", file});
  ASSERT_EQ(planned.code, 0) << planned.err;
  // 75 s of hook + 30 s of drain + 10 s of reserve.
  EXPECT_THAT(planned.err, HasSubstr("terminationGracePeriodSeconds: 30s -> 115s"));
  EXPECT_THAT(planned.err, Not(HasSubstr("PreStopUnknownLength")));
  EXPECT_THAT(planned.out, HasSubstr("terminationGracePeriodSeconds: 115"));
  auto checked = run({"check", "-f", write("planned.yaml", planned.out)});
  EXPECT_EQ(checked.code, 0) << checked.out << checked.err;
  EXPECT_THAT(checked.out, Not(HasSubstr("PreStopTooShort")));
}

// Issue 48 item 5: `check` judges a Pod as it runs, from `kubectl get pod
// -o yaml`: here the tuned template's 15 s wait and 55 s grace, after a
// policy engine cut the grace to 20 s and a mesh injected istio-proxy
// without a wait. `plan` never changes a Pod (its fields are fixed).
TEST_F(CliTest, CheckJudgesAPodAsItRuns) {
  const std::string pod = R"(apiVersion: v1
kind: Pod
metadata:
  name: checkout-7d9c5b8f6-x2x9k
  namespace: shop-prod
  labels: {app: checkout, pod-template-hash: 7d9c5b8f6}
  ownerReferences:
  - {apiVersion: apps/v1, kind: ReplicaSet, name: checkout-7d9c5b8f6, uid: u1, controller: true}
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: checkout
    image: checkout:1.4.2
    ports: [{containerPort: 8080}]
    lifecycle: {preStop: {sleep: {seconds: 15}}}
    readinessProbe: {httpGet: {path: /ready, port: 8080}}
  - name: istio-proxy
    image: proxyv2:1.28.0
    ports: [{containerPort: 15090, name: http-envoy-prom}]
    readinessProbe: {httpGet: {path: /healthz/ready, port: 15021}}
status:
  phase: Running
)";
  const auto file = write("pod.yaml", pod);
  auto checked = run({"check", "-f", file});
  EXPECT_EQ(checked.code, 1) << checked.out << checked.err;
  EXPECT_THAT(checked.out,
              HasSubstr("error BudgetExceeded: Pod shop-prod/checkout-7d9c5b8f6-x2x9k"));
  EXPECT_THAT(checked.out, HasSubstr("terminationGracePeriodSeconds 20s"));
  // The proxy the injector added is no app container: judged by its own
  // stay (Istio's default 5 s drain), never given a wait.
  EXPECT_THAT(checked.out,
              HasSubstr("error ProxyExitsEarly: Pod shop-prod/checkout-7d9c5b8f6-x2x9k "
                        "container istio-proxy: Istio's proxy serves for "
                        "terminationDrainDuration 5s (Istio's default)"));
  EXPECT_THAT(checked.out, Not(HasSubstr("container istio-proxy: no preStop wait")));
  EXPECT_THAT(checked.out, Not(HasSubstr("CapacityDropOnRollout")));
  EXPECT_THAT(checked.out, Not(HasSubstr("ExistingPreStopKept")));
  EXPECT_THAT(checked.err, HasSubstr(" in 1 Pod(s)\n"));
  auto planned = run({"plan", "-f", file});
  ASSERT_EQ(planned.code, 0) << planned.err;
  EXPECT_EQ(planned.out, pod);
  EXPECT_THAT(planned.err, HasSubstr("not changed: a Pod's preStop and grace are fixed"));
  // A bad field names its path in the Pod.
  auto bad = run({"check", "-f",
                  write("bad.yaml", with(pod, "terminationGracePeriodSeconds: 20",
                                         "terminationGracePeriodSeconds: soon"))});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("spec.terminationGracePeriodSeconds: expected an integer"));
}

// Issue 18 item 4: a user's short hook kept under existing: Keep is an error
// in `check`, and `plan` says it could not fix it.
TEST_F(CliTest, KeptUserHookThatIsTooShortFailsCheck) {
  const std::string hook =
      "        lifecycle:\n          preStop:\n            sleep: {seconds: 1}\n";
  const auto file = write(
      "short.yaml", with(kArticle, "        readinessProbe:", hook + "        readinessProbe:"));
  auto planned = run({"plan", "-f", file});
  ASSERT_EQ(planned.code, 0) << planned.err;
  EXPECT_THAT(planned.err, HasSubstr("PreStopTooShort: preStop waits 1s"));
  EXPECT_THAT(planned.err, HasSubstr("raise its sleep to 15s"));
  auto checked = run({"check", "-f", write("planned.yaml", planned.out)});
  EXPECT_EQ(checked.code, 1);
  EXPECT_THAT(checked.out, HasSubstr("error PreStopTooShort"));
}

// Issue 32 item 1: hooks read as the kubelet runs them. Each short one
// (0.5 s < 5 s, 2.5 s < 3 s) fails check; each long one gets a grace that
// covers it (above 60 s); one of unknown length is a warning, never the wait.
TEST_F(CliTest, HookLengthsAreReadAsTheKubeletRunsThem) {
  const auto with_hook = [&](const std::string& name, const std::string& command) {
    const std::string hook =
        "        lifecycle:\n          preStop:\n            exec:\n"
        "              command: " +
        command + "\n";
    return write(name, with(kArticle, "        readinessProbe:", hook + "        readinessProbe:"));
  };
  const auto policy_with_min = [&](int min_seconds) {
    return write(
        "policy-" + std::to_string(min_seconds) + ".yaml",
        std::string(kPolicy) + "  preStop: {minSeconds: " + std::to_string(min_seconds) + "}\n");
  };
  struct Short {
    const char* command;
    int propagation;  // seconds of --propagation; the wait is max(minSeconds, ceil(1.5 x))
    int min_seconds;
  } short_hooks[] = {
      {R"(["sleep", "0.5"])", 0, 5},
      {R"(["sh", "-c", "sleep 2.5"])", 2, 3},
      {R"(["/bin/sh", "-c", "sleep 1; sleep 1.5"])", 2, 3},
  };
  int i = 0;
  for (const auto& h : short_hooks) {
    SCOPED_TRACE(h.command);
    const auto file = with_hook("short-" + std::to_string(i++) + ".yaml", h.command);
    const auto policy = policy_with_min(h.min_seconds);
    auto checked = run({"check", "-f", file, "--policy", policy, "--propagation-seconds",
                        std::to_string(h.propagation)});
    EXPECT_EQ(checked.code, 1) << checked.out << checked.err;
    EXPECT_THAT(checked.out, HasSubstr("error PreStopTooShort"));
    auto planned = run({"plan", "-f", file, "--policy", policy, "--propagation-seconds",
                        std::to_string(h.propagation)});
    ASSERT_EQ(planned.code, 0) << planned.err;
    EXPECT_EQ(run({"check", "-f", write("planned-" + std::to_string(i) + ".yaml", planned.out),
                   "--policy", policy, "--propagation-seconds", std::to_string(h.propagation)})
                  .code,
              1);  // a kept user hook: plan cannot fix it
  }
  struct Long {
    const char* command;
    const char* grace;
  } long_hooks[] = {
      {R"(["sleep", "1m"])", "terminationGracePeriodSeconds: 30s -> 100s"},  // 60 + 30 + 10
      {R"(["sh", "-c", "sleep 90; nginx -s quit"])", "terminationGracePeriodSeconds: 30s -> 130s"},
      {R"(["sleep", "1m", "0.5"])", "terminationGracePeriodSeconds: 30s -> 101s"},
  };
  for (const auto& h : long_hooks) {
    SCOPED_TRACE(h.command);
    const auto file = with_hook("long-" + std::to_string(i++) + ".yaml", h.command);
    auto planned = run({"plan", "-f", file});
    ASSERT_EQ(planned.code, 0) << planned.err;
    EXPECT_THAT(planned.err, HasSubstr(h.grace));
    EXPECT_THAT(planned.err, Not(HasSubstr("containers[checkout].preStop")));
    EXPECT_EQ(
        run({"check", "-f", write("planned-" + std::to_string(i) + ".yaml", planned.out)}).code, 0);
  }
  // Unknown length: a warning in check and in plan's summary; not the wait.
  const auto unknown = with_hook("unknown.yaml", R"(["/drain.sh"])");
  auto planned = run({"plan", "-f", unknown});
  ASSERT_EQ(planned.code, 0) << planned.err;
  EXPECT_THAT(planned.err, HasSubstr("PreStopUnknownLength"));
  EXPECT_THAT(planned.err, HasSubstr("not known to hold"));
  auto checked = run({"check", "-f", write("planned-unknown.yaml", planned.out)});
  EXPECT_EQ(checked.code, 0);
  EXPECT_THAT(checked.out, HasSubstr("warning PreStopUnknownLength"));
}

// Issue 18 item 2: a native sidecar is read and left alone; the app gets the wait.
TEST_F(CliTest, NativeSidecarsAreBudgetedNotGivenTheWait) {
  const std::string sidecar =
      "      initContainers:\n"
      "      - name: proxy\n"
      "        image: proxy:1\n"
      "        restartPolicy: Always\n"
      "        ports:\n"
      "        - containerPort: 15001\n"
      "        lifecycle:\n"
      "          preStop:\n"
      "            sleep: {seconds: 5}\n";
  const auto file =
      write("sidecar.yaml", with(kArticle, "      containers:\n", sidecar + "      containers:\n"));
  auto planned = run({"plan", "-f", file});
  ASSERT_EQ(planned.code, 0) << planned.err;
  EXPECT_THAT(planned.err, HasSubstr("containers[checkout].preStop: none -> sleep 15s"));
  EXPECT_THAT(planned.err, Not(HasSubstr("containers[proxy]")));
  EXPECT_THAT(planned.err, HasSubstr("terminationGracePeriodSeconds: 30s -> 60s"));  // + 5
  EXPECT_EQ(run({"check", "-f", write("planned.yaml", planned.out)}).code, 0);
}

// A List inside a List: its Deployments are planned, not skipped.
TEST_F(CliTest, NestedListsArePlanned) {
  const std::string list =
      "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: List\n  "
      "items:\n  - " +
      with_indent(kArticle, "    ").substr(4);
  const auto file = write("nested.yaml", list);
  auto checked = run({"check", "-f", file});
  EXPECT_EQ(checked.code, 1);
  EXPECT_THAT(checked.out, HasSubstr(file + ":7:5: error NoPreStopWait"));
  auto planned = run({"plan", "-f", file, "-o", "json"});
  ASSERT_EQ(planned.code, 0) << planned.err;
  auto out = nlohmann::json::parse(planned.out);
  EXPECT_EQ(
      out["items"][0]["items"][0]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 55);
}

// `plan -o json` writes a List item by item, as it comes (decoded whole, a
// List costs 10x its text), yet as the List dumped whole would be: among
// other documents, with a nested List, an item not planned, and a document
// with `items` that is not a List (its items were not objects of their own).
TEST_F(CliTest, JsonOutputWritesAListItemByItemAsItWasWhole) {
  const std::string text =
      "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: before}\n---\n"
      "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: x}\n"
      "- apiVersion: v1\n  kind: List\n  items:\n  - " +
      with_indent(kArticle, "    ").substr(4) + "- " + with_indent(kArticle, "  ").substr(2) +
      "kind: List\nmetadata: {resourceVersion: \"\"}\n---\n"
      "apiVersion: v1\nkind: Thing\nmetadata: {name: t}\nitems: [1, 2]\n";
  const std::string renamed = [&] {
    std::string t = text;  // the second Deployment in another namespace
    const std::string from = "namespace: shop-prod\n";
    return t.replace(t.rfind(from), from.size(), "namespace: other\n");
  }();
  const auto file = write("list.yaml", renamed);
  auto planned = run({"plan", "-f", file, "-o", "json"});
  ASSERT_EQ(planned.code, 0) << planned.err;
  EXPECT_THAT(planned.err, HasSubstr("plan: 2 Deployment(s) changed"));
  const auto out = nlohmann::ordered_json::parse(planned.out);
  EXPECT_EQ(planned.out, out.dump(2) + "\n");  // the layout of a whole dump
  ASSERT_EQ(out["items"].size(), 3u);
  EXPECT_EQ(out["items"][0]["metadata"]["name"], "before");
  const auto& list = out["items"][1];
  EXPECT_EQ(list["items"][0]["metadata"]["name"], "x");
  EXPECT_EQ(
      list["items"][1]["items"][0]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
      55);
  EXPECT_EQ(list["items"][2]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 55);
  EXPECT_EQ(list["metadata"]["resourceVersion"], "");
  EXPECT_EQ(out["items"][2]["items"], nlohmann::ordered_json::parse("[1, 2]"));
}

// A JSON List that only the YAML reader reads: a `"<<"` key, which the
// JSON reader leaves to it, after the first item. The JSON reader hands out
// item 0 before it gives up, and the YAML reader reads the List again whole
// (its items recalled): plan edits the item handed out, then the rest from
// the recalled List, each in place.
TEST_F(CliTest, JsonListOnlyTheYamlReaderReadsIsEditedItemByItem) {
  auto deployment = [](const std::string& name) {
    return R"({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": ")" + name +
           R"(", "annotations": {"gracekeeper.dev/enabled": "true"}}, "spec": {"template": )"
           R"({"spec": {"containers": [{"name": "app", "image": "app:1"}]}}}})";
  };
  const std::string config_map =
      R"({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, )"
      R"("data": {"<<": "x"}})";
  const std::string list = "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n  " +
                           deployment("first") + ",\n  " + config_map + ",\n  " +
                           deployment("second") + "\n]}\n";
  const auto file = write("list.json", list);
  auto planned = run({"plan", "-f", file});
  ASSERT_EQ(planned.code, 0) << planned.err;
  EXPECT_THAT(planned.err, HasSubstr("plan: 2 Deployment(s) changed"));
  EXPECT_THAT(planned.err, Not(HasSubstr("written out whole")));
  EXPECT_THAT(planned.out, HasSubstr("\n  " + config_map + ",\n"));
  // The text edited in place reads as the planned objects.
  auto json = run({"plan", "-f", file, "-o", "json"});
  ASSERT_EQ(json.code, 0) << json.err;
  const auto edited = nlohmann::ordered_json::parse(planned.out);
  EXPECT_EQ(edited, nlohmann::ordered_json::parse(json.out));
  for (int item : {0, 2}) {
    EXPECT_EQ(edited["items"][item]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
              55)
        << item;
  }
  ASSERT_EQ(run({"plan", "-w", "-f", file}).code, 0);
  EXPECT_EQ(run({"check", "-f", file}).code, 0);
  EXPECT_THAT(run({"plan", "-f", file}).err, HasSubstr("plan: 0 Deployment(s) changed"));
}

// Valid YAML with old Mac line ends (CR only) reads, plans and keeps them.
TEST_F(CliTest, CarriageReturnOnlyLineBreaks) {
  std::string text = kArticle;
  std::replace(text.begin(), text.end(), '\n', '\r');
  const auto file = write("mac.yaml", text);
  auto r = run({"check", "-f", file});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.out, HasSubstr(file + ":1:1: error NoPreStopWait"));
}

TEST_F(CliTest, UnusableInputExitsTwoNamingFileLineAndExpectation) {
  for (const auto& c : bad_inputs()) {
    SCOPED_TRACE(c.name);
    const auto path = write(std::string(c.name) + ".yaml", c.content);
    std::vector<std::string> args =
        c.args.empty() ? std::vector<std::string>{"plan", "-f", path} : c.args;
    for (auto& arg : args) {
      if (arg == "@") arg = path;
    }
    const bool from_stdin = std::find(args.begin(), args.end(), "-") != args.end();
    auto r = run(args, from_stdin ? c.content : "");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.out, "") << "stdout must stay empty on exit 2";
    for (auto expected : c.expected) {
      if (expected.starts_with("@")) expected = path + expected.substr(1);
      EXPECT_THAT(r.err, HasSubstr(expected));
    }
  }
}

}  // namespace
}  // namespace gracekeeper::cli
