"""Resolved addresses of host names, with their TTLs (sans-IO).

The ``dns`` interceptor keeps, per host name, the records a lookup gave::

    {"records": {4: {"ips": [rec, ...], "offset": n} | None,
                 6: {"ips": [rec, ...], "offset": n} | None},
     "offset": n}

where each ``rec`` is ``{"address": str, "family": 4 | 6, "ttl": seconds,
"timestamp": when stored}`` (plus ``"port"`` when the lookup gave one).
These are plain dicts because a user's ``pick`` and ``storage`` see them.
Time is passed in as ``now`` (a monotonic clock, seconds); a record is
expired once more than ``ttl`` seconds passed since it was stored.

:class:`DNSStorage` is the default storage. Greenlet-safe: nothing here
yields, so every call runs as one step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "FALLBACK_TTL",
    "DNSStorage",
    "default_pick",
    "drop_address",
    "make_records",
    "pick_family",
]

#: Seconds a record is kept when the lookup reports no TTL (the system resolver never does)
#: and no ``max_ttl`` is set.
FALLBACK_TTL = 10.0


class DNSStorage:
    """The default record storage: a dict keyed by host name, at most ``max_items`` entries.

    At ``max_items`` the oldest entry is evicted to make room, so it never
    reports itself ``full()``. Never blocks; greenlet-safe.
    """

    def __init__(self, max_items: float = math.inf) -> None:
        self._max_items = max_items
        self._records: dict[str, Any] = {}

    @property
    def size(self) -> int:
        """How many host names have records."""
        return len(self._records)

    def get(self, origin: str) -> Any:
        """The records of host name ``origin``, or None."""
        return self._records.get(origin)

    def set(self, origin: str, records: Any, options: dict[str, Any] | None = None) -> None:
        """Store ``records`` for ``origin`` (``options["ttl"]``, the shortest TTL, is informative:
        each record carries its own). Evicts the oldest entry when at ``max_items``."""
        if records is None:
            self._records.pop(origin, None)
            return
        store = self._records
        store.pop(origin, None)
        while store and len(store) >= self._max_items:
            del store[next(iter(store))]
        store[origin] = records

    def delete(self, origin: str) -> None:
        """Forget ``origin``'s records."""
        self._records.pop(origin, None)

    def full(self) -> bool:
        """Whether a new host name cannot be stored: never, the oldest is evicted instead."""
        return False


def make_records(addresses: Iterable[dict[str, Any]], max_ttl: float, now: float) -> tuple[dict[str, Any], float]:
    """Group a lookup's ``addresses`` by family and stamp them; returns ``(records, shortest ttl)``.

    A record's TTL is its own, capped by ``max_ttl`` when that is positive;
    a record without one gets ``max_ttl``, or :data:`FALLBACK_TTL`.
    Duplicate addresses are kept once; entries that are not records (not a
    mapping, or without a valid ``address`` and ``family``) are skipped.
    """
    default_ttl = max_ttl if max_ttl > 0 else FALLBACK_TTL
    families: dict[int, Any] = {4: None, 6: None}
    seen: set[tuple[str, int]] = set()
    shortest = math.inf
    for addr in addresses:
        if not isinstance(addr, Mapping):
            continue  # not a record
        family = addr.get("family")
        address = addr.get("address")
        if family not in (4, 6) or not isinstance(address, str) or (address, family) in seen:
            continue
        seen.add((address, family))
        ttl = addr.get("ttl")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl < 0:
            ttl = default_ttl
        elif max_ttl > 0:
            ttl = min(ttl, max_ttl)
        record = {"address": address, "family": family, "ttl": float(ttl), "timestamp": now}
        if isinstance(addr.get("port"), int):
            record["port"] = addr["port"]
        shortest = min(shortest, record["ttl"])
        group = families[family]
        if group is None:
            group = families[family] = {"ips": [], "offset": None}
        group["ips"].append(record)
    return {"records": families, "offset": None}, (shortest if shortest != math.inf else default_ttl)


def _purge(group: dict[str, Any] | None, now: float) -> None:
    if group:
        group["ips"] = [r for r in group["ips"] if now - r["timestamp"] <= r["ttl"]]


def _next(group: dict[str, Any] | None) -> dict[str, Any] | None:
    """Round-robin within one family."""
    if not group or not group["ips"]:
        return None
    offset = group["offset"]
    offset = 0 if offset is None else offset + 1
    group["offset"] = offset
    ips: list[dict[str, Any]] = group["ips"]
    return ips[offset % len(ips)]


def default_pick(
    records: dict[str, Any], affinity: int | None, dual_stack: bool, now: float
) -> dict[str, Any] | None:
    """The address to use next, or None when every record expired (then: look up again).

    With ``dual_stack`` and no ``affinity`` the families alternate per call,
    IPv4 first, falling back to the other family when one has no address;
    with an affinity that family is preferred (the other serves when it is
    empty). Without ``dual_stack`` only ``affinity``'s family is used.
    Within a family addresses are used in turn. Expired records are dropped.
    """
    families = records["records"]
    _purge(families.get(4), now)
    _purge(families.get(6), now)
    if dual_stack:
        if affinity is None:
            offset = records.get("offset")
            offset = 0 if offset is None else offset + 1
            records["offset"] = offset
            affinity = 6 if offset % 2 else 4
        other = 6 if affinity == 4 else 4
        return _next(families.get(affinity)) or _next(families.get(other))
    return _next(families.get(affinity if affinity is not None else 4))


def pick_family(records: dict[str, Any] | None, family: int, now: float) -> dict[str, Any] | None:
    """The next unexpired address of ``family``, or None."""
    if not records:
        return None
    group = records["records"].get(family)
    _purge(group, now)
    return _next(group)


def drop_address(records: dict[str, Any] | None, address: str) -> None:
    """Forget one address that failed (the next lookup may bring it back)."""
    if not records:
        return
    for group in records["records"].values():
        if group:
            group["ips"] = [r for r in group["ips"] if r["address"] != address]
