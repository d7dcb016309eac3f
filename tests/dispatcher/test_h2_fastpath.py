"""The HTTP/2 fast path (``_core/h2.py``): streams whose request is one HEADERS frame.

The session runs those streams itself instead of through h2. Most tests here
are differential: the same server script runs against a session with the fast
path and one without (everything through h2, as before), and the events the
driver gets and the frames the client sends must be the same. The rest test
what the fast path adds: its HPACK encoding (no dynamic table), the cache of
received header blocks, and the cases where it must step aside.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import pytest
from hpack import Decoder, Encoder, NeverIndexedHeaderTuple
from hyperframe.frame import Frame, HeadersFrame

import greenhttp
from greenhttp._core import h2 as core
from greenhttp._core.h2 import BAD, DATA, END, INFO, RESET, RESPONSE, H2Session
from h2_support.fixtures import make_h2_server  # noqa: F401  (fixture)
from h2_support.h2server import H2ServerConn

OPTS = {
    "max_concurrent_streams": 100,
    "initial_window_size": 65535,
    "connection_window_size": 65535,
    "scheme": "http",
    "authority": "example.test:8080",
}


def frames(data: bytes) -> list[Frame]:
    out = []
    view = memoryview(data)
    while view:
        frame, length = Frame.parse_frame_header(view[:9])
        frame.parse_body(view[9 : 9 + length])
        out.append(frame)
        view = view[9 + length :]
    return out


def describe(frame: Frame) -> tuple[Any, ...]:
    """A frame the client sent, without its HPACK bytes (the two paths encode differently)."""
    if isinstance(frame, HeadersFrame):
        return ("HEADERS", frame.stream_id, sorted(frame.flags))
    body = {k: v for k, v in vars(frame).items() if k not in ("flags", "stream_id", "body_len")}
    return (type(frame).__name__, frame.stream_id, sorted(frame.flags), sorted(body.items()))


class Pair:
    """A client session and an h2 server; the server decodes every request it gets."""

    def __init__(self, fast: bool = True, **kw: Any) -> None:
        opts = dict(OPTS, **kw)
        self.client = H2Session(**opts)
        self.client._fast_path = fast
        config = h2.config.H2Configuration(
            client_side=False,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=False,
            normalize_inbound_headers=False,  # the fields as sent (h2 would join cookies)
        )
        self.server = h2.connection.H2Connection(config=config)
        self.server.initiate_connection()
        self.client.start()
        self.sent: list[tuple[Any, ...]] = []  # what the client sent, described
        self.requests: dict[int, list[Any]] = {}  # headers the server decoded
        self.server_events: list[Any] = []
        self.fast_sids: list[int] = []  # streams the session runs itself
        self.to_server()
        self.to_client()

    def to_server(self) -> list[Any]:
        data = self.client.data_to_send()
        self.sent.extend(describe(f) for f in frames(data))
        events = self.server.receive_data(data)
        for ev in events:
            if isinstance(ev, h2.events.RequestReceived):
                self.requests[ev.stream_id] = list(ev.headers)
        self.server_events.extend(events)
        return events

    def to_client(self, raw: bytes = b"") -> list[tuple[Any, ...]]:
        return self.client.receive(self.server.data_to_send() + raw)

    def request(self, path: str = "/", method: str = "GET", headers: Any = (), body: bool = False) -> int:
        """Open a stream as the driver does: ``open_request`` without a body, else h2's way."""
        if body:
            block = self.client.request_headers(method, path, None, list(headers), 0)
            sid = self.client.open_stream(block, False)
        else:
            sid = self.client.open_request(method, path, None, list(headers), None)
        if sid in self.client._fast:
            self.fast_sids.append(sid)
        if body:
            self.client.end_stream(sid)
        self.to_server()
        return sid


