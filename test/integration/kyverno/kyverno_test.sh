#!/usr/bin/env bash
# A real mutating engine (issue 48 item 4): Kyverno, built from its Go module
# (test/tools/build-kyverno), runs out of cluster against a control plane of
# this suite's own, as its admission webhook on loopback, with two mutate
# policies of the kind its users publish, for the pods of one namespace
# (pods only: autogen-controllers none, as a mesh injector works):
#   - inject-proxy: adds a sidecar, Istio's istio-proxy, to every pod;
#   - cap-grace:    sets every pod's terminationGracePeriodSeconds to 10.
# This control plane has no kubelet and no controller manager: the test
# creates a pod of the governed Deployment's template as its ReplicaSet would,
# and Kyverno mutates it on the way in. gracekeeper then:
#   - reports both mutations on the workload (PodDiffersFromTemplate), and
#     counts it violating (BudgetHolds NotCompliant, kubectl get sdp -o wide);
#   - holds the budget where it can: the injected proxy's, through Istio's
#     proxy.istio.io/config on the template (docs/api.md, "Mesh proxies");
#   - says what it cannot hold: the grace Kyverno caps on every pod, whatever
#     the template says (BudgetExceeded on the pod), and, with Kyverno's
#     autogen rules on, a grace write it sets back (WriteReverted).
#
# usage: test/integration/kyverno/kyverno_test.sh GRACEKEEPER_BINARY
# Root: everything runs in a network namespace of its own with loopback
# only (Kyverno among it, once built: the build needs the module proxy).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
GK="${1:?usage: kyverno_test.sh GRACEKEEPER_BINARY}"
if [ -z "${GK_KYVERNO:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "skipped: root needed (a network namespace of its own)"; exit 77; }
  GK_KYVERNO=$("$ROOT/test/tools/build-kyverno") || { echo "Bail out! test/tools/build-kyverno failed"; exit 1; }
  export GK_KYVERNO
  exec unshare --net -- bash -c 'ip link set lo up && exec bash "$0" "$@"' "$0" "$@"
fi
KYVERNO="$GK_KYVERNO"
. "$ROOT/test/integration/operator/lib.sh"
work_dir /tmp/gk-kyverno.XXXXXX
show_logs_on_failure 30
CRDS="$(dirname "$(dirname "$KYVERNO")")/src/config/crds"
NS=shop
HASH=5c4b8d9f7
KY_PID=""

cleanup() {
  [ -n "${OP_PID:-}" ] && { kill -KILL "$OP_PID" 2>/dev/null; wait "$OP_PID" 2>/dev/null; }
  [ -n "$KY_PID" ] && { kill -TERM -- "-$KY_PID" 2>/dev/null; sleep 1; kill -KILL -- "-$KY_PID" 2>/dev/null; }
}
start_cluster "$WORK/cluster"
on_exit cleanup

# ------------------------------------------------------------- Kyverno
k create namespace kyverno >/dev/null
k create configmap kyverno -n kyverno >/dev/null
k create configmap kyverno-metrics -n kyverno >/dev/null
for dir in kyverno policies.kyverno.io reports policyreport; do
  k apply --server-side -f "$CRDS/$dir" >/dev/null 2>>"$WORK/crds.log" || not_ok "Kyverno's CRDs in $dir"
done
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Out of cluster: --serverIP makes its webhooks call https://127.0.0.1:PORT,
# with a certificate for that address its own controller issues.
KYVERNO_NAMESPACE=kyverno KYVERNO_SERVICEACCOUNT_NAME=kyverno-admission-controller \
KYVERNO_DEPLOYMENT=kyverno-admission-controller KYVERNO_POD_NAME=kyverno-lab KYVERNO_SVC=kyverno-svc \
KYVERNO_ROLE_NAME=kyverno-admission-controller INIT_CONFIG=kyverno METRICS_CONFIG=kyverno-metrics \
  setsid "$KYVERNO" --kubeconfig "$KUBECONFIG" --serverIP "127.0.0.1:$PORT" --webhookServerHost 127.0.0.1 \
  --webhookServerPort "$PORT" --caSecretName kyverno-svc.kyverno.svc.kyverno-tls-ca \
  --tlsSecretName kyverno-svc.kyverno.svc.kyverno-tls-pair --admissionReports=false --disableMetrics \
  --controllerRuntimeMetricsAddress 0 >"$WORK/kyverno.log" 2>&1 </dev/null &
KY_PID=$!
tls_ready() { k get secret -n kyverno kyverno-svc.kyverno.svc.kyverno-tls-pair >/dev/null 2>&1; }
eventually 90 tls_ready && ok "Kyverno $(basename "$(dirname "$(dirname "$KYVERNO")")") issued its certificate" \
  || { not_ok "Kyverno's certificate"; finish; }
k create namespace "$NS" >/dev/null && serve "$NS"
k create serviceaccount default -n "$NS" >/dev/null
cat >"$WORK/policies.yaml" <<YAML
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: inject-proxy
  annotations: {pod-policies.kyverno.io/autogen-controllers: none}
spec:
  rules:
  - name: inject-proxy
    match: {any: [{resources: {kinds: [Pod], namespaces: [$NS]}}]}
    mutate:
      patchStrategicMerge:
        spec:
          containers:
          - name: istio-proxy
            image: proxyv2:1
            ports: [{containerPort: 15090}]
            readinessProbe: {httpGet: {path: /healthz/ready, port: 15021}}
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: cap-grace
  annotations: {pod-policies.kyverno.io/autogen-controllers: none}
spec:
  rules:
  - name: cap-grace
    match: {any: [{resources: {kinds: [Pod], namespaces: [$NS]}}]}
    mutate:
      patchStrategicMerge:
        spec:
          terminationGracePeriodSeconds: 10
YAML
apply_policies() { k apply -f "$WORK/policies.yaml" >/dev/null 2>&1; }
policies_ready() {
  [ "$(k get clusterpolicy -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{end}')" = TrueTrue ]
}
eventually 60 apply_policies && eventually 60 policies_ready && ok "two ClusterPolicies ready: inject-proxy, cap-grace" \
  || { not_ok "Kyverno's policies: $(k get clusterpolicy -o wide 2>&1 | tail -2)"; finish; }

# ------------------------------------------------------------- gracekeeper
k apply --server-side -f "$ROOT/crds/shutdownpolicies.gracekeeper.dev.yaml" >/dev/null
k wait --for condition=established crd/shutdownpolicies.gracekeeper.dev >/dev/null
k apply -f - >/dev/null <<YAML
apiVersion: gracekeeper.dev/v1alpha1
kind: ShutdownPolicy
metadata: {name: default, namespace: $NS}
spec:
  changes: {minIntervalSeconds: 0}
  propagation: {source: Static, staticSeconds: 4}
  drainSeconds: 5
YAML
deployment "$NS" web "$OPTED"
start_operator op || { not_ok "the operator did not become ready"; finish; }
eventually 20 settings_are "$NS" web "6 30 0 1" \
  && ok "web tuned: preStop 6, grace 30 (the user's), maxUnavailable 0: $(settings "$NS" web)" \
  || not_ok "web tuned: $(settings "$NS" web)"

# template_pod NAME HASH: a pod of web's template, as its ReplicaSet would
# create it (NAME is web-HASH-xxxxx): Kyverno mutates it on the way in.
template_pod() {
  k get deployment web -n "$NS" -o json |
    jq --arg name "$1" --arg hash "$2" '{apiVersion: "v1", kind: "Pod",
      metadata: {name: $name, namespace: .metadata.namespace, annotations: .spec.template.metadata.annotations,
                 labels: (.spec.template.metadata.labels + {"pod-template-hash": $hash})},
      spec: (.spec.template.spec + {nodeName: "gk-kyverno-test-absent-node", automountServiceAccountToken: false})}' |
    k create -f - >/dev/null || not_ok "creating $1"
}
# The rollout over, as the Deployment controller (absent here) would say:
# a pod is judged only against a generation its controller has observed.
rollout_over "$NS" web
POD=web-$HASH-k7q2m
template_pod "$POD" "$HASH"
expect "Kyverno capped the pod's grace" "$(jp pod "$NS" "$POD" '{.spec.terminationGracePeriodSeconds}')" 10
expect "... and injected its sidecar" "$(jp pod "$NS" "$POD" '{.spec.containers[*].name}' | tr ' ' '\n' | sort | tr '\n' ' ')" "app istio-proxy "

