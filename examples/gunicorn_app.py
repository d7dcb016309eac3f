"""greenhttp inside gunicorn's gevent workers: ONE shared Agent per worker process.

The WSGI application below answers every request by calling an upstream HTTP
service. All its requests, from every greenlet the worker runs, go through a
single ``greenhttp.Agent``, so the upstream sees a few keep-alive connections
per worker instead of one connection per request.

Where the Agent is created matters. gunicorn imports the application in the
master process (always with ``--preload``, and here too, because this module is
also the gunicorn config) and then forks the workers. An Agent used before the
fork would be copied into every worker together with its open sockets (two
processes reading one connection get each other's responses) and with reader
greenlets and timers that belong to the master's gevent hub. So it is created
*lazily*, by the first request a worker serves, i.e. after the fork, after the
gevent worker has patched the standard library and re-initialised its hub
(gunicorn's ``post_worker_init`` hook would be an equally good place). It is
closed by gunicorn's ``worker_exit`` hook, which runs in the worker after it has
stopped serving: ``close()`` lets upstream requests still running finish, then
closes the idle connections, instead of leaving them to be cut when the
process dies.

Serve it with gunicorn (this module doubles as its config file: gunicorn reads
the module-level names that are settings, here ``worker_exit`` and
``control_socket_disable``, and ignores the rest)::

    cd examples
    UPSTREAM_URL=http://127.0.0.1:9000 gunicorn -k gevent -w 2 \\
        -c python:gunicorn_app gunicorn_app:application

Run on its own, ``python examples/gunicorn_app.py`` is a self-contained demo:
it starts a small upstream server (gevent, loopback), a real ``gunicorn -k
gevent`` serving this application on a free port of 127.0.0.1, sends a few
hundred concurrent requests to gunicorn through greenhttp, prints what
happened, stops gunicorn and checks that every worker closed its Agent.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gevent
from gevent import subprocess
from gevent.server import StreamServer

import greenhttp

# ----------------------------------------------------------------------------------------
# 1. The application: this part runs inside each gunicorn worker.
# ----------------------------------------------------------------------------------------

UPSTREAM_URL = os.environ.get("UPSTREAM_URL", "http://127.0.0.1:9000")
UPSTREAM_CONNECTIONS = int(os.environ.get("UPSTREAM_CONNECTIONS", "8"))

_agent: greenhttp.Agent | None = None
_agent_pid: int | None = None  # the process that made _agent
_counts = {"opened": 0, "closed": 0}  # upstream connections of this worker's Agent


def upstream_agent() -> greenhttp.Agent:
    """This worker's shared Agent, made by the first request that needs it.

    No lock is needed: ``Agent()`` does not block, so no other greenlet can run
    between the check and the assignment. The pid check makes sure a process
    never uses an Agent made by its parent before a fork.
    """
    global _agent, _agent_pid
    if _agent is None or _agent_pid != os.getpid():
        _agent = greenhttp.Agent(
            connections=UPSTREAM_CONNECTIONS,  # per upstream origin, for the whole worker
            connect_timeout=5.0,
            headers_timeout=10.0,
            body_timeout=10.0,
            keep_alive_timeout=30.0,  # keep idle upstream connections for 30 s (default: 4 s)
        )
        _agent_pid = os.getpid()
        _agent.on("connect", lambda origin, targets: _count("opened"))
        _agent.on("disconnect", lambda origin, targets, err: _count("closed"))
    return _agent


def _count(what: str) -> None:
    _counts[what] += 1


def application(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """Ask the upstream about PATH_INFO and answer with what it said, as JSON."""
    pid = os.getpid()
    try:
        # Blocks this greenlet only; the worker serves other requests meanwhile.
        with upstream_agent().request(
            origin=UPSTREAM_URL,
            path=environ.get("PATH_INFO") or "/",
            headers={"x-worker-pid": str(pid)},  # only so that the demo can count per worker
        ) as r:
            answer = r.body.text()
            upstream_status = r.status_code
    except (greenhttp.errors.GreenHTTPError, OSError) as exc:
        start_response("502 Bad Gateway", [("content-type", "text/plain")])
        return [f"upstream failed: {exc!r}".encode()]
    body = json.dumps({"worker": pid, "upstream_status": upstream_status, "upstream": answer}).encode()
    start_response("200 OK", [("content-type", "application/json"), ("content-length", str(len(body)))])
    return [body]


def close_upstream_agent() -> bool:
    """Close this process's Agent, if it made one; True if there was one to close."""
    if _agent is None or _agent_pid != os.getpid():
        return False
    with gevent.Timeout(10, False):
        _agent.close()  # lets running upstream requests finish, then closes every connection
    if not _agent.destroyed:
        _agent.destroy()  # still busy after 10 s: abort what is left
    return True


