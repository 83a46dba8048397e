// The REST client against a real kube-apiserver (test/cluster/up).
// Usage: integration_kube_rest CLUSTER_DIR [gtest flags]
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "../../support/run_on.h"
#include "gracekeeper/kube/client.h"
#include "gracekeeper/kube/config.h"

namespace gracekeeper::kube {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

fs::path g_cluster_dir;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string env_value(const std::string& key) {
  std::istringstream in(read_file(g_cluster_dir / "env"));
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(key + "=")) return line.substr(key.size() + 1);
  }
  return {};
}

// The admin kubeconfig written by test/cluster/up; built from the PKI files
// when load_kubeconfig is not usable, so a config loader bug shows up as its
// own failure rather than as every test here failing.
ClusterConfig cluster_config() {
  KubeconfigOptions options;
  options.files = {g_cluster_dir / "kubeconfig"};
  auto loaded = load_kubeconfig(options);
  if (loaded) return *loaded;
  ADD_FAILURE() << "load_kubeconfig: " << loaded.error().format();
  ClusterConfig c;
  c.server = env_value("APISERVER_URL");
  c.certificate_authority = Pem{read_file(env_value("CA_FILE")), "CA_FILE"};
  c.client_certificate = Pem{read_file(env_value("ADMIN_CERT_FILE")), "ADMIN_CERT_FILE"};
  c.client_key = Pem{read_file(env_value("ADMIN_KEY_FILE")), "ADMIN_KEY_FILE"};
  return c;
}

using test_support::run_on;

std::string random_suffix() {
  std::random_device rd;
  return std::to_string(rd() % 1000000);
}

json config_map(const std::string& name, json data = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}}},
          {"data", std::move(data)}};
}

json deployment(const std::string& name) {
  json labels = {{"app", name}};
  return {{"apiVersion", "apps/v1"},
          {"kind", "Deployment"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"replicas", 1},
            {"selector", {{"matchLabels", labels}}},
            {"template",
             {{"metadata", {{"labels", labels}}},
              {"spec",
               {{"containers", json::array({{{"name", "app"}, {"image", "nginx:1.27"}}})}}}}}}}};
}

class RestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_.emplace(io_.get_executor(), cluster_config());
    ns_ = "rest-" + random_suffix();
    auto created = run_on(
        io_, client_->create(
                 resources::namespaces, "",
                 {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns_}}}}));
    ASSERT_TRUE(created) << created.error().format();
  }
  void TearDown() override {
    // No namespace controller runs here, so the namespace only goes
    // Terminating; the cluster is thrown away after the run anyway.
    if (client_) (void)run_on(io_, client_->remove(resources::namespaces, "", ns_));
  }

  template <class T>
  T run(asio::awaitable<T> task) {
    return run_on(io_, std::move(task));
  }

  asio::io_context io_;
  std::optional<Client> client_;
  std::string ns_;
};

TEST_F(RestTest, ConfigMapCrud) {
  auto& c = *client_;
  auto created = run(c.create(resources::config_maps, ns_, config_map("one", {{"a", "1"}})));
  ASSERT_TRUE(created) << created.error().format();
  EXPECT_EQ((*created)["metadata"]["namespace"], ns_);

  auto got = run(c.get(resources::config_maps, ns_, "one"));
  ASSERT_TRUE(got) << got.error().format();
  EXPECT_EQ((*got)["data"]["a"], "1");

  auto patched = run(c.merge_patch(resources::config_maps, ns_, "one", {{"data", {{"b", "2"}}}}));
  ASSERT_TRUE(patched) << patched.error().format();
  EXPECT_EQ((*patched)["data"]["b"], "2");

  auto jp =
      run(c.json_patch(resources::config_maps, ns_, "one",
                       json::array({{{"op", "replace"}, {"path", "/data/a"}, {"value", "3"}}})));
  ASSERT_TRUE(jp) << jp.error().format();
  EXPECT_EQ((*jp)["data"]["a"], "3");

  json replacement = *jp;
  replacement["data"] = {{"only", "this"}};
  auto replaced = run(c.replace(resources::config_maps, ns_, "one", replacement));
  ASSERT_TRUE(replaced) << replaced.error().format();
  EXPECT_EQ((*replaced)["data"], json({{"only", "this"}}));

  // A stale resourceVersion makes a PUT conflict.
  auto stale = run(c.replace(resources::config_maps, ns_, "one", replacement));
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().reason, ApiError::Reason::Conflict) << stale.error().format();

  auto again = run(c.create(resources::config_maps, ns_, config_map("one")));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().reason, ApiError::Reason::AlreadyExists) << again.error().format();
  EXPECT_EQ(again.error().http_status, 409);

  auto removed = run(c.remove(resources::config_maps, ns_, "one"));
  ASSERT_TRUE(removed) << removed.error().format();

  auto gone = run(c.get(resources::config_maps, ns_, "one"));
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().reason, ApiError::Reason::NotFound);
  EXPECT_EQ(gone.error().http_status, 404);
  EXPECT_THAT(gone.error().message, HasSubstr("\"one\" not found"));
  EXPECT_THAT(gone.error().format(), HasSubstr("NotFound (404)"));
}

