"""Socket I/O for one connection, at the lowest cost gevent allows.

For a plain gevent TCP or unix socket, :class:`Transport` talks to the real,
non-blocking socket underneath and parks on libev watchers itself: a read
waits for readability and *then* calls ``recv_into`` (no EAGAIN exception per
read), and a write tries ``send`` at once, without gevent's ``getsockopt``
per ``sendall``. Any other socket (TLS, or whatever a custom connector
returns) goes through its own blocking ``recv_into``/``sendall``.

One reader greenlet per socket; writes are serialised by the caller (the
driver keeps one writer at a time).
"""

from __future__ import annotations

import socket as _socket_mod
import sys
from typing import TYPE_CHECKING, Any, Protocol

from gevent import Timeout, get_hub, getcurrent
from gevent.socket import socket as _gevent_socket

if TYPE_CHECKING:
    import _socket

__all__ = ["Transport", "UpgradedSocket", "SocketLike"]

# SO_RCVLOWAT holds back readability until that many bytes are queued. Linux
# honours it in epoll and keeps it safe (a full receive window, FIN or an error
# still wake the reader); elsewhere it is left alone.
_CAN_HOLD_READS = sys.platform.startswith("linux") and hasattr(_socket_mod, "SO_RCVLOWAT")


class SocketLike(Protocol):
    """What this module uses of a socket: gevent's, a TLS socket, or a custom connector's.

    ``family`` and ``setsockopt`` are only used for ``type_of_service``, best
    effort (a socket without them is left alone).
    """

    @property
    def family(self) -> int: ...

    def recv(self, bufsize: int, flags: int = ..., /) -> bytes: ...

    def recv_into(self, buffer: Any, nbytes: int = ..., flags: int = ..., /) -> int: ...

    def send(self, data: Any, flags: int = ..., /) -> int: ...

    def sendall(self, data: Any, flags: int = ..., /) -> Any: ...

    def setsockopt(self, level: int, optname: int, value: int, /) -> Any: ...

    def shutdown(self, how: int, /) -> Any: ...

    def close(self) -> Any: ...


