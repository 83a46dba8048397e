"""Checks of the chart's monitoring objects, printed as TAP lines ("ok - ..."
or "not ok - ...") for alerts_test.sh.

The metric names come from src/metrics/metrics.cpp, the one list of every
family the operator exports, and so do their label names (each family's
.Add(labels({...})) calls there): a renamed or removed metric or label fails
here, in the alerts, the panels and the promtool tests' input series.

usage:
  check.py metrics METRICS_CPP                 the exported series names, one a line
  check.py dashboard METRICS_CPP RENDERED_JSON OUT_RULES
      RENDERED_JSON: `helm template` output as a JSON array; OUT_RULES: a rule
      file with each panel query as a recording rule, for `promtool check rules`
  check.py rules METRICS_CPP RENDERED_JSON OUT_RULES OUT_TEST_RULES TEST_FILE...
      OUT_RULES: the PrometheusRule's spec; OUT_TEST_RULES: the same without
      annotations (for promtool test rules); TEST_FILE: promtool test files
"""
import json
import re
import sys

import yaml

METRIC = re.compile(r"\bgracekeeper_[a-z0-9_]+\b")
# Labels a scrape adds to every series (Prometheus's job and instance, the
# pod of the kubernetes service discovery).
TARGET_LABELS = {"job", "instance", "pod"}


def ok(msg):
    print(f"ok - {msg}")


def not_ok(msg):
    print(f"not ok - {msg}")


def check(cond, msg, why=""):
    if cond:
        ok(msg)
    else:
        not_ok(f"{msg}{': ' + why if why else ''}")
    return cond


def exported(metrics_cpp):
    """Series names of every family in metrics.cpp: counters and gauges by
    their name, histograms by _bucket, _sum and _count."""
    src = open(metrics_cpp).read()
    families = re.findall(r"Build(Counter|Gauge|Histogram)\(\)\s*\.Name\(\"([a-z0-9_]+)\"\)", src)
    registered = src.count(".Register(registry)")
    if not families or len(families) != registered:
        raise SystemExit(f"Bail out! {metrics_cpp}: {len(families)} families read, "
                         f"{registered} registered: the reading of the source needs updating")
    names = set()
    for kind, name in families:
        if kind == "Histogram":
            names |= {name + "_bucket", name + "_sum", name + "_count"}
        else:
            names.add(name)
    return names


def labels_of(metrics_cpp):
    """Series name -> the label names metrics.cpp gives it: each
    impl_->FAMILY.Add(labels({...})) (or .Add(l) with `auto l = labels(...)`
    in the same function), histograms' _bucket with le."""
    src = open(metrics_cpp).read()
    members = dict(re.findall(r"Family<\w+>&\s+(\w+)\s*=\s*prometheus::Build\w+\(\)\s*\.Name\(\"(\w+)\"\)", src))
    fams = {name: set() for name in members.values()}
    for body in re.split(r"\n}\n", src):
        if "forget_policy" in body.split("{")[0]:
            continue  # removals only
        local = {var: set(re.findall(r'\{"(\w+)",', inner))
                 for var, inner in re.findall(r"auto\s+(\w+)\s*=\s*labels\(\{(.*?)\}\);", body, re.S)}
        for member, arg in re.findall(r"impl_->(\w+)\s*\.Add\(\s*(labels\(\{.*?\}\)|\w+)", body, re.S):
            if member in members:
                keys = set(re.findall(r'\{"(\w+)",', arg)) if arg.startswith("labels") else local.get(arg)
                if keys is None:
                    raise SystemExit(f"Bail out! {metrics_cpp}: {member}.Add({arg}): labels not found")
                fams[members[member]] |= keys
    out = {}
    for name in exported(metrics_cpp):
        for fam, keys in fams.items():
            if name == fam or (name.startswith(fam + "_") and name[len(fam):] in ("_bucket", "_sum", "_count")):
                out[name] = keys | ({"le"} if name.endswith("_bucket") else set())
    return out


