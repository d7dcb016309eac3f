"""CONNECT tunnels over HTTP/2: a stream that carries bytes both ways.

A CONNECT (RFC 9113 §8.5) or an upgrade sent as an extended CONNECT (RFC
8441) is a stream like the others until its 2xx answer. Then it leaves the
connection's requests for :class:`Tunnels`, and its DATA feeds an
:class:`H2Tunnel`, the socket-like object the upgrade handler receives.
Received DATA hands the connection window back at once and the stream's
window as the tunnel is read, so an unread tunnel stalls only itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.h2 import ErrorCodes, error_name
from .._runtime import Parker
from ..errors import InformationalError, SocketError
from .h2_stream import no_flush

if TYPE_CHECKING:
    from .h2_driver import H2Connection
    from .h2_stream import H2Stream

__all__ = ["H2Tunnel", "Tunnels"]


def _no_stream_done() -> None:
    """The stream bookkeeping of a closed connection."""


class Tunnels:
    """The open tunnels of one connection, by stream id. Used from its greenlets only; never blocks."""

    def __init__(self, conn: H2Connection) -> None:
        # What the tunnels need of the connection, not the connection: detach() replaces
        # its methods once it is closed, so no cycle keeps it.
        self.session = conn.session
        self.uploads = conn.uploads
        self.sock = conn.sock
        self._schedule_flush: Callable[[], None] = conn._schedule_flush
        self._stream_done: Callable[[], None] = conn._stream_done
        self._by_sid: dict[int, H2Tunnel] = {}

    def __len__(self) -> int:
        return len(self._by_sid)

    def start(self, stream: H2Stream, status: int, headers: dict[str, Any], raw: bytes) -> None:
        """A 2xx to a CONNECT: hand the stream over as a socket."""
        req = stream.req
        stream.due = 0.0
        tunnel = self._by_sid[stream.sid] = H2Tunnel(self, stream)
        req.raw_head = raw
        req.on_upgrade(status, headers, tunnel)

    # -- frames for tunnel streams (the reader greenlet); False: not a tunnel --------------------
    def on_data(self, sid: int, data: bytes, flow: int) -> bool:
        tunnel = self._by_sid.get(sid)
        if tunnel is None or tunnel.closed:
            return False
        self.session.ack_connection(flow)
        tunnel._feed(data, flow)
        return True

    def on_end(self, sid: int) -> bool:
        tunnel = self._by_sid.get(sid)
        if tunnel is None:
            return False
        tunnel._end()
        if tunnel._stream.local_closed:
            self._drop(sid)
        return True

    def on_reset(self, sid: int, code: int) -> bool:
        tunnel = self._by_sid.get(sid)
        if tunnel is None:
            return False
        tunnel._end(SocketError(f"HTTP/2: tunnel reset by the server with code {error_name(code)}"))
        self._drop(sid)
        return True

    def on_goaway(self, last_stream_id: int, err: BaseException) -> None:
        for sid in [sid for sid in self._by_sid if sid > last_stream_id]:
            self._by_sid[sid]._end(err)
            self._drop(sid)

    def close_all(self, err: BaseException) -> None:
        """The connection ended: every tunnel reads EOF, or ``err`` if it was not a clean close."""
        tunnels = list(self._by_sid.values())
        self._by_sid.clear()
        for tunnel in tunnels:
            tunnel._stream.done = True  # nothing more goes out on it
            tunnel._end(err if not isinstance(err, InformationalError) else None)

    def detach(self) -> None:
        """After :meth:`close_all`: let go of the connection (a late tunnel user finds no-ops)."""
        self._schedule_flush = no_flush
        self._stream_done = _no_stream_done

    # -- from the tunnels' users (any greenlet) ----------------------------------------------------
    def consumed(self, stream: H2Stream, flow: int) -> None:
        """The tunnel's reader took one DATA frame's bytes: reopen the stream window."""
        if not stream.done:
            self.session.ack_stream(stream.sid, flow)
            self._schedule_flush()

    def end_stream(self, stream: H2Stream) -> None:
        self.session.end_stream(stream.sid)
        stream.local_closed = True
        tunnel = self._by_sid.get(stream.sid)
        if tunnel is not None and tunnel._eof:
            self._drop(stream.sid)
        self._schedule_flush()

    def closed(self, stream: H2Stream) -> None:
        if stream.sid not in self._by_sid:
            return
        self.session.reset_stream(stream.sid, ErrorCodes.CANCEL)
        self._drop(stream.sid)
        self._schedule_flush()

    def _drop(self, sid: int) -> None:
        tunnel = self._by_sid.pop(sid, None)
        if tunnel is not None:
            tunnel._stream.done = True
            self.uploads.drop(tunnel._stream)
            self._stream_done()


class H2Tunnel:
    """The socket of a CONNECT (RFC 9113 §8.5) or extended CONNECT (RFC 8441) stream.

    Bytes go both ways over one stream of the shared connection. ``recv``,
    ``recv_into`` and ``read`` block the calling greenlet until data arrives
    (``b""`` once the server ended its side); ``send``, ``sendall`` and
    ``write`` block it while the server's window is shut. One reading and
    one writing greenlet at a time. ``shutdown(SHUT_WR)`` ends our side;
    ``close()`` ends the stream (RST_STREAM CANCEL unless both sides ended).
    The tunnel lives as long as the connection: closing the client ends it.
    """

    def __init__(self, tunnels: Tunnels, stream: H2Stream) -> None:
        self._tunnels = tunnels
        self._stream = stream
        self._chunks: deque[list[Any]] = deque()  # [data, offset, flow] as they arrived
        self._parker: Parker | None = None
        self._eof = False
        self._error: BaseException | None = None
        self.closed = False

    # -- fed by the connection's reader greenlet ----------------------------------------------
    def _feed(self, data: bytes, flow: int) -> None:
        self._chunks.append([data, 0, flow])
        self._wake()

    def _end(self, err: BaseException | None = None) -> None:
        self._eof = True
        if err is not None and self._error is None:
            self._error = err
        self._wake()

    def _wake(self) -> None:
        parker = self._parker
        if parker is not None:
            self._parker = None
            parker.set()

    # -- reading ---------------------------------------------------------------------------------
    @property
    def at_eof(self) -> bool:
        """True once the server ended its side (or the stream failed) and every byte was read:
        the next ``recv`` returns ``b""`` (or raises) without blocking."""
        return (self._eof or self.closed) and not self._chunks

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        """Up to ``bufsize`` bytes; blocks until some arrive; ``b""`` at the end."""
        chunks = self._chunks
        while not chunks:
            if self._error is not None:
                raise self._error
            if self._eof or self.closed:
                return b""
            parker = self._parker = Parker()
            parker.get()
        item = chunks[0]
        data, off, flow = item
        out: bytes = data[off : off + bufsize]
        if off + len(out) < len(data):
            item[1] = off + len(out)
        else:
            chunks.popleft()
            self._tunnels.consumed(self._stream, flow)  # reopen the stream window
        return out

    read = recv

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer).cast("B")
        data = self.recv(nbytes or len(view))
        view[: len(data)] = data
        return len(data)

    # -- writing ------------------------------------------------------------------------------------
    def sendall(self, data: Any) -> None:
        """Send everything; blocks while the server's window is shut."""
        stream = self._stream
        if self.closed or stream.local_closed:
            raise BrokenPipeError("the tunnel is closed for writing")
        if self._error is not None:
            raise self._error
        chunk = bytes(data)
        if chunk and not self._tunnels.uploads.send_chunk(stream, chunk):
            raise self._error or BrokenPipeError("the tunnel stream ended")

    def send(self, data: Any) -> int:
        self.sendall(data)
        return len(data)

    write = sendall

    def shutdown(self, how: int) -> None:
        """``SHUT_WR`` (1) or ``SHUT_RDWR`` (2): end our side of the stream (END_STREAM)."""
        if how in (1, 2) and not self._stream.local_closed and not self._stream.done:
            self._tunnels.end_stream(self._stream)

    def close(self) -> None:
        """End the tunnel. Never blocks; idempotent."""
        if self.closed:
            return
        self.closed = True
        self._wake()
        self._tunnels.closed(self._stream)

    def getpeername(self) -> Any:
        return self._tunnels.sock.getpeername()

    def getsockname(self) -> Any:
        return self._tunnels.sock.getsockname()

    def __enter__(self) -> H2Tunnel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<H2Tunnel stream={self._stream.sid} closed={self.closed}>"
