"""``WebSocketStream`` (experimental): the WHATWG streams-based WebSocket client.

``opened`` and ``closed`` are ``AsyncResult``s: ``.get()`` blocks the calling
greenlet. ``opened`` gives a :class:`WebSocketStreamOpened` whose
``readable`` yields each message (``str`` for text, ``bytes`` for binary) and
whose ``writable`` sends them. The readable applies back-pressure: when
:data:`HIGH_WATER_MARK` messages wait unread, the connection stops reading
the socket until the consumer catches up.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Mapping
from typing import Any

from .. import _debug
from .._runtime import AsyncResult
from .._runtime import Event as _Flag
from ..errors import DOMException, ExperimentalWarning, WebSocketError
from .handshake import parse_protocols, parse_url
from .transport import OPEN, Session, valid_close_code
from .websocket import check_close, resolve_dispatcher, to_bytes

__all__ = [
    "WebSocketStream",
    "WebSocketStreamOpened",
    "WebSocketStreamReadable",
    "WebSocketStreamWritable",
    "CloseInfo",
    "HIGH_WATER_MARK",
]

#: Unread messages a readable holds before the connection stops reading.
HIGH_WATER_MARK = 16

_warned = False  # the one-time ExperimentalWarning (tests reset it)
_END = object()


def _warn_once() -> None:
    global _warned
    if _warned:
        return
    _warned = True
    warning = ExperimentalWarning(
        "WebSocketStream is experimental! Expect it to change at any time. [GREENHTTP-WSS]",
        code="GREENHTTP-WSS",
    )
    warnings.warn(warning, stacklevel=3)


class CloseInfo(dict[str, Any]):
    """What ``closed`` resolves to: ``{"close_code": int, "reason": str}``, readable
    as a dict or through the ``close_code`` and ``reason`` attributes."""

    @property
    def close_code(self) -> int:
        """The server's close code (1005 when its close frame had none)."""
        code: int = self["close_code"]
        return code

    @property
    def reason(self) -> str:
        """The server's close reason."""
        reason: str = self["reason"]
        return reason


class WebSocketStreamReadable:
    """The messages of a :class:`WebSocketStream`, in order.

    Iterate it (or call :meth:`read`) from one greenlet: each step blocks
    until a message arrives. Iteration ends after a clean close and raises
    the :class:`WebSocketError` of an unclean one.
    """

    def __init__(self, stream: WebSocketStream) -> None:
        self._stream = stream
        self._items: deque[Any] = deque()
        self._end: Any = None  # _END, or the error that ended the stream
        self._available = _Flag()
        self._room = _Flag()
        self._room.set()

    def read(self) -> str | bytes | None:
        """The next message; None once the stream ended cleanly. Blocks the
        calling greenlet (bound it with ``gevent.Timeout``)."""
        items = self._items
        while not items:
            end = self._end
            if end is not None:
                if end is _END:
                    return None
                raise end
            self._available.clear()
            self._available.wait()
        item: str | bytes = items.popleft()
        if len(items) < HIGH_WATER_MARK:
            self._room.set()
        return item

    def __iter__(self) -> WebSocketStreamReadable:
        return self

    def __next__(self) -> str | bytes:
        item = self.read()
        if item is None:
            raise StopIteration
        return item

    def cancel(self, reason: Any = None) -> None:
        """End the readable at once (read() gives None) and close the connection:
        with the code and reason of a :class:`WebSocketError` ``reason``, else
        without a status code. Never blocks."""
        self._items.clear()
        self._finish(None)  # a cancelled stream is ended: read() gives None at once
        self._stream._close_with(reason)

    # -- the session's side --------------------------------------------------------
    def _push(self, item: Any) -> None:
        self._items.append(item)
        self._available.set()
        if len(self._items) >= HIGH_WATER_MARK and self._end is None:
            self._room.clear()
            self._room.wait()  # back-pressure: the session's reader waits here

    def _finish(self, error: BaseException | None) -> None:
        if self._end is None:
            self._end = _END if error is None else error
        self._available.set()
        self._room.set()


