#!/usr/bin/env bash
# Tests the ShutdownPolicy CRD (crds/shutdownpolicies.gracekeeper.dev.yaml) and
# the samples (config/samples/) against a real kube-apiserver, the way users
# meet them: kubectl apply, explain, get, and the API server's own validation.
#
# usage: test/integration/crd_test.sh [CLUSTER_DIR]
#        test/integration/crd_test.sh --static
#
#   CLUSTER_DIR  a control plane already started with test/cluster/up CLUSTER_DIR
#                (uses CLUSTER_DIR/kubeconfig); without it, the script starts
#                its own on a temp dir and stops it on exit.
#   --static     only the checks that need no cluster (YAML, schema
#                descriptions, defaults, bounds, printer columns, samples).
#
# Creates objects in namespace shop-prod (the samples' namespace): the sample
# policy `default` and a few policies named crd-test-*; deletes the policies
# on exit. The CRD and the namespace stay.
#
# Output: one `ok - ...` / `not ok - ...` line per check, then `N passed, M failed`.
# Exit status: 0 when every check passed, 1 otherwise.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CRD="$ROOT/crds/shutdownpolicies.gracekeeper.dev.yaml"
SAMPLES="$ROOT/config/samples"
NS=shop-prod

. "$ROOT/test/integration/harness.sh"   # ok, not_ok, note, finish, k, start_cluster

# ------------------------------------------------------------------ static checks
# Python reads the CRD and the samples and prints ok/not ok lines itself.
static_checks() {
  python3 - "$CRD" "$SAMPLES" <<'PY'
import json, math, re, sys
import yaml

crd_path, samples = sys.argv[1], sys.argv[2]
results = []
def check(cond, msg, detail=None):
    results.append((bool(cond), msg, detail))

def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]

try:
    docs = load(crd_path)
    check(len(docs) == 1, "CRD file parses as one YAML document")
    crd = docs[0]
except Exception as e:  # nothing else can be checked
    print(f"not ok - CRD file parses as YAML: {e}")
    sys.exit(0)

spec = crd.get("spec", {})
names = spec.get("names", {})
check(crd.get("apiVersion") == "apiextensions.k8s.io/v1" and crd.get("kind") == "CustomResourceDefinition",
      "CRD is apiextensions.k8s.io/v1 CustomResourceDefinition")
check(crd["metadata"]["name"] == "shutdownpolicies.gracekeeper.dev" and spec.get("group") == "gracekeeper.dev"
      and spec.get("scope") == "Namespaced", "CRD name, group gracekeeper.dev, namespaced")
check(names.get("kind") == "ShutdownPolicy" and names.get("plural") == "shutdownpolicies"
      and names.get("singular") == "shutdownpolicy" and names.get("shortNames") == ["sdp"]
      and names.get("categories") == ["gracekeeper"], "names: ShutdownPolicy, shutdownpolicies, shutdownpolicy, sdp, category gracekeeper")
versions = spec.get("versions", [])
check(len(versions) == 1 and versions[0]["name"] == "v1alpha1" and versions[0]["served"] and versions[0]["storage"],
      "one version v1alpha1, served and storage")
v = versions[0]
check(v.get("subresources", {}).get("status") == {}, "status subresource enabled")
schema = v["schema"]["openAPIV3Schema"]

# --- every field has a description, every node a type (structural schema)
missing, untyped = [], []
def walk(node, path):
    if not (node.get("type") or node.get("x-kubernetes-int-or-string")):
        untyped.append(path)
    for name, sub in (node.get("properties") or {}).items():
        p = f"{path}.{name}"
        # the API server forbids anything but name/generateName under the root's
        # metadata; kubectl explain describes ObjectMeta itself
        if not str(sub.get("description", "")).strip() and p != ".metadata":
            missing.append(p)
        walk(sub, p)
    items = node.get("items")
    if items:
        if items.get("type") == "object" and not str(items.get("description", "")).strip():
            missing.append(path + "[]")
        walk(items, path + "[]")
    ap = node.get("additionalProperties")
    if isinstance(ap, dict):
        walk(ap, path + "{}")
walk(schema, "")
check(str(schema.get("description", "")).strip(), "the root schema has a description")
check(not missing, "every schema property has a description", "missing: " + ", ".join(missing))
check(not untyped, "every schema node has a type (structural)", "untyped: " + ", ".join(untyped))

def node(path):
    n = schema
    for part in path.split("."):
        if part == "[]":
            n = n["items"]
        else:
            n = n["properties"][part]
    return n

# --- defaults of docs/api.md, "ShutdownPolicy spec"
defaults = {
    "spec": {}, "spec.mode": "Enforce", "spec.selector": {},
    "spec.propagation": {}, "spec.propagation.source": "Static", "spec.propagation.staticSeconds": 10,
    "spec.propagation.quantile": 0.99, "spec.propagation.safetyFactor": 1.5,
    "spec.propagation.externalLoadBalancer.healthCheckIntervalSeconds": 10,
    "spec.propagation.externalLoadBalancer.unhealthyThreshold": 2,
    "spec.propagation.observed.windowSeconds": 3600, "spec.propagation.observed.minSamples": 20,
    "spec.propagation.observed.consumerSyncSeconds": 1,
    "spec.preStop": {}, "spec.preStop.minSeconds": 5, "spec.preStop.maxSeconds": 60,
    "spec.preStop.action": "Auto", "spec.preStop.existing": "Keep", "spec.preStop.withoutService": "Skip",
    "spec.drainSeconds": 30, "spec.sidecarDrainSeconds": 0, "spec.reserveSeconds": 10,
    "spec.drain": {}, "spec.drain.source": "Static", "spec.drain.quantile": 0.9,
    "spec.drain.minSamples": 5, "spec.drain.windowSeconds": 86400, "spec.drain.maxSeconds": 600,
    "spec.rollout": {}, "spec.rollout.manage": True, "spec.rollout.maxSurge": 1,
    "spec.changes": {}, "spec.changes.minIntervalSeconds": 3600, "spec.changes.decreaseThresholdSeconds": 2,
    "spec.changes.maxConcurrentRollouts": "10%",
}
bad = [f"{p}={node(p).get('default', '<none>')!r} (want {d!r})" for p, d in defaults.items()
       if node(p).get("default", "<none>") != d or type(node(p).get("default")) is not type(d)]
