"""The keyword options of the request API, typed for type checkers and editors (sans-IO).

``client.request(path, method, **options)`` and its siblings annotate
``options`` with the :class:`~typing.TypedDict` classes below (PEP 692's
``Unpack``), so that mypy, pyright/Pylance, PyCharm and Jedi know every
option's name and type: an editor completes them, a checker reports a
misspelt one or a value of the wrong type.

Nothing here runs per request: at run time the options are the plain ``dict``
that ``**options`` builds, validated by ``dispatch()`` when the request is
made. ``origin`` is not a key here: it is an explicit keyword of the
dispatcher methods (the module-level functions take it from their URL).

Options that a custom interceptor reads are not known to these classes; pass
them through ``dispatch()``, whose options are a plain ``dict[str, Any]``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypedDict

from .blob import Blob
from .fetch_headers import Headers

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - the package is tested on 3.11
    from typing_extensions import Unpack

__all__ = [
    "RequestOptions",
    "PipelineOptions",
    "UpgradeOptions",
    "URLLike",
    "AbortSignalLike",
    "EmitterLike",
    "FileLike",
    "HeadersInit",
    "BodyInit",
    "Unpack",
]


class URLLike(Protocol):
    """A parsed URL, such as ``urllib.parse.urlsplit()``'s result."""

    def geturl(self) -> str: ...


class AbortSignalLike(Protocol):
    """An :class:`~greenhttp.AbortSignal`, or anything with the same ``add_event_listener``."""

    def add_event_listener(self, type: str, listener: Callable[[Any], Any], /) -> object: ...


class EmitterLike(Protocol):
    """An event emitter whose ``"abort"`` event aborts the request."""

    def on(self, event: str, listener: Callable[..., Any], /) -> object: ...


class FileLike(Protocol):
    """A binary file-like object: the body is read from it in chunks."""

    def read(self, size: int, /) -> bytes: ...


#: Request headers: a mapping (values: a string, bytes or a number, or a list of them to
#: repeat the header), ``Headers``, a list of ``(name, value)`` pairs, or the flat
#: ``[name, value, name, value]`` list. Values are checked when the request is made.
HeadersInit = Mapping[str, Any] | Mapping[bytes, Any] | Headers | Sequence[Any]
#: A request body: bytes-like, ``str`` (sent as UTF-8), a ``Blob``, a binary file, or an
#: iterable of ``bytes``/``str`` chunks (sent with an unknown length).
BodyInit = bytes | bytearray | memoryview | str | Blob | FileLike | Iterable[bytes | str]


class _CommonOptions(TypedDict, total=False):
    # The dispatch options every helper passes through (docs/request-api.md).
    headers: HeadersInit | None
    query: dict[str, Any] | None
    headers_timeout: float | None
    body_timeout: float | None
    idempotent: bool | None
    blocking: bool | None
    reset: bool | None
    expect_continue: bool | None
    servername: str | None
    type_of_service: int | None
    allow_h2: bool | None
    # Read by the built-in interceptors (docs/interceptors.md, docs/dns.md).
    retry_options: dict[str, Any] | None
    dump_max_size: int | None
    max_redirections: int | None
    throw_on_max_redirect: bool | None
    strip_headers_on_redirect: list[str] | tuple[str, ...] | set[str] | frozenset[str] | None
    strip_headers_on_cross_origin_redirect: list[str] | tuple[str, ...] | set[str] | frozenset[str] | None
    dns: dict[str, Any] | None
    # Taken by the blocking helpers themselves, never sent.
    opaque: Any
    signal: AbortSignalLike | EmitterLike | None
    response_headers: Literal["raw"] | None


class UpgradeOptions(_CommonOptions, total=False):
    """The keyword options of ``upgrade()`` and ``connect()`` (dispatcher methods and
    module-level functions), for type checkers and editors.

    Keys: ``headers``, ``body``, ``query``, ``headers_timeout``, ``body_timeout``,
    ``idempotent``, ``blocking``, ``reset``, ``expect_continue``, ``servername``,
    ``type_of_service``, ``allow_h2``; the interceptors' ``retry_options``,
    ``dump_max_size``, ``max_redirections``, ``throw_on_max_redirect``,
    ``strip_headers_on_redirect``, ``strip_headers_on_cross_origin_redirect``,
    ``dns``; and ``opaque``, ``signal``, ``response_headers``. Every key is
    optional and ``None`` means "not given". The types and meanings are those
    of :doc:`request-api`.

    A plain ``dict`` at run time: it never blocks, and a value built from it is
    the caller's own (nothing is shared between greenlets).
    """

    body: BodyInit | None


class PipelineOptions(_CommonOptions, total=False):
    """The keyword options of ``pipeline()`` (dispatcher method and module-level
    function), for type checkers and editors.

    The keys of :class:`UpgradeOptions` except ``body`` (the duplex is the
    body), plus ``on_info`` and ``high_water_mark``. Every key is optional and
    ``None`` means "not given".

    A plain ``dict`` at run time: it never blocks, and a value built from it is
    the caller's own (nothing is shared between greenlets).
    """

    on_info: Callable[[dict[str, Any]], object] | None
    high_water_mark: int | None


class RequestOptions(_CommonOptions, total=False):
    """The keyword options of ``request()`` and ``stream()`` (dispatcher methods and
    module-level functions), for type checkers and editors.

    The keys of :class:`UpgradeOptions` (``body`` included), plus ``on_info``
    (called with ``{"status_code": 103, "headers": {...}}`` for each 1xx
    response) and ``high_water_mark`` (bytes). Every key is optional and
    ``None`` means "not given". With it, ``client.request("/", methd="GET")``
    or ``headers_timeout="5"`` is an error for mypy or pyright, and an editor
    completes ``client.request(`` with every option.

    A plain ``dict`` at run time: it never blocks, and a value built from it is
    the caller's own (nothing is shared between greenlets).
    """

    body: BodyInit | None
    on_info: Callable[[dict[str, Any]], object] | None
    high_water_mark: int | None
