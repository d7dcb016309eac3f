"""``SqliteCacheStore``: cached responses in an SQLite database (the standard library's sqlite3).

One row per entry, looked up by URL and method through an index; ``vary``
is matched in Python. With a file ``location`` the cache survives restarts
and several processes can share it (the gunicorn case): the database runs in
WAL mode, so readers never wait for a writer, and a writer waits for another
at most ``busy_timeout`` seconds. A process that forked after opening the
store reopens its own connection on first use.

**Blocking.** sqlite3 calls are not cooperative: each one blocks the whole
hub (every greenlet) while it runs. The store keeps them short — one indexed
SELECT per lookup, one small transaction per store or delete — which costs
tens of microseconds on a warm database. Only contention with another
process can make a write wait, and never longer than ``busy_timeout``; a
write that still cannot proceed is dropped (a cache may always decline to
store), and a read that cannot proceed is a miss.

Greenlet-safe and thread-safe: a lock serialises the use of the connection,
and no call yields while holding it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import threading
import time
from typing import Any

from .base import (
    BufferedWriter,
    CacheKey,
    CacheValue,
    StoreOptionError,
    check_key,
    check_size,
    check_value,
    url_key,
    vary_matches,
)

__all__ = ["SqliteCacheStore"]

_log = logging.getLogger("greenhttp")
#: The longest busy timeout SQLite takes: 2**31 - 1 milliseconds (about 24.8 days), in seconds.
_MAX_BUSY_TIMEOUT = 2147483.0
_TABLE = "greenhttp_cache_v1"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    url TEXT NOT NULL,
    method TEXT NOT NULL,
    body BLOB NOT NULL,
    delete_at REAL NOT NULL,
    status_code INTEGER NOT NULL,
    status_message TEXT NOT NULL,
    headers TEXT NOT NULL,
    cache_control_directives TEXT NOT NULL,
    etag TEXT,
    vary TEXT,
    cached_at REAL NOT NULL,
    stale_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS {_TABLE}_get ON {_TABLE} (url, method, delete_at);
CREATE INDEX IF NOT EXISTS {_TABLE}_delete_at ON {_TABLE} (delete_at);
"""
# Newest first: of several matching entries, the most recent answers (RFC 9111 §4.1).
_GET = (
    f"SELECT body, delete_at, status_code, status_message, headers, cache_control_directives,"
    f" etag, vary, cached_at, stale_at FROM {_TABLE}"
    f" WHERE url = ? AND method = ? AND delete_at > ? ORDER BY cached_at DESC, id DESC"
)
_FIND = f"SELECT id, vary FROM {_TABLE} WHERE url = ? AND method = ?"
_UPDATE = (
    f"UPDATE {_TABLE} SET body = ?, delete_at = ?, status_code = ?, status_message = ?, headers = ?,"
    f" cache_control_directives = ?, etag = ?, vary = ?, cached_at = ?, stale_at = ? WHERE id = ?"
)
_INSERT = (
    f"INSERT INTO {_TABLE} (body, delete_at, status_code, status_message, headers,"
    f" cache_control_directives, etag, vary, cached_at, stale_at, url, method)"
    f" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class SqliteCacheStore:
    """A :class:`~greenhttp.cache_stores.base.CacheStore` in SQLite.

    ``location``: a file path, or ``":memory:"`` (default; private to this
    store). ``max_count``: entries kept (default unbounded; past it, expired
    rows go first, then the oldest tenth). ``max_entry_size``: bytes per
    body (default 2 GB, SQLite's own limit of 1 GB applies). ``busy_timeout``:
    seconds a write waits for another process's (default 1.0, also for ``None``; at most about
    24.8 days, SQLite's limit, which a longer one or ``math.inf`` means).

    Every call blocks the hub briefly (see the module docstring).
    Greenlet-safe and thread-safe. Use as a context manager, or ``close()``.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] = ":memory:",
        max_count: int | float = math.inf,
        max_entry_size: int = 2_000_000_000,
        busy_timeout: float | None = 1.0,
    ) -> None:
        if not isinstance(location, (str, os.PathLike)):
            raise StoreOptionError(f"location must be a path or ':memory:', got {location!r}")
        self._max_count = check_size("max_count", max_count, allow_inf=True)
        self._max_entry_size = check_size("max_entry_size", max_entry_size)
        if busy_timeout is None:
            busy_timeout = 1.0  # (a duration of None is the default: API.md)
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, (int, float)) or not busy_timeout >= 0:
            raise StoreOptionError(f"busy_timeout must be a non-negative number of seconds, got {busy_timeout!r}")
        self._location = os.fspath(location)
        # sqlite3 passes the timeout on in milliseconds as a C int: a longer one (inf included)
        # would overflow into "never wait", so it is capped at the longest SQLite can wait.
        self._busy_timeout = min(float(busy_timeout), _MAX_BUSY_TIMEOUT)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._closed = False
        self._connect()

    # -- connection --------------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._location, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            if self._location != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA temp_store = MEMORY")
            conn.executescript(_SCHEMA)
        except BaseException:
            conn.close()  # not a database, locked, read-only: the error must not keep the file open
            raise
        self._conn = conn
        self._pid = os.getpid()
        return conn

    def _check_open(self) -> None:
        if self._closed:
            raise sqlite3.ProgrammingError("the SqliteCacheStore is closed")

    def _connection(self) -> sqlite3.Connection:
        self._check_open()
        conn = self._conn
        if conn is None or self._pid != os.getpid():
            # A forked child must not use its parent's connection (SQLite forbids it). It is
            # closed first: while open, SQLite in this process would take the parent's file
            # locks as its own, and the new connection would hold none, so the parent closing
            # its connection would delete the WAL this process goes on writing to.
            if conn is not None:
                self._conn = None
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            conn = self._connect()
        return conn

    def close(self) -> None:
        """Close the database connection. Later calls raise ``sqlite3.ProgrammingError``; a
        writer made before and ended after stores nothing (quietly: the response still arrives)."""
        with self._lock:
            self._closed = True
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> SqliteCacheStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the CacheStore protocol -------------------------------------------------------------------
    def get(self, key: CacheKey) -> CacheValue | None:
        """The entry matching ``key`` (method, URL, Vary), or None. Blocks the hub briefly."""
        check_key(key)
        headers = key.get("headers")
        try:
            with self._lock:
                rows = self._connection().execute(_GET, (url_key(key), key["method"], time.time())).fetchall()
        except sqlite3.OperationalError as exc:  # locked, busy, I/O: a miss
            _log.debug("greenhttp: cache store read failed: %r", exc)
            return None
        for body, delete_at, status, message, hdrs, cc, etag, vary, cached_at, stale_at in rows:
            vary = json.loads(vary) if vary else None
            if vary is not None and not vary_matches(vary, headers):
                continue
            return {
                "status_code": status,
                "status_message": message,
                "headers": json.loads(hdrs),
                "vary": vary,
                "etag": etag,
                "cache_control_directives": json.loads(cc),
                "cached_at": cached_at,
                "stale_at": stale_at,
                "delete_at": delete_at,
                "body": body,
            }
        return None

    def create_write_stream(self, key: CacheKey, value: CacheValue) -> BufferedWriter | None:
        """A writer for ``value``'s body; the row is written when it ends. Never blocks until then."""
        check_key(key)
        check_value(value)
        self._check_open()
        if self._max_count == 0:
            return None
        return BufferedWriter(self._commit, key, value, self._max_entry_size)

    def set(self, key: CacheKey, value: dict[str, Any]) -> None:
        """Store ``value`` (a CacheValue with its whole ``body`` as bytes) at once. Blocks briefly."""
        check_key(key)
        check_value(value)
        self._check_open()
        body = value.get("body") or b""
        if not isinstance(body, (bytes, bytearray, memoryview)):
            body = b"".join(body)
        if len(body) <= self._max_entry_size and self._max_count != 0:
            self._commit(key, value, bytes(body))  # type: ignore[arg-type]

    def delete(self, key: CacheKey) -> None:
        """Remove every entry (all methods and variants) of ``key``'s URL. Blocks briefly."""
        check_key(key)
        try:
            with self._lock:
                self._connection().execute(f"DELETE FROM {_TABLE} WHERE url = ?", (url_key(key),))
        except sqlite3.OperationalError as exc:
            _log.warning("greenhttp: cache store delete failed: %r", exc)

    @property
    def size(self) -> int:
        """The number of rows (entries, expired ones included until pruned). Blocks briefly."""
        with self._lock:
            count: int = self._connection().execute(f"SELECT COUNT(*) FROM {_TABLE}").fetchone()[0]
            return count

    # -- internals ---------------------------------------------------------------------------------
    def _commit(self, key: CacheKey, value: CacheValue, body: bytes) -> None:
        vary = value.get("vary") or None
        url = url_key(key)
        method = key["method"]
        row = (
            body,
            value["delete_at"],
            value["status_code"],
            value.get("status_message", ""),
            json.dumps(value.get("headers") or {}, separators=(",", ":")),
            json.dumps(value.get("cache_control_directives") or {}, separators=(",", ":")),
            value.get("etag"),
            json.dumps(vary, separators=(",", ":")) if vary else None,
            value["cached_at"],
            value["stale_at"],
        )
        try:
            with self._lock:
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for row_id, stored_vary in conn.execute(_FIND, (url, method)).fetchall():
                        if (json.loads(stored_vary) if stored_vary else None) == vary:
                            conn.execute(_UPDATE, (*row, row_id))
                            break
                    else:
                        conn.execute(_INSERT, (*row, url, method))
                        self._prune(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:  # busy past busy_timeout, disk full, too big: do not store
            _log.debug("greenhttp: cache store write failed: %r", exc)

    def _prune(self, conn: sqlite3.Connection) -> None:
        conn.execute(f"DELETE FROM {_TABLE} WHERE delete_at <= ?", (time.time(),))
        if self._max_count == math.inf:
            return
        excess = conn.execute(f"SELECT COUNT(*) FROM {_TABLE}").fetchone()[0] - self._max_count
        if excess > 0:
            # The oldest-stored tenth (at least the excess) goes, so pruning is not paid on every insert.
            n = max(int(excess), int(self._max_count // 10), 1)
            conn.execute(
                f"DELETE FROM {_TABLE} WHERE id IN (SELECT id FROM {_TABLE} ORDER BY id LIMIT ?)", (n,)
            )

    def __repr__(self) -> str:
        return f"<SqliteCacheStore {self._location!r}>"
