"""Cookie helpers: read and write ``Cookie`` and ``Set-Cookie`` on :class:`Headers`.

They follow the RFC 6265bis parsing algorithm and the RFC 6265 serialisation
grammar, keep no cookie jar and never touch the network. Every function here
is pure computation: it does not block and is greenlet-safe as long as the
``Headers`` it is given is not mutated by another greenlet at the same time
(``Headers`` holds no lock).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol, Union

from ._core.cookie_parse import parse_cookie_header, parse_set_cookie, serialize_set_cookie
from ._core.fetch_headers import Headers

__all__ = [
    "Cookie",
    "get_cookies",
    "set_cookie",
    "delete_cookie",
    "get_set_cookies",
    "parse_cookie",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass
class Cookie:
    """One cookie: what :func:`parse_cookie` returns and :func:`set_cookie` takes.

    ``expires`` is a :class:`~datetime.datetime` (a naive one is taken as UTC)
    or a Unix timestamp in **seconds**; parsed cookies carry an aware UTC
    datetime. ``max_age`` is in seconds. ``same_site`` is ``"Strict"``,
    ``"Lax"`` or ``"None"``. ``unparsed`` lists attributes the parser did not
    recognise, each as ``"name=value"``. A field left at None is absent.

    A plain data class: creating or reading one does not block; it holds no
    lock, so do not mutate one that another greenlet is using.
    """

    name: str
    value: str
    expires: datetime | int | float | None = None
    max_age: int | None = None
    domain: str | None = None
    path: str | None = None
    secure: bool | None = None
    http_only: bool | None = None
    same_site: str | None = None
    unparsed: list[str] | None = None


class _Appendable(Protocol):
    def append(self, name: str, value: str) -> Any: ...


HeadersLike = Union[Headers, Mapping[str, Any]]


def _readable(headers: object, func: str) -> Headers:
    if isinstance(headers, Headers):
        return headers
    if isinstance(headers, Mapping):
        # e.g. a response's dict of lower-case names to str or list of str.
        return Headers(headers)
    raise TypeError(
        f"{func}() expects a greenhttp.Headers or a mapping of header names to values, "
        f"got {type(headers).__name__}"
    )


def _writable(headers: object, func: str) -> _Appendable:
    if isinstance(headers, Headers) or callable(getattr(headers, "append", None)):
        return headers  # type: ignore[return-value]
    raise TypeError(
        f"{func}() expects a greenhttp.Headers (or an object with append(name, value)), "
        f"got {type(headers).__name__}"
    )


def get_cookies(headers: HeadersLike) -> dict[str, str]:
    """Parse the ``Cookie`` header of ``headers`` into ``{name: value}``.

    Values are returned exactly as written (not trimmed, unquoted or decoded);
    a pair without ``=`` maps to ``""``; a later duplicate wins; several
    ``Cookie`` fields are read as one list (as if joined by ``"; "``). Returns
    ``{}`` when there is no ``Cookie`` header. ``headers`` may also be a plain
    mapping. Does not block; greenlet-safe.
    """
    source = _readable(headers, "get_cookies")
    out: dict[str, str] = {}
    for field_value in source._values_of("cookie"):
        out.update(parse_cookie_header(field_value))
    return out


def get_set_cookies(headers: HeadersLike) -> list[Cookie | None]:
    """Parse every ``Set-Cookie`` header of ``headers``, in order.

    An entry that cannot be parsed is None at its position; no header gives
    ``[]``. Never raises for a :class:`Headers`; ``headers`` may also be a plain
    mapping (a ``set-cookie`` value may then be a list). Does not block;
    greenlet-safe.
    """
    source = _readable(headers, "get_set_cookies")
    return [parse_cookie(value) for value in source.get_set_cookie()]


def parse_cookie(value: str | bytes) -> Cookie | None:
    """Parse one ``Set-Cookie`` value into a :class:`Cookie`, or return None.

    None when the text holds a control character other than TAB, when name
    and value are both empty, or when name and value exceed 4096 octets (UTF-8
    for text with characters above U+00FF).
    The value is returned exactly as written (no percent-decoding). Unknown
    attributes go to ``unparsed``; an unparsable ``Expires``, ``Max-Age`` or
    ``SameSite`` is ignored. ``bytes`` are decoded as Latin-1. Never raises for
    ``str`` or ``bytes``. Does not block; greenlet-safe.
    """
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("latin-1")
    elif not isinstance(value, str):
        raise TypeError(f"parse_cookie() expects a str, got {type(value).__name__}")
    fields = parse_set_cookie(value)
    if fields is None:
        return None
    return Cookie(**fields)


def set_cookie(headers: Headers, cookie: Cookie) -> None:
    """Serialise ``cookie`` and append it to ``headers`` as a ``Set-Cookie`` field.

    Nothing is appended when ``cookie.name`` is empty. Raises
    :class:`~greenhttp.errors.InvalidArgumentError` naming the field and the
    bad value when the name is not a token, the value has characters outside
    cookie-octet, the path has control characters or ``;``, the domain is not
    a valid host name, ``max_age`` is negative, ``same_site`` is not one of
    Strict/Lax/None (any case) or an ``unparsed`` item is not ``name=value``.
    ``__Secure-``/``__Host-`` prefixes add the attributes they require; the
    ``cookie`` object itself is not modified. Does not block; not locked: do
    not call it on a ``Headers`` another greenlet is using.
    """
    target = _writable(headers, "set_cookie")
    if not isinstance(cookie, Cookie):
        raise TypeError(f"set_cookie() expects a greenhttp.Cookie, got {type(cookie).__name__}")
    line = serialize_set_cookie(
        cookie.name,
        cookie.value,
        expires=cookie.expires,
        max_age=cookie.max_age,
        domain=cookie.domain,
        path=cookie.path,
        secure=cookie.secure,
        http_only=cookie.http_only,
        same_site=cookie.same_site,
        unparsed=cookie.unparsed,
    )
    if line is not None:
        target.append("set-cookie", line)


def delete_cookie(
    headers: Headers, name: str, path: str | None = None, domain: str | None = None
) -> None:
    """Append a ``Set-Cookie`` that expires cookie ``name`` at once.

    The header has an empty value and ``Expires`` at the Unix epoch:
    ``name=; Expires=Thu, 01 Jan 1970 00:00:00 GMT``, plus ``Domain`` and
    ``Path`` when given (they must match the cookie being removed). Validation
    and errors as in :func:`set_cookie`. Does not block; not locked.
    """
    set_cookie(headers, Cookie(name=name, value="", expires=_EPOCH, path=path, domain=domain))
