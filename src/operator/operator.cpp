// `gracekeeper run`: wires the informers, work queues, reconcilers, leader
// election and HTTP endpoints onto one io_context (docs/architecture.md,
// "Concurrency"), and shuts them down in order on SIGTERM.
#include "gracekeeper/operator/operator.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>

#include "controller_loop.h"
#include "gracekeeper/admission/admission.h"
#include "gracekeeper/admission/certs.h"
#include "gracekeeper/admission/identity.h"
#include "gracekeeper/admission/tls_directory.h"
#include "gracekeeper/audit/termination_audit.h"
#include "gracekeeper/core/json.h"
#include "gracekeeper/deployment/cache.h"
#include "gracekeeper/deployment/deployment_reconciler.h"
#include "gracekeeper/deployment/ports.h"
#include "gracekeeper/deployment/services.h"
#include "gracekeeper/kube/config.h"
#include "gracekeeper/kube/leader_election.h"
#include "gracekeeper/log/log.h"
#include "gracekeeper/memory.h"
#include "gracekeeper/policy/policy_reconciler.h"
#include "gracekeeper/propagation/observed.h"
#include "gracekeeper/server/http_server.h"
#include "handlers.h"
#include "kube_ports.h"

namespace gracekeeper::controller {
namespace {

namespace asio = boost::asio;
using namespace boost::asio::experimental::awaitable_operators;
using std::chrono::steady_clock;

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(asio::use_awaitable);
}

// Runs `op` for at most `limit`; false when the time ran out (op is cancelled).
template <class T>
asio::awaitable<bool> within(asio::awaitable<T> op, std::chrono::milliseconds limit) {
  auto result = co_await (std::move(op) || sleep_for(limit));
  co_return result.index() == 0;
}

std::string default_identity() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "gracekeeper");
  std::random_device random;
  return fmt::format("{}_{:08x}", host, random());
}

// "v1.37.2" with major "1", minor "37" (or "37+"): at least 1.`minor`.
bool at_least(const kube::ServerVersion& v, int wanted_minor) {
  int major = 0, minor = 0;
  std::sscanf(v.major.c_str(), "%d", &major);
  std::sscanf(v.minor.c_str(), "%d", &minor);
  return major > 1 || (major == 1 && minor >= wanted_minor);
}

// What an Event this operator wrote before reports (EventLedger::reports),
// from the Event object.
std::vector<std::uint64_t> reported_by(const nlohmann::json& event) {
  std::map<std::string, std::string> annotations;
  const nlohmann::json* metadata = core::member(event, "metadata");
  if (const nlohmann::json* found = metadata ? core::member(*metadata, "annotations") : nullptr) {
    for (const auto& [name, value] : found->items()) {
      if (value.is_string()) annotations.emplace(name, value.get<std::string>());
    }
  }
  return EventLedger::reports(annotations, event.value("reason", ""), event.value("note", ""));
}

