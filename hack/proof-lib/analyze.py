#!/usr/bin/env python3
"""Turns hack/proof's raw records into its table, results.json and pictures.

    analyze.py --out DIR --proxy-min-sync S --concurrency C --scenarios LIST --rollouts N
               [--runs K] [--stress] [--rate R] [--window W] [--min-requests M]
    analyze.py --self-test      the Clopper-Pearson interval against known values,
                                and the connection attribution on a synthetic rollout

Reads, for each OUT/run-K/SCENARIO/MODE/rollout-I/ (MODE: no-keepalive,
keepalive, and with --stress no-keepalive+stress, keepalive+stress):
  load.txt       openload.py's summary in hey's format (hey.txt: hey's own,
                 in older runs): status codes, errors, latencies; a rollout
                 without one, or with fewer than --min-requests requests,
                 makes the analysis exit 3 (the figures would be vacuous)
  events.jsonl   the recorder: pod deletions, new pods' readiness, endpoint
                 conditions, kube-proxy's rules, the pods' Events (Unhealthy,
                 Killing, FailedPreStopHook, ProbeWarning)
  packets.txt    tcpdump on the pods' bridge: SYNs to the pods' port 8080 and
                 their SYN-ACKs, every TCP reset there (who reset whom, when),
                 ARP requests; rst.txt in older runs (resets and ARP only)
  logs/POD.log   the test app's lifecycle lines (sigterm, last_request, exit)
  failures.jsonl, conntrack.events, conntrack.before   each failed request's
                 start and local port; conntrack's new entries to Service
                 addresses during the rollout, and its entries before it:
                 where each failed connection was sent (traced())
  kube-proxy.before.metrics, kube-proxy.after.metrics   its metrics around the rollout
  t_start, t_rolled, t_load_end, t_end, generations (redeploy)
and OUT/run-1/SCENARIO.*.json (the budget, policy, check, events).
Each connection attempt (a SYN) is tied to the pod that got it and to that
pod's phase at the SYN, with its answer: accepted, refused or unanswered
(packets()). Older runs' records lack SYNs, readiness and Events: those
figures are then None. Pools the runs; failed requests per 10,000 and
rollouts with failures come with a 95 % Clopper-Pearson interval. Writes
OUT/results.json, OUT/results.md and OUT/SCENARIO.svg + .png (gnuplot).
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
    h = parse_hey("Summary:\n  Total:\t3.1 secs\n  Slow requests:\t10 sent, 4 failed\n\nStatus code distribution:\n"
                  "  [201]\t96 responses\n\nError distribution:\n  [4]\tPost: EOF\n")
    ok = (h["slow"], h["slow_failed"], h["requests"], h["failed"]) == (10, 4, 100, 4)
    print(f"slow requests read beside the rest: {'ok' if ok else 'WRONG'}")
    bad += not ok
    bad += self_test_attribution()
    return 1 if bad else 0


def self_test_attribution():
    """A synthetic rollout: one old pod (deleted at +1 s, SIGTERM at +10 s,
    exit at +15 s), one new pod (ready at +5 s); an attempt accepted before
    the deletion, one refused after SIGTERM, one unanswered (retransmitted)
    after the exit, one accepted by the new pod. And an older record (resets
    and ARP only, no readiness or Events) that must still read."""
    import tempfile

    def iso(t):
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def write(d, name, text):
        os.makedirs(os.path.dirname(os.path.join(d, name)), exist_ok=True)
        with open(os.path.join(d, name), "w") as f:
            f.write(text)

    t0 = 1800000000.0
    old, new, client = "198.18.1.5", "198.18.1.9", "198.18.0.1"

    def syn(t, port, pod):
        return f"{t0 + t:.6f} IP {client}.{port} > {pod}.8080: Flags [S], seq 1, win 64240, length 0\n"

    def answer(t, port, pod, flags):
        return f"{t0 + t:.6f} IP {pod}.8080 > {client}.{port}: Flags [{flags}], seq 1, ack 2, win 0, length 0\n"
    hey = ("Summary:\n  Total:\t42.0000 secs\n\nStatus code distribution:\n  [200]\t2 responses\n\n"
           "Error distribution:\n  [1]\tPost \"http://x/orders\": dial tcp: connect: connection refused\n"
           "  [1]\tPost \"http://x/orders\": context deadline exceeded (Client.Timeout exceeded)\n")
    events = [{"kind": "ready", "name": "checkout-a", "ip": old, "t": t0 - 3},
              {"kind": "recorder", "started": True, "records": ["pod", "ready", "endpoint", "rules", "event"], "t": t0 - 3},
              {"kind": "pod", "name": "checkout-a", "ip": old, "deleted": True, "t": t0 + 1},
              {"kind": "event", "reason": "Killing", "pod": "checkout-a", "note": "Stopping container app", "count": 1, "t": t0 + 1.1},
              {"kind": "ready", "name": "checkout-b", "ip": new, "t": t0 + 5},
              {"kind": "event", "reason": "Unhealthy", "pod": "checkout-a", "note": "Readiness probe failed", "count": 2, "t": t0 + 12}]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "rollout-1")
        write(d, "load.txt", hey)
        write(d, "t_start", f"{t0:.6f}\n")
        write(d, "t_rolled", f"{t0 + 20:.6f}\n")
        write(d, "t_load_end", f"{t0 + 40:.6f}\n")
        write(d, "events.jsonl", "".join(json.dumps(e) + "\n" for e in events) + '{"kind": "rul')
        write(d, "logs/checkout-a.log", f'{{"event":"sigterm","wall":"{iso(t0 + 10)}"}}\n{{"event":"exit","wall":"{iso(t0 + 15)}"}}\n')
        write(d, "packets.txt",
              syn(0.5, 40001, old) + answer(0.501, 40001, old, "S.") +
              syn(6, 40004, new) + answer(6.001, 40004, new, "S.") +
              syn(11, 40002, old) + answer(11.001, 40002, old, "R.") +
              answer(12, 40009, old, "R") +
              syn(16, 40003, old) + f"{t0 + 16.5:.6f} ARP, Request who-has {old} tell {client}, length 28\n" +
              syn(17, 40003, old) + f"{t0 + 18:.6f} IP {client}.4")
        write(d, "kube-proxy.before.metrics", "# TYPE x counter\nkubeproxy_sync_proxy_rules_duration_seconds_count 10\n"
              'kubeproxy_network_programming_duration_seconds_count{a="b c"} 4\nkubeproxy_network_programming_duration_seconds_sum 8\n')
        write(d, "kube-proxy.after.metrics", "kubeproxy_sync_proxy_rules_duration_seconds_count 13\n"
              'kubeproxy_network_programming_duration_seconds_count{a="b c"} 6\nkubeproxy_network_programming_duration_seconds_sum 14\n')
        # Failed requests traced: a refused one with a new entry to the old
        # pod after SIGTERM; a "no route" whose reused port matched an entry
        # from before the rollout, untranslated; one with no entry recorded;
        # an EOF on a kept-alive connection.
        svc = "198.19.0.10"
        write(d, "failures.jsonl", "".join(json.dumps(x) + "\n" for x in [
            {"t": t0 + 11, "port": 40002, "reused": False, "error": "dial tcp: connect: connection refused"},
            {"t": t0 + 13, "port": 40005, "reused": False, "error": "dial tcp: connect: no route to host"},
            {"t": t0 + 14, "port": 40006, "reused": False, "error": "dial tcp: connect: no route to host"},
            {"t": t0 + 15, "port": 40007, "reused": True, "error": "EOF (a kept-alive connection)"}]))
        write(d, "conntrack.events",
              f"[{t0 + 11.0005:.6f}]\t    [NEW] tcp      6 120 SYN_SENT src={client} dst={svc} sport=40002 dport=80 "
              f"[UNREPLIED] src={old} dst={client} sport=8080 dport=40002\n"
              f"[{t0 + 2:.6f}]\t    [NEW] tcp      6 120 SYN_SENT src={client} dst={svc} sport=40007 dport=80 "
              f"[UNREPLIED] src={old} dst={client} sport=8080 dport=40007\n")
        write(d, "conntrack.before",
              f"tcp      6 95 SYN_SENT src={client} dst={svc} sport=40005 dport=80 [UNREPLIED] src={svc} "
              f"dst={client} sport=80 dport=40005 mark=0 use=1\n")
        r = rollout(d)
        tr = [(f["entry"], f.get("where")) for f in r["failures_traced"] or []]
        c = r["connections"] or {}
        failed = [(f["outcome"], f["pod"], f["phase"], f["syns"]) for f in c.get("failed", [])]
        checks = [
            ("4 attempts, 2 accepted, 1 refused, 1 unanswered, 1 SYN retransmitted",
             (c.get("attempts"), c.get("accepted"), c.get("refused"), c.get("unanswered"), c.get("retransmitted_syns")) == (4, 2, 1, 1, 1)),
            ("accepted: 1 before the deletion, 1 by the new pod",
             c.get("by_phase", {}).get("accepted") == {"before_deletion": 1, "new_pod": 1}),
            ("refused after SIGTERM, unanswered after the exit, each tied to the old pod",
             failed == [("refused", "checkout-a", "after_sigterm", 1), ("unanswered", "checkout-a", "after_exit", 2)]),
            ("the reset of an open connection, after SIGTERM", c.get("by_phase", {}).get("reset_established") == {"after_sigterm": 1}),
            ("per old pod", (r["pods"][0]["attempts"] or {}).get("refused") == {"after_sigterm": 1}),
            ("2 resets from the pod, 1 ARP request after its exit", (len(r["resets"]), len(r["gone"])) == (2, 1)),
            ("Events: Unhealthy 2 (the old pod's), Killing 1",
             (r["events"], r["pods"][0]["unhealthy"]) == ({"Killing": 1, "Unhealthy": 2}, 2)),
            ("the new pod ready 5 s after the restart", r["new_pods_ready"] == [{"name": "checkout-b", "ip": new, "seconds": 5.0}]),
            ("failures traced: new entry to the old pod after SIGTERM; a reused port's entry from before, "
             "untranslated; none; kept-alive to the old pod after its exit",
             tr == [("new", "after_sigterm"), ("before the rollout (SYN_SENT)", "untranslated"),
                    ("none recorded", None), ("kept-alive", "after_exit")]),
            ("failures traced: each one's seconds after the old pod's SIGTERM (at +10 s)",
             [(f.get("after_sigterm") or {}).get("seconds") for f in r["failures_traced"] or []] == [1.0, 3.0, 4.0, 5.0]),
            ("kube-proxy: 3 syncs, 2 programming observations of 3 s on average",
             r["kube_proxy"] == {"syncs": 3, "network_programming": 2, "network_programming_mean_seconds": 3.0}),
        ]
        # An older run's record: rst.txt (resets and ARP), a recorder without readiness or Events.
        o = os.path.join(tmp, "rollout-2")
        write(o, "load.txt", hey)
        write(o, "t_start", f"{t0:.6f}\n")
        write(o, "events.jsonl", json.dumps({"kind": "recorder", "started": True, "t": t0 - 3}) + "\n" +
              json.dumps(events[2]) + "\n")
        write(o, "rst.txt", answer(11.001, 40002, old, "R.") + f"{t0 + 16.5:.6f} ARP, Request who-has {old} tell {client}, length 28\n")
        ro = rollout(o)
        checks.append(("an older record: resets read, the new figures None",
                       (len(ro["resets"]), ro["connections"], ro["events"], ro["new_pods_ready"], ro["kube_proxy"],
                        ro["pods"][0]["attempts"], ro["pods"][0]["unhealthy"]) == (1, None, None, None, None, None, None)))
        s = summarise([r, ro])
        checks.append(("pooled: the older rollout adds no attempts",
                       (s["connections"] or {}).get("rollouts") == 1 and s["connections"]["by_phase"]["unanswered"] == {"after_exit": 1}
                       and s["events"] == {"Killing": 1, "Unhealthy": 2}))
        md = attribution_md({"scenarios": {"baseline": {"modes": {"no-keepalive": {"summary": s}}}}})
        checks.append(("the table's row", any("| baseline | no-keepalive | 1 | 4 | 2 | after SIGTERM 1 | after exit 1 |" in l for l in md)))
        checks.append(("no table for older records only", attribution_md({"scenarios": {"b": {"modes": {"k": {"summary": summarise([ro])}}}}}) == []))
    for what, ok in checks:
        print(f"attribution: {what}: {'ok' if ok else 'WRONG'}")
        bad += not ok
    return bad


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
         "summary": False, "slow": None, "slow_failed": None}
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
    # openload.py --slow-every: the slow POSTs among them, and how many failed.
    m = re.search(r"Slow requests:\s+(\d+) sent, (\d+) failed", text)
    if m:
        r["slow"], r["slow_failed"] = int(m.group(1)), int(m.group(2))
    return r


def lines(path):
    """PATH's lines, one at a time (none when it is missing)."""
    try:
        with open(path, errors="replace") as f:
            for line in f:
                yield line.rstrip("\n")
    except FileNotFoundError:
        return


