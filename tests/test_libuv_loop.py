"""The library on gevent's libuv loop (its default on Windows; ``GEVENT_LOOP=libuv``).

libuv counts time in whole milliseconds, and gevent warns about every shorter
timer. The library's own timers never go below 1 ms: a timeout shorter than
that fires as a 1 ms one, with no warning (here, under ``-W error``, a warning
would surface as the request's error).

libuv also keeps every handle on a list until it is closed, so a watcher
dropped unclosed is freed memory libuv goes on writing to: every timer the
library starts is closed, including one that has fired.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

_SCRIPT = """
import gevent

import greenhttp
from greenhttp import AbortSignal, errors
from testkit import ScriptedServer

print("loop:", type(gevent.get_hub().loop).__module__)


def handle(conn):
    while (req := conn.read_request()) is not None:
        if req.target != "/silent":
            conn.respond(b"ok")


server = ScriptedServer(handle)
origin = server.origin
with gevent.Timeout(10):
    with greenhttp.Client(origin, headers_timeout=0.0002) as client:
        try:
            client.request(path="/silent")
        except errors.HeadersTimeoutError:
            print("headers timeout: HeadersTimeoutError")
        print("next:", client.request(path="/next").body.text())
    with greenhttp.Client(origin) as client:
        try:
            client.request(path="/silent", signal=AbortSignal.timeout(0.0002))
        except Exception as exc:
            print("signal:", type(exc).__name__, getattr(exc, "name", ""))
        print("then:", client.request(path="/ok").body.text())
    # A loopback connect may or may not take 0.3 ms: either way, no warning.
    with greenhttp.Client(origin, connect_timeout=0.0003) as client:
        try:
            print("connect:", client.request(path="/ok").body.text())
        except errors.ConnectTimeoutError:
            print("connect: ConnectTimeoutError")
server.stop()
print("done")
"""


def _run_on_libuv(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a new interpreter on gevent's libuv loop, warnings as errors."""
    paths = [str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")]  # testkit, then the rest
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "GEVENT_LOOP": "libuv",
            "PYTHONPATH": os.pathsep.join(p for p in paths if p),
            **env,
        },
    )


def test_sub_millisecond_timeouts_fire_without_warnings_on_libuv():
    proc = _run_on_libuv(_SCRIPT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("loop: gevent.libuv"), lines
    assert lines[1:-2] == [
        "headers timeout: HeadersTimeoutError",
        "next: ok",
        "signal: DOMException TimeoutError",
        "then: ok",
    ]
    assert lines[-2] in ("connect: ok", "connect: ConnectTimeoutError")
    assert lines[-1] == "done"


_FIRED_TIMERS = """
import gevent
import gevent.event

from greenhttp import _runtime

for _ in range(300):
    fired = gevent.event.Event()
    timer = _runtime.start_timer(0.001, fired.set)
    assert fired.wait(5)
    del timer  # what a holder does with a timer that has fired (a WebSocket's close timeout)
    gevent.sleep(0)
open_timers = [h for h in gevent.get_hub().loop.debug() if h.type == b"timer"]
print("open timer handles:", len(open_timers))
"""


def test_fired_timers_are_closed_on_libuv():
    """A timer dropped after it fired, unclosed, left libuv writing to freed memory:
    the WebSocket close timeout did that, and the libuv runs of the suite crashed
    now and then. glibc's heap checks make the damage show at once."""
    proc = _run_on_libuv(
        _FIRED_TIMERS,
        PYTHONMALLOC="malloc",  # every object from glibc's heap, which checks itself
        MALLOC_CHECK_="3",
        MALLOC_PERTURB_="165",
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    # The hub's own timers may be open; not one per fired timer.
    count = int(proc.stdout.split(":")[-1])
    assert count < 10, proc.stdout