class Operator {
 public:
  Operator(asio::io_context& io, const OperatorOptions& options, kube::ClusterConfig config,
           std::unique_ptr<propagation::Prometheus> prometheus)
      : io_(io),
        options_(options),
        config_(std::move(config)),
        client_(io.get_executor(), config_, client_options()),
        deployments_(client_, kube::resources::deployments, deployment_informer_options(),
                     &controller::project_deployment),
        policies_(client_, shutdown_policies, informer_options(), &controller::project_policy),
        services_(client_, kube::resources::services, service_informer_options(),
                  &controller::project_service),
        statefulsets_(client_, statefulsets, statefulset_informer_options(),
                      &controller::project_statefulset),
        slices_(client_, endpoint_slices, slice_informer_options(),
                [this](const nlohmann::json& o) { return observe_slice(o); }),
        pods_(client_, kube::resources::pods, pod_informer_options(),
              [this](const nlohmann::json& o) { return observe_pod(o); }),
        deployment_queue_(io.get_executor()),
        policy_queue_(io.get_executor()),
        statefulset_queue_(io.get_executor()),
        audit_queue_(io.get_executor()),
        events_(io.get_executor(), client_, recorder_options()),
        prometheus_(std::move(prometheus)),
        clock_(system_clock()),
        deployment_writer_(kube_deployment_writer(client_, kube::resources::deployments)),
        statefulset_writer_(kube_deployment_writer(client_, statefulsets)),
        status_writer_(kube_status_writer(client_)),
        event_sink_(recorder_sink(events_)),
        meter_(propagation_meter(prometheus_.get(), &samples_)),
        rules_(deployments_.store(), policies_.store(), deployment_queue_, policy_queue_),
        statefulset_rules_(statefulsets_.store(), policies_.store(), statefulset_queue_,
                           policy_queue_),
        deployment_reconciler_(
            {deployments_.store(), policies_.store(), services_.store(), propagation_,
             *deployment_writer_, *event_sink_, *clock_, metrics_,
             [this](const std::string& policy_key) { policy_queue_.add(policy_key); },
             [this](const std::string& key, std::chrono::nanoseconds after) {
               deployment_queue_.add_after(key, after);
             },
             "Deployment",
             [this](const std::string& policy_key) {
               return statefulset_reconciler_.rollouts_in_flight(policy_key);
             },
             [this](const std::string& policy_key) {
               return statefulset_reconciler_.governed(policy_key);
             },
             options_.rollout_stall_timeout, &drains_, &pods_seen_}),
        statefulset_reconciler_(
            {statefulsets_.store(), policies_.store(), services_.store(), propagation_,
             *statefulset_writer_, *event_sink_, *clock_, metrics_,
             [this](const std::string& policy_key) { policy_queue_.add(policy_key); },
             [this](const std::string& key, std::chrono::nanoseconds after) {
               statefulset_queue_.add_after(key, after);
             },
             "StatefulSet",
             [this](const std::string& policy_key) {
               return deployment_reconciler_.rollouts_in_flight(policy_key);
             },
             [this](const std::string& policy_key) {
               return deployment_reconciler_.governed(policy_key);
             },
             options_.rollout_stall_timeout, &drains_, &pods_seen_}),
        policy_reconciler_({policies_.store(), deployments_.store(), propagation_, *meter_,
                            *status_writer_, *clock_, metrics_, deployment_reconciler_,
                            [this](const std::string& ns) {
                              rules_.enqueue_namespace(ns);
                              statefulset_rules_.enqueue_namespace(ns);
                            },
                            [this] { return deployments_settled(); }, &statefulset_reconciler_},
                           {options_.propagation_refresh}),
        audit_({deployments_.store(), policies_.store(), propagation_, deployment_reconciler_,
                samples_, terminations_, *event_sink_, metrics_,
                // A rollout's terminations in one status write, not one each.
                [this](const std::string& policy_key) {
                  policy_queue_.add_after(policy_key, std::chrono::seconds(2));
                },
                [this] { return workers_started_; }, statefulsets_.store(),
                &statefulset_reconciler_,
                [this](const std::string& pod_key) { audit_queue_.add(pod_key); }, &drains_,
                &pods_seen_,
                // A new drain sample or pod: the workload is decided again.
                [this](bool stateful, const std::string& key) {
                  (stateful ? statefulset_queue_ : deployment_queue_).add(key);
                }}) {
    policy_reconciler_.set_terminations(&terminations_);
  }