def app_events(path):
    """The test app's lifecycle lines (kubectl logs -f) by event name."""
    ev = {}
    for line in lines(path):
        if line.startswith("{"):
            try:
                j = json.loads(line)
            except json.JSONDecodeError:
                continue
            ev.setdefault(j.get("event"), j)
    return ev


# tcpdump -nn -tt: "1733300000.123456 IP 198.18.0.1.40312 > 198.18.1.5.8080: Flags [S], seq ..."
PACKET = re.compile(r"^(\d+\.\d+) IP (\d+\.\d+\.\d+\.\d+)\.(\d+) > (\d+\.\d+\.\d+\.\d+)\.(\d+): Flags \[([^\]]*)\]")
ARP_REQUEST = re.compile(r"^(\d+\.\d+) ARP, Request who-has (\d+\.\d+\.\d+\.\d+) ")
POD_PORT = "8080"
# Where a connection attempt went, as a pod's phase at its SYN: an old pod
# (one the recorder saw deleted) before its deletion, in its preStop wait
# (deleted, no SIGTERM yet), after SIGTERM, after its exit, or deleted with no
# SIGTERM in the app's log (shell form); a pod that became ready after the
# restart; any other address.
PHASES = ("before_deletion", "prestop", "after_sigterm", "after_exit", "no_sigterm_logged", "new_pod", "other")
PHASE_TEXT = {"before_deletion": "before deletion", "prestop": "preStop wait", "after_sigterm": "after SIGTERM",
              "after_exit": "after exit", "no_sigterm_logged": "deleted, no SIGTERM logged", "new_pod": "new pod",
              "other": "other"}
