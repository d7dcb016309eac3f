"""close(), the closing handshake, ready_state transitions (spec 3.1), and send() by state."""

from __future__ import annotations

import struct

import gevent
import pytest
from wsutil import close_frame, frame

from greenhttp import DOMException, WebSocket


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (999, "InvalidAccessError"),
        (1001, "InvalidAccessError"),
        (2999, "InvalidAccessError"),
        (5000, "InvalidAccessError"),
        (66536, "InvalidAccessError"),
        (-5, "InvalidAccessError"),
    ],
)
def test_bad_close_codes(ws_server, record, code, name):
    server = ws_server()
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    with pytest.raises(DOMException) as info:
        ws.close(code)
    assert info.value.name == name
    assert ws.ready_state == WebSocket.OPEN
    ws.close()
    rec.wait_closed()


def test_close_reason_limit(ws_server, record):
    server = ws_server()
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    with pytest.raises(DOMException) as info:
        ws.close(1000, "é" * 62)  # 124 bytes
    assert info.value.name == "SyntaxError"
    with pytest.raises(TypeError):
        ws.close("1000")
    ws.close(1000, "é" * 61 + "x")  # 123 bytes: fine
    f = rec.wait_closed()
    assert f.was_clean and f.code == 1000


@pytest.mark.parametrize(
    ("args", "payload"),
    [
        ((), b""),
        ((None, ""), b""),
        ((1000,), struct.pack("!H", 1000)),
        ((None, "why"), struct.pack("!H", 1000) + b"why"),  # a reason needs a code: 1000
        ((4999, "x"), struct.pack("!H", 4999) + b"x"),
        ((1000.4,), struct.pack("!H", 1000)),  # WebIDL [Clamp] rounds
        ((3000.5,), struct.pack("!H", 3000)),  # ties to even
    ],
)
def test_close_frame_on_the_wire(ws_server, record, args, payload):
    got = []

    def script(peer):
        got.append(peer.answer_close().payload)

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    ws.close(*args)
    assert ws.ready_state == WebSocket.CLOSING
    close = rec.wait_closed()
    assert got == [payload]
    assert close.was_clean
    assert close.code == (struct.unpack("!H", payload[:2])[0] if payload else 1005)
    assert rec.types == ["open", "close"]


def test_close_twice_is_a_no_op(ws_server, record):
    got = []

    def script(peer):
        got.append(peer.expect_close())
        with gevent.Timeout(0.2, False):  # no second close frame may follow
            got.append(peer.read_frame())
        peer.send(close_frame(1000))
        peer.conn.close()

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    ws.close(1000)
    ws.close(3000, "again")
    rec.wait_closed()
    ws.close(3001)
    assert [f.close_code for f in got] == [1000]
    assert ws.ready_state == WebSocket.CLOSED


def test_close_while_connecting_fails_the_connection(ws_server, record):
    gate = gevent.event.Event()

    def response(req):
        gate.wait(5)
        return b"HTTP/1.1 500 Nope\r\nContent-Length: 0\r\n\r\n"

    server = ws_server(response=response)
    ws = WebSocket(server.url())
    rec = record(ws)
    assert ws.ready_state == WebSocket.CONNECTING
    ws.close(1000, "bye")
    assert ws.ready_state == WebSocket.CLOSING
    close = rec.wait_closed()
    gate.set()
    assert rec.types == ["error", "close"]
    assert (close.code, close.was_clean) == (1006, False)
    assert ws.ready_state == WebSocket.CLOSED


def test_send_while_connecting_raises_invalid_state(ws_server, record):
    server = ws_server()
    ws = WebSocket(server.url())
    with pytest.raises(DOMException) as info:
        ws.send("too early")
    assert info.value.name == "InvalidStateError"
    with pytest.raises(TypeError):  # the type is checked first
        ws.send(42)
    rec = record(ws)
    rec.wait_open()
    ws.close()
    rec.wait_closed()


def test_send_while_closing_or_closed_is_ignored(ws_server, record):
    got = []

    def script(peer):
        got.append(peer.answer_close())

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    ws.close()
    ws.send("ignored")
    ws.send(b"ignored")
    assert ws.buffered_amount == 0
    rec.wait_closed()
    ws.send("ignored")
    assert ws.buffered_amount == 0
    assert got[0].opcode == 8


def test_messages_after_close_are_not_delivered(ws_server, record):
    def script(peer):
        f = peer.expect_close()
        peer.send(frame(1, b"late"))  # a server may still send before its close
        peer.send(frame(8, f.payload[:2]))
        peer.conn.close()

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    ws.close(1000)
    rec.wait_closed()
    assert rec.messages == []
    assert rec.events[-1].was_clean


def test_server_close_sets_closing_until_tcp_closes(ws_server, record):
    seen = []

    def script(peer):
        peer.send(close_frame(1001, b"going away"))
        peer.expect_close()
        seen.append(ws.ready_state)
        ws.send("dropped")  # ignored while CLOSING
        peer.conn.close()

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    close = rec.wait_closed()
    assert seen == [WebSocket.CLOSING]
    assert (close.code, close.reason, close.was_clean) == (1001, "going away", True)


def test_server_that_never_answers_the_close(ws_server, record, fast_close):
    def script(peer):
        peer.expect_close()
        peer.wait_eof()  # never answers

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    ws.close(1000)
    close = rec.wait_closed()
    assert rec.types == ["open", "error", "close"]
    assert (close.code, close.was_clean) == (1006, False)


def test_server_that_never_closes_tcp(ws_server, record, fast_close):
    """Both close frames crossed: clean, even though the client had to drop TCP itself."""

    def script(peer):
        f = peer.expect_close()
        peer.send(frame(8, f.payload))
        peer.wait_eof()

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    ws.close(4000, "bye")
    close = rec.wait_closed()
    assert (close.code, close.reason, close.was_clean) == (4000, "bye", True)


def test_tcp_loss_without_a_close_frame(ws_server, record):
    def script(peer):
        peer.send(frame(1, b"last words"))
        peer.conn.close()

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    close = rec.wait_closed()
    assert rec.types == ["open", "message", "error", "close"]
    assert (close.code, close.reason, close.was_clean) == (1006, "", False)
    assert rec.events[2].error.close_code == 1006


def test_failure_half_closes_after_the_close_frame(ws_server, record):
    """RFC 6455 §7.1.7: after failing, the client sends its close frame and stops
    writing; it waits for the server to close TCP."""
    seen = []

    def script(peer):
        peer.send(frame(1, b"\xff"))
        f = peer.read_frame()
        seen.append(f.close_code)
        seen.append(peer.read_frame(timeout=2))  # EOF: the client shut its write side
        peer.conn.close()

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_closed()
    assert seen == [1007, None]


def test_the_socket_is_closed_after_close(ws_server, record):
    def script(peer):
        peer.answer_close()

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    ws.close()
    rec.wait_closed()
    assert ws._session._transport.closed
