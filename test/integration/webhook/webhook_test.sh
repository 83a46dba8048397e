#!/usr/bin/env bash
# The mutating admission webhook against the real API server (issue 17, item
# 1): `gracekeeper run --webhook-port P --webhook-cert-dir D` on loopback with
# a throw-away CA and serving certificate made here with openssl, registered
# by a MutatingWebhookConfiguration (url, caBundle, failurePolicy Ignore,
# timeoutSeconds 2, sideEffects None, reinvocationPolicy IfNeeded,
# objectSelector gracekeeper.dev/enabled=true). A kube-controller-manager
# runs, so each template change makes one ReplicaSet.
#
# Shows: a Deployment created opted in is stored tuned (generation 1); after
# the reconciler tuned one, `kubectl apply -f` (client-side) and `kubectl
# apply --server-side --field-manager=other` deploys each make exactly one
# new ReplicaSet and keep the budget, with no gracekeeper write (audit log);
# `kubectl diff --server-side` shows no difference; an unlabelled Deployment
# never reaches the webhook; with the webhook stopped (SIGSTOP) admissions
# still succeed within the timeout and the reconciler repairs; bad input to
# the endpoint (curl, and slow-loris clients) gets 4xx or allowed, and the
# process keeps serving in bounded memory. A server-side apply under field
# manager gracekeeper by another user is mutated (only the operator's own
# user's writes pass unchanged), and a deploy after the wait fell to 0 loses
# gracekeeper's hook through the webhook's patch (issue 45, item 9).
#
# usage: test/integration/webhook/webhook_test.sh GRACEKEEPER_BINARY
#   Starts its own control plane (with controllers) and stops it on exit.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
GK="${1:?usage: webhook_test.sh GRACEKEEPER_BINARY}"
. "$ROOT/test/integration/operator/lib.sh"
work_dir
show_logs_on_failure 20
start_cluster "$WORK/cluster" --with-controllers
NS=wh-shop
HOOK=gracekeeper-webhook-test

cleanup() {
  [ -n "${OP_PID:-}" ] && kill -CONT "$OP_PID" 2>/dev/null && kill -KILL "$OP_PID" 2>/dev/null
  [ -n "${LORIS_PID:-}" ] && kill "$LORIS_PID" 2>/dev/null
}
on_exit cleanup

# ---------------------------------------------------------------- certificates
CERTS="$WORK/certs"
make_test_certs "$CERTS"
[ -s "$CERTS/tls.crt" ] && ok "a throw-away CA and serving certificate (openssl)" ||
  not_ok "openssl could not make the certificates"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL="https://127.0.0.1:$PORT/mutate-deployments"
hook_curl() { curl -s --max-time 20 --cacert "$CERTS/ca.crt" "$@"; }

start_webhook() {  # the operator with the webhook on
  start_operator "$1" --webhook-port "$PORT" --webhook-cert-dir "$CERTS"
  eventually 10 hook_curl -o /dev/null -X POST -d '{}' "$URL"
}
metric() {  # metric NAME_WITH_LABELS: its value on the running operator, 0 when absent
  curl -s "http://127.0.0.1:$OP_PORT/metrics" | awk -v m="$1" '$1 == m { print $2; f=1 } END { if (!f) print 0 }'
}

k apply --server-side -f "$ROOT/crds/shutdownpolicies.gracekeeper.dev.yaml" >/dev/null
k wait --for condition=established crd/shutdownpolicies.gracekeeper.dev >/dev/null
# namespace_with_policy NS: NS, its Service, and its policy "default".
namespace_with_policy() {
  k create namespace "$1" >/dev/null && serve "$1"
  k apply -f - >/dev/null <<YAML
apiVersion: gracekeeper.dev/v1alpha1
kind: ShutdownPolicy
metadata: {name: default, namespace: $1}
spec:
  propagation: {source: Static, staticSeconds: 4}
  # Without a node no rollout completes: the repair must not wait for a slot.
  changes: {maxConcurrentRollouts: 100%}
YAML
}
namespace_with_policy "$NS"

