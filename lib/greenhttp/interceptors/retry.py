"""The ``retry`` interceptor: retry failed requests (spec 4.5, REFERENCE §7.2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._core.retry import retry_options
from .._handlers.retry import RetryHandler
from .redirect import replayable_body

__all__ = ["retry"]

DispatchFn = Callable[[dict[str, Any], Any], bool]


def retry(**retry_options_: Any) -> Callable[[DispatchFn], DispatchFn]:
    """An interceptor retrying failed requests with exponential back-off.

    Options (durations in seconds), with their defaults:

    * ``max_retries=5``: retries after the first attempt;
    * ``min_timeout=0.5``, ``max_timeout=30.0``, ``timeout_factor=2``: the
      wait before retry *n* is ``min(min_timeout * timeout_factor ** (n-1), max_timeout)``;
    * ``retry_after=True``: a ``Retry-After`` (seconds or HTTP-date) on the
      failed response sets the wait instead, capped at ``max_timeout``;
    * ``methods``: ``GET HEAD OPTIONS PUT DELETE TRACE QUERY``;
    * ``status_codes``: ``500 502 503 504 429``;
    * ``error_codes``: ``ECONNRESET ECONNREFUSED ENOTFOUND ENETDOWN ENETUNREACH
      EHOSTDOWN EHOSTUNREACH EPIPE GH_ERR_SOCKET``, matched against
      ``errno.errorcode[exc.errno]`` of an ``OSError`` and the ``.code`` of a
      greenhttp error anywhere in the exception's cause chain;
    * ``throw_on_error=True``: a response with a retryable status is dropped
      and, once retries are exhausted, the request fails with
      ``RequestRetryError``; with False the last such response is returned;
    * ``retry``: a custom policy ``retry(err, {"state": {"counter": n}, "opts":
      {...}}, callback)`` that calls ``callback(None)`` to retry or
      ``callback(err)`` to stop; it must not block (schedule a timer) and may
      return the timer (anything with ``close()`` or ``cancel()``) so an
      abort can cancel it.

    Per request, ``retry_options={...}`` overrides any of these. A body
    already partly received is resumed with ``Range``/``If-Match`` when its
    length is known. A ``ResponseError`` from an inner ``response_error`` is
    retried when its status is in ``status_codes``. Options are validated now
    (InvalidArgumentError). Greenlet-safe; nothing in it blocks.
    """
    defaults = retry_options(retry_options_)

    def wrap(dispatch: DispatchFn) -> DispatchFn:
        def retry_dispatch(opts: dict[str, Any], handler: Any) -> bool:
            options = defaults
            if "retry_options" in opts:
                options = defaults.merged(opts["retry_options"])
                opts = {k: v for k, v in opts.items() if k != "retry_options"}
            opts = replayable_body(opts)
            return dispatch(opts, RetryHandler(dict(opts), dispatch, handler, options))

        return retry_dispatch

    return wrap
