#!/usr/bin/env python3
"""A TCP proxy on 127.0.0.1 that relays to the API server, or holds.

usage: hold_proxy.py UPSTREAM_PORT PORT_FILE LOG_FILE

Listens on a free loopback port (written to PORT_FILE) and relays every
connection to 127.0.0.1:UPSTREAM_PORT, bytes as they come (TLS passes
through untouched). SIGUSR1 switches it to hold: a connection accepted then
is never answered (what the client sends is read and dropped), and the
connections already relayed are frozen (nothing more is passed either way).
SIGUSR2 switches back to relaying: frozen connections flow again, held ones
stay held until their client gives up.

LOG_FILE gets one JSON line per event, with `t` in seconds since the epoch:
  {"event": "mode", "mode": "hold"|"relay"}
  {"event": "close", "id": N, "held": bool, "by": "client"|"upstream",
   "opened": T, "silent": S, "waited": W, "served": bool}
`silent` is how long the client had heard nothing from the server when the
connection ended (for a held connection: since it was accepted), `waited`
how long it had waited for an answer to what it sent since (0: nothing
unanswered), `served` whether it ever got a byte. A client that closes a
connection with a request unanswered is a timeout firing: `waited` is how
long the timeout took.
"""

import asyncio
import json
import os
import signal
import sys
import time

UPSTREAM_PORT = int(sys.argv[1])
PORT_FILE = sys.argv[2]
LOG = open(sys.argv[3], "a", buffering=1)

relaying = asyncio.Event()
next_id = 0


def log(event, **fields):
    fields.update(event=event, t=round(time.time(), 3))
    LOG.write(json.dumps(fields) + "\n")


def set_mode(relay):
    if relay:
        relaying.set()
    else:
        relaying.clear()
    log("mode", mode="relay" if relay else "hold")


async def pump(reader, writer, on_read, on_bytes):
    """Copies reader to writer; while held, keeps reading (to see an EOF)
    but passes nothing on. Returns "eof" when the reader ended, "error" when
    either side failed."""
    pending = bytearray()
    read = asyncio.ensure_future(reader.read(65536))
    try:
        while True:
            if relaying.is_set() and pending:
                on_bytes()
                writer.write(bytes(pending))
                pending.clear()
                await writer.drain()
            waits = {read}
            resume = None
            if pending and not relaying.is_set():
                resume = asyncio.ensure_future(relaying.wait())
                waits.add(resume)
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if resume is not None:
                resume.cancel()
            if read in done:
                data = read.result()
                if not data:
                    return "eof"
                on_read()
                pending += data
                read = asyncio.ensure_future(reader.read(65536))
    except (ConnectionError, OSError):
        return "error"
    finally:
        read.cancel()


async def handle(client_reader, client_writer):
    global next_id
    next_id += 1
    conn = next_id
    opened = time.time()
    heard = {"last": opened, "any": False}

    if not relaying.is_set():  # held: read and drop until the client gives up
        try:
            while await client_reader.read(65536):
                pass
        except (ConnectionError, OSError):
            pass
        now = time.time()
        log("close", id=conn, held=True, by="client", opened=round(opened, 3),
            silent=round(now - opened, 3), served=False, waited=round(now - opened, 3))
        client_writer.close()
        return

    try:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", UPSTREAM_PORT)
    except OSError:
        client_writer.close()
        return

    def heard_from_server():
        heard["last"] = time.time()
        heard["any"] = True
        heard["asked"] = None

    def client_asked():  # the start of bytes the server has not answered
        if heard.get("asked") is None:
            heard["asked"] = time.time()

    to_server = asyncio.ensure_future(pump(client_reader, up_writer, client_asked, lambda: None))
    to_client = asyncio.ensure_future(pump(up_reader, client_writer, lambda: None, heard_from_server))
    done, _ = await asyncio.wait({to_server, to_client}, return_when=asyncio.FIRST_COMPLETED)
    now = time.time()
    # "client": the client closed (or reset) its side; "upstream": the API
    # server did, or writing to it failed.
    by = "client" if to_server in done and to_server.result() == "eof" else "upstream"
    asked = heard.get("asked")
    log("close", id=conn, held=False, by=by, opened=round(opened, 3),
        silent=round(now - heard["last"], 3), served=heard["any"],
        waited=round(now - asked, 3) if asked is not None else 0)
    for task in (to_server, to_client):
        task.cancel()
    for w in (up_writer, client_writer):
        try:
            w.close()
        except Exception:  # already gone
            pass


async def main():
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, set_mode, False)
    loop.add_signal_handler(signal.SIGUSR2, set_mode, True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    relaying.set()
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=256)
    port = server.sockets[0].getsockname()[1]
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(f"{port}\n")
    os.replace(PORT_FILE + ".tmp", PORT_FILE)
    log("listening", port=port)
    await stop.wait()
    server.close()


asyncio.run(main())