TEST_F(RestTest, DeploymentCrudAndStatus) {
  auto& c = *client_;
  auto created = run(c.create(resources::deployments, ns_, deployment("web")));
  ASSERT_TRUE(created) << created.error().format();
  auto got = run(c.get(resources::deployments, ns_, "web"));
  ASSERT_TRUE(got) << got.error().format();
  EXPECT_EQ((*got)["spec"]["replicas"], 1);

  auto scaled =
      run(c.merge_patch(resources::deployments, ns_, "web", {{"spec", {{"replicas", 3}}}}));
  ASSERT_TRUE(scaled) << scaled.error().format();
  EXPECT_EQ((*scaled)["spec"]["replicas"], 3);

  // Status goes through the subresource; the main resource ignores it.
  auto ignored = run(
      c.merge_patch(resources::deployments, ns_, "web", {{"status", {{"observedGeneration", 7}}}}));
  ASSERT_TRUE(ignored) << ignored.error().format();
  EXPECT_FALSE((*ignored)["status"].contains("observedGeneration"));

  auto status =
      run(c.merge_patch(resources::deployments, ns_, "web",
                        {{"status", {{"observedGeneration", 2}}}}, {.subresource = "status"}));
  ASSERT_TRUE(status) << status.error().format();
  EXPECT_EQ((*status)["status"]["observedGeneration"], 2);

  json object = *status;
  object["status"]["observedGeneration"] = 5;
  auto put = run(c.update_status(resources::deployments, ns_, "web", object));
  ASSERT_TRUE(put) << put.error().format();
  auto status_view = run(c.get(resources::deployments, ns_, "web", "status"));
  ASSERT_TRUE(status_view) << status_view.error().format();
  EXPECT_EQ((*status_view)["status"]["observedGeneration"], 5);

  auto removed =
      run(c.remove(resources::deployments, ns_, "web", {.propagation_policy = "Background"}));
  ASSERT_TRUE(removed) << removed.error().format();
  auto gone = run(c.get(resources::deployments, ns_, "web"));
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().reason, ApiError::Reason::NotFound);
}

TEST_F(RestTest, ListPagesThroughEverything) {
  auto& c = *client_;
  for (int i = 0; i < 7; ++i) {
    json cm = config_map("page-" + std::to_string(i));
    cm["metadata"]["labels"] = {{"set", "paging"}};
    auto created = run(c.create(resources::config_maps, ns_, cm));
    ASSERT_TRUE(created) << created.error().format();
  }
  auto first =
      run(c.list(resources::config_maps, ns_, {.label_selector = "set=paging", .limit = 2}));
  ASSERT_TRUE(first) << first.error().format();
  EXPECT_EQ((*first)["items"].size(), 2u);
  ASSERT_TRUE((*first)["metadata"].contains("continue"));

  // Page by hand: every page but the last has a continue token.
  std::set<std::string> names;
  ListOptions o{.label_selector = "set=paging", .limit = 2};
  int pages = 0;
  for (;;) {
    auto page = run(c.list(resources::config_maps, ns_, o));
    ASSERT_TRUE(page) << page.error().format();
    ++pages;
    for (const auto& item : (*page)["items"]) names.insert(item["metadata"]["name"]);
    o.continue_token = (*page)["metadata"].value("continue", "");
    if (o.continue_token.empty()) break;
  }
  EXPECT_EQ(pages, 4);
  EXPECT_EQ(names.size(), 7u);

  auto all =
      run(c.list_all(resources::config_maps, ns_, {.label_selector = "set=paging", .limit = 2}));
  ASSERT_TRUE(all) << all.error().format();
  EXPECT_EQ((*all)["items"].size(), 7u);
  EXPECT_FALSE((*all)["metadata"].contains("continue"));
  EXPECT_FALSE((*all)["metadata"].value("resourceVersion", "").empty());
  EXPECT_EQ((*all)["kind"], "ConfigMapList");
}

