"""The strict HTTP/1.1 response parser (``_core/h1.py``), with bytes only.

Each case is fed whole and byte by byte; the events must be the same (body
pieces are merged, since their split depends on the feeding). A
differential test compares the parser with h11 on generated responses; the
known disagreements are listed in :data:`DISAGREEMENTS` with the rule that
decides them.
"""

from __future__ import annotations

from typing import Any

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenhttp._core import h1
from greenhttp._core.h1 import ResponseParser
from greenhttp.errors import HeadersOverflowError, HTTPParserError


class Sink:
    """Records the parser's calls as tuples."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def on_head(self, status, reason, headers, raw, keep_alive):
        self.events.append(("head", status, reason, headers, raw, keep_alive))

    def on_body(self, chunk):
        assert isinstance(chunk, bytes)
        self.events.append(("body", chunk))

    def on_complete(self, trailers):
        self.events.append(("end", trailers))

    def on_upgrade(self, rest):
        self.events.append(("upgrade", rest))


def merged(events: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for ev in events:
        if ev[0] == "body" and out and out[-1][0] == "body":
            out[-1] = ("body", out[-1][1] + ev[1])
        elif ev[0] == "body" and not ev[1]:
            continue
        else:
            out.append(ev)
    return out


def parse(data: bytes, methods: tuple[str, ...] = ("GET",), *, eof: bool = False, bytewise: bool = False,
          max_header_size: int = 16384) -> list[tuple[Any, ...]]:
    """Feed ``data`` (whole or one byte at a time); ``methods`` are the requests
    in order, declared to the parser as each response begins."""
    sink = Sink()
    parser = ResponseParser(sink, max_header_size)
    pending = list(methods)
    parser.expect(pending.pop(0))

    original_complete = sink.on_complete

    def on_complete(trailers):
        original_complete(trailers)
        if pending:
            parser.expect(pending.pop(0))

    sink.on_complete = on_complete  # type: ignore[method-assign]
    pieces = [data[i : i + 1] for i in range(len(data))] if bytewise else [data]
    for piece in pieces:
        if sink.events and sink.events[-1][0] == "upgrade":
            break  # the rest is not HTTP: the driver stops feeding the parser
        parser.feed(piece)
    if eof:
        parser.feed_eof()
    return merged(sink.events)


def both_ways(data: bytes, methods: tuple[str, ...] = ("GET",), **kw: Any) -> list[tuple[Any, ...]]:
    whole = parse(data, methods, **kw)
    bytewise = parse(data, methods, bytewise=True, **kw)
    if whole and whole[-1][0] == "upgrade":
        # Fed byte by byte, nothing after the head has arrived at upgrade time.
        assert bytewise[:-1] == whole[:-1]
        assert bytewise[-1] == ("upgrade", b"")
    else:
        assert bytewise == whole
    return whole


def heads(events):
    return [e for e in events if e[0] == "head"]


# ---------------------------------------------------------------------------
# framing
# ---------------------------------------------------------------------------


def test_content_length():
    data = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"
    ev = both_ways(data)
    assert ev == [
        ("head", 200, "OK", {"content-type": "text/plain", "content-length": "5"},
         data[:-5], True),
        ("body", b"hello"),
        ("end", None),
    ]


def test_content_length_zero_completes_at_once():
    ev = both_ways(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert [e[0] for e in ev] == ["head", "end"]


def test_chunked_with_extensions_and_trailers():
    data = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"
        b"5;name=value;flag\r\nhello\r\n"
        b"1;x=\"quoted\"\r\n \r\n"
        b"A\r\n0123456789\r\n"
        b"0;last\r\nX-Sum: abc\r\nX-Other:  two  \r\n\r\n"
    )
    ev = both_ways(data)
    assert ev[0][1] == 200 and ev[0][3]["transfer-encoding"] == "chunked" and ev[0][5] is True
    assert ev[1] == ("body", b"hello 0123456789")
    assert ev[2] == ("end", {"x-sum": "abc", "x-other": "two"})
    assert len(ev) == 3


def test_chunked_without_trailers_ends_with_none_or_empty():
    ev = both_ways(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
    assert ev[1] == ("body", b"abc")
    assert ev[2][0] == "end" and not ev[2][1]


def test_chunk_size_hex_upper_and_lower_case():
    ev = both_ways(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\nB\r\nabcdefghijk\r\n0\r\n\r\n")
    assert ev[1] == ("body", b"0123456789abcdefghijk")


def test_eof_delimited_body():
    data = b"HTTP/1.1 200 OK\r\nX: y\r\n\r\nall of this until close"
    ev = both_ways(data, eof=True)
    assert ev[0][1] == 200 and ev[0][5] is False  # the connection can't be reused
    assert ev[1] == ("body", b"all of this until close")
    assert ev[2] == ("end", None)


def test_eof_delimited_body_not_complete_without_eof():
    ev = parse(b"HTTP/1.1 200 OK\r\n\r\npartial")
    assert [e[0] for e in ev] == ["head", "body"]


def test_feed_eof_mid_content_length_body_is_not_completion():
    sink = Sink()
    p = ResponseParser(sink)
    p.expect("GET")
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    assert p.feed_eof() is False
    assert [e[0] for e in sink.events] == ["head", "body"]


def test_transfer_encoding_not_ending_in_chunked_is_read_until_close():
    # RFC 9112 §6.3 rule 4 (response): read until the connection closes.
    ev = both_ways(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzzzz", eof=True)
    assert ev[0][5] is False and ev[1] == ("body", b"zzzz") and ev[2] == ("end", None)


def test_http10_keep_alive_rules():
    ev = both_ways(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert ev[0][5] is False
    ev = both_ways(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok")
    assert ev[0][5] is True


def test_connection_close_on_http11():
    ev = both_ways(b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\nContent-Length: 2\r\n\r\nok")
    assert ev[0][5] is False


def test_repeated_headers_become_lists_and_set_cookie_is_always_a_list():
    ev = both_ways(
        b"HTTP/1.1 200 OK\r\nX-A: 1\r\nSet-Cookie: a=b\r\nx-a: 2\r\nX-A: 3\r\nContent-Length: 0\r\n\r\n"
    )
    headers = ev[0][3]
    assert headers == {"x-a": ["1", "2", "3"], "set-cookie": ["a=b"], "content-length": "0"}


def test_header_values_ows_trimmed_and_obs_text_kept_as_latin1():
    ev = both_ways(b"HTTP/1.1 200 OK\r\nA:\t b c \t\r\nB:\r\nC: caf\xe9\r\nContent-Length: 0\r\n\r\n")
    assert ev[0][3] == {"a": "b c", "b": "", "c": "caf\xe9", "content-length": "0"}


def test_status_line_without_reason():
    ev = both_ways(b"HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n")
    assert ev[0][1:3] == (404, "")


def test_identical_content_length_values_are_one_value():
    # RFC 9110 §8.6: a list of identical values may be accepted as that value.
    ev = both_ways(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok")
    assert ev[1] == ("body", b"ok")
    ev = both_ways(b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok")
    assert ev[1] == ("body", b"ok")


# ---------------------------------------------------------------------------
# messages without a body, interim responses, upgrades
# ---------------------------------------------------------------------------


def test_head_has_no_body_whatever_content_length_says():
    data = (
        b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    )
    ev = both_ways(data, ("HEAD", "GET"))
    assert [e[0] for e in ev] == ["head", "end", "head", "body", "end"]
    assert ev[0][3]["content-length"] == "1234"
    assert ev[3] == ("body", b"ok")


def test_head_with_transfer_encoding_chunked_has_no_body():
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"
    ev = both_ways(data, ("HEAD", "GET"))
    assert [(e[0], e[1] if e[0] == "head" else None) for e in ev] == [
        ("head", 200), ("end", None), ("head", 204), ("end", None)
    ]


@pytest.mark.parametrize("status", [204, 304])
def test_204_and_304_have_no_body(status):
    data = (
        f"HTTP/1.1 {status} X\r\nContent-Length: 10\r\n\r\n".encode()
        + b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nz"
    )
    ev = both_ways(data, ("GET", "GET"))
    assert [e[0] for e in ev] == ["head", "end", "head", "body", "end"]
    assert ev[0][1] == status and ev[3] == ("body", b"z")


def test_interim_responses_before_the_final_one():
    data = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"
    )
    ev = both_ways(data)
    assert [(e[0], e[1]) if e[0] == "head" else e for e in ev] == [
        ("head", 100), ("head", 103), ("head", 200), ("body", b"abc"), ("end", None)
    ]
    assert ev[1][3] == {"link": "</style.css>; rel=preload"}


def test_101_upgrade_hands_over_the_bytes_after_the_head():
    head = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    ev = both_ways(head + b"\x81\x02hi\r\n\r\nnot http", ("GET",))
    assert ev[0][:3] == ("head", 101, "Switching Protocols")
    assert ev[0][5] is False
    assert ev[-1] == ("upgrade", b"\x81\x02hi\r\n\r\nnot http")
    assert len(ev) == 2


def test_connect_2xx_is_a_tunnel():
    head = b"HTTP/1.1 200 Connection Established\r\n\r\n"
    ev = both_ways(head + b"\x16\x03\x01tls bytes", ("CONNECT",))
    assert ev == [("head", 200, "Connection Established", {}, head, False), ("upgrade", b"\x16\x03\x01tls bytes")]


def test_after_upgrade_more_bytes_are_refused():
    sink = Sink()
    p = ResponseParser(sink)
    p.expect("GET")
    p.feed(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
    with pytest.raises(HTTPParserError):
        p.feed(b"more")


def test_pipelined_responses_back_to_back_in_one_feed():
    data = (
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na"
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nbc\r\n0\r\nT: 1\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
        b"HTTP/1.1 204 No Content\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ndef"
    )
    ev = both_ways(data, ("GET", "GET", "HEAD", "GET", "GET"))
    assert [e[1] for e in heads(ev)] == [200, 201, 200, 204, 200]
    assert [e for e in ev if e[0] == "body"] == [("body", b"a"), ("body", b"bc"), ("body", b"def")]
    assert [e[1] for e in ev if e[0] == "end"] == [None, {"t": "1"}, None, None, None]


def test_sink_may_stop_the_parser_and_feed_empty_continues():
    class Stopping(Sink):
        def on_head(self, *a):
            super().on_head(*a)
            return True

    sink = Stopping()
    p = ResponseParser(sink)
    p.expect("GET")
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert [e[0] for e in sink.events] == ["head"]
    p.feed(b"")
    assert [e[0] for e in sink.events] == ["head", "body", "end", "head", "end"]


# ---------------------------------------------------------------------------
# limits
# ---------------------------------------------------------------------------


def test_max_header_size_complete_head_over_the_limit():
    data = b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200 + b"\r\nContent-Length: 0\r\n\r\n"
    with pytest.raises(HeadersOverflowError):
        parse(data, max_header_size=100)
    with pytest.raises(HeadersOverflowError):
        parse(data, max_header_size=100, bytewise=True)
    assert parse(data, max_header_size=len(data))[0][1] == 200


def test_max_header_size_incomplete_head_over_the_limit():
    # The head never ends: the parser must not buffer it forever.
    data = b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 100
    with pytest.raises(HeadersOverflowError):
        parse(data, max_header_size=256)


def test_max_header_size_applies_to_trailers():
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + b"T: " + b"v" * 300 + b"\r\n\r\n"
    with pytest.raises(HeadersOverflowError):
        parse(data, max_header_size=128)


# ---------------------------------------------------------------------------
# the cache of parsed heads (identical bytes skip validation the second time)
# ---------------------------------------------------------------------------


@pytest.fixture
def empty_head_cache():
    h1._HEAD_CACHE.clear()
    yield h1._HEAD_CACHE
    h1._HEAD_CACHE.clear()


@pytest.mark.parametrize(
    "data, eof",
    [
        (b"HTTP/1.1 200 OK\r\nServer: t\r\nContent-Length: 3\r\n\r\nabc", False),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabc", True),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", False),
        (b"HTTP/1.1 404 Not Found\r\nContent-Length: 1\r\n\r\nx", False),
    ],
    ids=["length", "chunked", "eof", "http10-empty", "404"],
)
def test_a_cached_head_parses_like_the_first_time(empty_head_cache, data, eof):
    first = both_ways(data, eof=eof)
    assert len(empty_head_cache) == 1
    again = both_ways(data, eof=eof)
    assert again == first


def test_a_cached_head_gives_each_response_its_own_headers(empty_head_cache):
    data = b"HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n"
    first = heads(parse(data))[0][3]
    first["x-a"] = "changed"
    first["x-new"] = "added"
    second = heads(parse(data))[0][3]
    assert second == {"x-a": "1", "content-length": "0"}
    assert second is not first


def test_heads_with_repeated_names_are_not_cached(empty_head_cache):
    data = b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nX: 1\r\nX: 2\r\nContent-Length: 0\r\n\r\n"
    first = heads(parse(data))[0][3]
    first["x"].append("3")
    first["set-cookie"].clear()
    assert not empty_head_cache
    assert heads(parse(data))[0][3] == {"set-cookie": ["a=1"], "x": ["1", "2"], "content-length": "0"}


def test_a_head_cached_for_get_still_has_no_body_for_head(empty_head_cache):
    data = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
    assert parse(data + b"hello") == parse(data + b"hello")  # cached by the second GET
    assert len(empty_head_cache) == 1
    events = parse(data + data + b"hello", ("HEAD", "GET"))
    assert [e[0] for e in events] == ["head", "end", "head", "body", "end"]
    assert events[3] == ("body", b"hello")


def test_interim_connect_and_bodyless_heads_are_not_cached(empty_head_cache):
    parse(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
    parse(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n")
    parse(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", ("HEAD",))
    parse(b"HTTP/1.1 200 Connection established\r\n\r\n", ("CONNECT",))
    assert not empty_head_cache


def test_max_header_size_applies_to_a_cached_head(empty_head_cache):
    data = b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200 + b"\r\nContent-Length: 0\r\n\r\n"
    assert heads(parse(data))[0][1] == 200
    assert len(empty_head_cache) == 1
    with pytest.raises(HeadersOverflowError):
        parse(data, max_header_size=100)


def test_a_whole_cached_response_in_one_read_honours_a_pause_at_the_head(empty_head_cache):
    data = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    parse(data)  # now cached: the next read of exactly one response takes the short path

    class PausingSink(Sink):
        def on_head(self, *args):
            super().on_head(*args)
            return True

    sink = PausingSink()
    p = ResponseParser(sink)
    p.expect("GET")
    p.feed(data)
    assert [e[0] for e in sink.events] == ["head"]
    assert p.body_remaining == 0 and p.bytes_read == 0  # the body is buffered, not consumed
    p.feed(b"")
    assert [e[0] for e in sink.events] == ["head", "body", "end"]
    assert sink.events[1] == ("body", b"hello") and p.bytes_read == 5 and p.idle


def test_a_cached_head_followed_by_more_than_its_body_takes_the_general_path(empty_head_cache):
    one = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    parse(one)
    events = parse(one + one + b"HTTP/1.1 200 O", ("GET", "GET", "GET"))
    assert [e[0] for e in events] == ["head", "body", "end", "head", "body", "end"]


def test_one_parser_tells_a_repeated_head_from_a_new_one_of_the_same_start(empty_head_cache):
    # The parser compares each read with the last head it took from the cache before
    # searching for the head's end: reads that only start alike must still parse apart.
    a = b"HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 2\r\n\r\nok"
    b = b"HTTP/1.1 200 OK\r\nX-A: 12\r\nContent-Length: 3\r\n\r\nyes"
    parse(a)
    parse(b)  # both heads cached
    sink = Sink()
    p = ResponseParser(sink)
    reads = [[a], [a], [b], [a], [a[:20], a[20:]], [a[:-1], a[-1:]], [a + a]]
    for pieces in reads:
        for piece in pieces:
            p.expect("GET")
            p.feed(piece)
    got = [(e[3]["x-a"], e[4]) for e in heads(sink.events)]
    head_a, head_b = a[: a.index(b"\r\n\r\n") + 4], b[: b.index(b"\r\n\r\n") + 4]
    assert got == [("1", head_a)] * 2 + [("12", head_b)] + [("1", head_a)] * 5
    assert [e[1] for e in sink.events if e[0] == "body"] == [b"ok", b"ok", b"yes", b"ok", b"ok", b"o", b"k", b"ok", b"ok"]
    assert p.idle


def test_a_server_whose_heads_never_repeat_barely_touches_the_cache(empty_head_cache):
    sink = Sink()
    p = ResponseParser(sink)
    for i in range(200):
        p.expect("GET")
        p.feed(b"HTTP/1.1 200 OK\r\nX-Request-Id: %d\r\nContent-Length: 0\r\n\r\n" % i)
    assert len(heads(sink.events)) == 200
    assert len(empty_head_cache) <= 4 + 200 // 32  # the first few, then one in 32
    # Heads that repeat are cached again: a hit resets the count.
    same = b"HTTP/1.1 200 OK\r\nX-Same: 1\r\nContent-Length: 0\r\n\r\n"
    for _ in range(40):
        p.expect("GET")
        p.feed(same)
    assert same in empty_head_cache
    assert p._misses == 0


def test_the_head_cache_is_bounded(empty_head_cache):
    for i in range(h1._HEAD_CACHE_SIZE * 2 + 10):
        events = parse(b"HTTP/1.1 200 OK\r\nX-Id: %d\r\nContent-Length: 0\r\n\r\n" % i)
        assert heads(events)[0][3]["x-id"] == str(i)
        assert len(empty_head_cache) <= h1._HEAD_CACHE_SIZE
    big = b"HTTP/1.1 200 OK\r\nX: " + b"v" * h1._CACHED_HEAD_MAX + b"\r\nContent-Length: 0\r\n\r\n"
    empty_head_cache.clear()
    parse(big)
    assert not empty_head_cache


def test_bytes_read_counts_the_body():
    sink = Sink()
    p = ResponseParser(sink)
    p.expect("GET")
    p.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
    assert p.bytes_read == 3


# ---------------------------------------------------------------------------
# refusals (DESIGN.md §5: strict, as llhttp)
# ---------------------------------------------------------------------------

REFUSED = {
    "bare LF line endings": b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
    "bare LF ending the head": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\nok",
    "bare LF in a header line": b"HTTP/1.1 200 OK\r\nA: b\nContent-Length: 2\r\n\r\nok",
    "bare LF after the status line": b"HTTP/1.1 200 OK\nContent-Length: 2\r\n\r\nok",
    "bare CR in a value": b"HTTP/1.1 200 OK\r\nA: b\rc\r\nContent-Length: 2\r\n\r\nok",
    "bare CR line ending": b"HTTP/1.1 200 OK\rContent-Length: 2\r\n\r\nok",
    "obs-fold": b"HTTP/1.1 200 OK\r\nA: b\r\n c\r\nContent-Length: 2\r\n\r\nok",
    "obs-fold with tab": b"HTTP/1.1 200 OK\r\nA: b\r\n\tc\r\nContent-Length: 2\r\n\r\nok",
    "space before colon": b"HTTP/1.1 200 OK\r\nA : b\r\nContent-Length: 2\r\n\r\nok",
    "tab before colon": b"HTTP/1.1 200 OK\r\nA\t: b\r\nContent-Length: 2\r\n\r\nok",
    "no colon": b"HTTP/1.1 200 OK\r\nJustAName\r\nContent-Length: 2\r\n\r\nok",
    "empty name": b"HTTP/1.1 200 OK\r\n: b\r\nContent-Length: 2\r\n\r\nok",
    "conflicting content-length": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
    "conflicting content-length list": b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nok",
    "signed content-length": b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
    "negative content-length": b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\nok",
    "hex content-length": b"HTTP/1.1 200 OK\r\nContent-Length: 0x2\r\n\r\nok",
    "transfer-encoding with content-length":
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    "chunked twice": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    "bad chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
    "chunk size with 0x": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nok\r\n0\r\n\r\n",
    "negative chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\nok\r\n0\r\n\r\n",
    "chunk size with trailing space": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\nok\r\n0\r\n\r\n",
    "chunk size with bare LF": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\nok\r\n0\r\n\r\n",
    "chunk size overflow": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"f" * 17 + b"\r\n",
    "chunk data not followed by CRLF": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX0\r\n\r\n",
    "NUL in a value": b"HTTP/1.1 200 OK\r\nA: b\x00c\r\nContent-Length: 2\r\n\r\nok",
    "CTL in a value": b"HTTP/1.1 200 OK\r\nA: b\x01c\r\nContent-Length: 2\r\n\r\nok",
    "DEL in a value": b"HTTP/1.1 200 OK\r\nA: b\x7fc\r\nContent-Length: 2\r\n\r\nok",
    "ESC in a value": b"HTTP/1.1 200 OK\r\nA: \x1b[31m\r\nContent-Length: 2\r\n\r\nok",
    "NUL in a name": b"HTTP/1.1 200 OK\r\nA\x00: b\r\nContent-Length: 2\r\n\r\nok",
    "NUL in a trailer": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nT: a\x00\r\n\r\n",
    "bad status line": b"HTTP/1.1 OK\r\nContent-Length: 0\r\n\r\n",
    "HTTP/2.0 status line": b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
    "lower-case protocol": b"http/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    "status below 100": b"HTTP/1.1 099 X\r\nContent-Length: 0\r\n\r\n",
    "two-digit status": b"HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n",
    "whitespace before the first header": b"HTTP/1.1 200 OK\r\n A: b\r\nContent-Length: 0\r\n\r\n",
    "leading bare LF": b"\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    "NUL in the reason phrase": b"HTTP/1.1 200 O\x00K\r\nContent-Length: 0\r\n\r\n",
}


@pytest.mark.parametrize("name", list(REFUSED))
@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
def test_refusals(name, bytewise):
    with pytest.raises(HTTPParserError) as info:
        parse(REFUSED[name], bytewise=bytewise, eof=True)
    assert info.value.code.startswith("HPE_")
    assert "Response does not match the HTTP/1.1 protocol" in str(info.value)


@pytest.mark.parametrize(
    "junk",
    [
        b"garbage",
        b"1111\r\n",
        b"hTTP/1.1 200 OK\r\n",
        b"HTTP/1.1 2x0 OK\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n11111\r\n",  # more body than announced
    ],
)
def test_a_head_that_cannot_become_a_response_is_refused_before_its_blank_line(junk):
    # As llhttp: at the first line that cannot be a status line, not at a blank
    # line that may never come (the request would wait for its headers timeout).
    p = ResponseParser(Sink())
    p.expect("GET")
    with pytest.raises(HTTPParserError, match="invalid status line"):
        p.feed(junk)


@pytest.mark.parametrize("start", [b"H", b"HTTP/1.", b"HTTP/1.1 200 O", b"HTTP/1.1 200 OK\r\nA: b", b"\r"])
def test_the_start_of_a_status_line_waits_for_the_rest(start):
    sink = Sink()
    p = ResponseParser(sink)
    p.expect("GET")
    assert p.feed(start) is False
    whole = b"HTTP/1.1 200 OK\r\nA: b\r\nContent-Length: 0\r\n\r\n"
    assert p.feed(b"\n" + whole if start == b"\r" else whole[len(start) :]) is True
    assert heads(merged(sink.events))[0][1] == 200


def test_empty_lines_before_a_status_line_are_skipped():
    # llhttp skips CRLFs before a message (RFC 9112 §2.2's robustness): a server's
    # stray CRLF after a body must not spoil the next response on the connection.
    data = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2\r\n"
    events = both_ways(data, ("GET", "GET"))
    assert [e[1] for e in events if e[0] == "body"] == [b"1", b"2"]
    assert len(heads(events)) == 2
    p = ResponseParser(Sink())
    p.expect("GET")
    assert p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1\r\n") is True  # idle: nothing left


def test_a_refused_parser_stays_dead():
    sink = Sink()
    p = ResponseParser(sink)
    p.expect("GET")
    with pytest.raises(HTTPParserError):
        p.feed(b"HTTP/1.1 200 OK\r\nA : b\r\n\r\n")
    with pytest.raises(HTTPParserError):
        p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert sink.events == []


def test_refusal_on_the_second_pipelined_response_keeps_the_first():
    sink = Sink()
    p = ResponseParser(sink)
    p.expect("GET")
    with pytest.raises(HTTPParserError):
        p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\naHTTP/1.1 200 OK\r\nX\x01: y\r\n\r\n")
    assert merged(sink.events) == [
        ("head", 200, "OK", {"content-length": "1"}, b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n", True),
        ("body", b"a"),
        ("end", None),
    ]


# ---------------------------------------------------------------------------
# differential: our parser against h11
# ---------------------------------------------------------------------------


def h11_parse(data: bytes, method: str = "GET") -> list[tuple[Any, ...]] | Exception:
    """h11's reading of ``data`` as the answer to one ``method`` request, in our event shape."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target="/", headers=[("Host", "example")]))
    conn.send(h11.EndOfMessage())
    out: list[tuple[Any, ...]] = []
    try:
        conn.receive_data(data)
        conn.receive_data(b"")
        while True:
            ev = conn.next_event()
            if ev is h11.NEED_DATA or ev is h11.PAUSED or type(ev) is h11.ConnectionClosed:
                break
            if type(ev) in (h11.InformationalResponse, h11.Response):
                out.append(("head", ev.status_code, ev.reason.decode("latin-1"), _h11_headers(ev.headers)))
            elif type(ev) is h11.Data:
                out.append(("body", bytes(ev.data)))
            elif type(ev) is h11.EndOfMessage:
                out.append(("end", _h11_headers(ev.headers) or None))
                break
    except h11.RemoteProtocolError as exc:
        return exc
    return merged(out)


