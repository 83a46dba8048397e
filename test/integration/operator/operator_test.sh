#!/usr/bin/env bash
# `gracekeeper run` end to end against the real control plane, seen through
# kubectl and the API server's audit log (issue: the operator).
#
# usage: test/integration/operator/operator_test.sh GRACEKEEPER_BINARY CLUSTER_DIR
#
# Uses namespaces op-*; installs the CRD. Restarts the cluster's API server
# once. Output: `ok - ...` / `not ok - ...`, then `N passed, M failed`.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
GK="${1:?usage: operator_test.sh GRACEKEEPER_BINARY CLUSTER_DIR}"
CLUSTER="${2:?usage: operator_test.sh GRACEKEEPER_BINARY CLUSTER_DIR}"
. "$ROOT/test/integration/operator/lib.sh"
work_dir

cleanup() {
  for pid in ${OP_PID:-} ${RACER_PID:-}; do kill -KILL "$pid" 2>/dev/null; done
  k delete namespace op-basic op-dry op-amb op-conflict op-replace op-defer op-steady op-restart op-cold op-svc op-roll op-release op-events op-exec op-fight op-fightend op-paused op-manage op-raise op-stall op-steal --wait=false >/dev/null 2>&1
  k delete clusterrolebinding gk-test-no-events gk-test-events-writer --ignore-not-found >/dev/null 2>&1
  k delete clusterrole gk-test-no-events gk-test-events-writer --ignore-not-found >/dev/null 2>&1
}
show_logs_on_failure 20
on_exit cleanup

# policy NS NAME [SPEC-YAML-LINES]: a Static policy (4 s) unless the lines say otherwise.
policy() {
  local ns=$1 name=$2 extra=${3:-}
  k apply -f - >/dev/null <<YAML
apiVersion: gracekeeper.dev/v1alpha1
kind: ShutdownPolicy
metadata: {name: $name, namespace: $ns}
spec:
  propagation: {source: Static, staticSeconds: 4}
$extra
YAML
}

managed_by_gk() { k get deployment -n "$1" "$2" -o json --show-managed-fields | jq -e '[.metadata.managedFields[].manager] | index("gracekeeper")' >/dev/null; }
# event_reasons NS NAME: the reasons of the events about a Deployment, sorted, comma-separated.
event_reasons() {
  k get events.events.k8s.io -n "$1" -o json |
    jq -r --arg n "$2" '[.items[] | select(.regarding.name == $n) | .reason] | unique | join(",")'
}
has_event() { event_reasons "$1" "$2" | tr ',' '\n' | grep -qx "$3"; }
event_note() {
  k get events.events.k8s.io -n "$1" -o json |
    jq -r --arg n "$2" --arg r "$3" '[.items[] | select(.regarding.name == $n and .reason == $r) | .note][0] // ""'
}

k apply --server-side -f "$ROOT/crds/shutdownpolicies.gracekeeper.dev.yaml" >/dev/null
k wait --for condition=established crd/shutdownpolicies.gracekeeper.dev >/dev/null
for ns in op-basic op-dry op-amb op-conflict op-replace op-defer op-steady op-restart op-cold op-svc op-roll op-release op-events op-exec op-fight op-fightend op-paused op-manage op-raise op-stall; do k create namespace "$ns" >/dev/null && serve "$ns"; done

# ------------------------------------------------------------- the basics
# Without a node no rollout ever completes, so re-tunes are not spread here
# (see "re-tunes are spread" below).
policy op-basic default '  changes: {maxConcurrentRollouts: "100%"}'
start_operator op1 || not_ok "operator became ready"

start=$(date +%s%N)
since_web=$(now_rfc3339)
deployment op-basic web "$OPTED"
if eventually 10 settings_are op-basic web "6 46 0 1"; then
  ms=$((($(date +%s%N) - start) / 1000000))
  if [ "$ms" -le 2000 ]; then ok "opted-in Deployment tuned within 2 s of creation (${ms} ms)"
  else not_ok "opted-in Deployment tuned in ${ms} ms, more than 2 s"; fi
else
  not_ok "opted-in Deployment tuned: settings are '$(settings op-basic web)', want '6 46 0 1'"
fi
expect "preStop is the native sleep action" \
  "$(jp deployment op-basic web '{.spec.template.spec.containers[0].lifecycle.preStop}')" '{"sleep":{"seconds":6}}'
expect "applied annotation records the policy" \
  "$(jp deployment op-basic web '{.metadata.annotations.gracekeeper\.dev/applied}' | jq -r '.policy + " " + (.preStop|tostring) + " " + (.grace|tostring)')" "default 6 46"
managed_by_gk op-basic web && ok "gracekeeper owns fields of the tuned Deployment (managedFields)" || not_ok "no gracekeeper managedFields entry on web"
# kubectl create owns grace and strategy (an Update manager) and no other
# applier writes web: one forced apply takes them, no 409 and no GET first.
web_requests() { gk_requests_since "$since_web" | grep ' deployments/ web ' | tr '\n' ';'; }
one_apply() { [ "$(web_requests)" = "patch deployments/ web 200;" ]; }
eventually 5 one_apply && ok "the first tune is one apply request, no 409 or GET (audit log)" \
  || not_ok "gracekeeper's requests for web: $(web_requests)"
eventually 5 has_event op-basic web Tuned && ok "Tuned event on the Deployment" || not_ok "no Tuned event"
note_tuned=$(event_note op-basic web Tuned)
case "$note_tuned" in
  *"terminationGracePeriodSeconds: 30s -> 46s"*"maxUnavailable=0"*) ok "Tuned event names old -> new values";;
  *) not_ok "Tuned event note: $note_tuned";;
esac
described=$(k describe deployment -n op-basic web)
grep -q "Tuned" <<<"$described" && ok "kubectl describe shows the Tuned event" || not_ok "kubectl describe shows no Tuned event"

deployment op-basic plain '{}'
deployment op-basic batch "$OPTED" '{"type":"Recreate"}'
deployment op-basic legacy "$OPTED" "" '{"preStop":{"httpGet":{"path":"/drain","port":8080}}}'
deployment op-basic bad-drain '{"gracekeeper.dev/enabled":"true","gracekeeper.dev/drain-seconds":"abc"}'
deployment op-basic bad-containers '{"gracekeeper.dev/enabled":"true","gracekeeper.dev/containers":"nope"}'

# A first tune is one Event: the findings of the tuned Deployment are in its note.
tuned_mentions() { event_note "$1" "$2" Tuned | grep -q "$3"; }
eventually 10 tuned_mentions op-basic batch RecreateStrategy && ok "Recreate is reported in the Tuned event" || not_ok "no RecreateStrategy in the Tuned note: $(event_note op-basic batch Tuned)"
expect "the first tune of batch is one Event" "$(event_reasons op-basic batch)" "Tuned"
expect "Recreate is not converted" "$(jp deployment op-basic batch '{.spec.strategy.type}')" "Recreate"
eventually 10 tuned_mentions op-basic legacy ExistingPreStopKept && ok "user preStop kept, ExistingPreStopKept in the Tuned event" || not_ok "no ExistingPreStopKept in the Tuned note: $(event_note op-basic legacy Tuned)"
# What the Tuned Event reports, for a restarted operator: itself and each
# finding folded into its note, as hashes in an annotation (not read back
# from the note).
reports=$(k get events.events.k8s.io -n op-basic -o json | jq -r '[.items[] | select(.regarding.name == "legacy" and .reason == "Tuned") | .metadata.annotations["gracekeeper.dev/reports"]][0] // ""')
folded=$(event_note op-basic legacy Tuned | grep -oE '(Also|;) [A-Z][A-Za-z]*: ' | wc -l)
expect "the Tuned Event's gracekeeper.dev/reports lists it and its $folded folded findings" \
  "$(grep -cE '^[0-9a-f]{16}(,[0-9a-f]{16})*$' <<<"$reports") $(tr ',' '\n' <<<"$reports" | grep -c .)" "1 $((folded + 1))"
expect "user preStop hook unchanged" "$(jp deployment op-basic legacy '{.spec.template.spec.containers[0].lifecycle.preStop.httpGet.path}')" "/drain"
tuned_mentions op-basic legacy PreStopUnknownLength && ok "... and never counted as the wait: PreStopUnknownLength in the Tuned event" ||
  not_ok "no PreStopUnknownLength in the Tuned note: $(event_note op-basic legacy Tuned)"
