"""Keep-alive, pipelining, resets, timeouts and limits against scripted servers."""

from __future__ import annotations

import socket as stdsocket
import time

import gevent
import gevent.event
import gevent.select
import pytest

from greenhttp import errors
from testkit import serve_forever, wait_for

# -- keep-alive -------------------------------------------------------------------------


def test_sequential_requests_reuse_one_connection(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    for i in range(10):
        assert client.request(path=f"/{i}").body.text() == "ok"
    assert server.accepted == 1
    assert [r.header("connection") for r in server.requests] == ["keep-alive"] * 10


def test_a_stray_crlf_after_a_body_does_not_spoil_the_next_response(make_server, make_client):
    # llhttp skips empty lines before a message; the connection stays in use.
    def handler(conn):
        while (req := conn.read_request()) is not None:
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n" + req.target[-1:].encode() + b"\r\n")

    server = make_server(handler)
    client = make_client(server.origin)
    assert [client.request(path=f"/{i}").body.bytes() for i in range(3)] == [b"0", b"1", b"2"]
    assert server.accepted == 1


@pytest.mark.parametrize("pipelining", [1, 2])
def test_junk_instead_of_a_status_line_fails_the_request_at_once(make_server, make_client, pipelining):
    # undici's issue-810 test: the first response has more body than announced; the
    # rest cannot start a response, so the next request fails with HTTPParserError
    # at once, not after its headers timeout (the junk ends without a blank line).
    def handler(conn):  # as the original's: one write per connection, whatever comes
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n11111\r\n")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, pipelining=pipelining, headers_timeout=30)
    first = gevent.spawn(lambda: client.request(path="/1").body.bytes())
    second = gevent.spawn(lambda: client.request(path="/2").body.bytes())
    with gevent.Timeout(5):
        assert first.get() == b"1"
        with pytest.raises(errors.HTTPParserError, match="invalid status line"):
            second.get()


def _time_until_client_closes(server, conn_index=0, timeout=5.0):
    t0 = time.monotonic()
    assert server.conns[conn_index].eof.wait(timeout), "the client never closed the connection"
    return time.monotonic() - t0


def test_keep_alive_hint_minus_threshold_sets_the_idle_timeout(make_server, make_client):
    server = make_server(serve_forever(b"ok", headers=[("Keep-Alive", "timeout=1")]))
    client = make_client(server.origin, keep_alive_timeout_threshold=0.5)
    client.request(path="/").body.dump()
    elapsed = _time_until_client_closes(server)
    assert 0.35 <= elapsed < 0.95, elapsed  # 1 s hint - 0.5 s threshold (default would be 4 s)
    client.request(path="/").body.dump()
    assert server.accepted == 2


def test_keep_alive_hint_not_above_threshold_closes_after_the_response(make_server, make_client):
    server = make_server(serve_forever(b"ok", headers=[("Keep-Alive", "timeout=1")]))
    client = make_client(server.origin)  # threshold 2 s > the 1 s hint
    client.request(path="/").body.dump()
    assert _time_until_client_closes(server) < 0.3
    client.request(path="/").body.dump()
    assert server.accepted == 2


def test_keep_alive_timeout_without_hint(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin, keep_alive_timeout=0.3)
    client.request(path="/").body.dump()
    elapsed = _time_until_client_closes(server)
    assert 0.2 <= elapsed < 0.9, elapsed


def test_keep_alive_max_timeout_caps_the_hint(make_server, make_client):
    server = make_server(serve_forever(b"ok", headers=[("Keep-Alive", "timeout=100")]))
    client = make_client(server.origin, keep_alive_timeout_threshold=0, keep_alive_max_timeout=0.3)
    client.request(path="/").body.dump()
    elapsed = _time_until_client_closes(server)
    assert 0.2 <= elapsed < 0.9, elapsed


def test_server_connection_close_means_a_new_connection(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.respond(b"bye", headers=[("Connection", "close")])
        conn.close()

    server = make_server(handler)
    client = make_client(server.origin)
    assert client.request(path="/").body.text() == "bye"
    assert client.request(path="/").body.text() == "bye"
    assert server.accepted == 2


def test_http10_response_without_keep_alive(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.0 200 OK\r\n\r\nuntil close")
        conn.close()

    server = make_server(handler)
    client = make_client(server.origin)
    assert client.request(path="/").body.text() == "until close"
    assert client.request(path="/").body.text() == "until close"
    assert server.accepted == 2


def test_server_closing_an_idle_connection_is_not_an_error(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.respond(b"one")
        conn.close()

    server = make_server(handler)
    client = make_client(server.origin)
    errs = []
    client.on("error", errs.append)
    assert client.request(path="/").body.text() == "one"
    wait_for(lambda: not client.stats.connected, what="the client to see the close")
    assert client.request(path="/").body.text() == "one"
    assert errs == []


# -- pipelining -------------------------------------------------------------------------


def _has_pending_bytes(conn, wait=0.05):
    """True if the client sent more bytes than the server has read (peek, never consume)."""
    if conn.buf:
        return True
    gevent.sleep(wait)
    readable, _, _ = gevent.select.select([conn.sock], [], [], 0)
    return bool(readable)


def test_pipelining_1_writes_the_next_request_after_the_response(make_server, make_client):
    early = []

    def handler(conn):
        while (req := conn.read_request()) is not None:
            early.append(_has_pending_bytes(conn))
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin, pipelining=1)
    greenlets = [gevent.spawn(lambda i=i: client.request(path=f"/{i}").body.text()) for i in range(3)]
    assert [g.get(timeout=5) for g in greenlets] == ["/0", "/1", "/2"]
    assert early == [False, False, False]
    assert server.accepted == 1


def test_pipelining_writes_requests_before_responses(make_server, make_client):
    def handler(conn):
        reqs = []
        with gevent.Timeout(3, False):
            while len(reqs) < 3:
                reqs.append(conn.read_request())
        assert len(reqs) == 3, "the client did not pipeline"
        for r in reqs:
            conn.respond(r.target.encode())
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, pipelining=3)
    greenlets = [
        gevent.spawn(lambda i=i: client.request(path=f"/{i}", blocking=False).body.text()) for i in range(3)
    ]
    assert [g.get(timeout=5) for g in greenlets] == ["/0", "/1", "/2"]
    assert server.errors == []


def test_a_handler_blocking_the_reader_does_not_hold_back_the_caller_answered_before(make_server, make_client):
    # Both responses arrive in one read. The reader answers the request() caller
    # first (its wake-up is kept until the reader parks on the socket), then runs
    # a dispatch handler that blocks until that caller has run: the wake-up must
    # reach the caller through the hub, or both wait for each other.
    def handler(conn):
        reqs = []
        with gevent.Timeout(3, False):
            while len(reqs) < 2:
                reqs.append(conn.read_request())
        assert len(reqs) == 2, "the client did not pipeline"
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirstHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, pipelining=2)
    caller_ran = gevent.event.Event()
    done = gevent.event.AsyncResult()

    class Blocking:
        def on_response_start(self, controller, status, headers, message):
            done.set(caller_ran.wait(3))  # blocks the reader greenlet

        def on_response_data(self, controller, chunk):
            pass

        def on_response_end(self, controller, trailers):
            pass

        def on_response_error(self, controller, err):
            done.set_exception(err)

    def first():
        text = client.request(path="/1", blocking=False).body.text()
        caller_ran.set()
        return text

    g = gevent.spawn(first)
    gevent.sleep(0)
    client.dispatch({"path": "/2", "method": "GET", "blocking": False}, Blocking())
    assert g.get(timeout=5) == "first"
    assert done.get(timeout=5) is True, "the reader blocked before the caller it answered could run"
    assert server.errors == []


def test_blocking_requests_pipeline_after_the_response_head(make_server, make_client):
    seen_before_body = []

    def handler(conn):
        r1 = conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
        # The head arrived: the next (blocking, the default) request may now be written.
        with gevent.Timeout(3, False):
            r2 = conn.read_request()
            seen_before_body.append(r2.target)
        conn.send(r1.target[-1].encode() + b"!")
        conn.respond(b"second")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, pipelining=2)
    g1 = gevent.spawn(lambda: client.request(path="/1").body.text())
    g2 = gevent.spawn(lambda: client.request(path="/2").body.text())
    assert g1.get(timeout=5) == "1!"
    assert g2.get(timeout=5) == "second"
    assert seen_before_body == ["/2"]


