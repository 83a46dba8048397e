#!/usr/bin/env bash
# The Helm chart without a cluster: helm lint (also --strict), values.schema.json
# rejecting bad values, what the templates render for each values switch, and
# that the chart and config/ (kustomize) grant the same rights and run the
# operator the same way.
#
# usage: test/integration/ship/chart_test.sh   (no cluster)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
. "$ROOT/test/integration/ship/lib.sh"
helm_binary
work_dir

# ------------------------------------------------------------- lint
for mode in "" --strict; do
  if "$HELM" lint "$CHART" $mode >"$WORK/lint.out" 2>&1 && grep -q '1 chart(s) linted, 0 chart(s) failed' "$WORK/lint.out"; then
    if grep -qE '^\[(WARNING|ERROR)\]' "$WORK/lint.out"; then not_ok "helm lint ${mode:-(default)}: warnings"; note <"$WORK/lint.out"
    else ok "helm lint ${mode:-(default)} is clean"; fi
  else
    not_ok "helm lint ${mode:-(default)} failed"; note <"$WORK/lint.out"
  fi
done
"$HELM" lint "$CHART" --strict --set watchNamespace=shop-prod --set serviceMonitor.enabled=true \
  --set prometheus.url=https://prometheus.monitoring.svc:9090 --set prometheus.caSecret=prom-ca \
  --set prometheus.tokenSecret=prom-token >"$WORK/lint2.out" 2>&1 \
  && ok "helm lint --strict with every switch on" || { not_ok "helm lint --strict with switches"; note <"$WORK/lint2.out"; }
"$HELM" package "$CHART" -d "$WORK" >/dev/null 2>&1 && [ -f "$WORK/gracekeeper-0.1.0.tgz" ] \
  && ok "helm package gives gracekeeper-0.1.0.tgz" || not_ok "helm package"
# grep reads the whole list (no -q): with pipefail, tar killed by SIGPIPE
# after an early match would fail the pipeline.
tar -tzf "$WORK/gracekeeper-0.1.0.tgz" 2>/dev/null | grep -x 'gracekeeper/crds/shutdownpolicies.gracekeeper.dev.yaml' >/dev/null \
  && ok "the package carries the CRD in crds/" || not_ok "no crds/ in the package"

# ------------------------------------------------------------- the schema
# rejected NAME HELM-FLAGS...: helm template must fail, naming the schema.
rejected() {
  local what=$1
  shift
  if "$HELM" template gracekeeper "$CHART" "$@" >/dev/null 2>"$WORK/err"; then
    not_ok "values.schema.json accepts $what"
  elif grep -q "values don't meet the specifications of the schema" "$WORK/err"; then
    ok "values.schema.json rejects $what ($(grep -m1 -oE '^- at .*|^- [a-zA-Z.]+:.*' "$WORK/err" | head -c 90))"
  else
    not_ok "$what: failed, but not by the schema: $(head -c 200 "$WORK/err")"
  fi
}
rejected 'replicas: "two"' --set-string replicas=two
rejected 'replicas: -1' --set replicas=-1
rejected 'an unknown top-level key' --set replica=2
rejected 'an unknown nested key' --set image.registry=example
rejected 'image.pullPolicy: Sometimes' --set image.pullPolicy=Sometimes
rejected 'logFormat: xml' --set logFormat=xml
rejected 'logLevel: trace' --set logLevel=trace
rejected 'prometheus.url without http(s)://' --set prometheus.url=prometheus:9090
rejected 'watchNamespace: a list' --set 'watchNamespace={a,b}'
rejected 'watchNamespace: Not_A_Name' --set watchNamespace=Not_A_Name
rejected 'leaderElection.enabled: "yes"' --set-string leaderElection.enabled=yes
rejected 'metrics.service.port: 70000' --set metrics.service.port=70000
rejected 'serviceMonitor.interval: 30' --set serviceMonitor.interval=30
rejected 'pdb.minAvailable: "half"' --set-string pdb.minAvailable=half
rejected 'extraArgs without --' --set 'extraArgs={oops}'
rejected 'terminationGracePeriodSeconds: 5 (the operator needs 10 s)' --set terminationGracePeriodSeconds=5
rejected 'shutdown.lameDuckSeconds: -1' --set shutdown.lameDuckSeconds=-1
rejected 'topologySpread.whenUnsatisfiable: Sometimes' --set topologySpread.whenUnsatisfiable=Sometimes
# The grace period must cover the preStop sleep, the lame duck, the drain and a reserve.
"$HELM" template gracekeeper "$CHART" --set terminationGracePeriodSeconds=24 >/dev/null 2>"$WORK/err" \
  && not_ok "terminationGracePeriodSeconds 24 < 5 + 10 + 10 rendered" \
  || ok "terminationGracePeriodSeconds below preStop + lame duck + 10 fails to render ($(grep -o 'is less than the preStop sleep' "$WORK/err"))"
