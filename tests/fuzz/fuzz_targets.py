"""Fuzz targets: one function per input surface, ``target(data: bytes) -> None``.

Each target turns arbitrary bytes into a call on the code that takes
untrusted input and checks two things: only the documented exceptions
escape, and the result keeps its promises (no CR/LF/NUL reaches the wire, a
cross-origin redirect carries no credentials, limits hold). A broken promise
raises ``AssertionError``; any other exception is a finding as it stands.

The same functions are driven by hypothesis (``test_properties.py``, in the
normal test run) and by atheris (the ``fuzz_<target>.py`` scripts through
``atheris_run.py``, ``make fuzz``; each is ``python
tests/fuzz/fuzz_<target>.py -atheris_runs=N`` plus any libFuzzer flag, such
as a corpus directory or ``-max_total_time=S``).
Pure computation: no sockets, no gevent, nothing blocks.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

from wsproto.frame_protocol import FrameDecoder, MessageDecoder, Opcode, ParseFailed

from greenhttp import errors
from greenhttp._core.cache_policy import (
    MAX_DELTA,
    parse_age,
    parse_cache_control,
    parse_http_date,
    parse_vary,
)
from greenhttp._core.decoders import BodyDecoder, parse_encodings
from greenhttp._core.h1 import ResponseParser
from greenhttp._core.headers import header_pairs
from greenhttp._core.redirect import CREDENTIAL_HEADERS, RedirectOptions, next_hop, resolve_location
from greenhttp._core.request import Request
from greenhttp._websocket.handshake import InboundPolicy
from greenhttp.cookies import Cookie, parse_cookie

__all__ = [
    "Input",
    "SEEDS",
    "TARGETS",
    "parse_both",
    "cache_control",
    "cookie",
    "decoders",
    "h1_parser",
    "headers",
    "redirect",
    "ws_frames",
]


class Input:
    """Draw typed values from fuzz bytes (a tiny FuzzedDataProvider, same on both drivers)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        b = self.data[self.pos]
        self.pos += 1
        return b

    def bytes(self, limit: int = 64) -> bytes:
        n = min(self.byte() % (limit + 1), len(self.data) - self.pos)
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def text(self, limit: int = 64) -> str:
        return self.bytes(limit).decode("latin-1")

    def rest(self) -> bytes:
        out = self.data[self.pos :]
        self.pos = len(self.data)
        return out


# ---------------------------------------------------------------------------
# the HTTP/1.1 response parser
# ---------------------------------------------------------------------------


