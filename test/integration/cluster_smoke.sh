#!/usr/bin/env bash
# Smoke test of the integration-test control plane (test/cluster/*):
# builds (or reuses) etcd + kube-apiserver + kube-controller-manager, starts a
# cluster without and then one with controllers, and checks what the
# integration tests rely on: pinned server version, CRUD through kubectl, the
# audit log, restart-apiserver, etcd compaction (-> 410 Gone), ServiceAccount
# tokens with RBAC, Deployment -> ReplicaSet -> Pods, EndpointSlices, the
# owner watchdog, and that down leaves no process behind.
#
# Exit status non-zero on any failure; last line: "N passed, M failed".
# Set KEEP=1 to keep the temp dir (it is kept anyway when something failed).
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
C="$REPO/test/cluster"
. "$C/lib.sh"

. "$REPO/test/integration/harness.sh"   # ok, not_ok, check, eventually, k, on_exit

# This suite tests up and down themselves: it runs them, not start_cluster.
TMP="$(mktemp -d "${TMPDIR:-/tmp}/gk-cluster-smoke.XXXXXX")"
A="$TMP/plain"
B="$TMP/controllers"
OWNER_SLEEP=""
on_exit 'if [ "$FAILED" -eq 0 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$TMP"; else
  echo "kept $TMP for inspection (logs in */logs, audit in */audit.log)"; fi'
on_exit '[ -z "$OWNER_SLEEP" ] || kill "$OWNER_SLEEP" 2>/dev/null'
on_exit 'for d in "$A" "$B"; do [ ! -f "$d/pids" ] || "$C/down" "$d" >/dev/null 2>&1; done'

# Processes of the control-plane binaries whose command line mentions DIR.
cluster_processes() {
  local dir="$1" f pid comm
  for f in /proc/[0-9]*/cmdline; do
    pid="${f#/proc/}"; pid="${pid%/cmdline}"
    read -r comm 2>/dev/null <"/proc/$pid/comm" || continue
    case "$comm" in etcd|kube-apiserver|kube-controller) ;; *) continue ;; esac
    gk_pid_alive "$pid" || continue
    tr '\0' '\n' 2>/dev/null <"$f" | grep -qF -- "$dir/" && echo "$pid"
  done
}
no_cluster_processes() { [ -z "$(cluster_processes "$1")" ]; }

# audit_has USER VERB RESOURCE [NAMESPACE]: the audit log of the current
# cluster has a completed request of USER doing VERB on RESOURCE.
audit_has() {
  grep -F "\"stage\":\"ResponseComplete\"" "$AUDIT_LOG" |
    grep -F "\"username\":\"$1\"" | grep -F "\"verb\":\"$2\"" |
    grep -F "\"resource\":\"$3\"" |
    if [ -n "${4:-}" ]; then grep -qF "\"namespace\":\"$4\""; else grep -q .; fi
}

echo "== build (cached after the first run)"
check "test/cluster/build succeeds" "$C/build"

# ------------------------------------------------------------------ cluster A
echo "== cluster without controllers in $A"
t0=$(date +%s.%N)
if ! "$C/up" "$A"; then
  not_ok "up $A"
  exit 1
fi
t1=$(date +%s.%N)
ok "up (to /readyz) took $(awk "BEGIN{printf \"%.1f\", $t1-$t0}")s"
set -a; . "$A/env"; set +a

check "env names the kubeconfig, apiserver and etcd" \
  test -f "$KUBECONFIG" -a -n "$APISERVER_URL" -a -n "$ETCD_ENDPOINT" -a -n "$APISERVER_PID"
check "kubeconfig context is gracekeeper-test" \
  test "$(k config current-context)" = gracekeeper-test
check "apiserver listens on loopback only" \
  bash -c "ss -Hltn 'sport = :$APISERVER_PORT' | awk '{print \$4}' | grep -qx '127.0.0.1:$APISERVER_PORT'"
check "etcd listens on loopback only" \
  bash -c "! ss -Hltn | awk '{print \$4}' | grep -E ':($ETCD_PORT|$ETCD_PEER_PORT)\$' | grep -vq '^127\.0\.0\.1:'"

