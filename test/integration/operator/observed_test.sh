#!/usr/bin/env bash
# `gracekeeper run` with a `source: Observed` ShutdownPolicy against the real
# API server: the test plays the EndpointSlice controller. It writes an
# EndpointSlice (kubectl, a managed-by label of its own, no Service, so the
# real controller leaves it alone) whose endpoints are pods of the governed
# Deployment `web`, and turns them terminating with a
# endpoints.kubernetes.io/last-change-trigger-time it chooses, so each
# sample's size is known: lag = when gracekeeper sees the update - trigger.
#
# usage: test/integration/operator/observed_test.sh GRACEKEEPER_BINARY CLUSTER_DIR
#
# Budget (factor 1.5, min 5): staticSeconds 4 -> preStop 6 until minSamples
# (3) samples are in; lags 1, 7 and 9 s (plus the ~0.1 s kubectl and the
# watch take) then give p99 = 7.1: 3 samples are fewer than 1 / (1 - 0.99),
# so the quantile is the second largest, not the 9 s alone; + consumerSyncSeconds
# 1 = 8.1 (preStop ceil(12.15) = 13). The audit compares each termination
# with the wait its rollout's pods had when they were first seen (6):
#   lag 1 s: 6 - (1 + 1) = 4   covered
#   lag 7 s: 6 - (7 + 1) = -2  late -> Warning PropagationOutlastedPreStop
#   lag 9 s: 6 - (9 + 1) = -4  late (the same rollout: no second Warning)
# A lag of 400 s is above maxSeconds 60 / safetyFactor 1.5 = 40 s: dropped
# from the figure and counted as implausible. Then staticSeconds goes up to
# 30 (after a consumer traefik declared at 9 s made the figure 7.1 + 9 and
# was removed again) and the operator restarts with no samples: the figure stays the one the
# status holds (the last good value), and web is not tuned again. Last, in a
# namespace of its own, a policy declaring traefik at 8 s with staticSeconds
# 5 and too few samples falls back to 8 s, not 5 (issue 45, item 3), and a
# termination 0.5 s after its trigger is covered, not late.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
GK="${1:?usage: observed_test.sh GRACEKEEPER_BINARY CLUSTER_DIR}"
CLUSTER="${2:?usage: observed_test.sh GRACEKEEPER_BINARY CLUSTER_DIR}"
. "$ROOT/test/integration/operator/lib.sh"
work_dir
SUFFIX=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
NS="op-obs-$SUFFIX"

cleanup() {
  [ -n "${OP_PID:-}" ] && { kill -KILL "$OP_PID" 2>/dev/null; wait "$OP_PID" 2>/dev/null; }
  local ns
  for ns in "$NS" ${NS_MAIN:+"$NS_MAIN"}; do
    k delete deployments,shutdownpolicies,endpointslices --all -n "$ns" --wait=false >/dev/null 2>&1
    k delete namespace "$ns" --wait=false >/dev/null 2>&1
  done
}
show_logs_on_failure 30
on_exit cleanup

policy() {  # policy CONSUMER-SYNC-SECONDS [STATIC-SECONDS [CONSUMER]]
  k apply -f - >/dev/null <<YAML
apiVersion: gracekeeper.dev/v1alpha1
kind: ShutdownPolicy
metadata: {name: default, namespace: $NS}
spec:
  changes: {minIntervalSeconds: 0}
  propagation:
    source: Observed
    staticSeconds: ${2:-4}
    observed: {minSamples: 3, windowSeconds: 600, consumerSyncSeconds: $1${3:+, consumers: [$3]}}
YAML
}

