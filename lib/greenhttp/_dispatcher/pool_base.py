"""The machinery every pool shares: members, the FIFO queue, events, close and destroy.

A pool owns some dispatchers (its *members*, usually :class:`Client` objects,
one connection each) and one queue of requests no member could take yet.
Three rules keep it fast and fair (DESIGN.md §5):

* **Queue requests, not greenlets.** The queue holds ``(options, handler)``
  pairs. Nobody waits on a lock or a semaphore: ``dispatch`` never blocks,
  and the blocking helpers park their caller on the handler as usual.
* **First in, first out.** A member that frees up (its ``drain`` event) takes
  the oldest queued request, on the greenlet that freed it. While anything is
  queued, a new request joins the end of the line, even if it arrives on the
  very greenlet whose response just ended. So at 256 greenlets on 64
  connections every greenlet waits its turn and none starves.
* **O(1) selection.** Free members sit on a stack (the most recently freed on
  top, so the warmest connections are reused and idle ones can time out).
  A member leaves the stack when ``dispatch`` finds it busy and comes back on
  its ``drain``; nothing scans the members per request.

The invariant that makes the queue FIFO: *while the queue is not empty, no
member is free and no member can be added.* Every place that could break it
(a drain, a retired member, a new member) feeds the queue first.

Subclasses decide how members are made and chosen (:meth:`PoolBase._take`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

from .. import _debug
from .._runtime import Parker, spawn
from ..errors import ClientClosedError, ClientDestroyedError, GreenHTTPError, InvalidArgumentError
from .base import Dispatcher
from .client import Client
from .stats import PoolStats

__all__ = ["PoolBase", "Member", "run_in_background"]


class Member:
    """One dispatcher of a pool and the pool's bookkeeping about it."""

    __slots__ = ("client", "free", "retired", "connected_at", "native")

    def __init__(self, client: Any) -> None:
        self.client = client
        # A greenhttp Client: after its dispatch() returns False, its _need_drain
        # says whether it is busy (it then owes a drain) or failed the request.
        self.native = isinstance(client, Client)
        self.free = False  # on the pool's free stack
        self.retired = False  # left the pool (connection error, TTL): ignore its drains
        self.connected_at = 0.0  # loop time of its last "connect" (for client_ttl)


def run_in_background(fn: Callable[[], Any], callback: Callable[..., Any]) -> None:
    """Run ``fn()`` in a new greenlet and call ``callback(err, value)`` exactly once."""
    if not callable(callback):
        raise InvalidArgumentError(f"callback must be callable, got {callback!r}")

    def run() -> None:
        try:
            value = fn()
        except Exception as exc:
            callback(exc, None)
        else:
            callback(None, value)

    spawn(run)


def _deliver_error(handler: Any, err: BaseException) -> None:
    """Fail a request that never reached a member (spec: ``on_response_error(None, err)``)."""
    on_error = getattr(handler, "on_response_error", None)
    if on_error is None:
        raise err
    on_error(None, err)


