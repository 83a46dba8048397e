#!/usr/bin/env python3
"""An open-loop load generator: POSTs at a fixed rate, whatever the answers.

    openload.py --url http://IP[:PORT]/PATH --rate R --duration S [--timeout T] [--keepalive]
                [--host NAME] [--slow-every K --slow-ms MS]

Request i starts at start + i/R, for i < R*S, each in its own task: a request
that hangs (a pod that is gone: no route, or a timeout) does not hold back the
next one, so the offered load is the same in every scenario, however many
requests fail. hey -q is closed-loop (a worker waits for its answer), so its
rate falls exactly when requests fail.

Bounded: at most R*S requests, each at most T seconds; it stops by itself.
Without --keepalive each request opens its own connection and sends
"Connection: close"; with it, an idle connection from a pool is reused (as
Go's http.Transport does), and a connection the server closes leaves the pool.

--host sets the Host header (default: the URL's host), for an ingress that
routes by host name.

--slow-every K --slow-ms MS makes every K-th request a slow one: PATH?ms=MS,
which the lab's app works MS ms on (its drain waits for it). The summary
counts them ("Slow requests: N sent, F failed"), and a failure record
says whether its request was slow.

--failures FILE writes one JSON line per failed request: when it started
(wall clock, seconds since the epoch, as tcpdump -tt and conntrack's
timestamps), the client's local port (null if the connection never got
one), whether it ran on a kept-alive connection, and the error. The port
ties a failure to conntrack's entry for that connection.

Prints a summary in hey's format (Summary / Latency distribution / Status
code distribution / Error distribution), so hey's parser reads it; error
messages carry the same words as Go's ("connection refused", "no route to
host", "EOF", "Timeout", "reset by peer").
"""

import argparse
import asyncio
import errno
import json
import re
import resource
import socket
import time
import urllib.parse