def differential(script: Callable[[Pair], list[Any]], **kw: Any) -> list[Any]:
    """Run ``script`` on both paths; its observations and the frames sent must agree."""
    results = []
    for fast in (True, False):
        pair = Pair(fast=fast, **kw)
        try:
            seen = script(pair)
        except h2.exceptions.ProtocolError as exc:
            seen = [("raised", int(exc.error_code))]  # (the GOAWAY it sends is in pair.sent)
        pair.sent.extend(describe(f) for f in frames(pair.client.data_to_send()))
        assert bool(pair.fast_sids) == fast
        results.append((seen, pair.sent, pair.requests))
    (fast_seen, fast_sent, fast_requests), (h2_seen, h2_sent, h2_requests) = results
    assert fast_seen == h2_seen
    assert fast_sent == h2_sent
    assert fast_requests == h2_requests
    return fast_seen


def raw_frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big") + payload


# -- the same events and frames as through h2 -----------------------------------------------------


def test_a_plain_exchange():
    def script(p: Pair) -> list[Any]:
        sid = p.request("/x", headers=[("x-custom", "1")])
        p.server.send_headers(sid, [(b":status", b"200"), (b"content-length", b"4"), (b"server", b"s")])
        p.server.send_data(sid, b"body", end_stream=True)
        events = p.to_client()
        p.client.ack(sid, 4)
        p.to_server()
        return events

    events = differential(script)
    assert [e[0] for e in events] == [RESPONSE, DATA, END]


def test_informational_heads_trailers_and_repeated_fields():
    def script(p: Pair) -> list[Any]:
        sid = p.request("/t")
        p.server.send_headers(sid, [(b":status", b"103"), (b"link", b"<a>")])
        p.server.send_headers(sid, [(b":status", b"200"), (b"x-a", b"1"), (b"x-a", b"2"), (b"set-cookie", b"c")])
        p.server.send_data(sid, b"abc")
        p.server.send_headers(sid, [(b"x-trailer", b"t")], end_stream=True)
        return p.to_client()

    events = differential(script)
    assert [e[0] for e in events] == [INFO, RESPONSE, DATA, END]
    assert events[1][3] == {"x-a": ["1", "2"], "set-cookie": ["c"]}
    assert events[3][2] == {"x-trailer": "t"}


def test_head_responses_have_no_body_whatever_their_content_length():
    def script(p: Pair) -> list[Any]:
        sid = p.request("/h", method="HEAD")
        p.server.send_headers(sid, [(b":status", b"200"), (b"content-length", b"10")], end_stream=True)
        return p.to_client()

    assert [e[0] for e in differential(script)] == [RESPONSE, END]


@pytest.mark.parametrize("sizes", [[5], [5, 10], [20]])
def test_a_body_not_matching_its_content_length_fails_its_stream_only(sizes):
    def script(p: Pair) -> list[Any]:
        sid = p.request("/cl")
        p.server.send_headers(sid, [(b":status", b"200"), (b"content-length", b"10")])
        for i, n in enumerate(sizes):
            p.server.send_data(sid, b"x" * n, end_stream=i == len(sizes) - 1)
        events = p.to_client()
        p.to_server()
        sid2 = p.request("/after")
        p.server.send_headers(sid2, [(b":status", b"204")], end_stream=True)
        return events + p.to_client()

    events = differential(script)
    assert BAD in [e[0] for e in events]
    assert events[-2][0] == RESPONSE and events[-2][2] == 204


def test_a_stream_reset_by_the_server():
    def script(p: Pair) -> list[Any]:
        sid = p.request("/r")
        p.server.send_headers(sid, [(b":status", b"200")])
        p.server.reset_stream(sid, h2.errors.ErrorCodes.INTERNAL_ERROR)
        events = p.to_client()
        # frames in flight after the reset are ignored
        p.server.state_machine.state = h2.connection.ConnectionState.SERVER_OPEN
        events += p.client.receive(raw_frame(0x3, 0, sid, b"\x00\x00\x00\x08"))
        return events

    assert differential(script) == [(RESPONSE, 1, 200, {}, b":status: 200"), (RESET, 1, 2)]


