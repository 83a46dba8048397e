#!/usr/bin/env bash
# Traefik as the ingress on the real node (test/cluster/up --with-node), and
# a budget that covers it:
#   ingress_node_test.sh GRACEKEEPER_BINARY LAB_APP_BINARY
#
# Traefik (test/tools/build-traefik, pinned) runs in the lab's network
# namespace as the Gateway API controller (GatewayClass, Gateway, an
# HTTPRoute to the test app's Service). It reads the EndpointSlices itself
# and sends each request to a pod IP, not through kube-proxy, after its
# providersThrottleDuration (2 s).
#   1. GET and POST through Traefik reach the app's pods (200; 201 with a
#      pod's name).
#   2. Baseline, for the record: the app has no preStop wait and closes its
#      port on SIGTERM; POSTs through Traefik during a rollout. Its failures
#      are printed as a figure (the proof, hack/proof --scenarios
#      ingress-baseline,ingress, counts them over many rollouts).
#   3. gracekeeper runs with a `source: Observed` policy that declares
#      traefik's syncSeconds 2.5 (consumerSyncSeconds 1 for kube-proxy):
#      after a few deletions the figure is the samples' quantile + 2.5, its
#      consumer is traefik (status and the CONSUMER column), and the
#      Deployment's wait is sized from it.
#   4. Traefik's own lag: for a deleted pod, the time from the deletion until
#      Traefik's API no longer lists the pod among the route's servers. It is
#      at most the wait the budget gave the pods.
#   5. POSTs through Traefik during a rollout with that budget: none fails.
# Prints figures as "figure: NAME VALUE" lines; last line "N passed, M failed".
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
C="$REPO/test/cluster"
. "$C/lib.sh"
. "$C/node.sh"
. "$REPO/test/integration/harness.sh"

GK="${1:?usage: ingress_node_test.sh GRACEKEEPER_BINARY LAB_APP_BINARY}"
APP_BIN="${2:?usage: ingress_node_test.sh GRACEKEEPER_BINARY LAB_APP_BINARY}"
[ "$(id -u)" = 0 ] || { echo "the node needs root"; echo "0 passed, 1 failed"; exit 1; }