check(not bad, f"schema defaults match docs/api.md ({len(defaults)} fields)", "; ".join(bad))
# kubectl explain does not print defaults: each description says its default
def show(v): return "true" if v is True else str(v)
bad = [p for p, d in defaults.items() if not isinstance(d, dict)
       and f"Default: {show(d)}." not in " ".join(str(node(p).get("description", "")).split())]
check(not bad, "every defaulted field's description ends with its default", ", ".join(bad))
check("default" not in node("spec.propagation.externalLoadBalancer"),
      "externalLoadBalancer has no default (only its fields default when it is given)")
check("default" not in node("spec.propagation.observed"),
      "propagation.observed has no default (a stored policy stays as it was; the operator defaults it)")

# --- bounds shared with the operator's validation
bounds = {  # path: (type, minimum, maximum, exclusive)
    "spec.propagation.staticSeconds": ("number", 0, 3600, False),
    "spec.propagation.quantile": ("number", 0, 1, True),
    "spec.propagation.safetyFactor": ("number", 1, 10, False),
    "spec.preStop.minSeconds": ("integer", 0, 3600, False),
    "spec.preStop.maxSeconds": ("integer", 1, 3600, False),
    "spec.drainSeconds": ("integer", 0, 86400, False),
    "spec.sidecarDrainSeconds": ("integer", 0, 3600, False),
    "spec.drain.quantile": ("number", 0, 1, True),
    "spec.drain.minSamples": ("integer", 1, 10000, False),
    "spec.drain.windowSeconds": ("integer", 60, 604800, False),
    "spec.drain.maxSeconds": ("integer", 1, 86400, False),
    "spec.reserveSeconds": ("integer", 0, 3600, False),
    "spec.propagation.externalLoadBalancer.healthCheckIntervalSeconds": ("integer", 1, 3600, False),
    "spec.propagation.externalLoadBalancer.unhealthyThreshold": ("integer", 1, 100, False),
    "spec.changes.minIntervalSeconds": ("integer", 0, 604800, False),
    "spec.propagation.observed.windowSeconds": ("integer", 60, 86400, False),
    "spec.propagation.observed.minSamples": ("integer", 1, 10000, False),
    "spec.propagation.observed.consumerSyncSeconds": ("number", 0, 3600, False),
    "spec.propagation.observed.consumers.[].syncSeconds": ("number", 0, 3600, False),
    "spec.changes.decreaseThresholdSeconds": ("integer", 0, 3600, False),
}
bad = []
for p, (t, lo, hi, excl) in bounds.items():
    n = node(p)
    got = (n.get("type"), n.get("minimum"), n.get("maximum"),
           bool(n.get("exclusiveMinimum")) and bool(n.get("exclusiveMaximum")))
    if got != (t, lo, hi, excl):
        bad.append(f"{p}: {got} want {(t, lo, hi, excl)}")
check(not bad, f"bounds match the operator's validation ({len(bounds)} fields)", "; ".join(bad))

enums = {"spec.mode": ["Enforce", "DryRun"], "spec.propagation.source": ["Static", "Prometheus", "Observed"],
         "spec.preStop.action": ["Auto", "Sleep", "Exec"], "spec.preStop.existing": ["Keep", "Replace"],
         "spec.selector.matchExpressions.[].operator": ["In", "NotIn", "Exists", "DoesNotExist"],
         "status.conditions.[].status": ["True", "False", "Unknown"]}
bad = [p for p, e in enums.items() if node(p).get("enum") != e]
check(not bad, "enums: mode, source, action, existing, selector operator, condition status", ", ".join(bad))

ms = node("spec.rollout.maxSurge")
pat = re.compile(ms.get("pattern", "^$"))
check(ms.get("x-kubernetes-int-or-string") and ms.get("x-kubernetes-validations"),
      "maxSurge is int-or-string with a CEL rule")
good, wrong = ["1%", "25%", "99%", "100%"], ["0%", "101%", "abc", "5", "05%", "%", "1.5%"]
check(all(pat.match(s) for s in good) and not any(pat.match(s) for s in wrong),
      "maxSurge pattern accepts 1%..100% only", f"pattern {ms.get('pattern')!r}")

q = node("spec.propagation.prometheus.queries")
check(q.get("maxItems") == 20 and q.get("x-kubernetes-list-type") == "map"
      and q.get("x-kubernetes-list-map-keys") == ["name"] and q["items"].get("required") == ["name", "query"],
      "prometheus.queries: maxItems 20, list-type map keyed by name, name and query required")
