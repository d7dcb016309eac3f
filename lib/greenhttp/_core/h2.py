"""The client side of one HTTP/2 connection, sans-IO, over the ``h2`` library.

:class:`H2Session` wraps ``h2.connection.H2Connection`` and gives the driver
one shape to work with, like the HTTP/1.1 parser does: ``receive(data)``
returns a list of plain tuples (our events, first item the kind), the
``send_*`` methods queue frames, and ``data_to_send()`` returns the bytes to
write. It also builds request header blocks, turns response header blocks
into the library's header dict, and keeps the GOAWAY bookkeeping.

Events (``kind, stream_id, ...``):

=========== ================================================================
``RESPONSE`` ``(RESPONSE, sid, status, headers_dict, raw_head)`` final head
``INFO``     ``(INFO, sid, status, headers_dict, raw_head)`` a 1xx head
``DATA``     ``(DATA, sid, data, flow_controlled_length)``
``END``      ``(END, sid, trailers_or_None, raw_trailers_or_None)`` (raw: flat list)
``RESET``    ``(RESET, sid, error_code)`` the peer reset the stream
``SETTINGS`` ``(SETTINGS, 0)`` the peer's settings changed (read the properties)
``WINDOW``   ``(WINDOW, sid)`` a send window opened (``sid`` 0: the connection)
``GOAWAY``   ``(GOAWAY, last_stream_id, error_code, debug_data)``
``PONG``     ``(PONG, 0, payload)`` a PING we sent was acknowledged
``BAD``      ``(BAD, sid, reason)`` a malformed header block: reset that stream
=========== ================================================================

What the ``h2`` library does its own way is handled here:

* On GOAWAY, h2 4.x moves the connection to CLOSED and drops the frames it
  had queued; a later DATA or HEADERS frame for a stream the peer promised to
  finish (at or below the last stream id) then raises ``ProtocolError``.
  RFC 9113 §6.8 says those streams complete, so :class:`_ClientConnection`
  keeps the connection state open and the queued bytes; the session refuses
  new streams itself (:attr:`H2Session.goaway`).
* ``acknowledge_received_data`` hands window back to the connection and the
  stream together. A paused response must hold back its *stream* window only
  (other streams go on), so :meth:`H2Session.ack_connection` and
  :meth:`H2Session.ack_stream` split the two.
* A malformed response (bad header block, body length not matching
  ``content-length``) ends the whole connection in h2. RFC 9113 §8.1.1 makes
  it a stream error: h2's inbound header checks are off in favour of
  :func:`response_head`, and a body length error resets only its stream
  (``BAD`` events).
* h2 counts open streams by walking all of them for every new stream; the
  driver enforces the peer's limit itself, so the walk runs only now and then.
* h2 refuses a frame longer than SETTINGS_MAX_FRAME_SIZE only once all of
  it has arrived; :class:`_FrameBuffer` refuses it at its header.

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
"""

from __future__ import annotations

import re
import struct
from typing import Any

from h2.config import H2Configuration
from h2.connection import ConnectionInputs, ConnectionState
from h2.connection import H2Connection as _H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    InformationalResponseReceived,
    PingAckReceived,
    RemoteSettingsChanged,
    ResponseReceived,
    StreamEnded,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)
from h2.exceptions import (
    DenialOfServiceError,
    FlowControlError,
    FrameDataMissingError,
    InvalidBodyLengthError,
    ProtocolError,
    StreamClosedError,
)
from h2.frame_buffer import FrameBuffer
from h2.settings import SettingCodes, Settings
from hpack import HPACKError, NeverIndexedHeaderTuple, OversizedHeaderListError
from hpack.table import HeaderTable
from hyperframe.frame import WindowUpdateFrame

from ..errors import InformationalError

__all__ = [
    "H2Session",
    "ProtocolError",
    "ErrorCodes",
    "RESPONSE",
    "INFO",
    "DATA",
    "END",
    "RESET",
    "SETTINGS",
    "WINDOW",
    "GOAWAY",
    "PONG",
    "BAD",
    "DEFAULT_WINDOW",
    "MalformedError",
    "response_head",
    "error_name",
]

RESPONSE, INFO, DATA, END, RESET, SETTINGS, WINDOW, GOAWAY, PONG, BAD = range(10)

