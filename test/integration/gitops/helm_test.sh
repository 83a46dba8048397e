#!/usr/bin/env bash
# Helm deploys with the admission webhook on, against the real API server
# (issue 17): an app chart (chart/ here) whose Deployment names the grace
# (30 s) and a 25%/25% strategy, installed with `helm install`, tuned by the
# reconciler; then the webhook is registered and
#   (a) `helm upgrade` with the chart unchanged: the stored Deployment keeps
#       the budget, no new ReplicaSet, no new revision;
#   (b) `helm upgrade` with a new image: keeps the budget, exactly one new
#       ReplicaSet and one new revision;
# each with the webhook's mutation in the audit log and no write by
# gracekeeper afterwards (audit log, and its managedFields entry's time).
# `kubectl diff --server-side` of the release's manifest shows no difference
# in the owned fields. A kube-controller-manager runs (ReplicaSets); no node.
#
# usage: test/integration/gitops/helm_test.sh GRACEKEEPER_BINARY
#   Starts its own control plane and stops it on exit. Helm comes from
#   test/tools/build-helm (cached).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
GK="${1:?usage: helm_test.sh GRACEKEEPER_BINARY}"
. "$ROOT/test/integration/harness.sh"
HELM=$("$ROOT/test/tools/build-helm") || die "test/tools/build-helm failed"
. "$ROOT/test/integration/gitops/lib.sh"
CHART="$ROOT/test/integration/gitops/chart"
h() { "$HELM" "$@"; }

setup_namespace 3600
PORT=$(free_port)
start_operator op --webhook-port "$PORT" --webhook-cert-dir "$CERTS"

# gracekeeper's own entry in the Deployment's managedFields: "operation time".
gk_entry() {
  k get deployment -n "$NS" "$1" -o json --show-managed-fields |
    jq -r '[.metadata.managedFields[] | select(.manager == "gracekeeper") | "\(.operation) \(.time)"] | join(";")'
}

# ------------------------------------------ helm install, tuned by the reconciler
h install checkout "$CHART" -n "$NS" >"$WORK/install.out" 2>&1 &&
  ok "helm install of the app chart" || not_ok "helm install: $(cat "$WORK/install.out")"
eventually 20 settings_are "$NS" checkout "6 46 0 1" &&
  ok "the reconciler tuned the installed Deployment (preStop 6, grace 46, 0/1)" ||
  not_ok "not tuned: '$(settings "$NS" checkout)'"
expect "installed, then tuned: generation 2" "$(generation checkout)" 2
# One ReplicaSet, or two when the Deployment controller saw the installed
# generation before the tune.
eventually 10 replicasets_are checkout 1 || eventually 10 replicasets_are checkout 2
sleep 2
echo "# installed, then tuned: revision $(revision checkout), $(replicasets checkout) ReplicaSet(s)"
entry=$(gk_entry checkout)
[ -n "$entry" ] && ok "gracekeeper owns fields through server-side apply ($entry)" ||
  not_ok "no gracekeeper entry in managedFields"

# ----------------------------------------------------------- the webhook, on
register_webhook "$PORT"
# (No Service selects the probe's pods: it gets no preStop wait, but the
# strategy.)
h template probe "$CHART" -n "$NS" --show-only templates/deployment.yaml >"$WORK/probe.yaml"
probe_mutated() {
  k create --dry-run=server -n "$NS" -f "$WORK/probe.yaml" -o json |
    jq -e '.spec.strategy.rollingUpdate.maxUnavailable == 0' >/dev/null
}
eventually 20 probe_mutated && ok "the API server calls the webhook (a dry-run create is mutated)" ||
  not_ok "the webhook is not called"

