"""The retry interceptor against loopback servers: statuses, network errors, back-off on a
timer, Retry-After, resuming a cut body, aborts, per-request options."""

from __future__ import annotations

import errno
import socket
import struct
import time
from email.utils import formatdate

import gevent
import pytest

import greenhttp
from greenhttp import errors, interceptors


def _fast(**kw):
    kw.setdefault("min_timeout", 0.01)
    return interceptors.retry(**kw)


def _status_then_ok(status, *, headers=(), fails=1, body=b"ok"):
    seen = []

    def handle(conn, req):
        seen.append(req)
        if len(seen) <= fails:
            conn.respond(b"busy", status=status, headers=list(headers))
        else:
            conn.respond(body)

    return handle, seen


def test_a_retryable_status_is_retried_until_it_succeeds(routes, make_client):
    handle, seen = _status_then_ok("503 Service Unavailable", fails=2)
    server = routes({"/": handle})
    r = make_client(server.origin).compose(_fast()).request(path="/")
    assert r.status_code == 200
    assert r.body.text() == "ok"
    assert len(seen) == 3
    assert server.accepted == 1  # the dropped 503 bodies were read: the connection was kept


def test_retries_run_out_with_request_retry_error(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(
        b"busy", status="503 Service Unavailable", headers=[("X-Why", "load")])})
    composed = make_client(server.origin).compose(_fast(max_retries=2))
    with pytest.raises(errors.RequestRetryError) as info:
        composed.request(path="/")
    err = info.value
    assert err.status_code == 503
    assert err.code == "GH_ERR_REQ_RETRY"
    assert err.headers["x-why"] == "load"
    assert err.data == {"count": 3}
    assert len(server.requests) == 3


def test_backoff_is_exponential_and_never_blocks_other_greenlets(routes, make_client):
    times = []

    def fail(conn, req):
        times.append(time.monotonic())
        conn.respond(b"", status="500 Internal Server Error")

    server = routes({"/": fail})
    composed = make_client(server.origin).compose(
        interceptors.retry(max_retries=3, min_timeout=0.05, timeout_factor=2, max_timeout=0.15)
    )
    ticks = []

    def tick():
        while True:
            gevent.sleep(0.01)
            ticks.append(1)

    ticker = gevent.spawn(tick)
    try:
        with pytest.raises(errors.RequestRetryError):
            composed.request(path="/")
    finally:
        ticker.kill()
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(gaps) == 3
    # 0.05, 0.1, then capped at max_timeout 0.15 (timers fire no earlier than asked).
    for gap, expected in zip(gaps, (0.05, 0.1, 0.15), strict=True):
        assert expected - 0.005 <= gap < expected + 0.25
    assert len(ticks) >= 15  # the waiting was a timer: other greenlets ran meanwhile


def test_retry_after_seconds_wins_over_backoff(routes, make_client):
    handle, seen = _status_then_ok("429 Too Many Requests", headers=[("Retry-After", "1")])
    server = routes({"/": handle})
    composed = make_client(server.origin).compose(interceptors.retry(min_timeout=0.01))
    started = time.monotonic()
    assert composed.request(path="/").body.text() == "ok"
    assert 0.95 <= time.monotonic() - started < 3
    # Retry-After 0 means now, whatever min_timeout says.
    handle, seen = _status_then_ok("503 Service Unavailable", headers=[("Retry-After", "0")])
    server = routes({"/": handle})
    composed = make_client(server.origin).compose(interceptors.retry(min_timeout=10))
    started = time.monotonic()
    assert composed.request(path="/").body.text() == "ok"
    assert time.monotonic() - started < 2


def test_retry_after_http_date(routes, make_client):
    when = formatdate(time.time() + 2, usegmt=True)  # IMF-fixdate, one-second precision
    handle, seen = _status_then_ok("503 Service Unavailable", headers=[("Retry-After", when)])
    server = routes({"/": handle})
    composed = make_client(server.origin).compose(interceptors.retry(min_timeout=10))
    started = time.monotonic()
    assert composed.request(path="/").body.text() == "ok"
    assert 0.9 <= time.monotonic() - started < 4
    # A date in the past: at once.
    past = formatdate(time.time() - 3600, usegmt=True)
    handle, seen = _status_then_ok("503 Service Unavailable", headers=[("Retry-After", past)])
    server = routes({"/": handle})
    composed = make_client(server.origin).compose(interceptors.retry(min_timeout=10))
    started = time.monotonic()
    assert composed.request(path="/").body.text() == "ok"
    assert time.monotonic() - started < 2


