#!/usr/bin/env python3
"""Turns hack/proof's raw records into its table, results.json and pictures.

    analyze.py --out DIR --proxy-min-sync S --concurrency C --scenarios LIST --rollouts N

Reads, for each OUT/SCENARIO/MODE/rollout-I/:
  hey.txt        hey's summary (status codes, errors, latencies)
  events.jsonl   the recorder: pod deletions, endpoint conditions, kube-proxy's rules
  rst.txt        tcpdump: every TCP reset on the pods' bridge (who reset whom, when)
  logs/POD.log   the test app's lifecycle lines (sigterm, last_request, exit)
  t_start, t_rolled, t_end, generations (redeploy)
Writes OUT/results.json, OUT/results.md and OUT/SCENARIO.svg + .png (gnuplot).
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess


def epoch(rfc3339):
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def read(path, default=None):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return default


def parse_hey(text):
    r = {"requests": 0, "ok": 0, "non_2xx": 0, "refused": 0, "reset": 0, "eof": 0, "unreachable": 0, "timeout": 0,
         "other_errors": 0, "p50": None, "p99": None, "max": None, "status": {}, "errors": []}
    if not text:
        return r
    for code, n in re.findall(r"^\s*\[(\d{3})\]\s+(\d+) responses", text, re.M):
        r["status"][code] = int(n)
        if code.startswith("2"):
            r["ok"] += int(n)
        else:
            r["non_2xx"] += int(n)
    errors = text.split("Error distribution:", 1)[1] if "Error distribution:" in text else ""
    for n, msg in re.findall(r"^\s*\[(\d+)\]\s+(.*)$", errors, re.M):
        n = int(n)
        r["errors"].append({"count": n, "message": msg})
        if "connection refused" in msg:
            r["refused"] += n
        elif "reset by peer" in msg:
            r["reset"] += n
        elif "EOF" in msg:
            r["eof"] += n
        elif "no route to host" in msg:  # kube-proxy still sends to a pod that is gone
            r["unreachable"] += n
        elif "Timeout" in msg or "deadline" in msg:
            r["timeout"] += n
        else:
            r["other_errors"] += n
    errs = r["refused"] + r["reset"] + r["eof"] + r["unreachable"] + r["timeout"] + r["other_errors"]
    r["requests"] = r["ok"] + r["non_2xx"] + errs
    r["failed"] = r["non_2xx"] + errs
    for pct, secs in re.findall(r"^\s*(50|99)% in ([\d.]+) secs", text, re.M):
        r["p" + pct] = float(secs)
    m = re.search(r"Slowest:\s+([\d.]+) secs", text)
    if m:
        r["max"] = float(m.group(1))
    return r


def app_events(path):
    """The test app's lifecycle lines (kubectl logs -f) by event name."""
    ev = {}
    for line in (read(path, "") or "").splitlines():
        if line.startswith("{"):
            try:
                j = json.loads(line)
            except json.JSONDecodeError:
                continue
            ev.setdefault(j.get("event"), j)
    return ev


def rollout(dirpath):
    """Everything one rollout shows, per old pod and in total."""
    hey = parse_hey(read(os.path.join(dirpath, "hey.txt")))
    t_start = float(read(os.path.join(dirpath, "t_start"), "0"))
    t_rolled = float(read(os.path.join(dirpath, "t_rolled"), "0"))
    events = [json.loads(l) for l in (read(os.path.join(dirpath, "events.jsonl"), "") or "").splitlines() if l.strip()]
    pods = {}
    for e in events:
        if e["kind"] == "pod" and e.get("deleted") and e.get("ip"):
            pods.setdefault(e["ip"], {"name": e["name"], "ip": e["ip"], "deleted": e["t"]})
    rules = [e for e in events if e["kind"] == "rules"]
    for ip, p in pods.items():
        p["terminating"] = next((e["t"] for e in events if e["kind"] == "endpoint" and e["ip"] == ip
                                 and e["t"] >= p["deleted"] - 1 and (e.get("terminating") or e.get("ready") is False)), None)
        p["rules_updated"] = next((e["t"] for e in rules if e["t"] >= p["deleted"] and ip not in e["ips"]), None)
        app = app_events(os.path.join(dirpath, "logs", p["name"] + ".log"))
        p["sigterm"] = epoch(app["sigterm"]["wall"]) if "sigterm" in app else None
        last = app.get("last_request", {})
        p["last_request"] = epoch(last["last_order_wall"]) if last.get("last_order_wall") else None
        p["exit"] = epoch(app["exit"]["wall"]) if "exit" in app else None
        p["propagation"] = (p["rules_updated"] - p["deleted"]) if p["rules_updated"] else None
        # The truth as the pod saw it: its last request came this long after
        # its deletion (while its preStop wait held the port open).
        p["served_after_deletion"] = (p["last_request"] - p["deleted"]) if p["last_request"] else None
    # Resets sent by a pod (src = pod:8080) to the client: a request that hit a
    # closed port. ARP requests for an old pod's address after it exited: a
    # connection to a pod that is gone (it fails with a timeout or no route).
    resets, gone = [], []
    exited = {ip: p["exit"] or p["sigterm"] for ip, p in pods.items()}
    for line in (read(os.path.join(dirpath, "rst.txt"), "") or "").splitlines():
        m = re.match(r"^([\d.]+) IP (\d+\.\d+\.\d+\.\d+)\.8080 > ", line)
        if m:
            resets.append({"t": float(m.group(1)), "ip": m.group(2)})
        m = re.match(r"^([\d.]+) ARP, Request who-has (\d+\.\d+\.\d+\.\d+) ", line)
        if m and exited.get(m.group(2)) and float(m.group(1)) > exited[m.group(2)]:
            gone.append({"t": float(m.group(1)), "ip": m.group(2)})
    gens = (read(os.path.join(dirpath, "generations"), "") or "").split()
    return {
        "hey": hey,
        "seconds": round(t_rolled - t_start, 2) if t_rolled and t_start else None,
        "pods": sorted(pods.values(), key=lambda p: p["deleted"]),
        "resets": resets,
        "gone": gone,
        "second_rollout": (gens[0] != gens[1]) if len(gens) == 2 else None,
    }


