"""The dispatcher base: events, the blocking helpers over ``dispatch``, ``compose``.

Every dispatcher (``Client``, and later ``Pool``, ``Agent``, composed ones)
implements ``dispatch(options, handler) -> bool`` and inherits the rest:
``request`` (and its siblings) build an ordinary handler, call
``self.dispatch`` and park the calling greenlet until the handler delivers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

from .._api.request import await_response, request, run_with_callback, start_request
from .._api.response import ResponseData
from .._api.stream import (
    PipelineData,
    PipelineDuplex,
    StreamData,
    StreamFactoryData,
    finish_stream,
    pipeline,
    start_stream,
    stream,
)
from .._api.upgrade import (
    ConnectData,
    UpgradeData,
    await_socket,
    connect,
    finish_connect,
    start_connect,
    start_upgrade,
    upgrade,
)
from .._core.option_types import PipelineOptions, RequestOptions, Unpack, UpgradeOptions, URLLike
from .._core.options import web_socket_options_of
from .._core.request import check_handler
from .._emitter import EventEmitter
from ..errors import InvalidArgumentError
from .compose import compose_dispatch

__all__ = ["Dispatcher", "ComposedDispatcher", "destroy_arguments"]


def destroy_arguments(err: Any, callback: Any) -> tuple[BaseException | None, Any]:
    """``destroy(err, callback)``'s arguments, checked: ``destroy(callback)`` is
    ``destroy(None, callback)``; ``err`` must be an exception (requests fail
    with it) and ``callback`` callable."""
    if callable(err) and callback is None and not isinstance(err, BaseException):
        err, callback = None, err
    if err is not None and not isinstance(err, BaseException):
        raise InvalidArgumentError(f"err must be an exception or None, got {err!r}")
    if callback is not None and not callable(callback):
        raise InvalidArgumentError(f"callback must be callable, got {callback!r}")
    return err, callback


class Dispatcher(EventEmitter):
    """Base of every dispatcher. Greenlet-safe. Events: ``connect``, ``disconnect``,
    ``connectionError``, ``drain``, ``error`` (and ``ping`` on HTTP/2)."""

    __slots__ = ("__dict__",)

    def dispatch(self, options: dict[str, Any], handler: Any) -> bool:  # pragma: no cover - abstract
        """Start a request described by ``options``, reporting to ``handler``. Never blocks.

        Returns False when the dispatcher is busy (the request is still
        accepted; wait for ``drain`` before sending more). A ``handler`` that
        cannot be one (``None``, a string, a number) raises
        :class:`InvalidArgumentError`; every other error goes to
        ``handler.on_response_error``.
        """
        raise NotImplementedError

    def close(self, callback: Callable[..., Any] | None = None) -> None:  # pragma: no cover - abstract
        """Finish queued requests, then release every connection. Blocks until done."""
        raise NotImplementedError

    def destroy(self, err: BaseException | None = None, callback: Any = None) -> None:  # pragma: no cover
        """Abort every queued and running request with ``err`` and close now. Blocks until closed."""
        raise NotImplementedError

    # -- blocking helpers ------------------------------------------------------------
    # Each helper's overloads are what type checkers and editors see: the options
    # by name and type (option_types.py), and None as the result with a callback.
    @overload
    def request(
        self,
        path: str,
        method: str = "GET",
        *,
        origin: str | URLLike | None = None,
        callback: None = None,
        **options: Unpack[RequestOptions],
    ) -> ResponseData: ...

    @overload
    def request(
        self,
        path: str,
        method: str = "GET",
        *,
        origin: str | URLLike | None = None,
        callback: Callable[[Exception | None, ResponseData | None], object],
        **options: Unpack[RequestOptions],
    ) -> None: ...

    def request(
        self,
        path: str | None = None,
        method: str = "GET",
        *,
        callback: Callable[[Any, Any], Any] | None = None,
        **options: Any,
    ) -> ResponseData | None:
        """Send a request and block the calling greenlet until the response head arrives.

        Returns :class:`ResponseData`; read its ``body`` (which blocks as data
        arrives), or leave a ``with`` block to discard it. With
        ``callback=``, returns None at once and calls ``callback(err, data)``.
        Options: those of ``dispatch`` plus ``opaque``, ``signal``,
        ``on_info``, ``response_headers`` ("raw") and ``high_water_mark``.
        """
        options["path"] = path
        options["method"] = method
        if callback is not None:
            run_with_callback(lambda: start_request(self, options), await_response, callback, options.get("opaque"))
            return None
        return request(self, options)

    @overload
    def stream(
        self,
        path: str,
        method: str = "GET",
        *,
        factory: Callable[[StreamFactoryData], Any],
        origin: str | URLLike | None = None,
        callback: None = None,
        **options: Unpack[RequestOptions],
    ) -> StreamData: ...

    @overload
    def stream(
        self,
        path: str,
        method: str = "GET",
        *,
        factory: Callable[[StreamFactoryData], Any],
        origin: str | URLLike | None = None,
        callback: Callable[[Exception | None, StreamData | None], object],
        **options: Unpack[RequestOptions],
    ) -> None: ...

    def stream(
        self,
        path: str | None = None,
        method: str = "GET",
        *,
        factory: Callable[[StreamFactoryData], Any],
        callback: Callable[[Any, Any], Any] | None = None,
        **options: Any,
    ) -> StreamData | None:
        """Send a request and write the response body into ``factory(data)``'s writable.

        ``factory`` gets ``StreamFactoryData(status_code, headers, opaque,
        context)`` and returns an object with ``write(bytes)`` (``close()`` is
        called at the end if present). Blocks the calling greenlet until the
        body is written; returns ``StreamData(opaque, trailers)``. A slow
        writer slows the socket: the body is paused, not buffered.
        """
        options["path"] = path
        options["method"] = method
        if callback is not None:
            run_with_callback(
                lambda: start_stream(self, options, factory),
                lambda started: finish_stream(started, factory),
                callback,
                options.get("opaque"),
            )
            return None
        return stream(self, options, factory)

    def pipeline(
        self,
        path: str | None = None,
        method: str = "GET",
        *,
        handler: Callable[[PipelineData], Any],
        origin: str | URLLike | None = None,
        **options: Unpack[PipelineOptions],
    ) -> PipelineDuplex:
        """Start a request whose body is written to, and response read from, the returned duplex.

        ``handler`` gets ``PipelineData(status_code, headers, opaque, body,
        context)`` and returns what to read (usually ``data.body``). Never
        blocks; the duplex's ``write``/``read`` block the calling greenlet.
        """
        opts: dict[str, Any] = {**options, "path": path, "method": method}
        if origin is not None:
            opts["origin"] = origin
        return pipeline(self, opts, handler)

    @overload
    def upgrade(
        self,
        path: str,
        method: str = "GET",
        *,
        protocol: str = "Websocket",
        origin: str | URLLike | None = None,
        callback: None = None,
        **options: Unpack[UpgradeOptions],
    ) -> UpgradeData: ...

    @overload
    def upgrade(
        self,
        path: str,
        method: str = "GET",
        *,
        protocol: str = "Websocket",
        origin: str | URLLike | None = None,
        callback: Callable[[Exception | None, UpgradeData | None], object],
        **options: Unpack[UpgradeOptions],
    ) -> None: ...

    def upgrade(
        self,
        path: str | None = None,
        method: str = "GET",
        *,
        protocol: str = "Websocket",
        callback: Callable[[Any, Any], Any] | None = None,
        **options: Any,
    ) -> UpgradeData | None:
        """Send an upgrade request; blocks until ``101``. Returns ``UpgradeData(headers, socket, opaque)``."""
        options.update(path=path, method=method, protocol=protocol)
        if callback is not None:
            run_with_callback(lambda: start_upgrade(self, options), await_socket, callback, options.get("opaque"))
            return None
        return upgrade(self, options)

    @overload
    def connect(
        self,
        path: str,
        *,
        origin: str | URLLike | None = None,
        callback: None = None,
        **options: Unpack[UpgradeOptions],
    ) -> ConnectData: ...

    @overload
    def connect(
        self,
        path: str,
        *,
        origin: str | URLLike | None = None,
        callback: Callable[[Exception | None, ConnectData | None], object],
        **options: Unpack[UpgradeOptions],
    ) -> None: ...

    def connect(
        self, path: str | None = None, *, callback: Callable[[Any, Any], Any] | None = None, **options: Any
    ) -> ConnectData | None:
        """HTTP CONNECT to ``path`` (``host:port``); blocks until the tunnel is answered.

        Returns ``ConnectData(status_code, headers, socket, opaque)``.
        """
        options["path"] = path
        if callback is not None:
            run_with_callback(lambda: start_connect(self, options), finish_connect, callback, options.get("opaque"))
            return None
        return connect(self, options)

    @property
    def web_socket_options(self) -> dict[str, int]:
        """The limits a WebSocket through this dispatcher gets, from its ``web_socket``
        option: ``{"max_fragments": …, "max_payload_size": …}`` (defaults 131072
        and 134217728, 128 MiB), as the original's ``webSocketOptions``. A new
        dict at each read. Never blocks; greenlet-safe."""
        limits = web_socket_options_of(self)
        return {"max_fragments": limits.max_fragments, "max_payload_size": limits.max_payload_size}

    # -- composition ------------------------------------------------------------------
    def compose(self, *interceptors: Any) -> ComposedDispatcher:
        """A dispatcher whose ``dispatch`` runs through ``interceptors``, the first outermost."""
        return ComposedDispatcher(self, interceptors)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        if not getattr(self, "closed", False):
            self.close()


class ComposedDispatcher(Dispatcher):
    """A dispatcher with interceptors around another's ``dispatch``. Events, ``close``
    and ``destroy`` are the wrapped dispatcher's."""

    def __init__(self, inner: Dispatcher, interceptors: tuple[Any, ...]) -> None:
        if not hasattr(inner, "dispatch"):
            raise InvalidArgumentError(f"compose needs a dispatcher, got {inner!r}")
        self._inner = inner
        self._dispatch = compose_dispatch(inner.dispatch, interceptors)
        origin = getattr(inner, "origin", None)
        self._default_origin = origin if isinstance(origin, str) else None

    def dispatch(self, options: dict[str, Any], handler: Any) -> bool:
        check_handler(handler)  # before an interceptor wraps it
        if self._default_origin is not None and options.get("origin") is None:
            options = {**options, "origin": self._default_origin}
        return self._dispatch(options, handler)

    def on(self, event: str, listener: Callable[..., Any]) -> Any:
        return self._inner.on(event, listener)

    def once(self, event: str, listener: Callable[..., Any]) -> Any:
        return self._inner.once(event, listener)

    def off(self, event: str, listener: Callable[..., Any]) -> Any:
        return self._inner.off(event, listener)

    # The emitter's aliases are bound to its own on/off: without these, a listener
    # added through them would miss the wrapped dispatcher's hook (Agent's drain).
    add_listener = on
    remove_listener = off

    def emit(self, event: str, *args: Any) -> bool:
        return self._inner.emit(event, *args)

    def listener_count(self, event: str) -> int:
        return self._inner.listener_count(event)

    def close(self, callback: Callable[..., Any] | None = None) -> None:
        return self._inner.close(callback)

    def destroy(self, err: BaseException | None = None, callback: Any = None) -> None:
        return self._inner.destroy(err, callback)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