# The pods of `web` as the ReplicaSet controller names them (hash and suffix
# from its alphabet); no pod object is needed, the audit reads the names.
HASH=7d9f8b6c5
PODS=(web-$HASH-x2x4z web-$HASH-bcdfg web-$HASH-v5v6w web-$HASH-q7r8s)
# slice TRIGGER STATE...: the EndpointSlice with one endpoint per pod, STATE
# r (ready) or t (terminating); TRIGGER "" for no annotation.
slice() {
  local trigger=$1 i=0 eps="" state
  shift
  for state in "$@"; do
    local ready=true terminating=false
    [ "$state" = t ] && ready=false terminating=true
    eps+="${eps:+,}{\"addresses\":[\"198.18.0.$((i + 10))\"],\"conditions\":{\"ready\":$ready,\"serving\":$ready,\"terminating\":$terminating},\"targetRef\":{\"kind\":\"Pod\",\"namespace\":\"$NS\",\"name\":\"${PODS[$i]}\"}}"
    i=$((i + 1))
  done
  local annotations='{}'
  [ -n "$trigger" ] && annotations="{\"endpoints.kubernetes.io/last-change-trigger-time\":\"$trigger\"}"
  k apply --server-side --force-conflicts --field-manager gk-test -f - >/dev/null <<JSON
{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
 "metadata":{"name":"web-test","namespace":"$NS","annotations":$annotations,
   "labels":{"kubernetes.io/service-name":"web","endpointslice.kubernetes.io/managed-by":"gracekeeper-test"}},
 "addressType":"IPv4","ports":[{"name":"http","port":8080,"protocol":"TCP"}],
 "endpoints":[$eps]}
JSON
}
ago() { date -u -d "@$(awk -v s="$1" -v now="$(date +%s.%N)" 'BEGIN { printf "%.3f", now - s }')" +%Y-%m-%dT%H:%M:%S.%3NZ; }
metric() { curl -sf "http://127.0.0.1:$OP_PORT/metrics" | grep -F "$1" | awk '{print $NF}' | head -1; }
metric_is() { [ "$(metric "$1")" = "$2" ]; }
status() { jp sdp "$NS" default "$1"; }
condition() { jp sdp "$NS" default "{.status.conditions[?(@.type==\"$1\")].$2}"; }
near() { awk -v a="$1" -v b="$2" -v t="${3:-0.5}" 'BEGIN { exit !(a != "" && a - b <= t && b - a <= t) }'; }
prop_near() { near "$(status '{.status.propagation.seconds}')" "$1" "${2:-0.5}"; }
observed_is() { [ "$(status '{.status.terminations.observed}')" = "$1" ]; }
late_events() {
  k get events.events.k8s.io -n "$NS" -o json |
    jq '[.items[] | select(.reason == "PropagationOutlastedPreStop" and .regarding.name == "web")] | length'
}
late_events_are() { [ "$(late_events)" = "$1" ]; }
log_has() { grep -qF "$1" "$OP_LOG"; }

k apply --server-side -f "$ROOT/crds/shutdownpolicies.gracekeeper.dev.yaml" >/dev/null
k wait --for condition=established crd/shutdownpolicies.gracekeeper.dev >/dev/null
k create namespace "$NS" >/dev/null && serve "$NS"
policy 1
deployment "$NS" web "$OPTED"
start_operator op --propagation-refresh 1 || { not_ok "the operator did not become ready"; finish; }

eventually 20 settings_are "$NS" web "6 46 0 1" \
  && ok "web tuned with the fallback staticSeconds 4: $(settings "$NS" web)" \
  || not_ok "web tuned with the fallback: $(settings "$NS" web)"
reason_is() { [ "$(condition MetricsAvailable reason)" = "$1" ]; }
eventually 10 reason_is TooFewSamples \
  && ok "too few samples: MetricsAvailable=$(condition MetricsAvailable status), $(condition MetricsAvailable message)" \
  || not_ok "too few samples: MetricsAvailable $(condition MetricsAvailable status) $(condition MetricsAvailable reason)"
expect "... source Static while falling back" "$(status '{.status.propagation.source}')" Static

# ------------------------------------------------------------- samples and audit
slice "" r r r r
sleep 1  # cached before the first change
slice "$(ago 1)" t r r r
eventually 10 observed_is 1 && ok "a terminating endpoint, 1 s after its trigger time: audited" \
  || not_ok "first termination audited: terminations $(status '{.status.terminations}')"
