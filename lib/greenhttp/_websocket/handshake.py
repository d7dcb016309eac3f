"""The opening handshake and what it negotiates, applied to received frames.

RFC 6455 §4.1 and the WHATWG WebSocket standard ("establish a WebSocket
connection"). The request is dispatched as an upgrade to ``websocket``, so
it takes the dispatcher's connector, TLS settings and interceptors. On an
HTTP/1.1 connection that is a ``GET`` with ``Upgrade: websocket``, answered
by ``101``; on an HTTP/2 connection the driver sends it as an extended
CONNECT with ``:protocol websocket`` (RFC 8441 §4), answered by a ``2xx``,
and the stream then carries the frames. An HTTP/2 server that did not
announce SETTINGS_ENABLE_CONNECT_PROTOCOL makes :func:`perform` ask again
with ``allow_h2=False``, as the original library does: an ``Agent`` routes
that to an HTTP/1.1-only connection. Everything else here is pure: it
decides from strings and headers.

permessage-deflate (RFC 7692) is offered on every handshake. greenhttp only
*inflates*: it never compresses what it sends (RFC 7692 §6 lets a sender
leave any message uncompressed), so the ``client_*`` parameters of the
server's answer are checked but have nothing to steer.
:class:`InboundPolicy` is the receive side of that negotiation, together
with the dispatcher's ``web_socket`` limits (:func:`limits_of`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import warnings
import zlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlsplit

from wsproto.extensions import Extension
from wsproto.frame_protocol import CloseReason, Opcode, RsvBits

from .._api.upgrade import SocketWaiter, wait_for_socket
from .._core.headers import header_pairs, headers_by_name
from .._core.options import web_socket_options_of
from ..errors import DOMException, ExperimentalWarning, InformationalError

__all__ = [
    "Target",
    "Negotiated",
    "HandshakeError",
    "parse_url",
    "parse_protocols",
    "request_headers",
    "check_response",
    "check_h2_response",
    "perform",
    "InboundPolicy",
    "limits_of",
]

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_DEFAULT_PORTS = {"ws": 80, "wss": 443}
# RFC 9110 token characters (RFC 6455 §4.1: a subprotocol is a token).
_TOKEN_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
# What the WHATWG URL parser leaves alone in a path and a query.
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?[]{}|\\^`"
# What the WHATWG URL parser leaves alone in a user name and a password (the
# userinfo percent-encode set takes the rest; an escape already there stays).
_USERINFO_SAFE = "!$%&'()*+,-._~"
# WHATWG URL: forbidden domain code points (those urlsplit lets through).
_FORBIDDEN_HOST = frozenset(" \t\n\r#/<>?@\\^|%\x00\x7f")
_NO_RSV = RsvBits(False, False, False)
_RSV1 = RsvBits(True, False, False)
_SYNC_TAIL = b"\x00\x00\xff\xff"  # RFC 7692 §7.2.2
_OFFER = "permessage-deflate; client_max_window_bits"
# The close reasons of the limits, the original's texts (receiver.js; its
# MessageSizeExceededError's message for an inflated message).
_TOO_MANY_FRAGMENTS = "Too many message fragments"
_PAYLOAD_TOO_BIG = "Payload size exceeds maximum allowed size"
_INFLATED_TOO_BIG = "Max decompressed message size exceeded"
_FRAME_TOO_BIG = "Received payload length > 2^31 bytes."
_MAX_FRAME = 2**31 - 1  # the largest frame payload the original takes (its ArrayBuffer limit)
# Headers the handshake sets itself; a user's copy is dropped (WHATWG "set").
_OWN_HEADERS = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "connection",
        "upgrade",
    }
)


@dataclass(frozen=True)
class Target:
    """A parsed WebSocket URL.

    ``url`` is the serialised URL (``ws://user:pass@host:port/path?query``,
    credentials included, as the WHATWG URL serialiser writes them),
    ``origin`` its origin (the ``MessageEvent.origin``), ``http_origin`` the
    origin the handshake is sent to (``http:``/``https:``), ``path`` the
    request target, and ``authorization`` the ``Authorization`` value of the
    URL's credentials (``Basic`` with the percent-decoded user name and
    password), or ``""`` when it has none.
    """

    url: str
    origin: str
    http_origin: str
    path: str
    secure: bool
    authorization: str = field(default="", repr=False)


@dataclass(frozen=True)
class Negotiated:
    """What the server accepted: ``protocol``, the raw ``extensions`` header value,
    whether messages may arrive compressed, whether each one starts a new
    compression context (``server_no_context_takeover``), and whether the
    connection is an HTTP/2 stream (``http2``)."""

    protocol: str = ""
    extensions: str = ""
    deflate: bool = False
    reset_context: bool = False
    http2: bool = False  # an RFC 8441 stream of an HTTP/2 connection, not a TCP connection


class HandshakeError(Exception):
    """The server's answer is not a valid WebSocket handshake (RFC 6455 §4.1)."""


