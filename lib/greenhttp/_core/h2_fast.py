"""The fast path of the HTTP/2 session: simple streams run without ``h2``.

The fast path. Most requests are a header block and nothing else (no body, no
CONNECT), and their answers are a header block, DATA and perhaps trailers;
h2 spends about 60 µs of CPU on each such exchange, mostly building frame
objects, running two state machines and decoding HPACK byte by byte. The
session runs those streams itself (:class:`_Fast`): it writes the HEADERS
frame into h2's output buffer (taking the stream id from h2's counter, so h2
never reuses it), splits received bytes into frames, handles HEADERS,
CONTINUATION, DATA and RST_STREAM of those streams, and hands every other
frame, in order, to h2 (settings, pings, GOAWAY, WINDOW_UPDATE, PRIORITY,
and all frames of streams with a body or a tunnel). What h2 would check on
those frames is checked here the same way (padding, flow control, content
length, trailers with END_STREAM, DATA before the response head, 1xx without
END_STREAM), and the connection-level receive window stays h2's.

HPACK on the fast path. Request blocks are encoded without the dynamic
table: a field is a static-table index when name and value match one, else a
literal *without indexing* (*never indexed* for credentials, as before) with
a static name index when there is one. Such a block does not depend on, or
change, the compression state of either side, so the bytes of each field are
cached per connection and the block is their join. h2's encoder is still used
for the slow streams; a table size update it owes the peer (after the peer
lowered SETTINGS_HEADER_TABLE_SIZE) sends the next request through h2, which
puts the update first, as RFC 7541 §4.2 asks. Received blocks are decoded by
h2's decoder (shared by both paths) and cached by their bytes when the bytes
alone decide the result (:func:`_stateless`): no index into the dynamic
table, no insertion into it unless its size is 0 (what nginx announces), no
size update other than to 0. A cached answer also keeps its
:func:`response_head` result, copied for each response.

:class:`FastStreams` holds this part of :class:`greenhttp._core.h2.H2Session`
(the session's own class derives from it and sets up the state it reads):
opening a fast stream, encoding its request, and handling the frames of fast
streams that :meth:`H2Session.receive` splits off. The HPACK helpers are in
:mod:`greenhttp._core.h2_fields`.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from h2.config import H2Configuration
from h2.connection import ConnectionInputs, ConnectionState
from h2.connection import H2Connection as _H2Connection
from h2.errors import ErrorCodes
from h2.exceptions import (
    DenialOfServiceError,
    FlowControlError,
    FrameDataMissingError,
    InvalidBodyLengthError,
    ProtocolError,
)
from hpack import HPACKError, OversizedHeaderListError

from .h2_connection import BAD, DATA, END, INFO, RESET, RESPONSE, _ClientConnection
from .h2_fields import (
    MalformedError,
    _Block,
    _encode_field,
    _stateless,
    response_head,
)

_FRAME_HEAD = struct.Struct(">BHBBL")  # length (24 bits: high byte, low 16), type, flags, stream id
_DATA_T, _HEADERS_T, _RST_T, _CONTINUATION_T = 0x0, 0x1, 0x3, 0x9
_PUSH_PROMISE_T = 0x5
_END_STREAM, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x4, 0x8, 0x20
_MAX_CONTINUATIONS = 64  # as h2: a longer run of CONTINUATION frames is refused
_MAX_CLOSED = 1 << 16  # reset fast streams remembered (h2 keeps as many closed streams of its own)
_BLOCK_CACHE_SIZE = 256  # received header blocks kept, per connection
_BLOCK_CACHE_BYTES = 4096  # longer blocks are not kept
_OUT_CACHE_SIZE = 512  # encoded request fields kept, per connection


def _padded_end(payload: memoryview) -> int:
    """Where a padded frame's content ends (it starts at 1); h2's checks and errors."""
    size = len(payload)
    if not size:
        raise FrameDataMissingError("Frame data missing or invalid")
    pad = payload[0]
    if pad and pad >= size:
        raise ProtocolError("Received frame with invalid padding.")
    return size - pad


class _Fast:
    """A stream the session runs itself: its request went out whole (HEADERS with END_STREAM)."""

    __slots__ = ("head", "final", "expected", "received", "window", "processed")

    def __init__(self, head: bool, window: int) -> None:
        self.head = head  # a HEAD request: the response has no body (RFC 9110 §9.3.2)
        self.final = False  # the final response head arrived
        self.expected: int | None = None  # content-length of the response body
        self.received = 0  # body bytes
        self.window = window  # our receive window, as the peer sees it
        self.processed = 0  # bytes consumed and not yet handed back with WINDOW_UPDATE


def _fast_path_available() -> bool:
    """The h2 internals the fast path writes to are there (h2 4.x)."""
    conn = _H2Connection(config=H2Configuration(client_side=True))
    return (
        type(getattr(conn, "_data_to_send", None)) is bytearray
        and type(getattr(conn, "highest_outbound_stream_id", None)) is int
        and hasattr(conn, "_inbound_flow_control_window_manager")
        and hasattr(conn.encoder, "header_table")
        and hasattr(conn.decoder, "max_allowed_table_size")
    )


_FAST_PATH = _fast_path_available()


class FastStreams:
    """The fast-path half of :class:`greenhttp._core.h2.H2Session` (a mixin: the
    session's ``__init__`` creates the state declared here)."""

    _conn: _ClientConnection
    _fields: dict[tuple[bytes, bytes], tuple[str, str]]
    _fast_path: bool
    _fast: dict[int, _Fast]
    _closed: dict[int, None]
    _window: int
    _cont: tuple[int, bool, list[bytes]] | None
    _blocks: dict[bytes, _Block]
    _encoded: dict[Any, bytes]

    if TYPE_CHECKING:

        def ack_connection(self, size: int) -> None: ...

    def _cached(self, cache: dict[str, bytes], text: str, name: bytes, codec: str = "latin-1") -> bytes:
        """A pseudo-header's bytes, encoded and kept."""
        encoded = _encode_field(name, text.encode(codec), False)
        if len(cache) >= _OUT_CACHE_SIZE:
            cache.clear()
        cache[text] = encoded
        return encoded

    def _fast_usable(self) -> bool:
        """May a new stream take the fast path? (Else h2 opens it, or refuses.)"""
        if not self._fast_path:
            return False
        conn = self._conn
        state = conn.state_machine.state
        return (state is ConnectionState.CLIENT_OPEN or state is ConnectionState.IDLE) and not (
            conn.encoder.header_table.resized  # h2 owes the peer a table size update first
        )

    def _open_fast(self, encoded: bytes, head: bool) -> int:
        """Queue a whole request (HEADERS with END_STREAM) on a new fast stream."""
        conn = self._conn
        if conn.state_machine.state is ConnectionState.IDLE:
            conn.state_machine.process_input(ConnectionInputs.SEND_HEADERS)  # the first stream opens it
        last = conn.highest_outbound_stream_id
        sid = last + 2 if last else 1
        if sid > conn.HIGHEST_ALLOWED_STREAM_ID:
            conn.get_next_available_stream_id()  # raises NoAvailableStreamIDError
        # h2 numbers its own streams after this one (RFC 9113 §5.1.1).
        conn.highest_outbound_stream_id = sid
        n = len(encoded)
        conn._data_to_send += _FRAME_HEAD.pack(n >> 16, n & 0xFFFF, _HEADERS_T, 0x5, sid) + encoded
        self._fast[sid] = _Fast(head, self._window)
        return sid

    def _encode(self, block: list[Any]) -> bytes | None:
        """HPACK for a fast stream's block: no dynamic table; fields cached (module
        docstring). None if a field is not two byte strings (h2 takes those)."""
        cache = self._encoded
        parts = []
        for field in block:
            # A NeverIndexedHeaderTuple equals the plain tuple: key it apart.
            key = field if type(field) is tuple else (field[0], field[1], getattr(field, "indexable", True))
            encoded = cache.get(key)
            if encoded is None:
                name, value = field
                if type(name) is not bytes or type(value) is not bytes:
                    return None
                encoded = _encode_field(name, value, not getattr(field, "indexable", True))
                if len(cache) >= _OUT_CACHE_SIZE:
                    cache.clear()
                cache[key] = encoded
            parts.append(encoded)
        return b"".join(parts)

    def _ack_fast(self, stream_id: int, stream: _Fast, size: int) -> None:
        # h2's rule for its streams (h2.windows.WindowManager): hand the window
        # back once half of it was consumed, or sooner when it is closed.
        processed = stream.processed = stream.processed + size
        window = stream.window
        full = self._window
        if processed >= full // 2 or (window == 0 and processed > min(1024, full // 4)):
            increment = min(processed, full - window)
            stream.processed = 0
            if increment > 0:
                stream.window = window + increment
                self._queue(0x8, stream_id, increment)

    def _terminate(self, exc: ProtocolError) -> None:
        """A fast frame broke the protocol: GOAWAY, as h2 does for its own errors."""
        try:
            self._conn.close_connection(exc.error_code)
        except ProtocolError:
            pass

    def _queue(self, kind: int, stream_id: int, value: int) -> None:
        """A RST_STREAM or WINDOW_UPDATE frame (a 4-byte payload) into h2's output."""
        self._conn._data_to_send += _FRAME_HEAD.pack(0, 4, kind, 0, stream_id) + value.to_bytes(4, "big")

    def _close(self, stream_id: int, by_reset: bool) -> None:
        """A fast stream ends; a reset one is remembered. Frames after the peer's
        END_STREAM go to h2, which answers them as for its own closed streams."""
        del self._fast[stream_id]
        if by_reset:
            closed = self._closed
            closed[stream_id] = None
            if len(closed) > _MAX_CLOSED:
                del closed[next(iter(closed))]

    def _fast_data(self, sid: int, flags: int, payload: memoryview, out: list[tuple[Any, ...]]) -> None:
        # In h2's order: the frame's padding, the connection window, the stream.
        flow = len(payload)
        if flags & _PADDED:
            data = bytes(payload[1 : _padded_end(payload)])
        else:
            data = bytes(payload)
        manager = self._conn._inbound_flow_control_window_manager
        manager.current_window_size -= flow  # h2's window_consumed(), inline
        if manager.current_window_size < 0:
            raise FlowControlError("Flow control window shrunk below 0")
        stream = self._fast[sid]
        if not stream.final:
            self._close(sid, False)
            raise ProtocolError("cannot receive data before headers")
        window = stream.window = stream.window - flow
        if window < 0:
            raise FlowControlError("Flow control window shrunk below 0")
        received = stream.received = stream.received + len(data)
        expected = stream.expected
        end = flags & _END_STREAM
        if expected is not None and (received > expected or (end and received != expected)):
            # RFC 9113 §8.1.1: a stream error; the connection window comes back.
            self.ack_connection(flow)
            self._close(sid, True)
            self._queue(_RST_T, sid, ErrorCodes.PROTOCOL_ERROR)
            out.append((BAD, sid, str(InvalidBodyLengthError(expected, received))))
            return
        out.append((DATA, sid, data, flow))
        if end:
            self._close(sid, False)
            out.append((END, sid, None, None))

    def _fast_headers(self, sid: int, flags: int, payload: memoryview, out: list[tuple[Any, ...]]) -> None:
        start = 0
        stop = len(payload)
        if flags & _PADDED:
            start = 1
            stop = _padded_end(payload)
        if flags & _PRIORITY:
            if len(payload) < start + 5:
                raise FrameDataMissingError("Frame data missing or invalid")
            if int.from_bytes(payload[start : start + 4], "big") & 0x7FFFFFFF == sid:
                raise ProtocolError(f"Stream {sid} may not depend on itself")
            start += 5
        block = bytes(payload[start:stop])
        if flags & _END_HEADERS:
            self._fast_block(sid, bool(flags & _END_STREAM), block, out)
        else:
            self._cont = (sid, bool(flags & _END_STREAM), [block])

    def _fast_continuation(self, kind: int, sid: int, flags: int, payload: memoryview, out: list[tuple[Any, ...]]) -> None:
        cont = self._cont
        if cont is None or kind != _CONTINUATION_T or sid != cont[0]:
            raise ProtocolError("Invalid frame during header block.")
        parts = cont[2]
        parts.append(bytes(payload))
        if len(parts) > _MAX_CONTINUATIONS:
            raise ProtocolError("Too many continuation frames received.")
        if flags & _END_HEADERS:
            self._cont = None
            self._fast_block(sid, cont[1], b"".join(parts), out)

    def _fast_reset(self, sid: int, payload: memoryview, out: list[tuple[Any, ...]]) -> None:
        if len(payload) != 4:
            raise FrameDataMissingError("Frame data missing or invalid")
        if sid in self._fast:  # else reset already: nothing to do
            self._close(sid, True)
            out.append((RESET, sid, int.from_bytes(payload, "big")))

    def _still_valid(self, entry: _Block) -> bool:
        """May a cached block be used in the decoder's present state?"""
        decoder = self._conn.decoder
        size = decoder.header_table.maxsize
        return (
            (size == 0 or not entry.zero)
            and size <= decoder.max_allowed_table_size  # else decoding would raise
            and entry.size <= decoder.max_header_list_size
        )

    def _decode(self, block: bytes) -> _Block:
        """The shared decoder's answer for ``block``, cached when the bytes decide it."""
        decoder = self._conn.decoder
        try:
            headers = decoder.decode(block, raw=True)
        except OversizedHeaderListError as exc:
            raise DenialOfServiceError(f"Oversized header block: {exc}") from exc
        except (HPACKError, IndexError, TypeError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"Error decoding header block: {exc}") from exc
        entry = _Block(list(headers))
        if len(block) <= _BLOCK_CACHE_BYTES:
            kind = _stateless(block)
            if kind:
                entry.zero = kind == 2
                entry.size = sum(32 + len(n) + len(v) for n, v in headers)
                blocks = self._blocks
                if len(blocks) >= _BLOCK_CACHE_SIZE:
                    blocks.clear()
                blocks[block] = entry
        return entry

    def _fast_block(self, sid: int, end: bool, block: bytes, out: list[tuple[Any, ...]]) -> None:
        """A whole header block of a fast stream (HEADERS, and any CONTINUATION)."""
        # First: the decoder's state moves on whatever we do next.
        entry = self._blocks.get(block)
        if entry is None or not self._still_valid(entry):
            entry = self._decode(block)
        stream = self._fast.get(sid)
        if stream is None:
            # Reset already: ignored (RFC 9113 §5.1), answered as h2 answers for its streams.
            self._queue(_RST_T, sid, ErrorCodes.STREAM_CLOSED)
            return
        if not entry.analysed:
            entry.analyse(self._fields)
        # What h2 refuses, as a connection error (h2.stream.H2Stream.receive_headers).
        problem = None
        if entry.informational:
            if end:
                problem = "Cannot set END_STREAM on informational responses"
            elif stream.final:
                problem = "Informational response after final response"
        elif stream.final:
            if not end:
                problem = "Trailers must have END_STREAM set"
        elif entry.bad_length is not None and not stream.head:
            problem = entry.bad_length
        if problem is not None:
            self._close(sid, False)
            raise ProtocolError(problem)
        if stream.final:  # trailers
            self._close(sid, False)
            headers = entry.headers
            try:
                _, fields, _ = response_head(headers, True, self._fields)
            except MalformedError as exc:
                out.append((BAD, sid, str(exc)))
                return
            out.append((END, sid, fields, [part for pair in headers for part in pair]))
            return
        if not entry.informational:
            stream.final = True
            stream.expected = 0 if stream.head else entry.length
        head = entry.head
        if head is None:
            out.append((BAD, sid, entry.error))
        else:
            status, fields, raw = head
            if entry.lists:
                fields = {k: v[:] if type(v) is list else v for k, v in fields.items()}
            else:
                fields = fields.copy()
            out.append((INFO if entry.informational else RESPONSE, sid, status, fields, raw))
        if end:
            self._close(sid, False)
            out.append((END, sid, None, None))
