"""Connections that fail before HTTP starts: TLS handshakes that stall or fail, and names
that do not resolve. Each fails within ``connect_timeout`` with the documented error
(``ConnectTimeoutError``, or the ``OSError``/``ssl.SSLError`` as raised: docs/errors.md),
and the next request on the same dispatcher works.

The TLS server is a plain scripted server that does the handshake itself, so
the first connection can misbehave and the later ones succeed. Names are
resolved by ``offline_resolve`` (conftest.py): nothing leaves the machine.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.ssl
import pytest
import trustme
from faultkit import rst

from greenhttp import errors

TIMEOUT = 0.3
SLACK = 1.0


def server_context(ca: Any, *names: str) -> Any:
    ctx = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # its handshakes must not block the hub
    ca.issue_cert(*(names or ("localhost", "127.0.0.1"))).configure_cert(ctx)
    return ctx


def serve_tls(conn: Any, ctx: Any) -> None:
    """Handshake with ``ctx``, then answer every request with ``ok <target>``."""
    try:
        conn.sock = ctx.wrap_socket(conn.sock, server_side=True)
    except OSError:
        return  # the client refused the certificate
    while True:
        req = conn.read_request()
        if req is None:
            return
        conn.respond(b"ok " + req.target.encode())


def first_connection(fault: Callable[[Any], Any], good: Any) -> Callable[[Any], None]:
    """``fault(conn)`` on the first connection; the later ones handshake with ``good``."""
    count = [0]

    def handler(conn: Any) -> None:
        count[0] += 1
        if count[0] == 1:
            fault(conn)
        else:
            serve_tls(conn, good)

    return handler


def with_cert(ctx: Any) -> Callable[[Any], None]:
    return lambda conn: serve_tls(conn, ctx)


def stall(conn: Any) -> None:
    conn.wait_closed(10)  # reads the ClientHello, says nothing


def close_after_hello(conn: Any) -> None:
    conn.read_exact(5)  # the TLS record header of the ClientHello
    conn.close()


def reset_after_hello(conn: Any) -> None:
    conn.read_exact(5)
    rst(conn.sock)


def garbage_hello(conn: Any) -> None:
    conn.read_exact(5)
    conn.send(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    conn.wait_closed(10)


def reset_after_handshake(ctx: Any) -> Callable[[Any], None]:
    def fault(conn: Any) -> None:
        conn.sock = ctx.wrap_socket(conn.sock, server_side=True)
        conn.read_request()
        rst(conn.sock)

    return fault


def silent_after_handshake(ctx: Any) -> Callable[[Any], None]:
    def fault(conn: Any) -> None:
        conn.sock = ctx.wrap_socket(conn.sock, server_side=True)
        conn.read_request()
        conn.wait_closed(10)

    return fault


@pytest.fixture(params=["client", "pool"])
def make_dispatcher(request, make_client, make_pool, ca):
    def make(origin: str, **options: Any) -> Any:
        opts = {
            "connect_timeout": TIMEOUT,
            "headers_timeout": TIMEOUT,
            "body_timeout": TIMEOUT,
            "connect": {"cadata": ca.cert_pem.bytes().decode()},
            **options,
        }
        if request.param == "client":
            return make_client(origin, **opts)
        return make_pool(origin, connections=2, **opts)

    return make


def fetch(dispatcher: Any, path: str = "/") -> bytes:
    return dispatcher.request(path=path).body.bytes()


def _other_ca_context() -> Any:
    return server_context(trustme.CA())


TLS_FAULTS = [
    ("handshake-stalls", lambda ctx: stall, errors.ConnectTimeoutError, TIMEOUT),
    ("closed-during-handshake", lambda ctx: close_after_hello, OSError, 0),
    ("reset-during-handshake", lambda ctx: reset_after_hello, OSError, 0),
    ("http-instead-of-tls", lambda ctx: garbage_hello, ssl.SSLError, 0),
    (
        "untrusted-certificate",
        lambda ctx: with_cert(_other_ca_context()),
        ssl.SSLCertVerificationError,
        0,
    ),
    ("reset-after-handshake", reset_after_handshake, errors.SocketError, 0),
    ("silent-after-handshake", silent_after_handshake, errors.HeadersTimeoutError, TIMEOUT),
]


@pytest.mark.parametrize("name,make_fault,error,bound", TLS_FAULTS, ids=[f[0] for f in TLS_FAULTS])
def test_tls_faults_fail_in_time_and_the_next_connection_works(
    name, make_fault, error, bound, make_server, make_dispatcher, ca
):
    good = server_context(ca)
    server = make_server(first_connection(make_fault(good), good))
    dispatcher = make_dispatcher(f"https://localhost:{server.port}")
    started = time.monotonic()
    with gevent.Timeout(bound + SLACK + 5, AssertionError("the request hung")):
        with pytest.raises(error) as info:
            fetch(dispatcher, "/first")
    assert time.monotonic() - started < bound + SLACK
    assert isinstance(info.value, OSError)  # every connection failure is one (docs/errors.md)
    with gevent.Timeout(5, AssertionError("the next request hung")):
        assert fetch(dispatcher, "/next") == b"ok /next"


def test_a_hostname_mismatch_is_a_verification_error_naming_the_cause(make_server, make_client, ca):
    server = make_server(with_cert(server_context(ca, "other.example")))
    client = make_client(
        f"https://localhost:{server.port}",
        connect={"cadata": ca.cert_pem.bytes().decode()},
        connect_timeout=TIMEOUT,
    )
    with pytest.raises(
        ssl.SSLCertVerificationError, match="certificate verify failed.*[Hh]ostname mismatch"
    ):
        fetch(client)


def test_a_slow_tls_peer_is_bounded_by_connect_timeout_not_by_each_read(
    make_server, make_client, ca
):
    """A server that trickles its handshake bytes still fails within connect_timeout."""

    def trickle(conn: Any) -> None:
        conn.read_exact(5)
        conn.send(b"\x16\x03\x03\x40\x00")  # a 16 KiB handshake record is coming...
        for _ in range(100):
            conn.send(b"\x02")  # ...one byte at a time
            gevent.sleep(0.02)  # the fault itself: a very slow peer

    server = make_server(first_connection(trickle, server_context(ca)))
    client = make_client(
        f"https://localhost:{server.port}",
        connect={"cadata": ca.cert_pem.bytes().decode()},
        connect_timeout=TIMEOUT,
    )
    started = time.monotonic()
    with pytest.raises(errors.ConnectTimeoutError):
        fetch(client)
    assert time.monotonic() - started < TIMEOUT + SLACK
    assert fetch(client, "/next") == b"ok /next"


# ---------------------------------------------------------------------------
# DNS
# ---------------------------------------------------------------------------


def serve_plain(conn: Any) -> None:
    while True:
        req = conn.read_request()
        if req is None:
            return
        conn.respond(b"ok " + req.target.encode())


def test_an_unresolvable_name_raises_gaierror_at_once(make_client, offline_connector):
    client = make_client("http://no-such-host.invalid", connect=offline_connector(timeout=TIMEOUT))
    for _ in range(2):  # and again: the client is not wedged by the first failure
        started = time.monotonic()
        with pytest.raises(socket.gaierror) as info:
            fetch(client)
        assert info.value.errno == socket.EAI_NONAME
        assert time.monotonic() - started < SLACK


def test_an_agent_keeps_serving_other_origins_after_a_dns_failure(
    make_server, make_agent, offline_connector
):
    server = make_server(serve_plain)
    agent = make_agent(connect=offline_connector(timeout=TIMEOUT), connections=2)
    with pytest.raises(socket.gaierror):
        agent.request(origin="http://no-such-host.invalid", path="/").body.bytes()
    good = f"http://localhost:{server.port}"
    assert agent.request(origin=good, path="/next").body.bytes() == b"ok /next"
    with pytest.raises(socket.gaierror):
        agent.request(origin="http://other.invalid:8080", path="/").body.bytes()
    assert agent.request(origin=good, path="/again").body.bytes() == b"ok /again"


def test_a_resolver_that_hangs_is_bounded_by_connect_timeout(
    make_server, make_pool, offline_connector
):
    server = make_server(serve_plain)
    calls = [0]
    connector = offline_connector(timeout=TIMEOUT)

    def slow_then_fine(host: str, port: int) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            gevent.sleep(10)  # the fault: a resolver that does not answer
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", port))]

    connector.resolve = slow_then_fine
    pool = make_pool(f"http://localhost:{server.port}", connect=connector, connections=1)
    started = time.monotonic()
    with pytest.raises(errors.ConnectTimeoutError):
        fetch(pool)
    assert time.monotonic() - started < TIMEOUT + SLACK
    assert fetch(pool, "/next") == b"ok /next"