TEST_F(RestTest, ServerSideApplyConflictAndForce) {
  auto& c = *client_;
  auto first = run(c.apply(resources::config_maps, ns_, "shared",
                           config_map("shared", {{"key", "alpha-value"}}),
                           {.field_manager = "alpha-manager"}));
  ASSERT_TRUE(first) << first.error().format();
  EXPECT_EQ((*first)["data"]["key"], "alpha-value");

  auto conflict = run(c.apply(resources::config_maps, ns_, "shared",
                              config_map("shared", {{"key", "beta-value"}}),
                              {.field_manager = "beta-manager"}));
  ASSERT_FALSE(conflict);
  const ApiError& e = conflict.error();
  EXPECT_EQ(e.reason, ApiError::Reason::Conflict) << e.format();
  EXPECT_EQ(e.http_status, 409);
  EXPECT_THAT(e.message, HasSubstr("alpha-manager"));
  ASSERT_FALSE(e.causes.empty()) << e.format();
  EXPECT_EQ(e.causes[0].reason, "FieldManagerConflict");
  EXPECT_EQ(e.causes[0].field, ".data.key");
  EXPECT_THAT(e.causes[0].message, HasSubstr("alpha-manager"));

  auto forced = run(c.apply(resources::config_maps, ns_, "shared",
                            config_map("shared", {{"key", "beta-value"}}),
                            {.field_manager = "beta-manager", .force = true}));
  ASSERT_TRUE(forced) << forced.error().format();
  EXPECT_EQ((*forced)["data"]["key"], "beta-value");
  bool beta_owns_key = false;
  for (const auto& entry : (*forced)["metadata"]["managedFields"]) {
    if (entry["manager"] == "beta-manager" && entry["operation"] == "Apply") {
      beta_owns_key = entry["fieldsV1"]["f:data"].contains("f:key");
    }
    if (entry["manager"] == "alpha-manager" && entry.contains("fieldsV1")) {
      EXPECT_FALSE(entry["fieldsV1"].contains("f:data") &&
                   entry["fieldsV1"]["f:data"].contains("f:key"));
    }
  }
  EXPECT_TRUE(beta_owns_key) << (*forced)["metadata"]["managedFields"].dump();
}

TEST_F(RestTest, ApplyWithoutReadingTheObjectStillDecodesErrors) {
  auto& c = *client_;
  ApplyOptions alpha{.field_manager = "alpha-manager", .read_object = false};
  auto first = run(c.apply(resources::config_maps, ns_, "unread",
                           config_map("unread", {{"key", "alpha-value"}}), alpha));
  ASSERT_TRUE(first) << first.error().format();
  EXPECT_EQ(*first, nlohmann::json::object());  // the answer is not read

  ApplyOptions beta{.field_manager = "beta-manager", .read_object = false};
  auto conflict = run(c.apply(resources::config_maps, ns_, "unread",
                              config_map("unread", {{"key", "beta-value"}}), beta));
  ASSERT_FALSE(conflict);
  EXPECT_EQ(conflict.error().reason, ApiError::Reason::Conflict) << conflict.error().format();
  ASSERT_FALSE(conflict.error().causes.empty());
  EXPECT_EQ(conflict.error().causes[0].field, ".data.key");

  beta.force = true;
  auto forced = run(c.apply(resources::config_maps, ns_, "unread",
                            config_map("unread", {{"key", "beta-value"}}), beta));
  ASSERT_TRUE(forced) << forced.error().format();
  EXPECT_EQ(*forced, nlohmann::json::object());
  auto now = run(c.get(resources::config_maps, ns_, "unread"));
  ASSERT_TRUE(now) << now.error().format();
  EXPECT_EQ((*now)["data"]["key"], "beta-value");

  // The other writes the same way: {} on success, the error decoded otherwise.
  WriteOptions unread;
  unread.read_object = false;
  auto patched = run(c.merge_patch(resources::config_maps, ns_, "unread",
                                   {{"data", {{"other", "gamma"}}}}, unread));
  ASSERT_TRUE(patched) << patched.error().format();
  EXPECT_EQ(*patched, nlohmann::json::object());
  auto exists =
      run(c.create(resources::config_maps, ns_, config_map("unread", {{"k", "v"}}), unread));
  ASSERT_FALSE(exists);
  EXPECT_EQ(exists.error().reason, ApiError::Reason::AlreadyExists) << exists.error().format();
  now = run(c.get(resources::config_maps, ns_, "unread"));
  ASSERT_TRUE(now) << now.error().format();
  EXPECT_EQ((*now)["data"]["other"], "gamma");
}

