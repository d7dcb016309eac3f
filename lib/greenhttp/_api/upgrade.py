"""``upgrade()`` and ``connect()``: requests that end in a raw socket.

Both park the caller until the connection hands over its socket (after a
``101 Switching Protocols``, or after the answer to ``CONNECT``). The socket
leaves the client: the client reconnects for later requests.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._runtime import Parker
from ..errors import InvalidArgumentError, RequestAbortedError, ResponseError, SocketError
from .request import bind_signal

__all__ = ["UpgradeData", "ConnectData", "upgrade", "connect"]


class UpgradeData(NamedTuple):
    """The result of ``upgrade()``: response ``headers``, the ``socket``, ``opaque``, ``context``."""

    headers: Any
    socket: Any
    opaque: Any = None
    context: Any = None


class ConnectData(NamedTuple):
    """The result of ``connect()``: ``status_code``, ``headers``, ``socket``, ``opaque``, ``context``."""

    status_code: int
    headers: Any
    socket: Any
    opaque: Any = None
    context: Any = None


class SocketWaiter:
    """The dispatch handler of a request answered with a socket (an upgrade, a
    ``CONNECT``, a WebSocket handshake): it parks its caller until the
    connection hands the socket over, or the request fails.

    A subclass says what the caller gets for the socket (:meth:`_handed`) and
    what a final answer without one means (``on_response_start``).
    """

    __slots__ = ("parker", "controller", "context", "abort_reason", "socket", "unbind")

    def __init__(self) -> None:
        self.parker = Parker()
        self.controller: Any = None
        self.context: Any = None
        self.abort_reason: BaseException | None = None
        self.socket: Any = None  # once handed over
        self.unbind: Any = None  # what unbinds the signal

    def _handed(self, controller: Any, status_code: int, headers: Any, socket: Any) -> Any:
        raise NotImplementedError

    def abort(self, reason: BaseException) -> None:
        """From a signal: abort now, or as soon as the request starts."""
        if self.abort_reason is not None:
            return
        self.abort_reason = reason
        if self.controller is not None:
            self.controller.abort(reason)
        else:
            self.parker.set_exception(reason)

    def give_up(self) -> None:
        """The caller stopped waiting (a timeout, a kill): abort the request, or close
        the socket it already got, which nobody will take now."""
        if not self.parker.ready():
            self.abort(RequestAbortedError())
        elif self.socket is not None:
            self.socket.close()

    def on_request_start(self, controller: Any, context: Any) -> None:
        self.controller = controller
        self.context = context
        if self.abort_reason is not None:
            controller.abort(self.abort_reason)

    def on_request_upgrade(self, controller: Any, status_code: int, headers: Any, socket: Any) -> None:
        self.socket = socket
        self.parker.set(self._handed(controller, status_code, headers, socket))

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        return None

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        return None

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        self.parker.set_exception(err)


def wait_for_socket(dispatcher: Any, options: dict[str, Any], handler: SocketWaiter, signal: Any) -> Any:
    """Dispatch ``options`` with ``handler`` and block until the socket is handed
    over (what ``handler._handed`` made of it) or the request fails. ``signal``
    aborts it; a caller interrupted while it waits gives the request up."""
    return await_socket(start_socket_wait(dispatcher, options, handler, signal))


def start_socket_wait(dispatcher: Any, options: dict[str, Any], handler: SocketWaiter, signal: Any) -> SocketWaiter:
    """The first half of :func:`wait_for_socket`: bind ``signal`` and dispatch. Never blocks."""
    handler.unbind = bind_signal(signal, handler.abort) if signal is not None else None
    try:
        dispatcher.dispatch(options, handler)
    except BaseException:
        _unbind(handler)
        raise
    return handler


def await_socket(handler: SocketWaiter) -> Any:
    """The second half of :func:`wait_for_socket`: block until the socket or the failure."""
    try:
        return handler.parker.get()
    except BaseException as exc:
        if not isinstance(exc, Exception):
            handler.give_up()
        raise
    finally:
        _unbind(handler)


def _unbind(handler: SocketWaiter) -> None:
    unbind, handler.unbind = handler.unbind, None
    if unbind is not None:
        unbind()


class _UpgradeHandler(SocketWaiter):
    __slots__ = ("opaque", "raw", "is_connect")

    def __init__(self, opaque: Any, raw: bool, is_connect: bool) -> None:
        super().__init__()
        self.opaque = opaque
        self.raw = raw
        self.is_connect = is_connect

    def _handed(self, controller: Any, status_code: int, headers: Any, socket: Any) -> Any:
        if self.raw:
            headers = controller.raw_headers
        if self.is_connect:
            return ConnectData(status_code, headers, socket, self.opaque, self.context)
        return UpgradeData(headers, socket, self.opaque, self.context)

    def on_response_start(self, controller: Any, status_code: int, headers: Any, message: str) -> None:
        if status_code < 200:
            return
        if self.is_connect:
            # An HTTP/2 CONNECT refused (a tunnel comes as an upgrade): the same
            # error as a refusal on HTTP/1.1, whose socket connect() closes.
            controller.abort(_refused(status_code, controller.raw_headers if self.raw else headers))
        else:
            controller.abort(SocketError("bad upgrade"))


def _start(dispatcher: Any, options: dict[str, Any], is_connect: bool) -> SocketWaiter:
    opaque = options.pop("opaque", None)
    signal = options.pop("signal", None)
    response_headers = options.pop("response_headers", None)
    if response_headers not in (None, "raw"):
        raise InvalidArgumentError(f"response_headers must be 'raw' or None, got {response_headers!r}")
    handler = _UpgradeHandler(opaque, response_headers == "raw", is_connect)
    return start_socket_wait(dispatcher, options, handler, signal)


def upgrade(dispatcher: Any, options: dict[str, Any]) -> UpgradeData:
    """Block until the server switches protocols; returns :class:`UpgradeData`."""
    data: UpgradeData = await_socket(start_upgrade(dispatcher, options))
    return data


def start_upgrade(dispatcher: Any, options: dict[str, Any]) -> SocketWaiter:
    """Check the options of an upgrade and dispatch it; never blocks (:func:`await_socket` waits)."""
    protocol = options.pop("protocol", "Websocket")
    if not isinstance(protocol, str):
        raise InvalidArgumentError(f"protocol must be a string, got {protocol!r}")
    options["upgrade"] = protocol
    options.setdefault("method", "GET")
    return _start(dispatcher, options, False)


def connect(dispatcher: Any, options: dict[str, Any]) -> ConnectData:
    """Block until the CONNECT is answered; returns :class:`ConnectData` with the tunnel.

    A non-2xx answer raises :class:`ResponseError` carrying ``status_code``
    and ``headers`` (the tunnel socket is closed).
    """
    return finish_connect(start_connect(dispatcher, options))


def start_connect(dispatcher: Any, options: dict[str, Any]) -> SocketWaiter:
    """Dispatch a CONNECT; never blocks (:func:`finish_connect` waits)."""
    options["method"] = "CONNECT"
    return _start(dispatcher, options, True)


def finish_connect(started: SocketWaiter) -> ConnectData:
    """Wait for the answer to a :func:`start_connect`; a non-2xx one raises :class:`ResponseError`."""
    data: ConnectData = await_socket(started)
    if not 200 <= data.status_code < 300:
        data.socket.close()
        raise _refused(data.status_code, data.headers)
    return data


def _refused(status_code: int, headers: Any) -> ResponseError:
    """The error of a CONNECT answered outside 2xx."""
    return ResponseError(f"CONNECT answered with status {status_code}", status_code, headers)