def summarise(rollouts):
    s = {k: sum(r["hey"][k] for r in rollouts) for k in
         ("requests", "ok", "failed", "non_2xx", "refused", "reset", "eof", "unreachable", "timeout", "other_errors")}
    s["rollouts"] = len(rollouts)
    s["rollouts_with_failures"] = sum(1 for r in rollouts if r["hey"]["failed"] > 0)
    for k in ("p50", "p99"):
        vals = [r["hey"][k] for r in rollouts if r["hey"][k] is not None]
        s[k] = round(statistics.median(vals), 4) if vals else None
    vals = [r["hey"]["max"] for r in rollouts if r["hey"]["max"] is not None]
    s["max"] = max(vals) if vals else None
    secs = [r["seconds"] for r in rollouts if r["seconds"]]
    s["seconds_per_rollout"] = round(statistics.mean(secs), 1) if secs else None
    props = [p["propagation"] for r in rollouts for p in r["pods"] if p["propagation"] is not None]
    s["propagation_observed"] = {"max": round(max(props), 2), "median": round(statistics.median(props), 2)} if props else None
    seconds = [r["second_rollout"] for r in rollouts if r["second_rollout"] is not None]
    if seconds:
        s["deploys_followed_by_a_second_rollout"] = sum(seconds)
    return s


def budget(out, scenario):
    d = read(os.path.join(out, scenario + ".tuned.json"))
    if not d:
        return None
    spec = json.loads(d)["spec"]
    pod = spec["template"]["spec"]
    c = pod["containers"][0]
    pre = (c.get("lifecycle") or {}).get("preStop") or {}
    b = {"preStop": (pre.get("sleep") or {}).get("seconds"),
         "grace": pod.get("terminationGracePeriodSeconds"),
         "strategy": (spec.get("strategy") or {}).get("rollingUpdate")}
    p = read(os.path.join(out, scenario + ".policy.json"))
    if p:
        st = json.loads(p).get("status") or {}
        b["propagation"] = st.get("propagation") or st
    return b


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": round(statistics.median(values), 2), "max": round(max(values), 2), "n": len(values)}


def sources(out, scenario, modes):
    """What each propagation source said, beside what the data plane did."""
    after = read(os.path.join(out, scenario + ".policy-after.json"))
    if not after:
        return None
    st = json.loads(after).get("status") or {}
    prop = st.get("propagation") or {}
    proxy = None
    raw = read(os.path.join(out, scenario + ".proxy-p99.json"))
    if raw:
        try:
            res = json.loads(raw)["data"]["result"]
            proxy = round(float(res[0]["value"][1]), 2) if res else None
        except (ValueError, KeyError, IndexError):
            proxy = None
    pods = [p for m in modes.values() for r in m["rollouts"] for p in r["pods"]]
    # The last request a pod served is the data plane's truth only when every
    # request opens a new connection: a kept-alive connection goes on reaching
    # the old pod after the rules changed, until the app closes it.
    fresh = [p for r in (modes.get("no-keepalive") or {}).get("rollouts", []) for p in r["pods"]]
    return {"source": prop.get("source"), "figure": prop.get("seconds"),
            "message": prop.get("message"), "terminations": st.get("terminations"),
            "kube_proxy_p99": proxy,
            "deletion_to_rules": spread(p["propagation"] for p in pods),
            "deletion_to_last_request": spread(p["served_after_deletion"] for p in fresh)}


