"""What a pool does, compiled with the request path: ``PoolCore`` and its ``Member``.

The public :class:`~greenhttp.Pool` (``pool.py``, on ``pool_base.py``) keeps
the documented methods and argument checks and hands each call to its core;
the members' cores tell it of a drain directly. So the calls of one request
stay compiled from the pool to the connection (docs/performance.md,
"Compiled modules").

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
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

from .. import _debug
from .._core.request import check_handler, refuse
from .._runtime import Parker, now, spawn
from ..errors import ClientClosedError, ClientDestroyedError, GreenHTTPError
from .client import Client
from .client_core import ClientCore
from .stats import PoolStats

__all__ = ["Member", "PoolCore"]


class Member:
    """One dispatcher of a pool and the pool's bookkeeping about it."""

    __slots__ = ("pool", "client", "core", "direct", "free", "retired", "connected_at")

    def __init__(self, pool: PoolCore, client: Any) -> None:
        self.pool = pool  # told of this member's drains by its client's core (ClientCore._drain)
        self.client = client
        # A greenhttp Client's core, which the pool talks to directly. After its
        # dispatch() returns False, its _need_drain says whether it is busy (it
        # then owes a drain) or failed the request.
        core: ClientCore | None = client._core if isinstance(client, Client) else None
        self.core = core
        # Requests go straight to the core, unless a subclass has its own dispatch().
        self.direct = core is not None and type(client).dispatch is Client.dispatch
        self.free = False  # on the pool's free stack
        self.retired = False  # left the pool (connection error, TTL): ignore its drains
        self.connected_at = 0.0  # loop time of its last "connect" (for client_ttl)


