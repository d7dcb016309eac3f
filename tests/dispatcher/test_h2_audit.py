"""HTTP/2 audit: edge cases of RFC 9113 against the client (stream ends, resets, headers)."""

from __future__ import annotations

import gevent
import gevent.event
import h2.errors
import h2.settings
import pytest

from greenhttp.errors import InformationalError
from h2_support.h2server import serve_ok

pytest_plugins = ["h2_support.fixtures"]

NO_ERROR = h2.errors.ErrorCodes.NO_ERROR


class _Recorder:
    """A dispatch handler that records what it gets; may pause at the response head."""

    def __init__(self, pause: bool = False) -> None:
        self.pause = pause
        self.controller = None
        self.status = None
        self.chunks: list[bytes] = []
        self.trailers = None
        self.err = None
        self.done = gevent.event.Event()

    def on_response_start(self, controller, status, headers, message):
        self.controller = controller
        self.status = status
        if self.pause:
            controller.pause()

    def on_response_data(self, controller, chunk):
        self.chunks.append(bytes(chunk))

    def on_response_end(self, controller, trailers):
        self.trailers = trailers
        self.done.set()

    def on_response_error(self, controller, err):
        self.err = err
        self.done.set()


def _blocking_body(release: gevent.event.Event):
    """An upload that sends one chunk and then waits (until ``release``)."""
    yield b"first part"
    release.wait(5)
    yield b"never needed"


def _early_answer_then_no_error(conn):
    # RFC 9113 §8.1: a complete response before the whole request, then
    # RST_STREAM(NO_ERROR) to stop the upload. The client must keep the response.
    req = conn.opened.get(timeout=5)
    req.chunks.get(timeout=5)  # the first part of the upload arrived
    conn.respond(req.stream_id, status=413, body=b"too large")
    conn.reset(req.stream_id, NO_ERROR)
    serve_ok(conn)


def test_complete_response_then_rst_no_error_is_kept(make_h2_server, make_h2c):
    server = make_h2_server(_early_answer_then_no_error)
    client = make_h2c(server.origin)
    release = gevent.event.Event()
    try:
        with gevent.Timeout(5):
            r = client.request(path="/up", method="PUT", body=_blocking_body(release))
            assert r.status_code == 413
            assert r.body.bytes() == b"too large"
            assert client.request(path="/next").body.bytes() == b"ok /next"
    finally:
        release.set()


def test_complete_response_then_rst_no_error_is_kept_while_paused(make_h2_server, make_h2c):
    server = make_h2_server(_early_answer_then_no_error)
    client = make_h2c(server.origin)
    release = gevent.event.Event()
    rec = _Recorder(pause=True)
    try:
        client.dispatch({"path": "/up", "method": "PUT", "body": _blocking_body(release)}, rec)
        with gevent.Timeout(5):
            # Frames arrive in order: once this answer is in, so is the RST_STREAM.
            assert client.request(path="/sync").body.bytes() == b"ok /sync"
        assert rec.status == 413
        rec.controller.resume()
        assert rec.done.wait(5)
        assert rec.err is None, rec.err
        assert b"".join(rec.chunks) == b"too large"
    finally:
        release.set()
    with gevent.Timeout(5):
        assert client.request(path="/next").body.bytes() == b"ok /next"


def test_complete_response_held_while_paused_survives_the_connection_closing(make_h2_server, make_h2c):
    def handler(conn):
        req = conn.next_request()
        conn.respond(req.stream_id, body=b"whole body")
        conn.goaway(last_stream_id=req.stream_id)
        gevent.sleep(0.05)
        conn.close()

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    disconnected = gevent.event.Event()
    client.on("disconnect", lambda origin, targets, err: disconnected.set())
    rec = _Recorder(pause=True)
    client.dispatch({"path": "/p", "method": "GET"}, rec)
    assert disconnected.wait(5)
    assert rec.status == 200
    rec.controller.resume()
    assert rec.done.wait(5)
    assert rec.err is None, rec.err
    assert b"".join(rec.chunks) == b"whole body"


def _respond_then_close(trailers=None):
    def handler(conn):
        req = conn.next_request()
        conn.send_headers(req.stream_id, 200)
        for part in (b"one", b"two", b"three"):
            conn.send_body(req.stream_id, part, end=False)
        if trailers is None:
            conn.send_body(req.stream_id, b"", end=True)
        else:
            with conn.lock:
                conn.h2.send_headers(req.stream_id, trailers, end_stream=True)
            conn.flush()
        gevent.sleep(0.05)
        conn.close()

    return handler


