#!/usr/bin/env bash
# The measured drain (docs/api.md, "The measured drain") against the real API
# server. This control plane has no kubelet, so the test plays its part for
# two pods of the governed Deployment `web`: each is created bound to a node
# that does not exist (so a deletion is graceful), with a finalizer of the
# test (so it stays after the deletion), deleted with a grace of 30 s, and
# given the last status a kubelet writes: every container terminated, with
# finishedAt and exitCode. The node lab's suite runs the same with a real
# kubelet (test/integration/node, "the measured drain").
#
# usage: test/integration/operator/drain_test.sh GRACEKEEPER_BINARY CLUSTER_DIR
#
# Policy: staticSeconds 4 -> preStop 6, drainSeconds 5, reserve 10, drain
# source Observed, minSamples 3, minIntervalSeconds 0; web's template says
# grace 30 (the user's, a floor): tuned to "6 30".
#   pod 1, exit 0 at 12 s after SIGTERM: a sample of 12 s, fewer than 3: no change.
#   pod 2, exit 137 at the grace: cut short after 30 - 6 = 24 s, counted at once
#     as 48 s: the grace becomes 6 + 48 + 10 = 64, `drain: 48` is recorded,
#     one Warning DrainCutShort names the pod and the container.
# A pod of a newer template with a proxy container added and the grace capped
# at 10 s (what a mesh injector and a policy engine do): PodDiffersFromTemplate
# names both, and the policy's BudgetHolds turns NotCompliant.
# Then the operator restarts with no samples: the recorded drain holds (no write).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
GK="${1:?usage: drain_test.sh GRACEKEEPER_BINARY CLUSTER_DIR}"
CLUSTER="${2:?usage: drain_test.sh GRACEKEEPER_BINARY CLUSTER_DIR}"
. "$ROOT/test/integration/operator/lib.sh"
work_dir
SUFFIX=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
NS="op-drain-$SUFFIX"
FINALIZER=gracekeeper.dev/drain-test
HASH=7d9f8b6c5

release_pods() {
  local pod
  for pod in $(k get pods -n "$NS" -o name 2>/dev/null); do
    k patch -n "$NS" "$pod" --type=json -p '[{"op":"remove","path":"/metadata/finalizers"}]' >/dev/null 2>&1
  done
}
cleanup() {
  [ -n "${OP_PID:-}" ] && { kill -KILL "$OP_PID" 2>/dev/null; wait "$OP_PID" 2>/dev/null; }
  release_pods
  k delete pods --all -n "$NS" --grace-period=0 --force --wait=false >/dev/null 2>&1
  k delete deployments,shutdownpolicies --all -n "$NS" --wait=false >/dev/null 2>&1
  k delete namespace "$NS" --wait=false >/dev/null 2>&1
}
show_logs_on_failure 30
on_exit cleanup

# pod NAME: a pod of web as its ReplicaSet would make it, bound to a node
# that does not exist, kept by the test's finalizer.
pod() {
  k create -f - >/dev/null <<JSON
{"apiVersion":"v1","kind":"Pod",
 "metadata":{"name":"$1","namespace":"$NS","labels":{"app":"web","served":"yes","pod-template-hash":"$HASH"},
   "finalizers":["$FINALIZER"]},
 "spec":{"nodeName":"gk-drain-test-absent-node","terminationGracePeriodSeconds":30,"automountServiceAccountToken":false,
   "containers":[{"name":"app","image":"app:1","ports":[{"containerPort":8080}],
     "lifecycle":{"preStop":{"sleep":{"seconds":6}}}}]}}
JSON
}
# terminated NAME EXIT-CODE SECONDS: the kubelet's last status, the app
# container exited SECONDS after the deletion request.
terminated() {
  local deadline grace finished
  deadline=$(jp pod "$NS" "$1" '{.metadata.deletionTimestamp}')
  grace=$(jp pod "$NS" "$1" '{.metadata.deletionGracePeriodSeconds}')
  finished=$(date -u -d "@$(($(date -d "$deadline" +%s) - grace + $3))" +%Y-%m-%dT%H:%M:%SZ)
  k patch pod "$1" -n "$NS" --subresource=status --type=merge -p "$(jq -cn --arg at "$finished" --argjson code "$2" \
    '{status: {phase: "Running", containerStatuses: [{name: "app", image: "app:1", imageID: "", ready: false,
      restartCount: 0, state: {terminated: {exitCode: $code, reason: "Error", finishedAt: $at, startedAt: $at}}}]}}')" >/dev/null
}
status() { jp sdp "$NS" default "$1"; }
cut_short_events() {
  k get events.events.k8s.io -n "$NS" -o json |
    jq '[.items[] | select(.reason == "DrainCutShort" and .regarding.kind == "Deployment" and .regarding.name == "web")] | length'
}
cut_short_events_are() { [ "$(cut_short_events)" = "$1" ]; }
metric() { curl -sf "http://127.0.0.1:$OP_PORT/metrics" | grep -F "$1" | awk '{print $NF}' | head -1; }
drained_is() { [ "$(status '{.status.terminations.drained}')" = "$1" ]; }
applied_drain() { jp deployment "$NS" web '{.metadata.annotations.gracekeeper\.dev/applied}' | jq -r '.drain // "none"'; }