class PoolBase(Dispatcher):
    """Members, the FIFO queue, event forwarding, ``close``/``destroy`` and ``stats``.

    Greenlet-safe: every method runs to completion without switching, except
    ``close`` and ``destroy``, which block the calling greenlet only.
    """

    def __init__(self, origin: str) -> None:
        super().__init__()
        self._origin_str = origin
        self._members: list[Member] = []
        self._room = True  # what _has_room() says, kept current as members come and go
        self._free: list[Member] = []  # a stack; may hold retired members (skipped lazily)
        self._queue: deque[tuple[dict[str, Any], Any]] = deque()
        self._retiring: list[Any] = []  # dispatchers that left the pool and are closing
        self._need_drain = False
        self._ttl = 0.0  # client_ttl in seconds; 0: members never expire
        self._closed = False
        self._destroyed = False
        self._closing = False  # a close() is at work
        self._closed_cleanly = False  # destroyed by a finished close(), not by destroy()
        self._queue_waiters: list[Parker] = []  # close() waiting for the queue to empty
        self._close_waiters: list[Parker] = []  # later close() calls waiting for the first

    # -- what a subclass provides ----------------------------------------------------
    def _take(self) -> Member | None:  # pragma: no cover - abstract
        """A member that may take a request now (popped off the free stack or new), or None."""
        raise NotImplementedError

    def _has_room(self) -> bool:  # pragma: no cover - abstract
        """May a member be added now?"""
        raise NotImplementedError

    def _on_member_connect(self, member: Member) -> None:
        """Hook: a member connected."""

    # -- public state -------------------------------------------------------------------
    @property
    def origin(self) -> str:
        """The origin every request goes to, e.g. ``"http://127.0.0.1:8080"``."""
        return self._origin_str

    @property
    def closed(self) -> bool:
        """True once ``close()`` (or ``destroy()``) was called."""
        return self._closed

    @property
    def destroyed(self) -> bool:
        """True once destroyed, or once a ``close()`` has finished."""
        return self._destroyed

    @property
    def busy(self) -> bool:
        """True when a request dispatched now would wait in the pool's queue."""
        if self._queue:
            return True
        return not any(not m.retired for m in self._free) and not self._has_room()

    @property
    def stats(self) -> PoolStats:
        """A snapshot: ``connected`` and ``free`` members, ``pending`` (the queue plus
        the members' pending), ``queued`` (the queue), ``running`` and ``size``."""
        connected = free = pending = running = size = 0
        for m in self._members:
            s = m.client.stats
            c = int(s.connected)
            connected += c
            if c and m.free:
                free += 1
            pending += s.pending
            running += s.running
            size += s.size
        for d in self._retiring:
            s = d.stats
            connected += int(s.connected)
            pending += s.pending
            running += s.running
            size += s.size
        queued = len(self._queue)
        return PoolStats(connected, free, pending + queued, queued, running, size + queued)

    # -- dispatch ------------------------------------------------------------------------
    def dispatch(self, options: dict[str, Any], handler: Any) -> bool:
        """Hand the request to a free member, or queue it; never blocks.

        Returns False when the pool is busy (every member busy and no room for
        another): the request is queued all the same, and the pool emits
        ``drain`` once it can take more. Errors are delivered through
        ``handler.on_response_error(None, err)`` (raised if it has none).
        """
        if self._closed:
            _deliver_error(handler, ClientDestroyedError() if self._destroyed else ClientClosedError())
            return False
        queue = self._queue
        if queue:
            # Older requests are waiting: join the end of the line (FIFO).
            queue.append((options, handler))
            return False
        try:
            member = self._take()
        except Exception as exc:  # the factory failed
            _deliver_error(handler, exc)
            return False
        if member is None:
            queue.append((options, handler))
            self._need_drain = True
            return False
        client = member.client
        if client.dispatch(options, handler) or not (
            client._need_drain if member.native else client.busy
        ):
            # It can take more (pipelining, HTTP/2 streams), or the request failed at once.
            member.free = True
            self._free.append(member)
            return True
        # The member queued the request and is busy now; its "drain" brings it back.
        if self._free or self._room:
            return True
        self._need_drain = True
        return False

    def _pump(self) -> None:
        """Feed queued requests to free or new members while there are any (FIFO)."""
        queue = self._queue
        while queue:
            try:
                member = self._take()
            except Exception as exc:  # the factory failed: the oldest request gets the error
                _, handler = queue.popleft()
                self._fail_quietly(handler, exc)
                continue
            if member is None:
                return
            if self._feed(member):
                member.free = True
                self._free.append(member)
        self._after_feed(None, True)

    def _feed(self, member: Member) -> bool:
        """Dispatch queued requests to ``member`` until it is busy. True if it is still free."""
        queue = self._queue
        client = member.client
        while queue:
            options, handler = queue.popleft()
            try:
                taken = client.dispatch(options, handler)
            except Exception as exc:
                # Refused at once, and the handler's on_response_error raised (or it has
                # none): that request is over. Report it and go on with the queue.
                self._unhandled(exc)
                continue
            # (A native Client refusing for want of room says so in _need_drain,
            # which is clear while it is free or draining, as here.)
            if not taken and (client._need_drain if member.native else client.busy):
                return False
        return True

    def _after_feed(self, targets: list[Any] | None, free: bool) -> None:
        """The queue may have emptied: wake ``close()``, and emit ``drain`` if a member is free.

        ``targets`` are the members the drain is about (the event lists the pool first).
        """
        if self._queue:
            return
        if self._queue_waiters:
            waiters, self._queue_waiters = self._queue_waiters, []
            for p in waiters:
                p.set(None)
        if free and self._need_drain:
            self._need_drain = False
            self.emit("drain", self._origin_str, [self, *targets] if targets else [self])

    def _fail_quietly(self, handler: Any, err: BaseException) -> None:
        """Fail a queued request from a listener or ``destroy``: nothing may raise here."""
        on_error = getattr(handler, "on_response_error", None)
        try:
            if on_error is None:
                raise err
            on_error(None, err)
        except Exception as exc:
            self._unhandled(exc)

    def _unhandled(self, exc: Exception) -> None:
        """A handler raised where nobody can take the error: the pool's ``error``
        event gets it, or the log when nobody listens."""
        if not self.emit("error", exc):
            _debug.core.error("greenhttp: unhandled request error: %r", exc)

    # -- members ---------------------------------------------------------------------------
    def _add(self, client: Any) -> Member:
        """Make ``client`` a member and forward its events."""
        member = Member(client)
        if member.native:
            client._drain_hook = partial(self._on_drain, member)  # (no event dispatch per request)
        else:
            client.on("drain", partial(self._on_drain, member))
        client.on("connect", partial(self._on_connect, member))
        client.on("disconnect", partial(self._on_disconnect, member))
        client.on("connectionError", partial(self._on_connection_error, member))
        self._members.append(member)
        self._room = self._has_room()
        return member

    def _retire(self, member: Member) -> None:
        """Take ``member`` out of the pool and close it gracefully in the background.

        It keeps forwarding its events until it is gone. The caller feeds the
        queue afterwards (there is room for a new member now).
        """
        if member.retired:
            return
        member.retired = True
        try:
            self._members.remove(member)
        except ValueError:
            pass
        self._room = self._has_room()
        client = member.client
        if getattr(client, "closed", False):
            return  # already closing, or destroyed from outside: just let it go
        self._retiring.append(client)

        def closed(err: Any, value: Any) -> None:
            client.remove_all_listeners()  # they hold the member, which holds the client
            if member.native:
                client._drain_hook = None
            try:
                self._retiring.remove(client)
            except ValueError:
                pass

        try:
            client.close(callback=closed)
        except GreenHTTPError:
            closed(None, None)

    def _on_drain(self, member: Member, origin: str, targets: list[Any] | None = None) -> None:
        if member.retired or self._destroyed:
            return
        if self._ttl and self._expired(member):
            self._retire(member)
            self._pump()
            return
        free = self._feed(member) if self._queue else True
        if free and not member.free:
            member.free = True
            self._free.append(member)
        if (self._need_drain or self._queue_waiters) and not self._queue:
            if self._queue_waiters or self._listeners.get("drain"):
                self._after_feed(targets or [member.client], free)
            elif free:
                self._need_drain = False  # the drain is owed to nobody: no event to build

    def _expired(self, member: Member) -> bool:
        return False

    def _on_connect(self, member: Member, origin: str, targets: list[Any] | None = None) -> None:
        self._on_member_connect(member)
        self.emit("connect", origin, [self, *(targets or [member.client])])

    def _on_disconnect(
        self, member: Member, origin: str, targets: list[Any], err: BaseException | None = None
    ) -> None:
        self.emit("disconnect", origin, [self, *targets], err)
        if not member.retired and not self._destroyed and getattr(member.client, "destroyed", False):
            # Destroyed from outside: it will never drain again. Replace it.
            self._retire(member)
            self._pump()

    def _on_connection_error(
        self, member: Member, origin: str, targets: list[Any], err: BaseException | None = None
    ) -> None:
        # A member that failed to connect is not reused (as in the original): a
        # fresh one takes its place for the requests still queued.
        self._retire(member)
        self.emit("connectionError", origin, [self, *targets], err)
        if not self._destroyed:
            self._pump()

    # -- lifecycle -------------------------------------------------------------------------
    def close(self, callback: Callable[..., Any] | None = None) -> None:
        """Stop taking requests, let the queued and running ones finish, then close every member.

        Blocks the calling greenlet until done (or, with ``callback``, returns at
        once and calls ``callback(err, None)`` when done). Calling it again
        waits for the same close. Raises :class:`ClientDestroyedError` if the
        pool was destroyed first.
        """
        if callback is not None:
            run_in_background(self.close, callback)
            return None
        if self._destroyed and not self._closing:
            if self._closed_cleanly:
                return None
            raise ClientDestroyedError()
        self._closed = True
        while self._closing:
            parker = Parker()
            self._close_waiters.append(parker)
            parker.get()
        if self._destroyed:
            return None
        self._closing = True
        try:
            if self._queue:
                parker = Parker()
                self._queue_waiters.append(parker)
                parker.get()
            for d in [m.client for m in self._members] + list(self._retiring):
                try:
                    d.close()
                except (ClientDestroyedError, ClientClosedError):
                    pass
            if not self._destroyed:
                self._destroyed = self._closed_cleanly = True
        finally:
            # Also when interrupted (a gevent.Timeout around close()): a waiting
            # close() then takes over.
            self._closing = False
            waiters, self._close_waiters = self._close_waiters, []
            for p in waiters:
                p.set(None)
        return None

    def destroy(self, err: BaseException | None = None, callback: Callable[..., Any] | None = None) -> None:
        """Fail every queued request with ``err`` (default :class:`ClientDestroyedError`),
        destroy every member (aborting their requests) and wait for their sockets to close.

        Blocks the calling greenlet (or, with ``callback``, returns at once).
        """
        if callable(err) and callback is None and not isinstance(err, BaseException):
            err, callback = None, err
        if callback is not None:
            run_in_background(lambda: self.destroy(err), callback)
            return None
        self._destroyed = True
        self._closed = True
        reason = err if err is not None else ClientDestroyedError()
        queue = self._queue
        while queue:
            _, handler = queue.popleft()
            self._fail_quietly(handler, reason)
        waiters, self._queue_waiters = self._queue_waiters, []
        for p in waiters:
            p.set(None)
        for d in [m.client for m in self._members] + list(self._retiring):
            d.destroy(err)
        return None

    def __repr__(self) -> str:
        return f"<greenhttp.{type(self).__name__} {self._origin_str} members={len(self._members)}>"
