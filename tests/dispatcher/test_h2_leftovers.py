"""HTTP/2 leftovers of the last audit: content-length precedence, header size limits of 1xx and trailers."""

from __future__ import annotations

import gevent
import gevent.event
import h2.errors
import h2.events
import h2.settings
import pytest

from greenhttp.errors import (
    HeadersOverflowError,
    InformationalError,
    RequestContentLengthMismatchError,
    SocketError,
)
from h2_support.h2server import serve_ok
from testkit import serve_forever, wait_for

pytest_plugins = ["h2_support.fixtures"]


@pytest.mark.parametrize("declared", ["5", "20"])
def test_without_strict_content_length_a_file_body_goes_with_its_real_length(
    make_h2_server, make_h2c, tmp_path, declared
):
    """docs/client.md: with strict_content_length=False a declared content-length that
    disagrees with a body of known length is replaced by the real one (as on h1)."""
    f = tmp_path / "f.bin"
    f.write_bytes(b"0123456789")
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin, strict_content_length=False)
    with gevent.Timeout(5), open(f, "rb") as fh:
        r = client.request(path="/f", method="PUT", body=fh, headers={"content-length": declared})
        assert r.body.bytes() == b"ok /f"
    req = server.requests[-1]
    assert [v for k, v in req.headers if k == "content-length"] == ["10"]
    assert req.body == b"0123456789"


def test_with_strict_content_length_a_file_body_of_another_length_fails(make_h2_server, make_h2c, tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(b"0123456789")
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin, strict_content_length=True)
    with gevent.Timeout(5):
        for declared in ("5", "20"):
            with open(f, "rb") as fh, pytest.raises(RequestContentLengthMismatchError):
                client.request(path="/f", method="PUT", body=fh, headers={"content-length": declared}).body.bytes()
        assert client.request(path="/next").body.bytes() == b"ok /next"


def _oversized(kind):
    """A server that answers /big with an oversized 1xx head or trailer block, the rest with 200."""
    resets = []

    def handler(conn):
        while True:
            req = conn.next_request()
            if req is None:
                return
            if req.path != "/big":
                conn.respond(req.stream_id, body=b"ok " + req.path.encode())
                continue
            big = [("x-big", "a" * 2000)]
            if kind == "info":
                conn.send_headers(req.stream_id, 103, big)  # no final head: the client resets
            else:
                conn.respond(req.stream_id, body=b"body", trailers=big)
            req.done.wait(5)
            resets.append(req.reset_code)

    return handler, resets


@pytest.mark.parametrize("kind", ["info", "trailers"])
def test_an_oversized_1xx_head_or_trailer_block_fails_that_stream_only(make_h2_server, make_h2c, kind):
    """As h1: every header block (1xx heads and trailers too) is held to max_header_size;
    the failure is a stream error (RST_STREAM), the connection goes on."""
    handler, resets = _oversized(kind)
    server = make_h2_server(handler)
    client = make_h2c(server.origin, max_header_size=1024)
    infos = []
    with gevent.Timeout(5):
        with pytest.raises(HeadersOverflowError):
            client.request(path="/big", on_info=lambda info: infos.append(info)).body.bytes()
        assert client.request(path="/after").body.bytes() == b"ok /after"
    assert infos == []
    assert server.accepted == 1
    if kind == "info":
        assert resets == [h2.errors.ErrorCodes.CANCEL]


class _Recorder:
    """A dispatch handler that records what it gets; pauses at the response head."""

    def __init__(self) -> None:
        self.controller = None
        self.status = None
        self.chunks: list[bytes] = []
        self.err = None
        self.done = gevent.event.Event()

    def on_response_start(self, controller, status, headers, message):
        self.controller = controller
        self.status = status
        controller.pause()

    def on_response_data(self, controller, chunk):
        self.chunks.append(bytes(chunk))

    def on_response_end(self, controller, trailers):
        self.done.set()

    def on_response_error(self, controller, err):
        self.err = err
        self.done.set()


def _whole_then(lost):
    def handler(conn):
        req = conn.next_request()
        conn.respond(req.stream_id, body=b"whole body")
        if lost:
            conn.goaway(last_stream_id=req.stream_id)
            gevent.sleep(0.05)
            conn.close()
        else:
            serve_ok(conn)

    return handler


