"""A streamed body source parked (waiting for data) when its request ends (h1 and h2):
by an abort, or by a response that comes before the whole body went.

The source is a generator running in the greenlet that reads it: closing it from
the aborting greenlet could only fail, and CPython 3.11 can crash in
``gen_close`` (it reads the running frame's stack when the parked call's
adaptive counter happens to look like a ``yield from``). The connection ends the
reader instead, which ends the generator, and its ``finally`` runs.
"""

from __future__ import annotations

import gevent
import gevent.event
import pytest

from greenhttp import AbortController
from h2_support.h2server import serve_ok

pytest_plugins = ["h2_support.fixtures"]

# Enough rounds to walk the parked call's adaptive counter through the values at
# which CPython 3.11 crashed (about 130 calls in, on backoff 7).
ROUNDS = 300


@pytest.mark.parametrize("protocol", ["h1", "h2"])
def test_abort_while_the_body_source_is_parked(make_server, make_client, make_h2_server, make_h2c, protocol):
    if protocol == "h2":
        client = make_h2c(make_h2_server(serve_ok).origin)
    else:
        client = make_client(make_server(lambda conn: conn.read_head() and conn.wait_closed()).origin)
    parked = gevent.event.Event()
    never = gevent.event.Event()
    ended = gevent.event.Event()

    def source():
        try:
            yield b"first"
            parked.set()
            never.wait()  # the source never produces more
            yield b"unreachable"
        finally:
            ended.set()

    for i in range(ROUNDS):
        parked.clear()
        ended.clear()
        ac = AbortController()
        g = gevent.spawn(client.request, path=f"/{i}", method="POST", body=source(), signal=ac.signal)
        assert parked.wait(5)
        reason = ValueError(f"stop {i}")
        ac.abort(reason)
        with pytest.raises(ValueError) as info:
            g.get(timeout=5)
        assert info.value is reason
        # The generator ended with the request, not with the connection.
        assert ended.wait(5)


def _answer_at_once_h1(conn):
    while conn.read_head():
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


def _answer_at_once_h2(conn):
    while (req := conn.opened.get()) is not None:
        conn.respond(req.stream_id, body=b"ok")


@pytest.mark.parametrize("protocol", ["h1", "h2"])
def test_a_response_before_the_body_ends_its_parked_source(
    make_server, make_client, make_h2_server, make_h2c, protocol
):
    """The server answers while the body source waits for data: the rest of the body
    is never sent, and the source ends now, not when the connection does."""
    # A long keep-alive: an idle connection's close must not be what ends the source.
    if protocol == "h2":
        client = make_h2c(make_h2_server(_answer_at_once_h2).origin, keep_alive_timeout=60)
    else:
        client = make_client(make_server(_answer_at_once_h1).origin, keep_alive_timeout=60)
    never = gevent.event.Event()
    ended = gevent.event.Event()

    def source():
        try:
            yield b"first"
            never.wait()  # the source never produces more
            yield b"unreachable"
        finally:
            ended.set()

    with gevent.Timeout(5):
        r = client.request(path="/", method="POST", body=source())
        assert (r.status_code, r.body.text()) == (200, "ok")
    assert ended.wait(5)
    with gevent.Timeout(5):
        assert client.request(path="/next").body.text() == "ok"
