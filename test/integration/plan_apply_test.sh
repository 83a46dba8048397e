#!/usr/bin/env bash
# `gracekeeper plan` output must be something a real API server accepts, and
# `gracekeeper check` must read what a real API server returns. Runs against
# the local control plane (test/cluster/up).
#
# usage: test/integration/plan_apply_test.sh GRACEKEEPER_BINARY [CLUSTER_DIR]
#   Without CLUSTER_DIR the script starts its own control plane and stops it on exit.
#
# Output: `ok - ...` / `not ok - ...` per check, then `N passed, M failed`.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
GK="${1:?usage: plan_apply_test.sh GRACEKEEPER_BINARY [CLUSTER_DIR]}"
CLUSTER="${2:-}"
SAMPLES="$ROOT/config/samples"
export SOURCE_DATE_EPOCH=1790000000

. "$ROOT/test/integration/harness.sh"

work_dir
if [ -n "$CLUSTER" ]; then export KUBECONFIG="$CLUSTER/kubeconfig"; else start_cluster "$WORK/cluster"; fi

k apply --server-side -f "$ROOT/crds/shutdownpolicies.gracekeeper.dev.yaml" >/dev/null &&
  k wait --for=condition=Established crd/shutdownpolicies.gracekeeper.dev --timeout=30s >/dev/null ||
  not_ok "CRD installs"
k create namespace shop-prod --dry-run=client -o yaml | k apply -f - >/dev/null

# 1. The articles' Deployment fails check, as a user would run it before deploying.
"$GK" check -f "$SAMPLES/checkout-deployment.yaml" >"$WORK/check-before.txt" 2>&1
expect "check on the sample exits 1" "$?" 1
grep -q "NoPreStopWait" "$WORK/check-before.txt" && grep -q "CapacityDropOnRollout" "$WORK/check-before.txt" &&
  ok "check names NoPreStopWait and CapacityDropOnRollout" ||
  not_ok "check findings: $(cat "$WORK/check-before.txt")"

# 2. plan's output (native sleep action) is accepted by server-side apply as field manager gracekeeper.
"$GK" plan -f "$SAMPLES/checkout-deployment.yaml" -f "$SAMPLES/shutdownpolicy.yaml" >"$WORK/planned.yaml" 2>"$WORK/plan.err"
expect "plan exits 0" "$?" 0
if k apply --server-side --field-manager=gracekeeper -f "$WORK/planned.yaml" >"$WORK/apply.out" 2>&1; then
  ok "the API server accepts plan's output by server-side apply"
else
  not_ok "server-side apply of plan's output: $(cat "$WORK/apply.out")"
fi
get() { k -n shop-prod get deployment checkout -o jsonpath="$1"; }
expect "preStop sleep stored by the server" "$(get '{.spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds}')" 6
expect "grace stored by the server" "$(get '{.spec.template.spec.terminationGracePeriodSeconds}')" 46
expect "maxUnavailable stored by the server" "$(get '{.spec.strategy.rollingUpdate.maxUnavailable}')" 0
managers="$(get '{.metadata.managedFields[*].manager}')"
case " $managers " in *" gracekeeper "*) ok "field manager gracekeeper recorded" ;; *) not_ok "managers: $managers" ;; esac
expect "the sample ShutdownPolicy is stored" "$(k -n shop-prod get sdp default -o jsonpath='{.spec.propagation.staticSeconds}')" 4

# 3. check reads the server's own output (a List with status, managedFields, defaults filled in).
k -n shop-prod get deployments -o yaml >"$WORK/server.yaml"
"$GK" check -f "$WORK/server.yaml" --policy "$SAMPLES/shutdownpolicy.yaml" >"$WORK/check-after.txt" 2>&1
expect "check on the server's List of the planned Deployment exits 0" "$?" 0
"$GK" plan -f "$WORK/server.yaml" -f "$SAMPLES/shutdownpolicy.yaml" >/dev/null 2>"$WORK/replan.err"
grep -q "0 Deployment(s) changed" "$WORK/replan.err" && ok "plan on the server's copy changes nothing" ||
  not_ok "replan: $(cat "$WORK/replan.err")"