def test_retry_after_is_capped_by_max_timeout_and_ignored_when_off(routes, make_client):
    handle, _ = _status_then_ok("503 Service Unavailable", headers=[("Retry-After", "60")])
    server = routes({"/": handle})
    composed = make_client(server.origin).compose(interceptors.retry(min_timeout=0.01, max_timeout=0.05))
    started = time.monotonic()
    assert composed.request(path="/").body.text() == "ok"
    assert time.monotonic() - started < 2
    handle, _ = _status_then_ok("503 Service Unavailable", headers=[("Retry-After", "60")])
    server = routes({"/": handle})
    composed = make_client(server.origin).compose(_fast(retry_after=False))
    started = time.monotonic()
    assert composed.request(path="/").body.text() == "ok"
    assert time.monotonic() - started < 2


def test_statuses_and_methods_outside_the_lists_are_not_retried(routes, make_client):
    server = routes({
        "/404": lambda conn, req: conn.respond(b"missing", status="404 Not Found"),
        "/post": lambda conn, req: conn.respond(b"busy", status="503 Service Unavailable"),
    })
    composed = make_client(server.origin).compose(_fast())
    r = composed.request(path="/404")
    assert (r.status_code, r.body.text()) == (404, "missing")
    # POST is not idempotent: one attempt, and the retryable status still ends as an error.
    with pytest.raises(errors.RequestRetryError) as info:
        composed.request(path="/post", method="POST", body=b"x")
    assert info.value.status_code == 503
    assert [q.target for q in server.requests] == ["/404", "/post"]
    # Listing the method makes it retryable.
    with pytest.raises(errors.RequestRetryError):
        composed.request(path="/post", method="POST", body=b"x", retry_options={"methods": ["POST"], "max_retries": 1})
    assert [q.target for q in server.requests][2:] == ["/post", "/post"]


def test_throw_on_error_false_returns_the_last_response(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"still busy", status="503 Service Unavailable")})
    composed = make_client(server.origin).compose(_fast(max_retries=2, throw_on_error=False))
    r = composed.request(path="/")
    assert (r.status_code, r.body.text()) == (503, "still busy")
    assert len(server.requests) == 3
    handle, seen = _status_then_ok("502 Bad Gateway")
    server = routes({"/": handle})
    composed = make_client(server.origin).compose(_fast(throw_on_error=False))
    assert composed.request(path="/").body.text() == "ok"
    assert len(seen) == 2


def test_per_request_retry_options_override(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"", status="503 Service Unavailable")})
    composed = make_client(server.origin).compose(_fast(max_retries=0))
    with pytest.raises(errors.RequestRetryError):
        composed.request(path="/")
    assert len(server.requests) == 1
    with pytest.raises(errors.RequestRetryError) as info:
        composed.request(path="/", retry_options={"max_retries": 2})
    assert info.value.data == {"count": 3}
    assert len(server.requests) == 4
    with pytest.raises(errors.InvalidArgumentError, match="max_retries"):
        composed.request(path="/", retry_options={"max_retries": -1})
    with pytest.raises(errors.InvalidArgumentError, match="retry option 'nope'"):
        composed.request(path="/", retry_options={"nope": 1})


def test_a_closed_connection_is_retried_on_a_new_one(routes, make_client):
    seen = []

    def flaky(conn, req):
        seen.append(req)
        if len(seen) == 1:
            return False  # close without answering: "other side closed", GH_ERR_SOCKET
        conn.respond(b"ok")

    server = routes({"/": flaky})
    r = make_client(server.origin).compose(_fast()).request(path="/")
    assert r.body.text() == "ok"
    assert server.accepted == 2


def _reset(conn):
    """Close with an RST instead of a FIN."""
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.sock.close()


