"""A strict, sans-IO HTTP/1.1 response parser (RFC 9112).

The parser is fed bytes and calls methods on a *sink* object, in the style of
llhttp, because one method call per event is the cheapest shape in Python:

- ``on_head(status, reason, headers, raw_head, keep_alive)`` for each response
  head, interim (1xx) heads included;
- ``on_body(chunk)`` for each piece of body (``bytes``);
- ``on_complete(trailers)`` when a message ends; ``trailers`` is a dict or None;
- ``on_upgrade(rest)`` when the connection stops carrying HTTP (a 101, or a 2xx
  answer to CONNECT); ``rest`` is what arrived after the head.

A sink method may return True to ask the parser to stop (for example when the
consumer paused); the bytes not yet parsed stay buffered and :meth:`feed`
with ``b""`` continues.

It refuses what llhttp in strict mode refuses: bare LF or bare CR line
endings, obs-fold, whitespace before the colon, CTL characters in values,
conflicting Content-Length, Transfer-Encoding together with Content-Length,
malformed chunk sizes. A refusal raises :class:`HTTPParserError` (or
:class:`HeadersOverflowError` past ``max_header_size``); the connection that
produced it must be closed, never reused.

No I/O, no clock, no gevent: testable with bytes alone.
"""

from __future__ import annotations

import re
from typing import Any, Final, Protocol

from ..errors import HeadersOverflowError, HTTPParserError

__all__ = ["ResponseParser", "ParserSink", "parse_header_block"]

# One header line: token ":" OWS field-value OWS CRLF. Values may hold HTAB,
# visible ASCII and obs-text; never CR, LF, NUL or other CTLs (RFC 9110 §5.5).
_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_VALUE_CHAR = rb"[\t\x20-\x7e\x80-\xff]"
_LINE = _TOKEN + rb":" + _VALUE_CHAR + rb"*\r\n"
_BLOCK_RE: Final = re.compile(rb"(?:" + _LINE + rb")*")
_block_fullmatch: Final = _BLOCK_RE.fullmatch
_STATUS_RE: Final = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: (" + _VALUE_CHAR + rb"*))?\r\n")
_CHUNK_SIZE_RE: Final = re.compile(rb"0*([0-9A-Fa-f]{1,16})(;[\t\x20-\x7e\x80-\xff]*)?\r\n")

_MAX_START_LINE: Final = 8192

# Parser states. (Compiled, a Final int is a constant in the C code, not a lookup in
# the module's dict at each use: docs/performance.md.)
_HEAD: Final = 0
_BODY_LENGTH: Final = 1
_CHUNK_SIZE: Final = 2
_CHUNK_DATA: Final = 3
_CHUNK_CRLF: Final = 4
_TRAILERS: Final = 5
_BODY_EOF: Final = 6
_UPGRADED: Final = 7
_DEAD: Final = 8

# Body framing of a final head: a Content-Length (>= 0) or one of these.
_FRAMED_CHUNKED: Final = -1
_FRAMED_BY_EOF: Final = -2


class ParserSink(Protocol):
    def on_head(
        self, status: int, reason: str, headers: dict[str, Any], raw: bytes, keep_alive: bool
    ) -> bool | None: ...

    def on_body(self, chunk: bytes) -> bool | None: ...

    def on_complete(self, trailers: dict[str, Any] | None) -> bool | None: ...

    def on_upgrade(self, rest: bytes) -> None: ...

    # Optional: ``on_whole(status, reason, headers, raw, keep_alive, body)`` takes a
    # final head and its whole body (b"" for none), read together, in one step
    # instead of on_head, on_body and on_complete. It returns False when it paused
    # at the head: the parser then keeps the body for the next feed.


