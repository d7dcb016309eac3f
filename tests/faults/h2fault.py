"""A tiny h2c server for fault tests, on the ``h2`` library's server side.

``H2FaultServer(on_request, on_headers=None)`` accepts connections on
127.0.0.1; each gets an :class:`H2Conn` whose reader greenlet feeds ``h2``
and, for every complete request, calls ``on_request(conn, stream_id,
headers)`` on that greenlet (``on_headers`` likewise as soon as a request's
head arrives, before its body).
The callback answers (:meth:`H2Conn.respond`) or misbehaves on purpose:
:meth:`H2Conn.goaway`, :meth:`H2Conn.reset`, :meth:`H2Conn.send_raw`
(arbitrary bytes, for bad frames), :meth:`H2Conn.stop_reading` (the socket
is not read for a while, so the client's writes back up), or nothing at all.

Kept separate from ``tests/h2_support`` on purpose: that server is built for
well-behaved edge cases and owned by the HTTP/2 work; this one exists to
break the rules, and its callback style keeps each fault a few lines.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.lock
import h2.config
import h2.connection
import h2.events
import h2.exceptions
from gevent.server import StreamServer

__all__ = ["H2Conn", "H2FaultServer", "frame", "serve_ok"]


def frame(
    kind: int, flags: int, stream_id: int, payload: bytes, length: int | None = None
) -> bytes:
    """One raw HTTP/2 frame (RFC 9113 §4.1); ``length`` overrides the announced length."""
    n = len(payload) if length is None else length
    return struct.pack(">I", n)[1:] + bytes((kind, flags)) + struct.pack(">I", stream_id) + payload


class H2Conn:
    """The server side of one connection. Its methods may be called from ``on_request``."""

    def __init__(self, sock: Any, server: H2FaultServer) -> None:
        self.sock = sock
        self.server = server
        self.index = server.accepted  # 1 for the first connection
        config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        self.h2 = h2.connection.H2Connection(config=config)
        self.lock = gevent.lock.RLock()
        self.bodies: dict[int, bytearray] = {}
        self.headers: dict[int, list[tuple[str, str]]] = {}
        self.resets: dict[int, int] = {}
        self.closed = False
        self.resumed = gevent.event.Event()
        self._resume_at = 0.0
        self.h2.initiate_connection()
        self.flush()

    # -- writing ------------------------------------------------------------------
    def flush(self) -> None:
        with self.lock:
            data = self.h2.data_to_send()
        if data:
            self.send_raw(data)

    def send_raw(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            self.closed = True

    def respond(self, stream_id: int, body: bytes = b"ok", status: int = 200) -> None:
        """A complete response, within the client's flow-control windows (small bodies)."""
        with self.lock:
            self.h2.send_headers(
                stream_id,
                [(":status", str(status)), ("content-length", str(len(body)))],
                end_stream=not body,
            )
            if body:
                self.h2.send_data(stream_id, body, end_stream=True)
        self.flush()

    def reset(self, stream_id: int, code: int) -> None:
        with self.lock:
            self.h2.reset_stream(stream_id, code)
        self.flush()

    def goaway(self, last_stream_id: int, code: int = 0) -> None:
        with self.lock:
            self.h2.close_connection(code, last_stream_id=last_stream_id)
            # h2 refuses every frame after its own GOAWAY; a real server still reads
            # the client's frames (SETTINGS acks, WINDOW_UPDATEs) until it closes.
            self.h2.state_machine.state = h2.connection.ConnectionState.SERVER_OPEN
        self.flush()

    def stop_reading(self, seconds: float) -> None:
        """Do not read the socket for ``seconds`` (from when the callback returns); then set ``resumed``."""
        self._resume_at = seconds

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    # -- reading --------------------------------------------------------------------
    def run(self) -> None:
        while not self.closed:
            pause, self._resume_at = self._resume_at, 0.0
            if pause:
                gevent.sleep(pause)  # a server that stopped reading: the stall is the fault itself
                self.resumed.set()
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            try:
                with self.lock:
                    events = self.h2.receive_data(data)
            except h2.exceptions.ProtocolError as exc:
                self.server.errors.append(exc)
                self.flush()
                return
            for ev in events:
                self._on_event(ev)
            self.flush()

    def _on_event(self, ev: Any) -> None:
        if isinstance(ev, h2.events.RequestReceived):
            self.headers[ev.stream_id] = list(ev.headers)
            self.bodies[ev.stream_id] = bytearray()
            if self.server.on_headers is not None:
                self.server.on_headers(self, ev.stream_id, self.headers[ev.stream_id])
        elif isinstance(ev, h2.events.DataReceived):
            self.bodies[ev.stream_id] += ev.data
            with self.lock:
                self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            self.server.requests += 1
            self.server.on_request(self, ev.stream_id, self.headers[ev.stream_id])
        elif isinstance(ev, h2.events.StreamReset):
            self.resets[ev.stream_id] = int(ev.error_code)


def serve_ok(conn: H2Conn, stream_id: int, headers: list[tuple[str, str]]) -> None:
    """Answer with 200 and ``ok <path>``."""
    path = dict(headers).get(":path", "")
    conn.respond(stream_id, b"ok " + path.encode())


class H2FaultServer:
    """A loopback h2c (prior knowledge) server calling ``on_request`` per complete request.

    ``accepted`` counts connections, ``requests`` complete requests, and
    ``errors`` holds the protocol errors ``h2`` raised on the server side.
    """

    def __init__(
        self,
        on_request: Callable[[H2Conn, int, list[tuple[str, str]]], Any],
        on_headers: Callable[[H2Conn, int, list[tuple[str, str]]], Any] | None = None,
    ) -> None:
        self.on_request = on_request
        self.on_headers = on_headers
        self.accepted = 0
        self.requests = 0
        self.errors: list[BaseException] = []
        self.conns: list[H2Conn] = []
        self._server = StreamServer(("127.0.0.1", 0), self._handle)
        self._server.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def _handle(self, sock: Any, _addr: Any) -> None:
        self.accepted += 1
        conn = H2Conn(sock, self)
        self.conns.append(conn)
        try:
            conn.run()
        finally:
            conn.close()

    def stop(self) -> None:
        self._server.stop(timeout=1)
        for conn in self.conns:
            conn.close()