def label_problems(expr, labels):
    """Label names an expression uses that its metrics do not have."""
    bad = []
    for metric, inner in re.findall(r"\b(gracekeeper_[a-z0-9_]+)\{([^}]*)\}", expr):
        for name in re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", inner):
            if name not in labels.get(metric, set()) | TARGET_LABELS:
                bad.append(f"{metric}{{{name}}}")
    allowed = set(TARGET_LABELS).union(*(labels.get(m, set()) for m in named(expr)))
    for clause in re.findall(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)", expr):
        bad += [f"({n})" for n in re.findall(r"[a-zA-Z_][a-zA-Z0-9_]*", clause) if n not in allowed]
    for metric, name in re.findall(r"label_values\((gracekeeper_[a-z0-9_]+)[^,]*,\s*(\w+)\)", expr):
        if name not in labels.get(metric, set()):
            bad.append(f"label_values {metric} {name}")
    return bad


def named(expr):
    return set(METRIC.findall(expr))


def docs(rendered, kind):
    return [d for d in json.load(open(rendered)) if d.get("kind") == kind]


def cmd_metrics(metrics_cpp):
    for n in sorted(exported(metrics_cpp)):
        print(n)


def cmd_dashboard(metrics_cpp, rendered, out_rules):
    names = exported(metrics_cpp)
    cms = [d for d in docs(rendered, "ConfigMap") if d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    if not check(len(cms) == 1, "one ConfigMap labelled grafana_dashboard: \"1\"", f"{len(cms)}"):
        return
    data = cms[0].get("data", {})
    check(list(data) == ["gracekeeper.json"], "its data is one key, gracekeeper.json", f"{list(data)}")
    try:
        dash = json.loads(data.get("gracekeeper.json", ""))
    except ValueError as e:
        not_ok(f"the dashboard is not JSON: {e}")
        return
    sv = dash.get("schemaVersion")
    check(isinstance(sv, int) and 36 <= sv <= 41, f"schemaVersion {sv} (Grafana 10-12 read 36-41)")
    check(bool(dash.get("uid")) and bool(dash.get("title")), f"uid {dash.get('uid')!r} and title {dash.get('title')!r}")
    variables = dash.get("templating", {}).get("list", [])
    ds = [v for v in variables if v.get("name") == "datasource"]
    check(len(ds) == 1 and ds[0].get("type") == "datasource" and ds[0].get("query") == "prometheus",
          "a variable datasource of type datasource, plugin prometheus", json.dumps(ds))
    panels = []
    for p in dash.get("panels", []):
        panels.append(p)
        panels.extend(p.get("panels", []))  # collapsed rows hold theirs
    panels = [p for p in panels if p.get("type") != "row"]
    ids = [p.get("id") for p in panels]
    check(len(set(ids)) == len(ids), f"{len(panels)} panels, ids unique")
    bad_ds, bad_metric, no_metric, exprs = [], [], [], []
    for p in panels:
        if (p.get("datasource") or {}).get("uid") != "${datasource}":
            bad_ds.append(p.get("title"))
        targets = p.get("targets", [])
        if not targets:
            no_metric.append(f"{p.get('title')}: no target")
        for t in targets:
            if (t.get("datasource") or p.get("datasource") or {}).get("uid") != "${datasource}":
                bad_ds.append(f"{p.get('title')}/{t.get('refId')}")
            expr = t.get("expr", "")
            exprs.append((p.get("title"), t.get("refId"), expr))
            found = named(expr)
            if not found:
                no_metric.append(f"{p.get('title')}/{t.get('refId')}: {expr!r}")
            bad_metric += [f"{p.get('title')}/{t.get('refId')}: {m}" for m in sorted(found - names)]
    check(not bad_ds, "every panel and target queries ${datasource}", "; ".join(bad_ds))
    check(not no_metric, f"every one of {len(exprs)} panel queries names a gracekeeper metric", "; ".join(no_metric))
    check(not bad_metric, "every metric the panels name is one metrics.cpp exports", "; ".join(bad_metric))
    labels = labels_of(metrics_cpp)
    bad_labels = [f"{title}/{ref}: {b}" for title, ref, e in exprs for b in label_problems(e, labels)]
    check(not bad_labels, "every label the panel queries name is one their metrics have", "; ".join(bad_labels))
    for v in variables:
        if v.get("type") == "query":
            q = v.get("definition") or (v.get("query") or {}).get("query", "")
            found = named(q)
            check(found and found <= names and not label_problems(q, labels_of(metrics_cpp))
                  and (v.get("datasource") or {}).get("uid") == "${datasource}",
                  f"variable {v.get('name')} queries an exported metric through ${{datasource}} ({q})")
    # What the dashboard is for: each of these has a panel.
    used = set().union(*(named(e) for _, _, e in exprs))
    for what, metric in [("propagation per policy and source", "gracekeeper_propagation_seconds"),
                         ("waits (termination slack)", "gracekeeper_termination_slack_seconds_bucket"),
                         ("compliant Deployments", "gracekeeper_deployments_compliant"),
                         ("violating Deployments", "gracekeeper_deployments_violating"),
                         ("terminations", "gracekeeper_terminations_total"),
                         ("admission latency", "gracekeeper_webhook_admission_duration_seconds_bucket")]:
        check(metric in used, f"a panel shows {what} ({metric})")
    check(any('outcome="late"' in e for _, _, e in exprs), "a panel shows late terminations (outcome=\"late\")")
    # Grafana's own variables, given values, make each query PromQL that
    # promtool parses.
    subst = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "$namespace": ".*", "$policy": ".*"}
    rules = []
    for i, (_, _, e) in enumerate(exprs):
        for k, v in subst.items():
            e = e.replace(k, v)
        rules.append({"record": f"dashboard:query_{i}", "expr": e})
    yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(out_rules, "w"))


