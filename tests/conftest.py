"""Shared fixtures: scripted raw-socket servers, a real nginx, and a leak check.

* ``server`` / ``make_server``: a gevent ``StreamServer`` on 127.0.0.1:0 whose
  per-connection handler is a function of a :class:`ServerConn` (the accepted
  socket plus helpers to read one request head, read a body by
  content-length or chunked framing, and send exact bytes). It counts the
  accepted connections and is stopped at teardown.
* ``make_client``: builds ``greenhttp.Client`` objects and destroys them at
  teardown.
* ``nginx``: one nginx 1.22 for the session (see :func:`nginx` for its
  locations and how ``/chunked`` is made chunked).
* an autouse leak check for ``tests/dispatcher``: open file descriptors and
  live greenlets before and after each test must match.
"""

from __future__ import annotations

import os
import shutil
import socket as stdsocket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import gevent.hub
import pytest
from gevent import socket as gsocket

import compiled  # imported before greenhttp: it decides which build of greenhttp runs
import greenhttp
from greenhttp import _global
from testkit import (  # noqa: F401  (re-exported for the fixtures below)
    LeakCheck,
    RecordedRequest,
    ScriptedServer,
    ServerConn,
    die_with_parent,
    response,
    serve_forever,
    wait_for,
)


@pytest.fixture
def fresh_global():
    """The test starts with no global dispatcher (none set, no default made); the
    ones it had are put back after, and whatever the test made global is destroyed."""
    saved, saved_defaults = _global._global_dispatcher, dict(_global._defaults)
    _global._global_dispatcher = None
    _global._defaults.clear()
    yield
    made = [_global._global_dispatcher, *_global._defaults.values()]
    _global._global_dispatcher = saved
    _global._defaults.clear()
    _global._defaults.update(saved_defaults)
    for d in made:
        if d is not None and d is not saved and d not in saved_defaults.values():
            with gevent.Timeout(5):
                d.destroy()


@pytest.fixture
def make_server():
    """``make_server(handler)`` starts a scripted server; all are stopped at teardown."""
    servers: list[ScriptedServer] = []

    def make(handler: Callable[[ServerConn], Any], **kw: Any) -> ScriptedServer:
        s = ScriptedServer(handler, **kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


@pytest.fixture
def make_client():
    """``make_client(url, **options)`` builds a Client destroyed at teardown."""
    clients: list[greenhttp.Client] = []

    def make(url: str, **options: Any) -> greenhttp.Client:
        c = greenhttp.Client(url, **options)
        clients.append(c)
        return c

    yield make
    for c in clients:
        with gevent.Timeout(5):
            c.destroy()



# ---------------------------------------------------------------------------
# nginx
# ---------------------------------------------------------------------------


def _free_port() -> int:
    s = stdsocket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@dataclass
class Nginx:
    origin: str
    port: int
    root: Path
    big: bytes
    chunked_source: bytes
    small: bytes = field(default=b"x" * 100)


_NGINX_CONF = """
{user}
worker_processes 1;
daemon off;
master_process on;
error_log {tmp}/error.log warn;
pid {tmp}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 1000;
    keepalive_timeout 65;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        root {tmp}/www;
        add_header X-Conn $connection always;
        location = / {{ try_files /small.bin =404; }}
        location = /big {{ try_files /big.bin =404; }}
        # A static file always has a Content-Length; gzip on the fly removes it
        # and nginx sends the compressed body with Transfer-Encoding: chunked.
        location = /chunked {{
            gzip on; gzip_min_length 1; gzip_types *; gzip_proxied any;
            try_files /chunked.txt =404;
        }}
        location = /keepalive-hint {{
            add_header Keep-Alive "timeout=3";
            add_header X-Conn $connection always;
            try_files /small.bin =404;
        }}
        location = /echo {{ return 200 "ok"; }}
    }}
}}
"""


@pytest.fixture(scope="session")
def nginx(tmp_path_factory):
    """nginx on 127.0.0.1:<free port>: ``/`` 100 bytes, ``/big`` 1 MiB, ``/chunked``
    (gzip-compressed on the fly, hence chunked: request it with
    ``accept-encoding: gzip``), ``/keepalive-hint`` (``Keep-Alive: timeout=3``),
    ``/echo`` (200 "ok" for any method). Every response carries ``X-Conn``,
    nginx's connection serial number."""
    exe = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(exe):
        pytest.fail("nginx is missing: run `make system-deps` (apt-get install nginx)")
    tmp = tmp_path_factory.mktemp("nginx")
    www = tmp / "www"
    www.mkdir()
    small = b"x" * 100
    big = bytes(range(256)) * 4096  # 1 MiB
    chunked_source = b"".join(b"line %05d of the chunked body\n" % i for i in range(2000))
    (www / "small.bin").write_bytes(small)
    (www / "big.bin").write_bytes(big)
    (www / "chunked.txt").write_bytes(chunked_source)
    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / d).mkdir()
    port = _free_port()
    conf = tmp / "nginx.conf"
    # As root, nginx's workers would run as nobody and could not read the 0700 tmp dir.
    user = "user root;" if os.geteuid() == 0 else ""
    conf.write_text(_NGINX_CONF.format(tmp=tmp, port=port, user=user))
    proc = subprocess.Popen(
        [exe, "-c", str(conf), "-p", str(tmp), "-e", str(tmp / "error.log")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                log = (tmp / "error.log").read_text() if (tmp / "error.log").exists() else ""
                pytest.fail(f"nginx exited with {proc.returncode}: {log}")
            try:
                s = stdsocket.create_connection(("127.0.0.1", port), timeout=0.5)
                s.close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("nginx did not start listening")
                time.sleep(0.02)
        yield Nginx(f"http://127.0.0.1:{port}", port, tmp, big, chunked_source, small)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


# ---------------------------------------------------------------------------
# leak check (tests/dispatcher only)
# ---------------------------------------------------------------------------


_warmed_up = False


def _warm_up() -> None:
    """Let gevent create its lazily made resources (resolver threads, watchers) once."""
    global _warmed_up
    if _warmed_up:
        return
    _warmed_up = True
    server = ScriptedServer(serve_forever())
    try:
        c = greenhttp.Client(server.origin)
        c.request(path="/").body.bytes()
        c.close()
        gsocket.getaddrinfo("localhost", 80, 0, stdsocket.SOCK_STREAM)
    finally:
        server.stop()
    for _ in range(20):
        gevent.sleep(0)


@pytest.fixture(autouse=True)
def leak_check(request):
    """In tests/dispatcher (and the errors/abort audit): no new open fd and no new live greenlet after each test.

    Greenlets are tracked with ``greenlet.settrace`` (every greenlet that runs during the
    test is remembered weakly), which is far cheaper than scanning the heap twice per test;
    new greenlets that never ran are not a leak.
    """
    path = str(request.node.fspath).replace(os.sep, "/")
    if "tests/dispatcher" not in path and not path.endswith("tests/test_errors_abort_audit.py"):
        yield
        return
    _warm_up()
    check = LeakCheck()
    check.start()
    try:
        yield
        # Everything the test made was closed by its fixtures; give gevent a bounded
        # time to finish closing.
        check.settle(2.0)
    finally:
        check.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say which build of greenhttp the run tested (shown with -q too)."""
    terminalreporter.write_line(compiled.describe())
