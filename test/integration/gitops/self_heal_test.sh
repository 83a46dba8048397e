#!/usr/bin/env bash
# A GitOps self-heal loop against the operator, with the admission webhook
# down, against the real API server (issue 17). The webhook configuration
# points at a loopback port where nothing listens (failurePolicy Ignore,
# timeoutSeconds 2), and the operator runs without the webhook: every
# admission fails open. The app is created with `kubectl apply -f` and tuned
# by the reconciler; then ./self-heal re-applies the original manifest
# (client-side, naming grace 30 and 25%/25%) every PERIOD seconds for
# DURATION seconds, as Argo CD's self-heal would.
#
# Shows: every apply is admitted (failed open, audit log) within the timeout
# + 1 s; the loop's first set-back is repaired, its second ends in one
# FieldFight Warning naming kubectl-client-side-apply, and after it
# gracekeeper writes the Deployment no more: generation 5 in all (create,
# tune, set-back, repair, set-back), no ReplicaSet after the second
# set-back, and every later apply is unchanged. A kube-controller-manager runs; no node.
#
# usage: test/integration/gitops/self_heal_test.sh GRACEKEEPER_BINARY
#          [DURATION_SECONDS [PERIOD_SECONDS [MIN_INTERVAL_SECONDS [refused|hung]]]]
#   Defaults 120, 10, 3600 (the policy's changes.minIntervalSeconds; it
#   must exceed the duration, or gracekeeper tunes again once the first
#   set-back has left the interval) and refused: nothing listens on the
#   webhook's port. With hung, a listener there accepts connections and
#   never answers, so each admission waits the whole timeout. Starts its
#   own control plane.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
GK="${1:?usage: self_heal_test.sh GRACEKEEPER_BINARY [DURATION [PERIOD [MIN_INTERVAL]]]}"
DURATION=${2:-120}
PERIOD=${3:-10}
MIN_INTERVAL=${4:-3600}
HOOK_MODE=${5:-refused}
[[ "$HOOK_MODE" =~ ^(refused|hung)$ ]] || {
  echo "self_heal_test.sh: the webhook mode must be refused or hung, got '$HOOK_MODE'"
  exit 2
}
for v in "$DURATION" "$PERIOD" "$MIN_INTERVAL"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || {
    echo "self_heal_test.sh: DURATION, PERIOD and MIN_INTERVAL must be positive integers, got '$v'"
    exit 2
  }
done
if [ "$MIN_INTERVAL" -le "$DURATION" ] || [ "$DURATION" -lt $((3 * PERIOD)) ]; then
  echo "self_heal_test.sh: need DURATION >= 3 * PERIOD and MIN_INTERVAL > DURATION" \
    "(got $DURATION, $PERIOD, $MIN_INTERVAL)"
  exit 2
fi
. "$ROOT/test/integration/gitops/lib.sh"
echo "# self-heal every ${PERIOD}s for ${DURATION}s; changes.minIntervalSeconds ${MIN_INTERVAL}; webhook $HOOK_MODE"

setup_namespace "$MIN_INTERVAL"
k create service clusterip checkout -n "$NS" --tcp=80:8080 >/dev/null
# The webhook is down: its configuration stays, nothing listens on its port
# (refused) or nothing answers there (hung).
DEAD_PORT=$(free_port)
if [ "$HOOK_MODE" = hung ]; then
  python3 - "$DEAD_PORT" >"$WORK/hung.log" 2>&1 <<'PY' &
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
held = []
while True:
    held.append(s.accept()[0])  # never read, never answered
PY
  HUNG_PID=$!
  eventually 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$DEAD_PORT"
fi
register_webhook "$DEAD_PORT"
start_operator op

# The user's manifest, as Git holds it: grace 30, 25%/25%, no hook.
cat >"$WORK/checkout.yaml" <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: checkout
  namespace: $NS
  labels: {app: checkout, gracekeeper.dev/enabled: "true"}
  annotations: {gracekeeper.dev/enabled: "true"}
spec:
  replicas: 2
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 25%, maxUnavailable: 25%}}
  selector: {matchLabels: {app: checkout}}
  template:
    metadata: {labels: {app: checkout}}
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: app
        image: app:1
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /ready, port: 8080}}
YAML
# The API server reads webhook configurations through an informer: wait
# until a dry-run create is sent to the (dead) webhook and fails open.
sed 's/name: checkout$/name: probe/' "$WORK/checkout.yaml" >"$WORK/probe.yaml"
probe_failed_open() {
  k create --dry-run=server -f "$WORK/probe.yaml" >/dev/null &&
    audit_deployment_writes probe "" | grep -q 'failed-open$'
}
eventually 20 probe_failed_open && ok "the API server calls the dead webhook and fails open" ||
  not_ok "no failed-open admission in the audit log"

