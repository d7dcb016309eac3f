"""examples/gunicorn_app.py under a real ``gunicorn -k gevent`` with two workers.

The upstream is a scripted server in this process (tests/testkit.py) that
answers ``answer for <target>`` and remembers, for each connection, the
worker pid its first request carried (the app sends ``x-worker-pid``). That
is how the tests see what each worker's shared ``greenhttp.Agent`` did.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
import pytest
from gevent import subprocess

import greenhttp
from testkit import ScriptedServer, ServerConn, die_with_parent, wait_for

# gevent.subprocess polls its child with sub-millisecond sleeps, which gevent's
# libuv loop warns about (on libev nothing is said); that warning is gevent's own.
pytestmark = pytest.mark.filterwarnings("ignore:libuv only supports millisecond timer resolution")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WORKERS = 2
PER_WORKER = 4  # UPSTREAM_CONNECTIONS: the Agent's connection limit per origin


@dataclass
class Gunicorn:
    proc: Any
    origin: str
    upstream: ScriptedServer
    worker_of: dict[ServerConn, str]  # upstream connection -> the worker pid of its first request
    foreign: list[str]  # requests that came on a connection another worker opened
    log_path: Path
    pids: set[int]  # the workers, as they answered the readiness probes

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM: gunicorn's graceful shutdown; SIGKILL if it is stuck."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def log(self) -> str:
        return self.log_path.read_text()


def _start(upstream: ScriptedServer, log_path: Path) -> Any:
    """gunicorn on 127.0.0.1:0 (it logs the port it got), logging to ``log_path``."""
    env = {
        **os.environ,
        "UPSTREAM_URL": upstream.origin,
        "UPSTREAM_CONNECTIONS": str(PER_WORKER),
        "PYTHONWARNINGS": "error",
    }
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "gunicorn",
                "-k", "gevent",
                "-w", str(WORKERS),
                "-c", "python:gunicorn_app",
                "--bind", "127.0.0.1:0",
                "--graceful-timeout", "10",
                "gunicorn_app:application",
            ],
            cwd=EXAMPLES, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            preexec_fn=die_with_parent,
        )
    return proc


def _origin_from_log(proc: Any, log_path: Path, timeout: float = 30.0) -> str:
    with gevent.Timeout(timeout, AssertionError("gunicorn did not log its address")):
        while True:
            found = re.search(r"Listening at: (http://127\.0\.0\.1:\d+)", log_path.read_text())
            if found:
                return found.group(1)
            if proc.poll() is not None:
                pytest.fail(f"gunicorn exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            gevent.sleep(0.02)


def _wait_for_workers(origin: str, proc: Any, log_path: Path, timeout: float = 30.0) -> set[int]:
    """Probe on fresh connections until every worker has answered once (bounded)."""
    pids: set[int] = set()
    with greenhttp.Client(origin) as probe:
        with gevent.Timeout(timeout, AssertionError("not every gunicorn worker answered")):
            while len(pids) < WORKERS:
                if proc.poll() is not None:
                    pytest.fail(f"gunicorn exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
                try:
                    with probe.request(path="/ready", reset=True, headers_timeout=2.0) as r:
                        if r.status_code == 200:
                            pids.add(r.body.json()["worker"])
                except (greenhttp.errors.GreenHTTPError, OSError):
                    gevent.sleep(0.02)
    return pids


@pytest.fixture
def gunicorn(make_server, tmp_path):
    worker_of: dict[ServerConn, str] = {}
    foreign: list[str] = []

    def upstream_handler(conn: ServerConn) -> None:
        while True:
            req = conn.read_request()
            if req is None:
                return
            pid = req.header("x-worker-pid") or "?"
            if worker_of.setdefault(conn, pid) != pid:
                foreign.append(f"{req.target} from {pid} on a connection of {worker_of[conn]}")
            gevent.sleep(0.005)  # some work, so that requests overlap and the Agents fill up
            conn.respond(f"answer for {req.target}".encode())

    upstream = make_server(upstream_handler)
    log_path = tmp_path / "gunicorn.log"
    proc = _start(upstream, log_path)
    g = Gunicorn(proc, "", upstream, worker_of, foreign, log_path, set())
    try:
        g.origin = _origin_from_log(proc, log_path)
        g.pids = _wait_for_workers(g.origin, proc, log_path)
        yield g
    finally:
        g.stop()


def _fan_out(origin: str, n: int) -> list[tuple[int, dict[str, Any]]]:
    """``n`` concurrent GET /item/<i> to gunicorn through one greenhttp Pool."""
    with greenhttp.Pool(origin, connections=100) as pool:

        def one(i: int) -> tuple[int, dict[str, Any]]:
            with pool.request(path=f"/item/{i}") as r:
                return r.status_code, r.body.json()

        jobs = [gevent.spawn(one, i) for i in range(n)]
        gevent.joinall(jobs, timeout=40, raise_error=True)
        assert all(job.successful() for job in jobs)
        return [job.value for job in jobs]


def test_concurrent_requests_share_one_agent_per_worker(gunicorn):
    n = 400
    results = _fan_out(gunicorn.origin, n)

    for i, (status, payload) in enumerate(results):
        assert status == 200, payload
        assert payload["upstream_status"] == 200
        assert payload["upstream"] == f"answer for /item/{i}"
        assert payload["worker"] in gunicorn.pids
    assert gunicorn.upstream.errors == []
    # every request reached the upstream: the 400 and the readiness probes
    items = [r.target for r in gunicorn.upstream.requests if r.target.startswith("/item/")]
    assert sorted(items) == sorted(f"/item/{i}" for i in range(n))

    # Connection reuse through the shared Agent: at most PER_WORKER upstream
    # connections per worker process, for hundreds of upstream requests...
    per_worker = Counter(gunicorn.worker_of.values())
    assert set(per_worker) == {str(pid) for pid in gunicorn.pids}, per_worker
    assert all(1 <= count <= PER_WORKER for count in per_worker.values()), per_worker
    assert gunicorn.upstream.accepted == sum(per_worker.values()) <= WORKERS * PER_WORKER
    # ... and they are kept alive between requests, not closed after each one.
    assert not any(conn.eof.is_set() for conn in gunicorn.upstream.conns)
    # A connection belongs to the process that opened it: no worker ever sent a
    # request on a connection another worker opened.
    assert gunicorn.foreign == []


def test_worker_exit_closes_the_agent(gunicorn):
    results = _fan_out(gunicorn.origin, 200)
    assert [status for status, _ in results] == [200] * 200
    conns = list(gunicorn.upstream.conns)
    assert conns and not any(conn.eof.is_set() for conn in conns)  # idle, kept alive

    assert gunicorn.stop() == 0  # graceful: each worker runs worker_exit, then exits

    wait_for(lambda: all(conn.eof.is_set() for conn in conns), timeout=10, what="upstream connections closed")
    # The hook closed each worker's Agent, and that Agent saw every one of its
    # connections close (a "disconnect" event per "connect"), before the process ended.
    log = gunicorn.log()
    closed = {
        m.group(1): (int(m.group(2)), int(m.group(3)))
        for m in re.finditer(r"greenhttp Agent closed \(pid (\d+)\): (\d+) upstream connections opened, (\d+) closed", log)
    }
    per_worker = Counter(gunicorn.worker_of.values())
    assert closed == {pid: (count, count) for pid, count in per_worker.items()}, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
