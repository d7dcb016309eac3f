"""greenhttp._websocket (internal): ``WebSocket``, ``WebSocketStream``, ``ping``.

``websocket`` and ``stream`` are the two public faces; ``transport`` runs the
connection (one reader greenlet, wsproto framing, the closing handshake);
``handshake`` builds and checks the opening handshake; ``events`` holds the
event classes.
"""

from .events import CloseEvent, ErrorEvent, MessageEvent
from .stream import WebSocketStream
from .websocket import WebSocket, ping

__all__ = ["WebSocket", "WebSocketStream", "ping", "MessageEvent", "CloseEvent", "ErrorEvent"]
