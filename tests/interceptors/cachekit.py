"""Helpers shared by the cache interceptor's tests."""

from __future__ import annotations

from typing import Any


def counting(*headers: tuple[str, str], body: bytes = b"payload", status: str = "200 OK") -> Any:
    """A reply giving every request the same answer plus ``X-N: <request number>``."""
    n = 0

    def reply(req: Any) -> tuple[str, list[tuple[str, str]], bytes]:
        nonlocal n
        n += 1
        return status, [*headers, ("X-N", str(n))], body

    return reply


def get(d: Any, path: str = "/", **kw: Any) -> tuple[int, dict[str, Any], bytes]:
    """``(status, headers, body)`` of a GET through ``d``."""
    r = d.request(path=path, **kw)
    return r.status_code, r.headers, r.body.bytes()
