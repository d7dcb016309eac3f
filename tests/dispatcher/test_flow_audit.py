"""Back-pressure, flow control and timeouts, on HTTP/1.1 and HTTP/2 (an audit's tests)."""

from __future__ import annotations

import time

import gevent
import gevent.event
import pytest

from greenhttp.errors import HeadersTimeoutError
from testkit import serve_forever, wait_for

pytest_plugins = ["h2_support.fixtures"]


def _slow_body(pieces: int, gap: float):
    for _ in range(pieces):
        gevent.sleep(gap)  # a producer that takes its time
        yield b"x" * 1000


def test_h2_headers_timeout_does_not_cut_an_upload_in_progress(make_h2_server, make_h2c):
    """As on HTTP/1.1, headers_timeout waits for the head once the request is
    written: an upload still going out (longer in all than the timeout, each
    piece well within it) is not failed with HeadersTimeoutError."""

    def handler(conn):
        req = conn.next_request()
        assert req is not None
        conn.respond(req.stream_id, body=b"got %d" % len(req.body))

    server = make_h2_server(handler)
    client = make_h2c(server.origin, headers_timeout=0.4)
    with gevent.Timeout(5):
        r = client.request("/up", "POST", body=_slow_body(6, 0.12))
        assert r.body.bytes() == b"got 6000"
    assert not server.errors


def test_h2_headers_timeout_runs_from_the_end_of_the_upload(make_h2_server, make_h2c):
    """A server that takes the whole body and never answers: headers_timeout fires,
    counted from when the last of the body went out."""

    def handler(conn):
        req = conn.next_request()
        assert req is not None
        conn.closed.wait(5)

    server = make_h2_server(handler)
    client = make_h2c(server.origin, headers_timeout=0.3)
    start = time.monotonic()
    with gevent.Timeout(5), pytest.raises(HeadersTimeoutError):
        client.request("/up", "POST", body=_slow_body(4, 0.12))
    assert time.monotonic() - start >= 0.48 + 0.3 - 0.05


def test_h1_idle_timer_does_not_close_a_connection_whose_upload_waits_for_its_source(make_server, make_client):
    """A request with a streamed body, written on a kept-alive connection: the
    connection is no longer idle, so keep_alive_timeout does not close it while
    the body source takes longer than that to give its first chunk."""
    server = make_server(serve_forever(b"fine"))
    client = make_client(server.origin, keep_alive_timeout=0.3)

    def body():
        gevent.sleep(0.6)  # a producer slower than the idle timeout
        yield b"abc"

    with gevent.Timeout(5):
        assert client.request("/").body.bytes() == b"fine"
        r = client.request("/up", "POST", body=body())
        assert r.body.bytes() == b"fine"
    assert server.accepted == 1
    assert server.requests[-1].body == b"abc"


def test_h2_unread_body_stops_the_peer_and_does_not_time_out_while_paused(make_h2_server, make_h2c):
    """HTTP/2: a body nobody reads stops the server after about high_water_mark
    bytes and one stream window, its body_timeout does not run while the
    consumer holds it paused, and reading it then gives every byte in order."""
    big = bytes(range(256)) * 4096 * 4  # 4 MiB
    sent = [0]

    def handler(conn):
        req = conn.next_request()
        assert req is not None
        conn.send_headers(req.stream_id, 200, [("content-length", str(len(big)))])
        for off in range(0, len(big), 16384):
            if not conn.send_body(req.stream_id, big[off : off + 16384], end=off + 16384 >= len(big)):
                return
            sent[0] = off + 16384

    server = make_h2_server(handler)
    client = make_h2c(server.origin, body_timeout=0.2, initial_window_size=65536)
    with gevent.Timeout(5):
        r = client.request("/big")
        wait_for(lambda: sent[0] >= 65536, what="the first window sent")
        gevent.sleep(0.6)  # the consumer holds the body paused, past body_timeout
        # At most high_water_mark buffered in the body, plus one stream window held back.
        assert sent[0] <= 65536 + 65536
        assert r.body.bytes() == big
    assert sent[0] == len(big)


class _PauseAtHead:
    """A dispatch handler that pauses in on_response_start and records what follows."""

    def __init__(self):
        self.calls = []
        self.done = gevent.event.Event()
        self.controller = None

    def on_request_start(self, controller, context):
        self.controller = controller

    def on_response_start(self, controller, status_code, headers, status_message):
        self.calls.append("head")
        controller.pause()

    def on_response_data(self, controller, chunk):
        self.calls.append(bytes(chunk))

    def on_response_end(self, controller, trailers):
        self.calls.append("end")
        self.done.set()

    def on_response_error(self, controller, err):
        self.calls.append(err)
        self.done.set()


def test_h2_body_timeout_does_not_run_while_paused_at_the_head(make_h2_server, make_h2c):
    """A handler that pauses at the response head holds the stream paused: as on
    HTTP/1.1 (and as docs/http2.md says) body_timeout does not fire until it
    resumes, even though no DATA came meanwhile."""
    held = gevent.event.Event()

    def handler(conn):
        req = conn.next_request()
        assert req is not None
        conn.send_headers(req.stream_id, 200, [("content-length", "4")])
        held.wait(5)
        conn.send_body(req.stream_id, b"late", end=True)

    server = make_h2_server(handler)
    client = make_h2c(server.origin, body_timeout=0.2)
    h = _PauseAtHead()
    client.dispatch({"path": "/", "method": "GET"}, h)
    try:
        with gevent.Timeout(5):
            wait_for(lambda: h.calls, what="the head")
            gevent.sleep(0.5)  # held paused past body_timeout
            assert h.calls == ["head"]
            held.set()
            h.controller.resume()
            assert h.done.wait(5)
    finally:
        held.set()
    assert h.calls == ["head", b"late", "end"]


def test_read_zero_returns_at_once_and_takes_nothing(make_server, make_client):
    """``body.read(0)`` is ``b""`` at once, as io's ``read(0)``: it neither waits
    for the body nor marks it used."""
    release = gevent.event.Event()

    def handler(conn):
        if conn.read_request() is None:
            return
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
        release.wait(5)
        conn.send(b"hello")

    client = make_client(make_server(handler).origin)
    with gevent.Timeout(5):
        r = client.request(path="/")
        with gevent.Timeout(1):  # the body has not been sent: read(0) must not wait for it
            assert r.body.read(0) == b""
        release.set()
        assert r.body.bytes() == b"hello"  # still whole and usable