async def dial(addr, seen):
    """A connection to addr (ip, port). The kernel picks the local port at
    the non-blocking connect(), before the SYN leaves: it goes into
    seen["port"] then, so a connection that fails has one too."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        try:
            sock.connect(addr)
        except BlockingIOError:
            pass
        finally:
            seen["port"] = sock.getsockname()[1] or None
        await loop.sock_connect(sock, addr)  # EALREADY/EINPROGRESS: waits for the answer
        return await asyncio.open_connection(sock=sock)
    except BaseException:
        sock.close()
        raise


class Pool:
    def __init__(self):
        self.idle = []


async def one(addr, host, path, timeout, keepalive, pool, results, failures, host_header=None, slow=False):
    t0 = time.monotonic()
    wall = time.time()
    conn = None
    reused = False
    seen = {"port": None}

    def failed(msg):
        results.append((None, msg, None, slow))
        if failures is not None:
            failures.append({"t": round(wall, 6), "port": seen["port"], "reused": reused, "error": msg, "slow": slow})

    try:
        async def run():
            nonlocal conn, reused
            if keepalive and pool.idle:
                conn = pool.idle.pop()
                reused = True
                seen["port"] = conn[1].get_extra_info("sockname", (None, None))[1]
            else:
                conn = await dial(addr, seen)
            reader, writer = conn
            writer.write((f"POST {path} HTTP/1.1\r\nHost: {host_header or host}\r\nContent-Length: 0\r\n"
                          f"User-Agent: gk-openload\r\n"
                          + ("" if keepalive else "Connection: close\r\n") + "\r\n").encode())
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            if "content-length" in headers:
                await reader.readexactly(int(headers["content-length"]))
            else:
                await reader.read()
            close = not keepalive or headers.get("connection", "").lower() == "close"
            return status, close
        status, close = await asyncio.wait_for(run(), timeout)
        if close:
            conn[1].close()
        else:
            pool.idle.append(conn)
        results.append((status, None, time.monotonic() - t0, slow))
    except asyncio.TimeoutError:
        failed("Client.Timeout exceeded while awaiting headers")
        close_quietly(conn)
    except ConnectionRefusedError:
        failed("dial tcp: connect: connection refused")
    except ConnectionResetError:
        failed("read: connection reset by peer")
        close_quietly(conn)
    except asyncio.IncompleteReadError:
        failed("EOF" + (" (a kept-alive connection)" if reused else ""))
        close_quietly(conn)
    except OSError as e:
        if e.errno == errno.EHOSTUNREACH:
            msg = "dial tcp: connect: no route to host"
        elif e.errno == errno.ECONNREFUSED:
            msg = "dial tcp: connect: connection refused"
        elif e.errno == errno.ECONNRESET:
            msg = "read: connection reset by peer"
        elif e.errno == errno.ETIMEDOUT:
            msg = "dial tcp: i/o timeout (Client.Timeout exceeded)"
        else:
            msg = f"OSError {e.errno}: {e.strerror}"
        failed(msg)
        close_quietly(conn)
    except (ValueError, IndexError) as e:
        failed(f"malformed answer: {e}")
        close_quietly(conn)


def close_quietly(conn):
    if conn:
        try:
            conn[1].close()
        except Exception:
            pass


async def main_async(args, failures):
    u = urllib.parse.urlsplit(args.url)
    host, port, path = u.hostname, u.port or 80, u.path or "/"
    addr = (socket.gethostbyname(host), port)
    n = int(args.rate * args.duration)
    pool = Pool()
    results = []
    tasks = []
    loop = asyncio.get_running_loop()
    start = loop.time()
    t_wall = time.monotonic()
    if u.query:
        path += "?" + u.query
    slow_path = f"{path}{'&' if u.query else '?'}ms={args.slow_ms}"
    for i in range(n):
        due = start + i / args.rate
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        slow = args.slow_every > 0 and i % args.slow_every == args.slow_every - 1
        tasks.append(asyncio.create_task(one(addr, host, slow_path if slow else path, args.timeout, args.keepalive,
                                             pool, results, failures, args.host, slow)))
    issuing = loop.time() - start
    await asyncio.gather(*tasks)
    total = time.monotonic() - t_wall
    for conn in pool.idle:
        close_quietly(conn)
    return results, total, issuing


def report(results, total, issuing, slow_every):
    lat = sorted(r[2] for r in results if r[0] is not None)
    statuses, errors = {}, {}
    for status, err, _, _ in results:
        if status is not None:
            statuses[status] = statuses.get(status, 0) + 1
        else:
            errors[err] = errors.get(err, 0) + 1
    print("\nSummary:")
    print(f"  Total:\t{total:.4f} secs")
    if lat:
        print(f"  Slowest:\t{lat[-1]:.4f} secs")
        print(f"  Fastest:\t{lat[0]:.4f} secs")
        print(f"  Average:\t{sum(lat) / len(lat):.4f} secs")
    print(f"  Requests/sec:\t{len(results) / total:.4f}")
    print(f"  Requests issued:\t{len(results)} in {issuing:.4f} secs (open loop)")
    if slow_every:
        slow = [r for r in results if r[3]]
        lost = sum(1 for r in slow if r[0] is None or not 200 <= r[0] < 300)
        print(f"  Slow requests:\t{len(slow)} sent, {lost} failed")
    if lat:
        print("\nLatency distribution:")
        for p in (10, 25, 50, 75, 90, 95, 99):
            print(f"  {p}% in {lat[min(len(lat) - 1, int(len(lat) * p / 100))]:.4f} secs")
    print("\nStatus code distribution:")
    for code in sorted(statuses):
        print(f"  [{code}]\t{statuses[code]} responses")
    if errors:
        print("\nError distribution:")
        for msg, count in sorted(errors.items(), key=lambda kv: -kv[1]):
            print(f"  [{count}]\tPost: {msg}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--rate", type=float, required=True, help="requests per second")
    ap.add_argument("--duration", type=float, required=True, help="seconds of issuing requests")
    ap.add_argument("--timeout", type=float, default=10)
    ap.add_argument("--keepalive", action="store_true")
    ap.add_argument("--host", help="the Host header (default: the URL's host)")
    ap.add_argument("--failures", help="one JSON line per failed request: its start, local port, error")
    ap.add_argument("--slow-every", type=int, default=0, help="every K-th request is a slow one (0: none)")
    ap.add_argument("--slow-ms", type=int, default=0, help="how long the app works on a slow request, in ms")
    args = ap.parse_args()
    if not (0 < args.rate <= 5000 and 0 < args.duration <= 600 and 0 < args.timeout <= 60):
        ap.error("--rate 0-5000, --duration 0-600, --timeout 0-60")
    if not (0 <= args.slow_every <= 1000000 and 0 <= args.slow_ms <= 600000):
        ap.error("--slow-every 0-1000000, --slow-ms 0-600000")
    if (args.slow_every > 0) != (args.slow_ms > 0):
        ap.error("--slow-every and --slow-ms go together")
    if args.host is not None and not re.fullmatch(r"[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?", args.host):
        ap.error("--host: a host name, optionally with :PORT")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, int(args.rate * args.timeout) + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    failures = [] if args.failures else None
    results, total, issuing = asyncio.run(main_async(args, failures))
    report(results, total, issuing, args.slow_every)
    if args.failures:
        with open(args.failures, "w") as f:
            for rec in sorted(failures, key=lambda r: r["t"]):
                f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
