"""Request bodies: normalise what the user passes into one of three shapes (sans-IO).

- ``None``: no body;
- ``bytes``: a body of known length;
- a :class:`StreamBody`: an iterator of byte chunks, with a length when one is
  known (a regular file) and ``None`` otherwise (chunked on HTTP/1.1).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import InvalidArgumentError
from .blob import Blob, buffer_of

__all__ = ["StreamBody", "normalize_body", "replayable", "to_bytes_chunk"]

_READ_SIZE = 65536


class StreamBody:
    """A body read piece by piece. ``length`` is None when unknown. Single use."""

    __slots__ = ("chunks", "length", "source", "used")

    def __init__(self, chunks: Iterator[Any], length: int | None, source: Any) -> None:
        self.chunks = chunks
        self.length = length
        self.source = source
        self.used = False

    def close(self) -> None:
        """Close the source, if it has ``close()``. Never blocks.

        A generator that is running (parked, in the greenlet that reads it) is left
        alone: closing it from another greenlet could only fail, and CPython 3.11
        may crash doing so (``gen_close`` reads the running frame's stack). Its
        reader is killed by the connection instead, which ends it."""
        chunks = self.chunks
        if getattr(chunks, "gi_running", False):
            return
        close = getattr(chunks, "close", None)
        if close is not None:
            try:
                close()
            except Exception:
                pass


def replayable(body: Any) -> bool:
    """Whether ``body`` (a request option) can be sent again: none, bytes-like, a list
    or tuple of chunks (each send iterates it afresh), or a :class:`StreamBody` not
    read yet. A stream given as it is (a generator, a file) may have been read by an
    earlier send that nothing here saw: it is not."""
    if isinstance(body, StreamBody):
        return not body.used
    if body is None or isinstance(body, (bytes, str, bytearray, memoryview, Blob, list, tuple)):
        return True
    # Another bytes-like object is sent as its bytes; a file-like one is a stream.
    return not hasattr(body, "read") and buffer_of(body) is not None


def to_bytes_chunk(chunk: Any) -> bytes:
    """One chunk of a streamed body as bytes; str is UTF-8. Anything else is an error."""
    if isinstance(chunk, bytes):
        return chunk
    if isinstance(chunk, (bytearray, memoryview)):
        return bytes(chunk)
    if isinstance(chunk, str):
        return chunk.encode("utf-8")
    view = buffer_of(chunk)  # any other bytes-like object (array.array, ...)
    if view is not None:
        return view.tobytes()
    raise InvalidArgumentError(f"body chunks must be bytes or str, got {type(chunk).__name__}")


def _file_chunks(f: Any) -> Iterator[Any]:
    while True:
        data = f.read(_READ_SIZE)
        if not data:
            return
        yield data


def _file_length(f: Any) -> int | None:
    if isinstance(f, io.TextIOBase):
        return None  # its size on disk is not the length of the decoded text re-encoded
    try:
        st = os.fstat(f.fileno())
        import stat

        if not stat.S_ISREG(st.st_mode):
            return None
        position: int = f.tell()
        return max(0, st.st_size - position)
    except (AttributeError, OSError, ValueError):
        return None


def normalize_body(body: Any) -> bytes | StreamBody | None:
    """Turn a user body into None, bytes (exactly, never a subclass) or a StreamBody;
    empty bodies become None."""
    if body is None:
        return None
    if type(body) is bytes:
        return body or None
    if isinstance(body, str):
        return body.encode("utf-8") or None
    if isinstance(body, (bytes, bytearray, memoryview)):
        # A bytes subclass too: the drivers frame a body of exactly ``bytes`` only.
        return bytes(body) or None
    if isinstance(body, StreamBody):
        return body
    if isinstance(body, Blob):
        return body.bytes() or None
    if hasattr(body, "read"):
        return StreamBody(_file_chunks(body), _file_length(body), body)
    # Any other bytes-like object (array.array, an ndarray: the original's
    # ArrayBufferView) is its bytes, not an iterable of numbers.
    view = buffer_of(body)
    if view is not None:
        return view.tobytes() or None
    if isinstance(body, Iterable) and not isinstance(body, dict):
        return StreamBody(iter(body), None, body)
    raise InvalidArgumentError(
        "body must be bytes or another bytes-like object, str, Blob, a file-like object or an iterable "
        f"of bytes, got {type(body).__name__}"
    )