rejected 'resources.requests.gpu' --set resources.requests.gpu=1

# ------------------------------------------------------------- what renders
# Most checks below read the chart without the webhook; the webhook's own
# section reads the default (webhook on).
d=$(render --set webhook.enabled=false)
expect "objects without the webhook" "$(kinds "$d")" \
  "ClusterRole/gracekeeper ClusterRoleBinding/gracekeeper Deployment/gracekeeper PodDisruptionBudget/gracekeeper Role/gracekeeper-leader-election RoleBinding/gracekeeper-leader-election Service/gracekeeper-metrics ServiceAccount/gracekeeper"
dep() { jq -c "[.[] | select(.kind == \"Deployment\")][0] | $1" <<<"$d"; }
expect "replicas" "$(dep .spec.replicas)" 2
expect "image (no registry)" "$(dep '.spec.template.spec.containers[0].image')" '"gracekeeper:0.1.0"'
expect "args" "$(dep '.spec.template.spec.containers[0].args | join(" ")')" \
  '"--leader-elect --leader-election-namespace=$(POD_NAMESPACE) --metrics-bind-address=:8080 --health-probe-bind-address=:8081 --log-format=json --log-level=info --shutdown-lame-duck-seconds=10 --workers=4 --propagation-refresh=60"'
expect "terminationGracePeriodSeconds (preStop 5 + lame duck 10 + drain 8 + reserve 2)" "$(dep .spec.template.spec.terminationGracePeriodSeconds)" 25
expect "a native preStop sleep" "$(dep '.spec.template.spec.containers[0].lifecycle')" '{"preStop":{"sleep":{"seconds":5}}}'
expect "replicas spread across nodes" "$(dep '.spec as $s | $s.template.spec.topologySpreadConstraints[0] | [.maxSkew, .topologyKey, .whenUnsatisfiable, (.labelSelector.matchLabels == $s.selector.matchLabels)]')" \
  '[1,"kubernetes.io/hostname","ScheduleAnyway",true]'
dk=$(render --set webhook.enabled=false --kube-version 1.29.0)
expect "before Kubernetes 1.30: no preStop sleep (no native sleep action)" \
  "$(jq -c '[.[] | select(.kind == "Deployment")][0].spec.template.spec.containers[0].lifecycle' <<<"$dk")" null
dl=$(render --set webhook.enabled=false --set shutdown.preStopSleepSeconds=0 --set shutdown.lameDuckSeconds=3 --set terminationGracePeriodSeconds=13 --set topologySpread.enabled=false)
expect "shutdown values: no preStop, --shutdown-lame-duck-seconds=3, grace 13, no spread" \
  "$(jq -c '[.[] | select(.kind == "Deployment")][0].spec.template.spec | [.containers[0].lifecycle, (.containers[0].args | map(select(startswith("--shutdown")))), .terminationGracePeriodSeconds, .topologySpreadConstraints]' <<<"$dl")" \
  '[null,["--shutdown-lame-duck-seconds=3"],13,null]'
