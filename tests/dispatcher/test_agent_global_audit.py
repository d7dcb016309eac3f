"""Agent, Pool and the global dispatcher: behaviours pinned by an audit (not tested elsewhere)."""

from __future__ import annotations

import subprocess
import sys

import gevent
import gevent.event
import pytest

import greenhttp
from greenhttp import errors
from testkit import serve_forever, wait_for

pytestmark = pytest.mark.usefixtures("fresh_global")  # (tests/conftest.py)


class Gated:
    """Answers each request with its target, once ``gate`` is set."""

    def __init__(self) -> None:
        self.gate = gevent.event.Event()
        self.seen: list[str] = []

    def __call__(self, conn) -> None:
        while True:
            req = conn.read_request()
            if req is None:
                return
            self.seen.append(req.target)
            self.gate.wait(5)
            conn.respond(req.target.encode())


def test_module_functions_use_the_global_dispatcher_of_the_moment(make_server):
    server = make_server(serve_forever(b"ok"))
    first, second = greenhttp.Agent(), greenhttp.Agent()
    try:
        with gevent.Timeout(5):
            greenhttp.set_global_dispatcher(first)
            assert greenhttp.request(server.origin + "/1").body.bytes() == b"ok"
            greenhttp.set_global_dispatcher(second)
            chunks: list[bytes] = []
            sink = type("Sink", (), {"write": lambda self, b: chunks.append(b)})()
            greenhttp.stream(server.origin + "/2", lambda data: sink)
            assert chunks == [b"ok"]
            # The one replaced is left as it was: open, its connection kept.
            assert not first.closed and first.stats[server.origin].connected == 1
            assert second.stats[server.origin].connected == 1
            # dispatcher= wins over the global one, for this call only.
            assert greenhttp.request(server.origin + "/3", dispatcher=first).body.bytes() == b"ok"
            assert greenhttp.get_global_dispatcher() is second
        assert server.accepted == 2
    finally:
        with gevent.Timeout(5):
            first.destroy()
            second.destroy()


def test_agent_close_in_progress_refuses_new_requests_and_lets_queued_ones_finish(make_server):
    gated = Gated()
    busy = make_server(gated)
    idle = make_server(serve_forever(b"idle"))
    agent = greenhttp.Agent(connections=1)  # a Client per origin: the second request queues in it
    with gevent.Timeout(5):
        assert agent.request(origin=idle.origin, path="/").body.bytes() == b"idle"
        running = [gevent.spawn(lambda p=p: agent.request(origin=busy.origin, path=p).body.bytes()) for p in ("/a", "/b")]
        wait_for(lambda: gated.seen == ["/a"] and agent.stats[busy.origin].size == 2, what="one running, one queued")
        results: list[tuple] = []
        agent.close(callback=lambda err, value: results.append((err, value)))  # returns at once
        wait_for(lambda: agent.closed, what="the close to start")
        assert not agent.destroyed and results == []
        with pytest.raises(errors.ClientClosedError):
            agent.request(origin=idle.origin, path="/late")
        with pytest.raises(errors.ClientClosedError):
            agent.request(origin="http://127.0.0.1:9", path="/new-origin")
        gated.gate.set()
        assert [g.get() for g in running] == [b"/a", b"/b"]
        wait_for(lambda: results, what="the close callback")
        assert results == [(None, None)] and agent.destroyed and agent.stats == {}
        assert idle.conns[0].eof.wait(5) and busy.conns[0].eof.wait(5)
        with pytest.raises(errors.ClientDestroyedError):
            agent.request(origin=idle.origin, path="/after")
    assert len(results) == 1


def test_pool_counters_through_one_busy_period(make_server):
    gated = Gated()
    server = make_server(gated)
    pool = greenhttp.Pool(server.origin, connections=2)
    drains: list[str] = []
    pool.on("drain", lambda origin, targets: drains.append(origin))
    try:
        with gevent.Timeout(5):
            assert pool.stats == greenhttp.PoolStats(0, 0, 0, 0, 0, 0)
            gs = [gevent.spawn(lambda p=p: pool.request(path=p).body.bytes()) for p in ("/1", "/2", "/3", "/4")]
            wait_for(lambda: len(gated.seen) == 2 and pool.stats.queued == 2, what="two running, two queued")
            # connected, free, pending (queue + clients'), queued, running, size
            assert pool.stats == greenhttp.PoolStats(2, 0, 2, 2, 2, 4) and pool.busy
            assert server.accepted == 2
            gated.gate.set()
            assert [g.get() for g in gs] == [b"/1", b"/2", b"/3", b"/4"]
            wait_for(lambda: pool.stats.free == 2, what="both clients free")
            assert pool.stats == greenhttp.PoolStats(2, 2, 0, 0, 0, 0) and not pool.busy
            assert drains == [server.origin]  # once for the whole busy period
            assert server.accepted == 2
    finally:
        with gevent.Timeout(5):
            pool.destroy()


_FORK_SCRIPT = """
import os, sys
import gevent, greenhttp

origin = sys.argv[1]
assert greenhttp.request(origin + "/parent").body.text() == "/parent"
children = []
for k in range(2):
    pid = gevent.fork()
    if pid == 0:
        status = 0
        try:
            with gevent.Timeout(10):
                for i in range(30):
                    if greenhttp.request(f"{origin}/k{k}_{i}").body.text() != f"/k{k}_{i}":
                        status = 3  # another process's answer
        except BaseException:
            status = 4
        os._exit(status)
    children.append(pid)
statuses = [os.waitpid(pid, 0)[1] for pid in children]
assert statuses == [0, 0], statuses
assert greenhttp.request(origin + "/again").body.text() == "/again"
print("OK")
"""


def test_a_forked_child_makes_its_own_global_dispatcher_and_leaves_the_parents_connection(make_server):
    # docs/dispatchers.md: the global dispatcher is per process. A child inheriting the
    # parent's default Agent (gunicorn --preload after a request in the master) used its
    # connection too, and two children got each other's answers. The child lets the
    # inherited one go without a byte sent: the parent's connection stays usable.
    def echo(conn):
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond(req.target.encode())

    server = make_server(echo)
    proc = subprocess.Popen(
        [sys.executable, "-c", _FORK_SCRIPT, server.origin],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with gevent.Timeout(60):  # the server lives in this process: let it run meanwhile
            while proc.poll() is None:
                gevent.sleep(0.01)
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0 and out.strip() == "OK", err
    assert server.accepted == 3  # the parent's connection, reused for /again, and one per child
