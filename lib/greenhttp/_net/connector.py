"""The connector: opens the socket a dispatcher talks HTTP over (spec 2.3, 4.2).

``build_connector(**options)`` validates every option once and returns a
:class:`Connector`, a callable::

    sock = connector({"hostname": "example.com", "protocol": "https:", "port": "443"})
    connector(options, callback)      # callback(err, sock) exactly once; never raises

Calling it **blocks the calling greenlet** until the socket is connected (and
the TLS handshake done); other greenlets keep running. A connector is
greenlet-safe: any number of greenlets may call it at once.

* ``http:`` gives a connected ``gevent.socket.socket`` with ``TCP_NODELAY``,
  ``SO_KEEPALIVE`` + ``TCP_KEEPIDLE`` (``keep_alive``) and ``IP_TOS`` /
  ``IPV6_TCLASS`` (``type_of_service``) set; ``https:`` a ``gevent.ssl.SSLSocket``
  whose handshake is done, ALPN offered as ``allow_h2``/``prefer_h2`` say
  (read the outcome with ``sock.selected_alpn_protocol()``).
* ``socket_path`` connects an ``AF_UNIX`` socket to that path instead (TLS
  on top for ``https:``; the hostname still gives the SNI).
* The connect timeout covers resolution, TCP connect and TLS handshake; on
  expiry the half-open socket is closed and :class:`ConnectTimeoutError` is
  raised. Other failures raise the ``OSError``/``ssl.SSLError`` unchanged
  (``ConnectionRefusedError`` has ``errno == ECONNREFUSED``), never leaking a
  socket.

**TLS session cache.** Sessions are kept per ``servername`` (or else
``hostname``) and port, at most ``max_cached_sessions`` (LRU; 0 disables),
and offered on the next connection to the same key
(``sock.session_reused`` tells whether the server accepted). A TLS 1.2
session is stored right after the handshake. A TLS 1.3 server sends its
session ticket *after* the handshake and the client only sees it once it has
read from the socket: the socket stores it as it closes (:class:`_TLSSocket`),
and, sooner, the dispatcher calls
:meth:`Connector.remember_session` after the first response on a
connection (or when it releases the connection); the call is cheap and
harmless to repeat, and a no-op for plain sockets. A dispatcher whose
``connect`` is a function wrapping a connector (to check each socket, say)
cannot call the connector's method: it calls :func:`remember_session_of`,
which finds the connector that made the socket.
"""

from __future__ import annotations

import ipaddress
import math
import os
import socket as _stdsocket
import ssl
import weakref
from collections.abc import Callable
from typing import Any

import gevent
from gevent import socket as gsocket
from gevent.ssl import SSLSocket

from .._runtime import timer_seconds
from ..errors import ConnectTimeoutError, InvalidArgumentError, SocketError
from . import happy_eyeballs as he
from .tls import SessionCache, TLSConfig, alpn_protocols, is_resumable, start_tls

__all__ = ["build_connector", "Connector", "socket_info", "remember_session_of"]

# The connector that made each TLS socket it handed out, and the socket's session
# key: what remember_session_of() needs when the socket went through a wrapper.
_MAKERS: weakref.WeakKeyDictionary[Any, tuple[Connector, str]] = weakref.WeakKeyDictionary()


def remember_session_of(sock: Any, options: dict[str, Any] | None = None) -> bool:
    """:meth:`Connector.remember_session` for ``sock``, on the connector that made it
    (None made by one: False). ``options`` is unused: the key is the one the socket
    was made for. Never blocks, never raises; greenlet-safe."""
    try:
        made = _MAKERS.get(sock)
    except TypeError:  # not weakly referable, or unhashable: no connector of ours made it
        return False
    if made is None:
        return False
    connector, key = made
    return connector._store_session(sock, key)

class _TLSSocket(SSLSocket):  # type: ignore[misc]  # (gevent has no type hints)
    """gevent's ``SSLSocket``, giving its session to the connector's cache as it closes.

    The original stores a TLS 1.3 session when its socket's ``session`` event
    fires; Python's ``ssl`` has no such event, and the ticket a TLS 1.3 server
    sends after the handshake is only seen once the socket has read. A socket
    closed after a response has read it, so a connector used on its own (not
    through a dispatcher, which calls :meth:`Connector.remember_session`)
    still resumes its next connection.
    """

    def close(self) -> None:
        remember_session_of(self)
        super().close()


