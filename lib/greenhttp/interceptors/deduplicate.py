"""``interceptors.deduplicate``: one upstream request for concurrent identical ones.

The first request for a key (origin, method, path with query, request
headers) goes upstream; identical requests dispatched before its first body
byte arrives join it instead of being sent, and every caller receives the
same status, headers, body chunks and trailers (or the same error) through
a controller of its own. A request arriving later is sent on its own (it
would have missed data) and may lead a new group. See ``_handlers/dedupe.py``
for flow control and ``docs/caching.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .._core.dedupe import SAFE_METHODS, dedupe_key, request_header_map
from .._handlers.dedupe import Fanout
from ..errors import InvalidArgumentError

__all__ = ["deduplicate"]

DispatchFn = Callable[[dict[str, Any], Any], bool]


def _names(option: str, value: Any) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{option} must be a list of header names, got {value!r}")
    names = list(value)
    for name in names:
        if not isinstance(name, str):
            raise InvalidArgumentError(f"{option} must hold strings, got {name!r}")
    return frozenset(n.lower() for n in names)


def deduplicate(
    *,
    methods: Iterable[str] = ("GET",),
    skip_header_names: Iterable[str] = (),
    exclude_header_names: Iterable[str] = (),
    max_buffer_size: int = 5242880,
) -> Callable[[DispatchFn], DispatchFn]:
    """An interceptor sending one request for concurrent identical ones.

    ``methods``: the methods deduplicated, safe ones only (GET, HEAD,
    OPTIONS, TRACE; default ``["GET"]``). ``skip_header_names``: a request
    carrying any of these headers is never deduplicated.
    ``exclude_header_names``: headers left out of the identity of a request.
    Header names are case-insensitive. ``max_buffer_size``: bytes a paused
    caller may have held back for it while others read (default 5 MiB); past
    it that caller fails with ``RequestAbortedError`` (``AbortError``).

    Requests without ``origin``, upgrades and requests with a body are never
    deduplicated. Options are validated now (``InvalidArgumentError``). The
    returned dispatch never blocks and is greenlet-safe.
    """
    if isinstance(methods, str) or not isinstance(methods, Iterable):
        raise InvalidArgumentError(f"methods must be a list of safe methods, got {methods!r}")
    method_set = frozenset(methods)
    for m in method_set:
        if m not in SAFE_METHODS:
            raise InvalidArgumentError(
                f"methods may only contain safe methods (GET, HEAD, OPTIONS, TRACE), got {m!r}"
            )
    skip = _names("skip_header_names", skip_header_names)
    exclude = _names("exclude_header_names", exclude_header_names)
    if isinstance(max_buffer_size, bool) or not isinstance(max_buffer_size, int) or max_buffer_size <= 0:
        raise InvalidArgumentError(f"max_buffer_size must be a positive integer, got {max_buffer_size!r}")

    def wrap(dispatch: DispatchFn) -> DispatchFn:
        pending: dict[tuple[Any, ...], Fanout] = {}

        def dedupe_dispatch(opts: dict[str, Any], handler: Any) -> bool:
            origin = opts.get("origin")
            path = opts.get("path")
            method = opts.get("method")
            if (
                origin is None
                or method not in method_set
                or type(path) is not str
                or opts.get("upgrade") is not None
                or opts.get("body") not in (None, b"", "")
            ):
                return dispatch(opts, handler)
            try:
                headers = request_header_map(opts.get("headers"))
            except InvalidArgumentError:
                return dispatch(opts, handler)  # the dispatcher reports it to the handler
            if skip and not skip.isdisjoint(headers):
                return dispatch(opts, handler)
            key = dedupe_key(origin, method, path, opts.get("query"), headers, exclude)
            group = pending.get(key)
            if group is not None:
                if group.add(handler):
                    return True
                return dispatch(opts, handler)

            def closed() -> None:
                if pending.get(key) is fanout:
                    del pending[key]

            fanout = Fanout(closed, max_buffer_size)
            fanout.add(handler)
            pending[key] = fanout
            try:
                return dispatch(opts, fanout)
            except BaseException:
                fanout.abandon()  # raised before it was sent: nobody may join a request that never goes
                raise

        return dedupe_dispatch

    return wrap
