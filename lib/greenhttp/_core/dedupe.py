"""The identity of a request for deduplication (sans-IO).

Two requests are the same when they have the same origin, method, path
(with its query) and request header fields, header names compared
case-insensitively and fields listed in ``exclude`` left out. The key is a
tuple, so it hashes and compares structurally: no two different header
sets can collide, whatever their values contain.

Greenlet-safe: pure functions.
"""

from __future__ import annotations

from typing import Any

from .cache_policy import SAFE_METHODS, cache_key

__all__ = ["SAFE_METHODS", "dedupe_key"]


def dedupe_key(
    origin: Any, method: str, path: str, query: Any, headers: dict[str, Any], exclude: frozenset[str]
) -> tuple[Any, ...]:
    """The deduplication key of a request whose headers are ``request_header_map``'s output."""
    key = cache_key(origin, method, path, query, headers)
    fields = tuple(
        sorted((name, tuple(value) if isinstance(value, list) else value)
               for name, value in headers.items() if name not in exclude)
    )
    return (key["origin"], method, key["path"], fields)