# manifest NAME IMAGE: the user's manifest, which names the grace (30 s) and
# the strategy (25 %/25 %) and has no hook: every deploy sets them back.
manifest() {
  cat <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $1
  namespace: $NS
  labels: {app: $1, gracekeeper.dev/enabled: "true"}
  annotations: {gracekeeper.dev/enabled: "true"}
spec:
  replicas: 2
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 25%, maxUnavailable: 25%}}
  selector: {matchLabels: {app: $1}}
  template:
    metadata: {labels: {app: $1, served: "yes"}}
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: app
        image: $2
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /ready, port: 8080}}
YAML
}
for v in 1 2 3 4; do manifest checkout "app:$v" >"$WORK/checkout-v$v.yaml"; done
generation() { jp deployment "$NS" "$1" '{.metadata.generation}'; }
replicasets() { k get rs -n "$NS" -l "app=$1" --no-headers 2>/dev/null | wc -l; }
replicasets_are() { [ "$(replicasets "$1")" = "$2" ]; }
mutations_of() {  # audit: "verb mutated" of requests on Deployment $1 since $2 the webhook mutated
  jq -r --arg since "$2" --arg name "$1" 'select(.stage == "ResponseComplete" and
      .objectRef.resource == "deployments" and .objectRef.name == $name and
      .stageTimestamp > $since and
      (.annotations["mutation.webhook.admission.k8s.io/round_0_index_0"] // "" | contains("\"mutated\":true"))) |
      "\(.verb) \(.userAgent | split("/")[0])"' "$CLUSTER/audit.log"
}

# ------------------------------------------------- 1. the reconciler tunes first
start_webhook op
k apply -f "$WORK/checkout-v1.yaml" >/dev/null
eventually 20 settings_are "$NS" checkout "6 46 0 1" &&
  ok "without a webhook configuration, the reconciler tuned checkout" ||
  not_ok "checkout not tuned: '$(settings "$NS" checkout)'"
expect "created, then tuned: generation 2" "$(generation checkout)" 2
eventually 10 replicasets_are checkout 1 || eventually 10 replicasets_are checkout 2

# ------------------------------------------------------ register the webhook
register_test_webhook "$HOOK" "$URL" "$CERTS/ca.crt"
# The API server reads webhook configurations through an informer: wait until
# a dry-run create is mutated.
manifest probe app:1 >"$WORK/probe.yaml"
probe_mutated() {
  k create --dry-run=server -f "$WORK/probe.yaml" -o json |
    jq -e '.spec.template.spec.terminationGracePeriodSeconds == 46' >/dev/null
}
eventually 20 probe_mutated && ok "a dry-run create is mutated (the API server calls the webhook)" ||
  not_ok "the webhook is not called"

# ------------------------------------------ 2. created opted in: tuned at creation
since=$(now_rfc3339)
manifest created app:1 | k create -f - >/dev/null
expect "created opted in: stored tuned at generation 1" \
  "$(generation created) $(settings "$NS" created)" "1 6 46 0 1"
eventually 10 replicasets_are created 1
expect "created opted in: one ReplicaSet" "$(replicasets created)" 1
expect "the audit log shows the create mutated by the webhook" "$(mutations_of created "$since")" "create kubectl"

# ---------------------- 3. deploys that set the fields back keep the budget
deploy() {  # deploy NAME DESCRIPTION GENERATIONS COMMAND...: one deploy of NAME, checked
  local name=$1 what=$2 generations=$3 since before_gen before_rs
  shift 3
  before_gen=$(generation "$name")
  before_rs=$(replicasets "$name")
  since=$(now_rfc3339)
  if ! "$@" >"$WORK/deploy.out" 2>&1; then
    not_ok "$what: $(cat "$WORK/deploy.out")"
    return
  fi
  expect "$what: stored with the budget" "$(settings "$NS" "$name")" "6 46 0 1"
  expect "$what: the generation moved by $generations" "$(generation "$name")" "$((before_gen + generations))"
  eventually 10 replicasets_are "$name" "$((before_rs + 1))"
  sleep 2  # time for a second ReplicaSet, or a gracekeeper write, to show
  expect "$what: exactly one new ReplicaSet" "$(replicasets "$name")" "$((before_rs + 1))"
  mutations_of "$name" "$since" | head -1 | grep -q . &&
    ok "$what: the audit log shows the webhook's mutation ($(mutations_of "$name" "$since" | sort | uniq -c | tr -s ' ' | tr '\n' ';'))" ||
    not_ok "$what: no mutation in the audit log"
  expect "$what: no gracekeeper write afterwards (audit log)" \
    "$(gk_writes_since "$since" | grep -c ' deployments/ ')" 0
}
deploy checkout "kubectl apply -f (client-side)" 1 k apply -f "$WORK/checkout-v2.yaml"
# kubectl's first server-side apply over a client-side one also moves the
# client-side manager's fields to the new manager, in a second request that
# changes an annotation: one generation more, no ReplicaSet more.
deploy checkout "kubectl apply --server-side --field-manager=other (over client-side apply)" 2 \
  k apply --server-side --field-manager=other --force-conflicts -f "$WORK/checkout-v3.yaml"
# A GitOps applier from the start (Flux): tuned at creation, then deployed.
manifest gitops app:1 | k apply --server-side --field-manager=other -f - >/dev/null
expect "server-side applied opted in: stored tuned at generation 1" \
  "$(generation gitops) $(settings "$NS" gitops)" "1 6 46 0 1"
eventually 10 replicasets_are gitops 1
manifest gitops app:2 >"$WORK/gitops-v2.yaml"
deploy gitops "kubectl apply --server-side --field-manager=other" 1 \
  k apply --server-side --field-manager=other -f "$WORK/gitops-v2.yaml"
before_gen=$(generation checkout)
k apply --server-side --field-manager=other -f "$WORK/checkout-v3.yaml" >/dev/null 2>&1
expect "the same server-side apply again: no change (generation)" "$(generation checkout)" "$before_gen"

# --------------------------------------------------------- 4. server-side diff
k diff --server-side --field-manager=other --force-conflicts -f "$WORK/checkout-v3.yaml" >"$WORK/diff.out" 2>&1
expect "kubectl diff --server-side of the applied manifest: no difference" "$? $(wc -l <"$WORK/diff.out")" "0 0"
k diff --server-side --field-manager=other --force-conflicts -f "$WORK/checkout-v1.yaml" >"$WORK/diff1.out" 2>&1
grep -qE '^[-+] .*(terminationGracePeriodSeconds|maxUnavailable|maxSurge|preStop|sleep|seconds:)' "$WORK/diff1.out" &&
  not_ok "kubectl diff --server-side of the original shows owned fields: $(cat "$WORK/diff1.out")" ||
  ok "kubectl diff --server-side of the original: no difference in the owned fields ($(grep -cE "^[-+] " "$WORK/diff1.out") changed lines: the image, the generation)"

# ---------------------- 4b. a StatefulSet: tuned at creation, deploys keep it
# sts_manifest NAME IMAGE: a StatefulSet manifest that names the grace (30 s)
# and no hook; its updateStrategy is its own (gracekeeper never writes it).
sts_manifest() {
  cat <<YAML
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: $1
  namespace: $NS
  labels: {app: $1, gracekeeper.dev/enabled: "true"}
  annotations: {gracekeeper.dev/enabled: "true"}
spec:
  serviceName: $1
  replicas: 2
  selector: {matchLabels: {app: $1}}
  template:
    metadata: {labels: {app: $1, served: "yes"}}
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: app
        image: $2
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /ready, port: 8080}}
YAML
}
sts_settings() {
  k get statefulset -n "$NS" "$1" -o json |
    jq -r '[(.spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds // "none"),
            .spec.template.spec.terminationGracePeriodSeconds, .metadata.generation] | map(tostring) | join(" ")'
}
revisions() { k get controllerrevisions -n "$NS" -l "app=$1" --no-headers 2>/dev/null | wc -l; }
since=$(now_rfc3339)
sts_manifest ledger app:1 >"$WORK/ledger-v1.yaml"
k apply -f "$WORK/ledger-v1.yaml" >/dev/null
expect "a StatefulSet created opted in: stored tuned at generation 1" "$(sts_settings ledger)" "6 46 1"
eventually 10 bash -c "[ \$(k get controllerrevisions -n '$NS' -l app=ledger --no-headers 2>/dev/null | wc -l) = 1 ]"
expect "... one ControllerRevision" "$(revisions ledger)" 1
sts_manifest ledger app:2 >"$WORK/ledger-v2.yaml"
k apply -f "$WORK/ledger-v2.yaml" >/dev/null
expect "a deploy (kubectl apply -f, the grace named 30) keeps the budget: generation 2" \
  "$(sts_settings ledger)" "6 46 2"
