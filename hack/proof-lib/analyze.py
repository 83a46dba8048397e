#!/usr/bin/env python3
"""Turns hack/proof's raw records into its table, results.json and pictures.

    analyze.py --out DIR --proxy-min-sync S --concurrency C --scenarios LIST --rollouts N
               [--runs K] [--stress] [--rate R] [--window W] [--min-requests M]
    analyze.py --self-test      the Clopper-Pearson interval against known values

Reads, for each OUT/run-K/SCENARIO/MODE/rollout-I/ (MODE: no-keepalive,
keepalive, and with --stress no-keepalive+stress, keepalive+stress):
  load.txt       openload.py's summary in hey's format (hey.txt: hey's own,
                 in older runs): status codes, errors, latencies; a rollout
                 without one, or with fewer than --min-requests requests,
                 makes the analysis exit 3 (the figures would be vacuous)
  events.jsonl   the recorder: pod deletions, endpoint conditions, kube-proxy's rules
  rst.txt        tcpdump: every TCP reset on the pods' bridge (who reset whom, when)
  logs/POD.log   the test app's lifecycle lines (sigterm, last_request, exit)
  t_start, t_rolled, t_load_end, t_end, generations (redeploy)
and OUT/run-1/SCENARIO.*.json (the budget, policy, check, events).
Pools the runs; failed requests per 10,000 and rollouts with failures come
with a 95 % Clopper-Pearson interval. Writes OUT/results.json, OUT/results.md and OUT/SCENARIO.svg + .png (gnuplot).
"""

import argparse
import datetime
import json
import math
import os
import re
import statistics
import subprocess
import sys


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b) (Lentz's continued
    fraction, as in Numerical Recipes' betacf)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x > (a + 1) / (a + b + 2):
        return 1.0 - betainc(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1) * (a + m2)),
                    -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return math.exp(lbt) * h / a