  int run() {
    asio::signal_set signals(io_, SIGINT, SIGTERM);
    signals.async_wait([this](const boost::system::error_code& ec, int signal) {
      if (ec) return;
      log::info("signal received, shutting down", {{"signal", std::to_string(signal)}});
      begin_shutdown(0);
    });
    asio::co_spawn(io_, start(), [this](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        log::error("startup failed", {{"error", ex.what()}});
      }
      begin_shutdown(1);
    });
    io_.run();
    return exit_code_;
  }

 private:
  // Every request that can run at once finds a pooled connection afterwards:
  // with fewer, a burst closes connections and the next one opens them again,
  // a TLS handshake each (on the API server too). Watches are not pooled.
  kube::ClientOptions client_options() const {
    kube::ClientOptions o;
    o.max_idle_connections = std::max<std::size_t>(options_.workers, 1) + kPolicyWorkers +
                             recorder_options().max_writers;
    return o;
  }
  kube::InformerOptions informer_options() const {
    kube::InformerOptions o;
    o.namespace_ = options_.watch_namespace;
    return o;
  }
  kube::InformerOptions deployment_informer_options() const {
    kube::InformerOptions o = informer_options();
    o.fields = deployment_fields();  // what project_deployment reads: the rest is never built
    o.wanted = opted_in;             // of the others, only the metadata is built
    // Paginated LISTs, not a streaming list. The operator patches
    // Deployments while it syncs them, and each patch's watch event queues
    // at the API server behind the initial events still to send: at 5,000
    // and 10,000 Deployments the server closed the stream up to 5 times
    // before its end, and each retry streamed every Deployment again. A
    // LIST page is a request of its own that the patches do not hold up,
    // and it costs the API server less than half the CPU of the same
    // objects streamed (docs/performance.md).
    o.watch_list = false;
    return o;
  }
  kube::InformerOptions service_informer_options() const {
    kube::InformerOptions o = informer_options();
    o.fields = service_fields();
    return o;
  }
  kube::InformerOptions statefulset_informer_options() const {
    kube::InformerOptions o = informer_options();
    o.fields = statefulset_fields();  // what project_statefulset reads
    o.wanted = opted_in;              // of the others, only the metadata is built
    o.watch_list = false;             // as for Deployments: the operator patches them while listing
    return o;
  }
  // EndpointSlices: only the endpoints' pod names and conditions are built.
  kube::InformerOptions slice_informer_options() const {
    kube::InformerOptions o = informer_options();
    o.fields = endpoint_slice_fields();
    return o;
  }
  // The projection of an EndpointSlice, against the version cached now:
  // samples of source Observed and the termination audit (termination_audit.h).
  std::optional<CachedSlice> observe_slice(const nlohmann::json& object) {
    const auto before = slices_.get(kube::object_key(object));
    return audit_.observe(object, before.get(), clock_->now());
  }
  // The Pod informer reads a pod by its workload: it starts once the
  // workloads are listed, or the pods listed before them would not be read.
  asio::awaitable<void> run_pods() {
    while (!(deployments_.has_synced() && statefulsets_.has_synced()) && !shutting_down_) {
      co_await sleep_for(std::chrono::milliseconds(20));
    }
    if (!shutting_down_) co_await pods_.run();
  }
  // A workload gone: what was measured of its pods goes with it.
  void forget_pods_of_deleted_workloads() {
    for (auto [informer, kind] :
         {std::pair{&deployments_, "Deployment"}, std::pair{&statefulsets_, "StatefulSet"}}) {
      informer->add_handlers({.on_delete = [this, kind](const std::string& key) {
        drains_.erase(budget::workload_key(kind, key));
        pods_seen_.erase(budget::workload_key(kind, key));
      }});
    }
  }
  // Pods: only terminating ones and the first of each template of a cached
  // workload are built in full (TerminationAudit::wants_pod); only
  // terminating ones of cached workloads are kept (observe_pod).
  kube::InformerOptions pod_informer_options() const {
    kube::InformerOptions o = informer_options();
    o.fields = pod_drain_fields();
    o.wanted = [this](const nlohmann::json& metadata) { return audit_.wants_pod(metadata); };
    return o;
  }
  std::optional<CachedPod> observe_pod(const nlohmann::json& object) {
    const auto before = pods_.get(kube::object_key(object));
    return audit_.observe_pod(object, before.get());
  }
  kube::EventRecorderOptions recorder_options() const {
    kube::EventRecorderOptions o;
    o.reporting_instance = identity();
    // Events report the work; they do not compete with it (at most 60 s
    // behind). A Deployment queue with work is what "busy" means; shutting
    // down, the events go out at once.
    o.busy = [this]() -> bool {
      const kube::WorkQueue& q = deployment_queue_.core();
      const kube::WorkQueue& s = statefulset_queue_.core();
      return !shutting_down_ && q.len() + q.processing() + s.len() + s.processing() > 0;
    };
    return o;
  }
  std::string identity() const {
    static const std::string generated = default_identity();
    return options_.identity.empty() ? generated : options_.identity;
  }

  asio::awaitable<void> start() {
    auto version = co_await client_.server_version();
    if (!version) throw std::runtime_error("API server version: " + version.error().format());
    budget::Capabilities capabilities;
    // A kubelet older than 1.30 ignores the sleep action: the operator is
    // told the oldest one (nodes are not read).
    capabilities.native_sleep = at_least(*version, 30) && (options_.min_kubelet_minor < 0 ||
                                                           options_.min_kubelet_minor >= 30);
    // StatefulSet maxUnavailable is on by default from 1.35 (beta).
    capabilities.statefulset_max_unavailable = at_least(*version, 35);
    for (DeploymentReconciler* r : {&deployment_reconciler_, &statefulset_reconciler_}) {
      r->set_capabilities(capabilities);
      r->set_webhook_served(options_.webhook_port != 0);
    }
    capabilities_ = capabilities;
    log::info("connected", {{"server", config_.server},
                            {"version", version->git_version},
                            {"nativeSleep", capabilities.native_sleep ? "true" : "false"}});
    if (!start_http()) co_return;
    start_certificates();
    // The webhook's own-write exception needs the operator's user (identity.h).
    if (options_.webhook_port != 0) {
      asio::co_spawn(io_, webhook::learn_own_user(client_, own_user_, shutting_down_),
                     asio::detached);
    }
    if (!start_webhook()) co_return;

    deployments_.add_handlers(rules_.deployment_handlers());
    policies_.add_handlers(rules_.policy_handlers());
    services_.add_handlers(rules_.service_handlers());
    statefulsets_.add_handlers(statefulset_rules_.deployment_handlers());
    forget_pods_of_deleted_workloads();
    policies_.add_handlers(statefulset_rules_.policy_handlers());
    services_.add_handlers(statefulset_rules_.service_handlers());
    asio::co_spawn(io_, policies_.run(), asio::detached);
    asio::co_spawn(io_, services_.run(), asio::detached);
    asio::co_spawn(io_, statefulsets_.run(), asio::detached);
    asio::co_spawn(io_, deployments_.run(), asio::detached);
    asio::co_spawn(io_, slices_.run(), asio::detached);
    asio::co_spawn(io_, run_pods(), asio::detached);
    asio::co_spawn(io_, publish_metrics(), asio::detached);
    asio::co_spawn(io_, when_synced(), asio::detached);
    // Work starts once the policies and Services are known, while the
    // Deployments are still being listed: each is queued as its page arrives
    // (a cold start at 10,000 Deployments would otherwise wait seconds for
    // the whole list). Policy status counts wait for the whole list
    // (Reconciler::count). Without every Service, a Deployment would look
    // unserved and lose its wait.
    while (!(policies_.has_synced() && services_.has_synced()) && !shutting_down_) {
      co_await sleep_for(std::chrono::milliseconds(20));
    }
    if (shutting_down_) co_return;
    if (!options_.leader_elect) {
      co_await seed_reported_events();
      start_workers();
      co_return;
    }
    start_leader_election();
  }

  void start_certificates() {
    if (options_.webhook_cert_secret.empty()) return;
    webhook::CertOptions o;
    o.namespace_ = config_.namespace_;
    o.secret_name = options_.webhook_cert_secret;
    o.service_name = options_.webhook_service;
    o.webhook_config = options_.webhook_config;
    o.extra_sans = options_.webhook_extra_sans;
    o.serving_validity = options_.webhook_cert_validity;
    o.ca_validity = options_.webhook_ca_validity;
    o.resync = options_.webhook_cert_resync;
    // Every replica patches the caBundle within a resync of a new CA.
    o.trust_delay = 2 * options_.webhook_cert_resync;
    certs_ = std::make_shared<webhook::SelfManagedCertificates>(client_, std::move(o));
    asio::co_spawn(io_, certs_->run(), asio::detached);
  }

  // Workers start when this replica starts leading; losing the lease ends
  // the process (a standby takes over).
  void start_leader_election() {
    kube::LeaderElectionConfig le;
    le.namespace_ = options_.leader_election_namespace.empty() ? config_.namespace_
                                                               : options_.leader_election_namespace;
    le.name = options_.leader_election_id;
    le.identity = identity();
    le.lease_duration = options_.lease_duration;
    le.renew_deadline = options_.renew_deadline;
    le.retry_period = options_.retry_period;
    // The Events already reported are read when this replica starts leading,
    // not when it starts: a standby's list would miss what the leader
    // reported since, and the new leader would report it again.
    le.on_started_leading = [this] {
      log::info("started leading", {{"identity", identity()}});
      metrics_.set_leader(true);
      asio::co_spawn(
          io_,
          [this]() -> asio::awaitable<void> {
            co_await seed_reported_events();
            start_workers();
          },
          asio::detached);
    };
    // A loss this process did not ask for (the renew deadline passed, or
    // another candidate took the Lease) ends it at once, as
    // controller-runtime does: another replica may be leading already, so no
    // queued write (apply, status, Event) may follow, and an orderly
    // shutdown would drain them. The pod restarts as a follower. Also during
    // a SIGTERM's drain: the workers still write until the Lease is released.
    le.on_stopped_leading = [this] {
      metrics_.set_leader(false);
      if (leaving_lease_) return;  // shutdown() cancelled the elector or released the Lease
      log::error("lost leadership, exiting at once without sending queued writes",
                 {{"identity", identity()}});
      std::fflush(nullptr);
      std::_Exit(1);
    };
    elector_.emplace(client_, le);
    log::info("waiting for leadership", {{"lease", le.namespace_ + "/" + le.name}});
    asio::co_spawn(io_, elector_->run(),
                   asio::bind_cancellation_slot(elector_cancel_.slot(), asio::detached));
  }

  asio::awaitable<void> when_synced() {
    while (!(policies_.has_synced() && deployments_.has_synced() && services_.has_synced() &&
             statefulsets_.has_synced()) &&
           !shutting_down_) {
      co_await sleep_for(std::chrono::milliseconds(20));
    }
    if (shutting_down_) co_return;
    log::info("caches synced", {{"policies", std::to_string(policies_.size())},
                                {"deployments", std::to_string(deployments_.size())},
                                {"statefulsets", std::to_string(statefulsets_.size())},
                                {"services", std::to_string(services_.size())}});
    rules_.enqueue_all_policies();  // their counts can be complete now
  }

  bool start_http() {
    server::Routes metrics = server::metrics_routes(metrics_);
    server::Routes health = server::health_routes(
        [] { return std::string(); },
        [this]() -> std::string {
          return server::not_ready_reason(shutting_down_, webhook_server_, [this]() -> std::string {
            if (options_.webhook_port != 0 && !webhook_server_)
              return "the webhook is not serving yet";
            if (!policies_.has_synced() || !deployments_.has_synced() || !services_.has_synced() ||
                !statefulsets_.has_synced())
              return "caches not synced";
            return {};
          });
        });
    std::map<std::string, server::Routes> by_address;
    if (options_.metrics_address != "0") by_address[options_.metrics_address].merge(metrics);
    if (options_.health_address != "0") by_address[options_.health_address].merge(health);
    for (auto& [address, routes] : by_address) {
      server::HttpServerOptions http_options;
      if (options_.metrics_secure && routes.contains("/metrics")) {
        http_options.authorize = [this](std::string path, std::string authorization) {
          return authorize_metrics(std::move(path), std::move(authorization));
        };
      }
      auto bound = server::HttpServer::bind(io_.get_executor(), address, std::move(routes),
                                            std::move(http_options));
      if (!bound) {
        log::error("cannot serve HTTP", {{"address", address}, {"error", bound.error()}});
        begin_shutdown(1);
        return false;
      }
      log::info("serving HTTP", {{"address", address}, {"port", std::to_string((*bound)->port())}});
      asio::co_spawn(io_, (*bound)->run(), asio::detached);
      http_.push_back(std::move(*bound));
    }
    return true;
  }

  // --metrics-secure, as controller-runtime's filter: a bearer token the API
  // server authenticates (TokenReview), whose user may get the
  // nonResourceURL /metrics (SubjectAccessReview). Answers are kept 10 s
  // per token; a failed review is not kept.
  asio::awaitable<std::optional<server::Response>> authorize_metrics(std::string path,
                                                                     std::string authorization) {
    if (path != "/metrics") co_return std::nullopt;  // the probes stay open
    auto deny = [](int status, std::string why) {
      server::Response r;
      r.status = status;
      r.body = std::move(why) + "\n";
      return r;
    };
    constexpr std::string_view bearer = "Bearer ";
    if (!authorization.starts_with(bearer) || authorization.size() == bearer.size()) {
      co_return deny(401, "Unauthorized: a bearer token is needed");
    }
    std::string token = authorization.substr(bearer.size());
    const auto now = steady_clock::now();
    if (auto it = metrics_auth_.find(token); it != metrics_auth_.end() && it->second.until > now) {
      co_return it->second.answer;
    }
    static const kube::Resource token_reviews{"authentication.k8s.io", "v1", "tokenreviews", false};
    static const kube::Resource access_reviews{"authorization.k8s.io", "v1", "subjectaccessreviews",
                                               false};
    nlohmann::json review = {{"apiVersion", "authentication.k8s.io/v1"},
                             {"kind", "TokenReview"},
                             {"spec", {{"token", token}}}};
    auto reviewed = co_await client_.create(token_reviews, "", std::move(review));
    if (!reviewed) {
      log::warn("metrics: the TokenReview failed", {{"error", reviewed.error().format()}});
      co_return deny(401, "Unauthorized: the token could not be reviewed");
    }
    std::optional<server::Response> answer;
    const nlohmann::json status = reviewed->value("status", nlohmann::json::object());
    if (!status.value("authenticated", false)) {
      answer = deny(401, "Unauthorized");
    } else {
      const nlohmann::json user = status.value("user", nlohmann::json::object());
      nlohmann::json spec = {{"user", user.value("username", "")},
                             {"nonResourceAttributes", {{"path", "/metrics"}, {"verb", "get"}}}};
      for (const char* key : {"groups", "uid", "extra"}) {
        if (user.contains(key)) spec[key] = user[key];
      }
      nlohmann::json access = {{"apiVersion", "authorization.k8s.io/v1"},
                               {"kind", "SubjectAccessReview"},
                               {"spec", std::move(spec)}};
      auto decided = co_await client_.create(access_reviews, "", std::move(access));
      if (!decided) {
        log::warn("metrics: the SubjectAccessReview failed", {{"error", decided.error().format()}});
        co_return deny(403, "Forbidden: the access could not be reviewed");
      }
      if (!decided->value("status", nlohmann::json::object()).value("allowed", false)) {
        answer = deny(403, "Forbidden: user \"" + user.value("username", std::string{}) +
                               "\" may not get /metrics");
      }
    }
    if (metrics_auth_.size() >= 1024) metrics_auth_.clear();
    metrics_auth_[std::move(token)] = {now + std::chrono::seconds(10), answer};
    co_return answer;
  }

  // The admission webhook, on every replica: it answers from the stores,
  // which every replica keeps (admission.h).
  bool start_webhook() {
    if (options_.webhook_port == 0) return true;
    server::HttpServerOptions o;
    o.max_body_bytes = kMaxAdmissionBytes;
    // Checked by the CLI already; a bad value here is a programming error.
    o.tls_min_version =
        server::parse_tls_version(options_.tls_min_version).value_or(server::TlsVersion::Tls12);
    o.tls_cipher_suites = options_.tls_cipher_suites;
    if (certs_) {
      o.tls = certs_;  // null until the Secret is read: handshakes fail until then
    } else {
      auto tls = std::make_shared<webhook::TlsDirectory>(*options_.webhook_cert_dir);
      if (auto error = tls->reload(); !error.empty()) {
        log::warn("no webhook certificate yet; handshakes fail until there is one",
                  {{"error", error}});
      }
      o.tls = std::move(tls);
    }
    server::PostRoutes routes;
    routes.emplace(std::string(kWebhookPath),
                   [this](std::string_view body) { return admission(body); });
    const std::string address = ":" + std::to_string(options_.webhook_port);
    auto bound =
        server::HttpServer::bind(io_.get_executor(), address, {}, std::move(routes), std::move(o));
    if (!bound) {
      log::error("cannot serve the webhook", {{"address", address}, {"error", bound.error()}});
      begin_shutdown(1);
      return false;
    }
    log::info("serving the admission webhook",
              {{"port", std::to_string((*bound)->port())}, {"path", std::string(kWebhookPath)}});
    asio::co_spawn(io_, (*bound)->run(), asio::detached);
    webhook_server_ = bound->get();
    http_.push_back(std::move(*bound));
    return true;
  }

  server::Response admission(std::string_view body) {
    const auto start = steady_clock::now();
    AdmissionInputs in{policies_.store(), services_.store(), &propagation_, capabilities_,
                       clock_->now()};
    // Until the Services are known a Deployment would look unserved and lose
    // its wait: admitted unchanged, with the reason.
    in.not_ready = policies_.has_synced() && services_.has_synced() ? "" : "caches not synced";
    in.own_user = own_user_;
    AdmissionAnswer a = admit(body, in);
    const auto outcome = to_string(a.outcome);
    metrics_.observe_admission(outcome, a.opted_in,
                               std::chrono::duration<double>(steady_clock::now() - start).count());
    if (!a.error.empty()) {
      log::warn(a.outcome == AdmissionAnswer::Outcome::Error ? "admitted unchanged after an error"
                                                             : "bad admission request",
                {{"outcome", std::string(outcome)}, {"error", a.error}});
    }
    server::Response r;
    r.status = a.status;
    r.content_type = a.status == 200 ? "application/json" : "text/plain; charset=utf-8";
    r.body = std::move(a.body);
    return r;
  }

  // Events this operator reported before a restart are not reported again.
  // Read a page at a time: a cluster can hold far more Events than
  // Deployments, and the whole list as one JSON tree would be the peak.
  asio::awaitable<void> seed_reported_events() {
    kube::ListOptions o;
    o.limit = 500;
    // Per kind: the reconciler of that kind reads them.
    std::map<std::string, std::multimap<std::string, std::uint64_t>> reported;
    do {
      auto page = co_await client_.list(kube::events_v1, options_.watch_namespace, o);
      if (!page) {
        log::warn("cannot list earlier events; they may be reported again",
                  {{"error", page.error().format()}});
        break;
      }
      try {
        for (const auto& e : page->value("items", nlohmann::json::array())) {
          if (e.value("reportingController", "") != "gracekeeper.dev/operator") continue;
          const auto& regarding = e.value("regarding", nlohmann::json::object());
          const std::string kind = regarding.value("kind", "");
          if (kind != "Deployment" && kind != "StatefulSet") continue;
          const std::string key =
              regarding.value("namespace", "") + "/" + regarding.value("name", "");
          for (std::uint64_t h : reported_by(e)) reported[kind].emplace(key, h);
        }
        o.continue_token = page->value("metadata", nlohmann::json::object()).value("continue", "");
      } catch (const nlohmann::json::exception& x) {
        log::warn("cannot read earlier events; they may be reported again", {{"error", x.what()}});
        break;
      }
    } while (!o.continue_token.empty());
    for (DeploymentReconciler* r : {&deployment_reconciler_, &statefulset_reconciler_}) {
      r->ledger().seed(reported[r->kind()]);
    }
  }

  void start_workers() {
    if (workers_started_ || shutting_down_) return;
    workers_started_ = true;
    deployment_loop_.run(options_.workers);
    statefulset_loop_.run(options_.workers);
    policy_loop_.run(kPolicyWorkers);
    audit_loop_.run(1);
  }

  // Every Deployment and StatefulSet is listed and none is queued or being
  // reconciled: the policies' counts are final for now.
  bool deployments_settled() const {
    const kube::WorkQueue& q = deployment_queue_.core();
    const kube::WorkQueue& s = statefulset_queue_.core();
    return deployments_.has_synced() && statefulsets_.has_synced() &&
           q.len() + q.processing() + s.len() + s.processing() == 0;
  }

  asio::awaitable<void> publish_metrics() {
    while (!shutting_down_) {
      metrics_.update_informer("deployments", deployments_.counters());
      metrics_.update_informer("shutdownpolicies", policies_.counters());
      metrics_.update_informer("services", services_.counters());
      metrics_.update_informer("statefulsets", statefulsets_.counters());
      metrics_.update_informer("endpointslices", slices_.counters());
      metrics_.update_informer("pods", pods_.counters());
      samples_.prune(clock_->now());
      metrics_.set_queue_depth("deployment", deployment_queue_.core().len());
      metrics_.set_queue_depth("statefulset", statefulset_queue_.core().len());
      metrics_.set_queue_depth("shutdownpolicy", policy_queue_.core().len());
      metrics_.set_queue_depth("termination", audit_queue_.core().len());
      return_memory_after_a_burst();
      co_await sleep_for(std::chrono::milliseconds(1000));
    }
  }

  // A cold start or a mass change allocates for thousands of queued
  // reconciles and Events at once; malloc keeps that memory after it is freed.
  // Once all of that work is done, give the free pages back to the system.
  void return_memory_after_a_burst() {
    const auto& d = deployment_queue_.worker_counters();
    const auto& p = policy_queue_.worker_counters();
    const std::uint64_t work = d.reconciled + d.failed + p.reconciled + p.failed +
                               events_.stats().created + events_.stats().patched;
    const bool idle = deployment_queue_.core().len() + deployment_queue_.core().processing() +
                          statefulset_queue_.core().len() + statefulset_queue_.core().processing() +
                          policy_queue_.core().len() + policy_queue_.core().processing() +
                          audit_queue_.core().len() + audit_queue_.core().processing() +
                          events_.in_flight() ==
                      0;
    if (!idle || work - work_at_last_trim_ < kTrimAfterWork) return;
    work_at_last_trim_ = work;
    release_free_memory();
  }

  void begin_shutdown(int code) {
    if (shutting_down_) {
      exit_code_ = std::max(exit_code_, code);
      return;
    }
    shutting_down_ = true;  // /readyz answers 503 from now on
    exit_code_ = code;
    // Lame duck after a signal: the webhook and /metrics keep answering while
    // the endpoint leaves their Services, each answer with Connection: close
    // so that the API server's keep-alive connections move to another
    // replica. A process that never started serving has nothing to hand over.
    lame_duck_until_ = steady_clock::now();
    if (code == 0 && options_.shutdown_lame_duck.count() > 0) {
      const LameDuck lame = lame_duck(options_.shutdown_lame_duck, own_namespace_figure());
      lame_duck_until_ += lame.length;
      for (auto& server : http_) server->begin_lame_duck();
      log::info("lame duck: serving with Connection: close, then stopping",
                {{"seconds", std::to_string(lame.length.count())}, {"from", lame.from}});
    }
    asio::co_spawn(io_, shutdown(), [this](std::exception_ptr) { io_.stop(); });
  }

  // The largest propagation figure of the policies of this pod's namespace:
  // this replica's own measurement, or the one the leader wrote into a
  // policy's status (a standby measures nothing).
  std::optional<double> own_namespace_figure() const {
    std::optional<double> largest;
    policies_.store().in_namespace(config_.namespace_,
                                   [&](const std::string&, const CachedPolicy& p) {
                                     if (auto s = policy_propagation(&propagation_, p)) {
                                       largest = std::max(largest.value_or(0.0), s->seconds);
                                     }
                                   });
    return largest;
  }

  // Stop taking work, let in-flight reconciles finish, hand the Lease over
  // (during the lame duck), then at the lame duck's end stop serving and
  // watching: the webhook answers from the informers' stores until then.
  asio::awaitable<void> shutdown() {
    const auto started = steady_clock::now();
    deployment_queue_.shut_down();
    statefulset_queue_.shut_down();
    policy_queue_.shut_down();
    audit_queue_.shut_down();
    const bool drained = co_await within(wait_for_workers(), options_.shutdown_timeout);
    if (!drained) log::warn("in-flight reconciles did not finish in time");
    if (elector_) {
      leaving_lease_ = true;
      elector_cancel_.emit(asio::cancellation_type::terminal);
      if (elector_->is_leader() || elector_->observed_holder() == identity()) {
        co_await within(release(), std::chrono::milliseconds(1500));
      }
    }
    for (int i = 0; i < 50 && events_.in_flight() > 0; ++i) {
      co_await sleep_for(std::chrono::milliseconds(20));
    }
    std::vector<server::HttpServer*> servers;
    for (auto& server : http_) servers.push_back(server.get());
    co_await server::stop_at(std::move(servers), lame_duck_until_);
    deployments_.stop();
    policies_.stop();
    services_.stop();
    statefulsets_.stop();
    slices_.stop();
    pods_.stop();
    if (certs_) certs_->stop();
    log::info(
        "stopped",
        {{"seconds",
          fmt::format("{:.2f}",
                      std::chrono::duration<double>(steady_clock::now() - started).count())}});
  }

  asio::awaitable<void> wait_for_workers() {
    co_await deployment_queue_.wait_workers_exited();
    co_await statefulset_queue_.wait_workers_exited();
    co_await policy_queue_.wait_workers_exited();
    co_await audit_queue_.wait_workers_exited();
  }

  asio::awaitable<void> release() {
    auto r = co_await elector_->release();
    if (r) {
      log::info("lease released", {{"identity", identity()}});
    } else {
      log::warn("lease not released", {{"error", r.error().format()}});
    }
  }

  asio::io_context& io_;
  const OperatorOptions& options_;
  kube::ClusterConfig config_;
  kube::Client client_;
  kube::Informer<CachedDeployment> deployments_;
  kube::Informer<CachedPolicy> policies_;
  kube::Informer<CachedService> services_;
  kube::Informer<CachedDeployment> statefulsets_;  // opted-in StatefulSets, cached alike
  kube::Informer<CachedSlice> slices_;
  kube::Informer<CachedPod> pods_;  // terminating pods of cached workloads (audit/drain.h)
  kube::AsyncWorkQueue deployment_queue_;
  kube::AsyncWorkQueue policy_queue_;
  kube::AsyncWorkQueue statefulset_queue_;
  // Terminations the EndpointSlice projection noted ("ns/pod"), audited by
  // audit_loop_ (termination_audit.h).
  kube::AsyncWorkQueue audit_queue_;
  kube::EventRecorder events_;
  metrics::Metrics metrics_;
  std::unique_ptr<propagation::Prometheus> prometheus_;
  PropagationBook propagation_;
  propagation::SampleBook samples_;
  budget::DrainBook drains_;  // measured drains, by budget::workload_key
  PodBook pods_seen_;         // a pod per workload as the kubelet runs it (pod_book.h)
  TerminationBook terminations_;
  std::unique_ptr<Clock> clock_;
  std::unique_ptr<DeploymentWriter> deployment_writer_;
  std::unique_ptr<DeploymentWriter> statefulset_writer_;
  std::unique_ptr<StatusWriter> status_writer_;
  std::unique_ptr<EventSink> event_sink_;
  std::unique_ptr<PropagationMeter> meter_;
  EnqueueRules rules_;
  EnqueueRules statefulset_rules_;
  DeploymentReconciler deployment_reconciler_;
  DeploymentReconciler statefulset_reconciler_;  // kind StatefulSet
  PolicyReconciler policy_reconciler_;
  TerminationAudit audit_;
  // The controllers: each reconciler under the same loop (controller_loop.h).
  ControllerLoop deployment_loop_{
      "deployment", deployment_queue_, metrics_,
      [this](std::string key) { return deployment_reconciler_.reconcile(std::move(key)); }};
  ControllerLoop statefulset_loop_{
      "statefulset", statefulset_queue_, metrics_,
      [this](std::string key) { return statefulset_reconciler_.reconcile(std::move(key)); }};
  ControllerLoop policy_loop_{"shutdownpolicy", policy_queue_, metrics_, [this](std::string key) {
                                return policy_reconciler_.reconcile(std::move(key));
                              }};
  ControllerLoop audit_loop_{"termination", audit_queue_, metrics_,
                             [this](std::string key) -> asio::awaitable<ReconcileResult> {
                               co_return audit_.reconcile(key);
                             }};
  std::optional<kube::LeaderElector> elector_;
  asio::cancellation_signal elector_cancel_;
  std::vector<std::unique_ptr<server::HttpServer>> http_;
  server::HttpServer* webhook_server_ = nullptr;  // in http_, once bound
  struct MetricsAuth {
    steady_clock::time_point until;
    std::optional<server::Response> answer;  // nullopt: allowed
  };
  std::map<std::string, MetricsAuth> metrics_auth_;  // by bearer token, for 10 s
  steady_clock::time_point lame_duck_until_{};       // when shutdown() stops the servers
  bool leaving_lease_ = false;  // shutdown() stops the elector: not a loss to exit on
  // Self-managed webhook certificates (--webhook-cert-secret), on every
  // replica: each serves admissions. The admission server's TlsSource
  // (HttpServerOptions::tls) when --webhook-cert-secret is given.
  std::shared_ptr<webhook::SelfManagedCertificates> certs_;
  budget::Capabilities capabilities_{};
  static constexpr std::string_view kWebhookPath = "/mutate-deployments";
  bool workers_started_ = false;
  static constexpr std::size_t kPolicyWorkers = 2;
  bool shutting_down_ = false;
  std::string own_user_;  // the webhook's own writes are this user's ("" until known)
  static constexpr std::uint64_t kTrimAfterWork = 1000;  // reconciles + Event writes
  std::uint64_t work_at_last_trim_ = 0;
  int exit_code_ = 0;
};

}  // namespace