def parse_header_block(block: bytes) -> dict[str, Any]:
    """Validate and split header lines (each ending in CRLF) into a dict.

    Names are lower-cased; a repeated name becomes a list of values in
    order, except ``set-cookie`` which is always a list. Raises
    :class:`HTTPParserError` on anything RFC 9112 refuses.
    """
    if _block_fullmatch(block) is None:
        end = _BLOCK_RE.match(block).end()  # type: ignore[union-attr]
        raise HTTPParserError("invalid header line", "HPE_INVALID_HEADER_TOKEN", block[end : end + 64])
    lines = block.decode("latin-1").split("\r\n")
    lines.pop()  # the block ends with CRLF
    # The block matched _BLOCK_RE, so every line is exactly token ":" value.
    headers: dict[str, Any] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.lower()] = value.strip(" \t")
    if len(headers) != len(lines) or "set-cookie" in headers:
        return _merge_repeated(lines)
    return headers


def _merge_repeated(lines: list[str]) -> dict[str, Any]:
    """The slow path: a repeated name becomes a list; ``set-cookie`` is always one."""
    headers: dict[str, Any] = {}
    for line in lines:
        name, _, value = line.partition(":")
        name = name.lower()
        value = value.strip(" \t")
        old = headers.get(name)
        if old is None:
            headers[name] = [value] if name == "set-cookie" else value
        elif type(old) is list:
            old.append(value)
        else:
            headers[name] = [old, value]
    return headers


def _content_length(value: Any) -> int:
    if type(value) is str and value.isdigit() and len(value) < 19 and value.isascii():
        return int(value)
    # RFC 9110 §8.6: a list of identical values may be treated as one value.
    values = value if type(value) is list else [value]
    parts = {p.strip() for v in values for p in v.split(",")}
    if len(parts) != 1:
        raise HTTPParserError("conflicting Content-Length", "HPE_UNEXPECTED_CONTENT_LENGTH")
    text = parts.pop()
    if not text.isdigit() or not text.isascii() or len(text.lstrip("0")) > 18:  # (leading zeros are valid)
        raise HTTPParserError("invalid Content-Length", "HPE_INVALID_CONTENT_LENGTH", text.encode())
    return int(text)


def _has_token(value: Any, token: str) -> bool:
    if type(value) is str and value.lower() == token:
        return True
    values = value if type(value) is list else [value]
    return any(p.strip().lower() == token for v in values for p in v.split(","))


def _check_partial_head(buf: bytes, pos: int, limit: int) -> None:
    """An unfinished head: refuse it now if it is too big or has a bare CR or LF.

    Without this a head ended by bare LFs would be waited for forever.
    """
    seg = buf[pos:] if pos else buf
    if len(seg) > limit:
        raise HeadersOverflowError()
    crlf = seg.count(b"\r\n")
    bare_cr = seg.count(b"\r") - crlf - (1 if seg.endswith(b"\r") else 0)
    if seg.count(b"\n") != crlf or bare_cr:
        raise HTTPParserError("bare CR or LF in the head", "HPE_LF_EXPECTED", seg[:64])


def _check_partial_status_line(buf: bytes, pos: int) -> None:
    """An unfinished head: refuse it now if its status line already cannot be one.

    llhttp refuses at the first byte that cannot belong to a status line; waiting
    for the blank line instead would hold the request until its headers timeout
    when a server sends junk (a stray body, a line of garbage) and nothing more.
    """
    line_end = buf.find(b"\r\n", pos)
    if line_end < 0:
        start = buf[pos : pos + 7]
        if b"HTTP/1.".startswith(start) or start == b"\r":  # (or the first half of an empty line)
            return
        raise HTTPParserError("invalid status line", "HPE_INVALID_CONSTANT", buf[pos : pos + 64])
    if _STATUS_RE.match(buf, pos) is None:
        raise HTTPParserError("invalid status line", "HPE_INVALID_CONSTANT", buf[pos : min(line_end, pos + 64)])