# 4. For clusters older than 1.30, the exec form is valid too.
sed 's/name: checkout$/name: checkout-old/' "$SAMPLES/checkout-deployment.yaml" |
  "$GK" plan -f - --kubernetes-version 1.29 2>/dev/null >"$WORK/old.yaml"
if k apply --server-side --field-manager=gracekeeper -f "$WORK/old.yaml" >"$WORK/old.out" 2>&1; then
  expect "exec sleep form stored by the server" \
    "$(k -n shop-prod get deployment checkout-old -o jsonpath='{.spec.template.spec.containers[0].lifecycle.preStop.exec.command}')" \
    '["sleep","15"]'
else
  not_ok "server-side apply of the exec form: $(cat "$WORK/old.out")"
fi

# 5. A second apply of the same plan is a no-op for the server (no new generation).
gen_before="$(get '{.metadata.generation}')"
k apply --server-side --field-manager=gracekeeper -f "$WORK/planned.yaml" >/dev/null 2>&1
expect "re-applying the same plan leaves the generation alone" "$(get '{.metadata.generation}')" "$gen_before"

# 6. A native sidecar and a StatefulSet: the wait goes on the app container
#    only, the sidecar's own sleep is added to the grace (15 + 30 + 5 + 10),
#    a StatefulSet gets wait and grace, and the server accepts both.
cat >"$WORK/workloads.yaml" <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: orders, namespace: shop-prod, annotations: {gracekeeper.dev/enabled: "true"}}
spec:
  replicas: 2
  selector: {matchLabels: {app: orders}}
  template:
    metadata: {labels: {app: orders}}
    spec:
      initContainers:
      - {name: proxy, image: proxy:1, restartPolicy: Always, lifecycle: {preStop: {sleep: {seconds: 5}}}}
      containers:
      - {name: orders, image: orders:1, ports: [{containerPort: 8080}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: ledger, namespace: shop-prod, annotations: {gracekeeper.dev/enabled: "true"}}
spec:
  serviceName: ledger
  replicas: 2
  selector: {matchLabels: {app: ledger}}
  template:
    metadata: {labels: {app: ledger}}
    spec:
      containers:
      - {name: ledger, image: ledger:1, ports: [{containerPort: 8080}]}
YAML
"$GK" plan -f "$WORK/workloads.yaml" >"$WORK/workloads-planned.yaml" 2>/dev/null
if k apply --server-side --field-manager=gracekeeper -f "$WORK/workloads-planned.yaml" >"$WORK/workloads.out" 2>&1; then
  expect "native sidecar: app wait, sidecar's own hook, grace" \
    "$(k -n shop-prod get deployment orders -o jsonpath='{.spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds} {.spec.template.spec.initContainers[0].lifecycle.preStop.sleep.seconds} {.spec.template.spec.terminationGracePeriodSeconds}')" \
    "15 5 60"
  expect "StatefulSet: wait and grace" \
    "$(k -n shop-prod get statefulset ledger -o jsonpath='{.spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds} {.spec.template.spec.terminationGracePeriodSeconds}')" \
    "15 55"
else
  not_ok "server-side apply of a native sidecar and a StatefulSet: $(cat "$WORK/workloads.out")"
fi

# 7. A wait of 0 s writes no hook at all (never `sleep 0`).
printf '%s\n' 'apiVersion: gracekeeper.dev/v1alpha1' 'kind: ShutdownPolicy' \
  'metadata: {name: zero, namespace: shop-prod}' \
  'spec: {propagation: {staticSeconds: 0}, preStop: {minSeconds: 0}}' >"$WORK/zero-policy.yaml"
sed 's/name: checkout$/name: checkout-zero/' "$SAMPLES/checkout-deployment.yaml" |
  "$GK" plan -f - --policy "$WORK/zero-policy.yaml" 2>/dev/null >"$WORK/zero.yaml"
if k apply --server-side --field-manager=gracekeeper -f "$WORK/zero.yaml" >"$WORK/zero.out" 2>&1; then
  expect "zero wait: no preStop hook, grace 40" \
    "$(k -n shop-prod get deployment checkout-zero -o jsonpath='{.spec.template.spec.containers[0].lifecycle.preStop}|{.spec.template.spec.terminationGracePeriodSeconds}')" \
    "|40"
else
  not_ok "server-side apply with a zero wait: $(cat "$WORK/zero.out")"
fi

finish
