"""One WebSocket connection: handshake, frames in and out, the closing handshake.

A :class:`Session` owns one greenlet, which performs the opening handshake
and then becomes the connection's only reader: it feeds wsproto's sans-IO
frame decoder and hands whole messages to its owner (``WebSocket`` or
``WebSocketStream``) through four callbacks, called on that greenlet:

* ``_ws_open()``: the handshake succeeded; the state is OPEN;
* ``_ws_message(data, is_text)``: ``str`` or ``bytes``;
* ``_ws_closing()``: the state became CLOSING without the owner asking
  (the server started the closing handshake, or the connection failed);
* ``_ws_closed(code, reason, was_clean, error)``: the state is CLOSED;
  ``error`` is None, or the :class:`WebSocketError` that failed the connection.

Writes never block the caller: a frame goes to the socket at once when the
kernel takes it, and otherwise to a queue that one writer greenlet drains
(the writer "lock" is that single writer). ``buffered_amount`` counts the
payload bytes not yet handed to the kernel.

Over HTTP/2 (RFC 8441) the "socket" is the ``H2Tunnel`` of one stream;
RFC 8441 §6 maps TCP's FIN to END_STREAM and a reset to RST_STREAM
(CANCEL). There is no TIME_WAIT to spare the server there, so once close
frames went both ways the connection is closed at once (RFC 6455 §7.1.1
allows it) instead of waiting for the server to end the stream: the queued
frames (an echoed close frame) are written, then the stream is ended with
END_STREAM if the server already ended its side, else reset. Failing the
connection likewise ends the stream right after the close frame.

Receiving follows RFC 6455 strictly: wsproto rejects bad framing, bad
opcodes, masked frames, fragmented or oversized control frames, reserved
bits and invalid UTF-8; ``handshake.InboundPolicy`` adds RFC 7692 inflation
and the ``max_fragments``/``max_payload_size`` limits, checked on each frame
*header*, before its payload is read; close frames are parsed here.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from typing import Any, cast

from wsproto.frame_protocol import (
    CloseReason,
    FrameDecoder,
    MessageDecoder,
    Opcode,
    ParseFailed,
)

from .. import _debug
from .._abort import AbortController
from .._api.request import bind_signal
from .._net.stream import Transport, UpgradedSocket
from .._runtime import Parker, getcurrent, kill, spawn, start_timer
from ..errors import MessageSizeExceededError, WebSocketError, usv
from . import handshake
from .handshake import InboundPolicy, Negotiated, Target, limits_of

__all__ = [
    "Session",
    "CONNECTING",
    "OPEN",
    "CLOSING",
    "CLOSED",
    "encode_frame",
    "valid_close_code",
]

CONNECTING, OPEN, CLOSING, CLOSED = 0, 1, 2, 3

#: Seconds to wait for the server's close frame, then for it to close the TCP
#: connection (RFC 6455 §7.1.1: the server closes first), before dropping it.
CLOSE_TIMEOUT = 10.0

#: The close frame's reason for a failure, by code; the limits (1008, 1009) take
#: the original's texts from ``InboundPolicy.close_reason``.
_REASONS = {
    CloseReason.PROTOCOL_ERROR: "protocol error",
    CloseReason.INVALID_FRAME_PAYLOAD_DATA: "invalid payload data",
}


_XOR: dict[int, bytes] = {}  # key byte -> translation table, filled on demand


def _xor_table(k: int) -> bytes:
    table = _XOR.get(k)
    if table is None:
        table = _XOR[k] = bytes(b ^ k for b in range(256))
    return table


def encode_frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked client frame (RFC 6455 §5.2, §5.3) with a fresh key.

    Receiving is wsproto's; sending is this one function, because a client
    frame has a single shape (never fragmented, never compressed) and masking
    is its whole cost: small payloads are masked as one big integer XOR,
    larger ones with four ``bytes.translate`` passes.
    """
    n = len(payload)
    key = os.urandom(4)
    if n <= 125:
        head = bytes((0x80 | opcode, 0x80 | n))
    elif n <= 0xFFFF:
        head = struct.pack("!BBH", 0x80 | opcode, 0xFE, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0xFF, n)
    if n < 256:
        if not n:
            return head + key
        keys = (key * ((n >> 2) + 1))[:n]
        masked = (int.from_bytes(payload, "little") ^ int.from_bytes(keys, "little")).to_bytes(
            n, "little"
        )
        return head + key + masked
    buf = bytearray(payload)
    buf[0::4] = buf[0::4].translate(_xor_table(key[0]))
    buf[1::4] = buf[1::4].translate(_xor_table(key[1]))
    buf[2::4] = buf[2::4].translate(_xor_table(key[2]))
    buf[3::4] = buf[3::4].translate(_xor_table(key[3]))
    return head + key + buf


