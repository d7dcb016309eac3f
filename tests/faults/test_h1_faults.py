"""HTTP/1.1 servers that misbehave: every request ends within its timeouts, in success or
its documented error, nothing is truncated silently, and the dispatcher keeps working.

Each fault in :data:`FAULTS` (built with ``h1script.py``) hits the first request only; the test then asserts
that the next request on the same dispatcher (a ``Client``, and a ``Pool``)
succeeds. Timeouts are small (0.3 s) so a hang shows up as a test failure,
not as a stuck run. The autouse leak check of ``conftest.py`` asserts no
socket or greenlet outlives each test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
import gevent.event
import pytest
from faultkit import rst
from h1script import (
    CHUNKED,
    OK_HEAD,
    after_request,
    endless,
    fetch,
    first_request_faulty,
    head,
    reset_on_accept,
)

from greenhttp import errors

TIMEOUT = 0.3  # headers_timeout and body_timeout of every client here
SLACK = 1.0  # scheduling slack on a loaded 2-core machine
MAX_RESPONSE = 1 << 20
MAX_HEADER = 4096
OPTIONS = {
    "headers_timeout": TIMEOUT,
    "body_timeout": TIMEOUT,
    "max_response_size": MAX_RESPONSE,
    "max_header_size": MAX_HEADER,
}


@dataclass
class Fault:
    id: str
    fault: Callable[[Any], Any]
    error: type[BaseException]
    code: str | None = None
    bound: float = 0.0  # seconds of configured timeouts the failure may take
    options: dict[str, Any] = field(default_factory=dict)


FAULTS = [
    # the connection dies
    Fault("reset-on-accept", reset_on_accept, errors.SocketError),
    Fault("reset-before-headers", after_request(b"", "rst"), errors.SocketError),
    Fault(
        "reset-during-headers",
        after_request(b"HTTP/1.1 200 OK\r\nContent-Le", "rst"),
        errors.SocketError,
    ),
    Fault("close-before-headers", after_request(b""), errors.SocketError),
    Fault(
        "close-during-headers", after_request(b"HTTP/1.1 200 OK\r\nContent-Le"), errors.SocketError
    ),
    Fault(
        "close-mid-body-content-length",
        after_request(head(OK_HEAD, "Content-Length: 10") + b"abc"),
        errors.SocketError,
    ),
    Fault(
        "reset-mid-body-content-length",
        after_request(head(OK_HEAD, "Content-Length: 10") + b"abc", "rst"),
        errors.SocketError,
    ),
    Fault(
        "close-mid-body-chunked",
        after_request(head(OK_HEAD, CHUNKED) + b"3\r\nabc\r\n"),
        errors.SocketError,
    ),
    Fault(
        "truncated-chunk", after_request(head(OK_HEAD, CHUNKED) + b"10\r\nabc"), errors.SocketError
    ),
    Fault(
        "chunked-without-last-chunk",
        after_request(head(OK_HEAD, CHUNKED) + b"3\r\nabc\r\n0\r\n"),
        errors.SocketError,
    ),
    # bytes that are not HTTP/1.1
    Fault(
        "garbage-status-line",
        after_request(b"HELLO THERE\r\n\r\n", "stall"),
        errors.HTTPParserError,
        "HPE_INVALID_CONSTANT",
    ),
    Fault(
        "binary-garbage",
        after_request(bytes(range(256)) + b"\r\n\r\n", "stall"),
        errors.HTTPParserError,
    ),
    Fault(
        "http2-preface-instead",
        after_request(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "stall"),
        errors.HTTPParserError,
    ),
    Fault(
        "status-below-100",
        after_request(head("HTTP/1.1 099 Odd", "Content-Length: 0"), "stall"),
        errors.HTTPParserError,
        "HPE_INVALID_STATUS",
    ),
    Fault(
        "bare-lf",
        after_request(b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok", "stall"),
        errors.HTTPParserError,
        "HPE_LF_EXPECTED",
    ),
    Fault(
        "obs-fold",
        after_request(head(OK_HEAD, "X-A: 1", " folded", "Content-Length: 0"), "stall"),
        errors.HTTPParserError,
    ),
    Fault(
        "space-before-colon",
        after_request(head(OK_HEAD, "Content-Length : 0"), "stall"),
        errors.HTTPParserError,
    ),
    Fault(
        "nul-in-header-value",
        after_request(head(OK_HEAD, "X-A: a\x00b", "Content-Length: 0"), "stall"),
        errors.HTTPParserError,
    ),
    Fault(
        "bad-chunk-size",
        after_request(head(OK_HEAD, CHUNKED) + b"zz\r\nabc\r\n", "stall"),
        errors.HTTPParserError,
        "HPE_INVALID_CHUNK_SIZE",
    ),
    Fault(
        "chunk-without-crlf",
        after_request(head(OK_HEAD, CHUNKED) + b"3\r\nabcXX0\r\n\r\n", "stall"),
        errors.HTTPParserError,
        "HPE_STRICT",
    ),
    Fault(
        "unexpected-101",
        after_request(head("HTTP/1.1 101 Switching Protocols", "Upgrade: x"), "stall"),
        errors.SocketError,
    ),
    # RFC 9112 §6.3: ambiguous framing is refused, never guessed
    Fault(
        "content-length-and-chunked",
        after_request(
            head(OK_HEAD, "Content-Length: 3", CHUNKED) + b"3\r\nabc\r\n0\r\n\r\n", "stall"
        ),
        errors.HTTPParserError,
        "HPE_UNEXPECTED_CONTENT_LENGTH",
    ),
    Fault(
        "conflicting-content-lengths",
        after_request(head(OK_HEAD, "Content-Length: 3", "Content-Length: 4") + b"abcd", "stall"),
        errors.HTTPParserError,
        "HPE_UNEXPECTED_CONTENT_LENGTH",
    ),
    Fault(
        "content-length-list",
        after_request(head(OK_HEAD, "Content-Length: 3, 4") + b"abcd", "stall"),
        errors.HTTPParserError,
        "HPE_UNEXPECTED_CONTENT_LENGTH",
    ),
    Fault(
        "negative-content-length",
        after_request(head(OK_HEAD, "Content-Length: -1") + b"abcd", "stall"),
        errors.HTTPParserError,
        "HPE_INVALID_CONTENT_LENGTH",
    ),
    Fault(
        "chunked-twice",
        after_request(head(OK_HEAD, "Transfer-Encoding: chunked, chunked") + b"0\r\n\r\n", "stall"),
        errors.HTTPParserError,
        "HPE_INVALID_TRANSFER_ENCODING",
    ),
    # limits
    Fault(
        "oversized-headers",
        after_request(head(OK_HEAD, "X-Big: " + "a" * MAX_HEADER), "stall"),
        errors.HeadersOverflowError,
    ),
    Fault(
        "oversized-unterminated-head",
        after_request(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 2 * MAX_HEADER, "stall"),
        errors.HeadersOverflowError,
    ),
    Fault(
        "oversized-trailers",
        after_request(
            head(OK_HEAD, CHUNKED) + b"3\r\nabc\r\n0\r\nX-T: " + b"t" * MAX_HEADER + b"\r\n\r\n",
            "stall",
        ),
        errors.HeadersOverflowError,
    ),
    Fault(
        "endless-chunked-body",
        endless(head(OK_HEAD, CHUNKED), b"4000\r\n" + b"x" * 0x4000 + b"\r\n"),
        errors.ResponseExceededMaxSizeError,
    ),
    Fault(
        "endless-body-until-close",
        endless(head(OK_HEAD), b"x" * 0x4000),
        errors.ResponseExceededMaxSizeError,
    ),
    Fault(
        "huge-content-length",
        endless(head(OK_HEAD, "Content-Length: 10000000000"), b"x" * 0x4000),
        errors.ResponseExceededMaxSizeError,
    ),
    # silence
    Fault("never-answers", after_request(b"", "stall"), errors.HeadersTimeoutError, bound=TIMEOUT),
    Fault(
        "stops-mid-head",
        after_request(b"HTTP/1.1 200 OK\r\nX-A:", "stall"),
        errors.HeadersTimeoutError,
        bound=TIMEOUT,
    ),
    Fault(
        # Refused at the first byte that cannot start a status line, as llhttp does,
        # not after the headers timeout (the blank line never comes).
        "garbage-then-silence",
        after_request(b"XXXXXXXX", "stall"),
        errors.HTTPParserError,
        "HPE_INVALID_CONSTANT",
    ),
    Fault(
        "head-then-silence",
        after_request(head(OK_HEAD, "Content-Length: 10"), "stall"),
        errors.BodyTimeoutError,
        bound=TIMEOUT,
    ),
    Fault(
        "stops-mid-body",
        after_request(head(OK_HEAD, "Content-Length: 10") + b"abc", "stall"),
        errors.BodyTimeoutError,
        bound=TIMEOUT,
    ),
    Fault(
        "stops-mid-chunked-body",
        after_request(head(OK_HEAD, CHUNKED) + b"3\r\nabc\r\n", "stall"),
        errors.BodyTimeoutError,
        bound=TIMEOUT,
    ),
    Fault(
        "stops-before-trailers-end",
        after_request(head(OK_HEAD, CHUNKED) + b"0\r\nX-T: 1\r\n", "stall"),
        errors.BodyTimeoutError,
        bound=TIMEOUT,
    ),
]


@pytest.fixture(params=["client", "pool"])
def make_dispatcher(request, make_client, make_pool):
    """A Client, or a Pool of two connections, with the small timeouts above."""

    def make(origin: str, **options: Any) -> Any:
        opts = {**OPTIONS, **options}
        if request.param == "client":
            return make_client(origin, **opts)
        return make_pool(origin, connections=2, **opts)

    return make


@pytest.mark.parametrize("case", FAULTS, ids=[f.id for f in FAULTS])
def test_each_fault_ends_in_its_documented_error_and_the_next_request_works(
    case, make_server, make_dispatcher
):
    server = make_server(first_request_faulty(case.fault))
    dispatcher = make_dispatcher(server.origin, **case.options)
    started = time.monotonic()
    with gevent.Timeout(case.bound + SLACK + 5, AssertionError("the request hung")):
        with pytest.raises(case.error) as info:
            fetch(dispatcher, "/first")
    elapsed = time.monotonic() - started
    assert elapsed < case.bound + SLACK, f"{case.id} took {elapsed:.2f}s"
    if case.code is not None:
        assert info.value.code == case.code
    with gevent.Timeout(5, AssertionError("the next request hung")):
        assert fetch(dispatcher, "/next") == b"ok /next"


def test_a_body_cut_short_raises_after_the_bytes_that_arrived(make_server, make_client):
    """Nothing is truncated silently: the partial body is followed by SocketError."""
    go = gevent.event.Event()

    def fault(conn: Any) -> None:
        conn.read_request()
        conn.send(head(OK_HEAD, "Content-Length: 100") + b"a" * 40)
        go.wait(5)
        conn.close()

    server = make_server(first_request_faulty(fault))
    client = make_client(server.origin, **OPTIONS)
    r = client.request(path="/")
    assert r.status_code == 200 and r.body.content_length == 100
    got = bytearray()
    with pytest.raises(errors.SocketError, match="other side closed"):
        for chunk in r.body:
            got += chunk
            go.set()
    assert got == b"a" * 40
    assert fetch(client, "/next") == b"ok /next"


def test_a_reset_after_the_head_fails_the_body_read(make_server, make_client):
    go = gevent.event.Event()

    def fault(conn: Any) -> None:
        conn.read_request()
        conn.send(head(OK_HEAD, "Content-Length: 100") + b"a" * 10)
        go.wait(5)
        rst(conn.sock)

    server = make_server(first_request_faulty(fault))
    client = make_client(server.origin, **OPTIONS)
    r = client.request(path="/")
    assert r.status_code == 200
    go.set()
    with pytest.raises(errors.SocketError):
        r.body.bytes()
    assert fetch(client, "/next") == b"ok /next"


def test_a_pipelined_burst_loses_only_its_head_when_the_server_resets(make_server, make_client):
    """REFERENCE §3.6: the request at the head fails; the others are re-sent and succeed.

    (``blocking=False`` lets GET requests pipeline before the first head arrives.)
    """

    def fault(conn: Any) -> None:
        for _ in range(3):
            conn.read_request()
        conn.send(head(OK_HEAD, "Content-Length: 2") + b"ok")  # only the first is answered
        rst(conn.sock)

    server = make_server(first_request_faulty(fault))
    client = make_client(server.origin, pipelining=3, **OPTIONS)
    results: dict[str, Any] = {}

    def one(i: int) -> None:
        try:
            results[f"/{i}"] = fetch(client, f"/{i}", blocking=False)
        except errors.SocketError as exc:
            results[f"/{i}"] = exc

    with gevent.Timeout(10):
        gevent.joinall([gevent.spawn(one, i) for i in range(3)], raise_error=True)
    failures = [k for k, v in results.items() if isinstance(v, errors.SocketError)]
    assert len(results) == 3
    assert results["/0"] == b"ok"
    assert failures == ["/1"], results
    assert results["/2"] == b"ok /2"


# ---------------------------------------------------------------------------
# bytes nobody asked for
# ---------------------------------------------------------------------------


def test_a_complete_unsolicited_response_closes_the_connection(make_server, make_client):
    """Extra responses after the one asked for never reach the next request (smuggling)."""

    def fault(conn: Any) -> None:
        conn.read_request()
        conn.send(
            head(OK_HEAD, "Content-Length: 3")
            + b"abc"
            + head(OK_HEAD, "Content-Length: 4")
            + b"evil"
        )
        conn.wait_closed(5)

    server = make_server(first_request_faulty(fault))
    client = make_client(server.origin, **OPTIONS)
    assert fetch(client) == b"abc"
    assert fetch(client, "/next") == b"ok /next"
    assert server.accepted == 2


def test_unsolicited_partial_bytes_do_not_poison_the_next_response(make_server, make_client):
    def fault(conn: Any) -> None:
        conn.read_request()
        conn.send(head(OK_HEAD, "Content-Length: 3") + b"abcHTTP/1.1 200 OK\r\nX-Smuggled: 1\r\n")
        return True  # keep serving on this connection

    server = make_server(first_request_faulty(fault))
    client = make_client(server.origin, **OPTIONS)
    assert fetch(client) == b"abc"
    assert fetch(client, "/next") == b"ok /next"
