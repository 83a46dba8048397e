#!/usr/bin/env python3
"""A stand-in for kube-proxy's metrics endpoint, for tests with a real Prometheus.

Usage:
    fixture_exporter.py [--port-file FILE] [--port N] [--p99 SECONDS] [--owner-pid PID]

Serves on 127.0.0.1 (port 0 = a free one; the port is written to --port-file
atomically once listening, and printed as "listening on 127.0.0.1:PORT"):

  GET  /metrics       the histogram kubeproxy_network_programming_duration_seconds
                      (_bucket with kube-proxy's buckets, _sum, _count). Ten times a
                      second it observes 100 values spread evenly over [0, p99/0.99],
                      so histogram_quantile(0.99, rate(..._bucket[1m])) is about p99
                      and rate() always has data.
  GET|POST /set?p99=S      change the distribution while running (S >= 0)
  GET|POST /set?pause=1    stop observing (rates fall to 0, quantiles to NaN); pause=0 resumes
  GET  /api/v1/query  a fake Prometheus answer: a scalar with the current p99; records the
                      request so a test can check the Authorization header it carried
  GET  /last-request  JSON {"path": ..., "authorization": ...} of the last /api/v1/query

It exits when --owner-pid is gone (default: its parent; then the kernel's
parent-death signal is used too), so a test that dies leaves no exporter
behind. Pass --owner-pid when a shell that exits right away starts it.
Python standard library only.
"""

import argparse
import ctypes
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

NAME = "kubeproxy_network_programming_duration_seconds"
# kube-proxy's NetworkProgrammingLatency buckets (pkg/proxy/metrics).
BUCKETS = ([0.25, 0.5] + [float(i) for i in range(1, 60)] +
           [60.0 + 5 * i for i in range(12)] + [120.0 + 30 * i for i in range(7)])
PER_TICK = 100
TICK_SECONDS = 0.1


class Histogram:
    def __init__(self, p99):
        self.lock = threading.Lock()
        self.p99 = p99
        self.paused = False
        self.counts = [0] * len(BUCKETS)  # per bucket, not cumulative
        self.inf_count = 0
        self.total = 0
        self.sum = 0.0

    def tick(self):
        with self.lock:
            if self.paused:
                return
            top = self.p99 / 0.99
            for i in range(PER_TICK):
                value = (i + 0.5) / PER_TICK * top
                self.total += 1
                self.sum += value
                for b, bound in enumerate(BUCKETS):
                    if value <= bound:
                        self.counts[b] += 1
                        break
                else:
                    self.inf_count += 1

    def exposition(self):
        with self.lock:
            lines = [
                f"# HELP {NAME} In Cluster Network Programming Latency in seconds",
                f"# TYPE {NAME} histogram",
            ]
            cumulative = 0
            for bound, count in zip(BUCKETS, self.counts):
                cumulative += count
                lines.append(f'{NAME}_bucket{{le="{bound:g}"}} {cumulative}')
            lines.append(f'{NAME}_bucket{{le="+Inf"}} {cumulative + self.inf_count}')
            lines.append(f"{NAME}_sum {self.sum!r}")
            lines.append(f"{NAME}_count {self.total}")
            return "\n".join(lines) + "\n"


class Handler(BaseHTTPRequestHandler):
    histogram = None
    last_request = {}

    def log_message(self, fmt, *args):  # quiet: tests read results, not logs
        pass

    def reply(self, status, body, content_type="application/json"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_set(self, query):
        h = self.histogram
        try:
            with h.lock:
                if "p99" in query:
                    p99 = float(query["p99"][0])
                    if not p99 >= 0:
                        raise ValueError("p99 must be >= 0")
                    h.p99 = p99
                if "pause" in query:
                    h.paused = query["pause"][0] not in ("0", "false", "")
                state = {"p99": h.p99, "paused": h.paused}
        except ValueError as e:
            self.reply(400, json.dumps({"error": str(e)}))
            return
        self.reply(200, json.dumps(state))

    def route(self):
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == "/metrics":
            self.reply(200, self.histogram.exposition(), "text/plain; version=0.0.4")
        elif url.path == "/set":
            self.handle_set(query)
        elif url.path == "/api/v1/query":
            Handler.last_request = {"path": self.path,
                                    "authorization": self.headers.get("Authorization", "")}
            with self.histogram.lock:
                p99 = self.histogram.p99
            self.reply(200, json.dumps({"status": "success", "data": {
                "resultType": "scalar", "result": [time.time(), repr(p99)]}}))
        elif url.path == "/last-request":
            self.reply(200, json.dumps(Handler.last_request))
        else:
            self.reply(404, json.dumps({"error": "not found"}))

    def do_GET(self):
        self.route()

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.route()


def owner_alive(owner):
    try:
        with open(f"/proc/{owner}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")  # a zombie is gone, just not reaped yet
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def watch_owner(owner, parent_is_owner):
    while owner_alive(owner) and not (parent_is_owner and os.getppid() != owner):
        time.sleep(0.5)
    os._exit(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--p99", type=float, default=1.0)
    parser.add_argument("--owner-pid", type=int)
    args = parser.parse_args()

    parent_is_owner = args.owner_pid is None
    owner = os.getppid() if parent_is_owner else args.owner_pid
    if parent_is_owner:
        try:  # SIGTERM when the parent dies (PR_SET_PDEATHSIG = 1)
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
        except (OSError, AttributeError):
            pass
    threading.Thread(target=watch_owner, args=(owner, parent_is_owner), daemon=True).start()

    histogram = Histogram(args.p99)
    Handler.histogram = histogram
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    port = server.server_address[1]

    def observe():
        next_tick = time.monotonic()
        while True:
            histogram.tick()
            next_tick += TICK_SECONDS
            time.sleep(max(0.0, next_tick - time.monotonic()))

    threading.Thread(target=observe, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        os.rename(tmp, args.port_file)
    print(f"listening on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