def _h11_headers(headers: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in headers:
        k, v = name.decode("latin-1"), value.decode("latin-1")
        if k in out:
            out[k] = out[k] + [v] if isinstance(out[k], list) else [out[k], v]
        else:
            out[k] = [v] if k == "set-cookie" else v
    return out


def ours_parse(data: bytes, method: str = "GET", bytewise: bool = False) -> list[tuple[Any, ...]] | Exception:
    try:
        ev = parse(data, (method,), eof=True, bytewise=bytewise)
    except (HTTPParserError, HeadersOverflowError) as exc:
        return exc
    out = []
    for e in ev:
        if e[0] == "head":
            out.append(e[:4])
        elif e[0] == "end":
            out.append(("end", e[1] or None))
        else:
            out.append(e)
    return out


# How h11 (version 0.16) and we disagree, each decided by the rule named.
# "ours" is what greenhttp must do; "h11" is what h11 does.
DISAGREEMENTS = {
    "bare LF line endings": (
        b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
        "RFC 9112 §2.2 lets a recipient accept a bare LF; DESIGN.md §5 chooses llhttp's strict "
        "refusal (a bare LF is a request-smuggling and response-splitting vector)",
        "refuse", "accept",
    ),
    "obs-fold in a response": (
        b"HTTP/1.1 200 OK\r\nA: b\r\n c\r\nContent-Length: 2\r\n\r\nok",
        "RFC 9112 §5.2: obs-fold is deprecated and a sender MUST NOT generate it; h11 unfolds it "
        "as a user agent may, we refuse as llhttp strict does (DESIGN.md §5)",
        "refuse", "accept",
    ),
    "Transfer-Encoding and Content-Length together": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        "RFC 9112 §6.3 rule 3: such a message 'ought to be handled as an error' (smuggling); "
        "h11 lets Transfer-Encoding win",
        "refuse", "accept",
    ),
    "whitespace after the chunk size": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\nok\r\n0\r\n\r\n",
        "RFC 9112 §7.1: chunk-size = 1*HEXDIG, followed by chunk-ext or CRLF; h11 skips the space",
        "refuse", "accept",
    ),
    "a control character in a field value": (
        b"HTTP/1.1 200 OK\r\nA: b\x01c\r\nContent-Length: 2\r\n\r\nok",
        "RFC 9110 §5.5: field-value is VCHAR, obs-text, SP and HTAB; CTLs are invalid",
        "refuse", "accept",
    ),
    "DEL in a field value": (
        b"HTTP/1.1 200 OK\r\nA: b\x7fc\r\nContent-Length: 2\r\n\r\nok",
        "RFC 9110 §5.5 (DEL is a CTL, not a VCHAR)",
        "refuse", "accept",
    ),
    "HTTP/2.0 in an HTTP/1.1 status line": (
        b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
        "RFC 9112 §2.3: a major version other than 1 is not HTTP/1.x; h11 accepts any digit",
        "refuse", "accept",
    ),
    "an empty line before the status line": (
        b"\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        "RFC 9112 §2.2: a robust recipient ignores empty lines before a message; llhttp skips "
        "them, h11 refuses 'no response line received'",
        "accept", "refuse",
    ),
    "a transfer coding other than chunked last": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzzzz",
        "RFC 9112 §6.3 rule 4: in a response, read the body until the connection closes; "
        "h11 refuses any coding but chunked",
        "accept", "refuse",
    ),
}