OUTCOMES = ("accepted", "refused", "unanswered")
SYN_RETRIES = 64      # s: an attempt unanswered this long is over (Linux retries a SYN at 1, 3, 7, 15, 31 s)
DUPLICATE_SYN = 3     # s: a SYN this soon after the SYN-ACK of the same connection is a late retransmission
FAILED_LISTED = 5000  # failed attempts listed one by one per rollout (all are counted)


def phase_of(p, t):
    """The phase of old pod P (deleted, sigterm, exit) at time T."""
    if p["exit"] is not None and t >= p["exit"]:
        return "after_exit"
    if p["sigterm"] is not None and t >= p["sigterm"]:
        return "after_sigterm"
    if t < p["deleted"]:
        return "before_deletion"
    return "prestop" if p["sigterm"] is not None else "no_sigterm_logged"


def packets(path, pods, new_pods):
    """One pass over tcpdump's lines (PATH).

    Resets a pod sent (src pod:8080): requests that met a closed port. ARP
    requests for an old pod's address after it exited: a connection to a pod
    that is gone (it fails with a timeout or no route). And, when the record
    has SYNs (hack/proof since it records them), each connection attempt to a
    pod, keyed by (client address, client port, pod address), with what
    answered it: a SYN-ACK (accepted), a reset from the pod (refused), or
    nothing in the record (unanswered), attributed to the pod by its address
    and to its phase at the SYN. kube-proxy's DNAT happened before the
    bridge: the packets carry the pods' addresses. A connection that waits
    for an ARP answer that never comes puts no SYN on the wire: only its ARP
    requests show (gone). Older records (resets and ARP only) give
    connections None."""
    exited = {ip: p["exit"] or p["sigterm"] for ip, p in pods.items()}
    resets, gone = [], []
    counts = {o: {} for o in OUTCOMES + ("reset_established",)}
    per_pod = {ip: {o: {} for o in OUTCOMES} for ip in pods}
    failed = []
    totals = {"attempts": 0, "retransmitted_syns": 0, "failed_not_listed": 0}
    pending = {}   # key: [SYN time, SYNs sent]
    answered = {}  # key: SYN-ACK time, for DUPLICATE_SYN
    syns = False

    def where(ip, t):
        if ip in pods:
            return pods[ip]["name"], phase_of(pods[ip], t)
        if ip in new_pods:
            return new_pods[ip], "new_pod"
        return "other", "other"

    def count(outcome, key, t0, n_syns):
        ip = key[2]
        name, phase = where(ip, t0)
        counts[outcome][phase] = counts[outcome].get(phase, 0) + 1
        if ip in per_pod:
            per_pod[ip][outcome][phase] = per_pod[ip][outcome].get(phase, 0) + 1
        if outcome != "accepted":
            if len(failed) < FAILED_LISTED:
                failed.append({"t": round(t0, 4), "ip": ip, "pod": name, "phase": phase, "outcome": outcome,
                               "syns": n_syns})
            else:
                totals["failed_not_listed"] += 1

    def expire(now):
        for key in [k for k, (t0, _) in pending.items() if now - t0 > SYN_RETRIES]:
            t0, n = pending.pop(key)
            count("unanswered", key, t0, n)
        for key in [k for k, ta in answered.items() if now - ta > DUPLICATE_SYN]:
            del answered[key]

    seen = 0
    for line in lines(path):
        m = PACKET.match(line)
        if not m:
            m = ARP_REQUEST.match(line)
            if m and exited.get(m.group(2)) and float(m.group(1)) > exited[m.group(2)]:
                gone.append({"t": float(m.group(1)), "ip": m.group(2)})
            continue
        t, src, sport, dst, dport, flags = float(m.group(1)), m.group(2), m.group(3), m.group(4), m.group(5), m.group(6)
        seen += 1
        if seen % 5000 == 0:  # bounded memory: attempts over, answers too old to matter
            expire(t)
        if sport == POD_PORT and "R" in flags:
            resets.append({"t": t, "ip": src})
            key = (dst, dport, src)
            if key in pending:
                t0, n_syns = pending.pop(key)
                count("refused", key, t0, n_syns)
            else:  # a connection that was open (accepted, or from before the record)
                phase = where(src, t)[1]
                counts["reset_established"][phase] = counts["reset_established"].get(phase, 0) + 1
        elif sport == POD_PORT and "S" in flags and "." in flags:
            key = (dst, dport, src)
            if key in pending:
                t0, n_syns = pending.pop(key)
                count("accepted", key, t0, n_syns)
                answered[key] = t
        elif dport == POD_PORT and "S" in flags and "." not in flags:
            syns = True
            key = (src, sport, dst)
            if key in pending and t - pending[key][0] <= SYN_RETRIES:
                pending[key][1] += 1
                totals["retransmitted_syns"] += 1
            elif key in answered and t - answered[key] <= DUPLICATE_SYN:
                totals["retransmitted_syns"] += 1
            else:
                if key in pending:
                    t0, n_syns = pending.pop(key)
                    count("unanswered", key, t0, n_syns)
                answered.pop(key, None)
                pending[key] = [t, 1]
                totals["attempts"] += 1
    for key, (t0, n_syns) in list(pending.items()):
        count("unanswered", key, t0, n_syns)
    if not syns:
        return resets, gone, None, None
    conns = {"attempts": totals["attempts"], **{o: sum(counts[o].values()) for o in OUTCOMES},
             "retransmitted_syns": totals["retransmitted_syns"],
             "reset_established": sum(counts["reset_established"].values()),
             "by_phase": counts, "failed": sorted(failed, key=lambda f: f["t"]),
             "failed_not_listed": totals["failed_not_listed"]}
    return resets, gone, conns, per_pod