# -- gunicorn settings read from this module (``-c python:gunicorn_app``) --------------------


def worker_exit(server: Any, worker: Any) -> None:
    """gunicorn hook: runs in the worker process once it has stopped serving."""
    if close_upstream_agent():
        worker.log.info(
            "greenhttp Agent closed (pid %d): %d upstream connections opened, %d closed",
            os.getpid(), _counts["opened"], _counts["closed"],
        )


control_socket_disable = True  # newer gunicorn opens a control socket under ~/.gunicorn otherwise


# ----------------------------------------------------------------------------------------
# 2. The demo: `python examples/gunicorn_app.py` (none of this runs inside gunicorn).
# ----------------------------------------------------------------------------------------

HERE = Path(__file__).resolve().parent
WORKERS = 2
REQUESTS = 300
CLIENT_CONNECTIONS = 50  # connections from this script to gunicorn


class Upstream:
    """A small keep-alive HTTP/1.1 server on 127.0.0.1; counts its connections per worker."""

    def __init__(self) -> None:
        self.accepted = 0
        self.open = 0
        self.requests = 0
        self.per_worker: Counter[str] = Counter()  # connections by the x-worker-pid they came from
        self._server = StreamServer(("127.0.0.1", 0), self._handle)
        self._server.start()
        self.origin = f"http://127.0.0.1:{self._server.server_port}"

    def _handle(self, sock: Any, _addr: Any) -> None:
        self.accepted += 1
        self.open += 1
        worker = None
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = sock.recv(65536)
                    if not data:
                        return  # the client closed the connection
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)  # GET requests: no body
                lines = head.decode("latin-1").split("\r\n")
                target = lines[0].split(" ")[1]
                if worker is None:
                    worker = next((ln.split(":", 1)[1].strip() for ln in lines[1:]
                                   if ln.lower().startswith("x-worker-pid:")), "?")
                    self.per_worker[worker] += 1
                self.requests += 1
                gevent.sleep(0.005)  # pretend to work, so that requests overlap
                body = f"answer for {target}".encode()
                sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        except OSError:
            return
        finally:
            self.open -= 1
            sock.close()

    def stop(self) -> None:
        self._server.stop(timeout=1)


def start_gunicorn(upstream: Upstream, log_path: Path) -> tuple[Any, str]:
    """Start ``gunicorn -k gevent`` serving this module; returns (process, its origin)."""
    env = {**os.environ, "UPSTREAM_URL": upstream.origin, "UPSTREAM_CONNECTIONS": str(UPSTREAM_CONNECTIONS)}
    with open(log_path, "ab") as log:  # gunicorn keeps its own copy of the file
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "gunicorn",
                "-k", "gevent",
                "-w", str(WORKERS),
                "-c", "python:gunicorn_app",
                "--bind", "127.0.0.1:0",  # a free port, chosen when gunicorn binds
                "--graceful-timeout", "10",
                "gunicorn_app:application",
            ],
            cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        )
    # gunicorn logs the address it bound: "Listening at: http://127.0.0.1:PORT (pid)".
    deadline = time.monotonic() + 30
    while True:
        found = re.search(r"Listening at: (http://127\.0\.0\.1:\d+)", log_path.read_text())
        if found:
            return proc, found.group(1)
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_gunicorn(proc)
            raise RuntimeError("gunicorn did not start:\n" + log_path.read_text()[-3000:])
        gevent.sleep(0.02)


