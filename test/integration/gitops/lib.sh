# Shared by the GitOps tests (helm_test.sh, self_heal_test.sh): a control
# plane with controllers, the operator's lib, a throw-away webhook CA, the
# webhook configuration and what the tests read of a Deployment.
# Sourced; expects ROOT and GK; sets WORK, CLUSTER, NS, CERTS, HOOK.
# KEEP=1 keeps WORK (logs, audit log) after the test.

. "$ROOT/test/integration/operator/lib.sh"
work_dir
show_logs_on_failure 20
start_cluster "$WORK/cluster" --with-controllers
NS=shop
HOOK=gracekeeper-gitops-test

cleanup() {
  [ -n "${HEAL_PID:-}" ] && kill "$HEAL_PID" 2>/dev/null && wait "$HEAL_PID" 2>/dev/null
  [ -n "${OP_PID:-}" ] && kill -KILL "$OP_PID" 2>/dev/null
  [ -n "${HUNG_PID:-}" ] && kill "$HUNG_PID" 2>/dev/null
}
on_exit cleanup

# A throw-away CA and a serving certificate for 127.0.0.1 (openssl).
CERTS="$WORK/certs"
make_test_certs "$CERTS"
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# register_webhook PORT: the configuration the chart writes (failurePolicy
# Ignore, timeoutSeconds 2, objectSelector on the label), its url on PORT.
register_webhook() {
  register_test_webhook "$HOOK" "https://127.0.0.1:$1/mutate-deployments" "$CERTS/ca.crt"
}

# setup_namespace MIN_INTERVAL_SECONDS: the CRD, namespace $NS and its policy.
setup_namespace() {
  k apply --server-side -f "$ROOT/crds/shutdownpolicies.gracekeeper.dev.yaml" >/dev/null
  k wait --for condition=established crd/shutdownpolicies.gracekeeper.dev >/dev/null
  k create namespace "$NS" >/dev/null
  k apply -f - >/dev/null <<YAML
apiVersion: gracekeeper.dev/v1alpha1
kind: ShutdownPolicy
metadata: {name: default, namespace: $NS}
spec:
  propagation: {source: Static, staticSeconds: 4}
  # Without a node no rollout completes: a repair must not wait for a slot.
  changes: {minIntervalSeconds: $1, maxConcurrentRollouts: 100%}
YAML
}

generation() { jp deployment "$NS" "$1" '{.metadata.generation}'; }
# The Deployment controller's revision: one more for every template change,
# also when it goes back to an old template (and reuses its ReplicaSet).
revision() { jp deployment "$NS" "$1" '{.metadata.annotations.deployment\.kubernetes\.io/revision}'; }
replicasets() { k get rs -n "$NS" -l "app=$1" --no-headers 2>/dev/null | wc -l; }
replicasets_are() { [ "$(replicasets "$1")" = "$2" ]; }
revision_is() { [ "$(revision "$1")" = "$2" ]; }

# audit_deployment_writes NAME SINCE: "verb useragent mutated|failed-open|-"
# per write request on Deployment NAME after SINCE (RFC 3339), as the audit
# log tells: mutated when the webhook patched it, failed-open when the API
# server could not call it and admitted the object unchanged.
audit_deployment_writes() {
  jq -r --arg since "$2" --arg name "$1" 'select(.stage == "ResponseComplete" and
      .objectRef.resource == "deployments" and .objectRef.name == $name and
      (.objectRef.subresource // "") == "" and
      (.verb | IN("create", "update", "patch")) and .stageTimestamp > $since) |
      (.annotations // {}) as $a |
      "\(.verb) \(.userAgent | split("/")[0]) \(
        if ($a["mutation.webhook.admission.k8s.io/round_0_index_0"] // "" | contains("\"mutated\":true"))
        then "mutated"
        elif ($a | keys | any(startswith("failed-open.mutation.webhook"))) then "failed-open"
        else "-" end)"' "$CLUSTER/audit.log"
}
