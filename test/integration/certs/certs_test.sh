#!/usr/bin/env bash
# Self-managed webhook certificates against the real API server (issue 17,
# item 2): two `gracekeeper run` replicas started at the same instant make
# exactly one Secret and one CA; both webhooks of the
# MutatingWebhookConfiguration get the caBundle, and a reset caBundle is
# patched back; garbage in the Secret and a Secret of the wrong type are
# replaced or reported without a crash; a forced rotation (20 s serving
# certificates, a 60 s CA) renews the serving certificate and the CA while
# every serving certificate stays trusted by the caBundle the API server
# holds, and by the one it held a moment before.
#
# The TLS check against the webhook server itself (openssl s_client on
# --webhook-port during the rotation) runs only when the binary has that
# flag: see s_client_check. Last, one replica runs as the chart's
# ServiceAccount with only the chart's RBAC: nothing it does is refused.
#
# usage: test/integration/certs/certs_test.sh GRACEKEEPER_BINARY [CLUSTER_DIR]
#   Without CLUSTER_DIR the script starts its own control plane and stops it on exit.
#
# Uses namespace gk-certs and the MutatingWebhookConfiguration gk-certs-test
# (its webhooks select only objects labelled gk-certs-test=never).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
GK="${1:?usage: certs_test.sh GRACEKEEPER_BINARY [CLUSTER_DIR]}"
CLUSTER="${2:-}"
. "$ROOT/test/integration/operator/lib.sh"
work_dir
[ -n "$CLUSTER" ] || start_cluster "$WORK/cluster"
NS=gk-certs
SECRET=gk-webhook-certs
MWC=gk-certs-test
PIDS=()

cleanup() {
  local pid
  for pid in "${PIDS[@]}" ${LOOP_PID:-}; do kill -KILL "$pid" 2>/dev/null; done
  k delete mutatingwebhookconfiguration "$MWC" --ignore-not-found >/dev/null 2>&1
  [ -f "$WORK/chart.yaml" ] && k delete -f "$WORK/chart.yaml" --ignore-not-found >/dev/null 2>&1
  k delete namespace "$NS" gk-certs-sa --wait=false >/dev/null 2>&1
}
show_logs_on_failure 20
on_exit cleanup

k create namespace "$NS" >/dev/null
# The operator's namespace is its kubeconfig context's (in a pod: the pod's).
cp "$KUBECONFIG" "$WORK/kubeconfig"
kubectl --kubeconfig "$WORK/kubeconfig" config set-context --current --namespace "$NS" >/dev/null
# Two webhooks, no caBundle. They select only this test's Deployment "loop"
# (a: the first replica's --webhook-port) or nothing (b), so other tests are
# never sent to them.
k apply -f - >/dev/null <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: $MWC}
webhooks:
$(for name in a b; do cat <<ENTRY
- name: $name.certs.gracekeeper.dev
  clientConfig: {url: "https://127.0.0.1:$([ $name = a ] && echo 19443 || echo 1)/mutate-deployments"}
  rules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}]
  objectSelector: {matchLabels: {gk-certs-test: $([ $name = a ] && echo loop || echo never)}}
  failurePolicy: Ignore
  sideEffects: None
  timeoutSeconds: 5
  admissionReviewVersions: [v1]
ENTRY
done)
YAML