k apply --server-side -f "$ROOT/crds/shutdownpolicies.gracekeeper.dev.yaml" >/dev/null
k wait --for condition=established crd/shutdownpolicies.gracekeeper.dev >/dev/null
k create namespace "$NS" >/dev/null && serve "$NS"
# No controller manager here: the namespace's default ServiceAccount, which
# the API server's admission looks up for every pod, is the test's to make.
k create serviceaccount default -n "$NS" >/dev/null
k apply -f - >/dev/null <<YAML
apiVersion: gracekeeper.dev/v1alpha1
kind: ShutdownPolicy
metadata: {name: default, namespace: $NS}
spec:
  changes: {minIntervalSeconds: 0}
  propagation: {source: Static, staticSeconds: 4}
  drainSeconds: 5
  drain: {source: Observed, minSamples: 3}
YAML
deployment "$NS" web "$OPTED"
start_operator op || { not_ok "the operator did not become ready"; finish; }
eventually 20 settings_are "$NS" web "6 30 0 1" \
  && ok "web tuned with the declared drain 5 s: $(settings "$NS" web) (the user's grace 30 kept)" \
  || not_ok "web tuned: $(settings "$NS" web)"

# ------------------------------------------------------------- a drain that ends in time
P1=web-$HASH-x2x4z
P2=web-$HASH-bcdfg
pod "$P1" && pod "$P2" && pod other-$HASH-v5v6w
k delete pod "$P1" other-$HASH-v5v6w -n "$NS" --grace-period=30 --wait=false >/dev/null
[ -n "$(jp pod "$NS" "$P1" '{.metadata.deletionTimestamp}')" ] && ok "pod $P1 deleted with a grace of $(jp pod "$NS" "$P1" '{.metadata.deletionGracePeriodSeconds}') s, kept by the finalizer" \
  || not_ok "pod $P1 is not terminating"
terminated "$P1" 0 18  # SIGTERM at 6 s, exit at 18 s: drained 12 s
terminated other-$HASH-v5v6w 137 31
eventually 10 drained_is 1 && ok "one drain measured: status.terminations $(status '{.status.terminations}')" \
  || not_ok "drained: $(status '{.status.terminations}')"
grep -F '"measured a pod'"'"'s drain"' "$OP_LOG" | grep -F "$P1" | grep -qF '"drain":"12.00s"' \
  && ok "... 12 s from SIGTERM (after the 6 s preStop) to exit" || not_ok "the drain of $P1: $(grep -F "$P1" "$OP_LOG" | tail -2)"
expect "... no DrainCutShort" "$(cut_short_events)" 0
expect "... a pod of a Deployment that is not governed: not measured" "$(grep -cF other-$HASH "$OP_LOG")" 0
expect "... one sample is fewer than minSamples 3: web unchanged" "$(settings "$NS" web)" "6 30 0 1"

