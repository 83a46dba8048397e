#!/usr/bin/env bash
# The real node (test/cluster/up --with-node), end to end:
#   node_test.sh LAB_APP_BINARY [--smoke]
#
# Starts its own lab (root only), and checks what the node issue asks for:
#   - the test app as a Deployment of 3 behind a ClusterIP Service: Running and
#     Ready within 60 s, and requests through kube-proxy's rules spread over all
#     three pods;
#   - a preStop `sleep` of 5 s delays SIGTERM by 5 s (the app's own log against
#     the pod's deletion);
#   - with a grace period of 8 s and a drain that never ends, the kubelet kills
#     the app at 8 s;
#   - the shell-form entrypoint: SIGTERM never reaches the app, it is killed at
#     the grace period;
#   - the EndpointSlice marks a deleted pod's endpoint ready=false,
#     terminating=true within a second; kube-proxy's network-programming
#     histogram has samples, and with --proxy-min-sync 5 they reach ~5 s;
#   - bad input: --proxy-min-sync -1 / abc exit 2; a missing package is named
#     within seconds; a second node lab fails at once;
#   - down leaves no process, mount, cgroup, namespace or host change behind.
# --smoke (the one in `hack/test`): the Deployment + Service, the preStop
# timing and down; about a minute once everything is built.
#
# Prints figures as "figure: NAME VALUE" lines; last line "N passed, M failed".
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
C="$REPO/test/cluster"
. "$C/lib.sh"
. "$C/node.sh"

APP_BIN="${1:?usage: node_test.sh LAB_APP_BINARY [--smoke]}"
SMOKE=0
[ "${2:-}" = --smoke ] && SMOKE=1
[ -x "$APP_BIN" ] || { echo "no test app at $APP_BIN"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "the node needs root"; echo "0 passed, 1 failed"; exit 1; }

