"""The identity of a request (sans-IO): the key a cache files it under, and the key
deduplication groups it by.

Both start from the request's origin, method and path — the query
serialised into it exactly as the dispatcher does — and its header fields,
names lower-cased (:func:`request_header_map`). The cache key keeps the
headers for ``Vary`` matching; the deduplication key is a tuple including
them (minus the excluded names), so it hashes and compares structurally: no
two different header sets can collide, whatever their values contain.

Greenlet-safe: pure functions.
"""

from __future__ import annotations

from typing import Any, TypedDict

from .headers import header_pairs, headers_by_name
from .url import path_with_query

__all__ = ["SAFE_METHODS", "CacheKey", "cache_key", "dedupe_key", "request_header_map"]

#: RFC 9110 §9.2.1.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class CacheKey(TypedDict, total=False):
    """What identifies a cached response: ``origin``, ``method``, ``path`` (with its
    query) and the request ``headers`` (lower-case names; used to match ``Vary``)."""

    origin: str
    method: str
    path: str
    headers: dict[str, Any]


def request_header_map(headers: Any) -> dict[str, Any]:
    """Request headers (any API.md shape) as ``{lower-case name: str | list[str]}``.

    Raises InvalidArgumentError for malformed headers, like the dispatcher.
    """
    if not headers:
        return {}
    return headers_by_name(header_pairs(headers), lower=True)


def cache_key(origin: Any, method: str, path: str, query: Any, headers: dict[str, Any]) -> CacheKey:
    """The cache key of a request (the query serialised into the path as the dispatcher does)."""
    origin = str(origin)
    if origin.endswith("/"):
        origin = origin[:-1]
    return {"origin": origin, "method": method, "path": path_with_query(path, query), "headers": headers}


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
