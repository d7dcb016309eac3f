"""``Client`` and ``Pool`` are Python shells over compiled cores (docs/performance.md,
"Compiled modules"): a core refers to its shell weakly, so a dropped shell is freed at
once, and what its core still has open ends on its own."""

from __future__ import annotations

import weakref

import gevent

import greenhttp
from testkit import serve_forever, wait_for


def test_a_dropped_client_is_freed_while_its_connection_ends_on_its_own(make_server):
    server = make_server(serve_forever(b"ok"))
    client = greenhttp.Client(server.origin, keep_alive_timeout=0.2)
    seen = []
    client.on("disconnect", lambda *args: seen.append(args))  # nobody is left to tell
    assert client.request(path="/").body.text() == "ok"
    core = client._core
    conn = core._conn
    assert conn is not None and not conn.destroyed
    ref = weakref.ref(client)
    del client
    assert ref() is None  # by reference counting, with the connection still open
    assert server.conns[0].eof.wait(5), "the idle connection was never closed"
    wait_for(lambda: conn.destroyed and core._conn is None and not core._readers, what="the reader's end")
    assert seen == []


def _get_text(dispatcher: greenhttp.Dispatcher) -> str:
    return dispatcher.request(path="/").body.text()


def test_a_dropped_pool_is_freed_and_its_core_still_closes_its_members(make_server):
    server = make_server(serve_forever(b"ok"))
    pool = greenhttp.Pool(server.origin, connections=2)
    jobs = [gevent.spawn(_get_text, pool) for _ in range(4)]
    gevent.joinall(jobs, timeout=5, raise_error=True)
    assert [job.value for job in jobs] == ["ok"] * 4
    core = pool._core
    members = [m.client for m in core._members]
    assert len(members) == 2 and all(c.connected for c in members)
    ref = weakref.ref(pool)
    del pool, jobs
    assert ref() is None
    with gevent.Timeout(5):
        core.close()
    assert core._destroyed and all(c.destroyed for c in members)
    assert server.accepted == 2
