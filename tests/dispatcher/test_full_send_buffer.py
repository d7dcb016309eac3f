"""A request written while its socket's send buffer is full waits for room
(a writer greenlet sends it once the peer reads); it does not fail."""

from __future__ import annotations

import socket as stdsocket
from typing import Any

import gevent
from gevent import socket as gsocket

from testkit import wait_for

RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


def test_a_request_written_into_a_full_send_buffer_waits_for_room(make_client: Any) -> None:
    ours, theirs = gsocket.socketpair()
    ours.setsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_SNDBUF, 4096)
    raw = ours._sock  # the plain socket under gevent's: fill its send buffer without waiting
    raw.setblocking(False)
    junk = 0
    for size in (65536, 4096, 256, 16, 1):  # down to no room for a single byte
        for _ in range(10_000):
            try:
                junk += raw.send(b"x" * size)
            except BlockingIOError:
                break
        else:
            raise AssertionError("the send buffer never filled")

    def connect(options: dict[str, Any], callback: Any = None) -> Any:
        if callback is not None:
            callback(None, ours)
        return ours

    def peer() -> bytes:
        received = b""
        while not received.endswith(b"\r\n\r\n"):
            chunk = theirs.recv(65536)
            assert chunk, "the client closed"
            received += chunk
        theirs.sendall(RESPONSE)
        return received

    client = make_client("http://127.0.0.1:1", connect=connect)
    caller = gevent.spawn(lambda: client.request(path="/after-junk", method="GET").body.bytes())
    # The peer reads nothing until the client has tried to send into the full buffer.
    wait_for(lambda: client._core._conn is not None and (client._core._conn.writing or client._core._conn.destroyed), what="the write")
    reader = gevent.spawn(peer)
    with gevent.Timeout(5):
        assert caller.get() == b"ok"
        received = reader.get()
    assert received[:junk] == b"x" * junk
    assert received[junk:].startswith(b"GET /after-junk HTTP/1.1\r\n")
    theirs.close()
