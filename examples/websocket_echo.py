"""A WebSocket echo round trip: events, binary types, ping, a clean close, and
the same conversation through the (experimental) WebSocketStream.

It starts its own loopback echo server (gevent plus wsproto, the sans-IO
library greenhttp's WebSocket is built on), so it needs no network:

    python examples/websocket_echo.py
"""

from __future__ import annotations

import warnings

import gevent
import gevent.event
from gevent.server import StreamServer
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Request,
    TextMessage,
)

import greenhttp


def echo_server(sock, _address) -> None:
    """One connection of a tiny echo server: every message goes back as it came."""
    conn = WSConnection(ConnectionType.SERVER)
    while True:
        data = sock.recv(65536)
        conn.receive_data(data or None)
        for event in conn.events():
            if isinstance(event, Request):
                sock.sendall(conn.send(AcceptConnection()))
            elif isinstance(event, (TextMessage, BytesMessage)):
                sock.sendall(conn.send(event.__class__(data=event.data)))
            elif isinstance(event, Ping):
                sock.sendall(conn.send(event.response()))
            elif isinstance(event, CloseConnection):
                if conn.state.name == "REMOTE_CLOSING":
                    sock.sendall(conn.send(event.response()))
                sock.close()  # RFC 6455 §7.1.1: the server closes TCP first
                return
        if not data:
            return


def event_based(url: str) -> None:
    ws = greenhttp.WebSocket(url)
    ws.binary_type = "arraybuffer"  # binary messages as bytes (the default is Blob)
    closed = gevent.event.Event()
    replies: list[object] = []

    def on_open(event: object) -> None:
        print(f"open: {ws.url}, extensions {ws.extensions!r}")
        ws.send("hello, greenhttp")
        ws.send(b"\x00\x01\x02")
        greenhttp.ping(ws, b"are you there?")

    def on_message(event: greenhttp.MessageEvent) -> None:
        replies.append(event.data)
        print(f"message from {event.origin}: {event.data!r}")
        if len(replies) == 2:
            ws.close(1000, "done")  # starts the closing handshake; returns at once

    def on_close(event: greenhttp.CloseEvent) -> None:
        print(f"close: code {event.code}, reason {event.reason!r}, clean {event.was_clean}")
        closed.set()

    ws.onopen = on_open
    ws.onmessage = on_message
    ws.add_event_listener("close", on_close)
    ws.onerror = lambda event: print("error:", event.message)
    if not closed.wait(10):
        raise SystemExit("no close event")
    assert replies == ["hello, greenhttp", b"\x00\x01\x02"]
    assert ws.ready_state == greenhttp.WebSocket.CLOSED


def stream_based(url: str) -> None:
    # WebSocketStream warns once per process that it is experimental.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", greenhttp.ExperimentalWarning)
        wss = greenhttp.WebSocketStream(url)
    opened = wss.opened.get(timeout=10)  # blocks this greenlet until the handshake is done
    opened.writable.write("streamed text")
    opened.writable.write(b"streamed bytes")
    print("stream read:", opened.readable.read(), opened.readable.read())
    wss.close({"close_code": 1000, "reason": "bye"})
    print("stream closed:", wss.closed.get(timeout=10))


def main() -> int:
    server = StreamServer(("127.0.0.1", 0), echo_server)
    server.start()
    try:
        url = f"ws://127.0.0.1:{server.server_port}/echo"
        event_based(url)
        stream_based(url)
    finally:
        server.stop(timeout=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
