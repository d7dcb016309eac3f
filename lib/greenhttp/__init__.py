"""greenhttp: the interface of Node's undici, for Python on gevent.

Everything public is importable from here. Calls that return a value over
the network block only the calling greenlet; dispatchers are greenlet-safe.
"""

from __future__ import annotations

from . import cache_stores, errors, interceptors
from ._abort import AbortController, AbortSignal
from ._api.readable import BodyReadable
from ._api.response import ResponseData
from ._api.stream import PipelineData, PipelineDuplex, StreamData, StreamFactoryData
from ._api.upgrade import ConnectData, UpgradeData
from ._core.blob import Blob
from ._core.controller import Controller
from ._core.fetch_headers import Headers
from ._core.option_types import PipelineOptions, RequestOptions, UpgradeOptions
from ._dispatcher.agent import Agent
from ._dispatcher.base import ComposedDispatcher, Dispatcher
from ._dispatcher.client import Client
from ._dispatcher.h2c_client import H2CClient
from ._dispatcher.pool import Pool
from ._dispatcher.stats import ClientStats, PoolStats
from ._global import (
    connect,
    get_global_dispatcher,
    pipeline,
    request,
    set_global_dispatcher,
    stream,
    upgrade,
)
from ._handlers.base import DecoratorHandler
from ._handlers.redirect import RedirectHandler
from ._handlers.retry import RetryHandler
from ._net.connector import build_connector
from ._version import __version__
from ._websocket import CloseEvent, ErrorEvent, MessageEvent, WebSocket, WebSocketStream, ping
from .cache_stores import MemoryCacheStore, SqliteCacheStore
from .cookies import Cookie, delete_cookie, get_cookies, get_set_cookies, parse_cookie, set_cookie
from .errors import DOMException, ExperimentalWarning, WebSocketError

__all__ = [
    # dispatchers
    "Dispatcher",
    "ComposedDispatcher",
    "Client",
    "H2CClient",
    "Pool",
    "Agent",
    "ClientStats",
    "PoolStats",
    # the global dispatcher and the module-level functions
    "set_global_dispatcher",
    "get_global_dispatcher",
    "request",
    "stream",
    "pipeline",
    "upgrade",
    "connect",
    # request API
    "ResponseData",
    "StreamData",
    "StreamFactoryData",
    "PipelineData",
    "PipelineDuplex",
    "BodyReadable",
    "UpgradeData",
    "ConnectData",
    "Controller",
    "AbortController",
    "AbortSignal",
    "Blob",
    # the request options, typed for type checkers and editors
    "RequestOptions",
    "PipelineOptions",
    "UpgradeOptions",
    # interceptors and handler decorators
    "interceptors",
    "cache_stores",
    "MemoryCacheStore",
    "SqliteCacheStore",
    "DecoratorHandler",
    "RetryHandler",
    "RedirectHandler",
    # connector
    "build_connector",
    # headers and cookies
    "Headers",
    "Cookie",
    "get_cookies",
    "set_cookie",
    "delete_cookie",
    "get_set_cookies",
    "parse_cookie",
    # WebSocket
    "WebSocket",
    "WebSocketStream",
    "ping",
    "MessageEvent",
    "CloseEvent",
    "ErrorEvent",
    # errors
    "errors",
    "DOMException",
    "WebSocketError",
    "ExperimentalWarning",
    "__version__",
]

# One entry point: public classes and functions report themselves as greenhttp's.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) or callable(_obj):
        try:
            _obj.__module__ = __name__
        except (AttributeError, TypeError):
            pass
del _name, _obj