# conntrack -E -o timestamp: "[T]\t [NEW] tcp 6 120 SYN_SENT src=C dst=S sport=P dport=80 [UNREPLIED] src=X ..."
CT_EVENT = re.compile(r"^\[(\d+\.\d+)\]\s+\[NEW\]\s+tcp\s+\d+\s+\d+\s+(\S+)\s+src=(\S+) dst=(\S+) sport=(\d+) dport=\d+"
                      r"(?: \[UNREPLIED\])? src=(\S+)")
# conntrack -L: "tcp 6 117 SYN_SENT src=C dst=S sport=P dport=80 [UNREPLIED] src=X ..."
CT_ENTRY = re.compile(r"^tcp\s+\d+\s+\d+\s+(\S+)\s+src=(\S+) dst=(\S+) sport=(\d+) dport=\d+(?: \[UNREPLIED\])? src=(\S+)")
TRACE_SLACK = 2.0  # s: a failed request's connection entry is new from 0.5 s before its start to this after it


def traced(dirpath, pods, new_pods, t_start):
    """Each failed request (failures.jsonl, openload.py --failures) with the
    conntrack entry its connection used: a new entry made at its connect
    (conntrack.events), or an older one (earlier in the rollout, or in
    conntrack.before) that a reused client port matched, and the address
    that entry sends it to: an old pod (with its phase then), a new pod, the
    Service address itself (no translation), or another address. None when
    the rollout has no such records (older runs)."""
    failures_path, events_path = (os.path.join(dirpath, n) for n in ("failures.jsonl", "conntrack.events"))
    if not os.path.exists(failures_path) or not os.path.exists(events_path):
        return None
    failures = [json.loads(x) for x in lines(failures_path) if x.strip()]
    ports = {f["port"] for f in failures if f.get("port")}
    new = {}
    for line in lines(events_path):
        m = CT_EVENT.match(line)
        if m and int(m.group(5)) in ports:
            new.setdefault(int(m.group(5)), []).append((float(m.group(1)), m.group(2), m.group(4), m.group(6)))
    before = {}
    for line in lines(os.path.join(dirpath, "conntrack.before")):
        m = CT_ENTRY.match(line.strip())
        if m and int(m.group(4)) in ports:
            before[int(m.group(4))] = (m.group(1), m.group(3), m.group(5))

    def where(ip, service, t):
        if ip == service:
            return "untranslated"
        if ip in pods:
            return phase_of(pods[ip], t)
        return "new_pod" if ip in new_pods else "other"

    out = []
    for f in failures:
        rec = {"t": round(f["t"] - t_start, 3) if t_start else None, "error": f["error"], "port": f.get("port"),
               "reused": f.get("reused")}
        evs = new.get(f.get("port"), [])
        at = [e for e in evs if f["t"] - 0.5 <= e[0] <= f["t"] + TRACE_SLACK]
        older = [e for e in evs if e[0] < f["t"] - 0.5]
        # The entry the connection used, as (state, Service address, sent to).
        used = None
        if f.get("reused"):
            rec["entry"] = "kept-alive"
            used = older[-1][1:] if older else before.get(f.get("port"))
        elif at:
            rec["entry"], used = "new", at[0][1:]
        elif older:
            rec["entry"], used = f"earlier in the rollout ({older[-1][1]})", older[-1][1:]
        elif f.get("port") in before:
            used = before[f["port"]]
            rec["entry"] = f"before the rollout ({used[0]})"
        else:
            rec["entry"] = "none recorded"
        if used:
            rec["to"], rec["where"] = used[2], where(used[2], used[1], f["t"])
        # The old pod whose SIGTERM came last before the request: with
        # keep-alive, the test app closes every connection still idle 1 s
        # after SIGTERM (--idle-close-ms), racing a POST sent on it then.
        termed = [(f["t"] - p["sigterm"], p["name"]) for p in pods.values()
                  if p["sigterm"] is not None and p["sigterm"] <= f["t"] + 0.5]
        if termed:
            after, name = min(termed)
            rec["after_sigterm"] = {"pod": name, "seconds": round(after, 3)}
        out.append(rec)
    return out


