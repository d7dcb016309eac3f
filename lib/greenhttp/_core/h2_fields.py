"""HPACK and header fields for the HTTP/2 session (:mod:`greenhttp._core.h2`).

Request side: :func:`_request_field` turns a user's field into what HTTP/2
sends (lower-case name, trimmed value, credentials never indexed) and
:func:`_encode_field` encodes one field without the dynamic table, as the
fast path does (see :mod:`greenhttp._core.h2_fast`).

Response side: :func:`response_head` checks a received header block as
RFC 9113 §8.2 says and turns it into the library's header dict;
:func:`_stateless` tells whether a block's bytes alone decide its decoding,
so a decoded :class:`_Block` (with its :func:`response_head` answer) may be
cached by those bytes.
"""

from __future__ import annotations

import re
from typing import Any

from h2.exceptions import ProtocolError
from hpack import NeverIndexedHeaderTuple
from hpack.table import HeaderTable

from ..errors import InformationalError

# RFC 9113 §8.2.2: connection-specific fields are malformed in HTTP/2.
# (connection, keep-alive, transfer-encoding and upgrade never get this far:
# the request refuses or consumes them.) "te" may only say "trailers".
_CONNECTION_SPECIFIC = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "http2-settings"}
)
# RFC 7541 §7.1.3: never put credentials into the shared compression table.
_SENSITIVE = frozenset({"authorization", "proxy-authorization"})

