"""Audit of the WebSocket client against RFC 6455, RFC 7692 and the WHATWG shape."""

from __future__ import annotations

import gevent
import pytest
from wsutil import close_frame, failed_with, frame, run

from greenhttp import DOMException, WebSocket, WebSocketError, WebSocketStream
from greenhttp._websocket import stream as stream_module


@pytest.fixture(autouse=True)
def warned(monkeypatch):
    monkeypatch.setattr(stream_module, "_warned", True)


# -- frames ---------------------------------------------------------------------------------


def test_utf8_sequence_split_across_fragments_is_delivered(ws_server, record):
    text = "h\u00e9llo \u20ac \U0001f600"
    raw = text.encode("utf-8")
    # Cut inside the 2-, 3- and 4-byte sequences; a ping sits between two fragments.
    cuts = [2, 9, 12]
    parts = [raw[: cuts[0]], raw[cuts[0] : cuts[1]], raw[cuts[1] : cuts[2]], raw[cuts[2] :]]
    frames = [frame(1, parts[0], fin=False), frame(9, b"p")]
    frames += [frame(0, p, fin=False) for p in parts[1:-1]] + [frame(0, parts[-1])]
    rec, sent = run(ws_server, record, frames + [close_frame(1000)])
    assert rec.messages == [text]
    assert [f.opcode for f in sent] == [0xA, 8]
    assert sent[0].payload == b"p"
    close = rec.events[-1]
    assert (close.code, close.was_clean) == (1000, True)


def test_truncated_utf8_at_the_end_of_a_fragmented_text_fails_with_1007(ws_server, record):
    frames = [frame(1, b"ok\xe2", fin=False), frame(0, b"\x82")]  # 3-byte sequence cut short
    rec, sent = run(ws_server, record, frames)
    failed_with(rec, sent, 1007)
    assert rec.messages == []


def test_a_large_binary_frame_arriving_in_pieces_is_bytes(ws_server, record):
    payload = bytes(range(256)) * 1024  # 256 KiB: several reads of the socket
    rec, _ = run(
        ws_server, record, [frame(2, payload), close_frame(1000)], binary_type="arraybuffer"
    )
    [data] = rec.messages
    assert type(data) is bytes and data == payload


def test_invalid_utf8_in_the_close_reason_fails_with_1007(ws_server, record):
    rec, sent = run(ws_server, record, [close_frame(1000, b"bad \xff")])
    failed_with(rec, sent, 1007)


@pytest.mark.parametrize("code", [1004, 1005, 1006, 1015, 1016, 2999, 5000, 0xFFFF])
def test_reserved_or_unassigned_close_codes_received_fail_with_1002(ws_server, record, code):
    rec, sent = run(ws_server, record, [close_frame(code)])
    failed_with(rec, sent, 1002)


def test_server_close_with_reason_gives_the_close_event_fields(ws_server, record):
    rec, sent = run(ws_server, record, [frame(1, b"m"), close_frame(4001, "bye \u00e9".encode())])
    assert rec.types == ["open", "message", "close"]
    close = rec.events[-1]
    assert (close.code, close.reason, close.was_clean) == (4001, "bye \u00e9", True)
    assert [(f.opcode, f.close_code) for f in sent] == [(8, 4001)]


def test_a_pong_but_no_message_after_the_client_sent_its_close(ws_server, record):
    """RFC 6455 §5.5.2: a ping is answered unless a close frame was *received*, so
    also between the client's close frame and the server's (undici's receiver.js
    too); a message there is not delivered; nothing after the server's close
    frame is processed."""
    got = []

    def script(peer):
        f = peer.expect_close()
        got.append(f.close_code)
        peer.send(
            frame(9, b"late ping")
            + frame(1, b"late text")
            + close_frame(3000)
            + frame(9, b"after the close")
        )
        try:
            pong = peer.read_frame(timeout=2)
            got.append((pong.opcode, pong.payload))
        except gevent.Timeout:
            got.append("no pong")
        try:
            got.append(peer.read_frame(timeout=0.3))  # the client waits for our FIN
        except gevent.Timeout:
            got.append("silent")
        peer.conn.close()

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    ws.close(3000, "r")
    assert ws.ready_state == WebSocket.CLOSING
    close = rec.wait_closed()
    assert got == [3000, (0xA, b"late ping"), "silent"]  # no pong after the server's close
    assert rec.types == ["open", "close"]
    assert (close.code, close.was_clean) == (3000, True)
    assert server.errors == []


def test_ready_state_is_closed_in_the_error_and_close_listeners(ws_server, record):
    states = []
    server = ws_server(lambda peer: peer.send(frame(1, b"x", mask=b"abcd")) or peer.wait_eof())
    ws = WebSocket(server.url())
    ws.onerror = lambda ev: states.append(("error", ws.ready_state))
    ws.onclose = lambda ev: states.append(("close", ws.ready_state))
    rec = record(ws)
    rec.wait_closed()
    assert states == [("error", WebSocket.CLOSED), ("close", WebSocket.CLOSED)]
    assert rec.events[-2].error.close_code == 1002


