#!/usr/bin/env bash
# test/integration/ingress/traefik_gateway_test.sh: Traefik as a Gateway API
# controller against the real API server (no node, no pods).
#
# Builds (or finds cached) the pinned Traefik (test/tools/build-traefik) and
# the Gateway API standard-channel CRDs (test/tools/gateway-api-crds), then
# re-runs itself in a network namespace of its own (`unshare --net`) whose only
# interface is loopback, holding 127.0.0.1 and 198.18.0.10/32: nothing the test
# sends can leave the machine, and the namespace goes away with its last
# process. 198.18.0.10 is there because the API server refuses loopback
# addresses in an EndpointSlice ("may not be in the loopback range").
# Inside, it starts its own kube-apiserver + etcd (test/cluster/up), installs
# the CRDs, gives Traefik a ServiceAccount (ClusterRole for what its Gateway API
# provider reads and the status it writes) and a token (test/cluster/token),
# and starts two tiny HTTP backends (python3, 198.18.0.10, ports a and b) and
# Traefik (entrypoint web on 127.0.0.1:<free port>, providers.kubernetesgateway
# with endpoint + token + CA, --log.level=DEBUG to a file). Then:
#   * a GatewayClass (traefik.io/gateway-controller), a Gateway whose HTTP
#     listener has the web entrypoint's port, a Service and an EndpointSlice
#     made by hand (198.18.0.10, backend a's port), an HTTPRoute (host
#     articles.lab.test, PathPrefix /articles) to the Service;
#   * what Traefik writes back: GatewayClass Accepted, Gateway Accepted and
#     Programmed, the listener's attachedRoutes, HTTPRoute parent Accepted and
#     ResolvedRefs;
#   * a GET and a POST through Traefik reach backend a (200, its body); no
#     route for another path or host (404);
#   * how long after an EndpointSlice change Traefik stops sending requests to
#     the old endpoint (its port set to one where nothing listens: 502), one
#     curl every 200 ms, for the default providersThrottleDuration (2s) and for
#     --providers.providersthrottleduration=8s, each twice: after a quiet
#     period, and 0.5 s after another change (a -> b) that Traefik applied.
#     Printed as `# throttle 2s: backend dropped after N.N s ...`;
#   * the EndpointSlice deleted: no 200 any more.
# Traefik v3.6.12 is built against gateway-api v1.4.0; the v1.6.3 CRDs serve
# every version it watches (GatewayClass, Gateway, HTTPRoute, GRPCRoute,
# BackendTLSPolicy v1, ReferenceGrant v1beta1).
# Everything it starts (Traefik, the backends, the cluster) is stopped on exit
# by pid (trap); the work directory is removed.
#
# usage: test/integration/ingress/traefik_gateway_test.sh
# Root only (unshare --net); exit 77 (skipped) otherwise. Needs python3, curl,
# kubectl, jq. Output: `ok - ...` / `not ok - ...`, `# ...` figures, then
# `N passed, M failed`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"

if [ "${GK_INGRESS_IN_NETNS:-}" != 1 ]; then
  if ((EUID != 0)); then
    echo "# needs root (the test runs in a network namespace of its own); skipped"
    exit 77
  fi
  for tool in unshare ip python3 curl kubectl jq; do
    command -v "$tool" >/dev/null || { echo "Bail out! '$tool' not found"; exit 1; }
  done
  # Everything that downloads runs here, before the namespace without network.
  "$ROOT/test/cluster/build" >&2 || { echo "Bail out! test/cluster/build failed"; exit 1; }
  GK_TRAEFIK_BIN=$("$ROOT/test/tools/build-traefik") || { echo "Bail out! test/tools/build-traefik failed"; exit 1; }
  GK_GATEWAY_CRDS=$("$ROOT/test/tools/gateway-api-crds") || { echo "Bail out! test/tools/gateway-api-crds failed"; exit 1; }
  export GK_INGRESS_IN_NETNS=1 GK_TRAEFIK_BIN GK_GATEWAY_CRDS
  exec unshare --net -- bash "${BASH_SOURCE[0]}" "$@"