def _held(make_h2_server, make_h2c, lost):
    server = make_h2_server(_whole_then(lost))
    client = make_h2c(server.origin)
    rec = _Recorder()
    if lost:
        disconnected = gevent.event.Event()
        client.on("disconnect", lambda origin, targets, err: disconnected.set())
        client.dispatch({"path": "/p", "method": "GET"}, rec)
        assert disconnected.wait(5)
    else:
        client.dispatch({"path": "/p", "method": "GET"}, rec)
        with gevent.Timeout(5):
            # Frames arrive in order: once this answer is in, so is all of /p.
            assert client.request(path="/sync").body.bytes() == b"ok /sync"
    assert rec.status == 200 and not rec.done.is_set()
    return client, rec


@pytest.mark.parametrize("lost", [False, True], ids=["connected", "connection-lost"])
def test_close_waits_for_a_held_response_to_be_delivered(make_h2_server, make_h2c, lost):
    """docs/client.md: close() lets the running requests finish, then returns."""
    client, rec = _held(make_h2_server, make_h2c, lost)
    closer = gevent.spawn(client.close)
    gevent.sleep(0.05)  # what close() does first, it does now: it must still be waiting
    assert not closer.ready()
    assert client.stats.running == 1 or lost
    rec.controller.resume()
    with gevent.Timeout(5):
        closer.get()
    assert rec.done.is_set() and rec.err is None, rec.err
    assert b"".join(rec.chunks) == b"whole body"
    assert client.destroyed


@pytest.mark.parametrize("lost", [False, True], ids=["connected", "connection-lost"])
def test_destroy_fails_a_held_response(make_h2_server, make_h2c, lost):
    client, rec = _held(make_h2_server, make_h2c, lost)
    with gevent.Timeout(5):
        client.destroy()
    assert rec.done.wait(1)
    assert rec.err is not None
    assert rec.chunks == []


def _answers(table):
    """A server answering each path with ``table[path](conn, req)``; records reset codes."""
    resets = {}

    def handler(conn):
        while True:
            req = conn.next_request()
            if req is None:
                return
            make = table.get(req.path)
            if make is None:
                conn.respond(req.stream_id, body=b"ok " + req.path.encode())
                continue
            make(conn, req)
            req.done.wait(2)
            resets[req.path] = req.reset_code

    return handler, resets


def _short_body(conn, req):
    conn.send_headers(req.stream_id, 200, [("content-length", "10")])
    conn.send_body(req.stream_id, b"short", end=True)


def _pseudo_in_trailers(conn, req):
    conn.send_headers(req.stream_id, 200)
    conn.send_body(req.stream_id, b"body", end=False)
    with conn.lock:
        conn.h2.send_headers(req.stream_id, [(":status", "200"), ("x-t", "1")], end_stream=True)
        conn._stream_closed(req)
    conn.flush()


@pytest.mark.parametrize("path", ["/short", "/pseudo-trailer"])
def test_malformed_responses_are_stream_errors(make_h2_server, make_h2c, path):
    """RFC 9113 §8.1.1 (a body shorter than its content-length), §8.1 (a pseudo-header in
    trailers): malformed, a stream error; the other streams and the connection go on."""
    handler, resets = _answers({"/short": _short_body, "/pseudo-trailer": _pseudo_in_trailers})
    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    with gevent.Timeout(5):
        with pytest.raises(InformationalError, match="malformed"):
            client.request(path=path).body.bytes()
        assert client.request(path="/after").body.bytes() == b"ok /after"
    assert server.accepted == 1


@pytest.mark.parametrize("method,status", [("HEAD", 200), ("GET", 304), ("GET", 204)])
def test_a_content_length_without_a_body_is_fine_where_no_body_comes(make_h2_server, make_h2c, method, status):
    """RFC 9110 §8.6 / RFC 9113 §8.1.1: a HEAD response or a 304 carries the content-length
    the GET would have had, with no body: not malformed. (204 with content-length: 0.)"""
    length = "0" if status == 204 else "100"

    def head(conn, req):
        conn.send_headers(req.stream_id, status, [("content-length", length)], end=True)

    handler, resets = _answers({"/h": head})
    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    with gevent.Timeout(5):
        r = client.request(path="/h", method=method)
        assert r.status_code == status
        assert r.body.bytes() == b""
        assert client.request(path="/after").body.bytes() == b"ok /after"
    assert resets == {"/h": None}


