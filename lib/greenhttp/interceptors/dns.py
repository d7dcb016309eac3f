"""``interceptors.dns``: resolve host names once, then reuse the addresses.

For a request whose ``origin`` names a host (not an IP literal), the
interceptor picks one of the host's cached addresses — looking the name up
first when it has none, or none left unexpired — and sends the request to
``protocol://address:port`` instead. The request keeps the original name in
its ``host`` header (unless it had one) and as its TLS ``servername``, so
virtual hosting and certificate checks are unchanged. Because the origin
changes, use it on a dispatcher that routes by origin (an ``Agent``).

A connection failure (refused, unreachable, timed out) drops that address;
with ``dual_stack`` the request is retried once on an address of the other
family. See ``docs/dns.md``.
"""

from __future__ import annotations

import errno
import logging
import math
import socket
import time
from collections.abc import Callable
from typing import Any

from .._core import dns_records
from .._core.request import refuse
from .._core.url import is_ip_literal, parse_origin
from .._handlers.base import DecoratorHandler
from .._net import dns as net_dns
from ..errors import InformationalError, InvalidArgumentError

__all__ = ["dns"]

_log = logging.getLogger("greenhttp")

DispatchFn = Callable[[dict[str, Any], Any], bool]

#: Connection failures after which the address is dropped and the other family tried.
_RETRYABLE = frozenset(
    {"ECONNREFUSED", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "EADDRNOTAVAIL", "GH_ERR_CONNECT_TIMEOUT"}
)
_NOT_FOUND = frozenset({getattr(socket, n) for n in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, n)})


def _error_code(err: BaseException) -> str | None:
    """The Node-style code of an error: an errno name found on it or its causes, else ``.code``."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, socket.gaierror):
            return "ENOTFOUND" if seen.errno in _NOT_FOUND else None
        if isinstance(seen, OSError) and seen.errno is not None and seen.errno in errno.errorcode:
            return errno.errorcode[seen.errno]
        seen = seen.__cause__ or seen.__context__
    code = getattr(err, "code", None)
    return code if isinstance(code, str) else None


def _with_host(headers: Any, host: str) -> Any:
    """``headers`` with a ``host`` field added first, unless it has one (any API.md shape)."""
    if headers is None:
        return {"host": host}
    if isinstance(headers, dict):
        if any(isinstance(k, (str, bytes)) and k.lower() in ("host", b"host") for k in headers):
            return headers
        return {"host": host, **headers}
    if isinstance(headers, (list, tuple)):
        if not headers:
            return [("host", host)]
        if isinstance(headers[0], (str, bytes)):  # the flat [name, value, ...] form
            names = headers[0::2]
            pairs = None
        else:
            pairs = list(headers)
            names = [p[0] for p in pairs if isinstance(p, (list, tuple)) and p]
        if any((n.decode("latin-1") if isinstance(n, bytes) else str(n)).lower() == "host" for n in names):
            return headers
        return ["host", host, *headers] if pairs is None else [("host", host), *pairs]
    if hasattr(headers, "items"):
        return _with_host(list(headers.items()), host)
    return headers  # malformed: the dispatcher reports it


class LookupOrigin(str):
    """The origin a ``lookup`` or ``pick`` receives: the origin string (``"https://h:8443"``)
    that also has the fields of a parsed URL — ``protocol`` (``"https:"``), ``hostname``,
    ``port`` (an int, the default one filled in), ``host`` (the Host header value) and
    ``origin`` — like the URL object the original library passes."""

    protocol: str
    hostname: str
    port: int
    host: str
    origin: str

    @classmethod
    def parse(cls, value: Any) -> LookupOrigin:
        parsed = parse_origin(value, "origin")
        self = cls(parsed.origin)
        self.protocol, self.hostname, self.port = parsed.protocol, parsed.hostname, parsed.port
        self.host, self.origin = parsed.host, parsed.origin
        return self


class _Settings:
    __slots__ = ("affinity", "dual_stack", "lookup", "pick", "max_ttl", "max_items")

    def __init__(self, affinity: int | None, dual_stack: bool, lookup: Any, pick: Any, max_ttl: float, max_items: float):
        self.affinity = affinity
        self.dual_stack = dual_stack
        self.lookup = lookup
        self.pick = pick
        self.max_ttl = max_ttl
        self.max_items = max_items

    def options(self) -> dict[str, Any]:
        """What a ``lookup`` receives as its ``options``."""
        return {
            "affinity": self.affinity,
            "dual_stack": self.dual_stack,
            "lookup": self.lookup,
            "pick": self.pick,
            "max_ttl": self.max_ttl,
            "max_items": self.max_items,
        }


def _check(name: str, value: Any, ok: bool, expected: str) -> None:
    if not ok:
        raise InvalidArgumentError(f"{name} must be {expected}, got {value!r}")


_OVERRIDES = ("affinity", "dual_stack", "lookup", "pick")


def _check_overrides(overrides: Any) -> None:
    """Check a request's ``dns`` option as ``dns()`` checks its own."""
    if overrides is None:
        return
    if not isinstance(overrides, dict):
        raise InvalidArgumentError(f"dns must be a dict of {', '.join(_OVERRIDES)}, got {overrides!r}")
    for name, value in overrides.items():
        if name not in _OVERRIDES:
            raise InvalidArgumentError(f"unknown dns option {name!r} (valid: {', '.join(_OVERRIDES)})")
        if name == "affinity":
            _check("dns.affinity", value, value in (None, 4, 6) and not isinstance(value, bool), "4, 6 or None")
        elif name == "dual_stack":
            _check("dns.dual_stack", value, isinstance(value, bool), "a bool")
        else:
            _check(f"dns.{name}", value, value is None or callable(value), "callable")


