"""Audit: the request-level API calls (request/stream/pipeline/upgrade/connect) and the handler protocol."""

from __future__ import annotations

import gevent
import gevent.event
import pytest

import greenhttp
from greenhttp import errors
from greenhttp._abort import AbortController
from testkit import refused_origin, serve_forever, wait_for

pytest_plugins = ["h2_support.fixtures"]


def answers_then_stalls(data):
    """A handler that reads the request, sends ``data`` (a head and part of
    its body) and then nothing more until the client closes."""

    def handler(conn):
        conn.read_request()
        conn.send(data)
        conn.wait_closed()

    return handler


def test_pipeline_writer_blocked_on_full_queue_is_released_when_request_fails(make_client):
    # Nothing listens: the request fails while the writer is blocked on a full body queue.
    client = make_client(refused_origin())
    duplex = client.pipeline("/", "POST", handler=lambda d: d.body)
    failed = []
    with gevent.Timeout(3, False):
        try:
            for _ in range(100):
                duplex.write(b"x")
        except Exception as exc:  # noqa: BLE001
            failed.append(exc)
    duplex.close()
    assert failed, "write() stayed blocked after the request failed"


def test_pipeline_writer_blocked_is_released_by_close(make_server, make_client):
    def handler(conn):
        conn.read_head()
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    duplex = client.pipeline("/", "POST", handler=lambda d: d.body)
    outcome = []

    def writer():
        try:
            for _ in range(10000):
                duplex.write(b"x" * 65536)
        except Exception as exc:  # noqa: BLE001
            outcome.append(exc)

    g = gevent.spawn(writer)
    gevent.sleep(0.05)
    duplex.close()
    g.join(3)
    done = g.dead
    g.kill()
    assert done and outcome, "a writer blocked in write() was not released by close()"


# ---------------------------------------------------------------------------
# request(): options, body mixins, signal
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [("high_water_mark", -1), ("high_water_mark", 1.5), ("response_headers", "bogus"), ("on_info", 42)],
)
def test_request_invalid_option_names_option_and_value(make_server, make_client, option, value):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    with pytest.raises(errors.InvalidArgumentError) as info:
        client.request("/", **{option: value})
    assert repr(value) in str(info.value)
    assert server.accepted == 0 or not server.requests


