"""``BodyReadable``: the response body a blocking ``request()`` returns.

The connection's reader greenlet pushes chunks in; the caller's greenlet
pulls them out. Back-pressure is real: past ``high_water_mark`` unread
bytes the request is paused, so the socket stops being read, not memory
filling up. One consumer only: a second way of reading raises
``TypeError("unusable")``.
"""

from __future__ import annotations

import builtins
import json as _json
from collections import deque
from collections.abc import Iterator
from typing import Any

from .._core.blob import Blob
from .._runtime import Parker
from ..errors import AbortError, InvalidArgumentError, NotSupportedError, RequestAbortedError

__all__ = ["BodyReadable"]

_BOM = b"\xef\xbb\xbf"


class BodyReadable:
    """A response body. Its reading methods block the calling greenlet until data arrives.

    Not meant to be read from two greenlets at once; pushing from the reader
    greenlet while one greenlet reads is the supported concurrency.
    """

    # One is made for every response: slots make it smaller and quicker to build.
    __slots__ = (
        "_controller",
        "_hwm",
        "_headers",
        "_chunks",
        "_size",
        "_ended",
        "_error",
        "_parker",
        "_used",
        "_closed",
        "_read_all",
        "_limit",
        "_dumped",
    )

    def __init__(
        self, controller: Any = None, headers: Any = None, high_water_mark: int = 65536, whole: bytes | None = None
    ) -> None:
        self._controller = controller
        self._hwm = high_water_mark
        self._headers = headers  # the response headers (a dict, or the raw list)
        chunks: deque[bytes] = deque()
        self._chunks = chunks
        if whole is None:
            self._size = 0
            self._ended = False
        else:  # the whole body, already here
            if whole:
                chunks.append(whole)  # (quicker than deque((whole,)))
            self._size = len(whole)
            self._ended = True
        self._error: BaseException | None = None
        self._parker: Parker | None = None
        self._used = False
        self._closed = False
        self._read_all = False
        self._limit = -1  # dump(): discard, and abort past this many bytes
        self._dumped = 0  # dump(): bytes discarded so far

    def _header(self, name: str) -> Any:
        """The value of response header ``name`` (lower-case): from the dict, or the first
        one in the raw list ``response_headers="raw"`` gives (None when absent)."""
        headers = self._headers
        if type(headers) is dict:
            return headers.get(name)
        if type(headers) is list:
            key = name.encode("latin-1")
            for i in range(0, len(headers) - 1, 2):
                if headers[i].lower() == key:
                    return headers[i + 1].decode("latin-1")
        return None

    @property
    def content_length(self) -> int | None:
        """The response's content-length, when it has a valid one."""
        cl = self._header("content-length")
        return int(cl) if type(cl) is str and cl.isdigit() and cl.isascii() else None

    @property
    def content_type(self) -> str:
        """The response's content-type ("" without one)."""
        ctype = self._header("content-type")
        return ctype if type(ctype) is str else ""

    # -- producer side: the reader greenlet ----------------------------------------
    def _push(self, chunk: bytes) -> None:
        if self._closed:
            return
        if self._limit >= 0:
            self._dumped += len(chunk)
            if self._dumped > self._limit:
                self._abort(RequestAbortedError("response body exceeded the dump limit"))
            return
        self._chunks.append(chunk)
        self._size += len(chunk)
        parker = self._parker
        if parker is not None:
            self._parker = None
            parker.set()
        if self._size >= self._hwm and not self._read_all and self._controller is not None:
            self._controller.pause()

    def _end(self) -> None:
        self._ended = True
        self._wake()

    def _fail(self, err: BaseException) -> None:
        if self._ended:
            return
        self._error = err
        self._ended = True
        self._wake()

    def _wake(self, _reason: Any = None) -> None:
        """Wake the reader waiting for more (``_reason``: a dump()'s signal aborted)."""
        parker = self._parker
        if parker is not None:
            self._parker = None
            parker.set()

    # -- consumer side ---------------------------------------------------------------
    def _wait(self) -> None:
        parker = self._parker = Parker()
        try:
            parker.get()
        except BaseException as exc:
            self._parker = None
            if not isinstance(exc, Exception):
                # The reader gave up (a gevent.Timeout around the read, or a kill):
                # nobody reads on, so the request is aborted and its connection let
                # go, as request() does for a caller waiting for the head
                # (docs/concurrency.md). Else the connection stayed taken until
                # body_timeout, and for ever under back-pressure.
                self.close()
            raise

    def _resume_if_low(self) -> None:
        controller = self._controller
        # An empty buffer resumes even with high_water_mark=0, where nothing is below the mark.
        if controller is not None and controller.paused and (self._read_all or self._size < self._hwm or not self._size):
            controller.resume()

    def _take_use(self) -> None:
        if self._used or self._closed:
            raise TypeError("unusable")
        self._used = True

    def _raise_error(self) -> None:
        err = self._error
        if err is not None:
            raise err

    @property
    def body_used(self) -> bool:
        """True once a consumer started reading."""
        return self._used

    def read(self, n: int = -1) -> builtins.bytes:
        """Up to ``n`` bytes (all that remain with ``n < 0``); ``b""`` at the end. Blocks
        until at least one byte is there, except ``read(0)``, which returns ``b""`` at once."""
        if n is None or n < 0:
            self._used = True
            return self._read_everything()
        if n == 0:
            return b""  # as io's read(0): nothing asked for, nothing waited for
        self._used = True
        if self._closed and not self._chunks:
            self._raise_error()  # (closed before its end: what was left is gone)
            return b""
        while not self._chunks:
            if self._ended:
                self._raise_error()
                return b""
            self._resume_if_low()
            self._wait()
        chunks = self._chunks
        first = chunks[0]
        if len(first) <= n:
            chunks.popleft()
            out = first
            while chunks and len(out) + len(chunks[0]) <= n:
                out += chunks.popleft()
        else:
            out = first[:n]
            chunks[0] = first[n:]
        self._size -= len(out)
        self._resume_if_low()
        return out

    def _read_everything(self) -> builtins.bytes:
        self._read_all = True
        controller = self._controller
        if controller is not None and hasattr(controller, "wants_whole_body"):
            controller.wants_whole_body()
        self._resume_if_low()
        while not self._ended:
            self._wait()
        self._raise_error()
        chunks = self._chunks
        if len(chunks) == 1:
            out = chunks.popleft()
            if type(out) is not builtins.bytes:
                out = builtins.bytes(out)  # a whole-body buffer (bytearray) from the transport
        else:
            out = b"".join(chunks)
            chunks.clear()
        self._size = 0
        return out

    def __iter__(self) -> Iterator[builtins.bytes]:
        """Yield body chunks as they arrive (blocking between them)."""
        self._used = True
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self._size -= len(chunk)
                self._resume_if_low()
                yield chunk
                continue
            if self._ended or self._closed:
                self._raise_error()
                return
            self._resume_if_low()
            self._wait()

    def bytes(self) -> builtins.bytes:
        """The whole body. Blocks until it has arrived."""
        if self._used or self._closed:
            raise TypeError("unusable")
        self._used = True
        if self._ended and self._error is None and len(self._chunks) == 1:
            # The common small response: it was all there before the caller looked.
            self._size = 0
            chunk = self._chunks.popleft()
            return chunk if type(chunk) is builtins.bytes else builtins.bytes(chunk)
        return self._read_everything()

    def array_buffer(self) -> builtins.bytes:
        """The whole body as ``bytes`` (the spec's ArrayBuffer)."""
        return self.bytes()

    def text(self, encoding: str = "utf-8") -> str:
        """The whole body decoded (UTF-8 by default, a leading BOM dropped). Bytes
        that do not decode become U+FFFD, as in the original (and requests, httpx)."""
        data = self.bytes()
        if data.startswith(_BOM) and encoding.replace("-", "").lower() == "utf8":
            data = data[3:]
        return data.decode(encoding, "replace")

    def json(self) -> Any:
        """The whole body parsed as JSON (an empty body raises ``ValueError``)."""
        return _json.loads(self.text())

    def blob(self) -> Blob:
        """The whole body as a :class:`Blob` typed with the response content-type."""
        return Blob([self.bytes()], type=self.content_type)

    def form_data(self) -> Any:
        """Not supported: raises :class:`NotSupportedError` (as the original does)."""
        raise NotSupportedError("form_data is not supported")

    def dump(self, limit: int = 131072, signal: Any = None) -> None:
        """Discard the body so the connection can be reused, reading at most ``limit`` bytes.

        A body larger than ``limit`` (by content-length, or once more was
        read) closes the connection instead. Blocks until done.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidArgumentError(f"limit must be a non-negative integer, got {limit!r}")
        if signal is not None:
            if not hasattr(signal, "aborted"):
                raise InvalidArgumentError("signal must be an AbortSignal")
            if signal.aborted:
                raise _dump_reason(signal)
        self._used = True  # (also for a body all here: dumped is read, as in the original)
        if self._ended or self._closed:
            self._chunks.clear()
            self._size = 0
            return
        if self.content_length is not None and self.content_length > limit:
            self.close()
            return
        self._dumped = self._size
        self._chunks.clear()
        self._size = 0
        if self._dumped > limit:
            self.close()
            return
        self._limit = limit
        self._read_all = True
        self._resume_if_low()
        unbind = None
        if signal is not None:
            from .request import bind_signal  # (that module imports this one)

            unbind = bind_signal(signal, self._wake)
        try:
            while not self._ended and not self._closed:
                if signal is not None and signal.aborted:
                    self.close()
                    raise _dump_reason(signal)
                self._wait()
        finally:
            if unbind is not None:
                unbind()

    def _abort(self, err: BaseException) -> None:
        self._used = True  # a body cut short is disturbed (the original's bodyUsed)
        self._closed = True
        self._chunks.clear()
        self._size = 0
        controller = self._controller
        if controller is not None and not self._ended:
            controller.abort(err)
        self._end()

    def close(self) -> None:
        """Stop reading. An unfinished body aborts its request (the connection closes)."""
        if self._closed:
            return
        self._used = True  # (what was not read is gone: as a destroyed stream is disturbed)
        if self._ended:
            self._closed = True
            if self._chunks and self._error is None:
                # Bytes that arrived were never read: a later read says so, as the
                # original's stream destroyed before its end errors (RequestAbortedError).
                self._error = RequestAbortedError()
            self._chunks.clear()
            self._size = 0
            return
        self._abort(RequestAbortedError())

    destroy = close

    def __enter__(self) -> BodyReadable:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "ended" if self._ended else "open"
        return f"<BodyReadable {state} buffered={self._size}>"


def _dump_reason(signal: Any) -> BaseException:
    """What ``dump(signal=...)`` raises for an aborted ``signal``: its reason (with the
    traceback it had when the signal aborted, see ``AbortSignal._raisable``), or
    :class:`AbortError` when the reason is not an exception."""
    reason = signal.reason
    if not isinstance(reason, BaseException):
        return AbortError()
    raisable = getattr(signal, "_raisable", None)
    return raisable() if raisable is not None else reason
