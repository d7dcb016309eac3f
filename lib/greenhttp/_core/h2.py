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
The fast path. Most requests are a header block and nothing else; the
session runs those streams itself, with its own HPACK encoding and a cache of
decoded response blocks, and hands every other frame to h2: see
:mod:`greenhttp._core.h2_fast` (and :mod:`greenhttp._core.h2_fields` for the
HPACK helpers and :func:`response_head`).
"""

from __future__ import annotations

from typing import Any

from h2.config import H2Configuration
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
from h2.exceptions import ProtocolError, StreamClosedError
from h2.settings import SettingCodes, Settings
from hpack import NeverIndexedHeaderTuple
from hyperframe.frame import WindowUpdateFrame

from .h2_connection import (
    BAD,
    DATA,
    DEFAULT_WINDOW,
    END,
    GOAWAY,
    INFO,
    PONG,
    RESET,
    RESPONSE,
    SETTINGS,
    WINDOW,
    _ClientConnection,
    _MalformedBody,
    error_name,
)
from .h2_fast import (
    _CONTINUATION_T,
    _DATA_T,
    _END_HEADERS,
    _END_STREAM,
    _FAST_PATH,
    _FRAME_HEAD,
    _HEADERS_T,
    _OUT_CACHE_SIZE,
    _PADDED,
    _PRIORITY,
    _PUSH_PROMISE_T,
    _RST_T,
    FastStreams,
    _Fast,
)
from .h2_fields import (
    _METHODS,
    MalformedError,
    _append_fields,
    _Block,
    _encode_field,
    _request_field,
    response_head,
)
from .h2_fields import _stateless as _stateless  # re-exported: tests read it here

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


# The HPACK decoder refuses a header list this many times max_header_size (see H2Session).
_DECODER_HEADROOM = 64


class H2Session(FastStreams):
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
        max_header_size: int = 0,
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
        # The client's max_header_size is checked on each decoded block, and a block over
        # it fails its stream only (as nghttp2). A block the decoder itself refuses ends
        # the connection instead (HPACK state is shared), so its limit sits well above
        # ours: RFC 7541 §4.1 sizes count 32 bytes more per field (at least 5 bytes a
        # field in ours, so 7x covers any block within the limit), and 64x leaves room
        # for an oversized head to be refused politely. Past that (a block inflating to
        # over 1 MiB at the default limit) the peer is hostile and the connection goes.
        conn.decoder.max_header_list_size = max(conn.decoder.max_header_list_size, _DECODER_HEADROOM * max_header_size)
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

    def detach(self) -> None:
        """The connection ended: let go of what only the cycle collector would free (h2's
        table of bound frame handlers). Frames received afterwards are ignored."""
        self._conn.detach()

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

