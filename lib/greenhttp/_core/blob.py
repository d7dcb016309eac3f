"""``Blob``: immutable bytes with a media type, after the File API (sans-IO)."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["Blob", "buffer_of"]


def buffer_of(obj: Any) -> memoryview | None:
    """A view of ``obj``'s bytes when it is a bytes-like object (it has the buffer
    protocol: ``array.array``, an ndarray, ...), else None. Copies nothing."""
    try:
        return memoryview(obj)
    except TypeError:
        return None


class Blob:
    """Immutable binary data with a ``type``. Never blocks; safe to share between greenlets."""

    __slots__ = ("_data", "_type")

    def __init__(self, parts: Iterable[Any] = (), type: str = "") -> None:
        """``parts``: an iterable (the File API's sequence) of bytes-like objects,
        ``str`` (UTF-8) and ``Blob``; one such value given alone, or a part of another
        kind (an int, a list of ints), is a TypeError. ``type``: the media type, kept
        lower-cased, or "" if it holds a character outside U+0020..U+007E."""
        if isinstance(parts, (str, builtins.bytes, bytearray, memoryview, Blob)):
            raise TypeError(
                f"Blob parts must be an iterable of parts, got one {parts.__class__.__name__} (wrap it in a list)"
            )
        chunks = []
        for part in parts:
            if isinstance(part, Blob):
                chunks.append(part._data)
            elif isinstance(part, str):
                chunks.append(part.encode("utf-8"))
            elif isinstance(part, builtins.bytes):
                chunks.append(part)
            else:
                # bytes(5) would be five NUL bytes, bytes([104, 105]) b"hi": only a buffer is bytes.
                view = buffer_of(part)
                if view is None:
                    raise TypeError(f"a Blob part must be bytes-like, str or Blob, got {part.__class__.__name__}")
                chunks.append(view.tobytes())
        if not isinstance(type, str):
            raise TypeError(f"Blob type must be a str, got {type.__class__.__name__}")
        self._data: builtins.bytes = b"".join(chunks)
        # File API: a type with any character outside U+0020..U+007E becomes "".
        self._type = type.lower() if type.isascii() and type.isprintable() else ""

    @property
    def type(self) -> str:
        """The media type, lower-case ("" when none, or when the one given was not
        printable ASCII). Read-only: it goes out as a request's ``content-type``."""
        return self._type

    @property
    def size(self) -> int:
        """Length in bytes."""
        return len(self._data)

    def bytes(self) -> builtins.bytes:
        """The contents. Never blocks."""
        return self._data

    def array_buffer(self) -> builtins.bytes:
        """The contents (the File API's ``arrayBuffer()``; Python has ``bytes``). Never blocks."""
        return self._data

    def stream(self, chunk_size: int = 65536) -> Iterator[builtins.bytes]:
        """The contents as an iterator of ``bytes`` chunks of at most ``chunk_size``
        (the File API's ``stream()``); usable as a request body. Never blocks."""
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        data = self._data
        return (data[i : i + chunk_size] for i in range(0, len(data), chunk_size))

    def text(self) -> str:
        """The contents decoded as UTF-8 (a leading BOM dropped, bad bytes replaced). Never blocks."""
        data = self._data
        if data.startswith(b"\xef\xbb\xbf"):  # "UTF-8 decode" drops a leading BOM
            data = data[3:]
        return data.decode("utf-8", errors="replace")

    def slice(self, start: int = 0, end: int | None = None, content_type: str = "") -> Blob:
        """A new Blob of bytes ``start`` to ``end`` (negative counts from the end, as
        in the File API and in Python) with type ``content_type``. Never blocks."""
        return Blob([self._data[start:end]], type=content_type)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Blob) and other._data == self._data and other.type == self.type

    def __hash__(self) -> int:
        return hash((self._data, self.type))

    def __repr__(self) -> str:
        return f"Blob(size={self.size}, type={self.type!r})"
