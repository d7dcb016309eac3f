"""``Client.stream()``: pipe a response body straight into a writable.

Starts a small HTTP/1.1 server on 127.0.0.1 that sends a 1 MiB body in
chunked framing, followed by a ``X-Sha256`` trailer. The client streams the
body into a hashing writable (the factory picks it from the response head),
so the body is never held in memory, then checks the digest against the
trailer returned in ``StreamData.trailers``.

Run: ``python examples/stream.py``.
"""

from __future__ import annotations

import hashlib
from typing import Any

from gevent.server import StreamServer

import greenhttp

BODY = bytes(range(256)) * 4096  # 1 MiB


def handle(sock: Any, _addr: Any) -> None:
    """Answer each request with BODY in 64 KiB chunks and a digest trailer."""
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            _, buf = buf.split(b"\r\n\r\n", 1)
            sock.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sha256\r\n\r\n")
            for i in range(0, len(BODY), 65536):
                part = BODY[i : i + 65536]
                sock.sendall(b"%x\r\n%s\r\n" % (len(part), part))
            digest = hashlib.sha256(BODY).hexdigest().encode()
            sock.sendall(b"0\r\nX-Sha256: %s\r\n\r\n" % digest)
    finally:
        sock.close()


class HashingWriter:
    """A writable that hashes what it is given; ``close()`` freezes the digest."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.size = 0
        self.digest = ""

    def write(self, chunk: bytes) -> None:
        self.sha.update(chunk)
        self.size += len(chunk)

    def close(self) -> None:
        self.digest = self.sha.hexdigest()


def main() -> None:
    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    try:
        with greenhttp.Client(f"http://127.0.0.1:{server.server_port}") as client:
            writer = HashingWriter()

            def factory(data: greenhttp.StreamFactoryData) -> HashingWriter:
                print(f"status {data.status_code}, opaque {data.opaque!r}, framing {data.headers['transfer-encoding']}")
                return writer

            result = client.stream("/file", factory=factory, opaque="download-1")
            print(f"streamed {writer.size} bytes, opaque {result.opaque!r}")
            print(f"trailer digest matches: {result.trailers['x-sha256'] == writer.digest}")
            assert writer.size == len(BODY) and result.trailers["x-sha256"] == writer.digest
    finally:
        server.stop()


if __name__ == "__main__":
    main()
