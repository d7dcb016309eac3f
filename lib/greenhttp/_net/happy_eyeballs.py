"""Resolving a host name and connecting to one of its addresses.

* :func:`resolve` asks gevent's resolver (``gevent.socket.getaddrinfo``).
* :func:`connect_sequential` tries the addresses one after another, as
  ``socket.create_connection`` does; the caller's deadline bounds the whole.
* :func:`connect_staggered` is "Happy Eyeballs" (RFC 8305 section 5): the
  addresses are interleaved by family, IPv6 first (section 4), a new attempt
  starts every ``attempt_delay`` seconds or as soon as the previous one
  fails, attempts run in parallel, the first to connect wins and every other
  attempt's socket is closed.

Every function blocks the calling greenlet (other greenlets run) and is
greenlet-safe. None of them leaks a socket: whatever raises or interrupts
them (an error, a ``gevent.Timeout`` from the caller, a kill) closes every
socket they opened, except the one they return.
"""

from __future__ import annotations

import socket as _stdsocket
from collections.abc import Callable, Sequence
from typing import Any

import gevent
from gevent import socket as gsocket
from gevent.queue import Empty, Queue

__all__ = [
    "AddrInfo",
    "resolve",
    "interleave_families",
    "open_socket",
    "connect_sequential",
    "connect_staggered",
    "format_sockaddr",
]

#: One ``getaddrinfo`` row: (family, type, proto, canonname, sockaddr).
AddrInfo = tuple[int, int, int, str, Any]


def resolve(host: str, port: int) -> list[AddrInfo]:
    """Resolve ``host`` to stream-socket addresses. Blocks the calling greenlet."""
    return list(gsocket.getaddrinfo(host, port, 0, _stdsocket.SOCK_STREAM))


def interleave_families(infos: Sequence[AddrInfo]) -> list[AddrInfo]:
    """Order addresses IPv6, IPv4, IPv6, … keeping each family's order (RFC 8305 section 4).

    When only one family is present the order is unchanged. Never blocks.
    """
    v6 = [ai for ai in infos if ai[0] == _stdsocket.AF_INET6]
    others = [ai for ai in infos if ai[0] != _stdsocket.AF_INET6]
    out: list[AddrInfo] = []
    for i in range(max(len(v6), len(others))):
        if i < len(v6):
            out.append(v6[i])
        if i < len(others):
            out.append(others[i])
    return out


def format_sockaddr(sockaddr: Any) -> str:
    """``host:port`` (``[v6]:port`` for IPv6) as used in error messages."""
    if isinstance(sockaddr, tuple) and len(sockaddr) >= 2:
        host, port = sockaddr[0], sockaddr[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(sockaddr)


def open_socket(ai: AddrInfo, local_address: str | None = None) -> gsocket.socket:
    """Create a gevent socket for ``ai`` and connect it; blocks the calling greenlet.

    The socket is closed if anything (error, timeout, kill) interrupts the call.
    """
    family, type_, proto, _canon, sockaddr = ai
    sock = gsocket.socket(family, type_, proto)
    try:
        if local_address:
            sock.bind((local_address, 0))
        sock.connect(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


Connect = Callable[[AddrInfo], Any]


def connect_sequential(infos: Sequence[AddrInfo], connect: Connect) -> Any:
    """Connect to each address in order until one succeeds; raise the last error."""
    if not infos:
        raise OSError("getaddrinfo returned no address")
    last: Exception | None = None
    for ai in infos:
        try:
            return connect(ai)
        except OSError as exc:
            last = exc
    assert last is not None
    try:
        raise last
    finally:
        last = None  # the traceback keeps this frame: it must not keep the error


def connect_staggered(
    infos: Sequence[AddrInfo],
    connect: Connect,
    attempt_delay: float,
    attempted: list[str] | None = None,
) -> Any:
    """RFC 8305 section 5: staggered parallel attempts, first success wins.

    ``connect(ai)`` opens one socket (and must close it when interrupted).
    Each started address is appended to ``attempted`` (for error messages).
    When every attempt fails the last error is raised. The caller bounds the
    total time (e.g. with ``gevent.Timeout``); on the way out every attempt
    still running is killed and every socket but the winner is closed.
    """
    if not infos:
        raise OSError("getaddrinfo returned no address")
    order = interleave_families(infos)
    results: Queue = Queue()
    running: list[gevent.Greenlet] = []

    def attempt(ai: AddrInfo) -> None:
        try:
            sock = connect(ai)
        except Exception as exc:
            results.put((exc, None))
        else:
            results.put((None, sock))

    def start(ai: AddrInfo) -> None:
        if attempted is not None:
            attempted.append(format_sockaddr(ai[4]))
        running.append(gevent.spawn(attempt, ai))

    next_index = 0
    start(order[next_index])
    next_index += 1
    outstanding = 1
    last: Exception | None = None
    winner = None
    try:
        while True:
            more = next_index < len(order)
            try:
                err, sock = results.get(timeout=attempt_delay if more else None)
            except Empty:
                # Connection Attempt Delay elapsed: start the next one (section 5).
                start(order[next_index])
                next_index += 1
                outstanding += 1
                continue
            outstanding -= 1
            if err is None:
                winner = sock
                return sock
            last = err
            if more:
                # A failure starts the next attempt at once (section 5).
                start(order[next_index])
                next_index += 1
                outstanding += 1
            elif outstanding == 0:
                raise last
    finally:
        gevent.killall(running, block=True)
        # An attempt may have connected after the winner (or while we were
        # interrupted) and left its socket in the queue: close it.
        while not results.empty():
            _err, extra = results.get_nowait()
            if extra is not None and extra is not winner:
                extra.close()
