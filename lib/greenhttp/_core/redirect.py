"""The redirect policy, sans-IO: options, which responses are followed, and the next request.

:func:`next_hop` looks at one response and the request that produced it and
returns what to do: deliver the response, fail, or send a new request built
by the rules of RFC 9110 §15.4 as browsers and the original library apply them
(REFERENCE §7.3):

* followed: ``300 301 302 303 307 308`` with one ``Location`` whose target is
  ``http:`` or ``https:``;
* ``301``/``302`` turn a ``POST`` into a ``GET``; ``303`` turns anything but
  ``HEAD`` into a ``GET``; both drop the body and the ``content-*`` headers
  (a ``303`` drops those even for ``HEAD``). ``307``/``308`` keep method and body;
* ``host`` is dropped on every hop, plus the ``strip_headers_on_redirect``
  names; a hop to another origin also drops ``authorization``, ``cookie``,
  ``proxy-authorization`` and the ``strip_headers_on_cross_origin_redirect``
  names;
* a ``Location`` is resolved against the URL of the request (RFC 3986 §5);
  its fragment is not sent; unsafe characters are percent-encoded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from ..errors import InvalidArgumentError, MaxRedirectionsError
from .headers import header_pairs
from .url import parse_origin, path_with_query

__all__ = [
    "REDIRECT_STATUSES",
    "CREDENTIAL_HEADERS",
    "MaxRedirectionsError",
    "RedirectOptions",
    "redirect_options",
    "Hop",
    "next_hop",
    "clean_headers",
    "resolve_location",
    "normalize_origin",
    "request_path",
]

REDIRECT_STATUSES = frozenset({300, 301, 302, 303, 307, 308})
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
# Characters left as they are in a path and query: RFC 3986 reserved and unreserved, and "%".
_SAFE = "!#$%&'()*+,/:;=?@[]~-._"


@dataclass(frozen=True)
class RedirectOptions:
    """Validated redirect options. ``max_redirections`` None or 0: redirects are not followed."""

    max_redirections: int | None = None
    throw_on_max_redirect: bool = False
    strip_headers_on_redirect: frozenset[str] = frozenset()
    strip_headers_on_cross_origin_redirect: frozenset[str] = frozenset()


def _max_redirections(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"max_redirections must be a non-negative integer, got {value!r}")
    return value


def _header_names(name: str, value: Any) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{name} must be a list of header names, got {value!r}")
    items = list(value)
    if not all(isinstance(v, str) for v in items):
        raise InvalidArgumentError(f"{name} must be a list of header names, got {value!r}")
    return frozenset(v.lower() for v in items)


def redirect_options(
    defaults: RedirectOptions | None = None, overrides: dict[str, Any] | None = None
) -> RedirectOptions:
    """Validate ``overrides`` (the four option names) over ``defaults``; raises InvalidArgumentError.

    A key given as None keeps the default.
    """
    base = defaults if defaults is not None else RedirectOptions()
    if not overrides:
        return base
    max_redirections = base.max_redirections
    throw = base.throw_on_max_redirect
    strip = base.strip_headers_on_redirect
    strip_cross = base.strip_headers_on_cross_origin_redirect
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "max_redirections":
            max_redirections = _max_redirections(value)
        elif key == "throw_on_max_redirect":
            if not isinstance(value, bool):
                raise InvalidArgumentError(f"throw_on_max_redirect must be a boolean, got {value!r}")
            throw = value
        elif key == "strip_headers_on_redirect":
            strip = _header_names(key, value)
        elif key == "strip_headers_on_cross_origin_redirect":
            strip_cross = _header_names(key, value)
        else:
            raise InvalidArgumentError(f"unknown redirect option {key!r}")
    return RedirectOptions(max_redirections, throw, strip, strip_cross)


# -- URLs ------------------------------------------------------------------------------------
def normalize_origin(origin: Any) -> str | None:
    """``origin`` (a str or URL-like) serialised as ``scheme://host[:port]``; None if unusable."""
    if origin is None:
        return None
    try:
        return parse_origin(origin if isinstance(origin, str) else str(origin)).origin
    except InvalidArgumentError:
        return None


def request_path(opts: dict[str, Any]) -> str:
    """The path ``opts`` requests, with its ``query`` option serialised as the dispatcher does."""
    return path_with_query(str(opts.get("path") or "/"), opts.get("query"))


def _encode(text: str) -> str:
    try:
        raw = text.encode("latin-1")  # response heads are decoded as latin-1: get the wire bytes back
    except UnicodeEncodeError:
        raw = text.encode("utf-8")
    return quote(raw, safe=_SAFE)