def test_frames_for_a_stream_the_client_reset_are_ignored_and_hpack_stays_in_step():
    def script(p: Pair) -> list[Any]:
        sid = p.request("/gone")
        sid2 = p.request("/next")
        p.client.reset_stream(sid)
        # The server answers before it sees the reset; its encoder indexes
        # fields, so the next block refers to entries the dropped one added.
        p.server.send_headers(sid, [(b":status", b"200"), (b"x-indexed", b"v" * 40)])
        p.server.send_data(sid, b"y" * 1000, end_stream=True)
        p.server.send_headers(sid2, [(b":status", b"200"), (b"x-indexed", b"v" * 40)], end_stream=True)
        events = p.to_client()
        p.to_server()
        return events

    events = differential(script)
    assert events == [(RESPONSE, 3, 200, {"x-indexed": "v" * 40}, b":status: 200\r\nx-indexed: " + b"v" * 40), (END, 3, None, None)]


def test_goaway_lets_announced_streams_finish():
    def script(p: Pair) -> list[Any]:
        s1 = p.request("/1")
        s3 = p.request("/3")
        p.server.close_connection(0, last_stream_id=s1)
        p.server.state_machine.state = h2.connection.ConnectionState.SERVER_OPEN  # finish s1
        p.server.send_headers(s1, [(b":status", b"200")])
        p.server.send_data(s1, b"late", end_stream=True)
        events = p.to_client()
        p.client.reset_stream(s3)  # what the driver does with the streams above the last id
        p.client.ack(s1, 4)
        p.to_server()
        return events + [p.client.goaway]

    events = differential(script)
    assert [e[0] for e in events[:-1]] == [core.GOAWAY, RESPONSE, DATA, END] and events[-1] == 1


def test_flow_control_windows_come_back_as_through_h2():
    def script(p: Pair) -> list[Any]:
        sid = p.request("/big")
        p.server.send_headers(sid, [(b":status", b"200")])
        seen = []
        for _ in range(6):
            while p.server.local_flow_control_window(sid) < 16384:
                p.to_server()
                if p.server.local_flow_control_window(sid) < 16384:
                    return seen + [("stalled", p.server.local_flow_control_window(sid))]
            p.server.send_data(sid, b"z" * 16384)
            for ev in p.to_client():
                if ev[0] == DATA:
                    seen.append(ev[:2] + (len(ev[2]),))
                    p.client.ack(sid, ev[3])
                else:
                    seen.append(ev)
        p.server.send_data(sid, b"", end_stream=True)
        seen += p.to_client()
        p.to_server()
        return seen

    seen = differential(script)
    assert sum(e[2] for e in seen if e[0] == DATA and type(e[2]) is int) == 6 * 16384


def test_a_paused_stream_holds_back_its_window_only():
    def script(p: Pair) -> list[Any]:
        sid = p.request("/p")
        p.server.send_headers(sid, [(b":status", b"200")])
        for _ in range(3):
            p.server.send_data(sid, b"x" * 16384)
        events = p.to_client()
        p.client.ack_connection(3 * 16384)
        p.to_server()
        held = (p.server.local_flow_control_window(sid), p.server.outbound_flow_control_window)
        p.client.ack_stream(sid, 3 * 16384)
        p.to_server()
        return [len(events), held, p.server.local_flow_control_window(sid)]

    assert differential(script) == [4, (65535 - 3 * 16384, 65535), 65535]


def test_padded_and_prioritised_frames():
    def script(p: Pair) -> list[Any]:
        sid = p.request("/pad")
        block = p.server.encoder.encode([(b":status", b"200"), (b"x", b"1")])
        payload = bytes((7,)) + (0).to_bytes(4, "big") + bytes((15,)) + block + b"\0" * 7
        raw = raw_frame(0x1, 0x4 | 0x8 | 0x20, sid, payload)
        raw += raw_frame(0x0, 0x8 | 0x1, sid, bytes((3,)) + b"data" + b"\0\0\0")
        return p.client.receive(raw)

    assert [e[:3] for e in differential(script)] == [(RESPONSE, 1, 200), (DATA, 1, b"data"), (END, 1, None)]


def test_header_blocks_continued_over_continuation_frames():
    def script(p: Pair) -> list[Any]:
        sid = p.request("/c")
        p.server.send_headers(sid, [(b":status", b"200"), (b"x-long", b"l" * 40000)], end_stream=True)
        data = p.server.data_to_send()
        events = []
        for i in range(0, len(data), 7000):  # the frames arrive in pieces
            events += p.client.receive(data[i : i + 7000])
        return events

    events = differential(script, initial_window_size=65535)
    assert events[0][3] == {"x-long": "l" * 40000}