def _syntax_error(message: str) -> DOMException:
    return DOMException(message, "SyntaxError")


def parse_url(url: Any) -> Target:
    """Parse and check a WebSocket URL; raises a ``SyntaxError`` DOMException.

    ``http:`` and ``https:`` become ``ws:`` and ``wss:``, as the WHATWG
    standard does; any other scheme, a fragment, or a relative URL (Python has
    no document base URL to resolve it against) is refused.
    """
    if not isinstance(url, str):
        if url is None:
            raise _syntax_error("the URL must be a string, got None")
        url = url.geturl() if hasattr(url, "geturl") else str(url)
    text = url.strip(" \t\n\r\f")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise _syntax_error(f"invalid URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme == "http":
        scheme = "ws"
    elif scheme == "https":
        scheme = "wss"
    elif scheme not in _DEFAULT_PORTS:
        raise _syntax_error(f"the URL's scheme must be ws: or wss:, got {url!r}")
    if "#" in text:
        raise _syntax_error(f"a WebSocket URL cannot have a fragment, got {url!r}")
    hostname = parts.hostname
    if not hostname:
        raise _syntax_error(f"the URL has no host: {url!r}")
    if not hostname.isascii():
        try:  # the URL parser's domain-to-ASCII step
            hostname = hostname.encode("idna").decode("ascii")
        except UnicodeError:
            raise _syntax_error(f"invalid host in URL {url!r}") from None
    if any(c in _FORBIDDEN_HOST for c in hostname):
        raise _syntax_error(f"invalid host in URL {url!r}")
    default = _DEFAULT_PORTS[scheme]
    if port == default:
        port = None
    host = f"[{hostname}]" if ":" in hostname else hostname
    authority = host if port is None else f"{host}:{port}"
    path = quote(parts.path, safe=_PATH_SAFE) or "/"
    target = path + ("?" + quote(parts.query, safe=_QUERY_SAFE) if "?" in text else "")
    # WHATWG URL: the credentials are kept (an empty password, or both empty,
    # are none), percent-encoded with the userinfo set; the handshake sends them
    # when the server asks (see perform).
    username, password = parts.username or "", parts.password or ""
    userinfo = authorization = ""
    if username or password:
        userinfo = quote(username, safe=_USERINFO_SAFE)
        if password:
            userinfo += ":" + quote(password, safe=_USERINFO_SAFE)
        userinfo += "@"
        basic = unquote_to_bytes(username) + b":" + unquote_to_bytes(password)
        authorization = "Basic " + base64.b64encode(basic).decode("ascii")
    http_scheme = "https" if scheme == "wss" else "http"
    return Target(
        url=f"{scheme}://{userinfo}{authority}{target}",
        origin=f"{scheme}://{authority}",
        http_origin=f"{http_scheme}://{authority}",
        path=target,
        secure=scheme == "wss",
        authorization=authorization,
    )


def parse_protocols(protocols: Any) -> list[str]:
    """A subprotocol list from a string or a sequence of strings; a repeated
    (case-insensitively) or non-token name raises a ``SyntaxError`` DOMException."""
    if protocols is None:
        return []
    if isinstance(protocols, str):
        protocols = [protocols]
    elif isinstance(protocols, (bytes, bytearray)) or not hasattr(protocols, "__iter__"):
        raise _syntax_error(f"protocols must be a string or a list of strings, got {protocols!r}")
    out: list[str] = []
    seen: set[str] = set()
    for name in protocols:
        if not isinstance(name, str) or not _TOKEN_RE.match(name):
            raise _syntax_error(f"invalid subprotocol {name!r}")
        folded = name.lower()
        if folded in seen:
            raise _syntax_error(f"subprotocol {name!r} is repeated")
        seen.add(folded)
        out.append(name)
    return out


def request_headers(extra: Any, protocols: list[str]) -> tuple[list[tuple[str, str]], str]:
    """The handshake's request headers (the user's first) and the key sent.

    The dispatcher adds ``connection: upgrade`` and ``upgrade: websocket``.
    """
    key = base64.b64encode(os.urandom(16)).decode("ascii")
    pairs = [(k, v) for k, v in header_pairs(extra) if k.lower() not in _OWN_HEADERS]
    pairs.append(("sec-websocket-key", key))
    pairs.append(("sec-websocket-version", "13"))
    if protocols:
        pairs.append(("sec-websocket-protocol", ", ".join(protocols)))
    pairs.append(("sec-websocket-extensions", _OFFER))
    return pairs, key


def accept_for(key: str) -> str:
    """``Sec-WebSocket-Accept`` for ``key`` (RFC 6455 §4.2.2 step 5.4)."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + _GUID).digest()).decode("ascii")


def _one(headers: dict[str, Any], name: str) -> str | None:
    value = headers.get(name)
    if isinstance(value, list):
        raise HandshakeError(f"the response has {len(value)} {name} headers")
    return value


def _joined(headers: dict[str, Any], name: str) -> str | None:
    value = headers.get(name)
    if isinstance(value, list):
        return ", ".join(value)
    return value


def check_response(headers: dict[str, Any], key: str, protocols: list[str]) -> Negotiated:
    """Check a ``101`` response's headers (lower-case names) against the request.

    Raises :class:`HandshakeError` naming the first problem, in the order of
    RFC 6455 §4.1 (items 2 to 6 of the client's checks).
    """
    upgrade = _one(headers, "upgrade")
    if upgrade is None or upgrade.strip().lower() != "websocket":
        raise HandshakeError(f"the Upgrade header must be 'websocket', got {upgrade!r}")
    connection = _joined(headers, "connection")
    tokens = {t.strip().lower() for t in (connection or "").split(",")}
    if "upgrade" not in tokens:
        raise HandshakeError(f"the Connection header must contain 'upgrade', got {connection!r}")
    accept = _one(headers, "sec-websocket-accept")
    if accept is None or accept.strip() != accept_for(key):
        raise HandshakeError(f"the Sec-WebSocket-Accept header is wrong: {accept!r}")
    return _negotiate(headers, protocols)


def check_h2_response(headers: dict[str, Any], protocols: list[str]) -> Negotiated:
    """Check the headers of a ``2xx`` answer to an extended CONNECT (RFC 8441 §5).

    There is no ``Upgrade``, ``Connection`` or ``Sec-WebSocket-Accept`` to
    check over HTTP/2 (the ``:protocol`` pseudo-header replaces the key
    exchange, so an ``Sec-WebSocket-Accept`` the server adds anyway is
    ignored); the extensions and the subprotocol are checked as over HTTP/1.1.
    """
    negotiated = _negotiate(headers, protocols)
    return Negotiated(
        negotiated.protocol,
        negotiated.extensions,
        negotiated.deflate,
        negotiated.reset_context,
        True,
    )


def _negotiate(headers: dict[str, Any], protocols: list[str]) -> Negotiated:
    """RFC 6455 §4.1, items 5 and 6 of the client's checks: extensions, subprotocol."""
    extensions = _joined(headers, "sec-websocket-extensions")
    deflate = reset = False
    if extensions is not None and extensions.strip():
        deflate, reset = _check_extensions(extensions)
    protocol = _joined(headers, "sec-websocket-protocol")
    if protocol is not None:
        protocol = protocol.strip()
        if protocol not in protocols:
            raise HandshakeError(
                f"the server chose subprotocol {protocol!r}, which was not offered"
            )
    elif protocols:
        raise HandshakeError("the server chose none of the subprotocols offered")
    return Negotiated(protocol or "", extensions or "", deflate, reset)


_PARAM_RE = re.compile(r'\s*([^\s=;,]+)\s*(?:=\s*(?:"([^"]*)"|([^\s;,"]*)))?\s*\Z')


def _check_extensions(value: str) -> tuple[bool, bool]:
    """RFC 7692 §7.1: the server may accept our one offer, with valid parameters only.

    Returns ``(deflate, server_no_context_takeover)``.
    """
    entries = [e for e in value.split(",") if e.strip()]
    if len(entries) != 1:
        raise HandshakeError(f"the server accepted extensions that were not offered: {value!r}")
    name, *params = entries[0].split(";")
    if name.strip().lower() != "permessage-deflate":
        raise HandshakeError(
            f"the server accepted an extension that was not offered: {name.strip()!r}"
        )
    seen: set[str] = set()
    reset = False
    for param in params:
        m = _PARAM_RE.match(param)
        if m is None:
            raise HandshakeError(f"malformed permessage-deflate parameter {param.strip()!r}")
        pname = m.group(1).lower()
        pvalue = m.group(2) if m.group(2) is not None else m.group(3)
        if pname in seen:
            raise HandshakeError(f"permessage-deflate parameter {pname!r} is repeated")
        seen.add(pname)
        if pname in ("server_no_context_takeover", "client_no_context_takeover"):
            if pvalue is not None:
                raise HandshakeError(f"permessage-deflate {pname} takes no value, got {pvalue!r}")
            reset = reset or pname == "server_no_context_takeover"
        elif pname in ("server_max_window_bits", "client_max_window_bits"):
            if (
                pvalue is None
                or not pvalue.isdigit()
                or not 8 <= int(pvalue) <= 15
                or pvalue[0] == "0"
            ):
                raise HandshakeError(f"permessage-deflate {pname} must be 8 to 15, got {pvalue!r}")
        else:
            raise HandshakeError(f"unknown permessage-deflate parameter {pname!r}")
    return True, reset


#: The h2 driver's error when the server did not announce extended CONNECT.
_NO_EXTENDED_CONNECT = "Extended CONNECT protocol not supported by server"
_h2_warned = False  # the one-time ExperimentalWarning of WebSocket over HTTP/2 (tests reset it)


def _warn_h2_once() -> None:
    global _h2_warned
    if _h2_warned:
        return
    _h2_warned = True
    warnings.warn(
        ExperimentalWarning(
            "WebSocket over HTTP2 is experimental, and subject to change.", code="GREENHTTP-WS-H2"
        ),
        stacklevel=2,
    )


class _HandshakeHandler(SocketWaiter):
    """One handshake attempt: the caller gets ``(status, headers, socket)`` once the
    connection hands over a socket (``101`` on HTTP/1.1, ``2xx`` on HTTP/2).
    ``refused`` is the status of a final answer that is no switch, once known."""

    __slots__ = ("refused",)

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    def _handed(self, controller: Any, status_code: int, headers: Any, socket: Any) -> Any:
        return status_code, headers, socket

    def on_response_start(self, controller: Any, status: int, headers: Any, message: str) -> None:
        # Only HTTP/2 gets here: its driver hands a non-2xx answer to an
        # extended CONNECT over as a response (HTTP/1.1 refuses a non-101 itself).
        if status >= 200:
            self.refused = status
            controller.abort(HandshakeError(f"the server answered {status} instead of 200"))

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        if not self.refused:
            self.refused = _final_status(controller)
        super().on_response_error(controller, err)


def _final_status(controller: Any) -> int:
    """The status of the response head an HTTP/1.1 connection read before it
    refused the upgrade (its error says only "bad upgrade"); 0 if none.

    The request's controller keeps the head (``raw_head``); an interceptor's
    stand-in controller leads to it through ``target``."""
    for _ in range(16):
        if controller is None:
            return 0
        raw = getattr(controller, "raw_head", None)
        if isinstance(raw, bytes):
            status = raw[:16].split(b" ", 2)[1:2]
            return int(status[0]) if status and status[0].isdigit() else 0
        controller = getattr(controller, "target", None)
    return 0


def _dispatch(
    dispatcher: Any, options: dict[str, Any], signal: Any
) -> tuple[tuple[int, Any, Any] | None, int, BaseException | None]:
    """One attempt, with the fall back to HTTP/1.1 (which sets ``allow_h2`` in
    ``options``): ``(result, 0, None)``, or ``(None, status, error)`` when it
    failed (``status`` that of the server's refusal, 0 if unknown)."""
    handler = _HandshakeHandler()
    try:
        result: tuple[int, Any, Any] = wait_for_socket(dispatcher, dict(options), handler, signal)
    except InformationalError as exc:
        if _NO_EXTENDED_CONNECT not in str(exc) or options.get("allow_h2") is False:
            return None, handler.refused, exc
        # RFC 8441 is not available on this HTTP/2 connection: an Agent sends the
        # retry over a separate HTTP/1.1-only connection; a Client or Pool bound to
        # that HTTP/2 connection fails the same way again.
        options["allow_h2"] = False
        return _dispatch(dispatcher, options, signal)
    except Exception as exc:
        return None, handler.refused, exc
    return result, 0, None


def perform(
    dispatcher: Any, target: Target, protocols: list[str], extra_headers: Any, signal: Any
) -> tuple[Any, Negotiated]:
    """Send the handshake through ``dispatcher.dispatch`` and check the answer.

    Blocks the calling greenlet until the server switches protocols; returns
    the socket (an HTTP/1.1 one replays any bytes the server sent after its
    ``101``; an HTTP/2 one is the stream's tunnel) and what was negotiated.
    Raises what the dispatcher raised, or :class:`HandshakeError` (after
    closing the socket).

    The headers are the same either way (the ``Sec-WebSocket-Key`` is sent
    over HTTP/2 too, where RFC 8441 §5 says it is not processed, because the
    connection is only known once the request reaches it). When the
    dispatcher's HTTP/2 connection cannot carry it (the server never sent
    SETTINGS_ENABLE_CONNECT_PROTOCOL), the handshake is dispatched once more
    with ``allow_h2=False``.

    The handshake is a fetch with the URL's credentials (WHATWG WebSocket,
    "use-URL-credentials"): as the original does, the first attempt goes
    without them, and a ``401`` answer is retried once with ``Authorization:
    Basic`` made of them, unless ``extra_headers`` has an ``Authorization``
    of its own. A redirect interceptor drops that header on a hop to another
    origin.
    """
    headers, key = request_headers(extra_headers, protocols)
    options: dict[str, Any] = {
        "path": target.path,
        "method": "GET",
        "upgrade": "websocket",
        # A dict by name (as given), as the original hands an interceptor or a
        # dispatcher of the user's an object, not a list.
        "headers": headers_by_name(headers),
        "origin": target.http_origin,
    }
    result, refused, error = _dispatch(dispatcher, options, signal)
    if (
        result is None
        and refused == 401
        and target.authorization
        and not any(name.lower() == "authorization" for name, _ in headers)
        and not getattr(signal, "aborted", False)
    ):
        options["headers"] = headers_by_name([*headers, ("authorization", target.authorization)])
        result, refused, error = _dispatch(dispatcher, options, signal)
    if result is None:
        assert error is not None
        raise error
    status, response_headers, sock = result
    try:
        if status == 101:
            negotiated = check_response(response_headers, key, protocols)
        else:
            negotiated = check_h2_response(response_headers, protocols)
            _warn_h2_once()
    except BaseException:
        sock.close()
        raise
    return sock, negotiated


def limits_of(dispatcher: Any) -> tuple[int, int]:
    """``(max_fragments, max_payload_size)`` from a dispatcher's ``web_socket`` option
    (:func:`~greenhttp._core.options.web_socket_options_of`)."""
    limits = web_socket_options_of(dispatcher)
    return limits.max_fragments, limits.max_payload_size


class InboundPolicy(Extension):
    """Limits and RFC 7692 inflation, as a wsproto extension on the frame decoder.

    wsproto calls it for every received frame: the header (before any payload
    is read), each payload chunk, and the frame's end. Returning a
    ``CloseReason`` fails the connection with that code: 1008 past
    ``max_fragments`` frames in one message, 1009 past ``max_payload_size``
    bytes (a message's payload; a compressed frame's payload; an inflated
    message), 1002 for RSV1 where RFC 7692 §6.1 forbids it, 1007 for data
    that does not inflate. A limit of 0 is no limit. :attr:`failure` then
    says why in words (wsproto's own message is only "error in extension"),
    and :attr:`close_reason` is the reason to put in the close frame: for the
    limits, the original library's texts (its ``receiver.js``), which a
    server may look for.
    """

    name = "greenhttp-inbound-policy"  # never offered: it rides on the negotiated state

    def __init__(
        self, max_fragments: int, max_payload_size: int, deflate: bool, reset_context: bool
    ) -> None:
        self.max_fragments = max_fragments
        self.max_payload_size = max_payload_size
        self.deflate = deflate
        self.reset_context = reset_context
        self._inflater = zlib.decompressobj(-15) if deflate else None
        self._data = False  # the frame being read is a data frame
        self._compressed = False  # the message being read is compressed
        self._fragments = 0
        self._size = 0
        self._deflated = 0  # payload bytes of the compressed message being read
        self.failure = ""  # why the last CloseReason was returned
        self.close_reason = ""  # the close frame's reason for it ("": the code's default)

    def _refuse(self, reason: CloseReason, failure: str, close_reason: str = "") -> CloseReason:
        self.failure = failure
        self.close_reason = close_reason
        return reason

    def enabled(self) -> bool:
        return True

    def offer(self) -> bool:
        return False

    def frame_inbound_header(
        self, proto: Any, opcode: Opcode, rsv: RsvBits, payload_length: int
    ) -> Any:
        if opcode >= 8:  # control frames carry no message state; RSV1 on them is an error
            self._data = False
            return _NO_RSV
        self._data = True
        if opcode is Opcode.CONTINUATION:
            if rsv.rsv1:
                # RFC 7692 §6.1: only on the first frame
                return self._refuse(CloseReason.PROTOCOL_ERROR, "RSV1 set on a continuation frame")
        else:
            self._fragments = 0
            self._size = 0
            self._deflated = 0
            self._compressed = self.deflate and rsv.rsv1
        # The original's order: the frame's length, then the message's fragments.
        if payload_length > _MAX_FRAME:  # refused whatever the limit, as the original does
            return self._refuse(
                CloseReason.MESSAGE_TOO_BIG,
                f"a frame of {payload_length} bytes (more than 2**31 - 1)",
                _FRAME_TOO_BIG,
            )
        limit = self.max_payload_size
        if limit:
            # The frame's payload as it arrives (compressed or not) plus what the
            # message already holds (inflated, if compressed), as the original counts.
            if self._size + payload_length > limit:
                return self._too_big(_PAYLOAD_TOO_BIG)
            if not self._compressed:
                self._size += payload_length
        self._fragments += 1
        if self.max_fragments and self._fragments > self.max_fragments:
            return self._refuse(
                CloseReason.POLICY_VIOLATION,
                f"a message in more than max_fragments={self.max_fragments} frames",
                _TOO_MANY_FRAGMENTS,
            )
        return _RSV1 if self.deflate else _NO_RSV

    def frame_inbound_payload_data(self, proto: Any, data: bytes) -> Any:
        if not (self._data and self._compressed):
            return data
        self._deflated += len(data)
        return self._inflate(data)

    def frame_inbound_complete(self, proto: Any, fin: bool) -> Any:
        if not (fin and self._data and self._compressed):
            return None
        if not self._deflated:
            # No payload at all (RFC 7692 §7.2.3.6 sends one 0x00 byte): an empty
            # message. The bare tail would leave the inflater inside a stored block.
            return None
        out = self._inflate(_SYNC_TAIL)
        inflater = self._inflater
        if self.reset_context or (inflater is not None and inflater.eof):
            # A new context per message, or the server ended its stream with BFINAL.
            self._inflater = zlib.decompressobj(-15)
        return out

    def _inflate(self, data: bytes) -> Any:
        inflater = self._inflater
        assert inflater is not None
        limit = self.max_payload_size
        try:
            if limit:
                out = inflater.decompress(data, limit - self._size + 1)
            else:
                out = inflater.decompress(data)
        except zlib.error as exc:
            return self._refuse(CloseReason.INVALID_FRAME_PAYLOAD_DATA, f"a compressed message does not inflate: {exc}")
        self._size += len(out)
        if limit and (self._size > limit or inflater.unconsumed_tail):
            return self._too_big(_INFLATED_TOO_BIG)
        return out

    def _too_big(self, close_reason: str) -> CloseReason:
        return self._refuse(
            CloseReason.MESSAGE_TOO_BIG,
            f"a message larger than max_payload_size={self.max_payload_size} bytes",
            close_reason,
        )
