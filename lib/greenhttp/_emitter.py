"""A small, greenlet-safe event emitter (``on``, ``once``, ``off``, ``emit``).

Listeners run synchronously in the emitting greenlet, in registration order.
A listener that raises never breaks the emitter or the connection that
emitted: the exception goes to the ``error`` listeners, or, if the failing
event is ``error`` itself or nobody listens, to the ``greenhttp`` logger.
No lock is needed: greenlets switch only at blocking calls, and emit
iterates over a snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["EventEmitter"]

_log = logging.getLogger("greenhttp")


class EventEmitter:
    """Event registration in the style of Node's EventEmitter. Greenlet-safe; never blocks."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: dict[str, list[tuple[Callable[..., Any], bool]]] = {}

    def on(self, event: str, listener: Callable[..., Any]) -> EventEmitter:
        """Call ``listener(*args)`` on every ``event``. Returns self."""
        if not callable(listener):
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(f"listener must be callable, got {listener!r}")
        self._listeners.setdefault(event, []).append((listener, False))
        self._listener_added(event)
        return self

    add_listener = on

    def once(self, event: str, listener: Callable[..., Any]) -> EventEmitter:
        """Call ``listener`` on the next ``event`` only. Returns self."""
        if not callable(listener):
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(f"listener must be callable, got {listener!r}")
        self._listeners.setdefault(event, []).append((listener, True))
        self._listener_added(event)
        return self

    def _listener_added(self, event: str) -> None:
        """Called after a listener of ``event`` was added: a hook for subclasses."""

    def off(self, event: str, listener: Callable[..., Any]) -> EventEmitter:
        """Remove one registration of ``listener`` for ``event``. Returns self."""
        entries = self._listeners.get(event)
        if entries:
            for i, (fn, _) in enumerate(entries):
                if fn is listener or fn == listener:
                    del entries[i]
                    break
        return self

    remove_listener = off

    def remove_all_listeners(self, event: str | None = None) -> EventEmitter:
        """Remove every listener of ``event`` (of all events when None). Returns self."""
        if event is None:
            self._listeners.clear()
        else:
            self._listeners.pop(event, None)
        return self

    def listener_count(self, event: str) -> int:
        """How many listeners ``event`` has."""
        return len(self._listeners.get(event, ()))

    def emit(self, event: str, *args: Any) -> bool:
        """Call the listeners of ``event``; True if there were any."""
        entries = self._listeners.get(event)
        if not entries:
            return False
        if len(entries) == 1 and not entries[0][1]:
            # The common case (one permanent listener, e.g. a pool's): no snapshot needed.
            try:
                entries[0][0](*args)
            except Exception as exc:
                self._listener_failed(event, exc)
            return True
        snapshot = list(entries)
        if any(once for _, once in snapshot):
            entries[:] = [e for e in entries if not e[1]]
        for fn, _ in snapshot:
            try:
                fn(*args)
            except Exception as exc:
                self._listener_failed(event, exc)
        return True

    def _listener_failed(self, event: str, exc: Exception) -> None:
        if event != "error" and self._listeners.get("error"):
            self.emit("error", exc)
        else:
            _log.error("greenhttp: a %r listener raised", event, exc_info=exc)
