"""Audit of what Client options *do* against a real peer (spec §2.1, §8; REFERENCE §3).

Only behaviours no other test pins: the options' validation is in
tests/test_options_audit.py, most of their behaviour in test_client_connection.py,
test_h1_rfc_audit.py and the h2 tests.
"""

from __future__ import annotations

import gevent
import gevent.event
import h2.config
import h2.connection
import h2.events
import pytest
from gevent import select
from gevent.server import StreamServer

from greenhttp.errors import RequestContentLengthMismatchError, ResponseExceededMaxSizeError
from h2_support.h2server import H2ServerConn
from testkit import wait_for

pytest_plugins = ["h2_support.fixtures"]

T = 5.0  # the bound of every wait


def _body(length):
    """A streamed body of unknown length (a generator), in two chunks."""

    def gen():
        yield b"a" * (length - length // 2)
        yield b"a" * (length // 2)

    return gen()


# ---------------------------------------------------------------------------
# strict_content_length=False and a streamed body
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("sent", [5, 15])
def test_a_streamed_body_that_disagrees_with_its_declared_length_fails_either_way_on_h1(
    make_server, make_client, strict, sent
):
    """docs/errors.md: a streamed body's real length is known only once it has been
    sent, so it cannot replace the declared one; whatever strict_content_length says,
    the request fails, no byte past the declared length reaches the server, and the
    connection is not reused."""
    received: gevent.event.AsyncResult = gevent.event.AsyncResult()

    def handler(conn):
        req = conn.read_head()
        if req is None:
            return
        closed = conn.wait_closed()
        received.set((req.header("content-length"), conn.buf, closed))

    server = make_server(handler)
    client = make_client(server.origin, strict_content_length=strict)
    with gevent.Timeout(T), pytest.raises(RequestContentLengthMismatchError):
        client.request(path="/", method="POST", body=_body(sent), headers={"content-length": "10"}).body.bytes()
    declared, body, closed = received.get(timeout=T)
    assert closed
    assert declared == "10"
    assert len(body) < 10  # never the declared length (a complete, wrong request), never more


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("sent", [5, 15])
def test_a_streamed_body_that_disagrees_with_its_declared_length_fails_either_way_on_h2(
    make_h2_server, make_h2c, strict, sent
):
    def handler(conn: H2ServerConn) -> None:
        conn.closed.wait(T)

    server = make_h2_server(handler)
    client = make_h2c(server.origin, strict_content_length=strict)
    with gevent.Timeout(T), pytest.raises(RequestContentLengthMismatchError):
        client.request(path="/", method="POST", body=_body(sent), headers={"content-length": "10"}).body.bytes()
    req = server.conns[0].opened.get(timeout=T)
    assert req.header("content-length") == "10"
    assert req.done.wait(T) and req.reset_code is not None  # the stream was reset, not ended
    assert len(req.body) < 10 and not req.ended


# ---------------------------------------------------------------------------
# max_response_size: the exact limit, on a body without a length
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [10, 9])
def test_max_response_size_on_a_body_read_to_eof(make_server, make_client, limit):
    """A body delimited by the connection's end is held to max_response_size too:
    exactly the limit passes, one byte over fails."""

    def handler(conn):
        if conn.read_request() is None:
            return
        conn.send(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + b"x" * 5)
        gevent.sleep(0.02)  # two reads, so the limit is checked on a running total
        conn.send(b"x" * 5)
        conn.close()

    server = make_server(handler)
    client = make_client(server.origin, max_response_size=limit)
    with gevent.Timeout(T):
        if limit >= 10:
            assert client.request(path="/").body.bytes() == b"x" * 10
        else:
            with pytest.raises(ResponseExceededMaxSizeError):
                client.request(path="/").body.bytes()


@pytest.mark.parametrize("limit", [10, 9])
def test_max_response_size_on_an_h2_body_without_content_length(make_h2_server, make_h2c, limit):
    def handler(conn: H2ServerConn) -> None:
        while True:
            req = conn.next_request(timeout=T)
            if req is None:
                return
            conn.send_headers(req.stream_id, 200, [])
            conn.send_body(req.stream_id, b"x" * 5, end=False)
            conn.send_body(req.stream_id, b"x" * 5, end=True)

    server = make_h2_server(handler)
    client = make_h2c(server.origin, max_response_size=limit)
    with gevent.Timeout(T):
        for _ in range(2):  # a stream that failed leaves the session usable
            if limit >= 10:
                assert client.request(path="/").body.bytes() == b"x" * 10
            else:
                with pytest.raises(ResponseExceededMaxSizeError):
                    client.request(path="/").body.bytes()
    assert server.accepted == 1


# ---------------------------------------------------------------------------
# max_requests_per_client with pipelining
# ---------------------------------------------------------------------------


def test_max_requests_per_client_caps_a_pipelined_connection(make_server, make_client):
    """REFERENCE §3.5: the counter is per socket, and the request that reaches it
    says connection: close; pipelined requests behind it go to a new connection."""

    def handler(conn):
        n = len(conn.server.conns)
        while True:
            req = conn.read_request()
            if req is None:
                return
            req.conn = n  # type: ignore[attr-defined]
            conn.respond(b"ok")

    server = make_server(handler)
    client = make_client(server.origin, pipelining=3, max_requests_per_client=2)
    jobs = [
        gevent.spawn(lambda i=i: client.request(path=f"/{i}", blocking=False).body.bytes()) for i in range(5)
    ]
    gevent.joinall(jobs, timeout=T, raise_error=True)
    assert [j.value for j in jobs] == [b"ok"] * 5
    got = sorted((r.target, r.conn, r.header("connection")) for r in server.requests)  # type: ignore[attr-defined]
    by_conn: dict[int, list[str | None]] = {}
    for _target, conn, connection in got:
        by_conn.setdefault(conn, []).append(connection)
    assert sorted(len(v) for v in by_conn.values()) == [1, 2, 2]
    for headers in by_conn.values():
        if len(headers) == 2:
            assert sorted(headers, key=str) == ["close", "keep-alive"]


# ---------------------------------------------------------------------------
# what is never pipelined (REFERENCE §3.3), whatever pipelining allows
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "second, pipelined",
    [
        ({"method": "GET"}, True),
        ({"method": "GET", "idempotent": False}, False),
        ({"method": "GET", "body": "stream"}, False),
    ],
    ids=["get", "get-marked-non-idempotent", "get-with-a-streamed-body"],
)
def test_a_request_goes_behind_another_only_if_it_may_be_pipelined(make_server, make_client, second, pipelined):
    """With pipelining=3, a GET goes out while the first answer is awaited; one
    marked idempotent=False, or with a streamed body, waits for an idle connection."""
    first_read = gevent.event.Event()
    answer = gevent.event.Event()
    seen = {}

    def handler(conn):
        while True:
            req = conn.read_request()
            if req is None:
                return
            if req.target == "/first":
                first_read.set()
                answer.wait(T)
                seen["queued_behind"] = bool(conn.buf) or bool(select.select([conn.sock], [], [], 0)[0])
            conn.respond(b"ok")

    server = make_server(handler)
    client = make_client(server.origin, pipelining=3)
    first = gevent.spawn(lambda: client.request(path="/first", blocking=False).body.bytes())
    assert first_read.wait(T)
    kw = dict(second)
    if kw.get("body") == "stream":
        kw["body"] = iter([b"x"])
    nxt = gevent.spawn(lambda: client.request(path="/second", blocking=False, **kw).body.bytes())
    if pipelined:
        wait_for(lambda: client.stats.running == 2, what="the second request written")
    else:
        wait_for(lambda: client.stats.pending == 1, what="the second request queued")
    answer.set()
    gevent.joinall([first, nxt], timeout=T, raise_error=True)
    assert first.value == nxt.value == b"ok"
    assert seen["queued_behind"] is pipelined
    assert server.accepted == 1


