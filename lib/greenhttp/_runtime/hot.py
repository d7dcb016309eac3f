"""The runtime primitives every request uses, compiled with the request path.

A caller waiting for its response (:class:`Parker`), a connection's timeouts
(:class:`Deadline`), writes held to the end of the hub's round
(:func:`at_round_end`), a reader greenlet parking on its socket
(:func:`reader_park`) and the hub's busy polling while a fast peer answers
(:class:`BusyPoll`, :class:`Spin`). The rest of the runtime edge,
:class:`Reader` among it, stays interpreted in ``_runtime/__init__.py``, which re-exports these
names; nothing here is public (docs/performance.md, "Compiled modules").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from time import perf_counter as _perf_counter
from typing import Any, Final

from gevent import Timeout
from gevent import get_hub as _get_hub
from gevent import getcurrent as _getcurrent
from greenlet import greenlet as _greenlet

__all__ = [
    "TIMER_FLOOR",
    "BusyPoll",
    "Deadline",
    "Parker",
    "Spin",
    "THROUGH_HUB",
    "at_round_end",
    "reader_park",
    "switch",
    "timer_seconds",
]

# gevent's libuv loop (its default on Windows; GEVENT_LOOP=libuv elsewhere) counts
# time in whole milliseconds and warns about any shorter timer. Node's timers have
# the same 1 ms floor. So every timer here lasts at least that long.
TIMER_FLOOR: Final = 0.001

# Compiled, a name marked Final is a C variable, not a lookup in the module's dict
# each time it is read; so what every request reads here is (docs/performance.md).
get_hub: Final = _get_hub
getcurrent: Final = _getcurrent
perf_counter: Final = _perf_counter
switch: Final = _greenlet.switch  # a plain greenlet switch (gevent's Hub.switch adds switch_out)
THROUGH_HUB: Final[Any] = object()  # Reader.wake: this read's wake-ups go through the hub, in order

# The Reader class of _runtime (interpreted: it derives from gevent's Greenlet),
# set there once it is defined. A Reader keeps the first wake-up of a read.
reader_class: Any = None

# Greenlet classes seen without a switch_out method (gevent.Greenlet, the main
# greenlet's): a greenlet of one of them parks with a plain switch to the hub.
_NO_SWITCH_OUT: Final[set[Any]] = set()


def timer_seconds(seconds: float) -> float:
    """``seconds``, raised to :data:`TIMER_FLOOR` when it is positive but shorter."""
    return TIMER_FLOOR if 0 < seconds < TIMER_FLOOR else seconds


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


class Parker:
    """Park one greenlet until another delivers a value or an error. Single use.

    ``set``/``set_exception`` never block and may be called from any greenlet
    (or the hub); ``get`` blocks the calling greenlet. Like gevent's ``Waiter``
    with the value kept, so a late wake-up after the waiter gave up (a
    ``gevent.Timeout``) is harmless; unlike it, no second object per wait.
    """

    # (Compiled, the fields are a C struct anyway; interpreted, the slots keep it small.)
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
            if type(reader) is reader_class and reader.wake is None:
                reader.wake = self  # (_wake's common case, without the call: the reader keeps it)
            else:
                _wake(self)

    def set_exception(self, exc: BaseException) -> None:
        if self._state:
            return
        self._state = 2
        self._exc = exc
        # The traceback it has now, restored as it is raised: one error handed to many
        # waiters (a client's reason, a deduplicated failure) is raised in each, and a
        # raise adds its frames to whatever traceback the error already carries.
        self._value = exc.__traceback__
        if self._waiter is not None:
            _wake(self)

    def get(self, timeout: float | None = None) -> Any:
        if not self._state:
            current = self._waiter = getcurrent()
            try:
                if timeout is None and type(current) in _NO_SWITCH_OUT:
                    switch(get_hub())  # (what _park does, without the call: the common wait)
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
            exc = self._exc
            tb = self._value
            self._exc = self._value = None
            if exc is not None:
                try:
                    raise exc.with_traceback(tb)
                finally:
                    del exc, tb
        return self._value

    def _resume(self) -> None:
        """From the hub: resume the greenlet parked in :meth:`get`, if it still is."""
        greenlet = self._waiter
        if greenlet is not None:
            greenlet.switch()


def _park(current: Any) -> None:
    """Switch from ``current`` to the hub until something switches back.

    gevent's ``Hub.switch`` first calls the current greenlet's ``switch_out``
    if it has one: a Reader hands its kept wake-up over there, and the
    hub's own raises ``BlockingSwitchOutError`` (nothing may block in the hub).
    Most greenlets have none, and looking for it raises and catches an
    ``AttributeError`` every time; so a class found without one is remembered,
    and its greenlets switch to the hub directly.
    """
    hub = get_hub()
    cls = type(current)
    if cls in _NO_SWITCH_OUT:
        switch(hub)
    elif hasattr(cls, "switch_out") or hasattr(current, "switch_out"):
        hub.switch()
    else:
        _NO_SWITCH_OUT.add(cls)
        switch(hub)


def _wake(parker: Parker) -> None:
    """Resume the greenlet parked in ``parker.get()``. Wake-ups keep the order they are made in.

    On a Reader, the first wake-up of a read is kept for the reader to
    hand over as it parks; a second one sends the kept one to the hub first.
    """
    reader = getcurrent()
    if type(reader) is reader_class:
        kept = reader.wake
        if kept is None:
            reader.wake = parker
            return
        if kept is not THROUGH_HUB:
            reader.wake = THROUGH_HUB
            get_hub().loop.run_callback(kept._resume)
    get_hub().loop.run_callback(parker._resume)


def reader_park(reader: Any, watcher: Any) -> None:
    """``reader.park(watcher)`` (see ``Reader.park``): block the Reader greenlet
    ``reader``, the current one, until ``watcher`` fires; a kept wake-up runs first."""
    watcher.start(reader.switch)
    try:
        parker = reader.wake
        if parker is not None:
            reader.wake = None
            if parker is not THROUGH_HUB:
                kept: Parker = parker  # (typed: compiled, its field is read directly)
                target = kept._waiter
                if target is not None:  # still parked in parker.get()
                    target.switch()  # what the hub's parker._resume() would do
                    return
        # The hub's own switch() would first call switch_out(), which has nothing
        # to hand over now (no kept wake-up): switch to the hub directly.
        switch(reader.parent)
    finally:
        watcher.stop()


def _closed() -> None:
    """The callback of a closed :class:`Deadline`."""


class Deadline:
    """One lazily re-armed timer for a deadline that moves often.

    Setting a later deadline costs an attribute store; the timer, when it
    fires early, re-arms itself for the rest. So a connection can refresh its
    body timeout on every chunk without creating a timer per chunk. Used by
    one greenlet at a time (the connection's owner).
    """

    __slots__ = ("_loop", "_callback", "_timer", "_due", "deadline")

    def __init__(self, callback: Callable[[], Any]) -> None:
        self._loop: Any = get_hub().loop
        self._callback = callback
        self._timer: Any = None
        self._due = 0.0
        self.deadline: float | None = None

    def set(self, seconds: float) -> None:
        """Fire ``callback()`` once ``seconds`` from now have passed (0: cancel)."""
        if not seconds:
            self.deadline = None
            return
        due: float = self._loop.now() + seconds
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


# Backing off from a peer too slow for busy polling: after the n-th such answer in a
# row (n at most _MAX_MISSES), the next 2**n - 1 requests let the hub sleep at once.
_MAX_MISSES: Final = 6
_sched_yield: Final[Any] = getattr(os, "sched_yield", None)


class BusyPoll:
    """A hub's busy polling: its loop polls its sockets instead of sleeping
    while a request sent to a fast peer waits for its answer. One per hub.

    Sleeping costs a request the time the kernel takes to wake the thread
    once the answer is there: tens of microseconds on a virtual machine,
    more than a loopback round trip. While a request it was armed for
    waits, for at most the budget since the last arming, an idle watcher
    keeps the loop from blocking: the loop polls its sockets with a zero
    timeout, runs whatever is ready as usual, and calls the idle callback
    only when nothing was. That callback yields the CPU to any other thread
    or process that wants it (``sched_yield``), so the polling takes only
    time nobody else uses. docs/performance.md, "Busy polling".

    A stretch of polling ends when nobody waits or when its budget runs
    out; then whatever was armed in it is forgotten (:attr:`stretch`), so a
    request that is never answered nor cancelled keeps nothing polling.

    Answers slower than the budget make it back off: the n-th in a row lets
    the next 2**n - 1 requests (at most 63) wait without polling. A peer
    that answers in time resets that. So a slow peer costs one budget of
    polling every 64 requests, and a fast one is polled for every time.
    Used from its hub's thread only.
    """

    __slots__ = ("_loop", "_idle", "_until", "_waiting", "_misses", "_skip", "stretch")

    def __init__(self, loop: Any) -> None:
        self._loop: Any = loop
        # The idle watcher while polling, else None. Made for each stretch of polling
        # and closed after it: on libuv a watcher must be closed before it is dropped,
        # and this one would otherwise live as long as its hub.
        self._idle: Any = None
        self._until = 0.0  # perf_counter() time past which the loop may sleep again
        self._waiting = 0  # armed requests not yet answered
        self._misses = 0  # answers in a row that came after their budget
        self._skip = 0  # requests still to let wait without polling
        self.stretch = 0  # counts the stretches of polling: which one an arming belongs to

    def arm(self, budget: float) -> float:
        """A request just sent waits for its answer: poll for up to ``budget`` seconds.

        Returns the time it was armed (``perf_counter()``), to be handed to
        :meth:`answered` or :meth:`cancel`; 0.0 while backing off (nothing armed).
        """
        if self._skip:
            self._skip -= 1
            return 0.0
        now = perf_counter()
        until = now + budget
        if self._idle is None:
            self.stretch += 1
            self._waiting = 1
            self._until = until
            # ref=False: polling for an answer never keeps the loop alive on its own.
            idle = self._idle = self._loop.idle(ref=False)
            idle.start(self._poll)
        else:
            self._waiting += 1
            if until > self._until:
                self._until = until
        return now

    @property
    def polling(self) -> bool:
        """Whether the loop polls now instead of sleeping."""
        return self._idle is not None

    def answered(self, armed: float, stretch: int, budget: float) -> None:
        """The first answer to a request armed at ``armed``, in stretch ``stretch``, arrived."""
        if stretch == self.stretch and self._idle is not None:
            self._waiting -= 1
        if perf_counter() - armed <= budget:
            self._misses = 0
        else:
            misses = self._misses
            if misses < _MAX_MISSES:
                misses += 1
                self._misses = misses
            self._skip = (1 << misses) - 1

    def cancel(self, stretch: int) -> None:
        """A request armed for in stretch ``stretch`` will have no answer (its connection ended)."""
        if stretch == self.stretch and self._idle is not None:
            self._waiting -= 1

    def _poll(self) -> None:
        """The idle callback: the loop found nothing ready in this pass."""
        if self._waiting > 0 and perf_counter() < self._until:
            if _sched_yield is not None:
                _sched_yield()
            return
        # Nobody waits, or not within the budget: the loop may sleep again.
        idle = self._idle
        self._idle = None
        self._waiting = 0
        if idle is not None:
            idle.close()


def busy_poll() -> BusyPoll:
    """The calling thread's hub's :class:`BusyPoll`."""
    hub = get_hub()
    poll: BusyPoll | None = getattr(hub, "_greenhttp_busy_poll", None)
    if poll is None:
        poll = hub._greenhttp_busy_poll = BusyPoll(hub.loop)
    return poll


class Spin:
    """One connection's use of its hub's :class:`BusyPoll`, with the client's budget.

    The connection calls :meth:`sent` as it writes a request, :meth:`read`
    after every read from its socket and :meth:`ended` as it closes. One
    request at a time is timed: the oldest unanswered one. Budget 0: inert.
    """

    __slots__ = ("_poll", "_budget", "_armed", "_stretch")

    def __init__(self, budget: float) -> None:
        self._poll: BusyPoll | None = busy_poll() if budget > 0 else None
        self._budget = budget
        self._armed = 0.0  # when the timed request was sent (0.0: none is)
        self._stretch = 0  # the poll's stretch it was armed in

    def sent(self) -> None:
        """A request went out (or is about to): its answer is awaited."""
        poll = self._poll
        if poll is not None and not self._armed:
            self._armed = poll.arm(self._budget)
            self._stretch = poll.stretch

    def read(self) -> None:
        """Bytes arrived: the timed request, if any, is answered."""
        armed = self._armed
        poll = self._poll
        if armed and poll is not None:
            self._armed = 0.0
            poll.answered(armed, self._stretch, self._budget)

    def ended(self) -> None:
        """The connection closed: the timed request will not be answered here."""
        poll = self._poll
        if self._armed and poll is not None:
            self._armed = 0.0
            poll.cancel(self._stretch)
