#!/usr/bin/env python3
"""Records what happens to a Service's pods during a rollout, with times.

    recorder.py --env LAB/env --namespace NS --service NAME --out EVENTS.jsonl

Runs inside the lab's network namespace (hack/proof starts it with LAB/exec)
until SIGTERM/SIGINT, and writes one JSON line per observation, each with
"t" (epoch seconds, this machine's clock):

  {"kind": "pod", "name", "ip", "deleted": true}  first sight of a pod's
        deletionTimestamp (a watch of the namespace's pods)
  {"kind": "ready", "name", "ip", "since"}  first sight of a pod's Ready
        condition True (the same watch; "since": its lastTransitionTime). The
        pods already Ready when the recorder starts come at its start
  {"kind": "endpoint", "ip", "ready", "serving", "terminating"}  an endpoint's
        conditions changed in one of the Service's EndpointSlices (a watch)
  {"kind": "rules", "ips": [...]}  the pod IPs kube-proxy's iptables rules
        send the Service to (iptables-save every 100 ms; a line on change).
        "prev": when the read before it started, the last time the previous
        set was seen: an IP that leaves the rules was last in them at "prev"
  {"kind": "event", "reason", "pod", "note", "count"}  an Event about a pod
        of the namespace with reason Unhealthy, Killing, FailedPreStopHook or
        ProbeWarning (a watch of events.k8s.io/v1). The kubelet counts a
        repeated Event on one object: "count" is the occurrences new since the
        previous line for it. Events from before the recorder started (an
        earlier rollout's) are left out
  {"kind": "recorder", "started": true, "records": [...]}  the kinds above
        this recorder writes (an older recorder wrote no "ready" or "event")

The watches talk to the API server directly with the lab's admin
certificate, so that an event's time is when it arrived, not when a kubectl
process got around to printing it.
"""

import argparse
import datetime
import json
import re
import shlex
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

lock = threading.Lock()
out = None
stop = threading.Event()


def emit(**record):
    record["t"] = round(time.time(), 4)
    with lock:
        out.write(json.dumps(record) + "\n")
        out.flush()


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("=")
            if key:
                env[key] = shlex.split(value)[0] if value else ""
    return env


def watch(env, path, handle):
    """Streams a watch of PATH, calling handle(event) per event; re-lists and
    watches again when the stream ends, until stop is set."""
    ctx = ssl.create_default_context(cafile=env["CA_FILE"])
    ctx.load_cert_chain(env["ADMIN_CERT_FILE"], env["ADMIN_KEY_FILE"])
    base = env["APISERVER_URL"]
    while not stop.is_set():
        try:
            with urllib.request.urlopen(base + path + ("&" if "?" in path else "?") + "watch=true&timeoutSeconds=600",
                                        context=ctx, timeout=3600) as stream:
                buf = b""
                while not stop.is_set():
                    chunk = stream.readline()
                    if not chunk:
                        break
                    buf += chunk
                    if buf.endswith(b"\n"):
                        handle(json.loads(buf))
                        buf = b""
        except Exception as e:  # reconnect: the lab's API server is local and cheap
            if not stop.is_set():
                print(f"recorder: watch {path}: {e}", file=sys.stderr)
                time.sleep(0.2)


def watch_pods(env, ns):
    seen = set()
    ready = set()

    def handle(ev):
        pod = ev.get("object", {})
        meta = pod.get("metadata", {})
        status = pod.get("status", {})
        if meta.get("deletionTimestamp") and meta.get("uid") not in seen:
            seen.add(meta.get("uid"))
            emit(kind="pod", name=meta.get("name"), ip=status.get("podIP"), deleted=True)
        cond = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        if cond.get("status") == "True" and meta.get("uid") not in ready:
            ready.add(meta.get("uid"))
            emit(kind="ready", name=meta.get("name"), ip=status.get("podIP"), since=cond.get("lastTransitionTime"))

    watch(env, f"/api/v1/namespaces/{ns}/pods", handle)


