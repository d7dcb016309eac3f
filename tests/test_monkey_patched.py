"""The library works under ``gevent.monkey.patch_all()`` and without it (DESIGN.md §2)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_SCRIPT = """
{patch}
import socket
import threading

import gevent
from gevent.server import StreamServer

import greenhttp

served = []

def handle(sock, addr):
    buf = b""
    while True:
        while b"\\r\\n\\r\\n" not in buf:
            data = sock.recv(65536)
            if not data:
                return
            buf += data
        head, _, buf = buf.partition(b"\\r\\n\\r\\n")
        target = head.split(b" ")[1]
        served.append(target)
        body = b"you asked for " + target
        sock.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n%s" % (len(body), body))

server = StreamServer(("127.0.0.1", 0), handle)
server.start()
client = greenhttp.Client(f"http://127.0.0.1:{{server.server_port}}", pipelining=4)
print(client.request(path="/first").body.text())
gs = [gevent.spawn(lambda i=i: client.request(path=f"/g{{i}}").body.text()) for i in range(20)]
gevent.joinall(gs, timeout=10, raise_error=True)
print(sorted(g.value for g in gs) == sorted(f"you asked for /g{{i}}" for i in range(20)))
print("patched:", socket.socket is gevent.socket.socket, threading.current_thread.__module__)
with greenhttp.Client(f"http://127.0.0.1:{{server.server_port}}") as c2:
    print(c2.request(path="/second", method="POST", body=b"x").status_code)
client.close()
server.stop()
print("served", len(served))
"""


@pytest.mark.parametrize("patched", [True, False], ids=["patch_all", "unpatched"])
def test_requests_in_a_subprocess(patched):
    patch = "from gevent import monkey; monkey.patch_all()" if patched else ""
    script = textwrap.dedent(_SCRIPT.format(patch=patch))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "you asked for /first"
    assert lines[1] == "True"
    assert lines[2].startswith(f"patched: {patched}")
    assert lines[3] == "200"
    assert lines[4] == "served 22"
    assert "Traceback" not in proc.stderr