c = node("spec.propagation.observed.consumers")
cn = c["items"]["properties"]["name"]
check(c.get("maxItems") == 16 and c.get("x-kubernetes-list-type") == "map"
      and c.get("x-kubernetes-list-map-keys") == ["name"] and c["items"].get("required") == ["name", "syncSeconds"]
      and (cn.get("minLength"), cn.get("maxLength")) == (1, 63)
      and [r["rule"] for r in cn.get("x-kubernetes-validations", [])] == ["self != 'kube-proxy'"],
      "observed.consumers: maxItems 16, list-type map keyed by name (1-63, not kube-proxy), name and syncSeconds required")

# --- CEL rules: present, with messages; strings and lists they touch are bounded
rules = []
def collect(n, path):
    for r in n.get("x-kubernetes-validations", []):
        rules.append((path, r))
    for k, sub in (n.get("properties") or {}).items():
        collect(sub, f"{path}.{k}")
    if n.get("items"):
        collect(n["items"], path + "[]")
collect(schema, "")
check(len(rules) >= 4 and all(r.get("message") for _, r in rules),
      f"{len(rules)} CEL rules, each with a message", str(rules))
check(any("minSeconds <= self.maxSeconds" in r["rule"] for _, r in rules), "CEL rule preStop minSeconds <= maxSeconds")
check(any("Prometheus" in r["rule"] and "queries" in r["rule"] for _, r in rules),
      "CEL rule: source Prometheus requires a query")
unbounded = []
def bounded(n, path):
    t = n.get("type")
    if t == "array" and "maxItems" not in n:
        unbounded.append(path)
    if t == "string" and "enum" not in n and "maxLength" not in n and n.get("format") != "date-time":
        unbounded.append(path)
    for k, sub in (n.get("properties") or {}).items():
        bounded(sub, f"{path}.{k}")
    if n.get("items"):
        bounded(n["items"], path + "[]")
    if isinstance(n.get("additionalProperties"), dict):
        bounded(n["additionalProperties"], path + "{}")
bounded(node("spec"), ".spec")
check(not unbounded, "every spec list has maxItems and every free string maxLength (CEL cost)", ", ".join(unbounded))

# --- printer columns
want_cols = [("MODE", ".spec.mode", "string"), ("SOURCE", ".status.propagation.source", "string"),
             ("PROPAGATION", ".status.propagation.seconds", "number"),
             ("CONSUMER", ".status.propagation.consumer", "string"),
             ("PRESTOP", ".status.recommended.preStopSeconds", "integer"),
             ("GRACE", ".status.recommended.terminationGracePeriodSeconds", "integer"),
             ("MANAGED", ".status.deployments.managed", "integer"),
             ("COMPLIANT", ".status.deployments.compliant", "integer"),
             ("STATEFULSETS", ".status.statefulSets.managed", "integer"),
             ("ROLLING", ".status.deployments.rolling", "integer"),
             ("PODSDIFFER", ".status.deployments.podsDiffer", "integer"),
             ("LATE", ".status.terminations.late", "integer"),
             ("DRAIN", ".status.drain.seconds", "integer"),
             ("READY", '.status.conditions[?(@.type=="Ready")].status', "string"),
             ("AGE", ".metadata.creationTimestamp", "date")]
got_cols = [(c["name"].upper(), c["jsonPath"], c["type"]) for c in v.get("additionalPrinterColumns", [])]
check(got_cols == want_cols, "printer columns MODE SOURCE PROPAGATION CONSUMER PRESTOP GRACE MANAGED COMPLIANT STATEFULSETS ROLLING PODSDIFFER LATE DRAIN READY AGE",
      f"got {got_cols}")
wide = [c["name"].upper() for c in v.get("additionalPrinterColumns", []) if c.get("priority", 0) > 0]
check(wide == ["STATEFULSETS", "ROLLING", "PODSDIFFER", "LATE", "DRAIN"],
      "only STATEFULSETS, ROLLING, PODSDIFFER, LATE and DRAIN wait for -o wide (priority 1)", f"got {wide}")

st = node("status")
check(sorted(st["properties"]) == ["conditions", "deployments", "drain", "observedGeneration", "propagation",
                                   "recommended", "statefulSets", "terminations"]
      and sorted(node("status.statefulSets")["properties"]) == sorted(node("status.deployments")["properties"])
      and sorted(node("status.terminations")["properties"]) == ["cutShort", "drained", "lastCutShortAt",
                                                                "lastLateAt", "late", "observed"]
      and sorted(node("status.drain")["properties"]) == ["seconds", "source", "workload"]
      and node("status.observedGeneration").get("format") == "int64"
      and node("status.propagation.sampledAt").get("format") == "date-time"
      and node("status.conditions").get("x-kubernetes-list-map-keys") == ["type"]
      and sorted(node("status.conditions.[]")["required"]) == ["lastTransitionTime", "message", "reason", "status", "type"],
      "status schema: observedGeneration, propagation, recommended, deployments, statefulSets (the same counts), terminations, drain, conditions (metav1.Condition)")

