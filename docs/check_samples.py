"""Run the code samples of the documentation against loopback servers.

``make docs`` runs this after building the site, so a sample that stops
working fails the build. For each page it checks:

* ```` ```python ```` blocks are executed in order, in one namespace per page
  (a later block may use a name an earlier one defined); they must not raise;
* ```` ```pycon ```` blocks are interactive sessions checked with :mod:`doctest`
  in that same namespace: each printed result must match;
* a block right after a ``% no-check`` line is shown, not run (a gunicorn
  command line, a fragment that needs a real network).

Samples talk to ``http://127.0.0.1:8080`` and ``http://127.0.0.1:8081``; those
addresses are rewritten to two servers this script starts on free loopback
ports (``ROUTES`` below says what they answer). Usage::

    python docs/check_samples.py [page.md ...]     # default: the pages listed in PAGES
"""

from __future__ import annotations

import contextlib
import doctest
import gzip
import io
import json
import re
import sys
import traceback
from pathlib import Path

import gevent
from gevent.server import StreamServer

DOCS = Path(__file__).resolve().parent
PAGES = [
    "index.md",
    "quickstart.md",
    "request-api.md",
    "handlers.md",
    "client.md",
    "errors.md",
    "debugging.md",
    "concurrency.md",
    "design.md",
    "migrating.md",
]
BLOCK_TIMEOUT = 30.0  # seconds a single block may take

_FENCE = re.compile(r"^(?P<skip>% no-check\n)?```(?P<lang>python|pycon)\n(?P<code>.*?)^```$", re.M | re.S)


# -- the loopback servers ------------------------------------------------------------
def _read_head(sock, buf: bytes) -> tuple[bytes | None, bytes]:
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None, buf
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def _read_exact(sock, buf: bytes, n: int) -> tuple[bytes, bytes]:
    while len(buf) < n:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("short body")
        buf += data
    return buf[:n], buf[n:]


def _read_chunked(sock, buf: bytes) -> tuple[bytes, bytes]:
    body = b""
    while True:
        while b"\r\n" not in buf:
            buf += sock.recv(65536)
        line, _, buf = buf.partition(b"\r\n")
        size = int(line.split(b";")[0], 16)
        if size == 0:
            while not buf.startswith(b"\r\n") and b"\r\n\r\n" not in buf:
                buf += sock.recv(65536)
            _, _, buf = buf.partition(b"\r\n") if buf.startswith(b"\r\n") else buf.partition(b"\r\n\r\n")
            return body, buf
        chunk, buf = _read_exact(sock, buf, size + 2)
        body += chunk[:-2]


def _respond(sock, status: int, body: bytes = b"", ctype: str = "text/plain", extra: str = "") -> None:
    reason = {200: "OK", 201: "Created", 204: "No Content", 302: "Found", 404: "Not Found",
              500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "Status")
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n{extra}\r\n"
    sock.sendall(head.encode("latin-1") + body)


def _handle(sock, _addr) -> None:  # one keep-alive connection
    buf = b""
    try:
        while True:
            head, buf = _read_head(sock, buf)
            if head is None:
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if "content-length" in headers:
                body, buf = _read_exact(sock, buf, int(headers["content-length"]))
            elif headers.get("transfer-encoding") == "chunked":
                body, buf = _read_chunked(sock, buf)
            else:
                body = b""
            if not _route(sock, method, target, headers, body, buf):
                return
            if headers.get("connection") == "close":
                return
    except (ConnectionError, OSError):
        return
    finally:
        sock.close()


def _echo_raw(sock, rest: bytes) -> None:
    if rest:
        sock.sendall(rest)
    while True:
        data = sock.recv(65536)
        if not data:
            return
        sock.sendall(data)


ROUTES = """
    /                 200 "hello"
    /users/1          200 JSON {"id": 1, "name": "Ada"}
    /echo             200, the request body back (content-type as sent)
    /headers          200 JSON: the request headers (lower-case names)
    /big              200, 1 MB of b"x"
    /stream           200 chunked: b"one", b"two", b"three", 50 ms apart
    /trailers         200 chunked with the trailer x-checksum: 1234
    /slow             the head after 2 s
    /early-hints      103 (link header), then 200 "hello"
    /status/NNN       status NNN, body "status NNN"
    /keep-alive-hint  200 with "keep-alive: timeout=5"
    /drop             closes the connection without an answer
    /redirect         302 to /users/1
    /gzip             200 "hello, compressed" with content-encoding: gzip
    Upgrade: x        101, then echoes raw bytes
    CONNECT           200, then echoes raw bytes
"""


