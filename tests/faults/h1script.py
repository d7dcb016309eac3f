"""Scripted HTTP/1.1 faults for the ``make_server`` servers of ``tests/conftest.py``.

A *fault* is a function of the server's connection (``conn``: read the request,
send exact bytes, close, reset, stall); :func:`first_request_faulty` runs one
on the first connection and answers normally (``ok <target>``) afterwards,
so a test can check that the request after a fault works. Pure helpers:
they start nothing and import no pytest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
from faultkit import rst

__all__ = [
    "CHUNKED",
    "OK_HEAD",
    "after_request",
    "endless",
    "fetch",
    "first_request_faulty",
    "head",
    "reset_on_accept",
    "serve_ok",
    "trickle",
]

OK_HEAD = "HTTP/1.1 200 OK"
CHUNKED = "Transfer-Encoding: chunked"


def fetch(dispatcher: Any, path: str = "/", **options: Any) -> bytes:
    """One request, body read whole (so an error mid-body is raised here too)."""
    return dispatcher.request(path=path, **options).body.bytes()


def serve_ok(conn: Any) -> None:
    """Answer every request on the connection with ``ok <target>``."""
    while True:
        req = conn.read_request()
        if req is None:
            return
        conn.respond(b"ok " + req.target.encode())


def first_request_faulty(fault: Callable[[Any], Any], times: int = 1) -> Callable[[Any], None]:
    """A handler running ``fault(conn)`` for the first ``times`` connections, then serving.

    ``fault`` returns True to keep serving on its connection afterwards.
    """
    left = [times]

    def handler(conn: Any) -> None:
        if left[0] > 0:
            left[0] -= 1
            if not fault(conn):
                return
        serve_ok(conn)

    return handler


def head(*lines: str) -> bytes:
    """A response head from its lines."""
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def after_request(data: bytes, then: str = "close") -> Callable[[Any], None]:
    """Read the request, send ``data``, then ``close`` (FIN), ``rst``, or ``stall``."""

    def fault(conn: Any) -> None:
        conn.read_request()
        if data:
            conn.send(data)
        if then == "rst":
            rst(conn.sock)
        elif then == "stall":
            conn.wait_closed(10)
        else:
            conn.close()

    return fault


def endless(prefix: bytes, piece: bytes) -> Callable[[Any], None]:
    """Read the request, send ``prefix``, then ``piece`` until the client leaves (at most 64 MiB)."""

    def fault(conn: Any) -> None:
        conn.read_request()
        conn.send(prefix)
        for _ in range((64 << 20) // len(piece)):
            conn.send(piece)

    return fault


def reset_on_accept(conn: Any) -> None:
    """Reset the connection before reading anything."""
    rst(conn.sock)


def trickle(data: bytes, interval: float, prefix: bytes = b"") -> Callable[[Any], None]:
    """Read the request, send ``prefix`` at once, then ``data`` one byte per ``interval``."""

    def fault(conn: Any) -> None:
        conn.read_request()
        if prefix:
            conn.send(prefix)
        for i in range(len(data)):
            conn.send(data[i : i + 1])
            gevent.sleep(interval)  # the fault itself: a peer this slow
        conn.wait_closed(10)

    return fault