# --- a tiny validator: the samples must satisfy the schema's types, enums and bounds
def validate(n, val, path, errs):
    if n.get("x-kubernetes-int-or-string"):
        if isinstance(val, bool) or not isinstance(val, (int, str)):
            errs.append(f"{path}: want int or string")
        elif isinstance(val, str) and "pattern" in n and not re.match(n["pattern"], val):
            errs.append(f"{path}: {val!r} does not match {n['pattern']}")
        return
    t = n.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}
    if not isinstance(val, types[t]) or (t in ("integer", "number") and isinstance(val, bool)):
        errs.append(f"{path}: want {t}, got {val!r}"); return
    if "enum" in n and val not in n["enum"]:
        errs.append(f"{path}: {val!r} not in {n['enum']}")
    if "minimum" in n and (val < n["minimum"] or (n.get("exclusiveMinimum") and val == n["minimum"])):
        errs.append(f"{path}: {val} below minimum")
    if "maximum" in n and (val > n["maximum"] or (n.get("exclusiveMaximum") and val == n["maximum"])):
        errs.append(f"{path}: {val} above maximum")
    if t == "object":
        for k in n.get("required", []):
            if k not in val: errs.append(f"{path}.{k}: required")
        for k, sub in val.items():
            if k in (n.get("properties") or {}):
                validate(n["properties"][k], sub, f"{path}.{k}", errs)
            elif isinstance(n.get("additionalProperties"), dict):
                validate(n["additionalProperties"], sub, f"{path}.{k}", errs)
            elif path != ".metadata":
                errs.append(f"{path}.{k}: unknown field")
    if t == "array":
        if len(val) > n.get("maxItems", math.inf): errs.append(f"{path}: too many items")
        for i, item in enumerate(val):
            validate(n["items"], item, f"{path}[{i}]", errs)

try:
    pol = load(f"{samples}/shutdownpolicy.yaml")
    check(len(pol) == 1 and pol[0]["kind"] == "ShutdownPolicy" and pol[0]["apiVersion"] == "gracekeeper.dev/v1alpha1"
          and pol[0]["metadata"] == {"name": "default", "namespace": "shop-prod"},
          "sample policy: ShutdownPolicy default in shop-prod")
    errs = []
    validate(schema, pol[0], "", errs)
    check(not errs, "sample policy satisfies the schema (static)", "; ".join(errs))
    p = pol[0]["spec"]["propagation"]
    check(p["source"] == "Static" and p["staticSeconds"] == 4, "sample policy: source Static, staticSeconds 4")
    text = open(f"{samples}/shutdownpolicy.yaml").read()
    check("kubeproxy_network_programming_duration_seconds_bucket" in text and "# source: Prometheus" in text,
          "sample policy: commented Prometheus alternative with the kube-proxy histogram query")

    dep = {(d["kind"], d["metadata"]["name"]): d for d in load(f"{samples}/checkout-deployment.yaml")}
    check(set(dep) == {("Namespace", "shop-prod"), ("Deployment", "checkout"), ("Service", "checkout")},
          "sample deployment file: Namespace shop-prod, Deployment checkout, Service checkout")
    d = dep[("Deployment", "checkout")]
    ann = d["metadata"].get("annotations", {})
    tpl = d["spec"]["template"]["spec"]
    c = tpl["containers"]
    check(d["metadata"]["namespace"] == "shop-prod" and d["spec"]["replicas"] == 3
          and ann.get("gracekeeper.dev/enabled") == "true" and ann.get("gracekeeper.dev/drain-seconds") == "30",
          "sample Deployment: 3 replicas, opted in, drain-seconds 30")
    check(tpl["terminationGracePeriodSeconds"] == 30 and all("lifecycle" not in x for x in c)
          and d["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
          "sample Deployment: grace 30, no preStop, RollingUpdate 25%/25%")
    check(len(c) == 1 and c[0]["name"] == "checkout" and c[0]["image"] == "registry.example.com/checkout:1.4.2"
          and c[0]["ports"][0]["containerPort"] == 8080
          and c[0]["readinessProbe"]["httpGet"]["path"] == "/actuator/health/readiness"
          and c[0]["livenessProbe"]["httpGet"]["path"] == "/actuator/health/liveness",
          "sample Deployment: container checkout, port 8080, readiness and liveness httpGet probes")
    s = dep[("Service", "checkout")]
    check(s["spec"]["selector"] == d["spec"]["selector"]["matchLabels"] == d["spec"]["template"]["metadata"]["labels"],
          "sample Service selects the Deployment's pods")
    k = load(f"{samples}/kustomization.yaml")[0]
    check(sorted(k["resources"]) == ["checkout-deployment.yaml", "shutdownpolicy.yaml"],
          "kustomization lists both samples")
except Exception as e:
    check(False, "samples parse and have the expected shape", repr(e))

for good_, msg, detail in results:
    print(("ok - " if good_ else "not ok - ") + msg)
    if not good_ and detail:
        print("#   " + str(detail)[:2000])
PY
}

count_static() {
  local out
  out="$(static_checks 2>&1)"
  echo "$out"
  PASSED=$((PASSED + $(grep -c '^ok - ' <<<"$out")))
  FAILED=$((FAILED + $(grep -c '^not ok - ' <<<"$out")))
  if ! grep -q '^ok - ' <<<"$out"; then FAILED=$((FAILED + 1)); echo "not ok - static checks ran"; fi
}

echo "# static checks"
count_static
if [ "${1:-}" = "--static" ]; then finish; fi

# ------------------------------------------------------------------ the cluster
command -v kubectl >/dev/null || { not_ok "kubectl in PATH"; finish; }
command -v jq >/dev/null || { not_ok "jq in PATH"; finish; }

work_dir "${TMPDIR:-/tmp}/gk-crd-test.XXXXXX"
CLUSTER_DIR="${1:-}"
if [ -z "$CLUSTER_DIR" ]; then
  echo "# starting a control plane in $WORK/cluster"
  start_cluster "$WORK/cluster"
  CLUSTER_DIR=$CLUSTER
