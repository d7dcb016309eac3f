"""``Client``: one origin, one connection at a time, HTTP/1.1 with pipelining.

This class is what users see: the documented methods, their annotations and
argument checks. The work is done by its :class:`ClientCore`
(``client_core.py``, compiled with the request path), which the connection
drivers and an owning pool talk to directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import _debug
from .._api.request import run_with_callback
from .._core.options import ClientOptions, validate_client_options
from .._core.url import Origin, parse_origin
from .._net.connector import build_connector
from ..errors import InvalidArgumentError
from .base import Dispatcher, destroy_arguments
from .client_core import ClientCore
from .stats import ClientStats

__all__ = ["Client"]


class Client(Dispatcher):
    """A dispatcher for one origin over one connection (spec 2.1).

    ``Client(url, **options)``; options are spec 2.1's in snake_case, durations
    in seconds. Constructing it opens no connection: the first request (or
    :meth:`connect` with no arguments) does. Greenlet-safe: any number of
    greenlets may call it at once. ``dispatch`` never blocks; the blocking
    helpers (``request`` …) block only the calling greenlet.
    """

    # The HTTP/2 driver also caps concurrent streams at ``pipelining`` (H2CClient).
    _h2_pipelining_caps = False

    def __init__(self, url: Any, **options: Any) -> None:
        super().__init__()
        self._origin: Origin = parse_origin(url)
        self._opts: ClientOptions = self._validate(options)
        self._core = ClientCore(
            self, self._origin, self._opts, self._make_connector(self._opts), self._listeners, self._h2_pipelining_caps
        )
        _debug.setup_from_env()

    def _validate(self, options: dict[str, Any]) -> ClientOptions:
        return validate_client_options(options)

    @staticmethod
    def _make_connector(opts: ClientOptions) -> Callable[..., Any]:
        """The connector for ``opts``: the user's function (with ``socket_path``
        and ``allow_h2`` injected), or one built from the ``connect`` dict."""
        connect = opts.connect
        if callable(connect):
            inject: dict[str, Any] = {}
            if opts.socket_path is not None:
                inject["socket_path"] = opts.socket_path
            inject["allow_h2"] = opts.allow_h2

            def wrapped(options: dict[str, Any], callback: Any = None) -> Any:
                return connect({**options, **inject}, callback)

            # A Connector (a user's, or a pool's shared one) must still be told of
            # TLS 1.3 session tickets, which arrive after the handshake.
            remember = getattr(connect, "remember_session", None)
            if callable(remember):
                wrapped.remember_session = remember  # type: ignore[attr-defined]
            return wrapped
        kwargs: dict[str, Any] = {
            "timeout": opts.connect_timeout,
            "allow_h2": opts.allow_h2,
            "socket_path": opts.socket_path,
            "max_cached_sessions": opts.max_cached_sessions,
            "auto_select_family": opts.auto_select_family,
            "auto_select_family_attempt_timeout": opts.auto_select_family_attempt_timeout,
        }
        if connect:
            kwargs.update({k: v for k, v in connect.items() if k != "allow_h2"})
        return build_connector(**kwargs)

    # -- public state --------------------------------------------------------------
    @property
    def origin(self) -> str:
        """The origin this client talks to, e.g. ``http://127.0.0.1:8080``."""
        return self._origin.origin

    @property
    def closed(self) -> bool:
        """True once ``close()`` (or ``destroy()``) was called."""
        return self._core._closed

    @property
    def destroyed(self) -> bool:
        """True once destroyed, or once a ``close()`` has finished."""
        return self._core._destroyed

    @property
    def pipelining(self) -> int:
        """How many requests may be in flight on the connection (readable and writable)."""
        return self._core._pipelining

    @pipelining.setter
    def pipelining(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidArgumentError(f"pipelining must be a non-negative integer, got {value!r}")
        self._core.set_pipelining(value)

    @property
    def size(self) -> int:
        """Requests queued or in flight."""
        return self._core.size

    @property
    def connected(self) -> bool:
        """True while a connection is established."""
        return self._core.connected

    @property
    def busy(self) -> bool:
        """True when the client won't take more work without queueing (wait for ``drain``)."""
        return self._core.busy

    @property
    def stats(self) -> ClientStats:
        """A snapshot: ``connected``, ``pending``, ``running``, ``size``."""
        return self._core.stats

    # -- dispatch -------------------------------------------------------------------
    def dispatch(self, options: dict[str, Any], handler: Any) -> bool:
        """Queue a request; never blocks. Returns False when busy (wait for ``drain``).

        Errors are delivered through ``handler.on_response_error(None, err)``,
        or raised if the handler has no such method; a ``handler`` that cannot
        be one (``None``, a string, a number) raises :class:`InvalidArgumentError`.
        """
        return self._core.dispatch(options, handler)

    # -- lifecycle ------------------------------------------------------------------------
    def connect(self, *args: Any, **options: Any) -> Any:
        """With no arguments: open the connection now, blocking until connected.

        Raises the connect error if the connection fails. With options, an
        HTTP CONNECT (see :meth:`Dispatcher.connect`).
        """
        if args or options:
            return super().connect(*args, **options)
        return self._core.connect()

    def close(self, callback: Callable[..., Any] | None = None) -> None:
        """Stop taking requests, let the queued ones finish, then close.

        Blocks the calling greenlet until done (or, with ``callback``, returns
        at once and calls ``callback(err, None)`` when done).
        """
        if callback is not None:
            core = self._core
            run_with_callback(lambda: core.begin_close(True), lambda parker: parker.get(), callback)
            return None
        self._core.close()
        return None

    def destroy(self, err: BaseException | None = None, callback: Callable[..., Any] | None = None) -> None:
        """Abort every queued and running request with ``err`` and close the connection.

        Blocks until the socket is closed (or, with ``callback``, returns at once).
        """
        err, callback = destroy_arguments(err, callback)
        if callback is not None:
            core = self._core
            run_with_callback(lambda: core.begin_destroy(err), lambda _: core.finish_destroy(), callback)
            return None
        self._core.destroy(err)
        return None

    def __repr__(self) -> str:
        return f"<greenhttp.Client {self._origin.origin} size={self.size}>"