fi

. "$ROOT/test/integration/harness.sh"   # ok, not_ok, note, expect, eventually, die, k
# calc EXPR: awk arithmetic, one decimal.
calc() { awk "BEGIN { printf \"%.1f\", $1 }"; }

TRAEFIK="$GK_TRAEFIK_BIN"
CRDS="$GK_GATEWAY_CRDS"
. "$ROOT/test/cluster/lib.sh"   # gk_free_port
BACKEND_IP=198.18.0.10
HOST=articles.lab.test
NS=ingress-lab
work_dir /tmp/gk-traefik-gateway.XXXXXX
TRAEFIK_PID=""
BACKEND_PIDS=()

stop_pid() {  # stop_pid PID: SIGTERM, SIGKILL after 5 s
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  eventually 5 gone "$pid" || true
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local pid
  [ -z "$TRAEFIK_PID" ] || stop_pid "$TRAEFIK_PID"
  for pid in ${BACKEND_PIDS[@]+"${BACKEND_PIDS[@]}"}; do stop_pid "$pid"; done
}

# The namespace: loopback only, with the backends' address on it.
ip link set lo up
ip addr add "$BACKEND_IP/32" dev lo
links=$(ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')
routes=$(ip -4 route show table main | wc -l)
if [ "$links" = "lo " ] && [ "$routes" = 0 ]; then
  ok "own network namespace: only lo ($(ip -o -4 addr show dev lo | awk '{print $4}' | tr '\n' ' ')), no route out"
else
  die "the network namespace has links '$links' and $routes routes"
fi

start_cluster "$WORK/cluster"
on_exit cleanup  # Traefik and the backends stop before the cluster
set -a; . "$CLUSTER/env"; set +a

# The Gateway API CRDs (standard channel), established.
if k apply --server-side --field-manager=ingress-test -f "$CRDS" >"$WORK/crds.out" 2>&1 &&
   k wait --for condition=established --timeout=60s crd/gatewayclasses.gateway.networking.k8s.io \
     crd/gateways.gateway.networking.k8s.io crd/httproutes.gateway.networking.k8s.io \
     crd/referencegrants.gateway.networking.k8s.io >/dev/null 2>&1; then
  ok "Gateway API CRDs from $(basename "$(dirname "$CRDS")") installed: $(k get crd -o name | grep -c gateway.networking.k8s.io) established"
else
  note <"$WORK/crds.out"; die "installing the Gateway API CRDs"
fi

# Traefik's identity: a ServiceAccount with what its Gateway API provider
# watches (cluster-wide) and the status it writes, and a token for it.
k apply -f "$ROOT/test/integration/ingress/traefik-rbac.yaml" >"$WORK/rbac.out" 2>&1 || { note <"$WORK/rbac.out"; die "Traefik's RBAC"; }
( umask 077; "$ROOT/test/cluster/token" "$CLUSTER" traefik traefik --duration=2h >"$WORK/traefik.token" ) &&
  [ -s "$WORK/traefik.token" ] || die "test/cluster/token traefik traefik"
ok "ServiceAccount traefik/traefik with ClusterRole traefik-gateway, token minted"

# The backends: 198.18.0.10 in this namespace, a and b answer 200 with their
# name, the method, the path and how many bytes were posted; nothing listens
# on CLOSED.
cat >"$WORK/backend.py" <<'PY'
import http.server, sys
name, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self, posted):
        body = f"backend {name} {self.command} {self.path} {posted}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.answer(0)
    def do_POST(self):
        self.answer(len(self.rfile.read(int(self.headers.get("Content-Length") or 0))))
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((host, port), Handler).serve_forever()
PY
gk_free_port WEB; gk_free_port PING; gk_free_port PORT_A; gk_free_port PORT_B; gk_free_port CLOSED
for b in a b; do
  port_var="PORT_${b^^}"
  python3 "$WORK/backend.py" "$b" "$BACKEND_IP" "${!port_var}" >"$WORK/backend-$b.log" 2>&1 &
  BACKEND_PIDS+=($!)
  eventually 10 curl -sf "http://$BACKEND_IP:${!port_var}/" || die "backend $b on $BACKEND_IP:${!port_var} did not start"