fi
[ -f "$CLUSTER_DIR/kubeconfig" ] || { not_ok "cluster dir $CLUSTER_DIR has a kubeconfig"; finish; }
export KUBECONFIG="$CLUSTER_DIR/kubeconfig"
on_exit 'k delete shutdownpolicies -n "$NS" default crd-test-empty crd-test-partial crd-test-lb --ignore-not-found --wait=false >/dev/null 2>&1'
# A fresh discovery cache: a cluster started earlier on the same port must not
# leave kubectl a resource list without our CRD; and 30 s per request.
K_CACHE_DIR="$WORK/kube-cache"
K_REQUEST_TIMEOUT=30s
ws() { tr -s ' \t\n' ' '; }   # kubectl explain wraps text: compare on single spaces

echo "# cluster: $(k version -o json 2>/dev/null | jq -r '.serverVersion.gitVersion // "?"'), kubectl $(k version --client -o json | jq -r .clientVersion.gitVersion)"

# --- install the CRD
if out=$(k apply --server-side --field-manager=gracekeeper-test --force-conflicts -f "$CRD" 2>&1); then
  ok "CRD applied"
  if grep -qi 'warning' <<<"$out"; then not_ok "CRD applies without warnings"; note <<<"$out"; else ok "CRD applies without warnings"; fi
else
  not_ok "CRD applied"; note <<<"$out"; finish
fi
if out=$(k wait --for=condition=Established --timeout=60s crd/shutdownpolicies.gracekeeper.dev 2>&1); then
  ok "CRD Established"
else
  not_ok "CRD Established"; note <<<"$out"
  k get crd shutdownpolicies.gracekeeper.dev -o jsonpath='{.status.conditions}' 2>&1 | note; finish
fi
out=$(k api-resources --api-group=gracekeeper.dev --no-headers 2>&1)
if [[ "$(ws <<<"$out")" == "shutdownpolicies sdp gracekeeper.dev/v1alpha1 true ShutdownPolicy " ]]; then
  ok "api-resources: shutdownpolicies, short name sdp, namespaced, kind ShutdownPolicy"
else
  not_ok "api-resources: shutdownpolicies, short name sdp, namespaced, kind ShutdownPolicy"; note <<<"$out"
fi

# --- kubectl explain (the OpenAPI document is published a moment after Established)
explain=""
explained() { explain=$(k explain shutdownpolicy.spec.preStop 2>&1) && grep -q minSeconds <<<"$explain"; }
eventually 60 1 explained
flat=$(ws <<<"$explain")
if [[ "$flat" == *"keeps serving before it gets SIGTERM"* && "$flat" == *"minSeconds <integer>"* \
   && "$flat" == *"Lower bound of the preStop wait in seconds (0 to 3600)"* && "$flat" == *"maxSeconds <integer>"* \
   && "$flat" == *"Upper bound of the preStop wait in seconds"* && "$flat" == *"action <string>"* \
   && "$flat" == *"Sleep: the native sleep action"* && "$flat" == *"existing <string>"* ]]; then
  ok "kubectl explain shutdownpolicy.spec.preStop shows the descriptions"
else
  not_ok "kubectl explain shutdownpolicy.spec.preStop shows the descriptions"; note <<<"$explain"
fi
out=$(k explain sdp.spec.propagation.quantile 2>&1)
if [[ "$(ws <<<"$out")" == *"strictly between 0 and 1"* ]]; then ok "kubectl explain sdp.spec.propagation.quantile"
else not_ok "kubectl explain sdp.spec.propagation.quantile"; note <<<"$out"; fi
out=$(k explain shutdownpolicy --recursive 2>&1)
if [[ "$out" == *decreaseThresholdSeconds* && "$out" == *healthCheckIntervalSeconds* && "$out" == *lastTransitionTime* ]]; then
  ok "kubectl explain shutdownpolicy --recursive lists spec and status fields"
else not_ok "kubectl explain shutdownpolicy --recursive lists spec and status fields"; note <<<"$out"; fi

# --- the samples
if out=$(k apply -f - 2>&1 <<<"$(python3 -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "Namespace": print(yaml.safe_dump(d))' "$SAMPLES/checkout-deployment.yaml")"); then
  ok "sample Namespace shop-prod applied"
else not_ok "sample Namespace shop-prod applied"; note <<<"$out"; finish; fi
if out=$(k apply --dry-run=server --validate=strict -f "$SAMPLES/checkout-deployment.yaml" 2>&1); then
  ok "sample checkout-deployment.yaml accepted by the API server (server dry-run, strict)"
else not_ok "sample checkout-deployment.yaml accepted by the API server (server dry-run, strict)"; note <<<"$out"; fi
if out=$(k kustomize "$SAMPLES" 2>&1) && [[ "$out" == *"kind: ShutdownPolicy"* && "$out" == *"kind: Deployment"* ]]; then
  ok "kubectl kustomize config/samples builds"
else not_ok "kubectl kustomize config/samples builds"; note <<<"$out"; fi
if out=$(k apply --validate=strict -f "$SAMPLES/shutdownpolicy.yaml" 2>&1); then
  ok "sample ShutdownPolicy applied"
else not_ok "sample ShutdownPolicy applied"; note <<<"$out"; finish; fi

# get_spec NAME: the stored spec, as canonical JSON
get_spec() { k get sdp -n "$NS" "$1" -o json | jq -cS .spec; }
# expect_spec NAME EXPECTED_JSON DESCRIPTION
expect_spec() {
  local got want
  got=$(get_spec "$1" 2>&1)
  want=$(jq -cS . <<<"$2")
  if [ "$got" = "$want" ]; then ok "$3"; else not_ok "$3"; { echo "got:  $got"; echo "want: $want"; } | note; fi
}
create() { k create --validate=strict -f - >/dev/null 2>"$WORK/create.err" || { note <"$WORK/create.err"; return 1; }; }
policy() {  # NAME SPEC_JSON: a ShutdownPolicy object as JSON (SPEC_JSON "" = no spec at all)
  if [ -z "$2" ]; then
    printf '{"apiVersion":"gracekeeper.dev/v1alpha1","kind":"ShutdownPolicy","metadata":{"name":"%s","namespace":"%s"}}' "$1" "$NS"
  else
    printf '{"apiVersion":"gracekeeper.dev/v1alpha1","kind":"ShutdownPolicy","metadata":{"name":"%s","namespace":"%s"},"spec":%s}' "$1" "$NS" "$2"
  fi
}