# ------------------------------------------ created by the GitOps tool, tuned
start=$(now_rfc3339)
k apply -f "$WORK/checkout.yaml" >/dev/null && ok "kubectl apply -f creates checkout" || not_ok "kubectl apply -f"
eventually 20 settings_are "$NS" checkout "6 46 0 1" &&
  ok "the reconciler tuned it (preStop 6, grace 46, 0/1)" || not_ok "not tuned: '$(settings "$NS" checkout)'"
expect "created, then tuned: generation 2" "$(generation checkout)" 2

# ------------------------------------------------------- the self-heal loop
loop_start=$(now_rfc3339)
t0=$(date +%s)
"$ROOT/test/integration/gitops/self-heal" "$WORK/checkout.yaml" "$PERIOD" "$DURATION" >"$WORK/heal.out" 2>"$WORK/heal.log" &
HEAL_PID=$!
# Generation and revision once a second, for the record.
while kill -0 "$HEAL_PID" 2>/dev/null; do
  echo "$(($(date +%s) - t0)) $(generation checkout) $(revision checkout)" >>"$WORK/samples"
  sleep 1
done
wait "$HEAL_PID"
heal_rc=$?
HEAL_PID=""
sleep 2 # time for a late gracekeeper write to show
elapsed=$(($(date +%s) - t0))
applies=$(wc -l <"$WORK/heal.out")
echo "# self-heal: $applies applies in ${elapsed}s; per apply: second ms exit result"
note <"$WORK/heal.out"
echo "# generation/revision changes (second generation revision):"
awk '$2 $3 != last { print; last = $2 $3 }' "$WORK/samples" | note

expect "the loop ran $((DURATION / PERIOD)) applies and exited 0" "$applies $heal_rc" "$((DURATION / PERIOD)) 0"
expect "every apply succeeded" "$(awk '$3 != 0' "$WORK/heal.out" | wc -l)" 0
expect "two applies changed the Deployment (the set-backs), the rest were unchanged" \
  "$(awk '{ print $4 }' "$WORK/heal.out" | sort | uniq -c | tr -s ' ' | sed 's/^ //' | tr '\n' ';')" \
  "2 configured;$((applies - 2)) unchanged;"
slowest=$(awk '$2 > m { m = $2 } END { print m + 0 }' "$WORK/heal.out")
[ "$slowest" -lt 6000 ] && ok "each kubectl apply (GET + PATCH + process start) took <= ${slowest} ms" ||
  not_ok "a kubectl apply took ${slowest} ms"

# Admission, as the API server timed it: every write on checkout, from the
# request received to its response, with the webhook down.
jq -r --arg since "$start" 'select(.stage == "ResponseComplete" and .objectRef.resource == "deployments" and
    .objectRef.name == "checkout" and (.objectRef.subresource // "") == "" and
    (.verb | IN("create", "update", "patch")) and .stageTimestamp > $since and
    (.userAgent | startswith("kubectl"))) |
    ((.stageTimestamp | sub("\\.[0-9]+Z$"; "Z") | fromdate) + (.stageTimestamp | capture("\\.(?<f>[0-9]+)Z$").f | "0." + . | tonumber))
    - ((.requestReceivedTimestamp | sub("\\.[0-9]+Z$"; "Z") | fromdate) + (.requestReceivedTimestamp | capture("\\.(?<f>[0-9]+)Z$").f | "0." + . | tonumber))' \
  "$CLUSTER/audit.log" >"$WORK/admission"
n=$(wc -l <"$WORK/admission")
max=$(sort -g "$WORK/admission" | tail -1 | awk '{ printf "%.3f", $1 }')
echo "# admission of kubectl's writes (API server, received -> response): n=$n, max ${max}s"
awk -v m="$max" 'BEGIN { exit !(m != "" && m < 3.0) }' &&
  ok "kubectl's writes were admitted within timeoutSeconds + 1 s ($n writes, slowest ${max}s)" ||
  not_ok "admission took ${max}s"
if [ "$HOOK_MODE" = hung ]; then
  fastest=$(sort -g "$WORK/admission" | head -1 | awk '{ printf "%.3f", $1 }')
  awk -v m="$fastest" 'BEGIN { exit !(m >= 1.9) }' &&
    ok "...each after waiting out the hung webhook's 2 s timeout (fastest ${fastest}s)" ||
    not_ok "an admission took ${fastest}s: the webhook did not hang it"
fi
writes=$(audit_deployment_writes checkout "$start")
expect "every kubectl write failed open at the webhook (audit log)" \
  "$(grep '^[a-z]* kubectl' <<<"$writes" | sort | uniq -c | tr -s ' ' | sed 's/^ //' | tr '\n' ';')" \
  "1 create kubectl failed-open;2 patch kubectl failed-open;"