// The reconciler's precondition (deployment_reconciler.cpp, write): an
// apply that carries metadata.resourceVersion is refused when the object
// has moved on, with a conflict that names no field (a field conflict
// always does), forced or not; with the current one it applies.
TEST_F(RestTest, ApplyWithAResourceVersionIsAPrecondition) {
  auto& c = *client_;
  ApplyOptions gk{.field_manager = "gracekeeper", .force = true, .read_object = false};
  auto first = run(c.apply(resources::config_maps, ns_, "versioned",
                           config_map("versioned", {{"key", "one"}}), gk));
  ASSERT_TRUE(first) << first.error().format();
  auto seen = run(c.get(resources::config_maps, ns_, "versioned"));
  ASSERT_TRUE(seen) << seen.error().format();
  const std::string old_version = (*seen)["metadata"]["resourceVersion"];

  auto moved = run(c.merge_patch(resources::config_maps, ns_, "versioned",
                                 {{"data", {{"other", "x"}}}}, WriteOptions{}));
  ASSERT_TRUE(moved) << moved.error().format();

  nlohmann::json stale = config_map("versioned", {{"key", "two"}});
  stale["metadata"]["resourceVersion"] = old_version;
  auto refused = run(c.apply(resources::config_maps, ns_, "versioned", stale, gk));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().reason, ApiError::Reason::Conflict) << refused.error().format();
  EXPECT_EQ(refused.error().http_status, 409);
  EXPECT_TRUE(refused.error().causes.empty()) << refused.error().format();
  auto now = run(c.get(resources::config_maps, ns_, "versioned"));
  ASSERT_TRUE(now) << now.error().format();
  EXPECT_EQ((*now)["data"]["key"], "one");

  nlohmann::json current = config_map("versioned", {{"key", "two"}});
  current["metadata"]["resourceVersion"] = (*now)["metadata"]["resourceVersion"];
  auto applied = run(c.apply(resources::config_maps, ns_, "versioned", current, gk));
  ASSERT_TRUE(applied) << applied.error().format();
  now = run(c.get(resources::config_maps, ns_, "versioned"));
  ASSERT_TRUE(now) << now.error().format();
  EXPECT_EQ((*now)["data"]["key"], "two");
}

TEST_F(RestTest, InvalidObjectHasCauses) {
  auto result = run(client_->create(resources::config_maps, ns_, config_map("Not_A_Valid_Name!")));
  ASSERT_FALSE(result);
  const ApiError& e = result.error();
  EXPECT_EQ(e.reason, ApiError::Reason::Invalid) << e.format();
  EXPECT_EQ(e.http_status, 422);
  ASSERT_FALSE(e.causes.empty());
  EXPECT_EQ(e.causes[0].field, "metadata.name");
  EXPECT_FALSE(e.transient());
}

TEST_F(RestTest, VersionAndDiscovery) {
  auto v = run(client_->server_version());
  ASSERT_TRUE(v) << v.error().format();
  EXPECT_EQ(v->major, "1");
  EXPECT_TRUE(v->minor.starts_with("37")) << v->minor;
  EXPECT_TRUE(v->git_version.starts_with("v1.37")) << v->git_version;

  auto apps = run(client_->discover("apps/v1"));
  ASSERT_TRUE(apps) << apps.error().format();
  bool deployments = false, status = false;
  for (const auto& r : *apps) {
    if (r.name == "deployments") {
      deployments = true;
      EXPECT_EQ(r.kind, "Deployment");
      EXPECT_TRUE(r.namespaced);
      EXPECT_THAT(r.verbs, ::testing::Contains("patch"));
    }
    status = status || r.name == "deployments/status";
  }
  EXPECT_TRUE(deployments);
  EXPECT_TRUE(status);

  auto core = run(client_->discover("v1"));
  ASSERT_TRUE(core) << core.error().format();
  EXPECT_FALSE(core->empty());

  auto missing = run(client_->discover("nosuch.example.com/v1"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().reason, ApiError::Reason::NotFound);
}

TEST_F(RestTest, ManySequentialRequestsOverThePool) {
  // Pooled keep-alive connections carry request after request; a broken
  // reuse (leftover bytes, a stale connection) would show up as a failure.
  for (int i = 0; i < 30; ++i) {
    auto v = run(client_->get(resources::namespaces, "", ns_));
    ASSERT_TRUE(v) << i << ": " << v.error().format();
  }
}

TEST_F(RestTest, WatchDeliversAddedEvents) {
  auto& c = *client_;
  auto listed = run(c.list(resources::config_maps, ns_));
  ASSERT_TRUE(listed) << listed.error().format();
  const std::string rv = (*listed)["metadata"]["resourceVersion"];

  std::string received;
  const std::vector<std::string> names = {"watched-a", "watched-b", "watched-c"};
  auto all_seen = [&] {
    for (const auto& n : names) {
      if (received.find("\"name\":\"" + n + "\"") == std::string::npos) return false;
    }
    return true;
  };
  std::optional<std::expected<WatchEnd, ApiError>> ended;
  asio::co_spawn(io_,
                 c.watch(resources::config_maps, ns_,
                         {.resource_version = rv, .timeout = std::chrono::seconds{60}},
                         [&](std::string_view bytes) {
                           received.append(bytes);
                           return !all_seen();
                         }),
                 [&](std::exception_ptr e, std::expected<WatchEnd, ApiError> r) {
                   if (e) std::rethrow_exception(e);
                   ended = std::move(r);
                 });
  // Creating after the watch opened; the watch starts from `rv` so even
  // objects created before it is established are delivered.
  asio::co_spawn(
      io_,
      [&]() -> asio::awaitable<void> {
        for (const auto& n : names) {
          json object = config_map(n);  // a named local: GCC 12 and temporaries in co_await
          auto r = co_await c.create(resources::config_maps, ns_, std::move(object));
          EXPECT_TRUE(r) << r.error().format();
        }
      },
      asio::detached);
  io_.restart();
  io_.run_for(std::chrono::seconds{30});
  ASSERT_TRUE(ended) << "watch did not end; received: " << received;
  ASSERT_TRUE(*ended) << ended->error().format();
  EXPECT_EQ(**ended, WatchEnd::Stopped);
  EXPECT_THAT(received, HasSubstr("\"type\":\"ADDED\""));
  EXPECT_TRUE(all_seen()) << received;
}

TEST_F(RestTest, WatchStopsOnCancellation) {
  auto& c = *client_;
  asio::cancellation_signal cancel;
  std::optional<std::expected<WatchEnd, ApiError>> ended;
  asio::co_spawn(io_,
                 c.watch(resources::config_maps, ns_, {.timeout = std::chrono::seconds{120}},
                         [](std::string_view) { return true; }),
                 asio::bind_cancellation_slot(
                     cancel.slot(), [&](std::exception_ptr e, std::expected<WatchEnd, ApiError> r) {
                       if (e) std::rethrow_exception(e);
                       ended = std::move(r);
                     }));
  asio::steady_timer timer(io_, std::chrono::seconds{1});
  timer.async_wait([&](auto) { cancel.emit(asio::cancellation_type::terminal); });
  io_.restart();
  const auto start = std::chrono::steady_clock::now();
  io_.run_for(std::chrono::seconds{20});
  ASSERT_TRUE(ended) << "watch ignored cancellation";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds{5});
  ASSERT_FALSE(*ended);
  EXPECT_EQ(ended->error().reason, ApiError::Reason::Transport);
}