class Transport:
    """The byte pipe of one connection. Not greenlet-safe by itself: one reader, one writer."""

    __slots__ = ("sock", "_raw", "_hub", "_rw", "_ww", "fast", "closed", "_lowat")
    sock: SocketLike
    _raw: _socket.socket | None  # the plain socket under gevent's, on the fast path

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.closed = False
        self._lowat = 1
        self._hub = get_hub()
        self.fast = type(sock) is _gevent_socket
        if self.fast:
            self._raw = sock._sock
            fd = self._raw.fileno()
            loop = self._hub.loop
            self._rw = loop.io(fd, 1)
            self._ww = loop.io(fd, 2)
        else:
            self._raw = None
            self._rw = self._ww = None

    # -- reading (the reader greenlet only) ----------------------------------
    @property
    def read_watcher(self) -> Any:
        """What a :class:`~greenhttp._runtime.Reader` parks on until the socket is
        readable (``reader.park(watcher)``, then :attr:`ready_recv_into`); None
        where only :meth:`recv_into` can wait (TLS and custom sockets)."""
        return self._rw

    @property
    def ready_recv_into(self) -> Any:
        """The plain socket's own ``recv_into``, for a reader that parks on
        :attr:`read_watcher` itself and reads once it is readable (it raises
        ``BlockingIOError`` if nothing came after all); None with no plain socket."""
        raw = self._raw
        return raw.recv_into if raw is not None else None

    @property
    def ready_send(self) -> Any:
        """The plain socket's own ``send``: sends what fits now, raises
        ``BlockingIOError`` when nothing does; None with no plain socket."""
        raw = self._raw
        return raw.send if raw is not None else None

    def wait_readable(self) -> None:
        """Block the calling greenlet until the socket is readable (fast path only).

        A connection's reader greenlet parks itself (it may first wake the
        caller it has just answered; see ``_runtime.Reader``).
        """
        watcher = self._rw
        current = getcurrent()
        park = getattr(current, "park", None)
        if park is not None:
            park(watcher)
            return
        watcher.start(current.switch)
        try:
            self._hub.switch()
        finally:
            watcher.stop()

    def recv_into(self, buf: Any, wait_first: bool = True) -> int:
        """Read into ``buf``; blocks the calling greenlet; 0 means EOF."""
        raw = self._raw
        if raw is None:
            return self.sock.recv_into(buf)
        if wait_first:
            self.wait_readable()
        while True:
            try:
                return raw.recv_into(buf)
            except BlockingIOError:
                self.wait_readable()
            except InterruptedError:
                continue

    def try_recv_into(self, buf: Any) -> int | None:
        """Read what is queued now, without waiting; None when nothing is (fast path only).

        Not held back by :meth:`hold_reads`: any queued byte is returned. Other
        sockets can't read without blocking, so they always answer None.
        """
        raw = self._raw
        if raw is None:
            return None
        try:
            return raw.recv_into(buf)
        except (BlockingIOError, InterruptedError):
            return None

    def hold_reads(self, nbytes: int) -> None:
        """Let the next waits for readability end only once ``nbytes`` are queued.

        For a reader that needs a known amount (the rest of a body): one
        wake-up for it instead of one per TCP segment, which saves CPU at both
        ends. ``1`` restores the usual wake-up on any byte. The socket still
        wakes its reader early when the receive window fills, or on EOF or an
        error. The caller keeps ``nbytes`` at most what is still to come
        (lowering it as bytes arrive), or the last bytes wait for a timeout;
        and bytes that arrive stay invisible until the mark is reached, so a
        caller timing out a read checks :meth:`try_recv_into` before giving
        up. Plain sockets on Linux only (SO_RCVLOWAT); a no-op elsewhere, or
        when the kernel refuses. Never blocks.
        """
        if nbytes == self._lowat or self._raw is None or not _CAN_HOLD_READS:
            return
        try:
            self._raw.setsockopt(_socket_mod.SOL_SOCKET, _socket_mod.SO_RCVLOWAT, nbytes)
        except OSError:
            return
        self._lowat = nbytes

    def pending(self) -> int:
        """TLS: decrypted bytes buffered in the SSL object (0 for plain sockets)."""
        fn = getattr(self.sock, "pending", None)
        return fn() if fn is not None else 0

    # -- writing (one writer at a time) ---------------------------------------
    def try_send(self, data: Any) -> int:
        """Send what the kernel takes now without blocking; returns the count sent.

        Only plain sockets can do this; for others it sends everything,
        blocking the calling greenlet while the peer's window is full.
        """
        if self._raw is None:
            self.sock.sendall(data)
            return len(data)
        try:
            return self._raw.send(data)
        except BlockingIOError:
            return 0
        except InterruptedError:
            return 0

    def send_parting(self, data: Any, seconds: float) -> None:
        """Send a last frame if it goes without a long wait: on a plain socket what
        the kernel takes now; on any other (TLS, which cannot send part of a
        record without waiting to send the rest), everything within ``seconds``,
        and nothing from the hub, which may not wait. Never raises: a socket of the
        user's (a wrapping connector's) may fail its own way, and this is a goodbye."""
        try:
            if self._raw is not None:
                self.try_send(data)
            elif getcurrent() is not self._hub:
                with Timeout(seconds, False):
                    self.sock.sendall(data)
        except Exception:
            pass

    def sendall(self, data: Any) -> None:
        """Send everything, blocking the calling greenlet while the socket is full."""
        if self._raw is None:
            self.sock.sendall(data)
            return
        view = memoryview(data)
        raw = self._raw
        total = len(view)
        sent = 0
        while sent < total:
            try:
                sent += raw.send(view[sent:])
            except (BlockingIOError, InterruptedError):
                watcher = self._ww
                watcher.start(getcurrent().switch)
                try:
                    self._hub.switch()
                finally:
                    watcher.stop()

    def set_type_of_service(self, tos: int) -> None:
        """Best effort: set IP_TOS (IPV6_TCLASS on IPv6); errors are ignored, as the original does."""
        import socket as _socket

        try:
            family = self.sock.family
            if family == _socket.AF_INET6:
                self.sock.setsockopt(_socket.IPPROTO_IPV6, _socket.IPV6_TCLASS, tos)
            elif family == _socket.AF_INET:
                self.sock.setsockopt(_socket.IPPROTO_IP, _socket.IP_TOS, tos)
        except (OSError, AttributeError):
            pass

    # -- lifecycle --------------------------------------------------------------
    def shutdown_write(self) -> None:
        try:
            self.sock.shutdown(1)
        except OSError:
            pass

    def release(self) -> None:
        """Stop using the socket without closing it (it was handed to someone else)."""
        self.closed = True
        for watcher in (self._rw, self._ww):
            if watcher is not None:
                watcher.close()

    def close(self) -> None:
        """Close the socket and its watchers. Idempotent; never blocks."""
        if self.closed:
            return
        self.closed = True
        for watcher in (self._rw, self._ww):
            if watcher is not None:
                watcher.close()
        try:
            self.sock.close()
        except OSError:
            pass


class UpgradedSocket:
    """A socket handed over after ``101 Switching Protocols`` or CONNECT.

    Bytes the server sent right after the response head are returned first
    by ``recv``/``recv_into``/``read``; everything else is the underlying
    gevent socket's. Its reads and writes block the calling greenlet.
    """

    def __init__(self, sock: Any, head: bytes = b"") -> None:
        self._sock: SocketLike = sock
        self._head = head

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if self._head:
            data, self._head = self._head[:bufsize], self._head[bufsize:]
            return data
        return self._sock.recv(bufsize, flags)

    read = recv

    def recv_into(self, buf: Any, nbytes: int = 0, flags: int = 0) -> int:
        if self._head:
            view = memoryview(buf)
            size = nbytes or len(view)
            data, self._head = self._head[:size], self._head[size:]
            view[: len(data)] = data
            return len(data)
        return self._sock.recv_into(buf, nbytes, flags)

    def sendall(self, data: Any) -> None:
        self._sock.sendall(data)

    def send(self, data: Any) -> int:
        return self._sock.send(data)

    write = sendall

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> UpgradedSocket:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)
