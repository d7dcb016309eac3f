"""The loopback nginx every scenario talks to, and the CPU split.

One nginx (``worker_processes 1``, ``daemon off``) serves three loopback
ports from a config written into a temporary directory:

- ``h1``:  HTTP/1.1 keep-alive; ``/100b`` (a ``return 200`` of 100 bytes) and
  ``/1m`` (a 1 MiB static file, sendfile);
- ``h2c``: HTTP/2 with prior knowledge, same locations;
- ``h2``:  TLS with ALPN h2 (and http/1.1), a self-signed chain made with
  ``trustme`` (or ``openssl`` when trustme is missing).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BODY_100B = b"x" * 100
BODY_1MIB_LEN = 1024 * 1024
NGINX_CANDIDATES = ("nginx", "/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx")

CONFIG = """\
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    default_type application/octet-stream;
    keepalive_requests 100000000;
    keepalive_timeout 600s;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    open_file_cache max=16 inactive=600s;
    root {tmp}/www;
    ssl_certificate {tmp}/server.pem;
    ssl_certificate_key {tmp}/server.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:bench:1m;
    server {{ listen 127.0.0.1:{h1}; {locations} }}
    server {{ listen 127.0.0.1:{h2c} http2; {locations} }}
    server {{ listen 127.0.0.1:{h2} ssl http2; {locations} }}
}}
"""
LOCATIONS = 'location = /100b {{ return 200 "{body}"; }} location = /1m {{ }}'


@dataclass
class CpuPlan:
    """Which core the server gets and which the clients get (None: no pinning)."""

    server: int | None
    client: int | None
    note: str

    @classmethod
    def choose(cls, pin: bool) -> CpuPlan:
        cpus = sorted(os.sched_getaffinity(0))
        if not pin:
            return cls(None, None, "pinning disabled (--no-pin)")
        if len(cpus) < 2:
            return cls(None, None, f"not pinned: only {len(cpus)} CPU available")
        return cls(cpus[0], cpus[1], f"server on CPU {cpus[0]}, client on CPU {cpus[1]}")


def preexec_for(cpu: int | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` pinning the child to ``cpu`` (None when not pinning)."""
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def find_nginx() -> str | None:
    for name in NGINX_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_certs(tmp: Path) -> None:
    """A CA (``ca.pem``, what clients trust) and a server chain for 127.0.0.1."""
    try:
        import trustme
    except ImportError:
        trustme = None  # type: ignore[assignment]  # fall back to openssl below
    if trustme is not None:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
        cert.private_key_pem.write_to_path(str(tmp / "server.key"))
        (tmp / "server.pem").write_bytes(b"".join(b.bytes() for b in cert.cert_chain_pems))
        return
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", str(tmp / "server.key"), "-out", str(tmp / "server.pem"),
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )
    shutil.copy(tmp / "server.pem", tmp / "ca.pem")


@dataclass
class Nginx:
    """A running nginx; use as a context manager (``with Nginx.start(...) as srv``)."""

    binary: str
    cpu: int | None
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="greenhttp-bench-")))
    ports: dict[str, int] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def cafile(self) -> str:
        return str(self.tmp / "ca.pem")

    def origin(self, protocol: str) -> str:
        scheme = "https" if protocol == "h2" else "http"
        return f"{scheme}://127.0.0.1:{self.ports[protocol]}"

    def version(self) -> str:
        out = subprocess.run([self.binary, "-v"], capture_output=True, text=True, timeout=10)
        return (out.stderr or out.stdout).strip().removeprefix("nginx version: ").removeprefix("nginx/")

    def __enter__(self) -> Nginx:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self) -> None:
        # nginx started by root serves as "nobody": the files must be world-readable.
        self.tmp.chmod(0o755)
        www = self.tmp / "www"
        www.mkdir(mode=0o755)
        (www / "1m").write_bytes(os.urandom(BODY_1MIB_LEN))
        (www / "1m").chmod(0o644)
        _write_certs(self.tmp)
        (self.tmp / "server.key").chmod(0o600)  # read by the master before it drops privileges
        self.ports = {p: _free_port() for p in ("h1", "h2c", "h2")}
        locations = LOCATIONS.format(body=BODY_100B.decode())
        conf = self.tmp / "nginx.conf"
        conf.write_text(CONFIG.format(tmp=self.tmp, locations=locations, **self.ports))
        self.proc = subprocess.Popen(
            [self.binary, "-p", str(self.tmp), "-e", str(self.tmp / "error.log"), "-c", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec_for(self.cpu),
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self.proc is not None
        for _ in range(200):  # up to ~10 s
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited at start:\n{self._error_log()}")
            if all(self._accepts(port) for port in self.ports.values()):
                return
            time.sleep(0.05)
        raise RuntimeError(f"nginx did not listen within 10 s:\n{self._error_log()}")

    @staticmethod
    def _accepts(port: int) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    def _error_log(self) -> str:
        log = self.tmp / "error.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        if self.proc is not None and self.proc.stderr is not None and self.proc.poll() is not None:
            text += self.proc.stderr.read().decode(errors="replace")
        return text[-2000:]

    def stop(self) -> None:
        """Stop nginx (its whole process group) and remove the temporary directory."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if proc is not None:
            if proc.stderr is not None:
                proc.stderr.close()
            if proc.poll() is None:
                proc.wait(timeout=5)
        shutil.rmtree(self.tmp, ignore_errors=True)
