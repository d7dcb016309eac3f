"""``Client.upgrade()`` and ``Client.connect()``: requests that end with a raw socket.

Starts three small servers on 127.0.0.1:

* an HTTP/1.1 server that switches to an ``echo`` protocol on
  ``Upgrade: echo`` (101 Switching Protocols) and greets right after the head;
* a TCP "time" service that answers one line;
* a tiny HTTP CONNECT proxy that opens a tunnel to the requested
  ``host:port``, or answers 407 without a ``Proxy-Authorization`` header.

Run: ``python examples/upgrade.py``.
"""

from __future__ import annotations

import socket as stdsocket
from typing import Any

import gevent
from gevent import socket as gsocket
from gevent.server import StreamServer

import greenhttp
from greenhttp.errors import ResponseError


def read_head(sock: Any) -> tuple[bytes, bytes] | None:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def echo_server(sock: Any, _addr: Any) -> None:
    """``Upgrade: echo`` switches to echoing; anything else gets a plain answer."""
    try:
        while (got := read_head(sock)) is not None:
            head, rest = got
            if b"\r\nupgrade: echo" in head.lower():
                sock.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nwelcome\n")
                if rest:
                    sock.sendall(rest)
                while data := sock.recv(65536):
                    sock.sendall(data)
                return
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain")
    finally:
        sock.close()


def time_service(sock: Any, _addr: Any) -> None:
    sock.sendall(b"it is tea time\n")
    sock.close()


def pump(src: Any, dst: Any) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
        dst.shutdown(stdsocket.SHUT_WR)
    except OSError:
        pass


def proxy(sock: Any, _addr: Any) -> None:
    """CONNECT host:port → 200 and a tunnel; without credentials → 407."""
    try:
        got = read_head(sock)
        if got is None:
            return
        head, rest = got
        method, target, _ = head.split(b"\r\n", 1)[0].split(b" ", 2)
        if method != b"CONNECT" or b"\r\nproxy-authorization:" not in head.lower():
            sock.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\nContent-Length: 0\r\n\r\n")
            return
        host, port = target.decode().rsplit(":", 1)
        upstream = gsocket.create_connection((host, int(port)))
        sock.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        if rest:
            upstream.sendall(rest)
        back = gevent.spawn(pump, upstream, sock)
        pump(sock, upstream)
        back.join()
        upstream.close()
    finally:
        sock.close()


def main() -> None:
    servers = [StreamServer(("127.0.0.1", 0), fn) for fn in (echo_server, time_service, proxy)]
    for s in servers:
        s.start()
    echo, clock, tunnel = (f"127.0.0.1:{s.server_port}" for s in servers)
    try:
        # 1. Upgrade: the socket leaves the client once the server switches protocols.
        with greenhttp.Client(f"http://{echo}") as client:
            up = client.upgrade("/chat", protocol="echo", opaque="chat-1")
            with up.socket as sock:
                print(f"upgraded ({up.headers['upgrade']}, opaque {up.opaque!r}); server said {sock.recv(64)!r}")
                sock.sendall(b"ping")
                print(f"echoed: {sock.recv(64)!r}")
            # The next request opens a new connection.
            print(f"next request: {client.request('/').body.text()!r}")

        # 2. CONNECT through a proxy: first without credentials, then with.
        with greenhttp.Client(f"http://{tunnel}") as proxy_client:
            try:
                proxy_client.connect(clock)
            except ResponseError as err:
                print(f"CONNECT refused: {err.status_code}")
            data = proxy_client.connect(clock, headers={"proxy-authorization": "Basic dXNlcjpwYXNz"})
            with data.socket as sock:
                print(f"CONNECT {clock} -> {data.status_code}; through the tunnel: {sock.recv(64)!r}")
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
