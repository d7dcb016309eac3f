"""The connector as a dispatcher uses it (issue 3): ``Client``/``Pool`` over real loopback servers.

The connector on its own is tested in ``tests/test_connector.py``; here the
same features are driven through ``greenhttp.Client``: a custom connector
function given as ``connect=``, certificate pinning by a wrapping connector,
TLS session resumption across the client's connections, the ALPN offer,
``connect_timeout``, ``local_address`` and ``auto_select_family``.

Servers: :class:`TLSServer` (trustme certificates, capped at TLS 1.2 or 1.3,
gevent's ``SSLContext`` so the handshake cooperates) records per connection
the protocols the client offered in ALPN (read from a peek at the
ClientHello), the TLS version, the selected protocol and whether the session
was resumed; it answers every request with ``hello`` and, with
``close=True``, closes after each response so the client must reconnect.
"""

from __future__ import annotations

import hashlib
import hmac
import socket as stdsocket
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import gevent
import gevent.ssl
import pytest
import trustme
from gevent import socket as gsocket
from gevent.pool import Pool as GreenletPool
from gevent.server import StreamServer

import greenhttp
from greenhttp._net.connector import Connector, build_connector
from greenhttp.errors import ConnectTimeoutError
from testkit import RecordedRequest, ServerConn, serve_forever

# --------------------------------------------------------------------------- TLS server


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def cert(ca: trustme.CA) -> trustme.LeafCert:
    return ca.issue_cert("localhost", "127.0.0.1")


def alpn_offer(client_hello: bytes) -> list[str] | None:
    """The ALPN protocol list of a TLS record holding a ClientHello; None if it has none."""
    assert client_hello[0] == 22 and client_hello[5] == 1, "not a ClientHello record"
    i = 5 + 4 + 2 + 32  # record header, handshake header, legacy_version, random
    i += 1 + client_hello[i]  # legacy_session_id
    i += 2 + int.from_bytes(client_hello[i : i + 2], "big")  # cipher_suites
    i += 1 + client_hello[i]  # legacy_compression_methods
    end = i + 2 + int.from_bytes(client_hello[i : i + 2], "big")
    i += 2
    while i < end:
        kind = int.from_bytes(client_hello[i : i + 2], "big")
        size = int.from_bytes(client_hello[i + 2 : i + 4], "big")
        body = client_hello[i + 4 : i + 4 + size]
        if kind == 16:  # application_layer_protocol_negotiation
            names, j = [], 2
            while j < len(body):
                names.append(body[j + 1 : j + 1 + body[j]].decode("ascii"))
                j += 1 + body[j]
            return names
        i += 4 + size
    return None


def peek_client_hello(sock: Any) -> bytes:
    """The first TLS record on ``sock``, left unread for the TLS layer (bounded wait)."""
    deadline = time.monotonic() + 5
    while True:
        data = sock.recv(16384, stdsocket.MSG_PEEK)  # waits until something is readable
        if len(data) >= 5 and len(data) >= 5 + int.from_bytes(data[3:5], "big"):
            return data
        assert data and time.monotonic() < deadline, "no whole ClientHello arrived"
        gevent.sleep(0.001)  # a partial record: the rest is in flight (rare on loopback)


@dataclass
class TLSConnInfo:
    """What the server saw of one TLS connection."""

    offered: list[str] | None
    version: str | None = None
    alpn: str | None = None
    session_reused: bool = False