# ---------------------------------------------------------------------------
# HTTP/2: one stream until the server's SETTINGS say how many (REFERENCE §5)
# ---------------------------------------------------------------------------


def test_h2_opens_one_stream_until_the_servers_settings_arrive(make_h2c):
    """max_concurrent_streams is the ceiling only once the server's SETTINGS are
    in: before them at most one stream is opened, however many requests wait."""
    go = gevent.event.Event()
    before: list[int] = []

    def handle(sock, _addr):
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        preface = conn.data_to_send()  # held back until the test says so
        opened: list[int] = []
        while True:
            if go.is_set() and preface:
                before.append(len(opened))
                sock.sendall(preface)
                preface = b""
            if not select.select([sock], [], [], 0.01)[0]:
                continue
            data = sock.recv(65536)
            if not data:
                return
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.RequestReceived):
                    opened.append(ev.stream_id)
            if not preface:
                for sid in opened:
                    conn.send_headers(sid, [(":status", "200"), ("content-length", "2")])
                    conn.send_data(sid, b"ok", end_stream=True)
                opened.clear()
                sock.sendall(conn.data_to_send())

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    try:
        client = make_h2c(f"http://127.0.0.1:{server.server_port}", max_concurrent_streams=10)
        jobs = [gevent.spawn(lambda: client.request(path="/").body.bytes()) for _ in range(5)]
        wait_for(lambda: client.stats.running == 1 and client.stats.pending == 4, what="one stream open")
        gevent.sleep(0.05)  # time for a wrongly opened second stream to reach the server
        assert client.stats.running == 1
        go.set()
        gevent.joinall(jobs, timeout=T, raise_error=True)
        assert [j.value for j in jobs] == [b"ok"] * 5
        assert before == [1]
    finally:
        server.stop()
