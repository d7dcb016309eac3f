"""``WebSocket``, the WHATWG event-based client, and ``ping()``.

Construction checks the URL and the subprotocols and returns at once; the
opening handshake runs in the connection's own greenlet, which then reads the
socket and fires ``open``, ``message``, ``error`` and ``close`` on this
object. Listeners therefore run on that greenlet: a listener that blocks
delays the next message (spawn a greenlet for long work). Nothing else here
blocks, and every method may be called from any greenlet.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _debug
from .._core.blob import Blob
from .._core.headers import header_pairs
from .._event_target import Event, EventTarget
from ..errors import DOMException, InvalidArgumentError, usv
from .events import CloseEvent, ErrorEvent, MessageEvent
from .handshake import Target, parse_protocols, parse_url
from .transport import CLOSED, CLOSING, CONNECTING, OPEN, Session

__all__ = ["WebSocket", "ping", "resolve_dispatcher", "check_close", "to_bytes"]

_INIT_KEYS = frozenset({"protocols", "dispatcher", "headers"})


def resolve_dispatcher(dispatcher: Any, target: Target) -> tuple[Any, bool]:
    """The dispatcher for the handshake, and whether the session owns it.

    None means the global dispatcher. Until one exists, a ``Client`` for the
    URL's origin is made, and destroyed when the connection closes.
    """
    if dispatcher is not None:
        if not callable(getattr(dispatcher, "dispatch", None)):
            raise InvalidArgumentError(f"dispatcher must be a Dispatcher, got {dispatcher!r}")
        return dispatcher, False
    try:
        from .._global import get_global_dispatcher
    except ImportError:  # pragma: no cover - a tree without the global dispatcher
        from .._dispatcher.client import Client

        return Client(target.http_origin), True
    return get_global_dispatcher(), False


def check_close(code: Any, reason: Any, *, clamp: bool) -> tuple[int | None, str]:
    """Check ``close()`` arguments as the WHATWG standard does.

    The code becomes an unsigned 16-bit integer (``clamp``: WebIDL [Clamp];
    otherwise [EnforceRange], which raises ``TypeError`` out of range), then
    must be 1000 or 3000–4999 (``InvalidAccessError``); the reason must fit
    in 123 UTF-8 bytes (``SyntaxError``). A reason without a code means 1000.
    """
    if code is not None:
        if not isinstance(code, (int, float)):
            raise TypeError(f"the close code must be a number, got {code!r}")
        if clamp:
            code = 0 if math.isnan(code) else int(round(min(max(code, 0), 65535)))
        else:
            if not math.isfinite(code) or not 0 <= code <= 65535:
                raise TypeError(f"the close code must be 0 to 65535, got {code!r}")
            code = int(code)
        if code != 1000 and not 3000 <= code <= 4999:
            raise DOMException(
                f"the close code must be 1000 or 3000 to 4999, got {code}", "InvalidAccessError"
            )
    if reason is None:
        reason = ""
    elif not isinstance(reason, str):
        raise TypeError(f"the close reason must be a string, got {reason!r}")
    try:
        size = len(reason.encode("utf-8"))
    except UnicodeEncodeError:
        reason = usv(reason)
        size = len(reason.encode("utf-8"))
    if size > 123:
        raise DOMException(
            f"the close reason must be at most 123 UTF-8 bytes, got {size}", "SyntaxError"
        )
    if code is None and reason:
        code = 1000
    return code, reason


def to_bytes(data: Any) -> bytes | None:
    """Binary data (bytes-like or :class:`Blob`) as bytes; None for anything else."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, Blob):
        return data.bytes()
    try:
        return memoryview(data).tobytes()
    except TypeError:
        return None


