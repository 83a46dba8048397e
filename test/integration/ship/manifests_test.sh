#!/usr/bin/env bash
# The shipped manifests against the real API server: the chart (helm template)
# and config/default (kustomize) accepted by a server-side dry run, under the
# restricted Pod Security Standard; the NOTES helm install prints; then the chart's RBAC installed for real
# and checked with `kubectl auth can-i` as the operator's ServiceAccount: every
# verb the operator uses is allowed, and nothing else we can think of.
#
# usage: test/integration/ship/manifests_test.sh CLUSTER_DIR
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
CLUSTER="${1:?usage: manifests_test.sh CLUSTER_DIR}"
. "$ROOT/test/integration/ship/lib.sh"
helm_binary
export KUBECONFIG="$CLUSTER/kubeconfig"
work_dir
NS=gracekeeper-system
SA="system:serviceaccount:$NS:gracekeeper"

cleanup() {
  # The RBAC objects go; namespaces stay (without kube-controller-manager
  # a deleted namespace never finishes terminating, and a re-run needs them).
  k delete clusterrole,clusterrolebinding -l app.kubernetes.io/instance=gracekeeper --ignore-not-found >/dev/null 2>&1
  k delete serviceaccount,role,rolebinding -n "$NS" -l app.kubernetes.io/instance=gracekeeper --ignore-not-found >/dev/null 2>&1
}
on_exit cleanup

k apply --server-side -f "$ROOT/crds/shutdownpolicies.gracekeeper.dev.yaml" >/dev/null
k wait --for condition=established crd/shutdownpolicies.gracekeeper.dev >/dev/null
for ns in "$NS" ship-watch; do
  k get namespace "$ns" >/dev/null 2>&1 || k create namespace "$ns" >/dev/null
done
# Pod Security admission warns about (and would refuse) a pod template that
# does not meet "restricted".
k label namespace "$NS" --overwrite pod-security.kubernetes.io/enforce=restricted \
  pod-security.kubernetes.io/warn=restricted >/dev/null

# dry_run NAME COMMAND...: COMMAND prints manifests; the API server must take
# them all (server-side apply, dry run) without a Pod Security warning.
dry_run() {
  local what=$1
  shift
  if ! "$@" >"$WORK/manifests.yaml" 2>"$WORK/render.err"; then
    not_ok "$what: rendering failed"; note <"$WORK/render.err"; return
  fi
  local n
  n=$(grep -c '^kind:' "$WORK/manifests.yaml")
  # --force-conflicts: on the shared cluster, objects of the same names may
  # already exist with fields owned by others (the operator tunes the sample
  # Deployment); the question here is only whether the server accepts them.
  if k apply --server-side --field-manager=ship-test --force-conflicts --dry-run=server -f "$WORK/manifests.yaml" >"$WORK/apply.out" 2>&1; then
    if grep -qi 'violate PodSecurity' "$WORK/apply.out"; then not_ok "$what: Pod Security warning"; note <"$WORK/apply.out"
    else ok "$what: $n objects accepted by the API server (server-side dry run, restricted Pod Security)"; fi
  else
    not_ok "$what: refused by the API server"; note <"$WORK/apply.out"
  fi
}
HT=("$HELM" template gracekeeper "$ROOT/charts/gracekeeper" --namespace "$NS")
dry_run "helm template (defaults, with CRDs)" "${HT[@]}" --include-crds
dry_run "helm template (one replica, no leader election)" "${HT[@]}" --set replicas=1 --set leaderElection.enabled=false
dry_run "helm template (watchNamespace ship-watch)" "${HT[@]}" --set watchNamespace=ship-watch
dry_run "helm template (Prometheus with CA and token Secrets)" "${HT[@]}" \
  --set prometheus.url=https://prometheus.monitoring.svc:9090 --set prometheus.caSecret=prom-ca --set prometheus.tokenSecret=prom-token
dry_run "kubectl kustomize config/default" kubectl kustomize "$ROOT/config/default"
if k apply --server-side --field-manager=ship-test --dry-run=server -k "$ROOT/config/default" >"$WORK/k.out" 2>&1; then
  ok "kubectl apply -k config/default --dry-run=server ($(grep -c 'server dry run' "$WORK/k.out") objects)"
else
  not_ok "kubectl apply -k config/default"; note <"$WORK/k.out"