expect "grace raised around the kept hook (counted as 6 s)" "$(jp deployment op-basic legacy '{.spec.template.spec.terminationGracePeriodSeconds}')" "46"
eventually 10 has_event op-basic bad-drain InvalidAnnotation && ok "bad drain-seconds gives an InvalidAnnotation event" || not_ok "no InvalidAnnotation event for bad-drain"
case "$(event_note op-basic bad-drain InvalidAnnotation)" in
  *drain-seconds*abc*) ok "the event names the annotation and the value";;
  *) not_ok "InvalidAnnotation note: $(event_note op-basic bad-drain InvalidAnnotation)";;
esac
expect "a Deployment with a bad annotation is left as it was" "$(settings op-basic bad-drain)" "none 30 25% 25%"
eventually 10 has_event op-basic bad-containers InvalidAnnotation && ok "unknown container in gracekeeper.dev/containers gives an event" || not_ok "no event for bad-containers"
sleep 1
if managed_by_gk op-basic plain; then not_ok "a Deployment without the annotation has a gracekeeper managedFields entry"
else ok "a Deployment without the annotation is untouched (no gracekeeper managedFields entry)"; fi
expect "no events about the Deployment without the annotation" "$(event_reasons op-basic plain)" ""
# Opting in later: the informer built only the metadata of "late" so far
# (FieldSet wanted); the watch event of the annotation brings it whole.
deployment op-basic late '{}'
sleep 1
k annotate deployment -n op-basic late gracekeeper.dev/enabled=true >/dev/null
eventually 10 settings_are op-basic late "6 46 0 1" && ok "a Deployment opted in after its creation is tuned" \
  || not_ok "late opt-in: '$(settings op-basic late)'"
k delete deployment -n op-basic late --wait >/dev/null

# An exec sleep written before the API server had the native action (by
# `gracekeeper plan --kubernetes-version 1.29`, created by kubectl): the
# operator switches it to the native sleep. Server-side apply cannot remove
# the exec handler kubectl owns, so this goes out as one JSON patch.
cat >"$WORK/old.json" <<'JSON'
{"apiVersion":"apps/v1","kind":"Deployment",
 "metadata":{"name":"old-exec","namespace":"op-basic","labels":{"app":"old-exec"},
  "annotations":{"gracekeeper.dev/enabled":"true"}},
 "spec":{"replicas":3,"selector":{"matchLabels":{"app":"old-exec"}},
  "template":{"metadata":{"labels":{"app":"old-exec"}},
   "spec":{"containers":[{"name":"app","image":"app:1","ports":[{"containerPort":8080}],
      "readinessProbe":{"httpGet":{"path":"/ready","port":8080}}}]}}}}
JSON
SOURCE_DATE_EPOCH=1790000000 "$GK" plan -f "$WORK/old.json" --kubernetes-version 1.29 \
  --propagation-seconds 4 2>/dev/null | k create -f - >/dev/null
eventually 10 bash -c "kubectl get deployment -n op-basic old-exec -o jsonpath='{.spec.template.spec.containers[0].lifecycle.preStop}' | grep -q '\"sleep\"'" \
  && ok "an exec sleep hook is switched to the native sleep action" \
  || not_ok "old-exec preStop: $(jp deployment op-basic old-exec '{.spec.template.spec.containers[0].lifecycle.preStop}')"
expect "... with the exec handler gone" "$(jp deployment op-basic old-exec '{.spec.template.spec.containers[0].lifecycle.preStop}')" '{"sleep":{"seconds":6}}'

# kubectl get shutdownpolicies: six governed, two compliant (web, old-exec);
# batch is Recreate, which drops every pod (RecreateStrategy, an error);
# legacy keeps its httpGet hook, whose length cannot be known, so its budget
# is not known to hold (PreStopUnknownLength); the bad-* ones are left
# unchanged.
columns() { k get shutdownpolicies -n op-basic default --no-headers | awk '{print $2, $3, $4, $5, $6, $7, $8, $9}'; }
eventually 10 bash -c "[ \"\$(kubectl get sdp -n op-basic default -o jsonpath='{.status.deployments.managed}')\" = 6 ]"
expect "kubectl get shutdownpolicies columns (MODE SOURCE PROPAGATION PRESTOP GRACE MANAGED COMPLIANT READY)" \
  "$(columns)" "Enforce Static 4 6 46 6 2 True"
# Captured first: with pipefail, `head` closing the pipe early fails kubectl.
header=$(k get shutdownpolicies -A 2>&1 | sed -n 1p)
grep -q "MODE *SOURCE *PROPAGATION *CONSUMER *PRESTOP *GRACE *MANAGED *COMPLIANT *READY *AGE" <<<"$header" \
  && ok "kubectl get shutdownpolicies -A header" || not_ok "header: $header"
expect "condition BudgetHolds" "$(jp sdp op-basic default '{.status.conditions[?(@.type=="BudgetHolds")].status}')" "False"
expect "condition MetricsAvailable (Static)" "$(jp sdp op-basic default '{.status.conditions[?(@.type=="MetricsAvailable")].reason}')" "StaticSource"
expect "status.observedGeneration" "$(jp sdp op-basic default '{.status.observedGeneration}')" "$(jp sdp op-basic default '{.metadata.generation}')"

# A new propagation figure re-tunes: 20 s * 1.5 = 30 s wait; the old wait is
# too short, so churn control does not hold the repair back.
k patch sdp -n op-basic default --type merge -p '{"spec":{"propagation":{"staticSeconds":20}}}' >/dev/null
eventually 10 settings_are op-basic web "30 70 0 1" && ok "a new propagation figure re-tunes the Deployment (30 s wait, grace 70)" \
  || not_ok "after staticSeconds 20: '$(settings op-basic web)'"
columns_are() { [ "$(columns)" = "$1" ]; }
eventually 10 columns_are "Enforce Static 20 30 70 6 2 True"
expect "status follows" "$(columns)" "Enforce Static 20 30 70 6 2 True"

# What the schema can catch, it refuses at the API server.
if k patch sdp -n op-basic default --type merge -p '{"spec":{"rollout":{"maxSurge":0}}}' >/dev/null 2>"$WORK/patch.err"; then
  not_ok "maxSurge 0 was accepted"
else
  grep -q maxSurge "$WORK/patch.err" && ok "maxSurge 0 is refused by the schema" || not_ok "maxSurge 0: $(cat "$WORK/patch.err")"
fi
# An invalid spec the schema cannot catch: a structural schema cannot
# constrain the keys of a map, so an empty label key in the selector reaches
# the operator, which reports Ready=False, InvalidSpec, and governs nothing.
ready_reason() { kubectl get sdp -n op-basic default -o jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'; }
k patch sdp -n op-basic default --type merge -p '{"spec":{"selector":{"matchLabels":{"":"x"}}}}' >/dev/null 2>"$WORK/patch.err"
expect "an empty label key passes the schema" "$(cat "$WORK/patch.err")" ""
eventually 10 bash -c "[ \"\$(kubectl get sdp -n op-basic default -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].reason}')\" = InvalidSpec ]" \
  && ok "invalid spec: Ready=False, InvalidSpec" || not_ok "no InvalidSpec condition: $(ready_reason)"
case "$(kubectl get sdp -n op-basic default -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}')" in
  *matchLabels*"label keys must not be empty"*) ok "the InvalidSpec message names the field";;
  *) not_ok "InvalidSpec message: $(kubectl get sdp -n op-basic default -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}')";;
esac
k patch sdp -n op-basic default --type merge -p '{"spec":{"selector":{"matchLabels":{"":null}}}}' >/dev/null
eventually 10 bash -c "[ \"\$(kubectl get sdp -n op-basic default -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}')\" = True ]" \
  && ok "fixed: Ready again" || not_ok "still not Ready: $(ready_reason)"

# ------------------------------------------------------------- DryRun and ambiguity
policy op-dry default "  mode: DryRun"
deployment op-dry web "$OPTED"
eventually 10 has_event op-dry web DryRun && ok "DryRun reports the change as an event" || not_ok "no DryRun event: $(event_reasons op-dry web)"
eventually 10 bash -c "[ \"\$(kubectl get sdp -n op-dry default -o jsonpath='{.status.deployments.pending}')\" = 1 ]" \
  && ok "DryRun writes status (1 pending)" || not_ok "DryRun status: $(jp sdp op-dry default '{.status.deployments}')"