def proxy_metrics(path):
    """The kube-proxy counters hack/proof compares before and after a rollout
    (summed over their labels); None without the file."""
    want = ("kubeproxy_sync_proxy_rules_duration_seconds_count",
            "kubeproxy_network_programming_duration_seconds_count",
            "kubeproxy_network_programming_duration_seconds_sum")
    vals = {}
    for line in lines(path):
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{.*\})?\s+(\S+)", line)
        if m and m.group(1) in want:
            try:
                vals[m.group(1)] = vals.get(m.group(1), 0.0) + float(m.group(2))
            except ValueError:
                pass
    return vals or None


def proxy_delta(dirpath):
    """kube-proxy's rule syncs and network-programming observations during
    the rollout (its metrics before and after it), None without both."""
    before = proxy_metrics(os.path.join(dirpath, "kube-proxy.before.metrics"))
    after = proxy_metrics(os.path.join(dirpath, "kube-proxy.after.metrics"))
    if not before or not after:
        return None

    def d(name):
        return after[name] - before[name] if name in after and name in before else None
    syncs = d("kubeproxy_sync_proxy_rules_duration_seconds_count")
    n = d("kubeproxy_network_programming_duration_seconds_count")
    total = d("kubeproxy_network_programming_duration_seconds_sum")
    return {"syncs": None if syncs is None else int(syncs),
            "network_programming": None if n is None else int(n),
            "network_programming_mean_seconds": round(total / n, 3) if n and total is not None else None}


