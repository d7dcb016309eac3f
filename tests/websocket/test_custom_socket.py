"""A WebSocket over a socket from a custom connector (``connect=``) whose write
fails with something other than an ``OSError``: the connection is reported
lost (an ``error`` event, then ``close`` with 1006), not left open and silent."""

from __future__ import annotations

import gevent

from greenhttp import WebSocket
from testkit import wrapping_connector


def test_a_custom_socket_failing_a_write_loses_the_connection(ws_server, record, make_client):
    def script(peer):
        while peer.read_frame() is not None:
            pass

    server = ws_server(script)
    connect = wrapping_connector([2])  # the handshake's write goes out, the first frame's fails
    client = make_client(f"http://127.0.0.1:{server.server.port}", connect=connect)
    ws = WebSocket(server.url(), {"dispatcher": client})
    rec = record(ws)
    rec.wait_open()
    ws.send("hello")
    with gevent.Timeout(5, AssertionError("the failed write went unnoticed")):
        rec.wait_closed()
    assert rec.types == ["open", "error", "close"]
    assert "the connection was lost: the wrapper broke" in rec.events[1].message
    assert rec.events[2].code == 1006