def dns(
    *,
    max_ttl: float = 0,
    max_items: float = math.inf,
    dual_stack: bool = True,
    affinity: int | None = None,
    lookup: Callable[..., Any] | None = None,
    pick: Callable[..., Any] | None = None,
    storage: Any = None,
) -> Callable[[DispatchFn], DispatchFn]:
    """An interceptor caching DNS lookups per host name (spec 4.5).

    ``max_ttl``: seconds; a record's TTL is capped by it, and a record
    without TTL gets it (0, the default: no cap, and records without TTL
    get ``dns_records.FALLBACK_TTL``, 10 s). ``max_items``: host names
    kept (default unbounded; the oldest is evicted). ``dual_stack``: look
    up A and AAAA (default True). ``affinity``: 4, 6 or None (alternate
    families; the default with ``dual_stack``, else 4). ``lookup(origin,
    options, callback)``: replaces resolution; must call ``callback(err,
    records)`` once, records being ``[{"address", "family": 4|6, "ttl":
    seconds}]``. ``pick(origin, records, affinity)``: replaces the choice
    of address. ``storage``: a DNSStorage (``size``, ``get``, ``set``,
    ``delete``, ``full``), keyed by host name.

    Per request, ``dns={...}`` in the dispatch options overrides
    ``affinity``, ``dual_stack``, ``lookup`` and ``pick``.

    Options are validated now (``InvalidArgumentError``). The returned
    dispatch never blocks: lookups run in gevent's resolver. Greenlet-safe.
    """
    number = (int, float)
    _check("max_ttl", max_ttl, isinstance(max_ttl, number) and not isinstance(max_ttl, bool) and max_ttl >= 0,
           "a non-negative number of seconds")
    _check("max_items", max_items, isinstance(max_items, number) and not isinstance(max_items, bool) and max_items >= 1,
           "a number of at least 1")
    _check("dual_stack", dual_stack, isinstance(dual_stack, bool), "a bool")
    _check("affinity", affinity, affinity in (None, 4, 6) and not isinstance(affinity, bool), "4, 6 or None")
    _check("lookup", lookup, lookup is None or callable(lookup), "callable")
    _check("pick", pick, pick is None or callable(pick), "callable")
    if storage is not None:
        for method in ("get", "set", "delete", "full"):
            _check("storage", storage, callable(getattr(storage, method, None)),
                   "an object with get, set, delete and full methods")
    if affinity is None and not dual_stack:
        affinity = 4
    state = _DNS(
        _Settings(affinity, dual_stack, lookup, pick, float(max_ttl), max_items),
        storage if storage is not None else dns_records.DNSStorage(max_items),
    )

    def wrap(dispatch: DispatchFn) -> DispatchFn:
        def dns_dispatch(opts: dict[str, Any], handler: Any) -> bool:
            return state.dispatch(dispatch, opts, handler)

        return dns_dispatch

    return wrap


