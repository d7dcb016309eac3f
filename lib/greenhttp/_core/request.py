"""One request: its validated options, and the call-order guard around its handler.

:class:`Request` is built by ``dispatch()`` from the options dict. It checks
every option eagerly, keeps the normalised headers and body, and wraps the
user's handler: drivers call ``request.on_*`` and never the handler itself.
The guard enforces start → (upgrade | response_start+ → data* → end | error)
with exactly one terminal call and nothing after it. A handler that raises is
turned into ``abort(err)`` and ``on_response_error``; it never reaches the
reader greenlet.

Sans-IO: the transport plugs in through two hooks, ``abort_hook`` and
``resume_hook``, set while the request is on a connection.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, Final

from mypy_extensions import mypyc_attr

from ..errors import (
    InvalidArgumentError,
    NotSupportedError,
    RequestAbortedError,
)
from .blob import Blob
from .body import StreamBody, normalize_body
from .controller import Controller
from .headers import TOKEN_RE, check_header_value, header_pairs, raw_header_list
from .url import encode_query

__all__ = [
    "Request",
    "EXPECTS_PAYLOAD",
    "IDEMPOTENT_METHODS",
    "REQUEST_DONE",
    "RESPONSE_STARTED",
    "WHOLE_RESPONSE_TAKERS",
    "refuse",
]

_KNOWN_METHODS: Final = {
    "get": "GET",
    "head": "HEAD",
    "post": "POST",
    "put": "PUT",
    "delete": "DELETE",
    "options": "OPTIONS",
    "query": "QUERY",
    "patch": "PATCH",
}
EXPECTS_PAYLOAD: Final = frozenset({"PUT", "POST", "PATCH", "QUERY", "PROPFIND", "PROPPATCH"})
IDEMPOTENT_METHODS: Final = frozenset({"GET", "HEAD", "QUERY"})
# Methods for which strict_content_length does not check a declared length.
_LENGTH_UNCHECKED: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "CONNECT"})
_REFUSED_HEADERS: Final = frozenset({"transfer-encoding", "keep-alive", "upgrade"})


# What a handler can never be (the original's "typeof handler !== 'object'").
_NOT_HANDLERS: Final = frozenset((str, bytes, bytearray, int, float, bool))


# The handler methods of API.md, and the spellings of another handler API: the
# legacy one the original dropped (REFERENCE §0) and the original's camelCase.
_HANDLER_METHODS: Final = (
    "on_response_start",
    "on_request_start",
    "on_response_data",
    "on_response_end",
    "on_response_error",
    "on_request_upgrade",
)
_FOREIGN_METHODS: Final = (
    "on_connect",
    "on_headers",
    "on_data",
    "on_complete",
    "on_error",
    "on_upgrade",
    "onConnect",
    "onHeaders",
    "onData",
    "onComplete",
    "onError",
    "onUpgrade",
    "onRequestStart",
    "onResponseStart",
    "onResponseData",
    "onResponseEnd",
    "onResponseError",
    "onRequestUpgrade",
)


def check_handler(handler: Any) -> None:
    """Raise :class:`InvalidArgumentError` at once for what cannot be a handler
    (``None``, a string, a number: there is nobody to report anything to), and
    for a handler written to another API (the legacy ``on_connect``/``on_headers``/
    ``on_data``/``on_complete``/``on_error`` one, or camelCase names), which
    would otherwise be called for nothing."""
    if handler is None or type(handler) in _NOT_HANDLERS:
        raise InvalidArgumentError(f"handler must be an object, got {handler!r}")
    try:
        for name in _HANDLER_METHODS:  # (on_response_start first: one lookup, commonly)
            if hasattr(handler, name):
                return
        foreign = next((name for name in _FOREIGN_METHODS if hasattr(handler, name)), None)
    except Exception:
        return  # a lookup that raises fails the request when the callback is looked up
    if foreign is not None:
        raise InvalidArgumentError(
            f"invalid handler: {type(handler).__name__} has {foreign} but none of the methods of"
            " dispatch()'s handler API (on_request_start, on_response_start, on_response_data,"
            " on_response_end, on_response_error, on_request_upgrade); the legacy"
            " on_connect/on_headers/on_data/on_complete/on_error API is not supported"
        )


def not_a_dict(options: Any) -> InvalidArgumentError:
    """The error for dispatch options that are not a dict (every dispatcher words it so)."""
    return InvalidArgumentError(f"options must be a dict, got {type(options).__name__}")


def refuse(handler: Any, err: BaseException) -> None:
    """Fail a request no connection took: ``handler.on_response_error(None, err)``,
    as the spec has it, or raise ``err`` from a handler without that method."""
    on_error = getattr(handler, "on_response_error", None)
    if on_error is None:
        raise err
    on_error(None, err)


# Guard states. (Final: compiled, these and the module's other Final names are C
# constants and variables, not lookups in the module's dict: docs/performance.md.)
_CREATED: Final = 0
_STARTED: Final = 1
_HEADERS: Final = 2
_DONE: Final = 3
RESPONSE_STARTED: Final = _HEADERS
REQUEST_DONE: Final = _DONE

# Handler classes that take a response read in one piece in one call (see
# Request.on_whole), by exact class (not subclasses, not wrappers that forward
# attributes): class -> fn(handler, controller, status, headers, message, body).
WHOLE_RESPONSE_TAKERS: Final[dict[type, Callable[..., None]]] = {}


@mypyc_attr(native_class=False)  # compiled, a class deriving from list must stay a Python class
class HeaderList(list[tuple[str, str]]):
    """A request's validated ``(name, value)`` pairs, with their HTTP/1.1 encoding.

    ``block`` is the pairs as header lines (``name: value\\r\\n`` each), so a
    header set met again is written without encoding it again. A request's
    headers are always one (empty without headers).
    """

    __slots__ = ("block",)

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__(pairs)
        self.block = "".join([f"{name}: {value}\r\n" for name, value in pairs]).encode("latin-1")


_NO_HEADERS: Final = HeaderList([])  # shared, never mutated: options replace it


def _do_nothing(*args: Any) -> None:
    return None


_noop: Final = _do_nothing


_PATH_RE: Final = re.compile(r"[\x21-\xff]+\Z")
_VALID_METHODS: Final = frozenset(
    ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "QUERY", "CONNECT", "TRACE"]
)


def _timeout(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"invalid {name}: {value!r} (a non-negative number of seconds)")
    return float(value)


# Paths seen to be valid origin-form targets ("/..."), valid for every method:
# a client asks for the same few paths again and again.
_CHECKED_PATHS: Final[set[str]] = set()


def _check_path(path: str, method: str) -> None:
    if not _PATH_RE.match(path):
        raise InvalidArgumentError(f"invalid request path: {path!r}")
    if path[0] != "/":
        if method != "CONNECT" and not path.startswith(("http://", "https://")):
            raise InvalidArgumentError(f"path must be an absolute URL or start with a slash, got {path!r}")
        return
    if len(_CHECKED_PATHS) >= 256:
        _CHECKED_PATHS.clear()  # many distinct paths: small, not exhaustive
    _CHECKED_PATHS.add(path)


class Request:
    """A validated request plus its guarded handler. Owned by one dispatcher.

    What every request has is set by ``__init__``; rarely given options
    default at class level, so a request sets only what it has of those.
    """

    # Set by __init__ on every request (it says why they are not class defaults).
    state: int
    aborted: bool
    paused: bool
    # True when a body, upgrade, reset, expect_continue, type_of_service or a
    # "connection: close" header was given: the connection then applies its
    # rarer rules (reset, body framing, expect-continue, TOS).
    special: bool
    read_all: bool  # the consumer will take the whole body: no point in small reads
    length_mismatch: bool
    origin: Any
    headers: HeaderList  # never mutated: options replace it
    host: str | None
    body: bytes | StreamBody | None
    headers_timeout: float | None
    controller: Request | None  # itself, once started (None: never started)
    error_hook: Callable[[BaseException], None] | None
    abort_hook: Callable[[Request, BaseException], None] | None
    resume_hook: Callable[[Request], None] | None
    raw_head: bytes | None
    # Rarely given: class-level defaults.
    content_length: int | None = None
    content_type: str | None = None
    upgrade: str | None = None
    reset: bool | None = None
    body_timeout: float | None = None
    expect_continue = False
    servername: str | None = None
    type_of_service: int | None = None
    reason: BaseException | None = None
    raw_trailers: list[bytes] | None = None
    _blob_type: str | None = None  # the media type a Blob body brings
    _close_header = False  # a "connection: close" header was given
    goaway_replayed = False  # moved to a new connection once after a GOAWAY (h2_driver)

    def __init__(self, options: Any, handler: Any) -> None:
        # Any, not a dict annotation: compiled, that would reject a non-dict with a bare TypeError.
        if not isinstance(options, dict):
            raise not_a_dict(options)
        opts: dict[str, Any] = options
        path = opts.get("path")
        method = opts.get("method")
        if type(method) is not str or method not in _VALID_METHODS:
            method = self._check_method(method)
        if type(path) is not str:
            raise InvalidArgumentError(f"path must be a string, got {path!r}")
        if path not in _CHECKED_PATHS:
            _check_path(path, method)
        self.method = method
        self.path = path
        self.handler = handler
        # The handler's on_response_data, looked up at the first chunk (a response
        # read whole may never need it) and kept for the others.
        self._on_response_data: Callable[[Any, bytes], Any] | None = None
        # Every attribute a request reads or gets on the common paths starts on
        # the instance, in this order. CPython 3.11 keeps instance attributes in
        # a compact array only for names its first instances set; a name first
        # set later (a default read from the class, then given per request)
        # turns each such instance into a real dict, and a default left on the
        # class costs a slow generic lookup at every read.
        self.state = _CREATED
        self.aborted = False
        self.paused = False
        self.special = False
        self.read_all = False
        self.length_mismatch = False
        self.origin = None
        self.headers = _NO_HEADERS
        self.host = None
        self.body = None
        self.headers_timeout = None
        self.controller = None
        self.error_hook = None
        self.abort_hook = None
        self.resume_hook = None
        self.raw_head = None
        self.idempotent = method in IDEMPOTENT_METHODS
        self.blocking = method != "HEAD"
        if method == "CONNECT":
            self._check_upgrade_handler()
        n = len(opts)
        if n == 3 and "origin" in opts:
            self.origin = opts["origin"]  # an Agent's request with nothing else to check
        elif n > 2:
            for key, value in opts.items():
                if value is not None:
                    setter = _OPTION_SETTERS.get(key)
                    if setter is not None:
                        setter(self, value)
                    elif key == "dispatcher":
                        raise InvalidArgumentError("dispatcher is not supported by instance methods")
                    elif key in _MISPLACED:
                        raise InvalidArgumentError(f"{key} is not a request option: {_MISPLACED[key]}")
            if self.content_length is not None:
                self._check_length()
            blob_type = self._blob_type
            if blob_type and self.content_type is None:
                # A Blob body brings its media type unless the caller set one (REFERENCE §3.4).
                self.headers = HeaderList([*self.headers, ("content-type", blob_type)])
                self.content_type = blob_type

    @staticmethod
    def _check_method(method: Any) -> str:
        if not isinstance(method, str):
            raise InvalidArgumentError(f"method must be a string, got {method!r}")
        name = _KNOWN_METHODS.get(method, method)
        if not TOKEN_RE.match(name):
            raise InvalidArgumentError(f"invalid request method: {name!r}")
        return name

    # -- the less common options, each with its own check ----------------------------
    def _set_idempotent(self, value: Any) -> None:
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"invalid idempotent: {value!r}")
        self.idempotent = value

    def _set_blocking(self, value: Any) -> None:
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"invalid blocking: {value!r}")
        self.blocking = value

    def _set_origin(self, value: Any) -> None:
        self.origin = value

    def _set_query(self, query: Any) -> None:
        if not query:
            return
        path = self.path
        if "?" in path or "#" in path:
            raise InvalidArgumentError('query params cannot be passed when path already contains "?" or "#"')
        if not isinstance(query, dict):
            raise InvalidArgumentError(f"query must be a dict, got {query!r}")
        self.path = path + "?" + encode_query(query)

    def _set_throw_on_error(self, value: Any) -> None:
        raise InvalidArgumentError("invalid throw_on_error: use the response_error interceptor")

    def _set_max_redirections(self, value: Any) -> None:
        if value != 0:
            raise InvalidArgumentError("max_redirections is not supported, use the redirect interceptor")

    def _set_upgrade(self, value: Any) -> None:
        self.special = True
        if not isinstance(value, str):
            raise InvalidArgumentError(f"upgrade must be a string, got {value!r}")
        self.upgrade = check_header_value("upgrade", value)
        self._check_upgrade_handler()

    def _check_upgrade_handler(self) -> None:
        # Before anything is sent (as the original): a 101 or a tunnel would have nobody to go to.
        if getattr(self.handler, "on_request_upgrade", None) is None:
            raise InvalidArgumentError(
                "invalid on_request_upgrade method: an upgrade or CONNECT request needs a handler"
                f" with on_request_upgrade, {type(self.handler).__name__} has none"
            )

    def _set_reset(self, value: Any) -> None:
        self.special = True
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"invalid reset: {value!r}")
        # A "connection: close" header resets the socket whatever reset= says, given
        # before or after it (REFERENCE.md: the header sets reset once reset= is read).
        self.reset = True if self._close_header else value

    def _set_expect_continue(self, value: Any) -> None:
        self.special = True
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"invalid expect_continue: {value!r}")
        self.expect_continue = value

    def _set_headers_timeout(self, value: Any) -> None:
        self.headers_timeout = _timeout("headers_timeout", value)

    def _set_body_timeout(self, value: Any) -> None:
        self.body_timeout = _timeout("body_timeout", value)

    def _set_type_of_service(self, tos: Any) -> None:
        self.special = True
        if isinstance(tos, bool) or not isinstance(tos, int) or not 0 <= tos <= 255:
            raise InvalidArgumentError(f"type_of_service must be an integer between 0 and 255, got {tos!r}")
        self.type_of_service = tos

    def _set_servername(self, value: Any) -> None:
        if not isinstance(value, str) or not value or any(ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in value):
            raise InvalidArgumentError(
                f"servername must be a host name without spaces or control characters, got {value!r}"
            )
        self.servername = value

    def _set_headers(self, raw: Any) -> None:
        if not raw:
            return
        headers, close_requested, host, length, content_type = _header_set(raw)
        self.headers = headers
        if host is not None:
            self.host = host
        if length is not None:
            self.content_length = length
        if content_type is not None:
            self.content_type = content_type
        # A "connection: close" header asks for the socket to close after this response.
        if close_requested:
            self.reset = True
            self.special = True
            self._close_header = True

    def _set_body(self, value: Any) -> None:
        self.special = True
        self.body = normalize_body(value)
        if isinstance(value, Blob) and value.type:
            self._blob_type = value.type

    def _check_length(self) -> None:
        """Note a declared content-length that differs from a body of known length.

        The dispatcher decides: with ``strict_content_length`` the request
        fails with RequestContentLengthMismatchError; without, the real
        length is sent (never a wrong one). As in the original, an empty or
        missing body is never a mismatch: its real length, 0, is sent (for a
        method that expects a payload; none at all for the others).
        """
        body = self.body
        declared = self.content_length
        if declared is None or self.method in _LENGTH_UNCHECKED:
            return
        if isinstance(body, bytes):
            actual: int | None = len(body)
        elif isinstance(body, StreamBody):
            actual = body.length
        else:
            actual = 0
        if actual and actual != declared:  # (0 or None: nothing to check, see above)
            self.length_mismatch = True

    # -- the guard: drivers call these -------------------------------------
    def start(self, context: Any) -> bool:
        """Call ``on_request_start``; False if the request ended (aborted) meanwhile."""
        if self.state == _DONE:
            return False
        self.state = _STARTED
        self.paused = False
        self.controller = self
        # A handler's method lookup sits inside the try too: one that raises is a
        # raising handler (its request fails), not an error of the connection.
        try:
            fn = getattr(self.handler, "on_request_start", None)
            if fn is not None:
                fn(self, context)
        except Exception as exc:
            self.abort(exc)
        return self.state != _DONE and not self.aborted

    def on_headers(self, status: int, headers: dict[str, Any], message: str) -> bool:
        """Deliver a response head. Returns True when the handler paused."""
        if self.state == _DONE:
            return False
        self.state = _HEADERS
        try:
            fn = getattr(self.handler, "on_response_start", None)
            if fn is not None:
                fn(self.controller, status, headers, message)
        except Exception as exc:
            self.abort(exc)
            return True
        return self.paused

    def on_data(self, chunk: bytes) -> bool:
        """Deliver body bytes. Returns True when the handler paused."""
        if self.state != _HEADERS:
            return False
        try:
            fn = self._on_response_data
            if fn is None:
                fn = self._on_response_data = getattr(self.handler, "on_response_data", None) or _noop
            fn(self.controller, chunk)
        except Exception as exc:
            self.abort(exc)
            return True
        return self.paused

    def on_complete(self, trailers: dict[str, Any] | None) -> None:
        if self.state == _DONE:
            return
        self.state = _DONE
        self.abort_hook = self.resume_hook = None
        try:
            fn = getattr(self.handler, "on_response_end", None)
            if fn is not None:
                fn(self.controller, trailers if trailers is not None else {})
        except Exception as exc:
            self._deliver_error(exc)
        self._release()

    def on_whole(
        self, whole: Callable[..., Any], status: int, headers: dict[str, Any], message: str, body: bytes
    ) -> None:
        """Deliver a final head and the whole body at once through ``whole``, the
        handler class's entry in :data:`WHOLE_RESPONSE_TAKERS` (what ``on_response_start``,
        ``on_response_data`` and ``on_response_end`` would do together). Terminal, like
        :meth:`on_complete`."""
        if self.state == _DONE:
            return
        self.state = _HEADERS
        try:
            whole(self.handler, self.controller, status, headers, message, body)
        except Exception as exc:
            self.abort(exc)
            return
        self.state = _DONE
        self.abort_hook = self.resume_hook = None
        # (What _release does, here without the call: this is the common ending.)
        self.handler = None
        self.controller = None
        self._on_response_data = _noop

    def on_upgrade(self, status: int, headers: Any, socket: Any) -> None:
        if self.state == _DONE:
            return
        self.state = _DONE
        self.abort_hook = self.resume_hook = None
        try:
            fn = getattr(self.handler, "on_request_upgrade", None)
            if fn is None:
                raise NotSupportedError("the handler has no on_request_upgrade method")
            fn(self.controller, status, headers, socket)
        except Exception as exc:
            self._deliver_error(exc)
        self._release()

    def on_error(self, err: BaseException) -> None:
        """Fail the request (terminal). Safe to call more than once."""
        if self.state == _DONE:
            return
        self.state = _DONE
        self.abort_hook = self.resume_hook = None
        self._deliver_error(err)
        self._release()

    def _release(self) -> None:
        """After the terminal callback: drop the links to the handler and the controller.

        Handler, controller and request refer to each other; cutting the
        request's side lets reference counting free a finished request at
        once, instead of leaving a cycle for the garbage collector (which
        cost more than the rest of the request at high rates).
        """
        self.handler = None
        self.controller = None
        self._on_response_data = _noop

    def _deliver_error(self, err: BaseException) -> None:
        # Never raises: its callers go on to fail other requests, or to close the socket.
        try:
            fn = getattr(self.handler, "on_response_error", None)
            if fn is not None:
                fn(self.controller, err)
                return
        except Exception as exc:  # the handler raised (or looking its method up did)
            err = exc
        hook = self.error_hook
        if hook is not None:
            hook(err)

    # -- controller operations ---------------------------------------------
    @property
    def done(self) -> bool:
        return self.state == _DONE

    def abort(self, reason: BaseException | None = None) -> None:
        if self.aborted or self.state == _DONE:
            return
        self.aborted = True
        self.reason = reason if reason is not None else RequestAbortedError()
        hook = self.abort_hook
        if hook is not None:
            hook(self, self.reason)
        else:
            self.on_error(self.reason)
        if isinstance(self.body, StreamBody):
            self.body.close()

    def resume(self) -> None:
        if not self.paused:
            return
        self.paused = False
        hook = self.resume_hook
        if hook is not None:
            hook(self)

    def pause(self) -> None:
        self.paused = True

    def wants_whole_body(self) -> None:
        self.read_all = True

    @property
    def raw_headers(self) -> list[bytes] | None:
        raw = self.raw_head
        return raw_header_list(raw) if raw is not None else None


Controller.register(Request)  # every request is its own controller


# What a header set makes of a request: its pairs (the special ones taken out),
# whether it asks to close the connection, and its host, content-length and
# content-type values.
_HeaderSet = tuple[HeaderList, bool, str | None, int | None, str | None]

# Validated header sets by their exact pairs: a program sends the same few
# header dicts again and again. Only sets of plain str names and values are
# kept (as keys, 1, 1.0 and True would look alike); at most 256, started over
# when full.
_HEADER_SETS: Final[dict[tuple[tuple[Any, Any], ...], _HeaderSet]] = {}


def _header_set(raw: Any) -> _HeaderSet:
    """Validate request headers (any shape API.md allows); raises InvalidArgumentError."""
    key: tuple[tuple[Any, Any], ...] | None = None
    if type(raw) is dict:
        key = tuple(raw.items())
        try:
            found = _HEADER_SETS.get(key)
        except TypeError:  # a list of values: unhashable, not kept
            key = None
        else:
            if found is not None:
                return found
    found = _header_rules(header_pairs(raw))
    if key is not None and all(type(name) is str and type(value) is str for name, value in key):
        if len(_HEADER_SETS) >= 256:
            _HEADER_SETS.clear()
        _HEADER_SETS[key] = found
    return found


def _header_rules(pairs: list[tuple[str, str]]) -> _HeaderSet:
    """Take out and check the headers with request-level meaning (REFERENCE §3.4)."""
    out = []
    close_requested = False
    host: str | None = None
    length: int | None = None
    content_type: str | None = None
    for name, value in pairs:
        key = name.lower()
        if key == "host":
            if host is not None:
                raise InvalidArgumentError("duplicate host header")
            host = value
        elif key == "content-length":
            if length is not None:
                raise InvalidArgumentError("duplicate content-length header")
            if not value.isdigit() or not value.isascii():
                raise InvalidArgumentError(f"invalid content-length header: {value!r}")
            length = int(value)
        elif key == "connection":
            tokens = [t.strip().lower() for t in value.split(",")]
            if not all(TOKEN_RE.match(t) for t in tokens):
                raise InvalidArgumentError(f"invalid connection header: {value!r}")
            close_requested = close_requested or "close" in tokens
        elif key in _REFUSED_HEADERS:
            raise InvalidArgumentError(f"invalid {key} header: {value!r}")
        elif key == "expect":
            raise NotSupportedError("expect header not supported, use expect_continue=True")
        else:
            if key == "content-type" and content_type is None:
                content_type = value
            out.append((name, value))
    return HeaderList(out), close_requested, host, length, content_type


# Other unknown options are ignored (an interceptor may read its own), but these, the
# names requests and httpx give, would be ignored to the caller's surprise: a body or
# a query not sent, a timeout not applied. The fix is named instead.
_MISPLACED: Final[dict[str, str]] = {
    "data": "use body= (bytes, str, a file or an iterable)",
    "json": "use body=json.dumps(obj) and a content-type header",
    "params": "use query=",
    "timeout": "use headers_timeout= and body_timeout= (seconds); connect_timeout= is the dispatcher's",
    "connect_timeout": "it is an option of the dispatcher (Client, Pool, Agent)",
    "allow_redirects": "use the redirect interceptor",
    "follow_redirects": "use the redirect interceptor",
}

# Option name -> setter. The caller's keyword order applies them; the one pair whose
# order could matter, "reset" and "headers", gives the same result either way.
_OPTION_SETTERS: Final[dict[str, Callable[[Request, Any], None]]] = {
    "idempotent": Request._set_idempotent,
    "blocking": Request._set_blocking,
    "origin": Request._set_origin,
    "query": Request._set_query,
    "throw_on_error": Request._set_throw_on_error,
    "max_redirections": Request._set_max_redirections,
    "upgrade": Request._set_upgrade,
    "reset": Request._set_reset,
    "expect_continue": Request._set_expect_continue,
    "headers_timeout": Request._set_headers_timeout,
    "body_timeout": Request._set_body_timeout,
    "type_of_service": Request._set_type_of_service,
    "servername": Request._set_servername,
    "headers": Request._set_headers,
    "body": Request._set_body,
}