slice "$(ago 7)" t t r r
slice "$(ago 9)" t t t r
eventually 10 observed_is 3 && ok "three terminations audited: $(status '{.status.terminations}')" \
  || not_ok "three terminations: $(status '{.status.terminations}')"
expect "... two late (lags 7 and 9 s + 1 s > preStop 6 s)" "$(status '{.status.terminations.late}')" 2
[ -n "$(status '{.status.terminations.lastLateAt}')" ] && ok "... lastLateAt $(status '{.status.terminations.lastLateAt}')" \
  || not_ok "lastLateAt missing"
eventually 10 prop_near 8 \
  && ok "the Observed figure: p99 of 1, 7, 9 s is the second largest (3 samples < 100), + consumerSyncSeconds 1 = $(status '{.status.propagation.seconds}')" \
  || not_ok "the Observed figure: $(status '{.status.propagation}')"
status '{.status.propagation.message}' | grep -qF "the second largest" \
  && ok "... the message says so: $(status '{.status.propagation.message}')" \
  || not_ok "message: $(status '{.status.propagation.message}')"
expect "... source Observed" "$(status '{.status.propagation.source}')" Observed
expect "... MetricsAvailable True, reason" "$(condition MetricsAvailable reason)" SamplesSufficient
# column NAME: the first row's cell under the header NAME (by its position:
# an empty cell, STATEFULSETS here, is blank).
column() { awk -v name="$1" 'NR == 1 { c = index($0, name) } NR == 2 && c { split(substr($0, c), a, " "); print a[1] }' <<<"$out"; }
out=$(k get sdp -n "$NS" -o wide 2>&1)
if [ "$(column SOURCE)" = Observed ] && near "$(column PROPAGATION)" 8 && [ "$(column CONSUMER)" = kube-proxy ] &&
   [ "$(column LATE)" = 2 ]; then
  ok "kubectl get sdp -o wide: SOURCE Observed, PROPAGATION $(column PROPAGATION), CONSUMER kube-proxy, LATE 2"
else not_ok "kubectl get sdp -o wide"; note <<<"$out"; fi
eventually 20 settings_are "$NS" web "13 53 0 1" && ok "web follows the Observed figure: $(settings "$NS" web)" \
  || not_ok "web follows the figure: $(settings "$NS" web)"
eventually 70 late_events_are 1 && ok "one Warning PropagationOutlastedPreStop on web" \
  || not_ok "PropagationOutlastedPreStop events: $(late_events)"
note <<<"$(k get events.events.k8s.io -n "$NS" -o json | jq -r '.items[] | select(.reason == "PropagationOutlastedPreStop") | .note')"
eventually 5 metric_is 'gracekeeper_terminations_total{namespace="'"$NS"'",outcome="late",policy="default"}' 2 \
  && ok "gracekeeper_terminations_total late 2" || not_ok "terminations_total late: $(metric 'outcome="late"')"
expect "gracekeeper_terminations_total covered" "$(metric 'gracekeeper_terminations_total{namespace="'"$NS"'",outcome="covered"')" 1
expect "gracekeeper_endpoint_propagation_seconds_count" "$(metric 'gracekeeper_endpoint_propagation_seconds_count{namespace="'"$NS"'"}')" 3

# ------------------------------------------------------------- bad input
slice "" t t t t
eventually 5 log_has "without a trigger time" && ok "no trigger time: a log line" || not_ok "no log line for a missing trigger time"
eventually 5 metric_is 'gracekeeper_endpoint_propagation_anomalies_total{reason="missing"}' 1 \
  && ok "... counted as a missing drop" || not_ok "missing drop: $(metric 'reason="missing"')"
slice "" r r r r
sleep 0.5
slice "last tuesday" t r r r
eventually 5 metric_is 'gracekeeper_endpoint_propagation_anomalies_total{reason="garbage"}' 1 \
  && ok "a garbage trigger time: counted as a garbage drop" || not_ok "garbage drop: $(metric 'reason="garbage"')"
