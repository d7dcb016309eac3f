"""The global dispatcher and the module-level ``request``, ``stream``, ``pipeline``,
``upgrade`` and ``connect`` that use it.

``greenhttp.request("http://127.0.0.1:8080/path?q=1")`` splits the URL into
the ``origin`` and the ``path`` options and calls the same method of
``dispatcher=`` (default: the global dispatcher, an :class:`Agent` made on
first use). Everything else is passed through unchanged.
"""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, overload
from urllib.parse import quote, urlsplit

from ._api.response import ResponseData
from ._api.stream import PipelineData, PipelineDuplex, StreamData, StreamFactoryData
from ._api.upgrade import ConnectData, UpgradeData
from ._core.option_types import PipelineOptions, RequestOptions, Unpack, UpgradeOptions, URLLike
from ._core.url import C0_CONTROL_OR_SPACE, parse_origin, url_of_object
from ._dispatcher.agent import Agent
from ._dispatcher.base import Dispatcher
from ._runtime import get_hub, get_hub_if_exists, spawn
from .errors import InvalidArgumentError

__all__ = [
    "set_global_dispatcher",
    "get_global_dispatcher",
    "request",
    "stream",
    "pipeline",
    "upgrade",
    "connect",
]

_global_dispatcher: Any = None  # the one set_global_dispatcher() set: every thread's
# Otherwise each gevent hub (one per OS thread) gets a default Agent of its own on first
# use, since a dispatcher belongs to the hub that runs it: greenhttp.request() then works
# from any thread, and after a test harness replaced the hub.
_defaults: weakref.WeakKeyDictionary[Any, Agent] = weakref.WeakKeyDictionary()


def _after_fork_in_child() -> None:
    """In a forked child: the default Agents the parent made are the parent's.

    The child makes its own on first use; the inherited one of this thread's hub
    is destroyed in the background, without a byte sent (closing the child's
    copies of its sockets sends no FIN while the parent holds them, and HTTP/2
    says no GOAWAY from another process), so its reader greenlets never read
    the parent's answers; those of other threads' hubs, whose threads did not
    survive the fork, are dropped. A dispatcher set with set_global_dispatcher()
    stays: the user made it, and docs/concurrency.md says to make it after the fork.
    """
    if not _defaults:
        return
    hub = get_hub_if_exists()  # (making one here would be a side effect of any fork)
    inherited = _defaults.pop(hub, None) if hub is not None else None
    _defaults.clear()
    if inherited is not None:
        spawn(_let_go, inherited)


def _let_go(dispatcher: Any) -> None:
    try:
        dispatcher.destroy()
    except Exception:  # the parent's business: nothing to report in the child
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def set_global_dispatcher(dispatcher: Any) -> None:
    """Make ``dispatcher`` the one the module-level functions (and WebSocket) use by default.

    Anything with a ``dispatch(options, handler)`` method will do. The one it
    replaces is not closed. Never blocks; greenlet-safe.
    """
    # A class (``set_global_dispatcher(Agent)``) has a ``dispatch`` function too, but no
    # bound method: every request would fail later with a TypeError.
    if (
        dispatcher is None
        or isinstance(dispatcher, type)
        or not callable(getattr(dispatcher, "dispatch", None))
    ):
        raise InvalidArgumentError(
            f"the global dispatcher must have a dispatch(options, handler) method, got {dispatcher!r}"
        )
    global _global_dispatcher
    _global_dispatcher = dispatcher


def get_global_dispatcher() -> Any:
    """The global dispatcher: the one :func:`set_global_dispatcher` set, else this
    thread's default, an :class:`Agent` with default options made on first use
    (one per gevent hub, so per OS thread). Never blocks; greenlet-safe.
    """
    dispatcher = _global_dispatcher
    if dispatcher is None:
        hub = get_hub()
        dispatcher = _defaults.get(hub)
        if dispatcher is None:
            dispatcher = _defaults[hub] = Agent()
    return dispatcher


