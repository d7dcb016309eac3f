"""HTTP/2 against real servers: nginx (h2c and TLS with ALPN) and hypercorn (TLS and h2c)."""

from __future__ import annotations

import hashlib
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
import trustme

import greenhttp
from testkit import die_with_parent

MiB = 1 << 20


def _free_port() -> int:
    s = stdsocket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _wait_listening(proc: subprocess.Popen, port: int, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            text = log.read_text() if log is not None and log.exists() else ""
            pytest.fail(f"{what} exited with {proc.returncode}: {text}")
        try:
            stdsocket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not start listening")
            time.sleep(0.02)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    d = tmp_path_factory.mktemp("h2certs")
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    return d


_NGINX_CONF = """
worker_processes 1;
daemon off;
master_process off;  # one process, reading the test's private temporary files
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
    client_max_body_size 100m;
    default_type application/octet-stream;
    # keepalive_requests stays at its default, 1000: then nginx sends a graceful GOAWAY.
    server {{
        listen 127.0.0.1:{h2c} http2;
        listen 127.0.0.1:{tls} ssl http2;
        ssl_certificate {certs}/cert.pem;
        ssl_certificate_key {certs}/key.pem;
        root {tmp}/www;
        location = /small {{ return 200 "small body"; }}
        location = /proto {{ return 200 "$server_protocol"; }}
        location = /big {{ try_files /big.bin =404; }}
        location = /upload {{ return 200 "uploaded $content_length"; }}
    }}
}}
"""


class NginxH2:
    def __init__(self, h2c: int, tls: int, big: bytes, ca: str) -> None:
        self.h2c = f"http://127.0.0.1:{h2c}"
        self.tls = f"https://localhost:{tls}"
        self.big = big
        self.ca = ca


@pytest.fixture(scope="module")
def nginx_h2(tmp_path_factory, certs):
    exe = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(exe):
        pytest.fail("nginx is missing: run `make system-deps` (apt-get install nginx)")
    tmp = tmp_path_factory.mktemp("nginx_h2")
    (tmp / "www").mkdir()
    big = bytes(range(256)) * (50 * 4096)  # 50 MiB
    (tmp / "www" / "big.bin").write_bytes(big)
    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / d).mkdir()
    h2c, tls = _free_port(), _free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(_NGINX_CONF.format(tmp=tmp, h2c=h2c, tls=tls, certs=certs))
    proc = subprocess.Popen(
        [exe, "-c", str(conf), "-p", str(tmp), "-e", str(tmp / "error.log")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    try:
        _wait_listening(proc, h2c, "nginx", tmp / "error.log")
        _wait_listening(proc, tls, "nginx", tmp / "error.log")
        yield NginxH2(h2c, tls, big, str(certs / "ca.pem"))
    finally:
        _stop(proc)


_ASGI_APP = '''
import hashlib


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    digest = hashlib.sha256()
    size = 0
    while True:
        message = await receive()
        body = message.get("body", b"")
        digest.update(body)
        size += len(body)
        if not message.get("more_body"):
            break
    text = f"{scope['http_version']} {scope['method']} {scope['path']} {size} {digest.hexdigest()}"
    headers = [(b"content-type", b"text/plain")]
    if scope["path"] == "/trailers":
        headers.append((b"trailer", b"x-sum"))
        await send({"type": "http.response.start", "status": 200, "headers": headers, "trailers": True})
        await send({"type": "http.response.body", "body": text.encode()})
        await send({"type": "http.response.trailers", "headers": [(b"x-sum", b"42")]})
        return
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": text.encode()})
'''


class Hypercorn:
    def __init__(self, tls: int, h2c: int, ca: str) -> None:
        self.tls = f"https://localhost:{tls}"
        self.h2c = f"http://127.0.0.1:{h2c}"
        self.ca = ca


@pytest.fixture(scope="module")
def hypercorn(tmp_path_factory, certs):
    tmp = tmp_path_factory.mktemp("hypercorn")
    (tmp / "echo_app.py").write_text(textwrap.dedent(_ASGI_APP))
    tls, h2c = _free_port(), _free_port()
    log = tmp / "hypercorn.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hypercorn",
                "--bind",
                f"127.0.0.1:{tls}",
                "--insecure-bind",
                f"127.0.0.1:{h2c}",
                "--certfile",
                str(certs / "cert.pem"),
                "--keyfile",
                str(certs / "key.pem"),
                "echo_app:app",
            ],
            cwd=str(tmp),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
    try:
        _wait_listening(proc, tls, "hypercorn", log)
        _wait_listening(proc, h2c, "hypercorn", log)
        yield Hypercorn(tls, h2c, str(certs / "ca.pem"))
    finally:
        _stop(proc)


@pytest.fixture
def clients():
    made = []

    def make(cls, url, **options):
        c = cls(url, **options)
        made.append(c)
        return c

    yield make
    for c in made:
        with gevent.Timeout(5):
            c.destroy()


def _many(client, paths, **options):
    out = {}

    def get(path):
        r = client.request(path=path, **options)
        out[path] = (r.status_code, r.body.bytes())

    gevent.joinall([gevent.spawn(get, p) for p in paths], timeout=30, raise_error=True)
    return out


# -- nginx ----------------------------------------------------------------------------


def test_nginx_h2c(nginx_h2, clients):
    client = clients(greenhttp.H2CClient, nginx_h2.h2c)
    r = client.request(path="/proto")
    assert r.status_code == 200
    assert r.body.text() == "HTTP/2.0"
    assert r.headers["server"].startswith("nginx")


def test_nginx_h2c_100_concurrent_requests(nginx_h2, clients):
    client = clients(greenhttp.H2CClient, nginx_h2.h2c)
    connects = []
    client.on("connect", lambda origin, targets: connects.append(origin))
    out = _many(client, [f"/small?{i}" for i in range(100)])
    assert set(out.values()) == {(200, b"small body")}
    assert len(connects) == 1


def test_nginx_graceful_goaway_after_1000_requests(nginx_h2, clients):
    client = clients(greenhttp.H2CClient, nginx_h2.h2c)
    connects = []
    disconnects = []
    client.on("connect", lambda origin, targets: connects.append(origin))
    client.on("disconnect", lambda origin, targets, err: disconnects.append(err))
    done = [0]

    def worker():
        while done[0] < 2500:
            done[0] += 1
            r = client.request(path="/small")
            assert r.body.bytes() == b"small body"

    gevent.joinall([gevent.spawn(worker) for _ in range(64)], timeout=50, raise_error=True)
    assert done[0] >= 2500
    assert len(connects) >= 3  # nginx closes each connection after 1000 requests
    assert all(isinstance(e, greenhttp.errors.InformationalError) for e in disconnects)


def test_nginx_h2c_50_mib_download_and_upload(nginx_h2, clients):
    client = clients(greenhttp.H2CClient, nginx_h2.h2c)
    digest = hashlib.sha256()
    size = 0
    for chunk in client.request(path="/big").body:
        digest.update(chunk)
        size += len(chunk)
    assert size == len(nginx_h2.big)
    assert digest.digest() == hashlib.sha256(nginx_h2.big).digest()
    r = client.request(path="/upload", method="POST", body=nginx_h2.big)
    assert r.body.text() == f"uploaded {len(nginx_h2.big)}"


def test_nginx_tls_alpn_selects_h2(nginx_h2, clients):
    client = clients(greenhttp.Client, nginx_h2.tls, connect={"cafile": nginx_h2.ca})
    assert client.request(path="/proto").body.text() == "HTTP/2.0"
    out = _many(client, [f"/small?{i}" for i in range(50)])
    assert set(out.values()) == {(200, b"small body")}


def test_nginx_tls_allow_h2_false_stays_on_http1(nginx_h2, clients):
    client = clients(greenhttp.Client, nginx_h2.tls, allow_h2=False, connect={"cafile": nginx_h2.ca})
    assert client.request(path="/proto").body.text() == "HTTP/1.1"


# -- hypercorn -------------------------------------------------------------------------


def test_hypercorn_tls_alpn_h2(hypercorn, clients):
    client = clients(greenhttp.Client, hypercorn.tls, connect={"cafile": hypercorn.ca})
    r = client.request(path="/echo", method="POST", body=b"hello")
    assert r.body.text() == f"2 POST /echo 5 {hashlib.sha256(b'hello').hexdigest()}"


def test_hypercorn_h2c_prior_knowledge(hypercorn, clients):
    client = clients(greenhttp.H2CClient, hypercorn.h2c)
    r = client.request(path="/x")
    assert r.body.text().startswith("2 GET /x 0 ")


def test_hypercorn_trailers(hypercorn, clients):
    client = clients(greenhttp.H2CClient, hypercorn.h2c)
    r = client.request(path="/trailers", headers={"te": "trailers"})
    assert r.body.text().startswith("2 GET /trailers")
    assert r.trailers == {"x-sum": "42"}


def test_hypercorn_20_mib_streamed_upload_and_concurrency(hypercorn, clients):
    client = clients(greenhttp.Client, hypercorn.tls, connect={"cafile": hypercorn.ca})
    payload = bytes(range(256)) * (20 * 4096)

    def chunks():
        for i in range(0, len(payload), 1 << 18):
            yield payload[i : i + (1 << 18)]

    r = client.request(path="/up", method="PUT", body=chunks())
    assert r.body.text() == f"2 PUT /up {len(payload)} {hashlib.sha256(payload).hexdigest()}"
    out = _many(client, [f"/c{i}" for i in range(40)])
    assert all(v[0] == 200 for v in out.values())


def test_hypercorn_tls_allow_h2_false_is_http1(hypercorn, clients):
    client = clients(greenhttp.Client, hypercorn.tls, allow_h2=False, connect={"cafile": hypercorn.ca})
    assert client.request(path="/h1").body.text().startswith("1.1 GET /h1 0 ")