class WebSocketStreamWritable:
    """Sends messages on a :class:`WebSocketStream`: ``write(str)`` a text frame,
    ``write(bytes-like)`` a binary frame. ``write`` blocks the calling greenlet
    until the frame is handed to the network (back-pressure)."""

    def __init__(self, stream: WebSocketStream) -> None:
        self._stream = stream

    def write(self, data: Any) -> None:
        """Send one message; raises ``InvalidStateError`` once the connection closes."""
        session = self._stream._session
        if isinstance(data, str):
            text: str | None = data
            payload = None
        else:
            text = None
            payload = to_bytes(data)
            if payload is None:
                raise TypeError(f"write() takes str or bytes-like data, got {type(data).__name__}")
        if session is None or session.state != OPEN:
            raise DOMException("the WebSocket is not open", "InvalidStateError")
        if text is not None:
            parker = session.send_text(text, wait=True)
        else:
            parker = session.send_binary(payload, wait=True)
        if parker is not None:
            parker.get()

    def close(self) -> None:
        """Close the connection without a status code. Never blocks."""
        self._stream._close_with(None)

    def abort(self, reason: Any = None) -> None:
        """Close the connection, with the code and reason of a :class:`WebSocketError`
        ``reason``, else without a status code. Never blocks."""
        self._stream._close_with(reason)


class WebSocketStreamOpened:
    """What ``opened`` resolves to: ``readable``, ``writable``, ``extensions``, ``protocol``."""

    __slots__ = ("readable", "writable", "extensions", "protocol")

    def __init__(self, readable: Any, writable: Any, extensions: str, protocol: str) -> None:
        self.readable = readable
        self.writable = writable
        self.extensions = extensions
        self.protocol = protocol

    def __repr__(self) -> str:
        return f"WebSocketStreamOpened(protocol={self.protocol!r}, extensions={self.extensions!r})"


