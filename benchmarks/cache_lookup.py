"""Micro-benchmark: what a cache hit costs, per store, in microseconds.

Three levels for each store:

* ``store.get``       — the lookup alone (key → entry with its body);
* ``dispatch hit``    — ``interceptors.cache`` answering a fresh entry through
                        ``dispatch()`` into a minimal handler (lookup, freshness
                        check, headers with ``Age``, the handler callbacks);
* ``request() hit``   — the same through the blocking ``request()`` API, body
                        read, as an application sees it.

A loopback origin serves the first request only; every measured call is a
hit. Prints a table; ``--json`` prints one JSON object instead.

    .venv/bin/python benchmarks/cache_lookup.py [-n 20000] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from gevent.server import StreamServer

import greenhttp
from greenhttp import interceptors
from greenhttp.cache_stores import MemoryCacheStore, SqliteCacheStore

BODY = b"x" * 1024


def origin_server() -> StreamServer:
    def handle(sock: Any, _addr: Any) -> None:
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return
            data += chunk
            while b"\r\n\r\n" in data:
                _, data = data.split(b"\r\n\r\n", 1)
                sock.sendall(
                    b"HTTP/1.1 200 OK\r\nCache-Control: max-age=3600\r\nContent-Type: text/plain\r\n"
                    b"ETag: \"v1\"\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
                )

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server


class Sink:
    """The cheapest handler: counts completed responses."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = 0

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        self.done += 1


def best_us(fn: Callable[[], Any], n: int, repeats: int) -> float:
    """The best of ``repeats`` runs of ``n`` calls, in microseconds per call."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def measure(name: str, store: Any, origin: str, n: int, repeats: int) -> dict[str, float]:
    client = greenhttp.Client(origin)
    try:
        d = client.compose(interceptors.cache(store=store))
        d.request(path="/bench", headers={"accept": "*/*"}).body.bytes()  # the one miss
        key = {"origin": origin, "method": "GET", "path": "/bench", "headers": {"accept": "*/*"}}
        assert store.get(key) is not None, f"{name}: the response was not stored"
        sink = Sink()
        opts = {"path": "/bench", "method": "GET", "headers": {"accept": "*/*"}}

        def dispatch_hit() -> None:
            d.dispatch(dict(opts), sink)

        def request_hit() -> None:
            d.request(path="/bench", headers={"accept": "*/*"}).body.bytes()

        out = {
            "store.get": best_us(lambda: store.get(key), n, repeats),
            "dispatch hit": best_us(dispatch_hit, n, repeats),
            "request() hit": best_us(request_hit, max(1, n // 4), repeats),
        }
        assert sink.done >= n, "every dispatch must have been answered from the store"
        return out
    finally:
        client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20000, help="calls per run (request(): n/4)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    server = origin_server()
    origin = f"http://127.0.0.1:{server.server_port}"
    results: dict[str, dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            stores: list[tuple[str, Any]] = [
                ("MemoryCacheStore", MemoryCacheStore()),
                ("SqliteCacheStore(':memory:')", SqliteCacheStore()),
                ("SqliteCacheStore(file, WAL)", SqliteCacheStore(os.path.join(tmp, "bench.sqlite"))),
            ]
            for name, store in stores:
                results[name] = measure(name, store, origin, args.n, args.repeats)
                if isinstance(store, SqliteCacheStore):
                    store.close()
    finally:
        server.stop()
    if args.json:
        print(json.dumps(results))
        return
    print(f"cache hit cost, µs per call (best of {args.repeats}; {len(BODY)}-byte body)")
    print(f"{'store':32} {'store.get':>10} {'dispatch hit':>13} {'request() hit':>14}")
    for name, r in results.items():
        print(f"{name:32} {r['store.get']:10.2f} {r['dispatch hit']:13.2f} {r['request() hit']:14.2f}")


if __name__ == "__main__":
    main()