# ------------------------------------------------------------- a drain cut short
k delete pod "$P2" -n "$NS" --grace-period=30 --wait=false >/dev/null
terminated "$P2" 137 31
eventually 10 cut_short_events_are 1 && ok "killed at the grace: one Warning DrainCutShort on web" \
  || not_ok "DrainCutShort events: $(cut_short_events)"
note="$(k get events.events.k8s.io -n "$NS" -o json | jq -r '.items[] | select(.reason == "DrainCutShort") | .note')"
note <<<"$note"
grep -qF "pod $P2: container app was killed at the grace (exit code 137) after draining 24s" <<<"$note" \
  && grep -qF "drain.source Observed raises the grace" <<<"$note" && ok "... it names the pod, the container and the 24 s it had" \
  || not_ok "the note"
eventually 10 settings_are "$NS" web "6 64 0 1" \
  && ok "the grace covers the cut-short drain at once (24 s counted as 48): $(settings "$NS" web)" \
  || not_ok "web after the kill: $(settings "$NS" web)"
expect "... recorded in gracekeeper.dev/applied" "$(applied_drain)" 48
eventually 10 drained_is 2 && ok "status.terminations: $(status '{.status.terminations}')" \
  || not_ok "terminations: $(status '{.status.terminations}')"
expect "... cutShort" "$(status '{.status.terminations.cutShort}')" 1
[ -n "$(status '{.status.terminations.lastCutShortAt}')" ] && ok "... lastCutShortAt $(status '{.status.terminations.lastCutShortAt}')" \
  || not_ok "lastCutShortAt missing"
expect "status.drain" "$(status '{.status.drain.source} {.status.drain.seconds} {.status.drain.workload}')" "Observed 48 web"
out=$(k get sdp -n "$NS" -o wide 2>&1)
drain_column=$(table_column DRAIN <<<"$out")
expect "kubectl get sdp -o wide: DRAIN" "$drain_column" 48
expect "gracekeeper_drain_cut_short_total" "$(metric 'gracekeeper_drain_cut_short_total{namespace="'"$NS"'",policy="default"}')" 1
expect "gracekeeper_drain_seconds_count" "$(metric 'gracekeeper_drain_seconds_count{namespace="'"$NS"'",policy="default"}')" 2

# ------------------------------------------------------------- a pod that differs from its template
# A pod of a newer template, as a mesh injector and a policy engine would
# have it: a proxy container added, the grace capped at 10 s.
P3=web-5c4b8d9f7-zzzzz
k create -f - >/dev/null <<JSON
{"apiVersion":"v1","kind":"Pod",
 "metadata":{"name":"$P3","namespace":"$NS","labels":{"app":"web","served":"yes","pod-template-hash":"5c4b8d9f7"}},
 "spec":{"nodeName":"gk-drain-test-absent-node","terminationGracePeriodSeconds":10,"automountServiceAccountToken":false,
   "containers":[{"name":"app","image":"app:1","ports":[{"containerPort":8080}],
     "lifecycle":{"preStop":{"sleep":{"seconds":6}}}},
    {"name":"istio-proxy","image":"proxy:1","ports":[{"containerPort":15090}],
     "env":[{"name":"PROXY_CONFIG","value":"{\\"terminationDrainDuration\\":\\"30s\\"}"}]}]}}
JSON
# gracekeeper hands the added proxy its budget on the template (a new
# generation). A pod is judged only against a generation its controller
# has observed: the rollout over, as the Deployment controller (absent
# here) would say.
eventually 15 has_mesh_config "$NS" web && ok "the injected proxy's budget on web's template: $(mesh_config "$NS" web)" \
  || not_ok "no proxy.istio.io/config on web's template"
