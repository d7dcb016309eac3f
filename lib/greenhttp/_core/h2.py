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
"""

from __future__ import annotations

import re
from typing import Any

from h2.config import H2Configuration
from h2.connection import ConnectionState
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
from h2.exceptions import InvalidBodyLengthError, ProtocolError, StreamClosedError
from h2.frame_buffer import FrameBuffer
from h2.settings import SettingCodes, Settings
from hpack import NeverIndexedHeaderTuple
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

    def open_stream(self, block: list[Any], end_stream: bool) -> int:
        """Send a request's HEADERS on a new stream; returns its id."""
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
        if size:
            self._conn.acknowledge_received_data(size, stream_id)

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
        conn = self._conn
        stream = conn.streams.get(stream_id)
        if stream is not None and stream.open and size:
            conn._prepare_for_sending(stream.acknowledge_received_data(size))

    # -- receiving ------------------------------------------------------------------------
    def receive(self, data: Any) -> list[tuple[Any, ...]]:
        """Feed bytes from the socket; returns our events. Raises ``ProtocolError``."""
        out: list[tuple[Any, ...]] = []
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
        return out


def _append_fields(block: list[Any], headers: list[tuple[str, str]]) -> None:
    for name, value in headers:
        key = name.lower()
        if key in _CONNECTION_SPECIFIC or (key == "te" and value.strip(" \t").lower() != "trailers"):
            raise InformationalError(f'HTTP/1 connection-specific headers are forbidden over HTTP/2: "{key}"')
        value = value.strip(" \t")
        if key in _SENSITIVE or (key == "cookie" and len(value) < 20):
            block.append(NeverIndexedHeaderTuple(key.encode("latin-1"), value.encode("latin-1")))
        else:
            block.append((key.encode("latin-1"), value.encode("latin-1")))


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