done
ok "backends a and b on $BACKEND_IP:$PORT_A and :$PORT_B (python3), nothing on :$CLOSED"

# start_traefik NAME [FLAGS...]: Traefik on loopback, logs (DEBUG) to WORK/NAME.log.
start_traefik() {
  local name=$1; shift
  env -u KUBECONFIG -u KUBERNETES_SERVICE_HOST -u KUBERNETES_SERVICE_PORT "$TRAEFIK" \
    --global.checknewversion=false --global.sendanonymoususage=false \
    --entrypoints.web.address="127.0.0.1:$WEB" \
    --entrypoints.traefik.address="127.0.0.1:$PING" --ping=true \
    --providers.kubernetesgateway=true \
    --providers.kubernetesgateway.endpoint="$APISERVER_URL" \
    --providers.kubernetesgateway.token="$WORK/traefik.token" \
    --providers.kubernetesgateway.certauthfilepath="$CA_FILE" \
    --log.level=DEBUG --log.filepath="$WORK/$name.log" "$@" >"$WORK/$name.out" 2>&1 &
  TRAEFIK_PID=$!
  TRAEFIK_LOG="$WORK/$name.log"
  if eventually 30 curl -sf "http://127.0.0.1:$PING/ping"; then
    ok "Traefik ($name) up: web on 127.0.0.1:$WEB, ping on 127.0.0.1:$PING${*:+ ($*)}"
  else
    note <"$WORK/$name.out"; tail -n 20 "$TRAEFIK_LOG" 2>/dev/null | note; die "Traefik ($name) did not start"
  fi
}
stop_traefik() { stop_pid "$TRAEFIK_PID"; TRAEFIK_PID=""; }

start_traefik traefik-2s

k apply -f - >"$WORK/objects.out" 2>&1 <<YAML || { note <"$WORK/objects.out"; die "creating the Gateway API objects"; }
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: traefik-lab}
spec: {controllerName: traefik.io/gateway-controller}
---
apiVersion: v1
kind: Namespace
metadata: {name: $NS}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: $NS}
spec:
  gatewayClassName: traefik-lab
  listeners:
    - {name: http, protocol: HTTP, port: $WEB, allowedRoutes: {namespaces: {from: Same}}}
---
apiVersion: v1
kind: Service
metadata: {name: backend, namespace: $NS}
spec:
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: backend-1
  namespace: $NS
  labels: {kubernetes.io/service-name: backend, endpointslice.kubernetes.io/managed-by: ingress-test}
addressType: IPv4
ports: [{name: http, port: $PORT_A, protocol: TCP}]
endpoints:
  - addresses: [$BACKEND_IP]
    conditions: {ready: true, serving: true, terminating: false}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: articles, namespace: $NS}
spec:
  parentRefs: [{name: web, sectionName: http}]
  hostnames: [$HOST]
  rules:
    - matches: [{path: {type: PathPrefix, value: /articles}}]
      backendRefs: [{name: backend, port: 80}]
YAML
ok "GatewayClass, Gateway (listener port $WEB), Service, EndpointSlice ($BACKEND_IP:$PORT_A), HTTPRoute created"