HAS_SERVER=""
"$GK" run --help | grep -q -- '--webhook-port' && HAS_SERVER=1
# start_replica NAME EXTRA-FLAGS...: in the background, logs to $WORK/NAME.log.
start_replica() {
  local name=$1
  shift
  "$GK" run --kubeconfig "$WORK/kubeconfig" --namespace "$NS" --leader-elect \
    --leader-election-namespace "$NS" --metrics-bind-address 0 --health-probe-bind-address 0 \
    --webhook-cert-secret "$SECRET" --webhook-service gk-webhook --webhook-config "$MWC" \
    --webhook-cert-extra-san 127.0.0.1 --webhook-cert-resync 1 "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
}
secret_json() { k get secret -n "$NS" "$SECRET" -o json 2>/dev/null; }
secret_key() { secret_json | jq -r --arg key "$1" '.data[$key] // ""' | base64 -d 2>/dev/null; }
bundle_of() { k get mutatingwebhookconfiguration "$MWC" -o json | jq -r ".webhooks[$1].clientConfig.caBundle // \"\""; }
certs_in() { grep -c 'BEGIN CERTIFICATE' || true; }
# The SHA-256 of the first certificate of a PEM file, as the operator logs it.
sha256_of() { openssl x509 -in "$1" -noout -fingerprint -sha256 | sed 's/.*=//; s/://g' | tr 'A-F' 'a-f'; }
# The SHA-256 of every certificate of a PEM bundle on stdin, one a line.
bundle_fingerprints() {
  awk -v dir="$WORK" '/BEGIN CERTIFICATE/ {n++} {print > (dir "/split." n ".pem")}'
  local f
  for f in "$WORK"/split.*.pem; do sha256_of "$f"; done
  rm -f "$WORK"/split.*.pem
}
loaded() { jq -r 'select(.msg == "webhook serving certificate loaded") | .sha256' "$WORK/$1.log" 2>/dev/null; }
alive() { kill -0 "$1" 2>/dev/null; }

# ---- two replicas at the same instant: one Secret, one CA ----
since=$(now_rfc3339)
start_replica one --webhook-cert-validity 20 --webhook-ca-validity 60 $([ -n "$HAS_SERVER" ] && echo --webhook-port 19443)
start_replica two --webhook-cert-validity 20 --webhook-ca-validity 60 $([ -n "$HAS_SERVER" ] && echo --webhook-port 19444)
if eventually 20 bash -c "[ -n \"\$(jq -r 'select(.msg == \"webhook serving certificate loaded\")' '$WORK/one.log' '$WORK/two.log' | head -c1)\" ]"; then
  ok "a replica loaded a serving certificate"
else
  not_ok "no replica loaded a serving certificate within 20 s"
fi
eventually 10 bash -c "[ \"\$(jq -r 'select(.msg == \"webhook serving certificate loaded\") | .sha256' '$WORK/one.log' '$WORK/two.log' | wc -l)\" -ge 2 ]"
creates=$(jq -r --arg since "$since" 'select(.stage == "ResponseComplete" and .verb == "create" and
    .objectRef.resource == "secrets" and .objectRef.namespace == "gk-certs" and .stageTimestamp > $since) |
    .responseStatus.code' "$CLUSTER/audit.log" | sort | uniq -c | awk '{print $2 "x" $1}' | tr '\n' ' ')
note <<<"Secret creates by status code: $creates"
expect "exactly one create of the Secret succeeded" "$(grep -o '201x[0-9]*' <<<"$creates")" "201x1"
expect "one Secret, of type kubernetes.io/tls" "$(k get secrets -n "$NS" -o json | jq -r '[.items[] | select(.metadata.name == "'$SECRET'") | .type] | join(",")')" "kubernetes.io/tls"
expect "its keys" "$(secret_json | jq -r '.data | keys | join(" ")')" "ca.crt ca.key tls.crt tls.key"
secret_key ca.crt >"$WORK/ca.pem"
secret_key tls.crt >"$WORK/tls.pem"
expect "one CA in ca.crt" "$(certs_in <"$WORK/ca.pem")" 1
first_ca=$(sha256_of "$WORK/ca.pem")
first_tls=$(sha256_of "$WORK/tls.pem")
expect "both replicas loaded the Secret's serving certificate" \
  "$(loaded one | head -1) $(loaded two | head -1)" "${first_tls:-none} ${first_tls:-none}"
for name in gk-webhook.gk-certs.svc gk-webhook.gk-certs.svc.cluster.local; do
  expect "openssl verify -verify_hostname $name" \
    "$(openssl verify -CAfile "$WORK/ca.pem" -verify_hostname "$name" "$WORK/tls.pem" 2>&1 | tail -1)" "$WORK/tls.pem: OK"
done
expect "openssl verify -verify_ip 127.0.0.1" \
  "$(openssl verify -CAfile "$WORK/ca.pem" -verify_ip 127.0.0.1 "$WORK/tls.pem" 2>&1 | tail -1)" "$WORK/tls.pem: OK"