_METHODS = {m: (b":method", m.encode()) for m in ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")}
_COLON_JOIN = b": ".join
# RFC 9113 §8.2.1: lower-case token names; values without NUL, CR, LF or surrounding blanks.
_NAME_RE = re.compile(rb"[!#$%&'*+.^_`|~0-9a-z-]+\Z")
_VALUE_RE = re.compile(rb"(?:[^\x00\r\n\t ](?:[^\x00\r\n]*[^\x00\r\n\t ])?)?\Z")

_STATIC_FIELDS: dict[tuple[bytes, bytes], int] = {}
_STATIC_NAMES: dict[bytes, int] = {}
for _i, (_n, _v) in enumerate(HeaderTable.STATIC_TABLE, 1):
    _STATIC_FIELDS.setdefault((_n, _v), _i)
    _STATIC_NAMES.setdefault(_n, _i)
_STATIC_LEN = len(HeaderTable.STATIC_TABLE)


def _hpack_int(value: int, bits: int, first: int) -> bytes:
    """RFC 7541 §5.1: ``value`` with a ``bits``-bit prefix, ``first`` holding the bits above it."""
    limit = (1 << bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _encode_field(name: bytes, value: bytes, never: bool) -> bytes:
    """One request field, touching no dynamic table (RFC 7541 §6.1, §6.2.2, §6.2.3)."""
    if not never:
        index = _STATIC_FIELDS.get((name, value))
        if index:
            return bytes((0x80 | index,))
    index = _STATIC_NAMES.get(name, 0)
    out = _hpack_int(index, 4, 0x10 if never else 0x00)
    if not index:
        out += _hpack_int(len(name), 7, 0) + name
    return out + _hpack_int(len(value), 7, 0) + value


def _read_int(data: bytes, pos: int, bits: int) -> tuple[int, int]:
    limit = (1 << bits) - 1
    value = data[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        byte = data[pos]  # IndexError on a truncated block: not cacheable
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _stateless(data: bytes) -> int:
    """Whether a header block decodes the same whatever the decoder's dynamic table holds,
    and leaves it as it was: 0 no, 1 yes, 2 only while the table's size is 0 (its
    insertions are dropped at once, and a size update to 0 changes nothing)."""
    pos = 0
    end = len(data)
    zero = False
    try:
        while pos < end:
            byte = data[pos]
            if byte & 0x80:  # indexed field
                index, pos = _read_int(data, pos, 7)
                if not 0 < index <= _STATIC_LEN:
                    return 0
                continue
            if byte & 0x40:  # literal with incremental indexing
                zero = True
                index, pos = _read_int(data, pos, 6)
            elif byte & 0x20:  # dynamic table size update
                size, pos = _read_int(data, pos, 5)
                if size:
                    return 0
                zero = True
                continue
            else:  # literal without indexing, or never indexed
                index, pos = _read_int(data, pos, 4)
            if index > _STATIC_LEN:
                return 0
            for _ in range(1 if index else 2):  # the name when literal, then the value
                length, pos = _read_int(data, pos, 7)
                pos += length
        if pos != end:
            return 0
    except IndexError:
        return 0
    return 2 if zero else 1


class _Block:
    """A received header block, decoded (and, for a response head, checked) once."""

    __slots__ = (
        "headers", "size", "zero", "analysed", "informational", "length", "bad_length", "head", "lists", "error"
    )

    def __init__(self, headers: list[Any]) -> None:
        self.headers = headers
        self.size = 0  # RFC 7541 §4.1 size of the list (max_header_list_size)
        self.zero = False  # valid only while the decoder's table size is 0
        self.analysed = False
        self.informational = False  # a 1xx head
        self.length: int | None = None  # its content-length
        self.bad_length: str | None = None  # why h2 would refuse its content-length
        self.head: tuple[int, dict[str, Any], bytes] | None = None  # response_head()'s answer
        self.lists = False  # the head's dict holds lists: copy them too
        self.error = ""  # why response_head() refused it

    def analyse(self, cache: dict[tuple[bytes, bytes], tuple[str, str]]) -> None:
        """What a response head needs, as h2 and :func:`response_head` work it out."""
        self.analysed = True
        headers = self.headers
        self.informational = _informational(headers)
        try:
            self.length = _content_length(headers)
        except ProtocolError as exc:
            self.bad_length = str(exc)
        try:
            head = self.head = response_head(headers, False, cache)
        except MalformedError as exc:
            self.error = str(exc)
            return
        self.lists = any(type(v) is list for v in head[1].values())


def _informational(headers: list[Any]) -> bool:
    """h2's test: the ``:status`` among the leading pseudo-headers starts with 1."""
    for name, value in headers:
        if name[:1] != b":":
            return False
        if name == b":status":
            return bool(value[:1] == b"1")
    return False


def _content_length(headers: list[Any]) -> int | None:
    """The content-length h2 would hold the body to (ProtocolError if invalid or conflicting)."""
    length = None
    for name, value in headers:
        if name == b"content-length":
            if not value.isdigit():
                raise ProtocolError(f"Invalid content-length header: {value!r}")
            n = int(value, 10)
            if length is None:
                length = n
            elif n != length:
                raise ProtocolError(f"Conflicting content-length headers: {length} and {n}")
    return length

def _append_fields(block: list[Any], headers: list[tuple[str, str]]) -> None:
    for name, value in headers:
        block.append(_request_field(name, value))


def _request_field(name: str, value: str) -> tuple[bytes, bytes]:
    """A request field as HTTP/2 sends it: lower-case name, trimmed value; credentials
    (and short cookies) never indexed. InformationalError for a connection-specific one."""
    key = name.lower()
    if key in _CONNECTION_SPECIFIC or (key == "te" and value.strip(" \t").lower() != "trailers"):
        raise InformationalError(f'HTTP/1 connection-specific headers are forbidden over HTTP/2: "{key}"')
    value = value.strip(" \t")
    if key in _SENSITIVE or (key == "cookie" and len(value) < 20):
        return NeverIndexedHeaderTuple(key.encode("latin-1"), value.encode("latin-1"))
    return (key.encode("latin-1"), value.encode("latin-1"))


class MalformedError(ValueError):
    """A response or trailer block RFC 9113 §8.2 calls malformed (a stream error)."""


_FIELD_CACHE_SIZE = 512


def response_head(
    block: list[tuple[bytes, bytes]],
    trailers: bool = False,
    cache: dict[tuple[bytes, bytes], tuple[str, str]] | None = None,
) -> tuple[int, dict[str, Any], bytes]:
    """``(status, headers, raw)`` of a response header block, checked as RFC 9113 §8.2 says.

    ``headers`` is the library's shape: lower-case ``str`` names, a repeated
    name becomes a list, ``set-cookie`` is always a list. ``raw`` is the
    block as ``name: value`` lines (the first one ``:status``), which the
    controller's ``raw_headers`` reads. Raises :class:`MalformedError`:
    h2's own inbound checks are off (they would fail the whole connection
    for one bad stream), and one pass here is cheaper than h2's chain.
    ``cache`` maps fields already checked to their decoded pair: a server
    repeats most of its fields (server, content-type, ...) on every response.
    """
    headers: dict[str, Any] = {}
    status = 0
    if cache is None:
        cache = {}
    for field in block:
        name, value = field
        if name[:1] == b":":
            if name != b":status" or status or headers or trailers:
                raise MalformedError(f"unexpected pseudo-header {name!r}")
            if len(value) != 3 or not value.isdigit():
                raise MalformedError(f"invalid :status {value!r}")
            status = int(value)
            continue
        pair = cache.get(field)
        if pair is None:
            pair = _check_field(name, value)
            if len(cache) >= _FIELD_CACHE_SIZE:
                cache.clear()
            cache[(name, value)] = pair
        key, text = pair
        old = headers.get(key)
        if old is None:
            headers[key] = [text] if key == "set-cookie" else text
        elif type(old) is list:
            old.append(text)
        else:
            headers[key] = [old, text]
    if not status and not trailers:
        raise MalformedError("no :status")
    return status, headers, b"\r\n".join(map(_COLON_JOIN, block))


def _check_field(name: bytes, value: bytes) -> tuple[str, str]:
    if not _NAME_RE.match(name):
        raise MalformedError(f"invalid field name {name!r}")
    if not _VALUE_RE.match(value):
        raise MalformedError(f"invalid value of the {name!r} field")
    key = name.decode("latin-1")
    if key in _CONNECTION_SPECIFIC or (key == "te" and value != b"trailers"):
        raise MalformedError(f"connection-specific field {key!r}")
    return key, value.decode("latin-1")