def rollout(dirpath):
    """Everything one rollout shows, per old pod and in total."""
    # load.txt: openload.py's summary, in hey's format (hey.txt: older runs).
    hey = parse_hey(read(os.path.join(dirpath, "load.txt")) or read(os.path.join(dirpath, "hey.txt")))
    t_start = float(read(os.path.join(dirpath, "t_start"), "0"))
    t_rolled = float(read(os.path.join(dirpath, "t_rolled"), "0"))
    pods, endpoints, rules, ready, pod_events = {}, [], [], {}, []
    records = set()
    for line in lines(os.path.join(dirpath, "events.jsonl")):
        if not line.strip():
            continue
        try:
            e = json.loads(line)
        except json.JSONDecodeError:  # a line cut short when the recorder stopped
            continue
        kind = e.get("kind")
        if kind == "pod" and e.get("deleted") and e.get("ip"):
            pods.setdefault(e["ip"], {"name": e["name"], "ip": e["ip"], "deleted": e["t"]})
        elif kind == "endpoint":
            endpoints.append(e)
        elif kind == "rules":
            rules.append(e)
        elif kind == "ready" and e.get("ip"):
            ready.setdefault(e["ip"], e)
        elif kind == "event":
            pod_events.append(e)
        elif kind == "recorder":
            records.update(e.get("records") or [])
    for ip, p in pods.items():
        p["terminating"] = next((e["t"] for e in endpoints if e["ip"] == ip
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
    # New pods: ready after the restart (the recorder's first sight of Ready True).
    new_pods = {ip: e["name"] for ip, e in ready.items() if ip not in pods and e["t"] > t_start} if t_start else {}
    # packets.txt: SYNs, SYN-ACKs, resets and ARP; rst.txt (older runs): resets and ARP.
    path = os.path.join(dirpath, "packets.txt")
    if not os.path.exists(path):
        path = os.path.join(dirpath, "rst.txt")
    resets, gone, conns, per_pod = packets(path, pods, new_pods)
    for ip, p in pods.items():
        p["attempts"] = per_pod[ip] if per_pod else None
    # The Events' occurrences by reason; per old pod, its Unhealthy ones (a
    # failed probe each: the kubelet's probes are among the SYNs above).
    events = {} if "event" in records else None
    for p in pods.values():
        p["unhealthy"] = 0 if events is not None else None
    by_name = {p["name"]: p for p in pods.values()}
    for e in pod_events if events is not None else []:
        n = e.get("count") or 1
        events[e.get("reason")] = events.get(e.get("reason"), 0) + n
        if e.get("reason") == "Unhealthy" and e.get("pod") in by_name:
            by_name[e["pod"]]["unhealthy"] += n
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
        # Each connection attempt on the bridge, attributed (None: no SYNs recorded).
        "connections": conns,
        # The recorder's Events about pods, occurrences by reason (None: not recorded).
        "events": events,
        # New pods ready after the restart, seconds after it (None: not recorded).
        "new_pods_ready": sorted(({"name": ready[ip]["name"], "ip": ip, "seconds": round(ready[ip]["t"] - t_start, 2)}
                                  for ip in new_pods), key=lambda x: x["seconds"]) if "ready" in records else None,
        # kube-proxy's syncs during the rollout (None: no metrics before and after).
        "kube_proxy": proxy_delta(dirpath),
        "second_rollout": (gens[0] != gens[1]) if len(gens) == 2 else None,
        # Each failed request traced through conntrack (None: not recorded).
        "failures_traced": traced(dirpath, pods, new_pods, t_start),
    }


def summarise(rollouts):
    s = {k: sum(r["hey"][k] for r in rollouts) for k in
         ("requests", "ok", "failed", "non_2xx", "refused", "reset", "eof", "unreachable", "timeout", "other_errors")}
    s["rollouts"] = len(rollouts)
    slow = [r["hey"] for r in rollouts if r["hey"]["slow"] is not None]
    s["slow"] = {"sent": sum(h["slow"] for h in slow), "failed": sum(h["slow_failed"] for h in slow),
                 "rollouts_with_failures": sum(1 for h in slow if h["slow_failed"] > 0)} if slow else None
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
    # The connection attempts, attributed (rollouts whose record has SYNs).
    conns = [r["connections"] for r in rollouts if r.get("connections")]
    s["connections"] = None
    if conns:
        c = {"rollouts": len(conns)}
        for k in ("attempts",) + OUTCOMES + ("retransmitted_syns", "reset_established"):
            c[k] = sum(x[k] for x in conns)
        c["by_phase"] = {o: {ph: sum(x["by_phase"][o].get(ph, 0) for x in conns) for ph in PHASES
                             if any(x["by_phase"][o].get(ph) for x in conns)}
                         for o in OUTCOMES + ("reset_established",)}
        s["connections"] = c
    evs = [r["events"] for r in rollouts if r.get("events") is not None]
    s["events"] = {k: sum(e.get(k, 0) for e in evs) for k in sorted({k for e in evs for k in e})} if evs else None
    s["new_pods_ready_seconds"] = spread(x["seconds"] for r in rollouts for x in (r.get("new_pods_ready") or []))
    s["kube_proxy_syncs_per_rollout"] = spread(r["kube_proxy"]["syncs"] for r in rollouts if r.get("kube_proxy"))
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
        b["terminations"] = st.get("terminations")
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
            "message": prop.get("message"), "terminations": st.get("terminations"), "drain": st.get("drain"),
            "kube_proxy_p99": proxy,
            "deletion_to_rules": spread(p["propagation"] for p in pods),
            "deletion_to_last_request": spread(p["served_after_deletion"] for p in fresh)}


