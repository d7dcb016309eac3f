"""The streams of an HTTP/2 connection: what is tracked per request, their timers, their bodies.

:class:`H2Stream` is one request on the connection (``h2_driver.py`` keeps
them by stream id). :class:`Timers` keeps every stream's due time, and the
connection's idle and ping times, on one :class:`Deadline`: no timer object
per request. :class:`Uploads` sends the request bodies of one connection as
the peer's flow-control windows allow (RFC 9113 §5.2): a bytes body goes out
at once as far as the windows reach and the rest whenever a WINDOW_UPDATE
arrives; a streamed body (file, iterator) is read by a greenlet of its own,
which waits for window. Nothing here blocks the caller.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .._core.body import StreamBody, to_bytes_chunk
from .._core.request import Request
from .._runtime import Deadline, GreenletExit, Parker, getcurrent, kill, now, spawn
from ..errors import RequestContentLengthMismatchError

if TYPE_CHECKING:
    from .._core.h2 import H2Session
    from .h2_driver import H2Connection

__all__ = ["H2Stream", "Timers", "Uploads", "no_flush", "replayable"]

_INF = math.inf


class H2Stream:
    """One request on the connection, and what the driver tracks for it."""

    __slots__ = (
        "sid",
        "req",
        "due",
        "responded",
        "done",
        "local_closed",
        "received",
        "held",
        "unacked",
        "end_pending",
        "out",
        "out_off",
        "window",
        "expect",
        "headers_due",
        "retried",
        "tunnel",
    )

    def __init__(self, sid: int, req: Request, retried: bool) -> None:
        self.sid = sid
        self.req = req
        self.due = 0.0  # when its timeout fires (0: none)
        self.responded = False  # the final response head arrived
        self.done = False
        self.local_closed = False  # our END_STREAM went out
        self.received = 0  # body bytes, for max_response_size
        self.held: deque[tuple[bytes, int]] | None = None  # DATA that arrived while paused
        self.unacked = 0  # delivered bytes whose stream window is held back (paused)
        self.end_pending: tuple[Any, Any] | None = None  # END that arrived while paused
        self.out: memoryview | None = None  # the rest of a bytes body, waiting for window
        self.out_off = 0
        self.window: Parker | None = None  # a body greenlet waiting for window
        self.expect = False  # waiting for 100 Continue before the body
        self.headers_due = 0.0  # while it waits: its headers timeout (due is the wait's end)
        self.retried = retried  # already retried once after REFUSED_STREAM
        self.tunnel = False  # a CONNECT: a 2xx answer turns it into a tunnel (h2_tunnel.py)

    # Receive-side flow control (RFC 9113 §5.2.2): while the handler is paused,
    # DATA is kept here, the connection window is handed back (the other
    # streams go on) and this stream's window is held back (the peer stops).
    def deliver(self, data: bytes, flow: int, session: H2Session) -> bool:
        """Give ``data`` to the handler, or hold it; True if delivered and not paused."""
        req = self.req
        if req.paused or self.held:
            if self.held is None:
                self.held = deque()
            self.held.append((data, flow))
            session.ack_connection(flow)
            self.due = 0.0
            return False
        if req.on_data(data):
            if not self.done:
                session.ack_connection(flow)
                self.unacked += flow
                self.due = 0.0
            return False
        session.ack(self.sid, flow)
        return True

    def drain(self, session: H2Session) -> bool:
        """After ``resume()``: deliver what was held; True once nothing is held and not paused."""
        req = self.req
        if self.done or req.paused:
            return False
        if self.unacked:
            session.ack_stream(self.sid, self.unacked)
            self.unacked = 0
        held = self.held
        while held:
            data, flow = held.popleft()
            paused = req.on_data(data)
            if self.done:
                return False
            if paused:
                self.unacked = flow
                return False
            session.ack_stream(self.sid, flow)
        return True


def replayable(req: Request) -> bool:
    """Can the request go out again (its body is none or bytes, not a consumed stream)?"""
    return not isinstance(req.body, StreamBody)


class Timers:
    """Due times of one connection on one lazily re-armed :class:`Deadline`.

    ``on_due()`` is called from the hub when the earliest due time may have
    passed; the owner then calls :meth:`sweep` (on its own greenlet). Due
    times only move later, or are added, so one timer at the earliest is
    enough. Used from the connection's greenlets only; never blocks.
    """

    def __init__(self, on_due: Callable[[], None]) -> None:
        self._deadline = Deadline(on_due)
        self._next = _INF
        self.idle_due = 0.0  # close the idle connection then (0: not idle)
        self.ping_due = 0.0  # send the next PING then (0: no pings)

    def arm(self, due: float) -> None:
        if due < self._next:
            self._next = due
            self._deadline.set(max(due - now(), 0.0005))

    def arm_stream(self, stream: H2Stream, seconds: float, t: float = 0.0) -> None:
        """``stream`` times out ``seconds`` from now (0: never); ``t``: now, if known."""
        if seconds:
            due = stream.due = (t or now()) + seconds
            if due < self._next:
                self.arm(due)
        else:
            stream.due = 0.0

    def set_idle(self, seconds: float | None) -> None:
        """The connection has no stream (``seconds`` until it closes), or has some (None)."""
        if seconds is None:
            self.idle_due = 0.0
        else:
            self.idle_due = now() + seconds
            self.arm(self.idle_due)

    def set_ping(self, seconds: float) -> None:
        self.ping_due = now() + seconds
        self.arm(self.ping_due)

    def sweep(self, streams: Iterable[H2Stream]) -> tuple[list[H2Stream], bool, bool]:
        """``(streams timed out, idle time passed, ping due)``; re-arms for what remains."""
        t = now()
        nxt = _INF
        expired = []
        for stream in streams:
            due = stream.due
            if not due:
                continue
            if due <= t:
                stream.due = 0.0
                expired.append(stream)
            elif due < nxt:
                nxt = due
        idle = ping = False
        if self.idle_due:
            if self.idle_due <= t:
                idle = True
            else:
                nxt = min(nxt, self.idle_due)
        if self.ping_due:
            if self.ping_due <= t:
                ping = True
            else:
                nxt = min(nxt, self.ping_due)
        self._next = _INF
        if nxt < _INF:
            self.arm(nxt)
        return expired, idle, ping

    def close(self) -> None:
        """For good: the deadline drops its callback, and nothing arms it again."""
        self._next = -_INF  # no due time is earlier
        self._deadline.close()


def no_flush() -> None:
    """The flush of a closed connection."""


def _no_progress(stream: H2Stream) -> None:
    pass


def _no_fail(stream: H2Stream, err: BaseException, code: int = 0) -> None:
    """The stream failure of a closed connection (its streams already failed)."""


class Uploads:
    """The request bodies of one connection. Used from the connection's greenlets only."""

    def __init__(self, conn: H2Connection) -> None:
        # The connection's methods, not the connection: detach() replaces them once it is
        # closed, so no cycle keeps it (a killed body greenlet may still run briefly).
        self._schedule_flush: Callable[[], None] = conn._schedule_flush
        self._fail_stream: Callable[..., None] = conn._fail_stream
        self._progress: Callable[[H2Stream], None] = conn._upload_progress
        self.session = conn.session
        self.waiting: dict[H2Stream, None] = {}  # streams waiting for send window, in order
        self.greenlets: dict[H2Stream, Any] = {}  # the greenlet reading each streamed body

    def start(self, stream: H2Stream) -> None:
        """Begin sending ``stream``'s body. Never blocks."""
        body = stream.req.body
        if type(body) is bytes:
            stream.out = memoryview(body)
            self._pump(stream)
        else:
            self.greenlets[stream] = spawn(self._stream_body, stream)

    def window_opened(self) -> None:
        """A WINDOW_UPDATE (or new SETTINGS) arrived: send more."""
        for stream in list(self.waiting):
            if stream.out is not None:
                self._pump(stream)
                self._progress(stream)
            else:
                self.waiting.pop(stream, None)
                parker = stream.window
                if parker is not None:
                    parker.set()

    def drop(self, stream: H2Stream) -> None:
        """``stream`` ended: send no more of its body. Never blocks."""
        if self.waiting:
            self.waiting.pop(stream, None)
        parker = stream.window
        if parker is not None:
            parker.set()
        reader = self.greenlets.pop(stream, None) if self.greenlets else None
        if reader is not None and reader is not getcurrent():
            # It may be parked in its body source, which only it can end.
            kill(reader)

    def close(self) -> None:
        """The connection ended: stop every body. Never blocks."""
        self.waiting.clear()
        for g in list(self.greenlets.values()):
            kill(g)

    def detach(self) -> None:
        """After :meth:`close`: let go of the connection (a late body greenlet finds no-ops)."""
        self._schedule_flush = no_flush
        self._fail_stream = _no_fail
        self._progress = _no_progress

    def _pump(self, stream: H2Stream) -> None:
        """Send as much of a bytes body as the windows allow; the rest waits."""
        view = stream.out
        assert view is not None
        session = self.session
        sid = stream.sid
        off = stream.out_off
        total = len(view)
        frame = session.max_frame_size
        while off < total:
            window = session.send_window(sid)
            if window <= 0:
                break
            n = min(window, frame, total - off)
            session.send_data(sid, view[off : off + n], off + n == total)
            off += n
        stream.out_off = off
        if off < total:
            self.waiting[stream] = None
        else:
            stream.out = None
            stream.local_closed = True
            self.waiting.pop(stream, None)

    def _stream_body(self, stream: H2Stream) -> None:
        """A body greenlet: read a streamed body and send it as window allows."""
        req = stream.req
        body = req.body
        assert isinstance(body, StreamBody)
        declared = body.length if body.length is not None else req.content_length
        try:
            if body.used:
                raise RequestContentLengthMismatchError("the request body stream was already used")
            body.used = True
            written = 0
            try:
                for item in body.chunks:
                    if stream.done or stream.local_closed:
                        # The rest is never sent: close the source, so a producer
                        # waiting on it (a pipeline) learns so.
                        body.close()
                        return
                    chunk = to_bytes_chunk(item)
                    if not chunk:
                        continue
                    written += len(chunk)
                    if declared is not None and written > declared:
                        raise RequestContentLengthMismatchError()
                    if not self.send_chunk(stream, chunk):
                        body.close()
                        return
            except (RequestContentLengthMismatchError, GreenletExit):
                raise
            except Exception as exc:
                # The body iterator raised: the request fails with that error.
                req.abort(exc)
                return
            if declared is not None and written != declared:
                raise RequestContentLengthMismatchError()
            if not (stream.done or stream.local_closed):
                self.session.end_stream(stream.sid)
                stream.local_closed = True
                self._progress(stream)
                self._schedule_flush()
        except RequestContentLengthMismatchError as exc:
            self._fail_stream(stream, exc)
        except GreenletExit:
            if body.used:
                body.close()  # the session ended mid-body (see above)
        finally:
            self.greenlets.pop(stream, None)

    def send_chunk(self, stream: H2Stream, chunk: bytes) -> bool:
        """Send one chunk, waiting for window as needed; False if the stream ended."""
        session = self.session
        sid = stream.sid
        view = memoryview(chunk)
        off = 0
        while off < len(view):
            if stream.done or stream.local_closed:  # local_closed: the peer reset it after its answer
                return False
            window = session.send_window(sid)
            if window <= 0:
                self.waiting[stream] = None
                parker = stream.window = Parker()
                parker.get()
                stream.window = None
                continue
            n = min(window, session.max_frame_size, len(view) - off)
            session.send_data(sid, view[off : off + n])
            off += n
            self._progress(stream)
            self._schedule_flush()
        return True