def test_request_invalid_signal_is_invalid_argument(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    with pytest.raises(errors.InvalidArgumentError):
        client.request("/", signal=42)
    assert client.request("/").body.bytes() == b"ok"


def test_body_second_mixin_is_unusable_and_mixins_decode(make_server, make_client):
    server = make_server(serve_forever(b'\xef\xbb\xbf{"a": 1}', headers=[("Content-Type", "application/json")]))
    client = make_client(server.origin)
    r = client.request("/")
    assert r.body.json() == {"a": 1}
    for again in (r.body.text, r.body.bytes, r.body.json, r.body.blob, r.body.array_buffer):
        with pytest.raises(TypeError, match="unusable"):
            again()
    b = client.request("/").body.blob()
    assert b.type == "application/json" and b.size == 11
    r = client.request("/")
    assert r.body.read(2) == b"\xef\xbb"
    with pytest.raises(TypeError, match="unusable"):
        r.body.text()
    r.body.close()


def test_with_block_dumps_unread_body_and_reuses_connection(make_server, make_client):
    server = make_server(serve_forever(b"x" * 5000))
    client = make_client(server.origin)
    for _ in range(3):
        with client.request("/") as r:
            assert r.status_code == 200
        with pytest.raises(TypeError, match="unusable"):
            r.body.bytes()
    assert server.accepted == 1 and len(server.requests) == 3


def test_signal_already_aborted_sends_nothing_and_raises_reason(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    ac = AbortController()
    reason = ValueError("stop")
    ac.abort(reason)
    with pytest.raises(ValueError) as info:
        client.request("/", signal=ac.signal)
    assert info.value is reason
    assert client.request("/").body.bytes() == b"ok"
    assert len(server.requests) == 1
    assert not ac.signal._listeners


def test_signal_abort_while_waiting_for_head_delivers_reason(make_server, make_client):
    got_head = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        got_head.set()
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    ac = AbortController()
    reason = KeyError("k")
    gevent.spawn(lambda: (got_head.wait(3), ac.abort(reason)))
    with gevent.Timeout(3):
        with pytest.raises(KeyError) as info:
            client.request("/", signal=ac.signal)
    assert info.value is reason
    assert server.conns[0].eof.wait(3)


def test_signal_abort_during_body_fails_the_read_with_reason(make_server, make_client):
    server = make_server(answers_then_stalls(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"))
    client = make_client(server.origin)
    ac = AbortController()
    r = client.request("/", signal=ac.signal)
    assert r.body.read(3) == b"abc"
    reason = RuntimeError("late")
    gevent.spawn_later(0.02, ac.abort, reason)
    with gevent.Timeout(3):
        with pytest.raises(RuntimeError) as info:
            r.body.read(3)
    assert info.value is reason
    assert server.conns[0].eof.wait(3)


def test_request_dispatch_error_does_not_leave_listener_on_signal(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    ac = AbortController()
    with pytest.raises(errors.InvalidArgumentError):
        client.request("/", headers={"bad name": "x"}, signal=ac.signal)
    assert not ac.signal._listeners


def test_callback_form_called_exactly_once_on_error_with_opaque(make_client):
    client = make_client("http://127.0.0.1:1")
    calls = []
    done = gevent.event.Event()

    def cb(err, data):
        calls.append((err, data))
        done.set()

    client.request("/", opaque="op", callback=cb)
    assert done.wait(3)
    gevent.sleep(0.05)
    assert len(calls) == 1
    err, data = calls[0]
    assert data is None and isinstance(err, Exception) and err.opaque == "op"


def test_raw_response_headers_and_trailers(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(
            b"HTTP/1.1 200 OK\r\nX-Case: A\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n"
            b"3\r\nabc\r\n0\r\nX-T: v\r\n\r\n"
        )
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    r = client.request("/", response_headers="raw")
    assert r.headers[:2] == [b"X-Case", b"A"]
    assert r.body.bytes() == b"abc"
    assert r.trailers == {"x-t": "v"}


# ---------------------------------------------------------------------------
# dispatch() with a custom handler: the controller
# ---------------------------------------------------------------------------


class Recorder:
    def __init__(self, **hooks):
        self.calls = []
        self.hooks = hooks
        self.done = gevent.event.Event()
        self.controller = None

    def _hook(self, name, *args):
        fn = self.hooks.get(name)
        if fn is not None:
            fn(self, *args)

    def on_request_start(self, controller, context):
        self.controller = controller
        self.calls.append(("start",))
        self._hook("start", controller)

    def on_response_start(self, controller, status_code, headers, status_message):
        self.calls.append(("head", status_code, dict(headers), status_message))
        self._hook("head", controller)

    def on_response_data(self, controller, chunk):
        self.calls.append(("data", bytes(chunk)))
        self._hook("data", controller)

    def on_response_end(self, controller, trailers):
        self.calls.append(("end", dict(trailers)))
        self._hook("end", controller)
        self.done.set()

    def on_response_error(self, controller, err):
        self.calls.append(("error", err))
        self.done.set()


def test_on_request_start_abort_sends_nothing_and_errors_once(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    reason = ValueError("no")
    h = Recorder(start=lambda self, c: c.abort(reason))
    client.dispatch({"path": "/", "method": "GET"}, h)
    assert h.done.wait(3)
    gevent.sleep(0.05)
    assert [c[0] for c in h.calls] == ["start", "error"]
    assert h.calls[1][1] is reason
    assert h.controller.aborted and h.controller.reason is reason
    assert client.request("/").body.bytes() == b"ok"
    assert len(server.requests) == 1


def test_on_response_start_gets_status_message_and_headers_then_trailers(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(
            b"HTTP/1.1 299 Quite Fine\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"2\r\nhi\r\n0\r\nX-T: t\r\n\r\n"
        )
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    h = Recorder()
    client.dispatch({"path": "/", "method": "GET"}, h)
    assert h.done.wait(3)
    gevent.sleep(0.02)
    assert h.calls[1][:2] == ("head", 299) and h.calls[1][3] == "Quite Fine" and h.calls[1][2]["x-a"] == "1"
    assert h.calls[2:] == [("data", b"hi"), ("end", {"x-t": "t"})]
    assert h.controller.raw_trailers == [b"X-T", b"t"]


def test_pause_stops_delivery_until_resume(make_server, make_client):
    release = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nab")
        release.wait(3)
        conn.send(b"cd")
        gevent.sleep(0.01)
        conn.send(b"ef")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    h = Recorder(data=lambda self, c: c.pause())
    client.dispatch({"path": "/", "method": "GET"}, h)
    wait_for(lambda: ("data", b"ab") in h.calls, 3)
    assert h.controller.paused
    release.set()
    gevent.sleep(0.1)
    assert [c for c in h.calls if c[0] == "data"] == [("data", b"ab")]
    h.hooks.clear()
    h.controller.resume()
    assert h.done.wait(3)
    assert b"".join(c[1] for c in h.calls if c[0] == "data") == b"abcdef"
    assert not h.controller.paused


def test_abort_after_end_is_not_an_error(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    h = Recorder(end=lambda self, c: c.abort(ValueError("late")))
    client.dispatch({"path": "/", "method": "GET"}, h)
    assert h.done.wait(3)
    h.controller.abort(ValueError("later"))
    gevent.sleep(0.05)
    assert [c[0] for c in h.calls] == ["start", "head", "data", "end"]


def test_on_response_data_raising_aborts_with_that_error_once(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nab")
        gevent.sleep(0.02)
        conn.send(b"cdef")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    boom = ZeroDivisionError("x")

    def raise_(self, c):
        raise boom

    h = Recorder(data=raise_)
    client.dispatch({"path": "/", "method": "GET"}, h)
    assert h.done.wait(3)
    gevent.sleep(0.05)
    assert [c[0] for c in h.calls] == ["start", "head", "data", "error"]
    assert h.calls[-1][1] is boom


def test_on_response_end_raising_goes_to_on_response_error(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    boom = ZeroDivisionError("x")

    def raise_(self, c):
        raise boom

    h = Recorder(end=raise_)
    h.done = gevent.event.Event()
    client.dispatch({"path": "/", "method": "GET"}, h)
    wait_for(lambda: h.calls and h.calls[-1][0] == "error", 3)
    gevent.sleep(0.05)
    assert [c[0] for c in h.calls] == ["start", "head", "data", "end", "error"]
    assert h.calls[-1][1] is boom
    assert client.request("/").body.bytes() == b"ok"


# ---------------------------------------------------------------------------
# upgrade() / connect(): a caller that gives up, signals
# ---------------------------------------------------------------------------


def _late_tunnel_server(make_server, answer: bytes):
    answered = gevent.event.Event()
    release = gevent.event.Event()

    def handler(conn):
        conn.read_head()
        release.wait(3)
        conn.send(answer)
        answered.set()
        conn.wait_closed()

    return make_server(handler), release, answered


@pytest.mark.parametrize("kind", ["connect", "upgrade"])
def test_caller_timing_out_before_the_tunnel_does_not_leak_the_socket(make_server, make_client, kind):
    answer = (
        b"HTTP/1.1 200 Connection Established\r\n\r\n"
        if kind == "connect"
        else b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: Websocket\r\nConnection: Upgrade\r\n\r\n"
    )
    server, release, answered = _late_tunnel_server(make_server, answer)
    client = make_client(server.origin)
    call = (lambda: client.connect("example.com:443")) if kind == "connect" else (lambda: client.upgrade("/"))
    with pytest.raises(gevent.Timeout):
        with gevent.Timeout(0.1):
            call()
    release.set()
    # The request was given up: the connection closes, the socket is not handed to nobody.
    assert server.conns[0].eof.wait(3), "the abandoned tunnel socket was never closed"


@pytest.mark.parametrize("kind", ["connect", "upgrade"])
def test_signal_abort_while_waiting_for_tunnel(make_server, make_client, kind):
    server, release, _answered = _late_tunnel_server(make_server, b"")
    client = make_client(server.origin)
    ac = AbortController()
    reason = ValueError("stop")
    gevent.spawn_later(0.05, ac.abort, reason)
    with gevent.Timeout(3):
        with pytest.raises(ValueError) as info:
            if kind == "connect":
                client.connect("example.com:443", signal=ac.signal)
            else:
                client.upgrade("/", signal=ac.signal)
    assert info.value is reason
    release.set()
    assert server.conns[0].eof.wait(3)


def test_connect_signal_listener_removed_after_tunnel(make_server, make_client):
    server, release, _answered = _late_tunnel_server(make_server, b"HTTP/1.1 200 OK\r\n\r\n")
    release.set()
    client = make_client(server.origin)
    ac = AbortController()
    data = client.connect("example.com:443", signal=ac.signal)
    try:
        assert data.status_code == 200
        ac.abort(ValueError("after"))
        data.socket.sendall(b"ping")  # the tunnel is the caller's now: still usable
    finally:
        data.socket.close()


# ---------------------------------------------------------------------------
# stream(), pipeline(), concurrency and killed greenlets
# ---------------------------------------------------------------------------


class Sink:
    def __init__(self, fail_at: int = -1):
        self.parts = []
        self.closed = False
        self.fail_at = fail_at

    def write(self, data):
        if len(self.parts) == self.fail_at:
            raise OSError("disk full")
        self.parts.append(bytes(data))

    def close(self):
        self.closed = True


def _chunked_server(make_server, chunks=10):
    def handler(conn):
        while conn.read_request() is not None:
            conn.send(b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i in range(chunks):
                part = b"%d" % i
                conn.send(b"%x\r\n%s\r\n" % (len(part), part))
            conn.send(b"0\r\nX-Done: yes\r\n\r\n")

    return make_server(handler)


def test_stream_factory_called_once_after_1xx_with_trailers_and_opaque(make_server, make_client):
    server = _chunked_server(make_server)
    client = make_client(server.origin)
    seen, infos = [], []
    sink = Sink()

    def factory(data):
        seen.append(data)
        return sink

    out = client.stream("/", factory=factory, opaque="o", on_info=infos.append)
    assert len(seen) == 1 and seen[0].status_code == 200 and seen[0].opaque == "o"
    assert [i["status_code"] for i in infos] == [102]
    assert b"".join(sink.parts) == b"0123456789" and sink.closed
    assert out.opaque == "o" and out.trailers == {"x-done": "yes"}


@pytest.mark.parametrize("where", ["factory", "write"])
def test_stream_factory_or_writable_error_propagates_once_and_client_recovers(make_server, make_client, where):
    server = _chunked_server(make_server, chunks=200)
    client = make_client(server.origin)
    boom = OSError("nope")
    failing = Sink(fail_at=3)

    def factory(data):
        if where == "factory":
            raise boom
        return failing

    calls = []
    done = gevent.event.Event()
    client.stream("/", factory=factory, opaque="q", callback=lambda e, d: (calls.append((e, d)), done.set()))
    assert done.wait(3)
    gevent.sleep(0.05)
    assert len(calls) == 1 and calls[0][1] is None
    err = calls[0][0]
    assert isinstance(err, OSError) and err.opaque == "q"
    if where == "factory":
        assert err is boom
    else:
        assert failing.closed  # closed on the error, as the original destroys it
    sink = Sink()
    client.stream("/", factory=lambda d: sink)
    assert b"".join(sink.parts).startswith(b"0123")


def test_many_greenlets_share_one_client(make_server, make_client):
    def handler(conn):
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin)
    results = {}

    def one(i):
        results[i] = client.request(f"/{i}").body.text()

    with gevent.Timeout(5):
        gevent.joinall([gevent.spawn(one, i) for i in range(50)], raise_error=True)
    assert results == {i: f"/{i}" for i in range(50)}


def test_greenlet_killed_waiting_for_head_aborts_and_others_proceed(make_server, make_client):
    first = gevent.event.Event()

    def handler(conn):
        req = conn.read_request()
        if req.target == "/hang":
            first.set()
            conn.wait_closed()
            return
        conn.respond(b"ok")
        while conn.read_request() is not None:
            conn.respond(b"ok")

    server = make_server(handler)
    client = make_client(server.origin)
    g = gevent.spawn(client.request, "/hang")
    assert first.wait(3)
    g.kill(block=True, timeout=3)
    assert g.dead
    assert server.conns[0].eof.wait(3)
    assert client.request("/next").body.bytes() == b"ok"


def test_greenlet_killed_mid_body_then_close_frees_connection(make_server, make_client):
    server = make_server(answers_then_stalls(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc"))
    client = make_client(server.origin)
    r = client.request("/")
    g = gevent.spawn(r.body.bytes)
    gevent.sleep(0.02)
    g.kill(block=True, timeout=3)
    r.body.close()
    assert server.conns[0].eof.wait(3)


@pytest.mark.parametrize("how", ["timeout", "kill"])
@pytest.mark.parametrize("read", ["text", "read", "iterate"])
def test_a_body_read_given_up_aborts_its_request_and_frees_the_connection(make_server, how, read):
    # docs/concurrency.md: an interrupted blocking call aborts the request it waited for.
    # A pool of one connection must serve the next request at once, not after body_timeout.
    def handler(conn):
        while True:
            req = conn.read_request()
            if req is None:
                return
            if req.target == "/stall":
                conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
                conn.wait_closed()
                return
            conn.respond(b"next")

    server = make_server(handler)
    pool = greenhttp.Pool(server.origin, connections=1)
    try:
        r = pool.request(path="/stall")
        consume = {
            "text": r.body.text,
            "read": lambda: [r.body.read(10) for _ in range(3)],
            "iterate": lambda: list(r.body),
        }[read]
        if how == "timeout":
            with pytest.raises(gevent.Timeout), gevent.Timeout(0.1):
                consume()
        else:
            g = gevent.spawn(consume)
            wait_for(lambda: r.body._parker is not None, what="the read waiting for more")
            g.kill(block=True, timeout=3)
            assert g.dead
        assert server.conns[0].eof.wait(3)  # the stalled response's connection was closed
        with gevent.Timeout(3):
            assert pool.request(path="/after").body.bytes() == b"next"
    finally:
        pool.destroy()


def test_high_water_mark_zero_still_delivers_the_body(make_server, make_client):
    server = _chunked_server(make_server, chunks=30)
    client = make_client(server.origin)
    r = client.request("/", high_water_mark=0)
    got = b""
    with gevent.Timeout(3):
        while True:
            part = r.body.read(1)
            if not part:
                break
            got += part
    assert got == b"".join(b"%d" % i for i in range(30))
    assert r.trailers == {"x-done": "yes"}


def test_pipeline_handler_error_fails_read_and_write(make_server, make_client):
    def handler(conn):
        conn.read_head()
        conn.respond(b"early")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    boom = LookupError("handler")

    def bad(data):
        raise boom

    duplex = client.pipeline("/", "POST", handler=bad)
    with gevent.Timeout(3):
        with pytest.raises(LookupError):
            duplex.read()
        with pytest.raises(LookupError):
            for _ in range(100):
                duplex.write(b"x")
    duplex.close()
    assert server.conns[0].eof.wait(3)


def test_pipeline_signal_abort(make_server, make_client):
    def handler(conn):
        conn.read_head()
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    ac = AbortController()
    duplex = client.pipeline("/", "POST", handler=lambda d: d.body, signal=ac.signal)
    duplex.write(b"abc")
    reason = ValueError("cut")
    gevent.spawn_later(0.05, ac.abort, reason)
    with gevent.Timeout(3):
        with pytest.raises(ValueError) as info:
            duplex.read()
    assert info.value is reason
    duplex.close()
    assert server.conns[0].eof.wait(3)


def test_with_block_left_by_a_timeout_does_not_wait_for_the_body(make_server, make_client):
    server = make_server(answers_then_stalls(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc"))
    client = make_client(server.origin)
    outer = gevent.Timeout(2)
    outer.start()
    try:
        with pytest.raises(gevent.Timeout) as info:
            with gevent.Timeout(0.05):
                with client.request("/") as r:
                    r.body.bytes()
        # The inner timeout, not the outer one: leaving the block did not block on the body.
        assert info.value is not outer
    finally:
        # close(), not cancel(): on gevent's libuv loop a timer dropped unclosed is
        # freed while libuv still links it, and a later loop pass writes into it.
        outer.close()
    assert server.conns[0].eof.wait(3)


def test_callback_that_raises_destroys_the_body(make_server, make_client):
    server = make_server(answers_then_stalls(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc"))
    client = make_client(server.origin)
    seen = []

    def cb(err, data):
        seen.append(data)
        raise RuntimeError("user callback failed")

    client.request("/", callback=cb)
    wait_for(lambda: seen, 3)
    # The body nobody can read any more is destroyed: the connection is freed.
    assert server.conns[0].eof.wait(3)
    assert seen[0].body._closed


def test_one_signal_many_requests_leaves_no_listeners(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    ac = AbortController()
    for _ in range(3):
        assert client.request("/", signal=ac.signal).body.bytes() == b"ok"
        with client.request("/", signal=ac.signal) as r:
            assert r.status_code == 200
        client.stream("/", factory=lambda d: Sink(), signal=ac.signal)
    assert not ac.signal._listeners
    ac.abort()  # nothing left to abort: no error anywhere
    assert client.request("/").body.bytes() == b"ok"


def test_controller_abort_default_reason_and_idempotent(make_server, make_client):
    server = make_server(answers_then_stalls(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab"))
    client = make_client(server.origin)
    first = []

    def on_data(self, c):
        c.abort()
        first.append(c.reason)
        c.abort(ValueError("second"))

    h = Recorder(data=on_data)
    client.dispatch({"path": "/", "method": "GET"}, h)
    assert h.done.wait(3)
    gevent.sleep(0.05)
    errs = [c[1] for c in h.calls if c[0] == "error"]
    assert len(errs) == 1 and isinstance(errs[0], errors.RequestAbortedError)
    assert h.controller.reason is first[0] and h.controller.aborted
    assert server.conns[0].eof.wait(3)


def test_refused_connection_errors_once_with_no_data(make_client):
    client = make_client(refused_origin())
    h = Recorder()
    client.dispatch({"path": "/", "method": "GET"}, h)
    assert h.done.wait(3)
    gevent.sleep(0.05)
    assert [c[0] for c in h.calls if c[0] != "start"] == ["error"]


def test_pipeline_writer_not_stuck_after_early_complete_response(make_server, make_client):
    def handler(conn):
        conn.read_head()
        conn.respond(b"early")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    duplex = client.pipeline("/", "POST", handler=lambda d: d.body)
    assert duplex.read() == b"early"
    outcome = []
    with gevent.Timeout(3, False):
        try:
            for _ in range(1000):
                duplex.write(b"x" * 65536)
            outcome.append("all written")
        except Exception as exc:  # noqa: BLE001
            outcome.append(exc)
    duplex.close()
    assert outcome == ["all written"], "write() blocked forever after the response had completed"
    assert server.conns[0].eof.wait(3)


def test_pipeline_writer_not_stuck_after_early_complete_response_h2(make_h2_server, make_h2c):
    def handler(conn):
        while True:
            req = conn.opened.get(timeout=3)
            if req is None:
                return
            conn.respond(req.stream_id, body=b"early")

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    duplex = client.pipeline("/", "POST", handler=lambda d: d.body)
    assert duplex.read() == b"early"
    outcome = []
    with gevent.Timeout(3, False):
        for _ in range(100):
            duplex.write(b"x" * 1024)
        outcome.append("all written")
    duplex.close()
    assert outcome == ["all written"], "write() blocked forever after the response had completed"
    assert client.request("/again").status_code == 200


def test_dump_signal_aborted_while_the_server_stalls(make_server, make_client):
    server = make_server(answers_then_stalls(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc"))
    client = make_client(server.origin)
    r = client.request("/")
    ac = AbortController()
    reason = ValueError("enough")
    gevent.spawn_later(0.05, ac.abort, reason)
    with gevent.Timeout(2):
        with pytest.raises(ValueError) as info:
            r.body.dump(signal=ac.signal)
    assert info.value is reason
    assert server.conns[0].eof.wait(3)


def test_greenlet_killed_while_queued_never_sends_its_request(make_server, make_client):
    release = gevent.event.Event()

    def handler(conn):
        while True:
            req = conn.read_request()
            if req is None:
                return
            if req.target == "/slow":
                release.wait(3)
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin)
    first = gevent.spawn(lambda: client.request("/slow").body.bytes())
    wait_for(lambda: server.requests, 3)
    queued = gevent.spawn(client.request, "/queued")
    gevent.sleep(0.02)
    queued.kill(block=True, timeout=3)
    release.set()
    assert first.get(timeout=3) == b"/slow"
    assert client.request("/after").body.bytes() == b"/after"
    assert [r.target for r in server.requests] == ["/slow", "/after"]


def test_event_emitter_signal(make_server, make_client):
    from greenhttp._emitter import EventEmitter

    def handler(conn):
        conn.read_request()
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    ee = EventEmitter()
    gevent.spawn_later(0.05, ee.emit, "abort")
    with gevent.Timeout(3):
        with pytest.raises(errors.RequestAbortedError):
            client.request("/", signal=ee)
    assert server.conns[0].eof.wait(3)
    assert ee.listener_count("abort") == 0


@pytest.mark.parametrize("h2", [False, True])
def test_abort_while_paused_errors_once_and_frees_the_connection(make_server, make_client, make_h2_server, make_h2c, h2):
    if h2:

        def h2_handler(conn):
            while True:
                req = conn.opened.get(timeout=3)
                if req is None:
                    return
                if req.path == "/":
                    conn.send_headers(req.stream_id, 200, [("content-length", "10")])
                    conn.send_body(req.stream_id, b"ab", end=False)
                else:
                    conn.respond(req.stream_id, body=b"ok")

        server = make_h2_server(h2_handler)
        client = make_h2c(server.origin)
    else:

        def handler(conn):
            conn.read_request()
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")
            gevent.sleep(0.05)
            conn.send(b"cd")
            conn.wait_closed()

        server = make_server(handler)
        client = make_client(server.origin)
    h = Recorder(data=lambda self, c: c.pause())
    client.dispatch({"path": "/", "method": "GET"}, h)
    wait_for(lambda: any(c[0] == "data" for c in h.calls), 3)
    gevent.sleep(0.1)
    reason = ValueError("from elsewhere")
    h.controller.abort(reason)
    assert h.done.wait(3)
    gevent.sleep(0.05)
    assert [c[0] for c in h.calls] == ["start", "head", "data", "error"]
    assert h.calls[-1][1] is reason
    if h2:
        assert client.request("/other").body.bytes() == b"ok"
    else:
        assert server.conns[0].eof.wait(3)


@pytest.mark.parametrize("call", ["request", "upgrade"])
def test_dispatch_raising_synchronously_leaves_no_signal_listener(make_server, make_client, call):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)

    def interceptor(dispatch):
        def refuse(opts, handler):
            raise LookupError("refused by interceptor")

        return refuse

    composed = client.compose(interceptor)
    ac = AbortController()
    with pytest.raises(LookupError):
        getattr(composed, call)("/", signal=ac.signal)
    assert not ac.signal._listeners


def test_blob_type_and_text_follow_the_file_api():
    from greenhttp._core.blob import Blob

    # A type with a character outside U+0020..U+007E becomes "" (File API, Blob constructor).
    assert Blob([b"x"], type="text/plain\n").type == ""
    assert Blob([b"x"], type="Text/Plain").type == "text/plain"
    # text() is "UTF-8 decode": a leading BOM is dropped, bad bytes are replaced.
    assert Blob([b"\xef\xbb\xbfhi\xff"]).text() == "hi\ufffd"
    assert Blob([b"abcdef"]).slice(-3, -1).bytes() == b"de"


def test_blob_stream_gives_its_bytes_in_chunks_and_serves_as_a_body(make_server, make_client):
    from greenhttp import Blob

    blob = Blob([b"x" * 11, "é"], type="text/plain")  # 13 bytes: the last chunk splits "é"
    assert list(blob.stream(4)) == [b"xxxx", b"xxxx", b"xxx\xc3", b"\xa9"]
    assert b"".join(blob.stream()) == blob.bytes()
    assert list(Blob().stream()) == []
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="chunk_size"):
            blob.stream(bad)

    def handler(conn):
        req = conn.read_request()
        conn.respond(req.body)

    server = make_server(handler)
    client = make_client(server.origin)
    big = Blob([bytes(range(256)) * 1000])
    r = client.request(path="/", method="PUT", body=big.stream(7000))
    assert r.body.bytes() == big.bytes()
    assert server.requests[0].header("transfer-encoding") == "chunked"


def test_stream_signal_abort_mid_body_raises_reason(make_server, make_client):
    server = make_server(answers_then_stalls(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab"))
    client = make_client(server.origin)
    ac = AbortController()
    sink = Sink()
    reason = ValueError("abort stream")
    gevent.spawn_later(0.05, ac.abort, reason)
    with gevent.Timeout(3):
        with pytest.raises(ValueError) as info:
            client.stream("/", factory=lambda d: sink, signal=ac.signal)
    assert info.value is reason
    assert sink.parts == [b"ab"]
    assert server.conns[0].eof.wait(3)


def test_stream_empty_body_and_head(make_server, make_client):
    def handler(conn):
        while True:
            req = conn.read_request()
            if req is None:
                return
            if req.method == "GET":
                conn.send(b"HTTP/1.1 204 No Content\r\n\r\n")
            else:
                conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")

    server = make_server(handler)
    client = make_client(server.origin)
    for method in ("GET", "HEAD"):
        sink = Sink()
        out = client.stream("/", method, factory=lambda d, sink=sink: sink, opaque=method)
        assert sink.parts == [] and sink.closed and out.opaque == method
    assert server.accepted == 1


def test_dump_chunked_body_over_limit_closes_and_within_limit_reuses(make_server, make_client):
    def handler(conn):
        while True:
            req = conn.read_request()
            if req is None:
                return
            size = int(req.target[1:])
            conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(size // 1000):
                conn.send(b"3e8\r\n" + b"z" * 1000 + b"\r\n")
            conn.send(b"0\r\n\r\n")

    server = make_server(handler)
    client = make_client(server.origin)
    with gevent.Timeout(3):
        client.request("/5000").body.dump(limit=10000)
        client.request("/5000").body.dump(limit=10000)
        assert server.accepted == 1
        r = client.request("/200000")
        r.body.dump(limit=10000)
        assert server.conns[0].eof.wait(3)
        assert client.request("/1000").body.bytes() == b"z" * 1000
    assert server.accepted == 2


def _writes_end_after_the_connection_died(duplex, count, size):
    """The duplex read b"hi"; its connection dies while ``count`` writes of
    ``size`` bytes go on: they end (dropped, or raising), never block, and a
    read raises the connection's error."""
    assert duplex.read(2) == b"hi"
    outcome = []
    with gevent.Timeout(3, False):
        try:
            for _ in range(count):
                duplex.write(b"x" * size)
            outcome.append("all written")
        except Exception as exc:  # noqa: BLE001
            outcome.append(exc)
    assert outcome, "write() blocked forever after the connection died"
    with gevent.Timeout(3):
        with pytest.raises(errors.GreenHTTPError):
            duplex.read()
    duplex.close()


def test_pipeline_writer_released_when_connection_dies_mid_duplex(make_server, make_client):
    def handler(conn):
        conn.read_head()
        conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n")
        gevent.sleep(0.3)  # the client's writes fill the socket buffers meanwhile
        conn.close()

    server = make_server(handler)
    client = make_client(server.origin)
    duplex = client.pipeline("/", "POST", handler=lambda d: d.body)
    _writes_end_after_the_connection_died(duplex, 2000, 65536)


def test_pipeline_writer_released_when_h2_session_dies_mid_duplex(make_h2_server, make_h2c):
    def handler(conn):
        req = conn.opened.get(timeout=3)
        conn.send_headers(req.stream_id, 200)
        conn.send_body(req.stream_id, b"hi", end=False)
        gevent.sleep(0.3)  # no WINDOW_UPDATE: the client's body stalls on flow control
        conn.close()

    server = make_h2_server(handler, auto_ack=False)
    client = make_h2c(server.origin)
    duplex = client.pipeline("/", "POST", handler=lambda d: d.body)
    _writes_end_after_the_connection_died(duplex, 200, 16384)


@pytest.mark.parametrize("size", [5, 200000])
def test_body_pieces_are_bytes(make_server, make_client, size):
    server = make_server(serve_forever(b"y" * size))
    client = make_client(server.origin)
    r = client.request("/")
    first = r.body.read(2)
    rest = list(r.body)
    assert type(first) is bytes and all(type(c) is bytes for c in rest)
    assert len(first) + sum(map(len, rest)) == size
    whole = client.request("/").body.bytes()
    assert type(whole) is bytes and len(whole) == size
    r = client.request("/")
    assert type(r.body.read()) is bytes


def test_dispatch_invalid_option_goes_to_on_response_error_with_no_controller(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    h = Recorder()
    assert client.dispatch({"path": "/", "method": "GET", "headers": {"bad name": "x"}}, h) is False
    assert h.done.wait(3)
    assert [c[0] for c in h.calls] == ["error"]
    assert isinstance(h.calls[0][1], errors.InvalidArgumentError)
    assert server.accepted == 0
