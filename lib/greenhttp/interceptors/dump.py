"""The ``dump`` interceptor: read and discard response bodies (spec 4.5, REFERENCE §7.1).

The downstream handler gets the response head and then its end, never the
body: the body is read and thrown away, so a keep-alive connection stays
usable (an error response included) without anyone having to consume it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._handlers.base import StandInController
from ..errors import InvalidArgumentError, RequestAbortedError

__all__ = ["dump"]

DispatchFn = Callable[[dict[str, Any], Any], bool]


def _check_max_size(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{name} must be a positive integer (bytes), got {value!r}")
    return value


class _DumpHandler(StandInController):
    """Reads and drops the body. As the controller the downstream handler sees,
    aborting it fails the request at once but lets the body drain in the
    background, so the connection survives. After the terminal callback it
    still answers (``aborted``, ``reason``, ``raw_headers``); ``abort``,
    ``pause`` and ``resume`` do nothing.
    """

    def __init__(self, handler: Any, max_size: int, head: bool = False) -> None:
        super().__init__(handler)
        self.max_size = max_size
        self.head = head  # a HEAD request: its answers have no body, whatever Content-Length says
        self.size = 0
        self._abort_reason: BaseException | None = None
        self._headers_seen = False

    # -- the controller the downstream handler sees -------------------------------------------
    def abort(self, reason: BaseException | None = None) -> None:
        self._consumer_abort(reason if reason is not None else RequestAbortedError())

    def pause(self) -> None:  # no body goes downstream: nothing to hold back
        pass

    def resume(self) -> None:
        pass

    def wants_whole_body(self) -> None:  # the body is dropped as it comes: never gathered whole
        pass

    @property
    def aborted(self) -> bool:
        return self._abort_reason is not None

    @property
    def paused(self) -> bool:
        return False

    @property
    def reason(self) -> BaseException | None:
        return self._abort_reason

    # -- the handler ------------------------------------------------------------------------------
    def _fail(self, err: BaseException) -> None:
        if not self._done:
            self._done = True
            try:
                super().on_response_error(self, err)
            finally:
                self.handler = None

    def _consumer_abort(self, reason: BaseException) -> None:
        if self._abort_reason is not None or self._done:
            return
        self._abort_reason = reason
        target = self.target
        if not self._headers_seen and target is not None:
            target.abort(reason)  # no head yet: nothing worth keeping the connection for
        else:
            self._fail(reason)  # the body keeps draining; the connection stays usable

    def on_response_start(self, controller: Any, status_code: int, headers: Any, status_message: str) -> None:
        if status_code >= 200:
            self._headers_seen = True
            length = headers.get("content-length") if isinstance(headers, dict) else None
            if self.head or status_code in (204, 304):
                length = None  # RFC 9110 §8.6: the size a body would have had; there is none
            if isinstance(length, str) and length.isdigit() and int(length) > self.max_size:
                controller.abort(
                    RequestAbortedError(f"Response size ({int(length)}) larger than max_size ({self.max_size})")
                )
                return
        if not self._done:
            super().on_response_start(self, status_code, headers, status_message)

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_size:
            controller.abort(
                RequestAbortedError(f"Response size ({self.size}) larger than max_size ({self.max_size})")
            )

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        if not self._done:
            self._done = True
            try:
                # The trailers are discarded with the body, as the original's onResponseEnd({}).
                super().on_response_end(self, {})
            finally:
                self.handler = None

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        self._fail(err)


def dump(max_size: int = 1048576) -> Callable[[DispatchFn], DispatchFn]:
    """An interceptor that reads and discards every response body, up to ``max_size`` bytes.

    The handler downstream gets ``on_response_start`` and ``on_response_end``
    with no data in between, and no trailers (``{}``). A ``Content-Length`` above ``max_size`` fails the
    request at once with ``RequestAbortedError`` (the connection is closed
    rather than read); so does a body of unknown length once it passes
    ``max_size``. Per request, ``dump_max_size=`` overrides ``max_size``. An
    abort from downstream after the head fails the request at once while
    the body keeps draining, so the connection stays usable. Validated now
    (InvalidArgumentError); greenlet-safe; nothing in it blocks.
    """
    default = _check_max_size("max_size", max_size)

    def wrap(dispatch: DispatchFn) -> DispatchFn:
        def dump_dispatch(opts: dict[str, Any], handler: Any) -> bool:
            size = default
            if "dump_max_size" in opts:
                if opts["dump_max_size"] is not None:
                    size = _check_max_size("dump_max_size", opts["dump_max_size"])
                opts = {k: v for k, v in opts.items() if k != "dump_max_size"}
            head = str(opts.get("method", "")).upper() == "HEAD"
            return dispatch(opts, _DumpHandler(handler, size, head))

        return dump_dispatch

    return wrap
