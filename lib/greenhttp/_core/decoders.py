"""Streaming content decoders (RFC 9110 §8.4), sans-IO, with a guard against bombs.

A :class:`BodyDecoder` is fed the encoded body as it arrives and *pulled* for
decoded pieces of about :data:`PIECE` bytes, so a caller can stop pulling
when its consumer pauses and go on later: the decoded body is never held
whole, and a small input that expands enormously is decoded a piece at a
time. Stacked codings (``Content-Encoding: gzip, br``) are undone last
applied first.

Codings: ``gzip``/``x-gzip`` (several members allowed), ``deflate`` (the
zlib format of RFC 9110, or raw deflate as some servers send it: told apart
by the zlib header), ``br``, ``zstd`` (RFC 8878; window at most 8 MiB as
RFC 9659 allows decoders to require), ``compress``/``x-compress`` (Unix
``compress`` LZW, decoded here in pure Python): the spec's list. Any other
token, ``identity`` included, leaves the body and its headers as they are,
as in the original.

Bomb guard: decoding fails with ``ResponseExceededMaxSizeError`` when the
decoded size passes ``max_size``, or when it passes :data:`RATIO_GRACE` and
is more than ``max_ratio`` times the encoded bytes received. Corrupt or
truncated data fails with :class:`DecompressionError`.
"""

from __future__ import annotations

import zlib
from typing import Any

import brotli
import zstandard

from ..errors import DecompressionError, ResponseExceededMaxSizeError

__all__ = [
    "BodyDecoder",
    "DecompressionError",
    "PIECE",
    "RATIO_GRACE",
    "MAX_ENCODINGS",
    "SUPPORTED",
    "parse_encodings",
]

PIECE = 65536  # decoded bytes per pull (zstd may return a few MiB at worst)
RATIO_GRACE = 32 << 20  # the ratio limit applies once this much was decoded
MAX_ENCODINGS = 5  # more codings than this is an attack, not a configuration
ZSTD_MAX_WINDOW = 8 << 20
SUPPORTED = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd", "compress", "x-compress"})


def parse_encodings(value: Any) -> list[str] | None:
    """The codings of a ``Content-Encoding`` value, in the order applied (lower case).

    Returns None when one of them is not supported (the body is then left as
    it is), and raises :class:`DecompressionError` past :data:`MAX_ENCODINGS`.
    """
    if isinstance(value, list):
        value = ",".join(value)
    if not isinstance(value, str):
        return None
    codings = [t.strip().lower() for t in value.split(",")]
    codings = [t for t in codings if t]
    if len(codings) > MAX_ENCODINGS:
        raise DecompressionError(
            f"too many content-encodings in response: {len(codings)}, maximum allowed is {MAX_ENCODINGS}"
        )
    if not all(t in SUPPORTED for t in codings):
        return None
    return codings


# -- stages ------------------------------------------------------------------------------------------
class _Stage:
    """One coding. ``feed`` input, ``end`` it, ``pull`` output until ``b""``.

    ``pull`` returning ``b""`` means "give me more input", or, after
    ``end()``, that the stage is finished (``done``), having checked the
    stream was complete.
    """

    name = ""

    def __init__(self) -> None:
        self.buf = b""
        self.ended = False
        self.done = False
        self.fed = False  # any input at all: an empty body is a valid empty stream

    def feed(self, data: bytes) -> None:
        if data:
            self.fed = True
            self.buf = self.buf + data if self.buf else data

    def end(self) -> None:
        self.ended = True

    def pull(self) -> bytes:
        out = self._decode()
        if not out and self.ended and not self.done:
            if self.fed and not self._complete():
                raise DecompressionError(f"truncated {self.name} stream")
            self.done = True
        return out

    def _decode(self) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def _complete(self) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def _corrupt(self, exc: BaseException) -> DecompressionError:
        return DecompressionError(f"invalid {self.name} stream: {exc}", cause=exc)


def _looks_like_zlib(head: bytes) -> bool:
    # RFC 1950 §2.2: CM = 8 (deflate), CINFO <= 7, and the header check (CMF*256 + FLG) % 31 == 0.
    return len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and (head[0] << 8 | head[1]) % 31 == 0


class _ZlibStage(_Stage):
    """gzip (members one after another) or deflate (zlib-wrapped or raw)."""

    def __init__(self, gzip: bool) -> None:
        super().__init__()
        self.gzip = gzip
        self.name = "gzip" if gzip else "deflate"
        self.obj: Any = None
        self.more = False  # the last call filled PIECE: output may be pending without input
        self.finished = False  # a complete stream ended; what follows is ignored
        self.members = 0

    def _decode(self) -> bytes:
        while True:
            if self.finished:
                self.buf = b""
                return b""
            obj = self.obj
            if obj is None:
                buf = self.buf
                if not buf or (len(buf) < 2 and not self.ended):
                    return b""
                if not self.gzip:
                    obj = zlib.decompressobj(15 if _looks_like_zlib(buf) else -15)
                elif buf[:2] == b"\x1f\x8b":
                    obj = zlib.decompressobj(31)
                elif self.members:
                    self.finished = True  # bytes after the last member are ignored, as gzip(1) does
                    continue
                else:
                    raise DecompressionError("invalid gzip stream: bad magic number")
                self.obj = obj
            if obj.eof:
                # One member (or the deflate stream) is complete: a gzip member may follow.
                self.members += 1
                self.buf = obj.unused_data + self.buf
                self.obj = None
                self.finished = not self.gzip
                continue
            if not self.buf and not self.more:
                return b""
            try:
                out: bytes = obj.decompress(self.buf, PIECE)
            except zlib.error as exc:
                raise self._corrupt(exc) from exc
            self.buf = obj.unconsumed_tail
            self.more = len(out) == PIECE
            if out:
                return out
            if not obj.eof and not self.buf:
                return b""

    def _complete(self) -> bool:
        return self.obj is None and self.members > 0


