"""permessage-deflate (RFC 7692) from a scripted server: inflation, context takeover,
RSV1 rules, and the decompressed-size limit."""

from __future__ import annotations

import zlib

import gevent
from wsutil import close_after, deflate, failed_with, frame, run

from greenhttp import WebSocket

PMD = "permessage-deflate"


def test_compressed_messages_are_inflated(ws_server, record):
    text = "compress me " * 100
    frames = [
        frame(1, deflate(text.encode()), rsv=0x40),
        frame(2, deflate(b"\x00" * 5000), rsv=0x40),
    ]
    rec, sent = run(
        ws_server, record, frames, binary_type="arraybuffer", extensions=PMD, then=close_after(2)
    )
    assert rec.messages == [text, b"\x00" * 5000]
    assert all(f.rsv == 0 for f in sent)


def test_compressed_and_plain_messages_mix(ws_server, record):
    frames = [
        frame(1, deflate(b"one"), rsv=0x40),
        frame(1, b"two"),
        frame(1, deflate(b"three"), rsv=0x40),
    ]
    rec, _ = run(ws_server, record, frames, extensions=PMD, then=close_after(3))
    assert rec.messages == ["one", "two", "three"]


def test_context_takeover_is_kept_across_messages(ws_server, record):
    c = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
    first, second = deflate(b"abcdefghij" * 20, c), deflate(b"abcdefghij" * 20, c)
    assert len(second) < len(first)  # the second refers back to the first
    frames = [frame(1, first, rsv=0x40), frame(1, second, rsv=0x40)]
    rec, _ = run(ws_server, record, frames, extensions=PMD, then=close_after(2))
    assert rec.messages == ["abcdefghij" * 20] * 2


def test_an_empty_compressed_message_leaves_the_inflater_as_it_was(ws_server, record):
    """RFC 7692 §7.2.3.6 has an empty message compressed to one 0x00 byte; a server that
    sends no payload at all with RSV1 still means an empty message. Feeding the inflater
    the bare tail would leave it inside a stored block, and the next message would
    come out wrong."""
    c = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
    first, second = deflate(b"abcdefghij" * 20, c), deflate(b"abcdefghij" * 20, c)
    frames = [frame(1, first, rsv=0x40), frame(2, b"", rsv=0x40), frame(1, second, rsv=0x40)]
    rec, _ = run(ws_server, record, frames, binary_type="arraybuffer", extensions=PMD, then=close_after(3))
    assert rec.messages == ["abcdefghij" * 20, b"", "abcdefghij" * 20]


def test_server_no_context_takeover_resets_the_inflater(ws_server, record):
    # Each message is a fresh stream; a reused inflater would still decode these,
    # so the check is that a new one is made: feed two independent streams.
    frames = [frame(1, deflate(b"hello"), rsv=0x40), frame(1, deflate(b"world"), rsv=0x40)]
    rec, _ = run(
        ws_server,
        record,
        frames,
        extensions=f"{PMD}; server_no_context_takeover",
        then=close_after(2),
    )
    assert rec.messages == ["hello", "world"]


def test_fragmented_compressed_message_with_a_ping_inside(ws_server, record):
    body = deflate(("fragmented " * 300).encode())
    parts = [body[:10], body[10:50], body[50:]]
    frames = [
        frame(1, parts[0], fin=False, rsv=0x40),
        frame(9, b"p"),
        frame(0, parts[1], fin=False),
        frame(0, parts[2]),
    ]
    rec, sent = run(ws_server, record, frames, extensions=PMD, then=close_after(1))
    assert rec.messages == ["fragmented " * 300]
    assert [f.payload for f in sent if f.opcode == 10] == [b"p"]


def test_a_bfinal_block_starts_a_new_context(ws_server, record):
    c = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
    final = c.compress(b"last block") + c.flush(zlib.Z_FINISH)  # BFINAL set
    frames = [frame(1, final, rsv=0x40), frame(1, deflate(b"after"), rsv=0x40)]
    rec, _ = run(ws_server, record, frames, extensions=PMD, then=close_after(2))
    assert rec.messages == ["last block", "after"]


def test_rsv1_on_a_continuation_fails_with_1002(ws_server, record):
    body = deflate(b"x" * 100)
    frames = [frame(1, body[:5], fin=False, rsv=0x40), frame(0, body[5:], rsv=0x40)]
    rec, sent = run(ws_server, record, frames, extensions=PMD)
    failed_with(rec, sent, 1002)
    # The error says why: wsproto's own message for an extension's refusal says nothing.
    assert str(rec.events[-2].error) == "RSV1 set on a continuation frame"


def test_rsv1_on_a_control_frame_fails_with_1002(ws_server, record):
    rec, sent = run(ws_server, record, [frame(9, b"", rsv=0x40)], extensions=PMD)
    failed_with(rec, sent, 1002)


def test_data_that_does_not_inflate_fails_with_1007(ws_server, record):
    rec, sent = run(ws_server, record, [frame(1, b"\xff\xff\xff\xff", rsv=0x40)], extensions=PMD)
    failed_with(rec, sent, 1007)
    assert str(rec.events[-2].error).startswith("a compressed message does not inflate: ")


def test_compressed_invalid_utf8_fails_with_1007(ws_server, record):
    rec, sent = run(ws_server, record, [frame(1, deflate(b"\xc3\x28"), rsv=0x40)], extensions=PMD)
    failed_with(rec, sent, 1007)


def _limited(make_client, server, size):
    return make_client(
        f"http://127.0.0.1:{server.server.port}", web_socket={"max_payload_size": size}
    )


def test_decompression_bomb_fails_with_1009(ws_server, record, make_client):
    bomb = deflate(b"\x00" * 10_000_000)  # about 10 KB on the wire
    sent = []

    def script(peer):
        peer.send(frame(2, bomb, rsv=0x40))
        sent.append(peer.expect_close())
        peer.conn.close()

    server = ws_server(script, extensions=PMD)
    ws = WebSocket(server.url(), {"dispatcher": _limited(make_client, server, 1_000_000)})
    rec = record(ws)
    rec.wait_closed()
    assert sent[0].close_code == 1009
    assert rec.messages == []
    assert len(bomb) < 1_000_000
    assert str(rec.events[-2].error) == "a message larger than max_payload_size=1000000 bytes"


def test_compressed_frame_payload_over_the_limit_fails_before_it_is_read(
    ws_server, record, make_client
):
    sent = []

    def script(peer):
        peer.send(frame(2, b"", rsv=0x40, length=2000)[:4])  # the header only
        sent.append(peer.expect_close())
        peer.conn.close()

    server = ws_server(script, extensions=PMD)
    ws = WebSocket(server.url(), {"dispatcher": _limited(make_client, server, 1000)})
    rec = record(ws)
    rec.wait_closed()
    assert sent[0].close_code == 1009


def test_inflated_message_at_the_limit_is_delivered(ws_server, record, make_client):
    def script(peer):
        peer.send(frame(2, deflate(b"a" * 1000), rsv=0x40))
        peer.answer_close()

    server = ws_server(script, extensions=PMD)
    ws = WebSocket(server.url(), {"dispatcher": _limited(make_client, server, 1000)})
    ws.binary_type = "arraybuffer"
    rec = record(ws)
    rec.wait_open()
    with gevent.Timeout(5):
        while not rec.messages:
            gevent.sleep(0.002)
    ws.close()
    rec.wait_closed()
    assert rec.messages == [b"a" * 1000]
