"""HTTP/2 when things go wrong: GOAWAY, RST_STREAM, timeouts, aborts, lost connections."""

from __future__ import annotations

import gevent
import h2.errors
import h2.settings
import pytest

import greenhttp
from greenhttp.errors import (
    BodyTimeoutError,
    ClientDestroyedError,
    HeadersTimeoutError,
    InformationalError,
    RequestAbortedError,
    ResponseExceededMaxSizeError,
    SocketError,
)
from h2_support.h2server import serve_ok
from testkit import wait_for

pytest_plugins = ["h2_support.fixtures"]

REFUSED = h2.errors.ErrorCodes.REFUSED_STREAM


def _start(client, path, **options):
    """Run ``request(path).body.bytes()`` in a greenlet; its value is the body or the exception."""

    def run():
        try:
            r = client.request(path=path, **options)
            return r.body.bytes()
        except Exception as exc:
            return exc

    return gevent.spawn(run)


def _collect_three(conn):
    return [conn.next_request() for _ in range(3)]


def test_goaway_lets_announced_streams_finish_and_replays_the_rest(make_h2_server, make_h2c):
    def handler(conn):
        if conn.server.accepted == 1:
            a, b, c = _collect_three(conn)
            assert (a.stream_id, b.stream_id, c.stream_id) == (1, 3, 5)
            conn.goaway(last_stream_id=3)
            gevent.sleep(0.05)
            # Frames for streams at or below the last id after GOAWAY (RFC 9113 §6.8).
            conn.send_headers(1, 200, [("x-late", "1")])
            conn.send_body(1, b"one")
            conn.respond(3, body=b"three")
            gevent.sleep(0.05)
            conn.close()
        else:
            serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    disconnects = []
    client.on("disconnect", lambda origin, targets, err: disconnects.append(err))
    gs = [_start(client, p) for p in ("/a", "/b", "/c")]
    gevent.joinall(gs, timeout=10)
    assert [g.value for g in gs] == [b"one", b"three", b"ok /c"]
    assert server.accepted == 2
    assert [r.path for r in server.requests] == ["/a", "/b", "/c", "/c"]
    assert isinstance(disconnects[0], InformationalError)
    assert "GOAWAY" in str(disconnects[0])
    assert not server.errors


@pytest.mark.parametrize("ends", [True, False], ids=["body-ends", "connection-closes-mid-body"])
def test_a_goaway_below_a_stream_whose_head_came_lets_it_finish(make_h2_server, make_h2c, ends):
    # undici's '#3046 - GOAWAY Frame': Node's session.goaway() says last stream 0,
    # yet the stream already answered was processed. It is not replayed (its head
    # went to the caller): its body arrives, or it fails when the connection goes.
    def handler(conn):
        req = conn.next_request()
        conn.send_headers(req.stream_id, 200, [("content-type", "text/plain; charset=utf-8")])
        conn.goaway(last_stream_id=0)
        conn.send_body(req.stream_id, b"Hello World", end=ends)
        if not ends:
            conn.close()

    server = make_h2_server(handler)
    client = make_h2c(server.origin, body_timeout=30)
    disconnects = []
    client.on("disconnect", lambda origin, targets, err: disconnects.append(err))
    with gevent.Timeout(5):
        r = client.request(path="/")
        assert r.status_code == 200
        if ends:
            assert r.body.text() == "Hello World"
        else:
            with pytest.raises(SocketError):
                r.body.bytes()
    assert server.accepted == 1 and len(server.requests) == 1
    if ends:
        wait_for(lambda: disconnects, what="the disconnect")
        assert [str(e) for e in disconnects] == ['HTTP/2: "GOAWAY" frame received with code 0']


def test_goaway_fails_unsent_requests_whose_body_cannot_be_replayed(make_h2_server, make_h2c):
    def handler(conn):
        if conn.server.accepted == 1:
            a = conn.next_request()
            conn.next_request()
            conn.goaway(last_stream_id=a.stream_id)
            conn.respond(a.stream_id, body=b"first")
            gevent.sleep(0.05)
            conn.close()
        else:
            serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    g1 = _start(client, "/a")
    gevent.sleep(0.05)
    g2 = _start(client, "/b", method="POST", body=iter([b"stream", b"ed"]))
    gevent.joinall([g1, g2], timeout=10)
    assert g1.value == b"first"
    assert isinstance(g2.value, InformationalError)
    assert "GOAWAY" in str(g2.value)


