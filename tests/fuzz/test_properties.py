"""Property tests (hypothesis) for every surface that takes untrusted input.

Each surface is driven twice: with arbitrary bytes through its fuzz target
(``fuzz_targets.py``, shared with the atheris scripts) and with structured
inputs that reach deeper (well-formed responses cut at random points,
header shapes with CR/LF/NUL sprinkled in, URL-shaped Locations, directive
lists, WebSocket frames). Only documented exceptions may escape; the
promises checked are written next to each test.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import struct
import zlib
from pathlib import Path
from typing import Any

import fuzz_targets as ft
import gevent
import gevent.event
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import greenhttp
from greenhttp import errors
from greenhttp._core.cache_policy import parse_cache_control
from greenhttp._core.headers import header_pairs
from greenhttp._core.request import Request

SCALE = float(os.environ.get("GREENHTTP_FUZZ_EXAMPLES", "1"))


def examples(n: int) -> settings:
    return settings(
        max_examples=max(1, int(n * SCALE)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


# ---------------------------------------------------------------------------
# arbitrary bytes into every target
# ---------------------------------------------------------------------------


def test_every_target_has_an_atheris_script_and_passes_its_seeds():
    scripts = {p.stem.removeprefix("fuzz_") for p in Path(__file__).parent.glob("fuzz_*.py")}
    assert scripts - {"targets"} == set(ft.TARGETS) == set(ft.SEEDS)
    for name, seeds in ft.SEEDS.items():
        for seed in seeds:
            ft.TARGETS[name](seed)


@pytest.mark.parametrize("name", sorted(ft.TARGETS))
def test_arbitrary_bytes_raise_only_documented_errors(name):
    target = ft.TARGETS[name]

    @examples(300)
    @given(st.binary(max_size=512))
    def run(data: bytes) -> None:
        target(data)

    run()


# ---------------------------------------------------------------------------
# the HTTP/1.1 response parser
# ---------------------------------------------------------------------------

CRLF = b"\r\n"
STATUS_LINES = [
    b"HTTP/1.1 200 OK",
    b"HTTP/1.0 200 OK",
    b"HTTP/1.1 204 No Content",
    b"HTTP/1.1 304 Not Modified",
    b"HTTP/1.1 103 Early Hints",
    b"HTTP/1.1 101 Switching Protocols",
    b"HTTP/1.1 404",
    b"HTTP/1.1 599 X",
    b"HTTP/2 200 OK",
    b"HTTP/1.1 20 OK",
    b"HTTP/1.1  200 OK",
    b"http/1.1 200 OK",
    b"HTTP/1.1 200 OK\x00",
]
FRAMING = [
    b"Content-Length: 0",
    b"Content-Length: 5",
    b"Content-Length: 5, 5",
    b"Content-Length: 5, 6",
    b"Content-Length: +5",
    b"Content-Length: 99999999999999999999",
    b"Transfer-Encoding: chunked",
    b"Transfer-Encoding: gzip, chunked",
    b"Transfer-Encoding: chunked, gzip",
    b"Transfer-Encoding: identity",
    b"Connection: close",
    b"Connection: keep-alive",
    b"Trailer: x-t",
]
field_name = st.sampled_from(
    [
        b"X-A",
        b"x-b",
        b"Set-Cookie",
        b"Content-Length",
        b"Transfer-Encoding",
        b"",
        b"X A",
        b"X:A",
        b"X\x00",
    ]
)
field_value = st.binary(max_size=12).map(lambda b: b.replace(b"\r\n", b"")) | st.sampled_from(
    [b"1", b"chunked", b" spaced ", b"a\rb", b"a\nb", b"a\x00b", b"\x80\xff"]
)
header_line = st.sampled_from(FRAMING) | st.builds(
    lambda n, v: n + b":" + v, field_name, field_value
)


@st.composite
def chunked_body(draw: Any) -> bytes:
    out = b""
    for chunk in draw(st.lists(st.binary(min_size=1, max_size=20), max_size=4)):
        ext = draw(st.sampled_from([b"", b";a=b", b";", b" ;x"]))
        out += b"%x%s\r\n%s\r\n" % (len(chunk), ext, chunk)
    trailers = draw(st.lists(header_line, max_size=2))
    return out + b"0\r\n" + b"".join(t + CRLF for t in trailers) + CRLF


@st.composite
def response(draw: Any) -> bytes:
    status = draw(st.sampled_from(STATUS_LINES))
    headers = draw(st.lists(header_line, max_size=5))
    body = draw(chunked_body() | st.binary(max_size=20))
    eol = draw(st.sampled_from([CRLF, CRLF, CRLF, b"\n", b"\r"]))
    return status + eol + b"".join(h + eol for h in headers) + eol + body


@examples(400)
@given(
    st.lists(response(), min_size=1, max_size=3).map(b"".join),
    st.sampled_from(["GET", "HEAD", "CONNECT"]),
    st.sampled_from([64, 256, 16384]),
    st.lists(st.integers(0, 400), max_size=8),
)
def test_response_like_streams_parse_the_same_however_they_are_cut(
    stream, method, max_header_size, cuts
):
    """Heads, bodies, ends and the verdict do not depend on how reads split the stream."""
    ft.parse_both(stream, method, max_header_size, cuts)


@st.composite
def well_formed(draw: Any) -> tuple[bytes, bytes, bool]:
    """A valid response: its wire bytes, its body, and whether it is chunked."""
    body = draw(st.binary(max_size=300))
    if draw(st.booleans()):
        pieces, rest = [], body
        while rest:
            n = draw(st.integers(1, max(1, len(rest))))
            pieces.append(rest[:n])
            rest = rest[n:]
        wire = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\nX-T: 1\r\n\r\n"
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + wire, body, True
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body), body, False


@examples(300)
@given(
    st.lists(well_formed(), min_size=1, max_size=4),
    st.lists(st.integers(0, 2000), max_size=10),
    st.data(),
)
def test_well_formed_responses_arrive_whole_and_a_cut_stream_never_ends_a_message(
    messages, cuts, data
):
    """No silent truncation: every body arrives exactly; a stream cut short never reports
    an end for the message it cut (the connection then fails with SocketError)."""
    stream = b"".join(m[0] for m in messages)
    events, refused = ft.parse_both(stream, "GET", 16384, cuts)
    assert not refused
    assert _bodies(events) == [m[1] for m in messages]
    cut = data.draw(st.integers(0, len(stream) - 1), label="cut")
    events, refused = ft.parse_both(stream[:cut], "GET", 16384, cuts)
    assert not refused
    bodies = _bodies(events)
    ends = 0
    for wire, body, _chunked in messages:
        if ends < len(bodies) and len(wire) <= cut:
            assert bodies[ends] == body
            cut -= len(wire)
            ends += 1
    assert len(bodies) == ends  # the message that was cut did not end


def _bodies(events: list[Any]) -> list[bytes]:
    out: list[bytes] = []
    current = b""
    for ev in events:
        if ev[0] == "body":
            current += ev[1]
        elif ev[0] == "end":
            out.append(current)
            current = b""
    return out


# ---------------------------------------------------------------------------
# request headers, path and method
# ---------------------------------------------------------------------------

dangerous_text = st.text(
    alphabet=st.sampled_from("ab:; =\t\r\n\x00\x7f\x0b\x85é€\u2028"), max_size=12
)


@examples(400)
@given(
    st.one_of(
        st.dictionaries(
            dangerous_text, dangerous_text | st.lists(dangerous_text, max_size=3), max_size=4
        ),
        st.lists(st.tuples(dangerous_text, dangerous_text), max_size=4),
        st.lists(dangerous_text, max_size=6),
        st.dictionaries(
            dangerous_text,
            st.integers() | st.none() | st.binary(max_size=6) | st.floats(),
            max_size=3,
        ),
    )
)
def test_header_pairs_refuse_or_return_wire_safe_pairs(raw):
    try:
        pairs = header_pairs(raw)
    except errors.InvalidArgumentError:
        return
    for name, value in pairs:
        assert ft._TOKEN.fullmatch(name), name
        assert ft._WIRE_VALUE.fullmatch(value), value
        (name + ": " + value).encode("latin-1")  # the head is written in latin-1


@examples(300)
@given(dangerous_text, dangerous_text, st.dictionaries(dangerous_text, dangerous_text, max_size=2))
def test_request_line_and_headers_refuse_injection(path, method, headers):
    opts = {"path": "/" + path, "method": method or "GET", "headers": headers}
    try:
        req = Request(opts, None)
    except (errors.InvalidArgumentError, errors.NotSupportedError):
        return
    line = f"{req.method} {req.path} HTTP/1.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in req.headers
    )
    assert line.count("\r\n") == 1 + len(req.headers)  # no line was smuggled in
    assert "\x00" not in line and line.count("\n") == line.count("\r\n")


# ---------------------------------------------------------------------------
# Set-Cookie
# ---------------------------------------------------------------------------

cookie_piece = st.sampled_from(
    [
        "a=b",
        "=b",
        "a=",
        "a",
        " a = b ",
        "Expires=Wed, 21 Oct 2015 07:28:00 GMT",
        "Max-Age=-1",
        "Max-Age=9" * 30,
        "Domain=.Example.COM",
        "Path=x",
        "Path=/p",
        "Secure",
        "HttpOnly",
        "SameSite=lax",
        "SameSite=bogus",
        "x=y=z",
        "a\x00b",
        "\t",
        "é=ü",
        "a" * 5000,
        ";",
    ]
) | st.text(max_size=20)


@examples(400)
@given(st.lists(cookie_piece, max_size=6).map(";".join))
def test_set_cookie_strings_parse_or_are_ignored(text):
    ft.cookie(text.encode("utf-8", "surrogatepass"))
    ft.cookie(text.encode("latin-1", "replace"))


# ---------------------------------------------------------------------------
# redirect Location
# ---------------------------------------------------------------------------

location = st.builds(
    lambda scheme, host, path, tail: scheme + host + path + tail,
    st.sampled_from(
        [
            "",
            "http://",
            "https://",
            "HTTP://",
            "ftp://",
            "javascript:",
            "//",
            "http:",
            "http:/",
            "\\\\",
        ]
    ),
    st.sampled_from(
        [
            "a.test",
            "b.test",
            "a.test:8080",
            "a.test:99999",
            "user:pw@a.test",
            "[::1]",
            "[::1",
            "",
            "a.test\t",
            "é.test",
            "a.test%0d%0a",
            "a.test:80",
            "b.test:443",
        ]
    ),
    st.sampled_from(
        ["", "/", "/x", "x", "../..", "/%2e%2e/", "/a b", "/\u2028", "/é", "/%zz", "?", "#f"]
    ),
    st.text(max_size=8),
)


@examples(500)
@given(
    st.sampled_from(range(len(ft._ORIGINS))),
    st.text(max_size=10),
    location | st.text(max_size=40),
    st.sampled_from(range(len(ft._STATUSES))),
    st.booleans(),
)
def test_redirect_locations_resolve_safely(origin, path, loc, status, post):
    path_bytes = path.encode("latin-1", "replace")[:16]
    loc_bytes = loc.encode("latin-1", "replace")[:128]
    data = (
        bytes([origin, len(path_bytes)])
        + path_bytes
        + bytes([len(loc_bytes)])
        + loc_bytes
        + bytes([status, post])
    )
    ft.redirect(data)


# ---------------------------------------------------------------------------
# Cache-Control
# ---------------------------------------------------------------------------

directive = st.builds(
    lambda name, eq, value: name + eq + value,
    st.sampled_from(
        [
            "max-age",
            "s-maxage",
            "no-cache",
            "private",
            "no-store",
            "max-stale",
            "min-fresh",
            "must-revalidate",
            "public",
            "stale-while-revalidate",
            "immutable",
            "x-custom",
            'no-store"',
            "MAX-AGE",
            " max-age ",
        ]
    ),
    st.sampled_from(["", "=", " = "]),
    st.sampled_from(
        [
            "",
            "0",
            "10",
            "-1",
            "99999999999999999999",
            '"5"',
            '"a, b"',
            "set-cookie",
            '"x',
            "1.5",
            "١٢",
        ]
    ),
)


@examples(400)
@given(st.lists(directive, max_size=6).map(",".join) | st.text(max_size=40))
def test_cache_control_parses_to_known_shapes(value):
    ft.cache_control(value.encode("latin-1", "replace"))
    cc = parse_cache_control(value)
    assert set(cc) <= {
        "max-age",
        "s-maxage",
        "no-cache",
        "private",
        "no-store",
        "max-stale",
        "min-fresh",
        "must-revalidate",
        "public",
        "stale-while-revalidate",
        "stale-if-error",
        "immutable",
        "proxy-revalidate",
        "no-transform",
        "must-understand",
        "only-if-cached",
    }, cc


# ---------------------------------------------------------------------------
# WebSocket frames, through a real connection
# ---------------------------------------------------------------------------


def ws_frame(
    opcode: int, payload: bytes, fin: bool, rsv: int, masked: bool, length: int | None
) -> bytes:
    n = len(payload) if length is None else length
    head = bytearray([(0x80 if fin else 0) | (rsv << 4) | opcode])
    mbit = 0x80 if masked else 0
    if n <= 125:
        head.append(mbit | n)
    elif n <= 0xFFFF:
        head += bytes([mbit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([mbit | 127]) + struct.pack("!Q", n)
    if masked:
        head += b"\x01\x02\x03\x04"
    return bytes(head) + payload


frames = st.lists(
    st.builds(
        ws_frame,
        st.sampled_from([0, 1, 2, 8, 9, 10, 3, 11, 15]),
        st.sampled_from(
            [
                b"",
                b"hi",
                b"\xff\xfe",
                "é".encode(),
                b"\x03\xe8",
                b"\x03\xe8bye",
                b"\x00",
                b"x" * 200,
                zlib.compress(b"a" * 100)[2:-4],
            ]
        ),
        st.booleans(),
        st.sampled_from([0, 0, 0, 4, 2, 1]),
        st.booleans(),
        st.none() | st.sampled_from([0, 1, 126, 70000, 1 << 40]),
    ),
    max_size=5,
).map(b"".join) | st.binary(max_size=64)

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def test_websocket_frames_from_the_server_end_in_a_close_event(make_server):
    """Whatever the server sends after the handshake, the client ends with a ``close``
    event within its timeouts, and no greenlet dies of an exception (conftest)."""
    queue: list[tuple[bytes, str]] = []

    def handler(conn: Any) -> None:
        req = conn.read_request()
        if req is None:
            return
        data, extensions = queue.pop(0)
        accept = base64.b64encode(
            hashlib.sha1(req.header("sec-websocket-key").encode() + _GUID).digest()
        )
        conn.send(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n" + extensions.encode() + b"\r\n" + data
        )
        conn.sock.shutdown(socket.SHUT_WR)  # all sent; the client's close frame is still read
        conn.wait_closed(5)

    server = make_server(handler)
    client = greenhttp.Client(
        server.origin, web_socket={"max_payload_size": 1024, "max_fragments": 4}
    )

    @settings(
        max_examples=max(1, int(40 * SCALE)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(frames, st.sampled_from(["", "Sec-WebSocket-Extensions: permessage-deflate\r\n"]))
    def run(data: bytes, extensions: str) -> None:
        queue.append((data, extensions))
        closed = gevent.event.Event()
        ws = greenhttp.WebSocket(f"ws://127.0.0.1:{server.port}/", {"dispatcher": client})
        ws.add_event_listener("close", lambda ev: closed.set())
        assert closed.wait(5), "no close event"
        assert ws.ready_state == greenhttp.WebSocket.CLOSED

    try:
        run()
    finally:
        client.destroy()