def test_non_idempotent_requests_are_not_pipelined(make_server, make_client):
    early = {}

    def handler(conn):
        while (req := conn.read_request()) is not None:
            early[req.target] = _has_pending_bytes(conn)
            conn.respond(req.method.encode())

    server = make_server(handler)
    client = make_client(server.origin, pipelining=10)
    g1 = gevent.spawn(lambda: client.request(path="/get1", blocking=False).body.text())
    g2 = gevent.spawn(lambda: client.request(path="/post", method="POST", body=b"x", blocking=False).body.text())
    g3 = gevent.spawn(lambda: client.request(path="/get2", blocking=False).body.text())
    assert sorted([g1.get(timeout=5), g2.get(timeout=5), g3.get(timeout=5)]) == ["GET", "GET", "POST"]
    order = [r.target for r in server.requests]
    # The POST is never written while another request is in flight: when the server
    # reads the request before it, nothing else has arrived yet. (What follows the
    # POST may be pipelined behind it: it was sent with blocking=False.)
    i = order.index("/post")
    if i > 0:
        assert early[order[i - 1]] is False, (order, early)


def test_pipelining_0_sends_connection_close(make_server, make_client):
    def handler(conn):
        req = conn.read_request()
        conn.respond(b"ok")
        assert req.header("connection") == "close"
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, pipelining=0)
    for _ in range(3):
        with gevent.Timeout(3):
            assert client.request(path="/").body.text() == "ok"
    assert server.accepted == 3
    assert [r.header("connection") for r in server.requests] == ["close"] * 3
    assert server.errors == []


