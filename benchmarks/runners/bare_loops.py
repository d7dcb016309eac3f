"""Speed limits for a gevent HTTP client; not clients.

``bare_socket``
    One greenlet per connection sends a fixed request and ``recv_into`` one
    preallocated buffer until the known response length (headers + body,
    learnt from one probe request) has arrived. No parsing at all.
``bare_httptools``
    The same loop, every received slice fed to ``httptools.HttpResponseParser``
    (llhttp); a request ends at ``on_message_complete``; body bytes are
    counted, not kept.

Both are the I/O floor of a gevent client: each read first waits on the
socket's readiness (a libev io watcher and the hub), then calls ``recv_into``
on the raw non-blocking socket, which therefore never fails with EAGAIN; a
send goes straight to the raw socket. (``gevent.socket``'s own ``recv_into``
tries first and, on an answer not yet there, raises and catches EAGAIN before
it waits; its ``sendall`` also asks ``getsockopt`` for the timeout each time:
measured here, about 5 µs more per request.) One greenlet per connection, no
monkey-patching: with more workers than connections (c=256 on 64) the limit
is measured with 64 greenlets. HTTP/1.1 only.

``bare_h2``, ``bare_h2_novalidate`` (h2c)
    The ``h2`` library alone: one ``h2.connection.H2Connection`` over one
    ``gevent.socket``, every worker greenlet opening its own stream on it
    (``send_headers`` with END_STREAM, one ``sendall``) and parking on a
    ``Waiter`` until one reader greenlet, feeding ``receive_data``, has seen
    its ``StreamEnded``; body bytes are acknowledged as they come. The first
    runs h2's default configuration, the second turns its header validation
    and normalisation off (as a client that checks its own headers would).
"""

from __future__ import annotations

import sys
from typing import Any

from _common import RequestFn, Spec, drive_gevent, emit, skip
from gevent import socket

BUF_SIZE = 256 * 1024
HEAD_LIMIT = 64 * 1024