grep -F "last tuesday" "$OP_LOG" | grep -qF "RFC 3339" && ok "... the log line names the value" || not_ok "log line for garbage"
slice "$(ago -5)" t t r r  # the controller manager's clock 5 s ahead
eventually 5 metric_is 'gracekeeper_endpoint_propagation_anomalies_total{reason="clamped"}' 1 \
  && ok "a trigger time in the future (skew): clamped to 0 and counted" || not_ok "clamped: $(metric 'reason="clamped"')"
slice "" r r r r
sleep 0.5
slice "$(ago 400)" t r r r  # a stuck controller, or a clock 400 s ahead
eventually 5 metric_is 'gracekeeper_endpoint_propagation_anomalies_total{reason="implausible"}' 1 \
  && ok "a lag of 400 s (above maxSeconds / safetyFactor = 40 s): counted as implausible" \
  || not_ok "implausible: $(metric 'reason="implausible"')"
sleep 2  # measured again (--propagation-refresh 1)
# Without the bound, 400 s would be the largest of 5 samples (1, 7, 9, 0, 400)
# and the second largest would be 9.1.
prop_near 8 && ok "... not in the figure: $(status '{.status.propagation.seconds}'), $(status '{.status.propagation.message}')" \
  || not_ok "the figure after an implausible sample: $(status '{.status.propagation}')"
kill -0 "$OP_PID" 2>/dev/null && ok "the operator is still running" || not_ok "the operator died"

# ------------------------------------------------------------- consumerSyncSeconds
policy 5
eventually 10 prop_near 12 \
  && ok "consumerSyncSeconds 5: figure $(status '{.status.propagation.seconds}') (p99 7 + 5)" \
  || not_ok "consumerSyncSeconds 5: $(status '{.status.propagation}')"
eventually 20 settings_are "$NS" web "19 59 0 1" && ok "web follows: $(settings "$NS" web)" \
  || not_ok "web follows consumerSyncSeconds 5: $(settings "$NS" web)"

# ------------------------------------------------------------- a declared consumer
# An ingress controller that reads the slices itself, declared at 9 s: the
# slowest consumer, so the figure is p99 7 + 9 and CONSUMER says traefik.
policy 5 4 '{name: traefik, syncSeconds: 9}'
eventually 10 prop_near 16 \
  && ok "a consumer traefik at 9 s: figure $(status '{.status.propagation.seconds}') (p99 7 + 9)" \
  || not_ok "a consumer traefik at 9 s: $(status '{.status.propagation}')"
expect "... status.propagation.consumer" "$(status '{.status.propagation.consumer}')" traefik
status '{.status.propagation.message}' | grep -qF "traefik 9s, the slowest consumer (kube-proxy 5s, traefik 9s)" \
  && ok "... the message names every consumer: $(status '{.status.propagation.message}')" \
  || not_ok "... message: $(status '{.status.propagation.message}')"
out=$(k get sdp -n "$NS" 2>&1)
expect "... kubectl get sdp: CONSUMER" "$(column CONSUMER)" traefik
eventually 20 settings_are "$NS" web "25 65 0 1" && ok "web follows: $(settings "$NS" web)" \
  || not_ok "web follows the consumer: $(settings "$NS" web)"
policy 5
eventually 20 settings_are "$NS" web "19 59 0 1" && ok "the consumer removed: web back to $(settings "$NS" web)" \
  || not_ok "the consumer removed: $(settings "$NS" web)"

# ------------------------------------------------------------- a restart keeps the figure
# staticSeconds 30: what a restart without samples would fall back to (preStop 45).
policy 5 30
sleep 2
figure=$(status '{.status.propagation.seconds}')
sampled_at=$(status '{.status.propagation.sampledAt}')
generation=$(jp deployment "$NS" web '{.metadata.generation}')
near "$figure" 12 && ok "staticSeconds 30 changes nothing while samples hold: $figure, generation $generation" \
  || not_ok "before the restart: $(status '{.status.propagation}')"