differs_note() {
  k get events.events.k8s.io -n "$NS" -o json |
    jq -r --arg pod "$POD" '[.items[] | select(.reason == "PodDiffersFromTemplate" and (.note | contains($pod)))] | last | .note // empty'
}
has_differs() { [ -n "$(differs_note)" ]; }

# Where it can: the injected proxy gets its budget on the template.
eventually 20 has_mesh_config "$NS" web && ok "the injected proxy's budget on web's template: $(mesh_config "$NS" web)" \
  || not_ok "no proxy.istio.io/config on web's template"
expect "... the proxy serves through the wait and the drain" \
  "$(mesh_config "$NS" web | jq -c '[.terminationDrainDuration, .proxyMetadata.MINIMUM_DRAIN_DURATION]')" '["11s","6s"]'

# That write is a new generation; once its rollout is over, the pod
# (Kyverno's, whatever the template says) is judged and counted. (The
# operator may have judged it already against the tune's generation, when
# its cache had the status above before the pod.)
rollout_over "$NS" web
eventually 20 has_differs && ok "a Warning PodDiffersFromTemplate on web" || not_ok "no PodDiffersFromTemplate for $POD"
note <<<"$(differs_note)"
grep -qF "container istio-proxy: added to the pod" <<<"$(differs_note)" \
  && ok "... names the sidecar Kyverno injected" || not_ok "... the injected sidecar is not named"
