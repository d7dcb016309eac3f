"""WebSocket wire audit against RFC 6455 / RFC 7692: handshake header edge cases."""

from __future__ import annotations

import pytest
from wsutil import accept_for, close_frame, failed_with, frame, run

import greenhttp
from greenhttp import WebSocket


def _raw(headers):
    def response(req):
        lines = ["HTTP/1.1 101 Switching Protocols"]
        for k, v in headers(req):
            lines.append(f"{k}: {v}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    return response


def _ok(req, upgrade="websocket", connection="Upgrade"):
    return [
        ("Upgrade", upgrade),
        ("Connection", connection),
        ("Sec-WebSocket-Accept", accept_for(req.header("sec-websocket-key"))),
    ]


@pytest.mark.parametrize(
    "headers",
    [
        lambda req: [("Upgrade", "websocket"), ("Connection", "Upgrade")],  # no accept at all
        lambda req: _ok(req) + [("Sec-WebSocket-Accept", "AAAA")],  # a second, wrong accept
        lambda req: [
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Accept", accept_for(req.header("sec-websocket-key")) + "x"),
        ],
        lambda req: _ok(req, connection="Upgraded"),  # not the token "upgrade"
        lambda req: _ok(req, upgrade="websockets"),
    ],
)
def test_missing_or_wrong_accept_and_tokens_fail(ws_server, record, headers):
    ws = WebSocket(ws_server(response=_raw(headers)).url())
    rec = record(ws)
    close = rec.wait_closed()
    assert rec.types == ["error", "close"]
    assert (close.code, close.was_clean) == (1006, False)
    assert isinstance(rec.events[0].error, greenhttp.WebSocketError)


@pytest.mark.parametrize(
    ("upgrade", "connection"),
    [("WebSocket", "UPGRADE"), ("WEBSOCKET", "keep-alive,upgrade"), ("websocket", "Upgrade, close")],
)
def test_upgrade_and_connection_are_case_insensitive_token_lists(
    ws_server, record, upgrade, connection
):
    headers = lambda req: _ok(req, upgrade=upgrade, connection=connection)  # noqa: E731
    ws = WebSocket(ws_server(response=_raw(headers)).url())
    rec = record(ws)
    rec.wait_open()
    ws.close(1000)
    assert rec.wait_closed().was_clean


def test_invalid_utf8_close_reason_fails_with_1007(ws_server, record):
    rec, sent = run(ws_server, record, [close_frame(1000, b"\xff\xfe")])
    failed_with(rec, sent, 1007)


def test_ping_inside_a_fragmented_text_message_is_answered_in_place(ws_server, record):
    rec, sent = run(
        ws_server,
        record,
        [
            frame(1, "h\u00e9".encode()[:2], fin=False),  # splits the 2-byte é
            frame(9, b"\x00\x01ping"),
            frame(0, "h\u00e9".encode()[2:]),
            close_frame(1000),
        ],
    )
    pongs = [f.payload for f in sent if f.opcode == 10]
    assert pongs == [b"\x00\x01ping"]
    assert rec.messages == ["h\u00e9"]
    # each client frame has its own mask
    masks = [f.mask for f in sent]
    assert len(masks) == len(set(masks))


def _small_window_deflate(data: bytes) -> bytes:
    import zlib

    c = zlib.compressobj(9, zlib.DEFLATED, -9)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    return out[:-4]


def test_small_server_window_and_fragmented_compressed_message(ws_server, record):
    body = (b"abcdefgh" * 200) + "\u00e9t\u00e9".encode()
    comp = _small_window_deflate(body)
    third = len(comp) // 3
    rec, sent = run(
        ws_server,
        record,
        [
            frame(1, comp[:third], fin=False, rsv=0x40),
            frame(10, b"unsolicited pong"),
            frame(0, comp[third : 2 * third], fin=False),
            frame(9, b"p"),
            frame(0, comp[2 * third :]),
            close_frame(1000, b"fin"),
        ],
        extensions="permessage-deflate; server_max_window_bits=9; server_no_context_takeover",
    )
    assert rec.messages == [body.decode()]
    assert [f.payload for f in sent if f.opcode == 10] == [b"p"]
    assert all(f.rsv == 0 for f in sent)


@pytest.mark.parametrize(
    ("extra", "protocols"),
    [
        (
            [
                ("Sec-WebSocket-Extensions", "permessage-deflate"),
                ("Sec-WebSocket-Extensions", "permessage-deflate"),
            ],
            None,
        ),
        ([("Sec-WebSocket-Protocol", "chat"), ("Sec-WebSocket-Protocol", "chat")], ["chat"]),
        ([("Sec-WebSocket-Protocol", "chat, superchat")], ["chat", "superchat"]),
    ],
)
def test_repeated_extension_or_several_protocols_fail(ws_server, record, extra, protocols):
    headers = lambda req: _ok(req) + extra  # noqa: E731
    ws = WebSocket(ws_server(response=_raw(headers)).url(), protocols)
    rec = record(ws)
    close = rec.wait_closed()
    assert rec.types == ["error", "close"]
    assert (close.code, close.was_clean) == (1006, False)
    assert ws.protocol == "" and ws.extensions == ""
