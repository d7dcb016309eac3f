"""Frames against a scripted server: RFC 6455 §5 framing, fragmentation, UTF-8,
control frames, the limits of spec 2.1.2, and what the client puts on the wire."""

from __future__ import annotations

import os
import struct
import zlib

import gevent
import pytest
from wsutil import close_after, close_frame, deflate, failed_with, frame, run

import greenhttp
from greenhttp import Blob, WebSocket

# -- data frames ------------------------------------------------------------------------


def test_text_and_binary_messages(ws_server, record):
    frames = [frame(1, "héllo".encode()), frame(2, b"\x00\xff"), frame(1, b""), frame(2, b"")]
    rec, _ = run(ws_server, record, frames, then=close_after(4))
    assert rec.messages == ["héllo", Blob([b"\x00\xff"]), "", Blob()]
    assert all(e.origin == rec.ws.url.rstrip("/") for e in rec.events if e.type == "message")
    assert rec.types[0] == "open" and rec.types[-1] == "close" and "error" not in rec.types
    assert rec.events[-1].was_clean and rec.events[-1].code == 1000


def test_arraybuffer_binary_type_gives_bytes(ws_server, record):
    rec, _ = run(
        ws_server, record, [frame(2, b"abc")], binary_type="arraybuffer", then=close_after(1)
    )
    assert rec.messages == [b"abc"]


def test_binary_type_resets_to_blob(ws_server):
    server = ws_server()
    ws = WebSocket(server.url())
    assert ws.binary_type == "blob"
    ws.binary_type = "arraybuffer"
    assert ws.binary_type == "arraybuffer"
    ws.binary_type = "nonsense"
    assert ws.binary_type == "blob"
    ws.close()


@pytest.mark.parametrize("size", [125, 126, 65535, 65536, 1 << 20])
def test_payload_lengths(ws_server, record, size):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    rec, _ = run(
        ws_server, record, [frame(2, data)], binary_type="arraybuffer", then=close_after(1)
    )
    assert rec.messages == [data]


def test_fragmented_messages_with_interleaved_control_frames(ws_server, record):
    text = "κόσμε and more".encode()
    frames = [
        frame(1, text[:1], fin=False),  # splits a 2-byte UTF-8 sequence
        frame(9, b"mid"),  # a ping between fragments
        frame(0, text[1:5], fin=False),
        frame(0, b"", fin=False),
        frame(10, b"unsolicited"),
        frame(0, text[5:]),
        frame(2, b"ab", fin=False),
        frame(0, b"cd"),
    ]
    rec, sent = run(ws_server, record, frames, binary_type="arraybuffer", then=close_after(2))
    assert rec.messages == [text.decode(), b"abcd"]
    assert [(f.opcode, f.payload) for f in sent if f.opcode == 10] == [(10, b"mid")]


def test_pings_are_answered_with_the_same_payload(ws_server, record):
    rec, sent = run(
        ws_server,
        record,
        [frame(9, b""), frame(9, b"x" * 125), frame(1, b"done")],
        then=close_after(1),
    )
    pongs = [f.payload for f in sent if f.opcode == 10]
    assert pongs == [b"", b"x" * 125]


# -- protocol errors: 1002 ------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        frame(3, b"reserved opcode"),
        frame(7, b""),
        frame(11, b""),
        frame(15, b""),
        frame(1, b"x", rsv=0x40),  # RSV1 without permessage-deflate
        frame(1, b"x", rsv=0x20),
        frame(1, b"x", rsv=0x10),
        frame(9, b"x", rsv=0x40),
        frame(9, b"x", fin=False),  # a fragmented control frame
        frame(8, b"\x03\xe8", fin=False),
        frame(9, b"x" * 126),  # control payload > 125
        frame(10, b"x" * 126),
        frame(8, b"\x03\xe8" + b"x" * 124),
        frame(0, b"continuation without a start"),
        frame(1, b"hello", mask=b"abcd"),  # servers must not mask
        frame(1, b"a", fin=False) + frame(1, b"b"),  # new message inside a fragmented one
        frame(2, b"a", fin=False) + frame(2, b"b", fin=False),
        frame(1, b"a", fin=False) + frame(0, b"b") + frame(0, b"c"),
        frame(8, b"\x03"),  # a close frame with a 1-byte payload
        bytes([0x82, 126, 0, 5]) + b"short",  # a length that fits in 7 bits, sent in 16
        bytes([0x82, 127, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]),  # one that fits in 16, sent in 64
        bytes([0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1]),  # a 64-bit length with the top bit set
    ],
)
def test_protocol_errors_fail_with_1002(ws_server, record, bad):
    rec, sent = run(ws_server, record, [bad, frame(1, b"never delivered")])
    failed_with(rec, sent, 1002)
    assert "never delivered" not in rec.messages


