# Shared by the operator's integration tests: the harness (../harness.sh),
# starting and stopping `gracekeeper run` against a cluster, and reading the
# audit log. Sourced; expects ROOT, GK (the binary), and by the time they are
# used CLUSTER (a test/cluster dir: given, or start_cluster's) and WORK.

# shellcheck source=SCRIPTDIR/../harness.sh
. "$(dirname "${BASH_SOURCE[0]}")/../harness.sh"

[ -z "${CLUSTER:-}" ] || export KUBECONFIG="$CLUSTER/kubeconfig"

# start_operator NAME [FLAGS...]: runs `gracekeeper run` in the background,
# logs to $WORK/NAME.log (JSON lines); sets OP_PID and OP_PORT (metrics and
# health on one loopback port). No lame duck on SIGTERM unless FLAGS give
# --shutdown-lame-duck-seconds (the last one wins): the suites time their stops.
start_operator() {
  local name=$1
  shift
  "$GK" run --kubeconfig "${GK_OPERATOR_KUBECONFIG:-$KUBECONFIG}" --metrics-bind-address 127.0.0.1:0 \
    --health-probe-bind-address 127.0.0.1:0 --log-format json --shutdown-lame-duck-seconds 0 \
    "$@" >"$WORK/$name.log" 2>&1 &
  OP_PID=$!
  OP_LOG="$WORK/$name.log"
  OP_PORT=""
  eventually 10 op_port_known
  eventually 20 curl -sf "http://127.0.0.1:$OP_PORT/readyz"
}

# op_port_known: sets OP_PORT from OP_LOG's "serving HTTP" line; false until then.
op_port_known() {
  OP_PORT=$(jq -r 'select(.msg == "serving HTTP") | .port' "$OP_LOG" 2>/dev/null | head -1)
  [ -n "$OP_PORT" ]
}

stop_operator() {  # SIGTERM; sets OP_EXIT and STOP_MS (how long it took to exit)
  local pid=${1:-$OP_PID} start
  start=$(date +%s%N)
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  OP_EXIT=$?
  STOP_MS=$((($(date +%s%N) - start) / 1000000))
}