grep -qF "terminationGracePeriodSeconds: 30 in the template, 10 on the pod" <<<"$(differs_note)" \
  && ok "... names the grace Kyverno capped" || not_ok "... the capped grace is not named"
grep -qF "BudgetExceeded: preStop 6s + drain 5s + sidecars 0s + reserve 10s = 21s > terminationGracePeriodSeconds 10s" <<<"$(differs_note)" \
  && ok "... says the budget does not hold on the pod: the grace gracekeeper cannot hold" || not_ok "... what breaks the budget on the pod"
holds_reason() { jp sdp "$NS" default '{.status.conditions[?(@.type=="BudgetHolds")].reason}'; }
holds_is() { [ "$(holds_reason)" = "$1" ]; }
eventually 10 holds_is NotCompliant && ok "BudgetHolds NotCompliant: $(jp sdp "$NS" default '{.status.conditions[?(@.type=="BudgetHolds")].message}')" \
  || not_ok "BudgetHolds: $(holds_reason)"
wide=$(k get sdp default -n "$NS" -o wide)
note <<<"$wide"
expect "kubectl get sdp -o wide: MANAGED, COMPLIANT and PODSDIFFER" \
  "$(for c in MANAGED COMPLIANT PODSDIFFER; do table_column "$c" <<<"$wide"; done | xargs)" "1 0 1"

# The next pod of the new template: Kyverno still caps its grace; its
# proxy now holds (only the grace is reported). The rollout over, as the
# Deployment controller (absent here) would say: a rolling workload's pod
# is not judged.
k delete pod "$POD" -n "$NS" --grace-period=0 --force >/dev/null 2>&1
rollout_over "$NS" web
POD2=web-6f7d8c9b4-p9x4w
template_pod "$POD2" 6f7d8c9b4
POD=$POD2
eventually 20 has_differs && ok "the new template's pod is judged: $(differs_note | cut -c1-120)..." || not_ok "no PodDiffersFromTemplate for $POD2"
if grep -qF "ProxyExitsEarly" <<<"$(differs_note)"; then not_ok "... its proxy still leaves early"; else ok "... its proxy holds (no ProxyExitsEarly)"; fi
grep -qF "BudgetExceeded" <<<"$(differs_note)" && ok "... the capped grace is still reported" || not_ok "... the capped grace is no longer reported"
# ------------------------------------------------------------- autogen: the template set back
# Kyverno's default for a pod policy also rewrites the Deployment's template
# (autogen): gracekeeper's grace comes back capped. A policy that needs a
# longer grace (drain 30 s: 6 + 30 + 10 = 46) makes gracekeeper write it;
# the second write finds the object kept as it was: WriteReverted, and no
# write after it.
k annotate clusterpolicy cap-grace pod-policies.kyverno.io/autogen-controllers- >/dev/null
autogen_ready() {
  k get clusterpolicy cap-grace -o json | jq -e '[.status.autogen.rules[]?.name] | length > 0' >/dev/null 2>&1
}
eventually 30 autogen_ready && ok "cap-grace now rewrites Deployments too (autogen)" || not_ok "cap-grace's autogen rules"
k patch sdp default -n "$NS" --type=merge -p '{"spec":{"drainSeconds":30}}' >/dev/null
reverted_note() {
  k get events.events.k8s.io -n "$NS" -o json |
    jq -r '[.items[] | select(.reason == "WriteReverted" and .regarding.name == "web")] | last | .note // empty'
}
has_reverted() { [ -n "$(reverted_note)" ]; }
eventually 30 has_reverted && ok "a Warning WriteReverted on web: $(reverted_note | cut -c1-160)..." \
  || not_ok "no WriteReverted (grace $(jp deployment "$NS" web '{.spec.template.spec.terminationGracePeriodSeconds}'))"
grep -qF "terminationGracePeriodSeconds: 10s -> 46s" <<<"$(reverted_note)" && ok "... it names the grace it could not hold" \
  || not_ok "... the note: $(reverted_note)"
expect "... the grace stays Kyverno's" "$(jp deployment "$NS" web '{.spec.template.spec.terminationGracePeriodSeconds}')" 10
# Quiet for 25 s, longer than the 20 s between the writes the operator
# sent before WriteReverted existed: nothing is sent.
since=$(now_rfc3339)
sleep 25
expect "... and the same write is not sent again" "$(gk_writes_since "$since" | grep -c ' deployments/ web ' || true)" 0
stop_operator
finish
