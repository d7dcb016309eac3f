"""What a :class:`Client` does, compiled with the request path: ``ClientCore``.

The public :class:`~greenhttp.Client` (``client.py``) keeps its documented
methods, annotations and argument checks, and hands each call to its core.
Its connection drivers and the pool that owns it talk to the core directly,
so the calls of one request among them stay compiled (docs/performance.md,
"Compiled modules"). The client owns the queue of requests not yet written
(``_pending``) and one connection, which owns the requests written and not
yet answered. The resume loop (:meth:`ClientCore._resume`) is the only
place that decides what to write next; it runs in whichever greenlet made
progress possible (a caller in ``dispatch``, the reader after a response,
the connect greenlet), so no greenlet is spawned per request. Bookkeeping
is decided first and I/O done after, so a greenlet switch never sees a
half-updated queue.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _debug
from .._core.options import ClientOptions
from .._core.request import RESPONSE_STARTED, Request, check_handler, refuse
from .._core.url import Origin
from .._runtime import GreenletExit, Parker, call_soon, getcurrent, spawn, spawn_reader
from ..errors import (
    ClientClosedError,
    ClientDestroyedError,
    InformationalError,
    InvalidArgumentError,
    RequestContentLengthMismatchError,
    SocketError,
)
from .h1_driver import H1Connection
from .stats import ClientStats

__all__ = ["ClientCore"]

if TYPE_CHECKING:
    from .pool_core import Member


def _report_unhandled(err: BaseException) -> None:
    _debug.core.error("greenhttp: unhandled handler error: %r", err)


def _remember(cache: dict[Any, bytes], key: tuple[Any, ...], head: bytes) -> bytes:
    """Keep ``head`` in ``cache``; many distinct paths empty it: small, not exhaustive."""
    if len(cache) >= 256:
        cache.clear()
    cache[key] = head
    return head


class ClientCore:
    """The state and work of one :class:`Client`; its events go out through ``owner``.

    Greenlet-safe as the client is: nothing here switches greenlets except
    :meth:`connect`, :meth:`close` and :meth:`destroy`, which block their caller.
    """

    def __init__(
        self,
        owner: Any,
        origin: Origin,
        opts: ClientOptions,
        connector: Callable[..., Any],
        listeners: dict[str, Any],
        h2_pipelining_caps: bool,
    ) -> None:
        # The public Client, what events name and are emitted on. Weakly: a client
        # dropped by its user is collected, not kept alive by its own connection.
        self._owner: weakref.ref[Any] = weakref.ref(owner)
        self._listeners = listeners  # the owner's listeners (a "drain" is looked up per request)
        self._origin = origin
        self._opts = opts
        self._h2_pipelining_caps = h2_pipelining_caps  # the HTTP/2 driver caps streams at pipelining
        self._pipelining: int = opts.pipelining
        self._host_line = f"host: {origin.host}\r\n".encode("latin-1")
        self._request_lines: dict[tuple[str, str, str | None], bytes] = {}
        self._plain_heads: dict[tuple[Any, ...], bytes] = {}  # whole heads, see _keep_plain_head
        self._connector = connector
        self._pending: deque[Request] = deque()
        self._conn: Any = None  # an H1Connection, or an H2Connection
        self._connecting = False
        self._connected_once = False
        self._closed = False
        self._destroyed = False
        self._reason: BaseException | None = None  # what destroyed it
        self._close_parkers: list[Parker] = []
        # The close() callers a finished close() is still waking (its socket is
        # closing): a close() meanwhile shares that completion. None otherwise.
        self._closing_parkers: list[Parker] | None = None
        self._connect_parkers: list[Parker] = []
        self._need_drain = False
        # The member of the pool that owns this client: the pool is told of a drain
        # directly, what a "drain" listener would be told without the event (see _drain).
        self._member: Member | None = None
        self._readers: set[Any] = set()
        # Requests whose whole response outlived its (HTTP/2) connection, held for a
        # paused handler: close() waits for them, destroy() fails them.
        self._held: list[Request] = []
        self._in_resume = False
        self._error_hook: Callable[[BaseException], None] = self._report_error  # given to every request

    # -- the owner's events ----------------------------------------------------------
    def emit(self, event: str, *args: Any) -> bool:
        """Emit ``event`` on the public client; True if it had listeners."""
        owner = self._owner()
        return owner is not None and bool(owner.emit(event, *args))

    def _listener_failed(self, event: str, exc: Exception) -> None:
        owner = self._owner()
        if owner is not None:
            owner._listener_failed(event, exc)

    # -- state -------------------------------------------------------------------------
    @property
    def _running_count(self) -> int:
        conn = self._conn
        return (len(conn.running) if conn is not None else 0) + len(self._held)

    @property
    def size(self) -> int:
        return len(self._pending) + self._running_count

    @property
    def connected(self) -> bool:
        conn = self._conn
        return conn is not None and not conn.destroyed and not self._connecting

    @property
    def busy(self) -> bool:
        if self._pending:
            return True
        conn = self._conn
        if conn is None:
            return False
        return not conn.free()

    @property
    def stats(self) -> ClientStats:
        running = self._running_count
        return ClientStats(self.connected, len(self._pending), running, len(self._pending) + running)

    def set_pipelining(self, value: int) -> None:
        """The ``pipelining`` setter, once the value was checked."""
        self._pipelining = value
        conn = self._conn
        if conn is not None and conn.version == "h1":
            conn.max_concurrent = value or 1
        self._resume()

    # -- dispatch -------------------------------------------------------------------
    # (options: Any, not dict: compiled, an annotation is a check, and a non-dict must
    # reach the handler as the request record's InvalidArgumentError, not a TypeError.)
    def dispatch(self, options: Any, handler: Any) -> bool:
        """Queue a request; never blocks. Returns False when busy (wait for ``drain``).

        Errors are delivered through ``handler.on_response_error(None, err)``,
        or raised if the handler has no such method.
        """
        check_handler(handler)
        try:
            if self._destroyed:
                raise ClientDestroyedError()
            if self._closed:
                raise ClientClosedError()
            req = Request(options, handler)
        except Exception as exc:
            refuse(handler, exc)
            return False
        req.error_hook = self._error_hook
        if req.length_mismatch and self._opts.strict_content_length:
            req.on_error(RequestContentLengthMismatchError())
            return not self.busy
        conn = self._conn
        if (
            conn is not None
            and not self._pending
            and not self._in_resume
            and conn.takes(req)
            and (req.servername is None or not self._servername_changed(conn, req))
        ):
            # Fast path: an idle connection takes the request straight away.
            if req.start(None):
                self._write(conn, req)
            if not conn.free() or self._pending:
                self._need_drain = True
                return False
            return True
        self._pending.append(req)
        if conn is None or len(conn.running) < conn.max_concurrent:
            self._resume()
            if not self.busy:
                return True
        # (A connection with every slot taken sends it when one frees up.)
        self._need_drain = True
        return False

    def _servername_changed(self, conn: Any, req: Request) -> bool:
        """Whether ``req`` asks for another TLS server name than ``conn`` was opened with."""
        if not req.servername or not self._origin.is_https:
            return False
        opened: Any = conn.connect_options.get("servername")
        return bool(opened != req.servername)

    def _request_line(self, key: tuple[str, str, str | None]) -> bytes:
        """``METHOD path HTTP/1.1`` and the host line, encoded once per (method, path, host)."""
        method, path, host = key
        line = b"%s %s HTTP/1.1\r\n%s" % (
            method.encode(),
            path.encode("latin-1"),
            self._host_line if host is None else b"host: %s\r\n" % host.encode("latin-1"),
        )
        return _remember(self._request_lines, key, line)

    def _keep_plain_head(self, key: tuple[Any, ...], head: bytes) -> bytes:
        """Keep the whole head of a request with no body, kept alive; ``key`` is
        (method, path, host), and its header block when it has headers."""
        return _remember(self._plain_heads, key, head)

    def _report_error(self, err: BaseException) -> None:
        if not self.emit("error", err):
            _debug.core.error("greenhttp: unhandled handler error: %r", err)

    # -- the resume loop --------------------------------------------------------------
    def _resume(self) -> None:
        """Write what may be written now; connect if needed. Never blocks."""
        if self._in_resume or not (self._pending or self._need_drain or self._closed):
            return
        if not self._pending and not self._closed:
            # Only a drain to report (a pool's member freed up): the common case.
            conn = self._conn
            if conn is not None and conn.free():
                self._need_drain = False
                self._drain()
                # Done, unless a listener queued or closed meanwhile, or wrote without
                # taking the last slot (a full connection is neither free nor idle).
                if not (self._pending or self._closed) and (
                    not self._need_drain or len(conn.running) >= conn.max_concurrent
                ):
                    return
        self._in_resume = True
        try:
            self._resume_loop()
        finally:
            self._in_resume = False

    def _resume_loop(self) -> None:
        pending = self._pending
        while True:
            if self._destroyed:
                return
            conn = self._conn
            running = len(conn.running) if conn is not None else 0
            if self._closed and not pending and not running and not self._connecting and not self._held:
                self._finish_close()
                return
            if self._need_drain and not self.busy:
                self._need_drain = False
                self._drain()
                continue
            if not pending:
                if conn is not None and conn.idle and conn.reset and not conn.writing:
                    conn.destroy(InformationalError("reset"))
                return
            req = pending[0]
            if req.done:
                pending.popleft()
                continue
            if running >= self._max_concurrent():
                return
            if conn is None or conn.destroyed:
                if not self._connecting:
                    self._start_connect()
                return
            if req.servername is not None and self._servername_changed(conn, req):
                # The connection's certificate was checked for another name: wait for
                # its requests, then reconnect with this one's (as undici does).
                if running:
                    return
                conn.destroy(InformationalError("servername changed"))
                continue
            if conn.busy(req):
                if conn.idle and conn.reset and not conn.writing:
                    conn.destroy(InformationalError("reset"))
                return
            pending.popleft()
            if not req.start(None):
                continue
            self._write(conn, req)
            if len(conn.running) >= conn.max_concurrent:
                return  # every slot taken: the next request goes when one frees up

    def _write(self, conn: Any, req: Request) -> None:
        """Write ``req``, just started, on ``conn``; unless its ``on_request_start``
        destroyed the client: the request, in no queue then, fails with the reason."""
        if self._destroyed:
            req.on_error(self._reason or ClientDestroyedError())
        else:
            conn.write(req)

    def _drain(self) -> None:
        """The client can take more: tell the owning pool (of its ``_member``), then
        the "drain" listeners. A failing pool is reported as a failing listener."""
        member = self._member
        if member is not None:
            try:
                member.pool._on_drain(member, self._origin.origin)
            except Exception as exc:
                self._listener_failed("drain", exc)
        if self._listeners.get("drain"):
            self.emit("drain", self._origin.origin)

    # -- connections -------------------------------------------------------------------
    def _start_connect(self) -> None:
        self._connecting = True
        spawn_reader(self._run_connection)

    def _connect_options(self) -> dict[str, Any]:
        o = self._origin
        req = self._pending[0] if self._pending else None
        host = req.host if req is not None and req.host else o.host
        options: dict[str, Any] = {
            "hostname": o.hostname,
            "host": host,
            "protocol": o.protocol,
            "port": str(o.port),
            "local_address": self._opts.local_address,
        }
        if req is not None and req.servername:
            options["servername"] = req.servername
        return options

    def _run_connection(self) -> None:
        """The connection's greenlet: connect, then become its reader."""
        me = getcurrent()
        self._readers.add(me)
        try:
            options = self._connect_options()
            origin = self._origin
            if _debug.enabled():
                _debug.core.debug("connecting to %s using %s%s", origin.host, origin.protocol, self._expected_version())
            try:
                sock = self._call_connector(options)
            except GreenletExit:
                self._connecting = False
                return
            except Exception as exc:
                self._connecting = False
                if _debug.enabled():
                    _debug.core.debug(
                        "connection to %s using %s%s errored - %s",
                        origin.host,
                        origin.protocol,
                        self._expected_version(),
                        exc,
                    )
                self._connect_failed(exc)
                return
            if self._destroyed:
                self._connecting = False
                sock.close()
                return
            conn = self._make_connection(sock)
            conn.connect_options = options
            self._conn = conn
            self._connecting = False
            self._connected_once = True
            if _debug.enabled():
                _debug.core.debug("connected to %s using %s%s", origin.host, origin.protocol, conn.version)
            parkers, self._connect_parkers = self._connect_parkers, []
            for p in parkers:
                p.set(None)
            self.emit("connect", origin.origin, [self._owner()])
            self._resume()
            conn.read_loop()
        finally:
            self._readers.discard(me)

    def _call_connector(self, options: dict[str, Any]) -> Any:
        """Run the connector (spec shape ``connector(options, callback)``); blocks until connected.

        A connector may hand the socket back through the callback, the return
        value, or both; an error through the callback or by raising.
        """
        parker = Parker()
        gave_up: list[bool] = []  # (not empty once this connect was given up: destroyed, killed)

        def done(err: BaseException | None, sock: Any = None) -> None:
            if gave_up:
                # A socket handed over after nobody waits for it any more: close it.
                if sock is not None:
                    try:
                        sock.close()
                    except Exception:
                        pass
            elif err is not None:
                parker.set_exception(err)
            else:
                parker.set(sock)

        try:
            returned = self._connector(options, done)
            if parker.ready() or returned is None:
                sock = parker.get()  # waits for a connector that calls back later
                if sock is None:
                    raise InvalidArgumentError("the connector reported success without a socket")
                return sock
        except BaseException:
            gave_up.append(True)
            raise
        return returned

    def _expected_version(self) -> str:
        """The protocol a new connection will speak, as far as is known before ALPN."""
        return "h2" if self._opts.use_h2c and self._origin.protocol == "http:" else "h1"

    def _max_concurrent(self) -> int:
        """The dispatch ceiling: ``pipelining`` on HTTP/1.1, the stream limit on HTTP/2."""
        conn = self._conn
        if conn is not None:
            limit: int = conn.max_concurrent
            return limit
        return self._pipelining or 1

    def _make_connection(self, sock: Any) -> Any:
        """The protocol driver for a new socket: HTTP/2 when ALPN chose it (or h2c), else HTTP/1.1.

        A driver exposes ``version``, ``running``, ``max_concurrent``,
        ``busy(req)``, ``free()``, ``takes(req)``, ``write(req)``, ``idle``, ``reset``, ``writing``,
        ``blocking``, ``destroyed``, ``destroy(err)`` and ``read_loop()``, and
        reports back through ``client._resume()`` and ``client._connection_lost()``.
        """
        selected = getattr(sock, "selected_alpn_protocol", None)
        alpn = selected() if selected is not None else None
        if alpn == "h2" or (self._opts.use_h2c and self._origin.protocol == "http:"):
            from .h2_driver import H2Connection

            return H2Connection(self, sock)
        return H1Connection(self, sock)

    def _connect_failed(self, err: BaseException) -> None:
        parkers, self._connect_parkers = self._connect_parkers, []
        for p in parkers:
            p.set_exception(err)
        if not isinstance(err, (InformationalError, SocketError)):
            # Nothing was running: every queued request fails with the connect error.
            pending = list(self._pending)
            self._pending.clear()
            for req in pending:
                req.on_error(err)
        self.emit("connectionError", self._origin.origin, [self._owner()], err)
        self._resume()

    def _connection_lost(self, conn: Any, err: BaseException, running: list[Request], replay_head: bool = False) -> None:
        """Called once by a connection when it ends (on its reader greenlet).
        ``replay_head``: the head of the pipeline was not answered and may go out again."""
        if self._conn is conn:
            self._conn = None
        if running:
            if self._destroyed:
                for req in running:
                    req.on_error(err)
            else:
                # REFERENCE §3.6: the head of the pipeline fails unless the close
                # was informational (or it may go out again: the keep-alive race);
                # the others go back to the queue and are re-sent.
                if replay_head or isinstance(err, InformationalError):
                    rest = running
                else:
                    running[0].on_error(err)
                    rest = running[1:]
                again = []
                for req in rest:
                    if req.done:
                        continue
                    if req.idempotent and req.state != RESPONSE_STARTED:
                        again.append(req)
                    else:
                        # The head of the pipeline when a request behind it was aborted:
                        # one not idempotent may have been acted on (RFC 9112 §9.3.1), and
                        # one whose response had begun can't begin again (its handler
                        # would get a second response): neither is re-sent.
                        req.on_error(err)
                for req in reversed(again):
                    self._pending.appendleft(req)
        self.emit("disconnect", self._origin.origin, [self._owner()], err)
        self._resume()

    # -- lifecycle ------------------------------------------------------------------------
    def connect(self) -> Any:
        """Open the connection now, blocking until connected (``Client.connect()``)."""
        if self._destroyed:
            raise ClientDestroyedError()
        if self._closed:
            raise ClientClosedError()
        if self.connected:
            return None
        parker = Parker()
        self._connect_parkers.append(parker)
        if not self._connecting:
            self._start_connect()
        return parker.get()

    def close(self) -> None:
        """Stop taking requests, let the queued ones finish, then close. Blocks until done."""
        self.begin_close().get()
        return None

    def begin_close(self, later: bool = False) -> Parker:
        """What :meth:`close` does before it waits (never blocks): the parker it waits on.

        ``later``: a close with nothing left to wait for ends on the hub, not now,
        as the original's ``close(callback)``: until then the client is closed (a
        request is refused with :class:`ClientClosedError`) but not destroyed.
        """
        closing = self._closing_parkers
        if self._destroyed and closing is None:
            raise ClientDestroyedError()
        self._closed = True
        parker = Parker()
        (closing if closing is not None else self._close_parkers).append(parker)
        if later:
            call_soon(self._resume)
        else:
            self._resume()
        return parker

    def _finish_close(self) -> None:
        self._destroy_now(None, True)

    def destroy(self, err: BaseException | None) -> None:
        """Abort every queued and running request with ``err``; blocks until the socket is closed."""
        self.begin_destroy(err)
        self.finish_destroy()
        return None

    def begin_destroy(self, err: BaseException | None) -> None:
        """What :meth:`destroy` does before it waits (never blocks)."""
        if not self._destroyed:
            self._destroy_now(err if err is not None else ClientDestroyedError())

    def finish_destroy(self) -> None:
        """Block until the readers of a destroyed client have ended."""
        me = getcurrent()
        for reader in list(self._readers):
            if reader is not me:
                reader.join()
        return None

    def _destroy_now(self, err: BaseException | None, closing: bool = False) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        self._closed = True
        self._error_hook = _report_unhandled  # a bound method of ours, kept by us: a cycle
        reason = self._reason = err if err is not None else ClientDestroyedError()
        pending = list(self._pending)
        self._pending.clear()
        for req in pending:
            req.on_error(reason)
        held, self._held = self._held, []
        for req in held:
            hook = req.abort_hook
            if hook is not None:
                hook(req, reason)
        for p in self._connect_parkers:
            p.set_exception(reason)
        self._connect_parkers = []
        conn = self._conn
        if conn is not None:
            conn.destroy(reason)
        elif self._connecting:
            for reader in list(self._readers):
                if reader is not getcurrent():
                    reader.kill(block=False)
        member = self._member
        if member is not None:
            # A pool's member is gone (destroyed from outside, even before it connected,
            # when no "disconnect" tells the pool): the pool replaces it.
            try:
                member.pool._on_member_destroyed(member)
            except Exception as exc:
                self._listener_failed("disconnect", exc)
        parkers, self._close_parkers = self._close_parkers, []
        if parkers:
            me = getcurrent()
            readers = [r for r in self._readers if r is not me]

            def wake() -> None:
                for r in readers:
                    r.join()
                self._closing_parkers = None
                for p in parkers:
                    p.set(None)

            if readers:
                if closing:
                    self._closing_parkers = parkers
                spawn(wake)
            else:
                wake()
