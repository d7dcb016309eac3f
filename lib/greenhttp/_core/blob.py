"""``Blob``: immutable bytes with a media type, after the File API (sans-IO)."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import Any

__all__ = ["Blob"]


class Blob:
    """Immutable binary data with a ``type``. Never blocks; safe to share between greenlets."""

    __slots__ = ("_data", "type")

    def __init__(self, parts: Iterable[Any] = (), type: str = "") -> None:
        chunks = []
        for part in parts:
            if isinstance(part, Blob):
                chunks.append(part._data)
            elif isinstance(part, str):
                chunks.append(part.encode("utf-8"))
            else:
                chunks.append(bytes(part))
        self._data: builtins.bytes = b"".join(chunks)
        # File API: a type with any character outside U+0020..U+007E becomes "".
        self.type = type.lower() if type.isascii() and type.isprintable() else ""

    @property
    def size(self) -> int:
        """Length in bytes."""
        return len(self._data)

    def bytes(self) -> builtins.bytes:
        return self._data

    def array_buffer(self) -> builtins.bytes:
        return self._data

    def text(self) -> str:
        data = self._data
        if data.startswith(b"\xef\xbb\xbf"):  # "UTF-8 decode" drops a leading BOM
            data = data[3:]
        return data.decode("utf-8", errors="replace")

    def slice(self, start: int = 0, end: int | None = None, content_type: str = "") -> Blob:
        return Blob([self._data[start:end]], type=content_type)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Blob) and other._data == self._data and other.type == self.type

    def __hash__(self) -> int:
        return hash((self._data, self.type))

    def __repr__(self) -> str:
        return f"Blob(size={self.size}, type={self.type!r})"