. "$REPO/test/integration/harness.sh"
in_range() { [[ $1 == "$2"* ]]; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/gk-node-test.XXXXXX")"
LAB="$TMP/lab"
BG=()   # pids of background helpers (kubectl logs -f, curl), killed on exit
teardown() {  # on exit: clean up (then the harness prints the count line)
  local p
  for p in ${BG[@]+"${BG[@]}"}; do kill "$p" 2>/dev/null; done
  if [ -f "$LAB/pids" ]; then
    "$C/down" "$LAB" >"$TMP/down-at-exit.log" 2>&1 || cat "$TMP/down-at-exit.log"
  fi
  if [ "$FAILED" -eq 0 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$TMP"; else echo "kept $TMP"; fi
}
on_exit teardown

# ------------------------------------------------------------------ bad input
out=$("$C/up" "$TMP/bad" --with-node --proxy-min-sync -1 2>&1); rc=$?
check "--proxy-min-sync -1 exits 2 naming the option (got $rc)" \
  test "$rc" = 2 -a -n "$(grep -- '--proxy-min-sync' <<<"$out")"
out=$("$C/up" "$TMP/bad" --with-node --proxy-min-sync abc 2>&1); rc=$?
check "--proxy-min-sync abc exits 2 (got $rc)" test "$rc" = 2

if [ "$SMOKE" = 0 ]; then
  # A machine without containerd: hide the binary in a private mount namespace.
  t0=$(now)
  out=$(GK_NODE_INSTALL=0 unshare -m bash -c \
    'mount --bind /dev/null "$(command -v containerd)" && exec "$0" "$1" --with-node' \
    "$C/up" "$TMP/nocontainerd" 2>&1); rc=$?
  took=$(sub "$(now)" "$t0")
  figure "missing-package-fails-in-seconds $took"
  check "without containerd, up fails in seconds naming it (rc $rc, ${took}s: ${out:0:160})" \
    test "$rc" != 0 -a -n "$(grep 'missing containerd (Debian package containerd)' <<<"$out")"
  check "... within 5 s" within "$took" 0 5
fi

# ------------------------------------------------------------------ up
VETHS_BEFORE=$(ip -o link show type veth 2>/dev/null | wc -l)
MIN_SYNC=1
[ "$SMOKE" = 1 ] || MIN_SYNC=5
t0=$(now)
if ! GK_LAB_APP="$APP_BIN" "$C/up" "$LAB" --with-node --proxy-min-sync "$MIN_SYNC" --owner-pid $$ >"$TMP/up.log" 2>&1; then
  not_ok "up --with-node"; tail -n 40 "$TMP/up.log"; exit 1
fi
T_UP=$(sub "$(now)" "$t0")
ok "up --with-node in ${T_UP}s"
figure "up-with-node-seconds $T_UP"
. "$LAB/env"
E="$LAB/exec"
K_EXEC=$E K_REQUEST_TIMEOUT=  # k: kubectl inside the lab, requests unbounded

if [ "$SMOKE" = 0 ]; then
  out=$(GK_LAB_APP="$APP_BIN" "$C/up" "$TMP/second" --with-node 2>&1); rc=$?
  check "a second node lab fails at once with a clear message (rc $rc)" \
    test "$rc" != 0 -a -n "$(grep 'a node lab is already running' <<<"$out")"
fi

# The namespace has no way out: only lo and the bridge, no default route.
links=$("$E" ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | tr '\n' ' ')
check "the lab's namespace has only lo and $GK_BRIDGE before any pod ($links)" test "$links" = "$GK_BRIDGE lo "
check "no default route inside the lab" test -z "$("$E" ip route show default)"
check "an address outside the lab is unreachable from inside" \
  bash -c "! '$E' ip route get 192.0.2.1 >/dev/null 2>&1"

# ------------------------------------------------------------------ Deployment + Service
k create namespace lab >/dev/null
cat >"$TMP/app.yaml" <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: lab}
spec:
  replicas: 3
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: app
        image: $LAB_APP_IMAGE
        imagePullPolicy: Never
        args: ["--drain-seconds", "5"]
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        ports: [{containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /ready, port: 8080}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: app, namespace: lab}
spec:
  selector: {app: app}
  ports: [{port: 80, targetPort: 8080}]
EOF
t0=$(now)
k apply -f "$TMP/app.yaml" >/dev/null
ready=0
for _ in $(seq 1 240); do
  [ "$(k get deploy app -n lab -o jsonpath='{.status.readyReplicas}' 2>/dev/null)" = 3 ] && { ready=1; break; }
  sleep 0.25
done
T_READY=$(sub "$(now)" "$t0")
figure "deployment-3-ready-seconds $T_READY"
check "3 pods Running and Ready within 60 s (${T_READY}s)" test "$ready" = 1
k get pods -n lab -o wide >"$TMP/pods.txt" 2>&1
ips=$(k get pods -n lab -o jsonpath='{.items[*].status.podIP}')
for ip in $ips; do
  check "pod IP $ip is in $GK_POD_CIDR" in_range "$ip" 198.18.
done
SVC_IP=$(k get svc app -n lab -o jsonpath='{.spec.clusterIP}')
check "the Service's ClusterIP $SVC_IP is in $GK_SERVICE_CIDR" in_range "$SVC_IP" 198.19.

# Requests through the ClusterIP (kube-proxy's DNAT), one connection each,
# once kube-proxy has written the Service's rules (at most min-sync later).
t0=$(now)
for _ in $(seq 1 60); do
  "$E" curl -s --max-time 1 -o /dev/null "http://$SVC_IP/live" && break
  sleep 0.25
done
figure "service-reachable-after-ready-seconds $(sub "$(now)" "$t0") (min-sync $MIN_SYNC)"
: >"$TMP/spread.txt"
for _ in $(seq 1 60); do
  "$E" curl -s --max-time 3 -X POST "http://$SVC_IP/orders" >>"$TMP/spread.txt" 2>/dev/null
  echo >>"$TMP/spread.txt"
done
pods_hit=$(jq -r 'select(.pod) | .pod' "$TMP/spread.txt" 2>/dev/null | sort | uniq -c)
n_hit=$(grep -c . <<<"$pods_hit")
n_ok=$(jq -r 'select(.pod) | .pod' "$TMP/spread.txt" 2>/dev/null | grep -c .)
figure "service-requests-ok $n_ok/60"
check "60 POSTs through the ClusterIP all answered (got $n_ok)" test "$n_ok" = 60
check "they spread over all 3 pods ($(echo $pods_hit))" test "$n_hit" = 3

# ------------------------------------------------------------------ a port that never met the rules
# A connection to a Service address before kube-proxy has its rule leaves
# untranslated, and conntrack keeps its entry (SYN_SENT, 120 s). A later
# connection that reuses the same client port matches that entry, is not
# translated either, and goes to the Service address itself: no answer, or
# "no route to host", even though the rule is there now. (docs/proof.md:
# the proof's "no route" came from such an entry; hack/proof polls a
# Service only once kube-proxy has its rule.) A Service made right after
# another one waits for kube-proxy's next sync, min-sync later.
if [ "$SMOKE" = 0 ]; then
  service_yaml() {
    printf 'apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: lab}\nspec: {selector: {app: app}, ports: [{port: 80, targetPort: 8080}]}\n' "$1"
  }
  service_yaml first | k apply -f - >/dev/null
  sleep 0.5  # kube-proxy syncs for it; the next change waits min-sync
  service_yaml late | k apply -f - >/dev/null
  LATE_IP=$(k get svc late -n lab -o jsonpath='{.spec.clusterIP}')
  if gk_node_proxy_has_service "$LAB" "$LATE_IP"; then
    not_ok "kube-proxy had the rule for $LATE_IP at once: min-sync $MIN_SYNC did not hold it back"
  else
    "$E" curl -s --max-time 1 --local-port 41999 -o /dev/null "http://$LATE_IP/live"
    entry=$("$E" conntrack -L -p tcp --sport 41999 -d "$LATE_IP" 2>/dev/null)
    check "before the rule, the connection's entry has no translation ($entry)" \
      grep -q "src=$LATE_IP dst=" <<<"$entry"
    for _ in $(seq 1 60); do gk_node_proxy_has_service "$LAB" "$LATE_IP" && break; sleep 0.25; done
    check "kube-proxy has the rule for $LATE_IP within 15 s" gk_node_proxy_has_service "$LAB" "$LATE_IP"
    "$E" curl -s --max-time 3 --local-port 41999 -o /dev/null "http://$LATE_IP/live"; rc=$?
    check "with the rule there, the same client port still gets no answer (curl exit $rc)" test "$rc" != 0
    "$E" curl -s --max-time 3 --local-port 41998 -o /dev/null "http://$LATE_IP/live"; rc=$?
    check "another client port is answered (curl exit $rc)" test "$rc" = 0
    "$E" conntrack -D -p tcp --sport 41999 -d "$LATE_IP" >/dev/null 2>&1
    "$E" curl -s --max-time 3 --local-port 41999 -o /dev/null "http://$LATE_IP/live"; rc=$?
    check "... and so is that port once its entry is deleted (curl exit $rc)" test "$rc" = 0
  fi
  k delete svc first late -n lab --wait=false >/dev/null
fi

# ------------------------------------------------------------------ termination timing
# pod_manifest NAME GRACE PRESTOP_SLEEP COMMAND_JSON: one pod of the test app.
pod_manifest() {
  local lifecycle=""
  [ "$3" = 0 ] || lifecycle="lifecycle: {preStop: {sleep: {seconds: $3}}}"
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: lab, labels: {app: app}}
spec:
  terminationGracePeriodSeconds: $2
  containers:
  - name: app
    image: $LAB_APP_IMAGE
    imagePullPolicy: Never
    $4
    env:
    - {name: POD_NAME, value: $1}
    ports: [{containerPort: 8080}]
    readinessProbe:
      httpGet: {path: /ready, port: 8080}
      periodSeconds: 1
    $lifecycle
EOF
}