eventually 10 bash -c "[ \$(k get controllerrevisions -n '$NS' -l app=ledger --no-headers 2>/dev/null | wc -l) = 2 ]"
sleep 2  # time for a third revision, or a gracekeeper write, to show
expect "... exactly one new ControllerRevision: one rollout" "$(revisions ledger)" 2
expect "... no gracekeeper write of the StatefulSet (audit log)" \
  "$(gk_writes_since "$since" | grep -c ' statefulsets/ ')" 0

# ------------------------- 5. not opted in: the webhook never sees the object
before=$(metric 'gracekeeper_webhook_admissions_total{outcome="ignored"}')
before_all=$(curl -s "http://127.0.0.1:$OP_PORT/metrics" | awk '/^gracekeeper_webhook_admissions_total/ { s += $2 } END { print s + 0 }')
deployment "$NS" plain '{}'
sleep 1
after_all=$(curl -s "http://127.0.0.1:$OP_PORT/metrics" | awk '/^gracekeeper_webhook_admissions_total/ { s += $2 } END { print s + 0 }')
expect "an unlabelled Deployment never reaches the webhook (objectSelector)" "$after_all" "$before_all"
expect "...and is stored as written" "$(settings "$NS" plain)" "none 30 25% 25%"
patched=$(metric 'gracekeeper_webhook_admissions_total{outcome="patched"}')
[ "${patched%.*}" -ge 4 ] && ok "gracekeeper_webhook_admissions_total{outcome=\"patched\"} counts ($patched)" ||
  not_ok "patched admissions: $patched"