expect "DryRun does not change the Deployment" "$(settings op-dry web)" "none 30 25% 25%"
managed_by_gk op-dry web && not_ok "DryRun wrote the Deployment (managedFields)" || ok "DryRun wrote no Deployment (no managedFields entry)"

policy op-amb one
policy op-amb two
deployment op-amb web "$OPTED"
eventually 10 has_event op-amb web AmbiguousPolicy && ok "two matching policies give an AmbiguousPolicy event" || not_ok "no AmbiguousPolicy event: $(event_reasons op-amb web)"
expect "... and no change" "$(settings op-amb web)" "none 30 25% 25%"
ready_of() { jp sdp op-amb "$1" '{.status.conditions[?(@.type=="Ready")].status}/{.status.conditions[?(@.type=="Ready")].reason}'; }
both_conflict() { [ "$(ready_of one)" = False/Conflict ] && [ "$(ready_of two)" = False/Conflict ]; }
eventually 10 both_conflict && ok "both policies show Ready=False, Conflict" \
  || not_ok "Ready of the two policies: one $(ready_of one), two $(ready_of two)"
expect "... naming the other and the Deployment" \
  "$(jp sdp op-amb one '{.status.conditions[?(@.type=="Ready")].message}' | grep -o 'ShutdownPolicy two also selects 1 Deployment (web)')" \
  "ShutdownPolicy two also selects 1 Deployment (web)"
k annotate deployment -n op-amb web gracekeeper.dev/policy=two >/dev/null
both_ready() { [ "$(ready_of one)" = True/Reconciled ] && [ "$(ready_of two)" = True/Reconciled ]; }
eventually 10 both_ready && ok "naming one clears the conflict on both" \
  || not_ok "after naming one: one $(ready_of one), two $(ready_of two)"

# ------------------------------------------------------------- Services decide whether a wait is needed
policy op-svc default
UNSERVED=1 deployment op-svc batch "$OPTED"
eventually 10 settings_are op-svc batch "none 40 0 1" \
  && ok "pods no Service selects: grace and strategy tuned, no preStop wait" \
  || not_ok "unserved Deployment: settings '$(settings op-svc batch)', want 'none 40 0 1'"
event_note op-svc batch Tuned | grep -q NotBehindService && ok "... and its Tuned event says NotBehindService" \
  || not_ok "Tuned note of batch: $(event_note op-svc batch Tuned)"
k create service clusterip batch -n op-svc --tcp=80:8080 -o json --dry-run=client |
  jq '.spec.selector = {"app": "batch"}' | k create -f - >/dev/null
eventually 10 settings_are op-svc batch "6 46 0 1" && ok "a Service that selects the pods arrives: the wait follows" \
  || not_ok "after the Service: settings '$(settings op-svc batch)', want '6 46 0 1'"

# An opted-in StatefulSet behind a Service is governed like a Deployment:
# preStop wait and grace in one write; its updateStrategy (maxUnavailable 2
# of 3, Parallel) is reported, never written.
k create service clusterip db -n op-svc --tcp=5432:5432 -o json --dry-run=client |
  jq '.spec.selector = {"app": "db"}' | k create -f - >/dev/null
STS_STRATEGY='{"type":"RollingUpdate","rollingUpdate":{"partition":0,"maxUnavailable":2}}'
k create -f - >/dev/null <<JSON
{"apiVersion":"apps/v1","kind":"StatefulSet",
 "metadata":{"name":"db","namespace":"op-svc","annotations":{"gracekeeper.dev/enabled":"true"}},
 "spec":{"serviceName":"db","replicas":3,"podManagementPolicy":"Parallel",
  "updateStrategy":$STS_STRATEGY,"selector":{"matchLabels":{"app":"db"}},
  "template":{"metadata":{"labels":{"app":"db"}},"spec":{"containers":[{"name":"db","image":"db:1",
   "ports":[{"containerPort":5432}],"readinessProbe":{"tcpSocket":{"port":5432}}}]}}}}
JSON
sts_settings() {
  k get statefulset -n op-svc db -o json |
    jq -r '[(.spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds // "none"),
            .spec.template.spec.terminationGracePeriodSeconds] | map(tostring) | join(" ")'
}
eventually 10 bash -c "$(declare -f k sts_settings); [ \"\$(sts_settings)\" = '6 46' ]" \
  && ok "an opted-in StatefulSet is tuned: preStop 6 s, grace 46 s" \
  || not_ok "StatefulSet db: settings '$(sts_settings)', want '6 46'"
sts=$(k get statefulset -n op-svc db -o json --show-managed-fields)
expect "... in one write (generation 2, one entry of manager gracekeeper)" \
  "$(jq -c '[.metadata.generation, ([.metadata.managedFields[] | select(.manager == "gracekeeper")] | length)]' <<<"$sts")" "[2,1]"
expect "... its updateStrategy left as it was" "$(jq -Sc .spec.updateStrategy <<<"$sts")" "$(jq -Sc . <<<"$STS_STRATEGY")"
expect "... its podManagementPolicy left as it was" "$(jq -r .spec.podManagementPolicy <<<"$sts")" Parallel
sts_tuned=$(k get events.events.k8s.io -n op-svc -o json |
  jq -r '[.items[] | select(.regarding.kind == "StatefulSet" and .regarding.name == "db") | .reason + ": " + .note] | join("\n")')
grep -q '^Tuned: .*CapacityDropOnRollout.*maxUnavailable 2 takes 2 of 3 pods down at once' <<<"$sts_tuned" \
  && ok "... its Tuned Event reports maxUnavailable 2 (reported, not changed)" \
  || { not_ok "StatefulSet events"; note <<<"$sts_tuned"; }
grep -q 'UnsupportedKind' <<<"$sts_tuned" && not_ok "... an UnsupportedKind Event" || ok "... and no UnsupportedKind Event"
eventually 10 bash -c "[ \"\$(kubectl get sdp -n op-svc default -o jsonpath='{.status.statefulSets.managed} {.status.deployments.managed}')\" = '1 1' ]" \
  && ok "the policy's status counts it: statefulSets.managed 1 beside deployments.managed 1" \
  || not_ok "status: $(jp sdp op-svc default '{.status.statefulSets} {.status.deployments}')"
expect "kubectl get sdp -o wide shows it in the STATEFULSETS column" \
  "$(k get sdp -n op-svc default -o wide | awk 'NR == 1 { c = index($0, "STATEFULSETS") } NR == 2 && c { split(substr($0, c), a, " "); print a[1] }')" 1
k annotate statefulset -n op-svc db gracekeeper.dev/enabled- >/dev/null
eventually 10 bash -c "[ \"\$(kubectl get sdp -n op-svc default -o jsonpath='{.status.statefulSets.managed}')\" = 0 ]" \
  && ok "opted out: no longer counted (statefulSets.managed 0)" \
  || not_ok "after opting out: $(jp sdp op-svc default '{.status.statefulSets}')"
# (With the operator's credentials: the ServiceAccount run counts every gracekeeper request as its own.)
"$GK" revert --kubeconfig "${GK_OPERATOR_KUBECONFIG:-$KUBECONFIG}" -n op-svc statefulset/db >"$WORK/sts-revert.out" 2>&1
expect "gracekeeper revert statefulset/db exits 0" "$?" 0
sts=$(k get statefulset -n op-svc db -o json --show-managed-fields)
expect "... the user's StatefulSet is back: no hook, grace 30, no applied annotation, no gracekeeper field" \
  "$(jq -c '[(.spec.template.spec.containers[0].lifecycle // "none"), .spec.template.spec.terminationGracePeriodSeconds,
      (.metadata.annotations["gracekeeper.dev/applied"] // "none"),
      ([.metadata.managedFields[] | select(.manager == "gracekeeper")] | length)]' <<<"$sts")" '["none",30,"none",0]'