def test_bytes_arriving_one_at_a_time():
    def script(p: Pair) -> list[Any]:
        sid = p.request("/1")
        sid2 = p.request("/2", body=True)  # a slow stream between fast ones
        sid3 = p.request("/3")
        for s in (sid, sid2, sid3):
            p.server.send_headers(s, [(b":status", b"200"), (b"content-length", b"2")])
            p.server.send_data(s, b"ok", end_stream=True)
        p.server.ping(b"12345678")
        data = p.server.data_to_send()
        events = []
        for i in range(len(data)):
            events += p.client.receive(data[i : i + 1])
        p.to_server()
        return events

    events = differential(script)
    assert [e[:2] for e in events if e[0] == END] == [(END, 1), (END, 3), (END, 5)]


@pytest.mark.parametrize(
    "case",
    [
        "data-before-headers",
        "trailers-without-end-stream",
        "informational-with-end-stream",
        "informational-after-final",
        "bad-content-length",
        "headers-interrupted",
        "headers-interrupted-by-data",
        "headers-interrupted-by-another-stream",
        "continuation-without-headers",
        "window-overrun",
        "stream-window-overrun",
        "bad-padding",
        "short-rst-stream",
    ],
)
def test_protocol_errors_end_the_connection_as_in_h2(case):
    def script(p: Pair) -> list[Any]:
        sid = p.request("/e")
        enc = p.server.encoder
        if case == "data-before-headers":
            raw = raw_frame(0x0, 0x0, sid, b"x")
        elif case == "trailers-without-end-stream":
            raw = raw_frame(0x1, 0x4, sid, enc.encode([(b":status", b"200")]))
            raw += raw_frame(0x1, 0x4, sid, enc.encode([(b"x-t", b"1")]))
        elif case == "informational-with-end-stream":
            raw = raw_frame(0x1, 0x5, sid, enc.encode([(b":status", b"100")]))
        elif case == "informational-after-final":
            raw = raw_frame(0x1, 0x4, sid, enc.encode([(b":status", b"200")]))
            raw += raw_frame(0x1, 0x4, sid, enc.encode([(b":status", b"100")]))
        elif case == "bad-content-length":
            raw = raw_frame(0x1, 0x4, sid, enc.encode([(b":status", b"200"), (b"content-length", b"x1")]))
        elif case == "headers-interrupted":
            block = enc.encode([(b":status", b"200"), (b"x", b"y" * 100)])
            raw = raw_frame(0x1, 0x0, sid, block[:10]) + raw_frame(0x6, 0, 0, b"12345678")
        elif case == "headers-interrupted-by-data":
            block = enc.encode([(b":status", b"200"), (b"x", b"y" * 100)])
            raw = raw_frame(0x1, 0x0, sid, block[:10]) + raw_frame(0x0, 0, sid, b"d")
        elif case == "headers-interrupted-by-another-stream":
            other = p.request("/other")
            block = enc.encode([(b":status", b"200"), (b"x", b"y" * 100)])
            raw = raw_frame(0x1, 0x0, sid, block[:10]) + raw_frame(0x9, 0x4, other, block[10:])
        elif case == "continuation-without-headers":
            raw = raw_frame(0x9, 0x4, sid, enc.encode([(b":status", b"200")]))
        elif case == "stream-window-overrun":
            raw = raw_frame(0x1, 0x4, sid, enc.encode([(b":status", b"200")]))
            raw += b"".join(raw_frame(0x0, 0, sid, b"w" * 16384) for _ in range(4))
            raw += raw_frame(0x0, 0, sid, b"w")
        elif case == "bad-padding":
            raw = raw_frame(0x1, 0x4, sid, enc.encode([(b":status", b"200")]))
            raw += raw_frame(0x0, 0x8, sid, bytes((5,)) + b"abc")
        elif case == "short-rst-stream":
            raw = raw_frame(0x3, 0, sid, b"\x00\x08")
        else:
            raw = raw_frame(0x1, 0x4, sid, enc.encode([(b":status", b"200")]))
            raw += b"".join(raw_frame(0x0, 0, sid, b"w" * 16384) for _ in range(4))
            raw += raw_frame(0x0, 0, sid, b"w")
        return p.client.receive(raw)

    seen = differential(script, **({"connection_window_size": 1 << 20} if case == "stream-window-overrun" else {}))
    assert seen[0][0] == "raised"


