"""The ``CacheStore`` protocol that the ``cache`` interceptor talks to.

A store keeps responses under a :class:`CacheKey` and gives them back as a
``GetResult``. It never interprets HTTP caching rules: the interceptor has
decided, before calling it, what may be stored and for how long. A store
only has to honour three promises:

* ``get(key)`` returns the entry stored for ``key['origin']``,
  ``key['path']`` and ``key['method']`` whose ``vary`` matches
  ``key['headers']`` (:func:`vary_matches`), and never one past its
  ``delete_at``; or None.
* ``create_write_stream(key, value)`` returns a writer (``write(chunk) ->
  bool``, ``end()``, ``destroy(err=None)``) or None to decline. ``end()``
  stores ``value`` with the body written so far, replacing an entry with the
  same key and ``vary``; ``destroy()`` discards it. ``write`` returns False
  once the writer gave up (the body grew past the store's limit).
* ``delete(key)`` removes every entry for ``key['origin']`` and
  ``key['path']``, whatever their method and ``vary``.

Every method is called from ``dispatch()`` or a handler callback, so it must
return quickly: in-memory work, or a short local call (SQLite). A store that
talks to the network would block the connection's reader greenlet.

Values are plain dicts (see :class:`CacheValue`); times are UNIX timestamps in
seconds. The interceptor never mutates what ``get`` returns, so a store may
hand out its own objects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from .._core.cache_policy import CacheKey, CacheValue, vary_matches
from ..errors import InvalidArgumentError

__all__ = [
    "CacheKey",
    "CacheStore",
    "CacheValue",
    "CacheWriter",
    "BufferedWriter",
    "check_key",
    "check_value",
    "check_size",
    "url_key",
    "vary_matches",
]


@runtime_checkable
class CacheWriter(Protocol):
    """Receives one response body for a store; see the module docstring."""

    def write(self, chunk: bytes) -> bool: ...

    def end(self) -> None: ...

    def destroy(self, err: BaseException | None = None) -> None: ...


@runtime_checkable
class CacheStore(Protocol):
    """What the ``cache`` interceptor needs from a store; see the module docstring."""

    def get(self, key: CacheKey) -> CacheValue | None: ...

    def create_write_stream(self, key: CacheKey, value: CacheValue) -> CacheWriter | None: ...

    def delete(self, key: CacheKey) -> None: ...


class StoreOptionError(InvalidArgumentError, TypeError):
    """A store option has the wrong type or value (also a ``TypeError``, as in the original)."""


def check_size(name: str, value: Any, *, allow_inf: bool = False) -> int | float:
    """Validate a non-negative integer option (or ``math.inf`` when allowed)."""
    if allow_inf and value == float("inf"):
        return float("inf")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreOptionError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def check_key(key: Any) -> CacheKey:
    """Raise TypeError unless ``key`` has string ``origin``, ``method`` and ``path``."""
    if not isinstance(key, dict):
        raise TypeError(f"expected key to be a dict, got {type(key).__name__}")
    for field in ("origin", "method", "path"):
        if not isinstance(key.get(field), str):
            raise TypeError(f"expected key[{field!r}] to be a str, got {key.get(field)!r}")
    headers = key.get("headers")
    if headers is not None and not isinstance(headers, dict):
        raise TypeError(f"expected key['headers'] to be a dict, got {headers!r}")
    return key  # type: ignore[return-value]


def check_value(value: Any) -> CacheValue:
    """Raise TypeError unless ``value`` has the fields and types of a :class:`CacheValue`."""
    if not isinstance(value, dict):
        raise TypeError(f"expected value to be a dict, got {type(value).__name__}")
    for field in ("status_code", "cached_at", "stale_at", "delete_at"):
        v = value.get(field)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"expected value[{field!r}] to be a number, got {v!r}")
    if not isinstance(value.get("status_message", ""), str):
        raise TypeError(f"expected value['status_message'] to be a str, got {value.get('status_message')!r}")
    for field in ("headers", "vary", "cache_control_directives"):
        v = value.get(field)
        if v is not None and not isinstance(v, dict):
            raise TypeError(f"expected value[{field!r}] to be a dict, got {v!r}")
    etag = value.get("etag")
    if etag is not None and not isinstance(etag, str):
        raise TypeError(f"expected value['etag'] to be a str, got {etag!r}")
    return value  # type: ignore[return-value]


def url_key(key: CacheKey) -> str:
    """The grouping key of a URL: every method and variant of it share one.

    A space separates origin and path: neither can contain one.
    """
    return f"{key['origin']} {key['path']}"


class BufferedWriter:
    """A writer that collects the body, then hands it to ``commit(key, value, body)`` at ``end()``.

    Past ``max_size`` bytes it gives up: ``write`` returns False and nothing
    is stored. Used by one handler at a time; never blocks except inside
    ``commit``.
    """

    __slots__ = ("_commit", "_key", "_value", "_chunks", "_size", "_max_size", "_done")

    def __init__(
        self,
        commit: Callable[[CacheKey, CacheValue, bytes], None],
        key: CacheKey,
        value: CacheValue,
        max_size: int | float,
    ) -> None:
        self._commit = commit
        self._key = key
        self._value = value
        self._chunks: list[bytes] = []
        self._size = 0
        self._max_size = max_size
        self._done = False

    def write(self, chunk: bytes) -> bool:
        """Buffer ``chunk``; False once the body is too large (the entry is then dropped)."""
        if self._done:
            return False
        self._size += len(chunk)
        if self._size > self._max_size:
            self.destroy()
            return False
        self._chunks.append(bytes(chunk))
        return True

    def end(self) -> None:
        """Store the entry with the body written so far (once)."""
        if self._done:
            return
        self._done = True
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self._commit(self._key, self._value, body)

    close = end

    def destroy(self, err: BaseException | None = None) -> None:
        """Discard the entry."""
        self._done = True
        self._chunks = []

    @property
    def destroyed(self) -> bool:
        return self._done
