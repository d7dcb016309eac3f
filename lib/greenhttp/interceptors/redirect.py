"""The ``redirect`` interceptor: follow 3xx responses (spec 4.5, REFERENCE §7.3)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .._core.blob import Blob
from .._core.body import StreamBody, normalize_body
from .._core.redirect import RedirectOptions, redirect_options
from .._handlers.redirect import RedirectHandler

__all__ = ["redirect"]

DispatchFn = Callable[[dict[str, Any], Any], bool]

_OPTION_NAMES = (
    "max_redirections",
    "throw_on_max_redirect",
    "strip_headers_on_redirect",
    "strip_headers_on_cross_origin_redirect",
)


def replayable_body(opts: dict[str, Any]) -> dict[str, Any]:
    """``opts`` with a streamed body wrapped once, so a second send can tell it was used.
    One that can be sent again as it is stays as it is (a Blob keeps its ``type``)."""
    body = opts.get("body")
    if body is None or isinstance(body, (bytes, str, bytearray, memoryview, Blob, StreamBody)):
        return opts
    return {**opts, "body": normalize_body(body)}


def redirect(
    max_redirections: int | None = None,
    throw_on_max_redirect: bool = False,
    strip_headers_on_redirect: Iterable[str] = (),
    strip_headers_on_cross_origin_redirect: Iterable[str] = (),
) -> Callable[[DispatchFn], DispatchFn]:
    """An interceptor following ``300 301 302 303 307 308`` responses.

    * ``max_redirections``: hops to follow. ``None`` (the default) takes the
      request's own ``max_redirections`` option, and follows nothing when the
      request has none; ``0`` follows nothing.
    * ``throw_on_max_redirect``: when a redirect arrives after the last
      allowed hop, fail with ``MaxRedirectionsError`` instead of returning it.
    * ``strip_headers_on_redirect``: header names removed on every hop.
    * ``strip_headers_on_cross_origin_redirect``: header names removed on a
      hop to another origin, besides ``authorization``, ``cookie`` and
      ``proxy-authorization`` which always are.

    Each option may be overridden per request (same names in the dispatch
    options). The redirect history is in the request's context
    (``context["history"]``). A cross-origin hop needs a dispatcher that routes
    by origin (an ``Agent``). Options are validated now (InvalidArgumentError).
    The returned interceptor is greenlet-safe; nothing in it blocks.
    """
    defaults: RedirectOptions = redirect_options(
        None,
        {
            "max_redirections": max_redirections,
            "throw_on_max_redirect": throw_on_max_redirect,
            "strip_headers_on_redirect": strip_headers_on_redirect,
            "strip_headers_on_cross_origin_redirect": strip_headers_on_cross_origin_redirect,
        },
    )

    def wrap(dispatch: DispatchFn) -> DispatchFn:
        def redirect_dispatch(opts: dict[str, Any], handler: Any) -> bool:
            options = defaults
            if any(name in opts for name in _OPTION_NAMES):
                options = redirect_options(defaults, {k: opts[k] for k in _OPTION_NAMES if k in opts})
                opts = {k: v for k, v in opts.items() if k not in _OPTION_NAMES}
            if not options.max_redirections:
                return dispatch(opts, handler)
            opts = replayable_body(opts)
            return dispatch(opts, RedirectHandler(dispatch, opts, handler, options))

        return redirect_dispatch

    return wrap
