"""``Client.pipeline()``: a duplex whose writes are the request body and whose reads are the response.

Starts a small HTTP/1.1 server on 127.0.0.1 that answers a chunked request
right away and echoes every request chunk back upper-cased, as its own
response chunk. The client writes words into the duplex one at a time and
reads each echo before writing the next: request and response flow at the
same time over one request.

Run: ``python examples/pipeline.py``.
"""

from __future__ import annotations

from typing import Any

from gevent.server import StreamServer

import greenhttp


def read_line(sock: Any, buf: bytes) -> tuple[bytes, bytes]:
    while b"\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            raise EOFError
        buf += data
    line, _, rest = buf.partition(b"\r\n")
    return line, rest


def handle(sock: Any, _addr: Any) -> None:
    """Answer at once, then echo each request chunk upper-cased until the last chunk."""
    buf = b""
    try:
        while b"\r\n\r\n" not in buf:
            data = sock.recv(65536)
            if not data:
                return
            buf += data
        _, buf = buf.split(b"\r\n\r\n", 1)
        sock.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        while True:
            size_line, buf = read_line(sock, buf)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                read_line(sock, buf)  # the blank line after the last chunk
                sock.sendall(b"0\r\n\r\n")
                return
            while len(buf) < size + 2:
                buf += sock.recv(65536)
            chunk, buf = buf[:size], buf[size + 2 :]
            sock.sendall(b"%x\r\n%s\r\n" % (size, chunk.upper()))
    except EOFError:
        return
    finally:
        sock.close()


def main() -> None:
    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    try:
        with greenhttp.Client(f"http://127.0.0.1:{server.server_port}") as client:

            def on_response(data: greenhttp.PipelineData) -> Any:
                print(f"response {data.status_code} for {data.opaque!r}")
                return data.body  # what the duplex reads from

            with client.pipeline("/shout", "POST", handler=on_response, opaque="words") as duplex:
                for word in (b"hello", b"duplex", b"world"):
                    duplex.write(word)
                    echo = duplex.read(len(word))
                    print(f"wrote {word.decode()!r}, read back {echo.decode()!r}")
                    assert echo == word.upper()
                duplex.end()
                assert duplex.read() == b""
                print("request ended, response ended")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
