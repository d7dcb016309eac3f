"""``RetryHandler``: retries a failed request, resuming a partly received body.

The policy (what is retried, how long to wait, how ranges are checked) is in
``_core/retry.py``; this module is the glue. Callbacks run on a connection's
reader greenlet and never block: the back-off is a greenlet of its own that
sleeps (a timer that, unlike an unreferenced one, keeps the event loop alive
while a request waits) and then re-dispatches. Each attempt is a separate dispatch with its own controller;
the downstream handler keeps one :class:`RetryController` that always steers
the current attempt, so pause/resume/abort keep working across attempts.

Resuming (REFERENCE §7.2): once the response head went downstream, a failure
mid-body is retried with ``Range: bytes=<received>-<end>`` (and ``If-Match``
with a strong ETag); the answer must be a ``206`` whose ``Content-Range``,
``Content-Length`` and ETag match, and only its body is passed on. A body
whose length is unknown (no ``Content-Length``, e.g. one decoded by an inner
``decompress``) is never resumed: its failure is delivered.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .._core.body import replayable
from .._core.headers import header_pairs
from .._core.retry import (
    ContentRange,
    RetryOptions,
    parse_content_range,
    retry_delay,
    retry_options,
    should_retry,
)
from .._runtime import GreenletExit, kill, sleep, spawn
from ..errors import InvalidArgumentError, RequestAbortedError, RequestRetryError
from .base import SteeringController

__all__ = ["RetryHandler", "RetryController"]


def _length_mismatch(headers: Any, rng: ContentRange | None) -> bool:
    """A ``206`` whose ``Content-Length`` is not the size of its ``Content-Range``."""
    length = headers.get("content-length")
    return (
        rng is not None and isinstance(length, str) and length.isdigit() and int(length) != rng.end - rng.start + 1
    )


class RetryController(SteeringController):
    """The controller a retried request's handler sees: it steers the current attempt.

    ``abort()`` also cancels a pending back-off and fails the request at once.
    Greenlet-safe in the sense of :class:`greenhttp.Controller`.

    This is the controller half of :class:`RetryHandler` (the handler is its own
    controller, so the two never refer to each other): ``target`` is the current
    attempt's controller. Once the request has finished, ``abort``, ``pause``
    and ``resume`` do nothing and the properties keep their last answers.
    """


def _cancel(timer: Any) -> None:
    """Stop a pending wait: our back-off greenlet, or a custom policy's timer."""
    if hasattr(timer, "kill"):
        kill(timer)
        return
    for name in ("close", "cancel"):
        fn = getattr(timer, name, None)
        if callable(fn):
            fn()
            return