expect "pod securityContext" "$(dep '.spec.template.spec.securityContext | [.runAsNonRoot, .runAsUser, .seccompProfile.type] | join(" ")')" '"true 65532 RuntimeDefault"'
expect "container securityContext" "$(dep '.spec.template.spec.containers[0].securityContext | [.readOnlyRootFilesystem, .allowPrivilegeEscalation, (.capabilities.drop | join(","))] | join(" ")')" '"true false ALL"'
expect "resources" "$(dep '.spec.template.spec.containers[0].resources | [.requests.cpu, .requests.memory, .limits.cpu, .limits.memory] | join(" ")')" '"50m 32Mi 500m 128Mi"'
expect "probes" "$(dep '.spec.template.spec.containers[0] | [.livenessProbe.httpGet.path, .livenessProbe.httpGet.port, .readinessProbe.httpGet.path, .readinessProbe.httpGet.port] | join(" ")')" '"/healthz health /readyz health"'
expect "rollout keeps a replica" "$(dep '.spec.strategy.rollingUpdate | "\(.maxUnavailable) \(.maxSurge)"')" '"0 1"'
expect "PDB minAvailable" "$(jq -c '.[] | select(.kind == "PodDisruptionBudget") | .spec.minAvailable' <<<"$d")" 1
expect "metrics Service selects the operator pods" \
  "$(jq -c '[.[] | select(.kind == "Service")][0].spec.selector == ([.[] | select(.kind == "Deployment")][0].spec.selector.matchLabels)' <<<"$d")" true

d1=$(render --set webhook.enabled=false --set replicas=1 --set leaderElection.enabled=false)
expect "one replica, no leader election: no PDB, no Lease Role" "$(kinds "$d1")" \
  "ClusterRole/gracekeeper ClusterRoleBinding/gracekeeper Deployment/gracekeeper Service/gracekeeper-metrics ServiceAccount/gracekeeper"
expect "... and no --leader-elect" "$(jq -c '[.[] | select(.kind == "Deployment")][0].spec.template.spec.containers[0].args | map(select(startswith("--leader"))) | length' <<<"$d1")" 0
"$HELM" template gracekeeper "$CHART" --set replicas=2 --set leaderElection.enabled=false >/dev/null 2>"$WORK/err" \
  && not_ok "2 replicas without leader election rendered" \
  || ok "2 replicas without leader election fail to render ($(grep -o 'replicas > 1 needs leaderElection.enabled' "$WORK/err"))"

dw=$(render --set webhook.enabled=false --set watchNamespace=shop-prod)
expect "watchNamespace: --namespace flag" "$(jq -c '[.[] | select(.kind == "Deployment")][0].spec.template.spec.containers[0].args | map(select(startswith("--namespace")))' <<<"$dw")" '["--namespace=shop-prod"]'
expect "watchNamespace: the ClusterRole is bound in that namespace only" \
  "$(jq -c '[.[] | select(.roleRef.kind == "ClusterRole")] | map("\(.kind) \(.metadata.namespace)")' <<<"$dw")" '["RoleBinding shop-prod"]'

dp=$(render --set prometheus.url=https://prometheus.monitoring.svc:9090 --set prometheus.caSecret=prom-ca \
  --set prometheus.caKey=bundle.pem --set prometheus.tokenSecret=prom-token)
pc() { jq -c "[.[] | select(.kind == \"Deployment\")][0].spec.template.spec | $1" <<<"$dp"; }
expect "prometheus flags" "$(pc '.containers[0].args | map(select(startswith("--prometheus")))')" \
  '["--prometheus-url=https://prometheus.monitoring.svc:9090","--prometheus-ca-file=/etc/gracekeeper/prometheus-ca/bundle.pem","--prometheus-bearer-token-file=/etc/gracekeeper/prometheus-token/token"]'
expect "prometheus Secrets mounted as files" "$(pc '[.volumes[] | "\(.secret.secretName):\(.secret.items[0].key)"] | join(" ")')" '"prom-ca:bundle.pem prom-token:token"'
expect "... read-only" "$(pc '[.containers[0].volumeMounts[] | "\(.mountPath):\(.readOnly)"] | join(" ")')" \
  '"/etc/gracekeeper/prometheus-ca:true /etc/gracekeeper/prometheus-token:true"'