class WebSocket(EventTarget):
    """A WebSocket client connection (WHATWG WebSocket standard, RFC 6455).

    ``WebSocket(url, protocols=None)``: ``url`` is ``ws:``/``wss:`` (``http:``
    and ``https:`` are converted); ``protocols`` is a string, a list of
    strings, or a ``WebSocketInit`` dict ``{"protocols", "dispatcher",
    "headers"}``. A repeated or invalid subprotocol raises a ``SyntaxError``
    :class:`DOMException`. Returns at once; the handshake runs in the
    background. Greenlet-safe; no method blocks.

    Where the handshake reaches an HTTP/2 connection (ALPN ``h2``, or an
    ``H2CClient``) whose server allows extended CONNECT, the WebSocket runs
    on one stream of it (RFC 8441, experimental); see ``docs/websocket.md``.
    """

    CONNECTING = CONNECTING
    OPEN = OPEN
    CLOSING = CLOSING
    CLOSED = CLOSED

    def __init__(self, url: Any, protocols: Any = None) -> None:
        super().__init__()
        _debug.setup_from_env()
        target = parse_url(url)
        dispatcher = headers = None
        if isinstance(protocols, dict):
            unknown = set(protocols) - _INIT_KEYS
            if unknown:
                raise TypeError(f"unknown WebSocketInit field {sorted(unknown)[0]!r}")
            dispatcher = protocols.get("dispatcher")
            headers = protocols.get("headers")
            protocols = protocols.get("protocols")
        names = parse_protocols(protocols)
        if headers is not None:
            header_pairs(headers)  # invalid headers raise here, not in the background
        dispatcher, owned = resolve_dispatcher(dispatcher, target)
        self._target = target
        self._binary_type = "blob"
        self._session = Session(self, target, names, dispatcher, owned, headers)

    # -- state ------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The URL, serialised (``ws://host:port/path``)."""
        return self._target.url

    @property
    def ready_state(self) -> int:
        """CONNECTING (0), OPEN (1), CLOSING (2) or CLOSED (3)."""
        return self._session.state

    @property
    def buffered_amount(self) -> int:
        """Bytes passed to :meth:`send` and not yet handed to the network."""
        return self._session.buffered_amount

    @property
    def extensions(self) -> str:
        """The server's ``Sec-WebSocket-Extensions`` value; ``""`` until open."""
        return self._session.negotiated.extensions

    @property
    def protocol(self) -> str:
        """The subprotocol the server chose; ``""`` until open or if none."""
        return self._session.negotiated.protocol

    @property
    def binary_type(self) -> str:
        """``"blob"`` (binary messages are :class:`Blob`) or ``"arraybuffer"`` (bytes).
        Any other value assigned resets it to ``"blob"``."""
        return self._binary_type

    @binary_type.setter
    def binary_type(self, value: Any) -> None:
        self._binary_type = "arraybuffer" if value == "arraybuffer" else "blob"

    # -- handler properties ------------------------------------------------------
    @property
    def onopen(self) -> Any:
        """The ``open`` event handler, or None; assigning replaces it."""
        return self._get_handler("open")

    @onopen.setter
    def onopen(self, fn: Any) -> None:
        self._set_handler("open", fn)

    @property
    def onmessage(self) -> Any:
        """The ``message`` event handler, or None; assigning replaces it."""
        return self._get_handler("message")

    @onmessage.setter
    def onmessage(self, fn: Any) -> None:
        self._set_handler("message", fn)

    @property
    def onerror(self) -> Any:
        """The ``error`` event handler, or None; assigning replaces it."""
        return self._get_handler("error")

    @onerror.setter
    def onerror(self, fn: Any) -> None:
        self._set_handler("error", fn)

    @property
    def onclose(self) -> Any:
        """The ``close`` event handler, or None; assigning replaces it."""
        return self._get_handler("close")

    @onclose.setter
    def onclose(self, fn: Any) -> None:
        self._set_handler("close", fn)

    # -- operations --------------------------------------------------------------
    def send(self, data: Any) -> None:
        """Send a ``str`` as a text frame, bytes-like data or a :class:`Blob` as a
        binary frame. Never blocks: what the socket cannot take at once is
        queued and counted in :attr:`buffered_amount`.

        Raises an ``InvalidStateError`` :class:`DOMException` while CONNECTING;
        does nothing while CLOSING or CLOSED. Other types raise ``TypeError``.
        """
        session = self._session
        if isinstance(data, str):
            if session.state == OPEN:
                session.send_text(data)
                return
        else:
            payload = to_bytes(data)
            if payload is None:
                raise TypeError(
                    f"send() takes str, bytes-like data or a Blob, got {type(data).__name__}"
                )
            if session.state == OPEN:
                session.send_binary(payload)
                return
        if session.state == CONNECTING:
            raise DOMException("the WebSocket is still connecting", "InvalidStateError")

    def close(self, code: int | None = None, reason: str = "") -> None:
        """Start the closing handshake; never blocks (wait for the ``close`` event).

        ``code`` is clamped to 0–65535 and must then be 1000 or 3000–4999
        (else an ``InvalidAccessError`` DOMException); ``reason`` must fit in
        123 UTF-8 bytes (else ``SyntaxError``). Without a code no status is
        sent. While CONNECTING the connection fails (``error`` and ``close``
        follow); while CLOSING or CLOSED nothing happens.
        """
        code, reason = check_close(code, reason, clamp=True)
        self._session.close(code, reason)

    # -- session callbacks (on the session's greenlet) -------------------------------
    def _ws_open(self) -> None:
        self.dispatch_event(Event("open"))

    def _ws_message(self, data: Any, is_text: bool) -> None:
        if not is_text and self._binary_type == "blob":
            data = Blob((data,))
        self.dispatch_event(MessageEvent._fast(data, self._target.origin))

    def _ws_closing(self) -> None:
        return None

    def _ws_closed(
        self, code: int, reason: str, was_clean: bool, error: BaseException | None
    ) -> None:
        if error is not None:
            self.dispatch_event(ErrorEvent("error", error=error, message=str(error)))
        self.dispatch_event(CloseEvent("close", code=code, reason=reason, was_clean=was_clean))

    def __repr__(self) -> str:
        states = ("CONNECTING", "OPEN", "CLOSING", "CLOSED")
        return f"<WebSocket {self.url} {states[self.ready_state]}>"


def ping(websocket: WebSocket, payload: Any = None) -> None:
    """Send a ping frame on an open :class:`WebSocket`; a no-op in any other state.

    ``payload`` is bytes-like data of at most 125 bytes (``TypeError``
    otherwise). The server's pong is handled (and logged on the
    ``greenhttp.websocket`` logger). Never blocks; greenlet-safe.
    """
    if not isinstance(websocket, WebSocket):
        raise TypeError(f"ping() takes a WebSocket, got {type(websocket).__name__}")
    if payload is None:
        data = b""
    elif isinstance(payload, (bytes, bytearray, memoryview)):
        data = bytes(payload)
    else:
        raise TypeError("Expected buffer payload")
    if len(data) > 125:
        raise TypeError("A PING frame cannot have a body larger than 125 bytes.")
    websocket._session.ping(data)
