"""HTTP/2 servers that misbehave: GOAWAY, RST_STREAM, frames that break RFC 9113, and a
server that stops reading. Every request ends within its timeouts, in success (a
refused or unprocessed stream is replayed once, docs/http2.md) or its documented
error, and the next request on the same dispatcher works.

The server is ``h2fault.H2FaultServer`` (the ``h2`` library's server side,
plus raw bytes for what ``h2`` would never send).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
import hpack
import pytest
from h2fault import H2Conn, frame, serve_ok

import greenhttp
from greenhttp import errors

TIMEOUT = 0.3
SLACK = 1.0
OPTIONS = {
    "headers_timeout": TIMEOUT,
    "body_timeout": TIMEOUT,
    "max_header_size": 4096,
    "max_response_size": 1000,
}

# frame types and error codes (RFC 9113 §6, §7)
DATA, HEADERS, SETTINGS, PUSH_PROMISE, WINDOW_UPDATE = 0x0, 0x1, 0x4, 0x5, 0x8
END_STREAM, END_HEADERS = 0x1, 0x4
PROTOCOL_ERROR, INTERNAL_ERROR, REFUSED_STREAM = 0x1, 0x2, 0x7

Fault = Callable[[H2Conn, int, list[tuple[str, str]]], Any]


def first_request(fault: Fault) -> Fault:
    """``fault`` for the first complete request, ``serve_ok`` for the rest."""
    seen = [0]

    def on_request(conn: H2Conn, sid: int, headers: list[tuple[str, str]]) -> None:
        seen[0] += 1
        (fault if seen[0] == 1 else serve_ok)(conn, sid, headers)

    return on_request


def raw_headers(conn: H2Conn, sid: int, fields: list[tuple[str, str]], end: bool = True) -> None:
    """A HEADERS frame encoded here, so ``h2``'s own checks do not stop it."""
    block = hpack.Encoder().encode(fields)
    conn.send_raw(frame(HEADERS, END_HEADERS | (END_STREAM if end else 0), sid, block))


def head_and_data(data: bytes, length: int) -> Fault:
    def fault(conn: H2Conn, sid: int, _h: Any) -> None:
        with conn.lock:
            conn.h2.send_headers(sid, [(":status", "200"), ("content-length", str(length))])
            if data:
                conn.h2.send_data(sid, data)
        conn.flush()

    return fault


def then(*steps: Fault) -> Fault:
    def fault(conn: H2Conn, sid: int, headers: Any) -> None:
        for step in steps:
            step(conn, sid, headers)

    return fault


def close(conn: H2Conn, _sid: int, _h: Any) -> None:
    conn.close()


def send(data_for: Callable[[int], bytes]) -> Fault:
    return lambda conn, sid, _h: conn.send_raw(data_for(sid))


def oversized_data(conn: H2Conn, sid: int, _h: Any) -> None:
    with conn.lock:
        conn.h2.send_headers(sid, [(":status", "200")])
        for _ in range(8):  # 128 KiB, within the client's 256 KiB window: past max_response_size
            conn.h2.send_data(sid, b"d" * 16384)
    conn.flush()


@dataclass
class Case:
    id: str
    fault: Fault
    error: type[BaseException] | None  # None: the request succeeds (replayed or retried)
    bound: float = 0.0
    same_connection: bool | None = (
        None  # the next request reuses the connection (True) or not (False)
    )