stop_operator
expect "SIGTERM: exit status" "$OP_EXIT" 0
start_operator op2 --propagation-refresh 1 || { not_ok "the operator did not restart"; finish; }
restarted() { log_has "last good value from the status" && status '{.status.propagation.message}' | grep -qF "last good value"; }
eventually 10 restarted && ok "restarted with no samples: $(status '{.status.propagation.message}')" \
  || not_ok "after the restart: $(status '{.status.propagation}')"
sleep 3  # time for a re-tune, were there one
expect "... the figure is the one the status held" "$(status '{.status.propagation.seconds}')" "$figure"
expect "... source" "$(status '{.status.propagation.source}')" Observed
expect "... sampledAt" "$(status '{.status.propagation.sampledAt}')" "$sampled_at"
row=$(k get sdp -n "$NS" 2>&1 | awk 'NR == 2' | tr -s ' ')
near "$(cut -d' ' -f4 <<<"$row")" "$figure" 0.01 && ok "kubectl get sdp: $row" || not_ok "kubectl get sdp: $row"
expect "... web not tuned again: generation" "$(jp deployment "$NS" web '{.metadata.generation}')" "$generation"
expect "... settings" "$(settings "$NS" web)" "19 59 0 1"

# ------------------------------ too few samples: the fallback keeps the consumers
# (issue 45, item 3) In a namespace of its own: staticSeconds 5 and traefik
# declared at 8 s, no sample yet. The fallback was staticSeconds alone (5 s,
# preStop 8): a termination 0.5 s after its trigger was late (8 - (0.5 + 8)).
# Now it is max(staticSeconds, the slowest allowance) = 8 s, named: preStop 12.
NS_MAIN=$NS
NS="$NS_MAIN-fb"
k create namespace "$NS" >/dev/null && serve "$NS"
policy 1 5 '{name: traefik, syncSeconds: 8}'
deployment "$NS" web "$OPTED"
eventually 20 prop_near 8 0.001 \
  && ok "too few samples, traefik declared at 8 s, staticSeconds 5: figure $(status '{.status.propagation.seconds}')" \
  || not_ok "the fallback with a consumer at 8 s: $(status '{.status.propagation}')"
expect "... status.propagation.consumer" "$(status '{.status.propagation.consumer}')" traefik
expect "... source Static (the fallback), MetricsAvailable" \
  "$(status '{.status.propagation.source}') $(condition MetricsAvailable status) $(condition MetricsAvailable reason)" \
  "Static False TooFewSamples"
status '{.status.propagation.message}' | grep -qF "using staticSeconds 5s (no good value in the last hour), raised to 8s to cover the slowest declared consumer, traefik 8s (kube-proxy 1s, traefik 8s)" \
  && ok "... the message says so: $(status '{.status.propagation.message}')" \
  || not_ok "... message: $(status '{.status.propagation.message}')"
out=$(k get sdp -n "$NS" 2>&1)
expect "... kubectl get sdp: CONSUMER" "$(column CONSUMER)" traefik
eventually 20 settings_are "$NS" web "12 52 0 1" && ok "web waits 12 s (ceil(1.5 x 8) >= 8): $(settings "$NS" web)" \
  || not_ok "web with the fallback of a consumer at 8 s: $(settings "$NS" web)"
holds() { [ "$(condition BudgetHolds status)" = True ]; }
eventually 10 holds && ok "... BudgetHolds True" || not_ok "BudgetHolds: $(condition BudgetHolds status) $(condition BudgetHolds message)"
slice "" r r r r
sleep 1  # cached, and web's rollout seen with its wait, before the change
slice "$(ago 0.5)" t r r r
eventually 10 observed_is 1 && ok "a termination 0.5 s after its trigger: audited" \
  || not_ok "the termination in $NS: $(status '{.status.terminations}')"
expect "... covered: 12 - (0.5 + traefik 8) > 0, not late" "$(status '{.status.terminations.late}')" 0
k delete deployments,shutdownpolicies,endpointslices --all -n "$NS" --wait=false >/dev/null 2>&1
k delete namespace "$NS" --wait=false >/dev/null 2>&1
NS=$NS_MAIN

stop_operator
expect "SIGTERM: exit status" "$OP_EXIT" 0
finish