@pytest.mark.parametrize(
    "code", [0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535]
)
def test_invalid_close_codes_fail_with_1002(ws_server, record, code):
    rec, sent = run(ws_server, record, [close_frame(code)])
    failed_with(rec, sent, 1002)


@pytest.mark.parametrize(
    "code",
    [
        1000,
        1001,
        1002,
        1003,
        1007,
        1008,
        1009,
        1010,
        1011,
        1012,
        1013,
        1014,
        3000,
        3999,
        4000,
        4999,
    ],
)
def test_valid_close_codes_are_echoed(ws_server, record, code):
    def script(peer):
        peer.send(close_frame(code, "ok ✓".encode()))
        f = peer.expect_close()
        assert (f.close_code, f.close_reason) == (code, b"")
        peer.conn.close()

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    close = rec.wait_closed()
    assert (close.code, close.reason, close.was_clean) == (code, "ok ✓", True)
    assert rec.types == ["open", "close"]
    assert not server.errors


def test_empty_close_frame_is_answered_with_an_empty_one(ws_server, record):
    states = []

    def script(peer):
        peer.send(close_frame())
        f = peer.expect_close()
        assert f.payload == b""
        gevent.sleep(0.05)
        states.append(ws.ready_state)  # the client waits for the server to close TCP
        peer.conn.close()

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    close = rec.wait_closed()
    assert (close.code, close.reason, close.was_clean) == (1005, "", True)
    assert states == [WebSocket.CLOSING]
    assert not server.errors


# -- UTF-8: 1007 ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frames",
    [
        [frame(1, b"\xff")],
        [
            frame(1, b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80edited")
        ],  # a surrogate
        [frame(1, b"\xc0\xaf")],  # overlong
        [frame(1, b"\xf4\x90\x80\x80")],  # > U+10FFFF
        [frame(1, b"ok\xe2\x82", fin=True)],  # truncated at the end of the message
        [frame(1, b"\xce", fin=False), frame(0, b"\x41")],  # broken across fragments
        [close_frame(1000, b"\xff")],  # invalid close reason
    ],
)
def test_invalid_utf8_fails_with_1007(ws_server, record, frames):
    rec, sent = run(ws_server, record, frames)
    failed_with(rec, sent, 1007)
    assert rec.messages == []


def test_invalid_utf8_fails_fast_inside_a_fragmented_message(ws_server, record):
    """The first fragment is already invalid: the client fails before the rest arrives."""
    rec, sent = run(ws_server, record, [frame(1, b"ok\xed\xa0\x80", fin=False)])
    failed_with(rec, sent, 1007)


# -- limits: 1008 / 1009 --------------------------------------------------------------------


def test_max_payload_size_checks_the_header_before_the_payload(ws_server, record, make_client):
    def script(peer):
        peer.send(frame(2, b"", length=101)[:2])  # only the header: 101 bytes announced
        f = peer.expect_close()
        assert f.close_code == 1009
        peer.send(frame(8, f.payload[:2]))
        peer.conn.close()

    server = ws_server(script)
    client = make_client(
        f"http://127.0.0.1:{server.server.port}", web_socket={"max_payload_size": 100}
    )
    ws = WebSocket(server.url(), {"dispatcher": client})
    rec = record(ws)
    rec.wait_closed()
    assert rec.types == ["open", "error", "close"]
    assert isinstance(rec.events[1].error.__cause__, greenhttp.errors.MessageSizeExceededError)
    assert not server.errors