def _split(url: Any, options: dict[str, Any], name: str, *, keep_path: bool = False) -> tuple[Any, str, str]:
    """Pick the dispatcher and split ``url`` into its origin and request target.

    A ``path`` option replaces the URL's path and query (a leading ``/`` is
    added unless ``keep_path``: CONNECT's ``host:port``). Returns
    ``(the dispatcher's method ``name``, origin, path)``.
    """
    if options.pop("agent", None) is not None:
        raise InvalidArgumentError("unsupported agent option, did you mean dispatcher?")
    dispatcher = options.pop("dispatcher", None)
    options.pop("origin", None)  # the URL's origin wins (as in the original)
    if dispatcher is None:
        dispatcher = get_global_dispatcher()
    if isinstance(dispatcher, type) or not callable(getattr(dispatcher, "dispatch", None)):
        raise InvalidArgumentError(f"dispatcher must have a dispatch(options, handler) method, got {dispatcher!r}")
    method = getattr(dispatcher, name, None)
    if not callable(method):
        # A dispatcher needs only dispatch() (set_global_dispatcher() asks no
        # more): Dispatcher's own method, which uses nothing else, serves it.
        method = partial(getattr(Dispatcher, name), dispatcher)
    found = _SPLIT_URLS.get(url) if type(url) is str else None
    if found is None:
        found = _split_url(url)
    origin, url_path = found
    path = options.pop("path", None)
    if path is not None:
        if not isinstance(path, str):
            raise InvalidArgumentError(f"path must be a string, got {path!r}")
        if not keep_path:
            # As the URL's own path: the fragment dropped, the rest percent-encoded.
            # CR, LF and NUL are refused first, not encoded (docs/security.md).
            if _LINE_BREAK_OR_NUL.search(path):
                raise InvalidArgumentError(f"invalid path: {path!r} (CR, LF and NUL are refused)")
            target, _, query = path.partition("#")[0].partition("?")
            path = _target("/" + target if not target.startswith("/") else target, query)
    else:
        path = url_path
    return method, origin, path


# URLs already split into (origin, request target): a program asks for the same
# few URLs again and again. Only valid str URLs are kept, at most 256 (started
# over when full).
_SPLIT_URLS: dict[str, tuple[str, str]] = {}


def _split_url(url: Any) -> tuple[str, str]:
    """Check ``url`` and split it into its origin and its request target."""
    if isinstance(url, dict):
        url = url_of_object(url)
    elif not isinstance(url, str):
        if url is None or not hasattr(url, "geturl"):
            raise InvalidArgumentError(f"url must be a string, URL or dict, got {url!r}")
        url = url.geturl()
    # Python's URL parser, as the WHATWG one, drops CR, LF and TAB anywhere in a URL; a
    # line break inside one is refused instead (docs/security.md). At either end it is
    # stripped with the other controls and spaces, as both parsers do.
    if _LINE_BREAK_OR_NUL.search(url.strip(C0_CONTROL_OR_SPACE)):
        raise InvalidArgumentError(f"invalid url: {url!r} (CR, LF and NUL are refused)")
    try:
        parts = urlsplit(url.rstrip(C0_CONTROL_OR_SPACE))
    except ValueError as exc:
        raise InvalidArgumentError(f"invalid url: {url!r} ({exc})") from exc
    if parts.username is not None or parts.password is not None:
        raise InvalidArgumentError(
            f"invalid url: {url!r} (credentials in the URL are not sent; use an authorization header)"
        )
    origin = parse_origin(f"{parts.scheme}://{parts.netloc}").origin
    path = _target(parts.path or "/", parts.query)
    if type(url) is str:
        if len(_SPLIT_URLS) >= 256:
            _SPLIT_URLS.clear()
        _SPLIT_URLS[url] = (origin, path)
    return origin, path


# What the WHATWG URL parser (the original's) percent-encodes, as UTF-8, in a
# path and in the query of an http(s) URL: controls, space, non-ASCII and these.
# "%" is kept, so what is encoded already is sent as given.
_PATH_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"#<>?`{}')
_QUERY_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in "\"#<>'")
_LINE_BREAK_OR_NUL = re.compile(r"[\r\n\x00]")
_NEEDS_QUOTING = re.compile(r"[^\x21-\x7e]|[\"<>`{}']")


def _target(path: str, query: str) -> str:
    """The request target of a URL's ``path`` and ``query``, percent-encoded as the original's."""
    try:
        if _NEEDS_QUOTING.search(path):
            path = quote(path, safe=_PATH_SAFE)
        if query and _NEEDS_QUOTING.search(query):
            query = quote(query, safe=_QUERY_SAFE)
    except UnicodeEncodeError as exc:  # a lone surrogate
        raise InvalidArgumentError(f"invalid url path or query: {path!r}, {query!r} ({exc})") from exc
    return path + "?" + query if query else path


def _method(options: dict[str, Any]) -> str:
    """The original's default: GET, or PUT when there is a body."""
    return options.pop("method", None) or ("PUT" if options.get("body") is not None else "GET")


# The overloads are what type checkers and editors see (option_types.py); ``path``,
# ``method``, ``dispatcher`` and ``callback`` reach the implementation in ``options``.
@overload
def request(
    url: str | URLLike | dict[str, Any],
    *,
    path: str | None = None,
    method: str | None = None,
    dispatcher: Dispatcher | None = None,
    callback: None = None,
    **options: Unpack[RequestOptions],
) -> ResponseData: ...


@overload
def request(
    url: str | URLLike | dict[str, Any],
    *,
    path: str | None = None,
    method: str | None = None,
    dispatcher: Dispatcher | None = None,
    callback: Callable[[Exception | None, ResponseData | None], object],
    **options: Unpack[RequestOptions],
) -> None: ...