expect_spec default '{
  "mode":"Enforce","selector":{},
  "propagation":{"source":"Static","staticSeconds":4,"quantile":0.99,"safetyFactor":1.5},
  "preStop":{"minSeconds":5,"maxSeconds":60,"action":"Auto","existing":"Keep","withoutService":"Skip"},
  "drainSeconds":30,"sidecarDrainSeconds":0,"reserveSeconds":10,
  "drain":{"source":"Static","quantile":0.9,"minSamples":5,"windowSeconds":86400,"maxSeconds":600},
  "rollout":{"manage":true,"maxSurge":1},
  "changes":{"minIntervalSeconds":3600,"decreaseThresholdSeconds":2,"maxConcurrentRollouts":"10%"}}' \
  "sample policy stored with quantile 0.99 defaulted and no externalLoadBalancer"

FULL_DEFAULTS='{
  "mode":"Enforce","selector":{},
  "propagation":{"source":"Static","staticSeconds":10,"quantile":0.99,"safetyFactor":1.5},
  "preStop":{"minSeconds":5,"maxSeconds":60,"action":"Auto","existing":"Keep","withoutService":"Skip"},
  "drainSeconds":30,"sidecarDrainSeconds":0,"reserveSeconds":10,
  "drain":{"source":"Static","quantile":0.9,"minSamples":5,"windowSeconds":86400,"maxSeconds":600},
  "rollout":{"manage":true,"maxSurge":1},
  "changes":{"minIntervalSeconds":3600,"decreaseThresholdSeconds":2,"maxConcurrentRollouts":"10%"}}'
if policy crd-test-empty "" | create; then
  expect_spec crd-test-empty "$FULL_DEFAULTS" "a policy without spec gets every default of docs/api.md"
else not_ok "a policy without spec is accepted"; fi
if policy crd-test-partial '{"mode":"DryRun","propagation":{"source":"Observed"},"preStop":{"maxSeconds":30},"rollout":{"maxSurge":"25%"}}' | create; then
  expect_spec crd-test-partial "$(jq -c '.mode="DryRun" | .propagation.source="Observed" | .preStop.maxSeconds=30 | .rollout.maxSurge="25%"' <<<"$FULL_DEFAULTS")" \
    "a partial spec keeps its values and gets the missing defaults"
else not_ok "a partial spec is accepted"; fi
if policy crd-test-lb '{"propagation":{"externalLoadBalancer":{}}}' | create; then
  expect_spec crd-test-lb "$(jq -c '.propagation.externalLoadBalancer={"healthCheckIntervalSeconds":10,"unhealthyThreshold":2}' <<<"$FULL_DEFAULTS")" \
    "externalLoadBalancer: {} gets healthCheckIntervalSeconds 10 and unhealthyThreshold 2"
else not_ok "externalLoadBalancer: {} is accepted"; fi

# --- printer columns
WANT_NS="NAME MODE SOURCE PROPAGATION CONSUMER PRESTOP GRACE MANAGED COMPLIANT READY AGE"
out=$(k get sdp -n "$NS" 2>&1)
if [ "$(head -n1 <<<"$out" | ws | sed 's/ $//')" = "$WANT_NS" ]; then ok "kubectl get sdp -n $NS: columns $WANT_NS"
else not_ok "kubectl get sdp -n $NS: columns $WANT_NS"; note <<<"$out"; fi
out=$(k get shutdownpolicies -A 2>&1)
if [ "$(head -n1 <<<"$out" | ws | sed 's/ $//')" = "NAMESPACE $WANT_NS" ]; then ok "kubectl get shutdownpolicies -A: columns NAMESPACE $WANT_NS"
else not_ok "kubectl get shutdownpolicies -A: columns NAMESPACE $WANT_NS"; note <<<"$out"; fi
out=$(k get gracekeeper -n "$NS" 2>&1)
if grep -qE '^(shutdownpolicy\.gracekeeper\.dev/)?default ' <<<"$out"; then ok "kubectl get gracekeeper (category) lists the policies"
else not_ok "kubectl get gracekeeper (category) lists the policies"; note <<<"$out"; fi

# --- status through the status subresource
NOW=$(date -u +%Y-%m-%dT%H:%M:%SZ)
STATUS=$(jq -nc --arg now "$NOW" '{status:{
  observedGeneration:1,
  propagation:{seconds:3.2,quantile:0.99,source:"Static",sampledAt:$now,message:"staticSeconds"},
  recommended:{preStopSeconds:6,terminationGracePeriodSeconds:46},
  deployments:{managed:1,compliant:0,pending:1,violations:1},
  conditions:[
    {type:"Ready",status:"True",observedGeneration:1,lastTransitionTime:$now,reason:"Reconciled",message:"1 Deployment governed"},
    {type:"BudgetHolds",status:"False",observedGeneration:1,lastTransitionTime:$now,reason:"BudgetExceeded",message:"checkout: 0+30+0+10 > 30"}]}}')