# -- request blocks without the dynamic table ------------------------------------------------------


def test_request_fields_reach_the_server_exactly_and_leave_its_table_empty():
    pair = Pair()
    headers = [
        ("x-custom", "value"),
        ("accept", "*/*"),
        ("authorization", "Bearer t"),
        ("cookie", "a=1"),
        ("cookie", "b" * 30),
        ("user-agent", "u" * 200),
        ("x-empty", ""),
    ]
    sids = [pair.request("/p?q=1", method=m, headers=headers) for m in ("GET", "DELETE", "OPTIONS", "GET")]
    assert all(sid in pair.client._fast for sid in sids)
    for sid, method in zip(sids, ("GET", "DELETE", "OPTIONS", "GET"), strict=True):
        assert pair.requests[sid] == [
            (b":method", method.encode()),
            (b":scheme", b"http"),
            (b":authority", b"example.test:8080"),
            (b":path", b"/p?q=1"),
            (b"x-custom", b"value"),
            (b"accept", b"*/*"),
            (b"authorization", b"Bearer t"),
            (b"cookie", b"a=1"),
            (b"cookie", b"b" * 30),
            (b"user-agent", b"u" * 200),
            (b"x-empty", b""),
        ]
        got = pair.requests[sid]
        assert isinstance(got[6], NeverIndexedHeaderTuple)  # RFC 7541 §7.1.3
        assert isinstance(got[7], NeverIndexedHeaderTuple)  # a short cookie
        assert not isinstance(got[8], NeverIndexedHeaderTuple)
    assert len(pair.server.decoder.header_table.dynamic_entries) == 0
    assert pair.sent.count(("HEADERS", sids[0], ["END_HEADERS", "END_STREAM"])) == 1


@pytest.mark.parametrize(
    "method,path,host,headers,length",
    [
        ("GET", "/", None, [], None),
        ("HEAD", "/h", None, [("Accept", " */* ")], None),
        ("POST", "/empty", None, [("X-A", "1")], 0),
        ("GET", "/q?x=%20", "other.test:1", [("cookie", "a=1"), ("Cookie", "b" * 25), ("Authorization", "t")], None),
        ("PATCH", "/p", None, [("te", "trailers"), ("x-empty", ""), ("x-dup", "1"), ("x-dup", "2")], 3),
        ("PURGE", "/custom-method", None, [("x-long", "l" * 300)], None),
        ("GET", "/big", None, [("x-big", "b" * 30000)], None),  # over one frame: through h2
    ],
)
def test_open_request_sends_what_request_headers_would(method, path, host, headers, length):
    fast, slow = Pair(), Pair(fast=False)
    for _ in range(2):  # the second time from the caches
        sid = fast.client.open_request(method, path, host, list(headers), length)
        fast.to_server()
        block = slow.client.request_headers(method, path, host, list(headers), length)
        sid2 = slow.client.open_stream(block, True)
        slow.to_server()
        assert sid == sid2
        assert fast.requests[sid] == slow.requests[sid2]
        kinds = [type(h) for h in fast.requests[sid]]
        assert kinds == [type(h) for h in slow.requests[sid2]]  # never-indexed where h2 would
        assert (sid in fast.client._fast) == (len(headers) != 1 or headers[0][0] != "x-big")
    assert len(fast.server.decoder.header_table.dynamic_entries) == 0


