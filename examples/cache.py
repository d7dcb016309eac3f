"""An HTTP cache and request deduplication in front of an Agent.

Starts its own loopback origin (gevent's WSGIServer on 127.0.0.1) that counts
the requests it serves, then sends requests through

    agent.compose(cache(store=...), deduplicate())

and shows: a fresh response answered from the store (with ``Age``), a stale
one validated with ``If-None-Match`` and a ``304``, fifty concurrent misses
sharing one request to the origin, a ``POST`` invalidating the URL, and the
same cache kept in an SQLite file that a second store (another process, in
real life) reads. Exits 0 when every check holds.

    python examples/cache.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

import gevent
from gevent.pywsgi import WSGIServer

import greenhttp
from greenhttp import interceptors
from greenhttp.cache_stores import MemoryCacheStore, SqliteCacheStore

served: dict[str, int] = {}


def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    path = environ["PATH_INFO"]
    if environ["REQUEST_METHOD"] == "POST":
        start_response("204 No Content", [])
        return [b""]
    served[path] = served.get(path, 0) + 1  # GETs that reached the origin
    if path == "/catalog":  # fresh for a minute
        start_response("200 OK", [("Cache-Control", "max-age=60"), ("Content-Type", "text/plain")])
        return [b"catalog v1"]
    if path == "/profile":  # always validated before reuse
        if environ.get("HTTP_IF_NONE_MATCH") == '"p1"':
            start_response("304 Not Modified", [("ETag", '"p1"'), ("Cache-Control", "no-cache")])
            return [b""]
        start_response("200 OK", [("ETag", '"p1"'), ("Cache-Control", "no-cache")])
        return [b"profile p1"]
    if path == "/slow":  # not cacheable: only deduplication helps
        gevent.sleep(0.2)
        start_response("200 OK", [("Cache-Control", "no-store")])
        return [b"slow answer"]
    start_response("404 Not Found", [])
    return [b""]


def check(label: str, ok: bool) -> bool:
    print(f"{'ok ' if ok else 'FAIL'} {label}")
    return ok


def main() -> int:
    server = WSGIServer(("127.0.0.1", 0), app, log=None)
    server.start()
    origin = f"http://127.0.0.1:{server.server_port}"
    agent = greenhttp.Agent()
    results = []
    try:
        cached = agent.compose(
            interceptors.cache(store=MemoryCacheStore(max_count=100)),
            interceptors.deduplicate(),
        )

        first = cached.request(origin=origin, path="/catalog")
        first_body = first.body.text()
        second = cached.request(origin=origin, path="/catalog")
        results.append(check(
            "a fresh response is served from the store",
            second.body.text() == first_body and "age" in second.headers and served["/catalog"] == 1,
        ))

        cached.request(origin=origin, path="/profile").body.dump()
        again = cached.request(origin=origin, path="/profile")
        results.append(check(
            "a no-cache response is validated (304) and served from the store",
            again.body.text() == "profile p1" and served["/profile"] == 2,
        ))

        bodies: list[str] = []
        gevent.joinall([
            gevent.spawn(lambda: bodies.append(cached.request(origin=origin, path="/slow").body.text()))
            for _ in range(50)
        ], timeout=10)
        results.append(check(
            "50 concurrent requests made one request to the origin",
            bodies == ["slow answer"] * 50 and served["/slow"] == 1,
        ))

        cached.request(origin=origin, path="/catalog", method="POST", body=b"new item").body.dump()
        cached.request(origin=origin, path="/catalog").body.dump()
        results.append(check("a POST invalidates the stored response", served["/catalog"] == 2))

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "http-cache.sqlite")
            with SqliteCacheStore(path) as store:
                on_disk = agent.compose(interceptors.cache(store=store))
                on_disk.request(origin=origin, path="/catalog").body.dump()
            with SqliteCacheStore(path) as reopened:  # a restart, or another worker process
                again = agent.compose(interceptors.cache(store=reopened)).request(origin=origin, path="/catalog")
                results.append(check(
                    "the SQLite store survives a restart",
                    again.body.text() == "catalog v1" and "age" in again.headers and served["/catalog"] == 3,
                ))
    finally:
        agent.close()
        server.stop()
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