rollout_over "$NS" web
differs_note() {
  k get events.events.k8s.io -n "$NS" -o json |
    jq -r --arg pod "$P3" '.items[] | select(.reason == "PodDiffersFromTemplate" and (.note | contains($pod))) | .note'
}
has_differs() { [ -n "$(differs_note)" ]; }
eventually 15 has_differs && ok "a Warning PodDiffersFromTemplate for $P3" || not_ok "PodDiffersFromTemplate for $P3"
note <<<"$(differs_note)"
grep -qF "container istio-proxy: added to the pod" <<<"$(differs_note)" &&
  grep -qF "terminationGracePeriodSeconds: 64 in the template, 10 on the pod" <<<"$(differs_note)" &&
  grep -qF "on the pod the budget does not hold: BudgetExceeded" <<<"$(differs_note)" &&
  grep -qF "ProxyExitsEarly (container istio-proxy): Istio's proxy serves for terminationDrainDuration 30s (istio-proxy's env PROXY_CONFIG) once the pod is deleted, but the app waits 6s and drains 48s" <<<"$(differs_note)" &&
  grep -qF "BudgetExceeded: preStop 6s + drain 48s + sidecars 0s + reserve 10s = 64s > terminationGracePeriodSeconds 10s" <<<"$(differs_note)" \
  && ok "... it names the added proxy, the capped grace and what breaks the budget on the pod" || not_ok "the note"
holds_reason() { jp sdp "$NS" default '{.status.conditions[?(@.type=="BudgetHolds")].reason}'; }
holds_is() { [ "$(holds_reason)" = "$1" ]; }
eventually 10 holds_is NotCompliant && ok "BudgetHolds NotCompliant: $(jp sdp "$NS" default '{.status.conditions[?(@.type=="BudgetHolds")].message}')" \
  || not_ok "BudgetHolds: $(holds_reason)"
expect "... violations" "$(status '{.status.deployments.violations}')" 1
# The injected proxy leaves after 30 s, before the app's 6 s wait and 48 s
# drain are over: its budget goes onto web's template, through Istio's own
# annotation (docs/api.md, "Mesh proxies"), recorded as gracekeeper's.
expect "its budget: the drain covers wait + drain, exit on zero, the wait as its minimum" \
  "$(mesh_config "$NS" web | jq -c '[.terminationDrainDuration, .proxyMetadata.EXIT_ON_ZERO_ACTIVE_CONNECTIONS, .proxyMetadata.MINIMUM_DRAIN_DURATION]')" '["54s","true","6s"]'
expect "... recorded as gracekeeper's" \
  "$(k get deploy web -n "$NS" -o jsonpath='{.metadata.annotations.gracekeeper\.dev/applied}' | jq -r '.mesh["proxy.istio.io/config"] | fromjson | .terminationDrainDuration')" 54s
expect "... owned by gracekeeper's field manager" \
  "$(k get deploy web -n "$NS" --show-managed-fields -o json | jq -r '[.metadata.managedFields[] | select(.manager == "gracekeeper") | .fieldsV1["f:spec"]["f:template"]["f:metadata"]["f:annotations"] // empty | keys[]] | join(" ")')" "f:proxy.istio.io/config"

# ------------------------------------------------------------- a restart forgets the samples, not the drain
# Gone before the restart, as the kubelet removes a pod once its containers
# have exited (its delete with grace 0, played here): a pod still there
# then would be measured, and counted, once more (docs/api.md, "The measured
# drain").
release_pods
k delete pod "$P1" "$P2" -n "$NS" --grace-period=0 --force >/dev/null 2>&1
k wait --for=delete pod/"$P1" pod/"$P2" -n "$NS" --timeout=20s >/dev/null 2>&1
stop_operator
since=$(now_rfc3339)
start_operator op2 || { not_ok "the operator did not restart"; finish; }
sleep 3
expect "after a restart without samples: web keeps the measured drain" "$(settings "$NS" web)" "6 64 0 1"
expect "... and is not written" "$(gk_writes_since "$since" | grep -c ' deployments/ web ' || true)" 0
expect "... the counts go on from the status" "$(status '{.status.terminations.drained} {.status.terminations.cutShort}')" "2 1"
eventually 10 holds_is NotCompliant && ok "... the pod is read again: BudgetHolds $(holds_reason)" || not_ok "after the restart: BudgetHolds $(holds_reason)"
stop_operator
finish
