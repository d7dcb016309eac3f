"""One HTTP/2 connection of a :class:`Client`: many streams, one reader greenlet.

The shape is the HTTP/1.1 driver's (``h1_driver.py``): the client's core
(:class:`ClientCore`) owns the queue and calls :meth:`H2Connection.write`
for each request it lets through; the connection's greenlet runs
:meth:`H2Connection.read_loop`, feeds the sans-IO session (``_core/h2.py``)
and turns its events into the request guard's calls; it reports back with
``client._resume()`` when a stream frees up and ``client._connection_lost()``
once, when it ends.

Writing. Every ``h2`` call is plain Python that never yields, so any
greenlet may queue frames at any time; bytes reach the socket through one
flush at a time. Frames queued while the reader handles a batch go out in
one send at the end of it; frames queued elsewhere (a new request from a
caller's greenlet) are flushed from the hub on the next loop iteration, so a
burst of requests becomes one ``send``. A flush never blocks: what the kernel
does not take at once (and everything on TLS sockets, whose writes may
block) goes to a short-lived writer greenlet, the only one that blocks on
the socket's write side. Bytes bodies go out as far as the peer's windows
allow and the rest when WINDOW_UPDATE arrives; other bodies (files,
iterators) are read by a greenlet of their own that waits for window.

CONNECT. A CONNECT (or an upgrade, as an extended CONNECT) is a stream
like the others until its 2xx answer; then it leaves ``running`` for
``tunnels`` and its DATA feeds an ``H2Tunnel`` socket (``h2_tunnel.py``).

Waking the reader. The reader blocks only in the socket read. Work for it
from elsewhere (a resumed body, a timer) is flagged, and a hub callback
throws :class:`_Wake` into the reader if, at that moment, it is parked in
that read; the read had not happened, so nothing is lost.

Timers. Each stream has one due time (headers timeout until its response
head, then body timeout, none while paused); the connection adds its idle
and ping due times; ``h2_stream.Timers`` keeps them on one deadline, and
when it fires the reader sweeps the streams. No timer object per request.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _debug
from .._core.h2 import (
    BAD,
    DATA,
    END,
    GOAWAY,
    INFO,
    PONG,
    RESET,
    RESPONSE,
    SETTINGS,
    WINDOW,
    ErrorCodes,
    H2Session,
    ProtocolError,
    error_name,
)
from .._core.request import EXPECTS_PAYLOAD, Request
from .._net.connector import remember_session_of, socket_failure, socket_info
from .._net.stream import Transport
from .._runtime import GreenletExit, Spin, call_soon, getcurrent, kill, now, spawn
from ..errors import (
    BodyTimeoutError,
    ClientDestroyedError,
    GreenHTTPError,
    HeadersOverflowError,
    HeadersTimeoutError,
    InformationalError,
    ResponseExceededMaxSizeError,
    SocketError,
)
from .h1_driver import CONTINUE_WAIT
from .h2_stream import H2Stream, Timers, Uploads, replayable
from .h2_tunnel import Tunnels

if TYPE_CHECKING:
    from .client_core import ClientCore

_PARTING_WAIT = 0.1  # seconds a TLS connection may take to send its GOAWAY as it closes

__all__ = ["H2Connection"]

_DEBUG = _debug.core_enabled
_DEBUG_MAYBE = _debug.core_maybe_enabled


class _Wake(Exception):
    """Thrown into the reader parked in its socket read: there is work for it."""


_Handler = Callable[[tuple[Any, ...]], None]


def _keep_held(stream: H2Stream, client: Any) -> None:
    """A complete response held for a paused handler outlives its closed connection:
    ``resume()`` delivers it (on a greenlet of its own, as the reader would), ``abort()`` fails it.
    The client counts it as running until then (its close() waits, its destroy() fails it)."""
    req = stream.req
    stream.local_closed = True
    client._held.append(req)

    def release() -> None:
        if req in client._held:
            client._held.remove(req)
            client._resume()

    def drain() -> None:
        if stream.done or req.paused:
            return
        held = stream.held
        while held:
            if req.on_data(held.popleft()[0]) or stream.done:
                return  # paused again (resume() comes back here), or aborted
        stream.done = True
        assert stream.end_pending is not None
        trailers, raw = stream.end_pending
        if trailers:
            req.raw_trailers = raw
        req.on_complete(trailers)
        release()

    def resume(_req: Request) -> None:
        spawn(drain)

    def abort(_req: Request, reason: BaseException) -> None:
        if stream.done:
            return
        stream.done = True
        req.on_error(reason)
        release()

    req.resume_hook = resume
    req.abort_hook = abort
    if not req.paused:  # resumed, but the reader never got to it
        spawn(drain)


def _no_event(ev: tuple[Any, ...]) -> None:
    """The handler of every event kind on a closed connection."""


# The handlers of a closed connection: its own (bound methods) would keep it in a cycle.
_CLOSED_HANDLERS: dict[int, _Handler] = dict.fromkeys(
    (RESPONSE, INFO, DATA, END, RESET, SETTINGS, WINDOW, GOAWAY, PONG, BAD), _no_event
)


class H2Connection:
    """An HTTP/2 connection of a :class:`Client`. Used from the client's greenlets only."""

    version = "h2"
    blocking = False  # streams never wait for each other's response heads
    writing = False  # a streaming body does not hold the other streams back

    def __init__(self, client: ClientCore, sock: Any) -> None:
        opts = client._opts
        origin = client._origin
        self.client = client
        self._opts = opts
        self.sock = sock
        self.transport = Transport(sock)
        self.session = H2Session(
            max_concurrent_streams=opts.max_concurrent_streams,
            initial_window_size=opts.initial_window_size,
            connection_window_size=opts.connection_window_size,
            scheme="https" if origin.is_https else "http",
            authority=origin.host,
            max_header_size=opts.max_header_size,
        )
        self.session.start()
        self.running: dict[int, H2Stream] = {}
        self.reset = False  # no new streams (GOAWAY, max_requests_per_client); close when idle
        self.destroyed = False
        self.count = 0  # streams opened
        self.reader: Any = None
        self._limit = 1  # RFC 9113 §6.5.2 leaves it open until the peer's SETTINGS: one at a time
        self._pipelining_caps = client._h2_pipelining_caps
        self._error: BaseException | None = None
        self._goaway_error: BaseException | None = None
        self._finished = False
        self._writer: Any = None
        self._flush_scheduled = False
        self._processing = False  # the reader is handling a batch (it flushes at the end)
        self._in_read = False
        self._spin = Spin(opts.busy_poll)  # the hub polls, not sleeps, for a fast answer
        self._wake_scheduled = False
        self._work = False
        self._resumed: list[H2Stream] = []
        self._timers_due = False
        self.timers = Timers(self._on_deadline)
        self._ping: tuple[bytes, float] | None = None
        self._pings = 0
        self._now = 0.0
        self._remember_session = (
            (getattr(client._connector, "remember_session", None) or remember_session_of) if origin.is_https else None
        )
        self.connect_options: dict[str, Any] = {}  # what the connector was called with
        self._pid = os.getpid()  # the process that opened it (see _finish)
        self.uploads = Uploads(self)
        self.tunnels = Tunnels(self)  # answered CONNECTs: open streams, not requests
        self._handlers: dict[int, _Handler] = {
            RESPONSE: self._on_response,
            INFO: self._on_info,
            DATA: self._on_data,
            END: self._on_end,
            RESET: self._on_reset,
            SETTINGS: self._on_settings,
            WINDOW: self._on_window,
            GOAWAY: self._on_goaway,
            PONG: self._on_pong,
            BAD: self._on_malformed,
        }

    # -- what the client asks -------------------------------------------------------
    @property
    def max_concurrent(self) -> int:
        """Streams allowed at once: ours and the peer's SETTINGS_MAX_CONCURRENT_STREAMS."""
        limit = self._limit
        if self.tunnels:
            limit = max(limit - len(self.tunnels), 0)
        if self._pipelining_caps:
            pipelining = self.client._pipelining or 1
            if pipelining < limit:
                return pipelining
        return limit

    @property
    def idle(self) -> bool:
        return not self.running and not self.tunnels

    def free(self) -> bool:
        """Could a stream open now: a slot left, and no GOAWAY or reset?"""
        return len(self.running) < self.max_concurrent and not self.reset

    def takes(self, req: Request) -> bool:
        """Could ``req`` be written now: a slot left, and :meth:`busy` says no?"""
        return len(self.running) < self.max_concurrent and not self.busy(req)

    def busy(self, req: Request) -> bool:
        """May ``req`` be written now? Streams are multiplexed: only a closing session says no,
        and a CONNECT waits for the server's SETTINGS (does it allow extended CONNECT?)."""
        if self.reset or self.destroyed:
            return True
        return (req.upgrade is not None or req.method == "CONNECT") and not self.session.settings_received

    # -- writing requests -----------------------------------------------------------------
    def write(self, req: Request) -> None:
        """Open a stream for ``req`` (already started). Never blocks."""
        self.count += 1
        limit = self._opts.max_requests_per_client
        if limit and self.count >= limit:
            self.reset = True
        self._open(req, False)

    def _open(self, req: Request, retried: bool) -> None:
        session = self.session
        body = req.body
        method = req.method
        if body is None:
            length = 0 if method in EXPECTS_PAYLOAD else None
        elif isinstance(body, bytes):
            length = len(body)
        else:
            # A known length is the real one (a declared one that differs was refused,
            # or, without strict_content_length, is replaced); else what was declared.
            length = body.length if body.length is not None else req.content_length
        tunnel = req.upgrade is not None or method == "CONNECT"
        expect = False
        try:
            if body is None and not tunnel:
                sid = session.open_request(method, req.path, req.host, req.headers, length)
            else:
                if not tunnel:
                    block = session.request_headers(method, req.path, req.host, req.headers, length)
                elif req.upgrade is None:
                    block = session.connect_headers(req.path, None, None, req.headers)
                elif session.peer_allows_connect_protocol:
                    block = session.connect_headers(req.path, req.upgrade, req.host, req.headers)
                else:
                    raise InformationalError("HTTP/2: Extended CONNECT protocol not supported by server")
                expect = req.expect_continue and body is not None
                if expect:
                    block.append((b"expect", b"100-continue"))
                sid = session.open_stream(block, False)
        except InformationalError as exc:
            req.on_error(exc)
            return
        except ProtocolError as exc:  # e.g. the peer lowered its stream limit just now
            req.on_error(SocketError(f"HTTP/2: cannot open a stream: {exc}", self._socket_info(), cause=exc))
            return
        stream = H2Stream(sid, req, retried)
        self.running[sid] = stream
        req.abort_hook = self._abort_request
        req.resume_hook = self._resume_request
        self.timers.set_idle(None)
        t = req.headers_timeout if req.headers_timeout is not None else self._opts.headers_timeout
        self.timers.arm_stream(stream, t)
        if _DEBUG_MAYBE() and _DEBUG():
            _debug.core.debug("sending request to %s %s%s", method, self.client._origin.origin, req.path)
        if tunnel:
            stream.tunnel = True
        elif body is None:
            stream.local_closed = True
        elif expect:
            stream.expect = True
            # A server (or an HTTP/1.1 hop) may ignore the expectation: the client should
            # not wait for 100 indefinitely (RFC 9110 §10.1.1). The body goes after a
            # short wait; the headers timeout still runs.
            stream.headers_due = stream.due
            due = now() + CONTINUE_WAIT
            if not stream.due or due < stream.due:
                stream.due = due
                self.timers.arm(due)
        else:
            self.uploads.start(stream)
        self._schedule_flush()

    def _upload_progress(self, stream: H2Stream) -> None:
        """Some of ``stream``'s body went out: as on HTTP/1.1, its headers timeout
        runs from the latest progress of the upload, so it counts the wait for the
        head from when the request was written, not the time spent sending it."""
        if not (stream.responded or stream.done or stream.expect or stream.tunnel):
            req = stream.req
            self.timers.arm_stream(
                stream, req.headers_timeout if req.headers_timeout is not None else self._opts.headers_timeout
            )

    def _send_after_expect(self, stream: H2Stream) -> None:
        """The wait for 100 Continue is over: send the body; the headers timeout runs on."""
        stream.expect = False
        stream.due = stream.headers_due
        if stream.due:
            self.timers.arm(stream.due)
        self.uploads.start(stream)

    # -- flushing -------------------------------------------------------------------------------
    def _schedule_flush(self) -> None:
        if self._processing or self._flush_scheduled or self._writer is not None:
            return
        self._flush_scheduled = True
        call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        self._flush()

    def _flush(self) -> None:
        """Send what the session queued, without blocking."""
        if self._writer is not None or self.transport.closed:
            return
        data = self.session.data_to_send()
        if not data:
            return
        if self.running:
            # Timed from here, not from when the stream opened (the frames are
            # flushed a loop pass later); before sending, as a failed send ends it.
            self._spin.sent()
        transport = self.transport
        if transport.fast:
            try:
                sent = transport.try_send(data)
            except Exception as exc:
                self._write_failed(exc)
                return
            if sent == len(data):
                return
            data = data[sent:]
        self._writer = spawn(self._write_loop, data)

    def _write_loop(self, data: bytes) -> None:
        """The writer greenlet: send until the session has nothing more queued."""
        try:
            while data:
                self.transport.sendall(data)
                data = self.session.data_to_send()
        except Exception as exc:  # OSError, or whatever a custom socket raises
            self._writer = None
            self._write_failed(exc)
        except GreenletExit:
            pass
        finally:
            self._writer = None

    def _write_failed(self, exc: Exception) -> None:
        self.destroy(socket_failure(exc, self.sock))

    # -- timers --------------------------------------------------------------------------------
    def _on_deadline(self) -> None:
        # In the hub: the reader does the sweep.
        self._timers_due = True
        self._wake()

    def _sweep(self) -> None:
        expired, idle, ping = self.timers.sweep(list(self.running.values()))
        for stream in expired:
            if stream.expect and not 0 < stream.headers_due <= now():
                self._send_after_expect(stream)  # no 100 Continue within CONTINUE_WAIT
                continue
            self._fail_stream(stream, BodyTimeoutError() if stream.responded else HeadersTimeoutError())
        if idle and self.idle:
            self.destroy(InformationalError("socket idle timeout"))
            return
        if ping:
            self._pings += 1
            payload = struct.pack(">Q", self._pings)
            self.session.ping(payload)
            self._ping = (payload, time.monotonic())
            self.timers.set_ping(self._opts.ping_interval)

    # -- waking the reader --------------------------------------------------------------------------
    def _wake(self) -> None:
        """Ask the reader to look at its work (from any greenlet, or the hub). Never blocks."""
        self._work = True
        if not self._wake_scheduled:
            self._wake_scheduled = True
            call_soon(self._deliver_wake)

    def _deliver_wake(self) -> None:
        # In the hub. Only a reader parked in its socket read gets the exception;
        # a reader anywhere else will look at ``_work`` before it reads again.
        self._wake_scheduled = False
        reader = self.reader
        if reader is not None and self._in_read:
            reader.throw(_Wake())

    def _do_work(self) -> None:
        self._work = False
        self._processing = True
        try:
            if self._resumed:
                resumed, self._resumed = self._resumed, []
                for stream in resumed:
                    self._drain_held(stream)
            if self._timers_due:
                self._timers_due = False
                self._sweep()
        finally:
            self._processing = False
        self._flush()

    # -- the reader greenlet --------------------------------------------------------------------------
    def read_loop(self) -> None:
        """Read and handle frames until the connection ends. Runs on the connection's greenlet."""
        self.reader = getcurrent()
        transport = self.transport
        session = self.session
        buf = bytearray(65536)
        view = memoryview(buf)
        err: BaseException | None = None
        wait_first = True
        interval = self._opts.ping_interval
        if interval:
            self.timers.set_ping(interval)
        if not self.running:
            self.timers.set_idle(self._opts.keep_alive_timeout)
        self._flush()
        try:
            while not self.destroyed:
                if self._work:
                    self._do_work()
                    continue
                self._in_read = True
                try:
                    n = transport.recv_into(view, wait_first)
                except _Wake:
                    continue
                finally:
                    self._in_read = False
                self._spin.read()
                if n == 0:
                    err = self._eof()
                    break
                wait_first = n < 65536
                self._processing = True
                try:
                    self._handle(session.receive(view[:n]))
                finally:
                    self._processing = False
                self._flush()
        except GreenletExit:
            err = self._error or InformationalError("destroyed")
        except ProtocolError as exc:
            err = SocketError(f"HTTP/2 protocol error: {exc}", self._socket_info(), cause=exc)
        except GreenHTTPError as exc:
            err = exc
        except Exception as exc:  # OSError, or whatever a custom socket raises
            err = socket_failure(exc, self.sock)
        finally:
            self.reader = None
        self._finish(self._error or err or InformationalError("reset"))

    def _handle(self, events: list[tuple[Any, ...]]) -> None:
        self._now = now()
        handlers = self._handlers
        for ev in events:
            handlers[ev[0]](ev)
            if self.destroyed:
                return

    def _eof(self) -> BaseException:
        if self._goaway_error is not None and not self.running:
            return self._goaway_error
        return SocketError("other side closed", self._socket_info())

    # -- events -------------------------------------------------------------------------------------------
    def _on_response(self, ev: tuple[Any, ...]) -> None:
        _, sid, status, headers, raw = ev
        stream = self.running.get(sid)
        if stream is None:
            return
        req = stream.req
        if len(raw) > self._opts.max_header_size:
            self._fail_stream(stream, HeadersOverflowError())
            return
        if stream.tunnel and 200 <= status < 300:
            del self.running[sid]
            self.tunnels.start(stream, status, headers, raw)
            self._stream_done()
            return
        stream.responded = True
        stream.expect = False  # a final answer before 100 Continue: the body is not sent
        req.raw_head = raw
        t = req.body_timeout if req.body_timeout is not None else self._opts.body_timeout
        self.timers.arm_stream(stream, t, self._now)
        if _DEBUG_MAYBE() and _DEBUG():
            _debug.core.debug(
                "received response to %s %s%s - HTTP %d", req.method, self.client._origin.origin, req.path, status
            )
        if req.on_headers(status, headers, ""):
            stream.due = 0.0  # paused at the head: no body timeout until resume() re-arms it

    def _on_info(self, ev: tuple[Any, ...]) -> None:
        _, sid, status, headers, raw = ev
        stream = self.running.get(sid)
        if stream is None:
            return
        if status == 101:  # RFC 9113 §8.6: HTTP/2 has no 101 (nghttp2 calls it malformed)
            self._on_malformed((BAD, sid, "101 status"))
            return
        if len(raw) > self._opts.max_header_size:  # as h1: every head is held to the limit
            self._fail_stream(stream, HeadersOverflowError())
            return
        if status == 100:
            if stream.expect:
                self._send_after_expect(stream)
            return
        stream.req.raw_head = raw
        stream.req.on_headers(status, headers, "")

    def _on_data(self, ev: tuple[Any, ...]) -> None:
        _, sid, data, flow = ev
        session = self.session
        stream = self.running.get(sid)
        if stream is None:
            if not (self.tunnels and self.tunnels.on_data(sid, data, flow)):
                session.ack(sid, flow)  # a stream we gave up on: only the connection window matters
            return
        req = stream.req
        stream.received += len(data)
        limit = self._opts.max_response_size
        if limit >= 0 and stream.received > limit:
            session.ack(sid, flow)
            self._fail_stream(stream, ResponseExceededMaxSizeError())
            return
        if stream.deliver(data, flow, session) and stream.due:
            t = req.body_timeout if req.body_timeout is not None else self._opts.body_timeout
            stream.due = self._now + t

    def _on_end(self, ev: tuple[Any, ...]) -> None:
        _, sid, trailers, raw = ev
        stream = self.running.get(sid)
        if stream is None:
            if self.tunnels:
                self.tunnels.on_end(sid)
            return
        if not stream.responded:
            self._fail_stream(stream, InformationalError("HTTP/2: stream half-closed (remote)"))
            return
        # A trailer block is held to max_header_size too (as h1); raw is its flat list.
        if raw and sum(map(len, raw)) + 2 * len(raw) > self._opts.max_header_size:
            self._fail_stream(stream, HeadersOverflowError())
            return
        if stream.req.paused or stream.held:
            stream.end_pending = (trailers, raw)
            return
        self._complete(stream, trailers, raw)

    def _complete(self, stream: H2Stream, trailers: Any, raw: Any) -> None:
        req = stream.req
        stream.done = True
        self.running.pop(stream.sid, None)
        uploads = self.uploads
        if uploads.waiting or uploads.greenlets or stream.window is not None:
            uploads.drop(stream)
        if not stream.local_closed:
            # RFC 9113 §8.1: the response is complete; the rest of our body is not needed.
            self.session.reset_stream(stream.sid, ErrorCodes.NO_ERROR)
        if trailers:
            req.raw_trailers = raw
        if _DEBUG_MAYBE() and _DEBUG():
            # (With trailers or without: the original's line for every response's end.)
            _debug.core.debug("trailers received from %s %s%s", req.method, self.client._origin.origin, req.path)
        req.on_complete(trailers)
        if self._remember_session is not None:
            remember, self._remember_session = self._remember_session, None
            remember(self.sock, self.connect_options)
        self._stream_done()

    def _on_reset(self, ev: tuple[Any, ...]) -> None:
        _, sid, code = ev
        stream = self.running.get(sid)
        if stream is None:
            if self.tunnels:
                self.tunnels.on_reset(sid, code)
            return
        if stream.end_pending is not None:
            # The whole response is in, held for a paused handler: a reset now only
            # stops our upload, and the response is kept (RFC 9113 §8.1, NO_ERROR).
            stream.local_closed = True
            self.uploads.drop(stream)
            return
        req = stream.req
        if code == ErrorCodes.REFUSED_STREAM and not stream.responded and replayable(req):
            # RFC 9113 §8.7: the server did not process it; try once more.
            self._remove(stream)
            if self.reset:
                self._requeue([req])
                self._stream_done()
                return
            if not stream.retried:
                self._open(req, True)
                return
        else:
            self._remove(stream)
        err = SocketError(f"HTTP/2: stream reset by the server with code {error_name(code)}", self._socket_info())
        err.http2_error_code = code  # type: ignore[attr-defined]
        req.on_error(err)
        self._stream_done()

    def _on_settings(self, ev: tuple[Any, ...]) -> None:
        self._limit = min(self._opts.max_concurrent_streams, self.session.peer_max_concurrent_streams)
        self.client._resume()

    def _on_window(self, ev: tuple[Any, ...]) -> None:
        if self.uploads.waiting:
            self.uploads.window_opened()

    def _on_goaway(self, ev: tuple[Any, ...]) -> None:
        _, last, code, _debug_data = ev
        self.reset = True
        if code == ErrorCodes.NO_ERROR:
            err: BaseException = InformationalError(f'HTTP/2: "GOAWAY" frame received with code {code}')
        else:
            err = SocketError(f'HTTP/2: "GOAWAY" frame received with code {code}', self._socket_info())
        if self._goaway_error is None:
            self._goaway_error = err
        # Streams above the last id were not processed: replay them elsewhere, once.
        # One whose response head came was processed, whatever the id says (Node's
        # session.goaway() sends 0): it runs to its end, as in the original.
        replay = []
        for sid, stream in list(self.running.items()):
            if sid <= last or stream.responded:
                continue
            self._remove(stream)
            self.session.reset_stream(sid, ErrorCodes.CANCEL)
            req = stream.req
            if replayable(req) and not req.goaway_replayed:  # RFC 9113 §8.7: once
                req.goaway_replayed = True
                replay.append(req)
            else:
                req.on_error(err)
        if self.tunnels:
            self.tunnels.on_goaway(last, err)
        self._requeue(replay)
        self._stream_done()

    def _on_malformed(self, ev: tuple[Any, ...]) -> None:
        _, sid, reason = ev
        stream = self.running.get(sid)
        if stream is not None:
            err = InformationalError(f"HTTP/2: malformed response ({reason})")
            self._fail_stream(stream, err, ErrorCodes.PROTOCOL_ERROR)

    def _on_pong(self, ev: tuple[Any, ...]) -> None:
        ping = self._ping
        if ping is not None and ping[0] == ev[2]:
            self._ping = None
            self.client.emit("ping", time.monotonic() - ping[1])

    # -- stream bookkeeping ------------------------------------------------------------------------------------
    def _remove(self, stream: H2Stream) -> None:
        stream.done = True
        self.running.pop(stream.sid, None)
        self.uploads.drop(stream)

    def _stream_done(self) -> None:
        """A stream left: close a session that takes no new streams, or ask for more work."""
        if self.destroyed:
            return
        if not self.running and not self.tunnels:  # idle
            if self.reset:
                self.destroy(self._goaway_error or InformationalError("reset"))
                return
            self.timers.set_idle(self._opts.keep_alive_timeout)
        if not self._processing:
            self._schedule_flush()
        self.client._resume()

    def _fail_stream(self, stream: H2Stream, err: BaseException, code: int = ErrorCodes.CANCEL) -> None:
        """Fail one request; the other streams go on (RST_STREAM for this one only)."""
        if stream.done:
            return
        self._remove(stream)
        self.session.reset_stream(stream.sid, code)
        stream.req.on_error(err)
        self._stream_done()

    def _requeue(self, reqs: list[Request]) -> None:
        """Give requests the server never saw back to the client, at the front of its queue."""
        client = self.client
        for req in reqs:
            req.abort_hook = req.resume_hook = None
        if client._destroyed:
            for req in reqs:
                req.on_error(self._error or ClientDestroyedError())
            return
        client._pending.extendleft(reversed(reqs))

    def _find(self, req: Request) -> H2Stream | None:
        for stream in self.running.values():
            if stream.req is req:
                return stream
        return None

    def _abort_request(self, req: Request, reason: BaseException) -> None:
        # Any greenlet: only this stream is cancelled.
        stream = self._find(req)
        if stream is None:
            req.on_error(reason)
            return
        self._fail_stream(stream, reason)

    def _resume_request(self, req: Request) -> None:
        # Any greenlet: the reader delivers what was held, on its own greenlet.
        stream = self._find(req)
        if stream is not None:
            self._resumed.append(stream)
            self._wake()

    def _drain_held(self, stream: H2Stream) -> None:
        """On the reader: a resumed stream gets its held data, and its window back."""
        if not stream.drain(self.session):
            return
        req = stream.req
        if stream.end_pending is not None:
            trailers, raw = stream.end_pending
            self._complete(stream, trailers, raw)
            return
        if stream.responded:
            t = req.body_timeout if req.body_timeout is not None else self._opts.body_timeout
            self.timers.arm_stream(stream, t)

    # -- teardown ------------------------------------------------------------------------------------
    def destroy(self, err: BaseException) -> None:
        """Close the connection with ``err``. Never blocks; the reader finishes the job."""
        if self.destroyed:
            return
        self.destroyed = True
        self._error = err
        reader = self.reader
        if reader is None:
            self._finish(err)
        elif reader is not getcurrent():
            self._wake()

    def _finish(self, err: BaseException) -> None:
        if self._finished:
            return
        self._finished = True
        self.destroyed = True
        self.timers.close()
        self._spin.ended()
        writer = self._writer
        if writer is not None:
            kill(writer)
        self.uploads.close()
        transport = self.transport
        if not transport.closed and self._pid == os.getpid():
            # Best effort, barely waiting: say goodbye (GOAWAY) with whatever is queued.
            # (Not from a forked child letting go of its parent's connection: the
            # parent may still be using it.)
            self.session.close()
            transport.send_parting(self.session.data_to_send(), _PARTING_WAIT)
        transport.close()
        self.tunnels.close_all(err)
        streams = list(self.running.values())
        self.running.clear()
        for stream in streams:
            if stream.end_pending is not None and self._error is None:
                # The whole response arrived, held for a paused handler: the peer's
                # close does not take it back (as on HTTP/1.1, where it waits in the parser).
                _keep_held(stream, self.client)
                continue
            stream.done = True
            stream.req.on_error(err)
        self.client._connection_lost(self, err, [])
        # What refers back to this connection (the bound event handlers, the bodies' and
        # tunnels' helpers, h2's own frame handlers) goes, so a closed connection is freed
        # by reference counting, not left in cycles for the collector. A body greenlet or
        # a tunnel still finishing meets harmless placeholders.
        self._handlers = _CLOSED_HANDLERS
        self.uploads.detach()
        self.tunnels.detach()
        self.session.detach()

    def _socket_info(self) -> dict[str, Any] | None:
        """What ``SocketError.socket`` reports about this connection."""
        return socket_info(self.sock)
