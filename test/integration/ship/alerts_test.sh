#!/usr/bin/env bash
# The chart's monitoring objects without a cluster: the PrometheusRule
# (prometheusRule.enabled) and the Grafana dashboard ConfigMap
# (dashboard.enabled). Off by default, nothing of them renders; on, the rules
# pass `promtool check rules` and `promtool test rules` (alerts/rules_test.yaml:
# each alert fired by some series and not by others), and every metric an
# alert or a panel names is one src/metrics/metrics.cpp exports
# (alerts/check.py reads the names from there).
#
# usage: test/integration/ship/alerts_test.sh   (no cluster)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
. "$ROOT/test/integration/ship/lib.sh"
helm_binary
HERE="$ROOT/test/integration/ship/alerts"
METRICS_CPP="$ROOT/src/metrics/metrics.cpp"
work_dir
command -v promtool >/dev/null || die "promtool not found (Debian's prometheus package: hack/install-deps)"

# tap COMMAND...: the command's "ok - " / "not ok - " lines counted as ours.
tap() {
  local line
  while IFS= read -r line; do
    case $line in
      "ok - "*) ok "${line#ok - }" ;;
      "not ok - "*) not_ok "${line#not ok - }" ;;
      *) echo "$line" ;;
    esac
  done < <("$@" 2>&1 || echo "not ok - $* exited $?")
}

# ------------------------------------------------------------- off by default
d0=$(render)
[ "$(jq length <<<"$d0")" -gt 5 ] || die "the chart does not render with its defaults"
expect "defaults: no PrometheusRule, no dashboard (the same objects as both off)" "$(kinds "$d0")" \
  "$(kinds "$(render --set prometheusRule.enabled=false --set dashboard.enabled=false)")"
expect "defaults: no monitoring.coreos.com object besides the ServiceMonitor switch, no ConfigMap" \
  "$(jq -c '[.[] | select(.kind == "PrometheusRule" or .kind == "ConfigMap")] | length' <<<"$d0")" 0
expect "values.yaml: prometheusRule.enabled and dashboard.enabled are false" \
  "$(python3 -c 'import yaml,sys; v=yaml.safe_load(open(sys.argv[1])); print(v["prometheusRule"]["enabled"], v["dashboard"]["enabled"])' "$CHART/values.yaml")" "False False"

# ------------------------------------------------------------- both on
d=$(render --set prometheusRule.enabled=true --set dashboard.enabled=true)
expect "both on: the default objects plus a PrometheusRule and a ConfigMap" "$(kinds "$d")" \
  "$(echo "$(kinds "$d0") ConfigMap/gracekeeper-dashboard PrometheusRule/gracekeeper" | tr ' ' '\n' | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//')"
expect "each alone renders only its own object" \
  "$(kinds "$(render --set prometheusRule.enabled=true)" | tr ' ' '\n' | grep -cE '^(PrometheusRule|ConfigMap)/') $(kinds "$(render --set dashboard.enabled=true)" | tr ' ' '\n' | grep -cE '^(PrometheusRule|ConfigMap)/')" "1 1"
for mode in "" --strict; do
  "$HELM" lint "$CHART" $mode --set prometheusRule.enabled=true --set dashboard.enabled=true >"$WORK/lint.out" 2>&1 &&
    ! grep -qE '^\[(WARNING|ERROR)\]' "$WORK/lint.out" && ok "helm lint ${mode:-(default)} with both on is clean" ||
    { not_ok "helm lint ${mode:-(default)} with both on"; note <"$WORK/lint.out"; }
done
jq '.' <<<"$d" >"$WORK/rendered.json"
expect "the PrometheusRule's and the ConfigMap's namespace and chart labels" \
  "$(jq -c '[.[] | select(.kind == "PrometheusRule" or .kind == "ConfigMap") | "\(.kind) \(.metadata.namespace) \(.metadata.labels["app.kubernetes.io/instance"])"]' <<<"$d")" \
  '["ConfigMap gracekeeper-system gracekeeper","PrometheusRule gracekeeper-system gracekeeper"]'
dv=$(render --set prometheusRule.enabled=true --set dashboard.enabled=true --set prometheusRule.namespace=monitoring \
  --set prometheusRule.labels.release=kube-prometheus-stack --set prometheusRule.ruleLabels.team=platform \
  --set dashboard.namespace=grafana --set dashboard.labels.team=platform --set dashboard.annotations.grafana_folder=Platform \
  --set prometheusRule.violatingFor=45m --set 'prometheusRule.selector=namespace="ops"\,service="gk"')
expect "values: namespaces, labels, the rule labels, the folder annotation" \
  "$(jq -c '[.[] | select(.kind == "PrometheusRule")][0] | [.metadata.namespace, .metadata.labels.release, ([.spec.groups[0].rules[].labels.team] | unique)]' <<<"$dv") $(jq -c '[.[] | select(.kind == "ConfigMap")][0].metadata | [.namespace, .labels.grafana_dashboard, .labels.team, .annotations.grafana_folder]' <<<"$dv")" \
  '["monitoring","kube-prometheus-stack",["platform"]] ["grafana","1","platform","Platform"]'