def findings(out, scenario):
    """What gracekeeper said about the tuned Deployment: `check`'s codes and
    the operator's Event reasons."""
    codes = sorted(set(re.findall(r"(?:error|warning|info) ([A-Z][A-Za-z]+):", read(os.path.join(out, scenario + ".check.txt"), "") or "")))
    reasons = []
    ev = read(os.path.join(out, scenario + ".events.json"))
    if ev:
        reasons = sorted({e.get("reason") for e in json.loads(ev).get("items", [])
                          if (e.get("reportingComponent") or e.get("source", {}).get("component", "")).startswith("gracekeeper")})
    return {"check": codes, "events": reasons}


def plot(out, scenario, r, min_sync, mode):
    """One rollout's timeline: a row per old pod, the refused requests as crosses."""
    if not r["pods"]:
        return None
    t0 = r["pods"][0]["deleted"]
    row_of = {p["ip"]: row + 1 for row, p in enumerate(r["pods"])}
    marks = [("deleted", "deleted", "pt 7 ps 1.2 lc rgb '#333333'"),
             ("terminating", "endpoint terminating", "pt 5 ps 1.1 lc rgb '#1f77b4'"),
             ("rules_updated", "kube-proxy rules updated", "pt 9 ps 1.4 lc rgb '#2ca02c'"),
             ("sigterm", "SIGTERM (preStop over)", "pt 13 ps 1.4 lc rgb '#ff7f0e'"),
             ("last_request", "last POST served", "pt 11 ps 1.3 lc rgb '#9467bd'"),
             ("exit", "exit", "pt 4 ps 1.3 lc rgb '#8c564b'")]
    series = []  # (points, gnuplot style, title)
    lives = []
    for p in r["pods"]:  # the pod's life line: deletion to its last mark
        end = max(v for v in (p["deleted"], p["exit"], p["last_request"], p["sigterm"], p["rules_updated"]) if v)
        lives.append([(p["deleted"] - t0, row_of[p["ip"]]), (end - t0, row_of[p["ip"]])])
    for key, label, style in marks:
        pts = [(p[key] - t0, row_of[p["ip"]]) for p in r["pods"] if p[key] is not None]
        series.append((pts, "points " + style, label))
    series.append(([(x["t"] - t0, row_of[x["ip"]] - 0.25) for x in r["resets"] if x["ip"] in row_of],
                   "points pt 2 ps 0.8 lc rgb '#d62728'", "refused request (TCP reset from the pod)"))
    series.append(([(x["t"] - t0, row_of[x["ip"]] + 0.25) for x in r["gone"] if x["ip"] in row_of],
                   "points pt 6 ps 0.8 lc rgb '#e377c2'", "request to a pod that is gone (ARP unanswered)"))
    clauses = []
    for i, life in enumerate(lives):
        path = os.path.join(out, f"{scenario}.life{i}.dat")
        with open(path, "w") as f:
            f.write("".join(f"{x:.3f} {y}\n" for x, y in life))
        clauses.append(f"'{path}' with lines lw 2 lc rgb '#cccccc' notitle")
    for i, (pts, style, title) in enumerate(series):
        if not pts:
            continue
        path = os.path.join(out, f"{scenario}.series{i}.dat")
        with open(path, "w") as f:
            f.write("".join(f"{x:.3f} {y}\n" for x, y in pts))
        clauses.append(f"'{path}' with {style} title '{title}'")
    names = ", ".join(f'"{p["name"].split("-")[-1]}" {row_of[p["ip"]]}' for p in r["pods"])
    script = f"""
set title "{scenario}, {mode}: one rollout, old pods by row; {r["hey"]["failed"]} failed requests (kube-proxy min-sync {min_sync} s)" noenhanced
set xlabel "seconds after the first pod's deletion"
set ytics ({names})
set yrange [0.3:{len(r["pods"]) + 0.7}]
set grid xtics
set key outside right top vertical noenhanced
plot {", ".join(clauses)}
"""
    files = []
    for term, ext in (("svg size 1000,360 dynamic font 'sans,11'", "svg"), ("pngcairo size 1000,360 font 'sans,10'", "png")):
        path = os.path.join(out, f"{scenario}.{ext}")
        subprocess.run(["gnuplot"], input=f"set terminal {term}\nset output '{path}'\n" + script,
                       text=True, check=True)
        files.append(path)
    return files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--proxy-min-sync", required=True)
    ap.add_argument("--concurrency", required=True)
    ap.add_argument("--scenarios", required=True)
    ap.add_argument("--rollouts", type=int, required=True)
    args = ap.parse_args()
    out = args.out
    results = {"settings": {"proxy_min_sync_seconds": float(args.proxy_min_sync),
                            "hey": f"hey -m POST -c {args.concurrency} -q 20 (per worker)",
                            "rollouts": args.rollouts, "replicas": 3, "app_drain_seconds": 10,
                            "machine": f"{os.cpu_count()} cores, {os.uname().release}"},
               "scenarios": {}}
    md = ["| scenario | client | rollouts | requests | failed | non-2xx | refused | reset | EOF | no route | timeout | other | rollouts with failures | p50 / p99 / max (s) | s per rollout |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for scenario in args.scenarios.split(","):
        sres = {"budget": budget(out, scenario), "findings": findings(out, scenario), "modes": {}}
        for mode in ("no-keepalive", "keepalive"):
            rs = []
            for i in range(1, args.rollouts + 1):
                d = os.path.join(out, scenario, mode, f"rollout-{i}")
                if os.path.isdir(d):
                    rs.append(rollout(d))
            if not rs:
                continue
            s = summarise(rs)
            sres["modes"][mode] = {"summary": s, "rollouts": rs}
            lat = "/".join("-" if s[k] is None else f"{s[k]:.3f}" for k in ("p50", "p99", "max"))
            md.append(f"| {scenario} | {mode} | {s['rollouts']} | {s['requests']} | **{s['failed']}** | {s['non_2xx']} | {s['refused']} | "
                      f"{s['reset']} | {s['eof']} | {s['unreachable']} | {s['timeout']} | {s['other_errors']} | {s['rollouts_with_failures']} | "
                      f"{lat} | {s['seconds_per_rollout']} |")
        # The picture: the rollout with the most failures (the first one, without keep-alive, if none failed).
        rs = [(mode, r) for mode in ("no-keepalive", "keepalive") for r in sres["modes"].get(mode, {}).get("rollouts", [])]
        if rs:
            mode, pick = max(rs, key=lambda mr: (mr[1]["hey"]["failed"], -rs.index(mr)))
            files = plot(out, scenario, pick, args.proxy_min_sync, mode) or []
            sres["picture"] = {"mode": mode, "files": [os.path.basename(f) for f in files]}
        sres["sources"] = sources(out, scenario, sres["modes"])
        results["scenarios"][scenario] = sres
    md.append("")
    rows = [(sc, r["sources"]) for sc, r in results["scenarios"].items() if r.get("sources")]
    if rows:
        md += ["Propagation: what each source said, and what the data plane did (seconds; median / max over the old pods).",
               "",
               "| scenario | policy source | gracekeeper's figure | kube-proxy p99 (Prometheus) | deletion -> kube-proxy rules without the pod | deletion -> last new connection the pod served (no keep-alive) | audited terminations (late) |",
               "| --- | --- | --- | --- | --- | --- | --- |"]
        def sp(x):
            return "-" if not x else f"{x['median']} / {x['max']}"
        for sc, r in rows:
            t = r["terminations"] or {}
            md.append(f"| {sc} | {r['source'] or '-'} | {r['figure'] if r['figure'] is not None else '-'} | "
                      f"{r['kube_proxy_p99'] if r['kube_proxy_p99'] is not None else '-'} | {sp(r['deletion_to_rules'])} | "
                      f"{sp(r['deletion_to_last_request'])} | {t.get('observed', '-')} ({t.get('late', '-')}) |")
        md.append("")
    for scenario, sres in results["scenarios"].items():
        b = sres["budget"] or {}
        props = [m["summary"]["propagation_observed"] for m in sres["modes"].values() if m["summary"]["propagation_observed"]]
        obs = f"max {max(p['max'] for p in props)} s, median {statistics.median(p['median'] for p in props)} s" if props else "-"
        line = f"- {scenario}: preStop {b.get('preStop') or 'none'}, grace {b.get('grace')} s"
        if b.get("propagation"):
            line += f", gracekeeper's propagation figure {json.dumps(b['propagation'])}"
        line += f"; propagation observed (deletion -> kube-proxy's rules without the pod): {obs}"
        for m in sres["modes"].values():
            if "deploys_followed_by_a_second_rollout" in m["summary"]:
                line += f"; deploys followed by a second rollout: {m['summary']['deploys_followed_by_a_second_rollout']}/{m['summary']['rollouts']}"
                break
        f = sres["findings"]
        if f["check"] or f["events"]:
            line += f"; gracekeeper check: {', '.join(f['check']) or 'no finding'}; operator events: {', '.join(f['events']) or 'none'}"
        md.append(line)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