# What Traefik writes back.
jp() { k get "$1" ${2:+-n "$2"} -o jsonpath="$3" 2>/dev/null; }
cond() { jp "$1" "$2" "{.status.conditions[?(@.type==\"$3\")].status}"; }
route_cond() { jp httproute/articles "$NS" "{.status.parents[0].conditions[?(@.type==\"$1\")].status}"; }
is_true() { [ "$("$@")" = True ]; }
eventually 60 is_true cond gatewayclass/traefik-lab "" Accepted || true
expect "GatewayClass traefik-lab Accepted" "$(cond gatewayclass/traefik-lab "" Accepted)" True
eventually 60 is_true cond gateway/web "$NS" Programmed || true
expect "Gateway web Accepted" "$(cond gateway/web "$NS" Accepted)" True
expect "Gateway web Programmed" "$(cond gateway/web "$NS" Programmed)" True
attached() { [ "$(jp gateway/web "$NS" '{.status.listeners[0].attachedRoutes}')" = 1 ]; }
eventually 30 attached || true
expect "Gateway web listener http attachedRoutes" "$(jp gateway/web "$NS" '{.status.listeners[0].attachedRoutes}')" 1
eventually 60 is_true route_cond ResolvedRefs || true
expect "HTTPRoute articles parent controller" \
  "$(jp httproute/articles "$NS" '{.status.parents[0].controllerName}')" traefik.io/gateway-controller
expect "HTTPRoute articles parent Accepted" "$(route_cond Accepted)" True
expect "HTTPRoute articles parent ResolvedRefs" "$(route_cond ResolvedRefs)" True

# Requests through Traefik's loopback port.
URL="http://127.0.0.1:$WEB"
req() {  # req PATH [curl flags...]: prints "CODE BODY"
  local path=$1; shift
  curl -s --max-time 2 -o "$WORK/body" -w '%{http_code}' -H "Host: $HOST" "$@" "$URL$path" >"$WORK/code" || true
  echo "$(cat "$WORK/code") $(cat "$WORK/body" 2>/dev/null)"
}
serves() { [ "$(req /articles/ping)" = "200 backend $1 GET /articles/ping 0" ]; }
eventually 30 serves a || true
expect "GET /articles/42 through Traefik" "$(req /articles/42)" "200 backend a GET /articles/42 0"
expect "POST /articles (11 bytes) through Traefik" "$(req /articles -X POST --data-binary 'hello world')" \
  "200 backend a POST /articles 11"
expect "no route for /other" "$(req /other | cut -d' ' -f1)" 404
expect "no route for another host" \
  "$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' -H 'Host: other.lab.test' "$URL/articles/1")" 404