# start_pod NAME GRACE PRESTOP COMMAND: creates it, waits until Ready, and
# follows its log into $TMP/NAME.log (in the background).
start_pod() {
  pod_manifest "$@" | k apply -f - >/dev/null
  k wait --for=condition=Ready "pod/$1" -n lab --timeout=60s >/dev/null || return 1
  k logs -f "$1" -n lab >"$TMP/$1.log" 2>&1 &
  BG+=($!)
  sleep 0.5
}

# delete_pod NAME: deletes it without waiting; prints the time the API server
# received the DELETE, from its audit log (microseconds; deletionTimestamp has
# whole seconds only).
delete_pod() {
  local t
  k delete pod "$1" -n lab --wait=false >/dev/null
  for _ in $(seq 1 50); do
    t=$(jq -r --arg n "$1" 'select(.verb == "delete" and .objectRef.resource == "pods"
          and .objectRef.name == $n and .objectRef.namespace == "lab") | .requestReceivedTimestamp' \
        "$AUDIT_LOG" 2>/dev/null | head -1)
    [ -n "$t" ] && { epoch "$t"; return; }
    sleep 0.1
  done
  echo "no DELETE of pod $1 in $AUDIT_LOG" >&2
  now
}

# log_event FILE EVENT: the wall time of the app's lifecycle line EVENT (epoch s)
log_event() {
  local wall
  wall=$(grep -a '^{' "$1" | jq -r --arg e "$2" 'select(.event == $e) | .wall' 2>/dev/null | head -1)
  [ -n "$wall" ] && epoch "$wall"
}

