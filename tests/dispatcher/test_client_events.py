"""Events, failure handling (REFERENCE §3.6), abort signals, dispatch() and handlers."""

from __future__ import annotations

import gevent
import gevent.event
import pytest

import greenhttp
from greenhttp import errors
from testkit import serve_forever, wait_for

# -- events -----------------------------------------------------------------------------


def test_connect_and_disconnect_event_shapes(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.respond(b"x", headers=[("Connection", "close")])
        conn.close()

    server = make_server(handler)
    client = make_client(server.origin)
    events = []
    client.on("connect", lambda origin, targets: events.append(("connect", origin, targets)))
    client.on("disconnect", lambda origin, targets, err: events.append(("disconnect", origin, targets, err)))
    client.request(path="/").body.dump()
    wait_for(lambda: len(events) == 2, what="connect and disconnect")
    assert events[0] == ("connect", server.origin, [client])
    kind, origin, targets, err = events[1]
    assert (kind, origin, targets) == ("disconnect", server.origin, [client])
    assert isinstance(err, BaseException)
    assert isinstance(events[0][1], str)


def test_disconnect_only_after_a_successful_connect(make_client):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    client = make_client(f"http://127.0.0.1:{port}")
    events = []
    client.on("connect", lambda *a: events.append("connect"))
    client.on("disconnect", lambda *a: events.append("disconnect"))
    with pytest.raises(ConnectionRefusedError):
        client.request(path="/")
    gevent.sleep(0.01)
    assert events == []


def test_disconnect_on_destroy_carries_the_error(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    got = []
    client.on("disconnect", lambda origin, targets, err: got.append(err))
    client.request(path="/").body.dump()
    boom = RuntimeError("bye")
    client.destroy(boom)
    assert len(got) == 1 and got[0] is boom


def test_drain_event_after_busy_dispatch(make_server, make_client):
    release = gevent.event.Event()

    def handler(conn):
        while conn.read_request() is not None:
            release.wait(5)
            conn.respond(b"d")

    server = make_server(handler)
    client = make_client(server.origin)
    drains = []
    client.on("drain", lambda *args: drains.append(args))
    h1, h2 = Recorder(), Recorder()
    first = client.dispatch({"path": "/1", "method": "GET"}, h1)
    second = client.dispatch({"path": "/2", "method": "GET"}, h2)
    assert first is False or second is False  # pipelining=1: the client is busy
    release.set()
    wait_for(lambda: h1.ended and h2.ended, what="both responses")
    wait_for(lambda: drains, what="drain")
    assert drains[0] == (server.origin,)


def test_error_event_when_on_response_error_raises(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nBad Header: x\r\n\r\n")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    reported = []
    client.on("error", reported.append)
    boom = RuntimeError("handler bug")

    class Raising(Recorder):
        def on_response_error(self, controller, err):
            super().on_response_error(controller, err)
            raise boom

    h = Raising()
    client.dispatch({"path": "/", "method": "GET"}, h)
    wait_for(lambda: reported, what="the error event")
    assert reported == [boom]
    assert isinstance(h.error, errors.HTTPParserError)


def test_listener_that_raises_does_not_break_the_client(make_server, make_client):
    server = make_server(serve_forever(b"fine"))
    client = make_client(server.origin)
    reported = []
    client.on("error", reported.append)

    def bad_listener(*args):
        raise ValueError("listener bug")

    client.on("connect", bad_listener)
    assert client.request(path="/").body.text() == "fine"
    assert client.request(path="/").body.text() == "fine"
    assert len(reported) == 1 and isinstance(reported[0], ValueError)


# -- failure handling (REFERENCE §3.6) ---------------------------------------------------


def test_server_drops_three_pipelined_requests(make_server, make_client):
    def handler(conn):
        if conn.server.accepted == 1:
            reqs = []
            with gevent.Timeout(3, False):
                while len(reqs) < 3:
                    reqs.append(conn.read_request())
            conn.close()  # drop all three
            return
        while (req := conn.read_request()) is not None:
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin, pipelining=3)
    starts = []

    def run(path):
        try:
            return client.request(path=path, blocking=False).body.text()
        except Exception as exc:
            return exc

    greenlets = [gevent.spawn(run, f"/{i}") for i in range(1, 4)]
    client.on("connect", lambda *a: starts.append("connect"))
    results = [g.get(timeout=5) for g in greenlets]
    assert isinstance(results[0], errors.SocketError), results
    assert results[1:] == ["/2", "/3"]
    assert server.accepted == 2
    assert [r.target for r in server.requests[3:]] == ["/2", "/3"]


def test_reconnect_while_requests_are_queued(make_server, make_client):
    def handler(conn):
        req = conn.read_request()
        if req is not None:
            conn.respond(req.target.encode(), headers=[("Connection", "close")])
        conn.close()

    server = make_server(handler)
    client = make_client(server.origin)
    connects, disconnects = [], []
    client.on("connect", lambda *a: connects.append(a))
    client.on("disconnect", lambda *a: disconnects.append(a))
    greenlets = [gevent.spawn(lambda i=i: client.request(path=f"/{i}").body.text()) for i in range(4)]
    assert [g.get(timeout=5) for g in greenlets] == ["/0", "/1", "/2", "/3"]
    assert server.accepted == 4
    assert len(connects) == 4
    wait_for(lambda: len(disconnects) == 4, what="four disconnects")


def test_socket_error_with_nothing_running_reconnects(make_server, make_client):
    def handler(conn):
        while (req := conn.read_request()) is not None:
            conn.respond(req.target.encode())
            if conn.server.accepted == 1:
                conn.close()
                return

    server = make_server(handler)
    client = make_client(server.origin)
    assert client.request(path="/a").body.text() == "/a"
    wait_for(lambda: not client.stats.connected, what="the close to be seen")
    assert client.request(path="/b").body.text() == "/b"


# -- abort signals ------------------------------------------------------------------------


def test_already_aborted_signal(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    ac = greenhttp.AbortController()
    reason = RuntimeError("stop")
    ac.abort(reason)
    with pytest.raises(RuntimeError) as info:
        client.request(path="/", signal=ac.signal)
    assert info.value is reason
    gevent.sleep(0.02)
    assert server.requests == []


def test_default_abort_reason_is_an_abort_error_dom_exception(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    ac = greenhttp.AbortController()
    ac.abort()
    with pytest.raises(Exception) as info:
        client.request(path="/", signal=greenhttp.AbortSignal.abort())
    assert isinstance(info.value, greenhttp.DOMException) and info.value.name == "AbortError"


def test_abort_while_queued(make_server, make_client):
    release = gevent.event.Event()

    def handler(conn):
        while (req := conn.read_request()) is not None:
            if req.target == "/slow":
                release.wait(5)
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin)
    slow = gevent.spawn(lambda: client.request(path="/slow").body.text())
    wait_for(lambda: client.stats.running == 1, what="the slow request on the wire")
    ac = greenhttp.AbortController()
    queued = gevent.spawn(client.request, path="/queued", signal=ac.signal)
    wait_for(lambda: client.stats.pending == 1, what="a queued request")
    ac.abort(ValueError("no longer needed"))
    with pytest.raises(ValueError):
        queued.get(timeout=5)
    release.set()
    assert slow.get(timeout=5) == "/slow"
    assert [r.target for r in server.requests] == ["/slow"]
    assert client.request(path="/after").body.text() == "/after"


def test_abort_while_waiting_for_headers(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    ac = greenhttp.AbortController()
    g = gevent.spawn(client.request, path="/", signal=ac.signal)
    wait_for(lambda: server.requests, what="the request on the wire")
    reason = KeyError("abort")
    ac.abort(reason)
    with pytest.raises(KeyError) as info:
        g.get(timeout=5)
    assert info.value is reason
    assert server.conns[0].eof.wait(2)  # HTTP/1.1 can't cancel: the socket closes


def test_abort_while_reading_the_body(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    ac = greenhttp.AbortController()
    r = client.request(path="/", signal=ac.signal)
    assert r.body.read(5) == b"first"
    gevent.spawn_later(0.05, ac.abort, RuntimeError("enough"))
    with pytest.raises(RuntimeError, match="enough"):
        r.body.read()
    assert server.conns[0].eof.wait(2)


def test_abort_signal_timeout(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    with pytest.raises(greenhttp.DOMException) as info:
        client.request(path="/", signal=greenhttp.AbortSignal.timeout(0.2))
    assert info.value.name == "TimeoutError"


def test_event_emitter_like_signal(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)

    class Emitter:
        def __init__(self):
            self.listeners = []

        def on(self, event, fn):
            assert event == "abort"
            self.listeners.append(fn)

    em = Emitter()
    g = gevent.spawn(client.request, path="/", signal=em)
    wait_for(lambda: server.requests, what="the request on the wire")
    for fn in em.listeners:
        fn()
    with pytest.raises(errors.RequestAbortedError):
        g.get(timeout=5)


def test_gevent_timeout_around_request_aborts_it(make_server, make_client):
    def handler(conn):
        while (req := conn.read_request()) is not None:
            if req.target == "/hang":
                conn.wait_closed()
                return
            conn.respond(b"ok")

    server = make_server(handler)
    client = make_client(server.origin)
    with pytest.raises(gevent.Timeout):
        with gevent.Timeout(0.2):
            client.request(path="/hang")
    assert server.conns[0].eof.wait(2)
    assert client.request(path="/").body.text() == "ok"


# -- dispatch() and handlers ---------------------------------------------------------------


class Recorder:
    """A dispatch handler that records every call."""

    def __init__(self):
        self.calls = []
        self.chunks = []
        self.ended = False
        self.error = None
        self.trailers = None
        self.done = gevent.event.Event()

    def on_request_start(self, controller, context):
        self.calls.append("on_request_start")
        self.controller = controller

    def on_response_start(self, controller, status_code, headers, status_message):
        self.calls.append("on_response_start")
        self.status = (status_code, headers, status_message)

    def on_response_data(self, controller, chunk):
        self.calls.append("on_response_data")
        assert isinstance(chunk, bytes)
        self.chunks.append(chunk)

    def on_response_end(self, controller, trailers):
        self.calls.append("on_response_end")
        self.trailers = trailers
        self.ended = True
        self.done.set()

    def on_response_error(self, controller, err):
        self.calls.append("on_response_error")
        self.error = err
        self.done.set()


def test_dispatch_call_order(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 Fine\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n")
        conn.send(b"3\r\nabc\r\n")
        gevent.sleep(0.01)
        conn.send(b"2\r\nde\r\n0\r\nX-T: t\r\n\r\n")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    h = Recorder()
    # With pipelining=1 the one request fills the client: False means "wait for drain".
    assert client.dispatch({"path": "/", "method": "GET"}, h) in (True, False)
    assert h.done.wait(5)
    assert h.calls[0] == "on_request_start"
    assert h.calls[1] == "on_response_start"
    assert h.calls[-1] == "on_response_end"
    assert set(h.calls[2:-1]) == {"on_response_data"}
    assert h.status == (200, {"transfer-encoding": "chunked", "x-a": "b"}, "Fine")
    assert b"".join(h.chunks) == b"abcde"
    assert h.trailers == {"x-t": "t"}
    assert h.controller.raw_headers == [b"Transfer-Encoding", b"chunked", b"X-A", b"b"]
    assert isinstance(h.controller, greenhttp.Controller)


def test_dispatch_error_without_on_response_error_raises(make_client):
    client = make_client("http://127.0.0.1:1")

    class NoError:
        def on_request_start(self, c, ctx):
            pass

    with pytest.raises(errors.InvalidArgumentError):
        client.dispatch({"path": "no-slash", "method": "GET"}, NoError())


def test_dispatch_error_goes_to_on_response_error(make_client):
    client = make_client("http://127.0.0.1:1")
    h = Recorder()
    assert client.dispatch({"path": "no-slash", "method": "GET"}, h) is False
    assert isinstance(h.error, errors.InvalidArgumentError)
    assert h.calls == ["on_response_error"]


def test_controller_pause_and_resume(make_server, make_client):
    server = make_server(serve_forever(b"p" * 500_000))
    client = make_client(server.origin)

    class Pausing(Recorder):
        def on_response_start(self, controller, *a):
            super().on_response_start(controller, *a)
            controller.pause()

    h = Pausing()
    client.dispatch({"path": "/", "method": "GET"}, h)
    wait_for(lambda: "on_response_start" in h.calls, what="the head")
    gevent.sleep(0.1)
    assert h.controller.paused is True
    assert h.chunks == []
    h.controller.resume()
    assert h.done.wait(5)
    assert h.controller.paused is False
    assert sum(map(len, h.chunks)) == 500_000


def test_controller_abort_from_a_handler(make_server, make_client):
    server = make_server(serve_forever(b"a" * 100_000))
    client = make_client(server.origin)

    class Aborting(Recorder):
        def on_response_data(self, controller, chunk):
            super().on_response_data(controller, chunk)
            controller.abort(ValueError("seen enough"))

    h = Aborting()
    client.dispatch({"path": "/", "method": "GET"}, h)
    assert h.done.wait(5)
    assert isinstance(h.error, ValueError)
    assert h.controller.aborted and isinstance(h.controller.reason, ValueError)
    assert h.calls.count("on_response_error") == 1
    assert "on_response_end" not in h.calls
    assert client.request(path="/").body.bytes() == b"a" * 100_000


@pytest.mark.parametrize("where", ["on_request_start", "on_response_start", "on_response_data"])
def test_a_raising_handler_fails_only_its_request(make_server, make_client, where):
    server = make_server(serve_forever(b"body"))
    client = make_client(server.origin)
    boom = RuntimeError(where)

    class Raising(Recorder):
        pass

    original = getattr(Recorder, where)

    def raising(self, *args):
        original(self, *args)
        raise boom

    setattr(Raising, where, raising)
    h = Raising()
    client.dispatch({"path": "/", "method": "GET"}, h)
    assert h.done.wait(5)
    assert h.error is boom
    assert h.calls.count("on_response_error") == 1
    assert "on_response_end" not in h.calls
    # The reader greenlet survived: the next request works.
    assert client.request(path="/").body.text() == "body"


@pytest.mark.parametrize("where", ["on_request_start", "on_response_start", "on_response_data", "on_response_end"])
def test_a_handler_whose_method_cannot_be_looked_up_fails_only_its_request(make_server, make_client, where):
    # A lookup that raises (a proxy whose target is gone, say) is a raising
    # handler like any other: its request fails with that error, and the client
    # goes on (on the same connection unless the response was cut short).
    server = make_server(serve_forever(b"body"))
    client = make_client(server.origin)
    boom = RuntimeError(where)

    def lookup(self):
        raise boom

    broken = type("Broken", (Recorder,), {where: property(lookup)})()
    client.dispatch({"path": "/", "method": "GET"}, broken)
    assert broken.done.wait(5)
    assert broken.error is boom
    assert broken.calls.count("on_response_error") == 1
    assert client.request(path="/").body.text() == "body"
    if where in ("on_request_start", "on_response_end"):  # before the request was sent, after its response
        assert len(server.conns) == 1


def test_on_response_end_raising_goes_to_on_response_error(make_server, make_client):
    server = make_server(serve_forever(b"body"))
    client = make_client(server.origin)
    boom = RuntimeError("end")

    class Raising(Recorder):
        def on_response_end(self, controller, trailers):
            super().on_response_end(controller, trailers)
            raise boom

    h = Raising()
    reported = []
    client.on("error", reported.append)
    client.dispatch({"path": "/", "method": "GET"}, h)
    wait_for(lambda: h.error is not None or reported, what="the error")
    assert h.error is boom or reported == [boom]
    assert client.request(path="/").body.text() == "body"


def test_on_request_start_called_again_when_re_sent(make_server, make_client):
    def handler(conn):
        if conn.server.accepted == 1:
            with gevent.Timeout(3, False):
                for _ in range(2):
                    conn.read_request()
            conn.close()
            return
        while (req := conn.read_request()) is not None:
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin, pipelining=2)
    h1, h2 = Recorder(), Recorder()
    client.dispatch({"path": "/1", "method": "GET", "blocking": False}, h1)
    client.dispatch({"path": "/2", "method": "GET", "blocking": False}, h2)
    assert h1.done.wait(5) and h2.done.wait(5)
    assert isinstance(h1.error, errors.SocketError)
    assert h2.calls.count("on_request_start") == 2
    assert h2.ended and b"".join(h2.chunks) == b"/2"
