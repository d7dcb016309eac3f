"""The library on gevent's libuv loop (its default on Windows; ``GEVENT_LOOP=libuv``).

libuv counts time in whole milliseconds, and gevent warns about every shorter
timer. The library's own timers never go below 1 ms: a timeout shorter than
that fires as a 1 ms one, with no warning (here, under ``-W error``, a warning
would surface as the request's error).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

_SCRIPT = """
import gevent
from gevent.server import StreamServer

import greenhttp
from greenhttp import AbortSignal, errors

print("loop:", type(gevent.get_hub().loop).__module__)


def handle(sock, addr):
    buf = b""
    while True:
        data = sock.recv(65536)
        if not data:
            return
        buf += data
        while b"\\r\\n\\r\\n" in buf:
            head, _, buf = buf.partition(b"\\r\\n\\r\\n")
            if b" /silent " not in head:
                sock.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok")


server = StreamServer(("127.0.0.1", 0), handle)
server.start()
origin = f"http://127.0.0.1:{server.server_port}"
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


def test_sub_millisecond_timeouts_fire_without_warnings_on_libuv():
    env = {**os.environ, "GEVENT_LOOP": "libuv"}
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
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