def test_error_codes_match_the_errno_under_the_library_error(make_server, make_client):
    def handler(conn):
        conn.read_request()
        if conn.server.accepted == 1:
            _reset(conn)
        else:
            conn.respond(b"ok")
            conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    r = client.compose(_fast(error_codes=["ECONNRESET"])).request(path="/")
    assert r.body.text() == "ok"
    assert server.accepted == 2

    server = make_server(handler)
    client = make_client(server.origin)
    with pytest.raises(errors.SocketError) as info:
        client.compose(_fast(error_codes=["EPIPE"])).request(path="/")
    assert isinstance(info.value.__cause__, ConnectionResetError)
    assert server.accepted == 1


def test_a_refused_connection_is_retried_and_then_fails_with_its_error(make_client):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    client = make_client(f"http://127.0.0.1:{port}")
    refused = []
    client.on("connectionError", lambda origin, targets, err: refused.append(err))
    with pytest.raises(ConnectionRefusedError):
        client.compose(_fast(max_retries=2)).request(path="/")
    assert len(refused) == 3
    # Not in error_codes: one attempt only.
    refused.clear()
    with pytest.raises(ConnectionRefusedError) as info:
        client.compose(_fast(error_codes=["GH_ERR_SOCKET"])).request(path="/")
    assert info.value.errno == errno.ECONNREFUSED
    assert len(refused) == 1


def _cut_then_ranged(full: bytes, cut: int, *, etag='"v1"', answer=None):
    """A server sending ``full`` but closing after ``cut`` bytes, then answering ranges."""
    seen = []

    def handle(conn, req):
        seen.append(req)
        if len(seen) == 1:
            conn.send(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: %s\r\n\r\n" % (len(full), etag.encode())
                + full[:cut]
            )
            return False
        if answer is not None:
            return answer(conn, req)
        start = int(req.header("range").split("=")[1].split("-")[0])
        conn.send(
            b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\nETag: %s\r\n"
            b"Content-Length: %d\r\n\r\n" % (start, len(full) - 1, len(full), etag.encode(), len(full) - start)
            + full[start:]
        )

    return handle, seen


def test_a_body_cut_midway_is_resumed_with_range_and_if_match(routes, make_client):
    full = bytes(range(256)) * 4096  # 1 MiB
    handle, seen = _cut_then_ranged(full, 300_000)
    server = routes({"/file": handle})
    composed = make_client(server.origin).compose(_fast())
    # A small high-water mark: the consumer pauses and resumes the body all along,
    # across both attempts (the controller it holds follows the current one).
    r = composed.request(path="/file", high_water_mark=16384)
    assert r.status_code == 200
    assert r.headers["content-length"] == str(len(full))
    got = b"".join(iter(r.body))
    assert got == full
    assert len(seen) == 2
    assert seen[1].header("range") == f"bytes=300000-{len(full) - 1}"
    assert seen[1].header("if-match") == '"v1"'


def test_resuming_delivers_the_head_once(routes, make_client, recorder):
    full = b"0123456789"
    handle, seen = _cut_then_ranged(full, 4, etag='W/"weak"')
    server = routes({"/": handle})
    composed = make_client(server.origin).compose(_fast())
    rec = recorder()
    composed.dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(5)
    assert rec.body == full
    assert rec.names().count("response_start") == 1
    assert rec.names()[-1] == "end"
    assert seen[1].header("if-match") is None  # a weak ETag is never sent


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda conn, req: conn.respond(b"0123456789"), "partially consumed"),
        (
            lambda conn, req: conn.respond(b"456789", status="206 Partial Content",
                                           headers=[("Content-Range", "bytes 4-9/10"), ("ETag", '"v2"')]),
            "ETag mismatch",
        ),
        (
            lambda conn, req: conn.respond(b"56789", status="206 Partial Content",
                                           headers=[("Content-Range", "bytes 5-9/10"), ("ETag", '"v1"')]),
            "Content-Range mismatch",
        ),
    ],
)
def test_a_resumed_answer_that_does_not_continue_the_body_fails(routes, make_client, answer, message):
    handle, _ = _cut_then_ranged(b"0123456789", 4, answer=answer)
    server = routes({"/": handle})
    r = make_client(server.origin).compose(_fast()).request(path="/")
    with pytest.raises(errors.RequestRetryError, match=message):
        r.body.bytes()