ds=$(render --set serviceMonitor.enabled=true --set serviceMonitor.labels.release=kube-prometheus)
expect "serviceMonitor.enabled renders a ServiceMonitor" "$(jq -c '.[] | select(.kind == "ServiceMonitor") | "\(.apiVersion) \(.spec.endpoints[0].port) \(.metadata.labels.release)"' <<<"$ds")" '"monitoring.coreos.com/v1 metrics kube-prometheus"'
expect "serviceMonitor is off by default" "$(jq -c '[.[] | select(.kind == "ServiceMonitor")] | length' <<<"$d")" 0
dx=$(render --set 'extraArgs={--lease-duration=30}' --set image.repository=mirror/gk --set image.tag=dev)
expect "extraArgs appended; image repository and tag" \
  "$(jq -c '[.[] | select(.kind == "Deployment")][0].spec.template.spec.containers[0] | "\(.image) \(.args[-1])"' <<<"$dx")" '"mirror/gk:dev --lease-duration=30"'

# ------------------------------------------------------------- the admission webhook
rejected 'webhook.timeoutSeconds: 60' --set webhook.timeoutSeconds=60
rejected 'webhook.certManager.issuerRef.kind: Vault' --set webhook.certManager.issuerRef.kind=Vault
expect "webhook.enabled=false renders no webhook object" "$(jq -c '[.[] | select(.kind == "MutatingWebhookConfiguration" or (.metadata.name | test("webhook")))] | length' <<<"$d")" 0
dh=$(render)
expect "the webhook is on by default (the same as webhook.enabled=true)" "$(kinds "$dh")" "$(kinds "$(render --set webhook.enabled=true)")"
expect "default objects" "$(kinds "$dh")" \
  "ClusterRole/gracekeeper ClusterRole/gracekeeper-webhook ClusterRoleBinding/gracekeeper ClusterRoleBinding/gracekeeper-webhook Deployment/gracekeeper MutatingWebhookConfiguration/gracekeeper PodDisruptionBudget/gracekeeper Role/gracekeeper-leader-election Role/gracekeeper-webhook-certs RoleBinding/gracekeeper-leader-election RoleBinding/gracekeeper-webhook-certs Service/gracekeeper-metrics Service/gracekeeper-webhook ServiceAccount/gracekeeper"
wh() { jq -c "[.[] | select(.kind == \"MutatingWebhookConfiguration\")][0].webhooks[0] | $1" <<<"$dh"; }
expect "webhook: Service, path, port" "$(wh '.clientConfig.service | "\(.namespace)/\(.name):\(.port)\(.path)"')" '"gracekeeper-system/gracekeeper-webhook:443/mutate-deployments"'
expect "webhook: no caBundle in the chart (gracekeeper patches it)" "$(wh '.clientConfig.caBundle')" null
expect "webhook: the contract's settings" "$(wh '[.failurePolicy, .timeoutSeconds, .sideEffects, .reinvocationPolicy, (.admissionReviewVersions | join(","))] | join(" ")')" '"Ignore 5 None IfNeeded v1"'
expect "webhook: rules" "$(wh '.rules')" '[{"apiGroups":["apps"],"apiVersions":["v1"],"operations":["CREATE","UPDATE"],"resources":["deployments","statefulsets"],"scope":"Namespaced"}]'
expect "webhook: objectSelector" "$(wh '.objectSelector')" '{"matchLabels":{"gracekeeper.dev/enabled":"true"}}'
expect "webhook: the Service sends 443 to the pod's port webhook (9443)" \
  "$(jq -c '[.[] | select(.kind == "Service" and .metadata.name == "gracekeeper-webhook")][0] | "\(.spec.ports[0].port)->\(.spec.ports[0].targetPort) \(.spec.selector == ([$d[] | select(.kind == "Deployment")][0].spec.selector.matchLabels))"' --argjson d "$dh" <<<"$dh")" \
  '"443->webhook true"'
hd() { local o=""; [ "$1" = -S ] && { o=-S; shift; }; jq -c $o "[.[] | select(.kind == \"Deployment\")][0].spec.template.spec | $1" <<<"$dh"; }
expect "webhook: self-managed certificate flags" "$(hd '.containers[0].args | map(select(startswith("--webhook")))')" \
  '["--webhook-port=9443","--webhook-cert-secret=gracekeeper-webhook-certs","--webhook-service=gracekeeper-webhook","--webhook-config=gracekeeper"]'
