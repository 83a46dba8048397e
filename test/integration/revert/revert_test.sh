#!/usr/bin/env bash
# `gracekeeper revert` against the real API server (issue 17, item 4): the
# operator tunes two Deployments created with kubectl; `revert --dry-run`
# changes nothing; `revert` puts back exactly the fields the user had, in one
# request per Deployment (audit log), releases gracekeeper's fields, and the
# operator leaves them alone; a server-side apply of the user's manifest by
# its own field manager then meets no conflict. Then StatefulSets:
# `revert statefulset/NAME` and `revert` without a name put a StatefulSet
# back the same way and never write its strategy.
#
# usage: test/integration/revert/revert_test.sh GRACEKEEPER_BINARY [CLUSTER_DIR]
#   Without CLUSTER_DIR the script starts its own control plane and stops it on exit.
#
# Uses namespace rv-user. Output: `ok - ...` / `not ok - ...`, then `N passed, M failed`.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
GK="${1:?usage: revert_test.sh GRACEKEEPER_BINARY [CLUSTER_DIR]}"
CLUSTER="${2:-}"
. "$ROOT/test/integration/operator/lib.sh"
work_dir
[ -n "$CLUSTER" ] || start_cluster "$WORK/cluster"
NS=rv-user

cleanup() {
  [ -n "${OP_PID:-}" ] && kill -KILL "$OP_PID" 2>/dev/null
  k delete namespace "$NS" --wait=false >/dev/null 2>&1
}
show_logs_on_failure 20
on_exit cleanup

k apply --server-side -f "$ROOT/crds/shutdownpolicies.gracekeeper.dev.yaml" >/dev/null
k wait --for condition=established crd/shutdownpolicies.gracekeeper.dev >/dev/null
k create namespace "$NS" >/dev/null && serve "$NS"
k apply -f - >/dev/null <<YAML
apiVersion: gracekeeper.dev/v1alpha1
kind: ShutdownPolicy
metadata: {name: default, namespace: $NS}
spec:
  propagation: {source: Static, staticSeconds: 4}
YAML

# The user's manifest: a grace of its own (40 s), its own strategy, no hook.
cat >"$WORK/checkout.yaml" <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: checkout
  namespace: $NS
  annotations: {gracekeeper.dev/enabled: "true", team: shop}
spec:
  replicas: 3
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 2, maxUnavailable: 1}}
  selector: {matchLabels: {app: checkout}}
  template:
    metadata: {labels: {app: checkout, served: "yes"}}
    spec:
      terminationGracePeriodSeconds: 40
      containers:
      - name: app
        image: app:1
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /ready, port: 8080}}
YAML
k create -f "$WORK/checkout.yaml" >/dev/null
deployment "$NS" payments "$OPTED"  # grace 30, 25 %/25 %, no hook (lib.sh)
deployment "$NS" plain '{}'         # not opted in: never touched
spec_of() { k get deployment -n "$NS" "$1" -o json | jq -cS .spec; }
for d in checkout payments plain; do spec_of "$d" >"$WORK/$d.spec"; done
rv_plain=$(jp deployment "$NS" plain '{.metadata.resourceVersion}')

# 1. The operator tunes, and records the user's values.
start_operator op
eventually 20 settings_are "$NS" checkout "6 46 0 2" &&
  eventually 20 settings_are "$NS" payments "6 46 0 1" &&
  ok "the operator tuned both Deployments" ||
  not_ok "tuned: checkout '$(settings "$NS" checkout)', payments '$(settings "$NS" payments)'"
applied=$(jp deployment "$NS" checkout '{.metadata.annotations.gracekeeper\.dev/applied}')
expect "the annotation records the user's values" "$(jq -cS .user <<<"$applied")" \
  '{"grace":40,"maxSurge":2,"maxUnavailable":1,"preStop":{"app":null}}'
echo "# applied annotation: ${#applied} bytes, of which the user's values $((${#applied} - $(jq -c 'del(.user)' <<<"$applied" | tr -d '\n' | wc -c)))"