def beta_ppf(q, a, b):
    """The q-quantile of Beta(a, b), by bisection on betainc."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if betainc(a, b, mid) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(x, n, confidence=0.95):
    """The exact (Clopper-Pearson) interval for a proportion of x in n. For
    0 of n the upper bound is 1 - (alpha/2)^(1/n)."""
    if n <= 0:
        return (0.0, 1.0)
    alpha = 1 - confidence
    lo = 0.0 if x == 0 else beta_ppf(alpha / 2, x, n - x + 1)
    hi = 1.0 if x == n else (1 - (alpha / 2) ** (1 / n) if x == 0 else beta_ppf(1 - alpha / 2, x + 1, n - x))
    return (lo, hi)


def rate_with_interval(x, n, per=1):
    """x of n, scaled per PER (1: a proportion; 10000: per 10,000), with the
    95 % Clopper-Pearson interval."""
    lo, hi = clopper_pearson(x, n)
    return {"x": x, "n": n, "per": per, "rate": (x / n * per) if n else None, "low": lo * per, "high": hi * per}


def self_test():
    """Known values (R's binom.test / scipy's beta.ppf), to 3 significant figures."""
    cases = [((0, 1000), (0.0, 0.003682)), ((0, 10), (0.0, 0.3084971)), ((1, 10), (0.002528579, 0.4450161)),
             ((5, 100), (0.01643188, 0.1128349)), ((10, 10), (0.6915029, 1.0)), ((3, 20), (0.03207094, 0.3789268))]
    bad = 0
    for (x, n), want in cases:
        got = clopper_pearson(x, n)
        ok = all(abs(g - w) <= 1e-3 * max(w, 1e-9) + 1e-12 for g, w in zip(got, want))
        print(f"clopper_pearson({x}, {n}) = ({got[0]:.7g}, {got[1]:.7g}), want ({want[0]:.7g}, {want[1]:.7g}): {'ok' if ok else 'WRONG'}")
        bad += not ok
    # The definition itself, on a large n: at the bounds, the binomial tails are 2.5 % each.
    x, n = 44, 9236
    lo, hi = clopper_pearson(x, n)
    def cdf(k, p):
        return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))
    ok = abs(cdf(x, hi) - 0.025) < 1e-6 and abs(1 - cdf(x - 1, lo) - 0.025) < 1e-6
    print(f"clopper_pearson({x}, {n}) = ({lo:.7g}, {hi:.7g}): binomial tails {cdf(x, hi):.6f}, {1 - cdf(x - 1, lo):.6f}: {'ok' if ok else 'WRONG'}")
    bad += not ok
    r = rate_with_interval(0, 1000, 10000)
    ok = abs(r["high"] - 36.82) < 0.01
    print(f"0 of 1000 per 10,000: upper {r['high']:.2f} (0.368 %), want 36.82: {'ok' if ok else 'WRONG'}")
    bad += not ok
    h = parse_hey("")
    ok = h["summary"] is False
    print(f"a missing hey summary is marked missing: {'ok' if ok else 'WRONG'}")
    bad += not ok
    return 1 if bad else 0


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
         "other_errors": 0, "p50": None, "p99": None, "max": None, "status": {}, "errors": [], "failed": 0,
         "summary": False}
    # hey prints "Summary:" and "Total:" at the end of a run; without them the
    # rollout has no figures (hey crashed, was killed, or never ran).
    if not text or "Summary:" not in text or not re.search(r"^\s*Total:\s+[\d.]+ secs", text, re.M):
        return r
    r["summary"] = True
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
    # openload.py: how long it took to issue them (the rate's denominator).
    m = re.search(r"Requests issued:\s+\d+ in ([\d.]+) secs", text)
    r["issue_seconds"] = float(m.group(1)) if m else None
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
    # load.txt: openload.py's summary, in hey's format (hey.txt: older runs).
    hey = parse_hey(read(os.path.join(dirpath, "load.txt")) or read(os.path.join(dirpath, "hey.txt")))
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
        gone_from = next((e for e in rules if e["t"] >= p["deleted"] and ip not in e["ips"]), None)
        p["rules_updated"] = gone_from["t"] if gone_from else None
        # The last read of kube-proxy's rules that still held the pod (None:
        # no change recorded while the recorder ran).
        p["rules_last_seen"] = gone_from.get("prev") if gone_from else None
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
    t_hey_end = float(read(os.path.join(dirpath, "t_load_end"), "0"))
    return {
        "dir": dirpath,
        "hey": hey,
        # The load's window: from t_start (the restart) to the end of hey.
        "load_seconds_after_restart": round(t_hey_end - t_start, 2) if t_hey_end and t_start else None,
        "rollout_outlasted_load": (t_rolled > t_hey_end) if t_hey_end and t_rolled else None,
        "pods_without_rules_change": sum(1 for p in pods.values() if p["rules_updated"] is None),
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
    # 95 % Clopper-Pearson intervals: failed requests per 10,000, and the
    # share of rollouts that lost at least one request.
    s["failed_per_10k"] = rate_with_interval(s["failed"], s["requests"], 10000)
    s["rollouts_with_failures_share"] = rate_with_interval(s["rollouts_with_failures"], s["rollouts"])
    s["min_requests_per_rollout"] = min(r["hey"]["requests"] for r in rollouts)
    s["pods_without_rules_change"] = sum(r["pods_without_rules_change"] for r in rollouts)
    s["rollouts_outlasting_the_load"] = sum(1 for r in rollouts if r["rollout_outlasted_load"])
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


def interval_text(ri, fmt="{:.1f}"):
    """'rate [low, high]' of a rate_with_interval."""
    if ri["rate"] is None:
        return "-"
    return f"{fmt.format(ri['rate'])} [{fmt.format(ri['low'])}, {fmt.format(ri['high'])}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--self-test", action="store_true", help="check the statistics against known values and exit")
    ap.add_argument("--out")
    ap.add_argument("--proxy-min-sync")
    ap.add_argument("--concurrency", help="hey's -c (runs before the open-loop client)")
    ap.add_argument("--rate", type=float, default=None, help="the open-loop client's requests per second")
    ap.add_argument("--window", type=float, default=None, help="seconds of load after each restart")
    ap.add_argument("--scenarios")
    ap.add_argument("--rollouts", type=int)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--stress", action="store_true", help="each scenario also ran with the machine's CPU loaded")
    ap.add_argument("--min-requests", type=int, default=1000, help="fewer requests in a rollout fails the analysis")
    args = ap.parse_args()
    if args.self_test:
        raise SystemExit(self_test())
    for a in ("out", "proxy_min_sync", "scenarios", "rollouts"):
        if getattr(args, a) is None:
            ap.error(f"--{a.replace('_', '-')} is required")
    out = args.out
    modes = ["no-keepalive", "keepalive"]
    if args.stress:
        modes += ["no-keepalive+stress", "keepalive+stress"]
    runs = [os.path.join(out, f"run-{k}") for k in range(1, args.runs + 1)]
    first = runs[0]
    if args.rate:
        load = f"openload.py: {args.rate:g} POSTs/s, open loop, timeout 10 s"
        if args.window:
            load += f", from 2 s before each restart to {args.window:g} s after it"
    else:
        load = f"hey -m POST -c {args.concurrency} -q 20 (per worker)"
    results = {"settings": {"proxy_min_sync_seconds": float(args.proxy_min_sync), "load": load, "rate": args.rate,
                            "window_seconds": args.window, "runs": args.runs, "stress": args.stress,
                            "min_requests_per_rollout": args.min_requests,
                            "rollouts": args.rollouts, "replicas": 3, "app_drain_seconds": 10,
                            "machine": f"{os.cpu_count()} cores, {os.uname().release}"},
               "scenarios": {}, "problems": []}
    problems = results["problems"]
    md = [f"{args.runs} run(s); figures pooled over the runs. Intervals: 95 % Clopper-Pearson.", "",
          "| scenario | client | runs | rollouts | requests | requests/s | failed | failed per 10k [95 %] | rollouts with failures [95 %] | non-2xx | refused | reset | EOF | no route | timeout | other | p50 / p99 / max (s) | s per rollout |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    per_run_md = ["| scenario | client | run | rollouts | requests | failed | rollouts with failures |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for scenario in args.scenarios.split(","):
        sres = {"budget": budget(first, scenario), "findings": findings(first, scenario), "modes": {}}
        for mode in modes:
            rs, by_run = [], []
            for k, rd in enumerate(runs, 1):
                run_rs = []
                for i in range(1, args.rollouts + 1):
                    d = os.path.join(rd, scenario, mode, f"rollout-{i}")
                    if not os.path.isdir(d):
                        problems.append(f"{scenario}, {mode}, run {k}, rollout {i}: no records ({d})")
                        continue
                    r = rollout(d)
                    r["run"] = k
                    if not r["hey"]["summary"]:
                        problems.append(f"{scenario}, {mode}, run {k}, rollout {i}: the client left no summary ({d}/load.txt)")
                    elif r["hey"]["requests"] < args.min_requests:
                        problems.append(f"{scenario}, {mode}, run {k}, rollout {i}: {r['hey']['requests']} requests, "
                                        f"fewer than {args.min_requests}")
                    run_rs.append(r)
                if run_rs:
                    rsum = summarise(run_rs)
                    by_run.append({"run": k, "summary": rsum})
                    per_run_md.append(f"| {scenario} | {mode} | {k} | {rsum['rollouts']} | {rsum['requests']} | {rsum['failed']} | "
                                      f"{rsum['rollouts_with_failures']} |")
                rs += run_rs
            if not rs:
                continue
            s = summarise(rs)
            # The rate the scenario really got: requests over the time taken to
            # issue them (openload.py; hey's runs have no such line).
            secs = [r["hey"].get("issue_seconds") for r in rs]
            s["requests_per_second"] = round(s["requests"] / sum(secs), 1) if secs and all(secs) else None
            sres["modes"][mode] = {"summary": s, "runs": by_run, "rollouts": rs}
            lat = "/".join("-" if s[k] is None else f"{s[k]:.3f}" for k in ("p50", "p99", "max"))
            rw = s["rollouts_with_failures_share"]
            rw_text = f"{s['rollouts_with_failures']} of {s['rollouts']} [{rw['low'] * 100:.0f}-{rw['high'] * 100:.0f} %]"
            md.append(f"| {scenario} | {mode} | {len(by_run)} | {s['rollouts']} | {s['requests']} | {s['requests_per_second'] or '-'} | "
                      f"**{s['failed']}** | {interval_text(s['failed_per_10k'])} | {rw_text} | {s['non_2xx']} | {s['refused']} | "
                      f"{s['reset']} | {s['eof']} | {s['unreachable']} | {s['timeout']} | {s['other_errors']} | "
                      f"{lat} | {s['seconds_per_rollout']} |")
        # The picture: the rollout with the most failures (the first one, without keep-alive, if none failed).
        rs = [(mode, r) for mode in modes for r in sres["modes"].get(mode, {}).get("rollouts", [])]
        if rs:
            mode, pick = max(rs, key=lambda mr: (mr[1]["hey"]["failed"], -rs.index(mr)))
            files = plot(out, scenario, pick, args.proxy_min_sync, mode) or []
            sres["picture"] = {"mode": mode, "run": pick["run"], "files": [os.path.basename(f) for f in files]}
        sres["sources"] = sources(first, scenario, sres["modes"])
        results["scenarios"][scenario] = sres
    md.append("")
    if args.runs > 1:
        md += ["Per run:", ""] + per_run_md + [""]
    rows = [(sc, r["sources"]) for sc, r in results["scenarios"].items() if r.get("sources")]
    if rows:
        md += ["Propagation: what each source said, and what the data plane did (seconds; median / max over the old pods; run 1).",
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
        obs = f"max {max(p['max'] for p in props)} s, median {round(statistics.median(p['median'] for p in props), 2)} s" if props else "-"
        line = f"- {scenario}: preStop {b.get('preStop') or 'none'}, grace {b.get('grace')} s"
        if b.get("propagation"):
            line += f", gracekeeper's propagation figure {json.dumps(b['propagation'])}"
        line += f"; propagation observed (deletion -> kube-proxy's rules without the pod): {obs}"
        nochange = sum(m["summary"]["pods_without_rules_change"] for m in sres["modes"].values())
        line += f"; old pods with no recorded rules change: {nochange}"
        outlasted = sum(m["summary"]["rollouts_outlasting_the_load"] for m in sres["modes"].values())
        if outlasted:
            line += f"; rollouts that outlasted the load's window: {outlasted}"
        for m in sres["modes"].values():
            if "deploys_followed_by_a_second_rollout" in m["summary"]:
                line += f"; deploys followed by a second rollout: {m['summary']['deploys_followed_by_a_second_rollout']}/{m['summary']['rollouts']}"
                break
        f = sres["findings"]
        if f["check"] or f["events"]:
            line += f"; gracekeeper check: {', '.join(f['check']) or 'no finding'}; operator events: {', '.join(f['events']) or 'none'}"
        md.append(line)
    if problems:
        md += ["", "**The measurement is incomplete:**", ""] + [f"- {p}" for p in problems]
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    for p in problems:
        print(f"analyze.py: {p}", file=sys.stderr)
    return 3 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