#: RFC 9113 §6.9.2: every window starts at 65535 until SETTINGS or WINDOW_UPDATE.
DEFAULT_WINDOW = 65535

# RFC 9113 §8.2.2: connection-specific fields are malformed in HTTP/2.
# (connection, keep-alive, transfer-encoding and upgrade never get this far:
# the request refuses or consumes them.) "te" may only say "trailers".
_CONNECTION_SPECIFIC = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "http2-settings"}
)
# RFC 7541 §7.1.3: never put credentials into the shared compression table.
_SENSITIVE = frozenset({"authorization", "proxy-authorization"})

_METHODS = {m: (b":method", m.encode()) for m in ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")}
_COLON_JOIN = b": ".join
# RFC 9113 §8.2.1: lower-case token names; values without NUL, CR, LF or surrounding blanks.
_NAME_RE = re.compile(rb"[!#$%&'*+.^_`|~0-9a-z-]+\Z")
_VALUE_RE = re.compile(rb"(?:[^\x00\r\n\t ](?:[^\x00\r\n]*[^\x00\r\n\t ])?)?\Z")


def error_name(code: int) -> str:
    """``REFUSED_STREAM`` for 7, and so on; the number for codes h2 does not know."""
    try:
        return ErrorCodes(code).name
    except ValueError:
        return str(code)


class _MalformedBody:
    """Our event: a response body disagreed with its content-length (the stream is reset)."""

    __slots__ = ("stream_id", "reason")

    def __init__(self, stream_id: int, reason: str) -> None:
        self.stream_id = stream_id
        self.reason = reason


class _FrameBuffer(FrameBuffer):
    """h2's frame buffer, refusing an oversized frame as soon as its header is in.

    h2 checks a frame's length against SETTINGS_MAX_FRAME_SIZE only once the
    whole announced length (up to 16 MiB) has arrived; until then every
    stream waits. RFC 9113 §4.2 makes it a connection error at once.
    """

    def __next__(self) -> Any:
        data = self._data
        if len(data) >= 9:
            length = int.from_bytes(data[:3], "big")
            if length > self.max_frame_size:
                self._validate_frame_length(length)
        return super().__next__()


class _ClientConnection(_H2Connection):
    """``h2``'s connection, kept open after GOAWAY so announced streams can finish."""

    def __init__(self, config: H2Configuration) -> None:
        super().__init__(config=config)
        self.incoming_buffer = _FrameBuffer(server=False)
        self.held_output = b""
        self._counts = 0

    def _receive_data_frame(self, frame: Any) -> Any:
        try:
            return super()._receive_data_frame(frame)
        except InvalidBodyLengthError as exc:
            # RFC 9113 §8.1.1: a malformed response is a stream error; h2 would
            # end the whole connection. Hand the connection window back and
            # reset just this stream.
            frames: list[Any] = []
            increment = self._inbound_flow_control_window_manager.process_bytes(frame.flow_controlled_length)
            if increment:
                update = WindowUpdateFrame(0)
                update.window_increment = increment
                frames.append(update)
            stream = self.streams.get(frame.stream_id)
            if stream is not None and not stream.closed:
                frames.extend(stream.reset_stream(ErrorCodes.PROTOCOL_ERROR))
            return frames, [_MalformedBody(frame.stream_id, str(exc))]

    @property
    def open_outbound_streams(self) -> int:
        # h2 walks every stream to count them on each new stream, and drops the
        # closed ones as it goes. The driver keeps within the peer's limit
        # itself, so walk (and clean up) only every 32nd time.
        self._counts += 1
        if self._counts & 31:
            return 0
        return super().open_outbound_streams

    def _receive_goaway_frame(self, frame: Any) -> Any:
        state = self.state_machine.state
        # h2 drops what it had queued (acks, window updates); keep it.
        self.held_output += self.data_to_send()
        frames, events = super()._receive_goaway_frame(frame)
        if state is ConnectionState.CLIENT_OPEN:
            self.state_machine.state = state
        return frames, events


# -- the fast path (see the module docstring) -----------------------------------------------

_FRAME_HEAD = struct.Struct(">BHBBL")  # length (24 bits: high byte, low 16), type, flags, stream id
_DATA_T, _HEADERS_T, _RST_T, _CONTINUATION_T = 0x0, 0x1, 0x3, 0x9
_PUSH_PROMISE_T = 0x5
_END_STREAM, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x4, 0x8, 0x20
_MAX_CONTINUATIONS = 64  # as h2: a longer run of CONTINUATION frames is refused
_MAX_CLOSED = 1 << 16  # reset fast streams remembered (h2 keeps as many closed streams of its own)
_BLOCK_CACHE_SIZE = 256  # received header blocks kept, per connection
_BLOCK_CACHE_BYTES = 4096  # longer blocks are not kept
_OUT_CACHE_SIZE = 512  # encoded request fields kept, per connection

_STATIC_FIELDS: dict[tuple[bytes, bytes], int] = {}
_STATIC_NAMES: dict[bytes, int] = {}
for _i, (_n, _v) in enumerate(HeaderTable.STATIC_TABLE, 1):
    _STATIC_FIELDS.setdefault((_n, _v), _i)
    _STATIC_NAMES.setdefault(_n, _i)
_STATIC_LEN = len(HeaderTable.STATIC_TABLE)


def _hpack_int(value: int, bits: int, first: int) -> bytes:
    """RFC 7541 §5.1: ``value`` with a ``bits``-bit prefix, ``first`` holding the bits above it."""
    limit = (1 << bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _encode_field(name: bytes, value: bytes, never: bool) -> bytes:
    """One request field, touching no dynamic table (RFC 7541 §6.1, §6.2.2, §6.2.3)."""
    if not never:
        index = _STATIC_FIELDS.get((name, value))
        if index:
            return bytes((0x80 | index,))
    index = _STATIC_NAMES.get(name, 0)
    out = _hpack_int(index, 4, 0x10 if never else 0x00)
    if not index:
        out += _hpack_int(len(name), 7, 0) + name
    return out + _hpack_int(len(value), 7, 0) + value


def _read_int(data: bytes, pos: int, bits: int) -> tuple[int, int]:
    limit = (1 << bits) - 1
    value = data[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        byte = data[pos]  # IndexError on a truncated block: not cacheable
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _stateless(data: bytes) -> int:
    """Whether a header block decodes the same whatever the decoder's dynamic table holds,
    and leaves it as it was: 0 no, 1 yes, 2 only while the table's size is 0 (its
    insertions are dropped at once, and a size update to 0 changes nothing)."""
    pos = 0
    end = len(data)
    zero = False
    try:
        while pos < end:
            byte = data[pos]
            if byte & 0x80:  # indexed field
                index, pos = _read_int(data, pos, 7)
                if not 0 < index <= _STATIC_LEN:
                    return 0
                continue
            if byte & 0x40:  # literal with incremental indexing
                zero = True
                index, pos = _read_int(data, pos, 6)
            elif byte & 0x20:  # dynamic table size update
                size, pos = _read_int(data, pos, 5)
                if size:
                    return 0
                zero = True
                continue
            else:  # literal without indexing, or never indexed
                index, pos = _read_int(data, pos, 4)
            if index > _STATIC_LEN:
                return 0
            for _ in range(1 if index else 2):  # the name when literal, then the value
                length, pos = _read_int(data, pos, 7)
                pos += length
        if pos != end:
            return 0
    except IndexError:
        return 0
    return 2 if zero else 1


class _Block:
    """A received header block, decoded (and, for a response head, checked) once."""

    __slots__ = (
        "headers", "size", "zero", "analysed", "informational", "length", "bad_length", "head", "lists", "error"
    )

    def __init__(self, headers: list[Any]) -> None:
        self.headers = headers
        self.size = 0  # RFC 7541 §4.1 size of the list (max_header_list_size)
        self.zero = False  # valid only while the decoder's table size is 0
        self.analysed = False
        self.informational = False  # a 1xx head
        self.length: int | None = None  # its content-length
        self.bad_length: str | None = None  # why h2 would refuse its content-length
        self.head: tuple[int, dict[str, Any], bytes] | None = None  # response_head()'s answer
        self.lists = False  # the head's dict holds lists: copy them too
        self.error = ""  # why response_head() refused it

    def analyse(self, cache: dict[tuple[bytes, bytes], tuple[str, str]]) -> None:
        """What a response head needs, as h2 and :func:`response_head` work it out."""
        self.analysed = True
        headers = self.headers
        self.informational = _informational(headers)
        try:
            self.length = _content_length(headers)
        except ProtocolError as exc:
            self.bad_length = str(exc)
        try:
            head = self.head = response_head(headers, False, cache)
        except MalformedError as exc:
            self.error = str(exc)
            return
        self.lists = any(type(v) is list for v in head[1].values())


def _informational(headers: list[Any]) -> bool:
    """h2's test: the ``:status`` among the leading pseudo-headers starts with 1."""
    for name, value in headers:
        if name[:1] != b":":
            return False
        if name == b":status":
            return bool(value[:1] == b"1")
    return False


def _content_length(headers: list[Any]) -> int | None:
    """The content-length h2 would hold the body to (ProtocolError if invalid or conflicting)."""
    length = None
    for name, value in headers:
        if name == b"content-length":
            if not value.isdigit():
                raise ProtocolError(f"Invalid content-length header: {value!r}")
            n = int(value, 10)
            if length is None:
                length = n
            elif n != length:
                raise ProtocolError(f"Conflicting content-length headers: {length} and {n}")
    return length


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


class H2Session:
    """One client HTTP/2 connection's protocol state.

    Never blocks, never yields and does no I/O, so the greenlets of one
    connection may call it in turn freely; the driver feeds it bytes and
    writes what :meth:`data_to_send` returns.
    """

    def __init__(
        self,
        *,
        max_concurrent_streams: int,
        initial_window_size: int,
        connection_window_size: int,
        scheme: str,
        authority: str,
    ) -> None:
        config = H2Configuration(
            client_side=True,
            header_encoding=None,
            # Request headers were validated when the request was built, and
            # are lower-cased and trimmed by request_headers(): skip h2's second pass.
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            # Response blocks are checked by response_head(): a malformed one
            # fails its stream only (RFC 9113 §8.1.1), not the connection.
            validate_inbound_headers=False,
            normalize_inbound_headers=False,
        )
        conn = self._conn = _ClientConnection(config)
        conn.local_settings = Settings(
            client=True,
            initial_values={
                SettingCodes.ENABLE_PUSH: 0,
                SettingCodes.MAX_CONCURRENT_STREAMS: max_concurrent_streams,
                SettingCodes.INITIAL_WINDOW_SIZE: initial_window_size,
            },
        )
        self._connection_window = connection_window_size
        self._scheme = (b":scheme", scheme.encode("ascii"))
        self._authority = (b":authority", authority.encode("latin-1"))
        self._trailers: dict[int, list[tuple[bytes, bytes]]] = {}
        self._fields: dict[tuple[bytes, bytes], tuple[str, str]] = {}
        # The fast path (module docstring): its open streams, those reset lately
        # by either side (frames still in flight are ignored, RFC 9113 §5.1), the bytes
        # of a frame not yet whole, and the caches.
        self._fast_path = _FAST_PATH
        self._fast: dict[int, _Fast] = {}
        self._closed: dict[int, None] = {}
        self._window = initial_window_size  # what the peer gives each of our streams
        self._inbuf = b""
        self._h2_block = False  # h2 is in a header block: CONTINUATION frames go to it
        self._cont: tuple[int, bool, list[bytes]] | None = None  # a fast stream's header block so far
        self._blocks: dict[bytes, _Block] = {}
        self._encoded: dict[Any, bytes] = {}  # field -> its bytes (open_stream)
        # open_request's: method, authority, path, (name, value) pair -> its field's bytes
        self._enc_methods: dict[str, bytes] = {}
        self._enc_hosts: dict[str, bytes] = {}
        self._enc_paths: dict[str, bytes] = {}
        self._enc_fields: dict[tuple[str, str], bytes] = {}
        self._enc_scheme = _encode_field(*self._scheme, False)
        self._enc_authority = _encode_field(*self._authority, False)
        #: The last stream id of the first GOAWAY received, or None.
        self.goaway: int | None = None
        #: The peer sent its SETTINGS at least once.
        self.settings_received = False

    # -- starting ------------------------------------------------------------
    def start(self) -> None:
        """Queue the connection preface, our SETTINGS and the connection window (RFC 9113 §3.4)."""
        conn = self._conn
        conn.initiate_connection()
        extra = self._connection_window - DEFAULT_WINDOW
        if extra > 0:
            conn.increment_flow_control_window(extra)

    def data_to_send(self) -> bytes:
        """The bytes queued for the socket (and forget them)."""
        conn = self._conn
        data = conn.data_to_send()
        held = conn.held_output
        if held:
            conn.held_output = b""
            return held + data
        return data

    # -- peer state -------------------------------------------------------------
    @property
    def peer_max_concurrent_streams(self) -> int:
        return self._conn.remote_settings.max_concurrent_streams

    @property
    def peer_allows_connect_protocol(self) -> bool:
        return bool(self._conn.remote_settings.enable_connect_protocol)

    @property
    def max_frame_size(self) -> int:
        return self._conn.max_outbound_frame_size

    def send_window(self, stream_id: int) -> int:
        """How many body bytes may go out on ``stream_id`` now (stream and connection windows)."""
        if stream_id in self._fast:
            return 0  # its request went out whole
        return self._conn.local_flow_control_window(stream_id)

    # -- requests ------------------------------------------------------------------
    def request_headers(
        self,
        method: str,
        path: str,
        host: str | None,
        headers: list[tuple[str, str]],
        content_length: int | None,
    ) -> list[Any]:
        """The header block of a request: pseudo headers first (ours, never the user's).

        Names are lower-cased and values trimmed (RFC 9113 §8.2.1). Raises
        :class:`InformationalError` for a connection-specific field (§8.2.2),
        which fails only this request.
        """
        block: list[Any] = [
            _METHODS.get(method) or (b":method", method.encode("ascii")),
            self._scheme,
            self._authority if host is None else (b":authority", host.encode("latin-1")),
            (b":path", path.encode("latin-1")),
        ]
        _append_fields(block, headers)
        if content_length is not None:
            block.append((b"content-length", b"%d" % content_length))
        return block

    def connect_headers(
        self, target: str, protocol: str | None, host: str | None, headers: list[tuple[str, str]]
    ) -> list[Any]:
        """The header block of a CONNECT: to ``target`` (``host:port``, RFC 9113 §8.5),
        or, with ``protocol``, an extended CONNECT to the path ``target`` (RFC 8441 §4)."""
        if protocol is None:
            block: list[Any] = [(b":method", b"CONNECT"), (b":authority", target.encode("latin-1"))]
        else:
            block = [
                (b":method", b"CONNECT"),
                (b":protocol", protocol.lower().encode("latin-1")),
                self._scheme,
                (b":path", target.encode("latin-1")),
                self._authority if host is None else (b":authority", host.encode("latin-1")),
            ]
        _append_fields(block, headers)
        return block

    def open_request(
        self,
        method: str,
        path: str,
        host: str | None,
        headers: list[tuple[str, str]],
        content_length: int | None,
    ) -> int:
        """A request without a body: ``open_stream(request_headers(...), True)``, with the
        fields encoded from the caches straight away when the fast path takes it."""
        if self._fast_usable():
            encoded = self._enc_methods.get(method) or self._cached(self._enc_methods, method, b":method", "ascii")
            encoded += self._enc_scheme
            if host is None:
                encoded += self._enc_authority
            else:
                encoded += self._enc_hosts.get(host) or self._cached(self._enc_hosts, host, b":authority")
            encoded += self._enc_paths.get(path) or self._cached(self._enc_paths, path, b":path")
            if headers:
                fields = self._enc_fields
                parts = []
                for pair in headers:
                    part = fields.get(pair)
                    if part is None:
                        field = _request_field(*pair)
                        part = _encode_field(field[0], field[1], type(field) is NeverIndexedHeaderTuple)
                        if len(fields) >= _OUT_CACHE_SIZE:
                            fields.clear()
                        fields[pair] = part
                    parts.append(part)
                encoded += b"".join(parts)
            if content_length is not None:
                encoded += _encode_field(b"content-length", b"%d" % content_length, False)
            if len(encoded) <= self._conn.max_outbound_frame_size:
                return self._open_fast(encoded, method == "HEAD")
        return self.open_stream(self.request_headers(method, path, host, headers, content_length), True)

    def _cached(self, cache: dict[str, bytes], text: str, name: bytes, codec: str = "latin-1") -> bytes:
        """A pseudo-header's bytes, encoded and kept."""
        encoded = _encode_field(name, text.encode(codec), False)
        if len(cache) >= _OUT_CACHE_SIZE:
            cache.clear()
        cache[text] = encoded
        return encoded

    def open_stream(self, block: list[Any], end_stream: bool) -> int:
        """Send a request's HEADERS on a new stream; returns its id."""
        if end_stream and self._fast_usable():
            encoded = self._encode(block)
            if encoded is not None and len(encoded) <= self._conn.max_outbound_frame_size:
                return self._open_fast(encoded, bool(block) and block[0] == (b":method", b"HEAD"))
        conn = self._conn
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, block, end_stream=end_stream)
        return sid

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

    def send_data(self, stream_id: int, data: Any, end_stream: bool = False) -> None:
        """Queue DATA; ``data`` must fit :meth:`send_window` and :attr:`max_frame_size`."""
        self._conn.send_data(stream_id, data, end_stream=end_stream)

    def end_stream(self, stream_id: int) -> None:
        self._conn.end_stream(stream_id)

    def reset_stream(self, stream_id: int, code: int = ErrorCodes.CANCEL) -> None:
        """RST_STREAM, unless the stream is already closed (then nothing)."""
        if stream_id in self._fast:
            self._close(stream_id, True)
            self._queue(_RST_T, stream_id, code)
            return
        try:
            self._conn.reset_stream(stream_id, code)
        except StreamClosedError:
            pass
        self._trailers.pop(stream_id, None)

    def ping(self, payload: bytes) -> None:
        self._conn.ping(payload)

    def close(self, code: int = ErrorCodes.NO_ERROR) -> None:
        """Queue GOAWAY (the session takes no new streams afterwards)."""
        try:
            self._conn.close_connection(code)
        except ProtocolError:
            pass

    # -- flow control of received data ------------------------------------------------
    def ack(self, stream_id: int, size: int) -> None:
        """``size`` body bytes of ``stream_id`` were consumed: both windows may reopen."""
        if not size:
            return
        stream = self._fast.get(stream_id)
        if stream is not None:
            self.ack_connection(size)
            self._ack_fast(stream_id, stream, size)
        elif stream_id in self._conn.streams:
            self._conn.acknowledge_received_data(size, stream_id)
        else:
            self.ack_connection(size)  # a closed stream: only the connection window matters

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

    def ack_connection(self, size: int) -> None:
        """Reopen the connection window only (the stream's is held back while paused)."""
        conn = self._conn
        increment = conn._inbound_flow_control_window_manager.process_bytes(size)
        if increment:
            frame = WindowUpdateFrame(0)
            frame.window_increment = increment
            conn._prepare_for_sending([frame])

    def ack_stream(self, stream_id: int, size: int) -> None:
        """Reopen the stream window only (its connection share was acked on arrival)."""
        fast = self._fast.get(stream_id)
        if fast is not None:
            if size:
                self._ack_fast(stream_id, fast, size)
            return
        conn = self._conn
        stream = conn.streams.get(stream_id)
        if stream is not None and stream.open and size:
            conn._prepare_for_sending(stream.acknowledge_received_data(size))

    # -- receiving ------------------------------------------------------------------------
    def receive(self, data: Any) -> list[tuple[Any, ...]]:
        """Feed bytes from the socket; returns our events. Raises ``ProtocolError``."""
        # h2 is given whole frames only: a frame cut in two would leave its first
        # half in h2's buffer and the second in ours.
        out: list[tuple[Any, ...]] = []
        if self._inbuf:
            data = self._inbuf + data
            self._inbuf = b""
        view = memoryview(data)
        total = len(view)
        pos = 0
        h2_from = -1  # the first of the frames waiting to go to h2
        fast = self._fast
        closed = self._closed
        limit = self._conn.max_inbound_frame_size
        unpack = _FRAME_HEAD.unpack_from
        while total - pos >= 9:
            high, low, kind, flags, sid = unpack(view, pos)
            length = (high << 16) | low
            if length > limit:
                break  # h2 refuses it (below), as it would have
            end = pos + 9 + length
            if end > total:
                break
            sid &= 0x7FFFFFFF
            if self._cont is None and (
                self._h2_block
                or (kind > _RST_T and kind != _CONTINUATION_T)
                or kind == 0x2
                or not (sid in fast or (kind != _DATA_T and sid in closed))
            ):
                # h2's frame (DATA on a closed fast stream too: h2 acknowledges
                # its flow-controlled bytes and answers STREAM_CLOSED).
                if h2_from < 0:
                    h2_from = pos
                if kind == _HEADERS_T or kind == _PUSH_PROMISE_T:
                    self._h2_block = not flags & _END_HEADERS
                elif kind == _CONTINUATION_T and flags & _END_HEADERS:
                    self._h2_block = False
                pos = end
                continue
            if h2_from >= 0:
                self._from_h2(view[h2_from:pos], out)
                h2_from = -1
            try:
                if self._cont is not None or kind == _CONTINUATION_T:  # only the block's CONTINUATION
                    self._fast_continuation(kind, sid, flags, view[pos + 9 : end], out)
                elif kind == _DATA_T:
                    self._fast_data(sid, flags, view[pos + 9 : end], out)
                elif kind == _HEADERS_T:
                    if flags & (_PADDED | _PRIORITY | _END_HEADERS) == _END_HEADERS:
                        self._fast_block(sid, bool(flags & _END_STREAM), bytes(view[pos + 9 : end]), out)
                    else:
                        self._fast_headers(sid, flags, view[pos + 9 : end], out)
                else:
                    self._fast_reset(sid, view[pos + 9 : end], out)
            except ProtocolError as exc:
                self._terminate(exc)
                raise
            pos = end
        if h2_from >= 0:
            self._from_h2(view[h2_from:pos], out)
        if pos < total:
            if total - pos >= 9 and ((view[pos] << 16) | (view[pos + 1] << 8) | view[pos + 2]) > limit:
                self._from_h2(view[pos:], out)  # raises FrameTooLargeError
            else:
                self._inbuf = bytes(view[pos:])
        return out

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
            if not flow:
                raise FrameDataMissingError("Frame data missing or invalid")
            pad = payload[0]
            if pad and pad >= flow:
                raise ProtocolError("Received frame with invalid padding.")
            data = bytes(payload[1 : flow - pad])
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
            if not stop:
                raise FrameDataMissingError("Frame data missing or invalid")
            pad = payload[0]
            if pad and pad >= stop:
                raise ProtocolError("Received frame with invalid padding.")
            start = 1
            stop -= pad
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

    def _from_h2(self, data: Any, out: list[tuple[Any, ...]]) -> None:
        """h2's frames: its events, as ours."""
        append = out.append
        events: list[Any] = self._conn.receive_data(data)
        for ev in events:
            t = type(ev)
            if t is DataReceived:
                append((DATA, ev.stream_id, ev.data, ev.flow_controlled_length))
            elif t is ResponseReceived:
                try:
                    status, headers, raw = response_head(ev.headers, False, self._fields)
                except MalformedError as exc:
                    append((BAD, ev.stream_id, str(exc)))
                    continue
                append((RESPONSE, ev.stream_id, status, headers, raw))
            elif t is StreamEnded:
                trailers = self._trailers.pop(ev.stream_id, None) if self._trailers else None
                if trailers is None:
                    append((END, ev.stream_id, None, None))
                else:
                    try:
                        _, fields, _ = response_head(trailers, True, self._fields)
                    except MalformedError as exc:
                        append((BAD, ev.stream_id, str(exc)))
                        continue
                    append((END, ev.stream_id, fields, [part for pair in trailers for part in pair]))
            elif t is WindowUpdated:
                append((WINDOW, ev.stream_id))
            elif t is TrailersReceived:
                self._trailers[ev.stream_id] = ev.headers
            elif t is StreamReset:
                self._trailers.pop(ev.stream_id, None)
                append((RESET, ev.stream_id, int(ev.error_code)))
            elif t is InformationalResponseReceived:
                try:
                    status, headers, raw = response_head(ev.headers, False, self._fields)
                except MalformedError as exc:
                    append((BAD, ev.stream_id, str(exc)))
                    continue
                append((INFO, ev.stream_id, status, headers, raw))
            elif t is RemoteSettingsChanged:
                self.settings_received = True
                append((SETTINGS, 0))
                if SettingCodes.INITIAL_WINDOW_SIZE in ev.changed_settings:
                    append((WINDOW, 0))
            elif t is PingAckReceived:
                append((PONG, 0, ev.ping_data))
            elif t is _MalformedBody:
                self._trailers.pop(ev.stream_id, None)
                append((BAD, ev.stream_id, ev.reason))
            elif t is ConnectionTerminated:
                last = ev.last_stream_id
                if self.goaway is None or last < self.goaway:
                    self.goaway = last
                append((GOAWAY, last, int(ev.error_code), ev.additional_data or b""))
            # Other events (PING from the peer, SETTINGS acks, priority) need
            # nothing from us: h2 answers PINGs itself.


def _append_fields(block: list[Any], headers: list[tuple[str, str]]) -> None:
    for name, value in headers:
        block.append(_request_field(name, value))


def _request_field(name: str, value: str) -> tuple[bytes, bytes]:
    """A request field as HTTP/2 sends it: lower-case name, trimmed value; credentials
    (and short cookies) never indexed. InformationalError for a connection-specific one."""
    key = name.lower()
    if key in _CONNECTION_SPECIFIC or (key == "te" and value.strip(" \t").lower() != "trailers"):
        raise InformationalError(f'HTTP/1 connection-specific headers are forbidden over HTTP/2: "{key}"')
    value = value.strip(" \t")
    if key in _SENSITIVE or (key == "cookie" and len(value) < 20):
        return NeverIndexedHeaderTuple(key.encode("latin-1"), value.encode("latin-1"))
    return (key.encode("latin-1"), value.encode("latin-1"))


class MalformedError(ValueError):
    """A response or trailer block RFC 9113 §8.2 calls malformed (a stream error)."""


_FIELD_CACHE_SIZE = 512


def response_head(
    block: list[tuple[bytes, bytes]],
    trailers: bool = False,
    cache: dict[tuple[bytes, bytes], tuple[str, str]] | None = None,
) -> tuple[int, dict[str, Any], bytes]:
    """``(status, headers, raw)`` of a response header block, checked as RFC 9113 §8.2 says.

    ``headers`` is the library's shape: lower-case ``str`` names, a repeated
    name becomes a list, ``set-cookie`` is always a list. ``raw`` is the
    block as ``name: value`` lines (the first one ``:status``), which the
    controller's ``raw_headers`` reads. Raises :class:`MalformedError`:
    h2's own inbound checks are off (they would fail the whole connection
    for one bad stream), and one pass here is cheaper than h2's chain.
    ``cache`` maps fields already checked to their decoded pair: a server
    repeats most of its fields (server, content-type, ...) on every response.
    """
    headers: dict[str, Any] = {}
    status = 0
    if cache is None:
        cache = {}
    for field in block:
        name, value = field
        if name[:1] == b":":
            if name != b":status" or status or headers or trailers:
                raise MalformedError(f"unexpected pseudo-header {name!r}")
            if len(value) != 3 or not value.isdigit():
                raise MalformedError(f"invalid :status {value!r}")
            status = int(value)
            continue
        pair = cache.get(field)
        if pair is None:
            pair = _check_field(name, value)
            if len(cache) >= _FIELD_CACHE_SIZE:
                cache.clear()
            cache[(name, value)] = pair
        key, text = pair
        old = headers.get(key)
        if old is None:
            headers[key] = [text] if key == "set-cookie" else text
        elif type(old) is list:
            old.append(text)
        else:
            headers[key] = [old, text]
    if not status and not trailers:
        raise MalformedError("no :status")
    return status, headers, b"\r\n".join(map(_COLON_JOIN, block))


def _check_field(name: bytes, value: bytes) -> tuple[str, str]:
    if not _NAME_RE.match(name):
        raise MalformedError(f"invalid field name {name!r}")
    if not _VALUE_RE.match(value):
        raise MalformedError(f"invalid value of the {name!r} field")
    key = name.decode("latin-1")
    if key in _CONNECTION_SPECIFIC or (key == "te" and value != b"trailers"):
        raise MalformedError(f"connection-specific field {key!r}")
    return key, value.decode("latin-1")