# slow_request NAME: a POST that takes 10 minutes to the pod NAME, in the
# background; its end (the connection reset when the app is killed) is
# written to $TMP/NAME.killed. The app cannot log a SIGKILL: this is its death.
slow_request() {
  local ip
  ip=$(k get pod "$1" -n lab -o jsonpath='{.status.podIP}')
  ( "$E" curl -s --max-time 30 -X POST "http://$ip:8080/orders?ms=600000" >/dev/null 2>&1
    now >"$TMP/$1.killed" ) &
  BG+=($!)
  sleep 0.5
}

wait_gone() { k wait --for=delete "pod/$1" -n lab --timeout="${2:-60}s" >/dev/null 2>&1; }

# A preStop sleep of 5 s delays SIGTERM by 5 s. The kubelet starts a pod's
# termination up to ~1.5 s after the DELETE: its pod worker waits for a pod
# status newer than its last sync, and the generic PLEG relists once a second
# (the "pickup", measured below as SIGTERM - DELETE without a preStop hook).
# So SIGTERM comes 5 s plus the pickup after the deletion.
if start_pod prestop 30 5 'args: ["--drain-seconds", "2"]'; then
  t_client=$(now)
  t_del=$(delete_pod prestop)
  # Endpoint marked terminating: poll the EndpointSlice until it says so.
  ip=$(grep -a '"event":"listening"' "$TMP/prestop.log" >/dev/null; k get pod prestop -n lab -o jsonpath='{.status.podIP}')
  t_term=""
  for _ in $(seq 1 100); do
    if k get endpointslices -n lab -l kubernetes.io/service-name=app -o json |
      jq -e --arg ip "$ip" '[.items[].endpoints[]? | select(.addresses[0] == $ip and .conditions.ready == false and .conditions.terminating == true)] | length > 0' >/dev/null; then
      t_term=$(now); break
    fi
    sleep 0.05
  done
  wait_gone prestop 60
  t_sig=$(log_event "$TMP/prestop.log" sigterm)
  t_exit=$(log_event "$TMP/prestop.log" exit)
  if [ -n "$t_sig" ]; then
    d=$(sub "$t_sig" "$t_del")
    figure "prestop-sleep-5-sigterm-after-seconds $d (from the client: $(sub "$t_sig" "$t_client"))"
    check "preStop sleep 5 s: SIGTERM 5 s (+ the kubelet's pickup, at most 2.5 s) after the deletion (${d}s)" within "$d" 4.9 7.5
    check "... and the app exited by itself after it" test -n "$t_exit"
  else
    not_ok "preStop: the app's log has no sigterm line"; cat "$TMP/prestop.log"
  fi
  if [ -n "$t_term" ]; then
    d=$(sub "$t_term" "$t_client")
    figure "endpoint-terminating-after-seconds $d"
    check "the EndpointSlice marks the endpoint ready=false terminating=true within a second (${d}s)" within "$d" 0 1.2
  else
    not_ok "the EndpointSlice never showed the endpoint as terminating"
  fi