if ! kubectl version --client -o json | jq -e '(.clientVersion.major|tonumber) > 1 or (.clientVersion.minor|gsub("[^0-9]";"")|tonumber) >= 24' >/dev/null; then
  not_ok "kubectl >= 1.24 (needed for --subresource=status)"
elif out=$(k patch sdp -n "$NS" default --subresource=status --type=merge -p "$STATUS" 2>&1); then
  ok "status written through the status subresource"
  row=$(k get sdp -n "$NS" default --no-headers 2>&1 | ws)
  if [[ "$row" == "default Enforce Static 3.2 6 46 1 0 True "* ]]; then ok "printer columns show the status: $row"
  else not_ok "printer columns show the status: want 'default Enforce Static 3.2 6 46 1 0 True <age>'"; note <<<"$row"; fi
  row=$(k get sdp -A --no-headers 2>&1 | grep -E "^$NS +default " | ws)
  if [[ "$row" == "$NS default Enforce Static 3.2 6 46 1 0 True "* ]]; then ok "kubectl get -A row: $row"
  else not_ok "kubectl get -A row shows the status"; note <<<"$row"; fi
else
  not_ok "status written through the status subresource"; note <<<"$out"
fi
# a status in a main-resource write is ignored, and so is a spec in a status write
k patch sdp -n "$NS" default --type=merge -p '{"status":{"deployments":{"managed":99}}}' >/dev/null 2>&1
k patch sdp -n "$NS" default --subresource=status --type=merge -p '{"spec":{"mode":"DryRun"}}' >/dev/null 2>&1
got=$(k get sdp -n "$NS" default -o json | jq -c '[.status.deployments.managed, .spec.mode]')
if [ "$got" = '[1,"Enforce"]' ]; then ok "status only through /status, spec never through /status"
else not_ok "status only through /status, spec never through /status"; note <<<"got [managed, mode] = $got"; fi
out=$(k patch sdp -n "$NS" default --subresource=status --type=merge -p '{"status":{"conditions":[{"type":"Ready","status":"Maybe","lastTransitionTime":"'"$NOW"'","reason":"X","message":""}]}}' 2>&1)
if [ $? -ne 0 ] && [[ "$out" == *'Unsupported value: "Maybe"'* ]]; then ok "status is validated too: condition status Maybe rejected"
else not_ok "status is validated too: condition status Maybe rejected"; note <<<"$out"; fi

# --- invalid policies: each must be rejected by the API server with the message
N_INVALID=0
expect_reject() {  # DESCRIPTION SUBSTRING SPEC_JSON
  local desc="$1" want="$2" spec="$3" name out
  N_INVALID=$((N_INVALID + 1))
  name="crd-test-invalid-$N_INVALID"
  if out=$(policy "$name" "$spec" | k create --validate=strict -f - 2>&1); then
    not_ok "rejected: $desc (it was accepted)"
    k delete sdp -n "$NS" "$name" --ignore-not-found >/dev/null 2>&1
  elif [[ "$out" == *"$want"* ]]; then
    ok "rejected: $desc"
    local before="${out%%"$want"*}"
    note <<<"...${before: -100}$want"   # the server's message, for the record
  else
    not_ok "rejected: $desc (message lacks '$want')"; note <<<"$out"
  fi
}
expect_reject "preStop.minSeconds 30 > maxSeconds 20" \
  "preStop.minSeconds (30) must be less than or equal to preStop.maxSeconds (20)" '{"preStop":{"minSeconds":30,"maxSeconds":20}}'
expect_reject "preStop.minSeconds 61 > the default maxSeconds 60" \
  "preStop.minSeconds (61) must be less than or equal to preStop.maxSeconds (60)" '{"preStop":{"minSeconds":61}}'
expect_reject "preStop.maxSeconds 0" "should be greater than or equal to 1" '{"preStop":{"maxSeconds":0}}'
expect_reject "quantile 0" "should be greater than 0" '{"propagation":{"quantile":0}}'
expect_reject "quantile 1" "should be less than 1" '{"propagation":{"quantile":1}}'
expect_reject "unknown mode" 'Unsupported value: "Audit"' '{"mode":"Audit"}'
expect_reject "unknown propagation source" 'Unsupported value: "Guess"' '{"propagation":{"source":"Guess"}}'
expect_reject "unknown preStop.action" 'Unsupported value: "Wait"' '{"preStop":{"action":"Wait"}}'
expect_reject "negative drainSeconds" "should be greater than or equal to 0" '{"drainSeconds":-1}'
expect_reject "drainSeconds as a string" "must be of type integer" '{"drainSeconds":"30"}'
expect_reject "staticSeconds 3601" "should be less than or equal to 3600" '{"propagation":{"staticSeconds":3601}}'
expect_reject "safetyFactor 0.5" "should be greater than or equal to 1" '{"propagation":{"safetyFactor":0.5}}'
expect_reject "observed.consumers named kube-proxy" "kube-proxy's allowance is observed.consumerSyncSeconds" \
  '{"propagation":{"observed":{"consumers":[{"name":"kube-proxy","syncSeconds":2}]}}}'
expect_reject "observed.consumers with one name twice" 'Duplicate value' \
  '{"propagation":{"observed":{"consumers":[{"name":"traefik","syncSeconds":2},{"name":"traefik","syncSeconds":3}]}}}'
expect_reject "observed.consumers without syncSeconds" 'Required value' \
  '{"propagation":{"observed":{"consumers":[{"name":"traefik"}]}}}'
expect_reject "externalLoadBalancer.unhealthyThreshold 0" "should be greater than or equal to 1" \
  '{"propagation":{"externalLoadBalancer":{"unhealthyThreshold":0}}}'
