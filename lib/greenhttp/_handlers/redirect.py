"""``RedirectHandler``: follows 3xx responses by dispatching the next request.

The decisions are ``_core/redirect.py``'s; this is the glue. A redirect
response's body is read and dropped (so the connection stays usable), and
the next request is dispatched from ``on_response_end``, on the reader
greenlet: dispatching never blocks. A failure decided at the head (the limit
with ``throw_on_max_redirect``, a loop) is likewise delivered once the body
is read, so it never costs the connection either.

The downstream handler sees ``on_request_start`` once per hop, with a
context whose ``"history"`` is the list of URLs requested so far (the same
list object each time, so at the end it holds every hop, the final URL last).
The controller it gets there, and in every later callback, is this
handler, which steers the current hop: an abort while the next hop waits
to start (for a connection) fails the request at once, and that hop is
aborted when it starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._core.body import replayable
from .._core.redirect import (
    Hop,
    RedirectOptions,
    next_hop,
    normalize_origin,
    redirect_options,
    request_path,
)
from ..errors import InvalidArgumentError, RequestAbortedError
from .base import DecoratorHandler, SteeringController

__all__ = ["RedirectHandler"]


class RedirectHandler(SteeringController, DecoratorHandler):
    """Wraps ``handler``; follows redirects of ``opts`` through ``dispatch`` per ``options``.

    ``opts`` must no longer hold the redirect options (the interceptor strips
    them). ``options`` is a dict of the ``redirect()`` interceptor's keywords
    (validated here, InvalidArgumentError naming the option), None for the
    defaults (nothing followed), or the interceptor's validated options. One
    instance serves one request and all its hops. Its callbacks never block.
    """

    def __init__(
        self,
        dispatch: Callable[[dict[str, Any], Any], bool],
        opts: dict[str, Any],
        handler: Any,
        options: RedirectOptions | dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(options, RedirectOptions):
            if options is not None and not isinstance(options, dict):
                raise InvalidArgumentError(f"options must be a dict of redirect options, got {options!r}")
            options = redirect_options(None, options)
        super().__init__(handler)
        self.dispatch = dispatch
        self.opts = opts
        self.options = options
        self.history: list[str] = []
        self._next: Hop | None = None
        self._error: BaseException | None = None
        self.target: Any = None  # the current hop's controller
        self._between = False  # the next hop was dispatched and has not started yet
        self._abort_reason: BaseException | None = None
        self._whole_body = False
        self._done = False  # the request failed between hops: later callbacks are dropped

    # -- the controller the downstream handler gets in on_request_start --------------------------
    def _consumer_abort(self, reason: BaseException | None) -> None:
        if self._abort_reason is not None or self._done:
            return
        reason = self._abort_reason = reason if reason is not None else RequestAbortedError()
        if not self._between:
            self.target.abort(reason)
            return
        self._done = True  # the hop is queued: fail now, abort it when it starts
        handler, self.handler = self.handler, None
        fn = getattr(handler, "on_response_error", None)
        if fn is not None:
            fn(self, reason)

    def _consumer_paused(self, paused: bool) -> None:
        pass  # the hop's own controller keeps the pause

    def _url(self) -> str:
        origin = normalize_origin(self.opts.get("origin")) or ""
        path = request_path(self.opts)  # with its query: /a?x=1 and /a are two URLs
        return path if path.startswith(("http://", "https://")) else origin + path

    def on_request_start(self, controller: Any, context: Any) -> None:
        self._steer(controller)
        self._between = False
        if self._abort_reason is not None:
            controller.abort(self._abort_reason)
            return
        ctx = dict(context) if isinstance(context, dict) else {}
        ctx["history"] = self.history
        super().on_request_start(self, ctx)

    def on_response_start(self, controller: Any, status_code: int, headers: Any, status_message: str) -> None:
        if self._done:
            return
        if status_code < 200:
            super().on_response_start(self, status_code, headers, status_message)
            return
        self.history.append(self._url())
        decision = next_hop(
            status_code, headers, self.opts, self.options, self.history, replayable(self.opts.get("body"))
        )
        if decision is None:
            super().on_response_start(self, status_code, headers, status_message)
        elif isinstance(decision, Hop):
            self._next = decision
        else:
            self._error = decision

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        # RFC 9110 §15.4: a redirect's body is only a hint for humans; it is dropped.
        if self._next is None and self._error is None and not self._done:
            super().on_response_data(self, chunk)

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        if self._done:
            return
        error, self._error = self._error, None
        if error is not None:
            self.on_response_error(self, error)
            return
        hop, self._next = self._next, None
        if hop is None:
            super().on_response_end(self, trailers)
            self.handler = None  # the downstream handler holds this controller: no cycle left
            return
        self.opts = hop.opts
        self._between = True
        try:
            self.dispatch(hop.opts, self)
        except Exception as exc:
            self.on_response_error(self, exc)

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        if not self._done and self.handler is not None:
            self._between = False
            super().on_response_error(self, err)
            self.handler = None

    def on_request_upgrade(self, controller: Any, status_code: int, headers: Any, socket: Any) -> None:
        if not self._done:
            super().on_request_upgrade(self, status_code, headers, socket)
            self.handler = None