def slow_md(results):
    """The slow POSTs (openload.py --slow-every) per scenario and client: how
    many were lost, beside the grace and what gracekeeper measured of the
    drain. Nothing when no scenario sent any."""
    rows = []
    for scenario, sres in results["scenarios"].items():
        b = sres.get("budget") or {}
        src = sres.get("sources") or {}
        drain = src.get("drain") or {}
        # Kills at the grace during the measured rollouts: the policy's count
        # after them less its count before (warm-up rollouts excluded).
        after = (src.get("terminations") or {}).get("cutShort")
        before = (b.get("terminations") or {}).get("cutShort", 0)
        killed = "-" if after is None else after - before
        for mode, m in sres["modes"].items():
            sl = m["summary"].get("slow")
            if not sl:
                continue
            rows.append(f"| {scenario} | {mode} | {b.get('grace', '-')} s | {sl['sent']} | {sl['failed']} | "
                        f"{sl['rollouts_with_failures']}/{m['summary']['rollouts']} | "
                        f"{drain.get('source', '-')} {drain.get('seconds', '-')} s | {killed} |")
    if not rows:
        return []
    return ["Slow POSTs: sent, lost, and the drain the grace covered (run 1; the policy's status after the measured rollouts).",
            "", "| scenario | client | grace | slow POSTs | lost | rollouts losing one | status.drain | pods killed at the grace, both clients |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"] + rows + [""]


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
    series.append(([(x["t"] - t0, row_of[x["ip"]] + 0.4) for x in (r.get("connections") or {}).get("failed", [])
                    if x["outcome"] == "unanswered" and x["ip"] in row_of],
                   "points pt 1 ps 0.8 lc rgb '#17becf'", "connection attempt unanswered (SYN)"))
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