# ------------------------------------------------------------- re-tunes are spread
# This control plane has no Deployment controller: the test plays it, writing
# each Deployment's status through the status subresource. Three tuned
# Deployments; the figure rises; with maxConcurrentRollouts 1 one is re-tuned
# at a time, the next once the previous rollout completed or gave up.
policy op-roll default '  changes: {maxConcurrentRollouts: 1}'
for d in r1 r2 r3; do deployment op-roll "$d" "$OPTED"; done
all_tuned() { local d; for d in r1 r2 r3; do settings_are op-roll "$d" "6 46 0 1" || return 1; done; }
eventually 10 all_tuned && ok "op-roll: three first tunes, not held back" || not_ok "op-roll first tunes: $(for d in r1 r2 r3; do settings op-roll $d; echo -n '; '; done)"
# rolled_out NAME [CONDITION-JSON]: the controller observed the generation and every replica is new and available.
rolled_out() {
  local gen conditions=${2:-[]}
  gen=$(jp deployment op-roll "$1" '{.metadata.generation}')
  k patch deployment -n op-roll "$1" --subresource=status --type merge -p \
    "{\"status\":{\"observedGeneration\":$gen,\"replicas\":3,\"updatedReplicas\":3,\"availableReplicas\":3,\"readyReplicas\":3,\"conditions\":$conditions}}" >/dev/null
}
for d in r1 r2 r3; do rolled_out "$d"; done
retuned_list() { local d; for d in r1 r2 r3; do settings_are op-roll "$d" "12 52 0 1" && echo "$d"; done; }
retuned() { retuned_list | grep -c . || true; }
k patch sdp -n op-roll default --type merge -p '{"spec":{"propagation":{"staticSeconds":8}}}' >/dev/null
eventually 10 bash -c "$(declare -f k settings settings_are retuned_list retuned); [ \"\$(retuned)\" -ge 1 ]"
sleep 6  # a poll of the held-back ones (every 5 s)
expect "the figure rose: one re-tune at a time" "$(retuned)" 1
queued=0; for d in r1 r2 r3; do has_event op-roll "$d" RolloutQueued && queued=$((queued + 1)); done
expect "... the other two report RolloutQueued" "$queued" 2
first=$(retuned_list)
rolled_out "$first"
eventually 10 bash -c "$(declare -f k settings settings_are retuned_list retuned); [ \"\$(retuned)\" -ge 2 ]" \
  && ok "$first rolled out: the next re-tune started" || not_ok "after $first rolled out: $(retuned) re-tuned"
sleep 6
expect "... and only that one" "$(retuned)" 2
second=$(retuned_list | grep -vx "$first")
rolled_out "$second" '[{"type":"Progressing","status":"False","reason":"ProgressDeadlineExceeded"}]'
k patch deployment -n op-roll "$second" --subresource=status --type merge -p '{"status":{"updatedReplicas":1,"availableReplicas":2}}' >/dev/null
eventually 10 bash -c "$(declare -f k settings settings_are retuned_list retuned); [ \"\$(retuned)\" -ge 3 ]" \
  && ok "a rollout past its progress deadline frees its slot too: all three re-tuned" || not_ok "after $second gave up: $(retuned) re-tuned"

# ------------------------------------------------------------- a deploy that sets the fields back: FieldFight
# `kubectl apply` (client-side) of a manifest that names grace 30 and
# 25%/25%: each re-apply writes them back. Once is repaired; the second time
# within minIntervalSeconds is a FieldFight, and further syncs start nothing.
policy op-fight default
CREATE=apply deployment op-fight web "$OPTED"
eventually 10 settings_are op-fight web "6 46 0 1" && ok "op-fight: tuned" || not_ok "op-fight: '$(settings op-fight web)'"
CREATE=apply deployment op-fight web "$OPTED"   # the deploy sets the fields back
eventually 10 settings_are op-fight web "6 46 0 1" && ok "op-fight: the first set-back is repaired" \
  || not_ok "op-fight after one set-back: '$(settings op-fight web)'"
set_back_at=$(jp deployment op-fight web '{.metadata.annotations.gracekeeper\.dev/applied}' | jq -r '.setBack // ""')
[ -n "$set_back_at" ] && ok "... and the repair's time is on the object (setBack $set_back_at)" \
  || not_ok "no setBack in gracekeeper.dev/applied: $(jp deployment op-fight web '{.metadata.annotations.gracekeeper\.dev/applied}')"
CREATE=apply deployment op-fight web "$OPTED"   # and again
eventually 10 has_event op-fight web FieldFight && ok "the second set-back is a FieldFight Warning" \
  || not_ok "no FieldFight: $(event_reasons op-fight web)"
event_note op-fight web FieldFight | grep -q '"kubectl-client-side-apply" set gracekeeper.s fields back twice' \
  && ok "... naming the manager (kubectl-client-side-apply)" || not_ok "FieldFight note: $(event_note op-fight web FieldFight)"
generation=$(jp deployment op-fight web '{.metadata.generation}')
fight_generation=$generation
for i in 1 2 3; do CREATE=apply deployment op-fight web "$OPTED"; sleep 1; done
sleep 2
expect "three more syncs of the same manifest start no rollout (generation)" "$(jp deployment op-fight web '{.metadata.generation}')" "$generation"
expect "... and the manifest's values stay (the hook it does not name stays too)" "$(settings op-fight web)" "6 30 25% 25%"

# ------------------------------------------- a FieldFight ends on its own (issue 32)
# minIntervalSeconds 15: two set-backs make a fight; with no set-back for 15 s
# it is over, and the budget is repaired with no other event (a requeue at
# the interval's end, not a watch event or a resync).
policy op-fightend default '  changes: {minIntervalSeconds: 15}'
CREATE=apply deployment op-fightend web "$OPTED"
eventually 10 settings_are op-fightend web "6 46 0 1" || not_ok "op-fightend: not tuned: '$(settings op-fightend web)'"
CREATE=apply deployment op-fightend web "$OPTED"
eventually 10 settings_are op-fightend web "6 46 0 1" || not_ok "op-fightend: first set-back not repaired"
CREATE=apply deployment op-fightend web "$OPTED"
eventually 10 has_event op-fightend web FieldFight && fight_at=$(date +%s) ||
  not_ok "op-fightend: no FieldFight: $(event_reasons op-fightend web)"
expect "op-fightend: in the fight, the manifest's values stay" "$(settings op-fightend web)" "6 30 25% 25%"
if eventually 30 settings_are op-fightend web "6 46 0 1"; then
  ok "the fight ended by itself: repaired $(($(date +%s) - fight_at)) s after the FieldFight (interval 15 s)"
else
  not_ok "the fight never ended: '$(settings op-fightend web)'"
fi

# ---------------------------- a paused Deployment holds no rollout slot (issue 32)
# maxConcurrentRollouts 1. p1 is paused and re-tuned: its new template never
# rolls out. p2 (a first tune is never held back) is re-tuned on the next
# rise of the figure: it must not wait for paused p1's rollout.
policy op-paused default '  changes: {maxConcurrentRollouts: 1}'
# status_of NAME UPDATED: the controller observed the generation, UPDATED of 3 new.
status_of() {
  local gen
  gen=$(jp deployment op-paused "$1" '{.metadata.generation}')
  k patch deployment -n op-paused "$1" --subresource=status --type merge -p \
    "{\"status\":{\"observedGeneration\":$gen,\"replicas\":3,\"updatedReplicas\":$2,\"readyReplicas\":3,\"availableReplicas\":3}}" >/dev/null
}
deployment op-paused p1 "$OPTED"
eventually 10 settings_are op-paused p1 "6 46 0 1" || not_ok "op-paused p1 first tune: '$(settings op-paused p1)'"
k patch deployment -n op-paused p1 --type merge -p '{"spec":{"paused":true}}' >/dev/null
status_of p1 3
k patch sdp default -n op-paused --type merge -p '{"spec":{"propagation":{"staticSeconds":8}}}' >/dev/null
eventually 10 settings_are op-paused p1 "12 52 0 1" || not_ok "op-paused: paused p1 not re-tuned: '$(settings op-paused p1)'"
status_of p1 0  # observed, but paused: not one pod of the new template
deployment op-paused p2 "$OPTED"
eventually 10 settings_are op-paused p2 "12 52 0 1" || not_ok "op-paused p2 first tune: '$(settings op-paused p2)'"
status_of p2 3
k patch sdp default -n op-paused --type merge -p '{"spec":{"propagation":{"staticSeconds":12}}}' >/dev/null
eventually 15 settings_are op-paused p2 "18 58 0 1" &&
  ok "a paused Deployment's rollout holds no slot: p2 re-tuned" ||
  not_ok "p2 waits behind paused p1: '$(settings op-paused p2)'"