def test_goaway_with_an_error_code_is_a_socket_error(make_h2_server, make_h2c):
    def handler(conn):
        if conn.server.accepted == 1:
            a = conn.next_request()
            conn.goaway(last_stream_id=a.stream_id, code=h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
            gevent.sleep(0.05)
            conn.close()
        else:
            serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    with pytest.raises(SocketError):
        client.request(path="/calm")
    assert client.request(path="/later").body.text() == "ok /later"


def test_refused_stream_is_retried_once(make_h2_server, make_h2c):
    def handler(conn):
        first = conn.next_request()
        conn.reset(first.stream_id, REFUSED)
        again = conn.next_request()
        assert again.path == first.path
        conn.respond(again.stream_id, body=b"second time")
        serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    assert client.request(path="/r", method="POST", body=b"replayable").body.bytes() == b"second time"
    assert [r.body for r in server.requests] == [b"replayable", b"replayable"]
    assert server.accepted == 1


def test_refused_twice_fails_with_the_code(make_h2_server, make_h2c):
    def handler(conn):
        for _ in range(2):
            req = conn.next_request()
            conn.reset(req.stream_id, REFUSED)
        serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    with pytest.raises(SocketError, match="REFUSED_STREAM") as info:
        client.request(path="/r")
    assert info.value.http2_error_code == REFUSED
    assert client.request(path="/fine").body.text() == "ok /fine"
    assert server.accepted == 1


def test_a_reset_stream_fails_only_its_request(make_h2_server, make_h2c):
    def handler(conn):
        bad = conn.next_request()
        good = conn.next_request()
        conn.reset(bad.stream_id, h2.errors.ErrorCodes.INTERNAL_ERROR)
        conn.respond(good.stream_id, body=b"good")

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    g1 = _start(client, "/bad")
    gevent.sleep(0.02)
    g2 = _start(client, "/good")
    gevent.joinall([g1, g2], timeout=5)
    assert isinstance(g1.value, SocketError)
    assert g1.value.http2_error_code == h2.errors.ErrorCodes.INTERNAL_ERROR
    assert g2.value == b"good"
    assert server.accepted == 1


def test_headers_timeout_is_per_stream(make_h2_server, make_h2c):
    def handler(conn):
        silent = conn.next_request()
        answered = conn.next_request()
        conn.respond(answered.stream_id, body=b"in time")
        assert silent.done.wait(5)  # the client cancels the silent one
        assert silent.reset_code == h2.errors.ErrorCodes.CANCEL
        serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    g1 = _start(client, "/silent", headers_timeout=0.2)
    gevent.sleep(0.02)
    g2 = _start(client, "/answered")
    gevent.joinall([g1, g2], timeout=5)
    assert isinstance(g1.value, HeadersTimeoutError)
    assert g2.value == b"in time"
    assert client.request(path="/after").body.text() == "ok /after"
    assert server.accepted == 1
    assert not server.errors


def test_body_timeout_is_per_stream(make_h2_server, make_h2c):
    def handler(conn):
        stalled = conn.next_request()
        conn.send_headers(stalled.stream_id, 200)
        conn.send_body(stalled.stream_id, b"part", end=False)
        serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin, body_timeout=0.2)
    r = client.request(path="/stall")
    with pytest.raises(BodyTimeoutError):
        r.body.bytes()
    assert client.request(path="/next").body.text() == "ok /next"
    assert server.accepted == 1


def test_max_response_size_resets_that_stream(make_h2_server, make_h2c):
    def handler(conn):
        while True:
            req = conn.next_request()
            if req is None:
                return
            conn.respond_later(req.stream_id, body=b"z" * (100000 if req.path == "/big" else 10))

    server = make_h2_server(handler)
    client = make_h2c(server.origin, max_response_size=50000)
    with pytest.raises(ResponseExceededMaxSizeError):
        client.request(path="/big").body.bytes()
    assert client.request(path="/small").body.bytes() == b"z" * 10
    assert server.accepted == 1