TEST_F(RestTest, WatchRefusalAndServerEnd) {
  auto& c = *client_;
  // Refused up front: the error arrives as a value with its reason.
  Resource missing{"", "v1", "nosuchthings", true};
  auto refused = run(c.watch(missing, ns_, {}, [](std::string_view) { return true; }));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().reason, ApiError::Reason::NotFound) << refused.error().format();

  // timeoutSeconds: the server ends the stream cleanly.
  const auto start = std::chrono::steady_clock::now();
  auto ended = run(c.watch(resources::config_maps, ns_, {.timeout = std::chrono::seconds{1}},
                           [](std::string_view) { return true; }));
  ASSERT_TRUE(ended) << ended.error().format();
  EXPECT_EQ(*ended, WatchEnd::Closed);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds{10});
}

// ---------------------------------------------------------------- TLS

class TlsTest : public ::testing::Test {
 protected:
  asio::io_context io_;
};

TEST_F(TlsTest, LoadedKubeconfigWorks) {
  KubeconfigOptions options;
  options.files = {g_cluster_dir / "kubeconfig"};
  auto loaded = load_kubeconfig(options);
  ASSERT_TRUE(loaded) << loaded.error().format();
  Client client(io_.get_executor(), *loaded);
  auto v = run_on(io_, client.server_version());
  ASSERT_TRUE(v) << v.error().format();
}

TEST_F(TlsTest, DifferentCaIsRejected) {
  const fs::path dir = fs::temp_directory_path() / ("gk-other-ca-" + random_suffix());
  fs::create_directories(dir);
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
      "-keyout '" +
      (dir / "ca.key").string() + "' -out '" + (dir / "ca.crt").string() +
      "' -subj /CN=not-the-cluster-ca -days 1 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ClusterConfig config = cluster_config();
  config.certificate_authority = Pem{read_file(dir / "ca.crt"), "test"};
  fs::remove_all(dir);

  Client client(io_.get_executor(), config, {.retry = {.attempts = 1}});
  auto v = run_on(io_, client.server_version());
  ASSERT_FALSE(v) << "a server certificate from another CA was accepted";
  EXPECT_EQ(v.error().reason, ApiError::Reason::Transport);
  EXPECT_THAT(v.error().message, HasSubstr("certificate verify failed"));
  std::cout << "    " << v.error().format() << "\n";
}

TEST_F(TlsTest, SystemStoreDoesNotTrustTheClusterCa) {
  ClusterConfig config = cluster_config();
  config.certificate_authority.reset();
  Client client(io_.get_executor(), config, {.retry = {.attempts = 1}});
  auto v = run_on(io_, client.server_version());
  ASSERT_FALSE(v);
  EXPECT_THAT(v.error().message, HasSubstr("certificate verify failed"));
}

