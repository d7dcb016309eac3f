"""Test kit shared by the test folders: scripted raw-socket servers and small helpers.

Imported as ``from testkit import ...`` (a plain module: every folder has its
own ``conftest.py``, so helpers must not live in one).
"""

from __future__ import annotations

import ctypes
import gc
import os
import re
import signal
import socket as stdsocket
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import gevent
import gevent.event
import gevent.hub
import gevent.queue
import greenlet
from gevent import socket as gsocket
from gevent.server import StreamServer
from gevent.threadpool import _WorkerGreenlet

# prctl(2) from libc, looked up once here: a preexec_fn must not load libraries.
_PR_SET_PDEATHSIG = 1
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None) if sys.platform == "linux" else None


def die_with_parent() -> None:
    """A ``preexec_fn`` for the servers test fixtures start: the child gets SIGTERM
    when the test process dies (Linux), so a crashed run (a segfault, a kill -9)
    leaves no server behind. Elsewhere it does nothing."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


# ---------------------------------------------------------------------------
# scripted raw-socket servers
# ---------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    """One request as the scripted server read it off the wire."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]  # original case, wire order
    head: bytes  # the exact head bytes, request line to the blank line included
    body: bytes = b""
    chunked: bool = False
    raw: bytes = b""  # head + body framing exactly as received

    def header(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    def header_list(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self.headers if k.lower() == name]


class ServerConn:
    """One accepted connection, seen from the scripted server's side."""

    def __init__(self, sock: Any, server: ScriptedServer) -> None:
        self.sock = sock
        self.server = server
        self.buf = b""
        self.closed = False
        #: set once this side read EOF (or a reset): the client closed the connection
        self.eof = gevent.event.Event()

    # -- reading -----------------------------------------------------------
    def _fill(self) -> bool:
        try:
            data = self.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.eof.set()
            return False
        self.buf += data
        return True

    def read_until(self, marker: bytes) -> bytes | None:
        """Bytes up to and including ``marker``; None on EOF before it."""
        while True:
            i = self.buf.find(marker)
            if i >= 0:
                out, self.buf = self.buf[: i + len(marker)], self.buf[i + len(marker) :]
                return out
            if not self._fill():
                return None

    def read_exact(self, n: int) -> bytes | None:
        while len(self.buf) < n:
            if not self._fill():
                return None
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_head(self) -> RecordedRequest | None:
        """Read one request head; None if the client closed first."""
        head = self.read_until(b"\r\n\r\n")
        if head is None:
            return None
        lines = head[:-4].split(b"\r\n")
        method, target, version = lines[0].decode("latin-1").split(" ", 2)
        headers = []
        for line in lines[1:]:
            name, _, value = line.decode("latin-1").partition(":")
            headers.append((name, value.strip()))
        return RecordedRequest(method, target, version, headers, head, raw=head)

    def read_body(self, req: RecordedRequest) -> bytes:
        """Read the body ``req``'s head announces (content-length or chunked)."""
        te = req.header("transfer-encoding")
        if te is not None and "chunked" in te.lower():
            req.chunked = True
            parts = []
            while True:
                line = self.read_until(b"\r\n")
                assert line is not None, "EOF inside a chunked body"
                req.raw += line
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    end = self.read_until(b"\r\n")
                    assert end is not None
                    req.raw += end
                    break
                data = self.read_exact(size + 2)
                assert data is not None and data.endswith(b"\r\n")
                req.raw += data
                parts.append(data[:-2])
            req.body = b"".join(parts)
            return req.body
        cl = req.header("content-length")
        if cl is not None:
            data = self.read_exact(int(cl))
            assert data is not None, "EOF inside a content-length body"
            req.raw += data
            req.body = data
        return req.body

    def read_request(self) -> RecordedRequest | None:
        """Read one whole request (head and body) and record it on the server."""
        req = self.read_head()
        if req is None:
            return None
        self.read_body(req)
        self.server.requests.append(req)
        return req

    # -- writing -----------------------------------------------------------
    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def respond(
        self,
        body: bytes = b"hello",
        status: str = "200 OK",
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        """Send a complete content-length response."""
        lines = [f"HTTP/1.1 {status}\r\n"]
        for k, v in headers or []:
            lines.append(f"{k}: {v}\r\n")
        lines.append(f"Content-Length: {len(body)}\r\n\r\n")
        self.send("".join(lines).encode("latin-1") + body)

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.shutdown(stdsocket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def wait_closed(self, timeout: float = 5.0) -> bool:
        """From the handler: read until the client closes (EOF or reset); False on timeout.

        Other greenlets wait with ``conn.eof.wait(timeout)`` instead (one reader per socket).
        """
        with gevent.Timeout(timeout, False):
            while self._fill():
                pass
            return True
        return False


def response(body: bytes = b"hello", status: str = "200 OK", headers: list[tuple[str, str]] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status}\r\n"]
    for k, v in headers or []:
        lines.append(f"{k}: {v}\r\n")
    lines.append(f"Content-Length: {len(body)}\r\n\r\n")
    return "".join(lines).encode("latin-1") + body


def serve_forever(body: bytes = b"hello", headers: list[tuple[str, str]] | None = None) -> Callable[[ServerConn], None]:
    """A handler answering every request on the connection with ``body``."""

    def handler(conn: ServerConn) -> None:
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond(body, headers=headers)

    return handler


class ScriptedServer:
    """A loopback ``StreamServer`` running ``handler(conn)`` per connection."""

    def __init__(
        self, handler: Callable[[ServerConn], Any], *, unix_path: str | None = None, ssl_context: Any = None
    ) -> None:
        self.handler = handler
        self.accepted = 0
        self.requests: list[RecordedRequest] = []
        self.conns: list[ServerConn] = []
        self.errors: list[BaseException] = []
        kw = {"ssl_context": ssl_context} if ssl_context is not None else {}
        if unix_path is not None:
            listener = gsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
            listener.bind(unix_path)
            listener.listen(128)
            self._server = StreamServer(listener, self._handle, **kw)
        else:
            self._server = StreamServer(("127.0.0.1", 0), self._handle, **kw)
        self._server.start()
        self.unix_path = unix_path
        self.tls = ssl_context is not None

    @property
    def port(self) -> int:
        return self._server.server_port

    @property
    def origin(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def _handle(self, sock: Any, _addr: Any) -> None:
        self.accepted += 1
        if sock.family != stdsocket.AF_UNIX:
            # Each send leaves at once, as scripted, instead of waiting for the client's
            # delayed ACK behind an earlier one (Nagle's algorithm).
            sock.setsockopt(stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY, 1)
        conn = ServerConn(sock, self)
        self.conns.append(conn)
        try:
            self.handler(conn)
        except OSError:
            conn.eof.set()  # a send failed: the client reset the connection
        except gevent.GreenletExit:
            pass
        except AssertionError as exc:  # surfaced by tests that check server.errors
            self.errors.append(exc)

    def stop(self) -> None:
        self._server.stop(timeout=1)
        for conn in self.conns:
            try:
                conn.sock.close()
            except OSError:
                pass


class BrokenWrapper(RuntimeError):
    """What the wrapping socket raises (not an OSError)."""


class FailingSocket:
    """A connected gevent socket whose ``sendall`` raises :class:`BrokenWrapper`
    from its ``fail_from``-th call on (0: never), or with ``reads=True`` its
    ``recv_into``; everything else is the socket's."""

    def __init__(self, sock: Any, fail_from: int, reads: bool = False) -> None:
        self._sock = sock
        self._fail_from = fail_from
        self._reads = reads
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def _count(self) -> None:
        self.calls += 1
        if self._fail_from and self.calls >= self._fail_from:
            raise BrokenWrapper("the wrapper broke")

    def sendall(self, data: Any) -> None:
        if not self._reads:
            self._count()
        self._sock.sendall(data)

    def recv_into(self, buffer: Any, *args: Any) -> int:
        if self._reads:
            self._count()
        return int(self._sock.recv_into(buffer, *args))


def wrapping_connector(fail_from: list[int], reads: bool = False) -> Any:
    """A connector whose n-th socket fails from call ``fail_from[n]`` on (0: never)
    of its ``sendall``, or with ``reads=True`` of its ``recv_into``."""
    from greenhttp._net.connector import build_connector

    base = build_connector()
    made: list[FailingSocket] = []

    def connect(options: dict[str, Any], callback: Any) -> None:
        def done(err: Any, sock: Any = None) -> None:
            if err is not None:
                callback(err, None)
                return
            made.append(FailingSocket(sock, fail_from[len(made)], reads))
            callback(None, made[-1])

        base(options, done)

    connect.made = made  # type: ignore[attr-defined]
    return connect


def refused_origin() -> str:
    """An ``http://127.0.0.1:<port>`` origin where nothing listens (a port just freed)."""
    s = stdsocket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def wait_for(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> None:
    """Yield to gevent until ``predicate()`` is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        gevent.sleep(0.005)


class WsTalk:
    """A ``greenhttp.WebSocket`` whose events are recorded, for tests against real servers.

    ``next()`` is the next message; ``ask(data)`` sends and returns the reply;
    every wait is bounded (10 s) and names the events seen on failure.
    """

    def __init__(self, url: str, init: Any = None) -> None:
        from greenhttp import WebSocket

        self.ws = WebSocket(url, init)
        self.ws.binary_type = "arraybuffer"
        self.events: list[Any] = []
        self.opened = gevent.event.Event()
        self.closed = gevent.event.Event()
        self.inbox: gevent.queue.Queue = gevent.queue.Queue()
        for t in ("open", "message", "error", "close"):
            self.ws.add_event_listener(t, self._on)

    def _on(self, ev: Any) -> None:
        self.events.append(ev)
        if ev.type == "open":
            self.opened.set()
        elif ev.type == "message":
            self.inbox.put(ev.data)
        elif ev.type == "close":
            self.closed.set()

    @property
    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def wait_open(self) -> None:
        assert self.opened.wait(10), f"no open event: {self.events}"

    def next(self) -> Any:
        return self.inbox.get(timeout=10)

    def ask(self, data: Any) -> Any:
        self.ws.send(data)
        return self.next()

    def wait_closed(self) -> Any:
        assert self.closed.wait(10), f"no close event: {self.events}"
        return self.events[-1]

    def close_cleanly(self, code: int = 1000, reason: str = "") -> Any:
        self.ws.close(code, reason)
        close = self.wait_closed()
        assert (close.code, close.was_clean) == (code, True), self.events
        return close


# ---------------------------------------------------------------------------
# leak checks (the autouse fixtures of tests/, tests/interceptors, tests/websocket
# and tests/faults, and benchmarks/soak.py)
# ---------------------------------------------------------------------------


def open_fds() -> dict[int, str]:
    """This process's open file descriptors and what they point to."""
    out: dict[int, str] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the descriptor listdir itself used, closed since
            continue
    return out


def is_infrastructure(g: Any) -> bool:
    """A thread's main greenlet, a hub, or a thread pool's worker: never a leak."""
    return g.parent is None or isinstance(g, (gevent.hub.Hub, _WorkerGreenlet))


def live_greenlets() -> list[Any]:
    """Every greenlet on the heap that is not dead (a spawned one not yet started
    counts) and not infrastructure."""
    return [
        g for g in gc.get_objects()
        if isinstance(g, greenlet.greenlet) and not g.dead and not is_infrastructure(g)
    ]


def leftovers(
    fds_before: Iterable[int], new_greenlets: Callable[[], list[Any]], seconds: float
) -> tuple[dict[int, str], list[Any]]:
    """Give gevent up to ``seconds`` to finish closing what some work made; return the
    file descriptors open now and not in ``fds_before`` (with their targets) and
    ``new_greenlets()``: both empty when nothing leaked."""
    before = set(fds_before)
    deadline = time.monotonic() + seconds
    attempt = 0
    while True:
        # A round of the hub's callbacks every time (sleep(0) is one): what was spawned
        # meanwhile starts from a callback. Short sleeps alone are timers, resumed from
        # the timer phase; on libuv, timers begun from timer callbacks (this loop, with
        # a gc.collect() of more than 1 ms between) can keep the loop in that phase, and
        # the greenlets waiting to start then never did: a false "leak" late in a run.
        gevent.sleep(0)
        if attempt:
            gevent.sleep(0.001)
            gc.collect()
        attempt += 1
        fds = {fd: target for fd, target in open_fds().items() if fd not in before}
        greenlets = new_greenlets()
        if (not fds and not greenlets) or time.monotonic() > deadline:
            return fds, greenlets


_PYTEST_FRAME = re.compile(r"[/\\](_pytest|pluggy)[/\\]")


def _describe(g: Any) -> str:
    """A leaked greenlet, with where it was spawned (gevent records it by default,
    ``gevent.config.track_greenlet_tree``) and its hub (whose thread it runs in)."""
    hub_thread = getattr(g.parent, "thread_ident", None)
    here = gevent.get_hub()
    lines = [
        f"{g!r} started={bool(g) or g.dead} ran={g.gr_frame is not None or g.dead}"
        f" hub_thread={hub_thread} ({_thread_name(hub_thread)}); this hub's thread"
        f" {here.thread_ident}, its parent is this hub: {g.parent is here}"
    ]
    loop = getattr(g.parent, "loop", None)
    queued = getattr(loop, "_callbacks", None)
    if queued is not None:
        mine = sum(1 for cb in list(queued) if getattr(cb, "callback", None) == g.switch)
        lines.append(f"  its hub's loop: {len(queued)} callbacks queued, {mine} of them to start it")
    stack = getattr(g, "spawning_stack", None)
    if stack is not None:
        frames = [f for f in traceback.extract_stack(stack) if not _PYTEST_FRAME.search(f.filename)]
        lines.append("  spawned at:\n" + "".join(traceback.format_list(frames[-6:])).rstrip())
    spawner = getattr(g, "spawning_greenlet", None)
    if spawner is not None:
        lines.append(f"  spawned by: {spawner()!r}")
    frame = g.gr_frame
    if frame is not None:
        lines.append("  waiting in:\n" + "".join(traceback.format_stack(frame)[-4:]).rstrip())
    while frame is not None:
        core = getattr(frame.f_locals.get("self"), "_core", None)
        if core is not None and hasattr(core, "_pending"):
            lines.append(f"  client core: {_core_state(core)}")
        frame = frame.f_back
    return "\n".join(lines)


def _core_state(core: Any) -> str:
    """The fields of a ClientCore that decide whether its close() can finish."""
    conn = core._conn
    fields = {
        "closed": core._closed,
        "destroyed": core._destroyed,
        "pending": [(r.method, r.path, r.done) for r in core._pending],
        "connecting": core._connecting,
        "in_resume": core._in_resume,
        "held": len(core._held),
        "readers": list(core._readers),
        "conn": None if conn is None else (type(conn).__name__, len(conn.running), conn.destroyed),
        "close_parkers": len(core._close_parkers),
        "closing_parkers": core._closing_parkers,
    }
    return ", ".join(f"{k}={v!r}" for k, v in fields.items())


def _thread_name(ident: Any) -> str:
    for thread in threading.enumerate():
        if thread.ident == ident:
            return thread.name
    return "no live thread"


def describe_leaks(fds: dict[int, str], greenlets: list[Any]) -> str:
    """What :func:`leftovers` found, each greenlet with where it was spawned."""
    described = "\n".join(_describe(g) for g in greenlets)
    return f"leak: new fds {fds}, new greenlets:\n{described}"


def settle_leaks(fds_before: Iterable[int], new_greenlets: Callable[[], list[Any]], seconds: float) -> None:
    """:func:`leftovers`, failing (``AssertionError``) when anything is left."""
    fds, greenlets = leftovers(fds_before, new_greenlets, seconds)
    if fds or greenlets:
        raise AssertionError(describe_leaks(fds, greenlets))


class LeakCheck:
    """Open fds and greenlets that ran during a block of work and are still alive after it.

    ``start()`` before, ``leaks(timeout)`` (or ``settle(timeout)``, which fails)
    after, ``stop()`` at the end. Greenlets are tracked with ``greenlet.settrace``
    (weakly: every greenlet that switches is remembered), so the cost does not
    grow with the heap; one that never ran is no leak.
    """

    def __init__(self) -> None:
        self._fds: set[int] = set()
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()
        self._previous: Any = None
        self._me: Any = None

    def start(self) -> None:
        gevent.sleep(0)
        self._fds = set(open_fds())
        self._me = greenlet.getcurrent()
        seen = self._seen

        def trace(event: str, args: Any) -> None:
            if event in ("switch", "throw"):
                seen.add(args[0])
                seen.add(args[1])
            if previous is not None:
                previous(event, args)

        previous = self._previous = greenlet.settrace(trace)

    def stop(self) -> None:
        greenlet.settrace(self._previous)

    def _live(self) -> list[Any]:
        me = greenlet.getcurrent()
        return [
            g for g in list(self._seen)
            if not g.dead and g is not me and g is not self._me and not is_infrastructure(g)
        ]

    def leaks(self, timeout: float = 2.0) -> tuple[dict[int, str], list[Any]]:
        """``(new_fds, live_greenlets)`` after up to ``timeout`` seconds of settling."""
        return leftovers(self._fds, self._live, timeout)

    def settle(self, timeout: float = 2.0) -> None:
        """:meth:`leaks`, failing (``AssertionError``) when anything is left."""
        settle_leaks(self._fds, self._live, timeout)