class PoolCore:
    """The members, the FIFO queue and the lifecycle of one pool; events go out through ``owner``.

    Members are made by ``factory(origin, **client_options)``, at most ``limit``
    of them (0: no limit), and retired ``ttl`` seconds after they connected (0: never).
    """

    def __init__(
        self,
        owner: Any,
        origin: str,
        listeners: dict[str, Any],
        limit: int,
        factory: Callable[..., Any],
        client_options: dict[str, Any],
        ttl: float,
    ) -> None:
        # The public pool, what events name and are emitted on (weakly, as a client's core).
        self._owner: weakref.ref[Any] = weakref.ref(owner)
        self._listeners = listeners  # the owner's listeners
        self._origin_str = origin
        self._limit = limit
        self._factory = factory
        self._client_options = client_options
        self._ttl = ttl
        self._members: list[Member] = []
        self._room = True  # what _has_room() says, kept current as members come and go
        self._free: list[Member] = []  # a stack; may hold retired members (skipped lazily)
        self._queue: deque[tuple[Any, Any]] = deque()
        self._retiring: list[Any] = []  # dispatchers that left the pool and are closing
        self._need_drain = False
        self._closed = False
        self._destroyed = False
        self._closing = False  # a close() is at work
        self._queue_waiters: list[Parker] = []  # close() waiting for the queue to empty
        self._close_waiters: list[Parker] = []  # later close() calls waiting for the first

    # -- the owner's events ----------------------------------------------------------
    def emit(self, event: str, *args: Any) -> bool:
        """Emit ``event`` on the public pool; True if it had listeners."""
        owner = self._owner()
        return owner is not None and bool(owner.emit(event, *args))

    # -- state -------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        if self._queue:
            return True
        return not any(not m.retired for m in self._free) and not self._has_room()

    def idle(self) -> bool:
        """Nothing queued and no member connected, connecting or with work to do: what
        an Agent forgets after a disconnect. It stops at the first member in use, so it
        costs little while the pool is busy (``stats`` visits every member, and an
        Agent asks at every disconnect: a storm of them cost N² before). Members already
        retiring are closing anyway, gracefully: they do not count."""
        if self._queue:
            return False
        for m in self._members:
            core = m.core
            if core is not None:
                if core._conn is not None or core._connecting or core._pending or core._held:
                    return False
            else:
                s = m.client.stats
                if s.connected or s.size:
                    return False
        return True

    @property
    def stats(self) -> PoolStats:
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
    # (options: Any, not dict: compiled, an annotation is a check, and a non-dict must
    # reach the handler as the request record's InvalidArgumentError, not a TypeError.)
    def dispatch(self, options: Any, handler: Any) -> bool:
        """``Pool.dispatch``: hand the request to a free member, or queue it; never blocks."""
        check_handler(handler)
        if self._closed:
            refuse(handler, ClientDestroyedError() if self._destroyed else ClientClosedError())
            return False
        queue = self._queue
        if queue:
            # Older requests are waiting: join the end of the line (FIFO).
            queue.append((options, handler))
            return False
        try:
            member = self._take()
        except Exception as exc:  # the factory failed
            refuse(handler, exc)
            return False
        if member is None:
            queue.append((options, handler))
            self._need_drain = True
            return False
        core = member.core
        try:
            taken = (
                core.dispatch(options, handler)
                if core is not None and member.direct
                else member.client.dispatch(options, handler)
            )
        except BaseException:
            # Refused, and raised to a handler without on_response_error: the member
            # goes back on the free stack (else it would never be chosen again).
            if not (core._need_drain if core is not None else member.client.busy):
                member.free = True
                self._free.append(member)
            raise
        if taken or not (core._need_drain if core is not None else member.client.busy):
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
        core = member.core
        direct = member.direct
        while queue:
            options, handler = queue.popleft()
            try:
                if core is not None and direct:
                    taken = core.dispatch(options, handler)
                else:
                    taken = client.dispatch(options, handler)
            except Exception as exc:
                # Refused at once, and the handler's on_response_error raised (or it has
                # none): that request is over. Report it and go on with the queue.
                self._unhandled(exc)
                continue
            # (A native Client refusing for want of room says so in _need_drain,
            # which is clear while it is free or draining, as here.)
            if not taken and (core._need_drain if core is not None else client.busy):
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
            owner = self._owner()
            self.emit("drain", self._origin_str, [owner, *targets] if targets else [owner])

    def _fail_quietly(self, handler: Any, err: BaseException) -> None:
        """Fail a queued request from a listener or ``destroy``: nothing may raise here."""
        try:
            refuse(handler, err)
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
        member = Member(self, client)
        if member.core is not None:
            member.core._member = member  # (no event dispatch per request)
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
            if member.core is not None:
                member.core._member = None
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

    def _on_connect(self, member: Member, origin: str, targets: list[Any] | None = None) -> None:
        self._on_member_connect(member)
        self.emit("connect", origin, [self._owner(), *(targets or [member.client])])

    def _on_disconnect(
        self, member: Member, origin: str, targets: list[Any], err: BaseException | None = None
    ) -> None:
        self.emit("disconnect", origin, [self._owner(), *targets], err)
        if not member.retired and not self._destroyed and getattr(member.client, "destroyed", False):
            # Destroyed from outside: it will never drain again. Replace it.
            self._retire(member)
            self._pump()

    def _on_member_destroyed(self, member: Member) -> None:
        """A member's client was destroyed, its close finished, or it was destroyed from
        outside (even while connecting: no "disconnect" then). Replace it for what is queued."""
        if member.retired or self._destroyed:
            return
        self._retire(member)  # (it is closed: just forgotten)
        self._pump()  # (and with nothing queued, the drain owed now that there is room)

    def _on_connection_error(
        self, member: Member, origin: str, targets: list[Any], err: BaseException | None = None
    ) -> None:
        # A member that failed to connect is not reused (as in the original): a
        # fresh one takes its place for the requests still queued.
        self._retire(member)
        self.emit("connectionError", origin, [self._owner(), *targets], err)
        if not self._destroyed:
            self._pump()

    # -- members: how they are made and chosen ------------------------------------
    def _take(self) -> Member | None:
        free = self._free
        while free:
            member = free.pop()
            member.free = False
            if member.retired:
                continue
            core = member.core
            if core._closed if core is not None else member.client.closed:
                self._retire(member)  # closed or destroyed from outside: replace it
                continue
            if self._ttl and self._expired(member):
                self._retire(member)
                continue
            return member
        if not self._limit or len(self._members) < self._limit:
            return self._add(self._factory(self._origin_str, **self._client_options))
        return None

    def _has_room(self) -> bool:
        return not self._limit or len(self._members) < self._limit

    def _expired(self, member: Member) -> bool:
        return bool(member.connected_at and now() - member.connected_at > self._ttl)

    def _on_member_connect(self, member: Member) -> None:
        if self._ttl:
            member.connected_at = now()

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """``Pool.close()`` without a callback: blocks until every member has closed."""
        self.begin_close()
        self.finish_close()

    def begin_close(self) -> None:
        """What :meth:`close` does before it waits (never blocks): no more requests."""
        if self._destroyed and not self._closing:
            # Destroyed, also by a close() that finished (REFERENCE §1.9, as Client).
            raise ClientDestroyedError()
        self._closed = True

    def finish_close(self) -> None:
        """The rest of :meth:`close`: blocks until every member has closed."""
        while self._closing:
            parker = Parker()
            self._close_waiters.append(parker)
            parker.get()
        if self._destroyed:
            return None
        self._closing = True
        interrupted = False
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
                self._destroyed = True
        except Exception:
            raise
        except BaseException:
            interrupted = True  # a gevent.Timeout around close(), or a kill
            raise
        finally:
            # Also when interrupted: a waiting close() then takes over; with none,
            # the rest is closed in the background, so the pool still ends up
            # destroyed with every member closed (as an interrupted Client does).
            self._closing = False
            waiters, self._close_waiters = self._close_waiters, []
            for p in waiters:
                p.set(None)
            if interrupted and not waiters and not self._destroyed:
                spawn(self._close_in_background)
        return None

    def _close_in_background(self) -> None:
        try:
            self.close()
        except GreenHTTPError:  # destroyed meanwhile
            pass

    def destroy(self, err: BaseException | None) -> None:
        """``Pool.destroy(err)`` without a callback: blocks until every member is gone."""
        self.finish_destroy(self.begin_destroy(err))

    def begin_destroy(self, err: BaseException | None) -> BaseException | None:
        """What :meth:`destroy` does before it waits (never blocks): the queued requests
        fail. Returns what :meth:`finish_destroy` destroys the members with."""
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
        return err

    def finish_destroy(self, err: BaseException | None) -> None:
        """The rest of :meth:`destroy`: destroys every member, blocking until each is gone."""
        for d in [m.client for m in self._members] + list(self._retiring):
            d.destroy(err)
        return None