expect "webhook: TLS flags (1.2 and later, OpenSSL's suites)" "$(hd '.containers[0].args | map(select(startswith("--tls")))')" '["--tls-min-version=1.2"]'
dt=$(render --set webhook.enabled=true --set webhook.tlsMinVersion=1.3 --set 'webhook.tlsCipherSuites={ECDHE-ECDSA-AES128-GCM-SHA256,ECDHE-RSA-AES128-GCM-SHA256}')
expect "webhook.tlsMinVersion, webhook.tlsCipherSuites: the flags" \
  "$(jq -c '[.[] | select(.kind == "Deployment")][0].spec.template.spec.containers[0].args | map(select(startswith("--tls")))' <<<"$dt")" \
  '["--tls-min-version=1.3","--tls-cipher-suites=ECDHE-ECDSA-AES128-GCM-SHA256,ECDHE-RSA-AES128-GCM-SHA256"]'
rejected 'webhook.tlsMinVersion: 1.1' --set-string webhook.tlsMinVersion=1.1
dp=$(render --set networkPolicy.enabled=true --set-json 'networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]')
expect "networkPolicy: off by default" "$(jq -c '[.[] | select(.kind == "NetworkPolicy")] | length' <<<"$dh")" 0
expect "networkPolicy: the webhook's port from anywhere, metrics from monitoring, health from anywhere" \
  "$(jq -c '.[] | select(.kind == "NetworkPolicy") | [.spec.podSelector.matchLabels == ([$d[] | select(.kind == "Deployment")][0].spec.selector.matchLabels), .spec.policyTypes, [.spec.ingress[] | [.ports[0].port, (.from // "any")]]]' --argjson d "$dp" <<<"$dp")" \
  '[true,["Ingress"],[[9443,"any"],[8080,[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]],[8081,"any"]]]'
dm=$(render --set metrics.secure=true --set serviceMonitor.enabled=true)
expect "metrics.secure: the flag, the reviews' RBAC, a metrics-reader ClusterRole, the scraper's token" \
  "$(jq -c '[([.[] | select(.kind == "Deployment")][0].spec.template.spec.containers[0].args | map(select(. == "--metrics-secure")) | length), ([.[] | select(.kind == "ClusterRole" and .metadata.name == "gracekeeper")][0].rules | map(select(.resources == ["tokenreviews"] or .resources == ["subjectaccessreviews"]) | .verbs[0]) | join(",")), ([.[] | select(.kind == "ClusterRole" and .metadata.name == "gracekeeper-metrics-reader")][0].rules), ([.[] | select(.kind == "ServiceMonitor")][0].spec.endpoints[0].bearerTokenFile)]' <<<"$dm")" \
  '[1,"create,create",[{"nonResourceURLs":["/metrics"],"verbs":["get"]}],"/var/run/secrets/kubernetes.io/serviceaccount/token"]'
expect "metrics.secure off by default: no flag" "$(jq -c '[.[] | select(.kind == "Deployment")][0].spec.template.spec.containers[0].args | map(select(. == "--metrics-secure")) | length' <<<"$dh")" 0
expect "webhook: container port" "$(hd -S '.containers[0].ports | map(select(.name == "webhook"))')" '[{"containerPort":9443,"name":"webhook","protocol":"TCP"}]'
expect "webhook: the Secret's Role (create; get and update of one name)" \
  "$(jq -cS '.[] | select(.kind == "Role" and .metadata.name == "gracekeeper-webhook-certs") | .rules' <<<"$dh")" \
  '[{"apiGroups":[""],"resources":["secrets"],"verbs":["create"]},{"apiGroups":[""],"resourceNames":["gracekeeper-webhook-certs"],"resources":["secrets"],"verbs":["get","update"]}]'