server_version=$(k version -o json 2>/dev/null | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p' | tail -1)
echo "   kubectl version: server $server_version"
check "kubectl version reports server $GK_K8S_VERSION" test "$server_version" = "$GK_K8S_VERSION"
minor=$(k get --raw /version | sed -n 's/.*"minor": *"\([^"]*\)".*/\1/p')
check "/version minor is ${GK_K8S_VERSION#v1.} (got '$minor')" test "$minor" = "$(echo "$GK_K8S_VERSION" | cut -d. -f2)"

check "create namespace smoke" k create namespace smoke
check "create configmap" k -n smoke create configmap cm1 --from-literal=a=b
check "create deployment" k -n smoke create deployment web --image=registry.k8s.io/pause:3.10
check "configmap reads back" test "$(k -n smoke get configmap cm1 -o jsonpath='{.data.a}')" = b
cm_rv=$(k -n smoke get configmap cm1 -o jsonpath='{.metadata.resourceVersion}')

check "audit log has create namespaces by gracekeeper-admin" audit_has gracekeeper-admin create namespaces
check "audit log has create configmaps by gracekeeper-admin" audit_has gracekeeper-admin create configmaps smoke
check "audit log has create deployments by gracekeeper-admin" audit_has gracekeeper-admin create deployments smoke
check "audit log is JSON lines at level Metadata" \
  bash -c "head -n 50 '$AUDIT_LOG' | grep -v '^{.*\"level\":\"Metadata\".*}\$' | wc -l | grep -qx 0"

echo "== restart-apiserver --down-seconds 2"
old_pid="$APISERVER_PID"
check "restart-apiserver succeeds" "$C/restart-apiserver" "$A" --down-seconds 2
. "$A/env"
check "old apiserver process is gone" bash -c "! kill -0 $old_pid 2>/dev/null || grep -q '^Z' <(awk '{print \$3}' /proc/$old_pid/stat)"
check "new apiserver pid recorded ($APISERVER_PID)" test "$APISERVER_PID" != "$old_pid"
check "pids file has the new apiserver" grep -qx "kube-apiserver $APISERVER_PID" "$A/pids"
check "readyz ok after restart" test "$(k get --raw /readyz)" = ok
check "data survived the restart" test "$(k -n smoke get configmap cm1 -o jsonpath='{.data.a}')" = b
check "restart-apiserver --kill (crash-style) succeeds" "$C/restart-apiserver" "$A" --kill
. "$A/env"
check "readyz ok after the crash-style restart" test "$(k get --raw /readyz)" = ok

echo "== compact"
k -n smoke create configmap cm2 --from-literal=x=y >/dev/null
k -n smoke patch configmap cm1 -p '{"data":{"a":"c"}}' >/dev/null
rev=$("$C/compact" "$A")
echo "   compacted at etcd revision $rev; configmap cm1 was at resourceVersion $cm_rv"
check "compact prints a revision" test -n "$rev"
gone=$(k get --raw "/api/v1/namespaces/smoke/configmaps?resourceVersion=$cm_rv&resourceVersionMatch=Exact" 2>&1)
echo "   list at the old resourceVersion: ${gone:0:160}"
check "list at a compacted resourceVersion gets 410 Gone" \
  bash -c "grep -qiE 'Expired|too old|compacted|410' <<<\"\$1\"" _ "$gone"
check "compact a second time (nothing new) still succeeds" bash -c "'$C/compact' '$A' >/dev/null"

echo "== token"
tok=$("$C/token" "$A" smoke robot)
check "token printed for smoke/robot" test -n "$tok"
as_robot() { kubectl --kubeconfig=/dev/null --server="$APISERVER_URL" --certificate-authority="$CA_FILE" --token="$tok" "$@"; }
check "token authenticates as system:serviceaccount:smoke:robot" \
  bash -c "kubectl --kubeconfig=/dev/null --server='$APISERVER_URL' --certificate-authority='$CA_FILE' --token='$tok' auth whoami -o jsonpath='{.status.userInfo.username}' | grep -qx system:serviceaccount:smoke:robot"
check "RBAC: robot cannot list configmaps yet" test "$(as_robot auth can-i list configmaps -n smoke 2>/dev/null)" = no
k -n smoke create role cm-reader --verb=get,list,watch --resource=configmaps >/dev/null
k -n smoke create rolebinding robot-cm-reader --role=cm-reader --serviceaccount=smoke:robot >/dev/null
check "RBAC: robot can list configmaps after a RoleBinding" \
  eventually 10 bash -c "test \"\$(kubectl --kubeconfig=/dev/null --server='$APISERVER_URL' --certificate-authority='$CA_FILE' --token='$tok' auth can-i list configmaps -n smoke)\" = yes"
check "RBAC: robot still cannot delete configmaps" test "$(as_robot auth can-i delete configmaps -n smoke 2>/dev/null)" = no
check "token for an existing SA works again" bash -c "'$C/token' '$A' smoke robot --duration=10m | grep -q ."

echo "== down"
a_pids=$(awk '{print $2}' "$A/pids")
check "down succeeds" "$C/down" "$A"
check "no etcd/kube-apiserver process of $A remains" no_cluster_processes "$A"
no_group_alive() { local p; for p in "$@"; do gk_pgid_alive "$p" && return 1; done; return 0; }
# shellcheck disable=SC2086
check "no recorded process group remains" no_group_alive $a_pids
check "down is idempotent" "$C/down" "$A"
check "logs kept after down" test -s "$A/logs/kube-apiserver.log" -a -s "$A/audit.log"

# ------------------------------------------------------------------ cluster B
echo "== cluster with controllers in $B (owner: a sleep process, to test the watchdog)"
sleep 600 &
OWNER_SLEEP=$!
t0=$(date +%s.%N)
if ! "$C/up" "$B" --with-controllers --etcd-compaction-interval 1m --owner-pid "$OWNER_SLEEP"; then
  not_ok "up $B --with-controllers"
  exit 1
fi
t1=$(date +%s.%N)
ok "up --with-controllers took $(awk "BEGIN{printf \"%.1f\", $t1-$t0}")s"
set -a; . "$B/env"; set +a

check "--etcd-compaction-interval reached kube-apiserver" grep -qx -- "--etcd-compaction-interval=1m" "$B/apiserver.args"
check "kube-controller-manager is running" gk_pid_alive "$KCM_PID"
k create namespace demo >/dev/null
check "serviceaccount controller creates demo/default" eventually 60 k -n demo get serviceaccount default
k -n demo create deployment web --image=registry.k8s.io/pause:3.10 --replicas=2 >/dev/null
check "Deployment gets a ReplicaSet" \
  eventually 60 bash -c "kubectl --kubeconfig '$KUBECONFIG' -n demo get replicasets -l app=web -o name | grep -q ."
check "ReplicaSet creates 2 Pod objects (Pending: no kubelet)" \
  eventually 60 bash -c "test \$(kubectl --kubeconfig '$KUBECONFIG' -n demo get pods -l app=web -o name | wc -l) -eq 2"
echo "   pods: $(k -n demo get pods -l app=web -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase} {end}')"
k -n demo create service clusterip web --tcp=80:8080 >/dev/null
check "EndpointSlice appears for Service web" \
  eventually 60 bash -c "kubectl --kubeconfig '$KUBECONFIG' -n demo get endpointslices -l kubernetes.io/service-name=web -o name | grep -q ."
check "controllers use their own ServiceAccounts (audit: replicaset-controller created pods)" \
  audit_has system:serviceaccount:kube-system:replicaset-controller create pods demo

echo "== watchdog: kill the owner, the cluster must go away by itself"
kill "$OWNER_SLEEP"; wait "$OWNER_SLEEP" 2>/dev/null
OWNER_SLEEP=""
check "watchdog stopped etcd, kube-apiserver and kube-controller-manager within 15s" \
  eventually 15 no_cluster_processes "$B"
check "watchdog logged it" grep -q "owner .* is gone" "$B/logs/watchdog.log"
check "down after the watchdog is clean" "$C/down" "$B"
check "no process of $B remains" no_cluster_processes "$B"
