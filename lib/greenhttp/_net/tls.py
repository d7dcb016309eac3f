"""TLS for the connector: the SSL context, ALPN, the client handshake and the session cache.

* :class:`TLSConfig` validates the TLS options of :func:`build_connector` once
  and builds **one** :class:`ssl.SSLContext` per connector. When the caller
  gave no TLS option at all, the (default, cannot-fail) context is built
  lazily on the first ``https:`` connection, because loading the system CA
  store costs tens of milliseconds and most clients speak only ``http:``.
  When any option is given, the context is built at once so a bad ``cafile``
  or cipher string raises :class:`~greenhttp.errors.InvalidArgumentError`
  from ``build_connector`` itself.
* A user ``ssl_context`` is used as is, except that ALPN is set on it
  (``set_alpn_protocols``) to the list ``allow_h2``/``prefer_h2`` select:
  an ``SSLContext`` cannot be copied, and ALPN is how the client learns
  whether to speak HTTP/2.
* :func:`start_tls` wraps a connected socket in a gevent ``SSLSocket`` and
  runs the handshake; on any failure the socket is closed.
* :class:`SessionCache` is a small LRU of :class:`ssl.SSLSession` objects.

Nothing here blocks except :func:`start_tls` (the handshake blocks the
calling greenlet only). Everything is greenlet-safe: the cache and the lazy
context never yield to the hub while changing state.
"""

from __future__ import annotations

import os
import ssl
from collections import OrderedDict
from typing import Any

from gevent.ssl import SSLSocket

from ..errors import InvalidArgumentError

__all__ = ["TLSConfig", "SessionCache", "alpn_protocols", "start_tls", "is_resumable"]

_PathLike = (str, bytes, os.PathLike)


def alpn_protocols(allow_h2: bool, prefer_h2: bool) -> list[str]:
    """The ALPN offer: ``http/1.1`` first unless ``prefer_h2``; no ``h2`` without ``allow_h2``."""
    if not allow_h2:
        return ["http/1.1"]
    return ["h2", "http/1.1"] if prefer_h2 else ["http/1.1", "h2"]


def _check_path(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, _PathLike) or not os.fspath(value):
        raise InvalidArgumentError(f"{name} must be a non-empty path, got {value!r}")
    path = os.fspath(value)
    return os.fsdecode(path)


