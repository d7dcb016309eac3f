"""The runtime edge: every use of gevent's scheduling primitives goes through here.

Only this module and ``_net/`` import gevent (DESIGN.md §2), so the rest of
the library reads as plain Python and the cost of each primitive is visible
in one place.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.lock
import gevent.queue
from gevent import GreenletExit, Timeout, get_hub, getcurrent, spawn
from greenlet import greenlet as _greenlet

__all__ = [
    "AsyncResult",
    "Deadline",
    "Event",
    "GreenletExit",
    "Parker",
    "Queue",
    "Reader",
    "Semaphore",
    "Timeout",
    "at_round_end",
    "call_soon",
    "getcurrent",
    "get_hub",
    "kill",
    "now",
    "read_buffer",
    "ready_gauge",
    "round_queue",
    "sleep",
    "spawn",
    "spawn_raw",
    "spawn_reader",
    "start_timer",
    "timer_seconds",
]

Event = gevent.event.Event
AsyncResult = gevent.event.AsyncResult
Semaphore = gevent.lock.Semaphore
Queue = gevent.queue.Queue
spawn_raw = gevent.spawn_raw

# gevent's libuv loop (its default on Windows; GEVENT_LOOP=libuv elsewhere) counts
# time in whole milliseconds and warns about any shorter timer. Node's timers have
# the same 1 ms floor. So every timer here lasts at least that long.
TIMER_FLOOR = 0.001


def timer_seconds(seconds: float) -> float:
    """``seconds``, raised to :data:`TIMER_FLOOR` when it is positive but shorter."""
    return TIMER_FLOOR if 0 < seconds < TIMER_FLOOR else seconds


def sleep(seconds: float = 0) -> None:
    """Block the calling greenlet for ``seconds`` (at least 1 ms unless 0)."""
    gevent.sleep(timer_seconds(seconds))


def call_soon(fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` from the hub soon (the next loop iteration). Never blocks."""
    get_hub().loop.run_callback(fn, *args)


def round_queue() -> list[Callable[[], None]]:
    """The calling thread's hub's list of actions for the end of its current round.

    A *round* is one pass of the hub over its ready sockets and timers; see
    :func:`at_round_end`. Take it once (it never changes for a hub) and keep it.
    """
    hub = get_hub()
    queue: list[Callable[[], None]] | None = getattr(hub, "_greenhttp_round", None)
    if queue is None:
        queue = hub._greenhttp_round = []
    return queue


class _NoGauge:
    """The gauge of a loop that cannot count its ready watchers: it reads 0."""

    __slots__ = ()
    pendingcnt = 0


def ready_gauge() -> Any:
    """An object whose ``pendingcnt`` is how many watchers the calling thread's hub
    found ready in its current round and has not run yet (libev's
    ``ev_pending_count``; always 0 on a loop that cannot say).

    Read it while handling one ready socket: above 0, more of the round follows,
    and what is queued with :func:`at_round_end` leaves together with theirs.
    """
    loop = get_hub().loop
    return loop if hasattr(loop, "pendingcnt") else _NoGauge()


def read_buffer() -> memoryview:
    """The calling thread's 64 KiB receive buffer, shared by its connections' readers.

    Only for reads that copy what they got out of it before anything can
    switch greenlets (a plain non-blocking socket's ``recv_into`` right
    after readiness): one buffer per thread then serves every connection.
    """
    hub = get_hub()
    view: memoryview | None = getattr(hub, "_greenhttp_read_buffer", None)
    if view is None:
        view = hub._greenhttp_read_buffer = memoryview(bytearray(65536))
    return view


def at_round_end(queue: list[Callable[[], None]], fn: Callable[[], None]) -> None:
    """Run ``fn()`` once the hub has handled its current round of ready sockets,
    together with everything else queued for then, in order. Never blocks.

    ``fn`` must not block. What readers write this way leaves in one burst
    instead of one send between every two reads.
    """
    if not queue:
        get_hub().loop.run_callback(_run_round, queue)
    queue.append(fn)


def _run_round(queue: list[Callable[[], None]]) -> None:
    fns = queue[:]
    del queue[:]
    for fn in fns:
        try:
            fn()
        except Exception:
            get_hub().handle_error(fn, *sys.exc_info())


def _closed() -> None:
    """The callback of a closed :class:`Deadline`."""


def now() -> float:
    """The event loop's cached monotonic time, in seconds (cheap)."""
    t: float = get_hub().loop.now()
    return t