expect "values: violatingFor and the selector reach the rule" \
  "$(jq -c '[.[] | select(.kind == "PrometheusRule")][0].spec.groups[0].rules[] | select(.alert == "GracekeeperDeploymentsViolating") | [.for, .expr]' <<<"$dv")" \
  '["45m","max without (instance, pod) (gracekeeper_deployments_violating{namespace=\"ops\",service=\"gk\"}) > 0"]'
rejected() {
  local what=$1
  shift
  if "$HELM" template gracekeeper "$CHART" "$@" >/dev/null 2>"$WORK/err"; then not_ok "values.schema.json accepts $what"
  elif grep -q "values don't meet the specifications of the schema" "$WORK/err"; then ok "values.schema.json rejects $what"
  else not_ok "$what: failed, but not by the schema: $(head -c 200 "$WORK/err")"; fi
}
rejected 'prometheusRule.violatingFor: 15' --set prometheusRule.violatingFor=15
rejected 'prometheusRule.selector: a whole selector in braces' --set 'prometheusRule.selector={job="x"}'
rejected 'prometheusRule.webhookLatencySeconds: 0' --set prometheusRule.webhookLatencySeconds=0
rejected 'dashboard.enable (a typo)' --set dashboard.enable=true
rejected 'dashboard.labels.x: 1 (not a string)' --set dashboard.labels.x=1

# ------------------------------------------------------------- the rules
tap python3 "$HERE/check.py" rules "$METRICS_CPP" "$WORK/rendered.json" "$WORK/rules-full.yaml" \
  "$WORK/rules.yaml" "$HERE/rules_test.yaml"
if promtool check rules "$WORK/rules-full.yaml" >"$WORK/check.out" 2>&1; then
  ok "promtool check rules: $(grep -oE 'SUCCESS: [0-9]+ rules found' "$WORK/check.out")"
else not_ok "promtool check rules"; note <"$WORK/check.out"; fi
cp "$HERE/rules_test.yaml" "$WORK/"
if (cd "$WORK" && promtool test rules rules_test.yaml) >"$WORK/test.out" 2>&1; then
  ok "promtool test rules: $(grep -c 'eval_time' "$HERE/rules_test.yaml") evaluations over $(grep -c 'interval:' "$HERE/rules_test.yaml") groups pass"
else not_ok "promtool test rules"; note <"$WORK/test.out"; fi

# The webhook's alerts only with the webhook; without leader election the
# leader alert asks for the gauge's presence only.
d1=$(render --set prometheusRule.enabled=true --set webhook.enabled=false --set replicas=1 --set leaderElection.enabled=false)
expect "webhook off: no webhook alerts" \
  "$(jq -c '[.[] | select(.kind == "PrometheusRule")][0].spec.groups[0].rules | map(select(.alert | test("Webhook"))) | length' <<<"$d1")" 0
mkdir -p "$WORK/single"
jq '.' <<<"$d1" >"$WORK/single/rendered.json"
tap python3 "$HERE/check.py" rules "$METRICS_CPP" "$WORK/single/rendered.json" "$WORK/single/rules-full.yaml" \
  "$WORK/single/rules.yaml" "$HERE/rules_test.yaml" "$HERE/rules_single_test.yaml"
cp "$HERE/rules_test.yaml" "$HERE/rules_single_test.yaml" "$WORK/single/"
# The main file's tests of the alerts this render has, less the leader's.
python3 - "$WORK/single/rules_test.yaml" <<'PY'
import sys, yaml
p = sys.argv[1]
t = yaml.safe_load(open(p))
keep = []
for g in t["tests"]:
    g["alert_rule_test"] = [c for c in g["alert_rule_test"]
                            if "Webhook" not in c["alertname"] and c["alertname"] != "GracekeeperNotLeading"]
    if g["alert_rule_test"]:
        keep.append(g)
t["tests"] = keep
yaml.safe_dump(t, open(p, "w"), sort_keys=False)
PY
if promtool check rules "$WORK/single/rules-full.yaml" >"$WORK/check.out" 2>&1 &&
   (cd "$WORK/single" && promtool test rules rules_test.yaml rules_single_test.yaml) >"$WORK/test.out" 2>&1; then
  ok "one replica, no leader election, no webhook: promtool check rules and test rules pass"
else not_ok "one replica, no leader election: promtool"; note <"$WORK/check.out"; note <"$WORK/test.out"; fi

# ------------------------------------------------------------- the dashboard
tap python3 "$HERE/check.py" dashboard "$METRICS_CPP" "$WORK/rendered.json" "$WORK/dashboard-queries.yaml"
if promtool check rules "$WORK/dashboard-queries.yaml" >"$WORK/check.out" 2>&1; then
  ok "every panel query is PromQL promtool parses ($(grep -oE '[0-9]+ rules found' "$WORK/check.out"))"
else not_ok "promtool cannot parse panel queries"; note <"$WORK/check.out"; fi
expect "the dashboard in the chart is the one in the ConfigMap, byte for byte" \
  "$(jq -j '.[] | select(.kind == "ConfigMap") | .data["gracekeeper.json"]' <<<"$d" | cmp - <(printf '%s' "$(cat "$CHART/dashboards/gracekeeper.json")") >/dev/null && echo same)" same

finish