# ---------------------------------- rollout.manage: false, replicas 0 (issue 32)
# Tuned with the strategy managed (25%/25% -> 25%/0), then manage: false and
# a new figure: the re-tune leaves the strategy as it is (server-side apply
# would otherwise drop gracekeeper's maxUnavailable, back to its 25% default).
policy op-manage default '  changes: {maxConcurrentRollouts: "100%"}'
deployment op-manage web "$OPTED"
eventually 10 settings_are op-manage web "6 46 0 1" || not_ok "op-manage: not tuned: '$(settings op-manage web)'"
k patch sdp default -n op-manage --type merge -p '{"spec":{"rollout":{"manage":false},"propagation":{"staticSeconds":8}}}' >/dev/null
eventually 10 settings_are op-manage web "12 52 0 1" &&
  ok "rollout.manage: false: the re-tune leaves the strategy (maxUnavailable 0, maxSurge 1)" ||
  not_ok "op-manage after manage: false: '$(settings op-manage web)'"
# Scaled to 0 with a percentage surge: it stays a percentage.
k patch sdp default -n op-manage --type merge -p '{"spec":{"rollout":{"manage":true}}}' >/dev/null
k create deployment zero -n op-manage --image=app:1 --replicas=0 -o json --dry-run=client |
  jq --argjson a "$OPTED" '.metadata.annotations = $a | .spec.template.metadata.labels.served = "yes" |
    .spec.strategy = {"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"25%","maxSurge":"25%"}}' |
  k create -f - >/dev/null
eventually 10 bash -c "[ \"\$(kubectl get deployment -n op-manage zero -o jsonpath='{.spec.strategy.rollingUpdate.maxUnavailable}')\" = 0 ]" ||
  not_ok "op-manage zero: strategy not tuned"
expect "scaled to 0: maxSurge stays 25% (not 1), maxUnavailable 0" \
  "$(jp deployment op-manage zero '{.spec.replicas} {.spec.strategy.rollingUpdate.maxSurge} {.spec.strategy.rollingUpdate.maxUnavailable}')" "0 25% 0"

# ------------------------------------------------------------- field conflicts and existing: Replace
# A Deployment whose fields belong to another *applier* (a GitOps controller
# using server-side apply) is not fought over: FieldConflict, pending.
policy op-conflict default
CREATE="apply --server-side --field-manager=flux" deployment op-conflict gitops "$OPTED"
eventually 10 has_event op-conflict gitops FieldConflict && ok "another applier's fields give a FieldConflict event" \
  || not_ok "no FieldConflict event: $(event_reasons op-conflict gitops)"
case "$(event_note op-conflict gitops FieldConflict)" in
  *'"flux"'*) ok "the event names the manager (flux)";;
  *) not_ok "FieldConflict note: $(event_note op-conflict gitops FieldConflict)";;
esac
expect "... and the Deployment is left as it was" "$(settings op-conflict gitops)" "none 30 25% 25%"
eventually 10 bash -c "[ \"\$(kubectl get sdp -n op-conflict default -o jsonpath='{.status.deployments.pending}')\" = 1 ]" \
  && ok "the conflict counts as pending in the policy's status" || not_ok "op-conflict status: $(jp sdp op-conflict default '{.status.deployments}')"

# existing: Replace replaces a user's hook and takes fields over from appliers.
policy op-replace default "  preStop: {existing: Replace}"
deployment op-replace legacy "$OPTED" "" '{"preStop":{"httpGet":{"path":"/drain","port":8080}}}'
CREATE="apply --server-side --field-manager=flux" deployment op-replace gitops "$OPTED"
eventually 10 settings_are op-replace legacy "6 46 0 1" && ok "existing: Replace replaces a user-written hook with the sleep" \
  || not_ok "op-replace legacy: '$(settings op-replace legacy)'"
eventually 10 settings_are op-replace gitops "6 46 0 1" && ok "existing: Replace takes fields over from another applier" \
  || not_ok "op-replace gitops: '$(settings op-replace gitops)'"

# A change churn control holds back lands once it is due, with no other
# event: the reconcile that held it back asked to come back then.
policy op-defer default "  changes: {minIntervalSeconds: 20}"
k patch sdp -n op-defer default --type merge -p '{"spec":{"propagation":{"staticSeconds":12}}}' >/dev/null
sleep 1
deployment op-defer web "$OPTED"
eventually 10 settings_are op-defer web "18 58 0 1" && ok "op-defer: tuned to an 18 s wait" \
  || not_ok "op-defer web: '$(settings op-defer web)'"
tuned_at=$(date +%s)
k patch sdp -n op-defer default --type merge -p '{"spec":{"propagation":{"staticSeconds":4}}}' >/dev/null
sleep 5
expect "a shorter wait is held back by minIntervalSeconds" "$(settings op-defer web)" "18 58 0 1"
if eventually 40 settings_are op-defer web "6 46 0 1"; then
  ok "the held-back change lands once due, with no other event ($(($(date +%s) - tuned_at)) s after the tune, interval 20 s)"
else
  not_ok "the held-back change never landed: '$(settings op-defer web)'"
fi

# ------------------------------------------------------------- /metrics
curl -sf "http://127.0.0.1:$OP_PORT/metrics" >"$WORK/metrics.txt"
if promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.out" 2>&1; then ok "promtool check metrics accepts /metrics"
else not_ok "promtool check metrics:"; note <"$WORK/promtool.out"; fi
grep -q '^gracekeeper_deployments_managed{namespace="op-basic",policy="default"} 6' "$WORK/metrics.txt" \
  && ok "gracekeeper_deployments_managed for op-basic/default is 6" || not_ok "managed gauge: $(grep deployments_managed "$WORK/metrics.txt" | head -3)"
grep -q '^gracekeeper_patches_applied_total{namespace="op-basic"}' "$WORK/metrics.txt" && ok "patches are counted" || not_ok "no patches counter"

# ------------------------------------------------------------- a status write that hits 409 is retried
# A racing writer bumps the policy's resourceVersion (label patches) while spec
# changes make the operator write status; the audit log shows the 409s.
since=$(now_rfc3339)
# Three racers: a status write is computed and sent within milliseconds, and
# it is written only once the namespace's Deployments settle after each spec
# change, so one racer alone hits it rarely.
RACER_PID=""
for r in 1 2 3; do racer op-basic & RACER_PID="$RACER_PID $!"; done
for s in $(seq 5 44); do
  k patch sdp -n op-basic default --type merge -p "{\"spec\":{\"propagation\":{\"staticSeconds\":$s}}}" >/dev/null
  sleep 0.5
  gk_requests_since "$since" | grep -q '^update shutdownpolicies/status .* 409$' && break
done
for pid in $RACER_PID; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done; RACER_PID=""
conflicts=$(gk_requests_since "$since" | grep -c '^update shutdownpolicies/status .* 409$')
[ "$conflicts" -ge 1 ] && ok "status updates hit 409 under a racing writer ($conflicts)" || not_ok "no 409 provoked"
eventually 15 bash -c "[ \"\$(kubectl get sdp -n op-basic default -o jsonpath='{.status.propagation.seconds}')\" = \"\$(kubectl get sdp -n op-basic default -o jsonpath='{.spec.propagation.staticSeconds}')\" ]" \
  && ok "... and the status converges to the latest spec ($(jp sdp op-basic default '{.status.propagation.seconds}') s)" \
  || not_ok "status after the race: $(jp sdp op-basic default '{.status.propagation}')"

# ------------------------------------------------------------- deleting a policy
# Its Deployments stay as they are and are no longer managed.
k delete sdp -n op-basic default >/dev/null
eventually 10 has_event op-basic web NoMatchingPolicy && ok "deleting the policy: NoMatchingPolicy event" \
  || not_ok "no NoMatchingPolicy event after deleting the policy: $(event_reasons op-basic web)"
expect "deleting the policy leaves the Deployment as it was" "$(settings op-basic web | cut -d' ' -f3,4)" "0 1"
eventually 5 bash -c "! curl -sf http://127.0.0.1:$OP_PORT/metrics | grep -q 'gracekeeper_deployments_managed{namespace=\"op-basic\"'" \
  && ok "its metrics series are removed" || not_ok "op-basic series still exported"

# ------------------------------------------------------------- steady state
policy op-steady default
pids=()
for i in $(seq 1 50); do deployment op-steady "svc-$i" "$OPTED" & pids+=($!); done
wait "${pids[@]}"
eventually 60 bash -c "[ \"\$(kubectl get sdp -n op-steady default -o jsonpath='{.status.deployments.compliant}')\" = 50 ]" \
  && ok "50 opted-in Deployments converge" || not_ok "op-steady: $(jp sdp op-steady default '{.status.deployments}')"