class TLSConfig:
    """Validated TLS options and the one SSL context built from them.

    ``context()`` never blocks and is greenlet-safe.
    """

    def __init__(
        self,
        *,
        alpn: list[str],
        ssl_context: ssl.SSLContext | None = None,
        cafile: Any = None,
        capath: Any = None,
        cadata: Any = None,
        certfile: Any = None,
        keyfile: Any = None,
        password: Any = None,
        verify: bool | None = True,
        check_hostname: bool | None = None,
        minimum_version: ssl.TLSVersion | None = None,
        ciphers: str | None = None,
    ) -> None:
        self.alpn = alpn
        if verify is None:
            verify = True
        if not isinstance(verify, bool):
            raise InvalidArgumentError(f"verify must be a boolean, got {verify!r}")
        if check_hostname is not None and not isinstance(check_hostname, bool):
            raise InvalidArgumentError(
                f"check_hostname must be a boolean or None, got {check_hostname!r}"
            )
        if check_hostname and not verify:
            raise InvalidArgumentError(
                f"check_hostname=True requires verify=True, got verify={verify!r}"
            )
        self._cafile = _check_path("cafile", cafile)
        self._capath = _check_path("capath", capath)
        self._certfile = _check_path("certfile", certfile)
        self._keyfile = _check_path("keyfile", keyfile)
        if cadata is not None and not isinstance(cadata, (str, bytes, bytearray)):
            raise InvalidArgumentError(f"cadata must be str or bytes, got {cadata!r}")
        self._cadata = cadata
        if password is not None and not (
            isinstance(password, (str, bytes, bytearray)) or callable(password)
        ):
            raise InvalidArgumentError(
                f"password must be str, bytes or a callable, got {type(password).__name__}"
            )
        if (self._keyfile is not None or password is not None) and self._certfile is None:
            raise InvalidArgumentError(
                f"keyfile and password require certfile, got certfile={certfile!r}"
            )
        self._password = password
        if minimum_version is not None and not isinstance(minimum_version, ssl.TLSVersion):
            raise InvalidArgumentError(
                f"minimum_version must be an ssl.TLSVersion, got {minimum_version!r}"
            )
        self._minimum_version = minimum_version
        if ciphers is not None and (not isinstance(ciphers, str) or not ciphers):
            raise InvalidArgumentError(f"ciphers must be a non-empty string, got {ciphers!r}")
        self._ciphers = ciphers
        self._verify = verify
        self._check_hostname = verify if check_hostname is None else check_hostname
        self._context: ssl.SSLContext | None = None

        explicit = {
            "cafile": cafile,
            "capath": capath,
            "cadata": cadata,
            "certfile": certfile,
            "keyfile": keyfile,
            "password": password,
            "check_hostname": check_hostname,
            "minimum_version": minimum_version,
            "ciphers": ciphers,
        }
        if ssl_context is not None:
            if not isinstance(ssl_context, ssl.SSLContext):
                raise InvalidArgumentError(
                    f"ssl_context must be an ssl.SSLContext, got {ssl_context!r}"
                )
            for name, value in explicit.items():
                if value is not None:
                    raise InvalidArgumentError(
                        f"{name} cannot be combined with ssl_context, got {name}={value!r}"
                    )
            if not verify:
                raise InvalidArgumentError(
                    "verify cannot be combined with ssl_context "
                    "(configure the context instead), got verify=False"
                )
            ssl_context.set_alpn_protocols(alpn)
            self._context = ssl_context
        elif any(v is not None for v in explicit.values()) or not verify:
            # Build now so a bad file or cipher string fails in build_connector().
            self._context = self._build()

    def context(self) -> ssl.SSLContext:
        """The connector's SSL context (built on first use when no TLS option was given)."""
        if self._context is None:
            self._context = self._build()
        return self._context

    def _build(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = self._check_hostname
        ctx.verify_mode = ssl.CERT_REQUIRED if self._verify else ssl.CERT_NONE
        try:
            if self._cafile or self._capath or self._cadata is not None:
                ctx.load_verify_locations(self._cafile, self._capath, self._cadata)
            elif self._verify:
                ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        except (OSError, ValueError) as exc:
            raise InvalidArgumentError(
                f"cafile/capath/cadata could not be loaded, got cafile={self._cafile!r}, "
                f"capath={self._capath!r}: {exc}",
                cause=exc,
            ) from exc
        if self._certfile is not None:
            try:
                ctx.load_cert_chain(self._certfile, self._keyfile, self._password)
            except (OSError, ValueError) as exc:
                raise InvalidArgumentError(
                    f"certfile/keyfile could not be loaded, got certfile={self._certfile!r}, "
                    f"keyfile={self._keyfile!r}: {exc}",
                    cause=exc,
                ) from exc
        if self._minimum_version is not None:
            ctx.minimum_version = self._minimum_version
        if self._ciphers is not None:
            try:
                ctx.set_ciphers(self._ciphers)
            except ssl.SSLError as exc:
                raise InvalidArgumentError(
                    f"ciphers selects no cipher, got {self._ciphers!r}", cause=exc
                ) from exc
        ctx.set_alpn_protocols(self.alpn)
        return ctx


def start_tls(
    sock: Any,
    context: ssl.SSLContext,
    server_hostname: str | None,
    session: ssl.SSLSession | None,
    socket_class: type[SSLSocket] = SSLSocket,
) -> SSLSocket:
    """Wrap the connected ``sock`` and complete the client handshake.

    Blocks the calling greenlet until the handshake is done. ``sock`` is
    consumed: on success it is detached into the returned ``SSLSocket``, on
    any failure (including a ``gevent.Timeout`` or a kill) it is closed.
    """
    try:
        tls = socket_class(
            sock=sock,
            server_hostname=server_hostname,
            do_handshake_on_connect=False,
            _context=context,
            _session=session,
        )
    except BaseException:
        sock.close()  # no-op if SSLSocket already detached and closed it
        raise
    try:
        tls.do_handshake()
    except BaseException:
        tls.close()
        raise
    return tls


def is_resumable(sock: Any) -> ssl.SSLSession | None:
    """The socket's session if it can resume a later connection, else None.

    With TLS 1.3 the server sends its tickets *after* the handshake and they
    are only processed when the client reads, so a session taken right after
    the handshake has no ticket yet and is not worth keeping.
    """
    try:
        session: ssl.SSLSession | None = sock.session
        version = sock.version()
    except (AttributeError, OSError, ValueError):
        return None
    if session is None:
        return None
    if version == "TLSv1.3" and not session.has_ticket:
        return None
    if not session.has_ticket and not session.id:
        return None
    return session


class SessionCache:
    """An LRU of TLS sessions keyed by ``"servername-or-hostname:port"``.

    ``max_size == 0`` disables it. Never blocks; greenlet-safe (no method
    yields to the hub).
    """

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._sessions: OrderedDict[str, ssl.SSLSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, key: str) -> ssl.SSLSession | None:
        session = self._sessions.get(key)
        if session is not None:
            self._sessions.move_to_end(key)
        return session

    def set(self, key: str, session: ssl.SSLSession) -> None:
        if self.max_size == 0:
            return
        self._sessions[key] = session
        self._sessions.move_to_end(key)
        while len(self._sessions) > self.max_size:
            self._sessions.popitem(last=False)

    def delete(self, key: str) -> None:
        self._sessions.pop(key, None)