expect "webhook: the caBundle's ClusterRole (get and patch of one name)" \
  "$(jq -cS '.[] | select(.kind == "ClusterRole" and .metadata.name == "gracekeeper-webhook") | .rules' <<<"$dh")" \
  '[{"apiGroups":["admissionregistration.k8s.io"],"resourceNames":["gracekeeper"],"resources":["mutatingwebhookconfigurations"],"verbs":["get","patch"]}]'
dn=$(render --set webhook.enabled=true --set webhook.objectSelector=null --set-json 'webhook.namespaceSelector={"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system"]}]}')
expect "webhook.objectSelector null sends every Deployment; namespaceSelector" \
  "$(jq -c '[.[] | select(.kind == "MutatingWebhookConfiguration")][0].webhooks[0] | [.objectSelector, .namespaceSelector.matchExpressions[0].values[0]]' <<<"$dn")" '[null,"kube-system"]'
dc=$(render --set webhook.enabled=true --set webhook.certManager.enabled=true)
expect "webhook.certManager: objects (no certificate RBAC)" "$(kinds "$dc")" \
  "Certificate/gracekeeper-webhook ClusterRole/gracekeeper ClusterRoleBinding/gracekeeper Deployment/gracekeeper Issuer/gracekeeper-selfsigned MutatingWebhookConfiguration/gracekeeper PodDisruptionBudget/gracekeeper Role/gracekeeper-leader-election RoleBinding/gracekeeper-leader-election Service/gracekeeper-metrics Service/gracekeeper-webhook ServiceAccount/gracekeeper"
expect "webhook.certManager: cainjector annotation" \
  "$(jq -c '[.[] | select(.kind == "MutatingWebhookConfiguration")][0].metadata.annotations["cert-manager.io/inject-ca-from"]' <<<"$dc")" '"gracekeeper-system/gracekeeper-webhook"'
expect "webhook.certManager: the Certificate's names and Secret" \
  "$(jq -c '.[] | select(.kind == "Certificate") | [.spec.secretName, .spec.dnsNames, .spec.issuerRef.name]' <<<"$dc")" \
  '["gracekeeper-webhook-tls",["gracekeeper-webhook.gracekeeper-system.svc","gracekeeper-webhook.gracekeeper-system.svc.cluster.local"],"gracekeeper-selfsigned"]'
cd_() { jq -c "[.[] | select(.kind == \"Deployment\")][0].spec.template.spec | $1" <<<"$dc"; }
expect "webhook.certManager: --webhook-cert-dir, no self-managed flags" "$(cd_ '.containers[0].args | map(select(startswith("--webhook")))')" \
  '["--webhook-port=9443","--webhook-cert-dir=/etc/gracekeeper/webhook-certs"]'
expect "webhook.certManager: its Secret mounted read-only" \
  "$(cd_ '[(.volumes[] | select(.name == "webhook-certs") | .secret.secretName), (.containers[0].volumeMounts[] | select(.name == "webhook-certs") | "\(.mountPath):\(.readOnly)")] | join(" ")')" \
  '"gracekeeper-webhook-tls /etc/gracekeeper/webhook-certs:true"'
di=$(render --set webhook.enabled=true --set webhook.certManager.enabled=true --set webhook.certManager.issuerRef.name=corp-ca --set webhook.certManager.issuerRef.kind=ClusterIssuer)
expect "webhook.certManager.issuerRef: no Issuer of ours" \
  "$(jq -c '[.[] | select(.kind == "Issuer")] | length' <<<"$di") $(jq -c '.[] | select(.kind == "Certificate") | .spec.issuerRef' <<<"$di")" '0 {"kind":"ClusterIssuer","name":"corp-ca"}'
"$HELM" lint "$CHART" --strict --set webhook.enabled=true --set webhook.certManager.enabled=true >"$WORK/lint3.out" 2>&1 \
  && ok "helm lint --strict with the webhook and cert-manager" || { not_ok "helm lint --strict with the webhook"; note <"$WORK/lint3.out"; }

