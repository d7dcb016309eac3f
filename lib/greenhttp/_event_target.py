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
from collections.abc import Callable
from typing import Any

__all__ = ["Event", "EventTarget"]

_log = logging.getLogger("greenhttp")

Listener = Callable[[Any], Any]


class Event:
    """A DOM ``Event``: ``type``, ``target``, ``current_target``, ``time_stamp``.

    Plain data; never blocks. ``bubbles``, ``cancelable`` and ``composed`` are
    always False for the events greenhttp fires.
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
        self._stop = False

    def stop_immediate_propagation(self) -> None:
        """Skip the listeners that have not run yet for this dispatch."""
        self._stop = True

    def stop_propagation(self) -> None:
        """No-op (greenhttp's targets have no tree to propagate through)."""

    def prevent_default(self) -> None:
        """No-op: greenhttp's events are not cancelable."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(type={self.type!r})"


class _Entry:
    """One registration. ``removed`` keeps a dispatch in progress from calling it."""

    __slots__ = ("callback", "once", "removed", "handler")

    def __init__(self, callback: Any, once: bool, handler: bool = False) -> None:
        self.callback = callback
        self.once = once
        self.removed = False
        self.handler = handler  # the on<type> property's slot


class EventTarget:
    """Listener registration and dispatch. Greenlet-safe; never blocks by itself.

    A listener is a callable taking the event, or an object with a
    ``handle_event(event)`` method. Registering the same callable twice for
    one type is a no-op, as in the DOM.
    """

    def __init__(self) -> None:
        self._listeners: dict[str, list[_Entry]] = {}

    def add_event_listener(self, type: str, listener: Any, once: bool = False) -> None:
        """Call ``listener(event)`` for every ``type`` event (only the next one with ``once``)."""
        if listener is None:
            return
        if not callable(listener) and not callable(getattr(listener, "handle_event", None)):
            raise TypeError(f"listener must be callable or have handle_event(), got {listener!r}")
        entries = self._listeners.setdefault(type, [])
        for entry in entries:
            if not entry.handler and entry.callback is listener:
                return
        entries.append(_Entry(listener, bool(once)))

    def remove_event_listener(self, type: str, listener: Any) -> None:
        """Remove the registration of ``listener`` for ``type``, if any."""
        entries = self._listeners.get(type)
        if not entries:
            return
        for i, entry in enumerate(entries):
            if not entry.handler and entry.callback is listener:
                entry.removed = True
                del entries[i]
                return

    def dispatch_event(self, event: Any) -> bool:
        """Run the listeners of ``event.type`` now, in this greenlet. Returns True
        (greenhttp's events cannot be cancelled)."""
        entries = self._listeners.get(event.type)
        try:
            event.target = self
            event.current_target = self
        except AttributeError:
            pass
        if not entries:
            return True
        snapshot = list(entries)
        for entry in snapshot:
            if entry.removed:
                continue
            if entry.once:
                entry.removed = True
                try:
                    entries.remove(entry)
                except ValueError:
                    pass
            callback = entry.callback
            try:
                if callable(callback):
                    callback(event)
                else:
                    callback.handle_event(event)
            except Exception:
                _log.exception("greenhttp: a %r event listener raised", event.type)
            if getattr(event, "_stop", False):
                break
        try:
            event.current_target = None
        except AttributeError:
            pass
        return True

    # -- on<type> handler properties -------------------------------------------------
    def _get_handler(self, type: str) -> Any:
        for entry in self._listeners.get(type, ()):
            if entry.handler:
                return entry.callback
        return None

    def _set_handler(self, type: str, fn: Any) -> None:
        """Set the ``on<type>`` handler: it keeps the slot of its first assignment;
        None (or anything not callable) removes it."""
        entries = self._listeners.setdefault(type, [])
        for i, entry in enumerate(entries):
            if entry.handler:
                if callable(fn):
                    entry.callback = fn
                else:
                    entry.removed = True
                    del entries[i]
                return
        if callable(fn):
            entries.append(_Entry(fn, False, handler=True))