if openssl verify -CAfile "$WORK/ca.pem" -verify_hostname other.gk-certs.svc "$WORK/tls.pem" >/dev/null 2>&1; then
  not_ok "the certificate verifies for a name it was not issued for"
else
  ok "... and not for other.gk-certs.svc"
fi

# ---- the caBundle of every webhook ----
bundle_is_secret() {
  local want
  want=$(secret_json | jq -r '.data["ca.crt"]')
  [ -n "$want" ] && [ "$(bundle_of 0)" = "$want" ] && [ "$(bundle_of 1)" = "$want" ]
}
if eventually 10 bundle_is_secret; then
  ok "both webhooks' caBundle is the Secret's ca.crt"
else
  not_ok "caBundle: got '$(bundle_of 0 | head -c 40)' / '$(bundle_of 1 | head -c 40)'"
fi
k patch mutatingwebhookconfiguration "$MWC" --type json \
  -p '[{"op":"remove","path":"/webhooks/0/clientConfig/caBundle"},{"op":"replace","path":"/webhooks/1/clientConfig/caBundle","value":"Zm9v"}]' >/dev/null
reset_at=$(date +%s%N)
if eventually 10 bundle_is_secret; then
  ok "a removed and a replaced caBundle are patched back ($((($(date +%s%N) - reset_at) / 1000000)) ms)"
else
  not_ok "the reset caBundle was not patched back within 10 s"
fi

# ---- forced rotation: 20 s serving certificates, a 60 s CA ----
# Every 0.5 s: the Secret's serving certificate must verify with the caBundle
# the API server holds now, and with the one it held a sample ago (a new CA
# signs only after it has been in the bundle for 2 resyncs).
s_client_check() {  # s_client_check PORT BUNDLE-FILE: 0 when the handshake verifies
  timeout 5 openssl s_client -connect "127.0.0.1:$1" -verify_return_error -CAfile "$2" \
    -verify_ip 127.0.0.1 </dev/null >"$WORK/s_client.out" 2>&1
}
# With the server: the API server calls the first replica for every update
# of the Deployment "loop" during the rotation; the audit log must show each
# call made and none failed open (failurePolicy Ignore hides a failure from
# the client, not from the audit log).
admission_loop() {
  local i=0
  k create deployment loop -n "$NS" --image=app:1 --replicas=0 -o json --dry-run=client |
    jq '.metadata.labels["gk-certs-test"] = "loop"' | k create -f - >/dev/null
  while :; do
    i=$((i + 1))
    k annotate deployment loop -n "$NS" --overwrite "gk-certs-test/update=$i" >/dev/null 2>&1
    sleep 0.2
  done
}
if [ -z "$HAS_SERVER" ]; then
  note <<<"s_client and admission checks skipped: this gracekeeper has no --webhook-port (the admission server is not built in)"
else
  loop_since=$(now_rfc3339)
  admission_loop &
  LOOP_PID=$!
fi
samples=0 bad=0 bad_previous=0 tls_seen=1 cas_max=1 tls_failed=0 tls_tried=0
prev_bundle="$WORK/bundle.prev.pem"
bundle_of 0 | base64 -d >"$prev_bundle"
last_tls=$first_tls
deadline=$(($(date +%s) + 80))
while [ "$(date +%s)" -lt "$deadline" ]; do
  bundle_of 0 | base64 -d >"$WORK/bundle.now.pem"
  secret_key tls.crt >"$WORK/tls.now.pem"
  samples=$((samples + 1))
  openssl verify -CAfile "$WORK/bundle.now.pem" -verify_ip 127.0.0.1 "$WORK/tls.now.pem" >/dev/null 2>&1 || bad=$((bad + 1))
  openssl verify -CAfile "$prev_bundle" -verify_ip 127.0.0.1 "$WORK/tls.now.pem" >/dev/null 2>&1 || bad_previous=$((bad_previous + 1))
  now_tls=$(sha256_of "$WORK/tls.now.pem" 2>/dev/null)
  [ -n "$now_tls" ] && [ "$now_tls" != "$last_tls" ] && { tls_seen=$((tls_seen + 1)); last_tls=$now_tls; }
  cas=$(certs_in <"$WORK/bundle.now.pem")
  [ "$cas" -gt "$cas_max" ] && cas_max=$cas
  if [ -n "$HAS_SERVER" ]; then
    for port in 19443 19444; do
      tls_tried=$((tls_tried + 1))
      s_client_check "$port" "$WORK/bundle.now.pem" || tls_failed=$((tls_failed + 1))
    done
  fi
  cp "$WORK/bundle.now.pem" "$prev_bundle"
  sleep 0.5
