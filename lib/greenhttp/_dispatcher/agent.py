"""``Agent``: one dispatcher per origin, chosen by each request's ``origin`` option.

The routing table maps the ``origin`` string a request carries straight to
its dispatcher, so a request to a known origin costs one dict lookup. The
first request to a spelling of an origin parses it once; spellings of the
same origin (``http://h:80`` and ``http://h``) share one dispatcher.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._api.request import run_with_callback
from .._core.options import validate_client_options
from .._core.request import check_handler, not_a_dict, refuse
from .._core.url import parse_origin
from .._runtime import spawn
from ..errors import (
    ClientClosedError,
    ClientDestroyedError,
    GreenHTTPError,
    InvalidArgumentError,
    MaxOriginsReachedError,
)
from .base import Dispatcher, destroy_arguments
from .client import Client
from .pool import Pool, check_client_ttl, check_connections, check_factory

__all__ = ["Agent"]

_H1_ONLY = "#http1-only"


def _default_factory(origin: str, **options: Any) -> Any:
    """A :class:`Client` when ``connections == 1``, else a :class:`Pool`."""
    if options.get("connections") == 1:
        options.pop("connections")
        options.pop("client_ttl", None)
        return Client(origin, **options)
    return Pool(origin, **options)


class Agent(Dispatcher):
    """A dispatcher for any number of origins (spec 1.1): requests say where they go.

    ``Agent(factory=None, max_origins=None, **pool_options)``:

    * ``factory(origin, **pool_options)`` makes the dispatcher of an origin the
      first time a request goes there; the default makes a :class:`Client`
      when ``connections=1`` and a :class:`Pool` otherwise.
    * ``max_origins``: how many origins may have a dispatcher at once (None:
      no limit); a request to one more fails with :class:`MaxOriginsReachedError`.
    * ``pool_options``: ``connections``, ``client_ttl`` and every
      :class:`Client` option, validated now and given to each new dispatcher.

    Every request needs the ``origin`` option (``agent.request(origin=…,
    path=…)``). A request with ``allow_h2=False`` goes to a separate
    HTTP/1.1-only dispatcher of its origin. An origin's dispatcher is closed
    and forgotten once it has no connection left and nothing queued (it is
    made again on the next request). Events are re-emitted with the agent
    first in ``targets``. ``dispatch`` never blocks; the blocking helpers
    block only the calling greenlet. Greenlet-safe.
    """

    def __init__(
        self,
        factory: Callable[..., Any] | None = None,
        max_origins: int | None = None,
        **pool_options: Any,
    ) -> None:
        super().__init__()
        if max_origins is not None and (
            not isinstance(max_origins, int) or isinstance(max_origins, bool) or max_origins <= 0
        ):
            raise InvalidArgumentError(f"max_origins must be a positive integer or None, got {max_origins!r}")
        self._factory = check_factory(factory) or _default_factory
        if factory is None:
            opts = dict(pool_options)
            check_connections(opts.pop("connections", None))
            check_client_ttl(opts.pop("client_ttl", None))
            checked = validate_client_options(opts)
            if not callable(checked.connect):
                # The connect dict is checked by building its connector, as Client and
                # Pool do: a bad one is named now, not at each origin's first request.
                Client._make_connector(checked)
        self._options = pool_options
        self._max_origins = max_origins
        # Each spelling of an origin seen in requests (a (spelling, "#http1-only")
        # tuple for allow_h2=False) -> its dispatcher: one lookup per request.
        self._routes: dict[Any, Dispatcher] = {}
        self._dispatchers: dict[str, Any] = {}  # canonical origin (+ "#http1-only") -> dispatcher
        self._origins: dict[str, int] = {}  # canonical origin -> how many dispatchers it has
        self._retiring: list[Any] = []
        self._closed = False
        self._destroyed = False
        # The origins' "drain" is forwarded once somebody listens to the agent's: a
        # pool under load drains once per request, and nobody would hear it.
        self._forwards_drain = False

    # -- public state -----------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once ``close()`` (or ``destroy()``) was called."""
        return self._closed

    @property
    def destroyed(self) -> bool:
        """True once ``destroy()`` was called, or once a ``close()`` has finished."""
        return self._destroyed

    @property
    def stats(self) -> dict[str, Any]:
        """``{key: stats}`` for every live dispatcher: a :class:`ClientStats` or
        :class:`PoolStats` per origin (an ``allow_h2=False`` dispatcher under
        ``origin + "#http1-only"``)."""
        return {key: d.stats for key, d in self._dispatchers.items() if hasattr(d, "stats")}

    # -- dispatch -------------------------------------------------------------------------
    def dispatch(self, options: dict[str, Any], handler: Any) -> bool:
        """Route the request to its origin's dispatcher (made on first use); never blocks.

        Returns that dispatcher's answer (False: wait for ``drain``). Errors
        (no ``origin``, :class:`MaxOriginsReachedError`, a closed agent) are
        delivered through ``handler.on_response_error(None, err)``.
        """
        check_handler(handler)
        try:
            origin = options.get("origin")
            key = origin if options.get("allow_h2") is not False else (origin, _H1_ONLY)
            if self._closed:
                raise ClientDestroyedError() if self._destroyed else ClientClosedError()
            try:
                dispatcher = self._routes[key]
            except (KeyError, TypeError):
                dispatcher = self._route(origin, key, options.get("allow_h2") is False)
        except Exception as exc:
            refuse(handler, exc if isinstance(options, dict) else not_a_dict(options))
            return False
        return dispatcher.dispatch(options, handler)

    def _route(self, origin: Any, key: Any, h1_only: bool) -> Any:
        """The slow path: a spelling not seen yet. Parse it, find or make its dispatcher."""
        if not origin or not (isinstance(origin, str) or hasattr(origin, "geturl")):
            raise InvalidArgumentError(f"origin must be a non-empty string or URL, got {origin!r}")
        canonical = parse_origin(origin, "origin").origin
        ckey = canonical + _H1_ONLY if h1_only else canonical
        dispatcher = self._dispatchers.get(ckey)
        if dispatcher is None:
            if (
                self._max_origins is not None
                and canonical not in self._origins
                and len(self._origins) >= self._max_origins
            ):
                raise MaxOriginsReachedError()
            opts = dict(self._options)
            if h1_only:
                opts["allow_h2"] = False
            dispatcher = self._factory(canonical, **opts)
            self._adopt(dispatcher, canonical, ckey)
        try:
            self._routes[key] = dispatcher  # the next request with this spelling: one lookup
        except TypeError:  # an unhashable URL object: parsed every time
            pass
        return dispatcher

    def _adopt(self, dispatcher: Any, origin: str, ckey: str) -> None:
        def on_connect(origin: str, targets: list[Any]) -> None:
            self.emit("connect", origin, [self, *targets])

        def on_disconnect(origin: str, targets: list[Any], err: BaseException | None = None) -> None:
            self._forget_if_idle(dispatcher, ckey, origin)
            self.emit("disconnect", origin, [self, *targets], err)

        def on_connection_error(origin: str, targets: list[Any], err: BaseException | None = None) -> None:
            self._forget_if_idle(dispatcher, ckey, origin)
            self.emit("connectionError", origin, [self, *targets], err)

        if self._forwards_drain:
            self._forward_drain(dispatcher)
        dispatcher.on("connect", on_connect)
        dispatcher.on("disconnect", on_disconnect)
        dispatcher.on("connectionError", on_connection_error)
        # Kept only once the listeners are on: what a bad factory returned is not remembered.
        self._dispatchers[ckey] = dispatcher
        self._origins[origin] = self._origins.get(origin, 0) + 1

    def _listener_added(self, event: str) -> None:
        if event == "drain" and not self._forwards_drain:
            self._forwards_drain = True
            for dispatcher in self._dispatchers.values():
                self._forward_drain(dispatcher)

    def _forward_drain(self, dispatcher: Any) -> None:
        def on_drain(origin: str, targets: list[Any] | None = None) -> None:
            if self._listeners.get("drain"):  # (the listeners may have gone since)
                self.emit("drain", origin, [self, *(targets or [dispatcher])])

        dispatcher.on("drain", on_drain)

    def _forget_if_idle(self, dispatcher: Any, ckey: str, origin: str) -> None:
        """After a disconnect: drop an origin's dispatcher with no connection and nothing to do."""
        if self._closed or ckey not in self._dispatchers or self._dispatchers[ckey] is not dispatcher:
            return
        idle = getattr(dispatcher, "_idle", None)  # a Pool's: cheaper than its stats
        if idle is not None:
            if not idle():
                return
        else:
            stats = getattr(dispatcher, "stats", None)
            if stats is None or stats.connected or stats.size:
                return
        del self._dispatchers[ckey]
        for spelling in [k for k, d in self._routes.items() if d is dispatcher]:
            del self._routes[spelling]
        canonical = ckey[: -len(_H1_ONLY)] if ckey.endswith(_H1_ONLY) else ckey
        left = self._origins.get(canonical, 1) - 1
        if left:
            self._origins[canonical] = left
        else:
            self._origins.pop(canonical, None)
        self._retiring.append(dispatcher)

        def closed(err: Any, value: Any) -> None:
            dispatcher.remove_all_listeners()  # our closures hold the dispatcher
            try:
                self._retiring.remove(dispatcher)
            except ValueError:
                pass

        try:
            dispatcher.close(callback=closed)
        except Exception:
            closed(None, None)

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self, callback: Callable[..., Any] | None = None) -> None:
        """Close every origin's dispatcher, letting queued and running requests finish.

        Blocks the calling greenlet until all are closed (or, with
        ``callback``, returns at once and calls ``callback(err, None)``).
        Raises :class:`ClientDestroyedError` once the agent is destroyed: by
        ``destroy()``, or by a ``close()`` that finished.
        """
        if callback is not None:
            run_with_callback(self._begin_close, lambda _: self._finish_close(), callback)
            return None
        self._begin_close()
        self._finish_close()
        return None

    def _begin_close(self) -> None:
        if self._destroyed:
            # Destroyed, also by a close() that finished (REFERENCE §1.9, as Client).
            raise ClientDestroyedError()
        self._closed = True

    def _finish_close(self) -> None:
        # A second close() meanwhile closes the same dispatchers, so it waits for them too.
        try:
            for d in list(self._dispatchers.values()) + list(self._retiring):
                try:
                    d.close()
                except (ClientDestroyedError, ClientClosedError):
                    pass
        except Exception:
            raise
        except BaseException:
            # Interrupted (a gevent.Timeout around close(), or a kill): the rest is
            # closed in the background, so the agent still ends up destroyed.
            spawn(self._close_in_background)
            raise
        if not self._destroyed:
            self._dispatchers.clear()
            self._routes.clear()
            self._origins.clear()
            self._destroyed = True
        return None

    def _close_in_background(self) -> None:
        try:
            self.close()
        except GreenHTTPError:  # destroyed meanwhile
            pass

    def destroy(self, err: BaseException | None = None, callback: Callable[..., Any] | None = None) -> None:
        """Destroy every origin's dispatcher: queued and running requests fail with ``err``.

        Blocks the calling greenlet until every socket is closed (or, with
        ``callback``, returns at once).
        """
        err, callback = destroy_arguments(err, callback)
        if callback is not None:
            run_with_callback(self._begin_destroy, lambda gone: self._finish_destroy(gone, err), callback)
            return None
        self._finish_destroy(self._begin_destroy(), err)
        return None

    def _begin_destroy(self) -> list[Any]:
        """What destroy() does before it waits: the agent takes no more requests and
        forgets its dispatchers. Returns them, for :meth:`_finish_destroy`."""
        self._closed = self._destroyed = True
        dispatchers = list(self._dispatchers.values()) + list(self._retiring)
        self._dispatchers.clear()
        self._routes.clear()
        self._origins.clear()
        return dispatchers

    @staticmethod
    def _finish_destroy(dispatchers: list[Any], err: BaseException | None) -> None:
        for d in dispatchers:
            d.destroy(err)

    def __repr__(self) -> str:
        return f"<greenhttp.Agent origins={sorted(self._origins)}>"

