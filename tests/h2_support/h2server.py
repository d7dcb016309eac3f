"""A scripted HTTP/2 server on the ``h2`` library's server side, for edge-case tests.

Each accepted connection gets an :class:`H2ServerConn`: one reader greenlet
feeds h2 and files complete requests into a queue; the test's handler
(``handler(conn)``, run in the connection's greenlet) takes them with
:meth:`H2ServerConn.next_request` and answers with :meth:`respond`, or does
something odd on purpose (GOAWAY, RST_STREAM, malformed headers, a slow
window). Writes are serialised by a lock; bodies respect the client's flow
control windows. Everything is stopped by the ``make_h2_server`` fixture.
"""

from __future__ import annotations

import socket as stdsocket
import ssl
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.lock
import gevent.queue
import h2.config
import h2.connection
import h2.events
from gevent import socket as gsocket
from gevent.server import StreamServer


class H2Request:
    """One request as the server saw it."""

    def __init__(self, stream_id: int, headers: list[tuple[str, str]]) -> None:
        self.stream_id = stream_id
        self.headers = headers
        self._body = bytearray()
        self.ended = False
        self.reset_code: int | None = None
        self.trailers: list[tuple[str, str]] | None = None
        self.done = gevent.event.Event()
        self.chunks: gevent.queue.Queue = gevent.queue.Queue()  # body chunks as they come; None at the end

    @property
    def body(self) -> bytes:
        return bytes(self._body)

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    @property
    def path(self) -> str:
        return self.header(":path") or ""

    @property
    def method(self) -> str:
        return self.header(":method") or ""


