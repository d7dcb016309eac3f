"""The HTTP/2 fast path against real servers whose HPACK differs.

nginx encodes responses without the dynamic table (its blocks are served
from the session's cache); hypercorn (h2's server side) indexes every field,
so its blocks refer to the dynamic table and are always decoded. Both must
see each request's own fields, whatever was sent before on the connection.
"""

from __future__ import annotations

import json
import os
import shutil
import socket as stdsocket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gevent
import pytest

import greenhttp


def _free_port() -> int:
    with stdsocket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(proc: subprocess.Popen[bytes], port: int, what: str, log: Path) -> None:
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}: {log.read_text() if log.exists() else ''}")
        try:
            stdsocket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not start listening")
            time.sleep(0.02)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


_NGINX_CONF = """
worker_processes 1;
daemon off;
master_process off;
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
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port} http2;
        location /echo {{
            add_header x-n "$http_x_n";
            return 200 "$request_method $request_uri n=$http_x_n auth=$http_authorization c=$http_cookie";
        }}
    }}
}}
"""


@pytest.fixture(scope="module")
def nginx_h2c(tmp_path_factory):
    exe = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(exe):
        pytest.fail("nginx is missing: run `make system-deps` (apt-get install nginx)")
    tmp = tmp_path_factory.mktemp("nginx_fastpath")
    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / d).mkdir()
    port = _free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(_NGINX_CONF.format(tmp=tmp, port=port))
    proc = subprocess.Popen(
        [exe, "-c", str(conf), "-p", str(tmp), "-e", str(tmp / "error.log")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(proc, port, "nginx", tmp / "error.log")
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)


_ASGI_APP = '''
import json


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    while (await receive()).get("more_body"):
        pass
    fields = [[k.decode(), v.decode()] for k, v in scope["headers"]]
    body = json.dumps({"method": scope["method"], "path": scope["path"], "headers": fields}).encode()
    n = dict(scope["headers"]).get(b"x-n", b"")
    headers = [(b"content-type", b"application/json"), (b"x-n", n), (b"x-fixed", b"same every time")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
'''


@pytest.fixture(scope="module")
def hypercorn_h2c(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hypercorn_fastpath")
    (tmp / "echo_headers.py").write_text(textwrap.dedent(_ASGI_APP))
    port = _free_port()
    log = tmp / "hypercorn.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hypercorn", "--bind", f"127.0.0.1:{port}", "echo_headers:app"],
            cwd=str(tmp),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_listening(proc, port, "hypercorn", log)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)


def _concurrently(client: greenhttp.H2CClient, count: int, one):  # type: ignore[no-untyped-def]
    results: dict[int, object] = {}

    def run(n: int) -> None:
        results[n] = one(client, n)

    gevent.joinall([gevent.spawn(run, n) for n in range(count)], timeout=30, raise_error=True)
    assert len(results) == count
    return results


def test_nginx_sees_each_requests_own_fields(nginx_h2c):
    client = greenhttp.H2CClient(nginx_h2c)

    def one(client: greenhttp.H2CClient, n: int) -> None:
        headers = {"x-n": str(n % 7), "authorization": f"Bearer {n % 3}", "cookie": f"k={n % 5}"}
        method = ("GET", "DELETE", "HEAD")[n % 3]
        resp = client.request(path=f"/echo?q={n % 11}", method=method, headers=headers)
        body = resp.body.bytes()
        assert resp.status_code == 200
        assert resp.headers["x-n"] == str(n % 7)
        if method == "HEAD":
            assert body == b""
        else:
            assert body == f"{method} /echo?q={n % 11} n={n % 7} auth=Bearer {n % 3} c=k={n % 5}".encode()

    try:
        _concurrently(client, 400, one)
    finally:
        with gevent.Timeout(5):
            client.destroy()


def test_hypercorn_sees_each_requests_own_fields_and_its_indexed_answers_decode(hypercorn_h2c):
    client = greenhttp.H2CClient(hypercorn_h2c)

    def one(client: greenhttp.H2CClient, n: int) -> None:
        headers = [("x-n", str(n % 7)), ("authorization", "secret"), ("x-big", "v" * (n % 3) * 100)]
        resp = client.request(path=f"/p{n % 5}", method="GET", headers=headers)
        echoed = json.loads(resp.body.bytes())
        assert resp.status_code == 200
        assert resp.headers["x-n"] == str(n % 7)
        assert resp.headers["x-fixed"] == "same every time"
        assert echoed["path"] == f"/p{n % 5}"
        fields = [tuple(f) for f in echoed["headers"]]
        assert ("x-n", str(n % 7)) in fields
        assert ("authorization", "secret") in fields
        assert ("x-big", "v" * (n % 3) * 100) in fields

    try:
        _concurrently(client, 200, one)
    finally:
        with gevent.Timeout(5):
            client.destroy()