class _Sink:
    """Records parser events; body bytes are joined per message."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.body = 0

    def on_head(
        self, status: int, reason: str, headers: dict[str, Any], raw: bytes, keep_alive: bool
    ) -> None:
        assert 100 <= status <= 999
        for name, value in headers.items():
            values = value if isinstance(value, list) else [value]
            assert re.fullmatch(r"[!#$%&'*+.^_`|~0-9a-z-]+", name), name
            assert all("\r" not in v and "\n" not in v and "\x00" not in v for v in values), value
        self.events.append(
            ("head", status, sorted(headers.items(), key=lambda kv: kv[0]), keep_alive)
        )

    def on_body(self, chunk: bytes) -> None:
        self.body += len(chunk)
        if self.events and self.events[-1][0] == "body":
            self.events[-1] = ("body", self.events[-1][1] + chunk)
        else:
            self.events.append(("body", bytes(chunk)))

    def on_complete(self, trailers: dict[str, Any] | None) -> None:
        self.events.append(("end", sorted((trailers or {}).items(), key=lambda kv: kv[0])))

    def on_upgrade(self, rest: bytes) -> None:
        self.events.append(("upgrade", bytes(rest)))


_PARSER_ERRORS = (errors.HTTPParserError, errors.HeadersOverflowError)


def _parse(pieces: list[bytes], method: str, max_header_size: int) -> tuple[list[Any], bool]:
    sink = _Sink()
    parser = ResponseParser(sink, max_header_size)
    parser.expect(method)
    error = False
    try:
        for i, piece in enumerate(pieces):
            parser.feed(piece)
            if sink.events and sink.events[-1][0] == "upgrade":
                # The rest belongs to the new protocol (the event carries what was
                # buffered); the connection stops reading HTTP, as the driver does.
                sink.events[-1] = ("upgrade", sink.events[-1][1] + b"".join(pieces[i + 1 :]))
                return sink.events, error
            if sink.events and sink.events[-1][0] == "end":
                parser.expect(method)
        parser.feed_eof()
    except _PARSER_ERRORS as exc:
        error = True
        # A refused stream is dead for good: nothing more is parsed.
        try:
            parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        except errors.HTTPParserError:
            pass
        else:
            raise AssertionError("the parser accepted bytes after refusing the stream") from exc
    assert sink.body <= sum(map(len, pieces))
    return sink.events, error


def h1_parser(data: bytes) -> None:
    """Arbitrary bytes as a response stream, whole and in pieces: same events, same verdict.

    The verdict is "refused or not"; which of the two documented errors a
    stream that is both too big and malformed gets may depend on where the
    reads split it.
    """
    inp = Input(data)
    flags = inp.byte()
    method = ("GET", "HEAD", "CONNECT", "POST")[flags & 3]
    max_header_size = 64 + inp.byte() * 64
    cuts = [inp.byte() for _ in range(inp.byte() % 8)]
    parse_both(inp.rest(), method, max_header_size, cuts)


def parse_both(
    stream: bytes, method: str, max_header_size: int, cuts: list[int]
) -> tuple[list[Any], bool]:
    """Parse ``stream`` whole and cut at ``cuts``; assert both agree; return ``(events, refused)``."""
    whole = _parse([stream], method, max_header_size)
    points = sorted({c for c in cuts if 0 < c < len(stream)})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    split = _parse(pieces, method, max_header_size)
    assert whole == split, (whole, split)
    return whole


# ---------------------------------------------------------------------------
# request headers, path and method (what reaches the wire)
# ---------------------------------------------------------------------------

_WIRE_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def headers(data: bytes) -> None:
    """Header shapes of API.md and the request line: refused, or free of CR/LF/NUL."""
    inp = Input(data)
    shape = inp.byte() % 4
    items = [(inp.text(16), inp.text(32)) for _ in range(inp.byte() % 5)]
    if inp.byte() & 1 and items:
        items[0] = (items[0][0].encode("latin-1"), items[0][1].encode("latin-1"))  # type: ignore[assignment]
    raw: Any
    if shape == 0:
        raw = dict(items)
    elif shape == 1:
        raw = items
    elif shape == 2:
        raw = [x for pair in items for x in pair]
    else:
        raw = {k: [v, v] for k, v in items}
    try:
        pairs = header_pairs(raw)
    except errors.InvalidArgumentError:
        pairs = None
    if pairs is not None:
        for name, value in pairs:
            assert _TOKEN.fullmatch(name) and _WIRE_VALUE.fullmatch(value), (name, value)
    opts = {"path": inp.text(32) or "/", "method": inp.text(8) or "GET", "headers": raw}
    try:
        req = Request(opts, None)
    except (errors.InvalidArgumentError, errors.NotSupportedError):
        return
    assert _TOKEN.fullmatch(req.method)
    assert re.fullmatch(r"[\x21-\xff]+", req.path)
    for name, value in req.headers:
        assert _TOKEN.fullmatch(name) and _WIRE_VALUE.fullmatch(value)
    if req.host is not None:
        assert _WIRE_VALUE.fullmatch(req.host)


# ---------------------------------------------------------------------------
# Set-Cookie parsing
# ---------------------------------------------------------------------------

_CTL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def cookie(data: bytes) -> None:
    """parse_cookie never raises; what it returns holds no control character."""
    for value in (data, data.decode("utf-8", "replace")):
        parsed = parse_cookie(value)
        if parsed is None:
            continue
        assert isinstance(parsed, Cookie)
        assert parsed.name or parsed.value
        for text in (
            parsed.name,
            parsed.value,
            parsed.domain or "",
            parsed.path or "",
            *(parsed.unparsed or []),
        ):
            assert not _CTL.search(text), text
        assert parsed.same_site in (None, "Strict", "Lax", "None")


# ---------------------------------------------------------------------------
# redirects
# ---------------------------------------------------------------------------

_ORIGINS = ("http://a.test", "https://a.test", "http://a.test:8080", "http://b.test", None)
_STATUSES = (300, 301, 302, 303, 307, 308, 200, 304)


def redirect(data: bytes) -> None:
    """A Location from a server: resolved or ignored, never raising; credentials stay home."""
    inp = Input(data)
    origin = _ORIGINS[inp.byte() % len(_ORIGINS)]
    path = "/" + inp.text(16).lstrip("/")
    location = inp.text(128)
    target = resolve_location(location, origin, path)
    if target is not None and _WIRE_VALUE.fullmatch(location):  # a Location a parser lets through
        new_origin, new_path = target
        assert new_path.startswith("/") and re.fullmatch(r"[\x21-\x7e]+", new_path), new_path
        # No space or control character reaches the Host header of the next hop.
        assert new_origin is None or re.fullmatch(r"https?://[^/?#@ \x00-\x1f\x7f]+", new_origin), (
            new_origin
        )
    status = _STATUSES[inp.byte() % len(_STATUSES)]
    opts = {
        "origin": origin,
        "path": path if re.fullmatch(r"[\x21-\xff]+", path) else "/",
        "method": "POST" if inp.byte() & 1 else "GET",
        "headers": {
            "authorization": "secret",
            "cookie": "c=1",
            "proxy-authorization": "p",
            "x-keep": "1",
        },
    }
    hop = next_hop(
        status, {"location": location}, opts, RedirectOptions(max_redirections=5), [path], True
    )
    if hop is None or isinstance(hop, BaseException):
        assert hop is None or isinstance(
            hop, (errors.InvalidArgumentError, errors.MaxRedirectionsError)
        )
        return
    names = {k.lower() for k, _ in hop.opts["headers"]}
    if hop.opts.get("origin") != origin:
        assert not names & CREDENTIAL_HEADERS, (origin, hop.opts)
    Request(dict(hop.opts), None)  # the next hop is a valid request


# ---------------------------------------------------------------------------
# caching headers
# ---------------------------------------------------------------------------


def cache_control(data: bytes) -> None:
    """Cache-Control, dates, Age and Vary parsers never raise and stay in range."""
    text = data.decode("latin-1")
    for value in (text, [text, text[::-1]]):
        cc = parse_cache_control(value)
        for key, v in cc.items():
            assert isinstance(key, str) and key == key.lower()
            assert (
                v is True
                or (isinstance(v, int) and 0 <= v <= MAX_DELTA)
                or (isinstance(v, list) and all(isinstance(n, str) for n in v))
            ), (key, v)
    stamp = parse_http_date(text)
    assert stamp is None or isinstance(stamp, float)
    age = parse_age(text)
    assert age is None or 0 <= age <= MAX_DELTA
    vary = parse_vary(text)
    assert vary is None or all(isinstance(n, str) and n == n.lower() for n in vary)


# ---------------------------------------------------------------------------
# WebSocket frames from the server
# ---------------------------------------------------------------------------


def ws_frames(data: bytes) -> None:
    """Server bytes through the session's decoder: frames, or ParseFailed/UnicodeDecodeError.

    The loop mirrors ``Session._decode`` (``_websocket/transport.py``), which
    turns exactly those two exceptions into a failed connection.
    """
    inp = Input(data)
    flags = inp.byte()
    deflate = bool(flags & 1)
    max_payload = (0, 16, 1024)[flags % 3]
    max_fragments = (0, 2, 8)[(flags >> 2) % 3]
    stream = inp.rest()
    decoder = FrameDecoder(
        client=True,
        extensions=[InboundPolicy(max_fragments, max_payload, deflate, bool(flags & 2))],
    )
    messages = MessageDecoder()
    try:
        for i in range(0, len(stream), 7):  # in pieces, as a socket delivers them
            decoder.receive_bytes(stream[i : i + 7])
            while True:
                frame = decoder.process_buffer()
                if frame is None:
                    break
                if frame.opcode < Opcode.CLOSE:
                    if max_payload and not deflate:  # a message's limit, checked per frame header
                        assert len(frame.payload) <= max_payload
                    frame = messages.process_frame(frame)
                    if frame.opcode is Opcode.TEXT and isinstance(frame.payload, bytes):
                        frame.payload.decode("utf-8")
                else:
                    assert len(frame.payload) <= 125  # RFC 6455 §5.5: control frames are small
    except (ParseFailed, UnicodeDecodeError):
        pass


# ---------------------------------------------------------------------------
# content decoding (the decompress interceptor's core)
# ---------------------------------------------------------------------------

_CODINGS = ("gzip", "deflate", "br", "zstd", "compress", "x-compress", "x-gzip")  # every coding decompress decodes


def decoders(data: bytes) -> None:
    """Corrupt or hostile encoded bodies: DecompressionError or the size limit, never more."""
    inp = Input(data)
    codings = [_CODINGS[inp.byte() % len(_CODINGS)] for _ in range(1 + inp.byte() % 3)]
    mode = inp.byte() % 3
    body = inp.rest()
    if mode == 1:  # a valid gzip of the rest, so the inner codings see real input
        body = zlib.compress(body, wbits=31)
        codings = ["gzip"]
    elif mode == 2:  # a small bomb
        body = zlib.compress(body * 4096, wbits=31)
        codings = ["gzip"]
    assert parse_encodings(",".join(codings)) is not None
    decoder = BodyDecoder(codings, max_size=1 << 16, max_ratio=10)
    out = 0
    try:
        for i in range(0, len(body), 512):
            decoder.feed(body[i : i + 512])
            while piece := decoder.pull():
                out += len(piece)
        decoder.end()
        while piece := decoder.pull():
            out += len(piece)
    except (errors.DecompressionError, errors.ResponseExceededMaxSizeError):
        pass
    assert out <= 1 << 16  # the piece that passes the limit is refused, not delivered


def _seed_h1(method: int, stream: bytes) -> bytes:
    return bytes([method, 255, 0]) + stream


#: A few meaningful inputs per target: a starting corpus for atheris (whose
#: mutations then start from real HTTP), and a smoke test in the normal run.
SEEDS: dict[str, list[bytes]] = {
    "h1_parser": [
        _seed_h1(0, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"),
        _seed_h1(
            0,
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
        ),
        _seed_h1(
            0, b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"
        ),
        _seed_h1(1, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"),
        _seed_h1(2, b"HTTP/1.1 200 Connection established\r\n\r\ntunnel"),
        _seed_h1(0, b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"),
        _seed_h1(0, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nuntil close"),
    ],
    "headers": [
        b"\x00\x02\x05x-abc\x03def\x00\x01/\x03GET",
        b"\x01\x01\x04host\x05a.b:1\x00\x02/p\x04POST",
        b"\x02\x01\x0ccontent-type\x04text\x01\x02/q\x03PUT",
    ],
    "cookie": [
        b"id=a3fWa; Expires=Wed, 21 Oct 2015 07:28:00 GMT; Secure; HttpOnly; SameSite=Lax",
        b"__Host-x=1; Path=/; Max-Age=3600; Domain=.example.com",
    ],
    "redirect": [
        b"\x00\x01a\x0e/other?q=1#frag\x00\x00",
        b"\x01\x00\x16https://b.test:8443/x/y\x02\x01",
        b"\x04\x00\x04../z\x05\x00",
    ],
    "cache_control": [
        b'max-age=60, s-maxage="30", no-cache="set-cookie, x", private, must-revalidate',
        b"Sun, 06 Nov 1994 08:49:37 GMT",
        b"Sunday, 06-Nov-94 08:49:37 GMT",
    ],
    "ws_frames": [
        b"\x00\x81\x05hello\x82\x02\x00\xff\x89\x00\x88\x02\x03\xe8",
        b"\x04\x01\x02he\x80\x03llo",
        b"\x01\xc1\x07\xf2\x48\xcd\xc9\xc9\x07\x00",
    ],
    "decoders": [
        b"\x00\x00\x01" + b"hello world" * 20,
        b"\x01\x00\x01" + b"hello world" * 20,
        b"\x02\x00\x02" + b"bomb",
    ],
}


TARGETS = {
    "h1_parser": h1_parser,
    "headers": headers,
    "cookie": cookie,
    "redirect": redirect,
    "cache_control": cache_control,
    "ws_frames": ws_frames,
    "decoders": decoders,
}