ConnectCallback = Callable[[BaseException | None, Any], Any]

_TLS_PROTOCOLS = {"https:": True, "wss:": True, "http:": False, "ws:": False}


# --------------------------------------------------------------------------- validation


def _bool(name: str, value: Any, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be a boolean, got {value!r}")
    return value


def _seconds(name: str, value: Any, default: float, *, positive: bool = False) -> float:
    if value is None:
        return default
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        kind = "a positive" if positive else "a non-negative"
        raise InvalidArgumentError(f"{name} must be {kind} number of seconds, got {value!r}")
    return float(value)


def _port(name: str, value: Any) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 65536:
        raise InvalidArgumentError(f"{name} must be an integer from 1 to 65535, got {value!r}")
    return value


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _servername_from_host(host: Any) -> str | None:
    """The Host header value minus its port; None for an IP literal (spec 2.3)."""
    if not isinstance(host, str) or not host:
        return None
    if host.startswith("["):  # "[::1]:443" is always an IPv6 literal
        return None
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if not name or _is_ip(name):
        return None
    return name


# --------------------------------------------------------------------------- public


def socket_info(sock: Any) -> dict[str, Any]:
    """Describe ``sock`` for ``SocketError.socket``; never raises, never blocks.

    Keys: ``local_address``, ``local_port``, ``remote_address``,
    ``remote_port``, ``remote_family`` (``"IPv4"``, ``"IPv6"``, ``"unix"`` or
    None). Values the socket can no longer tell (closed) are None.
    """
    info: dict[str, Any] = dict.fromkeys(
        ("local_address", "local_port", "remote_address", "remote_port", "remote_family")
    )
    try:
        family = sock.family
    except Exception:
        return info
    info["remote_family"] = {
        _stdsocket.AF_INET: "IPv4",
        _stdsocket.AF_INET6: "IPv6",
        getattr(_stdsocket, "AF_UNIX", -1): "unix",
    }.get(family)
    for prefix, getter in (("local", "getsockname"), ("remote", "getpeername")):
        try:
            addr = getattr(sock, getter)()
        except Exception:
            continue
        if isinstance(addr, tuple):
            info[f"{prefix}_address"], info[f"{prefix}_port"] = addr[0], addr[1]
        else:
            info[f"{prefix}_address"] = os.fsdecode(addr) if addr else None
    return info


def socket_failure(exc: BaseException, sock: Any) -> SocketError:
    """What ``sock`` raised (an ``OSError``, or anything a custom socket raises),
    as the ``SocketError`` the requests on it get, with ``exc`` as its cause."""
    return SocketError(str(exc) or exc.__class__.__name__, socket_info(sock), cause=exc)


class Connector:
    """A connector function object; build it with :func:`build_connector`.

    ``connector(options, callback=None)`` blocks the calling greenlet until
    connected and is greenlet-safe. Attributes mirror the validated options
    (read-only by convention).
    """

    def __init__(
        self,
        *,
        allow_h2: bool,
        prefer_h2: bool,
        max_cached_sessions: int,
        socket_path: str | None,
        timeout: float,
        port: int | None,
        keep_alive: bool,
        keep_alive_initial_delay: float,
        type_of_service: int | None,
        auto_select_family: bool,
        auto_select_family_attempt_timeout: float,
        servername: str | None,
        tls: TLSConfig,
    ) -> None:
        self.allow_h2 = allow_h2
        self.prefer_h2 = prefer_h2
        self.max_cached_sessions = max_cached_sessions
        self.socket_path = socket_path
        self.timeout = timeout
        self.port = port
        self.keep_alive = keep_alive
        self.keep_alive_initial_delay = keep_alive_initial_delay
        self.type_of_service = type_of_service
        self.auto_select_family = auto_select_family
        self.auto_select_family_attempt_timeout = auto_select_family_attempt_timeout
        self.servername = servername
        self.alpn_protocols = list(tls.alpn)
        self._tls = tls
        self.sessions = SessionCache(max_cached_sessions)
        #: ``resolve(host, port) -> list of getaddrinfo rows``; blocks the calling
        #: greenlet. Replace it to pin names to addresses (tests, a DNS cache).
        self.resolve: Callable[[str, int], list[he.AddrInfo]] = he.resolve

    def __repr__(self) -> str:
        return (
            f"<Connector timeout={self.timeout}s alpn={self.alpn_protocols} "
            f"socket_path={self.socket_path!r} sessions={len(self.sessions)}>"
        )

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """The SSL context every ``https:`` connection uses (built on first access)."""
        return self._tls.context()

    # ---------------------------------------------------------------- calling

    def __call__(self, options: dict[str, Any], callback: ConnectCallback | None = None) -> Any:
        """Open a socket as ``options`` describe; block the calling greenlet until connected.

        Without ``callback`` return the socket or raise. With ``callback``,
        call ``callback(err, sock)`` exactly once (``err`` None on success,
        ``sock`` None on failure) and return the socket or None, without
        raising (an exception raised *by* the callback propagates).
        """
        if callback is None:
            return self._connect(options)
        if not callable(callback):
            # Checked first: a socket connected for a callback that cannot take it would leak.
            raise InvalidArgumentError(f"callback must be callable, got {callback!r}")
        try:
            sock = self._connect(options)
        except Exception as err:
            callback(err, None)
            return None
        callback(None, sock)
        return sock

    def session_key(self, options: dict[str, Any]) -> str:
        """The session cache key for ``options``: ``servername or hostname`` + ``:port``."""
        name = self._servername(options) or _strip_brackets(options.get("hostname") or "")
        return f"{name}:{self._target_port(options)}"

    def remember_session(self, sock: Any, options: dict[str, Any]) -> bool:
        """Store ``sock``'s TLS session under ``options``' key if it can be resumed.

        Call it after the first response was read on a TLS connection (TLS 1.3
        tickets arrive after the handshake). Returns whether a session was
        stored. Never blocks, never raises; greenlet-safe.
        """
        return self._store_session(sock, self.session_key(options))

    def _store_session(self, sock: Any, key: str) -> bool:
        if self.max_cached_sessions == 0:
            return False
        session = is_resumable(sock)
        if session is None:
            return False
        self.sessions.set(key, session)
        return True

    # ---------------------------------------------------------------- internals

    def _servername(self, options: dict[str, Any]) -> str | None:
        return (
            options.get("servername")
            or self.servername
            or _servername_from_host(options.get("host"))
        )

    def _target_port(self, options: dict[str, Any]) -> int:
        given = options.get("port")
        # As in the original (``port || default``): 0 or "" means "not given".
        port = None if given in (0, "0") else _port("port", given)
        if port is not None:
            return port
        if self.port is not None:
            return self.port
        return 443 if _TLS_PROTOCOLS.get(options.get("protocol") or "http:") else 80

    def _connect(self, options: dict[str, Any]) -> Any:
        if not isinstance(options, dict):
            raise InvalidArgumentError(f"connector options must be a dict, got {options!r}")
        protocol = options.get("protocol") or "http:"
        if protocol not in _TLS_PROTOCOLS:
            raise InvalidArgumentError(f"protocol must be 'http:' or 'https:', got {protocol!r}")
        use_tls = _TLS_PROTOCOLS[protocol]
        hostname = options.get("hostname")
        if not isinstance(hostname, str) or not hostname:
            raise InvalidArgumentError(f"hostname must be a non-empty string, got {hostname!r}")
        hostname = _strip_brackets(hostname)
        port = self._target_port(options)
        http_socket = options.get("http_socket")
        if http_socket is not None and not use_tls:
            raise InvalidArgumentError(
                f"http_socket is only for a TLS upgrade (protocol 'https:'), got {protocol!r}"
            )
        local_address = options.get("local_address")
        socket_path = options.get("socket_path") or self.socket_path
        attempted: list[str] = []

        timer = gevent.Timeout(timer_seconds(self.timeout)) if self.timeout > 0 else None
        if timer is not None:
            timer.start()
        try:
            if http_socket is not None:
                raw = http_socket
            elif socket_path:
                attempted.append(os.fsdecode(socket_path))
                raw = he.open_socket(
                    (_stdsocket.AF_UNIX, _stdsocket.SOCK_STREAM, 0, "", os.fsdecode(socket_path))
                )
            else:
                raw = self._open_tcp(hostname, port, local_address, attempted)
            if not use_tls:
                return raw
            return self._start_tls(raw, options, hostname)
        except gevent.Timeout as exc:
            if exc is not timer:
                raise
            if len(attempted) > 1:
                where = f"attempted addresses: {', '.join(attempted)}"
            elif socket_path and http_socket is None:
                where = f"attempted address: {os.fsdecode(socket_path)}"
            else:
                where = f"attempted address: {hostname}:{port}"
            raise ConnectTimeoutError(
                f"Connect Timeout Error ({where}, timeout: {self.timeout}s)"
            ) from None
        finally:
            if timer is not None:
                timer.close()

    def _open_tcp(
        self, hostname: str, port: int, local_address: str | None, attempted: list[str]
    ) -> gsocket.socket:
        infos = self.resolve(hostname, port)

        def connect(ai: he.AddrInfo) -> gsocket.socket:
            return he.open_socket(ai, local_address)

        if self.auto_select_family and len(infos) > 1:
            sock = he.connect_staggered(
                infos, connect, self.auto_select_family_attempt_timeout, attempted
            )
        else:

            def connect_recorded(ai: he.AddrInfo) -> gsocket.socket:
                attempted.append(he.format_sockaddr(ai[4]))
                return connect(ai)

            sock = he.connect_sequential(infos, connect_recorded)
        try:
            self._tune(sock)
        except BaseException:
            sock.close()
            raise
        return sock

    def _tune(self, sock: gsocket.socket) -> None:
        """Set the TCP options on a connected socket."""
        sock.setsockopt(_stdsocket.IPPROTO_TCP, _stdsocket.TCP_NODELAY, 1)
        if self.keep_alive:
            sock.setsockopt(_stdsocket.SOL_SOCKET, _stdsocket.SO_KEEPALIVE, 1)
            # As Node's setKeepAlive: an initial delay of 0 keeps the system default.
            idle = getattr(_stdsocket, "TCP_KEEPIDLE", None) or getattr(
                _stdsocket, "TCP_KEEPALIVE", None
            )
            if self.keep_alive_initial_delay > 0 and idle is not None:
                seconds = max(1, int(self.keep_alive_initial_delay))
                sock.setsockopt(_stdsocket.IPPROTO_TCP, idle, seconds)
        if self.type_of_service is not None:
            if sock.family == _stdsocket.AF_INET6:
                sock.setsockopt(
                    _stdsocket.IPPROTO_IPV6, _stdsocket.IPV6_TCLASS, self.type_of_service
                )
            else:
                sock.setsockopt(_stdsocket.IPPROTO_IP, _stdsocket.IP_TOS, self.type_of_service)

    def _start_tls(self, raw: Any, options: dict[str, Any], hostname: str) -> Any:
        try:
            context = self._tls.context()
        except BaseException:
            raw.close()
            raise
        # Python sends no SNI for an IP literal, and needs a name to check the
        # certificate against: the servername, or else the hostname itself.
        server_hostname = self._servername(options) or hostname
        if len(server_hostname) > 1 and server_hostname.endswith("."):
            # RFC 6066 section 3: SNI carries no trailing dot; "example.com." is
            # also checked against the certificate as "example.com" (as Node does).
            server_hostname = server_hostname[:-1]
        key = self.session_key(options)
        session = self.sessions.get(key) if self.max_cached_sessions else None
        try:
            sock = start_tls(raw, context, server_hostname, session, _TLSSocket)
        except (OSError, gevent.Timeout):
            # Any failed handshake (an SSLError, a reset, the connect timeout)
            # drops the session: it may be what the server chokes on.
            self.sessions.delete(key)
            raise
        if self.max_cached_sessions:
            self._store_session(sock, key)
            try:
                _MAKERS[sock] = (self, key)
            except TypeError:  # a socket class without weak references: no later ticket
                pass
        return sock


def _strip_brackets(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


_DEFAULTS: dict[str, Any] = {
    "allow_h2": True,
    "prefer_h2": False,
    "max_cached_sessions": 100,
    "socket_path": None,
    "timeout": 10.0,
    "port": None,
    "keep_alive": True,
    "keep_alive_initial_delay": 60.0,
    "type_of_service": None,
    "auto_select_family": False,
    "auto_select_family_attempt_timeout": 0.25,
    "ssl_context": None,
    "cafile": None,
    "capath": None,
    "cadata": None,
    "certfile": None,
    "keyfile": None,
    "password": None,
    "verify": True,
    "check_hostname": None,
    "minimum_version": None,
    "ciphers": None,
    "servername": None,
}


def build_connector(
    *,
    allow_h2: bool | None = True,
    prefer_h2: bool | None = False,
    max_cached_sessions: int | None = 100,
    socket_path: str | os.PathLike[str] | None = None,
    timeout: float | None = 10.0,
    port: int | str | None = None,
    keep_alive: bool | None = True,
    keep_alive_initial_delay: float | None = 60.0,
    type_of_service: int | None = None,
    auto_select_family: bool | None = False,
    auto_select_family_attempt_timeout: float | None = 0.25,
    ssl_context: ssl.SSLContext | None = None,
    cafile: str | os.PathLike[str] | None = None,
    capath: str | os.PathLike[str] | None = None,
    cadata: str | bytes | None = None,
    certfile: str | os.PathLike[str] | None = None,
    keyfile: str | os.PathLike[str] | None = None,
    password: str | bytes | Callable[[], str | bytes] | None = None,
    verify: bool | None = True,
    check_hostname: bool | None = None,
    minimum_version: ssl.TLSVersion | None = None,
    ciphers: str | None = None,
    servername: str | None = None,
    **unknown: Any,
) -> Connector:
    """Validate the options and return a :class:`Connector` (spec 4.2).

    See ``docs/connector.md`` for the table. Durations are in seconds;
    ``None`` means the default; ``timeout=0`` disables the connect timeout.
    Raises :class:`InvalidArgumentError` naming the option and the value for
    anything invalid or unknown. Does not block (unless a TLS option makes it
    read certificate files); greenlet-safe.
    """
    given = dict(locals())
    if unknown:
        name = sorted(unknown)[0]
        raise InvalidArgumentError(
            f"unknown connector option {name!r}, got {name}={unknown[name]!r}"
        )
    o = {k: v for k, v in given.items() if k in _DEFAULTS}
    allow_h2 = _bool("allow_h2", o["allow_h2"], True)
    prefer_h2 = _bool("prefer_h2", o["prefer_h2"], False)
    mcs = o["max_cached_sessions"]
    if mcs is None:
        mcs = 100
    if not isinstance(mcs, int) or isinstance(mcs, bool) or mcs < 0:
        raise InvalidArgumentError(
            f"max_cached_sessions must be a non-negative integer, got {mcs!r}"
        )
    socket_path = o["socket_path"]
    if socket_path is not None:
        if not isinstance(socket_path, (str, bytes, os.PathLike)) or not os.fspath(socket_path):
            raise InvalidArgumentError(f"socket_path must be a non-empty path, got {socket_path!r}")
        socket_path = os.fsdecode(os.fspath(socket_path))
    tos = o["type_of_service"]
    if tos is not None and (
        not isinstance(tos, int) or isinstance(tos, bool) or not 0 <= tos <= 255
    ):
        raise InvalidArgumentError(f"type_of_service must be an integer from 0 to 255, got {tos!r}")
    servername = o["servername"]
    if servername is not None and (not isinstance(servername, str) or not servername):
        raise InvalidArgumentError(f"servername must be a non-empty string, got {servername!r}")
    attempt = _seconds(
        "auto_select_family_attempt_timeout",
        o["auto_select_family_attempt_timeout"],
        0.25,
        positive=True,
    )
    tls = TLSConfig(
        alpn=alpn_protocols(allow_h2, prefer_h2),
        ssl_context=o["ssl_context"],
        cafile=o["cafile"],
        capath=o["capath"],
        cadata=o["cadata"],
        certfile=o["certfile"],
        keyfile=o["keyfile"],
        password=o["password"],
        verify=o["verify"],
        check_hostname=o["check_hostname"],
        minimum_version=o["minimum_version"],
        ciphers=o["ciphers"],
    )
    return Connector(
        allow_h2=allow_h2,
        prefer_h2=prefer_h2,
        max_cached_sessions=mcs,
        socket_path=socket_path,
        timeout=_seconds("timeout", o["timeout"], 10.0),
        port=_port("port", o["port"]),
        keep_alive=_bool("keep_alive", o["keep_alive"], True),
        keep_alive_initial_delay=_seconds(
            "keep_alive_initial_delay", o["keep_alive_initial_delay"], 60.0
        ),
        type_of_service=tos,
        auto_select_family=_bool("auto_select_family", o["auto_select_family"], False),
        # RFC 8305 section 5 and Node both put a floor under the attempt delay: 10 ms.
        auto_select_family_attempt_timeout=max(attempt, 0.01),
        servername=servername,
        tls=tls,
    )