def cmd_rules(metrics_cpp, rendered, out_rules, out_test_rules, *test_files):
    names = exported(metrics_cpp)
    rules_docs = docs(rendered, "PrometheusRule")
    if not check(len(rules_docs) == 1, "one PrometheusRule", f"{len(rules_docs)}"):
        return
    r = rules_docs[0]
    check(r.get("apiVersion") == "monitoring.coreos.com/v1", f"apiVersion {r.get('apiVersion')}")
    spec = r.get("spec", {})
    yaml.safe_dump(spec, open(out_rules, "w"), sort_keys=False)
    labels = labels_of(metrics_cpp)
    alerts = [x for g in spec.get("groups", []) for x in g.get("rules", []) if "alert" in x]
    check(len({a["alert"] for a in alerts}) == len(alerts), f"{len(alerts)} alerts, names unique")
    for a in alerts:
        found = named(a.get("expr", ""))
        check(found and found <= names, f"{a['alert']}: names exported metrics only ({', '.join(sorted(found))})",
              f"not exported: {sorted(found - names)}")
        bad = label_problems(a.get("expr", ""), labels)
        check(not bad, f"{a['alert']}: every label it names is one its metric has", "; ".join(bad))
        rule_labels, ann = a.get("labels", {}), a.get("annotations", {})
        check(rule_labels.get("severity") in ("critical", "warning", "info") and ann.get("summary") and ann.get("description"),
              f"{a['alert']}: severity {rule_labels.get('severity')}, summary and description")
    stripped = {"groups": [dict(g, rules=[{k: v for k, v in x.items() if k != "annotations"} for x in g["rules"]])
                           for g in spec.get("groups", [])]}
    yaml.safe_dump(stripped, open(out_test_rules, "w"), sort_keys=False)
    fire, quiet = set(), set()
    for f in test_files:
        series, bad = 0, []
        for t in yaml.safe_load(open(f)).get("tests", []):
            for i in t.get("input_series", []):
                series += 1
                m = re.fullmatch(r"(\w+)\{(.*)\}", i["series"])
                if not m or m.group(1) not in labels:
                    bad.append(i["series"])
                    continue
                extra = set(re.findall(r'(\w+)="', m.group(2))) - labels[m.group(1)] - TARGET_LABELS
                if extra:
                    bad.append(f"{m.group(1)}: {sorted(extra)}")
        check(series and not bad, f"{f.rsplit('/', 1)[-1]}: its {series} input series are exported metrics with their labels",
              "; ".join(bad))
        for t in yaml.safe_load(open(f)).get("tests", []):
            for c in t.get("alert_rule_test", []):
                (fire if c.get("exp_alerts") else quiet).add(c["alertname"])
    for a in alerts:
        check(a["alert"] in fire and a["alert"] in quiet,
              f"{a['alert']}: the tests have series that fire it and series that do not",
              f"firing case {a['alert'] in fire}, quiet case {a['alert'] in quiet}")


if __name__ == "__main__":
    {"metrics": cmd_metrics, "dashboard": cmd_dashboard, "rules": cmd_rules}[sys.argv[1]](*sys.argv[2:])
