"""``interceptors.cache``: an HTTP cache (RFC 9111) in front of a dispatcher.

For each request of a cached method the interceptor looks the request up in
its store and, by the rules of ``_core/cache_policy.py``:

* answers a fresh entry itself (with ``Age``; a ``304`` when the request's
  own ``If-None-Match``/``If-Modified-Since`` match it);
* answers a stale one within the request's ``max-stale``, or within the
  response's ``stale-while-revalidate`` while refreshing it in the
  background;
* otherwise asks the origin with ``If-None-Match``/``If-Modified-Since``
  built from the entry: a ``304`` freshens the entry and it is served; a
  ``500``-``504`` or a network error inside ``stale-if-error`` serves the stale
  entry; any other answer is passed on, and stored if storable;
* sends a miss to the origin and stores the answer if it may;
* answers ``504`` when the request says ``only-if-cached`` and the origin
  would have to be asked.

Unsafe methods always go to the origin; a non-error answer invalidates the
URL (and same-origin ``Location``/``Content-Location``) for every method.
Requests without ``origin``, upgrades, safe requests with a body and
requests with ``If-Match``/``If-Unmodified-Since`` (or, for methods other
than GET and HEAD, ``If-None-Match``/``If-Modified-Since``) pass through. See
``docs/caching.md``.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from .._core import cache_policy as policy
from .._core.request import refuse
from .._handlers.cache import (
    CacheContext,
    CacheHandler,
    NullHandler,
    Relay,
    RevalidationHandler,
    answer,
)
from .._runtime import call_soon
from ..cache_stores.memory import MemoryCacheStore
from ..errors import InvalidArgumentError

__all__ = ["cache"]

DispatchFn = Callable[[dict[str, Any], Any], bool]


def _check_methods(methods: Any) -> frozenset[str]:
    if isinstance(methods, str) or not isinstance(methods, Iterable):
        raise InvalidArgumentError(f"methods must be a list of safe methods, got {methods!r}")
    methods = list(methods)
    if not methods:
        raise InvalidArgumentError("methods must name at least one method, got []")
    for m in methods:
        if m not in policy.SAFE_METHODS:
            raise InvalidArgumentError(
                f"methods may only contain safe methods (GET, HEAD, OPTIONS, TRACE), got {m!r}"
            )
    return frozenset(methods)


def _check_origins(origins: Any) -> tuple[Any, ...] | None:
    if origins is None:
        return None
    if isinstance(origins, str) or not isinstance(origins, Iterable):
        raise InvalidArgumentError(f"origins must be a list of strings or regular expressions, got {origins!r}")
    out = []
    for o in origins:
        if isinstance(o, str):
            out.append(o.lower().rstrip("/"))
        elif hasattr(o, "search"):
            if isinstance(getattr(o, "pattern", None), bytes):  # would never match the str origin
                raise InvalidArgumentError(f"origins must hold str regular expressions, got {o!r}")
            out.append(o)
        else:
            raise InvalidArgumentError(f"origins must hold strings or compiled regular expressions, got {o!r}")
    return tuple(out)


def cache(
    *,
    store: Any = None,
    methods: Iterable[str] = ("GET",),
    cache_by_default: float | None = None,
    type: str = "shared",
    origins: Iterable[Any] | None = None,
) -> Callable[[DispatchFn], DispatchFn]:
    """An interceptor caching responses by RFC 9111 in ``store``.

    ``store``: a :class:`~greenhttp.cache_stores.CacheStore` (default: a new
    ``MemoryCacheStore()``). ``methods``: the safe methods whose responses
    are cached (default ``["GET"]``). ``cache_by_default``: seconds of
    freshness given to storable responses that carry no freshness
    information (default None: they are only heuristically fresh).
    ``type``: ``"shared"`` (default; honours ``s-maxage``, ``private``,
    ``proxy-revalidate``, ``Authorization``) or ``"private"``. ``origins``:
    only cache these origins (strings compared case-insensitively, or
    compiled regular expressions); default all.

    Options are validated now (``InvalidArgumentError``). The returned
    dispatch never blocks on the network; store calls are as quick as the
    store (see ``docs/caching.md``). Greenlet-safe.
    """
    if store is None:
        store = MemoryCacheStore()
    if inspect.isclass(store):  # the class, not a store: its methods would want a self
        raise InvalidArgumentError(f"store must be a CacheStore instance, got the class {store.__name__}")
    for name in ("get", "create_write_stream", "delete"):
        if not callable(getattr(store, name, None)):
            raise InvalidArgumentError(f"store must be a CacheStore with a {name}() method, got {store!r}")
    cached_methods = _check_methods(methods)
    if cache_by_default is not None and (
        isinstance(cache_by_default, bool)
        or not isinstance(cache_by_default, (int, float))
        or not cache_by_default >= 0  # NaN too
    ):
        raise InvalidArgumentError(
            f"cache_by_default must be a non-negative number of seconds or None, got {cache_by_default!r}"
        )
    if type not in ("shared", "private"):
        raise InvalidArgumentError(f"type must be 'shared' or 'private', got {type!r}")
    allowed_origins = _check_origins(origins)
    shared = type == "shared"

    def wrap(dispatch: DispatchFn) -> DispatchFn:
        ctx = CacheContext(store, shared, cache_by_default, dispatch)
        return _CacheDispatch(ctx, cached_methods, allowed_origins).dispatch

    return wrap


class _CacheDispatch:
    """The request side of one ``cache`` interceptor instance."""

    __slots__ = ("ctx", "methods", "origins")

    def __init__(self, ctx: CacheContext, methods: frozenset[str], origins: tuple[Any, ...] | None) -> None:
        self.ctx = ctx
        self.methods = methods
        self.origins = origins

    def _origin_allowed(self, origin: Any) -> bool:
        text = str(origin).lower().rstrip("/")
        return any(o == text if isinstance(o, str) else o.search(text) for o in self.origins or ())

    def dispatch(self, opts: dict[str, Any], handler: Any) -> bool:
        ctx = self.ctx
        dispatch = ctx.dispatch
        method = opts.get("method")
        origin = opts.get("origin")
        path = opts.get("path")
        if (
            origin is None
            or type(path) is not str
            or type(method) is not str
            or method == "CONNECT"
            or opts.get("upgrade") is not None
        ):
            return dispatch(opts, handler)
        safe = method in policy.SAFE_METHODS
        if safe and method not in self.methods:
            return dispatch(opts, handler)
        if self.origins is not None and not self._origin_allowed(origin):
            return dispatch(opts, handler)
        try:
            headers = policy.request_header_map(opts.get("headers"))
        except InvalidArgumentError as exc:
            refuse(handler, exc)
            return True
        key = policy.cache_key(origin, method, path, opts.get("query"), headers)
        if not safe:
            return dispatch(opts, CacheHandler(ctx, key, handler))
        if opts.get("body") not in (None, b"", ""):
            return dispatch(opts, handler)  # a safe request with content: not cacheable as such
        if "if-match" in headers or "if-unmodified-since" in headers:
            return dispatch(opts, handler)  # preconditions only the origin evaluates (RFC 9111 §4.3.2)
        if method != "GET" and method != "HEAD" and policy.is_conditional(headers):
            return dispatch(opts, handler)  # a 304 answers only GET and HEAD (RFC 9110 §13.1.2, §13.1.3)
        req_cc = policy.request_directives(headers)
        if req_cc.get("no-store"):
            return dispatch(opts, handler)  # RFC 9111 §5.2.1.5
        try:
            entry = ctx.store.get(key)
            head_from_get = False
            if entry is None and method == "HEAD" and "GET" in self.methods:
                # RFC 9111 §4: a stored response to GET can answer HEAD.
                entry = ctx.store.get({**key, "method": "GET"})
                head_from_get = entry is not None
        except Exception as exc:
            refuse(handler, exc)
            return True
        now = time.time()
        if entry is None or entry["delete_at"] <= now:
            return self._miss(opts, key, handler, req_cc)
        verdict = policy.assess(entry, req_cc, now, ctx.shared)
        action = verdict.action
        head = method == "HEAD"
        if action == policy.FRESH or action == policy.STALE_OK:
            return _serve(handler, entry, verdict, headers, head, method == "GET")
        if head_from_get:
            return self._miss(opts, key, handler, req_cc)
        if action == policy.STALE_WHILE_REVALIDATE:
            _serve(handler, entry, verdict, headers, head, method == "GET")
            if not req_cc.get("only-if-cached"):
                self._revalidate_in_background(opts, key, entry)
            return True
        if req_cc.get("only-if-cached"):
            return _gateway_timeout(handler)
        return self._revalidate(opts, key, handler, entry, verdict, headers, head)

    def _miss(self, opts: dict[str, Any], key: policy.CacheKey, handler: Any, req_cc: dict[str, Any]) -> bool:
        if req_cc.get("only-if-cached"):
            return _gateway_timeout(handler)
        return self.ctx.dispatch(opts, CacheHandler(self.ctx, key, handler))

    def _revalidate(
        self,
        opts: dict[str, Any],
        key: policy.CacheKey,
        handler: Any,
        entry: policy.CacheValue,
        verdict: policy.Verdict,
        headers: dict[str, Any],
        head: bool,
    ) -> bool:
        ctx = self.ctx
        dispatch = ctx.dispatch
        conditional = policy.revalidation_headers(headers, entry)
        if conditional is None:
            if not verdict.stale_if_error:
                return dispatch(opts, CacheHandler(ctx, key, handler))  # nothing to validate with
            conditional = {k: v for k, v in headers.items() if k not in ("if-none-match", "if-modified-since")}
        refetch = partial(dispatch, opts)  # the original request, should the 304 not validate the entry
        reval = RevalidationHandler(ctx, key, handler, entry, verdict, refetch, head_only=head)
        return dispatch({**opts, "headers": conditional}, reval)

    def _revalidate_in_background(self, opts: dict[str, Any], key: policy.CacheKey, entry: policy.CacheValue) -> None:
        ctx = self.ctx
        marker = (key["origin"], key["path"], key["method"])
        if marker in ctx.background:
            return  # one refresh at a time per URL
        ctx.background.add(marker)
        sink = NullHandler(lambda: ctx.background.discard(marker))
        conditional = policy.revalidation_headers(key.get("headers") or {}, entry)
        if conditional is None:
            bg_opts, bg_handler = opts, CacheHandler(ctx, key, sink)
        else:
            verdict = policy.Verdict(policy.VALIDATE, 0.0, True)
            bg_handler = RevalidationHandler(
                ctx, key, sink, entry, verdict, partial(ctx.dispatch, opts), background=True
            )
            bg_opts = {**opts, "headers": conditional}

        def start() -> None:
            try:
                ctx.dispatch(bg_opts, bg_handler)
            except Exception:
                ctx.background.discard(marker)

        call_soon(start)


def _serve(
    handler: Any, entry: policy.CacheValue, verdict: policy.Verdict, headers: dict[str, Any], head: bool, ranges: bool
) -> bool:
    """Answer from ``entry`` (the stored response, a 304 or, when ``ranges``, a 206: see ``answer``)."""
    relay = Relay(handler)
    if relay.start(None):
        relay.play(*answer(entry, verdict.age, verdict.stale, headers, head, ranges))
    return True


def _gateway_timeout(handler: Any) -> bool:
    """RFC 9111 §5.2.1.7: ``only-if-cached`` and nothing usable is stored."""
    relay = Relay(handler)
    if relay.start(None):
        relay.play(504, {}, "Gateway Timeout", None)
    return True
