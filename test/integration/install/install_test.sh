#!/usr/bin/env bash
# gracekeeper installed for real: the image from the repository's Dockerfile
# (hack/image) in the node's containerd, the chart installed with Helm, then
# config/ with kustomize, in a lab with a real node (test/cluster/up --with-node).
#   install_test.sh LAB_APP_BINARY [--smoke]
#
# Checks (see docs/operator.md, "Installing in a cluster"):
#   - helm install with only the image overridden: Ready within 30 s, one of
#     the two replicas holds the Lease, an opted-in Deployment of the test app
#     is tuned as docs/api.md says, `kubectl get shutdownpolicies -A` shows it,
#     /metrics through the chart's Service passes `promtool check metrics`;
#   - the pod runs as uid 65532, read-only root, no capabilities, seccomp;
#   - the ServiceAccount may do exactly what the chart's RBAC says, and the
#     operator's log has no 403;
#   - the leader's pod deleted: another takes over within lease + retry, and
#     writes nothing (audit log);
#   - the operator SIGKILLed with work queued: converges with one Tuned Event
#     and one rollout per Deployment;
#   - helm upgrade, helm uninstall (tuned Deployments keep running), a values
#     file of the wrong type is refused;
#   - kubectl apply -k config/ with the image set: Ready, tunes.
# --smoke: install, Ready, Lease, one tune, metrics, uninstall.
# Last line "N passed, M failed".
set -uo pipefail
# How the operator logs a request the API server refused with 403
# (kube::ApiError::format). Not a bare "403": the webhook certificate's
# sha256, logged by every pod, can hold those digits (it did on 2026-12-07).
REFUSED='Forbidden (403)'

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
C="$REPO/test/cluster"
. "$C/lib.sh"

APP_BIN="${1:?usage: install_test.sh LAB_APP_BINARY [--smoke]}"
SMOKE=0
[ "${2:-}" = --smoke ] && SMOKE=1
[ "$(id -u)" = 0 ] || { echo "the node needs root"; echo "0 passed, 1 failed"; exit 1; }

