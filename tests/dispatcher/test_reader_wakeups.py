"""A connection's reader that parks on its socket's readiness and is woken with
nothing to read (a spurious readiness, see select(2) BUGS) waits again: the
connection stays up."""

from __future__ import annotations

import pytest

from testkit import serve_forever, wait_for


def test_a_reader_woken_with_nothing_to_read_waits_again(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    assert client.request(path="/", method="GET").body.bytes() == b"hello"
    conn = client._core._conn
    watcher = conn.transport.read_watcher
    assert watcher is not None and watcher.active  # the idle reader is parked on it
    if not hasattr(watcher, "feed"):
        pytest.skip("only libev's watchers can be fed a readiness that did not happen")
    watcher.feed(1, watcher.callback)  # "readable", though nothing came
    assert watcher.pending
    wait_for(lambda: not watcher.pending, what="the hub to wake the reader")
    assert client._core._conn is conn and not conn.destroyed
    assert watcher.active  # parked again
    assert client.request(path="/again", method="GET").body.bytes() == b"hello"
    assert server.accepted == 1  # on the same connection