def _route(sock, method: str, target: str, headers: dict[str, str], body: bytes, rest: bytes) -> bool:
    path = target.split("?", 1)[0]
    if method == "CONNECT":
        sock.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        _echo_raw(sock, rest)
        return False
    if "upgrade" in headers:
        proto = headers["upgrade"]
        sock.sendall(f"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: {proto}\r\n\r\n".encode())
        _echo_raw(sock, rest)
        return False
    if path == "/":
        _respond(sock, 200, b"hello")
    elif path == "/users/1":
        _respond(sock, 200, json.dumps({"id": 1, "name": "Ada"}).encode(), "application/json")
    elif path == "/echo":
        _respond(sock, 200, body, headers.get("content-type", "application/octet-stream"))
    elif path == "/headers":
        _respond(sock, 200, json.dumps(headers).encode(), "application/json")
    elif path == "/big":
        _respond(sock, 200, b"x" * 1_000_000, "application/octet-stream")
    elif path in ("/stream", "/trailers"):
        trailer = path == "/trailers"
        sock.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n"
            + (b"trailer: x-checksum\r\n" if trailer else b"")
            + b"\r\n"
        )
        for part in (b"one", b"two", b"three"):
            sock.sendall(b"%x\r\n%s\r\n" % (len(part), part))
            if not trailer:
                gevent.sleep(0.05)
        sock.sendall(b"0\r\nx-checksum: 1234\r\n\r\n" if trailer else b"0\r\n\r\n")
    elif path == "/slow":
        gevent.sleep(2.0)
        _respond(sock, 200, b"finally")
    elif path == "/early-hints":
        sock.sendall(b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n")
        _respond(sock, 200, b"hello")
    elif path.startswith("/status/"):
        code = int(path.rsplit("/", 1)[1])
        _respond(sock, code, b"status %d" % code)
    elif path == "/keep-alive-hint":
        _respond(sock, 200, b"hello", extra="keep-alive: timeout=5\r\n")
    elif path == "/drop":
        return False
    elif path == "/redirect":
        _respond(sock, 302, b"", extra="location: /users/1\r\n")
    elif path == "/gzip":
        _respond(sock, 200, gzip.compress(b"hello, compressed"), extra="content-encoding: gzip\r\n")
    else:
        _respond(sock, 404, b"no such page")
    return True


# -- running the samples -----------------------------------------------------------------
def _blocks(text: str) -> list[tuple[int, str, str]]:
    out = []
    for m in _FENCE.finditer(text):
        if m.group("skip"):
            continue
        line = text.count("\n", 0, m.start()) + 1
        out.append((line, m.group("lang"), m.group("code")))
    return out


def check_page(path: Path, origins: dict[str, str]) -> list[str]:
    """Run one page's samples; returns the failures as messages."""
    failures: list[str] = []
    globs: dict[str, object] = {"__name__": "__docs__"}
    for line, lang, code in _blocks(path.read_text(encoding="utf-8")):
        for placeholder, real in origins.items():
            code = code.replace(placeholder, real)
        where = f"{path.name}:{line}"
        try:
            with gevent.Timeout(BLOCK_TIMEOUT):
                if lang == "python":
                    with contextlib.redirect_stdout(io.StringIO()):  # samples may print; keep the log clean
                        exec(compile(code, where, "exec"), globs)
                else:
                    test = doctest.DocTestParser().get_doctest(code, globs, where, str(path), line)
                    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
                    out: list[str] = []
                    runner.run(test, out=out.append, clear_globs=False)
                    globs.update(test.globs)  # DocTest works on a copy; later blocks see its names
                    if runner.failures:
                        failures.append(f"{where}: pycon block failed\n" + "".join(out))
        except BaseException as exc:  # noqa: BLE001 - a sample failing in any way is reported
            if isinstance(exc, KeyboardInterrupt):
                raise
            failures.append(f"{where}: {lang} block raised\n" + "".join(traceback.format_exception(exc)))
    return failures


def main(argv: list[str]) -> int:
    servers = [StreamServer(("127.0.0.1", 0), _handle) for _ in range(2)]
    for s in servers:
        s.start()
    origins = {
        "127.0.0.1:8080": f"127.0.0.1:{servers[0].server_port}",
        "127.0.0.1:8081": f"127.0.0.1:{servers[1].server_port}",
    }
    pages = [DOCS / p for p in (argv or PAGES)]
    failures: list[str] = []
    checked = 0
    try:
        for page in pages:
            if not page.exists():
                failures.append(f"{page.name}: no such page")
                continue
            found = check_page(page, origins)
            checked += len(_blocks(page.read_text(encoding="utf-8")))
            failures.extend(found)
    finally:
        for s in servers:
            s.stop(timeout=1)
    for f in failures:
        print(f, file=sys.stderr)
    print(f"doc samples: {checked} blocks in {len(pages)} pages, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