# ------------------------------------------------- 6. bad input to the endpoint
review() {  # review APIVERSION UID KIND OBJECT-JSON
  jq -cn --arg v "$1" --arg uid "$2" --arg kind "$3" --argjson o "$4" \
    '{apiVersion: $v, kind: "AdmissionReview", request: {uid: $uid, kind: {group: "apps", version: "v1", kind: $kind},
      namespace: "'"$NS"'", operation: "CREATE", object: $o}}'
}
object=$(k create --dry-run=client -f "$WORK/checkout-v1.yaml" -o json)
bad_before=$(metric 'gracekeeper_webhook_errors_total{reason="bad_request"}')
post() { hook_curl -o "$WORK/answer" -w '%{http_code}' -X POST -H 'Content-Type: application/json' "$@" "$URL"; }
expect "malformed JSON: 400" "$(post -d '{"apiVersion": ')" 400
grep -q "malformed JSON" "$WORK/answer" && ok "...naming the problem ($(head -c 80 "$WORK/answer"))" || not_ok "answer: $(cat "$WORK/answer")"
expect "AdmissionReview v1beta1: 400" "$(post -d "$(review admission.k8s.io/v1beta1 u1 Deployment "$object")")" 400
expect "missing request.uid: 400" "$(post -d "$(review admission.k8s.io/v1 '' Deployment "$object")")" 400
code=$(post -d "$(review admission.k8s.io/v1 u2 Pod '{"metadata":{"name":"p"}}')")
expect "a wrong kind: allowed unchanged" "$code $(jq -c '.response | [.uid, .allowed, has("patch")]' "$WORK/answer")" '200 ["u2",true,false]'
head -c 10000000 /dev/zero | tr '\0' ' ' >"$WORK/big"
expect "a 10 MB body: 413" "$(post --data-binary @"$WORK/big")" 413
expect "GET: 405" "$(hook_curl -o /dev/null -w '%{http_code}' "$URL")" 405
rss_before=$(awk '/VmRSS/ { print $2 }' /proc/$OP_PID/status)

