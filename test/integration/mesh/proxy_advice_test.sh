#!/usr/bin/env bash
# What ProxyExitsEarly tells a user to set is what the meshes read
# (docs/api.md, "Mesh proxies"). For meshed pods whose proxy leaves before
# the app's wait and drain are over, `gracekeeper check` gives an annotation
# for the pod template; that line:
#   - decodes as the mesh decodes it: Istio's ProxyConfig from istio.io/api
#     (pinned in test/tools/proxyconfig-check/go.mod), strictly; Linkerd's
#     wait as its injector reads it;
#   - carries the figures the finding names (the wait, wait + drain);
#   - pasted as it is under the pod's annotations, makes the budget hold.
# And what `plan` writes onto a template injected by hand decodes and holds.
# No cluster. usage: proxy_advice_test.sh GRACEKEEPER_BINARY
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
# shellcheck source=../checks.sh
GK="${1:?usage: proxy_advice_test.sh GRACEKEEPER_BINARY}"
. "$ROOT/test/integration/harness.sh"
CHECKER=$("$ROOT/test/tools/build-proxyconfig-check") || die "test/tools/build-proxyconfig-check failed"
work_dir /tmp/gk-proxy-advice.XXXXXX

# pod NAME WAIT DRAIN PROXY_YAML [ANNOTATION_LINE]: a Pod whose app waits
# WAIT s (its own sleep hook, at least the 15 s the default policy needs)
# and declares a drain of DRAIN s, beside a proxy.
pod() {
  cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: shop
  labels: {app: checkout}
  annotations:
    gracekeeper.dev/enabled: "true"
    gracekeeper.dev/drain-seconds: "$3"
${5:+    $5}
spec:
  terminationGracePeriodSeconds: 300
  containers:
  - name: checkout
    ports: [{containerPort: 8080}]
    readinessProbe: {httpGet: {path: /ready, port: 8080}}
    lifecycle: {preStop: {sleep: {seconds: $2}}}
$4
YAML
}
ISTIO='  - name: istio-proxy
    ports: [{containerPort: 15090}]
    readinessProbe: {httpGet: {path: /healthz/ready, port: 15021}}'
ISTIO_EXIT_ON_ZERO="$ISTIO
    env:
    - {name: EXIT_ON_ZERO_ACTIVE_CONNECTIONS, value: \"true\"}
    - {name: PROXY_CONFIG, value: '{\"terminationDrainDuration\":\"90s\"}'}"
LINKERD='  - name: linkerd-proxy
    ports: [{containerPort: 4143}]
    readinessProbe: {httpGet: {path: /ready, port: 4191}}'

# case NAME WAIT DRAIN PROXY KEY EXPECTED_DECODED
case_() {
  local name="$1" wait="$2" drain="$3" proxy="$4" key="$5" want="$6" out advice decoded
  pod "$name" "$wait" "$drain" "$proxy" >"$WORK/$name.yaml"
  out=$("$GK" check -f "$WORK/$name.yaml" 2>&1)
  advice=$(grep -o "set $key: .* on the pod template" <<<"$out" | sed -e 's/^set //' -e 's/ on the pod template$//')
  if [ -z "$advice" ]; then not_ok "$name: no ProxyExitsEarly advice for $key"; note <<<"$out"; return; fi
  ok "$name: ProxyExitsEarly gives $advice"
  if decoded=$("$CHECKER" <<<"$advice" 2>&1); then
    expect "$name: the mesh decodes it" "$decoded" "$want"
  else
    not_ok "$name: the mesh does not decode it"; note <<<"$decoded"
  fi
  pod "$name" "$wait" "$drain" "$proxy" "$advice" >"$WORK/$name.fixed.yaml"
  out=$("$GK" check -f "$WORK/$name.fixed.yaml" 2>&1)
  if grep -q 'ProxyExitsEarly\|ProxyConfigUnreadable' <<<"$out"; then
    not_ok "$name: pasted under the pod's annotations, the proxy still leaves early"; note <<<"$out"
  else
    ok "$name: pasted under the pod's annotations, the proxy holds"
  fi
}

case_ istio-default 15 10 "$ISTIO" proxy.istio.io/config \
  "proxy.istio.io/config: terminationDrainDuration=25s EXIT_ON_ZERO_ACTIVE_CONNECTIONS=true MINIMUM_DRAIN_DURATION=15s"
# Its environment turns exit-on-zero on with the default 5 s minimum: below the 20 s wait.
case_ istio-exit-on-zero 20 40 "$ISTIO_EXIT_ON_ZERO" proxy.istio.io/config \
  "proxy.istio.io/config: terminationDrainDuration=1m0s EXIT_ON_ZERO_ACTIVE_CONNECTIONS=true MINIMUM_DRAIN_DURATION=20s"
case_ linkerd 16 30 "$LINKERD" config.alpha.linkerd.io/proxy-wait-before-exit-seconds \
  "config.alpha.linkerd.io/proxy-wait-before-exit-seconds: waitBeforeExitSeconds=46"

# What `plan` writes onto a template injected by hand (the user's YAML
# annotation merged: its other field kept) decodes too, and holds.
cat >"$WORK/deploy.yaml" <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: checkout
  namespace: shop
  annotations: {gracekeeper.dev/enabled: "true", gracekeeper.dev/drain-seconds: "10"}
spec:
  replicas: 3
  selector: {matchLabels: {app: checkout}}
  template:
    metadata:
      labels: {app: checkout}
      annotations:
        proxy.istio.io/config: |
          holdApplicationUntilProxyStarts: true
          terminationDrainDuration: 8s
    spec:
      containers:
      - name: checkout
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /ready, port: 8080}}
      - name: istio-proxy
        readinessProbe: {httpGet: {path: /healthz/ready, port: 15021}}
YAML
"$GK" plan -f "$WORK/deploy.yaml" >"$WORK/planned.yaml" 2>"$WORK/plan.err"
written=$(python3 -c 'import json, sys, yaml
d = yaml.safe_load(sys.stdin)
print(d["spec"]["template"]["metadata"]["annotations"]["proxy.istio.io/config"])' <"$WORK/planned.yaml")
quoted=$(sed "s/'/''/g" <<<"$written")  # as a single-quoted YAML scalar
if decoded=$("$CHECKER" <<<"proxy.istio.io/config: '$quoted'" 2>&1); then
  expect "plan writes what Istio decodes" "$decoded" \
    "proxy.istio.io/config: terminationDrainDuration=25s EXIT_ON_ZERO_ACTIVE_CONNECTIONS=true MINIMUM_DRAIN_DURATION=15s"
else
  not_ok "plan writes what Istio does not decode: $written"; note <<<"$decoded"
fi
expect "... the user's other setting kept" "$(jq -r .holdApplicationUntilProxyStarts <<<"$written")" true
quietly() { "$@" >/dev/null 2>&1; }
check "... and check passes on what plan wrote" quietly "$GK" check -f "$WORK/planned.yaml"

# The checker is strict: a malformed duration and an unknown field fail.
for bad in "proxy.istio.io/config: '{\"terminationDrainDuration\":\"25\"}'" \
           "proxy.istio.io/config: '{\"terminationDrainDurationSeconds\":25}'"; do
  if "$CHECKER" <<<"$bad" >/dev/null 2>&1; then not_ok "the checker accepts $bad"; else ok "the checker refuses $bad"; fi
done
finish
