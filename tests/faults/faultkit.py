"""Fault injection for the reliability tests and the soak: misbehaving servers, leak checks.

Nothing here imports pytest, so ``benchmarks/soak.py`` uses the same pieces
(it puts ``tests`` and ``tests/faults`` on ``sys.path``).

* :func:`rst` closes a socket with a TCP reset instead of a FIN.
* :class:`FaultyServer` is a loopback HTTP/1.1 server whose connections each
  draw one behaviour from a weighted mix (:data:`BEHAVIOURS`): most serve
  keep-alive responses, the rest reset, send garbage, stall, or cut a body
  short at a random request. It counts what it injected, so a load test can
  check that every injected fault shows up as a documented error and every
  clean answer as a success.
* :class:`Outcomes` tallies requests by result class.
* :class:`LeakCheck` (from ``tests/testkit.py``) compares open file
  descriptors and live greenlets before and after a block of work;
  :class:`HubErrors` collects the exceptions that killed a greenlet
  meanwhile.

Every loop is bounded and every greenlet the server starts ends when
:meth:`FaultyServer.stop` returns.
"""

from __future__ import annotations

import random
import socket as stdsocket
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import gevent
import gevent.hub
from gevent.server import StreamServer

from greenhttp import errors
from testkit import LeakCheck, open_fds

__all__ = [
    "BEHAVIOURS",
    "DOCUMENTED_ERRORS",
    "EXPECTED_ERROR",
    "FaultyServer",
    "guarded",
    "HubErrors",
    "LeakCheck",
    "Outcomes",
    "open_fds",
    "rst",
]

#: The error classes a request through a Pool may end with when its server
#: misbehaves (docs/errors.md, docs/reliability.md). Anything else is a bug.
DOCUMENTED_ERRORS: tuple[type[BaseException], ...] = (
    errors.SocketError,
    errors.HTTPParserError,
    errors.HeadersOverflowError,
    errors.HeadersTimeoutError,
    errors.BodyTimeoutError,
    errors.ResponseExceededMaxSizeError,
)


def rst(sock: Any) -> None:
    """Close ``sock`` with a TCP RST (SO_LINGER 0) rather than a FIN."""
    try:
        sock.setsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


# ---------------------------------------------------------------------------
# a loopback HTTP/1.1 server with a mix of faulty connections
# ---------------------------------------------------------------------------

#: behaviour name -> default weight. ``ok`` connections serve 1-20 requests and
#: say ``Connection: close`` on the last (a server ending keep-alive politely);
#: the others serve a random number of good responses first (0-3), then
#: misbehave once and end the connection.
BEHAVIOURS: dict[str, int] = {
    "ok": 60,
    "reset": 6,  # RST after reading a request, before any byte of the answer
    "reset_mid_body": 6,  # head and part of the body, then RST
    "close_mid_body": 4,  # head and part of a content-length body, then FIN
    "truncated_chunk": 4,  # a chunk shorter than its size line, then FIN
    "garbage": 5,  # bytes that are not HTTP
    "stall": 5,  # reads the request, answers nothing until the client leaves
}

#: the error each behaviour must produce in the request it hits
EXPECTED_ERROR: dict[str, type[BaseException]] = {
    "reset": errors.SocketError,
    "reset_mid_body": errors.SocketError,
    "close_mid_body": errors.SocketError,
    "truncated_chunk": errors.SocketError,
    "garbage": errors.HTTPParserError,
    "stall": errors.HeadersTimeoutError,
}

_OK_BODY = b"x" * 512


class _Conn:
    """Server side of one connection: buffered reads of request heads and bodies."""

    __slots__ = ("sock", "buf")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.buf = b""

    def read_request(self) -> bytes | None:
        """Read one request (head and content-length body); its target, or None at EOF."""
        while b"\r\n\r\n" not in self.buf:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return None
            if not data:
                return None
            self.buf += data
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(self.buf) < length:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return None
            if not data:
                return None
            self.buf += data
        self.buf = self.buf[length:]
        parts = lines[0].split(b" ")
        return parts[1] if len(parts) > 1 else b"/"

    def wait_eof(self, limit: float) -> None:
        """Read and drop until the client closes, at most ``limit`` seconds."""
        with gevent.Timeout(limit, False):
            while True:
                try:
                    if not self.sock.recv(65536):
                        return
                except OSError:
                    return


