"""The ``response_error`` interceptor: 4xx/5xx responses become ``ResponseError`` (spec 4.5, REFERENCE §7.5).

An error response is not passed on: its body is read (at most
:data:`MAX_ERROR_BODY` bytes), decoded when it is ``application/json``
(or ``+json``) or ``text/plain``, and the request then fails with
:class:`greenhttp.errors.ResponseError` carrying ``status_code`` (also
``status``), ``headers`` and ``body``. Reading the whole error body keeps a
keep-alive connection usable; a longer body is cut at the limit and the
connection is closed instead.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable
from typing import Any

from .._core.decoders import BodyDecoder, parse_encodings
from .._handlers.base import DecoratorHandler
from ..errors import InvalidArgumentError, ResponseError

__all__ = ["response_error", "MAX_ERROR_BODY"]

DispatchFn = Callable[[dict[str, Any], Any], bool]

MAX_ERROR_BODY = 1 << 20  # bytes of an error body kept, encoded and decoded alike


def _first(value: Any) -> str:
    if isinstance(value, list):
        value = value[0] if value else ""
    return value if isinstance(value, str) else ""


def _media_type(headers: Any) -> tuple[str, str]:
    """``(type/subtype, charset)`` of the response, lower case; charset defaults to utf-8."""
    value = _first(headers.get("content-type"))
    mime, _, params = value.partition(";")
    charset = "utf-8"
    for param in params.split(";"):
        name, _, val = param.partition("=")
        if name.strip().lower() == "charset" and val.strip():
            charset = val.strip().strip('"').lower()
    try:
        codecs.lookup(charset)
    except LookupError:
        charset = "utf-8"
    return mime.strip().lower(), charset


def _is_json(mime: str) -> bool:
    return mime.startswith("application/json") or mime.endswith("+json")


def _decoded(data: bytes, headers: Any) -> bytes:
    """Undo the body's content codings (error responses usually skip ``decompress``), bounded."""
    try:
        codings = parse_encodings(headers.get("content-encoding"))
    except Exception:
        return data
    if not codings:
        return data
    decoder = BodyDecoder(codings, max_size=MAX_ERROR_BODY)
    parts: list[bytes] = []
    try:
        decoder.feed(data)
        decoder.end()
        while True:
            piece = decoder.pull()
            if not piece:
                break
            parts.append(piece)
    except Exception:
        pass  # cut at the limit, or corrupt: keep what came out
    return b"".join(parts)[:MAX_ERROR_BODY]


class _ResponseErrorHandler(DecoratorHandler):
    def __init__(self, handler: Any) -> None:
        super().__init__(handler)
        self._status = 0
        self._headers: Any = None
        self._parts: list[bytes] = []
        self._size = 0
        self._keep = False  # the body is JSON or text: worth keeping

    def on_response_start(self, controller: Any, status_code: int, headers: Any, status_message: str) -> None:
        if status_code < 400:
            self._status = 0
            super().on_response_start(controller, status_code, headers, status_message)
            return
        self._status = status_code
        self._headers = headers
        mime, _ = _media_type(headers)
        self._keep = _is_json(mime) or mime.startswith("text/plain")

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        if not self._status:
            super().on_response_data(controller, chunk)
            return
        self._size += len(chunk)
        if self._keep:
            self._parts.append(chunk)
        if self._size > MAX_ERROR_BODY:
            controller.abort(self._error())  # stop reading: the connection goes, the error stays

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        if not self._status:
            super().on_response_end(controller, trailers)
            return
        super().on_response_error(controller, self._error())

    def _error(self) -> ResponseError:
        body: Any = ""
        if self._keep:
            data = _decoded(b"".join(self._parts)[:MAX_ERROR_BODY], self._headers)
            self._parts = []
            mime, charset = _media_type(self._headers)
            try:
                body = data.decode(charset, errors="replace")
            except (LookupError, UnicodeError):  # a codec but no text encoding (zlib, hex, idna, ...)
                body = data.decode("utf-8", errors="replace")
            if _is_json(mime):
                try:
                    body = json.loads(body)
                except (ValueError, RecursionError):
                    pass  # not JSON after all (or nested too deep to parse): the text it is
        self._status, status = 0, self._status
        return ResponseError("Response Error", status, self._headers, body)


def response_error(**options: Any) -> Callable[[DispatchFn], DispatchFn]:
    """An interceptor failing 4xx/5xx responses with :class:`~greenhttp.errors.ResponseError`.

    The error carries ``status_code`` (and ``status``), ``headers`` and
    ``body``: the parsed JSON for ``application/json`` and ``+json`` types,
    the text for ``text/plain`` (decoded with its charset, UTF-8 by default;
    gzip/br/zstd/deflate/compress-encoded bodies are decoded first), ``""``
    otherwise. At most 1 MiB of the body is read; past that the request
    fails at once and the connection is closed. Takes no options (the spec
    reserves them). Greenlet-safe; nothing in it blocks.
    """
    if options:
        raise InvalidArgumentError(f"response_error takes no options, got {sorted(options)!r}")

    def wrap(dispatch: DispatchFn) -> DispatchFn:
        def response_error_dispatch(opts: dict[str, Any], handler: Any) -> bool:
            return dispatch(opts, _ResponseErrorHandler(handler))

        return response_error_dispatch

    return wrap
