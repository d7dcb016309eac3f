"""The result of ``request()``: :class:`ResponseData`.

Kept apart from ``request()`` itself (``request.py``), which is compiled
(docs/performance.md): a compiled class keeps no docstrings at run time.
"""

from __future__ import annotations

from typing import Any

from .readable import BodyReadable

__all__ = ["ResponseData"]


class ResponseData:
    """The result of ``request()``: ``status_code``, ``status_text``, ``headers``,
    ``trailers`` (filled when the body ends), ``body``, ``opaque``, ``context``.

    Usable as a context manager: leaving the block dumps what is left of the body.
    """

    __slots__ = ("status_code", "status_text", "headers", "trailers", "body", "opaque", "context")

    def __init__(
        self,
        status_code: int,
        status_text: str,
        headers: Any,
        trailers: dict[str, Any],
        body: BodyReadable,
        opaque: Any,
        context: Any,
    ) -> None:
        self.status_code = status_code
        self.status_text = status_text
        self.headers = headers
        self.trailers = trailers
        self.body = body
        self.opaque = opaque
        self.context = context

    def __enter__(self) -> ResponseData:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        body = self.body
        if exc_type is not None and not issubclass(exc_type, Exception):
            # Left by a timeout or a kill: the caller gave up, so waiting for the
            # rest of the body (dump) would block past it. Abort instead.
            body.close()
        elif not body._ended:
            body.dump()
        body._closed = True

    def __repr__(self) -> str:
        return f"<ResponseData {self.status_code}>"