CASES = [
    # GOAWAY (RFC 9113 §6.8)
    Case(
        "goaway-after-the-answer",
        then(serve_ok, lambda c, s, h: c.goaway(s)),
        None,
        same_connection=False,
    ),
    Case("goaway-before-processing", then(lambda c, s, h: c.goaway(0), close), None),
    Case(
        "goaway-with-error-before-processing",
        then(lambda c, s, h: c.goaway(0, PROTOCOL_ERROR), close),
        None,
    ),
    Case(
        "goaway-with-error-then-close",
        then(lambda c, s, h: c.goaway(s, INTERNAL_ERROR), close),
        errors.SocketError,
        same_connection=False,
    ),
    # RST_STREAM (§6.4)
    Case(
        "rst-stream-internal-error",
        lambda c, s, h: c.reset(s, INTERNAL_ERROR),
        errors.SocketError,
        same_connection=True,
    ),
    Case(
        "rst-stream-refused-once",
        lambda c, s, h: c.reset(s, REFUSED_STREAM),
        None,
        same_connection=True,
    ),
    Case(
        "rst-stream-mid-body",
        then(head_and_data(b"abc", 10), lambda c, s, h: c.reset(s, INTERNAL_ERROR)),
        errors.SocketError,
        same_connection=True,
    ),
    # the connection goes away
    Case("close-before-answer", close, errors.SocketError, same_connection=False),
    Case(
        "close-mid-body",
        then(head_and_data(b"abc", 10), close),
        errors.SocketError,
        same_connection=False,
    ),
    # frames RFC 9113 forbids: a connection error (§5.4.1)
    Case(
        "frame-larger-than-max-frame-size",
        send(lambda s: frame(DATA, 0, s, b"x" * 20000)),
        errors.SocketError,
        same_connection=False,
    ),
    Case(
        "data-on-stream-0",
        send(lambda s: frame(DATA, 0, 0, b"xx")),
        errors.SocketError,
        same_connection=False,
    ),
    Case(
        "undecodable-hpack",
        send(lambda s: frame(HEADERS, END_HEADERS, s, b"\xff\xff\xff\xff\x0f")),
        errors.SocketError,
        same_connection=False,
    ),
    Case(
        "zero-window-update",
        send(lambda s: frame(WINDOW_UPDATE, 0, 0, b"\x00\x00\x00\x00")),
        errors.SocketError,
        same_connection=False,
    ),
    Case(
        "settings-window-too-large",
        send(lambda s: frame(SETTINGS, 0, 0, b"\x00\x04\xff\xff\xff\xff")),
        errors.SocketError,
        same_connection=False,
    ),
    Case(
        "push-promise-when-disabled",
        send(lambda s: frame(PUSH_PROMISE, END_HEADERS, s, b"\x00\x00\x00\x02\x82")),
        errors.SocketError,
        same_connection=False,
    ),
    Case(
        "headers-on-a-client-stream-id",
        send(lambda s: frame(HEADERS, END_HEADERS, s + 100, b"\x88")),
        errors.SocketError,
        same_connection=False,
    ),
    # (h2 alone waits for the whole announced length, up to 16 MiB, before refusing it)
    Case(
        "frame-header-announcing-16-mib",
        send(lambda s: b"\xff\xff\xff\x00\x00\x00\x00\x00\x01" + b"x" * 100),
        errors.SocketError,
        same_connection=False,
    ),
    # malformed responses: that stream only (§8.1.1)
    Case(
        "upper-case-response-field",
        lambda c, s, h: raw_headers(c, s, [(":status", "200"), ("X-Upper", "1")]),
        errors.InformationalError,
        same_connection=True,
    ),
    Case(
        "connection-specific-response-field",
        lambda c, s, h: raw_headers(c, s, [(":status", "200"), ("connection", "close")]),
        errors.InformationalError,
        same_connection=True,
    ),
    Case(
        "response-without-status",
        lambda c, s, h: raw_headers(c, s, [("x-a", "1")]),
        errors.InformationalError,
        same_connection=True,
    ),
    # limits and silence
    Case(
        "oversized-response-head",
        lambda c, s, h: raw_headers(c, s, [(":status", "200"), ("x-big", "b" * 8000)]),
        errors.HeadersOverflowError,
        same_connection=True,
    ),
    Case(
        "body-past-max-response-size",
        oversized_data,
        errors.ResponseExceededMaxSizeError,
        same_connection=True,
    ),
    Case(
        "never-answers",
        lambda c, s, h: None,
        errors.HeadersTimeoutError,
        TIMEOUT,
        same_connection=True,
    ),
    Case(
        "head-then-silence",
        head_and_data(b"", 10),
        errors.BodyTimeoutError,
        TIMEOUT,
        same_connection=True,
    ),
    Case(
        "stops-mid-body",
        head_and_data(b"abc", 10),
        errors.BodyTimeoutError,
        TIMEOUT,
        same_connection=True,
    ),
]


def fetch(dispatcher: Any, path: str = "/", **options: Any) -> bytes:
    return dispatcher.request(path=path, **options).body.bytes()