# ------------------------------------------------------------- chart == config/ (kustomize)
k=$(kubectl kustomize "$ROOT/config/without-webhook" | yaml2json)
expect "kustomize objects without the webhook" "$(kinds "$k")" \
  "ClusterRole/gracekeeper ClusterRoleBinding/gracekeeper CustomResourceDefinition/shutdownpolicies.gracekeeper.dev Deployment/gracekeeper Namespace/gracekeeper-system PodDisruptionBudget/gracekeeper Role/gracekeeper-leader-election RoleBinding/gracekeeper-leader-election Service/gracekeeper-metrics ServiceAccount/gracekeeper"
same() {  # same WHAT JQ: the jq expression gives the same JSON on both
  local a b
  a=$(jq -cS "$2" <<<"$d")
  b=$(jq -cS "$2" <<<"$k")
  if [ "$a" = "$b" ] && [ "$a" != null ]; then ok "chart and config/ agree: $1"
  else not_ok "chart and config/ differ in $1"; echo "chart:     $a" | note; echo "kustomize: $b" | note; fi
}
same "ClusterRole rules" '.[] | select(.kind == "ClusterRole") | .rules'
same "Lease Role rules" '.[] | select(.kind == "Role") | .rules'
same "ServiceAccount and namespace bound" '[.[] | select(.kind | endswith("Binding")) | .subjects] | sort'
same "Deployment: replicas, grace, strategy" '.[] | select(.kind == "Deployment") | .spec | [.replicas, .template.spec.terminationGracePeriodSeconds, .strategy]'
same "Deployment: security contexts" '.[] | select(.kind == "Deployment") | .spec.template.spec | [.securityContext, .containers[0].securityContext]'
same "Deployment: image, args, env, ports, probes, resources, preStop" \
  '.[] | select(.kind == "Deployment") | .spec.template.spec.containers[0] | [.image, .args[:7], .env, .ports, .livenessProbe, .readinessProbe, .resources, .lifecycle]'
same "Deployment: spread across nodes (each selecting its own pods)" \
  '.[] | select(.kind == "Deployment") | .spec as $s | $s.template.spec.topologySpreadConstraints | map(del(.labelSelector)) + map(.labelSelector.matchLabels == $s.selector.matchLabels)'
same "PodDisruptionBudget (minAvailable, selecting the Deployment's pods)" \
  '(.[] | select(.kind == "Deployment") | .spec.selector.matchLabels) as $sel | .[] | select(.kind == "PodDisruptionBudget") | [.spec.minAvailable, .spec.selector.matchLabels == $sel]'
same "metrics Service ports" '.[] | select(.kind == "Service") | .spec.ports'

# The webhook: config/default == the chart's default, both with the webhook.
d=$dh
k=$(kubectl kustomize "$ROOT/config/default" | yaml2json)
expect "config/default is config/without-webhook plus the webhook's objects" "$(kinds "$k")" \
  "$(kinds "$(kubectl kustomize "$ROOT/config/without-webhook" | yaml2json)" | tr ' ' '\n' |
    cat - <(echo "ClusterRole/gracekeeper-webhook ClusterRoleBinding/gracekeeper-webhook MutatingWebhookConfiguration/gracekeeper Role/gracekeeper-webhook-certs RoleBinding/gracekeeper-webhook-certs Service/gracekeeper-webhook" | tr ' ' '\n') |
    LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//')"
same "webhook: MutatingWebhookConfiguration" '.[] | select(.kind == "MutatingWebhookConfiguration") | .webhooks'
same "webhook: Service ports" '.[] | select(.kind == "Service" and .metadata.name == "gracekeeper-webhook") | .spec.ports'
same "webhook: the Secret's Role" '.[] | select(.kind == "Role" and .metadata.name == "gracekeeper-webhook-certs") | .rules'
same "webhook: the caBundle's ClusterRole" '.[] | select(.kind == "ClusterRole" and .metadata.name == "gracekeeper-webhook") | .rules'
same "webhook: bindings" '[.[] | select(.kind | endswith("Binding")) | select(.metadata.name | test("webhook")) | [.roleRef, .subjects]] | sort'
same "webhook: operator flags and ports" '.[] | select(.kind == "Deployment") | .spec.template.spec.containers[0] | [(.args | map(select(startswith("--webhook")))), .ports]'

finish