@pytest.mark.parametrize("name", list(DISAGREEMENTS))
def test_known_disagreements_with_h11(name):
    data, _rule, ours_does, h11_does = DISAGREEMENTS[name]
    ours, theirs = ours_parse(data), h11_parse(data)
    assert isinstance(ours, Exception) == (ours_does == "refuse"), ours
    assert isinstance(theirs, Exception) == (h11_does == "refuse"), theirs
    # The bytewise reading decides the same way.
    assert isinstance(ours_parse(data, bytewise=True), Exception) == (ours_does == "refuse")


_token = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~",
                 min_size=1, max_size=12)
_value = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20).map(
    lambda s: s
) | st.builds(lambda a, b: f"{a} {b}", st.text(alphabet="abc=;", min_size=1, max_size=5),
              st.text(alphabet="xyz/,", min_size=1, max_size=5))
_framing_names = {"content-length", "transfer-encoding", "connection", "trailer", "upgrade", "keep-alive"}


@st.composite
def responses(draw, method="GET"):
    """A valid HTTP/1.1 response to a ``method`` request (no body after a HEAD)."""
    status = draw(st.sampled_from([200, 201, 202, 203, 206, 301, 302, 400, 404, 418, 500, 503, 599]))
    reason = draw(st.sampled_from(["", "OK", "Not Found", "Some Reason With Spaces", "x"]))
    fields = draw(st.lists(st.tuples(_token, _value), max_size=6))
    fields = [(k, v) for k, v in fields if k.lower() not in _framing_names]
    ows = draw(st.sampled_from(["", " ", "  ", "\t", " \t"]))
    body = draw(st.binary(max_size=300))
    framing = draw(st.sampled_from(["length", "chunked", "eof"]))
    interim = draw(st.booleans())
    lines = []
    if interim:
        lines.append(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
    head = [f"HTTP/1.1 {status} {reason}\r\n" if reason else f"HTTP/1.1 {status}\r\n"]
    for k, v in fields:
        head.append(f"{k}:{ows}{v}{ows}\r\n")
    trailers: list[tuple[str, str]] = []
    if framing == "length":
        head.append(f"Content-Length: {len(body)}\r\n\r\n")
        payload = body
    elif framing == "chunked":
        head.append("Transfer-Encoding: chunked\r\n\r\n")
        cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
        pieces, last = [], 0
        for c in cuts + [len(body)]:
            if c > last:
                pieces.append(body[last:c])
                last = c
        ext = draw(st.sampled_from(["", ";a", ";a=b", ';q="x y"']))
        payload = b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext.encode(), p) for p in pieces)
        trailers = draw(st.lists(st.tuples(_token, _value), max_size=2))
        trailers = [(k, v) for k, v in trailers if k.lower() not in _framing_names]
        payload += b"0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in trailers).encode() + b"\r\n"
    else:
        head.append("\r\n")
        payload = body
    if method == "HEAD":
        payload = b""  # RFC 9112 §6.3 rule 1: the framing headers describe a GET's body
    lines.append("".join(head).encode("latin-1") + payload)
    return b"".join(lines)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["GET", "HEAD"]).flatmap(lambda m: st.tuples(st.just(m), responses(m))))
