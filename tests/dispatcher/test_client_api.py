"""The dispatcher API over HTTP/1.1: stream, pipeline, upgrade, connect, 1xx, trailers, pipelining.

Scripted servers check exact bytes; nginx checks the same paths against a real server.
"""

from __future__ import annotations

import socket as stdsocket

import gevent
import gevent.event
import pytest
from gevent import socket as gsocket

from greenhttp import errors
from testkit import response, serve_forever, wait_for

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


class Sink:
    """A writable recording what ``stream()`` writes into it and whether it was closed."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.parts.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    @property
    def data(self) -> bytes:
        return b"".join(self.parts)


class Waiter:
    """A ``callback(err, data)`` that records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, object]] = []
        self.done = gevent.event.Event()

    def __call__(self, err: object, data: object) -> None:
        self.calls.append((err, data))
        self.done.set()

    def wait(self) -> tuple[object, object]:
        assert self.done.wait(5), "callback never called"
        gevent.sleep(0)  # a second (wrong) call would land here
        assert len(self.calls) == 1
        return self.calls[0]


def chunked_with_trailers(parts: list[bytes], trailers: list[tuple[str, str]]) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"
    for p in parts:
        out += b"%x\r\n%s\r\n" % (len(p), p)
    out += b"0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in trailers) + b"\r\n"
    return out