def test_max_payload_size_counts_all_fragments(ws_server, record, make_client):
    server_port = []

    def dispatcher_for(server):
        return make_client(
            f"http://127.0.0.1:{server.server.port}", web_socket={"max_payload_size": 100}
        )

    frames = [frame(2, b"x" * 60, fin=False), frame(0, b"x" * 40, fin=False), frame(0, b"x")]
    sent = []

    def script(peer):
        for f in frames:
            peer.send(f)
        sent.append(peer.expect_close())
        peer.conn.close()

    server = ws_server(script)
    server_port.append(server)
    ws = WebSocket(server.url(), {"dispatcher": dispatcher_for(server)})
    rec = record(ws)
    rec.wait_closed()
    assert sent[0].close_code == 1009
    assert rec.messages == []
    assert str(rec.events[-2].error) == "a message larger than max_payload_size=100 bytes"


def test_a_message_at_the_limit_is_delivered(ws_server, record, make_client):
    def script(peer):
        peer.send(frame(2, b"x" * 60, fin=False) + frame(0, b"y" * 40))
        peer.answer_close()

    server = ws_server(script)
    client = make_client(
        f"http://127.0.0.1:{server.server.port}", web_socket={"max_payload_size": 100}
    )
    ws = WebSocket(server.url(), {"dispatcher": client})
    ws.binary_type = "arraybuffer"
    rec = record(ws)
    rec.wait_open()
    close_after(1)(ws, rec)
    rec.wait_closed()
    assert rec.messages == [b"x" * 60 + b"y" * 40]


def test_max_fragments(ws_server, record, make_client):
    def script(peer):
        peer.send(frame(1, b"a", fin=False) + frame(0, b"b", fin=False) + frame(0, b"c"))  # 3: fine
        peer.send(b"".join(frame(0 if i else 1, b"x", fin=False) for i in range(4)))  # 4: too many
        f = peer.expect_close()
        assert f.close_code == 1008
        peer.conn.close()

    server = ws_server(script)
    client = make_client(f"http://127.0.0.1:{server.server.port}", web_socket={"max_fragments": 3})
    ws = WebSocket(server.url(), {"dispatcher": client})
    rec = record(ws)
    rec.wait_closed()
    assert rec.messages == ["abc"]
    assert rec.events[-2].error.close_code == 1008
    assert str(rec.events[-2].error) == "a message in more than max_fragments=3 frames"
    assert not server.errors


def _continued_compressed_message() -> bytes:
    """A compressed message whose first frame inflates to 900 bytes; the second
    frame's payload (about 205 bytes of incompressible data) overshoots 1000 bytes."""
    c = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
    first = c.compress(b"a" * 900) + c.flush(zlib.Z_SYNC_FLUSH)
    second = c.compress(os.urandom(200)) + c.flush(zlib.Z_SYNC_FLUSH)
    assert len(second) > 100
    return frame(2, first, rsv=0x40, fin=False) + frame(0, second[:-4])


# undici's texts (lib/web/websocket/receiver.js, permessage-deflate.js): the close
# frame a server receives for each limit.
LIMIT_FAILURES = {
    "fragments": (
        frame(1, b"a", fin=False) + frame(0, b"a", fin=False) * 3,
        {"max_fragments": 3},
        None,
        1008,
        "Too many message fragments",
    ),
    "one frame": (
        frame(2, b"x" * 2000),
        {"max_payload_size": 1000},
        None,
        1009,
        "Payload size exceeds maximum allowed size",
    ),
    "fragments together": (
        frame(2, b"x" * 600, fin=False) + frame(0, b"x" * 600),
        {"max_payload_size": 1000},
        None,
        1009,
        "Payload size exceeds maximum allowed size",
    ),
    "compressed frame": (
        frame(2, b"", rsv=0x40, length=2000)[:4],  # the header only
        {"max_payload_size": 1000},
        "permessage-deflate",
        1009,
        "Payload size exceeds maximum allowed size",
    ),
    "compressed frame after inflated ones": (
        _continued_compressed_message(),
        {"max_payload_size": 1000},
        "permessage-deflate",
        1009,
        "Payload size exceeds maximum allowed size",
    ),
    "inflated": (
        frame(2, deflate(b"\x00" * 100_000), rsv=0x40),
        {"max_payload_size": 1000},
        "permessage-deflate",
        1009,
        "Max decompressed message size exceeded",
    ),
    "frame over 2**31 - 1 bytes, no limit": (
        frame(2, b"", length=2**31)[:10],  # the header only
        {"max_payload_size": 0},
        None,
        1009,
        "Received payload length > 2^31 bytes.",
    ),
}


