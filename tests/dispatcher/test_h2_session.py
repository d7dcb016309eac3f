"""The sans-IO HTTP/2 session (``_core/h2.py``), tested with bytes against h2's server side."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import pytest
from hpack import NeverIndexedHeaderTuple

from greenhttp._core.h2 import (
    BAD,
    DATA,
    END,
    GOAWAY,
    INFO,
    PONG,
    RESET,
    RESPONSE,
    SETTINGS,
    WINDOW,
    H2Session,
    MalformedError,
    response_head,
)
from greenhttp.errors import InformationalError


class Pair:
    """A client session and an h2 server connected by two byte pipes."""

    def __init__(self, **kw):
        opts = {
            "max_concurrent_streams": 100,
            "initial_window_size": 262144,
            "connection_window_size": 524288,
            "scheme": "http",
            "authority": "example.test:8080",
        }
        opts.update(kw)
        self.client = H2Session(**opts)
        config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        self.server = h2.connection.H2Connection(config=config)
        self.server.initiate_connection()
        self.client.start()
        self.server_events = self.to_server()
        self.client_events = self.to_client()

    def to_server(self):
        return self.server.receive_data(self.client.data_to_send())

    def to_client(self):
        return self.client.receive(self.server.data_to_send())

    def request(self, path="/", end=True, headers=()):
        block = self.client.request_headers("GET", path, None, list(headers), None)
        sid = self.client.open_stream(block, end)
        return sid, self.to_server()


def test_start_advertises_settings_and_the_connection_window():
    pair = Pair(max_concurrent_streams=7, initial_window_size=100000, connection_window_size=1 << 20)
    changed = [e for e in pair.server_events if isinstance(e, h2.events.RemoteSettingsChanged)][0]
    settings = {int(k): v.new_value for k, v in changed.changed_settings.items()}
    assert settings[h2.settings.SettingCodes.ENABLE_PUSH] == 0
    assert settings[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] == 7
    assert settings[h2.settings.SettingCodes.INITIAL_WINDOW_SIZE] == 100000
    assert pair.server.outbound_flow_control_window == 1 << 20
    assert pair.client.settings_received
    assert (SETTINGS, 0) in pair.client_events


def test_request_headers_are_pseudo_first_lower_case_and_trimmed():
    session = Pair().client
    block = session.request_headers(
        "POST",
        "/p?q",
        None,
        [("X-Up", " v "), ("Authorization", "secret"), ("cookie", "a=1"), ("TE", "trailers")],
        5,
    )
    assert block[:4] == [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":authority", b"example.test:8080"),
        (b":path", b"/p?q"),
    ]
    assert block[4] == (b"x-up", b"v")
    assert isinstance(block[5], NeverIndexedHeaderTuple)  # RFC 7541 §7.1.3
    assert isinstance(block[6], NeverIndexedHeaderTuple)  # a short cookie
    assert block[7] == (b"te", b"trailers")
    assert block[8] == (b"content-length", b"5")
    assert session.request_headers("GET", "/", "other:1", [], None)[2] == (b":authority", b"other:1")


@pytest.mark.parametrize("name,value", [("proxy-connection", "x"), ("te", "gzip"), ("http2-settings", "x")])
def test_connection_specific_request_headers_are_refused(name, value):
    with pytest.raises(InformationalError, match=name):
        Pair().client.request_headers("GET", "/", None, [(name, value)], None)


def test_a_whole_exchange_as_events():
    pair = Pair()
    sid, events = pair.request("/x")
    received = [e for e in events if isinstance(e, h2.events.RequestReceived)][0]
    assert dict(received.headers)[":path"] == "/x"
    pair.server.send_headers(sid, [(":status", "200"), ("x-a", "1"), ("x-a", "2"), ("set-cookie", "c=1")])
    pair.server.send_data(sid, b"body")
    pair.server.send_headers(sid, [("x-trailer", "t")], end_stream=True)
    events = pair.to_client()
    assert events[0] == (
        RESPONSE,
        sid,
        200,
        {"x-a": ["1", "2"], "set-cookie": ["c=1"]},
        b":status: 200\r\nx-a: 1\r\nx-a: 2\r\nset-cookie: c=1",
    )
    assert events[1] == (DATA, sid, b"body", 4)
    assert events[2] == (END, sid, {"x-trailer": "t"}, [b"x-trailer", b"t"])


def test_informational_reset_ping_and_window_events():
    pair = Pair()
    sid, _ = pair.request("/i", end=False)
    pair.server.send_headers(sid, [(":status", "103"), ("link", "<a>")])
    assert pair.to_client() == [(INFO, sid, 103, {"link": "<a>"}, b":status: 103\r\nlink: <a>")]
    pair.server.increment_flow_control_window(1000, sid)
    assert (WINDOW, sid) in pair.to_client()
    pair.server.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
    assert pair.to_client() == [(RESET, sid, 7)]
    pair.client.ping(b"12345678")
    pair.to_server()
    assert pair.to_client() == [(PONG, 0, b"12345678")]


def test_streams_at_or_below_goaway_last_id_still_complete():
    """h2 4.x closes the connection on GOAWAY; the session keeps it open (RFC 9113 §6.8)."""
    pair = Pair()
    s1, _ = pair.request("/1")
    s3, _ = pair.request("/3")
    pair.server.close_connection(0, last_stream_id=s1)
    pair.server.state_machine.state = h2.connection.ConnectionState.SERVER_OPEN  # finish s1
    pair.server.send_headers(s1, [(":status", "200")])
    pair.server.send_data(s1, b"late", end_stream=True)
    events = pair.to_client()
    assert events[0] == (GOAWAY, s1, 0, b"")
    assert pair.client.goaway == s1
    assert [e[0] for e in events[1:]] == [RESPONSE, DATA, END]
    assert s3 > pair.client.goaway


def test_queued_frames_survive_a_goaway():
    pair = Pair()
    sid, _ = pair.request("/w", end=False)
    pair.client.reset_stream(sid)  # queued, not yet sent
    pair.server.close_connection(0, last_stream_id=sid)
    pair.server.state_machine.state = h2.connection.ConnectionState.SERVER_OPEN
    pair.to_client()
    events = pair.to_server()
    assert any(isinstance(e, h2.events.StreamReset) for e in events)


def test_paused_data_reopens_the_connection_window_only():
    pair = Pair(initial_window_size=65535, connection_window_size=65535)
    sid, _ = pair.request("/big")
    pair.server.send_headers(sid, [(":status", "200")])
    pair.server.send_data(sid, b"x" * 16384)
    pair.server.send_data(sid, b"x" * 16384)
    pair.server.send_data(sid, b"x" * 16384)
    events = pair.to_client()
    assert sum(e[3] for e in events if e[0] == DATA) == 3 * 16384
    pair.client.ack_connection(3 * 16384)
    pair.to_server()
    assert pair.server.local_flow_control_window(sid) == 65535 - 3 * 16384  # stream: held back
    assert pair.server.outbound_flow_control_window == 65535  # connection: reopened
    pair.client.ack_stream(sid, 3 * 16384)
    pair.to_server()
    assert pair.server.local_flow_control_window(sid) == 65535


@pytest.mark.parametrize(
    "block",
    [
        [(b":status", b"200"), (b"Upper", b"x")],
        [(b":status", b"200"), (b"x", b"a\r\nb")],
        [(b":status", b"200"), (b"x", b" padded")],
        [(b":status", b"200"), (b"connection", b"close")],
        [(b":status", b"200"), (b"te", b"gzip")],
        [(b"x", b"1"), (b":status", b"200")],
        [(b":status", b"200"), (b":status", b"200")],
        [(b":status", b"2000")],
        [(b":path", b"/")],
        [(b"x", b"1")],
    ],
)
def test_malformed_response_blocks(block):
    with pytest.raises(MalformedError):
        response_head(block)


def test_malformed_response_is_a_stream_event_not_a_connection_error():
    pair = Pair()
    sid, _ = pair.request("/m")
    pair.server.config.validate_outbound_headers = False
    pair.server.config.normalize_outbound_headers = False
    pair.server.send_headers(sid, [(":status", "200"), ("X-Upper", "1")], end_stream=True)
    events = pair.to_client()
    assert events[0][:2] == (BAD, sid)
    assert "X-Upper" in events[0][2]
    sid2, _ = pair.request("/after")  # the connection still works
    pair.server.send_headers(sid2, [(":status", "204")], end_stream=True)
    assert pair.to_client()[0][:3] == (RESPONSE, sid2, 204)


def test_a_body_shorter_than_its_content_length_is_a_stream_error():
    pair = Pair()
    sid, _ = pair.request("/cl")
    pair.server.send_headers(sid, [(":status", "200"), ("content-length", "10")])
    pair.server.send_data(sid, b"12345", end_stream=True)
    events = pair.to_client()
    assert events[0][0] == RESPONSE
    assert events[1][:2] == (BAD, sid)
    assert "Expected 10 bytes, received 5" in events[1][2]
    sid2, _ = pair.request("/after")  # the connection still works
    pair.server.send_headers(sid2, [(":status", "204")], end_stream=True)
    assert pair.to_client()[0][:3] == (RESPONSE, sid2, 204)


def test_an_oversized_frame_is_refused_at_its_header():
    pair = Pair()
    with pytest.raises(h2.exceptions.FrameTooLargeError):
        pair.client.receive(b"\xff\xff\xff\x00\x00\x00\x00\x00\x01" + b"x" * 100)
