#!/usr/bin/env bash
# Source Observed and the termination audit on the real node
# (test/cluster/up --with-node --proxy-min-sync 5), end to end:
#   observed_node_test.sh GRACEKEEPER_BINARY LAB_APP_BINARY
#
# gracekeeper runs inside the lab with a `source: Observed` policy
# (minSamples 3, minSeconds 0, staticSeconds 1) governing the test app
# (3 replicas behind a Service). Real pods are deleted; the real
# EndpointSlice controller marks their endpoints terminating with its
# last-change-trigger-time; kube-proxy rewrites its rules at most every 5 s.
#   1. consumerSyncSeconds 0: the deletions give samples (the control plane's
#      part, well under a second) and the Observed figure appears in
#      `kubectl get sdp`; the preStop wait sized from it is 1-3 s, and the
#      audit counts each termination. It sees what the control plane did,
#      not kube-proxy's 5 s: it reports them covered (the case the declared
#      consumerSyncSeconds exists for).
#   2. consumerSyncSeconds 5: the figure rises by 5 s, the Deployment is
#      re-tuned, and the rollout that follows terminates the old pods, whose
#      short wait the audit now reports late (one Warning for that rollout);
#      pods of the new rollout are covered, with positive slack.
# Prints figures as "figure: NAME VALUE" lines; last line "N passed, M failed".
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
C="$REPO/test/cluster"
. "$C/lib.sh"
. "$C/node.sh"
. "$REPO/test/integration/harness.sh"