# Everything that downloads runs before the lab (whose namespace has no route out).
TRAEFIK=$("$REPO/test/tools/build-traefik") || die "test/tools/build-traefik failed"
CRDS=$("$REPO/test/tools/gateway-api-crds") || die "test/tools/gateway-api-crds failed"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/gk-ingress-node.XXXXXX")"
LAB="$TMP/lab"
OP_PID=""
TRAEFIK_PID=""
# In the lab's own network namespace: nothing else listens there.
WEB=18000
API=18001
stop() {  # stop PID: SIGTERM, SIGKILL after 5 s
  [ -n "$1" ] || return 0
  kill -TERM "$1" 2>/dev/null || return 0
  eventually 5 gone "$1"
  kill -KILL "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}
teardown() {  # on exit: clean up (then the harness prints the count line)
  stop "$OP_PID"
  stop "$TRAEFIK_PID"
  if [ -f "$LAB/pids" ]; then
    "$C/down" "$LAB" >"$TMP/down-at-exit.log" 2>&1 || cat "$TMP/down-at-exit.log"
  fi
  if [ "$FAILED" -gt 0 ]; then
    [ -f "$TMP/op.log" ] && { echo "# operator log (last 20 lines)"; tail -20 "$TMP/op.log"; }
    [ -f "$TMP/traefik.log" ] && { echo "# Traefik log (last 20 lines)"; tail -20 "$TMP/traefik.log"; }
  fi
  if [ "$FAILED" -eq 0 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$TMP"; else echo "kept $TMP"; fi
}
on_exit teardown

t0=$(now)
if ! GK_LAB_APP="$APP_BIN" "$C/up" "$LAB" --with-node --owner-pid $$ >"$TMP/up.log" 2>&1; then
  not_ok "up --with-node"; tail -n 40 "$TMP/up.log"; exit 1
fi
ok "up --with-node in $(sub "$(now)" "$t0")s"
. "$LAB/env"
E="$LAB/exec"
K_EXEC=$E K_REQUEST_TIMEOUT=  # k: kubectl inside the lab, requests unbounded

k apply --server-side -f "$REPO/crds/shutdownpolicies.gracekeeper.dev.yaml" >/dev/null
k apply --server-side --field-manager=ingress-test -f "$CRDS" >/dev/null
k wait --for condition=established --timeout=60s crd/shutdownpolicies.gracekeeper.dev \
  crd/gatewayclasses.gateway.networking.k8s.io crd/gateways.gateway.networking.k8s.io \
  crd/httproutes.gateway.networking.k8s.io >/dev/null
k apply -f "$REPO/test/integration/ingress/traefik-rbac.yaml" >/dev/null
( umask 077; "$E" "$C/token" "$LAB" traefik traefik --duration=2h >"$TMP/traefik.token" )
check "CRDs (ShutdownPolicy, Gateway API), Traefik's ServiceAccount and token" test -s "$TMP/traefik.token"

env -u KUBECONFIG "$E" "$TRAEFIK" \
  --global.checknewversion=false --global.sendanonymoususage=false \
  --entrypoints.web.address="127.0.0.1:$WEB" \
  --entrypoints.traefik.address="127.0.0.1:$API" --ping=true --api.insecure=true \
  --providers.kubernetesgateway=true \
  --providers.kubernetesgateway.endpoint="$APISERVER_URL" \
  --providers.kubernetesgateway.token="$TMP/traefik.token" \
  --providers.kubernetesgateway.certauthfilepath="$CA_FILE" \
  --log.level=INFO --log.filepath="$TMP/traefik.log" >"$TMP/traefik.out" 2>&1 &
TRAEFIK_PID=$!
check "Traefik up (web 127.0.0.1:$WEB, API and ping 127.0.0.1:$API in the lab)" \
  eventually 30 "$E" curl -sf "http://127.0.0.1:$API/ping"

k create namespace lab >/dev/null
k apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: lab}
spec:
  replicas: 3
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: app
        image: $LAB_APP_IMAGE
        imagePullPolicy: Never
        args: ["--drain-seconds", "2"]
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
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: traefik-lab}
spec: {controllerName: traefik.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: lab}
spec:
  gatewayClassName: traefik-lab
  listeners: [{name: web, protocol: HTTP, port: $WEB, allowedRoutes: {namespaces: {from: Same}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: app, namespace: lab}
spec:
  parentRefs: [{name: web}]
  rules: [{backendRefs: [{name: app, port: 80}]}]
EOF
rolled_out() { k rollout status deploy/app -n lab --timeout=2s >/dev/null 2>&1; }
ready3() {
  [ "$(k get deploy app -n lab -o jsonpath='{.status.readyReplicas}')" = 3 ] && rolled_out &&
    [ "$(k get pods -n lab -l app=app --no-headers 2>/dev/null | wc -l)" = 3 ]
}
check "the app: 3 pods Ready" eventually 120 ready3
route_accepted() {
  [ "$(k get httproute app -n lab -o jsonpath='{.status.parents[0].conditions[?(@.type=="Accepted")].status}')" = True ]
}
check "HTTPRoute app Accepted by Traefik" eventually 60 route_accepted
post() { "$E" curl -s --max-time 5 -o "$TMP/post.out" -w '%{http_code}' -X POST --data order "http://127.0.0.1:$WEB/orders"; }
served() { [ "$(post)" = 201 ]; }
check "a POST through Traefik is answered 201" eventually 30 served
check "... by a pod of the app ($(head -c 80 "$TMP/post.out"))" grep -q '"pod":"app-' "$TMP/post.out"
check "a GET /live through Traefik: 200" test "$("$E" curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$WEB/live")" = 200

# load NAME SECONDS: POSTs through Traefik at 50/s for SECONDS while the
# Deployment rolls out (restarted 2 s in); prints the client's summary to
# TMP/NAME.load. Bounded: 50 * SECONDS requests, each at most 10 s.
load() {
  "$E" python3 "$REPO/hack/proof-lib/openload.py" --url "http://127.0.0.1:$WEB/orders" --rate 50 \
    --duration "$2" --timeout 10 >"$TMP/$1.load" 2>&1 &
  local pid=$!
  sleep 2
  k rollout restart deploy/app -n lab >/dev/null
  wait "$pid"
  eventually 120 ready3
}
# ok_count NAME / total_count NAME: from the client's summary (201: an order taken).
ok_count() { awk '/\[201\]/ { print $2 }' "$TMP/$1.load"; }
total_count() { awk '/Requests issued:/ { print $3 }' "$TMP/$1.load"; }

# ------------------------------------------------------------------ baseline
load baseline 30
b_ok=$(ok_count baseline); b_total=$(total_count baseline)
check "baseline: the client's summary (${b_total:-none} requests)" test "${b_total:-0}" -ge 1000
figure "ingress-baseline-lost $(( ${b_total:-0} - ${b_ok:-0} )) of ${b_total:-0} POSTs through Traefik (no preStop wait)"
sed -n '/Status code distribution/,$p' "$TMP/baseline.load" | sed 's/^/#   /'

# ------------------------------------------------------------------ gracekeeper
k apply -f - >/dev/null <<EOF
apiVersion: gracekeeper.dev/v1alpha1
kind: ShutdownPolicy
metadata: {name: default, namespace: lab}
spec:
  drainSeconds: 3
  reserveSeconds: 2
  preStop: {minSeconds: 0}
  changes: {minIntervalSeconds: 0}
  propagation:
    source: Observed
    staticSeconds: 3
    observed:
      minSamples: 3
      windowSeconds: 600
      consumerSyncSeconds: 1
      consumers: [{name: traefik, syncSeconds: 2.5}]
EOF
k annotate deploy app -n lab gracekeeper.dev/enabled=true >/dev/null
"$E" "$GK" run --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 0 \
  --log-format json --propagation-refresh 2 >"$TMP/op.log" 2>&1 &
OP_PID=$!
status() { k get sdp default -n lab -o jsonpath="$1" 2>/dev/null; }
prestop() { k get deploy app -n lab -o jsonpath='{.spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds}' 2>/dev/null; }
has_prestop() { [ -n "$(prestop)" ]; }
check "the app is tuned (the fallback figure first)" eventually 60 has_prestop
check "... rolled out" eventually 120 ready3

# delete_one: deletes the oldest pod not being deleted, waits for its replacement.
delete_one() {
  local pod
  pod=$(k get pods -n lab -l app=app -o json |
    jq -r '[.items[] | select(.metadata.deletionTimestamp == null)] | sort_by(.metadata.creationTimestamp) | .[0].metadata.name')
  k delete pod "$pod" -n lab --wait=false >/dev/null
  sleep 1
  eventually 60 ready3
  sleep 1
}
source_is_observed() { [ "$(status '{.status.propagation.source}')" = Observed ]; }
for _ in 1 2 3 4; do delete_one; done
check "the Observed figure is measured ($(status '{.status.propagation.message}'))" eventually 30 source_is_observed
FIG=$(status '{.status.propagation.seconds}')
figure "observed-figure-with-traefik ${FIG}s ($(status '{.status.propagation.message}'))"
check "... its consumer is traefik" test "$(status '{.status.propagation.consumer}')" = traefik
check "... it is the samples' quantile + traefik's 2.5 s (${FIG}s)" within "${FIG:-0}" 2.5 4.5
out=$(k get sdp -n lab)
sed 's/^/#   /' <<<"$out"
col=$(awk 'NR == 1 { c = index($0, "CONSUMER") } NR == 2 && c { split(substr($0, c), a, " "); print a[1] }' <<<"$out")
check "kubectl get sdp: CONSUMER traefik" test "$col" = traefik
want_wait=$(awk -v f="${FIG:-0}" 'BEGIN { w = f * 1.5; c = int(w); if (c < w) c++; print c }')
retuned() { [ "$(prestop)" = "$want_wait" ]; }
check "the app's wait follows: ceil(1.5 * $FIG) = $want_wait s" eventually 30 retuned
check "... rolled out" eventually 120 ready3
WAIT=$(prestop)

# ------------------------------------------------------------------ Traefik's own lag
# servers_of: the pod IPs Traefik routes the HTTPRoute to now (its API).
servers() {
  "$E" curl -s --max-time 2 "http://127.0.0.1:$API/api/http/services" |
    jq -r '.[] | select(.provider == "kubernetesgateway") | .loadBalancer.servers[]?.url' 2>/dev/null
}
lags=()
for _ in 1 2 3; do
  pod=$(k get pods -n lab -l app=app -o json |
    jq -r '[.items[] | select(.metadata.deletionTimestamp == null)] | sort_by(.metadata.creationTimestamp) | .[0] | "\(.metadata.name) \(.status.podIP)"')
  read -r name ip <<<"$pod"
  servers | grep -q "//$ip:" || { not_ok "pod $name ($ip) is not among Traefik's servers before its deletion"; continue; }
  t_del=$(now)
  k delete pod "$name" -n lab --wait=false >/dev/null
  gone=""
  for _ in $(seq 1 300); do
    if ! servers | grep -q "//$ip:"; then gone=$(now); break; fi
    sleep 0.05
  done
  [ -n "$gone" ] && lags+=("$(sub "$gone" "$t_del")") || not_ok "Traefik still routed to $name ($ip) 15 s after its deletion"
  eventually 60 ready3
  sleep 3   # Traefik quiet again: the next deletion starts from the same state
done
figure "traefik-lag-after-deletion ${lags[*]} s (wait ${WAIT}s, figure ${FIG}s)"
worst=$(printf '%s\n' "${lags[@]:-99}" | sort -g | tail -1)
check "Traefik dropped each deleted pod within the wait (worst ${worst}s <= ${WAIT}s)" within "$worst" 0 "$WAIT"

# ------------------------------------------------------------------ gracekeeper under load
load gracekeeper 30
g_ok=$(ok_count gracekeeper); g_total=$(total_count gracekeeper)
check "gracekeeper: the client's summary (${g_total:-none} requests)" test "${g_total:-0}" -ge 1000
figure "ingress-gracekeeper-lost $(( ${g_total:-0} - ${g_ok:-0} )) of ${g_total:-0} POSTs through Traefik (wait ${WAIT}s)"
sed -n '/Status code distribution/,$p' "$TMP/gracekeeper.load" | sed 's/^/#   /'
check "... every POST through Traefik answered 201 during the rollout" test "${g_ok:-0}" = "${g_total:-x}"
kill -0 "$OP_PID" 2>/dev/null && ok "the operator ran throughout" || not_ok "the operator died"
kill -0 "$TRAEFIK_PID" 2>/dev/null && ok "Traefik ran throughout" || not_ok "Traefik died"
