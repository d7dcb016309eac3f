"""``DecoratorHandler``: the base of handlers that wrap another handler.

Interceptors wrap the user's handler in a subclass that overrides the
callbacks it changes and forwards the rest. Callbacks run on the
connection's reader greenlet and must never block (DESIGN.md §4): a handler
that has to wait calls ``controller.pause()`` and someone calls ``resume()``.
"""

from __future__ import annotations

from typing import Any

from .._core.controller import Controller
from ..errors import NotSupportedError

__all__ = ["DecoratorHandler", "StandInController", "SteeringController"]


class DecoratorHandler:
    """Forwards every dispatch-handler callback to ``handler`` (callbacks it lacks are
    skipped, but for ``on_request_upgrade``: the socket is closed and the handler gets
    ``on_response_error`` with a ``NotSupportedError`` instead).

    Greenlet-safety: one instance serves one request, driven by one reader greenlet.
    """

    def __init__(self, handler: Any) -> None:
        self.handler = handler

    def on_request_start(self, controller: Any, context: Any) -> None:
        fn = getattr(self.handler, "on_request_start", None)
        if fn is not None:
            fn(controller, context)

    def on_request_upgrade(self, controller: Any, status_code: int, headers: Any, socket: Any) -> None:
        fn = getattr(self.handler, "on_request_upgrade", None)
        if fn is None:
            # Nobody to take the socket: close it, and the raise reaches the handler's
            # on_response_error, its one terminal call (a skipped upgrade left it none).
            socket.close()
            raise NotSupportedError("the handler has no on_request_upgrade method")
        fn(controller, status_code, headers, socket)

    def on_response_start(self, controller: Any, status_code: int, headers: Any, status_message: str) -> None:
        fn = getattr(self.handler, "on_response_start", None)
        if fn is not None:
            fn(controller, status_code, headers, status_message)

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        fn = getattr(self.handler, "on_response_data", None)
        if fn is not None:
            fn(controller, chunk)

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        fn = getattr(self.handler, "on_response_end", None)
        if fn is not None:
            fn(controller, trailers)

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        fn = getattr(self.handler, "on_response_error", None)
        if fn is not None:
            fn(controller, err)
        else:
            raise err


class _TargetsRawFields:
    """``raw_headers``, ``raw_trailers`` and the ``wants_whole_body`` hint: those of
    the controller stood in for (``target``)."""

    target: Any

    def wants_whole_body(self) -> None:
        target = self.target
        if target is not None and hasattr(target, "wants_whole_body"):
            target.wants_whole_body()

    @property
    def raw_headers(self) -> Any:
        return self.target.raw_headers if self.target is not None else None

    @property
    def raw_trailers(self) -> Any:
        return self.target.raw_trailers if self.target is not None else None


class StandInController(DecoratorHandler, _TargetsRawFields):
    """A handler that is also the controller its own handler sees, from
    ``on_request_start`` on, so that handler's ``abort`` and ``pause`` pass
    through it (``target`` is the controller of the request itself).

    Subclasses say what aborting and pausing mean and set ``_done`` once a
    terminal callback went downstream; then the link to the downstream handler
    is dropped: it keeps its controller, so a finished request leaves no
    reference cycle.
    """

    def __init__(self, handler: Any) -> None:
        super().__init__(handler)
        self.target: Any = None  # the controller of the request upstream
        self._done = False  # a terminal callback went downstream

    def on_request_start(self, controller: Any, context: Any) -> None:
        self.target = controller
        super().on_request_start(self, context)

    def on_request_upgrade(self, controller: Any, status_code: int, headers: Any, socket: Any) -> None:
        # (If it raises, the request's on_response_error comes here next and goes down:
        # the handler keeps its one terminal call.)
        super().on_request_upgrade(self, status_code, headers, socket)
        self._done = True
        self.handler = None


class SteeringController(_TargetsRawFields):
    """A controller that steers whichever request is current (``target``): the
    controller half of a handler that sends its request more than once (retry,
    redirect), handed downstream as the handler itself. A subclass keeps
    ``target``, ``_abort_reason`` and ``_whole_body`` and says what an abort and a
    pause mean to it."""

    target: Any
    _abort_reason: BaseException | None
    _whole_body: bool  # the consumer reads the body whole (``wants_whole_body``)

    def _steer(self, controller: Any) -> None:
        """Make ``controller`` (a new attempt's or hop's) the one steered, passing
        on the consumer's wish to read the body whole."""
        self.target = controller
        if self._whole_body and hasattr(controller, "wants_whole_body"):
            controller.wants_whole_body()

    def _consumer_abort(self, reason: BaseException | None) -> None:
        raise NotImplementedError

    def _consumer_paused(self, paused: bool) -> None:
        raise NotImplementedError

    def pause(self) -> None:
        self._consumer_paused(True)
        if self.target is not None:
            self.target.pause()

    def resume(self) -> None:
        self._consumer_paused(False)
        if self.target is not None:
            self.target.resume()

    def abort(self, reason: BaseException | None = None) -> None:
        self._consumer_abort(reason)

    def wants_whole_body(self) -> None:
        """The consumer reads the whole body at once: the transport may read a body
        of known length into one buffer, on this attempt and any later one."""
        self._whole_body = True
        target = self.target
        if target is not None and hasattr(target, "wants_whole_body"):
            target.wants_whole_body()

    @property
    def aborted(self) -> bool:
        return self._abort_reason is not None or bool(self.target is not None and self.target.aborted)

    @property
    def paused(self) -> bool:
        return bool(self.target is not None and self.target.paused)

    @property
    def reason(self) -> BaseException | None:
        if self._abort_reason is not None:
            return self._abort_reason
        return self.target.reason if self.target is not None else None


# The controllers a handler gets behind an interceptor are Controllers too (handlers.md).
Controller.register(StandInController)
Controller.register(SteeringController)