class _BrotliStage(_Stage):
    name = "br"

    def __init__(self) -> None:
        super().__init__()
        self.dec = brotli.Decompressor()

    def _decode(self) -> bytes:
        dec = self.dec
        try:
            if not dec.can_accept_more_data():
                out: bytes = dec.process(b"", output_buffer_limit=PIECE)
                if out:
                    return out
            if self.buf:
                data, self.buf = self.buf, b""
                out = dec.process(data, output_buffer_limit=PIECE)
                if out:
                    return out
            if self.ended and not dec.is_finished():
                # Input may sit in the decoder's buffers: drain it before calling it truncated.
                return dec.process(b"", output_buffer_limit=PIECE)  # type: ignore[no-any-return]
        except brotli.error as exc:
            raise self._corrupt(exc) from exc
        return b""

    def _complete(self) -> bool:
        return bool(self.dec.is_finished())


class _ZstdStage(_Stage):
    """zstd, one frame after another. Input goes in small slices so that one call's
    output stays bounded (a zstd block of 4 bytes can stand for 128 KiB)."""

    name = "zstd"
    SLICE = 128

    def __init__(self) -> None:
        super().__init__()
        self.dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
        self.obj: Any = None
        self.pos = 0
        self.frames = 0

    def _decode(self) -> bytes:
        parts = []
        size = 0
        buf = memoryview(self.buf)
        try:
            while size < PIECE and self.pos < len(buf):
                obj = self.obj
                if obj is None:
                    obj = self.obj = self.dctx.decompressobj()
                piece = buf[self.pos : self.pos + self.SLICE]
                out = obj.decompress(piece)
                if obj.eof:
                    # The frame ended inside this slice: what it did not use starts the next one.
                    self.pos += len(piece) - len(obj.unused_data)
                    self.obj = None
                    self.frames += 1
                else:
                    self.pos += len(piece)
                if out:
                    parts.append(out)
                    size += len(out)
        except zstandard.ZstdError as exc:
            raise self._corrupt(exc) from exc
        if self.pos >= len(self.buf):
            self.buf = b""
            self.pos = 0
        return b"".join(parts)

    def feed(self, data: bytes) -> None:
        if data and self.pos:
            self.buf = self.buf[self.pos :]
            self.pos = 0
        super().feed(data)

    def _complete(self) -> bool:
        return self.obj is None and self.frames > 0


