"""The handlers of the ``cache`` interceptor.

* :class:`Relay` is the controller a downstream handler sees when the cache
  answers: it plays a stored response into the handler (start, head, body,
  end) with working ``pause``/``resume``/``abort``. While a validation
  request is in flight it forwards to that request's controller instead, so
  the handler keeps one controller whatever the origin answers.
* :class:`CacheHandler` sits on a request that went to the origin and
  stores a storable response as it streams through, or invalidates after an
  unsafe method (RFC 9111 §3, §4.4).
* :class:`RevalidationHandler` sits on a conditional request: a ``304``
  freshens the stored entry and the stored response is played; a 500-504 or a
  network error inside ``stale-if-error`` plays the stale one; anything else
  is stored and passed through like a miss (RFC 9111 §4.3, RFC 5861).

Callbacks run on the connection's reader greenlet and never block; the only
I/O is the store's, which must be quick (see ``cache_stores.base``). Policy
lives in ``_core/cache_policy.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from .._core import cache_policy as policy
from .._core.controller import Controller
from .._runtime import call_soon
from ..errors import RequestAbortedError
from .base import DecoratorHandler

__all__ = ["CacheContext", "CacheHandler", "NullHandler", "Relay", "RevalidationHandler", "answer", "stored_headers"]

_log = logging.getLogger("greenhttp")
_STALE_WARNING = '110 - "response is stale"'
_END = object()


class CacheContext:
    """What every handler of one ``cache`` interceptor shares. Immutable after creation."""

    __slots__ = ("store", "shared", "cache_by_default", "dispatch", "background")

    def __init__(self, store: Any, shared: bool, cache_by_default: float | None, dispatch: Callable[..., bool]):
        self.store = store
        self.shared = shared
        self.cache_by_default = cache_by_default
        self.dispatch = dispatch
        #: URLs with a background (stale-while-revalidate) validation in flight.
        self.background: set[tuple[str, str, str]] = set()

    def entry(
        self, key: policy.CacheKey, status: int, message: str, headers: dict[str, Any],
        request_time: float, response_time: float,
    ) -> policy.CacheValue | None:
        """The entry to store for a response to ``key`` (``build_entry`` with this cache's settings)."""
        return policy.build_entry(
            method=key["method"],
            status=status,
            status_message=message,
            headers=headers,
            request_headers=key.get("headers") or {},
            request_time=request_time,
            response_time=response_time,
            shared=self.shared,
            cache_by_default=self.cache_by_default,
        )

    def delete(self, key: policy.CacheKey) -> None:
        try:
            self.store.delete(key)
        except Exception as exc:  # a cache may fail to forget; the request goes on
            _log.warning("greenhttp: cache store delete failed: %r", exc)

    def put(self, key: policy.CacheKey, value: policy.CacheValue, body: bytes) -> None:
        writer = self._writer(key, value)
        if writer is not None:
            try:
                if writer.write(body) is not False:
                    writer.end()
            except Exception as exc:
                _log.warning("greenhttp: cache store write failed: %r", exc)
                self.delete(key)

    def _writer(self, key: policy.CacheKey, value: policy.CacheValue) -> Any:
        try:
            return self.store.create_write_stream(key, value)
        except Exception as exc:
            _log.warning("greenhttp: cache store refused an entry: %r", exc)
            return None


def stored_headers(entry: policy.CacheValue, age: float, stale: bool) -> dict[str, Any]:
    """The header fields served with a stored response: its own, ``age`` and, when stale, ``warning``."""
    # A copy, lists included: the handler may edit what it gets, the store's entry must not change.
    headers = {k: v[:] if type(v) is list else v for k, v in entry["headers"].items()}
    headers["age"] = str(min(int(age), policy.MAX_DELTA))
    if stale:
        headers["warning"] = _STALE_WARNING
    return headers


def _raw_headers(headers: dict[str, Any]) -> list[bytes]:
    out: list[bytes] = []
    for name, value in headers.items():
        for v in value if isinstance(value, list) else (value,):
            out.append(name.encode("latin-1"))
            out.append(v.encode("latin-1", "replace"))
    return out


def _chunks(body: Any) -> Iterator[bytes]:
    if body is None:
        return iter(())
    if isinstance(body, (bytes, bytearray, memoryview)):
        return iter((bytes(body),) if body else ())
    return (bytes(c) for c in body if c)


class Relay:
    """The controller of a handler the cache answers (``abort``, ``pause``, ``resume``).

    Forwards to ``upstream`` (a validation request's controller) while there
    is one; after :meth:`play` it drives the handler itself. Any greenlet may
    call the controller methods; ``resume`` continues the body from the hub.
    """

    __slots__ = ("handler", "upstream", "_fields", "_body", "_paused", "_aborted", "_reason", "_done", "user_abort")

    def __init__(self, handler: Any, upstream: Any = None) -> None:
        self.handler = handler
        self.upstream = upstream
        self._fields: dict[str, Any] = {}
        self._body: Iterator[bytes] = iter(())
        self._paused = False
        self._aborted = False
        self._reason: BaseException | None = None
        self._done = False
        #: set when the handler aborted (the cache must not answer with a stale response then)
        self.user_abort = False

    # -- the controller ----------------------------------------------------------------------------
    def abort(self, reason: BaseException | None = None) -> None:
        self.user_abort = True
        upstream = self.upstream
        if upstream is not None:
            upstream.abort(reason)
            return
        if self._done:
            return
        self._aborted = True
        self._reason = reason if reason is not None else RequestAbortedError()
        self.fail(self._reason)

    def pause(self) -> None:
        if self.upstream is not None:
            self.upstream.pause()
        else:
            self._paused = True

    def resume(self) -> None:
        if self.upstream is not None:
            self.upstream.resume()
        elif self._paused:
            self._paused = False
            if not self._done:
                call_soon(self._pump)

    def wants_whole_body(self) -> None:
        upstream = self.upstream  # (a body played from the store is in memory already)
        if upstream is not None and hasattr(upstream, "wants_whole_body"):
            upstream.wants_whole_body()

    @property
    def aborted(self) -> bool:
        return self.upstream.aborted if self.upstream is not None else self._aborted

    @property
    def paused(self) -> bool:
        return self.upstream.paused if self.upstream is not None else self._paused

    @property
    def reason(self) -> BaseException | None:
        return self.upstream.reason if self.upstream is not None else self._reason

    @property
    def raw_headers(self) -> list[bytes] | None:
        if self.upstream is not None:
            raw: list[bytes] | None = self.upstream.raw_headers
            return raw
        return _raw_headers(self._fields)  # built on demand: most handlers never ask

    @property
    def raw_trailers(self) -> list[bytes] | None:
        return self.upstream.raw_trailers if self.upstream is not None else []

    # -- driving the handler -----------------------------------------------------------------------
    def _call(self, name: str, *args: Any) -> None:
        fn = getattr(self.handler, name, None)
        if fn is not None:
            try:
                fn(self, *args)
            except Exception as exc:  # a raising handler aborts its request, as the dispatcher's guard does
                self.abort(exc)

    def start(self, context: Any = None) -> bool:
        """``on_request_start``; False when the handler aborted at once."""
        self._call("on_request_start", context)
        return not self._done

    def play(self, status: int, headers: dict[str, Any], message: str, body: Any) -> None:
        """Deliver a whole response: head, body chunks (pausable), end."""
        self.upstream = None
        if self._done:
            return
        self._fields = headers
        self._body = _chunks(body)
        self._call("on_response_start", status, headers, message)
        self._pump()

    def _pump(self) -> None:
        on_data = getattr(self.handler, "on_response_data", None)
        body = self._body
        while not self._paused and not self._done:
            chunk = next(body, _END)
            if chunk is _END:
                self._done = True
                handler, self.handler = self.handler, None  # it may keep us: no cycle once done
                fn = getattr(handler, "on_response_end", None)
                if fn is not None:
                    try:
                        fn(self, {})
                    except Exception as exc:
                        self._report(exc)
                return
            if on_data is not None:
                try:
                    on_data(self, chunk)
                except Exception as exc:
                    self.abort(exc)

    def fail(self, err: BaseException) -> None:
        """Deliver ``on_response_error(err)`` (once; nothing follows it)."""
        self.upstream = None
        if self._done:
            return
        self._done = True
        handler, self.handler = self.handler, None
        fn = getattr(handler, "on_response_error", None)
        if fn is None:
            self._report(err)
            return
        try:
            fn(self, err)
        except Exception as exc:
            self._report(exc)

    def release(self) -> None:
        """The handler got its terminal callback from the request upstream: forget it.

        The handler usually keeps its controller, so keeping the handler would make
        a reference cycle. Afterwards the controller methods still work (on the
        finished upstream request, or as no-ops) and nothing more is delivered.
        """
        self._done = True
        self.handler = None

    @staticmethod
    def _report(err: BaseException) -> None:
        _log.error("greenhttp: unhandled error in a handler of a cached response: %r", err)


Controller.register(Relay)


class NullHandler:
    """Swallows a response (background validations). Calls ``on_done`` when it ends either way."""

    def __init__(self, on_done: Callable[[], None] | None = None) -> None:
        self._on_done = on_done

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        if self._on_done is not None:
            self._on_done()

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        if self._on_done is not None:
            self._on_done()


class CacheHandler(DecoratorHandler):
    """Stores a storable response while passing it on; invalidates after unsafe methods.

    One instance per request; callbacks on the reader greenlet; never blocks.
    """

    def __init__(self, ctx: CacheContext, key: policy.CacheKey, handler: Any) -> None:
        super().__init__(handler)
        self.ctx = ctx
        self.key = key
        self.request_time = time.time()
        self.writer: Any = None
        self.write_key = key
        self.history: Any = None

    def on_request_start(self, controller: Any, context: Any) -> None:
        self._drop_writer()
        self.request_time = time.time()
        self.history = context.get("history") if isinstance(context, dict) else getattr(context, "history", None)
        super().on_request_start(controller, context)

    def on_response_start(self, controller: Any, status_code: int, headers: Any, status_message: str) -> None:
        if status_code >= 200 and type(headers) is dict:
            self._consider(status_code, headers, status_message)
        super().on_response_start(controller, status_code, headers, status_message)

    def _consider(self, status: int, headers: dict[str, Any], message: str) -> None:
        key = self.key
        if key["method"] not in policy.SAFE_METHODS:
            if 200 <= status < 400:  # §4.4: a non-error response to an unsafe method
                for path in policy.invalidation_paths(key, headers):
                    self.ctx.delete({**key, "path": path})
            return
        storage_key = self._storage_key()
        if storage_key is None:
            return
        key = storage_key
        entry = self.ctx.entry(key, status, message or "", headers, self.request_time, time.time())
        if entry is not None:
            self.writer = self.ctx._writer(key, entry)
            self.write_key = key
        if key["method"] == "HEAD" and status == 200:
            self._freshen_get(headers)

    def _freshen_get(self, headers: dict[str, Any]) -> None:
        """RFC 9111 §4.3.5: a 200 to HEAD updates the stored GET response it describes."""
        key: policy.CacheKey = {**self.key, "method": "GET"}
        try:
            stored = self.ctx.store.get(key)
        except Exception:  # only an optimisation: the HEAD response itself is unaffected
            return
        if stored is None:
            return
        for name in ("etag", "last-modified", "content-length"):
            if name in headers and name in stored["headers"] and headers[name] != stored["headers"][name]:
                self.ctx.delete(key)  # it describes another representation: the stored one is outdated
                return
        response_time = time.time()
        merged = policy.merge_304_headers(stored["headers"], headers, response_time)
        fresh = self.ctx.entry(key, stored["status_code"], stored.get("status_message", ""), merged,
                               self.request_time, response_time)
        if fresh is None:
            self.ctx.delete(key)
            return
        fresh["etag"] = fresh.get("etag") or stored.get("etag")
        self.ctx.put(key, fresh, b"".join(_chunks(stored.get("body"))))

    def _storage_key(self) -> policy.CacheKey | None:
        """The key to store the response under: the request's, or, when redirects were
        followed (the redirect interceptor's ``history``), the final URL's — provided every
        hop stayed on the request's origin and the request carried no credentials."""
        history = self.history
        if not history or len(history) < 2:
            return self.key
        headers = self.key.get("headers") or {}
        if "authorization" in headers or "cookie" in headers or "proxy-authorization" in headers:
            return None
        origin = urlsplit(self.key["origin"])
        for hop in history:
            url = urlsplit(str(hop))
            if (url.scheme.lower(), url.netloc.lower()) != (origin.scheme.lower(), origin.netloc.lower()):
                return None
        final = urlsplit(str(history[-1]))
        return {**self.key, "path": (final.path or "/") + (f"?{final.query}" if final.query else "")}

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        writer = self.writer
        if writer is not None:
            try:
                if writer.write(chunk) is False:
                    self.writer = None
            except Exception as exc:
                _log.warning("greenhttp: cache store write failed: %r", exc)
                self.writer = None
                self.ctx.delete(self.write_key)
        super().on_response_data(controller, chunk)

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        writer = self.writer
        if writer is not None:
            self.writer = None
            try:
                writer.end()
            except Exception as exc:
                _log.warning("greenhttp: cache store write failed: %r", exc)
                self.ctx.delete(self.write_key)
        super().on_response_end(controller, trailers)

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        self._drop_writer()
        super().on_response_error(controller, err)

    def _drop_writer(self) -> None:
        writer = self.writer
        if writer is not None:
            self.writer = None
            try:
                writer.destroy()
            except Exception:  # nothing to keep anyway
                pass


class RevalidationHandler(CacheHandler):
    """Handles the answer to a conditional request made to validate ``entry``.

    ``relay`` is what the downstream handler uses as its controller; with
    ``background`` the downstream is a :class:`NullHandler` and a ``304``
    only freshens the store. The request's own preconditions (in the key's
    headers) are answered from the freshened entry. ``refetch(handler)``
    re-sends the original request, without the cache's preconditions, when a
    ``304`` turns out not to validate the entry.
    """

    def __init__(
        self,
        ctx: CacheContext,
        key: policy.CacheKey,
        handler: Any,
        entry: policy.CacheValue,
        verdict: policy.Verdict,
        refetch: Callable[[Any], Any],
        *,
        head_only: bool = False,
        background: bool = False,
    ) -> None:
        super().__init__(ctx, key, handler)
        self.relay = Relay(handler)
        self.entry: policy.CacheValue | None = entry
        self.verdict = verdict
        self.refetch = refetch
        self.head_only = head_only
        self.background = background
        self.mode: str | None = None  # None, "pass", "304" or "stale"
        self.started = False
        self.not_modified: tuple[dict[str, Any], float] | None = None

    def on_request_start(self, controller: Any, context: Any) -> None:
        self.relay.upstream = controller
        self.mode = None
        if self.started:
            self._drop_writer()
            return
        self.started = True
        super().on_request_start(self.relay, context)

    def on_response_start(self, controller: Any, status_code: int, headers: Any, status_message: str) -> None:
        if self.entry is not None and status_code >= 200:
            if status_code == 304 and type(headers) is dict:
                self.mode = "304"
                self.not_modified = (headers, time.time())
                return
            if self.verdict.stale_if_error and 500 <= status_code <= 504:
                self.mode = "stale"  # RFC 5861 §4: answer with the stale response instead
                return
        if status_code >= 200:
            self.mode = "pass"
        super().on_response_start(self.relay, status_code, headers, status_message)

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        if self.mode == "pass" or self.mode is None:
            super().on_response_data(self.relay, chunk)

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        mode = self.mode
        if mode == "304":
            self._freshen()
        elif mode == "stale":
            self._serve_stale()
        else:
            try:
                super().on_response_end(self.relay, trailers)
            finally:
                self.relay.release()

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        if (self.mode is None or self.mode == "stale") and self.verdict.stale_if_error and self.entry:
            if not self.relay.user_abort:
                self._serve_stale()
                return
        self._drop_writer()
        self.relay.upstream = controller
        try:
            DecoratorHandler.on_response_error(self, self.relay, err)
        finally:
            self.relay.release()

    # -- outcomes ----------------------------------------------------------------------------------
    def _serve_stale(self) -> None:
        entry = self.entry
        assert entry is not None
        if self.background:
            self.handler.on_response_end(self.relay, {})
            return
        age = max(0.0, time.time() - entry["cached_at"])
        self._answer(entry, age, True)

    def _freshen(self) -> None:
        """RFC 9111 §4.3.4: update the stored entry from the 304, then answer from it."""
        entry = self.entry
        assert entry is not None and self.not_modified is not None
        headers, response_time = self.not_modified
        if not _validates(headers, entry) or _forbids_reuse(headers, self.ctx.shared):
            # The 304 does not validate what we hold, or forbids serving it (as the
            # original has it): forget it and ask again, unconditionally.
            self.ctx.delete(self.key)
            self.entry = None
            self.mode = None
            self.refetch(self)
            return
        merged = policy.merge_304_headers(entry["headers"], headers, response_time)
        fresh = self.ctx.entry(
            self.key, entry["status_code"], entry.get("status_message", ""), merged, self.request_time, response_time
        )
        body = entry.get("body")
        if fresh is None:
            self.ctx.delete(self.key)  # the 304 forbids keeping it; this answer still uses it
            fresh = {**entry, "headers": merged, "cached_at": response_time, "stale_at": response_time}
        else:
            if fresh.get("etag") is None:
                fresh["etag"] = entry.get("etag")
            if not isinstance(body, (bytes, bytearray)):
                body = b"".join(_chunks(body))
            self.ctx.put(self.key, fresh, bytes(body))
        if self.background:
            self.handler.on_response_end(self.relay, {})
            return
        age = max(0.0, time.time() - fresh["cached_at"])
        self._answer({**fresh, "body": body}, age, False)

    def _answer(self, entry: policy.CacheValue, age: float, stale: bool) -> None:
        if not self.started:  # the request failed before it started: the handler starts now
            self.started = True
            if not self.relay.start(None):
                return
        key = self.key
        self.relay.play(*answer(entry, age, stale, key.get("headers") or {}, self.head_only, key["method"] == "GET"))


def _validates(headers: dict[str, Any], entry: policy.CacheValue) -> bool:
    """Whether a 304 with ``headers`` is about ``entry`` (RFC 9111 §4.3.4): its ETag, if any,
    matches the stored one (strongly, when it is strong; else its Last-Modified, if any, the
    stored one), and its Vary is usable."""
    etag = headers.get("etag")
    if etag is not None:
        stored = entry.get("etag")
        if stored is None or not policy.valid_etag(etag) or not policy.weak_etag_match(etag, stored):
            return False
        if not etag.startswith("W/") and stored != etag:
            return False  # a strong validator selects only a response with the same strong one
    else:
        modified = policy.parse_http_date(headers.get("last-modified"))
        if modified is not None and modified != policy.parse_http_date(entry["headers"].get("last-modified")):
            return False
    return "vary" not in headers or policy.parse_vary(headers["vary"]) is not None


def _forbids_reuse(headers: dict[str, Any], shared: bool) -> bool:
    """Whether a 304 says the stored response may not be served (``no-store``, or
    ``private`` in a shared cache); its Vary is checked by :func:`_validates`."""
    cc = headers.get("cache-control")
    if cc is None:
        return False
    directives = policy.parse_cache_control(cc)
    return bool(directives.get("no-store") or (shared and directives.get("private") is True))


def not_modified_headers(entry: policy.CacheValue, age: float) -> dict[str, Any]:
    """The fields of a 304 answered from a stored response (RFC 9110 §15.4.5), plus ``age``."""
    stored = entry["headers"]
    headers = {name: stored[name] for name in policy.NOT_MODIFIED_FIELDS if name in stored}
    headers["age"] = str(min(int(age), policy.MAX_DELTA))
    return headers


def answer(
    entry: policy.CacheValue, age: float, stale: bool, request_headers: dict[str, Any], head: bool,
    ranges: bool = True,
) -> tuple[int, dict[str, Any], str, Any]:
    """``(status, headers, status_message, body)`` answering a request from ``entry``.

    A 304 when the request's own preconditions match (RFC 9111 §4.3.2); a
    206 for a single byte range of a stored 200 (RFC 9110 §14), unless
    ``ranges`` is False (a method other than GET); the stored response
    otherwise, without its body for HEAD.
    """
    status = entry["status_code"]
    if 200 <= status < 300 and policy.is_conditional(request_headers) and policy.not_modified(request_headers, entry):
        return 304, not_modified_headers(entry, age), "Not Modified", None
    headers = stored_headers(entry, age, stale)
    body = None if head else entry.get("body")
    if ranges and status == 200 and body is not None and "range" in request_headers and _if_range_holds(
        request_headers, entry
    ):
        if not isinstance(body, (bytes, bytearray)):
            body = b"".join(_chunks(body))
        span = policy.byte_range(request_headers["range"], len(body))
        if span is not None:
            first, last = span
            headers["content-range"] = f"bytes {first}-{last}/{len(body)}"
            headers["content-length"] = str(last - first + 1)
            return 206, headers, "Partial Content", bytes(body[first : last + 1])
    return status, headers, entry.get("status_message", ""), body


def _if_range_holds(request_headers: dict[str, Any], entry: policy.CacheValue) -> bool:
    """RFC 9110 §13.1.5: If-Range must name the stored response exactly (strong comparison)."""
    if_range = request_headers.get("if-range")
    if if_range is None:
        return True
    if not isinstance(if_range, str):
        return False
    if if_range.startswith('"'):
        return if_range == entry.get("etag")
    return if_range == entry["headers"].get("last-modified")