fi
k get namespace shop-prod >/dev/null 2>&1 || k create namespace shop-prod >/dev/null   # the samples' namespace
dry_run "config/samples (after the CRD)" kubectl kustomize "$ROOT/config/samples"

# ------------------------------------------------------------- NOTES.txt (helm install --dry-run asks the cluster)
"$HELM" install gracekeeper "$CHART" --namespace ship-watch --dry-run=client >"$WORK/notes" 2>&1
notes_has() { grep -qF -- "$2" "$WORK/notes" && ok "NOTES: $1" || not_ok "NOTES lack $1 ('$2')"; }
notes_has "how to opt a Deployment in" 'gracekeeper.dev/enabled="true"'
notes_has "to create a ShutdownPolicy" 'kind: ShutdownPolicy'
notes_has "where to look (policies)" 'kubectl get sdp -A'
notes_has "where to look (events)" 'kubectl describe deployment'
notes_has "the way back (revert)" 'gracekeeper revert --namespace <namespace>'
"$HELM" install gracekeeper "$CHART" --namespace ship-watch --dry-run=client --set webhook.enabled=true >"$WORK/notes" 2>&1
notes_has "the webhook certificates' Secret left by uninstall" 'kubectl -n ship-watch delete secret gracekeeper-webhook-certs'

# ------------------------------------------------------------- RBAC for real
"${HT[@]}" --show-only templates/serviceaccount.yaml --show-only templates/clusterrole.yaml \
  --show-only templates/clusterrolebinding.yaml --show-only templates/role.yaml \
  --show-only templates/rolebinding.yaml >"$WORK/rbac.yaml"
k apply -f "$WORK/rbac.yaml" >"$WORK/rbac.out" 2>&1 && ok "the chart's RBAC installed ($(wc -l <"$WORK/rbac.out") objects)" \
  || { not_ok "installing the chart's RBAC"; note <"$WORK/rbac.out"; }

# can VERB RESOURCE [flags...] / cannot ...: kubectl auth can-i as the ServiceAccount.
can_i() { k auth can-i --as "$SA" "$@" 2>/dev/null; }
can() { local a; a=$(can_i "$@"); [ "$a" = yes ] && ok "can $*" || not_ok "cannot $* (answer '$a')"; }
cannot() { local a; a=$(can_i "$@"); [ "$a" = no ] && ok "cannot $*" || not_ok "CAN $* (answer '$a')"; }

# What the operator does (each verb is in its code path; see the ClusterRole's comments).
can get /version
for v in get list watch patch; do can "$v" deployments.apps --all-namespaces; can "$v" deployments.apps -n shop-prod; done
for v in get list watch patch; do can "$v" statefulsets.apps --all-namespaces; can "$v" statefulsets.apps -n shop-prod; done
for v in get list watch; do can "$v" shutdownpolicies.gracekeeper.dev --all-namespaces; done
for v in list watch; do can "$v" services --all-namespaces; done
can update shutdownpolicies.gracekeeper.dev --subresource=status -n shop-prod
can patch shutdownpolicies.gracekeeper.dev --subresource=status -n shop-prod
for v in create patch; do can "$v" events.events.k8s.io -n shop-prod; done
can list events.events.k8s.io --all-namespaces
for v in list watch; do can "$v" endpointslices.discovery.k8s.io --all-namespaces; can "$v" endpointslices.discovery.k8s.io -n shop-prod; done
for v in list watch; do can "$v" pods --all-namespaces; done   # the measured drain
for v in get create update; do can "$v" leases.coordination.k8s.io -n "$NS"; done