def _connect(spec: Spec) -> Any:
    sock = socket.create_connection((spec.host, spec.port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class _RawConn:
    """A connected socket read the way the floor is measured: wait, then ``recv_into``."""

    def __init__(self, spec: Spec) -> None:
        from gevent import get_hub

        self.sock = _connect(spec)  # kept: it owns the file descriptor
        raw = self.raw = self.sock._sock  # the plain socket.socket under gevent's wrapper
        raw.setblocking(False)
        hub = get_hub()
        self.wait = hub.wait
        self.readable = hub.loop.io(raw.fileno(), 1)
        self.writable = hub.loop.io(raw.fileno(), 2)

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:  # each pass sends >= 1 byte or waits for room
            try:
                view = view[self.raw.send(view) :]
            except BlockingIOError:
                self.wait(self.writable)

    def recv_into(self, buf: Any) -> int:
        self.wait(self.readable)
        try:
            return int(self.raw.recv_into(buf))
        except BlockingIOError:  # readiness without data (rare): report nothing read yet
            return -1


def _request_bytes(spec: Spec) -> bytes:
    return f"GET {spec.path} HTTP/1.1\r\nHost: {spec.host}:{spec.port}\r\n\r\n".encode()


def _probe_length(spec: Spec) -> int:
    """The full length (head + body) of the response to our fixed request."""
    sock = _connect(spec)
    try:
        sock.sendall(_request_bytes(spec))
        data = b""
        while b"\r\n\r\n" not in data:  # bounded by HEAD_LIMIT
            chunk = sock.recv(4096)
            if not chunk or len(data) > HEAD_LIMIT:
                raise ConnectionError("no response head from the server")
            data += chunk
        head = data.split(b"\r\n\r\n", 1)[0]
        status = head.split(b"\r\n", 1)[0]
        if status.split(b" ")[1:2] != [b"200"]:
            raise ConnectionError(f"probe response: {status.decode(errors='replace')}")
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                return len(head) + 4 + int(value)
        raise ConnectionError("the response has no Content-Length")
    finally:
        sock.close()


def _bare_worker(spec: Spec, total: int) -> RequestFn:
    sock = _RawConn(spec)
    request = _request_bytes(spec)
    body_len = spec.expect_len
    view = memoryview(bytearray(max(BUF_SIZE, min(total, 4 * 1024 * 1024))))

    def one() -> int:
        sock.send(request)
        got = 0
        while got < total:  # each pass waits for readiness, then reads >= 1 byte or raises
            n = sock.recv_into(view)
            if not n:
                raise ConnectionError("server closed the connection")
            if n > 0:
                got += n
        if got != total:
            raise ConnectionError(f"read {got} bytes, expected {total} (pipelining?)")
        return body_len

    return one


class _Progress:
    """httptools callbacks: counts body bytes, flags the end of a message."""

    __slots__ = ("size", "complete")

    def __init__(self) -> None:
        self.size = 0
        self.complete = False

    def on_body(self, body: bytes) -> None:
        self.size += len(body)

    def on_message_complete(self) -> None:
        self.complete = True


def _httptools_worker(spec: Spec, total: int) -> RequestFn:
    import httptools

    sock = _RawConn(spec)
    request = _request_bytes(spec)
    progress = _Progress()
    parser = httptools.HttpResponseParser(progress)
    view = memoryview(bytearray(BUF_SIZE))
    max_reads = total + 1  # a read yields >= 1 byte; more reads than bytes is a bug

    def one() -> int:
        progress.size = 0
        progress.complete = False
        sock.send(request)
        for _ in range(max_reads):
            n = sock.recv_into(view)
            if not n:
                raise ConnectionError("server closed the connection")
            if n < 0:
                continue
            parser.feed_data(view[:n])
            if progress.complete:
                return progress.size
        raise ConnectionError("response did not complete")

    return one


class _H2Loop:
    """One h2c connection driven by the ``h2`` library, shared by all workers."""

    def __init__(self, spec: Spec, validate: bool) -> None:
        import gevent
        import h2.config
        import h2.connection
        import h2.events
        from gevent.lock import Semaphore

        self.events = h2.events
        self.sock = _connect(spec)
        self.conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(
                client_side=True,
                header_encoding=None,
                validate_outbound_headers=validate,
                normalize_outbound_headers=validate,
                validate_inbound_headers=validate,
                normalize_inbound_headers=validate,
            )
        )
        self.conn.initiate_connection()
        self.write_lock = Semaphore()  # one greenlet at a time in sendall
        self.headers = [
            (b":method", b"GET"),
            (b":scheme", b"http"),
            (b":authority", f"{spec.host}:{spec.port}".encode()),
            (b":path", spec.path.encode()),
        ]
        self.waiting: dict[int, Any] = {}  # stream id -> [waiter, body chunks]
        self.error: BaseException | None = None
        self.flush()
        self.reader = gevent.spawn(self.read_loop)

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            with self.write_lock:
                self.sock.sendall(data)

    def read_loop(self) -> None:
        from gevent import get_hub

        conn = self.conn
        events = self.events
        wake = get_hub().loop.run_callback  # a Waiter is switched to from the hub
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("server closed the connection")
                for ev in conn.receive_data(data):
                    kind = type(ev)
                    if kind is events.DataReceived:
                        self.waiting[ev.stream_id][1].append(ev.data)
                        conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                    elif kind is events.StreamEnded:
                        waiter, chunks = self.waiting.pop(ev.stream_id)
                        wake(waiter.switch, len(b"".join(chunks)))
                    elif kind is events.StreamReset:
                        waiter, _ = self.waiting.pop(ev.stream_id)
                        wake(waiter.throw, ConnectionError(f"stream reset: {ev.error_code}"))
                self.flush()
        except BaseException as exc:  # every parked worker learns of it
            self.error = exc
            for waiter, _ in self.waiting.values():
                wake(waiter.throw, ConnectionError(f"connection failed: {exc!r}"))
            self.waiting.clear()

    def one(self) -> int:
        from gevent._waiter import Waiter

        if self.error is not None:
            raise ConnectionError(f"connection failed: {self.error!r}")
        conn = self.conn
        sid = conn.get_next_available_stream_id()
        waiter = Waiter()
        self.waiting[sid] = [waiter, []]
        conn.send_headers(sid, self.headers, end_stream=True)
        self.flush()
        size: int = waiter.get()
        return size


def main() -> None:
    client, spec = Spec.from_argv(sys.argv)
    if client in ("bare_h2", "bare_h2_novalidate"):
        if spec.protocol != "h2c":
            skip("the bare h2 loop speaks h2c only")
        try:
            import h2  # noqa: F401
        except ImportError:
            skip("h2 not installed")
        loop = _H2Loop(spec, validate=client == "bare_h2")
        emit(drive_gevent(spec, [loop.one] * spec.concurrency))
        return
    if spec.protocol != "h1":
        skip("the bare loops speak HTTP/1.1 only")
    make = {"bare_socket": _bare_worker, "bare_httptools": _httptools_worker}[client]
    if client == "bare_httptools":
        try:
            import httptools  # noqa: F401
        except ImportError:
            skip("httptools not installed")
    total = _probe_length(spec)
    workers = [make(spec, total) for _ in range(spec.connections)]
    emit(drive_gevent(spec, workers))


if __name__ == "__main__":
    main()