def test_held_response_after_close_resumes_chunk_by_chunk_with_trailers(make_h2_server, make_h2c):
    server = make_h2_server(_respond_then_close(trailers=[("x-sum", "abc")]))
    client = make_h2c(server.origin)
    disconnected = gevent.event.Event()
    client.on("disconnect", lambda origin, targets, err: disconnected.set())

    class Repausing(_Recorder):
        def on_response_data(self, controller, chunk):
            super().on_response_data(controller, chunk)
            controller.pause()  # one chunk per resume()

    rec = Repausing(pause=True)
    client.dispatch({"path": "/p", "method": "GET"}, rec)
    assert disconnected.wait(5)
    with gevent.Timeout(5):
        while not rec.done.is_set():
            n = len(rec.chunks)
            rec.controller.resume()
            while len(rec.chunks) == n and not rec.done.is_set():
                gevent.sleep(0.005)
            assert len(rec.chunks) <= n + 1
    assert rec.err is None, rec.err
    assert rec.chunks == [b"one", b"two", b"three"]
    assert rec.trailers == {"x-sum": "abc"}


def test_held_response_after_close_can_still_be_aborted(make_h2_server, make_h2c):
    server = make_h2_server(_respond_then_close())
    client = make_h2c(server.origin)
    disconnected = gevent.event.Event()
    client.on("disconnect", lambda origin, targets, err: disconnected.set())
    rec = _Recorder(pause=True)
    client.dispatch({"path": "/p", "method": "GET"}, rec)
    assert disconnected.wait(5)
    reason = RuntimeError("no longer wanted")
    rec.controller.abort(reason)
    assert rec.done.wait(5)
    assert rec.err is reason
    rec.controller.resume()  # nothing more arrives
    gevent.sleep(0.01)
    assert rec.chunks == []


def test_destroying_the_client_fails_a_held_response(make_h2_server, make_h2c):
    def handler(conn):
        req = conn.next_request()
        conn.respond(req.stream_id, body=b"whole body")
        serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    rec = _Recorder(pause=True)
    client.dispatch({"path": "/p", "method": "GET"}, rec)
    with gevent.Timeout(5):
        # Frames arrive in order: once this answer is in, so is all of /p.
        assert client.request(path="/sync").body.bytes() == b"ok /sync"
        client.destroy()
    assert rec.done.wait(5)
    assert rec.err is not None
    assert rec.chunks == []


def test_a_101_response_is_malformed_in_http2_and_fails_that_stream_only(make_h2_server, make_h2c):
    # RFC 9113 §8.6: HTTP/2 has no 101 (Switching Protocols); nghttp2 (undici's
    # HTTP/2 under Node) treats it as a malformed response.
    resets = []

    def handler(conn):
        while True:
            req = conn.next_request()
            if req is None:
                return
            if req.path == "/101":
                conn.send_headers(req.stream_id, 101)
                req.done.wait(5)
                resets.append(req.reset_code)
            else:
                conn.respond(req.stream_id, body=b"ok " + req.path.encode())

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    infos = []
    with gevent.Timeout(5):
        with pytest.raises(InformationalError, match="101"):
            client.request(path="/101", on_info=lambda info: infos.append(info)).body.bytes()
        assert client.request(path="/after").body.bytes() == b"ok /after"
    assert infos == []
    assert resets == [h2.errors.ErrorCodes.PROTOCOL_ERROR]
    assert server.accepted == 1


def test_a_second_goaway_with_a_lower_last_id_replays_the_streams_above_it(make_h2_server, make_h2c):
    def handler(conn):
        if conn.server.accepted == 1:
            reqs = [conn.next_request() for _ in range(3)]
            conn.goaway(last_stream_id=2**31 - 1)  # graceful shutdown begins (RFC 9113 §6.8)
            gevent.sleep(0.05)
            conn.goaway(last_stream_id=reqs[0].stream_id)
            conn.respond(reqs[0].stream_id, body=b"first")
            gevent.sleep(0.05)
            conn.close()
        else:
            serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    with gevent.Timeout(5):
        gs = [gevent.spawn(lambda p=p: client.request(path=p).body.bytes()) for p in ("/a", "/b", "/c")]
        gevent.joinall(gs, raise_error=True)
    assert [g.value for g in gs] == [b"first", b"ok /b", b"ok /c"]
    assert server.accepted == 2


def test_upload_stalls_when_the_initial_window_drops_to_zero_and_goes_on_when_raised(make_h2_server, make_h2c):
    iws = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE
    payload = bytes(range(256)) * 1024  # 256 KiB

    def handler(conn):
        req = conn.opened.get(timeout=5)
        req.chunks.get(timeout=5)
        conn.update_settings({iws: 0})
        gevent.sleep(0.1)
        stalled = len(req._body)
        conn.update_settings({iws: 65535})
        done = conn.next_request()
        assert stalled < len(payload)
        conn.respond(done.stream_id, body=b"%d" % len(done.body))

    server = make_h2_server(handler, auto_ack=True)
    client = make_h2c(server.origin)

    def chunks():
        for i in range(0, len(payload), 4096):
            yield payload[i : i + 4096]

    with gevent.Timeout(5):
        r = client.request(path="/up", method="PUT", body=chunks())
        assert r.body.bytes() == b"%d" % len(payload)
    assert not server.errors
