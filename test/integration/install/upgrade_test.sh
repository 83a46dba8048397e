#!/usr/bin/env bash
# gracekeeper upgraded without losing admissions (docs/operator.md,
# "Upgrading gracekeeper without losing admissions"), on the lab's node:
#   upgrade_test.sh LAB_APP_BINARY
# env: UPGRADE_HELM_SET: more `--set` values for both helm commands, e.g.
#      "shutdown.preStopSleepSeconds=0,shutdown.lameDuckSeconds=0,terminationGracePeriodSeconds=11"
#      for gracekeeper's shutdown before it had a lame duck (a baseline run).
#
# The image (hack/image) and the chart (two replicas, the webhook on) are
# installed. An opted-in Deployment of the test app, labelled for the
# webhook, is deployed again every 2 s (kubectl apply with a new template)
# while gracekeeper itself is rolled twice: `kubectl rollout restart`, then
# `helm upgrade`. Then:
#   - every ReplicaSet those deploys made carries the budget (preStop sleep 6,
#     grace 26): the webhook mutated each deploy in its own request;
#   - the API server's audit log holds no failed-open admission
#     (failed-open.mutation.webhook.admission.k8s.io) of the Deployment;
#   - there is no second rollout: one ReplicaSet per deploy, and no write of
#     the operator's ServiceAccount to the Deployment.
# Meanwhile a probe asks for an admission every 0.2 s (a server-side dry-run
# create of the same Deployment under another name, which the webhook
# mutates like any create): every answer must carry the budget.
# Figures: deploys, probes, the operator's pods replaced. Last line
# "N passed, M failed". Root; one node lab per machine.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
C="$REPO/test/cluster"
. "$C/lib.sh"
APP_BIN="${1:?usage: upgrade_test.sh LAB_APP_BINARY}"
[ "$(id -u)" = 0 ] || { echo "the node needs root"; echo "0 passed, 1 failed"; exit 1; }
. "$REPO/test/integration/harness.sh"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/gk-upgrade-test.XXXXXX")"
LAB="$TMP/lab"
REDEPLOY_PID="" PROBE_PID=""
teardown() {
  touch "$TMP/stop"
  for pid in $REDEPLOY_PID $PROBE_PID; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  if [ -f "$LAB/pids" ]; then
    "$C/down" "$LAB" >"$TMP/down.log" 2>&1 || { not_ok "down"; cat "$TMP/down.log"; }
  fi
  if [ "$FAILED" -eq 0 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$TMP"; else echo "kept $TMP"; fi
}
on_exit teardown

HELM=$("$REPO/test/tools/build-helm") || { not_ok "test/tools/build-helm"; exit 1; }
ARCHIVE=$("$REPO/hack/image" 2>"$TMP/image.log" | tail -n 1) || { not_ok "hack/image"; tail -n 20 "$TMP/image.log"; exit 1; }
if ! GK_LAB_APP="$APP_BIN" "$C/up" "$LAB" --with-node --image "$ARCHIVE" --owner-pid $$ >"$TMP/up.log" 2>&1; then
  not_ok "up --with-node --image"; tail -n 30 "$TMP/up.log"; exit 1
fi
. "$LAB/env"
E="$LAB/exec"
K_EXEC=$E K_REQUEST_TIMEOUT=  # k: kubectl inside the lab, requests unbounded
h() { "$E" "$HELM" "$@"; }
NS=gracekeeper-system
HELM_SET=(--set image.repository=gracekeeper.test/gracekeeper)
[ -n "${UPGRADE_HELM_SET:-}" ] && HELM_SET+=(--set "$UPGRADE_HELM_SET")
SA="system:serviceaccount:$NS:gracekeeper"

if ! h install gracekeeper "$REPO/charts/gracekeeper" -n "$NS" --create-namespace \
  "${HELM_SET[@]}" --wait --timeout 120s >"$TMP/install.out" 2>&1; then
  not_ok "helm install"; cat "$TMP/install.out"; exit 1
fi
has_ca_bundle() { [ -n "$(k get mutatingwebhookconfiguration gracekeeper -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ]; }
check "helm install: two replicas, the webhook's caBundle patched" eventually 60 has_ca_bundle

k create namespace shop >/dev/null
k apply -f - >/dev/null <<EOF
apiVersion: gracekeeper.dev/v1alpha1
kind: ShutdownPolicy
metadata: {name: default, namespace: shop}
spec:
  propagation: {source: Static, staticSeconds: 4}
  drainSeconds: 10
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
EOF
# web N: the Deployment as its owner deploys it, the Nth time (a new
# template each time). Its grace (20 s) is below the budget; every old
# ReplicaSet is kept, so that each deploy's can be read.
web() {
  cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  labels: {gracekeeper.dev/enabled: "true"}
  annotations: {gracekeeper.dev/enabled: "true", gracekeeper.dev/drain-seconds: "10"}
spec:
  replicas: 1
  revisionHistoryLimit: 1000
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations: {deploy: "$1"}
    spec:
      terminationGracePeriodSeconds: 20
      containers:
      - name: app
        image: $LAB_APP_IMAGE
        imagePullPolicy: Never
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /ready, port: 8080}, periodSeconds: 1}
EOF
}
# Deployed as GitOps tools do, with server-side apply: a deploy admitted
# without the budget (failed open) would take it off the template, since
# the deployer's manifest does not carry it.
deploy() { web "$1" | k apply --server-side --field-manager=deployer -f - >/dev/null; }
deploy 0 || not_ok "the first deploy of web"
check "the first deploy is admitted with the budget (generation 1)" \
  test "$(k get deploy web -n shop -o jsonpath='{.metadata.generation}')" = 1
k rollout status deploy/web -n shop --timeout=90s >/dev/null 2>&1

# Deploys every 2 s until told to stop; each one's status in deploys.log.
redeploy() {
  local n=1
  while [ ! -e "$TMP/stop" ]; do
    if deploy "$n" 2>>"$TMP/deploys.err"; then echo "$n ok"; else echo "$n failed"; fi
    n=$((n + 1))
    sleep 2
  done >"$TMP/deploys.log"
}
# operator_pods: the operator's pods that are not terminating; only_two:
# no other (the old ones have served their lame duck and exited).
# Probes every 0.2 s until told to stop: "budget", "open" (admitted without
# it) or "refused", a line each in probes.log.
probe() {
  local n=0 out
  web probe | sed 's/^  name: web$/  name: web-probe/' >"$TMP/probe.yaml"
  while [ ! -e "$TMP/stop" ]; do
    n=$((n + 1))
    if out=$(k create --dry-run=server -o json -f "$TMP/probe.yaml" 2>>"$TMP/probes.err"); then
      if jq -e '.spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds == 6' <<<"$out" >/dev/null; then
        echo "$n budget"
      else
        echo "$n open"
      fi
    else
      echo "$n refused"
    fi
    sleep 0.2
  done >"$TMP/probes.log"
}
operator_pods() {
  k get pods -n "$NS" -l app.kubernetes.io/name=gracekeeper -o json |
    jq -r '[.items[] | select(.metadata.deletionTimestamp == null) | .metadata.name] | sort | join(" ")'
}
only_two() { [ "$(k get pods -n "$NS" -l app.kubernetes.io/name=gracekeeper -o json | jq '.items | length')" = 2 ]; }
pods_before=$(operator_pods)
t_start=$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)
redeploy &
REDEPLOY_PID=$!
probe &
PROBE_PID=$!
sleep 4
t0=$(now)
k rollout restart deploy/gracekeeper -n "$NS" >/dev/null
restarted() { k rollout status deploy/gracekeeper -n "$NS" --timeout=180s >"$TMP/restart.out" 2>&1; }
check "kubectl rollout restart of gracekeeper completes" restarted
figure "rollout-restart-seconds $(sub "$(now)" "$t0")"
pods_middle=$(operator_pods)
# The old pods serve their preStop sleep and lame duck, then exit: the
# window in which the API server may still call them.
check "... and the old pods are gone" eventually 120 only_two
figure "rollout-restart-until-old-pods-gone-seconds $(sub "$(now)" "$t0")"
sleep 2
t0=$(now)
upgraded() {
  h upgrade gracekeeper "$REPO/charts/gracekeeper" -n "$NS" "${HELM_SET[@]}" \
    --set logLevel=debug --wait --timeout 180s >"$TMP/upgrade.out" 2>&1
}
check "helm upgrade of gracekeeper completes" upgraded
figure "helm-upgrade-seconds $(sub "$(now)" "$t0")"
pods_after=$(operator_pods)
check "... and the old pods are gone" eventually 120 only_two
figure "helm-upgrade-until-old-pods-gone-seconds $(sub "$(now)" "$t0")"
sleep 2
touch "$TMP/stop"
wait "$REDEPLOY_PID" "$PROBE_PID"
REDEPLOY_PID="" PROBE_PID=""
figure "operator pods: before [$pods_before], after the restart [$pods_middle], after the upgrade [$pods_after]"
check "the restart and the upgrade each replaced both operator pods" bash -c \
  "[ -z \"\$(comm -12 <(tr ' ' '\n' <<<'$pods_before' | sort) <(tr ' ' '\n' <<<'$pods_middle' | sort))\" ] &&
   [ -z \"\$(comm -12 <(tr ' ' '\n' <<<'$pods_middle' | sort) <(tr ' ' '\n' <<<'$pods_after' | sort))\" ]"

deploys=$(grep -c ' ok$' "$TMP/deploys.log")
failed=$(grep -c ' failed$' "$TMP/deploys.log")
figure "deploys during the two rolls: $deploys admitted, $failed refused ($(head -c 300 "$TMP/deploys.err" | tr '\n' ' '))"
check "at least 20 deploys while gracekeeper rolled twice ($deploys)" test "$deploys" -ge 20
check "no deploy refused ($failed)" test "$failed" = 0
probes=$(grep -c . "$TMP/probes.log")
open=$(grep -c ' open$' "$TMP/probes.log")
refused=$(grep -c ' refused$' "$TMP/probes.log")
figure "probes (dry-run creates every 0.2 s): $probes, $open admitted without the budget, $refused refused"
check "at least 50 probes ($probes)" test "$probes" -ge 50
check "every probe was admitted with the budget: $open without it, $refused refused" test "$open" = 0 -a "$refused" = 0

# Every ReplicaSet of web: one per deploy, each with the budget.
k get rs -n shop -l app=web -o json >"$TMP/rs.json"
rs_count=$(jq '.items | length' "$TMP/rs.json")
without=$(jq -r '.items[] | .spec.template.spec as $s
    | select(($s.containers[0].lifecycle.preStop.sleep.seconds // 0) != 6 or $s.terminationGracePeriodSeconds != 26)
    | "\(.metadata.name) deploy \(.spec.template.metadata.annotations.deploy) preStop \($s.containers[0].lifecycle.preStop // "none" | tostring) grace \($s.terminationGracePeriodSeconds)"' \
  "$TMP/rs.json")
check "every ReplicaSet of web carries the budget: preStop sleep 6, grace 26 ($rs_count ReplicaSets)" test -z "$without"
[ -n "$without" ] && head <<<"$without" | note
check "one ReplicaSet per deploy: $rs_count for $((deploys + 1)) deploys (no second rollout)" \
  test "$rs_count" = "$((deploys + 1))"

# The audit log: web's admissions, none failed open, and no write of the
# operator's ServiceAccount to web.
jq -c --arg since "$t_start" 'select(.stage == "ResponseComplete" and .objectRef.resource == "deployments"
    and .objectRef.namespace == "shop" and .objectRef.name == "web" and .requestReceivedTimestamp > $since)' \
  "$AUDIT_LOG" >"$TMP/web-audit.jsonl"
failed_open=$(jq -r 'select(.annotations // {} | keys | any(startswith("failed-open."))) | .auditID' "$TMP/web-audit.jsonl" | grep -c . || true)
mutated=$(jq -r 'select(.annotations // {} | to_entries | any((.key | startswith("mutation.webhook.admission.k8s.io/"))
    and (.value | fromjson? | .mutated == true))) | .auditID' "$TMP/web-audit.jsonl" | grep -c . || true)
figure "web's deploys the webhook mutated (audit log): $mutated"
check "the audit log holds 0 failed-open admissions of web ($failed_open)" test "$failed_open" = 0
check "... and every deploy was mutated by the webhook ($mutated of $deploys)" test "$mutated" -ge "$deploys"
sa_writes=$(jq -r --arg u "$SA" 'select(.user.username == $u and (.verb | test("^(create|update|patch|delete)$")))
    | "\(.verb) \(.objectRef.subresource // "")"' "$TMP/web-audit.jsonl" | grep -c . || true)
check "the operator's ServiceAccount wrote web 0 times (no repair, no second rollout: $sa_writes)" test "$sa_writes" = 0
