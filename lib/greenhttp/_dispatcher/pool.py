"""``Pool``: up to ``connections`` clients to one origin, requests served first in, first out.

The options are checked here; the queue, the free stack, events and the
lifecycle live in :mod:`.pool_core`, the public methods in :mod:`.pool_base`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .._core.options import validate_client_options
from .._core.url import parse_origin
from ..errors import InvalidArgumentError
from .client import Client
from .pool_base import PoolBase
from .pool_core import PoolCore

__all__ = ["Pool", "check_connections", "check_client_ttl", "check_factory"]


def check_connections(value: Any) -> int:
    """``connections``: None or an integer >= 0; 0 and None both mean "no limit"."""
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgumentError(f"connections must be a non-negative integer or None, got {value!r}")
    return value


def check_client_ttl(value: Any) -> float:
    """``client_ttl``: None or a number of seconds >= 0; 0 and None both disable it."""
    if value is None:
        return 0.0
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
    ):
        raise InvalidArgumentError(f"client_ttl must be a non-negative number of seconds, got {value!r}")
    return float(value)


def check_factory(value: Any) -> Callable[..., Any] | None:
    if value is not None and not callable(value):
        raise InvalidArgumentError(f"factory must be callable, got {value!r}")
    factory: Callable[..., Any] | None = value
    return factory


class Pool(PoolBase):
    """A dispatcher over up to ``connections`` connections to one origin.

    ``Pool(origin, connections=None, factory=None, client_ttl=None, **client_options)``:

    * ``connections``: the most clients (connections) at once; ``None`` (or 0)
      for no limit. Clients are made on demand, never ahead of requests.
    * ``factory(origin, **client_options)`` makes a member; the default is
      :class:`Client`. It may return any dispatcher (a ``Client`` over HTTP/2, a
      composed one …) with ``dispatch``, ``busy``, ``stats``, ``close``,
      ``destroy`` and the events.
    * ``client_ttl``: seconds after its connection was made when a client is
      retired (closed gracefully, and replaced when needed); ``None`` or 0: never.
    * every :class:`Client` option (``pipelining``, ``keep_alive_timeout`` …),
      validated now and given to each client.

    A request goes to a free client, or to a new one while there is room, or
    else waits in the pool's queue; the oldest waiting request goes first.
    ``dispatch`` never blocks; the blocking helpers (``request`` …) block only
    the calling greenlet. Greenlet-safe. Events are the clients', re-emitted
    with the pool first in ``targets``; ``drain(origin, targets)`` is emitted
    when the pool can take requests again after a ``dispatch`` returned False.
    """

    def __init__(
        self,
        origin: Any,
        connections: int | None = None,
        factory: Callable[..., Any] | None = None,
        client_ttl: float | None = None,
        **client_options: Any,
    ) -> None:
        parsed = parse_origin(origin, "origin")
        limit = check_connections(connections)
        ttl = check_client_ttl(client_ttl)
        make = check_factory(factory) or Client
        if factory is None:
            # Each Client validates again; doing it now names a bad option at once.
            opts = validate_client_options(client_options)
            if not callable(opts.connect):
                # One connector for every member, so they share its TLS session cache.
                client_options = {**client_options, "connect": Client._make_connector(opts)}
        super().__init__()
        self._client_options = client_options  # what members are made with (read by limits_of)
        self._core = PoolCore(self, parsed.origin, self._listeners, limit, make, client_options, ttl)

    @property
    def connections(self) -> int | None:
        """The connection limit (None: no limit)."""
        return self._core._limit or None