sleep 3
since=$(now_rfc3339)
sleep 60
writes=$(gk_writes_since "$since")
expect "60 s of steady state: writes by gracekeeper in the audit log" "$(printf '%s' "$writes" | grep -c . || true)" "0"
[ -n "$writes" ] && printf '%s\n' "$writes" | head | note
reads=$(gk_requests_since "$since" | grep -vc '^watch ' || true)
expect "60 s of steady state: requests other than watches" "$reads" "0"

stop_operator
ms=$STOP_MS
expect "SIGTERM: exit status" "$OP_EXIT" "0"
[ "$ms" -lt 10000 ] && ok "SIGTERM: exited in ${ms} ms" || not_ok "SIGTERM: took ${ms} ms"
since=$(now_rfc3339)
start_operator op2 || not_ok "restarted operator became ready"
sleep 8
writes=$(gk_writes_since "$since")
# What a blocked write is kept in memory by (uid, generation, plan): a new
# process tries it once more, is refused the same way, and reports nothing new.
expect "after a restart: no write repeated, no event re-emitted" "$(printf '%s' "$writes" | grep -vc ' 409$' || true)" "0"
expect "after a restart: the write refused for a field conflict is tried once more" "$(printf '%s' "$writes" | grep -c 'gitops 409$' || true)" "1"
# The fight is read from setBack on the object, not from memory or Events.
expect "after a restart: op-fight's fight still holds (its values, its generation)" \
  "$(settings op-fight web) $(jp deployment op-fight web '{.metadata.generation}')" "6 30 25% 25% $fight_generation"
[ -n "$writes" ] && printf '%s\n' "$writes" | head | note

# ------------------------------------------------------------- API server restarted mid-reconcile
policy op-restart default
pids=()
for i in $(seq 1 20); do deployment op-restart "r-$i" "$OPTED" & pids+=($!); done
wait "${pids[@]}"
"$ROOT/test/cluster/restart-apiserver" "$CLUSTER" --kill --down-seconds 5 >"$WORK/restart.log" 2>&1 \
  && ok "API server killed and restarted mid-reconcile ($(tail -1 "$WORK/restart.log"))" || not_ok "restart-apiserver failed"
deployment op-restart after-restart "$OPTED"
converged() {
  local n
  n=$(kubectl get deployments -n op-restart -o json | jq '[.items[] | select(.spec.template.spec.terminationGracePeriodSeconds == 46)] | length')
  [ "$n" = 21 ]
}
eventually 90 converged && ok "the operator recovers and converges (21 Deployments tuned)" \
  || not_ok "after the restart: $(kubectl get deployments -n op-restart -o json | jq '[.items[] | select(.spec.template.spec.terminationGracePeriodSeconds == 46)] | length') of 21 tuned"
kill -0 "$OP_PID" 2>/dev/null && ok "the operator is still running" || not_ok "the operator died"
stop_operator
ms=$STOP_MS

# ------------------------------------------------------------- cold start: one status write per policy
# A policy and its Deployments exist before the operator starts. The
# policy's first status waits until its Deployments are counted: one write,
# with the counts, instead of one without them and one with them.
policy op-cold default
pids=()
for i in $(seq 1 12); do deployment op-cold "c-$i" "$OPTED" & pids+=($!); done
wait "${pids[@]}"
since=$(now_rfc3339)
start_operator op-cold || not_ok "operator started on op-cold"
eventually 30 bash -c "[ \"\$(kubectl get sdp -n op-cold default -o jsonpath='{.status.deployments.compliant}')\" = 12 ]" \
  && ok "cold start: 12 Deployments tuned and counted" || not_ok "op-cold: $(jp sdp op-cold default '{.status.deployments}')"
