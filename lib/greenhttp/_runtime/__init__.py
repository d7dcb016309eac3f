"""The runtime edge: every use of gevent's scheduling primitives goes through here.

Only this package and ``_net/`` import gevent (DESIGN.md §2), so the rest of
the library reads as plain Python and the cost of each primitive is visible
in one place. What every request uses (:class:`Parker`, :class:`Deadline`,
:func:`at_round_end`, a reader's park) is in ``hot.py``, compiled with the
request path; this module re-exports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.lock
import gevent.queue
from gevent import GreenletExit, Timeout, get_hub, getcurrent, spawn
from gevent._hub_local import get_hub_if_exists

from . import hot
from .hot import THROUGH_HUB, Deadline, Parker, Spin, at_round_end, reader_park, timer_seconds

__all__ = [
    "AsyncResult",
    "Deadline",
    "Event",
    "GreenletExit",
    "Parker",
    "Queue",
    "Reader",
    "Semaphore",
    "Spin",
    "Timeout",
    "at_round_end",
    "call_soon",
    "getcurrent",
    "get_hub",
    "get_hub_if_exists",
    "kill",
    "now",
    "read_buffer",
    "reader_park",
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
        self.wake: Any = None  # a kept Parker, None, or THROUGH_HUB

    def park(self, watcher: Any) -> None:
        """Block until ``watcher`` fires; a kept wake-up runs first. Reader greenlet only."""
        reader_park(self, watcher)

    def switch_out(self) -> None:
        """Called by the hub as this greenlet blocks elsewhere: the hub delivers the kept wake-up."""
        parker = self.wake
        if parker is not None:
            self.wake = None
            if parker is not THROUGH_HUB:
                get_hub().loop.run_callback(parker._resume)


hot.reader_class = Reader  # (Parker.set tells a Reader greenlet by its class)


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