def upgrade_or_answer(conn):
    """Echo after a 101 (with early bytes) for ``upgrade: echo``; answer other requests."""
    while True:
        req = conn.read_request()
        if req is None:
            return
        if (req.header("upgrade") or "").lower() == "echo":
            conn.send(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nEARLY")
            if conn.buf:
                conn.send(conn.buf)
                conn.buf = b""
            while True:
                data = conn.sock.recv(65536)
                if not data:
                    return
                conn.send(data)
        conn.respond(b"after")


# ---------------------------------------------------------------------------
# stream()
# ---------------------------------------------------------------------------


def test_stream_writes_body_and_returns_opaque_and_trailers(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(chunked_with_trailers([b"hello ", b"world"], [("X-Sum", "42")]))
        conn.read_request()
        conn.respond(b"again")

    server = make_server(handler)
    client = make_client(server.origin)
    sink = Sink()
    seen = []

    def factory(data):
        seen.append(data)
        return sink

    result = client.stream("/s", factory=factory, opaque={"id": 7})
    assert sink.data == b"hello world"
    assert sink.closed
    assert result.opaque == {"id": 7}
    assert result.trailers == {"x-sum": "42"}
    (data,) = seen
    assert data.status_code == 200
    assert data.opaque == {"id": 7}
    assert data.headers["transfer-encoding"] == "chunked"
    # the connection was reused
    assert client.request("/next").body.bytes() == b"again"
    assert server.accepted == 1


def test_stream_raw_response_headers(make_server, make_client):
    server = make_server(serve_forever(b"ok", headers=[("X-Case", "Kept")]))
    client = make_client(server.origin)
    seen = []

    def factory(data):
        seen.append(data.headers)
        return Sink()

    client.stream("/", factory=factory, response_headers="raw")
    assert seen == [[b"X-Case", b"Kept", b"Content-Length", b"2"]]


def test_stream_factory_returning_non_writable(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    with pytest.raises(errors.InvalidReturnValueError):
        client.stream("/", factory=lambda data: object())
    # the client is still usable afterwards
    assert client.request("/").body.bytes() == b"ok"


def test_stream_callback_form(make_server, make_client):
    server = make_server(serve_forever(b"cb"))
    client = make_client(server.origin)
    sink = Sink()
    waiter = Waiter()
    assert client.stream("/", factory=lambda d: sink, opaque="o", callback=waiter) is None
    err, data = waiter.wait()
    assert err is None
    assert data.opaque == "o"
    assert sink.data == b"cb" and sink.closed


def test_stream_slow_writable_applies_back_pressure(make_server, make_client):
    """While the writable stalls, the server's writes stall: the 16 MiB body is not buffered."""
    total = 16 * 1024 * 1024
    chunk = b"z" * 65536
    stalled = gevent.event.AsyncResult()

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
        sent = 0
        conn.sock.settimeout(0.5)
        while sent < total:
            try:
                sent += conn.sock.send(chunk[: min(len(chunk), total - sent)])
            except TimeoutError:
                if not stalled.ready():
                    stalled.set(sent)
                conn.sock.settimeout(None)
        conn.read_request()

    server = make_server(handler)
    client = make_client(server.origin)
    gate = gevent.event.Event()

    class SlowSink(Sink):
        def write(self, data: bytes) -> None:
            gate.wait()
            super().write(data)

    sink = SlowSink()
    g = gevent.spawn(client.stream, "/big", factory=lambda d: sink)
    sent_when_stalled = stalled.get(timeout=20)
    assert sent_when_stalled < total // 2
    gate.set()
    result = g.get(timeout=30)
    assert result.trailers == {}
    assert len(sink.data) == total
    assert sink.closed


def test_stream_closes_the_writable_when_the_response_is_cut(make_server, make_client, tmp_path):
    """The usual writable, an open file, is closed on failure too: no descriptor is left."""

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst ten.")
        conn.close()

    server = make_server(handler)
    client = make_client(server.origin)
    path = tmp_path / "out"
    files = []

    def factory(data):
        files.append(open(path, "wb"))  # noqa: SIM115 (stream() closes it)
        return files[0]

    with pytest.raises(errors.SocketError):
        client.stream("/", factory=factory)
    assert files[0].closed
    assert path.read_bytes() == b"first ten."


def test_stream_from_nginx(nginx, make_client):
    client = make_client(nginx.origin)
    sink = Sink()
    client.stream("/big", factory=lambda d: sink)
    assert sink.data == nginx.big and sink.closed


# ---------------------------------------------------------------------------
# pipeline()
# ---------------------------------------------------------------------------


def test_pipeline_duplex_round_trip(make_server, make_client):
    def handler(conn):
        req = conn.read_request()
        conn.respond(b"got:" + req.body)

    server = make_server(handler)
    client = make_client(server.origin)
    seen = []

    def on_response(data):
        seen.append(data)
        return data.body

    duplex = client.pipeline("/up", "POST", handler=on_response, opaque="p")
    duplex.write(b"abc")
    duplex.write("def")
    duplex.end(b"!")
    assert duplex.read(3) == b"got"
    assert b"".join(duplex) == b":abcdef!"
    duplex.close()
    (req,) = server.requests
    assert req.method == "POST"
    assert req.chunked
    assert req.body == b"abcdef!"
    assert seen[0].status_code == 200 and seen[0].opaque == "p"


def test_pipeline_read_all(make_server, make_client):
    def handler(conn):
        req = conn.read_request()
        conn.respond(req.body.upper())

    server = make_server(handler)
    client = make_client(server.origin)
    with client.pipeline("/", "PUT", handler=lambda d: d.body) as duplex:
        duplex.end(b"shout")
        assert duplex.read() == b"SHOUT"


def test_pipeline_handler_returning_non_readable(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    duplex = client.pipeline("/", "POST", handler=lambda d: 42)
    duplex.end(b"x")
    with pytest.raises(errors.InvalidReturnValueError):
        duplex.read()
    duplex.close()
    assert client.request("/").body.bytes() == b"ok"


def test_pipeline_close_tears_down_pending_request(make_server, make_client):
    heads = []

    def handler(conn):
        heads.append(conn.read_head())
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    duplex = client.pipeline("/", "POST", handler=lambda d: d.body)
    duplex.write(b"part")
    wait_for(lambda: heads, what="request head")
    duplex.close()
    assert server.conns[0].eof.wait(5), "the connection was not torn down"
    assert client.stats.size == 0


def test_pipeline_read_after_close_raises_aborted(make_server, make_client):
    heads = []

    def handler(conn):
        heads.append(conn.read_head())
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    duplex = client.pipeline("/", "POST", handler=lambda d: d.body)
    wait_for(lambda: heads, what="request head")
    duplex.close()
    assert server.conns[0].eof.wait(5)
    with pytest.raises(errors.RequestAbortedError):
        duplex.read()


# ---------------------------------------------------------------------------
# upgrade()
# ---------------------------------------------------------------------------


def test_upgrade_hands_over_socket_with_early_bytes(make_server, make_client):
    server = make_server(upgrade_or_answer)
    client = make_client(server.origin)
    data = client.upgrade("/chat", protocol="echo", opaque=5)
    try:
        assert data.opaque == 5
        assert data.headers["upgrade"] == "echo"
        assert data.socket.recv(5) == b"EARLY"
        data.socket.sendall(b"ping")
        assert data.socket.recv(64) == b"ping"
    finally:
        data.socket.close()
    req = server.requests[0]
    assert req.head == (
        b"GET /chat HTTP/1.1\r\nhost: 127.0.0.1:%d\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n" % server.port
    )
    # the socket left the client: the next request reconnects
    assert client.request("/").body.bytes() == b"after"
    assert server.accepted == 2


def test_upgrade_raw_headers_and_callback(make_server, make_client):
    server = make_server(upgrade_or_answer)
    client = make_client(server.origin)
    waiter = Waiter()
    assert client.upgrade("/", protocol="echo", response_headers="raw", callback=waiter, opaque="u") is None
    err, data = waiter.wait()
    assert err is None
    try:
        assert data.headers == [b"Upgrade", b"echo", b"Connection", b"Upgrade"]
        assert data.opaque == "u"
    finally:
        data.socket.close()


def test_upgrade_answered_without_101_is_a_socket_error(make_server, make_client):
    server = make_server(serve_forever(b"no"))
    client = make_client(server.origin)
    with pytest.raises(errors.SocketError):
        client.upgrade("/", protocol="echo")
    waiter = Waiter()
    client.upgrade("/", protocol="echo", callback=waiter, opaque="ctx")
    err, data = waiter.wait()
    assert isinstance(err, errors.SocketError) and data is None
    assert err.opaque == "ctx"


def test_unexpected_101_is_a_socket_error(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    with pytest.raises(errors.SocketError):
        client.request("/").body.bytes()


# ---------------------------------------------------------------------------
# connect()
# ---------------------------------------------------------------------------


def _pump(src, dst) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(stdsocket.SHUT_WR)
    except OSError:
        pass


def make_proxy(make_server, status: str = "200 Connection Established"):
    """A tiny CONNECT proxy: answers ``status`` and, on 2xx, tunnels to the requested target."""

    def handler(conn):
        req = conn.read_request()
        if req is None:
            return
        if not status.startswith("2"):
            conn.respond(b"auth", status=status, headers=[("Proxy-Authenticate", "Basic")])
            conn.wait_closed()
            return
        host, port = req.target.rsplit(":", 1)
        upstream = gsocket.create_connection((host, int(port)))
        conn.send(f"HTTP/1.1 {status}\r\nX-Proxy: tiny\r\n\r\n".encode())
        if conn.buf:
            upstream.sendall(conn.buf)
        back = gevent.spawn(_pump, upstream, conn.sock)
        _pump(conn.sock, upstream)
        back.join(5)
        upstream.close()

    return make_server(handler)


def test_connect_tunnels_both_ways(make_server, make_client):
    def echo_upper(conn):
        while True:
            data = conn.sock.recv(65536)
            if not data:
                return
            conn.send(data.upper())

    target = make_server(echo_upper)
    proxy = make_proxy(make_server)
    client = make_client(proxy.origin)
    data = client.connect(f"127.0.0.1:{target.port}", opaque="tun")
    try:
        assert data.status_code == 200
        assert data.headers["x-proxy"] == "tiny"
        assert data.opaque == "tun"
        data.socket.sendall(b"through")
        assert data.socket.recv(64) == b"THROUGH"
    finally:
        data.socket.close()
    req = proxy.requests[0]
    assert req.method == "CONNECT"
    assert req.target == f"127.0.0.1:{target.port}"
    assert target.accepted == 1


def test_connect_callback_and_raw_headers(make_server, make_client):
    target = make_server(lambda conn: conn.wait_closed())
    proxy = make_proxy(make_server)
    client = make_client(proxy.origin)
    waiter = Waiter()
    client.connect(f"127.0.0.1:{target.port}", response_headers="raw", callback=waiter)
    err, data = waiter.wait()
    assert err is None
    try:
        assert data.status_code == 200
        assert data.headers == [b"X-Proxy", b"tiny"]
    finally:
        data.socket.close()


def test_connect_407_is_a_response_error(make_server, make_client):
    proxy = make_proxy(make_server, status="407 Proxy Authentication Required")
    client = make_client(proxy.origin)
    with pytest.raises(errors.ResponseError) as info:
        client.connect("127.0.0.1:9")
    assert info.value.status_code == 407
    assert info.value.headers["proxy-authenticate"] == "Basic"


# ---------------------------------------------------------------------------
# request(): options, 1xx, trailers
# ---------------------------------------------------------------------------


def test_request_raw_headers_opaque_and_trailers(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(chunked_with_trailers([b"ab"], [("X-Sum", "1"), ("X-Sum", "2")]))

    server = make_server(handler)
    client = make_client(server.origin)
    resp = client.request("/", response_headers="raw", opaque=[1])
    assert resp.headers == [b"Transfer-Encoding", b"chunked", b"Trailer", b"X-Sum"]
    assert resp.opaque == [1]
    assert resp.body.bytes() == b"ab"
    # as in the original, trailers stay parsed whatever response_headers says
    assert resp.trailers == {"x-sum": ["1", "2"]}


def test_request_callback_called_once(make_server, make_client):
    server = make_server(serve_forever(b"fine"))
    client = make_client(server.origin)
    waiter = Waiter()
    assert client.request("/", callback=waiter, opaque="q") is None
    err, data = waiter.wait()
    assert err is None and data.opaque == "q"
    assert data.body.bytes() == b"fine"


def test_early_hints_reported_to_on_info_and_skipped(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n" + response(b"final"))
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    infos = []
    resp = client.request("/", on_info=infos.append)
    assert resp.status_code == 200
    assert resp.body.bytes() == b"final"
    assert infos == [{"status_code": 103, "headers": {"link": "</style.css>; rel=preload"}}]


def test_expect_continue_sends_body_after_100(make_server, make_client):
    before_100 = []

    def handler(conn):
        req = conn.read_head()
        before_100.append(conn.buf)  # nothing of the body yet
        conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        conn.read_body(req)
        conn.server.requests.append(req)
        conn.respond(b"stored")
        conn.read_request()
        conn.respond(b"reused")

    server = make_server(handler)
    client = make_client(server.origin)
    infos = []
    resp = client.request("/up", "PUT", body=b"payload", expect_continue=True, on_info=infos.append)
    assert resp.body.bytes() == b"stored"
    req = server.requests[0]
    assert req.header("expect") == "100-continue"
    assert req.body == b"payload"
    assert before_100 == [b""]
    assert client.request("/").body.bytes() == b"reused"
    assert server.accepted == 1


def test_expect_continue_early_final_response_skips_body(make_server, make_client):
    leftovers = []

    def handler(conn):
        req = conn.read_head()
        if req is None:
            return
        if req.header("expect"):
            conn.respond(b"too big", status="413 Content Too Large")
            conn.wait_closed()
            leftovers.append(conn.buf)
        else:
            conn.respond(b"fresh")

    server = make_server(handler)
    client = make_client(server.origin)
    resp = client.request("/", "POST", body=b"never sent", expect_continue=True)
    assert resp.status_code == 413
    assert resp.body.bytes() == b"too big"
    assert server.conns[0].eof.wait(5), "the connection was reused"
    assert leftovers == [b""]
    assert client.request("/").body.bytes() == b"fresh"
    assert server.accepted == 2


# ---------------------------------------------------------------------------
# pipelining (REFERENCE §3.3)
# ---------------------------------------------------------------------------


def hold_then_answer(n: int):
    """Read ``n`` requests before answering any; then answer each with its path."""

    def handler(conn):
        reqs = []
        while len(reqs) < n:
            req = conn.read_request()
            if req is None:
                return
            reqs.append(req)
        for req in reqs:
            conn.respond(req.target.encode())
        conn.wait_closed()

    return handler


def spawn_request(client, path, **kw):
    return gevent.spawn(lambda: client.request(path, **kw).body.bytes())


def test_non_blocking_gets_are_pipelined(make_server, make_client):
    server = make_server(hold_then_answer(3))
    client = make_client(server.origin, pipelining=4)
    gs = [spawn_request(client, f"/{i}", blocking=False) for i in range(3)]
    assert [g.get(timeout=5) for g in gs] == [b"/0", b"/1", b"/2"]
    assert server.accepted == 1


def test_idempotent_post_is_pipelined(make_server, make_client):
    server = make_server(hold_then_answer(2))
    client = make_client(server.origin, pipelining=4)
    g1 = spawn_request(client, "/a", blocking=False)
    g2 = spawn_request(client, "/b", method="POST", body=b"x", idempotent=True, blocking=False)
    assert g1.get(timeout=5) == b"/a" and g2.get(timeout=5) == b"/b"
    assert [r.body for r in server.requests] == [b"", b"x"]


def test_blocking_get_waits_for_the_previous_response_head(make_server, make_client):
    """A default GET is blocking: the next one goes once the head arrives, before the body ends."""
    second = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab")
        assert conn.read_request() is not None
        second.set()
        conn.send(b"cd")
        conn.respond(b"two")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, pipelining=4)
    first = client.request("/1")
    g = spawn_request(client, "/2")
    assert second.wait(5), "the second GET was not written before the first body ended"
    assert first.body.bytes() == b"abcd"
    assert g.get(timeout=5) == b"two"
    assert not server.errors


@pytest.mark.parametrize("kind", ["post", "upgrade", "connect"])
def test_not_pipelined_until_idle(make_server, make_client, kind):
    """POST, upgrade and CONNECT stay queued while a request is running."""
    release = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        release.wait(5)
        conn.respond(b"first")
        req = conn.read_request()
        if req is None:
            return
        if req.method == "CONNECT" or req.header("upgrade"):
            conn.send(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\n\r\n"
                      if req.header("upgrade") else b"HTTP/1.1 200 OK\r\n\r\n")
            conn.wait_closed()
        else:
            conn.respond(b"second")

    server = make_server(handler)
    client = make_client(server.origin, pipelining=4)
    g1 = spawn_request(client, "/", blocking=False)
    wait_for(lambda: len(server.requests) == 1, what="first request")
    if kind == "post":
        g2 = spawn_request(client, "/p", method="POST", body=b"x")
    elif kind == "upgrade":
        g2 = gevent.spawn(client.upgrade, "/u", protocol="echo")
    else:
        g2 = gevent.spawn(client.connect, "127.0.0.1:1")
    wait_for(lambda: client.stats.pending == 1, what="second request queued")
    assert client.stats.running == 1
    assert len(server.requests) == 1
    release.set()
    assert g1.get(timeout=5) == b"first"
    result = g2.get(timeout=5)
    assert len(server.requests) == 2
    if kind == "post":
        assert result == b"second"
    else:
        result.socket.close()


def test_reset_closes_after_the_response(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin, pipelining=4)
    assert client.request("/", reset=True).body.bytes() == b"ok"
    assert server.conns[0].eof.wait(5)
    assert client.request("/").body.bytes() == b"ok"
    assert server.accepted == 2


def test_pipelining_against_nginx(nginx, make_client):
    client = make_client(nginx.origin, pipelining=4)
    gs = [gevent.spawn(lambda: client.request("/", blocking=False)) for _ in range(8)]
    resps = [g.get(timeout=10) for g in gs]
    assert [r.body.bytes() for r in resps] == [nginx.small] * 8
    assert len({r.headers["x-conn"] for r in resps}) == 1