done
note <<<"$samples samples; serving certificates seen: $tls_seen; most CAs in the bundle: $cas_max"
expect "the serving certificate verified with the current caBundle in every sample" "$bad" 0
expect "... and with the caBundle of the sample before" "$bad_previous" 0
[ "$tls_seen" -ge 4 ] && ok "the serving certificate was renewed ($tls_seen certificates in 80 s)" \
  || not_ok "the serving certificate was renewed only $((tls_seen - 1)) times in 80 s"
expect "the CA was renewed with the old one kept: 2 CAs in the bundle during the overlap" "$cas_max" 2
secret_key ca.crt >"$WORK/ca.end.pem"
ca_end=$(sha256_of "$WORK/ca.end.pem")
[ "$ca_end" != "$first_ca" ] && ok "the newest CA is a new one" || not_ok "the CA never changed"
# (The CA lives 60 s: a second renewal may be under way, with two CAs.)
if bundle_fingerprints <"$WORK/ca.end.pem" | grep -q "$first_ca"; then
  not_ok "the first CA is still in the bundle after it expired"
else
  ok "the first CA left the bundle once it expired ($(certs_in <"$WORK/ca.end.pem") CA(s) now)"
fi
n_one=$(loaded one | sort -u | wc -l)
n_two=$(loaded two | sort -u | wc -l)
[ "$n_one" -ge 4 ] && [ "$n_two" -ge 4 ] && ok "both replicas reloaded each renewal ($n_one and $n_two certificates)" \
  || not_ok "replicas loaded $n_one and $n_two certificates"
if [ -n "$HAS_SERVER" ]; then
  expect "openssl s_client -verify_return_error against both replicas during the rotation: failed handshakes (of $tls_tried)" "$tls_failed" 0
  kill "$LOOP_PID" 2>/dev/null
  wait "$LOOP_PID" 2>/dev/null
  LOOP_PID=""
  jq -c --arg since "$loop_since" 'select(.stage == "ResponseComplete" and .objectRef.resource == "deployments" and
      .objectRef.namespace == "gk-certs" and .objectRef.name == "loop" and (.verb == "patch" or .verb == "update") and
      .stageTimestamp > $since) | .annotations // {} | keys' "$CLUSTER/audit.log" >"$WORK/admissions"
  calls=$(grep -c '"mutation.webhook.admission.k8s.io/round_0_index_0"' "$WORK/admissions")
  failed=$(grep -c 'failed-open' "$WORK/admissions")
  [ "$calls" -ge 100 ] && ok "the API server called the webhook for $calls updates during the rotation" \
    || not_ok "the API server called the webhook only $calls times during the rotation"
  expect "... admissions that failed open (TLS or otherwise)" "$failed" 0
fi

# ---- garbage and a Secret of the wrong type ----
k label secret -n "$NS" "$SECRET" team=platform >/dev/null
k patch secret -n "$NS" "$SECRET" --type merge -p '{"data":{"tls.crt":"Z2FyYmFnZQ==","ca.key":"AAAA"}}' >/dev/null
garbage_replaced() {
  [ "$(secret_key tls.crt | certs_in)" = 1 ] && secret_key ca.key | grep -q 'PRIVATE KEY'
}
if eventually 10 garbage_replaced; then
  ok "garbage in tls.crt and ca.key is replaced"
else
  not_ok "garbage in the Secret was not replaced within 10 s"
fi
expect "... keeping the labels others put on the Secret" "$(k get secret -n "$NS" "$SECRET" -o jsonpath='{.metadata.labels.team}')" platform
grep -h '"webhook certificates renewed"' "$WORK/one.log" "$WORK/two.log" | grep -q 'tls.crt: ' \
  && ok "... and the log says what was wrong" || not_ok "no log line names tls.crt"