# The fight: one Warning, naming the manager and the fields.
k get events -n "$NS" --field-selector reason=FieldFight -o json >"$WORK/fights.json"
expect "one FieldFight Warning" "$(jq '[.items[] | .count // 1] | add // 0' "$WORK/fights.json")" 1
message=$(jq -r '.items[0].message // .items[0].note // ""' "$WORK/fights.json")
echo "# FieldFight: $message"
grep -q '"kubectl-client-side-apply"' <<<"$message" &&
  ok "the FieldFight Warning names kubectl-client-side-apply" || not_ok "FieldFight message: '$message'"
grep -q 'terminationGracePeriodSeconds' <<<"$message" && grep -q 'maxUnavailable' <<<"$message" &&
  ok "...and the fields set back (grace, maxUnavailable)" || not_ok "FieldFight message: '$message'"
second=$(awk '$4 == "configured" { n++; if (n == 2) print $1 }' "$WORK/heal.out")
expect "the second set-back came on the loop's second apply (second ${PERIOD})" "$second" "$PERIOD"

# What the loop cost. kubectl's two set-backs (audit log), gracekeeper's
# writes after each: the first is repaired, the second is not.
set_backs=$(jq -r --arg since "$loop_start" 'select(.stage == "ResponseComplete" and
    .objectRef.resource == "deployments" and .objectRef.name == "checkout" and .verb == "patch" and
    (.userAgent | startswith("kubectl")) and .stageTimestamp > $since) | .stageTimestamp' "$CLUSTER/audit.log")
first=$(sed -n 1p <<<"$set_backs")
last=$(sed -n 2p <<<"$set_backs")
deployment_writes=$(gk_writes_since "$first" | grep ' deployments/ ')
repairs=$(grep -c ' 200$' <<<"$deployment_writes")
refused=$(grep -c ' 409$' <<<"$deployment_writes")
# One write: a reconcile woken by the controller's status update of the
# set-back generation, before the watch brought the repair, used to apply the
# same fields again. Such a write now carries the older resourceVersion and
# is refused (409), writing nothing.
expect "gracekeeper repaired the first set-back with one write (audit log)" "$repairs" 1
expect "...any other write of it was refused by its resourceVersion precondition (409: $refused)" \
  "$(grep -c . <<<"$deployment_writes")" "$((repairs + refused))"
echo "# gracekeeper's writes of the Deployment after the first set-back: $repairs applied, $refused refused (409)"
expect "no gracekeeper write of the Deployment after the second set-back (audit log)" \
  "$(gk_writes_since "$last" | grep -c ' deployments/ ')" 0
after=$(date -u -d "@$(($(date -d "$last" +%s) + 3))" +%Y-%m-%dT%H:%M:%S.000000Z)
expect "nor any Event later than 2-3 s after it: only the FieldFight report" \
  "$(gk_writes_since "$after" | grep -c ' events/ ')" 0
echo "# gracekeeper's writes after the second set-back: $(gk_writes_since "$last" | awk '{ print $1, $2 }' | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
# Rollouts. Three pod templates exist: the manifest's, the tuned one, and
# the manifest's with gracekeeper's preStop kept (kubectl's three-way merge
# removes only what it applied): the Deployment controller made a
# ReplicaSet for each it saw, and reuses them when a template comes back.
# Its revision counts the template changes it saw (a set-back repaired in
# milliseconds may be coalesced); the generation counts every change stored.
rs=$(replicasets checkout)
echo "# final: generation $(generation checkout), revision $(revision checkout), $rs ReplicaSets"
expect "generation 5 (create, tune, set-back, repair, set-back), unchanged since" "$(generation checkout)" 5
[ "$rs" -ge 2 ] && [ "$rs" -le 3 ] && ok "$rs ReplicaSets (at most one per template)" || not_ok "$rs ReplicaSets"
expect "no ReplicaSet created later than 2-3 s after the second set-back (audit log)" \
  "$(jq -r --arg since "$after" 'select(.stage == "ResponseComplete" and .verb == "create" and
      .objectRef.resource == "replicasets" and .objectRef.namespace == "'"$NS"'" and
      .stageTimestamp > $since) | .objectRef.name' "$CLUSTER/audit.log" | wc -l)" 0
[ "$(revision checkout)" -le 5 ] && ok "revision $(revision checkout) <= 5" || not_ok "revision $(revision checkout)"
expect "left as the manifest has it (preStop kept, grace 30, 25%/25%)" "$(settings "$NS" checkout)" "6 30 25% 25%"

stop_operator
expect "the operator exits 0 on SIGTERM" "$OP_EXIT" 0
OP_PID=""
k delete mutatingwebhookconfiguration "$HOOK" >/dev/null
finish
