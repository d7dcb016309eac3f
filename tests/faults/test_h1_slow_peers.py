"""HTTP/1.1 peers that are slow rather than broken, and uploads that meet faults.

``body_timeout`` is an idle timeout: it never fires on a peer that keeps
sending a little, so such a body is bounded by ``max_response_size`` or a
total deadline (an abort signal). ``headers_timeout`` bounds the whole head.
See docs/reliability.md, "Slow peers". Known gaps are ``xfail(strict=True)``.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
import gevent.event
import pytest
from faultkit import rst
from h1script import OK_HEAD, fetch, first_request_faulty, head, trickle

import greenhttp
from greenhttp import errors

TIMEOUT = 0.3  # headers_timeout and body_timeout of every client here
SLACK = 1.0  # scheduling slack on a loaded 2-core machine
OPTIONS = {
    "headers_timeout": TIMEOUT,
    "body_timeout": TIMEOUT,
    "max_response_size": 1 << 20,
    "max_header_size": 4096,
}


# ---------------------------------------------------------------------------
# slow peers (slowloris) and total deadlines
# ---------------------------------------------------------------------------


def test_body_timeout_is_an_idle_timeout_a_slow_but_steady_body_succeeds(make_server, make_client):
    """One byte every 0.1 s never leaves the body idle for 0.3 s: the request completes."""
    body = b"0123456789"
    server = make_server(
        first_request_faulty(trickle(body, 0.1, head(OK_HEAD, "Content-Length: 10")))
    )
    client = make_client(server.origin, **OPTIONS)
    started = time.monotonic()
    assert fetch(client) == body
    assert time.monotonic() - started > 2 * TIMEOUT  # longer than the timeout, in total


def test_a_body_trickled_forever_is_bounded_by_an_abort_signal(make_server, make_client):
    """The idle timeouts never fire on a steady trickle; a total deadline is a signal's job."""
    server = make_server(
        first_request_faulty(trickle(b"x" * 1000, 0.05, head(OK_HEAD, "Content-Length: 100000")))
    )
    client = make_client(server.origin, **OPTIONS)
    started = time.monotonic()
    with pytest.raises(greenhttp.DOMException) as info:
        fetch(client, signal=greenhttp.AbortSignal.timeout(1.0))
    assert info.value.name == "TimeoutError"
    assert time.monotonic() - started < 1.0 + SLACK
    assert fetch(client, "/next") == b"ok /next"


def test_a_head_trickled_past_max_header_size_is_refused(make_server, make_client):
    """A head that never ends is bounded by max_header_size, whatever the pace (the
    generous headers_timeout here leaves the size limit to end it)."""
    server = make_server(
        first_request_faulty(trickle(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 600, 0.001))
    )
    client = make_client(
        server.origin, **{**OPTIONS, "max_header_size": 256, "headers_timeout": 10}
    )
    with pytest.raises(errors.HeadersOverflowError):
        fetch(client)
    assert fetch(client, "/next") == b"ok /next"


def test_headers_timeout_bounds_a_trickled_head(make_server, make_client):
    slow_head = head(OK_HEAD, "X-Slow: " + "a" * 70, "Content-Length: 2") + b"ok"
    server = make_server(first_request_faulty(trickle(slow_head, 0.02)))  # about 2 s in all
    client = make_client(server.origin, **OPTIONS)
    with gevent.Timeout(
        TIMEOUT + SLACK, AssertionError("the trickled head outlived headers_timeout")
    ):
        with pytest.raises(errors.HeadersTimeoutError):
            fetch(client)


def test_headers_timeout_bounds_endless_interim_responses(make_server, make_client):
    def fault(conn: Any) -> None:
        conn.read_request()
        for _ in range(40):  # 2 s of 102s, then a real answer
            conn.send(b"HTTP/1.1 102 Processing\r\n\r\n")
            gevent.sleep(0.05)
        conn.respond(b"late")
        conn.wait_closed(10)

    server = make_server(first_request_faulty(fault))
    client = make_client(server.origin, **OPTIONS)
    with gevent.Timeout(
        TIMEOUT + SLACK, AssertionError("the interim responses outlived headers_timeout")
    ):
        with pytest.raises(errors.HeadersTimeoutError):
            fetch(client)


# ---------------------------------------------------------------------------
# uploads
# ---------------------------------------------------------------------------

BIG = b"u" * (8 << 20)  # more than the socket buffers hold


def test_a_reset_during_an_upload_fails_the_request(make_server, make_client):
    def fault(conn: Any) -> None:
        conn.read_head()
        conn.read_exact(1 << 16)
        rst(conn.sock)

    server = make_server(first_request_faulty(fault))
    client = make_client(server.origin, **OPTIONS)
    with gevent.Timeout(5, AssertionError("the upload hung")):
        with pytest.raises(errors.SocketError):
            client.request(path="/", method="PUT", body=BIG).body.bytes()
    assert fetch(client, "/next") == b"ok /next"


def test_an_early_answer_to_an_upload_is_delivered_or_fails_cleanly(make_server, make_client):
    """A 413 sent before the body is read, then a close: the 413 or a SocketError, never a hang."""

    def fault(conn: Any) -> None:
        conn.read_head()
        conn.send(
            head("HTTP/1.1 413 Content Too Large", "Content-Length: 4", "Connection: close")
            + b"nope"
        )
        conn.close()

    server = make_server(first_request_faulty(fault))
    client = make_client(server.origin, **OPTIONS)
    with gevent.Timeout(5, AssertionError("the upload hung")):
        try:
            r = client.request(path="/", method="PUT", body=BIG)
            assert (r.status_code, r.body.bytes()) == (413, b"nope")
        except errors.SocketError:
            pass
    assert fetch(client, "/next") == b"ok /next"


def test_an_upload_to_a_server_that_never_reads_times_out(make_server, make_client):
    release = gevent.event.Event()

    def fault(conn: Any) -> None:
        conn.read_head()
        release.wait(10)  # accepts, reads nothing more, answers nothing

    server = make_server(first_request_faulty(fault))
    client = make_client(server.origin, **OPTIONS)
    try:
        with gevent.Timeout(TIMEOUT + SLACK):
            with pytest.raises(errors.HeadersTimeoutError):
                client.request(path="/", method="PUT", body=BIG)
        assert fetch(client, "/next") == b"ok /next"
    finally:
        release.set()
