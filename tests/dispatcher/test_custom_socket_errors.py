"""A socket from a custom connector (``connect=``) that fails a write or a read
with something other than an ``OSError`` ends the request with a ``SocketError``
(the socket's own exception as its cause), on HTTP/1.1 and HTTP/2: never a
hang, and the client connects afresh for the next request."""

from __future__ import annotations

from typing import Any

import gevent
import pytest

from greenhttp.errors import SocketError
from h2_support.h2server import serve_ok
from testkit import BrokenWrapper, serve_forever, wrapping_connector

pytest_plugins = ["h2_support.fixtures"]


def _fails_with_the_wrapper_as_cause(call: Any) -> None:
    with gevent.Timeout(5, AssertionError("the failed write left the request hanging")):
        with pytest.raises(SocketError) as info:
            call()
    assert isinstance(info.value.__cause__, BrokenWrapper)


def test_h1_the_first_write_failing(make_server: Any, make_client: Any) -> None:
    server = make_server(serve_forever(b"ok"))
    connect = wrapping_connector([1, 0])
    client = make_client(server.origin, connect=connect)
    _fails_with_the_wrapper_as_cause(lambda: client.request(path="/first"))
    with gevent.Timeout(5):
        assert client.request(path="/next").body.bytes() == b"ok"  # on a new connection
    assert len(connect.made) == 2


def test_h1_a_later_write_failing_on_a_kept_alive_connection(make_server: Any, make_client: Any) -> None:
    server = make_server(serve_forever(b"ok"))
    connect = wrapping_connector([2, 0])
    client = make_client(server.origin, connect=connect)
    with gevent.Timeout(5):
        assert client.request(path="/first").body.bytes() == b"ok"
    _fails_with_the_wrapper_as_cause(lambda: client.request(path="/second"))
    with gevent.Timeout(5):
        assert client.request(path="/third").body.bytes() == b"ok"
    assert len(connect.made) == 2


def test_h2c_a_write_failing(make_h2_server: Any, make_h2c: Any) -> None:
    server = make_h2_server(serve_ok)
    connect = wrapping_connector([1, 0])
    client = make_h2c(server.origin, connect=connect)
    _fails_with_the_wrapper_as_cause(lambda: client.request(path="/first"))
    with gevent.Timeout(5):
        assert client.request(path="/next").body.bytes() == b"ok /next"
    assert len(connect.made) == 2


def test_h1_a_streamed_body_s_write_failing(make_server: Any, make_client: Any) -> None:
    """The socket failing between two pieces of a streamed body is a failed write,
    not an error of the body's iterator."""
    server = make_server(serve_forever(b"ok"))
    connect = wrapping_connector([2, 0])  # the head goes out, the first piece fails
    client = make_client(server.origin, connect=connect)

    def body() -> Any:
        yield b"a" * 10
        yield b"b" * 10

    _fails_with_the_wrapper_as_cause(lambda: client.request(path="/up", method="POST", body=body()))
    with gevent.Timeout(5):
        assert client.request(path="/next").body.bytes() == b"ok"


def test_h1_a_read_failing(make_server: Any, make_client: Any) -> None:
    server = make_server(serve_forever(b"ok"))
    connect = wrapping_connector([1, 0], reads=True)
    client = make_client(server.origin, connect=connect)
    _fails_with_the_wrapper_as_cause(lambda: client.request(path="/first"))
    with gevent.Timeout(5):
        assert client.request(path="/next").body.bytes() == b"ok"


def test_h2c_a_read_failing(make_h2_server: Any, make_h2c: Any) -> None:
    server = make_h2_server(serve_ok)
    connect = wrapping_connector([1, 0], reads=True)
    client = make_h2c(server.origin, connect=connect)
    _fails_with_the_wrapper_as_cause(lambda: client.request(path="/first"))
    with gevent.Timeout(5):
        assert client.request(path="/next").body.bytes() == b"ok /next"