# Slow-loris clients: 20 TLS connections sending a byte every 0.5 s.
python3 - "$PORT" "$CERTS/ca.crt" >"$WORK/loris.log" 2>&1 <<'PY' &
import socket, ssl, sys, threading, time
port, ca = int(sys.argv[1]), sys.argv[2]
context = ssl.create_default_context(cafile=ca)
closed = []
def loris():
    s = context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
    start = time.time()
    try:
        s.sendall(b"POST /mutate-deployments HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        while time.time() - start < 30:
            s.sendall(b"{")
            s.settimeout(0.5)
            try:
                if s.recv(1024) == b"":
                    break
            except socket.timeout:
                pass
    except OSError:
        pass
    closed.append(time.time() - start)
threads = [threading.Thread(target=loris) for _ in range(20)]
for t in threads: t.start()
for t in threads: t.join()
print("closed after", " ".join("%.1f" % c for c in sorted(closed)))
PY
LORIS_PID=$!
sleep 2
start=$(date +%s%N)
code=$(post -d "$(review admission.k8s.io/v1 u3 Deployment "$object")")
ms=$((($(date +%s%N) - start) / 1000000))
expect "with 20 slow-loris clients connected, a review is answered with a patch (${ms} ms)" \
  "$code $(jq -c '.response | [.uid, .allowed, .patchType]' "$WORK/answer")" '200 ["u3",true,"JSONPatch"]'
wait "$LORIS_PID"
LORIS_PID=""
closed=$(cat "$WORK/loris.log")
echo "# slow loris: $closed"
awk '{ for (i = 3; i <= NF; i++) if ($i > 15) bad = 1 } END { exit bad || NF < 22 }' <<<"$closed" &&
  ok "the slow-loris connections were cut by the server's timeout (10 s)" || not_ok "slow loris: $closed"
code=$(post -d "$(review admission.k8s.io/v1 u4 Deployment "$object")")
expect "after the bad input the process still serves" "$code $(kill -0 "$OP_PID" && echo alive)" "200 alive"

# Idle connections (issue 46 item 5): 100 to the webhook's port and 100 to
# the health port, open and silent. Each listener closes the longest-idle
# one to make room, so a review and a probe are still answered.
python3 - "$PORT" "$OP_PORT" >"$WORK/idle.log" 2>&1 <<'PY' &
import socket, sys, time
held = []
for port in (int(sys.argv[1]), int(sys.argv[2])):
    for _ in range(100):
        held.append(socket.create_connection(("127.0.0.1", port)))
print("open", len(held), flush=True)
time.sleep(30)
PY
LORIS_PID=$!
idle_open() { grep -q "open 200" "$WORK/idle.log"; }
eventually 10 idle_open || not_ok "the idle connections: $(cat "$WORK/idle.log")"
start=$(date +%s%N)
code=$(post -d "$(review admission.k8s.io/v1 u5 Deployment "$object")")
probe=$(curl -s --max-time 5 -w ' %{http_code}' "http://127.0.0.1:$OP_PORT/healthz")
ms=$((($(date +%s%N) - start) / 1000000))
expect "with 100 idle connections on each port, a review and /healthz are answered (${ms} ms)" \
  "$code $(jq -c '.response | [.uid, .allowed, .patchType]' "$WORK/answer") $probe" '200 ["u5",true,"JSONPatch"] ok 200'
kill "$LORIS_PID" 2>/dev/null
wait "$LORIS_PID" 2>/dev/null
LORIS_PID=""
rss_after=$(awk '/VmRSS/ { print $2 }' /proc/$OP_PID/status)
echo "# operator RSS: ${rss_before} kB before the bad input, ${rss_after} kB after"
[ "$rss_after" -lt 102400 ] && ok "memory stays bounded (RSS ${rss_after} kB)" || not_ok "RSS ${rss_after} kB"
bad_after=$(metric 'gracekeeper_webhook_errors_total{reason="bad_request"}')
expect "gracekeeper_webhook_errors_total{reason=\"bad_request\"} counts the three 400s" \
  "$((${bad_after%.*} - ${bad_before%.*}))" 3

# ------------------------------ 7. the webhook stopped: Ignore, then the repair
kill -STOP "$OP_PID"
start=$(date +%s%N)
k apply -f "$WORK/checkout-v4.yaml" >"$WORK/stopped.out" 2>&1
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
expect "webhook stopped: the deploy is admitted (failurePolicy Ignore)" "$rc" 0
[ "$ms" -lt 5000 ] && ok "...within the timeout (${ms} ms; timeoutSeconds 2)" || not_ok "the deploy took ${ms} ms"
# (The hook stays: kubectl's three-way merge removes only what the last
# applied manifest had.)
expect "...unchanged: the manifest's grace and strategy" "$(settings "$NS" checkout)" "6 30 25% 25%"
kill -CONT "$OP_PID"
eventually 20 settings_are "$NS" checkout "6 46 0 1" &&
  ok "the reconciler repairs it once the process runs again" ||
  not_ok "not repaired: '$(settings "$NS" checkout)'"

# ------------------ 8. a GitOps applier, a risen figure, and pods still rolling
# (issue 32, items 6 and 8) In a namespace of its own: Flux's server-side
# apply owns the fields; the webhook put the budget in at creation. The
# figure rises between deploys: gracekeeper does not take Flux's fields (its
# next apply without --force-conflicts would fail), it says why and what
# fixes it, and Flux's next apply carries the new budget. Meanwhile, with no
# node, the new template's pods never become ready: the old ones stay, and
# the policy counts the Deployment Rolling, not compliant.
FNS=wh-flux
namespace_with_policy "$FNS"
flux_manifest() {  # IMAGE [REPLICAS]
  manifest flux "$1" | sed -e "s/namespace: $NS/namespace: $FNS/" -e "s/replicas: 2/replicas: ${2:-2}/"
}
flux_apply() { flux_manifest "$@" | k apply --server-side --field-manager=flux -f - >"$WORK/flux.out" 2>&1; }
sdp_deployments() { jp sdp "$FNS" default '{.status.deployments.managed} {.status.deployments.compliant} {.status.deployments.rolling}'; }
budget_holds() { jp sdp "$FNS" default '{.status.conditions[?(@.type=="BudgetHolds")].reason}'; }
flux_apply app:1 && expect "flux's server-side apply: stored tuned" "$(settings "$FNS" flux)" "6 46 0 1" ||
  not_ok "flux apply: $(cat "$WORK/flux.out")"
eventually 20 bash -c "[ \"\$(kubectl get sdp -n $FNS default -o jsonpath='{.status.deployments.compliant}')\" = 1 ]" &&
  ok "created tuned, every pod of one template: compliant ($(sdp_deployments))" ||
  not_ok "not compliant after creation: $(sdp_deployments) $(budget_holds)"
flux_apply app:2  # a new image: new pods never get ready without a node, old ones stay
eventually 20 bash -c "[ \"\$(kubectl get sdp -n $FNS default -o jsonpath='{.status.deployments.rolling}')\" = 1 ]" &&
  ok "a rollout with old pods left: Rolling ($(sdp_deployments))" ||
  not_ok "not counted rolling: $(sdp_deployments)"
expect "... not compliant, BudgetHolds reason Rolling" "$(sdp_deployments) $(budget_holds)" "1 0 1 Rolling"
k get sdp -n "$FNS" -o wide >"$WORK/sdp.out"
# By the header's character positions: an empty cell (STATEFULSETS, LATE) is blank.
awk 'NR == 1 { c = index($0, "COMPLIANT"); r = index($0, "ROLLING") }
     NR == 2 { split(substr($0, c), a, " "); split(substr($0, r), b, " "); exit !(c && r && a[1] == 0 && b[1] == 1) }' "$WORK/sdp.out" &&
  ok "kubectl get sdp -o wide shows it: COMPLIANT 0, ROLLING 1" || not_ok "kubectl get sdp -o wide: $(cat "$WORK/sdp.out")"
flux_apply app:2 0  # scaled to 0 by the next deploy: the old pods go
eventually 20 bash -c "[ \"\$(kubectl get sdp -n $FNS default -o jsonpath='{.status.deployments.compliant}')\" = 1 ]" &&
  ok "once no old pod is left: compliant again ($(sdp_deployments) $(budget_holds))" ||
  not_ok "still not compliant: $(sdp_deployments) $(budget_holds)"

since=$(now_rfc3339)
k patch sdp default -n "$FNS" --type merge -p '{"spec":{"propagation":{"staticSeconds":8}}}' >/dev/null
# The reconciler's write conflicts with flux's fields: reported with its fix.
eventually 20 bash -c "kubectl get events.events.k8s.io -n $FNS -o json | jq -e '.items[] | select(.reason == \"FieldConflict\")' >/dev/null" &&
  ok "the figure rose: a FieldConflict with flux" || not_ok "no FieldConflict: $(k get events.events.k8s.io -n "$FNS" -o json | jq -r '[.items[].reason] | join(",")')"
note_text=$(k get events.events.k8s.io -n "$FNS" -o json | jq -r '[.items[] | select(.reason == "FieldConflict") | .note][0] // ""')
case "$note_text" in
  *'"flux"'*'next apply or sync carries this change'*) ok "... its note names flux and the fix (its next apply)";;
  *) not_ok "FieldConflict note: $note_text";;