else
  not_ok "the preStop pod did not become Ready"
fi

if [ "$SMOKE" = 0 ]; then
  # Grace 8 s and a drain that never ends: a request that takes 10 minutes is
  # in flight, the app waits for it (drain 600 s), the kubelet kills it at 8 s.
  if start_pod slowdrain 8 0 'args: ["--drain-seconds", "600"]'; then
    slow_request slowdrain
    t_del=$(delete_pod slowdrain)
    wait_gone slowdrain 60
    t_sig=$(log_event "$TMP/slowdrain.log" sigterm)
    d=$(sub "$(cat "$TMP/slowdrain.killed" 2>/dev/null || echo 0)" "$t_del")
    figure "grace-8-killed-after-seconds $d (after the DELETE)"
    pickup=$(sub "${t_sig:-0}" "$t_del")
    figure "kubelet-pickup-seconds $pickup (DELETE -> SIGTERM without a preStop hook)"
    check "grace 8 s, endless drain: SIGTERM at the kubelet's pickup (${pickup}s)" within "$pickup" 0 2.5
    check "... killed at 8 s after the pickup (+-1 s; pod gone ${d}s after the DELETE)" within "$(sub "$d" "$pickup")" 7 9
    check "... the app never logged an exit (it was killed)" test -z "$(log_event "$TMP/slowdrain.log" exit)"
  else
    not_ok "the slow-drain pod did not become Ready"
  fi

  # Shell form: sh -c with a command after the app, so sh does not exec it.
  if start_pod shellform 6 0 'command: ["/bin/sh", "-c", "gk-lab-app --drain-seconds 1; echo app exited"]'; then
    slow_request shellform
    t_del=$(delete_pod shellform)
    wait_gone shellform 60
    d=$(sub "$(cat "$TMP/shellform.killed" 2>/dev/null || echo 0)" "$t_del")
    figure "shell-form-grace-6-killed-after-seconds $d"
    check "shell form: SIGTERM never reaches the app" test -z "$(log_event "$TMP/shellform.log" sigterm)"
    check "... it is killed at the grace period, 6 s (+ the pickup, at most 2.5 s: ${d}s)" within "$d" 5.5 8.5
  else
    not_ok "the shell-form pod did not become Ready"
  fi

  # kube-proxy's network programming latency, with --proxy-min-sync 5: a
  # rollout of the Deployment makes a burst of endpoint changes.
  k rollout restart deploy/app -n lab >/dev/null
  k rollout status deploy/app -n lab --timeout=120s >/dev/null
  sleep $((MIN_SYNC + 2))
  metrics=$("$E" curl -s --max-time 5 "$PROXY_METRICS_URL")
  count=$(awk '/^kubeproxy_network_programming_duration_seconds_count/ {print $2}' <<<"$metrics")
  figure "kubeproxy-network-programming-samples ${count:-0}"
  check "kube-proxy's network programming histogram has samples (${count:-0})" test "${count:-0}" -gt 0
  # p99 from the cumulative buckets: the smallest le whose count >= 0.99 * total.
  p99=$(awk -v total="${count:-0}" '/^kubeproxy_network_programming_duration_seconds_bucket/ {
          match($0, /le="[^"]+"/); le = substr($0, RSTART + 4, RLENGTH - 5)
          if (le != "+Inf" && $2 >= 0.99 * total) { print le; exit } }' <<<"$metrics")
  figure "kubeproxy-network-programming-p99-seconds ${p99:-none} (min-sync $MIN_SYNC)"
  check "with --proxy-min-sync $MIN_SYNC the p99 is around $MIN_SYNC s (bucket <= ${p99:-none})" \
    within "${p99:-0}" "$(awk -v m="$MIN_SYNC" 'BEGIN{print m*0.8}')" "$(awk -v m="$MIN_SYNC" 'BEGIN{print m*2+1}')"

  # Memory of the node's components while idle.
  for name in kubelet containerd kube-proxy kube-scheduler kube-apiserver etcd kube-controller-manager; do
    pid=$(awk -v n="$name" '$1 == n {print $2}' "$LAB/pids")
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    figure "rss-kib $name ${rss:-?}"
  done
  shims=$(gk_node_processes "$LAB" | while read -r p; do
    [ "$(cat "/proc/$p/comm")" = containerd-shim ] && awk '/^VmRSS/ {print $2}' "/proc/$p/status"; done |
    awk '{s += $1; n++} END {print n+0, s+0}')
  figure "rss-kib shims(count,total) $shims"