sleep 2
cold_status_writes=$(jq -r --arg since "$since" 'select(.stage == "ResponseComplete" and
    (.userAgent // "" | startswith("gracekeeper")) and .stageTimestamp > $since and
    .objectRef.resource == "shutdownpolicies" and .objectRef.subresource == "status" and
    .objectRef.namespace == "op-cold") | .verb' "$CLUSTER/audit.log" | grep -c . || true)
expect "cold start: status writes of the op-cold policy (audit log)" "$cold_status_writes" "1"
stop_operator

# ------------------------------------------------------------- leader election + SIGTERM (lame duck)
start_operator op3 --leader-elect --leader-election-namespace default --leader-election-id gk-test-leader \
  --shutdown-lame-duck-seconds 3 || not_ok "leader-elected operator ready"
eventually 20 bash -c "kubectl get lease -n default gk-test-leader -o jsonpath='{.spec.holderIdentity}' | grep -q ." \
  && ok "the operator holds the Lease ($(jp lease default gk-test-leader '{.spec.holderIdentity}'))" || not_ok "no Lease holder"
grep -q '^gracekeeper_leader 1' <(curl -sf "http://127.0.0.1:$OP_PORT/metrics") && ok "gracekeeper_leader is 1" || not_ok "gracekeeper_leader is not 1"
# A policy of the operator's own namespace (its kubeconfig's, else default)
# whose figure, 7 s, is longer than the flag's 3 s: the lame duck is 7 s.
OWN_NS=$(kubectl --kubeconfig "${GK_OPERATOR_KUBECONFIG:-$KUBECONFIG}" config view --minify \
  -o jsonpath='{.contexts[0].context.namespace}' 2>/dev/null)
OWN_NS=${OWN_NS:-default}
k apply -f - >/dev/null <<YAML
apiVersion: gracekeeper.dev/v1alpha1
kind: ShutdownPolicy
metadata: {name: lame, namespace: $OWN_NS}
spec:
  propagation: {source: Static, staticSeconds: 7}
YAML
eventually 20 bash -c "[ \"\$(kubectl get sdp -n $OWN_NS lame -o jsonpath='{.status.propagation.seconds}')\" = 7 ]" \
  || not_ok "the policy $OWN_NS/lame has no figure: $(jp sdp "$OWN_NS" lame '{.status.propagation}')"
# SIGTERM with a 7 s lame duck: /readyz says 503 at once, /metrics still
# answers, with Connection: close, the Lease is released during the lame
# duck, and the process exits after it.
start=$(date +%s%N)
kill -TERM "$OP_PID"
sleep 0.3
readyz=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$OP_PORT/readyz")
expect "lame duck: /readyz at once" "$readyz" 503
curl -s -D "$WORK/lame.headers" -o "$WORK/lame.metrics" "http://127.0.0.1:$OP_PORT/metrics"
grep -q '^HTTP/1.1 200' "$WORK/lame.headers" && grep -q '^gracekeeper_build_info' "$WORK/lame.metrics" \
  && ok "lame duck: /metrics still answers" || not_ok "lame duck: /metrics: $(head -1 "$WORK/lame.headers")"
grep -qi '^Connection: close' "$WORK/lame.headers" && ok "lame duck: the answer says Connection: close" \
  || not_ok "lame duck: no Connection: close: $(tr -d '\r' <"$WORK/lame.headers" | tr '\n' ' ')"
eventually 3 bash -c "[ -z \"\$(kubectl get lease -n default gk-test-leader -o jsonpath='{.spec.holderIdentity}')\" ]" \
  && kill -0 "$OP_PID" 2>/dev/null && ok "lame duck: the Lease is released while it still serves" \
  || not_ok "lame duck: Lease holder '$(jp lease default gk-test-leader '{.spec.holderIdentity}')'"
wait "$OP_PID" 2>/dev/null
OP_EXIT=$?
ms=$((($(date +%s%N) - start) / 1000000))
expect "SIGTERM as leader: exit status" "$OP_EXIT" 0
[ "$ms" -ge 7000 ] && [ "$ms" -lt 17000 ] && ok "SIGTERM as leader: exited after the 7 s lame duck, in ${ms} ms" \
  || not_ok "SIGTERM as leader took ${ms} ms (want 7000-17000)"
expect "the lame duck came from the namespace's figure, not the flag's 3 s" \
  "$(jq -r 'select(.msg | startswith("lame duck")) | "\(.seconds) \(.from)"' "$OP_LOG")" "7 measured"
k delete sdp -n "$OWN_NS" lame >/dev/null
expect "the Lease was released" "$(jp lease default gk-test-leader '{.spec.holderIdentity}')" ""
OP_PID=""

# ------------------------------------------------------------- an unplanned Lease loss: exit at once
# Another writer takes the Lease (as a candidate would that judged it
# expired): the leader must stop writing at once and exit 1, without the
# orderly drain (no queued Event or status written after it noticed).
k create namespace op-steal >/dev/null 2>&1; serve op-steal 2>/dev/null
policy op-steal default
start_operator op-steal --leader-elect --leader-election-namespace default --leader-election-id gk-test-steal \
  --lease-duration 4 --renew-deadline 3 --retry-period 1 || not_ok "operator ready (op-steal)"
eventually 20 bash -c "kubectl get lease -n default gk-test-steal -o jsonpath='{.spec.holderIdentity}' | grep -q ." \
  || not_ok "op-steal: no Lease holder"
pids=()
for i in $(seq 1 10); do deployment op-steal "s-$i" "$OPTED" & pids+=($!); done
wait "${pids[@]}"
steal() {
  k get lease -n default gk-test-steal -o json |
    jq --arg now "$(now_rfc3339)" '.spec.holderIdentity = "thief" | .spec.renewTime = $now | .spec.leaseDurationSeconds = 60' |
    k replace -f - >/dev/null 2>&1
}
eventually 1 0.2 steal
start=$(date +%s%N)
eventually 10 gone "$OP_PID"
wait "$OP_PID" 2>/dev/null
OP_EXIT=$?
ms=$((($(date +%s%N) - start) / 1000000))
expect "Lease taken by another: exit status" "$OP_EXIT" 1
[ "$ms" -lt 3000 ] && ok "Lease taken by another: exited ${ms} ms after (retry period 1 s)" \
  || not_ok "Lease taken by another: exited after ${ms} ms"
lost=$(jq -r 'select(.msg | startswith("lost leadership")) | .ts' "$OP_LOG" | head -1)
[ -n "$lost" ] && ok "... logging the loss" || not_ok "no 'lost leadership' line"
late=$(jq -r --arg since "${lost:-9}" 'select(.stage == "ResponseComplete" and
    (.userAgent // "" | startswith("gracekeeper")) and .requestReceivedTimestamp > $since and
    (.verb | test("^(create|update|patch|delete)$"))) | "\(.verb) \(.objectRef.resource) \(.objectRef.name)"' "$CLUSTER/audit.log")
expect "... writes received after it noticed (audit log)" "$(printf '%s' "$late" | grep -c . || true)" 0
[ -n "$late" ] && printf '%s\n' "$late" | head | note
expect "the thief keeps the Lease" "$(jp lease default gk-test-steal '{.spec.holderIdentity}')" thief
k delete lease -n default gk-test-steal >/dev/null 2>&1
OP_PID=""

# ------------------------------------------------------------- a field conflict the other applier resolves
# flux gives the conflicting fields up by applying its manifest without them.
# Their values stay (the defaults are the same), so the generation does not
# change; gracekeeper sees flux's managedFields change and tries again.
gitops_manifest() {  # gitops_manifest WITH_BUDGET_FIELDS(true|false)
  jq -n --argjson with "$1" '{"apiVersion":"apps/v1","kind":"Deployment",
    "metadata":{"name":"gitops","namespace":"op-release","labels":{"app":"gitops"},
      "annotations":{"gracekeeper.dev/enabled":"true"}},
    "spec":({"replicas":3,"selector":{"matchLabels":{"app":"gitops"}},
      "template":{"metadata":{"labels":{"app":"gitops","served":"yes"}},
        "spec":({"containers":[{"name":"app","image":"app:1","ports":[{"containerPort":8080}],
          "readinessProbe":{"httpGet":{"path":"/ready","port":8080}}}]}
          + if $with then {"terminationGracePeriodSeconds":30} else {} end)}}
      + if $with then {"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"25%","maxSurge":"25%"}}} else {} end)}'
}
policy op-release default
start_operator op-release || not_ok "operator ready (op-release)"
gitops_manifest true | k apply --server-side --field-manager=flux -f - >/dev/null
eventually 10 has_event op-release gitops FieldConflict && ok "op-release: flux's fields give a FieldConflict" \
  || not_ok "op-release: no FieldConflict: $(event_reasons op-release gitops)"
generation=$(jp deployment op-release gitops '{.metadata.generation}')
since=$(now_rfc3339)
# (The generation flux's own write left: gracekeeper can write within milliseconds.)
released=$(gitops_manifest false | k apply --server-side --field-manager=flux -f - -o jsonpath='{.metadata.generation}')
expect "flux releases grace and strategy: the generation is unchanged" "$released" "$generation"
eventually 10 settings_are op-release gitops "6 46 0 1" \
  && ok "the released fields are tuned with no generation change of the user's" \
  || not_ok "op-release gitops after the release: '$(settings op-release gitops)'"
reads=$(gk_requests_since "$since" | grep -c '^get deployments/ gitops 200$' || true)
[ "$reads" -ge 1 ] && ok "... after reading who owns the fields ($reads GET)" || not_ok "no GET of op-release/gitops"
stop_operator

# ------------------------------------------------------------- events the server refuses
# The operator runs as a ServiceAccount that may not create Events: the
# Tuned Event is refused, counted as not reported, and recorded again with
# backoff (2 s, 4 s, ...). Once the right is granted, it is written, once,
# with no change to the Deployment.
# Not when the whole suite runs as the chart's ServiceAccount (ship test):
# that run checks that every request is that account's and none is refused.
events_refused_case() {
k apply -f - >/dev/null <<'YAML'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: gk-test-no-events}
rules:
  - {apiGroups: [apps], resources: [deployments], verbs: [get, list, watch, patch]}
  - {apiGroups: [gracekeeper.dev], resources: [shutdownpolicies], verbs: [get, list, watch]}
  - {apiGroups: [gracekeeper.dev], resources: [shutdownpolicies/status], verbs: [update, patch]}
  - {apiGroups: [events.k8s.io], resources: [events], verbs: [list]}
  - {apiGroups: [""], resources: [services], verbs: [list, watch]}
  - {apiGroups: [apps], resources: [statefulsets], verbs: [get, list, watch, patch]}
  - {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
  - {apiGroups: [""], resources: [pods], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: gk-test-events-writer}
rules:
  - {apiGroups: [events.k8s.io], resources: [events], verbs: [create, patch]}
YAML
k create clusterrolebinding gk-test-no-events --clusterrole=gk-test-no-events --serviceaccount=op-events:gk-events >/dev/null
if TOKEN=$("$ROOT/test/cluster/token" "$CLUSTER" op-events gk-events --duration=1h) && [ -n "$TOKEN" ]; then
  umask 077
  cat >"$WORK/events.kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster:
      server: $(k config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
      certificate-authority-data: $(k config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
users: [{name: gk-events, user: {token: $TOKEN}}]
contexts: [{name: gk-events, context: {cluster: test, user: gk-events}}]
current-context: gk-events
YAML
  umask 022
else
  not_ok "minting a token for op-events:gk-events"
fi
policy op-events default
GK_OPERATOR_KUBECONFIG="$WORK/events.kubeconfig" start_operator op-events || not_ok "operator ready (op-events)"
since=$(now_rfc3339)
deployment op-events web "$OPTED"
eventually 10 settings_are op-events web "6 46 0 1" && ok "op-events: tuned" || not_ok "op-events web: '$(settings op-events web)'"
refused_creates() { gk_requests_since "$since" | grep -c '^create events/ - 403$' || true; }
eventually 20 bash -c "[ \$(jq -r --arg since '$since' 'select(.stage == \"ResponseComplete\" and .verb == \"create\" and
    .objectRef.resource == \"events\" and .objectRef.namespace == \"op-events\" and .stageTimestamp > \$since and
    .responseStatus.code == 403) | .verb' '$CLUSTER/audit.log' | grep -c .) -ge 3 ]" \
  && ok "a refused Event is recorded again ($(refused_creates) refused creates)" \
  || not_ok "refused Event creates: $(refused_creates)"
grep -q '"msg":"event not written, will record it again"' "$OP_LOG" && ok "... and the operator says it will" \
  || not_ok "no 'event not written' log line"
generation=$(jp deployment op-events web '{.metadata.generation}')
k create clusterrolebinding gk-test-events-writer --clusterrole=gk-test-events-writer --serviceaccount=op-events:gk-events >/dev/null
eventually 30 has_event op-events web Tuned && ok "once Events may be created, the Tuned Event is written" \
  || not_ok "no Tuned Event after the grant: $(event_reasons op-events web)"
sleep 3
expect "... once" "$(k get events.events.k8s.io -n op-events -o json | jq '[.items[] | select(.regarding.name == "web" and .reason == "Tuned")] | length')" "1"
expect "... with no change to the Deployment" "$(jp deployment op-events web '{.metadata.generation}')" "$generation"
stop_operator
}
if [ -z "${GK_OPERATOR_KUBECONFIG:-}" ]; then events_refused_case
else echo "# skipped: events the server refuses (the operator runs as the ServiceAccount)"; fi

# ------------------------------------------------------------- exec sleep when a kubelet is older than 1.30
# --min-kubelet-version 1.29: the API server has the native sleep action, a
# kubelet does not. New hooks are exec sleep; an exec sleep gracekeeper
# wrote is left as it is.
policy op-exec default
sed 's/"op-basic"/"op-exec"/' "$WORK/old.json" >"$WORK/old-exec.json"
SOURCE_DATE_EPOCH=1790000000 "$GK" plan -f "$WORK/old-exec.json" --kubernetes-version 1.29 \
  --propagation-seconds 4 2>/dev/null | k create -f - >/dev/null
since=$(now_rfc3339)
start_operator op-exec --min-kubelet-version 1.29 || not_ok "operator ready (op-exec)"
expect "the operator logs native sleep off" "$(jq -r 'select(.msg == "connected") | .nativeSleep' "$OP_LOG")" "false"
deployment op-exec web "$OPTED"
eventually 10 bash -c "[ \"\$(kubectl get deployment -n op-exec web -o jsonpath='{.spec.template.spec.terminationGracePeriodSeconds}')\" = 46 ]" \
  && ok "op-exec: tuned" || not_ok "op-exec web: $(settings op-exec web)"
expect "the hook written is exec sleep" "$(jp deployment op-exec web '{.spec.template.spec.containers[0].lifecycle.preStop}')" '{"exec":{"command":["sleep","6"]}}'
sleep 3
expect "an exec sleep gracekeeper wrote is not rewritten" "$(gk_writes_since "$since" | grep -c ' old-exec ' || true)" "0"
expect "... and still exec sleep" "$(jp deployment op-exec old-exec '{.spec.template.spec.containers[0].lifecycle.preStop}')" '{"exec":{"command":["sleep","6"]}}'
expect "... with no ExecSleepNeedsBinary Event" "$(has_event op-exec old-exec ExecSleepNeedsBinary && echo yes || echo no)" "no"
stop_operator
OP_PID=""

# ------------------------------------------- values the user raised, slots that free (issue 45)
# One operator with an 8 s --rollout-stall-timeout, for the slots below.
policy op-raise default '  changes: {minIntervalSeconds: 0}'
policy op-stall default '  changes: {maxConcurrentRollouts: 1}'
start_operator op-raise --rollout-stall-timeout 8 || not_ok "operator ready (op-raise)"
applied_of() { jp deployment "$1" "$2" '{.metadata.annotations.gracekeeper\.dev/applied}'; }
# A grace the user raised above gracekeeper's is theirs: no set-back (no
# write, no setBack), recorded as theirs by the next write, and a floor.
deployment op-raise web "$OPTED"
eventually 10 settings_are op-raise web "6 46 0 1" || not_ok "op-raise: not tuned: '$(settings op-raise web)'"
generation=$(jp deployment op-raise web '{.metadata.generation}')
since=$(now_rfc3339)
k patch deployment -n op-raise web --type merge \
  -p '{"spec":{"template":{"spec":{"terminationGracePeriodSeconds":70}}}}' >/dev/null
sleep 3
expect "a raised grace is no set-back: no gracekeeper write" "$(gk_writes_since "$since" | grep -c ' web ' || true)" 0
expect "... the user's 70 s stays" "$(settings op-raise web)" "6 70 0 1"
expect "... and no setBack is recorded" "$(applied_of op-raise web | jq -r '.setBack // "none"')" none
k patch sdp -n op-raise default --type merge -p '{"spec":{"propagation":{"staticSeconds":30}}}' >/dev/null
eventually 10 settings_are op-raise web "45 85 0 1" || not_ok "op-raise: not re-tuned to 85: '$(settings op-raise web)'"
expect "the re-tune records the user's raised grace" "$(applied_of op-raise web | jq -c '.user.grace')" 70
k patch sdp -n op-raise default --type merge -p '{"spec":{"propagation":{"staticSeconds":4}}}' >/dev/null
eventually 10 bash -c "$(declare -f k settings); [ \"\$(settings op-raise web | cut -d' ' -f1)\" = 6 ]" ||
  not_ok "op-raise: the wait did not come down: '$(settings op-raise web)'"
expect "the user's raised grace is a floor: the figure fell, the grace is 70, not 46" "$(settings op-raise web)" "6 70 0 1"

# A finished rollout that lost a pod holds no slot, and one that stalls
# frees its slot after --rollout-stall-timeout (8 s) with RolloutStalled.
# No Deployment controller here: the test writes the status.
stall_status() {  # NAME UPDATED AVAILABLE REPLICAS [REASON]
  local gen
  gen=$(jp deployment op-stall "$1" '{.metadata.generation}')
  k patch deployment -n op-stall "$1" --subresource=status --type merge -p \
    "{\"status\":{\"observedGeneration\":$gen,\"replicas\":$4,\"updatedReplicas\":$2,\"readyReplicas\":$3,\"availableReplicas\":$3,\"conditions\":[{\"type\":\"Progressing\",\"status\":\"True\",\"reason\":\"${5:-ReplicaSetUpdated}\"}]}}" >/dev/null
}
# crash: a hook of its own (sleep 30) and grace 100, so only its strategy is
# tuned and the figure below changes nothing of it; it rolled out, then
# lost a pod (a crash loop).
deployment op-stall crash "$OPTED" "" '{"preStop":{"sleep":{"seconds":30}}}'
k patch deployment -n op-stall crash --type merge \
  -p '{"spec":{"template":{"spec":{"terminationGracePeriodSeconds":100}}}}' >/dev/null
for d in stuck web; do deployment op-stall "$d" "$OPTED"; done
eventually 10 settings_are op-stall crash "30 100 0 1" || not_ok "op-stall crash: not tuned: '$(settings op-stall crash)'"
for d in stuck web; do
  eventually 10 settings_are op-stall "$d" "6 46 0 1" || not_ok "op-stall $d: not tuned: '$(settings op-stall $d)'"
done
stall_status crash 3 2 3 NewReplicaSetAvailable
stall_status stuck 3 3 3 NewReplicaSetAvailable
stall_status web 3 3 3 NewReplicaSetAvailable
k patch sdp -n op-stall default --type merge -p '{"spec":{"propagation":{"staticSeconds":8}}}' >/dev/null
retuned_stall() { local d n=0; for d in stuck web; do settings_are op-stall "$d" "12 52 0 1" && n=$((n + 1)); done; echo $n; }
eventually 10 bash -c "$(declare -f k jp settings settings_are retuned_stall); [ \"\$(retuned_stall)\" -ge 1 ]" \
  && ok "a finished rollout that lost a pod holds no slot: a re-tune went out (maxConcurrentRollouts 1)" \
  || not_ok "op-stall: no re-tune; crash (a lost pod) held the slot? $(event_reasons op-stall web)"
first=""; for d in stuck web; do settings_are op-stall "$d" "12 52 0 1" && first="$d" && break; done
other=stuck; [ "$first" = stuck ] && other=web
stall_status "$first" 1 3 4  # one new pod that never becomes ready: stuck
stalled_at=$(date +%s)
sleep 4
expect "a stuck rollout holds the only slot" "$(retuned_stall)" 1
if eventually 20 settings_are op-stall "$other" "12 52 0 1"; then
  ok "a stalled rollout frees its slot: $other re-tuned $(($(date +%s) - stalled_at)) s after $first stopped moving (stall timeout 8 s)"
else
  not_ok "the stalled rollout of $first kept its slot: $other is '$(settings op-stall $other)'"
fi
eventually 10 has_event op-stall "$first" RolloutStalled && ok "... with a RolloutStalled Warning on $first" ||
  not_ok "no RolloutStalled on $first: $(event_reasons op-stall "$first")"
expect "crash was left as it was" "$(settings op-stall crash)" "30 100 0 1"
stop_operator
OP_PID=""

finish
