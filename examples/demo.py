"""greenhttp demo: thousands of greenlets through one Pool, then the same over HTTP/2.

Run with ``make demo``. It starts two servers of its own on 127.0.0.1 — an
HTTP/1.1 keep-alive server and an h2c (cleartext HTTP/2) server, both
answering every request with a small JSON body — then has thousands of
greenlets call the blocking ``request()`` at once:

1. through one ``greenhttp.Pool`` of a few HTTP/1.1 connections;
2. through one ``greenhttp.H2CClient``: a single connection, many streams.

It shows a progress bar for each run and a table at the end.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import gevent
import h2.config
import h2.connection
import h2.events
from gevent.server import StreamServer

import greenhttp

GREENLETS = 2000
REQUESTS_PER_GREENLET = 5
POOL_CONNECTIONS = 16


def answer(path: str) -> bytes:
    return json.dumps({"path": path, "ok": True}).encode()


def serve_h1(sock: Any, _addr: Any) -> None:
    """A tiny HTTP/1.1 keep-alive server: one JSON answer per request head."""
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            head, buf = buf.split(b"\r\n\r\n", 1)
            body = answer(head.split(b" ", 2)[1].decode())
            sock.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
    finally:
        sock.close()


def serve_h2c(sock: Any, _addr: Any) -> None:
    """A tiny h2c server on the h2 library: one JSON answer per stream."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    conn.local_settings.max_concurrent_streams = 256
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    body = answer(dict(event.headers)[":path"])
                    conn.send_headers(
                        event.stream_id,
                        [(":status", "200"), ("content-type", "application/json"), ("content-length", str(len(body)))],
                    )
                    conn.send_data(event.stream_id, body, end_stream=True)
            sock.sendall(conn.data_to_send())
    finally:
        sock.close()


def bar(label: str, done: int, total: int, width: int = 36) -> str:
    filled = int(width * done / total)
    return f"\r{label:<10} [" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def run(label: str, dispatcher: Any, connections: Callable[[], int]) -> dict[str, Any]:
    """Many greenlets doing blocking requests through ``dispatcher``; returns the figures."""
    total = GREENLETS * REQUESTS_PER_GREENLET
    latencies: list[float] = []
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        for j in range(REQUESTS_PER_GREENLET):
            t0 = time.perf_counter()
            try:
                with dispatcher.request(path=f"/item/{i}/{j}", method="GET") as resp:
                    payload = resp.body.json()
                    if resp.status_code != 200 or not payload["ok"]:
                        raise RuntimeError(f"unexpected answer {resp.status_code} {payload}")
            except Exception as exc:  # counted and reported in the table
                errors.append(exc)
            latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    jobs = [gevent.spawn(worker, i) for i in range(GREENLETS)]
    while not all(job.ready() for job in jobs):
        gevent.sleep(0.1)
        sys.stdout.write(bar(label, len(latencies), total))
        sys.stdout.flush()
    gevent.joinall(jobs)
    elapsed = time.perf_counter() - started
    sys.stdout.write(bar(label, len(latencies), total) + "\n")
    latencies.sort()
    return {
        "run": label,
        "requests": len(latencies),
        "errors": len(errors),
        "connections": connections(),
        "seconds": elapsed,
        "req/s": len(latencies) / elapsed,
        "p50 ms": latencies[len(latencies) // 2] * 1000,
        "p99 ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def main() -> int:
    h1_server = StreamServer(("127.0.0.1", 0), serve_h1)
    h2_server = StreamServer(("127.0.0.1", 0), serve_h2c)
    h1_server.start()
    h2_server.start()
    print(
        f"greenhttp {greenhttp.__version__}: {GREENLETS} greenlets x {REQUESTS_PER_GREENLET} requests, "
        f"servers on 127.0.0.1:{h1_server.server_port} (HTTP/1.1) and :{h2_server.server_port} (h2c)"
    )
    results = []
    try:
        opened = {"h1": 0, "h2": 0}
        pool = greenhttp.Pool(f"http://127.0.0.1:{h1_server.server_port}", connections=POOL_CONNECTIONS)
        pool.on("connect", lambda *_: opened.__setitem__("h1", opened["h1"] + 1))
        with pool:
            results.append(run("Pool h1", pool, lambda: opened["h1"]))
        client = greenhttp.H2CClient(f"http://127.0.0.1:{h2_server.server_port}", max_concurrent_streams=256)
        client.on("connect", lambda *_: opened.__setitem__("h2", opened["h2"] + 1))
        with client:
            results.append(run("H2C h2", client, lambda: opened["h2"]))
    finally:
        h1_server.stop()
        h2_server.stop()

    columns = ["run", "requests", "errors", "connections", "seconds", "req/s", "p50 ms", "p99 ms"]
    cells = [
        [r[c] if isinstance(r[c], (str, int)) else f"{r[c]:,.2f}" if c != "req/s" else f"{r[c]:,.0f}" for c in columns]
        for r in results
    ]
    widths = [max(len(c), *(len(str(row[i])) for row in cells)) for i, c in enumerate(columns)]
    line = "+".join("-" * (w + 2) for w in widths)
    print(line)
    print("|".join(f" {c:>{w}} " for c, w in zip(columns, widths, strict=True)))
    print(line)
    for row in cells:
        print("|".join(f" {str(v):>{w}} " for v, w in zip(row, widths, strict=True)))
    print(line)
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