TEST_F(TlsTest, WrongServerNameIsRejected) {
  ClusterConfig config = cluster_config();
  config.tls_server_name = "not-the-apiserver.example.com";
  Client client(io_.get_executor(), config, {.retry = {.attempts = 1}});
  auto v = run_on(io_, client.server_version());
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().reason, ApiError::Reason::Transport);
  EXPECT_THAT(v.error().message, HasSubstr("hostname mismatch"));
}

TEST_F(TlsTest, InsecureSkipVerifyOnlyWhenAsked) {
  ClusterConfig config = cluster_config();
  config.certificate_authority.reset();
  config.insecure_skip_tls_verify = true;
  Client client(io_.get_executor(), config);
  auto v = run_on(io_, client.server_version());
  ASSERT_TRUE(v) << v.error().format();
}

TEST_F(TlsTest, ClosedPortFailsQuickly) {
  ClusterConfig config = cluster_config();
  config.server = "https://127.0.0.1:1";
  Client client(io_.get_executor(), config);  // default retries: refused connections are retried
  const auto start = std::chrono::steady_clock::now();
  auto v = run_on(io_, client.get(resources::namespaces, "", "default"));
  ASSERT_FALSE(v);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds{10});
  EXPECT_EQ(v.error().reason, ApiError::Reason::Transport);
  EXPECT_THAT(v.error().message, HasSubstr("connecting to 127.0.0.1:1"));
  EXPECT_TRUE(v.error().transient());
  std::cout << "    " << v.error().format() << "\n";
}

TEST_F(TlsTest, NoClientCertificateIsUnauthorized) {
  ClusterConfig config = cluster_config();
  config.client_certificate.reset();
  config.client_key.reset();
  Client client(io_.get_executor(), config);
  auto v = run_on(io_, client.get(resources::namespaces, "", "default"));
  ASSERT_FALSE(v);
  // Anonymous requests are either unauthenticated (401) or forbidden (403).
  EXPECT_TRUE(v.error().reason == ApiError::Reason::Unauthorized ||
              v.error().reason == ApiError::Reason::Forbidden)
      << v.error().format();
}

// ---------------------------------------------------------------- client certificates

// A scratch directory, removed at the end of the test.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("gk-client-cert-" + random_suffix());
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p);
  out << text;
}

