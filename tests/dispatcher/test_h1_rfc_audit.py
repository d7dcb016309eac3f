"""An adversarial audit of HTTP/1.1 on the wire (RFC 9110 / RFC 9112), against
exact-bytes in-process servers: framing, connection reuse, pipelining failures,
request serialisation and the timeouts."""

from __future__ import annotations

import gevent
import gevent.event
import pytest

T = 5.0  # the bound of every wait


def get(client, path="/", **kw):
    return client.request(path=path, **kw).body.bytes()


def spawn_gets(client, paths, **kw):
    jobs = [gevent.spawn(get, client, p, blocking=False, **kw) for p in paths]
    return jobs


# ---------------------------------------------------------------------------
# connection reuse: Connection: close and HTTP/1.0 with pipelined requests behind
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "closing_head",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n",
    ],
    ids=["connection-close", "http10"],
)
def test_pipelined_requests_behind_a_closing_response_are_resent(make_server, make_client, closing_head):
    """RFC 9112 §9.6/§9.3.2, REFERENCE §3.5/3.6: a response that closes the
    connection ends it after that response (an informational "reset"); the
    requests pipelined behind it are unanswered and go again on a new
    connection, none fails."""

    def handler(conn):
        if len(conn.server.conns) == 1:
            first = conn.read_request()
            while len(conn.server.requests) < 3:
                if conn.read_request() is None:
                    return
            conn.send(closing_head + b"/" + first.target[-1:].encode())
            conn.close()
            return
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin, pipelining=3)
    jobs = spawn_gets(client, ["/1", "/2", "/3"])
    gevent.joinall(jobs, timeout=T, raise_error=True)
    assert [j.value for j in jobs] == [b"/1", b"/2", b"/3"]
    assert server.accepted == 2


def test_bytes_after_a_closing_response_are_never_read_as_the_next_response(make_server, make_client):
    """RFC 9112 §9.6: after the response with "close" the client stops reading;
    what follows on that connection is not an answer to the next request."""

    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_request()
            conn.read_request()
            conn.send(
                b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n/1"
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nWRONG"
            )
            conn.wait_closed()
            return
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin, pipelining=2)
    jobs = spawn_gets(client, ["/1", "/2"])
    gevent.joinall(jobs, timeout=T, raise_error=True)
    assert [j.value for j in jobs] == [b"/1", b"/2"]


# ---------------------------------------------------------------------------
# a response that arrives before the request body is fully sent
# ---------------------------------------------------------------------------


def test_a_response_complete_while_the_body_is_still_written_ends_the_connection(make_server, make_client):
    """REFERENCE §3.5: a response that completes while the request body is still
    being written destroys the socket (informational "reset"): the request gets
    its response, the rest of the body is not sent, the next request gets a new
    connection."""
    sent = []
    proceed = gevent.event.Event()

    def body():
        for i in range(50):
            if i == 1:
                proceed.wait(T)
            sent.append(i)
            yield b"x" * 10

    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_head()
            conn.send(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 4\r\n\r\nfull")
            conn.wait_closed()
            return
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin)
    r = client.request(path="/up", method="POST", body=body())
    assert r.status_code == 413
    assert r.body.bytes() == b"full"
    proceed.set()
    # Closed at once (not after keep_alive_timeout, 4 s): a body cut short must
    # never be followed by another request on the same connection.
    assert server.conns[0].eof.wait(1.0)
    assert len(sent) < 50
    assert get(client, "/next") == b"/next"
    assert server.accepted == 2


def test_the_next_request_never_follows_a_body_cut_short_by_an_early_response(make_server, make_client):
    """A keep-alive server that answers early and goes on reading must never see
    the next request's bytes inside the unfinished chunked body."""
    proceed = gevent.event.Event()
    raw = []

    def body():
        yield b"first"
        proceed.wait(T)
        yield b"second"

    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_head()
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly")
            conn.wait_closed()
            raw.append(conn.buf)
            return
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin)
    assert client.request(path="/up", method="POST", body=body()).body.bytes() == b"early"
    job = gevent.spawn(get, client, "/next")
    proceed.set()
    assert job.get(timeout=T) == b"/next"
    with gevent.Timeout(T):
        server.conns[0].eof.wait()
    assert b"/next" not in raw[0]
