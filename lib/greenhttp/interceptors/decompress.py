"""The ``decompress`` interceptor: decode ``Content-Encoding`` (spec 4.5, REFERENCE §7.4).

Decoding streams with back-pressure: each encoded chunk is fed to a
:class:`~greenhttp._core.decoders.BodyDecoder` and decoded pieces (about
64 KiB each) are passed on one at a time. When the consumer pauses, decoding
stops where it is and the connection is paused too; the rest of what was
received stays encoded until the consumer resumes. The downstream handler
steers the request through a small controller that makes this work; on
resume, the held-back pieces are delivered from the event loop (a callback
must not run on the resuming greenlet, which may be the consumer itself).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any

from .._core.decoders import BodyDecoder, parse_encodings
from .._handlers.base import StandInController
from .._runtime import call_soon
from ..errors import ExperimentalWarning, InvalidArgumentError, RequestAbortedError

__all__ = ["decompress"]

DispatchFn = Callable[[dict[str, Any], Any], bool]

_warned = False


def _warn_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            ExperimentalWarning(
                "the decompress interceptor is experimental and subject to change",
                code="GREENHTTP-DECOMPRESS",
            ),
            stacklevel=3,
        )


class _DecompressHandler(StandInController):
    """Decodes the body; the controller the downstream handler sees (``target``
    is the controller of the request itself). After the terminal callback
    ``abort`` does nothing and the properties keep answering.
    """

    def __init__(
        self,
        handler: Any,
        skip_status_codes: frozenset[int],
        skip_error_responses: bool,
        max_size: int | None,
        max_ratio: float | None,
    ) -> None:
        super().__init__(handler)
        self._skip_status_codes = skip_status_codes
        self._skip_error_responses = skip_error_responses
        self._max_size = max_size
        self._max_ratio = max_ratio
        self._decoder: BodyDecoder | None = None
        self._decoding = False  # this response is decoded (stays True once the decoder is gone)
        self._paused = False  # the downstream handler asked for a pause
        self._ended = False  # the encoded body is complete (the request itself is done)
        self._trailers: Any = None
        self._scheduled = False
        self._abort_reason: BaseException | None = None

    # -- the controller the downstream handler sees ----------------------------------------------
    def pause(self) -> None:
        self._paused = True
        target = self.target
        if target is not None:
            target.pause()

    def resume(self) -> None:
        if not self._paused:
            return
        self._paused = False
        if self._decoder is None:
            self.target.resume()
        elif not self._scheduled and not self._done:
            self._scheduled = True
            call_soon(self._pump_later)

    def abort(self, reason: BaseException | None = None) -> None:
        if reason is None:
            reason = RequestAbortedError()
        if self._done or self._abort_reason is not None:
            return
        self._abort_reason = reason
        if not self._ended and self.target is not None:
            self.target.abort(reason)  # fails through on_response_error
        else:
            self._fail(reason)  # the request itself is over; only decoding was left

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def aborted(self) -> bool:
        return self._abort_reason is not None or bool(self.target is not None and self.target.aborted)

    @property
    def reason(self) -> BaseException | None:
        if self._abort_reason is not None:
            return self._abort_reason
        return self.target.reason if self.target is not None else None

    @property
    def raw_headers(self) -> Any:
        raw = self.target.raw_headers if self.target is not None else None
        if raw is None or not self._decoding:
            return raw
        out: list[bytes] = []
        for i in range(0, len(raw) - 1, 2):
            if raw[i].lower() not in (b"content-encoding", b"content-length"):
                out += (raw[i], raw[i + 1])
        return out

    # -- decoding -----------------------------------------------------------------------------
    def _fail(self, err: BaseException) -> None:
        if self._done:
            return
        self._done = True
        self._decoder = None
        try:
            super().on_response_error(self, err)
        finally:
            self.handler = None  # it may keep us as its controller: no cycle once done

    def _pump(self) -> None:
        """Pass decoded pieces on until the consumer pauses or the input runs out. Raises."""
        decoder = self._decoder
        forward = super().on_response_data
        while decoder is not None and not self._paused and not self._done:
            piece = decoder.pull()
            if not piece:
                if self._ended and decoder.done:
                    self._done = True
                    self._decoder = None
                    try:
                        super().on_response_end(self, self._trailers)
                    finally:
                        self.handler = None
                return
            forward(self, piece)

    def _pump_later(self) -> None:
        # From the event loop, after a resume: nobody is there to catch an error but us.
        self._scheduled = False
        if self._done or self._paused:
            return
        try:
            self._pump()
        except Exception as exc:
            if self._ended:
                self._fail(exc)
            else:
                self.target.abort(exc)
            return
        if not self._paused and not self._ended and not self._done:
            self.target.resume()

    # -- the handler protocol -------------------------------------------------------------------
    def on_response_start(self, controller: Any, status_code: int, headers: Any, status_message: str) -> None:
        coding = headers.get("content-encoding") if isinstance(headers, dict) else None
        if (
            coding is None
            or status_code < 200
            or status_code in self._skip_status_codes
            or (self._skip_error_responses and status_code >= 400)
        ):
            super().on_response_start(self, status_code, headers, status_message)
            return
        codings = parse_encodings(coding)
        if not codings:  # a coding we don't know, or none listed: pass the body on as it is
            super().on_response_start(self, status_code, headers, status_message)
            return
        self._decoder = BodyDecoder(codings, max_size=self._max_size, max_ratio=self._max_ratio)
        self._decoding = True
        headers = {k: v for k, v in headers.items() if k not in ("content-encoding", "content-length")}
        super().on_response_start(self, status_code, headers, status_message)

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        decoder = self._decoder
        if decoder is None:
            if not self._done:
                super().on_response_data(self, chunk)
            return
        decoder.feed(chunk)
        self._pump()

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        decoder = self._decoder
        if decoder is None:
            if not self._done:
                self._done = True
                try:
                    super().on_response_end(self, trailers)
                finally:
                    self.handler = None
            return
        self._ended = True
        self._trailers = trailers
        decoder.end()
        self._pump()  # the rest goes out now, or after the consumer resumes

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        self._fail(err)


def _status_list(name: str, value: Any) -> frozenset[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{name} must be a list of status codes, got {value!r}")
    items = list(value)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise InvalidArgumentError(f"{name} must be a list of status codes, got {value!r}")
    return frozenset(items)


def decompress(
    skip_status_codes: Iterable[int] = (204, 304),
    skip_error_responses: bool = True,
    *,
    max_decoded_size: int | None = None,
    max_ratio: float | None = 100,
) -> Callable[[DispatchFn], DispatchFn]:
    """An interceptor decoding ``gzip``, ``x-gzip``, ``deflate``, ``br``, ``zstd``,
    ``compress`` and ``x-compress`` bodies (stacked codings too).

    * ``skip_status_codes``: statuses whose body is passed on as it is
      (default ``[204, 304]``);
    * ``skip_error_responses``: leave 4xx/5xx bodies encoded (default True);
    * ``max_decoded_size``: fail with ``ResponseExceededMaxSizeError`` once the
      decoded body passes this many bytes (default None: no limit);
    * ``max_ratio``: the decompression-bomb guard: fail once the decoded body
      passes 32 MiB *and* is more than ``max_ratio`` times the encoded bytes
      received (default 100; None or 0 turns it off).

    A decoded response loses its ``content-encoding`` and ``content-length``
    headers. HEAD requests, 1xx responses and unknown codings pass untouched;
    more than five codings is an error. Decoding streams with back-pressure.
    Experimental: the first call issues a :class:`greenhttp.ExperimentalWarning`
    (once per process). Validated now (InvalidArgumentError); greenlet-safe;
    nothing in it blocks.
    """
    skip = _status_list("skip_status_codes", skip_status_codes)
    if not isinstance(skip_error_responses, bool):
        raise InvalidArgumentError(f"skip_error_responses must be a boolean, got {skip_error_responses!r}")
    if max_decoded_size is not None and (
        isinstance(max_decoded_size, bool) or not isinstance(max_decoded_size, int) or max_decoded_size < 0
    ):
        raise InvalidArgumentError(f"max_decoded_size must be a non-negative integer or None, got {max_decoded_size!r}")
    if max_ratio is not None and (
        isinstance(max_ratio, bool) or not isinstance(max_ratio, (int, float)) or not max_ratio >= 0
    ):
        raise InvalidArgumentError(f"max_ratio must be a non-negative number or None, got {max_ratio!r}")
    _warn_once()

    def wrap(dispatch: DispatchFn) -> DispatchFn:
        def decompress_dispatch(opts: dict[str, Any], handler: Any) -> bool:
            if str(opts.get("method", "")).upper() == "HEAD":
                return dispatch(opts, handler)
            return dispatch(
                opts, _DecompressHandler(handler, skip, skip_error_responses, max_decoded_size, max_ratio)
            )

        return decompress_dispatch

    return wrap
