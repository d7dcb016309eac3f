"""AbortController and AbortSignal, after the WHATWG DOM, for greenlets.

``signal.add_event_listener("abort", fn)`` listeners run synchronously in the
greenlet that calls ``abort()`` (or from the hub for ``AbortSignal.timeout``).
Greenlet-safe; nothing here blocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from . import _runtime
from ._event_target import Event, EventTarget
from .errors import AbortError, DOMException

__all__ = ["AbortController", "AbortSignal"]


class AbortSignal(EventTarget):
    """Tells whether an operation was aborted, and why. Made by :class:`AbortController`.

    An :class:`EventTarget` with the DOM's listener rules: ``"abort"`` listeners
    (callables or objects with ``handle_event``) run once each, in the order
    they were added, with ``onabort`` in the place of its first assignment;
    one added twice runs once; one removed by an earlier one does not run.
    """

    __slots__ = ("_aborted", "_reason", "_reason_tb", "_timer")

    def __init__(self) -> None:
        super().__init__()
        self._aborted = False
        self._reason: Any = None
        self._reason_tb: Any = None  # the reason's traceback when the signal aborted
        self._timer: Any = None

    @property
    def aborted(self) -> bool:
        """True once aborted."""
        return self._aborted

    @property
    def reason(self) -> Any:
        """The abort reason (an exception), or None while not aborted."""
        return self._reason

    @property
    def onabort(self) -> Callable[[Any], Any] | None:
        """The ``abort`` event handler property (None, or anything not callable, removes it)."""
        return self._get_handler("abort")  # type: ignore[no-any-return]

    @onabort.setter
    def onabort(self, fn: Callable[[Any], Any] | None) -> None:
        self._set_handler("abort", fn)

    def throw_if_aborted(self) -> None:
        """Raise the reason if aborted."""
        if self._aborted:
            reason = self._reason
            if isinstance(reason, BaseException):
                raise self._raisable()
            raise AbortError(str(reason))

    def _raisable(self) -> Any:
        """The reason, to raise once more: with the traceback it had when the signal
        aborted. Each raise of one object adds its frames to its traceback; without
        this, a signal reused after it aborted would grow it (and keep every frame
        alive) without end."""
        return self._reason.with_traceback(self._reason_tb)

    # Node-style aliases: anything with on("abort", fn) is accepted as a signal.
    def on(self, type: str, listener: Callable[..., Any]) -> None:
        """Node-style registration: ``on("abort", fn)`` calls ``fn()`` on abort."""
        self.add_event_listener(type, lambda _ev: listener())

    def _abort(self, reason: Any) -> None:
        if self._aborted:
            return
        self._aborted = True
        self._reason = reason if reason is not None else DOMException("This operation was aborted", "AbortError")
        self._reason_tb = getattr(self._reason, "__traceback__", None)
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        if self._listeners.get("abort"):
            self.dispatch_event(Event("abort"))
        self._listeners.pop("abort", None)  # it aborts once: no listener is kept

    @classmethod
    def abort(cls, reason: Any = None) -> AbortSignal:
        """A signal that is already aborted."""
        signal = cls()
        signal._abort(reason)
        return signal

    @classmethod
    def timeout(cls, seconds: float) -> AbortSignal:
        """A signal that aborts with a ``TimeoutError`` DOMException after ``seconds``.

        ``seconds`` is a finite number >= 0, else ``TypeError`` (WebIDL
        ``[EnforceRange]``): NaN or infinity would make a signal that never aborts."""
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise TypeError(f"seconds must be a finite number >= 0, got {seconds!r}")
        signal = cls()
        signal._timer = _runtime.start_timer(
            seconds, signal._abort, DOMException("The operation timed out.", "TimeoutError")
        )
        return signal


class AbortController:
    """Owns an :class:`AbortSignal`; ``abort(reason)`` aborts it. Greenlet-safe; never blocks."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: Any = None) -> None:
        """Abort the signal (idempotent). The default reason is an ``AbortError`` DOMException."""
        self.signal._abort(reason)