fi

# ------------------------------------------------------------------ down
t0=$(now)
if "$C/down" "$LAB" >"$TMP/down.log" 2>&1; then
  ok "down in $(sub "$(now)" "$t0")s"
else
  not_ok "down"; cat "$TMP/down.log"
fi
figure "down-seconds $(sub "$(now)" "$t0")"
check "no node process is left" test -z "$(gk_node_processes "$LAB")"
check "no mount under the lab is left" test -z "$(gk_node_mounts "$LAB")"
check "no kubepods cgroup is left" test -z "$(gk_node_cgroup_dirs)"
check "the network namespace $LAB_NETNS is gone" test ! -e "/run/netns/$LAB_NETNS"
check "no veth of the lab is left on the host" test "$(ip -o link show type veth 2>/dev/null | wc -l)" = "$VETHS_BEFORE"
while read -r kind a b; do
  case "$kind" in
    sysctl) check "sysctl $a restored to $b" test "$(cat "/proc/sys/$a")" = "$b" ;;
    created) check "$a (made by the node) removed" test ! -e "$a" ;;
  esac
done <"$LAB/node/host-state"
rm -f "$LAB/pids"

if [ "$SMOKE" = 0 ]; then
  # The watchdog: when the owner dies, everything of the node goes too.
  sleep 600 &
  OWNER=$!
  BG+=($OWNER)
  rm -rf "$LAB"
  if GK_LAB_APP="$APP_BIN" "$C/up" "$LAB" --with-node --owner-pid "$OWNER" >"$TMP/up2.log" 2>&1; then
    . "$LAB/env"
    k apply -f "$TMP/app.yaml" >/dev/null 2>&1 || k create namespace lab >/dev/null
    k apply -f "$TMP/app.yaml" >/dev/null
    k wait --for=condition=Available deploy/app -n lab --timeout=60s >/dev/null
    kill "$OWNER"
    t0=$(now)
    for _ in $(seq 1 120); do
      [ -z "$(gk_node_processes "$LAB")" ] && [ ! -e "/run/netns/$LAB_NETNS" ] && [ -z "$(gk_node_cgroup_dirs)" ] && break
      sleep 0.5
    done
    figure "watchdog-teardown-seconds $(sub "$(now)" "$t0")"
    check "the owner gone, the watchdog stops the node: no process left" test -z "$(gk_node_processes "$LAB")"
    check "... no namespace, cgroup or mount left" \
      test ! -e "/run/netns/$LAB_NETNS" -a -z "$(gk_node_cgroup_dirs)" -a -z "$(gk_node_mounts "$LAB")"
    grep -q 'down exited 0' "$LAB/logs/watchdog.log" && ok "the watchdog's down succeeded" ||
      { not_ok "the watchdog's down"; cat "$LAB/logs/watchdog.log"; }
    rm -f "$LAB/pids"
  else
    not_ok "the second up (watchdog test)"; tail -n 20 "$TMP/up2.log"
  fi
fi