# (A replica may re-create it between the delete and the create: again.)
for i in 1 2 3 4 5; do
  k delete secret -n "$NS" "$SECRET" >/dev/null 2>&1
  k create secret generic -n "$NS" "$SECRET" --from-literal=tls.crt=x >/dev/null 2>&1 && break
done
wrong_type_reported() { grep -q 'not kubernetes.io/tls' "$WORK/one.log" "$WORK/two.log"; }
if eventually 10 wrong_type_reported; then
  ok "a Secret of type Opaque is reported, not overwritten ($(k get secret -n "$NS" "$SECRET" -o jsonpath='{.type}'))"
else
  not_ok "a Secret of the wrong type was not reported"
fi
k delete secret -n "$NS" "$SECRET" >/dev/null
if eventually 10 bash -c "[ \"\$(kubectl get secret -n $NS $SECRET -o jsonpath='{.type}' 2>/dev/null)\" = kubernetes.io/tls ]"; then
  ok "once deleted it is created again"
else
  not_ok "the deleted Secret was not created again"
fi
eventually 10 bundle_is_secret && ok "... and the caBundle follows it" || not_ok "the caBundle does not follow the new Secret"
expect "both replicas still run" "$(alive "${PIDS[0]}" && alive "${PIDS[1]}" && echo yes)" yes

# ---- SIGTERM ----
for i in 0 1; do
  stop_operator "${PIDS[$i]}"
  expect "replica $((i + 1)) stops on SIGTERM with exit code 0" "$OP_EXIT" 0
done
PIDS=()