# upgrade DESCRIPTION NEW_REPLICASETS HELM_ARGS...: one `helm upgrade`, checked.
upgrade() {
  local what=$1 more=$2 since before_gen before_rev before_rs writes t0 ms
  shift 2
  before_gen=$(generation checkout)
  before_rev=$(revision checkout)
  before_rs=$(replicasets checkout)
  since=$(now_rfc3339)
  t0=$(date +%s%N)
  if ! h upgrade checkout "$CHART" -n "$NS" "$@" >"$WORK/upgrade.out" 2>&1; then
    not_ok "$what: $(cat "$WORK/upgrade.out")"
    return
  fi
  ms=$((($(date +%s%N) - t0) / 1000000))
  ok "$what: helm upgrade succeeded (${ms} ms)"
  expect "$what: stored with the budget" "$(settings "$NS" checkout)" "6 46 0 1"
  eventually 10 revision_is checkout "$((before_rev + more))"
  eventually 10 replicasets_are checkout "$((before_rs + more))"
  sleep 3 # time for another ReplicaSet, or a gracekeeper write, to show
  expect "$what: generation $before_gen -> $((before_gen + more))" "$(generation checkout)" "$((before_gen + more))"
  expect "$what: $more new ReplicaSet(s), $more new revision(s)" \
    "$(replicasets checkout) $(revision checkout)" "$((before_rs + more)) $((before_rev + more))"
  writes=$(audit_deployment_writes checkout "$since")
  echo "# $what: Deployment writes (audit): $(tr '\n' ';' <<<"$writes")"
  grep -q '^patch Helm mutated$' <<<"$writes" &&
    ok "$what: the audit log shows Helm's patch mutated by the webhook" ||
    not_ok "$what: no mutated Helm patch in the audit log: '$writes'"
  expect "$what: no gracekeeper write afterwards (audit log)" \
    "$(gk_writes_since "$since" | grep -c ' deployments/ ')" 0
  expect "$what: gracekeeper's managedFields entry unchanged" "$(gk_entry checkout)" "$entry"
}
upgrade "(a) helm upgrade, chart unchanged" 0
upgrade "(b) helm upgrade --set image=app:2" 1 --set image=app:2
expect "the release is at revision 3, deployed" \
  "$(h status checkout -n "$NS" -o json | jq -r '"\(.version) \(.info.status)"')" "3 deployed"
expect "the new image is stored" \
  "$(jp deployment "$NS" checkout '{.spec.template.spec.containers[0].image}')" app:2

# ------------------------------------------------------- server-side diff
h get manifest checkout -n "$NS" >"$WORK/manifest.yaml"
grep -q 'terminationGracePeriodSeconds: 30' "$WORK/manifest.yaml" &&
  ok "the release's manifest names grace 30 and the 25% strategy" || not_ok "manifest: $(cat "$WORK/manifest.yaml")"
k diff --server-side --force-conflicts -n "$NS" -f "$WORK/manifest.yaml" >"$WORK/diff.out" 2>&1
rc=$?
changed=$(grep -cE '^[-+] ' "$WORK/diff.out")
echo "# kubectl diff --server-side: exit $rc, $changed changed lines"
note <"$WORK/diff.out"
[ "$rc" -le 1 ] && ok "kubectl diff --server-side of the release's manifest runs (exit $rc)" ||
  not_ok "kubectl diff failed: $(cat "$WORK/diff.out")"
grep -qE '^[-+] .*(terminationGracePeriodSeconds|maxUnavailable|maxSurge|preStop|sleep|seconds:)' "$WORK/diff.out" &&
  not_ok "kubectl diff --server-side shows owned fields" ||
  ok "kubectl diff --server-side: no difference in the owned fields ($changed changed lines)"

admissions=$(curl -s "http://127.0.0.1:$OP_PORT/metrics" |
  awk '$1 == "gracekeeper_webhook_admissions_total{outcome=\"patched\"}" { print $2 }')
echo "# gracekeeper_webhook_admissions_total{outcome=\"patched\"} $admissions"
stop_operator
expect "the operator exits 0 on SIGTERM" "$OP_EXIT" 0
OP_PID=""
h uninstall checkout -n "$NS" >/dev/null 2>&1
k delete mutatingwebhookconfiguration "$HOOK" >/dev/null
finish