def test_max_requests_per_client(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin, max_requests_per_client=2)
    for _ in range(4):
        assert client.request(path="/").body.text() == "ok"
    assert server.accepted == 2
    assert [r.header("connection") for r in server.requests] == ["keep-alive", "close"] * 2


def test_reset_true_closes_after_the_response(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    assert client.request(path="/", reset=True).body.text() == "ok"
    assert server.requests[0].header("connection") == "close"
    assert server.conns[0].eof.wait(2)
    assert client.request(path="/").body.text() == "ok"
    assert server.accepted == 2


def test_pipelining_can_be_raised_at_runtime(make_server, make_client):
    def handler(conn):
        reqs = []
        with gevent.Timeout(3, False):
            while len(reqs) < 2:
                reqs.append(conn.read_request())
        for r in reqs:
            conn.respond(r.target.encode())
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, pipelining=1)
    client.pipelining = 2
    gs = [gevent.spawn(lambda i=i: client.request(path=f"/{i}", blocking=False).body.text()) for i in range(2)]
    assert [g.get(timeout=5) for g in gs] == ["/0", "/1"]


# -- timeouts ---------------------------------------------------------------------------


def _silent_server(make_server):
    def handler(conn):
        conn.read_request()
        conn.wait_closed()

    return make_server(handler)


def test_headers_timeout(make_server, make_client):
    server = _silent_server(make_server)
    client = make_client(server.origin, headers_timeout=0.2)
    t0 = time.monotonic()
    with pytest.raises(errors.HeadersTimeoutError) as info:
        client.request(path="/")
    elapsed = time.monotonic() - t0
    assert 0.15 <= elapsed < 1.5, elapsed
    assert isinstance(info.value, TimeoutError)
    assert info.value.code == "GH_ERR_HEADERS_TIMEOUT"
    assert server.conns[0].eof.wait(2)


def test_headers_timeout_per_request(make_server, make_client):
    server = _silent_server(make_server)
    client = make_client(server.origin)
    with pytest.raises(errors.HeadersTimeoutError):
        client.request(path="/", headers_timeout=0.2)


def test_headers_timeout_after_a_partial_head(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nX: y")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, headers_timeout=0.3)
    with pytest.raises(errors.HeadersTimeoutError):
        client.request(path="/")


def test_body_timeout(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, body_timeout=0.2)
    r = client.request(path="/")
    t0 = time.monotonic()
    with pytest.raises(errors.BodyTimeoutError) as info:
        r.body.bytes()
    assert 0.1 <= time.monotonic() - t0 < 1.5
    assert isinstance(info.value, TimeoutError)
    assert info.value.code == "GH_ERR_BODY_TIMEOUT"


def test_body_timeout_is_between_chunks(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
        for b in b"0123456789":
            gevent.sleep(0.05)
            conn.send(bytes([b]))
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, body_timeout=0.2)
    assert client.request(path="/").body.bytes() == b"0123456789"  # 0.5 s in all, 0.05 s gaps


@pytest.mark.parametrize("option", ["headers_timeout", "body_timeout"])
def test_zero_disables_the_timeout(make_server, make_client, option):
    def handler(conn):
        conn.read_request()
        if option == "headers_timeout":
            gevent.sleep(0.3)
            conn.respond(b"late")
        else:
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nla")
            gevent.sleep(0.3)
            conn.send(b"te")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, **{option: 0})
    assert client.request(path="/").body.text() == "late"


