"""Audit of dns, deduplicate and response_error: behaviour found correct, pinned.

Through the public request() API rather than raw handlers: slow, fast and
early-closing readers of one deduplicated response; the default lookup on
``localhost``; dns and deduplicate composed; response_error behind
deduplicate.
"""

from __future__ import annotations

import json
import os

import gevent
import gevent.event
import pytest

from greenhttp import interceptors
from greenhttp.errors import ResponseError


def test_fast_slow_and_early_closing_readers_of_one_deduplicated_request(gated, make_client):
    body = os.urandom(3_000_000)
    server = gated(body=body)
    d = make_client(server.origin).compose(interceptors.deduplicate())
    got: dict[str, object] = {}

    def fast():
        got["fast"] = d.request(path="/").body.bytes()

    def slow():
        r = d.request(path="/")
        out = bytearray()
        while chunk := r.body.read(65536):
            out += chunk
            gevent.sleep(0.001)
        got["slow"] = bytes(out)

    def early():
        r = d.request(path="/")
        got["early"] = r.body.read(1000)
        r.body.close()

    greenlets = [gevent.spawn(fn) for fn in (fast, slow, early)]
    gevent.idle()
    server.gate.set()
    gevent.joinall(greenlets, timeout=10, raise_error=True)
    assert got["fast"] == body and got["slow"] == body and got["early"] == body[:1000]
    assert len(server.requests) == 1
    with gevent.Timeout(5):
        assert d.request(path="/").body.bytes() == body  # the group is gone: a new request goes out
    assert len(server.requests) == 2


def test_localhost_through_the_default_lookup_reaches_an_ipv4_only_server(make_server, make_agent):
    # localhost may also resolve to ::1, where nothing listens: that address is
    # dropped after the refusal and the request retried on 127.0.0.1.
    def handler(conn):
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond((req.header("host") or "").encode())

    server = make_server(handler)
    d = make_agent().compose(interceptors.dns())
    with gevent.Timeout(5):
        for _ in range(4):
            assert d.request(origin=f"http://localhost:{server.port}", path="/").body.text() == f"localhost:{server.port}"
    assert server.accepted == 1


def test_dns_behind_deduplicate_one_lookup_and_one_request(make_server, make_agent):
    def handler(conn):
        while conn.read_request() is not None:
            conn.respond(b"shared")

    server = make_server(handler)
    lookups: list[str] = []

    def slow(origin, options, callback):
        lookups.append(origin.hostname)
        gevent.spawn_later(0.02, callback, None, [{"address": "127.0.0.1", "family": 4, "port": server.port}])

    d = make_agent().compose(interceptors.deduplicate(), interceptors.dns(lookup=slow))
    bodies: list[bytes] = []
    greenlets = [gevent.spawn(lambda: bodies.append(d.request(origin="http://one.test", path="/").body.bytes()))
                 for _ in range(10)]
    gevent.joinall(greenlets, timeout=10, raise_error=True)
    assert bodies == [b"shared"] * 10 and lookups == ["one.test"] and len(server.requests) == 1


@pytest.mark.parametrize("n", [1, 5])
def test_response_error_behind_deduplicate_fails_every_caller_and_keeps_the_connection(routes, make_client, n):
    gate = gevent.event.Event()

    def not_found(conn, req):
        gate.wait(5)
        conn.respond(json.dumps({"missing": req.target}).encode(), status="404 Not Found",
                     headers=[("Content-Type", "application/json")])

    server = routes({"/gone": not_found, "/ok": lambda conn, req: conn.respond(b"ok")})
    d = make_client(server.origin).compose(interceptors.deduplicate(), interceptors.response_error())
    errors: list[BaseException] = []

    def one():
        try:
            d.request(path="/gone")
        except ResponseError as exc:
            errors.append(exc)

    greenlets = [gevent.spawn(one) for _ in range(n)]
    gevent.idle()
    gate.set()
    gevent.joinall(greenlets, timeout=10, raise_error=True)
    assert len(errors) == n and all((e.status_code, e.body) == (404, {"missing": "/gone"}) for e in errors)
    with gevent.Timeout(5):
        assert d.request(path="/ok").body.text() == "ok"
    assert len(server.requests) == 2 and server.accepted == 1