class _LzwStage(_Stage):
    """Unix ``compress`` (LZW, 9 to 16-bit codes), streaming.

    The format packs codes LSB first in groups of eight (a group of ``n``-bit
    codes is ``n`` bytes). When the code width grows, or a CLEAR code (256,
    in block mode) resets the table, the rest of the current group is
    padding: the original implementation reads its input in such groups, and
    every decoder since has had to skip the same bytes. Entries are cached as
    bytes up to a memory budget, then rebuilt from their prefix links.
    """

    name = "compress"
    BUDGET = 32 << 20  # bytes of cached dictionary strings

    def __init__(self) -> None:
        super().__init__()
        self.header = False
        self.max_bits = 16
        self.block_mode = True
        self.strings: list[bytes | None] = [bytes((i,)) for i in range(256)]
        self.prefix: list[int] = [0] * 256
        self.suffix: list[int] = list(range(256))
        self.cached = 0
        self._reset()

    def _reset(self) -> None:
        del self.strings[256:], self.prefix[256:], self.suffix[256:]
        self.cached = 0
        self.n_bits = 9
        self.free = 257 if self.block_mode else 256
        if self.free == 257:  # entry 256 is CLEAR: hold its place
            self.strings.append(b"")
            self.prefix.append(0)
            self.suffix.append(0)
        self.old = -1

    def _string(self, code: int) -> bytes:
        s = self.strings[code]
        if s is not None:
            return s
        tail = []
        while s is None:
            tail.append(self.suffix[code])
            code = self.prefix[code]
            s = self.strings[code]
        tail.reverse()
        return s + bytes(tail)

    def _add(self, prefix: int, first: int, prefix_string: bytes) -> None:
        self.prefix.append(prefix)
        self.suffix.append(first)
        if self.cached < self.BUDGET:
            self.cached += len(prefix_string) + 1
            self.strings.append(prefix_string + bytes((first,)))
        else:
            self.strings.append(None)
        self.free += 1

    def _decode(self) -> bytes:
        if not self.header:
            if len(self.buf) < 3:
                if self.ended and self.buf:
                    raise DecompressionError("invalid compress stream: truncated header")
                return b""
            if self.buf[:2] != b"\x1f\x9d":
                raise DecompressionError("invalid compress stream: bad magic number")
            flags = self.buf[2]
            self.max_bits = flags & 0x1F
            self.block_mode = bool(flags & 0x80)
            if not 9 <= self.max_bits <= 16 or flags & 0x60:
                raise DecompressionError(f"invalid compress stream: unsupported flags {flags:#x}")
            self.buf = self.buf[3:]
            self.header = True
            self._reset()
        out: list[bytes] = []
        size = 0
        buf = self.buf
        pos = 0
        max_code = 1 << self.max_bits
        while size < PIECE:
            n = self.n_bits
            group = buf[pos : pos + n]
            if len(group) < n and not self.ended:
                break
            if not group:
                break
            pos += len(group)
            value = int.from_bytes(group, "little")
            count = len(group) * 8 // n  # 8, or fewer in the stream's last group
            mask = (1 << n) - 1
            for i in range(count):
                code = value >> (i * n) & mask
                if self.old < 0:
                    if code > 255:
                        raise DecompressionError("invalid compress stream: first code is not a literal")
                    s = self.strings[code]
                    self.old = code
                elif code == 256 and self.block_mode:
                    self._reset()  # the rest of the group is padding
                    break
                else:
                    old_string = self._string(self.old)
                    if code < self.free:
                        s = self._string(code)
                    elif code == self.free:  # KwKwK: the entry being defined right now
                        s = old_string + old_string[:1]
                    else:
                        raise DecompressionError("invalid compress stream: code out of range")
                    if self.free < max_code:
                        self._add(self.old, s[0], old_string)
                    self.old = code
                out.append(s)  # type: ignore[arg-type]
                size += len(s)  # type: ignore[arg-type]
                if self.free > mask and self.n_bits < self.max_bits:
                    self.n_bits += 1  # wider codes from the next group on; the rest is padding
                    break
        self.buf = buf[pos:]
        return b"".join(out)

    def _complete(self) -> bool:
        return self.header and not self.buf


class _IdentityStage(_Stage):
    """No coding: what a decoder of no codings passes through."""

    name = "identity"

    def _decode(self) -> bytes:
        out, self.buf = self.buf, b""
        return out

    def _complete(self) -> bool:
        return True


def _stage(coding: str) -> _Stage:
    if coding in ("gzip", "x-gzip"):
        return _ZlibStage(gzip=True)
    if coding == "deflate":
        return _ZlibStage(gzip=False)
    if coding == "br":
        return _BrotliStage()
    if coding == "zstd":
        return _ZstdStage()
    if coding in ("compress", "x-compress"):
        return _LzwStage()
    raise ValueError(f"not a supported coding: {coding!r}")  # (parse_codings() refuses it first)


class BodyDecoder:
    """Decodes one body encoded with ``codings`` (in the order they were applied).

    ``feed(data)`` the encoded bytes as they come, ``end()`` after the last,
    and call ``pull()`` until it returns ``b""``; after ``end()``, ``done``
    tells the whole body came out. Not greenlet-safe: one owner.
    """

    def __init__(
        self, codings: list[str], *, max_size: int | None = None, max_ratio: float | None = None
    ) -> None:
        stages = [_stage(c) for c in reversed(codings)]
        self._stages = stages or [_IdentityStage()]
        self.max_size = max_size
        self.max_ratio = max_ratio
        self.encoded = 0
        self.decoded = 0

    def feed(self, data: bytes) -> None:
        self.encoded += len(data)
        self._stages[0].feed(data)

    def end(self) -> None:
        self._stages[0].end()

    @property
    def done(self) -> bool:
        return self._stages[-1].done

    def pull(self) -> bytes:
        """The next piece of the decoded body; ``b""`` when more input is needed (or at the end)."""
        out = self._pull(len(self._stages) - 1)
        if out:
            self.decoded += len(out)
            self._check()
        return out

    def _pull(self, i: int) -> bytes:
        stage = self._stages[i]
        while True:
            out = stage.pull()
            if out or i == 0 or stage.done:
                return out
            upstream = self._pull(i - 1)
            if upstream:
                stage.feed(upstream)
            elif self._stages[i - 1].done:
                stage.end()
            else:
                return b""

    def _check(self) -> None:
        if self.max_size is not None and self.decoded > self.max_size:
            raise ResponseExceededMaxSizeError(
                f"decompressed body exceeded max_decoded_size ({self.max_size} bytes)"
            )
        ratio = self.max_ratio
        if ratio and self.decoded > RATIO_GRACE and self.decoded > ratio * max(self.encoded, 1):
            raise ResponseExceededMaxSizeError(
                f"decompressed body grew past {ratio:g} times its encoded size "
                f"({self.decoded} bytes from {self.encoded}): a decompression bomb?"
            )