# 2. --dry-run prints the changes and stores nothing.
rv_before=$(jp deployment "$NS" checkout '{.metadata.resourceVersion}')
since=$(now_rfc3339)
"$GK" revert --kubeconfig "$KUBECONFIG" -n "$NS" --dry-run checkout >"$WORK/dry.out" 2>"$WORK/dry.err"
expect "revert --dry-run exits 0" "$?" 0
grep -q "terminationGracePeriodSeconds: 46s -> 40s" "$WORK/dry.out" &&
  grep -q "strategy: RollingUpdate maxSurge=2 maxUnavailable=0 -> RollingUpdate maxSurge=2 maxUnavailable=1" "$WORK/dry.out" &&
  grep -q "containers\[app\].preStop: sleep 6s -> none" "$WORK/dry.out" &&
  grep -q "dry run" "$WORK/dry.out" &&
  ok "--dry-run prints field: from -> to" || not_ok "--dry-run output: $(cat "$WORK/dry.out" "$WORK/dry.err")"
sleep 1
expect "--dry-run stores nothing (resourceVersion)" \
  "$(jp deployment "$NS" checkout '{.metadata.resourceVersion}')" "$rv_before"
revert_requests() {  # "verb name dryRun" of revert's requests since $1
  jq -r --arg since "$1" 'select(.stage == "ResponseComplete" and .userAgent == "gracekeeper-revert"
      and .stageTimestamp > $since) |
      "\(.verb) \(.objectRef.name // "-") \(.requestURI | test("dryRun=All")) \(.responseStatus.code)"' \
    "$CLUSTER/audit.log"
}
expect "--dry-run: one get and one patch sent with dryRun=All" \
  "$(revert_requests "$since" | sort | tr '\n' ';')" "get checkout false 200;patch checkout true 200;"

# 3. revert (all tuned Deployments of the namespace), with the operator running.
since=$(now_rfc3339)
"$GK" revert --kubeconfig "$KUBECONFIG" --namespace "$NS" >"$WORK/revert.out" 2>"$WORK/revert.err"
expect "revert exits 0" "$?" 0
grep -q "revert: 2 Deployment(s) and 0 StatefulSet(s) reverted, 0 failed" "$WORK/revert.out" &&
  ok "revert names both Deployments" || not_ok "revert output: $(cat "$WORK/revert.out" "$WORK/revert.err")"
sleep 1
expect "revert: one write per Deployment (audit log)" \
  "$(revert_requests "$since" | grep -v '^get\|^list' | sort | tr '\n' ';')" \
  "patch checkout false 200;patch payments false 200;"
for d in checkout payments; do
  expect "$d: the spec is exactly the user's" "$(spec_of "$d")" "$(cat "$WORK/$d.spec")"
  expect "$d: gracekeeper's annotations gone, the user's kept" \
    "$(k get deployment -n "$NS" "$d" -o json | jq -c '.metadata.annotations // {} | keys')" \
    "$([ "$d" = checkout ] && echo '["team"]' || echo '[]')"
  expect "$d: gracekeeper owns no field" \
    "$(k get deployment -n "$NS" "$d" -o json --show-managed-fields | jq -c '[.metadata.managedFields[].manager] | map(select(. == "gracekeeper")) | length')" 0
done
expect "plain: not touched" "$(jp deployment "$NS" plain '{.metadata.resourceVersion}')" "$rv_plain"
since_operator=$(now_rfc3339)
sleep 3
expect "the operator writes nothing to the reverted Deployments" \
  "$(gk_writes_since "$since_operator" | grep -c ' deployments/ ')" 0
stop_operator
OP_PID=""

# 4. The user's own server-side apply of the original manifest meets no conflict.
if k apply --server-side --field-manager=the-user -f "$WORK/checkout.yaml" >"$WORK/ssa.out" 2>&1; then
  ok "server-side apply by the user's manager: no conflict"
else
  not_ok "server-side apply by the user's manager: $(cat "$WORK/ssa.out")"
fi
expect "after the user's apply the spec (pod template included) is still the user's" "$(spec_of checkout)" "$(cat "$WORK/checkout.spec")"
# (It adds gracekeeper.dev/enabled back, which bumps the generation; the pod
# template is unchanged, so no rollout.)

# 5. Nothing left to revert; a missing Deployment is exit 1; bad usage is exit 2.
"$GK" revert --kubeconfig "$KUBECONFIG" -n "$NS" checkout >"$WORK/again.out" 2>&1
expect "a second revert exits 0" "$?" 0
grep -q "nothing to revert" "$WORK/again.out" && ok "a second revert has nothing to do" ||
  not_ok "second revert: $(cat "$WORK/again.out")"
