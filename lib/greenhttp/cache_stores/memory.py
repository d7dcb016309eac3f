"""``MemoryCacheStore``: cached responses in this process's memory, really bounded.

Entries are grouped by URL (origin and path) for lookup and kept in one
least-recently-used order for eviction. After every store the oldest
entries are evicted until the store is within ``max_count`` entries and
``max_size`` body bytes; a body larger than ``max_entry_size`` is never
stored. Reading an entry refreshes its place in the order.

Greenlet-safe: no method yields to the hub, so each runs as one step. Not
thread-safe (use one store per thread, or the SQLite store).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from .base import (
    BufferedWriter,
    CacheKey,
    CacheValue,
    check_key,
    check_size,
    check_value,
    url_key,
    vary_matches,
)

__all__ = ["MemoryCacheStore"]


class _Entry:
    __slots__ = ("group", "method", "vary", "delete_at", "result", "size")

    def __init__(self, group: str, method: str, result: dict[str, Any], size: int) -> None:
        self.group = group
        self.method = method
        self.vary = result.get("vary")
        self.delete_at = result["delete_at"]
        self.result = result
        self.size = size


class MemoryCacheStore:
    """A bounded in-memory :class:`~greenhttp.cache_stores.base.CacheStore`.

    ``max_count`` entries (default 1024), ``max_size`` body bytes in all
    (default 100 MiB), ``max_entry_size`` bytes per body (default 5 MiB).
    Non-negative integers, else ``InvalidArgumentError`` (also a TypeError).
    No method blocks; every method is greenlet-safe.
    """

    def __init__(self, max_count: int = 1024, max_size: int = 104857600, max_entry_size: int = 5242880) -> None:
        self._max_count = check_size("max_count", max_count)
        self._max_size = check_size("max_size", max_size)
        self._max_entry_size = check_size("max_entry_size", max_entry_size)
        self._groups: dict[str, list[_Entry]] = {}
        self._lru: OrderedDict[_Entry, None] = OrderedDict()
        self._size = 0

    # -- introspection -----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Bytes of response bodies held."""
        return self._size

    @property
    def count(self) -> int:
        """Entries held."""
        return len(self._lru)

    def is_full(self) -> bool:
        """True when the store is at ``max_size`` bytes or ``max_count`` entries."""
        return self._size >= self._max_size or len(self._lru) >= self._max_count

    # -- the CacheStore protocol -------------------------------------------------------------------
    def get(self, key: CacheKey) -> CacheValue | None:
        """The entry matching ``key`` (method, URL, Vary), or None. Never blocks.

        The result is the store's own dict; treat it as read-only.
        """
        try:
            entries = self._groups.get(f"{key['origin']} {key['path']}")
            method = key["method"]
        except (KeyError, TypeError):
            check_key(key)
            raise
        headers = key.get("headers")
        if not entries or (headers is not None and type(headers) is not dict):
            check_key(key)  # a malformed key is a TypeError, as in the other store, not a miss
            if not entries:
                return None
        now = time.time()
        # Of several stored responses that match, the most recent is used (RFC 9111 §4.1).
        best: _Entry | None = None
        expired: list[_Entry] = []
        for entry in reversed(entries):
            if entry.method == method and (entry.vary is None or vary_matches(entry.vary, headers)):
                if entry.delete_at <= now:
                    expired.append(entry)
                elif best is None or entry.result["cached_at"] > best.result["cached_at"]:
                    best = entry
        for entry in expired:
            self._remove(entry)
        if best is None:
            check_key(key)
            return None
        self._lru.move_to_end(best)
        return best.result  # type: ignore[return-value]

    def create_write_stream(self, key: CacheKey, value: CacheValue) -> BufferedWriter | None:
        """A writer for ``value``'s body; the entry is stored when it ends. Never blocks."""
        check_key(key)
        check_value(value)
        if self._max_count == 0:
            return None
        return BufferedWriter(self._commit, key, value, self._max_entry_size)

    def set(self, key: CacheKey, value: dict[str, Any]) -> None:
        """Store ``value`` (a CacheValue with its whole ``body`` as bytes) at once."""
        check_key(key)
        check_value(value)
        body = value.get("body") or b""
        if not isinstance(body, (bytes, bytearray, memoryview)):
            body = b"".join(body)
        if len(body) <= self._max_entry_size:
            self._commit(key, value, bytes(body))  # type: ignore[arg-type]

    def delete(self, key: CacheKey) -> None:
        """Remove every entry (all methods and variants) of ``key``'s URL. Never blocks."""
        check_key(key)
        for entry in self._groups.get(url_key(key), [])[:]:
            self._remove(entry)

    def clear(self) -> None:
        """Remove every entry."""
        self._groups.clear()
        self._lru.clear()
        self._size = 0

    # -- internals ---------------------------------------------------------------------------------
    def _commit(self, key: CacheKey, value: CacheValue, body: bytes) -> None:
        if self._max_count == 0 or len(body) > self._max_size:
            return
        group = url_key(key)
        result = dict(value)
        result["body"] = body
        entry = _Entry(group, key["method"], result, len(body))
        entries = self._groups.setdefault(group, [])
        for old in entries:
            if old.method == entry.method and old.vary == entry.vary:
                self._remove(old)
                entries = self._groups.setdefault(group, [])
                break
        entries.append(entry)
        self._lru[entry] = None
        self._size += entry.size
        lru = self._lru
        while len(lru) > self._max_count or self._size > self._max_size:
            self._remove(next(iter(lru)))

    def _remove(self, entry: _Entry) -> None:
        if entry not in self._lru:
            return  # already gone
        del self._lru[entry]
        self._size -= entry.size
        entries = self._groups.get(entry.group)
        if entries is not None:
            entries.remove(entry)
            if not entries:
                del self._groups[entry.group]

    def __repr__(self) -> str:
        return f"<MemoryCacheStore count={len(self._lru)} size={self._size}>"