def test_abort_cancels_one_stream(make_h2_server, make_h2c):
    aborted = gevent.event.Event()

    def handler(conn):
        slow = conn.next_request()
        conn.send_headers(slow.stream_id, 200)
        assert slow.done.wait(5)
        assert slow.reset_code == h2.errors.ErrorCodes.CANCEL
        aborted.set()
        serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    controller = greenhttp.AbortController()
    r = client.request(path="/slow", signal=controller.signal)
    controller.abort(RequestAbortedError("stop"))
    with pytest.raises(RequestAbortedError, match="stop"):
        r.body.bytes()
    assert aborted.wait(5)
    assert client.request(path="/other").body.text() == "ok /other"
    assert server.accepted == 1


def test_lost_connection_fails_the_streams_in_flight_and_reconnects(make_h2_server, make_h2c):
    def handler(conn):
        if conn.server.accepted == 1:
            conn.next_request()
            conn.next_request()
            conn.close()
        else:
            serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    g1 = _start(client, "/1")
    gevent.sleep(0.02)
    g2 = _start(client, "/2")
    gevent.joinall([g1, g2], timeout=5)
    assert isinstance(g1.value, SocketError)
    assert isinstance(g2.value, SocketError)
    assert client.request(path="/3").body.text() == "ok /3"
    assert server.accepted == 2


def test_stream_ending_without_a_response(make_h2_server, make_h2c):
    def handler(conn):
        req = conn.next_request()
        with conn.lock:
            conn.h2.send_data(req.stream_id, b"", end_stream=True)
        conn.flush()
        serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    with pytest.raises((InformationalError, SocketError)):
        client.request(path="/headless")


def test_close_waits_for_streams_in_flight(make_h2_server, make_h2c):
    def handler(conn):
        req = conn.next_request()
        gevent.sleep(0.1)
        conn.respond(req.stream_id, body=b"late")

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    got = []
    client.dispatch(
        {"path": "/late", "method": "GET"},
        type("H", (), {"on_response_data": lambda self, c, chunk: got.append(chunk)})(),
    )
    client.close()
    assert got == [b"late"]
    assert client.destroyed


def test_destroy_fails_streams_in_flight(make_h2_server, make_h2c):
    def handler(conn):
        conn.next_request()
        conn.closed.wait(5)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    g = _start(client, "/hang")
    gevent.sleep(0.05)
    client.destroy()
    g.join(5)
    assert isinstance(g.value, ClientDestroyedError)
    assert server.accepted == 1


def test_settings_lowering_the_stream_limit_mid_connection(make_h2_server, make_h2c):
    def handler(conn):
        first = conn.next_request()
        conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 2})
        conn.respond(first.stream_id)
        serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    client.request(path="/first").body.bytes()
    gevent.sleep(0.05)
    gs = [_start(client, f"/{i}") for i in range(10)]
    gevent.joinall(gs, timeout=10)
    assert [g.value for g in gs] == [f"ok /{i}".encode() for i in range(10)]
    assert server.conns[0].max_open <= 2


def test_a_body_longer_than_its_content_length_fails_that_request_only(make_h2_server, make_h2c):
    def handler(conn):
        bad = conn.next_request()
        good = conn.next_request()
        conn.send_headers(bad.stream_id, 200, [("content-length", "3")])
        conn.send_body(bad.stream_id, b"too long")
        conn.respond(good.stream_id, body=b"good")
        serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    g1 = _start(client, "/bad")
    gevent.sleep(0.02)
    g2 = _start(client, "/good")
    gevent.joinall([g1, g2], timeout=5)
    assert isinstance(g1.value, InformationalError)
    assert "Expected 3 bytes" in str(g1.value)
    assert g2.value == b"good"
    assert client.request(path="/after").body.text() == "ok /after"
    assert server.accepted == 1