"$GK" revert --kubeconfig "$KUBECONFIG" -n "$NS" absent >"$WORK/absent.out" 2>&1
expect "revert of a missing Deployment exits 1" "$?" 1
"$GK" revert --kubeconfig "$KUBECONFIG" --bogus >/dev/null 2>&1
expect "revert with an unknown flag exits 2" "$?" 2
"$GK" revert --kubeconfig "$KUBECONFIG" -n "$NS" daemonset/checkout >"$WORK/kind.out" 2>&1
expect "revert of another kind exits 2" "$?" 2
grep -q 'not "daemonset"' "$WORK/kind.out" && ok "revert of another kind names it" ||
  not_ok "revert daemonset/checkout: $(cat "$WORK/kind.out")"

# 6. StatefulSets. The operator is stopped: the test writes what the operator
# writes when it tunes one, by its field manager (server-side apply): grace 46, a
# preStop sleep of 6 s, the applied annotation recording the user's values.
# It never writes a StatefulSet's updateStrategy, so none is recorded.
tune_by_hand() {  # tune_by_hand KIND NAME USER-JSON
  local applied
  applied=$(jq -cn --argjson user "$3" --arg time "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    '{policy: "default", preStop: 6, grace: 46, graceOwned: true, propagation: 4,
      containers: ["app"], waits: {app: 6}, time: $time, user: $user}')
  jq -n --arg kind "$1" --arg name "$2" --arg ns "$NS" --arg applied "$applied" \
    '{apiVersion: "apps/v1", kind: $kind,
      metadata: {name: $name, namespace: $ns, annotations: {"gracekeeper.dev/applied": $applied}},
      spec: {template: {spec: {terminationGracePeriodSeconds: 46,
        containers: [{name: "app", lifecycle: {preStop: {sleep: {seconds: 6}}}}]}}}}' |
    k apply --server-side --force-conflicts --field-manager=gracekeeper -f - >/dev/null
}
statefulset() {  # statefulset NAME ANNOTATIONS-JSON: the user's, grace 40, no hook
  k create -f - >/dev/null <<JSON
{"apiVersion":"apps/v1","kind":"StatefulSet",
 "metadata":{"name":"$1","namespace":"$NS","annotations":$2},
 "spec":{"replicas":2,"serviceName":"$1","selector":{"matchLabels":{"app":"$1"}},
  "template":{"metadata":{"labels":{"app":"$1","served":"yes"}},
   "spec":{"terminationGracePeriodSeconds":40,
    "containers":[{"name":"app","image":"app:1","ports":[{"containerPort":5432}],
      "readinessProbe":{"tcpSocket":{"port":5432}}}]}}}}
JSON
}
sts_spec() { k get statefulset -n "$NS" "$1" -o json | jq -cS .spec; }
owned_by_gracekeeper() {  # how many managedFields entries of a StatefulSet are gracekeeper's
  k get statefulset -n "$NS" "$1" -o json --show-managed-fields |
    jq -c '[.metadata.managedFields[].manager] | map(select(. == "gracekeeper")) | length'
}
statefulset ledger '{"gracekeeper.dev/enabled":"true","team":"ledger"}'
statefulset cache '{}'  # not opted in: never touched
deployment "$NS" orders "$OPTED"
sts_spec ledger >"$WORK/ledger.spec"
spec_of orders >"$WORK/orders.spec"
rv_cache=$(jp statefulset "$NS" cache '{.metadata.resourceVersion}')
tune_by_hand StatefulSet ledger '{"grace":40,"preStop":{"app":null}}'
# (orders has an empty `lifecycle: {}` of its own: recorded as {}, see lib.sh)
tune_by_hand Deployment orders '{"grace":30,"preStop":{"app":{}}}'
expect "ledger: tuned as the operator would (grace, hook, owners)" \
  "$(k get statefulset -n "$NS" ledger -o json | jq -c '[.spec.template.spec.terminationGracePeriodSeconds,
     .spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds]') $(owned_by_gracekeeper ledger)" \
  '[46,6] 1'