esac
expect "... and gracekeeper took none of flux's fields (at 0 replicas the surge stays 25%)" "$(settings "$FNS" flux)" "6 46 0 25%"
flux_apply app:2 0 || not_ok "flux's next apply failed: $(cat "$WORK/flux.out")"
expect "flux's next apply (same manifest) carries the new budget" "$(settings "$FNS" flux)" "12 52 0 25%"
sleep 2
expect "... with no gracekeeper write of the Deployment since the rise (audit log)" \
  "$(gk_writes_since "$since" | grep -cE ' deployments/ .* 20[01]$')" 0
eventually 20 bash -c "[ \"\$(kubectl get sdp -n $FNS default -o jsonpath='{.status.deployments.pending}')\" = 0 ]" &&
  ok "... and nothing is pending any more" || not_ok "pending: $(jp sdp "$FNS" default '{.status.deployments}')"

# --------------- 9. field manager gracekeeper is gracekeeper's only from its user
# (issue 45, item 9) The operator learns its own user from a SelfSubjectReview
# at start: here the admin kubeconfig's, gracekeeper-admin. A write under
# field manager gracekeeper from that user is the reconciler's own and passes
# unchanged; from anyone else it is mutated like any other.
own_user=$(jq -r 'select(.msg | startswith("the webhook'"'"'s own writes")) | .user' "$OP_LOG" | head -1)
expect "the operator learned its own user (SelfSubjectReview)" "$own_user" gracekeeper-admin
manifest impostor app:1 >"$WORK/impostor.yaml"
own=$(k apply --server-side --field-manager=gracekeeper --dry-run=server -f "$WORK/impostor.yaml" -o json |
  jq -r '.spec.template.spec.terminationGracePeriodSeconds')
