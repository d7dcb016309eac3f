"""Aborting a request while its streamed body source is parked (h1 and h2).

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