def test_a_first_206_whose_length_is_not_its_range_fails(make_server, make_client):
    # undici's 'Should reject initial 206 partial content with mismatched content-length'.
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-99/300\r\nContent-Length: 300\r\n\r\n"
                  + b"1" * 99)
        conn.close()

    server = make_server(handler)
    with pytest.raises(errors.RequestRetryError, match="Content-Length mismatch") as info:
        make_client(server.origin).compose(_fast()).request(path="/", headers={"range": "bytes=0-99"})
    assert info.value.status_code == 206 and info.value.code == "GH_ERR_REQ_RETRY"
    assert server.accepted == 1


def test_a_cut_body_of_unknown_length_is_not_resumed(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        conn.close()

    server = make_server(handler)
    r = make_client(server.origin).compose(_fast()).request(path="/")
    with pytest.raises(errors.SocketError):
        r.body.bytes()
    assert server.accepted == 1


def test_a_streamed_body_is_not_sent_twice(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.close()

    server = make_server(handler)
    composed = make_client(server.origin).compose(_fast())
    with pytest.raises(errors.SocketError):
        composed.request(path="/", method="PUT", body=iter([b"a", b"b"]))
    assert server.accepted == 1
    assert server.requests[0].body == b"ab"
    # The same body as bytes is replayed.
    with pytest.raises(errors.SocketError):
        composed.request(path="/", method="PUT", body=b"ab", retry_options={"max_retries": 1})
    assert server.accepted == 3


def test_abort_during_backoff_fails_at_once(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"", status="503 Service Unavailable")})
    composed = make_client(server.origin).compose(interceptors.retry(min_timeout=30, max_timeout=30))
    ac = greenhttp.AbortController()
    gevent.spawn_later(0.2, ac.abort)
    started = time.monotonic()
    with pytest.raises(greenhttp.DOMException) as info:
        composed.request(path="/", signal=ac.signal)
    assert info.value.name == "AbortError"
    assert time.monotonic() - started < 5
    assert len(server.requests) == 1
    gevent.sleep(0.05)
    assert len(server.requests) == 1


def test_abort_through_the_controller_during_backoff(routes, make_client, recorder):
    server = routes({"/": lambda conn, req: conn.respond(b"", status="503 Service Unavailable")})
    composed = make_client(server.origin).compose(interceptors.retry(min_timeout=30, max_timeout=30))
    rec = recorder()
    composed.dispatch({"path": "/", "method": "GET"}, rec)
    while not server.requests:
        gevent.sleep(0.01)
    gevent.sleep(0.05)
    reason = ValueError("stop")
    rec.controller.abort(reason)
    assert rec.done.wait(2)
    assert rec.error is reason
    assert rec.controller.aborted and rec.controller.reason is reason


def test_a_custom_policy_decides(routes, make_client):
    calls = []

    def policy(err, state, callback):
        calls.append((type(err).__name__, state["state"]["counter"], state["opts"]["path"],
                      state["opts"]["retry_options"].max_retries))
        callback(None if state["state"]["counter"] < 3 else err)

    server = routes({"/": lambda conn, req: conn.respond(b"", status="418 I'm a teapot")})
    composed = make_client(server.origin).compose(interceptors.retry(retry=policy, status_codes=[418]))
    with pytest.raises(errors.RequestRetryError):
        composed.request(path="/")
    assert calls == [("RequestRetryError", 1, "/", 5), ("RequestRetryError", 2, "/", 5),
                     ("RequestRetryError", 3, "/", 5)]
    assert len(server.requests) == 3


def test_options_are_validated_eagerly():
    with pytest.raises(errors.InvalidArgumentError, match="max_retries must be a non-negative integer, got -1"):
        interceptors.retry(max_retries=-1)
    with pytest.raises(errors.InvalidArgumentError, match="min_timeout"):
        interceptors.retry(min_timeout="1")
    with pytest.raises(errors.InvalidArgumentError, match="status_codes"):
        interceptors.retry(status_codes=[503, "x"])
    with pytest.raises(errors.InvalidArgumentError, match="methods"):
        interceptors.retry(methods="GET")
    with pytest.raises(errors.InvalidArgumentError, match="unknown retry option 'max_retry'"):
        interceptors.retry(max_retry=1)
    with pytest.raises(errors.InvalidArgumentError, match="min_timeout"):
        interceptors.retry(min_timeout=5, max_timeout=1)
    with pytest.raises(errors.InvalidArgumentError, match="retry must be callable"):
        interceptors.retry(retry=3)