expect "field manager gracekeeper from the operator's own user (a dry run): admitted unchanged" "$own" 30
k create rolebinding mallory-edit -n "$NS" --clusterrole=edit --user=mallory >/dev/null
since=$(now_rfc3339)
if k --as=mallory apply --server-side --field-manager=gracekeeper -f "$WORK/impostor.yaml" >"$WORK/impostor.out" 2>&1; then
  expect "field manager gracekeeper from user mallory: stored tuned at generation 1" \
    "$(generation impostor) $(settings "$NS" impostor)" "1 6 46 0 1"
  mutations_of impostor "$since" | grep -q . &&
    ok "... the audit log shows the webhook's mutation ($(mutations_of impostor "$since" | head -1))" ||
    not_ok "... no mutation of mallory's apply in the audit log"
else
  not_ok "mallory's apply: $(cat "$WORK/impostor.out")"
fi

# ------------------ 10. the wait falls to 0: a deploy drops gracekeeper's hook
# (issue 45, item 9) minSeconds 0 and a figure of 0 s make the wait 0: the
# plan removes gracekeeper's own hook. The reconciler's re-tune waits for a
# rollout slot (maxConcurrentRollouts 1, held by `busy`, whose new pods never
# get ready without a node), so the next deploy of `zero` is where the
# webhook puts it in, and its patch must remove the hook, not keep it.
ZNS=wh-zero
namespace_with_policy "$ZNS"
k patch sdp default -n "$ZNS" --type merge \
  -p '{"spec":{"preStop":{"minSeconds":0},"changes":{"minIntervalSeconds":0,"maxConcurrentRollouts":1}}}' >/dev/null
zero_manifest() {  # NAME IMAGE
  manifest "$1" "$2" | sed -e "s/namespace: $NS/namespace: $ZNS/" -e "s/replicas: 2/replicas: 1/"
}
zero_manifest busy app:1 | k apply -f - >/dev/null
zero_manifest zero app:1 >"$WORK/zero-v1.yaml"
zero_manifest zero app:2 >"$WORK/zero-v2.yaml"
k apply -f "$WORK/zero-v1.yaml" >/dev/null
expect "zero and busy created opted in: tuned at creation" \
  "$(settings "$ZNS" zero); $(settings "$ZNS" busy)" "6 46 0 1; 6 46 0 1"