# Nothing else.
for v in get list watch; do cannot "$v" secrets --all-namespaces; cannot "$v" secrets -n "$NS"; done
for v in create update delete deletecollection; do cannot "$v" deployments.apps -n shop-prod; done
cannot delete deployments.apps --all-namespaces
cannot patch deployments.apps --subresource=scale -n shop-prod
for v in create update patch delete; do cannot "$v" shutdownpolicies.gracekeeper.dev -n shop-prod; done
cannot create pods -n shop-prod
cannot delete pods -n shop-prod
cannot get pods -n shop-prod
cannot get configmaps -n shop-prod
for v in get create update patch delete; do cannot "$v" services -n shop-prod; done
for v in get create update patch delete; do cannot "$v" endpointslices.discovery.k8s.io -n shop-prod; done
cannot list endpoints --all-namespaces         # core/v1 Endpoints: the operator reads EndpointSlices only
cannot create jobs.batch -n shop-prod
cannot list jobs.batch --all-namespaces
cannot patch replicasets.apps -n shop-prod
for v in create update delete; do cannot "$v" statefulsets.apps -n shop-prod; done
cannot patch statefulsets.apps --subresource=scale -n shop-prod
cannot create events -n shop-prod            # core/v1 events: the operator writes events.k8s.io/v1 only
cannot watch events.events.k8s.io --all-namespaces
cannot delete events.events.k8s.io -n shop-prod
for v in get create update; do cannot "$v" leases.coordination.k8s.io -n default; cannot "$v" leases.coordination.k8s.io -n kube-system; done
cannot list leases.coordination.k8s.io --all-namespaces
cannot delete leases.coordination.k8s.io -n "$NS"
cannot create customresourcedefinitions.apiextensions.k8s.io
cannot create clusterrolebindings.rbac.authorization.k8s.io
cannot impersonate serviceaccounts -n "$NS"
cannot create serviceaccounts/token -n "$NS"
cannot '*' '*'
cannot '*' '*' -n "$NS"

# The complete list, as the API server computes it (SelfSubjectRulesReview) in
# the operator's namespace: the rules above plus what every authenticated user
# has (self-reviews, cluster trust bundles); non-resource URLs left out.
rules=$(k auth can-i --as "$SA" --list -n "$NS" --no-headers 2>/dev/null | awk '$1 !~ /^\[/ {print $1}' | LC_ALL=C sort -u | tr '\n' ' ')
want=$(printf '%s\n' deployments.apps statefulsets.apps services pods endpointslices.discovery.k8s.io shutdownpolicies.gracekeeper.dev shutdownpolicies.gracekeeper.dev/status \
  events.events.k8s.io leases.coordination.k8s.io selfsubjectreviews.authentication.k8s.io \
  selfsubjectaccessreviews.authorization.k8s.io selfsubjectrulesreviews.authorization.k8s.io \
  clustertrustbundles.certificates.k8s.io | LC_ALL=C sort -u | tr '\n' ' ')
expect "kubectl auth can-i --list -n $NS: resources" "$rules" "$want"
secrets=$(k auth can-i --as "$SA" --list -n "$NS" --no-headers 2>/dev/null | grep -cE '^(secrets|\*) ' || true)
expect "... no secrets or * among them" "$secrets" 0

# ------------------------------------------------------------- the admission webhook (self-managed certificates)
dry_run "helm template (webhook.enabled)" "${HT[@]}" --set webhook.enabled=true
dry_run "kubectl kustomize config/without-webhook" kubectl kustomize "$ROOT/config/without-webhook"
"${HT[@]}" --set webhook.enabled=true --show-only templates/webhook-rbac.yaml >"$WORK/webhook-rbac.yaml"
k apply -f "$WORK/webhook-rbac.yaml" >"$WORK/webhook-rbac.out" 2>&1 && ok "the webhook's RBAC installed ($(wc -l <"$WORK/webhook-rbac.out") objects)" \
  || { not_ok "installing the webhook's RBAC"; note <"$WORK/webhook-rbac.out"; }
CERTS=gracekeeper-webhook-certs
# create cannot be limited by resourceNames: any name, in this namespace only.
can create secrets -n "$NS"
cannot create secrets -n shop-prod
for v in get update; do can "$v" "secrets/$CERTS" -n "$NS"; cannot "$v" secrets/other -n "$NS"; cannot "$v" "secrets/$CERTS" -n shop-prod; done
for v in list watch patch delete; do cannot "$v" "secrets/$CERTS" -n "$NS"; done
for v in get list watch; do cannot "$v" secrets -n "$NS"; done
for v in get patch; do
  can "$v" mutatingwebhookconfigurations.admissionregistration.k8s.io/gracekeeper
  cannot "$v" mutatingwebhookconfigurations.admissionregistration.k8s.io/other
  cannot "$v" validatingwebhookconfigurations.admissionregistration.k8s.io/gracekeeper
done
for v in list watch create update delete; do cannot "$v" mutatingwebhookconfigurations.admissionregistration.k8s.io/gracekeeper; done
cannot list mutatingwebhookconfigurations.admissionregistration.k8s.io

finish