. "$REPO/test/integration/harness.sh"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/gk-install-test.XXXXXX")"
LAB="$TMP/lab"
teardown() {  # on exit: clean up (then the harness prints the count line)
  # The Events, kept with the rest when a check failed (what was reported, and by whom).
  [ -f "$LAB/pids" ] && { "$LAB/exec" kubectl get events.events.k8s.io -A -o json >"$TMP/events.json" 2>/dev/null || true; }
  if [ -f "$LAB/pids" ]; then
    "$C/down" "$LAB" >"$TMP/down.log" 2>&1 || { not_ok "down"; cat "$TMP/down.log"; }
  fi
  if [ "$FAILED" -eq 0 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$TMP"; else echo "kept $TMP"; fi
}
on_exit teardown

HELM=$("$REPO/test/tools/build-helm") || { not_ok "test/tools/build-helm"; exit 1; }
t0=$(now)
ARCHIVE=$("$REPO/hack/image" | tail -n 1) || { not_ok "hack/image"; exit 1; }
figure "hack-image-seconds $(sub "$(now)" "$t0")"
[ -f "$ARCHIVE" ] || { not_ok "hack/image printed no archive ($ARCHIVE)"; exit 1; }
VERSION=$(sed -n 's/^project(gracekeeper VERSION \([0-9.]*\).*/\1/p' "$REPO/CMakeLists.txt")
IMAGE_REPO=gracekeeper.test/gracekeeper

if ! GK_LAB_APP="$APP_BIN" "$C/up" "$LAB" --with-node --image "$ARCHIVE" --owner-pid $$ >"$TMP/up.log" 2>&1; then
  not_ok "up --with-node --image"; tail -n 30 "$TMP/up.log"; exit 1
fi
. "$LAB/env"
E="$LAB/exec"
K_EXEC=$E K_REQUEST_TIMEOUT=  # k: kubectl inside the lab, requests unbounded
h() { "$E" "$HELM" "$@"; }
NS=gracekeeper-system
SA="system:serviceaccount:$NS:gracekeeper"

# ------------------------------------------------------------------ helm install
t0=$(now)
if ! h install gracekeeper "$REPO/charts/gracekeeper" -n "$NS" --create-namespace \
  --set image.repository="$IMAGE_REPO" >"$TMP/install.out" 2>&1; then
  not_ok "helm install"; cat "$TMP/install.out"; exit 1
fi
ok "helm install with only the image overridden"
check "NOTES say what uninstall leaves behind" grep -q 'leaves behind, on purpose' "$TMP/install.out"
ready=0
eventually 60 bash -c "[ \"\$('$E' kubectl get deploy gracekeeper -n $NS -o jsonpath='{.status.readyReplicas}')\" = 2 ]" && ready=1
T_READY=$(sub "$(now)" "$t0")
figure "helm-install-to-2-ready-seconds $T_READY"
check "both operator pods Ready within 30 s (${T_READY}s)" test "$ready" = 1 -a "$(awk -v t="$T_READY" 'BEGIN{print (t <= 30)}')" = 1
if [ "$ready" != 1 ]; then k get pods -n "$NS" -o wide; k describe pods -n "$NS" | tail -n 30; k logs -n "$NS" deploy/gracekeeper --tail=30; exit 1; fi

# The Lease's holder is POD_RANDOM (the pod's hostname and a suffix, as client-go does).
leader() { k get lease gracekeeper-leader -n "$NS" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null | sed 's/_[^_]*$//'; }
has_leader() { [ -n "$(leader)" ]; }
eventually 30 has_leader
LEADER=$(leader)
PODS=$(k get pods -n "$NS" -l app.kubernetes.io/name=gracekeeper -o jsonpath='{.items[*].metadata.name}')
check "the Lease is held by one of the two pods ($LEADER of $PODS)" grep -qw -- "${LEADER:-none}" <<<"$PODS"

# The pod's process as the kernel sees it.
op_pid() {  # op_pid POD: the host pid of the operator in POD
  local cid
  cid=$(k get pod "$1" -n "$NS" -o jsonpath='{.status.containerStatuses[0].containerID}')
  cid=${cid#containerd://}
  ctr --address "$CONTAINERD_ADDRESS" -n k8s.io tasks ls 2>/dev/null | awk -v c="$cid" '$1 == c {print $2}'
}
pid=$(op_pid "$LEADER")
if [ -n "$pid" ]; then
  check "it runs as uid 65532" test "$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")" = 65532
  check "with no capabilities (CapEff 0)" test "$(awk '/^CapEff:/ {print $2}' "/proc/$pid/status")" = 0000000000000000
  check "under a seccomp filter (RuntimeDefault)" test "$(awk '/^Seccomp:/ {print $2}' "/proc/$pid/status")" = 2
  check "with a read-only root file system" \
    bash -c "awk '\$5 == \"/\" {print \$6}' /proc/$pid/mountinfo | grep -q '^ro'"
  check "and no privilege escalation (NoNewPrivs)" test "$(awk '/^NoNewPrivs:/ {print $2}' "/proc/$pid/status")" = 1
else
  not_ok "could not find the operator's process"
fi

# ------------------------------------------------------------------ a tune
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
metadata: {name: checkout, namespace: shop}
spec:
  selector: {app: checkout}
  ports: [{port: 80, targetPort: 8080}]
EOF
# deployment NAME: the test app, opted in, with a grace period (20 s) below
# the budget, so the tune must raise it.
deployment() {
  cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $1
  namespace: shop
  annotations: {gracekeeper.dev/enabled: "true", gracekeeper.dev/drain-seconds: "10"}
spec:
  replicas: 1
  selector: {matchLabels: {app: checkout}}
  template:
    metadata: {labels: {app: checkout}}
    spec:
      terminationGracePeriodSeconds: 20
      containers:
      - name: app
        image: $LAB_APP_IMAGE
        imagePullPolicy: Never
        args: ["--drain-seconds", "10"]
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /ready, port: 8080}, periodSeconds: 1}
EOF
}
tuned() {  # tuned NAME: the budget of docs/api.md for staticSeconds 4, drain 10
  local d
  d=$(k get deploy "$1" -n shop -o json) || return 1
  [ "$(jq -r '.spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds' <<<"$d")" = 6 ] &&
    [ "$(jq -r '.spec.template.spec.terminationGracePeriodSeconds' <<<"$d")" = 26 ] &&
    [ "$(jq -r '.spec.strategy.rollingUpdate.maxUnavailable' <<<"$d")" = 0 ] &&
    [ "$(jq -r '.spec.strategy.rollingUpdate.maxSurge' <<<"$d")" = 1 ]
}
t0=$(now)
deployment checkout | k apply -f - >/dev/null
if eventually 30 tuned checkout; then
  figure "tune-seconds $(sub "$(now)" "$t0")"
  ok "the operator in its pod tuned checkout: preStop sleep 6, grace 26, maxUnavailable 0, maxSurge 1"
