#!/usr/bin/env bash
# The operator's end-to-end suite (test/integration/operator/operator_test.sh)
# with the operator authenticated as the chart's ServiceAccount, holding only
# the chart's RBAC: proof that the ClusterRole and the Lease Role grant
# everything `gracekeeper run` does. kubectl in the suite stays admin; only the
# operator gets the ServiceAccount's kubeconfig (GK_OPERATOR_KUBECONFIG).
#
# usage: test/integration/ship/operator_as_sa_test.sh GRACEKEEPER_BINARY
#
# Starts its own control plane: operator_test.sh creates and deletes its op-*
# namespaces, and without kube-controller-manager a deleted namespace never
# finishes terminating, so the suite cannot run twice on one cluster.
#
# Test-only grant: the suite's leader-election case uses
# --leader-election-namespace default, so the chart's Lease Role is also
# rendered into `default` and bound there to the ServiceAccount. The chart
# itself grants Leases in its release namespace only.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
GK="${1:?usage: operator_as_sa_test.sh GRACEKEEPER_BINARY}"
. "$ROOT/test/integration/ship/lib.sh"
helm_binary
work_dir
NS=gracekeeper-system
SA="system:serviceaccount:$NS:gracekeeper"

start_cluster "$WORK/cluster"

k create namespace "$NS" >/dev/null
HT=("$HELM" template gracekeeper "$ROOT/charts/gracekeeper" --namespace "$NS")
"${HT[@]}" --show-only templates/serviceaccount.yaml --show-only templates/clusterrole.yaml \
  --show-only templates/clusterrolebinding.yaml --show-only templates/role.yaml \
  --show-only templates/rolebinding.yaml | k apply -f - >"$WORK/rbac.out" 2>&1 \
  && ok "the chart's RBAC installed: $(awk '{print $1}' "$WORK/rbac.out" | tr '\n' ' ')" \
  || { not_ok "installing the chart's RBAC"; note <"$WORK/rbac.out"; }
# Test-only: the chart's own Lease Role, rendered into `default`, bound to the SA.
"$HELM" template gracekeeper "$ROOT/charts/gracekeeper" --namespace default --show-only templates/role.yaml |
  k apply -f - >/dev/null &&
  k create rolebinding gracekeeper-leader-election -n default --role=gracekeeper-leader-election \
    --serviceaccount="$NS:gracekeeper" >/dev/null &&
  [ "$(k auth can-i --as "$SA" update leases.coordination.k8s.io -n default)" = yes ] \
  && ok "test-only: the Lease Role also bound in default (the suite's --leader-election-namespace)" \
  || not_ok "binding the Lease Role in default"

TOKEN=$("$ROOT/test/cluster/token" "$CLUSTER" "$NS" gracekeeper --duration=2h) && [ -n "$TOKEN" ] \
  && ok "minted a token for $SA" || not_ok "test/cluster/token failed"
SERVER=$(k config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
CA_DATA=$(k config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
SA_KUBECONFIG="$WORK/sa.kubeconfig"
umask 077
cat >"$SA_KUBECONFIG" <<YAML
apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster:
      server: $SERVER
      certificate-authority-data: $CA_DATA
users:
  - name: gracekeeper
    user:
      token: $TOKEN
contexts:
  - name: gracekeeper
    context: {cluster: test, user: gracekeeper, namespace: $NS}
current-context: gracekeeper
YAML
expect "the kubeconfig authenticates as the ServiceAccount" \
  "$(kubectl --kubeconfig "$SA_KUBECONFIG" auth whoami -o jsonpath='{.status.userInfo.username}' 2>&1)" "$SA"

since=$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)
echo "# --- test/integration/operator/operator_test.sh, operator as $SA"
GK_OPERATOR_KUBECONFIG="$SA_KUBECONFIG" bash "$ROOT/test/integration/operator/operator_test.sh" "$GK" "$CLUSTER" \
  >"$WORK/suite.out" 2>&1
rc=$?
sed 's/^/#   /' "$WORK/suite.out"
summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$WORK/suite.out" | tail -1)
if [ "$rc" -eq 0 ] && [ -n "$summary" ]; then ok "operator_test.sh passes with the operator as the ServiceAccount ($summary)"
else not_ok "operator_test.sh as the ServiceAccount: exit $rc (${summary:-no summary})"; fi

# The audit log: who the operator was, and whether anything was refused.
jq -r --arg since "$since" 'select(.stage == "ResponseComplete" and (.userAgent // "" | startswith("gracekeeper"))
    and .stageTimestamp > $since) | "\(.user.username) \(.responseStatus.code) \(.verb) \(.objectRef.apiGroup // "")/\(.objectRef.resource // .requestURI)/\(.objectRef.subresource // "") \(.objectRef.namespace // "-")"' \
  "$CLUSTER/audit.log" >"$WORK/gk-requests" 2>/dev/null
total=$(wc -l <"$WORK/gk-requests")
[ "$total" -gt 0 ] && ok "the operator's requests in the audit log: $total" || not_ok "no operator requests in the audit log"
expect "every one as the ServiceAccount" "$(awk '{print $1}' "$WORK/gk-requests" | sort -u | tr '\n' ' ')" "$SA "
# A 403 for a request the RBAC allows can happen right after the suite
# restarts the API server (its RBAC caches are still filling); so a refusal
# counts only when the same verb on the same resource in the same namespace
# never succeeded.
awk '$2 == 403 {print $3, $4, $5}' "$WORK/gk-requests" | sort -u >"$WORK/refused"
awk '$2 ~ /^2/ {print $3, $4, $5}' "$WORK/gk-requests" | sort -u >"$WORK/allowed"
never=$(comm -23 "$WORK/refused" "$WORK/allowed")
expect "requests the RBAC refused (verb, resource, namespace never allowed)" "$(printf '%s' "$never" | grep -c . || true)" 0
[ -n "$never" ] && printf '%s\n' "$never" | note
transient=$(awk '$2 == 403' "$WORK/gk-requests" | wc -l)
[ "$transient" -gt 0 ] && echo "# $transient transient 403(s), each allowed at another time (API server restart):" &&
  awk '$2 == 403 {print $3, $4, $5}' "$WORK/gk-requests" | sort | uniq -c | note
echo "# what the operator did (verb group/resource/subresource, count):"
awk '{print $3, $4}' "$WORK/gk-requests" | sort | uniq -c | sort -rn | note

finish