zero_manifest busy app:2 | k apply -f - >/dev/null  # its new pod never gets ready: rolling
zrolling() { [ "$(jp sdp "$ZNS" default '{.status.deployments.rolling}')" = 1 ]; }
eventually 20 zrolling && ok "busy rolls out, holding the one rollout slot" ||
  not_ok "busy not rolling: $(jp sdp "$ZNS" default '{.status.deployments}')"
k patch sdp default -n "$ZNS" --type merge -p '{"spec":{"propagation":{"staticSeconds":0}}}' >/dev/null
zpending() { [ "$(jp sdp "$ZNS" default '{.status.recommended.preStopSeconds}')" = 0 ]; }
eventually 20 zpending && ok "the figure is 0 s: preStop 0 ($(jp sdp "$ZNS" default '{.status.deployments}'))" ||
  not_ok "after staticSeconds 0: $(jp sdp "$ZNS" default '{.status.recommended} {.status.deployments}')"
sleep 2  # time for a re-tune, were there a slot
expect "... zero keeps its hook: its re-tune waits for a slot" "$(settings "$ZNS" zero)" "6 46 0 1"
since=$(now_rfc3339)
before_gen=$(jp deployment "$ZNS" zero '{.metadata.generation}')
k apply -f "$WORK/zero-v2.yaml" >"$WORK/zero.out" 2>&1 || not_ok "zero's deploy: $(cat "$WORK/zero.out")"
expect "a deploy of zero after the wait fell to 0: no hook, grace 0 + 30 + 10" "$(settings "$ZNS" zero)" "none 40 0 1"
expect "... and no lifecycle left (gracekeeper's hook was all of it)" \
  "$(k get deployment -n "$ZNS" zero -o json | jq -c '.spec.template.spec.containers[0] | has("lifecycle")')" false
expect "... one generation" "$(jp deployment "$ZNS" zero '{.metadata.generation}')" "$((before_gen + 1))"
mutations_of zero "$since" | grep -q . && ok "... by the webhook's mutation (audit log)" ||
  not_ok "... no mutation of zero's deploy in the audit log"
sleep 2
expect "... and no gracekeeper write of zero since (audit log)" \
  "$(gk_writes_since "$since" | grep -c ' deployments/ zero ')" 0

stop_operator
expect "the operator exits 0 on SIGTERM" "$OP_EXIT" 0
OP_PID=""

# --metrics-secure (issue 46 item 5): /metrics for a token the API server
# authenticates (TokenReview, else 401) whose user may get /metrics
# (SubjectAccessReview, else 403); the probes stay open.
start_operator secure --metrics-secure
metrics_code() { curl -s -o "$WORK/metrics.out" -w '%{http_code}' "$@" "http://127.0.0.1:$OP_PORT/metrics"; }
k create serviceaccount scraper -n "$NS" >/dev/null
token=$(k create token scraper -n "$NS")
expect "--metrics-secure: no token 401, a bad one 401, one without RBAC 403; /healthz open" \
  "$(metrics_code) $(metrics_code -H 'Authorization: Bearer nonsense') $(metrics_code -H "Authorization: Bearer $token") $(curl -s "http://127.0.0.1:$OP_PORT/healthz")" "401 401 403 ok"
k create clusterrole gk-metrics-reader --verb=get --non-resource-url=/metrics >/dev/null
k create clusterrolebinding gk-metrics-reader --clusterrole=gk-metrics-reader --serviceaccount="$NS:scraper" >/dev/null
token=$(k create token scraper -n "$NS")  # a new token: the old one's 403 is kept 10 s
granted() { [ "$(metrics_code -H "Authorization: Bearer $token")" = 200 ]; }
eventually 10 granted && ok "--metrics-secure: with get on /metrics, 200 ($(grep -c '^# TYPE' "$WORK/metrics.out") metric families)" ||
  not_ok "--metrics-secure: with the role: $(metrics_code -H "Authorization: Bearer $token")"
stop_operator
OP_PID=""
k delete mutatingwebhookconfiguration "$HOOK" >/dev/null
finish