class H2ServerConn:
    """The server side of one connection. ``respond`` and friends may be called from any greenlet."""

    def __init__(self, sock: Any, server: H2Server) -> None:
        self.sock = sock
        self.server = server
        config = h2.config.H2Configuration(
            client_side=False,
            header_encoding="utf-8",
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
        )
        self.h2 = h2.connection.H2Connection(config=config)
        self.lock = gevent.lock.RLock()
        self.incoming: gevent.queue.Queue = gevent.queue.Queue()  # requests whose END_STREAM came
        self.opened: gevent.queue.Queue = gevent.queue.Queue()  # requests as their HEADERS came
        self.streams: dict[int, H2Request] = {}
        self.events: list[Any] = []  # every h2 event, in order
        self.closed = gevent.event.Event()
        self.auto_ack = server.auto_ack
        self.open_now = 0
        self.max_open = 0
        self._window = gevent.event.Event()
        self.greenlets: list[Any] = []
        self.h2.initiate_connection()
        if server.settings:
            # A second SETTINGS frame, in force once the client acknowledges it
            # (RFC 9113 §6.5.3), as a server that changes its defaults does.
            self.h2.update_settings(server.settings)
        self.flush()
        self.reader = gevent.spawn(self._read_loop)

    # -- reading -----------------------------------------------------------------
    def _read_loop(self) -> None:
        try:
            while True:
                try:
                    data = self.sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    return
                with self.lock:
                    events = self.h2.receive_data(data)
                    for ev in events:
                        self._on_event(ev)
                self.flush()
        except Exception as exc:  # a protocol error from the client: record it
            self.server.errors.append(exc)
        finally:
            self.closed.set()
            self.incoming.put(None)
            self.opened.put(None)
            self._wake_window()

    def _on_event(self, ev: Any) -> None:
        self.events.append(ev)
        if isinstance(ev, h2.events.RequestReceived):
            req = H2Request(ev.stream_id, list(ev.headers))
            self.streams[ev.stream_id] = req
            self.server.requests.append(req)
            self.opened.put(req)
            self.open_now += 1
            self.max_open = max(self.max_open, self.open_now)
        elif isinstance(ev, h2.events.DataReceived):
            req = self.streams[ev.stream_id]
            req._body += ev.data
            req.chunks.put(ev.data)
            if self.auto_ack:
                self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.TrailersReceived):
            self.streams[ev.stream_id].trailers = list(ev.headers)
        elif isinstance(ev, h2.events.StreamEnded):
            req = self.streams[ev.stream_id]
            req.ended = True
            req.chunks.put(None)
            self.incoming.put(req)
        elif isinstance(ev, h2.events.StreamReset):
            req = self.streams.get(ev.stream_id)
            if req is not None:
                req.reset_code = int(ev.error_code)
                self._stream_closed(req)
            self._wake_window()
        elif isinstance(ev, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
            self._wake_window()

    def _stream_closed(self, req: H2Request) -> None:
        if not req.done.is_set():
            req.done.set()
            self.open_now -= 1

    def _wake_window(self) -> None:
        ev, self._window = self._window, gevent.event.Event()
        ev.set()

    def next_request(self, timeout: float = 5.0) -> H2Request | None:
        """The next complete request (its END_STREAM arrived); None once the client closed."""
        return self.incoming.get(timeout=timeout)

    # -- writing -----------------------------------------------------------------------
    def flush(self) -> None:
        with self.lock:
            data = self.h2.data_to_send()
            if data:
                try:
                    self.sock.sendall(data)
                except OSError:
                    pass

    def send_headers(self, sid: int, status: int = 200, headers: Any = (), end: bool = False) -> None:
        block = [(":status", str(status)), *headers]
        with self.lock:
            self.h2.send_headers(sid, block, end_stream=end)
            if end:
                self._stream_closed(self.streams[sid])
        self.flush()

    def send_body(self, sid: int, data: bytes, end: bool = True) -> bool:
        """Send ``data`` as the client's windows allow (blocking this greenlet); False if reset."""
        view = memoryview(data)
        off = 0
        while True:
            with self.lock:
                req = self.streams[sid]
                if req.reset_code is not None or self.closed.is_set():
                    return False
                waiter = self._window
                window = self.h2.local_flow_control_window(sid)
                n = min(window, self.h2.max_outbound_frame_size, len(view) - off)
                if n > 0 or (off == len(view)):
                    last = off + n == len(view)
                    self.h2.send_data(sid, view[off : off + n].tobytes(), end_stream=end and last)
                    off += n
                    if end and last:
                        self._stream_closed(req)
            self.flush()
            if off == len(view):
                return True
            if n <= 0:
                waiter.wait(5)

    def respond(
        self,
        sid: int,
        status: int = 200,
        body: bytes = b"ok",
        headers: Any = (),
        trailers: Any = None,
    ) -> None:
        hdrs = list(headers)
        if trailers is None and not any(k == "content-length" for k, _ in hdrs):
            hdrs.append(("content-length", str(len(body))))
        self.send_headers(sid, status, hdrs, end=not body and trailers is None)
        if body:
            self.send_body(sid, body, end=trailers is None)
        if trailers is not None:
            with self.lock:
                self.h2.send_headers(sid, list(trailers), end_stream=True)
                self._stream_closed(self.streams[sid])
            self.flush()

    def respond_later(self, *args: Any, **kw: Any) -> None:
        """``respond`` in a greenlet of its own (so a slow stream does not hold the others)."""
        self.greenlets.append(gevent.spawn(self.respond, *args, **kw))

    def reset(self, sid: int, code: int) -> None:
        with self.lock:
            self.h2.reset_stream(sid, code)
            self._stream_closed(self.streams[sid])
        self.flush()

    def goaway(self, last_stream_id: int, code: int = 0) -> None:
        with self.lock:
            self.h2.close_connection(code, last_stream_id=last_stream_id)
            # h2 refuses frames after its own GOAWAY; a real server still finishes
            # the streams it accepted, so keep the state machine open.
            self.h2.state_machine.state = h2.connection.ConnectionState.SERVER_OPEN
        self.flush()

    def update_settings(self, settings: dict[int, int]) -> None:
        with self.lock:
            self.h2.update_settings(settings)
        self.flush()

    def close(self) -> None:
        try:
            self.sock.shutdown(stdsocket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def serve_ok(conn: H2ServerConn) -> None:
    """Answer every request with 200 and a body naming its path."""
    while True:
        req = conn.next_request(timeout=30)
        if req is None:
            return
        conn.respond(req.stream_id, body=b"ok " + req.path.encode())


class H2Server:
    """A loopback h2 server (h2c by prior knowledge, or TLS with ALPN h2)."""

    def __init__(
        self,
        handler: Callable[[H2ServerConn], Any],
        *,
        settings: dict[int, int] | None = None,
        auto_ack: bool = True,
        unix_path: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.handler = handler
        self.settings = settings
        self.auto_ack = auto_ack
        self.accepted = 0
        self.conns: list[H2ServerConn] = []
        self.requests: list[H2Request] = []
        self.errors: list[BaseException] = []
        kw = {"ssl_context": ssl_context} if ssl_context is not None else {}
        if unix_path is not None:
            listener = gsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
            listener.bind(unix_path)
            listener.listen(128)
            self._server = StreamServer(listener, self._handle, **kw)
        else:
            self._server = StreamServer(("127.0.0.1", 0), self._handle, **kw)
        self._server.start()
        self.tls = ssl_context is not None

    @property
    def port(self) -> int:
        return self._server.server_port

    @property
    def origin(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _handle(self, sock: Any, _addr: Any) -> None:
        self.accepted += 1
        if sock.family != stdsocket.AF_UNIX:
            # As real servers do: a HEADERS frame and the DATA after it, written one after
            # the other, must not wait for the client's delayed ACK (Nagle's algorithm).
            sock.setsockopt(stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY, 1)
        conn = H2ServerConn(sock, self)
        self.conns.append(conn)
        try:
            self.handler(conn)
            conn.closed.wait(10)
        except (OSError, gevent.queue.Empty):
            pass
        except gevent.GreenletExit:
            pass
        except AssertionError as exc:
            self.errors.append(exc)
        finally:
            gevent.killall(conn.greenlets + [conn.reader])
            conn.close()

    def stop(self) -> None:
        self._server.stop(timeout=1)
        for conn in self.conns:
            gevent.killall(conn.greenlets + [conn.reader])
            conn.close()
