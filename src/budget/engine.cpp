#include "gracekeeper/budget/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "gracekeeper/budget/mesh.h"
#include "gracekeeper/budget/shell.h"

namespace gracekeeper::budget {
namespace {

constexpr std::int64_t kMaxDrainAnnotation = 86400;
// The longest user-written preStop wait that is budgeted, like drain-seconds.
constexpr std::int64_t kMaxHookSeconds = 86400;
// Far above any sane wait, far below int64 overflow when added to the other terms.
constexpr double kUnclampedCap = 1e9;

// Seconds are added up from fields users write (a hook's sleep, the grace
// period): every sum saturates instead of wrapping, so a huge value can only
// make a budget look broken, never make a broken one look fine.
std::int64_t sum_seconds(std::int64_t a, std::int64_t b) {
  std::int64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? std::numeric_limits<std::int64_t>::max()
               : std::numeric_limits<std::int64_t>::min();
}

template <typename... Rest>
std::int64_t sum_seconds(std::int64_t a, std::int64_t b, Rest... rest) {
  return sum_seconds(sum_seconds(a, b), rest...);
}

std::string seconds(std::int64_t value) {
  return fmt::format("{}s", value);
}

std::string annotation_path(const char* annotation) {
  return fmt::format("metadata.annotations[{}]", annotation);
}

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return "";
  const auto last = text.find_last_not_of(" \t");
  return std::string(text.substr(first, last - first + 1));
}

// What the annotations ask for, or errors naming the annotation and its value.
struct Overrides {
  std::optional<std::int64_t> drain_seconds;
  std::vector<std::size_t> targets;  // indices into Deployment::containers
};

// gracekeeper.dev/containers: "a,b". Each problem is reported once: an
// empty entry (",,app,,") or a name that is not a container of this pod.
std::vector<std::size_t> read_container_list(const Deployment& deployment, const std::string& text,
                                             FieldErrors& errors) {
  std::set<std::size_t> chosen;
  std::set<std::string> unknown;
  std::set<std::string> sidecars;
  std::set<std::string> proxies;
  bool empty_entry = false;
  std::string_view rest = text;
  while (true) {
    const auto comma = rest.find(',');
    const std::string name = trim(rest.substr(0, comma));
    auto found = std::find_if(deployment.containers.begin(), deployment.containers.end(),
                              [&](const Container& c) { return c.name == name; });
    if (name.empty()) {
      empty_entry = true;
    } else if (found == deployment.containers.end()) {
      unknown.insert(name);
    } else if (found->sidecar) {
      sidecars.insert(name);
    } else if (proxy_mesh(found->name)) {
      proxies.insert(name);
    } else {
      chosen.insert(static_cast<std::size_t>(found - deployment.containers.begin()));
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  const std::string path = annotation_path(kAnnotationContainers);
  if (empty_entry) {
    errors.push_back({path, fmt::format("expected container names separated by commas, got an "
                                        "empty entry in \"{}\"",
                                        text)});
  }
  std::string known;
  for (const auto& c : deployment.containers) known += (known.empty() ? "" : ", ") + c.name;
  for (const auto& name : unknown) {
    errors.push_back({path, fmt::format("no container named \"{}\" in \"{}\" (containers: {})",
                                        name, text, known)});
  }
  for (const auto& name : sidecars) {
    errors.push_back(
        {path, fmt::format("\"{}\" is a native sidecar (an initContainer with restartPolicy: "
                           "Always): its preStop runs only after the app containers have exited, "
                           "so a wait there keeps nothing serving; name app containers",
                           name)});
  }
  for (const auto& name : proxies) {
    errors.push_back({path, fmt::format("\"{}\" is a mesh proxy: its stay after the pod's deletion "
                                        "is set with its mesh's own settings, not a preStop wait "
                                        "(docs/api.md, \"Mesh proxies\"); name app containers",
                                        name)});
  }
  return {chosen.begin(), chosen.end()};
}

Overrides read_overrides(const Deployment& deployment, FieldErrors& errors) {
  Overrides out;
  if (auto it = deployment.annotations.find(kAnnotationDrainSeconds);
      it != deployment.annotations.end()) {
    const std::string& text = it->second;
    std::int64_t value = -1;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value < 0 ||
        value > kMaxDrainAnnotation) {
      errors.push_back({annotation_path(kAnnotationDrainSeconds),
                        fmt::format("expected a whole number of seconds from 0 to {}, got \"{}\"",
                                    kMaxDrainAnnotation, text)});
    } else {
      out.drain_seconds = value;
    }
  }

  if (auto it = deployment.annotations.find(kAnnotationContainers);
      it != deployment.annotations.end()) {
    out.targets = read_container_list(deployment, it->second, errors);
    return out;
  }

  // Default: every app container, with ports or not: one without (a database
  // proxy) that stopped at once would fail the requests the others still
  // serve. Never a native sidecar, even a serving one: it is stopped only
  // after the app containers have exited, so their wait keeps it up too.
  // Never a mesh proxy: its stay is its mesh's to set (check_proxies).
  const auto& containers = deployment.containers;
  for (std::size_t i = 0; i < containers.size(); ++i) {
    if (!containers[i].sidecar && !proxy_mesh(containers[i].name)) out.targets.push_back(i);
  }
  return out;
}

// Milliseconds as seconds, as short as exact: "15", "0.5", "2.25".
std::string seconds_text(std::int64_t ms) {
  std::string text = fmt::format("{}", ms / 1000);
  if (ms % 1000 != 0) {
    std::string fraction = fmt::format("{:03}", ms % 1000);
    while (fraction.back() == '0') fraction.pop_back();
    text += "." + fraction;
  }
  return text;
}

std::string describe(const Strategy& strategy) {
  if (strategy.type == Strategy::Type::Recreate) return "Recreate";
  return fmt::format("RollingUpdate maxSurge={} maxUnavailable={}", strategy.max_surge.to_string(),
                     strategy.max_unavailable.to_string());
}

// The seconds a container's current hook needs in the grace period: its
// length rounded up. A hook of unknown length is given the computed wait
// (it never counts as covering that wait: PreStopUnknownLength).
std::int64_t hook_grace_seconds(const PreStopHook& hook, std::int64_t budget_pre_stop) {
  if (hook.kind == PreStopHook::Kind::None) return 0;
  if (hook.length_ms) return seconds_covering(*hook.length_ms);
  return budget_pre_stop;
}

// A hook whose wait before the app is told to stop is not known.
bool unknown_wait(const PreStopHook& hook) {
  return hook.kind != PreStopHook::Kind::None && !hook.wait_ms;
}

// `sh -c "java -jar app.jar"`: the shell is PID 1 and does not forward SIGTERM.
// Only judged when the container sets `command`: with args alone, the
// image's entrypoint (unknown here) decides what runs.
bool shell_form_without_exec(const Container& container) {
  if (container.command.empty()) return false;
  std::vector<std::string> argv = container.command;
  argv.insert(argv.end(), container.args.begin(), container.args.end());
  return classify_entrypoint(argv) == ShellForm::ShellStays;
}

// The native sidecars' known preStop sleeps, added up (saturating): they are
// stopped one after another, after the app containers. A sidecar hook of
// unknown length is what sidecarDrainSeconds is for.
std::int64_t sidecar_waits(const Deployment& deployment) {
  std::int64_t total = 0;
  for (const Container& c : deployment.containers) {
    if (c.sidecar && c.pre_stop.length_ms) {
      total = sum_seconds(total, seconds_covering(*c.pre_stop.length_ms));
    }
  }
  return total;
}

class Planner {
 public:
  Planner(const Deployment& deployment, const Context& context)
      : d_(deployment), ctx_(context), policy_(*context.policy) {}

  Plan run() {
    Overrides overrides = read_overrides(d_, plan_.invalid);
    plan_.grace_seconds = d_.grace_seconds;
    plan_.strategy = d_.strategy;
    if (!plan_.invalid.empty()) {
      for (const auto& error : plan_.invalid) {
        add("InvalidAnnotation", Severity::Error, "",
            error.format() + "; the Deployment is left as it is");
      }
      return std::move(plan_);
    }
    if (hooks_out_of_range()) return std::move(plan_);
    targets_ = std::move(overrides.targets);
    const std::int64_t declared = overrides.drain_seconds.value_or(policy_.drain_seconds);
    const bool measured = policy_.drain.source == DrainSource::Observed &&
                          ctx_.measured_drain_seconds && *ctx_.measured_drain_seconds > declared;
    plan_.budget = compute_budget(policy_, ctx_.propagation_seconds,
                                  measured ? *ctx_.measured_drain_seconds : declared);
    plan_.budget.measured_drain = measured;
    plan_.budget.sidecar_pre_stop_seconds = sidecar_waits(d_);
    plan_.budget.grace_seconds =
        sum_seconds(plan_.budget.grace_seconds, plan_.budget.sidecar_pre_stop_seconds);
    read_proxies();
    check_current_state();
    plan_containers();
    plan_grace();
    plan_strategy();
    plan_proxies();
    apply_churn_control();
    record_user_values();
    if (d_.applied) plan_.set_back = d_.applied->set_back;
    return std::move(plan_);
  }

 private:
  void add(std::string code, Severity severity, std::string container, std::string message) {
    plan_.findings.push_back({std::move(code), severity, std::move(container), std::move(message)});
  }

  // A user-written wait longer than a day is a typo or an attack, not a
  // budget: reported (bounded like gracekeeper.dev/drain-seconds), and the
  // Deployment left as it is.
  bool hooks_out_of_range() {
    bool found = false;
    for (const Container& c : d_.containers) {
      if (!c.pre_stop.length_ms || *c.pre_stop.length_ms <= milliseconds_of(kMaxHookSeconds)) {
        continue;
      }
      add("PreStopOutOfRange", Severity::Error, c.name,
          fmt::format("the preStop hook waits {}s, more than the {}s (one day) gracekeeper "
                      "budgets for; the Deployment is left as it is",
                      c.pre_stop.kind == PreStopHook::Kind::Sleep
                          ? fmt::format("{}", c.pre_stop.seconds.value_or(0))
                          : seconds_text(*c.pre_stop.length_ms),
                      kMaxHookSeconds));
      found = true;
    }
    return found;
  }

  // Everything the sidecars take after the app has exited.
  std::int64_t sidecar_seconds() const {
    return sum_seconds(plan_.budget.sidecar_pre_stop_seconds, plan_.budget.sidecar_drain_seconds);
  }

  bool is_target(std::size_t index) const {
    return std::find(targets_.begin(), targets_.end(), index) != targets_.end();
  }

  // Whether the pods need the wait: traffic may reach them. A Service
  // selects them (in the cluster; offline, one among the inputs). Without
  // any Service known (offline, none among the inputs) they count as
  // served, ports declared or not: a Service reaches a port no container
  // declares, and a missed wait loses requests where a false finding only
  // costs a look. One rule for the pod, read by `plan` (which containers
  // get the wait) and `check` (which lack it), so the two always agree.
  bool served() const { return waits_without_service() || ctx_.behind_service.value_or(true); }

  // spec.preStop.withoutService: Wait gives pods no Service selects a wait too.
  bool waits_without_service() const {
    return policy_.pre_stop.without_service == WithoutService::Wait;
  }

  // The mesh proxies' stays. A native sidecar proxy drains once the app
  // containers have exited: that time is the sidecars' in the grace, when
  // longer than sidecarDrainSeconds.
  void read_proxies() {
    std::int64_t native_drain_ms = 0;
    for (std::size_t i = 0; i < d_.containers.size(); ++i) {
      const Container& c = d_.containers[i];
      const auto mesh = proxy_mesh(c.name);
      if (!mesh) continue;
      proxies_.push_back({i, *mesh, proxy_stay(c, *mesh, d_.pod_annotations)});
      if (c.sidecar && proxies_.back().stay) {
        native_drain_ms = sum_seconds(native_drain_ms, proxies_.back().stay->drain_after_app_ms);
      }
    }
    Budget& b = plan_.budget;
    const std::int64_t drain = seconds_covering(native_drain_ms);
    if (drain > b.sidecar_drain_seconds) {
      b.grace_seconds = sum_seconds(b.grace_seconds, drain - b.sidecar_drain_seconds);
      b.sidecar_drain_seconds = drain;
    }
  }

  // A proxy that is an app container's peer gets SIGTERM with the app: it
  // must serve until the app's wait and drain are over, or the requests
  // still routed to the pod, and the app's last responses, go with it.
  void check_proxies(std::int64_t current_wait) {
    const Budget& b = plan_.budget;
    const std::int64_t wait = std::max(current_wait, b.pre_stop_seconds);
    const std::int64_t stay = sum_seconds(wait, b.drain_seconds);
    for (const ProxyEntry& p : proxies_) {
      const Container& c = d_.containers[p.index];
      if (!p.stay) {
        add("ProxyConfigUnreadable", Severity::Warning, c.name,
            fmt::format("{}'s proxy: {}; how long it serves once the pod is deleted is not known, "
                        "so the budget is not known to hold",
                        to_string(p.mesh), p.stay.error()));
        plan_.budget_broken = true;
        continue;
      }
      if (c.sidecar || stay == 0 || !served()) continue;
      const ProxyStay& s = *p.stay;
      if (holds(s, wait, stay)) continue;
      add("ProxyExitsEarly", Severity::Error, c.name,
          fmt::format("{}'s proxy serves for {} once the pod is deleted, but the app waits {}s "
                      "and drains {}s: requests routed to the pod after the proxy has gone, and "
                      "the app's last responses, are lost; set {} on the pod template",
                      to_string(p.mesh), s.source, wait, b.drain_seconds,
                      proxy_advice(p.mesh, wait, stay)));
      plan_.budget_broken = true;
    }
  }

  bool is_proxy(const Container& c) const { return proxy_mesh(c.name).has_value(); }

  // The mesh proxies the template's next pods will run: the template's own,
  // and those an injector added to the running pod (Context::pod).
  std::vector<const Container*> planned_proxies() const {
    std::vector<const Container*> out;
    for (const Container& c : d_.containers) {
      if (is_proxy(c)) out.push_back(&c);
    }
    if (ctx_.pod == nullptr) return out;
    for (const Container& c : ctx_.pod->containers) {
      const auto same = [&](const Container* p) { return p->name == c.name; };
      if (is_proxy(c) && std::ranges::none_of(out, same)) out.push_back(&c);
    }
    return out;
  }

  // The annotations gracekeeper wrote before, stated again while the
  // template has them; written back when removed, unless the pod shows the
  // mesh gone. One the user changed since is the user's.
  void carry_pod_annotations(const std::vector<const Container*>& proxies) {
    if (!d_.applied) return;
    for (const auto& [name, value] : d_.applied->mesh) {
      auto current = d_.pod_annotations.find(name);
      if (current != d_.pod_annotations.end() && current->second != value) continue;
      const auto of_mesh = [&](const Container* p) {
        return mesh_annotation(*proxy_mesh(p->name)) == name;
      };
      const bool mesh_gone = ctx_.pod != nullptr && std::ranges::none_of(proxies, of_mesh);
      if (current == d_.pod_annotations.end() && mesh_gone) continue;
      set_pod_annotation(name, value);
    }
  }

  // Hands each proxy beside the app its budget through its mesh's
  // annotation on the pod template (docs/api.md, "Mesh proxies"), where the
  // next pods' proxy would still leave early. Never lowered.
  void plan_proxies() {
    const std::vector<const Container*> proxies = planned_proxies();
    carry_pod_annotations(proxies);
    const Budget& b = plan_.budget;
    if (!served()) return;
    std::int64_t wait = b.pre_stop_seconds;
    for (const ContainerPlan& cp : plan_.containers) wait = std::max(wait, cp.pre_stop_seconds);
    const std::int64_t stay = sum_seconds(wait, b.drain_seconds);
    if (stay == 0) return;
    std::map<std::string, std::string> annotations = d_.pod_annotations;
    for (const auto& [name, value] : plan_.pod_annotations) annotations[name] = value;
    for (const Container* proxy : proxies) {
      if (proxy->sidecar) continue;  // stopped after the app: it cannot leave early
      const Mesh mesh = *proxy_mesh(proxy->name);
      auto planned = proxy_stay(*proxy, mesh, annotations, Precedence::AsPlanned);
      if (!planned || holds(*planned, wait, stay)) continue;
      auto value = handed_budget(*proxy, mesh, annotations, wait, stay);
      if (!value) continue;  // ProxyConfigUnreadable says why
      annotations[mesh_annotation(mesh)] = *value;
      set_pod_annotation(mesh_annotation(mesh), *value);
      plan_.budget_broken = true;  // the pods' proxy leaves early: a repair
    }
  }

  // Whether a proxy serving `s` covers the app's wait and drain (`stay`).
  static bool holds(const ProxyStay& s, std::int64_t wait, std::int64_t stay) {
    if (s.follows_connections_until_ms) {
      return s.serves_ms >= milliseconds_of(wait) &&
             *s.follows_connections_until_ms >= milliseconds_of(stay);
    }
    return s.serves_ms >= milliseconds_of(stay);
  }

  // States a mesh annotation; a change when the template has another value.
  void set_pod_annotation(const std::string& name, const std::string& value) {
    plan_.pod_annotations[name] = value;
    auto current = d_.pod_annotations.find(name);
    const std::string field = annotation_field(name);
    std::erase_if(plan_.changes, [&](const Change& c) { return c.field == field; });
    if (current != d_.pod_annotations.end() && current->second == value) return;
    plan_.changes.push_back(
        {field, current == d_.pod_annotations.end() ? "none" : current->second, value});
  }

  // Findings about the Deployment as it is now.
  void check_current_state() {
    const std::int64_t current_wait = check_current_hooks();
    check_current_grace(current_wait);
    check_proxies(current_wait);
    check_strategy();
    check_containers();
    if (ctx_.behind_service && !*ctx_.behind_service) {
      add("NotBehindService", Severity::Info, "",
          waits_without_service()
              ? "no Service selects these pods; they get a preStop wait anyway "
                "(spec.preStop.withoutService: Wait)"
              : "no Service selects these pods: graceful shutdown matters, a preStop wait "
                "does not, so none is added (spec.preStop.withoutService: Wait adds one)");
    }
  }

  // Findings about each container's preStop hook as it is now. Returns the
  // longest wait the hooks take within the grace period.
  std::int64_t check_current_hooks() {
    const Budget& b = plan_.budget;
    std::int64_t current_wait = 0;
    for (std::size_t i = 0; i < d_.containers.size(); ++i) {
      const Container& c = d_.containers[i];
      // A mesh proxy's own stay is judged by check_proxies.
      if (is_proxy(c)) continue;
      // Every app container's hook runs within the grace period, target or
      // not (one of unknown length is given the wait only on a target).
      if (!c.sidecar && (is_target(i) || c.pre_stop.length_ms)) {
        current_wait = std::max(current_wait, hook_grace_seconds(c.pre_stop, b.pre_stop_seconds));
      }
      if (!c.sidecar && !is_target(i)) {
        add("ContainerWithoutWait", Severity::Info, c.name,
            fmt::format("{} leaves this app container out: it gets no preStop wait and is told "
                        "to stop at once, while endpoints may still route requests to the pod; "
                        "name it there unless the others can serve without it",
                        kAnnotationContainers));
      }
      if (!is_target(i)) continue;
      if (c.pre_stop.kind == PreStopHook::Kind::None) {
        if (served() && b.pre_stop_seconds > 0) {
          add("NoPreStopWait", Severity::Error, c.name,
              fmt::format("no preStop wait: the app can close its port while endpoints still "
                          "route to it; needs a wait of {}s",
                          b.pre_stop_seconds));
          plan_.budget_broken = true;
        }
      } else if (c.pre_stop.wait_ms && *c.pre_stop.wait_ms < milliseconds_of(b.pre_stop_seconds)) {
        // The budget does not hold, whoever wrote the hook: requests are lost.
        add("PreStopTooShort", Severity::Error, c.name, too_short_message(c));
        plan_.budget_broken = true;
      } else if (unknown_wait(c.pre_stop) && b.pre_stop_seconds > 0 && served()) {
        // Never counted as the wait: the budget is not known to hold.
        add("PreStopUnknownLength", Severity::Warning, c.name, unknown_length_message(c));
        plan_.budget_broken = true;
      }
      if (c.pre_stop.kind == PreStopHook::Kind::ExecSleep && ctx_.capabilities.native_sleep) {
        add("ExecSleepNeedsBinary", Severity::Warning, c.name,
            "preStop runs the sleep binary (absent from distroless images) where the API server "
            "offers the native sleep action");
      }
    }
    return current_wait;
  }

  // Findings about the grace period as it is now, for hooks that take
  // `current_wait`, and about the budget.
  void check_current_grace(std::int64_t current_wait) {
    const Budget& b = plan_.budget;
    const std::int64_t needed =
        sum_seconds(current_wait, b.drain_seconds, sidecar_seconds(), b.reserve_seconds);
    if (needed > d_.grace_seconds) {
      add("BudgetExceeded", Severity::Error, "",
          fmt::format("preStop {}s + drain {}s + sidecars {}s + reserve {}s = {}s > "
                      "terminationGracePeriodSeconds {}s{}: SIGKILL cuts requests off mid-drain",
                      current_wait, b.drain_seconds, sidecar_seconds(), b.reserve_seconds, needed,
                      d_.grace_seconds, d_.grace_set ? "" : " (the default)"));
      plan_.budget_broken = true;
    }
    if (b.clamped) {
      add("BudgetClamped", Severity::Warning, "",
          fmt::format("measured propagation needs a {}s wait but preStop.maxSeconds is {}s: "
                      "endpoint propagation in this cluster is slower than the policy allows",
                      b.unclamped_pre_stop_seconds, b.pre_stop_seconds));
    }
  }

  // How to make a too-short hook hold: gracekeeper's own is repaired by the
  // plan; a user's is kept under `existing: Keep`, so its owner must act.
  std::string too_short_message(const Container& c) const {
    const std::int64_t needed = plan_.budget.pre_stop_seconds;
    std::string message = fmt::format(
        "preStop waits {}s{}, less than the {}s endpoint propagation needs: requests still "
        "routed to the pod are lost",
        seconds_text(*c.pre_stop.wait_ms),
        c.pre_stop.kind == PreStopHook::Kind::Exec ? " before its first other command" : "",
        needed);
    if (c.pre_stop.owned) return message;
    if (policy_.pre_stop.existing == ExistingHook::Replace) {
      return message + "; gracekeeper replaces the hook (existing: Replace)";
    }
    return message + fmt::format(
                         "; the hook was written by hand and is kept (existing: Keep): raise its "
                         "sleep to {}s, or set the policy's preStop.existing to Replace, or "
                         "remove the hook so that gracekeeper writes its own",
                         needed);
  }

  // A hook of unknown length: whether it covers the wait cannot be told.
  std::string unknown_length_message(const Container& c) const {
    const std::int64_t needed = plan_.budget.pre_stop_seconds;
    std::string message = fmt::format(
        "the preStop hook ({}) runs for a length gracekeeper cannot know, so it is not counted as "
        "the {}s wait endpoint propagation needs: the budget is not known to hold",
        describe(c.pre_stop), needed);
    if (policy_.pre_stop.existing == ExistingHook::Replace) {
      return message + "; gracekeeper replaces the hook (existing: Replace)";
    }
    return message + fmt::format(
                         "; the hook was written by hand and is kept (existing: Keep): make it a "
                         "sleep of at least {}s (sleep: {{seconds: {}}}, or exec sleep {} before "
                         "the rest of a script), or set the policy's preStop.existing to "
                         "Replace, or remove the hook so that gracekeeper writes its own",
                         needed, needed, needed);
  }

  // A StatefulSet replaces each pod in place: its rollout is reported,
  // never written (StatefulUpdate).
  void check_stateful_update() {
    const StatefulUpdate& u = d_.stateful;
    if (d_.replicas == 1) {
      add("SingleReplica", Severity::Info, "",
          u.on_delete ? "one replica: when its pod is deleted to take a new template "
                        "(OnDelete), there is no ready target until the new pod is ready"
                      : "one replica: a StatefulSet replaces its pod in place, so each rollout "
                        "leaves no ready target until the new pod is ready");
    }
    if (u.on_delete) {
      add("OnDeleteStrategy", Severity::Info, "",
          "updateStrategy OnDelete: a pod takes a new template, with its wait and grace, only "
          "when it is deleted; gracekeeper starts no rollout (reported, not changed)");
      return;
    }
    if (u.partition > 0) {
      add("PartitionedRollout", Severity::Info, "",
          fmt::format("partition {}: pods with an ordinal below {} keep the old template, with "
                      "its wait and grace, until the partition is lowered (reported, not changed)",
                      u.partition, u.partition));
    }
    // As the StatefulSet controller scales it: rounded up, at least 1.
    const std::int64_t at_once =
        std::max<std::int64_t>(u.max_unavailable.resolve(d_.replicas, /*round_up=*/true), 1);
    if (ctx_.capabilities.statefulset_max_unavailable && at_once > 1) {
      add("CapacityDropOnRollout", Severity::Warning, "",
          fmt::format("maxUnavailable {} takes {} of {} pods down at once during a rollout{}; a "
                      "StatefulSet replaces its pods in place, so use maxUnavailable 1 "
                      "(reported, not changed)",
                      u.max_unavailable.to_string(), at_once, d_.replicas,
                      u.parallel ? " (podManagementPolicy Parallel)" : ""));
    }
  }

  // The pods a rollout takes down at once, as the Deployment controller
  // resolves the strategy: maxUnavailable rounds down (25% of 3 is 0), and
  // when both it and the surge come to 0 the controller takes 1 down.
  std::int64_t unavailable_pods(const Strategy& s) const {
    const std::int64_t down = s.max_unavailable.resolve(d_.replicas, /*round_up=*/false);
    if (down == 0 && d_.replicas > 0 && s.max_surge.resolve(d_.replicas, /*round_up=*/true) == 0) {
      return 1;
    }
    return down;
  }

  void check_strategy() {
    if (d_.kind == "Pod") return;  // a Pod has no rollout of its own
    if (d_.kind != "Deployment") return check_stateful_update();
    const Strategy& s = d_.strategy;
    if (s.type == Strategy::Type::Recreate) {
      // Every pod goes before a new one starts: at least as severe as
      // maxUnavailable 1, so an error too, and the budget does not hold.
      add("RecreateStrategy", Severity::Error, "",
          "Recreate stops every pod before starting new ones: all capacity is gone during a "
          "rollout; use RollingUpdate (reported, not converted)");
      plan_.budget_broken = true;
    } else if (const std::int64_t down = unavailable_pods(s); down > 0) {
      add("CapacityDropOnRollout", Severity::Error, "",
          fmt::format("RollingUpdate with maxUnavailable {} ({} of {} replicas now) removes "
                      "serving pods before replacements are ready; use maxUnavailable 0",
                      s.max_unavailable.to_string(), down, d_.replicas));
      plan_.budget_broken = true;
    } else if (s.max_unavailable.percent && s.max_unavailable.value > 0) {
      // 0 pods now, as the controller rounds it: no capacity lost at this
      // size, but a scale-up (an HPA) makes it a drop.
      const std::int64_t from = (100 + s.max_unavailable.value - 1) / s.max_unavailable.value;
      add("CapacityDropOnRollout", Severity::Warning, "",
          fmt::format("RollingUpdate with maxUnavailable {} takes 0 of {} replicas down now, but "
                      "1 from {} replicas on (a scale-up); use maxUnavailable 0",
                      s.max_unavailable.to_string(), d_.replicas, from));
    }
    if (d_.replicas == 1) {
      const bool surges = s.type == Strategy::Type::RollingUpdate &&
                          s.max_surge.resolve(d_.replicas, /*round_up=*/true) >= 1;
      add("SingleReplica", Severity::Info, "",
          surges ? "one replica: each rollout and node drain leaves a single target"
                 : "one replica: a rollout briefly has no ready target unless maxSurge >= 1");
    }
  }

  void check_containers() {
    for (const Container& c : d_.containers) {
      if (shell_form_without_exec(c)) {
        add("ShellFormEntrypoint", Severity::Warning, c.name,
            "command runs a shell with -c and no exec: the shell is PID 1 and SIGTERM never "
            "reaches the app; end the script with `exec ...`");
      }
      if (c.readiness.kind == Probe::Kind::TcpSocket) {
        add("TCPReadinessProbe", Severity::Warning, c.name,
            "readiness by tcpSocket cannot report draining: the port stays open until exit");
      }
      if (c.readiness.kind != Probe::Kind::None && c.liveness.kind != Probe::Kind::None &&
          c.readiness.target == c.liveness.target) {
        add("SameLivenessReadiness", Severity::Warning, c.name,
            fmt::format("liveness and readiness probe the same endpoint ({}): a dependency outage "
                        "becomes a restart storm",
                        c.readiness.target));
      }
      if (c.has_ports && c.readiness.kind == Probe::Kind::None) {
        add("NoReadinessProbe", Severity::Warning, c.name,
            "serving container without a readiness probe: traffic arrives before it is ready");
      }
    }
  }

  // Why a user's hook is kept, and what it counts as.
  std::string kept_hook_message(const Container& c) const {
    const PreStopHook& hook = c.pre_stop;
    if (lengthened(c)) {
      return fmt::format(
          "the preStop hook ({}) waits longer than the one gracekeeper wrote: the user's, kept "
          "and never shortened",
          describe(hook));
    }
    if (hook.length_ms) {
      return fmt::format("the preStop hook ({}) was written by hand and is kept", describe(hook));
    }
    return fmt::format(
        "the preStop hook ({}) was written by hand and is kept; its length is unknown: the grace "
        "leaves it {}s, but it does not count as the wait",
        describe(hook), plan_.budget.pre_stop_seconds);
  }

  // The preStop each target container should have.
  void plan_containers() {
    const Budget& b = plan_.budget;
    const bool native =
        policy_.pre_stop.action == PreStopAction::Sleep ||
        (policy_.pre_stop.action == PreStopAction::Auto && ctx_.capabilities.native_sleep);
    const auto set_action =
        native ? ContainerPlan::Action::SetSleep : ContainerPlan::Action::SetExecSleep;
    const auto desired_kind = native ? PreStopHook::Kind::Sleep : PreStopHook::Kind::ExecSleep;
    const std::int64_t threshold = policy_.changes.decrease_threshold_seconds;

    for (std::size_t i = 0; i < d_.containers.size(); ++i) {
      if (!is_target(i)) continue;
      const Container& c = d_.containers[i];
      ContainerPlan cp{c.name, ContainerPlan::Action::Keep, b.pre_stop_seconds, false};
      const PreStopHook& hook = c.pre_stop;
      const bool user_hook = hook.kind != PreStopHook::Kind::None && !hook.owned;

      if (hook.kind == PreStopHook::Kind::None && (!served() || b.pre_stop_seconds == 0)) {
        // Nothing routes to these pods, or no wait is needed: no hook (never `sleep 0`).
        cp.pre_stop_seconds = 0;
      } else if (user_hook && (policy_.pre_stop.existing == ExistingHook::Keep ||
                               b.pre_stop_seconds == 0 || lengthened(c))) {
        cp.pre_stop_seconds = hook_grace_seconds(hook, b.pre_stop_seconds);
        cp.user_hook_kept = true;
        // (A Pod's hooks are its workload's: none is the user's or gracekeeper's to tell.)
        if (d_.kind != "Pod")
          add("ExistingPreStopKept", Severity::Info, c.name, kept_hook_message(c));
      } else if (hook.owned && hook.kind == desired_kind && hook.seconds &&
                 *hook.seconds >= b.pre_stop_seconds &&
                 *hook.seconds - b.pre_stop_seconds < std::max<std::int64_t>(threshold, 1)) {
        // Ours and long enough; lowering by less than the threshold is not worth a restart.
        cp.pre_stop_seconds = *hook.seconds;
        cp.gracekeeper_hook = true;
      } else if (b.pre_stop_seconds == 0) {
        // Our own hook, and the wait has fallen to 0: it goes.
        cp.action = ContainerPlan::Action::Remove;
        cp.pre_stop_seconds = 0;
        plan_.changes.push_back(
            {fmt::format("containers[{}].preStop", c.name), describe(hook), "none"});
      } else {
        cp.action = set_action;
        cp.gracekeeper_hook = true;
        plan_.changes.push_back(
            {fmt::format("containers[{}].preStop", c.name), describe(hook),
             describe(PreStopHook{.kind = desired_kind,
                                  .wait_ms = milliseconds_of(b.pre_stop_seconds),
                                  .length_ms = milliseconds_of(b.pre_stop_seconds),
                                  .seconds = b.pre_stop_seconds,
                                  .owned = true,
                                  .json = {}})});
      }
      plan_.containers.push_back(std::move(cp));
    }
  }

  void plan_grace() {
    const Budget& b = plan_.budget;
    std::int64_t wait = 0;
    for (const auto& cp : plan_.containers) wait = std::max(wait, cp.pre_stop_seconds);
    // The hooks of app containers that get no wait run within the grace too.
    for (std::size_t i = 0; i < d_.containers.size(); ++i) {
      const Container& c = d_.containers[i];
      if (c.sidecar || is_target(i) || is_proxy(c) || !c.pre_stop.length_ms) continue;
      wait = std::max(wait, seconds_covering(*c.pre_stop.length_ms));
    }
    const std::int64_t required =
        sum_seconds(wait, b.drain_seconds, sidecar_seconds(), b.reserve_seconds);
    const bool ours = d_.applied && d_.applied->grace_owned &&
                      d_.applied->grace_seconds == d_.grace_seconds && d_.grace_set;
    const std::int64_t threshold = policy_.changes.decrease_threshold_seconds;
    // Never below the grace the user had before gracekeeper raised it, or
    // raised it to since.
    const std::int64_t lowest = std::max(required, user_grace_floor());

    std::int64_t desired = d_.grace_seconds;
    if (d_.grace_seconds < required) {
      desired = required;
    } else if (ours && d_.grace_seconds - lowest >= std::max<std::int64_t>(threshold, 1)) {
      desired = lowest;  // our own earlier value, now larger than needed
    }
    if (desired != d_.grace_seconds || (!d_.grace_set && !plan_.changes.empty())) {
      plan_.changes.push_back({"terminationGracePeriodSeconds",
                               seconds(d_.grace_seconds) + (d_.grace_set ? "" : " (default)"),
                               seconds(desired)});
    }
    plan_.grace_seconds = desired;
    plan_.grace_owned = desired != d_.grace_seconds || ours;
  }

  // With maxUnavailable 0, a rollout moves only as many pods at once as the
  // surge allows: the surge takes over the unavailable budget the user had,
  // so that a 40-replica rollout does not become 40 serial steps. The largest
  // of the policy's maxSurge, the current maxSurge and the current
  // maxUnavailable (each resolved against replicas; a tie keeps the earlier),
  // and at least 1.
  IntOrPercent desired_surge() const {
    const Strategy& s = d_.strategy;
    const std::int64_t replicas = d_.replicas;
    // Scaled to 0, every percentage resolves to 0 pods: compared now, a
    // user's `25%` would become `1` for good, and a 40-replica rollout
    // serial once scaled up. Keep the user's own budget in its form: the
    // current surge, else what was allowed unavailable, else the policy's.
    if (replicas == 0) {
      if (!s.max_surge.is_zero()) return s.max_surge;
      if (!s.max_unavailable.is_zero()) return s.max_unavailable;
      return policy_.rollout.max_surge;
    }
    IntOrPercent best = policy_.rollout.max_surge;
    std::int64_t best_pods = best.resolve(replicas, /*round_up=*/true);
    const auto consider = [&](const IntOrPercent& candidate, std::int64_t pods) {
      if (pods > best_pods) {
        best = candidate;
        best_pods = pods;
      }
    };
    consider(s.max_surge, s.max_surge.resolve(replicas, /*round_up=*/true));
    // As a surge a percentage rounds up, so it is never below what it allowed unavailable.
    consider(s.max_unavailable, s.max_unavailable.resolve(replicas, /*round_up=*/false));
    if (best.resolve(replicas, /*round_up=*/true) < 1) return IntOrPercent{1, false};
    return best;
  }

  void plan_strategy() {
    if (d_.kind != "Deployment") return;  // a StatefulSet replaces one pod at a time
    if (!policy_.rollout.manage || d_.strategy.type == Strategy::Type::Recreate) return;
    plan_.manage_strategy = true;
    const Strategy& s = d_.strategy;
    // (At 0 replicas a surge resolves to 0 pods: any non-zero one keeps.)
    const bool keeps_capacity =
        s.max_unavailable.is_zero() &&
        (d_.replicas == 0 ? !s.max_surge.is_zero()
                          : s.max_surge.resolve(d_.replicas, /*round_up=*/true) >= 1);
    if (keeps_capacity) return;
    Strategy desired{Strategy::Type::RollingUpdate, desired_surge(), IntOrPercent{0, false}};
    plan_.changes.push_back({"strategy", describe(s), describe(desired)});
    plan_.strategy = desired;
  }

  // The lowest grace gracekeeper may write: the user's own, as recorded
  // when gracekeeper first changed it, or the one the user raised it to
  // since (user_raised_grace), whichever is newer.
  std::int64_t user_grace_floor() const {
    if (user_raised_grace()) return d_.grace_seconds;
    if (!d_.applied || !d_.applied->user) return 0;
    return d_.applied->user->grace_seconds.value_or(0);
  }

  // The grace is higher than the one gracekeeper last wrote, and gracekeeper
  // did not write it: the user raised it since. It is the user's new value,
  // recorded as theirs and never written below.
  bool user_raised_grace() const {
    return d_.applied && d_.applied->grace_owned && d_.grace_set &&
           d_.grace_seconds > d_.applied->grace_seconds;
  }

  // A hook gracekeeper wrote that the user has since made wait longer.
  bool lengthened(const Container& c) const {
    return d_.applied && lengthened_by_user(*d_.applied, c);
  }

  bool changes(std::string_view field) const {
    return std::ranges::any_of(plan_.changes, [&](const Change& c) { return c.field == field; });
  }

  // The user's own values, each recorded the first time a plan changes its
  // field and carried on unchanged after that: what `revert` restores. A
  // value that is already gracekeeper's (owned, under no record) is not the
  // user's and is not recorded; nor is anything under an older annotation
  // that lacks the record, whose current values may all be gracekeeper's.
  void record_user_values() {
    if (d_.applied && !d_.applied->user) return;
    UserValues user = d_.applied ? *d_.applied->user : UserValues{};
    const bool grace_ours = d_.applied && d_.applied->grace_owned &&
                            d_.applied->grace_seconds == d_.grace_seconds && d_.grace_set;
    // The user's newest (what revert restores), or the first change's.
    const bool first_change =
        changes("terminationGracePeriodSeconds") && !user.grace_seconds && !grace_ours;
    if (user_raised_grace() || first_change) user.grace_seconds = d_.grace_seconds;
    if (changes("strategy") && !user.strategy) user.strategy = d_.strategy;
    for (const auto& [name, value] : plan_.pod_annotations) {
      if (user.annotations.contains(name) || !changes(annotation_field(name))) {
        continue;
      }
      auto current = d_.pod_annotations.find(name);
      const bool ours = d_.applied && d_.applied->mesh.contains(name);
      if (ours) continue;  // written back after a removal: the user's was recorded then
      user.annotations.emplace(name, current == d_.pod_annotations.end()
                                         ? std::nullopt
                                         : std::optional<std::string>(current->second));
    }
    for (const ContainerPlan& cp : plan_.containers) {
      if (cp.action == ContainerPlan::Action::Keep || user.pre_stop.contains(cp.name)) continue;
      auto it = std::ranges::find(d_.containers, cp.name, &Container::name);
      if (it == d_.containers.end() || it->pre_stop.owned) continue;
      const std::string& hook = it->pre_stop.json;
      user.pre_stop.emplace(cp.name,
                            hook.empty() ? std::nullopt : std::optional<std::string>(hook));
    }
    plan_.user = std::move(user);
  }

  // At most one template change per minIntervalSeconds, unless the budget is broken.
  void apply_churn_control() {
    if (plan_.changes.empty() || (plan_.budget_broken && !ctx_.figure_raise) || !ctx_.now ||
        !d_.applied || !d_.applied->time) {
      return;
    }
    const auto since = *ctx_.now - *d_.applied->time;
    const std::chrono::seconds interval(policy_.changes.min_interval_seconds);
    if (since >= interval) return;
    plan_.deferred = true;
    plan_.due_at = *d_.applied->time + interval;
    plan_.changes.clear();
    plan_.grace_seconds = d_.grace_seconds;
    plan_.grace_owned = d_.applied && d_.applied->grace_owned;
    plan_.strategy = d_.strategy;
    for (auto& cp : plan_.containers) cp.action = ContainerPlan::Action::Keep;
    // Only what the template has stays stated.
    std::erase_if(plan_.pod_annotations, [&](const auto& a) {
      auto current = d_.pod_annotations.find(a.first);
      return current == d_.pod_annotations.end() || current->second != a.second;
    });
  }

  struct ProxyEntry {
    std::size_t index;  // into Deployment::containers
    Mesh mesh;
    std::expected<ProxyStay, std::string> stay;
  };

  const Deployment& d_;
  const Context& ctx_;
  const PolicySpec& policy_;
  std::vector<std::size_t> targets_;
  std::vector<ProxyEntry> proxies_;
  Plan plan_;
};

}  // namespace

std::string describe(const PreStopHook& hook) {
  switch (hook.kind) {
    case PreStopHook::Kind::None:
      return "none";
    case PreStopHook::Kind::Sleep:
      return fmt::format("sleep {}s", hook.seconds.value_or(0));
    case PreStopHook::Kind::ExecSleep:
      return fmt::format("exec sleep {}", seconds_text(hook.length_ms.value_or(0)));
    case PreStopHook::Kind::Exec:
      return hook.wait_ms ? fmt::format("exec, waiting {}s first", seconds_text(*hook.wait_ms))
                          : "exec";
    case PreStopHook::Kind::HttpGet:
      return "httpGet";
    case PreStopHook::Kind::TcpSocket:
      return "tcpSocket";
  }
  return "unknown";
}

std::string to_string(Severity severity) {
  switch (severity) {
    case Severity::Info:
      return "info";
    case Severity::Warning:
      return "warning";
    case Severity::Error:
      return "error";
  }
  return "unknown";
}

std::expected<std::size_t, Finding> select_policy(const Deployment& d,
                                                  const std::vector<PolicyCandidate>& candidates,
                                                  std::string_view where) {
  auto named = d.annotations.find(kAnnotationPolicy);
  std::vector<std::size_t> matches;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const bool match = named != d.annotations.end() ? candidates[i].name == named->second
                                                    : candidates[i].selector->matches(d.labels);
    if (match) matches.push_back(i);
  }
  if (matches.size() == 1) return matches.front();
  if (matches.size() > 1) {
    std::string names;
    for (std::size_t i : matches) {
      names += " " + candidates[i].name;
      if (!candidates[i].origin.empty()) names += " (" + candidates[i].origin + ")";
    }
    return std::unexpected(Finding{"AmbiguousPolicy", Severity::Warning, "",
                                   fmt::format("several ShutdownPolicies {} match:{}; name one "
                                               "with gracekeeper.dev/policy; left unchanged",
                                               where, names)});
  }
  if (named != d.annotations.end()) {
    return std::unexpected(Finding{
        "PolicyNotFound", Severity::Warning, "",
        fmt::format("no ShutdownPolicy named \"{}\" {}; left unchanged", named->second, where)});
  }
  return std::unexpected(
      Finding{"NoMatchingPolicy", Severity::Warning, "",
              fmt::format("no ShutdownPolicy's selector {} matches this Deployment; left unchanged",
                          where)});
}

