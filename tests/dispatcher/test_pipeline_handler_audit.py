"""A ``pipeline()`` whose handler, or the readable it returned, fails or leaves the
response body unread must not hold the connection (REFERENCE §1.6: the original
destroys the response with its duplex, and aborts the request when the handler
throws). The client's next request has to get through on the same connection
slot (``pipelining=1``)."""

from __future__ import annotations

import gevent
import gevent.event
import pytest

import greenhttp
from testkit import serve_forever

BIG = b"x" * 200_000  # more than the body's high-water mark: unread, it pauses the connection


def _raises(data):
    raise KeyError("handler")


def _readable_raises(data):
    for chunk in data.body:
        yield chunk
        raise KeyError("readable")


def _ignores_body(data):
    return [b"fixed"]


@pytest.mark.parametrize("handler", [_raises, _readable_raises, _ignores_body])
def test_a_pipeline_handler_that_leaves_the_body_unread_frees_the_connection(
    handler, make_server, make_client
):
    client = make_client(make_server(serve_forever(body=BIG)).origin)
    duplex = client.pipeline(path="/", handler=handler)
    duplex.end()
    with gevent.Timeout(5):
        try:
            out = duplex.read()
        except KeyError:
            out = None
        assert out in (None, b"fixed")
        assert client.request(path="/").body.bytes() == BIG


def test_a_write_after_the_request_failed_mid_response_raises_its_error(make_server, make_client):
    # The server answers at once and then stalls: the request body backs up, and the
    # signal aborts the request mid-response. A writer must learn it (the original's
    # duplex is destroyed, and a write to it fails), not have every write dropped.
    def handler(conn):
        conn.read_until(b"\r\n\r\n")
        conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nhello")
        conn.wait_closed()

    client = make_client(make_server(handler).origin)
    controller = greenhttp.AbortController()
    duplex = client.pipeline(path="/", method="PUT", signal=controller.signal, handler=lambda data: data.body)
    reason = KeyError("stop")

    wrote = gevent.event.Event()

    def writer():
        while True:
            duplex.write(b"x" * 65536)
            wrote.set()
            gevent.sleep(0)

    with gevent.Timeout(5):
        assert duplex.read(5) == b"hello"
        writing = gevent.spawn(writer)
        wrote.wait()  # the writer is at work
        controller.abort(reason)
        writing.join()
        assert writing.exception is reason
        with pytest.raises(KeyError):
            duplex.read()
    duplex.close()


@pytest.mark.parametrize("answered", [False, True], ids=["before-the-head", "after-the-head"])
def test_after_close_a_write_raises_the_same_error_as_a_read(make_server, make_client, answered):
    # docs/request-api.md: once the request failed, read() and later write()s raise its
    # error; close() aborts it, and write() said "write after end" instead.
    def handler(conn):
        conn.read_until(b"\r\n\r\n")
        if answered:
            conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nhello")
        conn.wait_closed()

    client = make_client(make_server(handler).origin)
    duplex = client.pipeline(path="/", method="PUT", handler=lambda data: data.body)
    duplex.write(b"x")
    with gevent.Timeout(5):
        if answered:
            assert duplex.read(5) == b"hello"
        duplex.close()
        with pytest.raises(greenhttp.errors.RequestAbortedError):
            duplex.read()
        with pytest.raises(greenhttp.errors.RequestAbortedError):
            duplex.write(b"more")


def test_a_write_after_end_is_still_refused_as_such(make_server, make_client):
    client = make_client(make_server(serve_forever(b"ok")).origin)
    duplex = client.pipeline(path="/", method="PUT", handler=lambda data: data.body)
    duplex.end(b"all")
    with pytest.raises(greenhttp.errors.InvalidArgumentError, match="write after end"):
        duplex.write(b"more")
    with gevent.Timeout(5):
        assert duplex.read() == b"ok"
    duplex.close()