def phases_text(by_phase):
    """'after SIGTERM 12, after exit 3' (only the phases with any), or '0'."""
    return ", ".join(f"{PHASE_TEXT[ph]} {by_phase[ph]}" for ph in PHASES if by_phase.get(ph)) or "0"


def attribution_md(results):
    """results.md's table of the attributed connection attempts, Events,
    readiness and kube-proxy's syncs; nothing when no rollout recorded any
    (older runs)."""
    rows = []
    for scenario, sres in results["scenarios"].items():
        for mode, m in sres["modes"].items():
            s = m["summary"]
            c = s.get("connections")
            if c is None and s.get("events") is None and s.get("new_pods_ready_seconds") is None:
                continue
            rd = s.get("new_pods_ready_seconds")
            ready = f"{rd['median']} / {rd['max']}" if rd else "-"
            px = s.get("kube_proxy_syncs_per_rollout")
            rows.append(
                f"| {scenario} | {mode} | {c['rollouts'] if c else 0} | {c['attempts'] if c else '-'} | "
                f"{c['accepted'] if c else '-'} | {phases_text(c['by_phase']['refused']) if c else '-'} | "
                f"{phases_text(c['by_phase']['unanswered']) if c else '-'} | "
                f"{phases_text(c['by_phase']['reset_established']) if c else '-'} | "
                f"{s['refused']} / {s['unreachable']} / {s['timeout']} | "
                f"{'-' if s.get('events') is None else s['events'].get('Unhealthy', 0)} | "
                f"{ready} | "
                f"{px['median'] if px else '-'} |")
    if not rows:
        return []
    return ["Connection attempts on the pods' bridge (tcpdump's SYNs), each tied to the pod it reached and that pod's "
            "phase at the SYN: before its deletion, in its preStop wait (deleted, no SIGTERM yet), after SIGTERM, "
            "after its exit, deleted with no SIGTERM in the app's log, a new pod (ready after the restart), another "
            "address. Accepted: a SYN-ACK; refused: a reset from the pod; unanswered: no answer in the record. The "
            "kubelet's readiness probes come from the node's address, as the client's connections do, and are "
            "among the attempts. With keep-alive a connection carries many requests.",
            "",
            "| scenario | client | rollouts with SYNs | attempts | accepted | refused, by phase | unanswered, by phase | "
            "resets of open connections, by phase | the client's refused / no route / timeout | Unhealthy events | "
            "new pods ready, s after the restart (median / max) | kube-proxy syncs per rollout (median) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"] + rows + [""]


def traced_md(results, listed=100):
    """results.md's failed requests traced through conntrack: counts by the
    entry used and where it sent the connection, per scenario and client;
    then each failure of the rollouts with at most 20 (the budget's
    scenarios), at most LISTED lines. Nothing for older runs."""
    counts, rows, more = [], [], 0
    for scenario, sres in results["scenarios"].items():
        for mode, m in sres["modes"].items():
            by = {}
            traced_any = False
            for r in m["rollouts"]:
                fs = r.get("failures_traced")
                if fs is None:
                    continue
                traced_any = True
                for f in fs:
                    key = f"{f['entry']} -> {f.get('where', 'unknown')}"
                    by[key] = by.get(key, 0) + 1
                if len(fs) > 20:
                    continue
                for f in fs:
                    if len(rows) >= listed:
                        more += 1
                        continue
                    st = f.get("after_sigterm")
                    rows.append(f"| {scenario} | {mode} | {r['run']} | {os.path.basename(r['dir'])} | {f['t']} | "
                                f"{f['error']} | {f['port'] or '-'} | {f['entry']} | {f.get('to', '-')} | "
                                f"{f.get('where', '-')} | {st['seconds'] if st else '-'} |")
            if traced_any:
                counts.append(f"| {scenario} | {mode} | " + (", ".join(f"{k}: {v}" for k, v in sorted(by.items())) or "none") + " |")
    if not counts:
        return []
    md = ["Failed requests traced through conntrack: the entry each failed connection used (new at its connect; "
          "an older one its reused client port matched, earlier in the rollout or before it; a kept-alive "
          "connection's) and where that entry sent it (an old pod in its phase then, a new pod, the Service "
          "address untranslated, another address).",
          "", "| scenario | client | failed requests: entry -> where |", "| --- | --- | --- |"] + counts + [""]
    if rows:
        md += ["Each of them, in rollouts with at most 20 failures (seconds after the restart; the client's local port; "
               "seconds after the last SIGTERM an old pod got before it):",
               "", "| scenario | client | run | rollout | s | error | port | conntrack entry | sent to | then | s after SIGTERM |",
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"] + rows + [""]
        if more:
            md += [f"({more} more not listed.)", ""]
    return md


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
    md += attribution_md(results)
    md += traced_md(results)
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
    md += slow_md(results)
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