# Audit entries (stage ResponseComplete) of gracekeeper's own requests after
# the given RFC 3339 time: "verb resource name code" per line.
gk_requests_since() {
  jq -r --arg since "$1" 'select(.stage == "ResponseComplete" and
      (.userAgent // "" | startswith("gracekeeper")) and .stageTimestamp > $since) |
      "\(.verb) \(.objectRef.resource // "-")/\(.objectRef.subresource // "") \(.objectRef.name // "-") \(.responseStatus.code)"' \
    "$CLUSTER/audit.log"
}
gk_writes_since() {
  gk_requests_since "$1" | grep -E '^(create|update|patch|delete|deletecollection) ' || true
}
now_rfc3339() { date -u +%Y-%m-%dT%H:%M:%S.%6NZ; }

# serve NS: a Service "served" in NS selecting the pods of every Deployment
# that `deployment` creates (label served=yes): gracekeeper gives a preStop
# wait only to pods a Service selects.
serve() {
  k create service clusterip served -n "$1" --tcp=80:8080 -o json --dry-run=client |
    jq '.spec.selector = {"served": "yes"}' | k create -f - >/dev/null
}

# deployment NS NAME ANNOTATIONS-JSON [STRATEGY-JSON] [LIFECYCLE-JSON]: created
# with kubectl create (an Update manager; CREATE overrides the command), 3
# replicas, grace 30, one container with a port and an HTTP readiness probe.
# Its pods carry served=yes (see serve) unless UNSERVED=1.
deployment() {
  local ns=$1 name=$2 annotations=${3:-'{}'}
  local strategy=${4:-'{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"25%","maxSurge":"25%"}}'}
  local lifecycle=${5:-'{}'} served=yes
  [ -n "${UNSERVED:-}" ] && served=no
  k ${CREATE:-create} -f - >/dev/null <<JSON
{"apiVersion":"apps/v1","kind":"Deployment",
 "metadata":{"name":"$name","namespace":"$ns","labels":{"app":"$name"},"annotations":$annotations},
 "spec":{"replicas":3,"strategy":$strategy,"selector":{"matchLabels":{"app":"$name"}},
  "template":{"metadata":{"labels":{"app":"$name","served":"$served"}},
   "spec":{"terminationGracePeriodSeconds":30,
    "containers":[{"name":"app","image":"app:1","ports":[{"containerPort":8080}],
      "lifecycle":$lifecycle,
      "readinessProbe":{"httpGet":{"path":"/ready","port":8080}},
      "livenessProbe":{"httpGet":{"path":"/live","port":8080}}}]}}}}
JSON
}
OPTED='{"gracekeeper.dev/enabled":"true"}'

jp() { k get "$1" -n "$2" "$3" -o jsonpath="$4" 2>/dev/null; }
settings() {  # "preStop grace maxUnavailable maxSurge" of a Deployment
  local d
  d=$(k get deployment -n "$1" "$2" -o json) || return 1
  jq -r '[(.spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds // "none"),
          .spec.template.spec.terminationGracePeriodSeconds,
          .spec.strategy.rollingUpdate.maxUnavailable // "-", .spec.strategy.rollingUpdate.maxSurge // "-"]
         | map(tostring) | join(" ")' <<<"$d"
}
settings_are() { [ "$(settings "$1" "$2")" = "$3" ]; }

# racer NS: patches the labels of NS's policy "default" as fast as it can, as
# a second writer, so the operator's status updates hit 409. Run it in the
# background and kill it.
racer() {
  local ns=$1 i=0 server
  server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  while :; do
    i=$((i + 1))
    curl -s --cacert "$CLUSTER/pki/ca.crt" --cert "$CLUSTER/pki/admin.crt" --key "$CLUSTER/pki/admin.key" \
      -X PATCH -H 'Content-Type: application/merge-patch+json' \
      -d "{\"metadata\":{\"labels\":{\"race\":\"r$i\"}}}" \
      "$server/apis/gracekeeper.dev/v1alpha1/namespaces/$ns/shutdownpolicies/default" >/dev/null
  done
}

# make_test_certs DIR: a throw-away CA (DIR/ca.crt) and a serving certificate
# for 127.0.0.1 signed by it (DIR/tls.crt, DIR/tls.key), for one day (openssl).
make_test_certs() {
  local CERTS=$1
  mkdir -p "$CERTS"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj "/CN=gracekeeper test CA" -keyout "$CERTS/ca.key" -out "$CERTS/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$CERTS/tls.key" -out "$CERTS/tls.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$CERTS/ext"
  openssl x509 -req -in "$CERTS/tls.csr" -CA "$CERTS/ca.crt" -CAkey "$CERTS/ca.key" \
    -CAcreateserial -days 1 -extfile "$CERTS/ext" -out "$CERTS/tls.crt" 2>/dev/null
}

# register_test_webhook NAME URL CA_FILE: the MutatingWebhookConfiguration the
# chart writes (failurePolicy Ignore, objectSelector on the label,
# reinvocationPolicy IfNeeded), with a 2 s timeout, calling URL.
register_test_webhook() {
  k apply -f - >/dev/null <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: $1}
webhooks:
- name: deployments.gracekeeper.dev
  admissionReviewVersions: [v1]
  clientConfig:
    url: $2
    caBundle: $(base64 -w0 <"$3")
  rules:
  - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments, statefulsets], scope: Namespaced}
  objectSelector: {matchLabels: {gracekeeper.dev/enabled: "true"}}
  failurePolicy: Ignore
  sideEffects: None
  timeoutSeconds: 2
  reinvocationPolicy: IfNeeded
YAML
}
