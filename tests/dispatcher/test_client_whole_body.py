"""Big known-length bodies: read whole into one buffer, or streamed, always intact.

When a response head announces more than 64 KiB, the reader stops before the
body and lets the woken consumer choose: ``body.bytes()`` (and ``text()``,
``json()``) gets the whole body received into one buffer that becomes its
``bytes`` without a copy; iteration and raw handlers get it in pieces as
before. Either way every byte arrives once, in order, and errors and
timeouts in the middle of the body are reported.
"""

from __future__ import annotations

from typing import Any

import gevent
import gevent.ssl
import pytest

from greenhttp import errors
from greenhttp.interceptors import redirect, retry

KiB = 1024
MiB = 1024 * KiB


def pattern(size: int, seed: int = 0) -> bytes:
    """Bytes whose every position is checkable (no run of equal blocks)."""
    block = bytes((i * 7 + seed) % 251 for i in range(251))
    return (block * (size // 251 + 1))[:size]


def big_response_server(body: bytes, first: int = 1000, piece: int = 64 * KiB):
    """Answer every request with ``body``: the head and ``first`` body bytes, then pieces."""

    def handler(conn):
        while conn.read_request() is not None:
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:first])
            for start in range(first, len(body), piece):
                conn.send(body[start : start + piece])

    return handler


class ChunkCounter:
    """An interceptor that counts the body chunks the handler below it receives."""

    def __init__(self) -> None:
        self.chunks: list[int] = []

    def __call__(self, dispatch: Any) -> Any:
        counter = self

        def counting(opts: dict[str, Any], handler: Any) -> bool:
            class Counting:
                def __getattr__(self, name: str) -> Any:
                    return getattr(handler, name)

                def on_response_data(self, controller: Any, chunk: bytes) -> None:
                    counter.chunks.append(len(chunk))
                    handler.on_response_data(controller, chunk)

            return dispatch(opts, Counting())

        return counting


@pytest.mark.parametrize("size", [64 * KiB + 1, MiB + 7, 5 * MiB + 3], ids=["64KiB+1", "1MiB+7", "5MiB+3"])
def test_bytes_gets_a_big_body_whole_and_intact(make_server, make_client, size):
    body = pattern(size)
    server = make_server(big_response_server(body))
    client = make_client(server.origin)
    counter = ChunkCounter()
    d = client.compose(counter)
    for _ in range(2):  # the second response reuses the connection
        r = d.request(path="/")
        got = r.body.bytes()
        assert type(got) is bytes and got == body
    assert server.accepted == 1
    # Up to 4 MiB arrive as one buffer; more arrive in 4 MiB buffers.
    per_response = 1 if size <= 4 * MiB else 2
    assert len(counter.chunks) == 2 * per_response, counter.chunks


def test_text_and_json_of_a_big_body(make_server, make_client):
    doc = '{"a": "' + "x" * (200 * KiB) + '"}'
    server = make_server(big_response_server(doc.encode()))
    client = make_client(server.origin)
    assert client.request(path="/").body.text() == doc
    assert client.request(path="/").body.json() == {"a": "x" * (200 * KiB)}


def test_a_big_body_read_by_iteration_streams_in_pieces(make_server, make_client):
    body = pattern(2 * MiB, seed=3)
    server = make_server(big_response_server(body))
    client = make_client(server.origin)
    pieces = list(client.request(path="/").body)
    assert b"".join(pieces) == body
    assert len(pieces) > 2  # streamed as it arrived, not gathered first
    assert client.request(path="/").body.read(10) == body[:10]


def test_a_raw_handler_gets_every_byte_of_a_big_body_in_order(make_server, make_client):
    body = pattern(3 * MiB + 5, seed=9)
    server = make_server(big_response_server(body, first=30000, piece=100000))
    client = make_client(server.origin)
    chunks: list[bytes] = []
    done = gevent.event.Event()

    class Handler:
        def on_response_data(self, controller, chunk):
            chunks.append(chunk)

        def on_response_end(self, controller, trailers):
            done.set()

        def on_response_error(self, controller, err):
            chunks.append(repr(err).encode())
            done.set()

    client.dispatch({"path": "/", "method": "GET"}, Handler())
    assert done.wait(10)
    assert b"".join(chunks) == body