@dataclass
class TLSServer:
    """An HTTPS/1.1 server on 127.0.0.1 answering every request with ``hello``."""

    ctx: ssl.SSLContext
    close: bool = False
    conns: list[TLSConnInfo] = field(default_factory=list)
    requests: list[RecordedRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pool = GreenletPool()
        self.server = StreamServer(("127.0.0.1", 0), self.handle, spawn=self.pool)
        self.server.start()

    @property
    def port(self) -> int:
        return self.server.server_port

    @property
    def origin(self) -> str:
        return f"https://localhost:{self.port}"

    def handle(self, raw: Any, _addr: Any) -> None:
        sock = raw
        try:
            info = TLSConnInfo(alpn_offer(peek_client_hello(raw)))
            self.conns.append(info)
            sock = self.ctx.wrap_socket(raw, server_side=True)
            info.version = sock.version()
            info.alpn = sock.selected_alpn_protocol()
            info.session_reused = sock.session_reused
            conn = ServerConn(sock, self)  # type: ignore[arg-type]
            while conn.read_request() is not None:
                headers = [("Connection", "close")] if self.close else []
                conn.respond(b"hello", headers=headers)
                if self.close:
                    break
        except OSError:
            pass  # the client rejected the certificate or went away: some tests do that
        finally:
            sock.close()

    def stop(self) -> None:
        self.server.stop(timeout=1)
        self.pool.kill(timeout=5)


@pytest.fixture
def make_tls_server(cert: trustme.LeafCert) -> Iterator[Callable[..., TLSServer]]:
    """``make_tls_server(version=..., alpn=..., close=..., leaf=...)``; all stopped at teardown."""
    servers: list[TLSServer] = []

    def make(
        version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3,
        alpn: list[str] | None = None,
        close: bool = False,
        leaf: trustme.LeafCert | None = None,
    ) -> TLSServer:
        ctx = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # never the stdlib's: it blocks
        (leaf or cert).configure_cert(ctx)
        ctx.maximum_version = version
        if alpn is not None:
            ctx.set_alpn_protocols(alpn)
        srv = TLSServer(ctx, close=close)
        servers.append(srv)
        return srv

    yield make
    for srv in servers:
        srv.stop()


def trust(ca: trustme.CA, **options: Any) -> dict[str, Any]:
    """A ``connect=`` dict trusting the test CA."""
    return {"cadata": ca.cert_pem.bytes().decode(), **options}


def get(dispatcher: Any, path: str = "/") -> bytes:
    data = dispatcher.request(path=path, method="GET")
    assert data.status_code == 200
    return data.body.bytes()


def der(leaf: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())


# --------------------------------------------------------------------------- custom connector


def test_custom_connector_gets_origin_fields_and_injected_options(
    make_server: Any, make_client: Any, tmp_path: Any
) -> None:
    path = str(tmp_path / "s.sock")
    srv = make_server(serve_forever(), unix_path=path)
    calls: list[dict[str, Any]] = []

    def connect(options: dict[str, Any], callback: Any = None) -> Any:
        calls.append(dict(options))
        # the injected socket_path is the only way this connector knows where to go
        return build_connector(socket_path=options["socket_path"])(options, callback)

    client = make_client("http://localhost:8123", connect=connect, socket_path=path, allow_h2=False)
    assert get(client) == b"hello"
    assert len(calls) == 1
    opts = calls[0]
    assert opts["hostname"] == "localhost"
    assert opts["host"] == "localhost:8123"
    assert opts["protocol"] == "http:"
    assert str(opts["port"]) == "8123"
    assert opts["socket_path"] == path
    assert opts["allow_h2"] is False
    assert srv.requests[0].header("host") == "localhost:8123"


def test_custom_connector_without_socket_path_gets_no_socket_path(
    make_server: Any, make_client: Any
) -> None:
    srv = make_server(serve_forever())
    base = build_connector()
    calls: list[dict[str, Any]] = []

    def connect(options: dict[str, Any], callback: Any = None) -> Any:
        calls.append(dict(options))
        return base(options, callback)

    client = make_client(srv.origin, connect=connect)
    assert get(client) == b"hello"
    assert "socket_path" not in calls[0]
    assert calls[0]["allow_h2"] is True  # the client's default, injected
    assert (calls[0]["hostname"], str(calls[0]["port"])) == ("127.0.0.1", str(srv.port))


def test_pool_members_all_use_the_custom_connector(make_server: Any) -> None:
    srv = make_server(serve_forever())
    base = build_connector()
    calls: list[dict[str, Any]] = []

    def connect(options: dict[str, Any], callback: Any = None) -> Any:
        calls.append(dict(options))
        return base(options, callback)

    pool = greenhttp.Pool(srv.origin, connections=2, connect=connect, allow_h2=False)
    try:
        jobs = [gevent.spawn(get, pool) for _ in range(2)]  # at once: two connections
        gevent.joinall(jobs, timeout=5, raise_error=True)
        assert [j.value for j in jobs] == [b"hello", b"hello"]
        assert srv.accepted == 2
        assert len(calls) == 2
        assert all(c["allow_h2"] is False and c["protocol"] == "http:" for c in calls)
    finally:
        with gevent.Timeout(5):
            pool.destroy()


# --------------------------------------------------------------------------- certificate pinning


class PinMismatchError(ssl.SSLError):
    """The server's certificate is not the pinned one."""


def pinning(pin: bytes, **options: Any) -> tuple[Callable[..., Any], list[Any], list[Any]]:
    """A connector accepting only a server whose leaf certificate has SHA-256 ``pin``.

    Returns it with the list of sockets it opened and the errors it reported.
    """
    base = build_connector(**options)
    opened: list[Any] = []
    reported: list[Any] = []

    def connect(options: dict[str, Any], callback: Any = None) -> Any:
        try:
            sock = base(options)
            opened.append(sock)
            seen = hashlib.sha256(sock.getpeercert(binary_form=True)).digest()
            if not hmac.compare_digest(seen, pin):
                sock.close()
                raise PinMismatchError(f"fingerprint {seen.hex()} is not the pinned one")
        except Exception as err:
            reported.append(err)
            if callback is None:
                raise
            callback(err, None)
            return None
        if callback is not None:
            callback(None, sock)
        return sock

    return connect, opened, reported


def test_pinning_connector_accepts_the_pinned_server(
    ca: trustme.CA, cert: trustme.LeafCert, make_tls_server: Any, make_client: Any
) -> None:
    srv = make_tls_server()
    connect, opened, reported = pinning(hashlib.sha256(der(cert)).digest(), **trust(ca))
    client = make_client(srv.origin, connect=connect)
    assert get(client) == b"hello"
    assert get(client) == b"hello"
    assert len(opened) == 1 and reported == []
    assert len(srv.conns) == 1


def test_pinning_connector_rejects_another_server(
    ca: trustme.CA, cert: trustme.LeafCert, make_tls_server: Any, make_client: Any
) -> None:
    impostor = ca.issue_cert("localhost")  # valid for the name, but not the pinned key
    srv = make_tls_server(leaf=impostor)
    connect, opened, reported = pinning(hashlib.sha256(der(cert)).digest(), **trust(ca))
    client = make_client(srv.origin, connect=connect)
    errors: list[Any] = []
    client.on("connectionError", lambda origin, targets, err: errors.append(err))
    with pytest.raises(PinMismatchError) as info:
        client.request(path="/", method="GET")
    assert len(reported) == 1 and info.value is reported[0]
    assert errors == [reported[0]]
    assert opened[0].fileno() == -1  # closed by the connector before it reported
    assert srv.requests == []
    # the fd leak check (autouse) confirms nothing else was left open


# --------------------------------------------------------------------------- TLS sessions


@pytest.mark.parametrize(
    "version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["tls1.2", "tls1.3"]
)
def test_tls_session_resumed_on_reconnect(
    ca: trustme.CA, make_tls_server: Any, make_client: Any, version: ssl.TLSVersion
) -> None:
    srv = make_tls_server(version=version, close=True)
    client = make_client(srv.origin, connect=trust(ca))
    for _ in range(3):
        assert get(client) == b"hello"
    expected = version.name.replace("_", ".")
    assert [c.version for c in srv.conns] == [expected] * 3
    assert [c.session_reused for c in srv.conns] == [False, True, True]


def test_tls_session_resumed_on_reset_request(
    ca: trustme.CA, make_tls_server: Any, make_client: Any
) -> None:
    srv = make_tls_server(version=ssl.TLSVersion.TLSv1_3)
    client = make_client(srv.origin, connect=trust(ca))
    for _ in range(2):
        data = client.request(path="/", method="GET", reset=True)
        assert data.body.bytes() == b"hello"
    assert [c.session_reused for c in srv.conns] == [False, True]


@pytest.mark.parametrize("cls", [greenhttp.Client, greenhttp.Pool])
def test_a_connector_wrapped_in_a_function_still_resumes_tls13_sessions(
    ca: trustme.CA, make_tls_server: Any, cls: Any
) -> None:
    # A TLS 1.3 ticket comes after the handshake; the dispatcher cannot ask a wrapper to
    # store it, so the socket's maker (found by the socket) does.
    srv = make_tls_server(version=ssl.TLSVersion.TLSv1_3, close=True)
    base = greenhttp.build_connector(cadata=ca.cert_pem.bytes().decode())
    checked = []

    def wrapper(options: dict[str, Any], callback: Any = None) -> Any:
        sock = base(options)
        checked.append(sock.version())
        if callback is not None:
            callback(None, sock)
        return sock

    with cls(srv.origin, connect=wrapper) as dispatcher:
        for _ in range(3):
            assert get(dispatcher) == b"hello"
    assert checked == ["TLSv1.3"] * 3
    assert [c.session_reused for c in srv.conns] == [False, True, True]


def test_max_cached_sessions_zero_disables_resumption(
    ca: trustme.CA, make_tls_server: Any, make_client: Any
) -> None:
    srv = make_tls_server(version=ssl.TLSVersion.TLSv1_2, close=True)
    client = make_client(srv.origin, connect=trust(ca), max_cached_sessions=0)
    for _ in range(3):
        assert get(client) == b"hello"
    assert [c.session_reused for c in srv.conns] == [False, False, False]


def test_pool_members_resume_a_session_another_member_made(
    ca: trustme.CA, make_tls_server: Any
) -> None:
    # REFERENCE.md (Pool options): the connection options build one connector
    # shared by every client of the pool, so a session one connection made is
    # offered by the next connection, whichever member opens it.
    srv = make_tls_server(version=ssl.TLSVersion.TLSv1_2)
    pool = greenhttp.Pool(srv.origin, connections=2, connect=trust(ca))
    try:
        assert get(pool) == b"hello"  # member 1 connects and caches the session
        # two requests at once: member 1 takes one, member 2 connects for the other
        jobs = [gevent.spawn(get, pool) for _ in range(2)]
        gevent.joinall(jobs, timeout=5, raise_error=True)
        assert [j.value for j in jobs] == [b"hello", b"hello"]
        assert len(srv.conns) == 2
        assert [c.session_reused for c in srv.conns] == [False, True]
    finally:
        with gevent.Timeout(5):
            pool.destroy()


# --------------------------------------------------------------------------- ALPN


def test_allow_h2_false_offers_only_http11(
    ca: trustme.CA, make_tls_server: Any, make_client: Any
) -> None:
    srv = make_tls_server(alpn=["h2", "http/1.1"])
    client = make_client(srv.origin, connect=trust(ca), allow_h2=False)
    assert get(client) == b"hello"
    assert srv.conns[0].offered == ["http/1.1"]
    assert srv.conns[0].alpn == "http/1.1"
    assert srv.requests[0].version == "HTTP/1.1"
    assert client._core._conn is not None and client._core._conn.version == "h1"


@pytest.mark.parametrize("cls", [greenhttp.Client, greenhttp.Pool])
def test_connect_allow_h2_false_offers_only_http11(ca: trustme.CA, make_tls_server: Any, cls: Any) -> None:
    """connect's allow_h2 decides, as the original's connect options do."""
    srv = make_tls_server(alpn=["h2", "http/1.1"])
    dispatcher = cls(srv.origin, connect=trust(ca, allow_h2=False))
    try:
        assert get(dispatcher) == b"hello"
        assert srv.conns[0].offered == ["http/1.1"]
        assert srv.requests[0].version == "HTTP/1.1"
    finally:
        with gevent.Timeout(5):
            dispatcher.destroy()


def test_default_offers_http11_then_h2(
    ca: trustme.CA, make_tls_server: Any, make_client: Any
) -> None:
    srv = make_tls_server(alpn=["http/1.1"])
    client = make_client(srv.origin, connect=trust(ca))
    assert get(client) == b"hello"
    assert srv.conns[0].offered == ["http/1.1", "h2"]
    assert srv.conns[0].alpn == "http/1.1"
    assert srv.requests[0].version == "HTTP/1.1"


# --------------------------------------------------------------------------- TCP options


def blackhole(family: int = stdsocket.AF_INET) -> tuple[list[Any], tuple[Any, ...]]:
    """A loopback address where TCP connects hang: a listener with a full backlog.

    listen(0) and never accept; connect fillers until one does not complete in
    0.2 s (the kernel now drops new SYNs). Returns the sockets to close and the sockaddr.
    """
    lsock = gsocket.socket(family)
    lsock.bind(("::1" if family == stdsocket.AF_INET6 else "127.0.0.1", 0))
    lsock.listen(0)
    addr = lsock.getsockname()
    owned: list[Any] = [lsock]
    for _ in range(32):
        filler = gsocket.socket(family)
        owned.append(filler)
        filler.settimeout(0.2)
        try:
            filler.connect(addr)
        except TimeoutError:
            return owned, addr
    for s in owned:
        s.close()
    pytest.fail("this kernel never lets a loopback connect hang on a full backlog")


@pytest.fixture
def hole() -> Iterator[tuple[Any, ...]]:
    owned, addr = blackhole()
    yield addr
    for s in owned:
        s.close()


def test_connect_timeout(hole: tuple[Any, ...], make_client: Any) -> None:
    client = make_client(f"http://127.0.0.1:{hole[1]}", connect_timeout=0.2)
    start = time.monotonic()
    with pytest.raises(ConnectTimeoutError) as info:
        client.request(path="/", method="GET")
    assert 0.2 <= time.monotonic() - start < 3
    assert isinstance(info.value, TimeoutError)
    assert info.value.code == "GH_ERR_CONNECT_TIMEOUT"
    assert f"127.0.0.1:{hole[1]}" in str(info.value)


def test_connect_dict_timeout_wins_over_connect_timeout(
    hole: tuple[Any, ...], make_client: Any
) -> None:
    client = make_client(
        f"http://127.0.0.1:{hole[1]}", connect_timeout=30.0, connect={"timeout": 0.2}
    )
    with pytest.raises(ConnectTimeoutError, match="timeout: 0.2s"):
        client.request(path="/", method="GET")


def test_local_address(make_server: Any, make_client: Any) -> None:
    peers: list[Any] = []

    def handler(conn: ServerConn) -> None:
        peers.append(conn.sock.getpeername())
        serve_forever()(conn)

    srv = make_server(handler)
    client = make_client(srv.origin, local_address="127.0.0.1")
    assert get(client) == b"hello"
    assert client._core._conn is not None
    local = client._core._conn.sock.getsockname()
    assert local[0] == "127.0.0.1"
    assert peers == [local]


def test_auto_select_family_connects_to_ipv4_only_localhost(
    make_server: Any, make_client: Any
) -> None:
    srv = make_server(serve_forever())  # listens on 127.0.0.1 only
    client = make_client(f"http://localhost:{srv.port}", auto_select_family=True)
    assert get(client) == b"hello"
    assert client._core._conn.sock.getpeername() == ("127.0.0.1", srv.port)


def ipv6_first(connector: Connector, v6: tuple[Any, ...], port: int) -> None:
    """Make ``connector`` resolve every name to ``[v6, 127.0.0.1:port]``, IPv6 first."""
    infos = [
        (stdsocket.AF_INET6, stdsocket.SOCK_STREAM, stdsocket.IPPROTO_TCP, "", v6),
        (stdsocket.AF_INET, stdsocket.SOCK_STREAM, stdsocket.IPPROTO_TCP, "", ("127.0.0.1", port)),
    ]
    connector.resolve = lambda host, p: infos  # type: ignore[method-assign]


@pytest.mark.parametrize("auto_select_family", [True, False])
def test_auto_select_family_when_localhost_resolves_to_ipv6_first(
    make_server: Any, make_client: Any, auto_select_family: bool
) -> None:
    # /etc/hosts may list only 127.0.0.1 for localhost; pin the resolution to
    # "::1 first" with a ::1 address that never answers, as on a dual-stack host
    # whose IPv6 path is broken.
    srv = make_server(serve_forever())
    owned, v6 = blackhole(stdsocket.AF_INET6)
    try:
        client = make_client(
            f"http://localhost:{srv.port}",
            auto_select_family=auto_select_family,
            auto_select_family_attempt_timeout=0.05,
            connect_timeout=1.0,
        )
        ipv6_first(client._core._connector, v6, srv.port)
        start = time.monotonic()
        if auto_select_family:
            assert get(client) == b"hello"
            assert time.monotonic() - start < 1.0
            assert client._core._conn.sock.getpeername() == ("127.0.0.1", srv.port)
        else:  # addresses are tried one after another: the stalled ::1 eats the timeout
            with pytest.raises(ConnectTimeoutError):
                client.request(path="/", method="GET")
            assert srv.accepted == 0
    finally:
        for s in owned:
            s.close()


def test_a_connector_that_answers_only_through_its_callback(make_server, make_client) -> None:
    """Spec shape connector(options, callback): the socket may come back only via the callback."""
    server = make_server(serve_forever(b"via callback"))
    base = greenhttp.build_connector()
    calls = []

    def connect(options, callback):
        calls.append(options["hostname"])
        base(options, callback)  # reports through the callback; returns nothing here

    client = make_client(server.origin, connect=connect)
    assert client.request(path="/").body.bytes() == b"via callback"
    assert calls == ["127.0.0.1"]


def test_a_connector_calling_back_with_an_error_fails_the_request(make_client) -> None:
    boom = ConnectionRefusedError(111, "refused by the test connector")

    def connect(options, callback):
        callback(boom, None)

    client = make_client("http://127.0.0.1:9", connect=connect)
    with pytest.raises(ConnectionRefusedError) as info:
        client.request(path="/")
    assert info.value is boom
