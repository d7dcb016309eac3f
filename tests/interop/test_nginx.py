"""greenhttp against a real nginx (the ``nginx`` fixture in tests/conftest.py)."""

from __future__ import annotations

import gzip

import gevent
import pytest

import greenhttp


@pytest.fixture
def client(nginx):
    clients = []

    def make(**options):
        c = greenhttp.Client(nginx.origin, **options)
        clients.append(c)
        return c

    yield make
    for c in clients:
        with gevent.Timeout(5):
            c.destroy()


def test_small_body(nginx, client):
    r = client().request(path="/")
    assert r.status_code == 200
    assert r.headers["content-length"] == "100"
    assert r.headers["server"].startswith("nginx")
    assert r.body.bytes() == nginx.small


def test_keep_alive_reuses_one_connection(nginx, client):
    c = client()
    conns = set()
    for _ in range(20):
        r = c.request(path="/")
        conns.add(r.headers["x-conn"])
        r.body.dump()
    assert len(conns) == 1


def test_keep_alive_hint_is_honoured(nginx, client):
    # Keep-Alive: timeout=3 minus a threshold of 2.5 s: the client closes after ~0.5 s idle.
    c = client(keep_alive_timeout_threshold=2.5)
    disconnects = gevent.event.Event()
    c.on("disconnect", lambda *a: disconnects.set())
    r = c.request(path="/keepalive-hint")
    assert r.headers["keep-alive"] == "timeout=3"
    first = r.headers["x-conn"]
    r.body.dump()
    assert disconnects.wait(2)
    r = c.request(path="/keepalive-hint")
    assert r.headers["x-conn"] != first
    r.body.dump()


def test_pipelining_64_greenlets(nginx, client):
    c = client(pipelining=8)
    conns = set()

    def one(i):
        r = c.request(path="/" if i % 2 else "/echo", blocking=False)
        conns.add(r.headers["x-conn"])
        return r.body.bytes()

    gs = [gevent.spawn(one, i) for i in range(64)]
    gevent.joinall(gs, timeout=20, raise_error=True)
    assert [g.value for g in gs] == [nginx.small if i % 2 else b"ok" for i in range(64)]
    assert len(conns) == 1


def test_one_mib_body(nginx, client):
    c = client()
    for _ in range(3):
        r = c.request(path="/big")
        assert r.headers["content-length"] == str(1024 * 1024)
        assert r.body.bytes() == nginx.big


def test_one_mib_body_streamed(nginx, client):
    r = client().request(path="/big")
    got = bytearray()
    for chunk in r.body:
        got += chunk
    assert bytes(got) == nginx.big


def test_chunked(nginx, client):
    r = client().request(path="/chunked", headers={"accept-encoding": "gzip"})
    assert r.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in r.headers
    assert r.headers["content-encoding"] == "gzip"
    assert gzip.decompress(r.body.bytes()) == nginx.chunked_source


def test_post_to_echo(nginx, client):
    c = client()
    r = c.request(path="/echo", method="POST", body=b"payload" * 1000)
    assert r.status_code == 200 and r.body.text() == "ok"
    r = c.request(path="/echo", method="POST", body=iter([b"a", b"b"]))
    assert r.status_code == 200 and r.body.text() == "ok"


def test_head(nginx, client):
    r = client().request(path="/big", method="HEAD")
    assert r.headers["content-length"] == str(1024 * 1024)
    assert r.body.bytes() == b""


def test_100_concurrent_greenlets_on_one_client(nginx, client):
    c = client()
    conns = set()

    def one(i):
        r = c.request(path="/big" if i % 10 == 0 else "/")
        conns.add(r.headers["x-conn"])
        return len(r.body.bytes())

    gs = [gevent.spawn(one, i) for i in range(100)]
    gevent.joinall(gs, timeout=30, raise_error=True)
    assert [g.value for g in gs] == [1024 * 1024 if i % 10 == 0 else 100 for i in range(100)]
    assert len(conns) == 1
    assert c.stats.size == 0


def test_404(nginx, client):
    r = client().request(path="/missing")
    assert r.status_code == 404
    assert r.status_text == "Not Found"
    r.body.dump()
