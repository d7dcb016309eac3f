"""The WHATWG Fetch ``Headers`` class, the container the cookie helpers act on.

Semantics follow the Fetch Standard (https://fetch.spec.whatwg.org/#headers-class)
without guards (no "forbidden" header names): names are case-insensitive HTTP
tokens, values are normalised by stripping leading and trailing HTTP
whitespace and must then be free of NUL, CR and LF, and iteration yields the
"sort and combine" view: lower-case names in ascending order, the values of a
repeated name joined by ``", "``, except ``set-cookie`` whose values come out
one pair each.

Sans-IO: no gevent, no sockets, no clock. Nothing here blocks. A ``Headers``
instance holds no lock; several greenlets may read one, but one that is being
mutated must not be shared across greenlets without coordination.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Union

__all__ = ["Headers", "HeadersInit", "is_token"]

# RFC 9110 section 5.6.2: tchar.
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
# Fetch: HTTP whitespace is TAB, LF, CR and SPACE.
_HTTP_WHITESPACE = "\t\n\r "
_SET_COOKIE = "set-cookie"

HeaderText = Union[str, bytes, bytearray]
HeadersInit = Union[
    "Headers",
    Mapping[HeaderText, Union[HeaderText, Iterable[HeaderText]]],
    Iterable[tuple[HeaderText, HeaderText]],
    None,
]


def is_token(text: str) -> bool:
    """Return True if ``text`` is a non-empty RFC 9110 token. Pure; does not block."""
    return bool(text) and all(ch in _TCHAR for ch in text)


def _to_text(item: object, what: str) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, (bytes, bytearray)):
        return bytes(item).decode("latin-1")
    raise TypeError(f"header {what} must be str or bytes, got {type(item).__name__}")


def _check_name(name: object) -> str:
    """Validate a header name and return it lower-cased, or raise TypeError."""
    text = _to_text(name, "name")
    if not is_token(text):
        raise TypeError(f"invalid header name: {text!r}")
    return text.lower()


def _normalize_value(name: str, value: object) -> str:
    """Strip HTTP whitespace and validate a header value, or raise TypeError."""
    text = _to_text(value, "value").strip(_HTTP_WHITESPACE)
    if "\x00" in text or "\r" in text or "\n" in text:
        raise TypeError(f"invalid header value for {name!r}: {text!r}")
    try:
        # A Fetch header value is a ByteString: every code point must fit in a byte.
        text.encode("latin-1")
    except UnicodeEncodeError:
        raise TypeError(
            f"invalid header value for {name!r}: {text!r} (characters above U+00FF)"
        ) from None
    return text


class Headers:
    """A case-insensitive multi-map of HTTP header fields (WHATWG ``Headers``).

    ``Headers(init)`` accepts ``None``, a mapping whose values are a ``str``
    or a list of ``str``, an iterable of ``(name, value)`` pairs, or another
    ``Headers`` (copied). ``bytes`` are accepted wherever ``str`` is and are
    decoded as Latin-1. An invalid name or value raises ``TypeError``.

    Iterating yields ``(name, value)`` pairs with lower-case names in sorted
    order; the values of a repeated name are joined by ``", "`` except for
    ``set-cookie``, whose values are yielded one by one. ``len()`` counts those
    pairs and ``headers[name]`` is :meth:`get` raising KeyError when absent.
    The iteration works on a snapshot, so mutating while iterating is safe.

    No method blocks. Instances are not locked: reading one from several
    greenlets is fine, mutating one that other greenlets use needs care.
    """

    __slots__ = ("_fields",)
    __hash__ = None  # type: ignore[assignment]  # mutable

    def __init__(self, init: HeadersInit = None) -> None:
        # lower-case name -> values in the order they were added.
        self._fields: dict[str, list[str]] = {}
        if init is None:
            return
        if isinstance(init, Headers):
            self._fields = {name: list(values) for name, values in init._fields.items()}
            return
        if isinstance(init, (str, bytes, bytearray)):
            raise TypeError("Headers init must be a mapping or an iterable of (name, value) pairs")
        if isinstance(init, Mapping):
            for name, value in init.items():
                if isinstance(value, (str, bytes, bytearray)):
                    self._add(name, value)
                elif isinstance(value, Iterable):
                    for one in value:
                        self._add(name, one)
                else:
                    self._add(name, value)  # raises the TypeError naming the type
            return
        if not isinstance(init, Iterable):
            raise TypeError(
                f"Headers init must be a mapping or an iterable of (name, value) pairs, "
                f"got {type(init).__name__}"
            )
        for pair in init:
            if isinstance(pair, (str, bytes, bytearray)) or not isinstance(pair, Iterable):
                raise TypeError(f"headers must be in (name, value) pair format, got {pair!r}")
            items = tuple(pair)
            if len(items) != 2:
                raise TypeError(f"headers must be in (name, value) pair format, got {pair!r}")
            self._add(items[0], items[1])

    # -- WHATWG methods -------------------------------------------------

    def append(self, name: HeaderText, value: HeaderText) -> None:
        """Add ``value`` to the values of ``name``. Does not block; not locked."""
        self._add(name, value)

    def _add(self, name: object, value: object) -> None:
        key = _check_name(name)
        text = _normalize_value(key, value)
        self._fields.setdefault(key, []).append(text)

    def set(self, name: HeaderText, value: HeaderText) -> None:
        """Replace every value of ``name`` by ``value``. Does not block; not locked."""
        key = _check_name(name)
        text = _normalize_value(key, value)
        self._fields[key] = [text]

    def get(self, name: HeaderText) -> str | None:
        """The values of ``name`` joined by ``", "``, or None when absent.

        Does not block; safe to call from any greenlet.
        """
        values = self._fields.get(_check_name(name))
        if values is None:
            return None
        return ", ".join(values)

    def get_set_cookie(self) -> list[str]:
        """Every ``Set-Cookie`` value, separately, in the order added (a new list).

        Does not block; safe to call from any greenlet.
        """
        return list(self._fields.get(_SET_COOKIE, ()))

    def has(self, name: HeaderText) -> bool:
        """True if ``name`` is present. Does not block; safe from any greenlet."""
        return _check_name(name) in self._fields

    def delete(self, name: HeaderText) -> None:
        """Remove every value of ``name`` (nothing if absent). Does not block; not locked."""
        self._fields.pop(_check_name(name), None)

    # -- Python protocol --------------------------------------------------

    def _pairs(self) -> list[tuple[str, str]]:
        """The Fetch "sort and combine" view of the header list."""
        out: list[tuple[str, str]] = []
        for name in sorted(self._fields):
            values = self._fields[name]
            if name == _SET_COOKIE:
                out.extend((name, value) for value in values)
            else:
                out.append((name, ", ".join(values)))
        return out

    def _values_of(self, name: str) -> list[str]:
        """The separate values of an already lower-cased, valid ``name`` (a new list)."""
        return list(self._fields.get(name, ()))

    def __iter__(self) -> Iterator[tuple[str, str]]:
        """Iterate over ``(name, value)`` pairs, sorted and combined (a snapshot)."""
        return iter(self._pairs())

    def keys(self) -> list[str]:
        """The names of the iteration pairs (``set-cookie`` once per value). A snapshot."""
        return [name for name, _ in self._pairs()]

    def values(self) -> list[str]:
        """The values of the iteration pairs. A snapshot."""
        return [value for _, value in self._pairs()]

    def items(self) -> list[tuple[str, str]]:
        """The iteration pairs as a list. A snapshot."""
        return self._pairs()

    def __getitem__(self, name: HeaderText) -> str:
        """``headers[name]``: like :meth:`get`, but KeyError when absent.

        Together with :meth:`keys` this makes ``dict(headers)`` work; a repeated
        ``set-cookie`` then appears once, combined like :meth:`get` does.
        """
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: object) -> bool:
        """``name in headers``: like :meth:`has`, but False (not TypeError) for a bad name."""
        if not isinstance(name, (str, bytes, bytearray)):
            return False
        text = _to_text(name, "name")
        return is_token(text) and text.lower() in self._fields

    def __len__(self) -> int:
        """The number of pairs iteration yields."""
        count = 0
        for name, values in self._fields.items():
            count += len(values) if name == _SET_COOKIE else 1
        return count

    def __eq__(self, other: object) -> bool:
        """Equal when both hold the same values for the same names, in the same order per name."""
        if not isinstance(other, Headers):
            return NotImplemented
        return self._fields == other._fields

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._pairs()!r})"
