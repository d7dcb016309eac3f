"""WebSocketStream behaviour pinned by the audit (already correct when written)."""

from __future__ import annotations

import pytest
from wsutil import close_frame, frame

import greenhttp
from greenhttp import DOMException, WebSocketError, WebSocketStream
from greenhttp._websocket import stream as stream_module


@pytest.fixture(autouse=True)
def warned(monkeypatch):
    monkeypatch.setattr(stream_module, "_warned", True)


def test_server_close_delivers_queued_messages_then_resolves_closed(ws_server):
    """The server sends text, binary, a ping and its close (4000 "bye"): the readable
    yields str then bytes (the pong never surfaces), then ends; ``closed`` is a
    CloseInfo with the server's code and reason; the client echoed the code only;
    writing afterwards raises InvalidStateError."""
    echoed = []

    def script(peer):
        peer.send(frame(1, "héllo".encode()) + frame(2, b"\x00\x01") + frame(9, b"p?"))
        peer.send(close_frame(4000, b"bye"))
        while True:
            f = peer.read_frame()
            assert f is not None
            echoed.append((f.opcode, f.payload))
            if f.opcode == 8:
                break
        peer.conn.close()

    server = ws_server(script)
    s = WebSocketStream(server.url())
    opened = s.opened.get(timeout=5)
    info = s.closed.get(timeout=5)
    assert (info.close_code, info.reason) == (4000, "bye")
    assert info == {"close_code": 4000, "reason": "bye"}
    assert list(opened.readable) == ["héllo", b"\x00\x01"]
    assert opened.readable.read() is None  # and stays ended
    assert echoed == [(0xA, b"p?"), (8, b"\x0f\xa0")]
    with pytest.raises(DOMException) as err:
        opened.writable.write("late")
    assert err.value.name == "InvalidStateError"
    s.close({"close_code": 1000})  # after the close: a no-op
    assert server.errors == []


def test_protocol_error_rejects_closed_and_errors_the_readable_after_its_messages(ws_server):
    """A text frame that is not UTF-8 fails the connection with 1007: the message
    before it is still read, then the readable raises the WebSocketError that
    ``closed`` raises (1006: the server sent no close frame back)."""
    sent = []

    def script(peer):
        peer.send(frame(1, b"ok") + frame(1, b"\xff"))
        sent.append(peer.expect_close())
        peer.conn.close()

    server = ws_server(script)
    s = WebSocketStream(server.url())
    opened = s.opened.get(timeout=5)
    with pytest.raises(WebSocketError) as closed:
        s.closed.get(timeout=5)
    assert (closed.value.close_code, closed.value.reason) == (1006, "")
    assert opened.readable.read() == "ok"
    with pytest.raises(WebSocketError) as read:
        opened.readable.read()
    assert read.value is closed.value
    assert sent[0].close_code == 1007


def test_close_with_a_code_and_a_reason_too_long_sends_nothing(ws_server):
    """close() checks before it acts: a bad code or an over-long reason raises and
    leaves the connection open; a later good close() then works."""
    got = []

    def script(peer):
        got.append(peer.answer_close().payload)

    server = ws_server(script)
    s = WebSocketStream(server.url())
    s.opened.get(timeout=5)
    with pytest.raises(DOMException) as err:
        s.close({"close_code": 1000, "reason": "é" * 62})  # 124 bytes
    assert err.value.name == "SyntaxError"
    with pytest.raises(DOMException) as err:
        s.close({"close_code": 1001})
    assert err.value.name == "InvalidAccessError"
    with pytest.raises(TypeError):
        s.close({"close_code": 65536})
    assert s._session.state == greenhttp.WebSocket.OPEN  # still open
    s.close({"close_code": 3000, "reason": "r"})
    assert s.closed.get(timeout=5) == {"close_code": 3000, "reason": "r"}
    assert got == [b"\x0b\xb8r"]