def _h2c_factory(origin: str, **options: Any) -> Any:
    return greenhttp.H2CClient(origin, **options)


@pytest.fixture(params=["h2c", "pool"])
def make_dispatcher(request, make_pool):
    made: list[Any] = []

    def make(origin: str, **options: Any) -> Any:
        opts = {**OPTIONS, **options}
        if request.param == "h2c":
            d = greenhttp.H2CClient(origin, **opts)
            made.append(d)
            return d
        return make_pool(origin, connections=1, factory=_h2c_factory, **opts)

    yield make
    for d in made:
        with gevent.Timeout(5):
            d.destroy()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_http2_fault_ends_in_time_and_the_next_request_works(
    case, make_h2_server, make_dispatcher
):
    server = make_h2_server(first_request(case.fault))
    dispatcher = make_dispatcher(server.origin)
    started = time.monotonic()
    with gevent.Timeout(case.bound + SLACK + 5, AssertionError("the request hung")):
        if case.error is None:
            assert fetch(dispatcher, "/first") == b"ok /first"
        else:
            with pytest.raises(case.error):
                fetch(dispatcher, "/first")
    elapsed = time.monotonic() - started
    assert elapsed < case.bound + SLACK, f"{case.id} took {elapsed:.2f}s"
    accepted = server.accepted
    with gevent.Timeout(5, AssertionError("the next request hung")):
        assert fetch(dispatcher, "/next") == b"ok /next"
    if case.same_connection is True:
        assert server.accepted == accepted == 1
    elif case.same_connection is False:
        assert server.accepted == 2


def test_a_reset_stream_reports_its_error_code(make_h2_server, make_dispatcher):
    server = make_h2_server(first_request(lambda c, s, h: c.reset(s, INTERNAL_ERROR)))
    dispatcher = make_dispatcher(server.origin)
    with pytest.raises(errors.SocketError) as info:
        fetch(dispatcher)
    assert info.value.http2_error_code == INTERNAL_ERROR


def test_a_server_that_stops_reading_an_upload_times_the_request_out(
    make_h2_server, make_dispatcher
):
    """The upload fills the flow-control window and stalls; headers_timeout ends it."""
    stalled: list[H2Conn] = []

    def on_headers(conn: H2Conn, sid: int, _h: Any) -> None:
        if not stalled:
            stalled.append(conn)
            conn.stop_reading(TIMEOUT + 0.3)

    server = make_h2_server(serve_ok, on_headers=on_headers)
    dispatcher = make_dispatcher(server.origin)
    started = time.monotonic()
    with pytest.raises(errors.HeadersTimeoutError):
        dispatcher.request(path="/upload", method="POST", body=b"u" * (1 << 20))
    assert time.monotonic() - started < TIMEOUT + SLACK
    assert stalled[0].resumed.wait(5)  # the server reads again
    assert fetch(dispatcher, "/next") == b"ok /next"
    assert server.accepted == 1


def test_concurrent_streams_survive_one_stream_being_reset(make_h2_server, make_dispatcher):
    """A reset or a timeout is the stream's business: its siblings complete."""

    def on_request(conn: H2Conn, sid: int, headers: list[tuple[str, str]]) -> None:
        path = dict(headers)[":path"]
        if path == "/reset":
            conn.reset(sid, INTERNAL_ERROR)
        elif path == "/silent":
            pass
        else:
            serve_ok(conn, sid, headers)

    server = make_h2_server(on_request)
    dispatcher = make_dispatcher(server.origin)
    paths = ["/a", "/reset", "/b", "/silent", "/c"] * 4
    results: dict[int, Any] = {}

    def one(i: int, path: str) -> None:
        try:
            results[i] = fetch(dispatcher, path)
        except (errors.SocketError, errors.HeadersTimeoutError) as exc:
            results[i] = type(exc)

    with gevent.Timeout(TIMEOUT + SLACK + 2):
        gevent.joinall([gevent.spawn(one, i, p) for i, p in enumerate(paths)], raise_error=True)
    expected = {"/reset": errors.SocketError, "/silent": errors.HeadersTimeoutError}
    for i, path in enumerate(paths):
        assert results[i] == expected.get(path, b"ok " + path.encode()), (path, results[i])
    assert server.accepted == 1