class _DNS:
    """The records and settings one ``dns`` interceptor shares across its requests."""

    def __init__(self, settings: _Settings, storage: Any) -> None:
        self.settings = settings
        self.storage = storage
        #: host name -> requests waiting for its lookup (one lookup at a time per name)
        self.waiting: dict[str, list[Callable[[BaseException | None, float], None]]] = {}

    def _settings_for(self, overrides: Any) -> _Settings:
        base = self.settings
        if not isinstance(overrides, dict) or not overrides:
            return base
        dual_stack = overrides.get("dual_stack", base.dual_stack)
        affinity = overrides.get("affinity", base.affinity if "dual_stack" not in overrides else None)
        if affinity is None and not dual_stack:
            affinity = 4
        return _Settings(affinity, dual_stack, overrides.get("lookup", base.lookup), overrides.get("pick", base.pick),
                         base.max_ttl, base.max_items)

    def dispatch(self, dispatch: DispatchFn, opts: dict[str, Any], handler: Any) -> bool:
        raw_origin = opts.get("origin")
        if raw_origin is None:
            return dispatch(opts, handler)
        try:
            origin = LookupOrigin.parse(raw_origin)
        except InvalidArgumentError:
            return dispatch(opts, handler)  # the dispatcher reports it
        overrides = opts.get("dns")
        if "dns" in opts:
            try:
                _check_overrides(overrides)
            except InvalidArgumentError as exc:  # as the dispatcher reports a bad option (spec: dispatch errors)
                refuse(handler, exc)
                return False
            opts = {k: v for k, v in opts.items() if k != "dns"}
        if is_ip_literal(origin.hostname):
            return dispatch(opts, handler)
        settings = self._settings_for(overrides)
        hostname = origin.hostname
        try:
            records = self.storage.get(hostname)
            full = records is None and self.storage.full()
            ip = self._pick(settings, origin, records) if records is not None else None
            target = _ip_origin(origin, ip) if ip is not None else None
        except Exception as exc:  # a custom pick or storage that raised: the handler is told
            refuse(handler, exc)
            return False
        if full:
            return dispatch(opts, handler)
        if records is not None:
            if ip is not None:
                return self._send(dispatch, opts, handler, origin, settings, ip, target)
            self.storage.delete(hostname)  # every address expired or failed: look it up again

        def resolved(err: BaseException | None, looked_up: float) -> None:
            # Called for each request waiting on the lookup, in turn: nothing may
            # escape, or the requests after this one would never hear back.
            try:
                if err is None:
                    try:
                        records = self.storage.get(hostname)
                        # Pick as of the lookup: a record with TTL 0 (RFC 1035: use it
                        # only for the transaction in progress) still serves its waiters.
                        ip = self._pick(settings, origin, records, looked_up) if records is not None else None
                        if ip is not None:
                            self._send(dispatch, opts, handler, origin, settings, ip)
                            return
                        err = InformationalError("No DNS entries found")
                    except Exception as exc:  # a pick or storage that raised: nobody to raise to but the handler
                        err = exc
                refuse(handler, err)
            except Exception as exc:  # a handler without on_response_error, or one that raised
                _log.error("greenhttp: unhandled error of a request through the dns interceptor: %r", exc)

        self._lookup(settings, origin, resolved, coalesce=overrides is None)
        return True

    def _pick(self, settings: _Settings, origin: LookupOrigin, records: Any, now: float | None = None) -> Any:
        if settings.pick is not None:
            return settings.pick(origin, records, settings.affinity)
        if now is None:
            now = time.monotonic()
        return dns_records.default_pick(records, settings.affinity, settings.dual_stack, now)

    def _lookup(
        self, settings: _Settings, origin: LookupOrigin, done: Callable[[BaseException | None, float], None], coalesce: bool
    ) -> None:
        hostname = origin.hostname
        if coalesce:
            waiters = self.waiting.get(hostname)
            if waiters is not None:
                waiters.append(done)
                return
            self.waiting[hostname] = waiters = [done]
        else:
            waiters = [done]
        answered = False

        def callback(err: BaseException | None, addresses: Any = None) -> None:
            nonlocal answered
            if answered:
                return
            answered = True
            if coalesce:
                self.waiting.pop(hostname, None)
            now = time.monotonic()
            try:
                if err is None:
                    records, shortest = dns_records.make_records(addresses or (), settings.max_ttl, now)
                    if records["records"][4] or records["records"][6]:
                        self.storage.set(hostname, records, {"ttl": shortest})
                    else:
                        err = InformationalError("No DNS entries found")
                if err is not None and _error_code(err) == "ENOTFOUND":
                    self.storage.delete(hostname)
            except Exception as exc:  # addresses that are not a list, or a storage that raised: the waiters must hear
                err = exc
            for waiter in waiters:
                waiter(err, now)

        lookup = settings.lookup or net_dns.lookup
        try:
            lookup(origin, settings.options(), callback)
        except Exception as exc:
            callback(exc)

    def _send(
        self, dispatch: DispatchFn, opts: dict[str, Any], handler: Any, origin: LookupOrigin, settings: _Settings, ip: Any,
        target: str | None = None,
    ) -> bool:
        new_opts = {
            **opts,
            "origin": target if target is not None else _ip_origin(origin, ip),
            "servername": origin.hostname,
            "headers": _with_host(opts.get("headers"), origin.host),
        }
        return dispatch(new_opts, _DNSHandler(self, dispatch, opts, handler, origin, settings, ip))