class WebSocketStream:
    """A WebSocket as a pair of streams (WHATWG WebSocketStream; experimental).

    ``WebSocketStream(url, protocols=None, signal=None)`` (or an options dict
    ``{"protocols", "signal"}`` as the second argument). The first one made in
    a process issues an :class:`ExperimentalWarning` (``code``
    ``"GREENHTTP-WSS"``). Returns at once; ``opened.get()`` and
    ``closed.get()`` block. A ``signal`` already aborted rejects both with
    its reason, and the stream never connects; aborting it later, before the
    connection opens, fails the handshake: ``opened`` then raises
    ``WebSocketError("Socket never opened")`` and ``closed``
    ``WebSocketError("unclean close")`` (code 1006), as for any connection
    that never opened. Greenlet-safe.
    """

    def __init__(self, url: Any, protocols: Any = None, signal: Any = None) -> None:
        _warn_once()
        _debug.setup_from_env()
        if isinstance(protocols, dict):
            unknown = set(protocols) - {"protocols", "signal"}
            if unknown:
                raise TypeError(f"unknown WebSocketStream option {sorted(unknown)[0]!r}")
            signal = protocols.get("signal", signal)
            protocols = protocols.get("protocols")
        target = parse_url(url)
        names = parse_protocols(protocols)
        if signal is not None and not (
            hasattr(signal, "add_event_listener") or hasattr(signal, "on")
        ):  # raised here, as a bad URL is, not as a connection that never opened
            raise TypeError(f"signal must be an AbortSignal, got {signal!r}")
        self._target = target
        self._opened: Any = AsyncResult()  # (gevent has no type hints)
        self._closed: Any = AsyncResult()
        self._readable = WebSocketStreamReadable(self)
        self._writable = WebSocketStreamWritable(self)
        self._session: Session | None = None
        if signal is not None and getattr(signal, "aborted", False):
            reason = _reason(signal)
            self._opened.set_exception(reason)
            self._closed.set_exception(reason)
            return
        dispatcher, owned = resolve_dispatcher(None, target)
        self._session = Session(self, target, names, dispatcher, owned, signal=signal)

    @property
    def url(self) -> str:
        """The URL, serialised."""
        return self._target.url

    @property
    def opened(self) -> Any:
        """An ``AsyncResult`` (read-only): ``.get()`` blocks until the connection is
        open and gives a :class:`WebSocketStreamOpened`, or raises why it never opened."""
        return self._opened

    @property
    def closed(self) -> Any:
        """An ``AsyncResult`` (read-only): ``.get()`` blocks until the connection is
        closed and gives ``{"close_code", "reason"}``, or raises ``WebSocketError``."""
        return self._closed

    def close(self, close_info: dict[str, Any] | None = None) -> None:
        """Start the closing handshake; never blocks (wait with ``closed.get()``).

        ``close_info`` is ``{"close_code": int, "reason": str}``; without it no
        status code is sent. The code must be 1000 or 3000–4999
        (``InvalidAccessError``), the reason at most 123 UTF-8 bytes
        (``SyntaxError``).
        """
        if close_info is not None and not isinstance(close_info, Mapping):
            raise TypeError(f"close_info must be a dict, got {type(close_info).__name__}")
        info = dict(close_info or {})
        unknown = set(info) - {"close_code", "reason"}
        if unknown:
            raise TypeError(f"unknown close info field {sorted(unknown)[0]!r}")
        code, reason = check_close(info.get("close_code"), info.get("reason", ""), clamp=False)
        self._close(code, reason)

    def _close_with(self, reason: Any) -> None:
        # The library's own errors carry codes a peer may not send (1006 for a lost
        # connection; RFC 6455 §7.4.1): such a code is dropped, like its reason.
        code = reason.close_code if isinstance(reason, WebSocketError) else None
        if code is not None and valid_close_code(code):
            self._close(code, reason.reason)
        else:
            self._close(None, "")

    def _close(self, code: int | None, reason: str) -> None:
        session = self._session
        if session is None:
            return
        self._readable._room.set()  # a reader held by back-pressure must see the close
        session.close(code, reason)

    # -- session callbacks (on the session's greenlet) -------------------------------
    def _ws_open(self) -> None:
        session = self._session
        assert session is not None
        negotiated = session.negotiated
        self._opened.set(
            WebSocketStreamOpened(
                self._readable, self._writable, negotiated.extensions, negotiated.protocol
            )
        )

    def _ws_message(self, data: Any, is_text: bool) -> None:
        self._readable._push(data)

    def _ws_closing(self) -> None:
        self._readable._room.set()

    def _ws_closed(
        self, code: int, reason: str, was_clean: bool, error: BaseException | None
    ) -> None:
        if was_clean:
            self._readable._finish(None)
            self._closed.set(CloseInfo(close_code=code, reason=reason))
            return
        unclean = WebSocketError._closed_with("unclean close", code, reason)
        if error is not None:
            unclean.__cause__ = error
        if not self._opened.ready():
            # As the original: whatever ended it (a failed handshake, close(), the
            # signal aborting the handshake), ``opened`` rejects with a WebSocketError
            # without a code, and ``closed`` as for any unclean close (1006).
            never = WebSocketError("Socket never opened")
            if error is not None:
                never.__cause__ = error
            self._opened.set_exception(never)
        self._readable._finish(unclean)
        self._closed.set_exception(unclean)

    def __repr__(self) -> str:
        session = self._session
        state = ("CONNECTING", "OPEN", "CLOSING", "CLOSED")[session.state if session else 3]
        return f"<WebSocketStream {self.url} {state}>"


def _reason(signal: Any) -> BaseException:
    reason = getattr(signal, "reason", None)
    if isinstance(reason, BaseException):
        return reason
    return DOMException(
        "This operation was aborted" if reason is None else str(reason), "AbortError"
    )
