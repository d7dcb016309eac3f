"""The ``h2`` library's connection, adapted for the client session, and the session's event kinds.

:class:`_ClientConnection` is ``h2.connection.H2Connection`` with what
:mod:`greenhttp._core.h2` needs done differently (its module docstring says
why): kept open after GOAWAY with its queued output, a body length error
reset as a stream error (:class:`_MalformedBody`), open streams counted only
now and then, an oversized frame refused at its header
(:class:`_FrameBuffer`), and its frame handlers dropped once the connection
ended (:meth:`_ClientConnection.detach`: no reference cycle outlives it).
"""

from __future__ import annotations

from typing import Any

from h2.config import H2Configuration
from h2.connection import ConnectionState
from h2.connection import H2Connection as _H2Connection
from h2.errors import ErrorCodes
from h2.exceptions import InvalidBodyLengthError
from h2.frame_buffer import FrameBuffer
from hyperframe.frame import WindowUpdateFrame

# The kinds of H2Session.receive()'s events (the table in greenhttp._core.h2).
RESPONSE, INFO, DATA, END, RESET, SETTINGS, WINDOW, GOAWAY, PONG, BAD = range(10)

#: RFC 9113 §6.9.2: every window starts at 65535 until SETTINGS or WINDOW_UPDATE.
DEFAULT_WINDOW = 65535


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


def _ignore_frame(frame: Any) -> tuple[list[Any], list[Any]]:
    """How a detached connection handles a frame: no frames to send, no events."""
    return [], []


class _DetachedFrameTable(dict[Any, Any]):
    """The frame handlers of a detached connection: every frame is ignored."""

    def __missing__(self, key: Any) -> Any:
        return _ignore_frame


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

    def detach(self) -> None:
        """The connection ended: drop h2's table of frame handlers (bound methods of this
        object), so reference counting frees it; a frame received afterwards is ignored."""
        self._frame_dispatch_table = _DetachedFrameTable()

    def _receive_goaway_frame(self, frame: Any) -> Any:
        state = self.state_machine.state
        # h2 drops what it had queued (acks, window updates); keep it.
        self.held_output += self.data_to_send()
        frames, events = super()._receive_goaway_frame(frame)
        if state is ConnectionState.CLIENT_OPEN:
            self.state_machine.state = state
        return frames, events

