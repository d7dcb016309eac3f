"""Origin parsing: ``http://host:port`` into its parts (sans-IO)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

from ..errors import InvalidArgumentError

__all__ = ["Origin", "parse_origin", "url_of_object", "is_ip_literal", "encode_query", "path_with_query"]

_DEFAULT_PORTS = {"http:": 80, "https:": 443}
# The WHATWG URL parser drops these at both ends; urlsplit() only at the start.
C0_CONTROL_OR_SPACE = "".join(map(chr, range(0x21)))


@dataclass(frozen=True)
class Origin:
    """An HTTP origin. ``origin`` is its serialisation (``http://h:8080``)."""

    protocol: str  # "http:" or "https:"
    hostname: str  # without brackets for IPv6
    port: int
    host: str  # Host header value: hostname, bracketed for IPv6, with a non-default port
    origin: str

    @property
    def is_https(self) -> bool:
        return self.protocol == "https:"


_QUERY_WORDS: Final[dict[Any, str]] = {None: "", True: "true", False: "false"}


def _query_value(value: Any) -> Any:
    """One ``query`` value as the original's ``querystring`` writes it: booleans as
    ``true``/``false``, None (its null and undefined) and a NaN or infinity as an
    empty value, a whole float without its ``.0``."""
    if value is None or value is True or value is False:
        return _QUERY_WORDS[value]
    if type(value) is float:
        if not math.isfinite(value):
            return ""
        if value.is_integer() and abs(value) < 1e21:
            return int(value)
    return value


def encode_query(query: dict[str, Any]) -> str:
    """A ``query`` option serialised for the request target (without the ``?``).

    As the original's ``querystring``: spaces become ``%20``, ``!~*'()`` stay as
    they are, a list or tuple value repeats its key, and values are written as
    :func:`_query_value` says.
    """
    pairs: list[tuple[Any, Any]] = []
    for key, value in query.items():
        if isinstance(value, (list, tuple)):
            pairs.extend((key, _query_value(v)) for v in value)
        else:
            pairs.append((key, _query_value(value)))
    return urlencode(pairs, quote_via=quote, safe="!~*'()")


def path_with_query(path: str, query: Any) -> str:
    """``path`` with a ``query`` option added as the dispatcher adds it (a dict, to a
    path without ``?`` or ``#``); ``path`` itself when there is none to add."""
    if query and isinstance(query, dict) and "?" not in path and "#" not in path:
        return path + "?" + encode_query(query)
    return path


def is_ip_literal(hostname: str) -> bool:
    """True for an IPv4 or IPv6 address (no SNI is sent to those)."""
    import ipaddress

    try:
        ipaddress.ip_address(hostname)
    except ValueError:
        return False
    return True


_URL_OBJECT_KEYS: Final = frozenset({"origin", "protocol", "hostname", "port", "path", "pathname", "search"})


def url_of_object(url: dict[str, Any], name: str = "url") -> str:
    """The URL a dict of the original's ``UrlObject`` shape names (``origin``, or
    ``protocol``/``hostname``/``port``; ``path``, or ``pathname``/``search``),
    built as the original's ``parseURL`` builds it. Raises InvalidArgumentError."""
    unknown = set(url) - _URL_OBJECT_KEYS
    if unknown:
        raise InvalidArgumentError(f"invalid {name}: unknown key {sorted(unknown, key=str)[0]!r}")
    for key in ("origin", "protocol", "hostname", "path", "pathname", "search"):
        if url.get(key) is not None and not isinstance(url[key], str):
            raise InvalidArgumentError(f"invalid {name}: {key} must be a string, got {url[key]!r}")
    scheme = url.get("origin") or url.get("protocol") or ""
    if not scheme.startswith(("http:", "https:")):
        raise InvalidArgumentError(f"invalid {name}: {url!r} (the protocol must be http: or https:)")
    origin = url.get("origin")
    if origin is None:
        port = url.get("port")
        if port is None or port == "":
            port = 443 if url.get("protocol") == "https:" else 80
        origin = f"{url.get('protocol') or ''}//{url.get('hostname') or ''}:{port}"
    path = url.get("path")
    if path is None:
        path = (url.get("pathname") or "") + (url.get("search") or "")
    origin = origin.removesuffix("/")
    if path and not path.startswith("/"):
        path = "/" + path
    return origin + path


def parse_origin(url: object, name: str = "url") -> Origin:
    """Parse ``url`` (a str or anything whose ``str()`` is a URL) into an :class:`Origin`.

    Only the scheme, host and port are used; a path other than ``/``, a query
    or a fragment is refused, like the original's ``parseOrigin``.
    """
    if isinstance(url, dict):
        url = url_of_object(url, name)
    if not isinstance(url, str):
        if url is None or not hasattr(url, "geturl") and not hasattr(url, "scheme"):
            raise InvalidArgumentError(f"{name} must be a string, URL or dict, got {url!r}")
        url = str(url.geturl() if hasattr(url, "geturl") else url)
    try:
        parts = urlsplit(url.rstrip(C0_CONTROL_OR_SPACE))
        port = parts.port
    except ValueError as exc:
        raise InvalidArgumentError(f"invalid {name}: {url!r} ({exc})") from exc
    protocol = parts.scheme.lower() + ":"
    if protocol not in _DEFAULT_PORTS:
        raise InvalidArgumentError(
            f"invalid {name}: {url!r} (the protocol must be http: or https:)"
        )
    hostname = parts.hostname
    if not hostname:
        raise InvalidArgumentError(f"invalid {name}: {url!r} (no host)")
    if not hostname.isascii():
        try:  # the URL parser's domain-to-ASCII step: "café" is "xn--caf-dma", as in the original
            hostname = hostname.encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise InvalidArgumentError(f"invalid {name}: {url!r} (not a valid domain name)") from None
    if any(ord(ch) <= 0x20 or ord(ch) == 0x7F or ch in "%<>\\^`{|}" for ch in hostname):
        raise InvalidArgumentError(f"invalid {name}: {url!r} (the host has forbidden characters)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise InvalidArgumentError(f"invalid {name}: {url!r} (an origin has no path, query or fragment)")
    if parts.username is not None or parts.password is not None:
        raise InvalidArgumentError(f"invalid {name}: {url!r} (credentials are not allowed)")
    default = _DEFAULT_PORTS[protocol]
    if port is None:
        port = default
    bracketed = f"[{hostname}]" if ":" in hostname else hostname
    host = bracketed if port == default else f"{bracketed}:{port}"
    return Origin(protocol, hostname, port, host, f"{protocol}//{host}")
