"""One HTTP/1.1 connection: writes requests, and one reader greenlet parses responses.

The reader greenlet owns the socket's read side and the parser, and turns
parser events into the request guard's calls (``_core/request.py``). The
client's core (:class:`ClientCore`) owns the queue; this module asks it for
the next request (``client._resume()``) whenever the connection may take
one, and reports its death (``client._connection_lost``).

Timeouts are one lazily re-armed :class:`Deadline` per connection: the
headers, body and keep-alive idle timeouts are the same timer with a moving
deadline, so no timer object is made per request. A fired deadline throws
into the reader greenlet, which fails the request on its own greenlet.
"""

from __future__ import annotations

import io
import re
from collections import deque
from typing import TYPE_CHECKING, Any, Final

from .. import _debug
from .._core.body import StreamBody, to_bytes_chunk
from .._core.h1 import ResponseParser
from .._core.headers import raw_header_list
from .._core.request import EXPECTS_PAYLOAD, REQUEST_DONE, WHOLE_RESPONSE_TAKERS, Request
from .._net.connector import remember_session_of, socket_failure, socket_info
from .._net.stream import Transport, UpgradedSocket
from .._runtime import (
    Deadline,
    GreenletExit,
    Parker,
    Spin,
    at_round_end,
    call_soon,
    kill,
    read_buffer,
    reader_park,
    ready_gauge,
    round_queue,
    start_timer,
)
from .._runtime import Reader as _Reader
from .._runtime import spawn as _spawn
from .._runtime.hot import getcurrent
from ..errors import (
    BodyTimeoutError,
    GreenHTTPError,
    HeadersTimeoutError,
    InformationalError,
    RequestContentLengthMismatchError,
    ResponseExceededMaxSizeError,
    SocketError,
)

if TYPE_CHECKING:
    from .client_core import ClientCore

__all__ = ["H1Connection"]

# Final: compiled, a C constant or variable, not a lookup in the module's dict at
# each use (docs/performance.md, "Compiled modules").
_KEEP_ALIVE_HINT: Final = re.compile(r"timeout=(\d+)")
_NO_MORE: Final[Any] = object()  # a request body iterator's end
_BIG_READ: Final = 1 << 22  # read a known-length body straight into one buffer up to 4 MiB
_WHOLE_BODY_MIN: Final = 1 << 16  # ... when more than 64 KiB of it is left
_HOLD_READS: Final = 1 << 18  # ... waking the reader once per 256 KiB of it, not once per TCP segment
_INLINE_BODY: Final = 1 << 16  # bodies up to 64 KiB go out with the head in one send
_WRITE_PIECE: Final = 1 << 18  # larger bodies go out in pieces, each restarting the write stall deadline
CONTINUE_WAIT: Final = 1.0  # how long a body waits for 100 Continue before it goes anyway (as curl; h2 too)

_IDLE: Final = 0
_HEADERS: Final = 1
_BODY: Final = 2
_DEBUG: Final = _debug.core_enabled
_DEBUG_MAYBE: Final = _debug.core_maybe_enabled
Reader: Final = _Reader
spawn: Final = _spawn


class _TimeoutFired(Exception):
    """Thrown into the reader greenlet when its deadline passes, for the phase it was set in."""

    def __init__(self, phase: int) -> None:
        super().__init__(phase)
        self.phase = phase


def _no_abort(req: Request, reason: BaseException) -> None:
    """The abort hook of a closed connection."""


def _no_resume(req: Request) -> None:
    """The resume hook of a closed connection."""