class FaultyServer:
    """A loopback HTTP/1.1 server; each connection draws a behaviour from ``mix``.

    ``FaultyServer(mix=None, seed=0, stall_limit=30.0)``; ``mix`` maps names of
    :data:`BEHAVIOURS` to weights (default: :data:`BEHAVIOURS`). A good answer
    is ``200`` with a 512-byte body, or the request target echoed for
    ``/echo/...``. ``injected`` counts the faults sent (one per faulty
    connection, when it got that far), ``answered`` the good responses, and
    ``connections`` the accepted connections. Runs on the caller's gevent
    hub; :meth:`stop` ends every connection greenlet.
    """

    def __init__(
        self, mix: dict[str, int] | None = None, seed: int = 0, stall_limit: float = 30.0
    ) -> None:
        self.set_mix(BEHAVIOURS if mix is None else mix)
        self._rng = random.Random(seed)
        self.stall_limit = stall_limit
        self.injected: Counter[str] = Counter()
        self.answered = 0
        self.resets_on_reuse = 0  # of the injected resets, those after a good answer
        self.connections = 0
        self.by_behaviour: Counter[str] = Counter()
        self._socks: set[Any] = set()
        self._server = StreamServer(("127.0.0.1", 0), self._handle, backlog=4096)
        self._server.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def set_mix(self, mix: dict[str, int]) -> None:
        """Weights for the connections accepted from now on."""
        unknown = set(mix) - set(BEHAVIOURS)
        if unknown:
            raise ValueError(f"unknown behaviours {sorted(unknown)}")
        self._names = list(mix)
        self._weights = [mix[n] for n in self._names]

    def expected_errors(self) -> Counter[str]:
        """Error class name -> how many requests the injected faults must have failed
        (with pipelining 1: a reset before any byte of the answer to a request on a
        connection that had answered others is the keep-alive race, and the client
        sends that request again on a new connection: docs/client.md)."""
        out: Counter[str] = Counter()
        for behaviour, n in self.injected.items():
            if behaviour == "reset":
                n -= self.resets_on_reuse
            out[EXPECTED_ERROR[behaviour].__name__] += n
        return out

    def stop(self) -> None:
        """Stop accepting, close every connection, and wait (bounded) for their greenlets."""
        self._server.stop(timeout=2)
        for sock in list(self._socks):
            try:
                sock.close()
            except OSError:
                pass

    # -- one connection --------------------------------------------------------
    def _handle(self, sock: Any, _addr: Any) -> None:
        self.connections += 1
        behaviour = self._rng.choices(self._names, self._weights)[0]
        good_first = self._rng.randint(1, 20) if behaviour == "ok" else self._rng.randint(0, 3)
        self.by_behaviour[behaviour] += 1
        self._socks.add(sock)
        conn = _Conn(sock)
        try:
            served = 0
            while True:
                target = conn.read_request()
                if target is None:
                    return
                if served < good_first:
                    served += 1
                    last = behaviour == "ok" and served == good_first
                    self._answer(sock, target, close=last)
                    if last:
                        return
                    continue
                if behaviour == "reset" and served:
                    self.resets_on_reuse += 1
                self._misbehave(behaviour, conn)
                return
        except OSError:
            return  # the client went away mid-write
        finally:
            self._socks.discard(sock)
            try:
                sock.close()
            except OSError:
                pass

    def _answer(self, sock: Any, target: bytes, close: bool = False) -> None:
        body = target if target.startswith(b"/echo/") else _OK_BODY
        extra = b"Connection: close\r\n" if close else b""
        sock.sendall(
            b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s" % (extra, len(body), body)
        )
        self.answered += 1

    def _misbehave(self, behaviour: str, conn: _Conn) -> None:
        sock = conn.sock
        self.injected[behaviour] += 1
        if behaviour == "reset":
            rst(sock)
        elif behaviour == "reset_mid_body":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"y" * 100)
            rst(sock)
        elif behaviour == "close_mid_body":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"y" * 100)
            sock.shutdown(stdsocket.SHUT_WR)
            conn.wait_eof(self.stall_limit)
        elif behaviour == "truncated_chunk":
            sock.sendall(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" + b"z" * 10
            )
            sock.shutdown(stdsocket.SHUT_WR)
            conn.wait_eof(self.stall_limit)
        elif behaviour == "garbage":
            sock.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
            conn.wait_eof(self.stall_limit)
        elif behaviour == "stall":
            conn.wait_eof(self.stall_limit)


# ---------------------------------------------------------------------------
# accounting
# ---------------------------------------------------------------------------


class Outcomes:
    """Requests tallied by outcome: ``"ok"`` or the error's class name."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.undocumented: list[BaseException] = []
        self.truncated = 0

    def run(self, fn: Callable[[], bytes], expected: bytes | None = None) -> None:
        """Run one request ``fn()`` (returning the body) and record how it ended."""
        try:
            body = fn()
        except DOCUMENTED_ERRORS as exc:
            self.counts[type(exc).__name__] += 1
        except Exception as exc:  # noqa: BLE001 - recorded, then asserted empty by the caller
            self.counts[type(exc).__name__] += 1
            self.undocumented.append(exc)
        else:
            if expected is not None and body != expected:
                self.truncated += 1
                self.counts["wrong body"] += 1
            else:
                self.counts["ok"] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def errors(self) -> int:
        return self.total - self.counts["ok"]


# ---------------------------------------------------------------------------
# leak checks
# ---------------------------------------------------------------------------


class HubErrors:
    """Exceptions that ended a greenlet during a block of work (gevent reports them to the hub).

    ``start()`` wraps ``hub.handle_error`` (the original still runs), ``stop()``
    restores it; ``errors`` lists ``(context, exception)``. Nothing the library
    runs may die with an exception, so a test asserts this list is empty.
    """

    def __init__(self) -> None:
        self.errors: list[tuple[Any, BaseException]] = []
        self._hub: Any = None

    def start(self) -> None:
        hub = self._hub = gevent.get_hub()
        original = hub.handle_error

        def handle_error(context: Any, kind: Any, value: Any, tb: Any) -> Any:
            if value is not None and not isinstance(value, gevent.GreenletExit):
                self.errors.append((context, value))
            return original(context, kind, value, tb)

        hub.handle_error = handle_error

    def stop(self) -> None:
        if self._hub is not None and "handle_error" in vars(self._hub):
            del self._hub.handle_error


@contextmanager
def guarded() -> Iterator[LeakCheck]:
    """Around a block of work: no fd or greenlet outlives it (:class:`LeakCheck`,
    two seconds of settling) and no greenlet dies of an exception meanwhile
    (:class:`HubErrors`); ``AssertionError`` otherwise. Yields the leak check."""
    check = LeakCheck()
    crashes = HubErrors()
    check.start()
    crashes.start()
    try:
        yield check
        check.settle()
    finally:
        crashes.stop()
        check.stop()
    assert not crashes.errors, f"greenlets died of exceptions: {crashes.errors}"