def kill(greenlet: Any, exception: Any = GreenletExit) -> None:
    """Kill ``greenlet`` without waiting for it (a no-op on the current greenlet)."""
    if greenlet is not None and greenlet is not getcurrent() and not greenlet.dead:
        if isinstance(greenlet, gevent.Greenlet):
            greenlet.kill(exception, block=False)
        else:
            get_hub().loop.run_callback(greenlet.throw, exception)


def start_timer(seconds: float, callback: Callable[..., Any], *args: Any) -> Any:
    """A one-shot timer calling ``callback(*args)`` from the hub; ``.close()`` cancels it.

    The timer closes itself as it fires, so a holder may simply drop one that
    has fired. On gevent's libuv loop every watcher must be closed before it is
    freed: libuv keeps each handle on a list until ``uv_close``, and a dropped
    one is memory it goes on writing to (heap corruption, seen as a crash
    elsewhere). libev has no such list, which is why this showed only there.
    """
    # ref=True: a greenlet parked on what the timer will do must keep the loop alive.
    timer = get_hub().loop.timer(timer_seconds(seconds))

    def fire() -> None:
        timer.close()
        callback(*args)

    timer.start(fire)
    return timer


class Parker:
    """Park one greenlet until another delivers a value or an error. Single use.

    ``set``/``set_exception`` never block and may be called from any greenlet
    (or the hub); ``get`` blocks the calling greenlet. Like gevent's ``Waiter``
    with the value kept, so a late wake-up after the waiter gave up (a
    ``gevent.Timeout``) is harmless; unlike it, no second object per wait.
    """

    __slots__ = ("_waiter", "_value", "_exc", "_state")

    def __init__(self) -> None:
        self._waiter: Any = None  # the greenlet parked in get(), while it is
        self._value: Any = None
        self._exc: BaseException | None = None
        self._state = 0

    def ready(self) -> bool:
        return self._state != 0

    def set(self, value: Any = None) -> None:
        if self._state:
            return
        self._state = 1
        self._value = value
        if self._waiter is not None:
            reader = getcurrent()
            if reader.__class__ is Reader and reader.wake is None:
                reader.wake = self  # (_wake's common case, without the call: the reader keeps it)
            else:
                _wake(self)

    def set_exception(self, exc: BaseException) -> None:
        if self._state:
            return
        self._state = 2
        self._exc = exc
        if self._waiter is not None:
            _wake(self)

    def get(self, timeout: float | None = None) -> Any:
        if not self._state:
            current = self._waiter = getcurrent()
            try:
                if timeout is None and current.__class__ in _NO_SWITCH_OUT:
                    _switch(get_hub())  # (what _park does, without the call: the common wait)
                elif timeout is None:
                    _park(current)
                else:
                    with Timeout(timer_seconds(timeout)):
                        _park(current)
            finally:
                self._waiter = None
        if self._state == 2:
            # Hand the error over once and keep no reference to it: the frames in its
            # traceback (this one, the caller's) refer to this Parker.
            exc, self._exc = self._exc, None
            try:
                raise exc  # type: ignore[misc]
            finally:
                del exc
        return self._value

    def _resume(self) -> None:
        """From the hub: resume the greenlet parked in :meth:`get`, if it still is."""
        greenlet = self._waiter
        if greenlet is not None:
            greenlet.switch()


_switch = _greenlet.switch  # a plain greenlet switch (gevent's Hub.switch adds switch_out)
_THROUGH_HUB: Any = object()  # Reader.wake: this read's wake-ups go through the hub, in order


# Greenlet classes seen without a switch_out method (gevent.Greenlet, the main
# greenlet's): a greenlet of one of them parks with a plain switch to the hub.
_NO_SWITCH_OUT: set[type] = set()


def _park(current: Any) -> None:
    """Switch from ``current`` to the hub until something switches back.

    gevent's ``Hub.switch`` first calls the current greenlet's ``switch_out``
    if it has one: a :class:`Reader` hands its kept wake-up over there, and the
    hub's own raises ``BlockingSwitchOutError`` (nothing may block in the hub).
    Most greenlets have none, and looking for it raises and catches an
    ``AttributeError`` every time; so a class found without one is remembered,
    and its greenlets switch to the hub directly.
    """
    hub = get_hub()
    cls = current.__class__
    if cls in _NO_SWITCH_OUT:
        _switch(hub)
    elif hasattr(cls, "switch_out") or hasattr(current, "switch_out"):
        hub.switch()
    else:
        _NO_SWITCH_OUT.add(cls)
        _switch(hub)