@pytest.mark.parametrize("case", list(LIMIT_FAILURES))
def test_limit_failures_close_with_the_original_reasons(ws_server, record, make_client, case):
    data, limits, extensions, code, reason = LIMIT_FAILURES[case]
    sent = []

    def script(peer):
        peer.send(data)
        sent.append(peer.expect_close())
        peer.conn.close()

    server = ws_server(script, extensions=extensions)
    client = make_client(f"http://127.0.0.1:{server.server.port}", web_socket=limits)
    rec = record(WebSocket(server.url(), {"dispatcher": client}))
    rec.wait_closed()
    assert not server.errors
    assert (sent[0].close_code, sent[0].close_reason.decode()) == (code, reason)
    # The events, as the original's: no close frame was received (1006, no reason);
    # the error (greenhttp's WebSocketError) carries the code and reason it sent.
    assert rec.types == ["open", "error", "close"]
    error = rec.events[1].error
    assert (error.close_code, error.reason) == (code, reason)
    close = rec.events[2]
    assert (close.code, close.reason, close.was_clean) == (1006, "", False)
    if code == 1009:
        assert isinstance(error.__cause__, greenhttp.errors.MessageSizeExceededError)
        assert str(error.__cause__) == reason


def test_zero_disables_the_limits(ws_server, record, make_client):
    def script(peer):
        peer.send(b"".join(frame(0 if i else 2, b"z" * 1000, fin=i == 49) for i in range(50)))
        peer.answer_close()

    server = ws_server(script)
    client = make_client(
        f"http://127.0.0.1:{server.server.port}",
        web_socket={"max_fragments": 0, "max_payload_size": 0},
    )
    ws = WebSocket(server.url(), {"dispatcher": client})
    ws.binary_type = "arraybuffer"
    rec = record(ws)
    rec.wait_open()
    close_after(1)(ws, rec)
    rec.wait_closed()
    assert rec.messages == [b"z" * 50000]


# -- what the client sends --------------------------------------------------------------


def test_client_frames_are_masked_single_and_uncompressed(ws_server, record):
    big = "ü" * 40000

    def then(ws, rec):
        ws.send("hi")
        ws.send(b"\x01\x02")
        ws.send(bytearray(b"ba"))
        ws.send(memoryview(b"mv"))
        ws.send(Blob([b"bl", "ob"]))
        ws.send(big)
        ws.close(3000, "done")

    rec, sent = run(ws_server, record, [], extensions="permessage-deflate", then=then)
    data = [(f.fin, f.rsv, f.opcode, f.payload) for f in sent]
    assert data == [
        (True, 0, 1, b"hi"),
        (True, 0, 2, b"\x01\x02"),
        (True, 0, 2, b"ba"),
        (True, 0, 2, b"mv"),
        (True, 0, 2, b"blob"),
        (True, 0, 1, big.encode()),
        (True, 0, 8, struct.pack("!H", 3000) + b"done"),
    ]
    assert len({f.mask for f in sent}) == len(sent)  # a fresh key per frame
    assert rec.events[-1].was_clean


def test_send_rejects_other_types(ws_server, record):
    server = ws_server()
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    for bad in (None, 1, object(), ["x"]):
        with pytest.raises(TypeError):
            ws.send(bad)
    ws.close()
    rec.wait_closed()


def test_lone_surrogates_are_sent_as_replacement_characters(ws_server, record):
    rec, sent = run(ws_server, record, [], then=lambda ws, rec: (ws.send("a\ud800b"), ws.close()))
    assert sent[0].payload == "a\ufffdb".encode()


def test_buffered_amount_returns_to_zero(ws_server, record):
    """The server reads nothing at first: the client's sends pile up in its queue."""
    release = gevent.event.Event()
    total = []

    def script(peer):
        release.wait(5)
        n = 0
        while True:
            f = peer.read_frame()
            if f.opcode == 8:
                break
            n += len(f.payload)
        total.append(n)
        peer.send(frame(8, f.payload[:2]))
        peer.conn.close()

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    chunk = b"q" * 65536
    for _ in range(200):
        ws.send(chunk)
    assert ws.buffered_amount > 0
    assert ws.buffered_amount <= 200 * 65536
    release.set()
    with gevent.Timeout(10):
        while ws.buffered_amount:
            gevent.sleep(0.01)
    ws.close()
    rec.wait_closed()
    assert total == [200 * 65536]