std::string base64(std::string_view in) {
  static constexpr char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += {abc[v >> 18], abc[(v >> 12) & 63], abc[(v >> 6) & 63], abc[v & 63]};
  }
  if (i + 1 == in.size()) {
    const unsigned v = static_cast<unsigned char>(in[i]) << 16;
    out += {abc[v >> 18], abc[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const unsigned v =
        (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += {abc[v >> 18], abc[(v >> 12) & 63], abc[(v >> 6) & 63], '='};
  }
  return out;
}

struct IssuedCertificate {
  fs::path cert;
  fs::path key;
  std::string serial;  // decimal, as the API server logs it ("SN=...")
};

// Issues a client certificate (O=system:masters, so it would be allowed
// everything) signed by the cluster's own CA (DIR/pki). `openssl ca` is used
// because, unlike OpenSSL 3.0's `x509 -req`, it takes any validity period:
// `dates` is "" for "from now, one day" or "-startdate A -enddate B"
// (YYYYMMDDHHMMSSZ). Each certificate gets its own throw-away CA database.
std::optional<IssuedCertificate> issue_client_certificate(const fs::path& dir,
                                                          const std::string& name,
                                                          const std::string& dates) {
  const fs::path db = dir / (name + "-db");
  fs::create_directories(db);
  write_file(db / "index.txt", "");
  std::random_device rd;
  const std::uint64_t serial = 1'000'000'000ull + rd() % 1'000'000'000ull;
  std::ostringstream hex;
  hex << std::hex << serial;
  std::string serial_hex = hex.str();
  if (serial_hex.size() % 2) serial_hex.insert(0, "0");
  write_file(db / "serial", serial_hex + "\n");
  write_file(db / "ca.cnf",
             "[ca]\ndefault_ca = test_ca\n"
             "[test_ca]\ndatabase = " +
                 (db / "index.txt").string() + "\nnew_certs_dir = " + db.string() +
                 "\nserial = " + (db / "serial").string() +
                 "\ndefault_md = sha256\ndefault_days = 1\npolicy = any\n"
                 "unique_subject = no\nx509_extensions = client\n"
                 "[any]\ncommonName = supplied\norganizationName = optional\n"
                 "[client]\nbasicConstraints = CA:FALSE\n"
                 "keyUsage = critical,digitalSignature,keyEncipherment\n"
                 "extendedKeyUsage = clientAuth\n");
  IssuedCertificate out{dir / (name + ".crt"), dir / (name + ".key"), std::to_string(serial)};
  const fs::path pki = g_cluster_dir / "pki";
  const std::string cmd =
      "set -e; openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out '" +
      out.key.string() + "' 2>/dev/null; openssl req -new -key '" + out.key.string() +
      "' -subj /O=system:masters/CN=" + name + " -out '" + (db / "req.csr").string() +
      "' 2>/dev/null; openssl ca -batch -notext -config '" + (db / "ca.cnf").string() +
      "' -cert '" + (pki / "ca.crt").string() + "' -keyfile '" + (pki / "ca.key").string() +
      "' -in '" + (db / "req.csr").string() + "' -out '" + out.cert.string() + "' " + dates +
      " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return std::nullopt;
  return out;
}

// Whether the certificate's notAfter is in the past (`openssl x509 -checkend 0`).
bool has_expired(const fs::path& cert) {
  const std::string cmd =
      "openssl x509 -checkend 0 -noout -in '" + cert.string() + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) != 0;
}

ClusterConfig with_client_certificate(const fs::path& cert, const fs::path& key) {
  ClusterConfig config = cluster_config();
  config.client_certificate = Pem{read_file(cert), "file " + cert.string()};
  config.client_key = Pem{read_file(key), "file " + key.string()};
  return config;
}

TEST_F(TlsTest, ExpiredClientCertificateIsUnauthorized) {
  TempDir dir;
  const std::string suffix = random_suffix();
  // The control: issued the same way, but valid now. It must work, so the
  // 401 below is down to the dates and nothing else.
  auto fresh = issue_client_certificate(dir.path, "gk-fresh-" + suffix, "");
  ASSERT_TRUE(fresh) << "openssl ca failed";
  auto expired = issue_client_certificate(dir.path, "gk-expired-" + suffix,
                                          "-startdate 20200101000000Z -enddate 20200102000000Z");
  ASSERT_TRUE(expired) << "openssl ca failed";
  ASSERT_FALSE(has_expired(fresh->cert));
  ASSERT_TRUE(has_expired(expired->cert));

  {
    Client client(io_.get_executor(), with_client_certificate(fresh->cert, fresh->key));
    auto ok = run_on(io_, client.get(resources::namespaces, "", "default"));
    ASSERT_TRUE(ok) << "a valid certificate from the same CA: " << ok.error().format();
  }

  Client client(io_.get_executor(), with_client_certificate(expired->cert, expired->key),
                {.retry = {.attempts = 1}});
  // The TLS handshake succeeds: the API server asks for a client certificate
  // but does not require one, and judges it afterwards, in its authenticator.
  // So the answer is an HTTP 401 Status, not a TLS failure.
  auto v = run_on(io_, client.get(resources::namespaces, "", "default"));
  ASSERT_FALSE(v) << "an expired client certificate was accepted";
  EXPECT_EQ(v.error().reason, ApiError::Reason::Unauthorized) << v.error().format();
  EXPECT_EQ(v.error().http_status, 401);
  EXPECT_EQ(v.error().status_reason, "Unauthorized");
  EXPECT_EQ(v.error().message, "Unauthorized");  // the server does not say why
  EXPECT_FALSE(v.error().transient());
  std::cout << "    " << v.error().format() << "\n";

  // A watch is refused up front the same way.
  auto watched = run_on(io_, client.watch(resources::config_maps, "default", WatchOptions{},
                                          [](std::string_view) { return true; }));
  ASSERT_FALSE(watched);
  EXPECT_EQ(watched.error().reason, ApiError::Reason::Unauthorized) << watched.error().format();
  EXPECT_EQ(watched.error().http_status, 401);

  // Why, the server says only in its log: this certificate, expired.
  const fs::path log = g_cluster_dir / "logs" / "kube-apiserver.log";
  const std::string needle = "verifying certificate SN=" + expired->serial + ",";
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  while (line.empty() && std::chrono::steady_clock::now() < deadline) {
    std::istringstream in(read_file(log));
    for (std::string l; std::getline(in, l);) {
      if (l.find(needle) != std::string::npos) line = l;
    }
    if (line.empty()) std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }
  ASSERT_FALSE(line.empty()) << "no \"" << needle << "\" in " << log;
  EXPECT_THAT(line, HasSubstr("Unable to authenticate the request"));
  EXPECT_THAT(line, HasSubstr("x509: certificate has expired or is not yet valid"));
}

// A kubeconfig for the test cluster with the given `user:` lines.
fs::path write_kubeconfig(const fs::path& dir, const std::string& user_lines) {
  const fs::path p = dir / "kubeconfig";
  write_file(p, "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " +
                    env_value("APISERVER_URL") + "\n    certificate-authority: " +
                    env_value("CA_FILE") + "\nusers:\n- name: broken\n  user:\n" + user_lines +
                    "contexts:\n- name: c\n  context:\n    cluster: c\n    user: broken\n"
                    "current-context: c\n");
  return p;
}

// Every call with this configuration fails as a Transport error naming the
// PEM (its origin), and nothing crashes: a plain request, a retried one and
// a watch.
void expect_pem_error(asio::io_context& io, const ClusterConfig& config,
                      const std::string& expected_start, const std::string& reason = {}) {
  SCOPED_TRACE(expected_start);
  {
    Client client(io.get_executor(), config, {.retry = {.attempts = 1}});
    auto v = run_on(io, client.get(resources::namespaces, "", "default"));
    ASSERT_FALSE(v) << "a broken client certificate or key was used";
    EXPECT_EQ(v.error().reason, ApiError::Reason::Transport) << v.error().format();
    EXPECT_EQ(v.error().http_status, 0);
    EXPECT_TRUE(v.error().message.starts_with(expected_start)) << v.error().message;
    EXPECT_GT(v.error().message.size(), expected_start.size() + 2) << "no OpenSSL reason";
    if (!reason.empty()) {
      EXPECT_THAT(v.error().message, HasSubstr(reason));
    }
    std::cout << "    " << v.error().format() << "\n";

    auto watched = run_on(io, client.watch(resources::config_maps, "default", WatchOptions{},
                                           [](std::string_view) { return true; }));
    ASSERT_FALSE(watched);
    EXPECT_EQ(watched.error().reason, ApiError::Reason::Transport);
    EXPECT_TRUE(watched.error().message.starts_with(expected_start)) << watched.error().message;
  }
  // With the default retries: the same error after the retries, quickly.
  Client client(io.get_executor(), config);
  auto v = run_on(io, client.list(resources::config_maps, "default"));
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().reason, ApiError::Reason::Transport);
  EXPECT_TRUE(v.error().message.starts_with(expected_start)) << v.error().message;
}

