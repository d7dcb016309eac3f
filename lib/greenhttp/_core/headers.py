"""Request header validation and normalisation (sans-IO).

Accepts every header shape of API.md — a dict, a list of ``(name, value)``
pairs, the spec's flat ``[name, value, name, value]`` list, or anything with
``items()`` (such as :class:`Headers`) — and returns a list of
``(name, value)`` pairs in original case, validated for HTTP token names and
CR/LF/NUL-free values.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import InvalidArgumentError

__all__ = ["header_pairs", "headers_by_name", "check_header_value", "TOKEN_RE", "raw_header_list"]

TOKEN_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
# RFC 9110 §5.5 field-value: HTAB, SP, VCHAR, obs-text. Never CR, LF or NUL.
_VALUE_RE = re.compile(r"[\t\x20-\x7e\x80-\xff]*\Z")


def check_header_value(name: str, value: str) -> str:
    if not _VALUE_RE.match(value):
        raise InvalidArgumentError(f"invalid {name} header: {value!r}")
    return value


def _value_str(name: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"  # as the original writes them (`${val}`)
    if isinstance(value, (int, float)):
        return str(value)
    raise InvalidArgumentError(f"invalid {name} header: {value!r}")


def _append(out: list[tuple[str, str]], name: Any, value: Any) -> None:
    if isinstance(name, bytes):
        name = name.decode("latin-1")
    if not isinstance(name, str) or not TOKEN_RE.match(name):
        raise InvalidArgumentError(f"invalid header key: {name!r}")
    if isinstance(value, (list, tuple)):
        if name.lower() == "host":
            # One request has one host (the original refuses any but a string).
            raise InvalidArgumentError(f"invalid host header: {value!r}")
        for v in value:
            out.append((name, check_header_value(name, _value_str(name, v))))
        return
    out.append((name, check_header_value(name, _value_str(name, value))))


def header_pairs(headers: Any) -> list[tuple[str, str]]:
    """Validate ``headers`` into ``(name, value)`` pairs; raises InvalidArgumentError."""
    out: list[tuple[str, str]] = []
    if headers is None:
        return out
    if isinstance(headers, dict):
        for name, value in headers.items():
            _append(out, name, value)
        return out
    if hasattr(headers, "items") and callable(headers.items):
        for name, value in headers.items():
            _append(out, name, value)
        return out
    if isinstance(headers, (list, tuple)):
        if not headers:
            return out
        if isinstance(headers[0], (str, bytes)):
            if len(headers) % 2:
                raise InvalidArgumentError("headers array must be even")
            for i in range(0, len(headers), 2):
                _append(out, headers[i], headers[i + 1])
            return out
        for entry in headers:
            if not isinstance(entry, (list, tuple)) or len(entry) != 2:
                raise InvalidArgumentError("headers must be in key-value pair format")
            _append(out, entry[0], entry[1])
        return out
    raise InvalidArgumentError(f"headers must be a dict or a list, got {type(headers).__name__}")


def headers_by_name(pairs: list[tuple[str, str]], lower: bool = False) -> dict[str, Any]:
    """``(name, value)`` pairs as a dict by name (lower-cased with ``lower``); the
    values of a repeated name in a list, in order."""
    out: dict[str, Any] = {}
    for name, value in pairs:
        key = name.lower() if lower else name
        had = out.get(key)
        if had is None:
            out[key] = value
        elif isinstance(had, list):
            had.append(value)
        else:
            out[key] = [had, value]
    return out


def raw_header_list(raw_head: bytes) -> list[bytes]:
    """The flat ``[name, value, ...]`` list of a validated response head, as bytes."""
    out: list[bytes] = []
    for line in raw_head.split(b"\r\n")[1:]:
        if not line:
            continue
        name, _, value = line.partition(b":")
        out.append(name)
        out.append(value.strip(b" \t"))
    return out
