#!/usr/bin/env bash
# The chart's monitoring objects against the real API server: the Grafana
# dashboard's ConfigMap, the PrometheusRule and the ServiceMonitor accepted by a
# server-side dry run, the last two once the prometheus-operator CRDs (pinned,
# from its Go module: test/tools/prometheus-operator-crds) are installed; and
# the CRD's own validation refusing a broken rule. The CRDs this test installs
# are removed at the end.
#
# usage: test/integration/ship/alerts_server_test.sh CLUSTER_DIR
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
CLUSTER="${1:?usage: alerts_server_test.sh CLUSTER_DIR}"
. "$ROOT/test/integration/ship/lib.sh"
helm_binary
CRDS=$("$ROOT/test/tools/prometheus-operator-crds") || die "test/tools/prometheus-operator-crds failed"
export KUBECONFIG="$CLUSTER/kubeconfig"
work_dir
NS=gracekeeper-system
CREATED=()
cleanup() {
  local crd
  for crd in "${CREATED[@]}"; do k delete crd "$crd" --ignore-not-found --wait=false >/dev/null 2>&1; done
}
on_exit cleanup

# Namespaces stay (without kube-controller-manager a deleted one never goes).
for ns in "$NS" monitoring; do
  k get namespace "$ns" >/dev/null 2>&1 || k create namespace "$ns" >/dev/null
done

# dry_run WHAT FILE [want-refused]: server-side apply, dry run.
dry_run() {
  if k apply --server-side --field-manager=ship-alerts --force-conflicts --dry-run=server -f "$2" >"$WORK/apply.out" 2>&1; then
    ok "$1: $(grep -c 'serverside-applied (server dry run)' "$WORK/apply.out") object(s) accepted (server-side dry run)"
  else
    not_ok "$1: refused"; note <"$WORK/apply.out"
  fi
}
refused() {  # refused WHAT FILE PATTERN: the server refuses, saying PATTERN
  if k apply --server-side --field-manager=ship-alerts --dry-run=server -f "$2" >"$WORK/apply.out" 2>&1; then
    not_ok "$1: accepted"
  elif grep -qE "$3" "$WORK/apply.out"; then
    ok "$1: refused ($(grep -oE "$3" "$WORK/apply.out" | head -n 1))"
  else
    not_ok "$1: refused, but not for '$3'"; note <"$WORK/apply.out"
  fi
}
HT=("$HELM" template gracekeeper "$CHART" --namespace "$NS")
show() { "${HT[@]}" --set prometheusRule.enabled=true --set dashboard.enabled=true --set serviceMonitor.enabled=true "$@"; }

show --show-only templates/dashboard.yaml >"$WORK/dashboard.yaml"
show --show-only templates/prometheusrule.yaml >"$WORK/rule.yaml"
show --show-only templates/servicemonitor.yaml >"$WORK/servicemonitor.yaml"
dry_run "the dashboard's ConfigMap" "$WORK/dashboard.yaml"
show --set dashboard.namespace=monitoring --show-only templates/dashboard.yaml >"$WORK/dashboard-monitoring.yaml"
dry_run "the dashboard's ConfigMap in dashboard.namespace (monitoring)" "$WORK/dashboard-monitoring.yaml"

# Without the CRDs the API server has no such kind: the dry runs below are
# real checks, not a server that takes anything.
if k get crd prometheusrules.monitoring.coreos.com >/dev/null 2>&1; then
  echo "# prometheusrules.monitoring.coreos.com is already installed; the no-CRD check is skipped"
else
  refused "the PrometheusRule without its CRD" "$WORK/rule.yaml" 'no matches for kind "PrometheusRule"|resource mapping not found'
fi

for f in "$CRDS"/monitoring.coreos.com_prometheusrules.yaml "$CRDS"/monitoring.coreos.com_servicemonitors.yaml; do
  name=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["metadata"]["name"])' "$f")
  k get crd "$name" >/dev/null 2>&1 || CREATED+=("$name")
  if k apply --server-side --field-manager=ship-alerts -f "$f" >"$WORK/crd.out" 2>&1 &&
     k wait --for condition=established --timeout=30s "crd/$name" >/dev/null 2>&1; then
    ok "CRD $name ($(basename "$(dirname "$CRDS")")) installed and established"
  else
    not_ok "CRD $name"; note <"$WORK/crd.out"
  fi
done

dry_run "the PrometheusRule (defaults)" "$WORK/rule.yaml"
show --set prometheusRule.namespace=monitoring --set prometheusRule.labels.release=kube-prometheus-stack \
  --set prometheusRule.ruleLabels.team=platform --set leaderElection.enabled=false --set replicas=1 \
  --set webhook.enabled=false --show-only templates/prometheusrule.yaml >"$WORK/rule-single.yaml"
dry_run "the PrometheusRule (namespace monitoring, labels, one replica, no webhook)" "$WORK/rule-single.yaml"
dry_run "the ServiceMonitor (honorLabels)" "$WORK/servicemonitor.yaml"
show >"$WORK/all.yaml"
dry_run "the whole chart with the three monitoring switches on" "$WORK/all.yaml"

# The CRD's schema is enforced: a `for` that is no Prometheus duration.
python3 - "$WORK/rule.yaml" >"$WORK/rule-bad.yaml" <<'PY'
import sys, yaml
r = yaml.safe_load(open(sys.argv[1]))
r["spec"]["groups"][0]["rules"][1]["for"] = "15 minutes"
print(yaml.safe_dump(r))
PY
refused "a PrometheusRule whose for is '15 minutes'" "$WORK/rule-bad.yaml" 'spec.groups\[0\].rules\[1\].for[^,]*'

finish