def resolve_location(location: str, origin: str | None, path: str) -> tuple[str | None, str] | None:
    """Resolve ``location`` against the request ``origin`` + ``path``.

    Returns ``(origin, path)`` of the target (``origin`` None when neither
    the request nor the location has one), or None when the target is not
    an ``http:``/``https:`` URL this library may follow.
    """
    location = location.strip()
    if not location:
        return None
    base = origin + path if origin is not None and not path.startswith(("http://", "https://")) else path
    try:
        target = urlsplit(urljoin(base, location))
    except ValueError:
        return None
    new_path = _encode(target.path or "/")
    if not new_path.startswith("/"):
        new_path = "/" + new_path
    if target.query:
        new_path += "?" + _encode(target.query)
    if not target.scheme and not target.netloc:
        return None if origin is not None else (None, new_path)
    if target.scheme not in ("http", "https") or target.username is not None or target.password is not None:
        return None
    new_origin = normalize_origin(f"{target.scheme}://{target.netloc}")
    if new_origin is None:
        return None
    return new_origin, new_path


def clean_headers(
    headers: Any,
    *,
    drop_content: bool,
    cross_origin: bool,
    strip: frozenset[str] = frozenset(),
    strip_cross_origin: frozenset[str] = frozenset(),
) -> list[tuple[str, str]]:
    """The request headers to send on the next hop, as ``(name, value)`` pairs."""
    out = []
    for name, value in header_pairs(headers):
        key = name.lower()
        if key == "host" or key in strip:
            continue
        if drop_content and key.startswith("content-"):
            continue
        if cross_origin and (key in CREDENTIAL_HEADERS or key in strip_cross_origin):
            continue
        out.append((name, value))
    return out


# -- one decision --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hop:
    """The request to send next: ``opts`` for the next dispatch, ``url`` its target."""

    opts: dict[str, Any]
    url: str


def _location(headers: Any) -> str | None:
    value = headers.get("location") if isinstance(headers, dict) else None
    if isinstance(value, list):
        return value[0] if len(value) == 1 else None  # several Locations: none is trusted
    return value if isinstance(value, str) else None


def next_hop(
    status_code: int,
    headers: Any,
    opts: dict[str, Any],
    options: RedirectOptions,
    history: list[str],
    body_replayable: bool,
) -> Hop | BaseException | None:
    """What to do with a final response to ``opts``.

    ``history`` holds the URLs already requested, the current one last.
    Returns None (deliver the response), an error (fail the request with
    it once its body is read), or the :class:`Hop` to follow.
    """
    if status_code not in REDIRECT_STATUSES:
        return None
    location = _location(headers)
    if location is None:
        return None
    hops = len(history) - 1
    if hops >= (options.max_redirections or 0):
        return MaxRedirectionsError() if options.throw_on_max_redirect else None
    origin = normalize_origin(opts.get("origin"))
    target = resolve_location(location, origin, request_path(opts))
    if target is None:
        return None
    new_origin, new_path = target
    url = (new_origin or "") + new_path
    if url in history:
        return InvalidArgumentError(
            f"Redirect loop detected: {url} was already requested ({' -> '.join(history)}). "
            "A Client or Pool sends every request to its own origin: use an Agent for "
            "cross-origin redirects."
        )
    method = str(opts.get("method", "GET"))  # kept as sent: a method is case-sensitive (RFC 9110 §9.1)
    known = method.upper()  # but "post" and "head" are POST and HEAD to the dispatcher
    drop_body = False
    drop_content = status_code == 303
    if status_code in (301, 302) and known == "POST":
        method, drop_body, drop_content = "GET", True, True
    elif status_code == 303 and known != "HEAD":
        method, drop_body = "GET", True
    if not drop_body and opts.get("body") is not None and not body_replayable:
        return None  # a streamed body was sent and can't be sent again: deliver the redirect
    new = dict(opts)
    new["method"] = method
    new["path"] = new_path
    new.pop("query", None)  # the Location carries the query
    if new_origin is not None:
        new["origin"] = new_origin
    if drop_body:
        new.pop("body", None)
    new["headers"] = clean_headers(
        opts.get("headers"),
        drop_content=drop_content,
        cross_origin=origin != new_origin,
        strip=options.strip_headers_on_redirect,
        strip_cross_origin=options.strip_headers_on_cross_origin_redirect,
    )
    return Hop(new, url)
