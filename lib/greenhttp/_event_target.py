"""``EventTarget`` and ``Event``, after the WHATWG DOM, for greenlets.

``dispatch_event`` calls the listeners synchronously, in the greenlet that
dispatches, in registration order; an ``on*`` handler property holds the
position of its first assignment (DOM "event handler" semantics). A listener
that raises never breaks the dispatcher or the connection behind it: the
exception is logged on the ``greenhttp`` logger and the next listener runs.

No lock is needed: greenlets switch only at blocking calls, the listener list
is copied before a dispatch, and a listener removed during a dispatch is not
called afterwards.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Event", "EventTarget"]

_log = logging.getLogger("greenhttp")

Listener = Callable[[Any], Any]


class Event:
    """A DOM ``Event``: ``type``, ``target``, ``current_target``, ``time_stamp``
    (seconds since the epoch, ``time.time()``, when it was made).

    Plain data; never blocks. ``bubbles``, ``cancelable`` and ``composed`` are
    always False for the events greenhttp fires; an event made with
    ``cancelable`` true can be cancelled (:meth:`prevent_default`).
    """

    bubbles = False
    cancelable = False
    composed = False

    def __init__(self, type: str) -> None:
        if not isinstance(type, str):
            raise TypeError(f"event type must be a string, got {type!r}")
        self.type = type
        self.target: Any = None
        self.current_target: Any = None
        self.default_prevented = False
        self.time_stamp = time.time()
        self._stop = False

    def stop_immediate_propagation(self) -> None:
        """Skip the listeners that have not run yet for this dispatch."""
        self._stop = True

    def stop_propagation(self) -> None:
        """No-op (greenhttp's targets have no tree to propagate through)."""

    def prevent_default(self) -> None:
        """Cancel the event if it is ``cancelable`` (``default_prevented`` becomes True,
        and :meth:`EventTarget.dispatch_event` returns False); else a no-op, as in the
        DOM. greenhttp's own events are not cancelable."""
        if self.cancelable:
            self.default_prevented = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(type={self.type!r})"


class _Entry:
    """One registration. ``removed`` keeps a dispatch in progress from calling it."""

    __slots__ = ("callback", "once", "removed", "key")

    def __init__(self, callback: Any, once: bool, key: Any) -> None:
        self.callback = callback
        self.once = once
        self.removed = False
        self.key = key  # its key in the type's registrations; _HANDLER for the on<type> property


# The key of an on<type> handler property's registration (no listener's key is None).
_HANDLER = None


def _key(listener: Any) -> Any:
    """What identifies a listener: itself, compared as Python compares (two
    ``obj.method`` lookups are one listener), or its identity if unhashable."""
    try:
        hash(listener)
    except TypeError:
        return ("unhashable", id(listener))
    return listener


class EventTarget:
    """Listener registration and dispatch. Greenlet-safe; never blocks by itself.

    A listener is a callable taking the event, or an object with a
    ``handle_event(event)`` method. Registering the same listener twice for
    one type is a no-op, as in the DOM.
    """

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        # Per type, the registrations in order: a dict, so that adding (once per
        # request that binds a shared AbortSignal) and removing cost O(1).
        self._listeners: dict[str, dict[Any, _Entry]] = {}

    def add_event_listener(self, type: str, listener: Any, once: bool = False) -> None:
        """Call ``listener(event)`` for every ``type`` event (only the next one with ``once``)."""
        if listener is None:
            return
        if not callable(listener) and not callable(getattr(listener, "handle_event", None)):
            raise TypeError(f"listener must be callable or have handle_event(), got {listener!r}")
        entries = self._listeners.get(type)
        if entries is None:
            entries = self._listeners[type] = {}
        key = _key(listener)
        if key not in entries:
            entries[key] = _Entry(listener, bool(once), key)

    def remove_event_listener(self, type: str, listener: Any) -> None:
        """Remove the registration of ``listener`` for ``type``, if any."""
        if listener is not None:
            self._drop(type, _key(listener))

    def _drop(self, type: str, key: Any) -> None:
        entries = self._listeners.get(type)
        if entries:
            entry = entries.pop(key, None)
            if entry is not None:
                entry.removed = True  # (a dispatch in progress skips it)
                if not entries:
                    del self._listeners[type]

    def dispatch_event(self, event: Any) -> bool:
        """Run the listeners of ``event.type`` now, in this greenlet. Returns False if a
        listener cancelled the event (``prevent_default()`` on a cancelable one), else True."""
        type = event.type
        entries = self._listeners.get(type)
        try:
            event.target = self
            event.current_target = self
        except AttributeError:
            pass
        if entries:
            for entry in list(entries.values()):
                if entry.removed:
                    continue
                if entry.once:
                    self._drop(type, entry.key)
                callback = entry.callback
                try:
                    if callable(callback):
                        callback(event)
                    else:
                        callback.handle_event(event)
                except Exception:
                    _log.exception("greenhttp: a %r event listener raised", type)
                if getattr(event, "_stop", False):
                    break
        try:
            event.current_target = None
            if getattr(event, "_stop", False):
                event._stop = False  # (for this dispatch only, as in the DOM)
        except AttributeError:
            pass
        return not getattr(event, "default_prevented", False)

    # -- on<type> handler properties -------------------------------------------------
    def _get_handler(self, type: str) -> Any:
        entries = self._listeners.get(type)
        entry = entries.get(_HANDLER) if entries else None
        return entry.callback if entry is not None else None

    def _set_handler(self, type: str, fn: Any) -> None:
        """Set the ``on<type>`` handler: it keeps the slot of its first assignment;
        None (or anything not callable) removes it."""
        entries = self._listeners.get(type)
        entry = entries.get(_HANDLER) if entries else None
        if not callable(fn):
            self._drop(type, _HANDLER)
        elif entry is not None:
            entry.callback = fn
        else:
            if entries is None:
                entries = self._listeners[type] = {}
            entries[_HANDLER] = _Entry(fn, False, _HANDLER)
