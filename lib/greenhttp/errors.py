"""The greenhttp error tree.

Every error the library raises on purpose derives from :class:`GreenHTTPError`
and carries ``.code`` (``"GH_ERR_*"``, the original library's ``UND_ERR_*``
suffix) and ``.name``. Timeout errors are also :class:`TimeoutError`, socket
errors also :class:`ConnectionError`, and argument errors also
:class:`ValueError`, so ordinary ``except`` clauses keep working.

Foreign errors (``OSError``, ``ssl.SSLError``, h2, wsproto) are translated at
the boundary where they enter, with ``raise ... from exc``.

This module is sans-IO and greenlet-safe: it only defines classes.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "GreenHTTPError",
    "ConnectTimeoutError",
    "HeadersTimeoutError",
    "HeadersOverflowError",
    "BodyTimeoutError",
    "InvalidArgumentError",
    "InvalidReturnValueError",
    "AbortError",
    "RequestAbortedError",
    "InformationalError",
    "RequestContentLengthMismatchError",
    "ResponseContentLengthMismatchError",
    "ClientDestroyedError",
    "ClientClosedError",
    "SocketError",
    "NotSupportedError",
    "BalancedPoolMissingUpstreamError",
    "HTTPParserError",
    "ResponseExceededMaxSizeError",
    "RequestRetryError",
    "ResponseError",
    "SecureProxyConnectionError",
    "ProxyConnectionError",
    "MaxOriginsReachedError",
    "MessageSizeExceededError",
    "MaxRedirectionsError",
    "DecompressionError",
    "DOMException",
    "WebSocketError",
    "ExperimentalWarning",
]


class GreenHTTPError(Exception):
    """Base class of every greenhttp error. ``.code`` and ``.name`` identify it."""

    code: str = "GH_ERR"
    name: str = "GreenHTTPError"
    default_message: str = "greenhttp error"

    def __init__(self, message: str | None = None, *, cause: BaseException | None = None) -> None:
        self.message = message if message is not None else self.default_message
        super().__init__(self.message)
        if cause is not None:
            self.__cause__ = cause

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> Any:
        # Every attribute (message, an HTTPParserError's code and data, a
        # ResponseError's status_code…) as it is: __init__ is not run again.
        return (_rebuild, (self.__class__, dict(self.__dict__)))


def _rebuild(cls: type[GreenHTTPError], state: dict[str, Any]) -> GreenHTTPError:
    """Unpickle a :class:`GreenHTTPError` from its attributes."""
    err = cls.__new__(cls)
    Exception.__init__(err, state.get("message"))
    err.__dict__.update(state)
    return err


class ConnectTimeoutError(GreenHTTPError, TimeoutError):
    """The socket did not connect within the connect timeout."""

    code = "GH_ERR_CONNECT_TIMEOUT"
    name = "ConnectTimeoutError"
    default_message = "Connect Timeout Error"


class HeadersTimeoutError(GreenHTTPError, TimeoutError):
    """The complete response head did not arrive within ``headers_timeout``."""

    code = "GH_ERR_HEADERS_TIMEOUT"
    name = "HeadersTimeoutError"
    default_message = "Headers Timeout Error"


class HeadersOverflowError(GreenHTTPError):
    """The response head is larger than ``max_header_size``."""

    code = "GH_ERR_HEADERS_OVERFLOW"
    name = "HeadersOverflowError"
    default_message = "Headers Overflow Error"


class BodyTimeoutError(GreenHTTPError, TimeoutError):
    """No body data arrived for ``body_timeout`` seconds."""

    code = "GH_ERR_BODY_TIMEOUT"
    name = "BodyTimeoutError"
    default_message = "Body Timeout Error"


class InvalidArgumentError(GreenHTTPError, ValueError):
    """An option or argument is invalid; the message names it and its value."""

    code = "GH_ERR_INVALID_ARG"
    name = "InvalidArgumentError"
    default_message = "Invalid Argument Error"


class InvalidReturnValueError(GreenHTTPError):
    """A user callback returned a value of the wrong kind."""

    code = "GH_ERR_INVALID_RETURN_VALUE"
    name = "InvalidReturnValueError"
    default_message = "Invalid Return Value Error"


class AbortError(GreenHTTPError):
    """An operation was aborted."""

    code = "GH_ERR_ABORT"
    name = "AbortError"
    default_message = "The operation was aborted"


class RequestAbortedError(AbortError):
    """The request was aborted (signal, ``controller.abort()``, body closed early)."""

    code = "GH_ERR_ABORTED"
    name = "AbortError"
    default_message = "Request aborted"


class InformationalError(GreenHTTPError):
    """An internal, informational close (idle timeout, reset, upgrade)."""

    code = "GH_ERR_INFO"
    name = "InformationalError"
    default_message = "Request information"


class RequestContentLengthMismatchError(GreenHTTPError):
    """The request body length differs from its content-length header."""

    code = "GH_ERR_REQ_CONTENT_LENGTH_MISMATCH"
    name = "RequestContentLengthMismatchError"
    default_message = "Request body length does not match content-length header"


class ResponseContentLengthMismatchError(GreenHTTPError):
    """The response body length differs from its content-length header."""

    code = "GH_ERR_RES_CONTENT_LENGTH_MISMATCH"
    name = "ResponseContentLengthMismatchError"
    default_message = "Response body length does not match content-length header"


class ClientDestroyedError(GreenHTTPError):
    """The dispatcher was destroyed."""

    code = "GH_ERR_DESTROYED"
    name = "ClientDestroyedError"
    default_message = "The client is destroyed"


class ClientClosedError(GreenHTTPError):
    """The dispatcher was closed and takes no new requests."""

    code = "GH_ERR_CLOSED"
    name = "ClientClosedError"
    default_message = "The client is closed"


class SocketError(GreenHTTPError, ConnectionError):
    """The connection failed or the peer closed it. ``.socket`` describes it, or is None."""

    code = "GH_ERR_SOCKET"
    name = "SocketError"
    default_message = "Socket error"

    def __init__(
        self,
        message: str | None = None,
        socket: dict[str, Any] | None = None,
        *,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message, cause=cause)
        self.socket = socket


class NotSupportedError(GreenHTTPError):
    """The feature is not supported."""

    code = "GH_ERR_NOT_SUPPORTED"
    name = "NotSupportedError"
    default_message = "Not supported error"


class BalancedPoolMissingUpstreamError(GreenHTTPError):
    """A balanced pool has no upstream."""

    code = "GH_ERR_BPL_MISSING_UPSTREAM"
    name = "MissingUpstreamError"
    default_message = "No upstream has been added to the BalancedPool"


class HTTPParserError(GreenHTTPError):
    """The response does not follow RFC 9112. ``.code`` is ``HPE_*``; ``.data`` the bytes."""

    code = "HPE_INVALID"
    name = "HTTPParserError"
    default_message = "Response does not match the HTTP/1.1 protocol"

    def __init__(
        self,
        message: str | None = None,
        code: str | None = None,
        data: bytes | None = None,
        *,
        cause: BaseException | None = None,
    ) -> None:
        if message is not None:
            message = f"Response does not match the HTTP/1.1 protocol ({message})"
        super().__init__(message, cause=cause)
        if code is not None:
            self.code = code
        self.data = data


class ResponseExceededMaxSizeError(GreenHTTPError):
    """The response body is larger than ``max_response_size``."""

    code = "GH_ERR_RES_EXCEEDED_MAX_SIZE"
    name = "ResponseExceededMaxSizeError"
    default_message = "Response content exceeded max size"


class RequestRetryError(GreenHTTPError):
    """The retry interceptor gave up. Carries ``status_code``, ``headers``, ``data``."""

    code = "GH_ERR_REQ_RETRY"
    name = "RequestRetryError"
    default_message = "Request retry error"

    def __init__(
        self,
        message: str | None = None,
        status_code: int | None = None,
        headers: Any = None,
        data: Any = None,
        *,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message, cause=cause)
        self.status_code = status_code
        self.headers = headers
        self.data = data


class ResponseError(GreenHTTPError):
    """A 4xx/5xx response turned into an error. ``status_code``/``status``, ``headers``, ``body``."""

    code = "GH_ERR_RESPONSE"
    name = "ResponseError"
    default_message = "Response error"

    def __init__(
        self,
        message: str | None = None,
        status_code: int | None = None,
        headers: Any = None,
        body: Any = None,
        *,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message, cause=cause)
        self.status_code = status_code
        self.headers = headers
        self.body = body

    @property
    def status(self) -> int | None:
        """Alias of ``status_code``."""
        return self.status_code


class SecureProxyConnectionError(GreenHTTPError):
    """TLS to a proxy failed."""

    code = "GH_ERR_PRX_TLS"
    name = "SecureProxyConnectionError"
    default_message = "Secure Proxy Connection failed"


class ProxyConnectionError(GreenHTTPError):
    """The socket failed while a CONNECT tunnel was being established."""

    code = "GH_ERR_PRX_CONN"
    name = "ProxyConnectionError"
    default_message = "Proxy Connection failed"


class MaxOriginsReachedError(GreenHTTPError):
    """An Agent reached ``max_origins``."""

    code = "GH_ERR_MAX_ORIGINS_REACHED"
    name = "MaxOriginsReachedError"
    default_message = "Maximum allowed origins reached"


class MessageSizeExceededError(GreenHTTPError):
    """A WebSocket message grew past ``max_payload_size``."""

    code = "GH_ERR_WS_MESSAGE_SIZE_EXCEEDED"
    name = "MessageSizeExceededError"
    default_message = "Max decompressed message size exceeded"


class MaxRedirectionsError(GreenHTTPError):
    """A redirect arrived after ``max_redirections`` hops, with ``throw_on_max_redirect`` on."""

    code = "GH_ERR_MAX_REDIRECTIONS"
    name = "MaxRedirectionsError"
    default_message = "max redirects"


class DecompressionError(GreenHTTPError):
    """A response body could not be decoded: corrupt, truncated, or too many codings."""

    code = "GH_ERR_DECOMPRESSION"
    name = "DecompressionError"
    default_message = "Response body could not be decoded"


class DOMException(GreenHTTPError):
    """The WHATWG DOMException: ``.name`` is the kind (``"SyntaxError"``, ``"InvalidStateError"``…)."""

    code = "GH_ERR_DOM"

    def __init__(self, message: str = "", name: str = "Error") -> None:
        super().__init__(message)
        self.name = name


def usv(text: str) -> str:
    """``text`` as a WebIDL USVString: lone surrogates become U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class WebSocketError(DOMException):
    """A WebSocket closed abnormally, or a close to perform: ``close_code`` and ``reason``.

    ``WebSocketError(message="", init=None)``; ``init`` is a dict with only
    ``close_code`` and ``reason``. A non-empty reason without a code means 1000.
    An out-of-range code or a reason over 123 UTF-8 bytes raises
    :class:`DOMException` (``SyntaxError``/``InvalidAccessError``).
    """

    code = "GH_ERR_WEBSOCKET"

    def __init__(self, message: str = "", init: dict[str, Any] | None = None) -> None:
        super().__init__(message, "WebSocketError")
        init = dict(init or {})
        unknown = set(init) - {"close_code", "reason"}
        if unknown:  # as close(): a misspelt field ("closeCode") is refused, not ignored
            raise TypeError(f"unknown WebSocketError init field {sorted(unknown)[0]!r}")
        code = init.get("close_code")
        reason = init.get("reason")
        if reason is None:
            reason = ""
        elif not isinstance(reason, str):  # as close() (check_close)
            raise TypeError(f"reason must be a string, got {reason!r}")
        if code is not None:
            # WebIDL [EnforceRange] unsigned short: a finite number in 0-65535, else TypeError.
            if (
                isinstance(code, bool)
                or not isinstance(code, (int, float))
                or not math.isfinite(code)
                or not 0 <= int(code) <= 65535
            ):
                raise TypeError(f"close_code must be an integer in 0-65535, got {code!r}")
            code = int(code)
            if not (code == 1000 or 3000 <= code <= 4999):
                raise DOMException(
                    f"close_code must be 1000 or in 3000-4999, got {code!r}", "InvalidAccessError"
                )
        reason = usv(reason)
        size = len(reason.encode("utf-8"))
        if size > 123:
            raise DOMException(f"reason must be at most 123 UTF-8 bytes, got {size}", "SyntaxError")
        if code is None and reason:
            code = 1000
        self._close_code: int | None = code
        self._reason: str = reason

    @classmethod
    def _closed_with(cls, message: str, code: int | None, reason: str = "") -> WebSocketError:
        """One the library reports: its code may be one the constructor refuses
        (1002, 1006…), as it was received or decided, not given by a user."""
        err = cls(message)
        err._close_code = code
        err._reason = reason
        return err

    @property
    def close_code(self) -> int | None:
        """The close code (read-only), or None."""
        return self._close_code

    @property
    def reason(self) -> str:
        """The close reason (read-only), "" without one."""
        return self._reason


class ExperimentalWarning(Warning):
    """Issued once per process by experimental features (WebSocketStream, decompress).

    ``.code`` names the feature, e.g. ``"GREENHTTP-WSS"``.
    """

    def __init__(self, message: str = "", code: str | None = None) -> None:
        super().__init__(message)
        self.code = code