def test_a_paused_body_does_not_time_out(make_server, make_client):
    server = make_server(serve_forever(b"p" * 2_000_000))
    client = make_client(server.origin, body_timeout=0.15)
    r = client.request(path="/")
    assert r.body.read(1) == b"p"
    gevent.sleep(0.4)  # unread: the body is paused, the timer must not fire
    assert len(r.body.read()) == 2_000_000 - 1


def test_connect_timeout(make_client):
    # A listening socket whose accept queue is full: further SYNs are dropped.
    listener = stdsocket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):
            s = stdsocket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            fillers.append(s)
        client = make_client(f"http://127.0.0.1:{port}", connect_timeout=0.2)
        t0 = time.monotonic()
        with pytest.raises(errors.ConnectTimeoutError) as info:
            client.request(path="/")
        assert 0.15 <= time.monotonic() - t0 < 2
        assert isinstance(info.value, TimeoutError)
        assert info.value.code == "GH_ERR_CONNECT_TIMEOUT"
    finally:
        for s in fillers:
            s.close()
        listener.close()


def test_connect_refused_fails_every_queued_request(make_client):
    s = stdsocket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    client = make_client(f"http://127.0.0.1:{port}")
    results = []

    def run(i):
        try:
            client.request(path=f"/{i}")
        except Exception as exc:
            results.append(exc)

    gs = [gevent.spawn(run, i) for i in range(4)]
    gevent.joinall(gs, timeout=5)
    assert len(results) == 4
    assert all(isinstance(e, ConnectionRefusedError) for e in results), results
    disconnects = []
    client.on("disconnect", lambda *a: disconnects.append(a))
    with pytest.raises(ConnectionRefusedError):
        client.request(path="/")
    assert disconnects == []  # never connected: no disconnect


# -- limits -----------------------------------------------------------------------------


def test_max_header_size(make_server, make_client):
    def handler(conn):
        while conn.read_request() is not None:
            conn.respond(b"x", headers=[("X-Big", "b" * 2000)])

    server = make_server(handler)
    client = make_client(server.origin, max_header_size=1024)
    with pytest.raises(errors.HeadersOverflowError) as info:
        client.request(path="/")
    assert info.value.code == "GH_ERR_HEADERS_OVERFLOW"
    ok = make_client(server.origin, max_header_size=4096)
    assert ok.request(path="/").body.text() == "x"


def test_max_response_size(make_server, make_client):
    def handler(conn):
        while (req := conn.read_request()) is not None:
            conn.respond(b"r" * int(req.target[1:]))

    server = make_server(handler)
    client = make_client(server.origin, max_response_size=100)
    assert client.request(path="/100").body.bytes() == b"r" * 100
    r = client.request(path="/1000")
    with pytest.raises(errors.ResponseExceededMaxSizeError) as info:
        r.body.bytes()
    assert info.value.code == "GH_ERR_RES_EXCEEDED_MAX_SIZE"
    assert client.request(path="/5").body.bytes() == b"rrrrr"
    assert server.accepted == 2


def test_max_response_size_chunked(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(10):
            conn.send(b"20\r\n" + b"c" * 32 + b"\r\n")
        conn.send(b"0\r\n\r\n")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, max_response_size=100)
    with pytest.raises(errors.ResponseExceededMaxSizeError):
        client.request(path="/").body.bytes()


def test_response_to_head_is_not_bounded_by_content_length(make_server, make_client):
    def handler(conn):
        while conn.read_request() is not None:
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 99999\r\n\r\n")

    server = make_server(handler)
    client = make_client(server.origin, max_response_size=10)
    assert client.request(path="/", method="HEAD").body.bytes() == b""


def test_request_written_as_the_idle_timer_fires_is_not_a_timeout(make_server, make_client):
    """The idle deadline firing while a new request is written must not fail that request."""
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin, keep_alive_timeout=0.02)
    failures = []
    for i in range(40):
        client.request(path="/").body.bytes()
        gevent.sleep(0.02 + (i % 10) * 0.0005)  # land on the idle deadline
        try:
            assert client.request(path="/").body.bytes() == b"ok"
        except Exception as exc:
            failures.append(exc)
    assert failures == []