@pytest.mark.parametrize("name,value", [("connection", "close"), ("te", "gzip"), ("Upgrade", "x")])
def test_open_request_refuses_connection_specific_fields_as_before(name, value):
    pair = Pair()
    pair.to_server()  # the SETTINGS ack
    with pytest.raises(greenhttp.errors.InformationalError) as fast_error:
        pair.client.open_request("GET", "/", None, [("x-ok", "1"), (name, value)], None)
    with pytest.raises(greenhttp.errors.InformationalError) as h2_error:
        pair.client.request_headers("GET", "/", None, [("x-ok", "1"), (name, value)], None)
    assert str(fast_error.value) == str(h2_error.value)
    assert not pair.client._fast and pair.client.data_to_send() == b""
    assert pair.client.open_request("GET", "/", None, [("x-ok", "1")], None) == 1  # the id was not used


def test_the_encoding_is_static_only():
    block = [(b":method", b"GET"), (b":path", b"/"), (b":path", b"/x"), (b"x-new", b"v")]
    block.append(NeverIndexedHeaderTuple(b"authorization", b"s"))
    encoded = Pair().client._encode(block)
    assert encoded == (
        b"\x82"  # :method GET, static index 2
        b"\x84"  # :path /, static index 4
        b"\x04\x02/x"  # literal without indexing, name index 4
        b"\x00\x05x-new\x01v"  # literal without indexing, new name
        b"\x1f\x08\x01s"  # never indexed, name index 23 (4-bit prefix: 15 + 8)
    )
    assert core._stateless(encoded) == 1
    dec = Decoder()
    assert dec.decode(encoded, raw=True)[2:4] == [(b":path", b"/x"), (b"x-new", b"v")]
    assert len(dec.header_table.dynamic_entries) == 0


def test_a_block_too_big_for_one_frame_goes_through_h2():
    pair = Pair()
    sid = pair.request("/big", headers=[("x-big", "b" * 30000)])  # over 16 KiB even in Huffman
    assert sid not in pair.client._fast and sid in pair.client._conn.streams
    assert ("ContinuationFrame", sid) in [s[:2] for s in pair.sent]
    assert dict(pair.requests[sid])[b"x-big"] == b"b" * 30000
    sid2 = pair.request("/small")
    assert sid2 == sid + 2 and sid2 in pair.client._fast


def test_requests_with_a_body_go_through_h2_and_stream_ids_stay_in_order():
    pair = Pair()
    sids = [pair.request("/a"), pair.request("/b", method="POST", body=True), pair.request("/c")]
    assert sids == [1, 3, 5]
    assert sids[0] in pair.client._fast and sids[2] in pair.client._fast
    assert sids[1] in pair.client._conn.streams
    assert sorted(pair.requests) == sids


def test_a_table_size_update_owed_to_the_peer_goes_first_through_h2():
    pair = Pair()
    pair.request("/before")
    pair.server.update_settings({h2.settings.SettingCodes.HEADER_TABLE_SIZE: 256})
    pair.to_client()
    assert pair.client._conn.encoder.header_table.resized
    sid = pair.request("/after")
    assert sid in pair.client._conn.streams  # h2 wrote it, the update first
    assert pair.server.decoder.header_table_size == 256
    sid2 = pair.request("/then")
    assert sid2 in pair.client._fast
    assert pair.requests[sid2][3] == (b":path", b"/then")


def test_requests_after_a_goaway_sent_are_refused_by_h2():
    pair = Pair()
    pair.client.close()
    block = pair.client.request_headers("GET", "/", None, [], None)
    with pytest.raises(h2.exceptions.ProtocolError):
        pair.client.open_stream(block, True)


# -- the cache of received header blocks ------------------------------------------------------------


@pytest.mark.parametrize(
    "block,expected",
    [
        (b"\x88", 1),  # :status 200
        (b"\x88\x0f\x10\x03abc", 1),  # + literal without indexing, content-type (31)
        (b"\x88\x1f\x10\x03abc", 1),  # never indexed
        (b"\x88\x00\x01x\x01y", 1),  # new name
        (b"\x20\x88\x76\x01s", 2),  # size update to 0, literal with incremental indexing (nginx)
        (b"\x88\x76\x01s", 2),
        (b"\xbe", 0),  # index 62: the dynamic table
        (b"\x88\x7f\x00\x01s", 0),  # name index 63
        (b"\x3f\xe1\x1f\x88", 0),  # size update to 4096
        (b"\x80", 0),  # index 0
        (b"\x88\x0f\x10\x05ab", 0),  # truncated string
        (b"\x88\xff", 0),  # truncated integer
    ],
)
def test_which_blocks_decode_the_same_in_any_state(block, expected):
    assert core._stateless(block) == expected


