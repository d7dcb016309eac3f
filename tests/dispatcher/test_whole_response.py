"""A response whose head and whole body arrive in one read is delivered in one step.

``request()``'s handler takes such a response at once (its class is in
``WHOLE_RESPONSE_TAKERS``);
any other handler gets ``on_response_start``, ``on_response_data`` and
``on_response_end`` as usual. Both must see the same response.
"""

from __future__ import annotations

from typing import Any

import gevent.event

import greenhttp
from greenhttp._core.request import WHOLE_RESPONSE_TAKERS
from testkit import ServerConn

BODY = b"0123456789" * 10
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nx-one: 1\r\ncontent-length: 100\r\n\r\n" + BODY
)


class _Recorder:
    """A dispatch handler that records its callbacks; ``done`` is set at the end."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.done = gevent.event.Event()

    def on_response_start(self, controller: Any, status: int, headers: Any, message: str) -> None:
        self.calls.append(("head", status, message))

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        self.calls.append(("data", chunk))

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        self.calls.append(("end", trailers))
        self.done.set()

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        self.calls.append(("error", err))
        self.done.set()


def _serve_in_one_write(conn: ServerConn) -> None:
    # The whole response in one send: the client reads head and body together.
    while conn.read_request() is not None:
        conn.send(RESPONSE)


def test_request_gets_a_whole_response_in_one_step(make_server, make_client):
    server = make_server(_serve_in_one_write)
    client = make_client(server.origin)
    # Twice: the second head is a parser cache hit, the path that delivers in one step.
    for _ in range(2):
        ac = greenhttp.AbortController()
        with client.request(path="/", method="GET", signal=ac.signal) as resp:
            assert resp.status_code == 200
            assert resp.status_text == "OK"
            assert resp.headers["x-one"] == "1" and resp.headers["content-length"] == "100"
            assert resp.body.content_length == 100
            assert resp.body.bytes() == BODY
            assert resp.trailers == {}
        # The request is over: aborting its signal now changes nothing.
        ac.abort(RuntimeError("too late"))
    assert client.stats.running == 0 and client.stats.pending == 0
    assert server.accepted == 1


def test_raw_headers_and_a_zero_high_water_mark_in_one_step(make_server, make_client):
    server = make_server(_serve_in_one_write)
    client = make_client(server.origin)
    for _ in range(2):
        resp = client.request(path="/", response_headers="raw", high_water_mark=0)
        assert resp.headers[:2] == [b"content-type", b"text/plain"]
        assert resp.body.read(10) == BODY[:10]
        assert resp.body.read() == BODY[10:]


def test_an_empty_whole_body(make_server, make_client):
    def serve(conn: ServerConn) -> None:
        while conn.read_request() is not None:
            conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")

    server = make_server(serve)
    client = make_client(server.origin)
    for _ in range(2):
        resp = client.request(path="/")
        assert resp.body.bytes() == b""
        assert list(client.request(path="/").body) == []


def test_a_dispatch_handler_gets_the_usual_callbacks(make_server, make_client):
    server = make_server(_serve_in_one_write)
    client = make_client(server.origin)

    class Recorder(_Recorder):
        def on_request_start(self, controller: Any, context: Any) -> None:
            self.calls.append("start")

    for _ in range(2):
        rec = Recorder()
        client.dispatch({"path": "/", "method": "GET"}, rec)
        assert rec.done.wait(5)
        assert rec.calls == ["start", ("head", 200, "OK"), ("data", BODY), ("end", {})]


def test_a_handler_that_takes_whole_responses_gets_them_whole(make_server, make_client, monkeypatch):
    """The internal protocol: a handler whose class is in ``WHOLE_RESPONSE_TAKERS`` gets
    a response read in one piece through it alone, and one split over reads the usual
    way; a wrapper that forwards attributes to such a handler gets the usual way."""
    head_seen = gevent.event.Event()

    def serve(conn: ServerConn) -> None:
        while (req := conn.read_request()) is not None:
            if req.target == "/split":
                head, body = RESPONSE.split(b"\r\n\r\n", 1)
                conn.send(head + b"\r\n\r\n")
                assert head_seen.wait(5)  # the body comes in a read of its own
                conn.send(body)
            else:
                conn.send(RESPONSE)

    server = make_server(serve)
    client = make_client(server.origin)

    class Whole(_Recorder):
        def _on_response_whole(self, controller: Any, status: int, headers: Any, message: str, body: bytes) -> None:
            self.calls.append(("whole", status, message, body))
            self.done.set()

        def on_response_start(self, controller: Any, status: int, headers: Any, message: str) -> None:
            super().on_response_start(controller, status, headers, message)
            head_seen.set()

    monkeypatch.setitem(WHOLE_RESPONSE_TAKERS, Whole, Whole._on_response_whole)
    seen = []
    for path in ("/", "/", "/split"):
        head_seen.clear()  # (the first "/", a head not yet cached, went the usual way)
        handler = Whole()
        client.dispatch({"path": path, "method": "GET"}, handler)
        assert handler.done.wait(5)
        seen.append(handler.calls)
    assert seen[1] == [("whole", 200, "OK", BODY)]  # a cached head, all in one read
    assert seen[2] == [("head", 200, "OK"), ("data", BODY), ("end", {})]

    class Forwarding:
        def __init__(self, inner: Whole) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    inner = Whole()
    client.dispatch({"path": "/", "method": "GET"}, Forwarding(inner))
    assert inner.done.wait(5)
    assert inner.calls == [("head", 200, "OK"), ("data", BODY), ("end", {})]


def test_a_handler_that_pauses_at_the_head_gets_the_body_on_resume(make_server, make_client):
    server = make_server(_serve_in_one_write)
    client = make_client(server.origin)

    class Pausing(_Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.controller: Any = None
            self.head = gevent.event.Event()

        def on_response_start(self, controller: Any, status: int, headers: Any, message: str) -> None:
            super().on_response_start(controller, status, headers, message)
            self.controller = controller
            controller.pause()
            self.head.set()

    for _ in range(2):  # the second head is cached: head and body come in one step
        handler = Pausing()
        client.dispatch({"path": "/", "method": "GET"}, handler)
        assert handler.head.wait(5)
        assert handler.calls == [("head", 200, "OK")]  # paused: the body waits
        handler.controller.resume()
        assert handler.done.wait(5)
        assert handler.calls == [("head", 200, "OK"), ("data", BODY), ("end", {})]