#: What a lost connection raises: socket errors, over HTTP/2 the tunnel's errors
#: (its connection failed, or its client was closed or destroyed), and whatever
#: a custom connector's own socket object raises: any Exception.
_LOST = Exception


def valid_close_code(code: int) -> bool:
    """May a peer send ``code`` in a close frame? RFC 6455 §7.4 and the IANA
    registry: 1000–1003, 1007–1014 and 3000–4999 (1004–1006 and 1015 never)."""
    return 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999


class _CloseTimeout(BaseException):
    """Thrown into the reader when the closing handshake took too long.

    A BaseException, like ``GreenletExit``, so that a listener's ``except
    Exception`` (or the EventTarget's) cannot swallow it."""


class _WriteFailed(BaseException):
    """Thrown into the reader when a write failed on another greenlet."""


class Session:
    """The connection behind one ``WebSocket`` or ``WebSocketStream``.

    Greenlet-safe: any greenlet may call ``send_*``, ``ping`` and ``close``;
    none of them blocks. The owner's callbacks run on the session's greenlet.
    """

    def __init__(
        self,
        owner: Any,
        target: Target,
        protocols: list[str],
        dispatcher: Any,
        owns_dispatcher: bool,
        headers: Any = None,
        signal: Any = None,
    ) -> None:
        self.owner = owner
        self.target = target
        self.protocols = protocols
        self.dispatcher = dispatcher
        self.owns_dispatcher = owns_dispatcher
        self.headers = headers
        self.state = CONNECTING
        self.negotiated = Negotiated()
        self.buffered_amount = 0
        self.max_fragments, self.max_payload_size = limits_of(dispatcher)
        self._abort = AbortController()
        self._user_signal = signal
        self._transport: Transport | None = None
        self._decoder: FrameDecoder | None = None
        self._policy: InboundPolicy | None = None  # the decoder's limits and inflation
        self._messages = MessageDecoder()
        self._parts: list[Any] = []
        self._wqueue: deque[tuple[Any, int, bool, Parker | None]] = deque()
        self._writer: Any = None
        self._write_closed = False  # no message may follow (close frame queued, or a write failed)
        self._write_failed_once = False  # a write failed: nothing more goes out, not even a pong
        self._discard = False  # stop decoding: close frame received, or connection failed
        self._close_sent = False
        self._close_received = False
        self._received: tuple[int, str] = (1005, "")
        self._error: WebSocketError | None = None
        self._timer: Any = None
        self._reader: Any = None
        self._eof = False  # the server closed its side (TCP FIN, or END_STREAM over HTTP/2)
        self._done = False  # HTTP/2: the closing handshake is complete; stop reading
        self._unbind: Any = None  # detaches the user's abort signal
        self._greenlet = spawn(self._main)

    # -- the session greenlet ----------------------------------------------------------
    def _main(self) -> None:
        self._reader = getcurrent()
        try:
            opened = self._handshake()
            if opened is not None:
                self._start(*opened)
        finally:
            # Reading is over: the writer and the close timer no longer interrupt this
            # greenlet. One of them may have sent its interruption just before (at most
            # one each); it then lands while _finish waits for the writer, and
            # _finish, safe to run again, starts over.
            self._reader = None
            for _ in range(3):
                try:
                    self._finish()
                    break
                except (_WriteFailed, _CloseTimeout):
                    continue

    def _handshake(self) -> tuple[Any, Negotiated] | None:
        """Run the opening handshake; None (with ``_error`` set) if it failed."""
        signal = self._abort.signal
        try:
            if self._user_signal is not None:
                self._unbind = bind_signal(self._user_signal, self._abort.abort)
            sock, negotiated = handshake.perform(
                self.dispatcher, self.target, self.protocols, self.headers, signal
            )
        except Exception as exc:
            if self._error is None:
                if signal.aborted:
                    self._error = _failure("the opening handshake was aborted", 1006, exc)
                else:
                    self._error = _failure(f"the opening handshake failed: {exc}", 1006, exc)
                self._log_error(self._error)
            return None
        if signal.aborted:  # close() or the signal raced with the 101
            sock.close()
            if self._error is None:
                self._error = _failure("the opening handshake was aborted", 1006)
            return None
        if self._unbind is not None:  # the user's signal aborts the handshake only: let it go
            self._unbind()
            self._unbind = None
        return sock, negotiated

    def _start(self, sock: Any, negotiated: Negotiated) -> None:
        head = b""
        if isinstance(sock, UpgradedSocket):
            # Bytes the server sent after its 101 are replayed first; the plain
            # socket underneath gets the transport's fast path.
            head, sock = sock._head, sock._sock
        self._transport = Transport(sock)
        self._policy = InboundPolicy(
            self.max_fragments, self.max_payload_size, negotiated.deflate, negotiated.reset_context
        )
        self._decoder = FrameDecoder(client=True, extensions=[self._policy])
        self.negotiated = negotiated
        self.state = OPEN
        if _debug.enabled(_debug.websocket):
            try:
                address = sock.getpeername()
            except (OSError, AttributeError):  # a custom connector's socket-like object
                address = None
            if isinstance(address, tuple) and len(address) >= 2:
                _debug.websocket.debug("connection opened %s:%s", address[0], address[1])
            else:  # a Unix socket's path (a str) is no IP address
                _debug.websocket.debug("connection opened")
        self.owner._ws_open()
        self._read_loop(head)

    def _read_loop(self, head: bytes) -> None:
        transport = self._transport
        decoder = self._decoder
        assert transport is not None and decoder is not None
        buf = bytearray(65536)
        view = memoryview(buf)
        try:
            if head:
                decoder.receive_bytes(head)
                self._decode()
            wait_first = True
            while not self._done:
                n = transport.recv_into(view, wait_first)
                if n == 0:
                    self._eof = True
                    return
                wait_first = n < 65536
                if self._discard:
                    continue
                decoder.receive_bytes(view[:n])  # type: ignore[arg-type]  # any buffer works
                self._decode()
        except _CloseTimeout:
            return
        except _WriteFailed:
            return
        except _LOST as exc:
            if not self._close_received and self._error is None:
                self._error = _failure(f"the connection was lost: {exc}", 1006, exc)
                self._log_error(self._error)

    def _decode(self) -> None:
        """Turn the buffered bytes into frames and the frames into messages."""
        decoder = self._decoder
        assert decoder is not None
        buffer = decoder.buffer
        messages = self._messages
        parts = self._parts
        while not self._discard and len(buffer):  # an empty buffer yields no frame
            try:
                frame = decoder.process_buffer()
                if frame is None:
                    return
                opcode = frame.opcode
                payload = cast(bytes, frame.payload)  # the frame decoder's payloads are bytes
                if opcode < 8:
                    if (
                        frame.frame_finished
                        and frame.message_finished
                        and messages.opcode is None
                        and opcode is not Opcode.CONTINUATION
                    ):
                        # A whole message in one frame (the common case): no assembly.
                        if opcode is Opcode.TEXT:
                            self._message(payload.decode("utf-8"), True)
                        else:
                            self._message(payload, False)
                        continue
                    frame = messages.process_frame(frame)
                    parts.append(frame.payload)
                    if frame.message_finished:
                        self._deliver(frame.opcode)
                elif opcode is Opcode.PING:
                    if _debug.enabled(_debug.websocket):
                        _debug.websocket.debug("ping received")
                    # RFC 6455 §5.5.2: a pong is due unless a close frame was received
                    # (nothing is decoded after one), so also after our own close frame,
                    # which it follows on the wire; not once a write failed.
                    if not self._write_failed_once:
                        self._write(encode_frame(0xA, payload), 0)
                elif opcode is Opcode.PONG:
                    if _debug.enabled(_debug.websocket):
                        _debug.websocket.debug("pong received")
                else:
                    self._on_close_frame(payload)
            except ParseFailed as exc:
                code = exc.code
                reason = _REASONS.get(code, "protocol error")
                detail = str(exc)
                policy = self._policy
                if policy is not None and policy.failure:
                    # Refused by the policy: wsproto says only "error in extension".
                    detail = policy.failure
                    reason = policy.close_reason or reason
                error: BaseException | None = None
                if code == CloseReason.MESSAGE_TOO_BIG:
                    error = MessageSizeExceededError(reason)
                self.fail(int(code), reason, error, detail=detail)
            except UnicodeDecodeError as exc:
                self.fail(
                    1007, "invalid payload data", detail=f"a text message is not UTF-8: {exc}"
                )

    def _message(self, data: Any, is_text: bool) -> None:
        if self.state == OPEN:
            self.owner._ws_message(data, is_text)

    def _deliver(self, opcode: Opcode) -> None:
        parts = self._parts
        if len(parts) == 1:
            data = parts[0]
        elif opcode is Opcode.TEXT:
            data = "".join(parts)
        else:
            data = b"".join(parts)
        parts.clear()
        self._message(data, opcode is Opcode.TEXT)

    def _on_close_frame(self, payload: bytes) -> None:
        """RFC 6455 §5.5.1 and §7.1.5: parse, check, and answer a close frame."""
        if len(payload) == 1:
            self.fail(1002, "protocol error", detail="a close frame with a 1-byte payload")
            return
        if payload:
            code = int.from_bytes(payload[:2], "big")
            if not valid_close_code(code):
                self.fail(1002, "protocol error", detail=f"invalid close code {code}")
                return
            try:
                reason = payload[2:].decode("utf-8")
            except UnicodeDecodeError:
                self.fail(1007, "invalid payload data", detail="the close reason is not UTF-8")
                return
        else:
            code, reason = 1005, ""
        self._close_received = True
        self._received = (code, reason)
        self._discard = True
        if not self._close_sent:
            # Echo the code only (no code stays no code), then let the server close TCP.
            self._set_closing()
            self._send_close(None if code == 1005 else code, "")
        if self.negotiated.http2:
            self._done = True  # close frames went both ways: nothing more to read
            return
        self._arm_timeout(restart=True)

    # -- closing --------------------------------------------------------------------
    def _set_closing(self) -> None:
        if self.state < CLOSING:
            self.state = CLOSING
            self.owner._ws_closing()

    def _send_close(self, code: int | None, reason: str, then_shutdown: bool = False) -> None:
        self._close_sent = True
        if self._write_closed:
            return
        payload = b"" if code is None else struct.pack("!H", code) + reason.encode("utf-8")
        self._write(encode_frame(0x8, payload), 0, then_shutdown)
        self._write_closed = True

    def _arm_timeout(self, restart: bool = False) -> None:
        """Bound the wait for the server's close frame, or (``restart``) for its FIN."""
        if self._timer is not None:
            if not restart:
                return
            self._timer.close()
        self._timer = start_timer(CLOSE_TIMEOUT, self._on_timeout)

    def _on_timeout(self) -> None:
        self._timer = None
        if self.state != CLOSED:
            kill(self._reader, _CloseTimeout())

    def close(self, code: int | None = None, reason: str = "") -> None:
        """Start the closing handshake (or abort the opening one). Never blocks.

        ``code`` and ``reason`` were checked by the caller; a reason needs a code.
        """
        if self.state == CONNECTING:
            self.state = CLOSING
            self._error = _failure("the connection was closed before it opened", 1006)
            self._abort.abort(self._error)
            return
        if self.state != OPEN:
            return
        self.state = CLOSING
        self._send_close(code, reason)
        self._arm_timeout()

    def fail(
        self, code: int, reason: str, cause: BaseException | None = None, *, detail: str = ""
    ) -> None:
        """_Fail the WebSocket Connection_ (RFC 6455 §7.1.7): send a close frame with
        ``code``, stop processing what arrives, half-close, and wait for the server
        to close the TCP connection."""
        if self.state == CLOSED or self._discard and self._error is not None:
            return
        self._error = _failure(detail or reason, code, cause, reason)
        self._log_error(self._error)
        self._discard = True
        self._parts.clear()
        self._set_closing()
        self._send_close(code, reason, then_shutdown=True)
        if self.negotiated.http2:
            # The stream's RST_STREAM cannot overtake the close frame written before
            # it (a TCP reset can discard it): no need to wait for the server.
            self._done = True
            return
        self._arm_timeout()

    def _finish(self) -> None:
        """The connection is closed: release everything, then tell the owner."""
        if self.state == CLOSED:
            return
        if self._unbind is not None:
            self._unbind()
            self._unbind = None
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        transport = self._transport
        if transport is not None and self.negotiated.http2 and (self._done or self._eof):
            # RFC 8441 §6: write what is queued (an echoed close frame) first; then
            # END_STREAM if the server ended its side, else close() resets the stream.
            if self._writer is not None:
                self._writer.join(CLOSE_TIMEOUT)
            if (self._eof or getattr(transport.sock, "at_eof", False)) and not self._wqueue:
                transport.shutdown_write()
        if self._writer is not None:
            kill(self._writer)
            self._writer = None
        self._drop_queue(_failure("the WebSocket closed before the data was sent", 1006))
        if transport is not None:
            transport.close()
        if self.owns_dispatcher:
            try:
                self.dispatcher.destroy()
            except Exception:  # pragma: no cover - destroying an idle client does not fail
                pass
        if self._close_received:
            code, reason = self._received
            was_clean = self._close_sent and self._error is None
        else:
            code, reason, was_clean = 1006, "", False
        if not was_clean and self._error is None:
            self._error = _failure("the connection closed without a close frame", 1006)
            self._log_error(self._error)
        self.state = CLOSED
        if _debug.enabled(_debug.websocket):
            _debug.websocket.debug("closed connection to %s - %s %s", self.target.url, code, reason)
        self.owner._ws_closed(code, reason, was_clean, None if was_clean else self._error)

    # -- writing --------------------------------------------------------------------
    def send_text(self, text: str, wait: bool = False) -> Parker | None:
        """Send a text frame (the caller checked the state). Never blocks.

        With ``wait``, returns a :class:`Parker` that is set once the frame is
        written, or None when it was written at once (or dropped)."""
        if self._write_closed:
            return None
        if not text.isascii():  # (O(1): ASCII text needs no check)
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates: a USVString replaces them
                data = usv(text).encode("utf-8")
            return self._write(encode_frame(0x1, data), len(data), wait=wait)
        return self._write(encode_frame(0x1, text.encode("ascii")), len(text), wait=wait)

    def send_binary(self, data: Any, wait: bool = False) -> Parker | None:
        """Send a binary frame; as :meth:`send_text`."""
        if self._write_closed:
            return None
        return self._write(encode_frame(0x2, data), len(data), wait=wait)

    def ping(self, payload: bytes) -> None:
        """Queue a ping frame when the connection is open. Never blocks."""
        if self.state == OPEN and not self._write_closed:
            self._write(encode_frame(0x9, payload), 0)

    def _write(
        self, data: Any, amount: int, then_shutdown: bool = False, wait: bool = False
    ) -> Parker | None:
        """Write now what the kernel takes; queue the rest for the writer greenlet."""
        transport = self._transport
        if transport is None or transport.closed:
            return None
        self.buffered_amount += amount
        if not self._wqueue and self._writer is None and transport.fast:
            try:
                sent = transport.try_send(data)
            except _LOST as exc:
                self._write_failed(exc)
                return None
            if sent == len(data):
                self.buffered_amount -= amount
                if then_shutdown:
                    transport.shutdown_write()
                return None
            data = memoryview(data)[sent:]
        parker = Parker() if wait else None
        self._wqueue.append((data, amount, then_shutdown, parker))
        if self._writer is None:
            self._writer = spawn(self._write_loop)
        return parker

    def _write_loop(self) -> None:
        transport = self._transport
        queue = self._wqueue
        assert transport is not None
        try:
            while queue:
                data, amount, then_shutdown, parker = queue[0]
                transport.sendall(data)
                queue.popleft()
                self.buffered_amount -= amount
                if then_shutdown:
                    transport.shutdown_write()
                if parker is not None:
                    parker.set()
        except _LOST as exc:
            self._write_failed(exc)
        finally:
            if self._writer is getcurrent():
                self._writer = None

    def _drop_queue(self, error: WebSocketError) -> None:
        """Forget unsent frames; whoever waits for one of them gets ``error``."""
        for entry in self._wqueue:
            if entry[3] is not None:
                entry[3].set_exception(error)
        self._wqueue.clear()

    def _write_failed(self, exc: BaseException) -> None:
        self._write_closed = True
        self._write_failed_once = True
        self._drop_queue(_failure(f"the connection was lost: {exc}", 1006, exc))
        if self.state == CLOSED:
            return
        if self._error is None and not self._close_received:
            self._error = _failure(f"the connection was lost: {exc}", 1006, exc)
            self._log_error(self._error)
        self._discard = True
        if self._reader is not None and self._reader is not getcurrent():
            kill(self._reader, _WriteFailed())

    @staticmethod
    def _log_error(error: BaseException) -> None:
        if _debug.enabled(_debug.websocket):
            _debug.websocket.debug("connection errored - %s", error)


def _failure(
    message: str, code: int, cause: BaseException | None = None, reason: str = ""
) -> WebSocketError:
    """A WebSocketError for a failed connection; its code may be one that
    ``WebSocketError``'s constructor refuses (1002, 1006…)."""
    err = WebSocketError._closed_with(message, code, reason)
    if cause is not None:
        err.__cause__ = cause
    return err