class H1Connection:
    """An HTTP/1.1 connection of a :class:`Client`. Used from the client's greenlets only."""

    version = "h1"

    def __init__(self, client: ClientCore, sock: Any) -> None:
        self.client = client
        self.sock = sock
        self.transport = Transport(sock)
        self.parser = ResponseParser(self, client._opts.max_header_size)
        self.running: deque[Request] = deque()
        self.reset = False  # no new requests; close once the running ones are done
        self._server_closes = False  # a final head said the server closes after its response
        self.blocking = False  # a written request waits for its response head
        self.writing = False  # a writer greenlet owns the write side
        self.destroyed = False
        self.count = 0  # requests written on this socket
        self.keep_alive_timeout = client._opts.keep_alive_timeout
        self.max_concurrent = client._pipelining or 1  # the client updates it when pipelining changes
        self._max_requests = client._opts.max_requests_per_client or 0
        self.reader: Any = None
        self._tos: int | None = None  # the IP type of service last set by a request
        self._armed_for: Request | None = None  # the request whose headers deadline is armed
        self._final_head_for: Request | None = None  # the request whose final head arrived
        # The reader's receive buffer. A plain socket's read is copied out before the
        # reader can switch, so its connections share one buffer per thread.
        self._view = read_buffer() if self.transport.fast else memoryview(bytearray(65536))
        self._writer: Any = None  # the greenlet writing a large or streamed body, if any
        self._phase = _IDLE
        self._deadline = Deadline(self._on_deadline)
        self._spin = Spin(client._opts.busy_poll)  # the hub polls, not sleeps, for a fast answer
        self._resume_parker: Parker | None = None
        self._error: BaseException | None = None
        self._continue: Parker | None = None  # expect: 100-continue in progress
        self._upgrade: tuple[int, dict[str, Any]] | None = None
        self._stop_reading = False  # reset and drained, or upgraded
        self._choosing = False  # a big body's head was delivered: let its consumer choose
        # The last body read whole, kept until the next one is (see _read_until_done).
        self._last_whole: bytes | None = None
        # Where the reader's writes wait for the end of the hub's round (see _send); only
        # plain sockets, whose sends never block.
        self._round = round_queue() if self.transport.fast else None
        self._plain_send = self.transport.ready_send  # None: send through the transport
        self._ready = ready_gauge()  # .pendingcnt: ready sockets left in the hub's round
        self._corked: bytes | None = None  # written, not yet sent
        self._expected = "GET"  # the method the parser was last told to expect (its default)
        self._finished = False
        self._idle_write = 0  # the number of the last request written on the idle connection
        self._replay_head = False  # the head goes out again on a new connection
        self._detached = False
        self.connect_options: dict[str, Any] = {}  # what the connector was called with
        self._abort_hook = self._abort_request  # bound once, set on every request
        self._resume_hook = self._resume_request
        # TLS 1.3 tickets arrive after the handshake: cache the session after a response.
        # (A connector wrapped in a function has no such method: the socket knows its maker.)
        self._remember_session = (
            (getattr(client._connector, "remember_session", None) or remember_session_of)
            if client._origin.is_https
            else None
        )

    # -- scheduling ---------------------------------------------------------
    # (free() and takes() answer the client in one call each: compiled, a call costs
    # less than the attribute reads it replaces on a connection the client holds as Any.)
    def free(self) -> bool:
        """Could a request be written now: a slot left, and nothing holding the
        connection (a reset, a request the next must wait for, a body being written)?"""
        return len(self.running) < self.max_concurrent and not (self.reset or self.blocking or self.writing)

    def takes(self, req: Request) -> bool:
        """Could ``req`` be written now: a slot left, and :meth:`busy` says no?"""
        return len(self.running) < self.max_concurrent and not self.busy(req)

    def busy(self, req: Request) -> bool:
        """May ``req`` be written now (REFERENCE §3.3)?"""
        if self.reset or self.blocking or self.writing or self.destroyed:
            return True
        if self.running:
            if not req.idempotent or req.upgrade is not None or req.method == "CONNECT":
                return True
            body = req.body
            if isinstance(body, StreamBody):
                return True
        return False

    @property
    def idle(self) -> bool:
        return not self.running

    def write(self, req: Request) -> None:
        """Write ``req`` (already started) on this connection. Never blocks for small bodies."""
        client = self.client
        self.count += 1
        method = req.method
        special = req.special
        if special or method == "HEAD" or method == "CONNECT":
            self._reset_rules(req)
        if self._max_requests and self.count >= self._max_requests:
            self.reset = True

        key = (method, req.path, req.host)
        if special or self.reset or not client._pipelining:
            head, stream = self._head(req, key)
        else:
            # No body, kept alive: the whole head is cached by its request line and header block.
            headers = req.headers
            whole = (method, req.path, req.host, headers.block) if headers else key
            head = client._plain_heads.get(whole) or client._keep_plain_head(whole, self._head(req, key)[0])
            stream = None

        running = self.running
        if not running:
            self._idle_write = self.count
            if method != self._expected:
                self._expected = method
                self.parser.expect(method)
        running.append(req)
        req.abort_hook = self._abort_hook
        req.resume_hook = self._resume_hook
        if req.blocking:
            self.blocking = True
        if _DEBUG_MAYBE() and _DEBUG():
            _debug.core.debug("sending request to %s %s%s", method, client._origin.origin, req.path)

        body = req.body
        if body is None or (
            stream is None and not req.expect_continue and len(body) <= _INLINE_BODY  # type: ignore[arg-type]
        ):
            # Its answer is due once these bytes are out: time it (before sending, as a
            # send that fails ends the connection, and the wait). A body a writer
            # greenlet sends is answered only after it: not timed.
            self._spin.sent()
            self._send(head if body is None else head + body)  # type: ignore[operator]
        else:
            self.writing = True
            self._writer = spawn(self._write_body, req, head, body, stream)
        if len(running) == 1 and not self.writing:
            self._armed_for = req
            self._phase = _HEADERS
            t = req.headers_timeout
            self._deadline.set(t if t is not None else client._opts.headers_timeout)
        elif len(running) == 1 and self._phase == _IDLE:
            # A body the writer greenlet sends, on a connection that was idle: it idles
            # no more, so its keep-alive timer stops (one that fired just now is stale);
            # the writer arms headers_timeout as the body goes out.
            self._phase = _HEADERS
            self._deadline.clear()

    def _head(self, req: Request, key: tuple[str, str, str | None]) -> tuple[bytes, StreamBody | None]:
        """The request head with every rule applied, and the body to stream (if any)."""
        client = self.client
        method = req.method
        head = client._request_lines.get(key) or client._request_line(key)
        if req.upgrade is not None:
            head += b"connection: upgrade\r\nupgrade: %s\r\n" % req.upgrade.encode("latin-1")
        elif client._pipelining and not self.reset:
            head += b"connection: keep-alive\r\n"
        else:
            head += b"connection: close\r\n"
            self.reset = True  # we asked the server to close: never reuse this socket
        head += req.headers.block
        body = req.body
        stream = None
        if body is None:
            if method in EXPECTS_PAYLOAD:
                head += b"content-length: 0\r\n\r\n"
            else:
                head += b"\r\n"
        else:
            if type(body) is bytes:
                # Without strict_content_length a wrong declared length is replaced
                # by the real one: a wrong length on the wire is request smuggling.
                head += b"content-length: %d\r\n" % len(body)
            elif isinstance(body, StreamBody):
                stream = body
                # A known length is the real one (a declared one that differs was refused,
                # or, without strict_content_length, is replaced); else what was declared.
                length = body.length if body.length is not None else req.content_length
                if length is None:
                    head += b"transfer-encoding: chunked\r\n"
                else:
                    head += b"content-length: %d\r\n" % length
            if req.expect_continue:
                head += b"expect: 100-continue\r\n"
            head += b"\r\n"
        if req.special and req.type_of_service is not None and req.type_of_service != self._tos:
            self._tos = req.type_of_service
            self.transport.set_type_of_service(self._tos)
        return head, stream

    def _reset_rules(self, req: Request) -> None:
        """REFERENCE §3.5: which requests close the socket after their response."""
        method = req.method
        if req.upgrade is not None or method == "CONNECT":
            self.reset = True
        elif req.reset is not None:
            if req.reset:
                self.reset = True
        elif method == "HEAD" or (req.body is not None and method not in EXPECTS_PAYLOAD):
            self.reset = True

    def _send(self, data: bytes) -> None:
        corked = self._corked
        if corked is not None:
            self._corked = corked + data  # after what waits, in order
        elif self._round is not None and (self._ready.pendingcnt or getcurrent() is self.reader):
            # Written while the hub is still handling a round of ready sockets: by a
            # reader (a queued request taking the place of the answered one), or by a
            # caller its reader just answered while other sockets of the round wait.
            # Send it once the hub has handled the round, with what the others write
            # meanwhile. Sends spread between the reads wake the server once each; in
            # one burst they wake it once.
            self._corked = data
            at_round_end(self._round, self._uncork)
        else:
            self._send_now(data)

    def _uncork(self) -> None:
        data, self._corked = self._corked, None
        if data is not None and not self.destroyed:
            self._send_now(data)

    def _send_now(self, data: bytes) -> None:
        send = self._plain_send
        try:
            sent = send(data) if send is not None else self.transport.try_send(data)
        except BlockingIOError:
            sent = 0  # full: the writer greenlet below sends it all
        except Exception as exc:  # OSError, or whatever a custom socket raises
            self._fail_write(exc)
            return
        if sent < len(data):
            self.writing = True  # the rest goes out from a writer greenlet
            self._writer = spawn(self._write_rest, data[sent:])

    def _write_rest(self, data: bytes) -> None:
        try:
            self.transport.sendall(data)
        except Exception as exc:
            self._fail_write(exc)
            return
        self._write_done()

    def _write_body(self, req: Request, head: bytes, body: Any, stream: StreamBody | None) -> None:
        transport = self.transport
        try:
            if req.expect_continue:
                # The body goes once 100 Continue arrives; a final answer first cancels it.
                cont = self._continue = Parker()
                self._writing_progress(req)  # the server owes an answer: 100 or a final one
                transport.sendall(head)
                # A server (or an HTTP/1.0 hop) may ignore the expectation: the client
                # should not wait for 100 indefinitely (RFC 9110 §10.1.1).
                timer = start_timer(CONTINUE_WAIT, cont.set, True)
                try:
                    go = cont.get()
                finally:
                    timer.close()
                if not go:
                    self._write_done()
                    return
                head = b""
            if stream is None:
                data = memoryview(head + body if head else body)
                for start in range(0, len(data), _WRITE_PIECE):
                    self._writing_progress(req)
                    transport.sendall(data[start : start + _WRITE_PIECE])
            else:
                self._write_stream(req, head, stream)
        except GreenletExit:
            if stream is not None and stream.used:
                # The connection ended mid-body: the rest is never sent. Close the
                # source, so a producer waiting on it (a pipeline) learns so.
                stream.close()
            return
        except Exception as exc:  # the socket failed (OSError, or a custom socket's own), or a length mismatch
            self._fail_write(exc)
            return
        self._write_done()

    def _write_stream(self, req: Request, head: bytes, stream: StreamBody) -> None:
        transport = self.transport
        declared = stream.length if stream.length is not None else req.content_length
        chunked = declared is None
        if stream.used:
            raise RequestContentLengthMismatchError("the request body stream was already used")
        stream.used = True
        if head:
            transport.sendall(head)
        written = 0
        chunks = iter(stream.chunks)
        while True:
            if self._phase == _HEADERS and self.running and self.running[0] is req:
                # Waiting for the body source is not waiting for the server: the
                # headers deadline bounds stalled writes only (REFERENCE §3.7).
                self._deadline.clear()
            try:
                item = next(chunks, _NO_MORE)
                if item is _NO_MORE:
                    break
                if req.done:
                    # The response ended first: the rest of the body is never sent. Close
                    # the source, so a producer waiting on it (a pipeline) learns so.
                    stream.close()
                    return
                chunk = to_bytes_chunk(item)
            except GreenletExit:
                raise
            except Exception as exc:
                # The body iterator raised (or gave something that is not bytes): the
                # request fails with that error. (What the socket raises is a failed write.)
                req.abort(exc)
                raise GreenletExit() from exc
            if not chunk:
                continue
            written += len(chunk)
            if declared is not None and written > declared:
                raise RequestContentLengthMismatchError()
            self._writing_progress(req)
            if chunked:
                transport.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            else:
                transport.sendall(chunk)
        if declared is not None and written != declared:
            raise RequestContentLengthMismatchError()
        if chunked:
            transport.sendall(b"0\r\n\r\n")

    def _writing_progress(self, req: Request) -> None:
        """While a body is written, headers_timeout bounds each stalled write:
        a server that never reads can't hold the request forever. (Once its final
        head is in, body_timeout, armed by the reader, bounds the wait instead.)"""
        if self.running and self.running[0] is req and self._final_head_for is not req:
            self._armed_for = req
            self._arm(_HEADERS, req)

    def _write_done(self) -> None:
        self.writing = False
        self._writer = None
        if self.destroyed:
            return
        running = self.running
        if running and (
            self._phase == _IDLE
            or (self._phase == _HEADERS and self._deadline.deadline is None and running[0] is not self._final_head_for)
        ):
            # Written: its headers_timeout runs from now (it was off while the body
            # source had nothing to send).
            self._armed_for = running[0]
            self._arm(_HEADERS, running[0])
        self.client._resume()

    def _fail_write(self, exc: BaseException) -> None:
        """A write failed: the connection ends with that error. Whatever the socket
        raised (an OSError, or anything a custom socket raises) becomes a SocketError."""
        self.writing = False
        self._writer = None
        if isinstance(exc, RequestContentLengthMismatchError) and self.running:
            # The server must never see a body that disagrees with its length.
            self.running[-1].on_error(exc)
        if not isinstance(exc, GreenHTTPError):
            exc = socket_failure(exc, self.sock)
        self.destroy(exc)

    # -- timers -----------------------------------------------------------------
    def _arm(self, phase: int, req: Request | None) -> None:
        self._phase = phase
        opts = self.client._opts
        if phase == _HEADERS:
            t = req.headers_timeout if req is not None and req.headers_timeout is not None else opts.headers_timeout
        elif phase == _BODY:
            t = req.body_timeout if req is not None and req.body_timeout is not None else opts.body_timeout
        else:
            t = self.keep_alive_timeout
        self._deadline.set(t)

    def _arm_for_wait(self) -> None:
        """Before the reader waits: the deadline of what it is waiting for."""
        running = self.running
        if not running:
            if self._phase != _IDLE:
                self._phase = _IDLE
                self._deadline.set(self.keep_alive_timeout)
        elif self._final_head_for is running[0]:
            self._arm(_BODY, running[0])
        elif not self.writing and (self._phase != _HEADERS or self._armed_for is not running[0]):
            # headers_timeout bounds the whole head (interim 1xx heads included),
            # so it is armed once per request, not refreshed by every read.
            self._armed_for = running[0]
            self._arm(_HEADERS, running[0])

    def _on_deadline(self) -> None:
        # Runs in the hub: hand the failure to the reader greenlet.
        if self.reader is not None and not self.destroyed:
            kill(self.reader, _TimeoutFired(self._phase))

    # -- parser sink (called on the reader greenlet) --------------------------------
    def on_head(self, status: int, reason: str, headers: dict[str, Any], raw: bytes, keep_alive: bool) -> bool:
        if self.client._destroyed:
            # The client was destroyed by a handler on this greenlet: the parser stops, and
            # what is running fails with the destroy's error (REFERENCE §1.9), not answered.
            return True
        running = self.running
        if not running:
            raise SocketError("bad response", self._socket_info())
        req = running[0]
        req.raw_head = raw
        if status == 101 or req.method == "CONNECT":
            if req.upgrade is None and req.method != "CONNECT" or status < 200 and req.method == "CONNECT":
                raise SocketError("bad upgrade", self._socket_info())
            self._upgrade = (status, headers)
            return True
        if status < 200:
            if status == 100:
                if self._continue is not None:
                    self._continue.set(True)
                return False
            return req.on_headers(status, headers, reason)
        if req.special:
            if req.upgrade is not None:
                # A final answer to an upgrade: reported as a response (so is it in the
                # original), then the upgrade fails.
                if _DEBUG_MAYBE() and _DEBUG():
                    self._log_head(req, status)
                raise SocketError("bad upgrade", self._socket_info())
            if req.expect_continue:
                cont = self._continue
                if cont is not None and not cont.ready():
                    # A final answer before 100: the body is not sent; the socket can't be reused.
                    cont.set(False)
                    self.reset = True
        self._final_head_for = req
        self._final_head(req, status, headers, keep_alive)
        client = self.client
        paused = req.on_headers(status, headers, reason)
        if client._pending and not self.reset and len(self.running) < self.max_concurrent:
            # No longer blocked: the next request may be pipelined behind this one (REFERENCE §1.1).
            client._resume()
        if self.parser.body_length > _WHOLE_BODY_MIN and not paused and not req.read_all:
            # A big body: stop here, so that the consumer just woken may ask for the
            # whole body before any of it is read (then it arrives in one buffer).
            self._choosing = True
            return True
        return paused

    def _final_head(self, req: Request, status: int, headers: dict[str, Any], keep_alive: bool) -> None:
        """What a final response head says about the connection: it no longer blocks
        the pipeline, and whether and how long it stays open."""
        self.blocking = False
        client = self.client
        if not keep_alive:
            self.reset = True
            self._server_closes = True
        elif client._pipelining:
            hint = headers.get("keep-alive")
            if hint is None:
                self.keep_alive_timeout = client._opts.keep_alive_timeout
            else:
                self._keep_alive_hint(hint)
        if _DEBUG_MAYBE() and _DEBUG():
            self._log_head(req, status)

    def _log_head(self, req: Request, status: int) -> None:
        """The debug line for a final response head (debug logging is on)."""
        _debug.core.debug(
            "received response to %s %s%s - HTTP %d", req.method, self.client._origin.origin, req.path, status
        )

    def _keep_alive_hint(self, hint: str | list[str]) -> None:
        """A response's ``keep-alive: timeout=N`` hint bounds how long the socket idles."""
        opts = self.client._opts
        m = _KEEP_ALIVE_HINT.search(hint if type(hint) is str else ",".join(hint))
        if m:
            t = min(int(m.group(1)) - opts.keep_alive_timeout_threshold, opts.keep_alive_max_timeout)
            if t <= 0:
                self.reset = True
            else:
                self.keep_alive_timeout = t
        else:
            self.keep_alive_timeout = opts.keep_alive_timeout

    def on_whole(
        self, status: int, reason: str, headers: dict[str, Any], raw: bytes, keep_alive: bool, body: bytes
    ) -> bool:
        """A final head and its whole body (maybe empty), from one read. Returns False
        when the handler paused at the head: the parser keeps the body for later.

        A handler of a class that takes a whole response at once (one in
        ``WHOLE_RESPONSE_TAKERS``, as ``request()``'s is) gets it in one step: what
        :meth:`on_head`, :meth:`on_body` and :meth:`on_complete` would do together.
        Any other gets those three as usual (so does a wrapper that forwards its
        attributes to such a handler: it is not of that class).
        """
        running = self.running
        client = self.client
        req = running[0] if running else None
        if (
            req is None
            or (handler_whole := WHOLE_RESPONSE_TAKERS.get(type(req.handler))) is None
            or status < 200
            or status == 101
            or req.special
            or req.method == "CONNECT"
            or req.state == REQUEST_DONE
            or 0 <= client._opts.max_response_size < len(body)
        ):
            if self.on_head(status, reason, headers, raw, keep_alive) and body:
                return False
            if body:
                self.on_body(body)
            self.on_complete(None)
            return True
        req.raw_head = raw
        self._final_head(req, status, headers, keep_alive)
        running.popleft()
        if _DEBUG_MAYBE() and _DEBUG():
            self._log_end(req)
        req.on_whole(handler_whole, status, headers, reason, body)
        if not self.destroyed:  # (destroyed: the handler failed, the request was aborted)
            self._next_response()
        return True

    def on_body(self, chunk: bytes) -> bool:
        limit = self.client._opts.max_response_size
        if limit >= 0 and self.parser.bytes_read > limit:
            raise ResponseExceededMaxSizeError()
        if self.client._destroyed:
            return True  # (see on_head)
        return self.running[0].on_data(chunk)

    def on_complete(self, trailers: dict[str, Any] | None) -> bool:
        if self.client._destroyed:
            return True  # (see on_head)
        running = self.running
        req = running.popleft()
        if trailers:
            req.raw_trailers = raw_header_list(b"\r\n" + self.parser.trailer_block)  # (a line before: no status line)
        if _DEBUG_MAYBE() and _DEBUG():
            self._log_end(req)
        req.on_complete(trailers)
        return self._next_response()

    def _log_end(self, req: Request) -> None:
        """The debug line of a response's end, trailers or none (the original's wording)."""
        _debug.core.debug("trailers received from %s %s%s", req.method, self.client._origin.origin, req.path)

    def _next_response(self) -> bool:
        """After a response ended: ready for the next, or stop reading (True) if the
        connection is to close."""
        if self._remember_session is not None:
            remember, self._remember_session = self._remember_session, None
            remember(self.sock, self.connect_options)
        running = self.running
        if self._server_closes or (not running and (self.reset or self.writing)):
            # RFC 9112 §9.6: after a response that closes the connection nothing more
            # is read on it; requests pipelined behind it are re-sent (REFERENCE §3.5).
            # A response that came before its request body was all sent ends the
            # connection too: nothing may follow a body cut short (REFERENCE §3.5).
            self._stop_reading = True
            return True
        if running:
            method = self._expected = running[0].method
            self.parser.expect(method)
        self.client._resume()
        if not self.running and self._phase != _IDLE:
            # Nothing was written meanwhile: the connection idles. (What _arm_for_wait
            # would do before the next read, here where it becomes so.)
            self._phase = _IDLE
            self._deadline.set(self.keep_alive_timeout)
        return False

    def on_upgrade(self, rest: bytes) -> None:
        req = self.running.popleft()
        self._deadline.close()
        status, headers = self._upgrade or (101, {})
        self._stop_reading = True
        self._detached = True
        self.transport.release()
        req.on_upgrade(status, headers, UpgradedSocket(self.sock, rest))

    # -- the reader greenlet --------------------------------------------------
    def read_loop(self) -> None:
        """Read and parse until the connection ends. Runs on the connection's greenlet."""
        self.reader = getcurrent()
        err: BaseException | None = None
        try:
            while True:
                try:
                    err = self._read_until_done()
                    break
                except _TimeoutFired as fired:
                    if self._stale(fired):
                        continue
                    if fired.phase == _HEADERS:
                        err = HeadersTimeoutError()
                    elif fired.phase == _BODY:
                        err = BodyTimeoutError()
                    else:
                        err = InformationalError("socket idle timeout")
                    break
        except GreenletExit:
            err = self._error or InformationalError("destroyed")
        except GreenHTTPError as exc:  # parser errors, size limits
            err = exc
        except Exception as exc:  # OSError, or whatever a custom socket raises
            err = socket_failure(exc, self.sock)
            if isinstance(exc, ConnectionResetError) and self.parser.idle:
                self._check_replay()
        finally:
            self.reader = None
        if self._detached:
            self._finish(InformationalError("upgrade"), close=False)
            return
        if err is None:
            err = self._error or InformationalError("reset")
        self._finish(err)

    def _read_until_done(self) -> BaseException | None:
        """The read loop proper; returns the error that ended it (None: a clean end)."""
        transport = self.transport
        parser = self.parser
        view = self._view
        spin = self._spin
        wait_first = True
        # A plain socket's readiness: a Reader greenlet parks on it itself.
        reader: Any = getcurrent()
        watcher = transport.read_watcher if isinstance(reader, Reader) else None
        recv_ready: Any = transport.ready_recv_into if watcher is not None else None
        while not self.destroyed and not self._stop_reading:
            head = self.running[0] if self.running else None
            if head is not None and head.paused:
                self._wait_resume(head)
                parser.feed(b"")
                continue
            if self._choosing:
                if not self._takes_whole_body(head):
                    parser.feed(b"")  # read the body the usual way
                    continue
                prefix: bytes | None = parser.take_buffered()
            elif head is not None and head.read_all and parser.body_remaining > _WHOLE_BODY_MIN:
                prefix = b""
            else:
                prefix = None
            if prefix is not None:
                # The consumer takes the whole body: read it straight into one buffer.
                data = self._read_exact(min(parser.body_left, _BIG_READ), prefix)
                if data is None:
                    return self._eof()
                # The parser hands a whole-length buffer on as one body chunk, uncopied.
                parser.feed(data)
                # Kept until the next whole body has been read, as a local variable of
                # this loop once kept it: released at once, glibc's malloc gives the top
                # of the heap back to the kernel after each big body and faults it in
                # again for the next (docs/performance.md, "What is left at 1 MiB").
                self._last_whole = data
                continue
            if wait_first:
                if head is None:
                    if self._phase != _IDLE:
                        self._arm_for_wait()
                elif head is not self._armed_for or self._phase != _HEADERS or head is self._final_head_for:
                    # (Otherwise the head's headers_timeout, armed as it was written, runs.)
                    self._arm_for_wait()
                if watcher is not None:
                    reader_park(reader, watcher)  # until readable: then recv_into won't wait
                    try:
                        n = recv_ready(view)
                    except (BlockingIOError, InterruptedError):
                        continue  # readable, and yet nothing (rare): wait again
                else:
                    n = transport.recv_into(view, True)
            else:
                n = transport.recv_into(view, False)
            spin.read()
            if n == 0:
                return self._eof()
            wait_first = n < 65536
            if not parser.feed(view[:n].tobytes()) and not self.running and not self._stop_reading:
                # Bytes nobody asked for (a body after 204/304/HEAD, or junk): never
                # let them be read as the start of the next response.
                raise SocketError("bad response", self._socket_info())
        return None

    def _read_exact(self, size: int, prefix: bytes) -> bytes | None:
        """Read ``size`` body bytes (``prefix`` already received) into one buffer.

        The buffer becomes the body chunk as it is: a ``bytes`` built in place
        (``BytesIO.getvalue()`` hands its buffer over when nothing else holds
        it), so the consumer that asked for the whole body gets it without a
        copy. The socket wakes the reader once per ``_HOLD_READS`` bytes
        (``Transport.hold_reads``), so a body timeout first reads what was
        held back: it fires only when nothing arrived for a whole period. On
        EOF, what arrived is fed to the parser and None returned.
        """
        out = io.BytesIO(bytes(size))  # the only reference to its buffer: written in place
        view = out.getbuffer()
        got = len(prefix)
        view[:got] = prefix
        transport = self.transport
        req = self.running[0]
        try:
            while got < size:
                self._arm(_BODY, req)
                transport.hold_reads(min(size - got, _HOLD_READS))
                try:
                    n = transport.recv_into(view[got:], True)
                except _TimeoutFired as fired:
                    if self._stale(fired):
                        continue  # handled here: leaving would lose the bytes in the buffer
                    held = transport.try_recv_into(view[got:])
                    if held is None:
                        raise
                    n = held
                if n == 0:
                    if got:
                        self.parser.feed(view[:got].tobytes())
                    return None
                got += n
        finally:
            transport.hold_reads(1)
        view.release()  # (on an error the buffer is simply dropped)
        return out.getvalue()

    def _stale(self, fired: _TimeoutFired) -> bool:
        """The deadline was re-armed between firing and delivery (a request was
        written, or bytes arrived, just as it fired): not a timeout any more."""
        return fired.phase != self._phase or self._deadline.deadline is not None

    def _takes_whole_body(self, head: Request | None) -> bool:
        """The head of a big body was delivered and the parser stopped before its
        body: let the woken consumer run first, and say whether it asked for the
        whole body (``Controller.wants_whole_body``)."""
        self._choosing = False
        self._deadline.clear()
        parker = Parker()
        call_soon(parker.set)
        parker.get()
        return head is not None and head.read_all

    def _wait_resume(self, req: Request) -> None:
        self._deadline.clear()
        parker = self._resume_parker = Parker()
        if req.paused:
            parker.get()
        self._resume_parker = None
        if self._phase == _BODY and self.running:
            self._arm(_BODY, self.running[0])

    def _resume_request(self, req: Request) -> None:
        parker = self._resume_parker
        if parker is not None:
            parker.set()

    def _eof(self) -> BaseException | None:
        parser = self.parser
        unanswered = parser.idle
        if parser.feed_eof():
            return None
        if unanswered:
            self._check_replay()
        return SocketError("other side closed", self._socket_info())

    def _check_replay(self) -> None:
        """The connection ended before a byte of the head's response. If the head
        was written on the connection idle after answering others, the server
        most likely closed it as idle while the request was on its way (the
        keep-alive race, RFC 9112 §9.3.1): an idempotent head with a body that
        can go out again is re-sent on a new connection, where it is the first
        request (so this happens once), as Go's client does."""
        running = self.running
        number = self.count - len(running) + 1  # the head's number on this connection
        if not running or number == 1 or number != self._idle_write:
            return  # nothing sent, the connection's first request, or pipelined behind another
        head = running[0]
        if head.idempotent and not isinstance(head.body, StreamBody):
            self._replay_head = True

    # -- teardown ------------------------------------------------------------------
    def _abort_request(self, req: Request, reason: BaseException) -> None:
        # HTTP/1.1 can't cancel one response: the socket goes, the others are re-sent.
        req.on_error(reason)
        self.destroy(InformationalError("aborted"))

    def destroy(self, err: BaseException) -> None:
        """Close the connection with ``err``. Never blocks; the reader finishes the job."""
        if self.destroyed:
            return
        self.destroyed = True
        self._error = err
        reader = self.reader
        if reader is not None and reader is not getcurrent():
            kill(reader)
        elif reader is None:
            self._finish(err)

    def _finish(self, err: BaseException, close: bool = True) -> None:
        if self._finished:
            return
        self._finished = True
        self.destroyed = True
        self._deadline.close()
        self._spin.ended()
        if self._continue is not None:
            self._continue.set(False)
        writer, self._writer = self._writer, None
        if writer is not None:
            kill(writer)  # a writer parked on the socket or on its body source must not outlive it
        if close:
            self.transport.close()
        running = list(self.running)
        self.running.clear()
        self.client._connection_lost(self, err, running, self._replay_head)
        # The parser and the bound hooks refer back to this connection: drop them, so a
        # closed connection is freed by reference counting (no cycle for the collector).
        self.parser.sink = None  # type: ignore[assignment]
        self._abort_hook = _no_abort
        self._resume_hook = _no_resume

    def _socket_info(self) -> dict[str, Any] | None:
        """What ``SocketError.socket`` reports about this connection."""
        return socket_info(self.sock)