def watch_slices(env, ns, service):
    last = {}

    def handle(ev):
        for ep in ev.get("object", {}).get("endpoints") or []:
            cond = ep.get("conditions", {})
            state = (cond.get("ready"), cond.get("serving"), cond.get("terminating"))
            for ip in ep.get("addresses", []):
                if last.get(ip) != state:
                    last[ip] = state
                    emit(kind="endpoint", ip=ip, ready=state[0], serving=state[1], terminating=state[2])

    watch(env, f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"
               f"?labelSelector=kubernetes.io%2Fservice-name%3D{service}", handle)


EVENT_REASONS = {"Unhealthy", "Killing", "FailedPreStopHook", "ProbeWarning"}


def when(text):
    """An API time (RFC 3339) in epoch seconds, None without one."""
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (AttributeError, ValueError):
        return None


def watch_events(env, ns, started):
    counted = {}  # Event uid: its occurrences already written (or from before the start)

    def handle(ev):
        if ev.get("type") not in ("ADDED", "MODIFIED"):
            return
        e = ev.get("object", {})
        regarding = e.get("regarding") or {}
        if e.get("reason") not in EVENT_REASONS or regarding.get("kind") != "Pod":
            return
        uid = (e.get("metadata") or {}).get("uid")
        series = e.get("series") or {}
        total = series.get("count") or e.get("deprecatedCount") or 1
        if uid not in counted:
            # The watch starts with a list of the namespace's Events: those of
            # earlier rollouts are not this one's. The kubelet's times are
            # whole seconds (deprecated*Timestamp), hence the second's margin.
            meta = e.get("metadata") or {}
            first = when(e.get("eventTime") or e.get("deprecatedFirstTimestamp") or meta.get("creationTimestamp"))
            last = when(series.get("lastObservedTime") or e.get("deprecatedLastTimestamp") or e.get("eventTime")
                        or meta.get("creationTimestamp"))
            if last is not None and last < started - 1:
                counted[uid] = total
                return
            # Begun before the start, seen again since: its last occurrence is new.
            counted[uid] = total - 1 if first is not None and first < started - 1 else 0
        if total > counted[uid]:
            emit(kind="event", reason=e.get("reason"), pod=regarding.get("name"), note=(e.get("note") or "")[:300],
                 count=total - counted[uid])
            counted[uid] = total

    watch(env, f"/apis/events.k8s.io/v1/namespaces/{ns}/events", handle)


def poll_rules(ns, service):
    """The endpoints kube-proxy's iptables rules hold for NS/SERVICE."""
    comment = re.compile(r'--comment "?' + re.escape(f"{ns}/{service}") + r'(:[^"\s]*)?"? ')
    dnat = re.compile(r"--to-destination (\d+\.\d+\.\d+\.\d+):\d+")
    last = None
    last_poll = None  # when the previous read (still showing LAST) started
    while not stop.is_set():
        polled = round(time.time(), 4)
        try:
            text = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True, timeout=5).stdout
        except subprocess.TimeoutExpired:
            continue
        ips = sorted({m.group(1) for line in text.splitlines()
                      if "-j DNAT" in line and comment.search(line)
                      for m in [dnat.search(line)] if m})
        if ips != last:
            last = ips
            emit(kind="rules", ips=ips, prev=last_poll)
        last_poll = polled
        stop.wait(0.1)


def main():
    global out
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--service", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    env = read_env(args.env)
    started = time.time()
    out = open(args.out, "a")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threads = [threading.Thread(target=f, args=a, daemon=True) for f, a in (
        (watch_pods, (env, args.namespace)),
        (watch_slices, (env, args.namespace, args.service)),
        (watch_events, (env, args.namespace, started)),
        (poll_rules, (args.namespace, args.service)))]
    for t in threads:
        t.start()
    emit(kind="recorder", started=True, records=["pod", "ready", "endpoint", "rules", "event"])
    while not stop.is_set():
        stop.wait(0.5)


if __name__ == "__main__":
    main()
