"""A reused keep-alive connection the server closes before answering (RFC 9112
§9.3.1, the "keep-alive race"): an idempotent request with a body that can go
out again is re-sent once on a new connection; anything else fails."""

from __future__ import annotations

import socket
import struct

import gevent
import pytest

import greenhttp
from greenhttp import errors
from testkit import serve_forever

T = 5.0  # the bound of every wait


def get(client, path="/", **kw):
    return client.request(path=path, **kw).body.bytes()


def answers_first_only(how="close"):
    """A handler answering the first request of each connection; on the second
    one it ends the connection without a byte of answer: with a FIN (``close``),
    a reset (``reset``), or half a head (``partial``)."""

    def handler(conn):
        req = conn.read_request()
        if req is None:
            return
        conn.respond(req.target.encode())
        if how == "fin-at-once":
            conn.close()  # the FIN follows the response at once: the request meets a closed socket
            return
        req = conn.read_request()
        if req is None:
            return
        if how == "reset":
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.sock.close()
        elif how == "partial":
            conn.send(b"HTTP/1.1 200 OK\r\n")
            conn.close()
        else:
            conn.close()

    return handler


@pytest.mark.parametrize("how", ["close", "reset", "fin-at-once"])
def test_an_idempotent_request_is_re_sent_when_a_reused_connection_closes_unanswered(make_server, make_client, how):
    server = make_server(answers_first_only(how))
    client = make_client(server.origin)
    with gevent.Timeout(T):
        for i in range(4):
            assert get(client, f"/{i}") == f"/{i}".encode()
    # One connection per request: each second request went out again on a new one.
    assert server.accepted == 4
    targets = [r.target for r in server.requests]
    assert targets.count("/1") == (1 if how == "fin-at-once" else 2)


@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_idempotent_true_makes_a_request_with_a_bytes_body_re_sendable(make_server, make_client, method):
    """Only GET and HEAD are idempotent by default, as the option has it."""
    server = make_server(answers_first_only())
    client = make_client(server.origin)
    with gevent.Timeout(T):
        assert get(client, "/a") == b"/a"
        with pytest.raises(errors.SocketError, match="other side closed"):
            client.request(path="/b", method=method, body=b"x")
        assert server.accepted == 1  # not sent again
        assert get(client, "/c") == b"/c"
        assert client.request(path="/d", method=method, body=b"payload", idempotent=True).body.bytes() == b"/d"
    assert [(r.method, r.target, r.body) for r in server.requests][-2:] == [(method, "/d", b"payload")] * 2


def test_a_streamed_body_is_not_re_sent(make_server, make_client):
    server = make_server(answers_first_only())
    client = make_client(server.origin)
    with gevent.Timeout(T):
        assert get(client, "/a") == b"/a"
        with pytest.raises(errors.SocketError, match="other side closed"):
            client.request(path="/b", method="PUT", body=iter([b"chunk"]))
    assert server.accepted == 1


def test_a_response_begun_is_not_re_sent(make_server, make_client):
    server = make_server(answers_first_only("partial"))
    client = make_client(server.origin)
    with gevent.Timeout(T):
        assert get(client, "/a") == b"/a"
        with pytest.raises(errors.SocketError, match="other side closed"):
            get(client, "/b")
    assert server.accepted == 1


def test_the_first_request_of_a_connection_is_not_re_sent(make_server, make_client):
    """A server that closes a fresh connection unanswered is refusing the
    request, not racing its keep-alive timeout: no second try."""

    def handler(conn):
        if conn.read_request() is not None:
            conn.close()

    server = make_server(handler)
    client = make_client(server.origin)
    with gevent.Timeout(T):
        with pytest.raises(errors.SocketError, match="other side closed"):
            get(client, "/a")
    assert server.accepted == 1


def test_a_request_pipelined_behind_another_is_not_the_race(make_server, make_client):
    """Written before the answer ahead of it, the head was not sent into an idle
    connection: it fails (REFERENCE §3.6), the one behind it is re-sent."""

    def handler(conn):
        if len(conn.server.conns) == 1:
            for _ in range(3):
                conn.read_request()
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n/0")
            conn.close()
            return
        serve_forever()(conn)

    server = make_server(handler)
    client = make_client(server.origin, pipelining=3)
    with gevent.Timeout(T):
        jobs = [gevent.spawn(get, client, f"/{i}", blocking=False) for i in range(3)]
        gevent.joinall(jobs)
    assert jobs[0].value == b"/0"
    assert isinstance(jobs[1].exception, errors.SocketError)
    assert jobs[2].value == b"hello"
    assert [r.target for r in server.requests].count("/1") == 1


def test_the_disconnect_event_still_reports_the_close(make_server, make_client):
    server = make_server(answers_first_only())
    client = make_client(server.origin)
    seen = []
    client.on("disconnect", lambda origin, targets, err: seen.append(err))
    with gevent.Timeout(T):
        assert get(client, "/a") == b"/a"
        assert get(client, "/b") == b"/b"
    assert isinstance(seen[0], errors.SocketError)
    assert not isinstance(seen[0], greenhttp.errors.InformationalError)
