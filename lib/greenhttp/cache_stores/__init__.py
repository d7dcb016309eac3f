"""greenhttp.cache_stores: where the ``cache`` interceptor keeps responses.

* :class:`MemoryCacheStore` — in this process's memory, bounded by entry
  count, total size and entry size. Never blocks.
* :class:`SqliteCacheStore` — in an SQLite database (a file survives
  restarts and can be shared by several processes). Blocks the hub briefly.
* :class:`CacheStore` — the protocol both follow, to write your own.
"""

from __future__ import annotations

from .base import CacheKey, CacheStore, CacheValue, CacheWriter
from .memory import MemoryCacheStore
from .sqlite import SqliteCacheStore

__all__ = ["CacheStore", "CacheWriter", "CacheKey", "CacheValue", "MemoryCacheStore", "SqliteCacheStore"]