else
  not_ok "checkout was not tuned"
  k get deploy checkout -n shop -o json | jq -c '.spec.template.spec.containers[0].lifecycle, .spec.template.spec.terminationGracePeriodSeconds, .spec.strategy'
  k logs -n "$NS" "$LEADER" --tail=20
fi
check "its new pods roll out and become Ready" k rollout status deploy/checkout -n shop --timeout=90s

# The admission webhook, on by default with self-managed certificates: once
# the caBundle is patched, a labelled Deployment is stored tuned at its
# creation (generation 1: no second write, no second rollout).
has_ca_bundle() { [ -n "$(k get mutatingwebhookconfiguration gracekeeper -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ]; }
check "the webhook's caBundle is patched by the operator" eventually 60 has_ca_bundle
t0=$(now)
deployment hooked | sed 's|^  annotations: |  labels: {gracekeeper.dev/enabled: "true"}\n  annotations: |' | k apply -f - >/dev/null
generation=$(k get deploy hooked -n shop -o jsonpath='{.metadata.generation}')
check "a labelled Deployment is stored tuned by the webhook at generation 1 (got $generation)" test "$generation" = 1
check "... with the budget (preStop 6, grace 26, 0 unavailable, surge 1)" tuned hooked
figure "webhook-create-seconds $(sub "$(now)" "$t0")"
k get shutdownpolicies -A >"$TMP/sdp.txt" 2>&1
check "kubectl get shutdownpolicies -A shows the policy with its figures ($(tail -n 1 "$TMP/sdp.txt" | tr -s ' '))" \
  grep -qE '^shop +default +.*6' "$TMP/sdp.txt"

# ------------------------------------------------------------------ metrics
SVC_IP=$(k get svc gracekeeper-metrics -n "$NS" -o jsonpath='{.spec.clusterIP}')
"$E" curl -s --max-time 5 "http://$SVC_IP:8080/metrics" >"$TMP/metrics.txt"
check "/metrics through the chart's Service ($SVC_IP) answers" grep -q '^gracekeeper_' "$TMP/metrics.txt"
check "promtool check metrics accepts it" bash -c "promtool check metrics <'$TMP/metrics.txt'"

if [ "$SMOKE" = 0 ]; then
  # ---------------------------------------------------------------- RBAC
  # The rules the ServiceAccount holds, as `kubectl auth can-i --list` sees
  # them in the release namespace, against the rules the chart installed
  # (ClusterRole + the leader-election Role, and the webhook's ClusterRole
  # and Role, on by default), resource by resource. What any
  # ServiceAccount may do (self-reviews, discovery, ...) is what the namespace's
  # default ServiceAccount may do: set aside.
  k auth can-i --list --as="$SA" -n "$NS" >"$TMP/can-i.txt" 2>&1
  k auth can-i --list --as="system:serviceaccount:$NS:default" -n "$NS" >"$TMP/can-i-default.txt" 2>&1
  { k get clusterrole gracekeeper -o json; k get role gracekeeper-leader-election -n "$NS" -o json
    k get clusterrole gracekeeper-webhook -o json; k get role gracekeeper-webhook-certs -n "$NS" -o json; } |
    jq -s '[.[].rules[]]' >"$TMP/rules.json"
  diff_out=$(python3 - "$TMP/can-i.txt" "$TMP/rules.json" "$TMP/can-i-default.txt" <<'PY'
import json, re, sys
def can_i(path):
    rows = {}
    for line in open(path).read().splitlines()[1:]:
        m = re.match(r"^(\S+)\s+\[.*?\]\s+\[.*?\]\s+\[(.*)\]\s*$", line)
        if m:
            rows.setdefault(m.group(1), set()).update(m.group(2).split())
    return rows
have = can_i(sys.argv[1])
everyone = set(can_i(sys.argv[3]))
want = {}
for rule in json.load(open(sys.argv[2])):
    for group in rule.get("apiGroups", [""]):
        for res in rule.get("resources", []):
            name, _, sub = res.partition("/")   # can-i writes RESOURCE.GROUP/SUBRESOURCE
            key = name + ("." + group if group else "") + ("/" + sub if sub else "")
            want.setdefault(key, set()).update(rule["verbs"])
problems = []
for key in sorted(set(have) | set(want)):
    if key in everyone:
        continue
    if have.get(key, set()) != want.get(key, set()):
        problems.append(f"{key}: can-i {sorted(have.get(key, []))} chart {sorted(want.get(key, []))}")
print("; ".join(problems))
PY
)
  check "kubectl auth can-i --list as the ServiceAccount matches the chart's RBAC exactly (${diff_out:-same})" \
    test -z "$diff_out" -a -s "$TMP/rules.json"
  check "... so it may not read Secrets" bash -c "! '$E' kubectl auth can-i get secrets -n shop --as='$SA' >/dev/null 2>&1"
  for p in $PODS; do
    check "no 403 in the log of $p" bash -c "! '$E' kubectl logs -n $NS $p | grep -qF '$REFUSED'"
  done

  # ---------------------------------------------------------------- hand-over
  writes_by_sa() {  # writes by the operator's ServiceAccount after time T (epoch), leases excluded
    jq -r --arg u "$SA" --argjson t "$1" 'select(.stage == "ResponseComplete" and .user.username == $u
        and (.verb | test("create|update|patch|delete"))
        and .objectRef.resource != "leases"
        and ((.requestReceivedTimestamp | sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601) >= $t))
        | "\(.verb) \(.objectRef.resource)/\(.objectRef.name)"' "$AUDIT_LOG"
  }
  # The hand-over starts from a settled state: both Deployments rolled out
  # and the policy's status saying so (its counts follow the pods). Then a
  # write of the new leader can only be one it should not make.
  settled() {
    k rollout status deploy/hooked -n shop --timeout=1s >/dev/null 2>&1 &&
      k get shutdownpolicy default -n shop -o json |
      jq -e '.status.deployments | (.rolling // 0) == 0 and .compliant == .managed' >/dev/null
  }
  eventually 60 settled || note <<<"not settled before the hand-over: $(k get sdp -n shop 2>&1 | tail -n 1)"
  sleep 2  # t_del below is in whole seconds: the last writes are before it
  OLD_LEADER=$LEADER
  t_del=$(date +%s)
  t0=$(now)
  k delete pod "$OLD_LEADER" -n "$NS" --wait=false >/dev/null
  new_leader() { local l; l=$(leader); [ -n "$l" ] && [ "$l" != "$OLD_LEADER" ]; }
  if eventually 40 new_leader; then
    took=$(sub "$(now)" "$t0")
    figure "leader-handover-seconds $took"
    check "deleting the leader: another pod leads within lease 15 s + retry 2 s (${took}s)" within "$took" 0 17
  else
    not_ok "no new leader within 40 s"
  fi
  sleep 10
  w=$(writes_by_sa "$t_del")
  check "the new leader changed nothing that was already right (writes: ${w:-none})" test -z "$w"

  # ---------------------------------------------------------------- SIGKILL with work queued
  LEADER=$(leader)
  t_kill=$(date +%s)
  for i in $(seq 1 10); do deployment "queued-$i"; echo ---; done | k apply -f - >/dev/null
  sleep 0.3
  pid=$(op_pid "$LEADER")
  kill -KILL "$pid" 2>/dev/null && ok "SIGKILL to the leader with 10 new Deployments queued" || not_ok "SIGKILL the leader (pid ${pid:-none})"
  all_tuned() { local i; for i in $(seq 1 10); do tuned "queued-$i" || return 1; done; }
  check "all 10 are tuned after the restart or hand-over" eventually 90 all_tuned
  sleep 5
  gens=$(for i in $(seq 1 10); do k get deploy "queued-$i" -n shop -o jsonpath='{.metadata.generation}{" "}'; done)
  check "each was written once: generation 2 (one rollout) for all ($gens)" test "$(tr ' ' '\n' <<<"$gens" | grep -c '^2$')" = 10
  tuned_events=$(k get events -n shop -o json | jq '[.items[] | select(.reason == "Tuned" and (.involvedObject.name | startswith("queued-")))] | map(.count // 1) | add // 0')
  check "one Tuned Event per Deployment, no duplicate (sum of counts $tuned_events)" test "$tuned_events" = 10

  # ---------------------------------------------------------------- helm upgrade, schema
  if h upgrade gracekeeper "$REPO/charts/gracekeeper" -n "$NS" --set image.repository="$IMAGE_REPO" \
    --set logLevel=debug --wait --timeout 120s >"$TMP/upgrade.out" 2>&1; then
    args=$(k get deploy gracekeeper -n "$NS" -o jsonpath='{.spec.template.spec.containers[0].args}')
    check "helm upgrade to logLevel=debug rolled out with --log-level=debug" grep -q 'log-level=debug' <<<"$args"
  else
    not_ok "helm upgrade"; cat "$TMP/upgrade.out"
  fi
  out=$(h upgrade gracekeeper "$REPO/charts/gracekeeper" -n "$NS" --set image.repository="$IMAGE_REPO" \
    --set-string replicas=two 2>&1); rc=$?
  check "a wrong type (replicas: \"two\") is refused by values.schema.json (rc $rc)" \
    test "$rc" != 0 -a -n "$(grep -i 'schema' <<<"$out")"
fi

# ------------------------------------------------------------------ uninstall
gen_before=$(k get deploy checkout -n shop -o jsonpath='{.metadata.generation}')
if h uninstall gracekeeper -n "$NS" --wait --timeout 60s >"$TMP/uninstall.out" 2>&1; then
  ok "helm uninstall"
else
  not_ok "helm uninstall"; cat "$TMP/uninstall.out"
fi
check "the operator is gone" eventually 30 bash -c "[ -z \"\$('$E' kubectl get pods -n $NS -l app.kubernetes.io/name=gracekeeper -o name)\" ]"
check "the tuned Deployment keeps running, untouched (generation $gen_before)" \
  test "$(k get deploy checkout -n shop -o jsonpath='{.metadata.generation}/{.status.readyReplicas}')" = "$gen_before/1"
check "the CRD and the policies stay" k get shutdownpolicy default -n shop

if [ "$SMOKE" = 0 ]; then
  # ---------------------------------------------------------------- kustomize
  mkdir -p "$TMP/overlay"
  cp -r "$REPO/config" "$TMP/config"
  cat >"$TMP/overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../config/default
images:
  - name: gracekeeper
    newName: $IMAGE_REPO
    newTag: "$VERSION"
EOF
  if k apply -k "$TMP/overlay" >"$TMP/kustomize.out" 2>&1; then
    ok "kubectl apply -k config/default (image set in an overlay)"
  else
    not_ok "kubectl apply -k"; cat "$TMP/kustomize.out"
  fi
  dep=$(k get deploy -n "$NS" -o jsonpath='{.items[0].metadata.name}')
  check "config/'s operator ($dep) becomes Available" k wait --for=condition=Available "deploy/$dep" -n "$NS" --timeout=60s
  t0=$(now)
  deployment kustomized | k apply -f - >/dev/null
  check "and tunes a new Deployment" eventually 30 tuned kustomized
  for p in $(k get pods -n "$NS" -o jsonpath='{.items[*].metadata.name}'); do
    check "no 403 in the log of $p" bash -c "! '$E' kubectl logs -n $NS $p | grep -qF '$REFUSED'"
  done
fi
