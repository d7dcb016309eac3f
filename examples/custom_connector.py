"""A connector that pins the server certificate's SHA-256 fingerprint.

Starts its own TLS server on 127.0.0.1 (certificates from ``trustme``),
wraps ``build_connector()`` in a function that rejects any server whose
certificate fingerprint is not the pinned one, and connects twice: once with
the right pin (accepted), once with a wrong pin (rejected, socket closed).
The wrapper follows the connector contract, so it can be given to a Client
as ``connect=`` unchanged. Run: ``python examples/custom_connector.py``.
"""

from __future__ import annotations

import hashlib
import hmac
import ssl
import sys
from collections.abc import Callable
from typing import Any

import gevent.ssl
import trustme
from gevent.server import StreamServer

try:  # the public entry point, once the package re-exports it
    from greenhttp import build_connector
except ImportError:  # pragma: no cover - until then, the module that defines it
    from greenhttp._net.connector import build_connector


class CertificatePinError(ssl.SSLError):
    """The server's certificate is not the pinned one."""


def pinning_connector(sha256_hex: str, **connector_options: Any) -> Callable[..., Any]:
    """Return a connector that only accepts a server whose leaf certificate has this fingerprint.

    Like every connector, it blocks the calling greenlet until connected and
    is greenlet-safe.
    """
    base = build_connector(**connector_options)
    pin = sha256_hex.replace(":", "").lower()

    def connect(options: dict[str, Any], callback: Callable[..., Any] | None = None) -> Any:
        try:
            sock = base(options)
            if options.get("protocol") == "https:":
                der = sock.getpeercert(binary_form=True)
                seen = hashlib.sha256(der).hexdigest()
                if not hmac.compare_digest(seen, pin):
                    sock.close()  # reject: close the socket before reporting the error
                    raise CertificatePinError(
                        f"certificate fingerprint {seen} does not match the pinned {pin}"
                    )
        except Exception as err:
            if callback is None:
                raise
            callback(err, None)
            return None
        if callback is not None:
            callback(None, sock)
        return sock

    return connect


def main() -> int:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    server_ctx = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # gevent's, so it cooperates
    cert.configure_cert(server_ctx)

    def handle(sock: Any, _addr: Any) -> None:
        try:
            tls = server_ctx.wrap_socket(sock, server_side=True)
        except OSError:
            sock.close()  # the client hung up during the handshake
            return
        with tls:
            try:
                tls.sendall(b"hello from a pinned server\n")
            except OSError:
                pass  # the client rejected us and closed the socket

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    options = {"hostname": "localhost", "protocol": "https:", "port": server.server_port}
    right_pin = hashlib.sha256(
        ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())
    ).hexdigest()
    cadata = ca.cert_pem.bytes().decode()
    try:
        good = pinning_connector(right_pin, cadata=cadata)
        outcome: list[Any] = []
        sock = good(options, lambda err, s: outcome.append(err))
        with sock:
            print("accepted:", sock.recv(100).decode().strip(), "| error:", outcome[0])

        bad = pinning_connector("00" * 32, cadata=cadata)
        outcome.clear()
        result = bad(options, lambda err, s: outcome.append((err, s)))
        err, s = outcome[0]
        print("rejected:", type(err).__name__, "| socket:", s, "| returned:", result)
        ok = result is None and s is None and isinstance(err, CertificatePinError)
    finally:
        server.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