def wait_until_serving(pool: greenhttp.Pool, proc: Any, timeout: float = 30.0) -> None:
    """Probe until every worker has answered (bounded).

    Each probe asks for a new connection (``reset=True`` closes it after the
    response), which whichever worker is free accepts.
    """
    deadline = time.monotonic() + timeout
    seen: set[int] = set()
    while len(seen) < WORKERS:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited with status {proc.returncode}")
        try:
            with pool.request(path="/ready", reset=True, headers_timeout=2.0) as r:
                if r.status_code == 200:
                    seen.add(r.body.json()["worker"])
        except (greenhttp.errors.GreenHTTPError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(seen)} of {WORKERS} gunicorn workers answered in time")
        gevent.sleep(0.01)


def stop_gunicorn(proc: Any) -> int:
    """SIGTERM (a graceful shutdown: workers finish, run worker_exit, exit); kill if stuck."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return proc.returncode


def wait_for(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        gevent.sleep(0.01)
    return True


def main() -> int:
    upstream = Upstream()
    workdir = tempfile.TemporaryDirectory()
    log_path = Path(workdir.name) / "gunicorn.log"
    proc = None
    problems: list[str] = []
    try:
        proc, origin = start_gunicorn(upstream, log_path)
        with greenhttp.Pool(origin, connections=CLIENT_CONNECTIONS) as pool:
            wait_until_serving(pool, proc)

            def one(i: int) -> tuple[int, dict[str, Any]]:
                with pool.request(path=f"/item/{i}") as r:
                    return r.status_code, r.body.json()

            started = time.perf_counter()
            jobs = [gevent.spawn(one, i) for i in range(REQUESTS)]
            gevent.joinall(jobs, timeout=60, raise_error=True)
            elapsed = time.perf_counter() - started

        statuses = Counter(job.value[0] for job in jobs)
        served_by = Counter(job.value[1]["worker"] for job in jobs)
        wrong = [i for i, job in enumerate(jobs) if job.value[1].get("upstream") != f"answer for /item/{i}"]
        open_before_stop = upstream.open
        print(f"gunicorn -k gevent at {origin}: {WORKERS} workers, "
              f"each with one greenhttp.Agent(connections={UPSTREAM_CONNECTIONS})")
        print(f"{REQUESTS} requests from {REQUESTS} greenlets in {elapsed:.2f} s, status counts {dict(statuses)}")
        print("requests served by worker pid:", dict(served_by))
        print(f"upstream: {upstream.requests} requests over {upstream.accepted} connections, "
              f"connections by worker pid: {dict(upstream.per_worker)}")
        if wrong or set(statuses) != {200}:
            problems.append(f"{len(wrong)} wrong answers, statuses {dict(statuses)}")
        if any(n > UPSTREAM_CONNECTIONS for n in upstream.per_worker.values()):
            problems.append("a worker opened more upstream connections than its Agent allows")

        code = stop_gunicorn(proc)
        closed = wait_for(lambda: upstream.open == 0, timeout=10)
        print(f"gunicorn stopped (exit status {code}); upstream connections open: "
              f"{open_before_stop} before, {upstream.open} after")
        for line in log_path.read_text().splitlines():
            if "greenhttp Agent closed" in line:
                print("  gunicorn log:", line.split("] ", 3)[-1])
        if code != 0 or not closed:
            problems.append("gunicorn did not shut down cleanly")
    except Exception as exc:
        problems.append(repr(exc))
    finally:
        if proc is not None:
            stop_gunicorn(proc)
        upstream.stop()
        if problems and log_path.exists():
            sys.stderr.write(log_path.read_text()[-4000:])
        workdir.cleanup()
    for problem in problems:
        print("FAILED:", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