# ---- as the chart's ServiceAccount, with only the chart's RBAC ----
# Release gkcerts in namespace gk-certs-sa: the Secret, the caBundle and a
# renewal (PUT) with exactly the rights webhook-rbac.yaml grants.
as_service_account() {
  local sns=gk-certs-sa rel=gkcerts-gracekeeper helm
  if ! helm=$("$ROOT/test/tools/build-helm" 2>/dev/null) || [ -z "$helm" ]; then
    note <<<"ServiceAccount check skipped: no Helm (test/tools/build-helm failed)"
    return
  fi
  k create namespace "$sns" >/dev/null
  # Its webhook selects nothing here, so no other test's Deployment is sent to it.
  "$helm" template gkcerts "$ROOT/charts/gracekeeper" --namespace "$sns" --set webhook.enabled=true \
    --set-json 'webhook.objectSelector={"matchLabels":{"gk-certs-test":"never"}}' \
    --show-only templates/serviceaccount.yaml --show-only templates/clusterrole.yaml \
    --show-only templates/clusterrolebinding.yaml --show-only templates/role.yaml \
    --show-only templates/rolebinding.yaml --show-only templates/webhook-rbac.yaml \
    --show-only templates/webhook.yaml >"$WORK/chart.yaml" 2>"$WORK/helm.err"
  if k apply -f "$WORK/chart.yaml" >"$WORK/chart.out" 2>&1; then
    ok "the chart's RBAC, Service and MutatingWebhookConfiguration installed ($(wc -l <"$WORK/chart.out") objects)"
  else
    not_ok "installing the chart's objects"; note <"$WORK/chart.out"; return
  fi
  local token server ca
  token=$("$ROOT/test/cluster/token" "$CLUSTER" "$sns" "$rel" --duration=1h)
  server=$(k config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(k config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  cat >"$WORK/sa.kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: $server, certificate-authority-data: $ca}}]
users: [{name: sa, user: {token: $token}}]
contexts: [{name: sa, context: {cluster: test, user: sa, namespace: $sns}}]
current-context: sa
YAML
  local since
  since=$(now_rfc3339)
  "$GK" run --kubeconfig "$WORK/sa.kubeconfig" --leader-elect --leader-election-namespace "$sns" \
    --metrics-bind-address 0 --health-probe-bind-address 0 \
    --webhook-cert-secret "$rel-webhook-certs" --webhook-service "$rel-webhook" --webhook-config "$rel" \
    --webhook-cert-resync 1 --webhook-cert-validity 30 >"$WORK/sa.log" 2>&1 &
  PIDS+=($!)
  sa_bundle() {
    local want
    want=$(k get secret -n "$sns" "$rel-webhook-certs" -o jsonpath='{.data.ca\.crt}' 2>/dev/null)
    [ -n "$want" ] && [ "$(k get mutatingwebhookconfiguration "$rel" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" = "$want" ]
  }
  eventually 15 sa_bundle && ok "as the ServiceAccount: the Secret created and the caBundle patched" \
    || not_ok "as the ServiceAccount: no Secret or caBundle within 15 s"
  eventually 30 grep -q '"webhook certificates renewed"' "$WORK/sa.log" \
    && ok "as the ServiceAccount: a renewal written (PUT)" || not_ok "as the ServiceAccount: no renewal within 30 s"
  local denied
  # RBAC's refusals only: other tests share this API server, and an Event
  # into one of their namespaces while it is deleted is a 403 too ("being
  # terminated"), whatever the rights.
  denied=$(jq -r --arg since "$since" --arg user "system:serviceaccount:$sns:$rel" 'select(.stage == "ResponseComplete" and
      .user.username == $user and .responseStatus.code == 403 and .stageTimestamp > $since and
      ((.responseStatus.message // "") | contains("being terminated") | not)) |
      "\(.verb) \(.objectRef.resource)/\(.objectRef.name // "")"' "$CLUSTER/audit.log" | sort | uniq -c | tr '\n' ';')
  local made
  made=$(jq -r --arg since "$since" --arg user "system:serviceaccount:$sns:$rel" 'select(.stage == "ResponseComplete" and
      .user.username == $user and .stageTimestamp > $since and (.objectRef.resource == "secrets" or
      .objectRef.resource == "mutatingwebhookconfigurations")) | .objectRef.resource' "$CLUSTER/audit.log" | sort -u | tr '\n' ' ')
  expect "as the ServiceAccount: it read and wrote the Secret and the MutatingWebhookConfiguration" "$made" "mutatingwebhookconfigurations secrets "
  expect "as the ServiceAccount: requests the API server refused (403)" "${denied:-none}" none
  stop_operator "${PIDS[-1]}"
  unset 'PIDS[-1]'

  # A renewal that cannot be written (update taken away): a replica starting
  # then still serves the Secret's certificate while it is good.
  k patch role -n "$sns" "$rel-webhook-certs" --type json \
    -p '[{"op":"replace","path":"/rules/1/verbs","value":["get"]}]' >/dev/null
  local due
  due=$(k get secret -n "$sns" "$rel-webhook-certs" -o jsonpath='{.data.tls\.crt}' | base64 -d |
    openssl x509 -noout -startdate -enddate | sed 's/.*=//' | xargs -I{} date -d {} +%s | paste -sd' ')
  # not before + 2/3 of the life, and a second more
  due=$(awk '{print int($1 + ($2 - $1) * 2 / 3) + 1}' <<<"$due")
  while [ "$(date +%s)" -lt "$due" ]; do sleep 0.5; done
  "$GK" run --kubeconfig "$WORK/sa.kubeconfig" --leader-elect --leader-election-namespace "$sns" \
    --metrics-bind-address 0 --health-probe-bind-address 0 \
    --webhook-cert-secret "$rel-webhook-certs" --webhook-service "$rel-webhook" --webhook-config "$rel" \
    --webhook-cert-resync 1 --webhook-cert-validity 30 >"$WORK/sa2.log" 2>&1 &
  PIDS+=($!)
  eventually 10 grep -q '"webhook serving certificate loaded"' "$WORK/sa2.log" \
    && ok "a renewal refused (403): the Secret's certificate is served while it is good" \
    || not_ok "a renewal refused: no certificate served"
  grep -q 'Forbidden' "$WORK/sa2.log" && ok "... and the refusal is logged" || not_ok "the refusal is not logged"
  stop_operator "${PIDS[-1]}"
  unset 'PIDS[-1]'
  k delete -f "$WORK/chart.yaml" --ignore-not-found >/dev/null 2>&1
}
as_service_account
finish