expect_reject "changes.minIntervalSeconds 604801" "should be less than or equal to 604800" '{"changes":{"minIntervalSeconds":604801}}'
expect_reject "maxSurge 0" "maxSurge must be an integer >= 1 or a percentage from 1% to 100%, got 0" '{"rollout":{"maxSurge":0}}'
expect_reject 'maxSurge "0%"' "maxSurge must be an integer >= 1 or a percentage from 1% to 100%, got 0%" '{"rollout":{"maxSurge":"0%"}}'
expect_reject 'maxSurge "abc"' "maxSurge must be an integer >= 1 or a percentage from 1% to 100%, got abc" '{"rollout":{"maxSurge":"abc"}}'
expect_reject "maxConcurrentRollouts 0" "maxConcurrentRollouts must be an integer >= 1 or a percentage from 1% to 100%, got 0" '{"changes":{"maxConcurrentRollouts":0}}'
expect_reject 'maxConcurrentRollouts "0%"' "maxConcurrentRollouts must be an integer >= 1 or a percentage from 1% to 100%, got 0%" '{"changes":{"maxConcurrentRollouts":"0%"}}'
expect_reject 'withoutService "Maybe"' 'Unsupported value: "Maybe"' '{"preStop":{"withoutService":"Maybe"}}'
expect_reject 'maxSurge "101%"' "maxSurge must be an integer >= 1 or a percentage from 1% to 100%, got 101%" '{"rollout":{"maxSurge":"101%"}}'
expect_reject "source Prometheus without queries" "source Prometheus requires at least one query" \
  '{"propagation":{"source":"Prometheus"}}'
expect_reject "source Prometheus with an empty query list" "source Prometheus requires at least one query" \
  '{"propagation":{"source":"Prometheus","prometheus":{"queries":[]}}}'
expect_reject "duplicate query names" "Duplicate value" \
  '{"propagation":{"source":"Prometheus","prometheus":{"queries":[{"name":"kube-proxy","query":"vector(1)"},{"name":"kube-proxy","query":"vector(2)"}]}}}'
expect_reject "a query without its PromQL" "Required value" \
  '{"propagation":{"source":"Prometheus","prometheus":{"queries":[{"name":"kube-proxy"}]}}}'
expect_reject "21 queries" "must have at most 20 items" \
  "$(jq -nc '{propagation:{source:"Prometheus",prometheus:{queries:[range(21)|{name:"q\(.)",query:"vector(1)"}]}}}')"
expect_reject "selector operator In without values" "values must be non-empty for operators In and NotIn" \
  '{"selector":{"matchExpressions":[{"key":"app","operator":"In"}]}}'
expect_reject "selector operator Exists with values" "values must be non-empty for operators In and NotIn" \
  '{"selector":{"matchExpressions":[{"key":"app","operator":"Exists","values":["x"]}]}}'
expect_reject "unknown selector operator" 'Unsupported value: "Matches"' \
  '{"selector":{"matchExpressions":[{"key":"app","operator":"Matches","values":["x"]}]}}'
expect_reject "unknown field with --validate=strict" 'unknown field "spec.preStop.minSecond"' '{"preStop":{"minSecond":3}}'

# an update is held to the same rules as a create
out=$(k patch sdp -n "$NS" default --type=merge -p '{"spec":{"preStop":{"minSeconds":100}}}' 2>&1)
if [ $? -ne 0 ] && [[ "$out" == *"preStop.minSeconds (100) must be less than or equal to preStop.maxSeconds (60)"* ]]; then
  ok "rejected on update: minSeconds 100 > maxSeconds 60"
else not_ok "rejected on update: minSeconds 100 > maxSeconds 60"; note <<<"$out"; fi

# --- edge values that must be accepted (server dry-run: validated, not stored)
expect_accept() {  # DESCRIPTION SPEC_JSON
  local out
  if out=$(policy crd-test-valid "$2" | k create --dry-run=server --validate=strict -f - 2>&1); then ok "accepted: $1"
  else not_ok "accepted: $1"; note <<<"$out"; fi
}
expect_accept 'maxSurge "100%"' '{"rollout":{"maxSurge":"100%"}}'
expect_accept 'maxSurge "1%"' '{"rollout":{"maxSurge":"1%"}}'
expect_accept "maxSurge 3" '{"rollout":{"maxSurge":3}}'
expect_accept "minSeconds == maxSeconds, bounds at their limits" \
  '{"preStop":{"minSeconds":3600,"maxSeconds":3600},"drainSeconds":86400,"sidecarDrainSeconds":3600,"reserveSeconds":0,"changes":{"minIntervalSeconds":0,"decreaseThresholdSeconds":3600}}'
expect_accept "fractional staticSeconds 0.25, quantile 0.5, safetyFactor 10" \
  '{"propagation":{"staticSeconds":0.25,"quantile":0.5,"safetyFactor":10}}'
expect_accept "source Prometheus with 20 queries" \
  "$(jq -nc '{propagation:{source:"Prometheus",prometheus:{queries:[range(20)|{name:"q\(.)",query:"vector(1)"}]}}}')"
expect_accept "a full label selector" \
  '{"selector":{"matchLabels":{"tier":"web"},"matchExpressions":[{"key":"app","operator":"In","values":["checkout","cart"]},{"key":"legacy","operator":"DoesNotExist"}]}}'
expect_accept "mode DryRun, action Exec, existing Replace, rollout.manage false" \
  '{"mode":"DryRun","preStop":{"action":"Exec","existing":"Replace"},"rollout":{"manage":false}}'

finish