def test_a_request_refused_by_goaway_on_every_connection_is_not_replayed_forever(make_h2_server, make_h2c):
    """A stream above GOAWAY's last_stream_id was not processed and is replayed (RFC 9113
    §6.8); a server that keeps refusing it must not make the client loop."""

    def handler(conn):
        req = conn.opened.get(timeout=5)
        if req is None:
            return
        conn.goaway(last_stream_id=0)
        gevent.sleep(0.05)
        conn.close()

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    with gevent.Timeout(5):
        with pytest.raises(InformationalError, match="GOAWAY"):
            client.request(path="/g").body.bytes()
    assert server.accepted == 2
    assert [r.path for r in server.requests] == ["/g", "/g"]


def test_refused_stream_after_the_response_head_is_not_retried(make_h2_server, make_h2c):
    """A REFUSED_STREAM after a response began cannot be retried (the handler has a head)."""

    def handler(conn):
        while True:
            req = conn.next_request()
            if req is None:
                return
            if req.path == "/r":
                conn.send_headers(req.stream_id, 200)
                conn.send_body(req.stream_id, b"part", end=False)
                conn.reset(req.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            else:
                conn.respond(req.stream_id, body=b"ok " + req.path.encode())

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    with gevent.Timeout(5):
        with pytest.raises(SocketError, match="REFUSED_STREAM") as info:
            client.request(path="/r").body.bytes()
        assert client.request(path="/after").body.bytes() == b"ok /after"
    assert info.value.http2_error_code == h2.errors.ErrorCodes.REFUSED_STREAM
    assert [r.path for r in server.requests] == ["/r", "/after"]



def _peer(protocol, make_server, make_client, make_h2_server, make_h2c, **options):
    """A client and a server speaking ``protocol``; ``seen()`` is the (content-lengths, body) last received."""
    if protocol == "h1":
        server = make_server(serve_forever(b"ok"))
        client = make_client(server.origin, **options)
        return client, lambda: (server.requests[-1].header_list("content-length"), server.requests[-1].body)
    h2_server = make_h2_server(serve_ok)
    client = make_h2c(h2_server.origin, **options)
    last = h2_server.requests

    return client, lambda: ([v for k, v in last[-1].headers if k == "content-length"], last[-1].body)


@pytest.mark.parametrize("protocol", ["h1", "h2"])
@pytest.mark.parametrize("strict", [False, True])
def test_h1_and_h2_agree_on_a_declared_length_that_differs_from_a_file_body(
    make_server, make_client, make_h2_server, make_h2c, tmp_path, protocol, strict
):
    f = tmp_path / "f.bin"
    f.write_bytes(b"0123456789")
    client, seen = _peer(protocol, make_server, make_client, make_h2_server, make_h2c, strict_content_length=strict)
    with gevent.Timeout(5):
        for declared in ("5", "20"):
            with open(f, "rb") as fh:
                if strict:
                    with pytest.raises(RequestContentLengthMismatchError):
                        client.request(path="/f", method="PUT", body=fh, headers={"content-length": declared}).body.bytes()
                else:
                    client.request(path="/f", method="PUT", body=fh, headers={"content-length": declared}).body.bytes()
                    assert seen() == (["10"], b"0123456789")
        client.request(path="/next").body.bytes()  # the connection is still usable


@pytest.mark.parametrize("size,fields", [(100_000, 1), (60_000, 1500)], ids=["one-big-field", "many-small-fields"])
def test_a_head_within_a_large_max_header_size_is_accepted(make_h2_server, make_h2c, size, fields):
    """max_header_size is the client's limit on HTTP/2 too: h2's own 64 KiB header-list
    limit (RFC 7541 §4.1 sizes, 32 bytes more per field) must not refuse a head within it."""
    value = "a" * (size // fields * 9 // 10 - 10)
    big = [(f"x-f{i}", value) for i in range(fields)]

    def answer(conn, req):
        conn.respond(req.stream_id, body=b"big", headers=big)

    handler, resets = _answers({"/big": answer})
    server = make_h2_server(handler)
    client = make_h2c(server.origin, max_header_size=size)
    with gevent.Timeout(5):
        r = client.request(path="/big")
        assert r.body.bytes() == b"big"
        assert r.headers["x-f0"] == value
        assert client.request(path="/after").body.bytes() == b"ok /after"
    assert server.accepted == 1


@pytest.mark.parametrize("status", [103, 200])
def test_a_head_far_beyond_max_header_size_fails_that_stream_only(make_h2_server, make_h2c, status):
    """A 300 KB head (far beyond the default 16 KiB max_header_size: over the 7x that
    any head within the limit needs at RFC 7541 sizes) is a HeadersOverflowError for
    its stream; the connection goes on."""

    def big(conn, req):
        # Thirty fields: hpack's Huffman encoder takes quadratic time in one field's length.
        conn.send_headers(req.stream_id, status, [(f"x-big-{i}", "a" * 10_000) for i in range(30)])

    handler, resets = _answers({"/big": big})
    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    with gevent.Timeout(5):
        with pytest.raises(HeadersOverflowError):
            client.request(path="/big").body.bytes()
        assert client.request(path="/after").body.bytes() == b"ok /after"
    assert server.accepted == 1
    assert resets["/big"] == h2.errors.ErrorCodes.CANCEL


def _acks(conn):
    # The server sends two SETTINGS at the start (its defaults, then its own values).
    with conn.lock:
        return sum(isinstance(e, h2.events.SettingsAcknowledged) for e in conn.events)


def test_settings_lowering_the_stream_limit_below_the_open_streams(make_h2_server, make_h2c):
    """RFC 9113 §5.1.2 / §6.5.2: a SETTINGS lowering MAX_CONCURRENT_STREAMS below the streams
    already open leaves them be, and no new stream opens until the count is under the limit."""
    opened_with = []

    def handler(conn):
        held = [conn.next_request() for _ in range(4)]
        conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1})
        wait_for(lambda: _acks(conn) == 3, 5, "the client's ack")
        for req in held:
            conn.respond(req.stream_id, body=b"ok " + req.path.encode())
        while True:
            req = conn.next_request(timeout=5)
            if req is None:
                return
            with conn.lock:
                opened_with.append(conn.open_now)
            conn.respond(req.stream_id, body=b"ok " + req.path.encode())

    server = make_h2_server(handler, settings={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 4})
    client = make_h2c(server.origin)
    with gevent.Timeout(5):
        client.connect()
        wait_for(lambda: server.conns and _acks(server.conns[0]) == 2, 5, "the client's ack")
    gs = [gevent.spawn(lambda p=p: client.request(path=p).body.bytes()) for p in [f"/{i}" for i in range(8)]]
    gevent.joinall(gs, timeout=5, raise_error=True)
    assert [g.value for g in gs] == [f"ok /{i}".encode() for i in range(8)]
    assert opened_with == [1, 1, 1, 1]
    assert server.accepted == 1
    assert not server.errors


@pytest.mark.parametrize("code", [0x0, 0x2, 0x8, 0xB, 0xFF, 0xDEADBEEF])
def test_rst_stream_codes_map_to_a_socket_error_with_the_code(make_h2_server, make_h2c, code):
    """RFC 9113 §7: unknown codes must not be treated specially (nor crash the reader);
    NO_ERROR before a whole response is still a failure of that request."""

    def reset(conn, req):
        conn.send_headers(req.stream_id, 200)
        with conn.lock:
            # Raw RST_STREAM bytes: h2 would refuse to send a code outside its enum.
            conn.sock.sendall(b"\x00\x00\x04\x03\x00" + req.stream_id.to_bytes(4, "big") + code.to_bytes(4, "big"))
        conn._stream_closed(req)

    handler, resets = _answers({"/r": reset})
    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    with gevent.Timeout(5):
        with pytest.raises(SocketError) as info:
            client.request(path="/r").body.bytes()
        assert client.request(path="/after").body.bytes() == b"ok /after"
    assert info.value.http2_error_code == code
    assert server.accepted == 1
