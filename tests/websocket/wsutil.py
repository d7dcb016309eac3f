"""Helpers for the WebSocket tests: exact server frames, client frames parsed."""

from __future__ import annotations

import base64
import hashlib
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import gevent
import gevent.event

from greenhttp import WebSocket

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def accept_for(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def frame(
    opcode: int,
    payload: bytes = b"",
    *,
    fin: bool = True,
    rsv: int = 0,
    mask: bytes | None = None,
    length: int | None = None,
) -> bytes:
    """One frame as a server (unmasked unless ``mask``) would send it.

    ``rsv`` is the RSV bits as they sit in the first byte (0x40 = RSV1);
    ``length`` overrides the announced payload length."""
    n = len(payload) if length is None else length
    head = bytearray([(0x80 if fin else 0) | rsv | opcode])
    mbit = 0x80 if mask is not None else 0
    if n <= 125:
        head.append(mbit | n)
    elif n <= 0xFFFF:
        head.append(mbit | 126)
        head += struct.pack("!H", n)
    else:
        head.append(mbit | 127)
        head += struct.pack("!Q", n)
    if mask is not None:
        head += mask
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes(head) + payload


def close_frame(code: int | None = None, reason: bytes = b"") -> bytes:
    return frame(8, b"" if code is None else struct.pack("!H", code) + reason)


def deflate(data: bytes, compressor: Any = None) -> bytes:
    """``data`` compressed as one permessage-deflate message (RFC 7692 §7.2.1)."""
    c = compressor or zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(b"\x00\x00\xff\xff")
    return out[:-4]


@dataclass
class ClientFrame:
    fin: bool
    rsv: int
    opcode: int
    payload: bytes
    mask: bytes

    @property
    def close_code(self) -> int | None:
        return struct.unpack("!H", self.payload[:2])[0] if len(self.payload) >= 2 else None

    @property
    def close_reason(self) -> bytes:
        return self.payload[2:]


class WsPeer:
    """The server's side of one connection, after the handshake."""

    def __init__(self, conn: Any, request: Any) -> None:
        self.conn = conn
        self.request = request

    def send(self, data: bytes) -> None:
        self.conn.send(data)

    def read_frame(self, timeout: float = 5.0) -> ClientFrame | None:
        """The next client frame (unmasked); None on EOF. Asserts it is masked."""
        conn = self.conn
        with gevent.Timeout(timeout):
            head = conn.read_exact(2)
            if head is None:
                return None
            b0, b1 = head
            assert b1 & 0x80, "client frames must be masked (RFC 6455 §5.3)"
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", conn.read_exact(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", conn.read_exact(8))[0]
            mask = conn.read_exact(4)
            data = conn.read_exact(n) if n else b""
            assert data is not None
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            return ClientFrame(bool(b0 & 0x80), b0 & 0x70, b0 & 0x0F, payload, mask)

    def expect_close(self, timeout: float = 5.0) -> ClientFrame:
        """Read frames until a close frame; returns it."""
        while True:
            f = self.read_frame(timeout)
            assert f is not None, "EOF before the client's close frame"
            if f.opcode == 8:
                return f

    def answer_close(self, timeout: float = 5.0) -> ClientFrame:
        """Read up to the client's close frame, echo it, close TCP (a polite server)."""
        f = self.expect_close(timeout)
        self.send(frame(8, f.payload))
        self.conn.close()
        return f

    def wait_eof(self, timeout: float = 5.0) -> bool:
        return self.conn.wait_closed(timeout)


def handshake_response(
    request: Any,
    *,
    extensions: str | None = None,
    protocol: str | None = None,
    extra: list[tuple[str, str]] | None = None,
) -> bytes:
    lines = [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Accept: {accept_for(request.header('sec-websocket-key'))}",
    ]
    if extensions is not None:
        lines.append(f"Sec-WebSocket-Extensions: {extensions}")
    if protocol is not None:
        lines.append(f"Sec-WebSocket-Protocol: {protocol}")
    for k, v in extra or []:
        lines.append(f"{k}: {v}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Recorder:
    """Collects a WebSocket's events; ``wait_closed()`` blocks until ``close``."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.events: list[Any] = []
        self.closed = gevent.event.Event()
        self.opened = gevent.event.Event()
        for t in ("open", "message", "error", "close"):
            ws.add_event_listener(t, self._record)

    def _record(self, ev: Any) -> None:
        self.events.append(ev)
        if ev.type == "open":
            self.opened.set()
        if ev.type == "close":
            self.closed.set()

    def wait_open(self, timeout: float = 5.0) -> None:
        assert self.opened.wait(timeout), f"no open event: {self.events}"

    def wait_closed(self, timeout: float = 5.0) -> Any:
        assert self.closed.wait(timeout), f"no close event: {self.events}"
        return self.events[-1]

    @property
    def types(self) -> list[str]:
        return [e.type for e in self.events]

    @property
    def messages(self) -> list[Any]:
        return [e.data for e in self.events if e.type == "message"]


def run(
    ws_server, record, frames, *, binary_type="blob", extensions=None, dispatcher=None, then=None
):
    """Serve ``frames`` after the handshake, then answer (or expect) the close.

    Returns ``(recorder, client_frames)``: the client's events and every frame
    the client sent."""
    sent = []

    def script(peer):
        for f in frames:
            peer.send(f)
        while True:
            f = peer.read_frame()
            if f is None:
                return
            sent.append(f)
            if f.opcode == 8:
                peer.send(frame(8, f.payload[:2]))
                peer.conn.close()
                return

    server = ws_server(script, extensions=extensions)
    ws = WebSocket(server.url(), {"dispatcher": dispatcher} if dispatcher else None)
    ws.binary_type = binary_type
    rec = record(ws)
    if then is not None:
        rec.wait_open()
        then(ws, rec)
    rec.wait_closed()
    return rec, sent


def close_after(n):
    """A ``then`` that closes the socket once ``n`` messages arrived."""

    def then(ws, rec):
        with gevent.Timeout(5):
            while len(rec.messages) < n and ws.ready_state == WebSocket.OPEN:
                gevent.sleep(0.002)
        ws.close(1000)

    return then


def failed_with(rec, sent, code):
    """The client failed the connection with ``code``: it sent that close code, and
    reported error then close (1006: no close frame was processed)."""
    closes = [f for f in sent if f.opcode == 8]
    assert [f.close_code for f in closes] == [code]
    assert rec.types[-2:] == ["error", "close"]
    assert rec.events[-2].error.close_code == code
    close = rec.events[-1]
    assert (close.code, close.was_clean) == (1006, False)
    return rec.events[-2].error
