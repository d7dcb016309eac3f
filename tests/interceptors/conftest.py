"""Fixtures for the interceptor tests.

The scripted servers (``make_server``), ``make_client`` and ``nginx`` come
from ``tests/conftest.py``. Here:

* ``make_agent``: a ``greenhttp.Agent`` destroyed at teardown (it routes by
  origin, which cross-origin redirects need);
* ``routes``: a scripted server answering by request target from a dict of
  ``target -> handler(conn, req)``, keeping the connection alive;
* ``Recorder``: a dispatch handler that records every callback;
* ``gated``: a scripted server holding every response until its ``gate`` is set;
* an autouse leak check, as for ``tests/dispatcher``: no new file
  descriptor or greenlet (a retry timer's, a re-dispatch's) may outlive a test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import pytest
from gevent.server import StreamServer

import greenhttp
from greenhttp.cache_stores import MemoryCacheStore, SqliteCacheStore
from testkit import live_greenlets, open_fds, settle_leaks

Handler = Callable[[Any, Any], Any]


@pytest.fixture
def make_agent():
    agents: list[greenhttp.Agent] = []

    def make(**options: Any) -> greenhttp.Agent:
        a = greenhttp.Agent(**options)
        agents.append(a)
        return a

    yield make
    for a in agents:
        with gevent.Timeout(5):
            a.destroy()


@pytest.fixture
def routes(make_server):
    """``routes({"/a": fn, ...})`` starts a keep-alive server calling ``fn(conn, req)`` per request.

    An unknown target gets a 404. ``server.requests`` records what arrived.
    """

    def make(table: dict[str, Handler]) -> Any:
        def handler(conn: Any) -> None:
            while True:
                req = conn.read_request()
                if req is None:
                    return
                fn = table.get(req.target)
                if fn is None:
                    conn.respond(b"no route", status="404 Not Found")
                elif fn(conn, req) is False:
                    conn.close()  # the handler asks to end the connection
                    return

        return make_server(handler)

    return make


class Recorder:
    """A dispatch handler that records its callbacks; ``done`` is set at the end."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.status: int | None = None
        self.headers: Any = None
        self.body = b""
        self.trailers: Any = None
        self.error: BaseException | None = None
        self.controller: Any = None
        self.context: Any = None
        self.done = gevent.event.Event()

    def on_request_start(self, controller: Any, context: Any) -> None:
        self.calls.append(("start",))
        self.controller = controller
        self.context = context

    def on_response_start(self, controller: Any, status_code: int, headers: Any, status_message: str) -> None:
        self.calls.append(("response_start", status_code))
        if status_code >= 200:
            self.status = status_code
            self.headers = headers

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        self.calls.append(("data", len(chunk)))
        self.body += chunk

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        self.calls.append(("end",))
        self.trailers = trailers
        self.done.set()

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        self.calls.append(("error", type(err).__name__))
        self.error = err
        self.done.set()

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    if request.param == "memory":
        yield MemoryCacheStore()
    else:
        s = SqliteCacheStore(tmp_path / "cache.sqlite")
        yield s
        s.close()


@pytest.fixture
def origin(make_server):
    """``origin(reply)`` starts a keep-alive server answering each request with ``reply(req)``."""

    def make(reply):
        def handler(conn):
            while True:
                req = conn.read_request()
                if req is None:
                    return
                answer = reply(req)
                if answer is None:
                    conn.close()
                    return
                status, headers, body = answer
                head = [f"HTTP/1.1 {status}\r\n"]
                head += [f"{k}: {v}\r\n" for k, v in headers]
                if not status.startswith(("304", "204")):
                    head.append(f"Content-Length: {len(body)}\r\n")
                head.append("\r\n")
                conn.send("".join(head).encode("latin-1") + (b"" if req.method == "HEAD" else body))

        return make_server(handler)

    return make


@pytest.fixture
def recorder():
    return Recorder


# ---------------------------------------------------------------------------
# leak check
# ---------------------------------------------------------------------------


_warmed_up = False


def _warm_up() -> None:
    """Let gevent make its lazily created resources (resolver, watchers) before counting."""
    global _warmed_up
    if _warmed_up:
        return
    _warmed_up = True

    def answer(sock: Any, _addr: Any) -> None:
        sock.recv(65536)
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        sock.close()

    server = StreamServer(("127.0.0.1", 0), answer)
    server.start()
    try:
        client = greenhttp.Client(f"http://127.0.0.1:{server.server_port}")
        client.request(path="/").body.bytes()
        client.destroy()
    finally:
        server.stop()
    for _ in range(20):
        gevent.sleep(0)


@pytest.fixture(autouse=True)
def leak_check():
    _warm_up()
    gevent.sleep(0)
    fds_before = open_fds()
    greenlets_before = {id(g) for g in live_greenlets()}
    yield
    settle_leaks(fds_before, lambda: [g for g in live_greenlets() if id(g) not in greenlets_before], 2.0)


@pytest.fixture
def gated(make_server):
    """A server that holds every response until ``gate`` is set, then answers ``body``
    (with trailers when ``chunked``); ``server.requests`` records the requests."""

    def make(body=b"shared body", chunked=False, status="200 OK"):
        gate = gevent.event.Event()

        def handler(conn):
            while True:
                req = conn.read_request()
                if req is None:
                    return
                gate.wait(10)
                if chunked:
                    half = len(body) // 2
                    conn.send(
                        f"HTTP/1.1 {status}\r\nTransfer-Encoding: chunked\r\nTrailer: x-sum\r\nX-Req: {len(conn.server.requests)}\r\n\r\n".encode()
                        + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\nx-sum: 42\r\n\r\n" % (half, body[:half], len(body) - half, body[half:])
                    )
                else:
                    conn.respond(body, status=status, headers=[("X-Req", str(len(conn.server.requests)))])

        server = make_server(handler)
        server.gate = gate
        return server

    return make