LameDuck lame_duck(std::chrono::seconds flag, std::optional<double> figure) {
  // A figure is at most its policy's maxSeconds; the bound only keeps the
  // conversion defined whatever the book holds.
  constexpr double longest = 600;  // the flag's bound too
  if (figure && std::isfinite(*figure) && *figure > static_cast<double>(flag.count())) {
    const double seconds = std::ceil(std::min(*figure, longest));
    return {std::chrono::seconds(static_cast<std::int64_t>(seconds)), "measured"};
  }
  return {flag, "flag"};
}

int run_operator(const OperatorOptions& options) {
  if (!log::configure(options.log_format, options.log_level)) {
    std::fprintf(stderr,
                 "gracekeeper run: --log-format must be json or text and --log-level "
                 "debug, info, warn or error\n");
    return 2;
  }
  auto config = kube::load_config(options.kubeconfig, options.context);
  if (!config) {
    log::error("cannot load the cluster configuration", {{"error", config.error().format()}});
    return 1;
  }
  asio::io_context io(1);
  std::unique_ptr<propagation::Prometheus> prometheus;
  if (!options.prometheus_url.empty()) {
    propagation::PrometheusConfig pc;
    pc.url = options.prometheus_url;
    pc.ca_file = options.prometheus_ca_file;
    pc.bearer_token_file = options.prometheus_token_file;
    auto made = propagation::make_prometheus(io.get_executor(), pc);
    if (!made) {
      log::error("bad Prometheus configuration", {{"error", made.error()}});
      return 1;
    }
    prometheus = std::move(*made);
  }
  Operator op(io, options, std::move(*config), std::move(prometheus));
  return op.run();
}

}  // namespace gracekeeper::controller