Budget compute_budget(const PolicySpec& policy, double propagation_seconds,
                      std::int64_t drain_seconds) {
  Budget b;
  // A source that produced nonsense must never shorten the wait.
  if (std::isnan(propagation_seconds) || propagation_seconds < 0) {
    propagation_seconds = policy.propagation.static_seconds;
  }
  b.propagation_seconds = propagation_seconds;
  if (const auto& lb = policy.propagation.external_load_balancer) {
    b.lb_delay_seconds =
        static_cast<std::int64_t>(lb->health_check_interval_seconds) * lb->unhealthy_threshold;
  }
  // The epsilon keeps 1.1 * 10 = 11.000000000000002 from becoming 12.
  double raw = std::ceil(policy.propagation.safety_factor * propagation_seconds +
                         static_cast<double>(b.lb_delay_seconds) - 1e-9);
  raw = std::min(std::max(raw, 0.0), kUnclampedCap);
  b.unclamped_pre_stop_seconds = static_cast<std::int64_t>(raw);
  b.pre_stop_seconds = std::clamp<std::int64_t>(
      b.unclamped_pre_stop_seconds, policy.pre_stop.min_seconds, policy.pre_stop.max_seconds);
  b.clamped = b.unclamped_pre_stop_seconds > policy.pre_stop.max_seconds;
  b.drain_seconds = drain_seconds;
  b.sidecar_drain_seconds = policy.sidecar_drain_seconds;
  b.reserve_seconds = policy.reserve_seconds;
  b.grace_seconds =
      sum_seconds(b.pre_stop_seconds, b.drain_seconds, b.sidecar_drain_seconds, b.reserve_seconds);
  return b;
}

Plan plan(const Deployment& deployment, const Context& context) {
  return Planner(deployment, context).run();
}

std::optional<std::vector<std::size_t>> annotated_containers(const Deployment& deployment) {
  auto it = deployment.annotations.find(kAnnotationContainers);
  if (it == deployment.annotations.end()) return std::nullopt;
  FieldErrors ignored;  // plan() reports them
  return read_container_list(deployment, it->second, ignored);
}

std::vector<Finding> check(const Deployment& deployment, const Context& context) {
  return plan(deployment, context).findings;
}

}  // namespace gracekeeper::budget