def test_the_connection_closing_inside_a_whole_body_read_is_a_socket_error(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % MiB + b"a" * 1000)
        conn.send(b"b" * (300 * KiB))
        conn.close()

    server = make_server(handler)
    client = make_client(server.origin)
    r = client.request(path="/")
    with pytest.raises(errors.SocketError):
        r.body.bytes()


def test_body_timeout_applies_inside_a_whole_body_read(make_server, make_client):
    release = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % MiB + b"a" * 1000)
        conn.send(b"b" * (100 * KiB))
        release.wait(10)  # then stall: the client must give up on its own

    server = make_server(handler)
    client = make_client(server.origin, body_timeout=0.2)
    r = client.request(path="/")
    try:
        with pytest.raises(errors.BodyTimeoutError):
            with gevent.Timeout(5):
                r.body.bytes()
    finally:
        release.set()


def test_a_pipelined_response_after_a_big_body_is_not_swallowed(make_server, make_client):
    big = pattern(MiB + 11, seed=5)

    def handler(conn):
        first = conn.read_request()
        second = conn.read_request()
        assert first is not None and second is not None
        # Both answers back to back: the big body's tail and the next head share reads.
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big)
        conn.send(head + big + b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nafter")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, pipelining=2)
    results: dict[str, bytes] = {}

    def get(name: str) -> None:
        # blocking=False: the second request is written before the first head arrives.
        results[name] = client.request(path="/" + name, blocking=False).body.bytes()

    jobs = [gevent.spawn(get, "big"), gevent.spawn(get, "small")]
    gevent.joinall(jobs, timeout=10, raise_error=True)
    assert results == {"big": big, "small": b"after"}


def test_a_big_body_over_tls_is_whole_and_intact(make_server, make_client):
    import ssl

    import trustme

    ca = trustme.CA()
    ctx = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # the server's handshakes must not block the hub
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
    body = pattern(MiB + 1, seed=11)
    server = make_server(big_response_server(body, first=5000), ssl_context=ctx)
    client = make_client(f"https://localhost:{server.port}", connect={"cadata": ca.cert_pem.bytes().decode()})
    assert client.request(path="/").body.bytes() == body
    assert b"".join(client.request(path="/").body) == body


# -- the socket wakes the reader once per 256 KiB (SO_RCVLOWAT, Transport.hold_reads) --


def test_a_body_trickling_in_slower_than_the_wake_up_size_is_not_a_timeout(make_server, make_client):
    body = pattern(300 * KiB, seed=13)

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
        for start in range(0, len(body), 10 * KiB):
            conn.send(body[start : start + 10 * KiB])
            gevent.sleep(0.015)  # the server's pace: each gap well inside body_timeout

    server = make_server(handler)
    # The whole body takes ~0.45 s, three body timeouts; no gap comes near one.
    client = make_client(server.origin, body_timeout=0.15)
    with gevent.Timeout(10):
        assert client.request(path="/").body.bytes() == body


def test_a_small_response_after_a_big_body_wakes_the_reader_at_once(make_server, make_client):
    big = pattern(MiB, seed=17)
    tail = 200 * KiB  # the last read of the body waits for 200 KiB at once
    gate = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big) + big[:-tail])
        gate.wait(10)
        conn.send(big[-tail:])
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, headers_timeout=1, body_timeout=3)
    reading = gevent.spawn(client.request(path="/big").body.bytes)
    gevent.idle()  # the reader takes all but the tail, then waits for the tail
    gate.set()
    assert reading.get(timeout=10) == big
    # A wake-up size left behind (200 KiB) would hold these few bytes until the headers timeout.
    with gevent.Timeout(10):
        assert client.request(path="/small").body.bytes() == b"ok"
    assert server.accepted == 1


