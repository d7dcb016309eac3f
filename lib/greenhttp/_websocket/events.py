"""The WebSocket event objects: ``MessageEvent``, ``CloseEvent``, ``ErrorEvent``.

After the HTML standard's interfaces, with snake_case fields. Each takes the
event type and then either an init dict (the WebIDL shape) or keywords:
``CloseEvent("close", code=1000, reason="", was_clean=True)`` and
``CloseEvent("close", {"code": 1000})`` are the same; the DOM's ``bubbles``,
``cancelable`` and ``composed`` are taken too. Plain data: nothing
here blocks, and an event may be read from any greenlet.
"""

from __future__ import annotations

from typing import Any

from .._event_target import Event

__all__ = ["Event", "MessageEvent", "CloseEvent", "ErrorEvent"]


# The DOM's EventInit fields, which every event init dict may carry.
_EVENT_INIT = ("bubbles", "cancelable", "composed")


def _init(event: Event, cls: type, init: dict[str, Any] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    fields = dict(cls._DEFAULTS)  # type: ignore[attr-defined]
    merged = {**(init or {}), **kwargs}
    for name in _EVENT_INIT:
        if name in merged:
            setattr(event, name, bool(merged.pop(name)))
    unknown = set(merged) - set(fields)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {sorted(unknown)[0]!r}")
    fields.update(merged)
    return fields


class _Ports(list):  # type: ignore[type-arg]
    """``MessageEvent.ports``: a list that cannot change, as the original freezes its
    array (so it still compares equal to ``[]``). Changing it raises ``TypeError``."""

    __slots__ = ()

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("MessageEvent.ports is read-only")

    append = extend = insert = remove = pop = clear = sort = reverse = _read_only
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _read_only


_NO_PORTS: Any = _Ports()


def _sequence(name: str, value: Any) -> _Ports:
    """A WebIDL ``sequence<T>`` init field, copied: any iterable but a string."""
    if isinstance(value, _Ports):
        return value
    if isinstance(value, (str, bytes, bytearray)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a sequence, got {type(value).__name__}")
    return _Ports(value)


class MessageEvent(Event):
    """A message arrived. ``data``: ``str`` for text, ``Blob`` or ``bytes`` for binary
    (after ``binary_type``); ``origin``: the origin of the WebSocket's URL;
    ``last_event_id`` (``""``), ``source`` (None) and ``ports`` as in the DOM.
    ``ports`` is a read-only list (``[]`` by default), as the original's
    frozen array; the init takes any iterable for it (a list, a tuple), not a
    string (a WebIDL sequence). ``origin`` and ``last_event_id`` are
    strings (``str()`` of what the init gives, as WebIDL converts them)."""

    _DEFAULTS: dict[str, Any] = {
        "data": None,
        "origin": "",
        "last_event_id": "",
        "source": None,
        "ports": _NO_PORTS,
    }

    def __init__(self, type: str, init: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(type)
        f = _init(self, MessageEvent, init, kwargs)
        self.data: Any = f["data"]
        self.origin: str = str(f["origin"])
        self.last_event_id: str = str(f["last_event_id"])
        self.source: Any = f["source"]
        self.ports: list[Any] = _sequence("ports", f["ports"])

    @classmethod
    def _fast(cls, data: Any, origin: str) -> MessageEvent:
        """A ``message`` event without the init checks (the per-message path)."""
        ev = cls.__new__(cls)
        ev.type = "message"
        ev.target = ev.current_target = None
        ev.default_prevented = ev._stop = False
        ev.data = data
        ev.origin = origin
        ev.last_event_id = ""
        ev.source = None
        ev.ports = _NO_PORTS
        return ev

    def __repr__(self) -> str:
        data = self.data
        shown = (
            repr(data)
            if not isinstance(data, (str, bytes)) or len(data) <= 40
            else f"<{len(data)} items>"
        )
        return f"MessageEvent(type={self.type!r}, data={shown}, origin={self.origin!r})"


class CloseEvent(Event):
    """The connection closed. ``code`` (1005: the close frame had none; 1006: no close
    frame was received), ``reason`` and ``was_clean`` (True only when the closing
    handshake completed both ways)."""

    _DEFAULTS: dict[str, Any] = {"was_clean": False, "code": 0, "reason": ""}

    def __init__(self, type: str, init: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(type)
        f = _init(self, CloseEvent, init, kwargs)
        self.was_clean: bool = bool(f["was_clean"])
        self.code: int = int(f["code"])
        self.reason: str = str(f["reason"])

    def __repr__(self) -> str:
        return f"CloseEvent(type={self.type!r}, code={self.code}, reason={self.reason!r}, was_clean={self.was_clean})"


class ErrorEvent(Event):
    """The connection failed. ``error`` is the exception behind it, ``message`` a text
    (``""`` by default); ``filename``, ``lineno`` and ``colno`` exist for the DOM shape."""

    _DEFAULTS: dict[str, Any] = {
        "message": "",
        "filename": "",
        "lineno": 0,
        "colno": 0,
        "error": None,
    }

    def __init__(self, type: str, init: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(type)
        f = _init(self, ErrorEvent, init, kwargs)
        self.message: str = str(f["message"])
        self.filename: str = str(f["filename"])
        self.lineno: int = int(f["lineno"])
        self.colno: int = int(f["colno"])
        self.error: Any = f["error"]

    def __repr__(self) -> str:
        return f"ErrorEvent(type={self.type!r}, message={self.message!r}, error={self.error!r})"