# -- close() arguments -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "name"),
    [(999, "InvalidAccessError"), (1001, "InvalidAccessError"), (2999, "InvalidAccessError"),
     (5000, "InvalidAccessError"), (-1, "InvalidAccessError"), (70000, "InvalidAccessError"),
     (float("nan"), "InvalidAccessError")],
)
def test_close_code_outside_the_allowed_ranges_raises(ws_server, record, code, name):
    server = ws_server()
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    with pytest.raises(DOMException) as info:
        ws.close(code)
    assert info.value.name == name
    with pytest.raises(DOMException) as info:
        ws.close(1000, "\u00e9" * 62)  # 124 UTF-8 bytes
    assert info.value.name == "SyntaxError"
    assert ws.ready_state == WebSocket.OPEN  # nothing was started
    ws.close(1000, "\u00e9" * 61 + "x")  # 123 bytes: fine
    assert rec.wait_closed().was_clean


# -- WebSocketStream ------------------------------------------------------------------------


def _echo_close(captured):
    def script(peer):
        f = peer.expect_close()
        captured.append((f.close_code, f.close_reason))
        peer.send(frame(8, f.payload[:2]))
        peer.conn.close()

    return script


def _failed_stream_error(ws_server):
    """A WebSocketError the library made for a failed connection (close_code 1006)."""
    server = ws_server(lambda peer: peer.conn.close())
    s = WebSocketStream(server.url())
    s.opened.get(timeout=5)
    with pytest.raises(WebSocketError) as info:
        s.closed.get(timeout=5)
    assert info.value.close_code == 1006
    return info.value


@pytest.mark.parametrize("how", ["abort", "cancel"])
def test_a_stream_never_sends_close_code_1006(ws_server, how):
    err = _failed_stream_error(ws_server)
    captured: list = []
    server = ws_server(_echo_close(captured))
    s = WebSocketStream(server.url())
    opened = s.opened.get(timeout=5)
    if how == "abort":
        opened.writable.abort(err)
    else:
        opened.readable.cancel(err)
    with gevent.Timeout(5):
        try:
            s.closed.get()
        except WebSocketError:
            pass
    assert len(captured) == 1
    assert captured[0][0] not in (1005, 1006, 1015)
    assert server.errors == []


def test_stream_abort_with_a_websocket_error_sends_its_code_and_reason(ws_server):
    captured: list = []
    server = ws_server(_echo_close(captured))
    s = WebSocketStream(server.url())
    opened = s.opened.get(timeout=5)
    opened.writable.abort(WebSocketError("x", {"close_code": 4321, "reason": "why"}))
    info = s.closed.get(timeout=5)
    assert captured == [(4321, b"why")]
    assert info.close_code == 4321


# -- WebSocketError ----------------------------------------------------------------------------


def test_websocket_error_reason_is_a_usv_string():
    err = WebSocketError("m", {"close_code": 4000, "reason": "a\ud800b"})
    assert err.reason == "a\ufffdb"
    assert err.close_code == 4000


def test_aborting_the_signal_after_open_changes_nothing(ws_server):
    def script(peer):
        while True:
            f = peer.read_frame()
            if f is None:
                return
            if f.opcode == 8:
                peer.send(frame(8, f.payload))
                peer.conn.close()
                return
            peer.send(frame(f.opcode, f.payload))

    from greenhttp import AbortController

    server = ws_server(script)
    ctrl = AbortController()
    s = WebSocketStream(server.url(), signal=ctrl.signal)
    opened = s.opened.get(timeout=5)
    ctrl.abort()
    gevent.sleep(0.01)
    opened.writable.write("still open")
    with gevent.Timeout(5):
        assert opened.readable.read() == "still open"
    s.close({"close_code": 1000})
    assert s.closed.get(timeout=5).close_code == 1000


def test_server_that_closes_tcp_right_after_its_close_frame_is_a_clean_close(ws_server, record):
    def script(peer):
        peer.send(close_frame(1001, b"going"))
        peer.conn.close()

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    close = rec.wait_closed()
    assert rec.types == ["open", "close"]
    assert (close.code, close.reason, close.was_clean) == (1001, "going", True)


@pytest.mark.parametrize("reason", [5, 0, b"bytes", []])
def test_websocket_error_checks_the_reason_like_close(ws_server, record, reason):
    with pytest.raises(TypeError):
        WebSocketError("m", {"close_code": 4000, "reason": reason})
    server = ws_server()
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    with pytest.raises(TypeError):
        ws.close(4000, reason)
    ws.close()
    rec.wait_closed()


# -- subprotocol negotiation ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offered", "chosen", "ok"),
    [
        (["chat", "superchat"], "superchat", True),
        (["chat"], " chat ", True),  # optional whitespace around the value
        (["chat"], "CHAT", False),  # not the offered token
        (["chat", "superchat"], "chat, superchat", False),  # the server must choose one
        ([], "chat", False),
        (["chat"], "", False),
    ],
)
def test_the_server_must_choose_one_offered_subprotocol(ws_server, record, offered, chosen, ok):
    server = ws_server(protocol=chosen)
    ws = WebSocket(server.url(), offered)
    rec = record(ws)
    if ok:
        rec.wait_open()
        assert ws.protocol == chosen.strip()
        ws.close()
        assert rec.wait_closed().was_clean
    else:
        close = rec.wait_closed()
        assert rec.types == ["error", "close"]
        assert (close.code, close.was_clean) == (1006, False)
        assert ws.protocol == ""


@pytest.mark.parametrize("signal", [5, "abort", object()])
def test_a_stream_with_a_signal_that_is_not_one_raises_at_construction(ws_server, signal):
    server = ws_server()
    with pytest.raises(TypeError, match="signal"):
        WebSocketStream(server.url(), signal=signal)
    with pytest.raises(TypeError, match="signal"):
        WebSocketStream(server.url(), {"signal": signal})
    assert server.peers == []  # nothing was attempted