# The throttle. set_port PORT: the EndpointSlice's port, by a JSON patch; sets
# T_SET to when kubectl returned (the API server had stored it).
set_port() {
  k patch endpointslice backend-1 -n "$NS" --type=json \
    -p "[{\"op\":\"replace\",\"path\":\"/ports/0/port\",\"value\":$1}]" >/dev/null
  T_SET=$EPOCHREALTIME
}
# poll COUNT FILE: one GET every 200 ms, "EPOCH CODE BACKEND" lines (background).
poll() {
  local i t code
  : >"$2"
  for ((i = 0; i < $1; i++)); do
    t=$EPOCHREALTIME
    code=$(curl -s --max-time 1 -o "$2.body" -w '%{http_code}' -H "Host: $HOST" "$URL/articles/poll" || true)
    echo "$t $code $(cut -d' ' -f2 "$2.body" 2>/dev/null)" >>"$2"
    sleep "$(awk -v t="$t" -v now="$EPOCHREALTIME" 'BEGIN { d = t + 0.2 - now; printf "%.3f", (d > 0 ? d : 0) }')"
  done
}
# first_after FILE T0 TEST: seconds from T0 to the first poll at or after T0
# whose "code backend" matches TEST (an awk condition on c and b); "none" if none.
first_after() {
  awk -v t0="$2" '$1 >= t0 { c = $2; b = $3; if ('"$3"') { printf "%.1f\n", $1 - t0; found = 1; exit } }
    END { if (!found) print "none" }' "$1"
}
# stays FILE T0 TEST: every poll from the first match on matches TEST.
stays() {
  awk -v t0="$2" '$1 >= t0 { c = $2; b = $3; m = ('"$3"'); if (m) seen = 1; else if (seen) bad = 1 }
    END { exit !(seen && !bad) }' "$1"
}
reset_to_a() {  # back to backend a, then quiet for longer than the throttle
  set_port "$PORT_A"
  eventually 30 serves a || die "backend a not served again after the reset"
  sleep "$(calc "$1 + 1")"
}
# measure THROTTLE_SECONDS: the two figures for the running Traefik.
measure() {
  local th=$1 count drop drop_b gap polls="$WORK/polls-$1"
  count=$(awk -v t="$th" 'BEGIN { printf "%d", (t + 6) / 0.2 }')

  reset_to_a "$th"
  poll "$count" "$polls.quiet" &
  local poller=$!
  sleep 0.6
  set_port "$CLOSED"
  local t0=$T_SET
  wait "$poller"
  drop=$(first_after "$polls.quiet" "$t0" 'c != 200')
  echo "# throttle ${th}s: backend dropped after $drop s (quiet: no change in the ${th} s before)"
  if [ "$drop" != none ] && stays "$polls.quiet" "$t0" 'c != 200'; then
    if awk -v d="$drop" 'BEGIN { exit !(d <= 1.0) }'; then
      ok "throttle ${th}s, quiet: the old endpoint dropped at once ($drop s; 502 from then on: $(awk -v t0="$t0" '$1 >= t0 && $2 != 200 { print $2; exit }' "$polls.quiet"))"
    else
      not_ok "throttle ${th}s, quiet: dropped after $drop s, want <= 1.0 s"
    fi
  else
    not_ok "throttle ${th}s, quiet: the old endpoint was not dropped for good"; tail -n 5 "$TRAEFIK_LOG" | note
  fi

  reset_to_a "$th"
  poll "$count" "$polls.burst" &
  poller=$!
  sleep 0.6
  set_port "$PORT_B"
  local tb=$T_SET
  sleep 0.5
  set_port "$CLOSED"
  local t1=$T_SET
  wait "$poller"
  gap=$(calc "$t1 - $tb")
  drop_b=$(first_after "$polls.burst" "$tb" 'b == "b"')
  drop=$(first_after "$polls.burst" "$t1" 'c != 200')
  echo "# throttle ${th}s: backend dropped after $drop s ($gap s after a change a -> b that was applied after $drop_b s)"
  if [ "$drop" != none ] && [ "$drop_b" != none ] && stays "$polls.burst" "$t1" 'c != 200'; then
    # The second change waits until `th` has passed since the first was sent.
    if awk -v d="$drop" -v g="$gap" -v t="$th" 'BEGIN { exit !(d + g >= t - 0.5 && d + g <= t + 1.5) }'; then
      ok "throttle ${th}s: a change $gap s after another one applied after $drop s (~${th} s after the first)"
    else
      not_ok "throttle ${th}s: a change $gap s after another one applied after $drop s; want $gap + it within ${th} -0.5/+1.5 s"
    fi
  else
    not_ok "throttle ${th}s, after a change: a -> b applied after $drop_b s, old endpoint dropped after $drop s"
    tail -n 5 "$TRAEFIK_LOG" | note
  fi
}

measure 2

# The EndpointSlice deleted: nothing to send to.
reset_to_a 0
k delete endpointslice backend-1 -n "$NS" >/dev/null
not_served() { [ "$(req /articles/gone | cut -d' ' -f1)" != 200 ]; }
eventually 15 not_served || true
code=$(req /articles/gone | cut -d' ' -f1)
if [ "$code" != 200 ]; then ok "EndpointSlice deleted: Traefik answers $code"; else not_ok "EndpointSlice deleted: still 200"; fi

# The second case: an 8 s throttle (the same objects, the slice made again).
stop_traefik
k apply -f - >/dev/null <<YAML
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: backend-1
  namespace: $NS
  labels: {kubernetes.io/service-name: backend, endpointslice.kubernetes.io/managed-by: ingress-test}
addressType: IPv4
ports: [{name: http, port: $PORT_A, protocol: TCP}]
endpoints:
  - addresses: [$BACKEND_IP]
    conditions: {ready: true, serving: true, terminating: false}
YAML
start_traefik traefik-8s --providers.providersthrottleduration=8s
eventually 30 serves a || true
expect "GET through the second Traefik" "$(req /articles/7)" "200 backend a GET /articles/7 0"
measure 8

finish
