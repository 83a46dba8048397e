#!/usr/bin/env bash
# The measured drain on the real node (test/cluster/up --with-node), end to end:
#   drain_node_test.sh GRACEKEEPER_BINARY LAB_APP_BINARY
#
# The test app (one replica behind a Service) drains on SIGTERM until its
# in-flight requests are done (--drain-seconds 60). Its policy declares a
# 5 s drain: preStop 2 s (minSeconds), drain 5 s, reserve 2 s, so a grace of
# 9 s. Each round sends a POST that works 20 s to the pod's own address,
# deletes the pod 1 s later, and reads what the kubelet and gracekeeper did:
#   round 1: SIGTERM at 2 s, the kubelet kills the app at 9 s (the POST is
#            lost); DrainCutShort; with drain.source Observed the 7 s it had
#            count as 14: grace 2 + 14 + 2 = 18, rolled out at once.
#   round 2: killed at 18 s (16 s counted as 32): grace 2 + 32 + 2 = 36.
#   round 3: the app finishes the POST (201) about 19 s in and exits; no
#            kill, no Warning; the grace stays 36.
# Prints figures as "figure: NAME VALUE" lines; last line "N passed, M failed".
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
C="$REPO/test/cluster"
. "$C/lib.sh"
. "$C/node.sh"
. "$REPO/test/integration/harness.sh"

GK="${1:?usage: drain_node_test.sh GRACEKEEPER_BINARY LAB_APP_BINARY}"
APP_BIN="${2:?usage: drain_node_test.sh GRACEKEEPER_BINARY LAB_APP_BINARY}"
[ "$(id -u)" = 0 ] || { echo "the node needs root"; echo "0 passed, 1 failed"; exit 1; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/gk-drain-node.XXXXXX")"
LAB="$TMP/lab"
OP_PID=""
POST_PID=""
teardown() {  # on exit: clean up (then the harness prints the count line)
  [ -n "$POST_PID" ] && kill "$POST_PID" 2>/dev/null
  if [ -n "$OP_PID" ]; then kill -TERM "$OP_PID" 2>/dev/null; wait "$OP_PID" 2>/dev/null; fi
  if [ -f "$LAB/pids" ]; then
    "$C/down" "$LAB" >"$TMP/down-at-exit.log" 2>&1 || cat "$TMP/down-at-exit.log"
  fi
  if [ "$FAILED" -gt 0 ] && [ -f "$TMP/op.log" ]; then echo "# operator log (last 30 lines)"; tail -30 "$TMP/op.log"; fi
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
k wait --for condition=established crd/shutdownpolicies.gracekeeper.dev >/dev/null
k create namespace lab >/dev/null
k apply -f - >/dev/null <<EOF
apiVersion: gracekeeper.dev/v1alpha1
kind: ShutdownPolicy
metadata: {name: default, namespace: lab}
spec:
  drainSeconds: 5
  reserveSeconds: 2
  preStop: {minSeconds: 2}
  changes: {minIntervalSeconds: 0}
  propagation: {source: Static, staticSeconds: 1}
  drain: {source: Observed, minSamples: 3}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: lab, annotations: {gracekeeper.dev/enabled: "true"}}
spec:
  replicas: 1
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: app
        image: $LAB_APP_IMAGE
        imagePullPolicy: Never
        args: ["--drain-seconds", "60"]
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

"$E" "$GK" run --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 0 \
  --log-format json >"$TMP/op.log" 2>&1 &
OP_PID=$!
grace() { k get deploy app -n lab -o jsonpath='{.spec.template.spec.terminationGracePeriodSeconds}' 2>/dev/null; }
grace_is() { [ "$(grace)" = "$1" ]; }
rolled_out() { k rollout status deploy/app -n lab --timeout=2s >/dev/null 2>&1; }
ready1() {
  [ "$(k get deploy app -n lab -o jsonpath='{.status.readyReplicas}')" = 1 ] && rolled_out &&
    [ "$(k get pods -n lab -l app=app -o name | wc -l)" = 1 ]
}
cut_short_events() {
  k get events.events.k8s.io -n lab -o json | jq '[.items[] | select(.reason == "DrainCutShort")] | length'
}
cut_short_events_are() { [ "$(cut_short_events)" = "$1" ]; }
status() { k get sdp default -n lab -o jsonpath="$1" 2>/dev/null; }
drained_is() { [ "$(status '{.status.terminations.drained}')" = "$1" ]; }

check "the app is tuned: grace 2 + 5 + 2 = 9" eventually 60 grace_is 9
check "... 1 pod Ready and rolled out" eventually 120 ready1

# round N WANT-GRACE-AFTER: a 20 s POST to the pod's own address, the pod
# deleted 1 s in; the POST's outcome, how long the pod took to go, and the
# grace gracekeeper sets after it.
round() {
  local n=$1 want=$2 pod ip t0 took drained before
  before=$(grace)
  pod=$(k get pods -n lab -l app=app -o jsonpath='{.items[0].metadata.name}')
  ip=$(k get pod "$pod" -n lab -o jsonpath='{.status.podIP}')
  drained=$(status '{.status.terminations.drained}')
  "$E" curl -s -o /dev/null -w '%{http_code}' --max-time 40 -X POST "http://$ip:8080/orders?ms=20000" \
    >"$TMP/post-$n" 2>/dev/null &
  POST_PID=$!
  sleep 1
  t0=$(now)
  k delete pod "$pod" -n lab --wait=true --timeout=60s >/dev/null
  took=$(sub "$(now)" "$t0")
  wait "$POST_PID"
  POST_PID=""
  figure "round-$n pod $pod grace ${before}s gone-after ${took}s post-http $(cat "$TMP/post-$n")"
  check "round $n: the drain is measured" eventually 20 drained_is $((${drained:-0} + 1))
  check "round $n: the grace becomes $want" eventually 30 grace_is "$want"
  eventually 120 ready1
}

round 1 18
check "round 1: the 20 s POST was cut off (HTTP $(cat "$TMP/post-1"))" test "$(cat "$TMP/post-1")" != 201
check "... one Warning DrainCutShort" eventually 20 cut_short_events_are 1
k get events.events.k8s.io -n lab -o json | jq -r '.items[] | select(.reason == "DrainCutShort") | .note' | sed 's/^/#   /'
round 2 36
check "round 2: cut off again at the grace of 18 s (HTTP $(cat "$TMP/post-2"))" test "$(cat "$TMP/post-2")" != 201
check "... a second DrainCutShort" eventually 20 cut_short_events_are 2
round 3 36
check "round 3: the POST completes (HTTP $(cat "$TMP/post-3")): the grace covers the app's drain" \
  test "$(cat "$TMP/post-3")" = 201
check "... no further DrainCutShort" cut_short_events_are 2
grep -F "measured a pod's drain" "$TMP/op.log" | sed 's/^/#   /'
figure "terminations $(status '{.status.terminations}') drain $(status '{.status.drain}')"
k get sdp -n lab -o wide | sed 's/^/#   /'
check "status.drain: Observed 32 app" \
  test "$(status '{.status.drain.source} {.status.drain.seconds} {.status.drain.workload}')" = "Observed 32 app"
kill -0 "$OP_PID" 2>/dev/null && ok "the operator ran throughout" || not_ok "the operator died"