def request(url: Any, **options: Any) -> Any:
    """Send a request to ``url`` and block the calling greenlet until the response head arrives.

    ``url`` is a full ``http(s)`` URL (a ``str``, a ``urllib.parse`` result, or a dict
    shaped as the original's URL object);
    ``dispatcher=`` picks the dispatcher (default: the global one). The method
    defaults to GET, or PUT when a ``body`` is given. The other options are
    those of :meth:`Dispatcher.request` (``callback=`` included). Returns
    :class:`ResponseData`. Greenlet-safe.
    """
    send, origin, path = _split(url, options, "request")
    method = _method(options)
    return send(path=path, method=method, origin=origin, **options)


@overload
def stream(
    url: str | URLLike | dict[str, Any],
    factory: Callable[[StreamFactoryData], Any],
    *,
    path: str | None = None,
    method: str | None = None,
    dispatcher: Dispatcher | None = None,
    callback: None = None,
    **options: Unpack[RequestOptions],
) -> StreamData: ...


@overload
def stream(
    url: str | URLLike | dict[str, Any],
    factory: Callable[[StreamFactoryData], Any],
    *,
    path: str | None = None,
    method: str | None = None,
    dispatcher: Dispatcher | None = None,
    callback: Callable[[Exception | None, StreamData | None], object],
    **options: Unpack[RequestOptions],
) -> None: ...


def stream(url: Any, factory: Callable[[Any], Any], **options: Any) -> Any:
    """Send a request to ``url`` and write the response body into ``factory(data)``'s result.

    Blocks the calling greenlet until the body has been written; returns
    :class:`StreamData`. As :func:`request` for ``url``, ``dispatcher=`` and
    the method; the rest as :meth:`Dispatcher.stream`. Greenlet-safe.
    """
    send, origin, path = _split(url, options, "stream")
    method = _method(options)
    return send(path=path, method=method, origin=origin, factory=factory, **options)


def pipeline(
    url: str | URLLike | dict[str, Any],
    handler: Callable[[PipelineData], Any],
    *,
    path: str | None = None,
    method: str | None = None,
    dispatcher: Dispatcher | None = None,
    **options: Unpack[PipelineOptions],
) -> PipelineDuplex:
    """Start a request to ``url``; returns the :class:`PipelineDuplex` of :meth:`Dispatcher.pipeline`.

    Never blocks (the duplex's ``write``/``read`` do). As :func:`request` for
    ``url``, ``dispatcher=`` and the method. Greenlet-safe.
    """
    opts: dict[str, Any] = {**options, "path": path, "method": method, "dispatcher": dispatcher}
    send, origin, target_path = _split(url, opts, "pipeline")
    duplex: PipelineDuplex = send(
        path=target_path, method=_method(opts), origin=origin, handler=handler, **opts
    )
    return duplex


@overload
def upgrade(
    url: str | URLLike | dict[str, Any],
    *,
    path: str | None = None,
    method: str | None = None,
    protocol: str = "Websocket",
    dispatcher: Dispatcher | None = None,
    callback: None = None,
    **options: Unpack[UpgradeOptions],
) -> UpgradeData: ...


@overload
def upgrade(
    url: str | URLLike | dict[str, Any],
    *,
    path: str | None = None,
    method: str | None = None,
    protocol: str = "Websocket",
    dispatcher: Dispatcher | None = None,
    callback: Callable[[Exception | None, UpgradeData | None], object],
    **options: Unpack[UpgradeOptions],
) -> None: ...


def upgrade(url: Any, **options: Any) -> Any:
    """Ask ``url`` to switch protocols; blocks until ``101`` and returns :class:`UpgradeData`.

    As :func:`request` for ``url`` and ``dispatcher=``; ``protocol`` defaults
    to ``"Websocket"``. Greenlet-safe.
    """
    send, origin, path = _split(url, options, "upgrade")
    method = _method(options)
    return send(path=path, method=method, origin=origin, **options)


@overload
def connect(
    url: str | URLLike | dict[str, Any],
    *,
    path: str | None = None,
    dispatcher: Dispatcher | None = None,
    callback: None = None,
    **options: Unpack[UpgradeOptions],
) -> ConnectData: ...


@overload
def connect(
    url: str | URLLike | dict[str, Any],
    *,
    path: str | None = None,
    dispatcher: Dispatcher | None = None,
    callback: Callable[[Exception | None, ConnectData | None], object],
    **options: Unpack[UpgradeOptions],
) -> None: ...


def connect(url: Any, **options: Any) -> Any:
    """Open an HTTP CONNECT tunnel through the proxy at ``url``; blocks until it is answered.

    ``path`` is the tunnel's target, ``"host:port"``, sent as given; without
    it, the URL's path is used. Returns :class:`ConnectData`. As
    :func:`request` for ``dispatcher=``. Greenlet-safe.
    """
    send, origin, path = _split(url, options, "connect", keep_path=True)
    options.pop("method", None)
    return send(path=path, origin=origin, **options)