def nginx_like(pair: Pair, sid: int, block: bytes, end: bool = True) -> list[Any]:
    return pair.client.receive(raw_frame(0x1, 0x4 | (0x1 if end else 0), sid, block))


def test_blocks_are_cached_only_while_their_bytes_decide_them():
    pair = Pair()
    s1, s2, s3, s4, s5, s6 = (pair.request(f"/{i}") for i in range(6))
    line = b"\x76\x05nginx"  # server: nginx, a literal with incremental indexing
    # The table shrinks to 0 (as nginx does): then insertions are dropped at once.
    assert nginx_like(pair, s1, b"\x20\x88" + line)[0][3] == {"server": "nginx"}
    assert nginx_like(pair, s2, b"\x88" + line)[0][3] == {"server": "nginx"}
    assert pair.client._blocks[b"\x88" + line].zero
    hit = nginx_like(pair, s3, b"\x88" + line)
    assert hit[0][3] == {"server": "nginx"}
    hit[0][3]["mutated"] = "by the user"  # each response gets its own dict
    # The table grows again: now the same bytes insert an entry (index 62) ...
    nginx_like(pair, s4, b"\x3f\xe1\x1f\x88")
    assert nginx_like(pair, s5, b"\x88" + line)[0][3] == {"server": "nginx"}
    assert list(pair.client._conn.decoder.header_table.dynamic_entries) == [(b"server", b"nginx")]
    # ... which the next block refers to (had the cache skipped the insertion, it would fail).
    assert nginx_like(pair, s6, b"\x88\xbe")[0][3] == {"server": "nginx"}


def test_a_cached_block_still_obeys_the_header_list_limit():
    pair = Pair()
    sids = [pair.request(f"/{i}") for i in range(3)]
    block = b"\x88\x00\x01x\x7f\x81\x01" + b"v" * 256  # x: 256 bytes, stateless
    nginx_like(pair, sids[0], block)
    assert block in pair.client._blocks
    pair.client._conn.decoder.max_header_list_size = 200
    with pytest.raises(h2.exceptions.DenialOfServiceError):
        nginx_like(pair, sids[1], block)


def test_a_dynamic_reference_is_never_served_from_the_cache():
    pair = Pair()
    sids = [pair.request(f"/{i}") for i in range(3)]
    enc = Encoder()
    first = enc.encode([(b":status", b"200"), (b"x-v", b"one")])  # inserts x-v: one at 62
    nginx_like(pair, sids[0], first)
    again = enc.encode([(b":status", b"200"), (b"x-v", b"one")])  # refers to 62
    assert core._stateless(again) == 0
    assert nginx_like(pair, sids[1], again)[0][3] == {"x-v": "one"}
    assert again not in pair.client._blocks


# -- end to end ----------------------------------------------------------------------------------


def test_custom_headers_reach_a_server_over_the_fast_path(make_h2_server):  # noqa: F811
    seen = []

    def handler(conn: H2ServerConn) -> None:
        for _ in range(3):
            req = conn.next_request()
            if req is None:
                return
            seen.append(req.headers)
            conn.respond(req.stream_id, 200, b"ok" * 10, [("x-echo", req.header("x-n") or "")])

    server = make_h2_server(handler)
    client = greenhttp.H2CClient(server.origin)
    try:
        for n in range(3):
            resp = client.request(
                path=f"/r{n}", method="GET", headers={"x-n": str(n), "authorization": "secret", "x-same": "s"}
            )
            assert resp.status_code == 200
            assert resp.headers["x-echo"] == str(n)
            assert resp.body.bytes() == b"ok" * 10
    finally:
        client.destroy()
    for n, headers in enumerate(seen):
        assert (":path", f"/r{n}") in headers
        assert ("x-n", str(n)) in headers
        assert ("authorization", "secret") in headers
        assert ("x-same", "s") in headers