def _skip_empty_lines(buf: bytes, pos: int) -> int:
    """The position after the empty lines (CRLF) at ``pos``: llhttp skips them before a
    message, as RFC 9112 §2.2 asks of a robust recipient, so a server's stray CRLF
    after a body does not spoil the next response."""
    while buf.startswith(b"\r\n", pos):
        pos += 2
    return pos


class ResponseParser:
    """Parse a stream of HTTP/1.1 responses. Not greenlet-safe: one reader owns it.

    Before each response the driver calls :meth:`expect` with the request
    method (HEAD responses have no body; 2xx answers to CONNECT and 101 end HTTP).
    """

    __slots__ = (
        "sink",
        "max_header_size",
        "_buf",
        "_state",
        "_remaining",
        "_method_head",
        "_method_connect",
        "_keep_alive",
        "_trailer_bytes",
        "head_bytes",
        "trailer_block",
        "bytes_read",
        "body_length",
        "_misses",
        "_last_raw",
        "_last_hit",
        "_takes_whole",
    )

    def __init__(self, sink: ParserSink, max_header_size: int = 16384) -> None:
        self.sink = sink
        self.max_header_size = max_header_size
        self._buf = b""
        self._state = _HEAD
        self._remaining = 0
        self._method_head = False
        self._method_connect = False
        self._keep_alive = True
        self._trailer_bytes = 0
        #: size of the last head, body bytes read in the current message, and its
        #: Content-Length (-1: none, or the body is chunked or runs until EOF)
        self.head_bytes = 0
        self.trailer_block = b""  # the last trailer section's field lines, as received
        self.bytes_read = 0
        self.body_length = -1
        self._misses = 0  # heads in a row not found in the head cache
        # The last head found in the cache, and what it parsed to: a server repeats
        # its head, and comparing bytes is cheaper than hashing them for the lookup.
        self._last_raw = b""
        self._last_hit: tuple[int, str, dict[str, Any], bool, int] | None = None
        self._takes_whole = hasattr(sink, "on_whole")

    # -- driver API -------------------------------------------------------
    def expect(self, method: str) -> None:
        """Declare the method of the request whose response comes next."""
        self._method_head = method == "HEAD"
        self._method_connect = method == "CONNECT"

    @property
    def idle(self) -> bool:
        """True between messages with nothing buffered."""
        return self._state == _HEAD and not self._buf

    @property
    def in_head(self) -> bool:
        return self._state == _HEAD

    @property
    def eof_body(self) -> bool:
        """True while reading a body that ends when the connection closes."""
        return self._state == _BODY_EOF

    @property
    def body_remaining(self) -> int:
        """Bytes still owed by a Content-Length body with nothing buffered, else 0."""
        if self._state == _BODY_LENGTH and not self._buf:
            return self._remaining
        return 0

    @property
    def body_left(self) -> int:
        """Bytes still owed by a Content-Length body, buffered ones included, else 0."""
        return self._remaining if self._state == _BODY_LENGTH else 0

    def take_buffered(self) -> bytes:
        """Hand over the body bytes buffered after a stop (the caller feeds them back)."""
        buf, self._buf = self._buf, b""
        return buf

    def feed(self, data: bytes) -> bool:
        """Parse ``data`` (plus anything buffered), calling the sink. Returns
        :attr:`idle`: True when it ended between messages with nothing buffered."""
        if self._state == _HEAD and not self._buf and data:
            # The common read: exactly one response whose head was seen before.
            # Starting with the last head's bytes, it has that head (the last head's
            # first blank line is its end), so the search for the blank line is skipped.
            last = self._last_raw
            end = len(last)
            raw = data[:end]
            hit: tuple[int, str, dict[str, Any], bool, int] | None = None
            if end and raw == last:
                hit = self._last_hit
            else:
                end = data.find(b"\r\n\r\n") + 4
                if 4 < end <= self.max_header_size:
                    raw = data[:end]
                    hit = _head_cache_get(raw)
            if hit is not None and hit[4] == len(data) - end and not (self._method_head or self._method_connect):
                return self._one_response(data, raw, hit)
        if data:
            buf = self._buf + data if self._buf else data
        else:
            buf = self._buf
        self._buf = b""
        pos = 0
        n = len(buf)
        try:
            while pos < n:
                state = self._state
                if state == _BODY_LENGTH:
                    take = self._remaining
                    if n - pos < take:
                        take = n - pos
                    chunk = buf[pos : pos + take] if (pos or take != n) else buf
                    pos += take
                    self._remaining -= take
                    self.bytes_read += take
                    stop = self.sink.on_body(chunk)
                    if self._remaining == 0:
                        self._state = _HEAD
                        stop = self.sink.on_complete(None) or stop
                    if stop:
                        break
                elif state == _HEAD:
                    if buf.startswith(b"\r\n", pos):
                        pos = _skip_empty_lines(buf, pos)
                        continue
                    end = buf.find(b"\r\n\r\n", pos)
                    if end < 0:
                        _check_partial_head(buf, pos, self.max_header_size)
                        _check_partial_status_line(buf, pos)
                        break
                    stop = self._head(buf, pos, end + 4)
                    pos = end + 4
                    if self._state == _UPGRADED:
                        self.sink.on_upgrade(buf[pos:])
                        return False
                    if stop:
                        break
                elif state == _CHUNK_SIZE:
                    m = _CHUNK_SIZE_RE.match(buf, pos)
                    if m is None:
                        if buf.find(b"\n", pos) >= 0 or n - pos > 4096:
                            raise HTTPParserError(
                                "invalid chunk size", "HPE_INVALID_CHUNK_SIZE", buf[pos : pos + 32]
                            )
                        break
                    pos = m.end()
                    size = int(m.group(1), 16)
                    if size:
                        self._remaining = size
                        self._state = _CHUNK_DATA
                    else:
                        self._state = _TRAILERS
                        self._trailer_bytes = 0
                elif state == _CHUNK_DATA:
                    take = self._remaining
                    if n - pos < take:
                        take = n - pos
                    chunk = buf[pos : pos + take]
                    pos += take
                    self._remaining -= take
                    self.bytes_read += take
                    if self._remaining == 0:
                        self._state = _CHUNK_CRLF
                    if self.sink.on_body(chunk):
                        break
                elif state == _CHUNK_CRLF:
                    if n - pos < 2:
                        break
                    if buf[pos : pos + 2] != b"\r\n":
                        raise HTTPParserError(
                            "expected CRLF after chunk data", "HPE_STRICT", buf[pos : pos + 8]
                        )
                    pos += 2
                    self._state = _CHUNK_SIZE
                elif state == _TRAILERS:
                    if buf.startswith(b"\r\n", pos):
                        pos += 2
                        self._state = _HEAD
                        if self.sink.on_complete(None):
                            break
                        continue
                    end = buf.find(b"\r\n\r\n", pos)
                    if end < 0:
                        _check_partial_head(buf, pos, self.max_header_size)
                        break
                    if end + 4 - pos > self.max_header_size:
                        raise HeadersOverflowError()
                    block = self.trailer_block = buf[pos : end + 2]
                    trailers = parse_header_block(block)
                    pos = end + 4
                    self._state = _HEAD
                    if self.sink.on_complete(trailers):
                        break
                elif state == _BODY_EOF:
                    chunk = buf[pos:] if pos else buf
                    pos = n
                    self.bytes_read += len(chunk)
                    if self.sink.on_body(chunk):
                        break
                else:  # _UPGRADED or _DEAD: nothing more is HTTP
                    raise HTTPParserError("data after the connection stopped carrying HTTP", "HPE_CLOSED_CONNECTION")
        except BaseException:
            self._state = _DEAD
            raise
        if pos < n and self._state == _HEAD and buf.startswith(b"\r\n", pos):
            pos = _skip_empty_lines(buf, pos)  # (a sink stopped the loop before them)
        if pos < n:
            self._buf = buf[pos:]
            return False
        return self._state == _HEAD

    def feed_eof(self) -> bool:
        """The peer closed. Returns True if that completed an EOF-delimited body."""
        if self._state == _BODY_EOF:
            self._state = _DEAD
            self.sink.on_complete(None)
            return True
        self._state = _DEAD
        return False

    # -- internals ---------------------------------------------------------
    def _head(self, buf: bytes, start: int, end: int) -> bool | None:
        size = end - start
        if size > self.max_header_size:
            raise HeadersOverflowError()
        raw = buf[start:end]
        self.head_bytes = size
        self.bytes_read = 0
        ordinary = not (self._method_head or self._method_connect)
        if ordinary:
            hit = _head_cache_get(raw)
            if hit is not None:
                # These exact bytes were parsed and validated before: reuse the result.
                status, reason, headers, keep_alive, framing = hit
                self._misses = 0
                return self._start_body(status, reason, headers.copy(), raw, keep_alive, framing)
        m = _STATUS_RE.match(buf, start)
        if m is None:
            line_end = buf.find(b"\r\n", start)
            raise HTTPParserError(
                "invalid status line", "HPE_INVALID_CONSTANT", buf[start : min(line_end, start + 64)]
            )
        minor, status_b, reason_b = m.groups()
        status = int(status_b)
        if status < 100:
            raise HTTPParserError("invalid status code", "HPE_INVALID_STATUS", status_b)
        headers = parse_header_block(buf[m.end() : end - 2])
        reason = reason_b.decode("latin-1") if reason_b else ""

        if status < 200:
            if status == 101:
                self._state = _UPGRADED
                self.sink.on_head(status, reason, headers, raw, False)
                return True
            # Interim response: report it and parse the next head.
            return self.sink.on_head(status, reason, headers, raw, True)

        conn = headers.get("connection")
        if minor == b"1":
            keep_alive = (
                conn is None
                or (type(conn) is str and "close" not in conn.lower())
                or not _has_token(conn, "close")
            )
        else:
            keep_alive = conn is not None and _has_token(conn, "keep-alive")

        if self._method_connect:
            # The original treats every final answer to CONNECT as the start of a
            # tunnel; the caller checks the status (REFERENCE §1.8).
            self._state = _UPGRADED
            self.sink.on_head(status, reason, headers, raw, False)
            return True
        if self._method_head or status == 204 or status == 304:
            # RFC 9112 §6.3 rule 1: no body, whatever the framing headers say.
            return self._start_body(status, reason, headers, raw, keep_alive, 0)
        te = headers.get("transfer-encoding")
        cl = headers.get("content-length")
        if te is not None:
            if cl is not None:
                # §6.3 rule 3: a sender MUST NOT send both; refuse (smuggling vector).
                raise HTTPParserError(
                    "Transfer-Encoding can't be present with Content-Length", "HPE_UNEXPECTED_CONTENT_LENGTH"
                )
            if minor == b"0":
                keep_alive = False  # §6.1: Transfer-Encoding in HTTP/1.0 is faulty framing: close after
            codings = [p.strip().lower() for v in (te if type(te) is list else [te]) for p in v.split(",")]
            if codings[-1] == "chunked":
                if codings.count("chunked") > 1:
                    raise HTTPParserError("chunked applied twice", "HPE_INVALID_TRANSFER_ENCODING")
                framing = _FRAMED_CHUNKED
            else:
                framing = _FRAMED_BY_EOF
                keep_alive = False
        elif cl is not None:
            if type(cl) is str and cl.isdigit() and cl.isascii() and len(cl) < 19:
                framing = int(cl)
            else:
                framing = _content_length(cl)
        else:
            # §6.3 rule 8: the body runs until the connection closes.
            framing = _FRAMED_BY_EOF
            keep_alive = False
        if size <= _CACHED_HEAD_MAX:
            # A server whose heads never repeat (a request id, say) would only churn the
            # cache: after a few misses in a row, only every 32nd head is offered to it.
            misses = self._misses = self._misses + 1
            if misses <= 4 or not misses & 31:
                _remember_head(raw, status, reason, headers, keep_alive, framing)
        return self._start_body(status, reason, headers, raw, keep_alive, framing)

    def _one_response(self, data: bytes, raw: bytes, hit: tuple[int, str, dict[str, Any], bool, int]) -> bool:
        """A whole response with a cached head: what :meth:`feed` would do, in one step.
        Returns :attr:`idle` (False when the sink paused at the head)."""
        self._last_raw = raw
        self._last_hit = hit
        status, reason, headers, keep_alive, length = hit
        end = self.head_bytes = len(raw)
        self.body_length = length
        self._misses = 0
        sink = self.sink
        headers = headers.copy()
        self.bytes_read = length
        if self._takes_whole:
            body = data[end:] if length else b""
            # (on_whole is optional, so not in ParserSink: _takes_whole says the sink has it.)
            if sink.on_whole(status, reason, headers, raw, keep_alive, body):  # type: ignore[attr-defined]
                return True
            return self._keep_body(length, body)
        if length:
            if sink.on_head(status, reason, headers, raw, keep_alive):
                return self._keep_body(length, data[end:])
            sink.on_body(data[end:])
        else:
            sink.on_head(status, reason, headers, raw, keep_alive)
        sink.on_complete(None)
        return True

    def _keep_body(self, length: int, body: bytes) -> bool:
        """The sink paused at a head: keep its ``length``-byte body for the next feed.
        Returns False (not idle)."""
        self.bytes_read = 0
        self._remaining = length
        self._state = _BODY_LENGTH
        self._buf = body
        return False

    def _start_body(
        self, status: int, reason: str, headers: dict[str, Any], raw: bytes, keep_alive: bool, framing: int
    ) -> bool | None:
        """Report a final head and enter the state its framing calls for."""
        sink = self.sink
        self.body_length = framing if framing >= 0 else -1
        if framing > 0:
            self._remaining = framing
            self._state = _BODY_LENGTH
            return sink.on_head(status, reason, headers, raw, keep_alive)
        if framing == 0:
            self._state = _HEAD
            stop = sink.on_head(status, reason, headers, raw, keep_alive)
            return sink.on_complete(None) or stop
        self._state = _CHUNK_SIZE if framing == _FRAMED_CHUNKED else _BODY_EOF
        return sink.on_head(status, reason, headers, raw, keep_alive)


# A cache of parsed final heads, keyed by their exact bytes. A server tends to
# send the same head again and again (only Date moves, once a second), so most
# responses skip the status-line regex, the header validation and the framing
# rules. Only what the bytes alone decide is kept: heads of HEAD and CONNECT
# requests, interim heads and 204/304 never enter it, heads with repeated
# names neither (their values are lists), and a hit is copied before use.
_HEAD_CACHE: Final[dict[bytes, tuple[int, str, dict[str, Any], bool, int]]] = {}
_HEAD_CACHE_SIZE: Final = 256
_CACHED_HEAD_MAX: Final = 2048  # bytes; bigger heads are rarely identical
_head_cache_get: Final = _HEAD_CACHE.get


def _remember_head(
    raw: bytes, status: int, reason: str, headers: dict[str, Any], keep_alive: bool, framing: int
) -> None:
    for value in headers.values():
        if type(value) is list:
            return
    if len(_HEAD_CACHE) >= _HEAD_CACHE_SIZE:
        _HEAD_CACHE.clear()  # heads that stopped repeating (a new Date) leave together
    _HEAD_CACHE[raw] = (status, reason, headers.copy(), keep_alive, framing)