GK="${1:?usage: observed_node_test.sh GRACEKEEPER_BINARY LAB_APP_BINARY}"
APP_BIN="${2:?usage: observed_node_test.sh GRACEKEEPER_BINARY LAB_APP_BINARY}"
[ "$(id -u)" = 0 ] || { echo "the node needs root"; echo "0 passed, 1 failed"; exit 1; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/gk-observed-node.XXXXXX")"
LAB="$TMP/lab"
OP_PID=""
teardown() {  # on exit: clean up (then the harness prints the count line)
  if [ -n "$OP_PID" ]; then kill -TERM "$OP_PID" 2>/dev/null; wait "$OP_PID" 2>/dev/null; fi
  if [ -f "$LAB/pids" ]; then
    "$C/down" "$LAB" >"$TMP/down-at-exit.log" 2>&1 || cat "$TMP/down-at-exit.log"
  fi
  if [ "$FAILED" -gt 0 ] && [ -f "$TMP/op.log" ]; then echo "# operator log (last 30 lines)"; tail -30 "$TMP/op.log"; fi
  if [ "$FAILED" -eq 0 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$TMP"; else echo "kept $TMP"; fi
}
on_exit teardown

t0=$(now)
if ! GK_LAB_APP="$APP_BIN" "$C/up" "$LAB" --with-node --proxy-min-sync 5 --owner-pid $$ >"$TMP/up.log" 2>&1; then
  not_ok "up --with-node --proxy-min-sync 5"; tail -n 40 "$TMP/up.log"; exit 1
fi
ok "up --with-node --proxy-min-sync 5 in $(sub "$(now)" "$t0")s"
. "$LAB/env"
E="$LAB/exec"
K_EXEC=$E K_REQUEST_TIMEOUT=  # k: kubectl inside the lab, requests unbounded

k apply --server-side -f "$REPO/crds/shutdownpolicies.gracekeeper.dev.yaml" >/dev/null
k wait --for condition=established crd/shutdownpolicies.gracekeeper.dev >/dev/null
k create namespace lab >/dev/null
policy() {  # policy CONSUMER-SYNC-SECONDS
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
    staticSeconds: 1
    observed: {minSamples: 3, windowSeconds: 600, consumerSyncSeconds: $1}
EOF
}
policy 0
k apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: lab, annotations: {gracekeeper.dev/enabled: "true"}}
spec:
  replicas: 3
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
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
EOF

"$E" "$GK" run --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 0 \
  --log-format json --propagation-refresh 2 >"$TMP/op.log" 2>&1 &
OP_PID=$!
status() { k get sdp default -n lab -o jsonpath="$1" 2>/dev/null; }
prestop() { k get deploy app -n lab -o jsonpath='{.spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds}' 2>/dev/null; }
rolled_out() { k rollout status deploy/app -n lab --timeout=2s >/dev/null 2>&1; }
ready3() { [ "$(k get deploy app -n lab -o jsonpath='{.status.readyReplicas}')" = 3 ] && rolled_out; }
observed_at_least() { [ "$(status '{.status.terminations.observed}')" -ge "$1" ] 2>/dev/null; }
source_is() { [ "$(status '{.status.propagation.source}')" = "$1" ]; }
metrics_port() { jq -r 'select(.msg == "serving HTTP") | .port' "$TMP/op.log" 2>/dev/null | head -1; }
metrics() { "$E" curl -s --max-time 5 "http://127.0.0.1:$(metrics_port)/metrics"; }
late_events() {
  k get events.events.k8s.io -n lab -o json |
    jq '[.items[] | select(.reason == "PropagationOutlastedPreStop")] | length'
}
late_events_are() { [ "$(late_events)" = "$1" ]; }

has_prestop() { [ -n "$(prestop)" ]; }
check "the app is tuned with the fallback" eventually 60 has_prestop
check "... preStop $(prestop) s, 3 pods Ready and rolled out" eventually 120 ready3

# delete_one: deletes the oldest pod of the Deployment that is not being
# deleted already, waits for the replacement to be Ready.
delete_one() {
  local pod
  pod=$(k get pods -n lab -l app=app -o json |
    jq -r '[.items[] | select(.metadata.deletionTimestamp == null)] | sort_by(.metadata.creationTimestamp) | .[0].metadata.name')
  k delete pod "$pod" -n lab --wait=false >/dev/null
  sleep 1
  eventually 60 ready3
  sleep 1
}

# A deletion's first EndpointSlice change has no trigger time (the pod's
# Ready condition has not changed yet); the kubelet's not-ready a second
# later has one. Until the namespace has a sample, a termination is
# "unmeasured": gracekeeper's own first tune (a rollout of pods without a
# wait) and the first deletion. What follows is counted from a warm book.
delete_one
delete_one
num() { local v; v=$(status "$1"); echo "${v:-0}"; }
BASE_OBS=$(num '{.status.terminations.observed}')
BASE_LATE=$(num '{.status.terminations.late}')
BASE_EVENTS=$(late_events)
figure "audit-before-consumer-sync-0 $(status '{.status.terminations}') events $BASE_EVENTS; $(metrics | grep -E '^gracekeeper_terminations_total' | tr '\n' ' ')"

# ------------------------------------------------------------------ consumerSyncSeconds 0
for _ in 1 2 3; do delete_one; done
check "consumerSyncSeconds 0: the Observed figure appears (source $(status '{.status.propagation.source}'))" eventually 20 source_is Observed
FIG0=$(status '{.status.propagation.seconds}')
figure "observed-figure-consumer-sync-0 ${FIG0}s ($(status '{.status.propagation.message}'))"
k get sdp -n lab -o wide | sed 's/^/#   /'
check "... under 2 s: the control plane's part only" within "${FIG0:-99}" 0 2
check "... the deletions are audited ($(status '{.status.terminations}'))" eventually 20 observed_at_least $((BASE_OBS + 3))
LATE0=$(num '{.status.terminations.late}')
figure "audit-consumer-sync-0 $(status '{.status.terminations}')"
check "... and reported covered: gracekeeper cannot see kube-proxy's 5 s (late $BASE_LATE -> $LATE0)" test "$LATE0" = "$BASE_LATE"
eventually 30 rolled_out
WAIT0=$(prestop)
figure "prestop-consumer-sync-0 ${WAIT0}s"

# ------------------------------------------------------------------ consumerSyncSeconds 5
policy 5
check "consumerSyncSeconds 5: the figure rises by 5 s" eventually 20 bash -c "awk -v a=\"\$('$E' kubectl get sdp default -n lab -o jsonpath='{.status.propagation.seconds}')\" -v b='$FIG0' 'BEGIN { exit !(a >= b + 4.99) }'"
figure "observed-figure-consumer-sync-5 $(status '{.status.propagation.seconds}')s"
check "... the Deployment is re-tuned (preStop $WAIT0 -> $(prestop))" eventually 30 bash -c "[ \"\$('$E' kubectl get deploy app -n lab -o jsonpath='{.spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds}')\" -gt '$WAIT0' ]"
check "... its rollout is done" eventually 120 ready3
check "the old rollout's pods, with the ${WAIT0}s wait, are reported late ($(status '{.status.terminations}'))" \
  eventually 30 bash -c "[ \"\$('$E' kubectl get sdp default -n lab -o jsonpath='{.status.terminations.late}')\" -ge $((LATE0 + 3)) ]"
check "... one Warning PropagationOutlastedPreStop for that rollout" eventually 70 late_events_are $((BASE_EVENTS + 1))
k get events.events.k8s.io -n lab -o json | jq -r '.items[] | select(.reason == "PropagationOutlastedPreStop") | .note' | sed 's/^/#   /'
LATE1=$(status '{.status.terminations.late}')
OBS1=$(num '{.status.terminations.observed}')
for _ in 1 2 3; do delete_one; done
check "three more deletions audited" eventually 20 observed_at_least $((OBS1 + 3))
figure "audit-consumer-sync-5 $(status '{.status.terminations}')"
check "the new rollout's pods are covered (late stays $LATE1: $(status '{.status.terminations.late}'))" \
  test "$(status '{.status.terminations.late}')" = "$LATE1"
m=$(metrics)
grep -E '^gracekeeper_(terminations_total|termination_slack_seconds_(sum|count)|endpoint_propagation_seconds_(sum|count)|endpoint_propagation_anomalies_total)' <<<"$m" | sed 's/^/#   /'
covered=$(awk '/^gracekeeper_terminations_total\{.*outcome="covered"/ {print $2}' <<<"$m")
want=$(($(num '{.status.terminations.observed}') - $(num '{.status.terminations.late}')))
check "gracekeeper_terminations_total covered ${covered:-0} = status observed - late ($want)" test "${covered:-0}" = "$want"
# kube-proxy's own view, for comparison: p99 of network programming.
pm=$("$E" curl -s --max-time 5 "$PROXY_METRICS_URL")
total=$(awk '/^kubeproxy_network_programming_duration_seconds_count/ {print $2}' <<<"$pm")
p99=$(awk -v total="${total:-0}" '/^kubeproxy_network_programming_duration_seconds_bucket/ {
        match($0, /le="[^"]+"/); le = substr($0, RSTART + 4, RLENGTH - 5)
        if ($2 >= 0.99 * total && found == "") found = le } END { print found }' <<<"$pm")
figure "kube-proxy-network-programming-p99-bucket ${p99:-none} (${total:-0} samples) vs Observed ${FIG0}s + consumerSyncSeconds"
kill -0 "$OP_PID" 2>/dev/null && ok "the operator ran throughout" || not_ok "the operator died"
