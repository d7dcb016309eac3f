"""Statistics snapshots of dispatchers (REFERENCE §3.11)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["ClientStats", "PoolStats"]


class ClientStats(NamedTuple):
    """A snapshot of a Client: ``connected`` (bool), ``pending`` (queued, not written),
    ``running`` (written, not finished) and ``size`` (pending + running)."""

    connected: bool
    pending: int
    running: int
    size: int


class PoolStats(NamedTuple):
    """A snapshot of a Pool: ``connected`` clients, ``free`` clients, ``pending``
    (pool queue plus clients' pending), ``queued`` (pool queue), ``running``, ``size``."""

    connected: int
    free: int
    pending: int
    queued: int
    running: int
    size: int