class RetryHandler(RetryController):
    """Wraps ``handler`` and re-dispatches ``opts`` through ``dispatch`` on retryable failures.

    ``opts`` must not hold ``retry_options`` any more (the interceptor strips
    it); ``options`` are the retry options: a dict of the ``retry()``
    interceptor's keywords (validated here, InvalidArgumentError naming the
    option), None for the defaults, or the interceptor's own merged, validated
    options. One instance serves one request. Not a public constructor to
    call per se, but exported so custom interceptors and agents can reuse it.

    It is also the controller the downstream handler sees (see
    :class:`RetryController`). Once a terminal callback went downstream it
    drops its link to the downstream handler, which usually keeps its
    controller: a finished request leaves no reference cycle behind.
    """

    def __init__(
        self,
        opts: dict[str, Any],
        dispatch: Callable[[dict[str, Any], Any], bool],
        handler: Any,
        options: RetryOptions | dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(options, RetryOptions):
            if options is not None and not isinstance(options, dict):
                raise InvalidArgumentError(f"options must be a dict of retry options, got {options!r}")
            options = retry_options(options or {})
        self.opts = opts
        self.dispatch = dispatch
        self.handler = handler
        self.options = options
        self.target: Any = None  # the current attempt's controller
        self.counter = 0  # failed attempts so far
        self._counted = False  # the current attempt's failure was counted
        self._headers_sent = False
        self._received = 0  # body bytes passed downstream, counted from the representation's start
        self._end: int | None = None  # last byte position of the whole body, when known
        self._etag: str | None = None
        self._failure: BaseException | None = None  # a status failure whose body is being dropped
        self._redispatch_at_end = False
        self._done = False  # a terminal callback went downstream
        self._waiting = False  # between attempts: deciding or backing off
        self._timer: Any = None
        self._abort_reason: BaseException | None = None
        self._whole_body = False
        self._downstream_paused = False  # the downstream handler's last pause()/resume()

    @property
    def controller(self) -> RetryController:
        """The controller the downstream handler sees: this object."""
        return self

    # -- downstream helpers ---------------------------------------------------------------
    def _forward(self, name: str, *args: Any) -> None:
        fn = getattr(self.handler, name, None)
        if fn is not None:
            fn(self, *args)

    def _forward_terminal(self, name: str, *args: Any) -> None:
        """Deliver the terminal callback, then forget the downstream handler."""
        handler, self.handler = self.handler, None
        fn = getattr(handler, name, None)
        if fn is not None:
            fn(self, *args)

    def _deliver_error(self, err: BaseException) -> None:
        if self._done:
            return
        self._done = True
        self._waiting = False
        if self._timer is not None:
            _cancel(self._timer)
            self._timer = None
        handler, self.handler = self.handler, None
        fn = getattr(handler, "on_response_error", None)
        if fn is None:
            raise err
        fn(self, err)

    def _give_up(self, err: BaseException, controller: Any) -> None:
        """Fail for good: tell downstream, then stop the current attempt (if still running)."""
        self._deliver_error(err)
        if controller is not None:
            controller.abort(err)  # our on_response_error ignores it: we are done

    def _retry_error(self, message: str, status: int | None, headers: Any) -> RequestRetryError:
        return RequestRetryError(message, status, headers, {"count": self.counter + 1})

    # -- the handler protocol ---------------------------------------------------------------
    def on_request_start(self, controller: Any, context: Any) -> None:
        self._steer(controller)
        self._waiting = False
        if self._abort_reason is not None:
            controller.abort(self._abort_reason)
            return
        if not self._headers_sent:
            self._forward("on_request_start", context)

    def on_request_upgrade(self, controller: Any, status_code: int, headers: Any, socket: Any) -> None:
        self._done = True
        self._forward_terminal("on_request_upgrade", status_code, headers, socket)

    def on_response_start(self, controller: Any, status_code: int, headers: Any, status_message: str) -> None:
        if self._done:
            return
        if status_code < 200:
            if not self._headers_sent:
                self._forward("on_response_start", status_code, headers, status_message)
            return
        options = self.options
        if status_code >= 300 and status_code in options.status_codes:
            err = self._retry_error("Request failed", status_code, headers)
            if options.throw_on_error or self._headers_sent:
                self._failure = err  # drop the body; decide at its end
                return
            if self._replayable():
                self._decide_on_head(controller, err, status_code, headers, status_message)
                return
            # A streamed body that was sent can't be sent again: this response is the answer.
        if self._headers_sent:
            self._check_resumed(controller, status_code, headers)
            return
        if status_code < 300:
            if status_code == 206 and _length_mismatch(headers, parse_content_range(headers.get("content-range"))):
                # As the original: a first 206 whose length is not its range's is refused,
                # not passed on to be resumed into a body of the wrong size.
                self._give_up(self._retry_error("Content-Length mismatch", status_code, headers), controller)
                return
            self._checkpoint(status_code, headers)
        self._headers_sent = True
        self._forward("on_response_start", status_code, headers, status_message)

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        if self._done or self._failure is not None or self._redispatch_at_end:
            return
        self._received += len(chunk)
        self._forward("on_response_data", chunk)

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        if self._done:
            return
        if self._redispatch_at_end:
            self._redispatch_at_end = False
            self._redispatch()
            return
        failure = self._failure
        if failure is not None:
            self._failure = None
            self._retry_or_fail(failure)
            return
        if self._end is not None and self._received != self._end + 1:
            self._deliver_error(self._retry_error("Content-Range mismatch", None, None))
            return
        self._done = True
        self._forward_terminal("on_response_end", trailers)

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        if self._done:
            return
        if self._abort_reason is not None:
            self._deliver_error(self._abort_reason)
            return
        if self._headers_sent and self._received and self._end is None:
            self._deliver_error(err)  # part of a body of unknown length went downstream
            return
        self._retry_or_fail(err)

    # -- decisions --------------------------------------------------------------------------
    def _checkpoint(self, status_code: int, headers: Any) -> None:
        """The first response head: remember where the body ends and its strong ETag."""
        self._end = None
        if status_code == 206:
            rng = parse_content_range(headers.get("content-range"))
            if rng is not None:
                self._received = rng.start
                self._end = rng.end
        elif status_code == 200 and str(self.opts.get("method", "GET")).upper() != "HEAD":
            length = headers.get("content-length")
            if isinstance(length, str) and length.isdigit():
                self._end = int(length) - 1
        etag = headers.get("etag")
        self._etag = etag if isinstance(etag, str) and not etag.startswith("W/") else None

    def _check_resumed(self, controller: Any, status_code: int, headers: Any) -> None:
        """A retried attempt after the head went downstream: it must continue the same body."""
        if status_code == 200 and self._received == 0:
            # Nothing of the body was passed on: a full answer continues it as well.
            message = self._etag_mismatch(headers)
            if message is None:
                return
        elif status_code != 206:
            message = "server does not support the range header and the payload was partially consumed"
        else:
            message = self._etag_mismatch(headers) or self._range_mismatch(headers)
            if message is None:
                return
        self._give_up(self._retry_error(message, status_code, headers), controller)

    def _etag_mismatch(self, headers: Any) -> str | None:
        if self._etag is not None and headers.get("etag") != self._etag:
            return "ETag mismatch"
        return None

    def _range_mismatch(self, headers: Any) -> str | None:
        rng = parse_content_range(headers.get("content-range"))
        if rng is None or rng.start != self._received or (self._end is not None and rng.end != self._end):
            return "Content-Range mismatch"
        if _length_mismatch(headers, rng):
            return "Content-Length mismatch"
        return None

    def _count(self) -> int:
        if not self._counted:
            self._counted = True
            self.counter += 1
        return self.counter

    def _policy(self, err: BaseException, decided: Callable[[BaseException | None], None]) -> Any:
        """Run the policy for ``err``; it calls ``decided(None)`` to retry (after its wait) or
        ``decided(error)`` to stop. Returns what cancels the wait, if anything. Our own
        back-off greenlet calls ``decided(None, True)``: it may go on without spawning."""
        counter = self._count()
        custom = self.options.retry
        if custom is not None:
            state = {"state": {"counter": counter}, "opts": {**self.opts, "retry_options": self.options}}
            return custom(err, state, decided)
        method = str(self.opts.get("method", "GET")).upper()
        if not should_retry(err, counter, method, self.options):
            decided(err)
            return None
        # The back-off waits in a greenlet of its own: the reader greenlet never waits.
        return spawn(self._back_off, retry_delay(err, counter, self.options, time.time()), decided)

    def _back_off(self, delay: float, decided: Callable[..., None]) -> None:
        try:
            sleep(delay)
        except GreenletExit:
            return  # cancelled by an abort (ending quietly keeps no traceback that holds this handler)
        self._timer = None
        decided(None, True)

    def _replayable(self) -> bool:
        return replayable(self.opts.get("body"))

    def _retry_or_fail(self, err: BaseException) -> None:
        """Ask the policy; on "retry" re-dispatch after its wait, else deliver the error."""
        if not self._replayable():
            self._deliver_error(err)  # a streamed body can't be sent twice
            return

        def decided(stop: BaseException | None, backed_off: bool = False) -> None:
            if self._done:
                return
            self._timer = None
            if stop is not None:
                self._deliver_error(stop)
            elif backed_off:  # called by our own back-off greenlet: go on from there
                self._redispatch()
            else:
                spawn(self._redispatch)  # a custom policy may answer from anywhere

        self._waiting = True
        try:
            timer = self._policy(err, decided)
        except Exception as exc:  # a custom policy that raises stops with its error (never a hang)
            self._deliver_error(exc)
            return
        if self._waiting and not self._done:
            self._timer = timer

    def _decide_on_head(
        self, controller: Any, err: BaseException, status_code: int, headers: Any, status_message: str
    ) -> None:
        """``throw_on_error=False``: hold the response while the policy decides; on "stop" deliver it."""

        def decided(stop: BaseException | None, backed_off: bool = False) -> None:
            if self._done:
                return
            self._timer = None
            if stop is not None:
                self._waiting = False
                self._checkpoint(status_code, headers)
                self._headers_sent = True
                self._downstream_paused = False
                self._forward("on_response_start", status_code, headers, status_message)
                if self._downstream_paused:
                    return  # the handler paused at the head: our hold becomes its pause
            else:
                self._redispatch_at_end = True  # drop the body, then go again at once
            controller.resume()

        controller.pause()
        self._waiting = True
        try:
            timer = self._policy(err, decided)
        except Exception as exc:
            self._give_up(exc, controller)
            return
        if self._waiting and not self._done:
            self._timer = timer

    def _redispatch(self) -> None:
        if self._done:
            return
        # A new attempt. (Its on_request_start may never come: a connect failure
        # goes straight to on_response_error, and must count as a failure.)
        self._counted = False
        self._failure = None
        self._redispatch_at_end = False
        opts = self.opts
        if self._received:
            headers = [
                (k, v) for k, v in header_pairs(opts.get("headers")) if k.lower() not in ("range", "if-match")
            ]
            end = "" if self._end is None else str(self._end)
            headers.append(("range", f"bytes={self._received}-{end}"))
            if self._etag is not None:
                headers.append(("if-match", self._etag))
            opts = self.opts = {**opts, "headers": headers}
        try:
            self.dispatch(opts, self)
        except Exception as exc:
            self._deliver_error(exc)

    def _consumer_paused(self, paused: bool) -> None:
        self._downstream_paused = paused

    def _consumer_abort(self, reason: BaseException | None) -> None:
        if self._done or self._abort_reason is not None:
            return
        reason = self._abort_reason = reason if reason is not None else RequestAbortedError()
        target = self.target
        if target is not None:
            target.abort(reason)  # a running attempt fails through on_response_error
        if not self._done and self._waiting:
            self._deliver_error(reason)  # between attempts: cancel the wait