def test_differential_against_h11(case):
    method, data = case
    ours = ours_parse(data, method)
    theirs = h11_parse(data, method)
    assert not isinstance(theirs, Exception), theirs  # the generator only makes valid responses
    assert ours == theirs
    assert ours_parse(data, method, bytewise=True) == ours


def test_one_parser_reading_alternating_cached_heads_never_mixes_them_up(empty_head_cache):
    # Each read holds exactly one response with a cached head; the parser compares
    # a head with the last one it found before looking it up.
    a = b"HTTP/1.1 200 OK\r\nX-Which: a\r\nContent-Length: 1\r\n\r\nA"
    b = b"HTTP/1.1 404 Not Found\r\nX-Which: b\r\nContent-Length: 2\r\n\r\nBB"
    parse(a), parse(b)  # both cached now
    sink = Sink()
    parser = ResponseParser(sink)
    for data in (a, a, b, a, b, b):
        parser.expect("GET")
        parser.feed(data)
    got = [(e[1], e[3]["x-which"]) for e in heads(sink.events)]
    assert got == [(200, "a"), (200, "a"), (404, "b"), (200, "a"), (404, "b"), (404, "b")]
    assert [e[1] for e in sink.events if e[0] == "body"] == [b"A", b"A", b"BB", b"A", b"BB", b"BB"]
    parser.expect("HEAD")  # the last head, but for HEAD: no body is read after it
    parser.feed(b[: b.index(b"\r\n\r\n") + 4])
    assert sink.events[-2][0] == "head" and sink.events[-1] == ("end", None)