def _ip_origin(origin: LookupOrigin, ip: Any) -> str:
    address = ip["address"]
    host = f"[{address}]" if ":" in address else address
    port = ip.get("port") if isinstance(ip.get("port"), int) else origin.port
    default = 443 if origin.protocol == "https:" else 80
    return f"{origin.protocol}//{host}" if port == default else f"{origin.protocol}//{host}:{port}"


class _DNSHandler(DecoratorHandler):
    """Drops an address that fails to connect; with dual stack, retries once on the other family."""

    def __init__(
        self, state: _DNS, dispatch: DispatchFn, opts: dict[str, Any], handler: Any, origin: LookupOrigin,
        settings: _Settings, ip: Any,
    ) -> None:
        super().__init__(handler)
        self.state = state
        self.dispatch = dispatch
        self.opts = opts
        self.origin = origin
        self.settings = settings
        self.ip = ip
        self.retried = False
        self.responded = False

    def on_response_start(self, controller: Any, status_code: int, headers: Any, status_message: str) -> None:
        self.responded = True
        super().on_response_start(controller, status_code, headers, status_message)

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        if not self.responded and _error_code(err) in _RETRYABLE and isinstance(self.ip, dict):
            state = self.state
            hostname = self.origin.hostname
            records = state.storage.get(hostname)
            dns_records.drop_address(records, self.ip.get("address", ""))
            if self.settings.dual_stack and not self.retried:
                other = 4 if self.ip.get("family") == 6 else 6
                ip = dns_records.pick_family(records, other, time.monotonic())
                if ip is not None:
                    self.retried = True
                    self.ip = ip
                    new_opts = {
                        **self.opts,
                        "origin": _ip_origin(self.origin, ip),
                        "servername": hostname,
                        "headers": _with_host(self.opts.get("headers"), self.origin.host),
                    }
                    self.dispatch(new_opts, self)
                    return
        super().on_response_error(controller, err)
