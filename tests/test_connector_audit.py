"""Audit tests: build_connector (TCP, TLS, unix sockets, happy eyeballs) and ``interceptors.dns``."""

from __future__ import annotations

from typing import Any

import gevent
import pytest

import greenhttp
from greenhttp import interceptors
from greenhttp._core.dns_records import DNSStorage


def fixed(*records: dict[str, Any], counter: list[str] | None = None) -> Any:
    def lookup(origin: Any, options: dict[str, Any], callback: Any) -> None:
        if counter is not None:
            counter.append(origin.hostname)
        callback(None, [dict(r) for r in records])

    return lookup


def echo_host(conn: Any) -> None:
    while True:
        req = conn.read_request()
        if req is None:
            return
        conn.respond((req.header("host") or "").encode())


@pytest.fixture
def agent() -> Any:
    a = greenhttp.Agent()
    yield a
    with gevent.Timeout(5):
        a.destroy()


# --------------------------------------------------------------------------- dns interceptor


def test_dns_a_zero_ttl_record_serves_the_request_that_looked_it_up(make_server: Any) -> None:
    # RFC 1035 section 3.2.1: TTL 0 means "use only for the transaction in
    # progress, do not cache": the request that triggered the lookup must use it.
    calls: list[str] = []
    sink: list[str] = []
    storage = DNSStorage()
    d = interceptors.dns(
        lookup=fixed({"address": "1.1.1.1", "family": 4, "ttl": 0}, counter=calls), storage=storage
    )(lambda opts, handler: sink.append(opts["origin"]) or True)

    class Handler:
        errors: list[BaseException] = []

        def on_response_error(self, controller: Any, err: BaseException) -> None:
            self.errors.append(err)

    for _ in range(3):
        d({"origin": "http://zero.test", "path": "/", "method": "GET"}, Handler())
    assert Handler.errors == []
    assert sink == ["http://1.1.1.1"] * 3
    assert calls == ["zero.test"] * 3  # never cached: each request looks the name up again
