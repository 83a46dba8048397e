#!/usr/bin/env bash
# `gracekeeper revert` against the real API server (issue 17, item 4): the
# operator tunes two Deployments created with kubectl; `revert --dry-run`
# changes nothing; `revert` puts back exactly the fields the user had, in one
# request per Deployment (audit log), releases gracekeeper's fields, and the
# operator leaves them alone; a server-side apply of the user's manifest by
# its own field manager then meets no conflict.
#
# usage: test/integration/revert/revert_test.sh GRACEKEEPER_BINARY [CLUSTER_DIR]
#   Without CLUSTER_DIR the script starts its own control plane and stops it on exit.
#
# Uses namespace rv-user. Output: `ok - ...` / `not ok - ...`, then `N passed, M failed`.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
GK="${1:?usage: revert_test.sh GRACEKEEPER_BINARY [CLUSTER_DIR]}"
CLUSTER="${2:-}"
WORK="$(mktemp -d)"
if [ -z "$CLUSTER" ]; then
  CLUSTER="$WORK/cluster"
  OWN_CLUSTER=1
  "$ROOT/test/cluster/up" "$CLUSTER" --owner-pid $$ >"$WORK/up.log" 2>&1 || {
    cat "$WORK/up.log"
    echo "0 passed, 1 failed"
    exit 1
  }
fi
. "$ROOT/test/integration/operator/lib.sh"
NS=rv-user

cleanup() {
  [ -n "${OP_PID:-}" ] && kill -KILL "$OP_PID" 2>/dev/null
  k delete namespace "$NS" --wait=false >/dev/null 2>&1
  if [ "$FAILED" -gt 0 ]; then
    for f in "$WORK"/*.log; do echo "# --- $f (last 20 lines)"; tail -20 "$f" | note; done
  fi
  [ -n "${OWN_CLUSTER:-}" ] && "$ROOT/test/cluster/down" "$CLUSTER" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

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
wait_for 20 settings_are "$NS" checkout "6 46 0 2" &&
  wait_for 20 settings_are "$NS" payments "6 46 0 1" &&
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
grep -q "revert: 2 Deployment(s) reverted, 0 failed" "$WORK/revert.out" &&
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

finish