def _wake(parker: Parker) -> None:
    """Resume the greenlet parked in ``parker.get()``. Wake-ups keep the order they are made in.

    On a :class:`Reader`, the first wake-up of a read is kept for the reader to
    hand over as it parks; a second one sends the kept one to the hub first.
    """
    reader = getcurrent()
    if reader.__class__ is Reader:
        kept = reader.wake
        if kept is None:
            reader.wake = parker
            return
        if kept is not _THROUGH_HUB:
            reader.wake = _THROUGH_HUB
            get_hub().loop.run_callback(kept._resume)
    get_hub().loop.run_callback(parker._resume)


class Reader(gevent.Greenlet):  # type: ignore[misc]  # gevent has no type hints
    """The greenlet that owns a connection's read side, and wakes whom it answers itself.

    A reader that delivers a response to a parked caller (:meth:`Parker.set`)
    keeps that wake-up (the first one, in :attr:`wake`) instead of asking the
    hub for it. When it next parks on its socket (:meth:`park`), it arms the
    socket's watcher and switches straight to the caller; the watcher brings
    the reader back. The hub would otherwise be switched to, run a callback
    and switch to the caller: one switch and one loop pass more per request.

    A second wake-up in the same read sends the kept one to the hub before
    its own, and the rest of that read's go the same way: wake-ups run in the
    order they were made. A reader that blocks any other way (``switch_out``)
    or ends hands its kept wake-up to the hub, so nobody waits on a reader
    that is itself waiting.
    """

    __slots__ = ("wake",)

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(_reader_main, fn)
        self.wake: Any = None  # a kept Parker, None, or _THROUGH_HUB

    def park(self, watcher: Any) -> None:
        """Block until ``watcher`` fires; a kept wake-up runs first. Reader greenlet only."""
        watcher.start(self.switch)
        try:
            parker = self.wake
            if parker is not None:
                self.wake = None
                if parker is not _THROUGH_HUB:
                    target = parker._waiter
                    if target is not None:  # still parked in parker.get()
                        target.switch()  # what the hub's parker._resume() would do
                        return
            # The hub's own switch() would first call switch_out(), which has nothing
            # to hand over now (no kept wake-up): switch to the hub directly.
            _switch(self.parent)
        finally:
            watcher.stop()

    def switch_out(self) -> None:
        """Called by the hub as this greenlet blocks elsewhere: the hub delivers the kept wake-up."""
        parker = self.wake
        if parker is not None:
            self.wake = None
            if parker is not _THROUGH_HUB:
                get_hub().loop.run_callback(parker._resume)


def _reader_main(fn: Callable[[], Any]) -> None:
    try:
        fn()
    finally:
        getcurrent().switch_out()  # a wake-up kept at the very end


def spawn_reader(fn: Callable[[], Any]) -> Reader:
    """Start ``fn()`` on a new :class:`Reader` greenlet. Never blocks."""
    reader = Reader(fn)
    reader.start()
    return reader


class Deadline:
    """One lazily re-armed timer for a deadline that moves often.

    Setting a later deadline costs an attribute store; the timer, when it
    fires early, re-arms itself for the rest. So a connection can refresh its
    body timeout on every chunk without creating a timer per chunk. Used by
    one greenlet at a time (the connection's owner).
    """

    __slots__ = ("_loop", "_callback", "_timer", "_due", "deadline")

    def __init__(self, callback: Callable[[], Any]) -> None:
        self._loop = get_hub().loop
        self._callback = callback
        self._timer: Any = None
        self._due = 0.0
        self.deadline: float | None = None

    def set(self, seconds: float) -> None:
        """Fire ``callback()`` once ``seconds`` from now have passed (0: cancel)."""
        if not seconds:
            self.deadline = None
            return
        due = self._loop.now() + seconds
        self.deadline = due
        if self._timer is None:
            self._arm(seconds, due)
        elif self._due > due + 0.001:
            self._timer.close()
            self._arm(seconds, due)

    def clear(self) -> None:
        self.deadline = None

    def close(self) -> None:
        """Cancel for good: the callback (often a bound method of the owner) is dropped too."""
        self.deadline = None
        self._callback = _closed
        if self._timer is not None:
            self._timer.close()
            self._timer = None

    def _arm(self, seconds: float, due: float) -> None:
        self._due = due
        timer = self._timer = self._loop.timer(timer_seconds(seconds), ref=False)
        timer.start(self._fire)

    def _fire(self) -> None:
        timer = self._timer
        self._timer = None
        if timer is not None:
            timer.close()
        due = self.deadline
        if due is None:
            return
        left = due - self._loop.now()
        if left > 0.0005:
            self._arm(left, due)
            return
        self.deadline = None
        self._callback()