def test_a_deadline_that_fires_as_it_is_re_armed_loses_no_byte_of_a_whole_body_read(make_server, make_client):
    from greenhttp._dispatcher.h1_driver import _BODY, _TimeoutFired
    from greenhttp._runtime import kill

    body = pattern(2 * MiB, seed=19)
    first = 300 * KiB
    gate = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:first])
        gate.wait(10)
        conn.send(body[first:])

    server = make_server(handler)
    client = make_client(server.origin, body_timeout=3)
    r = client.request(path="/")
    reading = gevent.spawn(r.body.bytes)
    try:
        gevent.idle()  # the reader takes what was sent and parks inside the whole-body read
        conn = client._core._conn
        assert conn is not None and conn._phase == _BODY and conn.transport._lowat > 1
        # The race, made certain: the deadline fired, the reader re-armed it, then the throw lands.
        conn._deadline.set(5)
        kill(conn.reader, _TimeoutFired(_BODY))
        gevent.idle()
    finally:
        gate.set()
    assert reading.get(timeout=10) == body


def test_a_big_body_over_a_unix_socket_is_whole_and_intact(make_server, make_client, tmp_path):
    # AF_UNIX readiness ignores the low-water mark: the reader wakes per piece, as before.
    body = pattern(MiB + 9, seed=23)
    path = str(tmp_path / "s.sock")
    server = make_server(big_response_server(body, piece=16 * KiB), unix_path=path)
    client = make_client("http://localhost", socket_path=path)
    with gevent.Timeout(10):
        assert client.request(path="/").body.bytes() == body
        assert client.request(path="/").body.bytes() == body
    assert server.accepted == 1


def test_a_connection_keeps_only_its_last_whole_body_and_lets_go_of_it_on_close(make_server, make_client):
    # The reader keeps the last body it read whole until it reads the next one
    # (docs/performance.md, "What is left at 1 MiB is the allocator"): never more
    # than that one, and nothing once the client is closed.
    import gc
    import tracemalloc

    body = pattern(MiB)
    server = make_server(big_response_server(body))
    client = make_client(server.origin)
    client.request(path="/").body.bytes()  # connect first: its own allocations stay out
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(3):
            assert len(client.request(path="/").body.bytes()) == MiB  # dropped at once
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - base
        client.close()
        gc.collect()
        after_close = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert MiB // 2 < kept < 3 * MiB // 2, kept  # one body, not three
    assert after_close < MiB // 2, after_close


@pytest.mark.parametrize(
    "interceptors",
    [
        [retry()],
        [redirect(max_redirections=2)],
        [retry(), redirect(max_redirections=2)],
        [redirect(max_redirections=2), retry()],
    ],
    ids=["retry", "redirect", "retry-redirect", "redirect-retry"],
)
def test_bytes_through_retry_and_redirect_still_gets_the_body_whole(make_server, make_client, interceptors):
    body = pattern(MiB + 7, seed=5)
    server = make_server(big_response_server(body))
    client = make_client(server.origin)
    counter = ChunkCounter()
    d = client.compose(counter, *interceptors)
    for _ in range(2):
        assert d.request(path="/").body.bytes() == body
    assert counter.chunks == [len(body), len(body)]


def test_a_retried_whole_body_read_is_read_whole_again(make_server, make_client):
    body = pattern(MiB + 7, seed=6)
    ranges: list[str | None] = []

    def handler(conn):
        req = conn.read_request()
        if req is None:
            return
        ranges.append(req.header("range"))
        if len(ranges) == 1:  # cut off after 100 KiB
            conn.send(b'HTTP/1.1 200 OK\r\nETag: "v1"\r\nContent-Length: %d\r\n\r\n' % len(body) + body[: 100 * KiB])
            return
        start = int(req.header("range").split("=")[1].split("-")[0])
        conn.send(
            b'HTTP/1.1 206 Partial Content\r\nETag: "v1"\r\nContent-Range: bytes %d-%d/%d\r\nContent-Length: %d\r\n\r\n'
            % (start, len(body) - 1, len(body), len(body) - start)
            + body[start:]
        )

    server = make_server(handler)
    counter = ChunkCounter()
    d = make_client(server.origin).compose(counter, retry(min_timeout=0.001, max_timeout=0.001))
    with gevent.Timeout(5):
        assert d.request(path="/").body.bytes() == body
    assert ranges == [None, f"bytes={100 * KiB}-{len(body) - 1}"]
    # The retry's answer is read whole too, as the consumer asked: what came with
    # its head, then the rest in one buffer (not in 64 KiB reads).
    assert sum(counter.chunks) == len(body)
    assert len(counter.chunks) <= 4 and counter.chunks[-1] > len(body) // 2, counter.chunks