# 6a. One StatefulSet by name.
rv_orders=$(jp deployment "$NS" orders '{.metadata.resourceVersion}')
since=$(now_rfc3339)
"$GK" revert --kubeconfig "$KUBECONFIG" -n "$NS" statefulset/ledger >"$WORK/sts.out" 2>"$WORK/sts.err"
expect "revert statefulset/ledger exits 0" "$?" 0
grep -q "^StatefulSet $NS/ledger:" "$WORK/sts.out" &&
  grep -q "terminationGracePeriodSeconds: 46s -> 40s" "$WORK/sts.out" &&
  grep -q "containers\[app\].preStop: sleep 6s -> none" "$WORK/sts.out" &&
  ! grep -qi "strategy" "$WORK/sts.out" &&
  grep -q "revert: 0 Deployment(s) and 1 StatefulSet(s) reverted, 0 failed" "$WORK/sts.out" &&
  ok "revert statefulset/ledger names the StatefulSet and its fields, no strategy" ||
  not_ok "revert statefulset/ledger output: $(cat "$WORK/sts.out" "$WORK/sts.err")"
sleep 1
expect "revert statefulset/ledger: one write (audit log)" \
  "$(gk_writes_since "$since" | sort | tr '\n' ';')" "patch statefulsets/ ledger 200;"
expect "ledger: the spec is exactly the user's (updateStrategy included)" \
  "$(sts_spec ledger)" "$(cat "$WORK/ledger.spec")"
expect "ledger: gracekeeper's annotations gone, the user's kept" \
  "$(k get statefulset -n "$NS" ledger -o json | jq -c '.metadata.annotations // {} | keys')" '["team"]'
expect "ledger: gracekeeper owns no field" "$(owned_by_gracekeeper ledger)" 0
expect "orders: not touched by revert statefulset/ledger" \
  "$(jp deployment "$NS" orders '{.metadata.resourceVersion}')" "$rv_orders"
"$GK" revert --kubeconfig "$KUBECONFIG" -n "$NS" sts/absent >"$WORK/sts-absent.out" 2>&1
expect "revert of a missing StatefulSet exits 1" "$?" 1
grep -q "StatefulSet $NS/absent:" "$WORK/sts-absent.out" && ok "the missing StatefulSet is named" ||
  not_ok "revert sts/absent: $(cat "$WORK/sts-absent.out")"

# 6b. Without a name: the tuned Deployment and the tuned StatefulSet.
k annotate statefulset -n "$NS" ledger gracekeeper.dev/enabled=true >/dev/null
tune_by_hand StatefulSet ledger '{"grace":40,"preStop":{"app":null}}'
since=$(now_rfc3339)
"$GK" revert --kubeconfig "$KUBECONFIG" -n "$NS" >"$WORK/all.out" 2>"$WORK/all.err"
expect "revert without a name exits 0" "$?" 0
grep -q "^Deployment $NS/orders:" "$WORK/all.out" &&
  grep -q "^StatefulSet $NS/ledger:" "$WORK/all.out" &&
  grep -q "revert: 1 Deployment(s) and 1 StatefulSet(s) reverted, 0 failed" "$WORK/all.out" &&
  ok "revert without a name reverts the Deployment and the StatefulSet" ||
  not_ok "revert without a name: $(cat "$WORK/all.out" "$WORK/all.err")"
sleep 1
expect "revert without a name: one write per object (audit log)" \
  "$(gk_writes_since "$since" | sort | tr '\n' ';')" \
  "patch deployments/ orders 200;patch statefulsets/ ledger 200;"
expect "ledger: the user's spec again" "$(sts_spec ledger)" "$(cat "$WORK/ledger.spec")"
expect "orders: the spec is exactly the user's" "$(spec_of orders)" "$(cat "$WORK/orders.spec")"
expect "ledger and orders: no gracekeeper annotation left" \
  "$(for o in statefulset/ledger deployment/orders; do k get -n "$NS" "$o" -o json |
       jq -c '.metadata.annotations // {} | keys | map(select(startswith("gracekeeper.dev/")))'; done |
     tr '\n' ' ')" "[] [] "
expect "cache: not touched" "$(jp statefulset "$NS" cache '{.metadata.resourceVersion}')" "$rv_cache"

finish
