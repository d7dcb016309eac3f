"""The dump interceptor: bodies read and discarded, limits, a connection kept alive."""

from __future__ import annotations

import gevent
import pytest

from greenhttp import errors, interceptors


def test_bodies_are_discarded_and_the_connection_reused(routes, make_client, recorder):
    server = routes({
        "/ok": lambda conn, req: conn.respond(b"x" * 5000),
        "/error": lambda conn, req: conn.respond(b"an error page" * 100, status="500 Internal Server Error"),
    })
    composed = make_client(server.origin).compose(interceptors.dump())
    rec = recorder()
    composed.dispatch({"path": "/ok", "method": "GET"}, rec)
    assert rec.done.wait(5)
    assert rec.names() == ["start", "response_start", "end"]
    assert rec.status == 200 and rec.body == b""
    r = composed.request(path="/error")
    assert r.status_code == 500 and r.body.bytes() == b""
    assert composed.request(path="/ok").body.bytes() == b""
    assert server.accepted == 1  # every body was read off the socket


def test_trailers_are_discarded_with_the_body(make_server, make_client):
    # undici's 'Should dump response body up to limit and ignore trailers': the
    # handler below gets onResponseEnd({}).
    def handler(conn):
        while conn.read_request() is not None:
            conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Foo\r\n\r\n"
                      b"3\r\nabc\r\n0\r\nX-Foo: bar\r\n\r\n")

    server = make_server(handler)
    client = make_client(server.origin)
    assert client.request(path="/").trailers == {"x-foo": "bar"}  # (they do arrive)
    r = client.compose(interceptors.dump()).request(path="/")
    assert r.body.bytes() == b""
    assert r.trailers == {}


def test_a_content_length_over_the_limit_aborts_at_once(routes, make_client):
    server = routes({"/big": lambda conn, req: conn.respond(b"x" * 2000)})
    composed = make_client(server.origin).compose(interceptors.dump(max_size=1000))
    with pytest.raises(errors.RequestAbortedError, match=r"Response size \(2000\) larger than max_size \(1000\)"):
        composed.request(path="/big")
    # The per-request option wins.
    assert composed.request(path="/big", dump_max_size=2000).status_code == 200
    with pytest.raises(errors.RequestAbortedError):
        make_client(server.origin).compose(interceptors.dump()).request(path="/big", dump_max_size=10)
    with pytest.raises(errors.InvalidArgumentError, match="dump_max_size"):
        composed.request(path="/big", dump_max_size=0)


def test_a_body_of_unknown_length_over_the_limit_aborts(make_server, make_client, recorder):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(100):
            conn.send(b"400\r\n" + b"y" * 1024 + b"\r\n")
        conn.send(b"0\r\n\r\n")
        conn.wait_closed()

    server = make_server(handler)
    rec = recorder()
    make_client(server.origin).compose(interceptors.dump(max_size=10_000)).dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(5)
    assert isinstance(rec.error, errors.RequestAbortedError)
    assert rec.names() == ["start", "response_start", "error"]


def test_an_abort_after_the_head_fails_at_once_and_keeps_the_connection(make_server, make_client, recorder):
    release = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345")
        release.wait(5)
        conn.send(b"67890")
        conn.read_request()
        conn.respond(b"second")
        conn.wait_closed()

    server = make_server(handler)
    composed = make_client(server.origin).compose(interceptors.dump())

    class Aborting(recorder):
        def on_response_start(self, controller, status_code, headers, status_message):
            super().on_response_start(controller, status_code, headers, status_message)
            controller.abort(ValueError("not interested"))

    rec = Aborting()
    composed.dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(5)
    assert str(rec.error) == "not interested"
    assert rec.controller.aborted
    release.set()
    assert composed.request(path="/").status_code == 200
    assert server.accepted == 1


def test_options_are_validated_eagerly():
    for bad in (0, -1, 1.5, "1", True):
        with pytest.raises(errors.InvalidArgumentError, match="max_size"):
            interceptors.dump(max_size=bad)