TEST_F(TlsTest, GarbageClientCertificateIsATransportErrorNamingItsOrigin) {
  TempDir dir;
  const std::string admin_key = read_file(env_value("ADMIN_KEY_FILE"));
  // Passes the loader's check (it has the BEGIN line) but is no certificate.
  const fs::path garbage = dir.path / "garbage.crt";
  write_file(garbage,
             "-----BEGIN CERTIFICATE-----\nthis is not base64 DER at all !!!\n"
             "-----END CERTIFICATE-----\n");
  KubeconfigOptions options;
  options.files = {write_kubeconfig(dir.path, "    client-certificate: " + garbage.string() +
                                                  "\n    client-key-data: " + base64(admin_key) +
                                                  "\n")};
  auto loaded = load_kubeconfig(options);
  ASSERT_TRUE(loaded) << loaded.error().format();
  ASSERT_TRUE(loaded->client_certificate);
  EXPECT_EQ(loaded->client_certificate->origin, "file " + garbage.string());
  expect_pem_error(io_, *loaded, "client certificate (file " + garbage.string() + "): ");

  // Bytes that are not even PEM, set directly.
  ClusterConfig config = cluster_config();
  config.client_certificate = Pem{"\x01\x02 random bytes \xff\xfe", "test: random bytes"};
  expect_pem_error(io_, config, "client certificate (test: random bytes): ");
}

TEST_F(TlsTest, GarbageOrMismatchedClientKeyIsATransportErrorNamingItsOrigin) {
  TempDir dir;
  // Garbage inside the armour, from a kubeconfig *-data field.
  const std::string garbage_key =
      "-----BEGIN PRIVATE KEY-----\nZ2FyYmFnZSBnYXJiYWdlIGdhcmJhZ2U=\n-----END PRIVATE KEY-----\n";
  KubeconfigOptions options;
  options.files = {write_kubeconfig(
      dir.path, "    client-certificate-data: " + base64(read_file(env_value("ADMIN_CERT_FILE"))) +
                    "\n    client-key-data: " + base64(garbage_key) + "\n")};
  auto loaded = load_kubeconfig(options);
  ASSERT_TRUE(loaded) << loaded.error().format();
  expect_pem_error(io_, *loaded,
                   "client key (kubeconfig field users[broken].user.client-key-data): ");

  // A real key, but not the certificate's: OpenSSL checks the pair.
  const fs::path other_key = dir.path / "other.key";
  const std::string cmd = "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out '" +
                          other_key.string() + "' 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ClusterConfig config = cluster_config();
  config.client_key = Pem{read_file(other_key), "file " + other_key.string()};
  expect_pem_error(io_, config,
                   "client key (file " + other_key.string() + "): ", "key values mismatch");
}

}  // namespace
}  // namespace gracekeeper::kube

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::cerr << "usage: integration_kube_rest CLUSTER_DIR [gtest flags]\n";
    return 2;
  }
  gracekeeper::kube::g_cluster_dir = argv[1];
  return RUN_ALL_TESTS();
}
