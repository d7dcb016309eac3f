"""``request()``: dispatch one request and block the caller until the response head.

:class:`RequestHandler` is an ordinary dispatch handler. It parks the calling
greenlet on a :class:`Parker` that the connection's reader greenlet fills at
``on_response_start``; the body then streams into a :class:`BodyReadable`.
No greenlet is spawned per request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .._core.request import WHOLE_RESPONSE_TAKERS
from .._runtime import Parker, spawn
from ..errors import InvalidArgumentError, RequestAbortedError
from .readable import BodyReadable as _BodyReadable
from .response import ResponseData as _ResponseData

__all__ = ["RequestHandler", "request", "start_request", "await_response", "bind_signal", "run_with_callback"]

# Final: compiled, a C variable rather than a lookup in the module's dict at each
# response (docs/performance.md, "Compiled modules").
BodyReadable: Final = _BodyReadable
ResponseData: Final = _ResponseData


def bind_signal(signal: Any, abort: Callable[[Any], None]) -> Callable[[], None] | None:
    """Call ``abort(reason)`` when ``signal`` aborts. Returns a function that unbinds.

    ``signal`` is an :class:`AbortSignal`-like object (``add_event_listener``)
    or anything with ``on("abort", fn)``. An already aborted signal aborts now.
    """
    if signal is None:
        return None
    if hasattr(signal, "add_event_listener"):
        if getattr(signal, "aborted", False):
            abort(_reason(signal))
            return None

        def listener(_ev: Any) -> None:
            abort(_reason(signal))

        signal.add_event_listener("abort", listener)
        remove = getattr(signal, "remove_event_listener", None)
        if remove is None:
            return None
        return lambda: remove("abort", listener)
    if hasattr(signal, "on"):
        if getattr(signal, "aborted", False):  # (checked first whatever the shape, as the original)
            abort(_reason(signal))
            return None

        def on_abort(*_args: Any) -> None:
            abort(_reason(signal))

        signal.on("abort", on_abort)
        off = getattr(signal, "off", None) or getattr(signal, "remove_listener", None)
        return (lambda: off("abort", on_abort)) if off is not None else None
    raise InvalidArgumentError(f"signal must be an AbortSignal or have on('abort', fn), got {signal!r}")


def _reason(signal: Any) -> BaseException:
    reason = getattr(signal, "reason", None)
    if not isinstance(reason, BaseException):
        return RequestAbortedError()
    raisable = getattr(signal, "_raisable", None)  # an AbortSignal: see there
    return raisable() if raisable is not None else reason


class RequestHandler(Parker):
    """The dispatch handler behind ``request()``. Callbacks run on the reader greenlet.

    It is also the :class:`Parker` its caller waits on for the response.
    """

    __slots__ = (
        "opaque",
        "on_info",
        "raw",
        "hwm",
        "controller",
        "context",
        "body",
        "response",
        "abort_reason",
        "unbind",
    )

    def __init__(self, opaque: Any, on_info: Any, raw: bool, hwm: int) -> None:
        # Parker's state, set here rather than through Parker.__init__ (one call fewer).
        self._waiter = self._value = self._exc = None
        self._state = 0
        self.opaque = opaque
        self.on_info = on_info
        self.raw = raw
        self.hwm = hwm
        self.controller: Any = None
        self.context: Any = None
        self.body: _BodyReadable | None = None
        self.response: _ResponseData | None = None
        self.abort_reason: BaseException | None = None
        self.unbind: Callable[[], None] | None = None

    def abort(self, reason: BaseException) -> None:
        """From the signal: abort now, or as soon as the request starts."""
        if self.abort_reason is not None:
            return
        self.abort_reason = reason
        if self.controller is not None:
            self.controller.abort(reason)
        else:
            self.set_exception(reason)

    def on_request_start(self, controller: Any, context: Any) -> None:
        self.controller = controller
        self.context = context
        if self.abort_reason is not None:
            controller.abort(self.abort_reason)

    # Compiled, an annotation is also a check: what the handler only passes on
    # (a status message, a chunk) is Any, as any dispatcher may call these.
    def on_response_start(self, controller: Any, status_code: int, headers: Any, status_message: Any) -> None:
        if status_code < 200:
            if self.on_info is not None:
                self.on_info({"status_code": status_code, "headers": headers})
            return
        if self.raw:
            headers = controller.raw_headers
        body = self.body = BodyReadable(controller, headers, self.hwm)
        response = self.response = ResponseData(
            status_code, status_message, headers, {}, body, self.opaque, self.context
        )
        self.set(response)

    def _on_response_whole(
        self, controller: Any, status_code: int, headers: Any, status_message: Any, body: bytes
    ) -> None:
        """A final head and its whole body at once (the connection read them together):
        what ``on_response_start``, ``on_response_data`` and ``on_response_end`` do.
        Registered in ``WHOLE_RESPONSE_TAKERS`` for this class only, so a wrapper
        that forwards attributes to a RequestHandler never bypasses itself."""
        if self.unbind is not None:
            self.unbind()
        if self.raw:
            headers = controller.raw_headers
        readable = self.body = BodyReadable(controller, headers, self.hwm, body)
        response = self.response = ResponseData(
            status_code, status_message, headers, {}, readable, self.opaque, self.context
        )
        self.set(response)

    def on_response_data(self, controller: Any, chunk: Any) -> None:
        self.body._push(chunk)  # type: ignore[union-attr]

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        if self.unbind is not None:
            self.unbind()
        if trailers:
            # Trailers stay a parsed dict even with response_headers="raw", as in the
            # original's request API; the raw list is on controller.raw_trailers.
            self.response.trailers.update(trailers)  # type: ignore[union-attr]
        self.body._end()  # type: ignore[union-attr]

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        if self.unbind is not None:
            self.unbind()
        body = self.body
        if body is not None:
            body._fail(err)
        else:
            self.set_exception(err)


WHOLE_RESPONSE_TAKERS[RequestHandler] = RequestHandler._on_response_whole


# The options request() takes for itself (the rest go to dispatch()).
_HANDLER_OPTIONS: Final = frozenset(["opaque", "signal", "on_info", "response_headers", "high_water_mark"])


def request(dispatcher: Any, options: dict[str, Any]) -> _ResponseData:
    """Dispatch ``options`` through ``dispatcher`` and block until the response head."""
    return await_response(start_request(dispatcher, options))


def start_request(dispatcher: Any, options: dict[str, Any]) -> RequestHandler:
    """Check ``options`` and dispatch them; never blocks. The handler returned is
    what :func:`await_response` waits on."""
    if options.get("method") == "CONNECT":
        raise InvalidArgumentError("invalid method: use connect() for CONNECT")
    if len(options) > 2 and not _HANDLER_OPTIONS.isdisjoint(options):
        opaque = options.pop("opaque", None)
        signal = options.pop("signal", None)
        on_info = options.pop("on_info", None)
        response_headers = options.pop("response_headers", None)
        hwm = options.pop("high_water_mark", 65536)
        if response_headers not in (None, "raw"):
            raise InvalidArgumentError(f"response_headers must be 'raw' or None, got {response_headers!r}")
        if isinstance(hwm, bool) or not isinstance(hwm, int) or hwm < 0:
            raise InvalidArgumentError(f"invalid high_water_mark: {hwm!r}")
        if on_info is not None and not callable(on_info):
            raise InvalidArgumentError(f"on_info must be callable, got {on_info!r}")
        handler = RequestHandler(opaque, on_info, response_headers == "raw", hwm)
        if signal is not None:
            handler.unbind = bind_signal(signal, handler.abort)
    else:
        handler = RequestHandler(None, None, False, 65536)
    try:
        dispatcher.dispatch(options, handler)
    except BaseException:
        # Raised before any handler callback could unbind the signal (an interceptor).
        if handler.unbind is not None:
            handler.unbind()
        raise
    return handler


def await_response(handler: RequestHandler) -> _ResponseData:
    """Block until the response head of a :func:`start_request` arrives."""
    try:
        data: _ResponseData = handler.get()
        return data
    except BaseException as exc:
        # The caller gave up (an error, or a gevent.Timeout around the call).
        if handler.controller is not None and not isinstance(exc, Exception):
            handler.controller.abort(RequestAbortedError())
        elif handler.abort_reason is None and not isinstance(exc, Exception):
            handler.abort(RequestAbortedError())
        raise


def run_with_callback(
    start: Callable[[], Any],
    finish: Callable[[Any], Any],
    callback: Callable[[Any, Any], Any],
    opaque: Any = None,
) -> None:
    """The ``callback=`` form of a blocking call: ``start()`` now, in the caller,
    then ``finish(started)`` in a new greenlet, which calls ``callback(err, data)``
    exactly once (never before this returns).

    ``start`` does what the original does before its promise is returned: a
    request is queued (so a ``close()`` right after waits for it), a close or
    destroy has begun (``closed``/``destroyed`` are already true). An error it
    raises goes to the callback too.
    """
    if not callable(callback):
        raise InvalidArgumentError(f"callback must be callable, got {callback!r}")
    started: Any = None
    failed: Exception | None = None
    try:
        started = start()
    except Exception as exc:
        failed = exc

    def run() -> None:
        try:
            if failed is not None:
                raise failed
            value = finish(started)
        except Exception as exc:
            if opaque is not None:
                exc.opaque = opaque  # type: ignore[attr-defined]
            callback(exc, None)
            return
        try:
            callback(None, value)
        except BaseException:
            # Nobody can read the body now: destroy it so it does not hold the connection.
            if isinstance(value, ResponseData):
                value.body.close()
            raise

    spawn(run)
