"""The connector (issue 3) against real loopback servers.

Servers: a plain gevent ``StreamServer``; TLS servers (trustme certificates)
capped at TLS 1.2 or 1.3 with various ALPN offers; a Unix socket server in a
tmp dir. Timeouts use loopback endpoints that never answer: a listener that
never accepts (the TLS handshake then stalls) and a listener whose backlog is
full (the TCP handshake then stalls). Nothing leaves the loopback interface.
"""

from __future__ import annotations

import errno
import os
import socket as stdsocket
import ssl
import time
from collections.abc import Iterator
from typing import Any

import gevent
import gevent.ssl
import pytest
import trustme
from gevent import socket as gsocket
from gevent.pool import Pool
from gevent.server import StreamServer

from greenhttp._net import happy_eyeballs as he
from greenhttp._net.connector import Connector, build_connector, socket_info
from greenhttp._net.tls import SessionCache
from greenhttp.errors import ConnectTimeoutError, InvalidArgumentError
from testkit import wait_for

# --------------------------------------------------------------------------- helpers


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def cert(ca: trustme.CA) -> trustme.LeafCert:
    return ca.issue_cert("localhost", "127.0.0.1", "::1")


class Server:
    """A loopback server; ``tls`` given: wraps each connection and records SNI.

    Each connection gets ``greeting`` and is then read until EOF. ``wait_idle``
    waits until every handler has finished (so fd counts are stable).
    """

    def __init__(
        self,
        listener: Any,
        tls: ssl.SSLContext | None = None,
        greeting: bytes = b"hello",
    ) -> None:
        self.tls = tls
        self.greeting = greeting
        self.sni: list[str | None] = []
        self.pool = Pool()
        if tls is not None:
            tls.sni_callback = lambda sslobj, name, ctx: self.sni.append(name)
        self.server = StreamServer(listener, self.handle, spawn=self.pool)
        self.server.start()

    @property
    def port(self) -> int:
        return self.server.server_port

    def handle(self, sock: Any, _addr: Any) -> None:
        try:
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_side=True)
            sock.sendall(self.greeting)
            while sock.recv(1024):
                pass
        except OSError:
            pass  # the client rejected us or went away: that is what some tests do
        finally:
            sock.close()

    def wait_idle(self) -> None:
        assert self.pool.join(timeout=5)

    def stop(self) -> None:
        self.server.stop()
        self.wait_idle()


def server_context(
    cert: trustme.LeafCert,
    version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3,
    alpn: list[str] | None = None,
) -> ssl.SSLContext:
    # The server side must be gevent's SSLContext, or its handshake blocks the hub.
    ctx = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(ctx)
    ctx.maximum_version = version
    if alpn is not None:
        ctx.set_alpn_protocols(alpn)
    return ctx


@pytest.fixture
def tcp_server() -> Iterator[Server]:
    srv = Server(("127.0.0.1", 0))
    yield srv
    srv.stop()


@pytest.fixture
def tls_server(cert: trustme.LeafCert) -> Iterator[Server]:
    srv = Server(("127.0.0.1", 0), tls=server_context(cert, alpn=["h2", "http/1.1"]))
    yield srv
    srv.stop()


def trusting(ca: trustme.CA, **kw: Any) -> Connector:
    return build_connector(cadata=ca.cert_pem.bytes().decode(), **kw)


def https(port: int, hostname: str = "localhost", **kw: Any) -> dict[str, Any]:
    return {"hostname": hostname, "protocol": "https:", "port": port, **kw}


def http(port: int | str, hostname: str = "127.0.0.1", **kw: Any) -> dict[str, Any]:
    return {"hostname": hostname, "protocol": "http:", "port": port, **kw}


@pytest.fixture
def silent_listener() -> Iterator[tuple[str, int]]:
    """Listens but never accepts: TCP connects, a TLS handshake never completes."""
    lsock = stdsocket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    yield lsock.getsockname()
    lsock.close()


def blackhole(family: int = stdsocket.AF_INET) -> tuple[list[Any], Any]:
    """A loopback (address, port) where TCP connects hang: a listener with a full backlog.

    listen(0) and never accept; connect fillers until one does not complete
    within 0.2 s, which shows the kernel now drops new SYNs. Returns the
    sockets to close and the sockaddr.
    """
    host = "::1" if family == stdsocket.AF_INET6 else "127.0.0.1"
    lsock = stdsocket.socket(family)
    lsock.bind((host, 0))
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
    pytest.skip("this kernel never lets a loopback connect hang on a full backlog")


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_cached_sessions": -1}, "max_cached_sessions must be a non-negative integer, got -1"),
        (
            {"max_cached_sessions": 1.5},
            "max_cached_sessions must be a non-negative integer, got 1.5",
        ),
        ({"max_cached_sessions": True}, "max_cached_sessions must be a non-negative integer"),
        ({"timeout": -1}, "timeout must be a non-negative number of seconds, got -1"),
        ({"timeout": "10"}, "timeout must be a non-negative number of seconds, got '10'"),
        ({"timeout": float("inf")}, "timeout must be"),
        ({"allow_h2": "yes"}, "allow_h2 must be a boolean, got 'yes'"),
        ({"prefer_h2": 1}, "prefer_h2 must be a boolean, got 1"),
        ({"keep_alive": 0}, "keep_alive must be a boolean, got 0"),
        ({"keep_alive_initial_delay": -5}, "keep_alive_initial_delay must be a non-negative"),
        ({"type_of_service": 256}, "type_of_service must be an integer from 0 to 255, got 256"),
        ({"port": 70000}, "port must be an integer from 1 to 65535, got 70000"),
        ({"port": "http"}, "port must be an integer from 1 to 65535, got 'http'"),
        ({"socket_path": ""}, "socket_path must be a non-empty path, got ''"),
        (
            {"auto_select_family_attempt_timeout": 0},
            "auto_select_family_attempt_timeout must be a positive",
        ),
        ({"servername": ""}, "servername must be a non-empty string, got ''"),
        ({"ssl_context": "ctx"}, "ssl_context must be an ssl.SSLContext, got 'ctx'"),
        ({"minimum_version": "TLSv1_2"}, "minimum_version must be an ssl.TLSVersion"),
        ({"verify": "no"}, "verify must be a boolean, got 'no'"),
        ({"verify": False, "check_hostname": True}, "check_hostname=True requires verify=True"),
        ({"keyfile": "k.pem"}, "keyfile and password require certfile"),
        ({"cafile": "/nonexistent/ca.pem"}, "cafile/capath/cadata could not be loaded"),
        ({"ciphers": "NO-SUCH-CIPHER"}, "ciphers selects no cipher, got 'NO-SUCH-CIPHER'"),
        (
            {"ssl_context": ssl.create_default_context(), "cafile": "x"},
            "cafile cannot be combined with ssl_context",
        ),
        ({"bogus": 1}, "unknown connector option 'bogus', got bogus=1"),
    ],
)
def test_invalid_options_raise_naming_option_and_value(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        build_connector(**kwargs)
    assert message in str(info.value)
    assert info.value.code == "GH_ERR_INVALID_ARG"


def test_none_means_default() -> None:
    c = build_connector(
        timeout=None,
        max_cached_sessions=None,
        allow_h2=None,
        keep_alive=None,
        keep_alive_initial_delay=None,
        auto_select_family_attempt_timeout=None,
        verify=None,
    )
    assert (c.timeout, c.max_cached_sessions, c.keep_alive_initial_delay) == (10.0, 100, 60.0)
    assert c.alpn_protocols == ["http/1.1", "h2"]
    assert c.auto_select_family_attempt_timeout == 0.25


@pytest.mark.parametrize(
    ("allow_h2", "prefer_h2", "offer"),
    [
        (True, False, ["http/1.1", "h2"]),
        (True, True, ["h2", "http/1.1"]),
        (False, False, ["http/1.1"]),
        (False, True, ["http/1.1"]),
    ],
)
def test_alpn_offer(allow_h2: bool, prefer_h2: bool, offer: list[str]) -> None:
    assert build_connector(allow_h2=allow_h2, prefer_h2=prefer_h2).alpn_protocols == offer


def test_bad_call_options(tcp_server: Server) -> None:
    c = build_connector()
    with pytest.raises(InvalidArgumentError, match="hostname must be a non-empty string"):
        c({"protocol": "http:", "port": tcp_server.port})
    with pytest.raises(
        InvalidArgumentError, match="protocol must be 'http:' or 'https:', got 'ftp:'"
    ):
        c(http(tcp_server.port, protocol="ftp:"))
    with pytest.raises(InvalidArgumentError, match="http_socket is only for a TLS upgrade"):
        c(http(tcp_server.port, http_socket=object()))


# --------------------------------------------------------------------------- plain TCP


def test_http_socket_options(tcp_server: Server) -> None:
    c = build_connector(type_of_service=0x10, keep_alive_initial_delay=7.0)
    with c(http(str(tcp_server.port))) as sock:  # the port may be a str
        assert isinstance(sock, gsocket.socket)
        assert sock.recv(5) == b"hello"
        assert sock.getsockopt(stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY) != 0
        assert sock.getsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_KEEPALIVE) != 0
        assert sock.getsockopt(stdsocket.IPPROTO_TCP, stdsocket.TCP_KEEPIDLE) == 7
        assert sock.getsockopt(stdsocket.IPPROTO_IP, stdsocket.IP_TOS) == 0x10


def test_keep_alive_off_and_ipv6_traffic_class(cert: trustme.LeafCert) -> None:
    srv = Server(("::1", 0))
    try:
        c = build_connector(keep_alive=False, type_of_service=0x20)
        with c(http(srv.port, hostname="[::1]")) as sock:
            assert sock.family == stdsocket.AF_INET6
            assert sock.getsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_KEEPALIVE) == 0
            assert sock.getsockopt(stdsocket.IPPROTO_IPV6, stdsocket.IPV6_TCLASS) == 0x20
            assert socket_info(sock)["remote_family"] == "IPv6"
    finally:
        srv.stop()


def test_port_defaults_to_connector_port(tcp_server: Server) -> None:
    c = build_connector(port=tcp_server.port)
    with c({"hostname": "127.0.0.1", "protocol": "http:"}) as sock:
        assert sock.getpeername()[1] == tcp_server.port


def test_local_address_is_bound(tcp_server: Server) -> None:
    with build_connector()(http(tcp_server.port, local_address="127.0.0.1")) as sock:
        assert sock.getsockname()[0] == "127.0.0.1"


def test_socket_info(tcp_server: Server) -> None:
    sock = build_connector()(http(tcp_server.port))
    info = socket_info(sock)
    assert info["remote_address"] == "127.0.0.1"
    assert info["remote_port"] == tcp_server.port
    assert info["local_address"] == "127.0.0.1"
    assert isinstance(info["local_port"], int)
    assert info["remote_family"] == "IPv4"
    sock.close()
    assert socket_info(sock)["remote_port"] is None  # a closed socket: no error


def refused_port() -> int:
    s = stdsocket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


def test_refused_raises_oserror_and_leaks_nothing() -> None:
    c = build_connector()
    before = open_fds()
    with pytest.raises(ConnectionRefusedError) as info:
        c(http(refused_port()))
    assert errno.errorcode[info.value.errno] == "ECONNREFUSED"
    assert open_fds() == before


def test_callback_contract(tcp_server: Server) -> None:
    c = build_connector()
    calls: list[tuple[Any, Any]] = []
    before = open_fds()
    sock = c(http(tcp_server.port), lambda err, s: calls.append((err, s)))
    assert len(calls) == 1 and calls[0][0] is None and calls[0][1] is sock
    sock.close()
    # (On gevent's libuv loop the descriptor may close one loop pass later.)
    wait_for(lambda: open_fds() == before, what="the socket's descriptor to close")

    calls.clear()
    assert c(http(refused_port()), lambda err, s: calls.append((err, s))) is None
    assert len(calls) == 1
    assert isinstance(calls[0][0], ConnectionRefusedError) and calls[0][1] is None
    assert open_fds() == before

    calls.clear()  # invalid call options also go to the callback, once
    assert c({"protocol": "http:"}, lambda err, s: calls.append((err, s))) is None
    assert len(calls) == 1 and isinstance(calls[0][0], InvalidArgumentError)


# --------------------------------------------------------------------------- timeouts


def test_tls_handshake_timeout(silent_listener: tuple[str, int]) -> None:
    c = build_connector(timeout=0.2)
    before = open_fds()
    start = time.monotonic()
    with pytest.raises(ConnectTimeoutError) as info:
        c(https(silent_listener[1], hostname="127.0.0.1"))
    assert 0.2 <= time.monotonic() - start < 2
    assert isinstance(info.value, TimeoutError)
    assert info.value.code == "GH_ERR_CONNECT_TIMEOUT"
    assert str(info.value) == (
        f"Connect Timeout Error (attempted address: 127.0.0.1:{silent_listener[1]}, timeout: 0.2s)"
    )
    assert open_fds() == before


def test_tcp_connect_timeout_closes_half_open_socket() -> None:
    owned, addr = blackhole()
    try:
        c = build_connector(timeout=0.2)
        before = open_fds()
        errors: list[Any] = []
        assert c(http(addr[1]), lambda err, s: errors.append((err, s))) is None
        assert len(errors) == 1 and isinstance(errors[0][0], ConnectTimeoutError)
        assert "attempted address: 127.0.0.1:" in str(errors[0][0])
        assert open_fds() == before
    finally:
        for s in owned:
            s.close()


def test_timeout_zero_disables_and_outer_timeouts_pass_through(
    silent_listener: tuple[str, int],
) -> None:
    c = build_connector(timeout=0)
    before = open_fds()
    outer = gevent.Timeout(0.3)
    with pytest.raises(gevent.Timeout) as info:
        with outer:
            c(https(silent_listener[1], hostname="127.0.0.1"))
    assert info.value is outer  # not turned into ConnectTimeoutError, not swallowed
    assert open_fds() == before


# --------------------------------------------------------------------------- TLS


def test_tls_verifies_by_default(tls_server: Server) -> None:
    before = open_fds()
    with pytest.raises(ssl.SSLCertVerificationError):
        build_connector()(https(tls_server.port))
    tls_server.wait_idle()
    assert open_fds() == before


def test_tls_checks_hostname(ca: trustme.CA, cert: trustme.LeafCert) -> None:
    other = ca.issue_cert("other.example")
    ctx = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    other.configure_cert(ctx)
    srv = Server(("127.0.0.1", 0), tls=ctx)
    try:
        with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
            trusting(ca)(https(srv.port))
        # check_hostname=False keeps the chain check but not the name check.
        with trusting(ca, check_hostname=False)(https(srv.port)) as sock:
            assert sock.recv(5) == b"hello"
        # verify=False trusts anything.
        with build_connector(verify=False)(https(srv.port)) as sock:
            assert sock.recv(5) == b"hello"
    finally:
        srv.stop()


@pytest.mark.parametrize(
    ("server_alpn", "kwargs", "selected"),
    [
        (["h2"], {}, "h2"),
        (["http/1.1"], {}, "http/1.1"),
        (["http/1.1"], {"prefer_h2": True}, "http/1.1"),
        (["h2", "http/1.1"], {}, "h2"),  # OpenSSL servers pick by their own order
        (["h2", "http/1.1"], {"allow_h2": False}, "http/1.1"),
        (["h2"], {"allow_h2": False}, None),  # no overlap: no ALPN, still connected
    ],
)
def test_alpn(
    ca: trustme.CA,
    cert: trustme.LeafCert,
    server_alpn: list[str],
    kwargs: dict[str, Any],
    selected: str | None,
) -> None:
    srv = Server(("127.0.0.1", 0), tls=server_context(cert, alpn=server_alpn))
    try:
        with trusting(ca, **kwargs)(https(srv.port)) as sock:
            assert isinstance(sock, gevent.ssl.SSLSocket)
            assert sock.selected_alpn_protocol() == selected
            assert sock.recv(5) == b"hello"
    finally:
        srv.stop()


def test_user_ssl_context_used_as_given(ca: trustme.CA, tls_server: Server) -> None:
    ctx = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())  # a stdlib context
    c = build_connector(ssl_context=ctx, prefer_h2=True)
    assert c.ssl_context is ctx
    with c(https(tls_server.port)) as sock:
        assert sock.context is ctx
        assert sock.selected_alpn_protocol() == "h2"
        assert sock.recv(5) == b"hello"


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_session_resumed_on_second_connection(
    ca: trustme.CA, cert: trustme.LeafCert, version: ssl.TLSVersion
) -> None:
    srv = Server(("127.0.0.1", 0), tls=server_context(cert, version))
    try:
        c = trusting(ca)
        opts = https(srv.port)
        with c(opts) as first:
            assert first.version() == version.name.replace("_", ".")
            assert not first.session_reused
            assert first.recv(5) == b"hello"  # TLS 1.3: the ticket is read with the data
            assert c.remember_session(first, opts)
        assert len(c.sessions) == 1
        with c(opts) as second:
            assert second.session_reused
            assert second.recv(5) == b"hello"
    finally:
        srv.stop()


def test_a_tls13_session_is_kept_when_its_socket_closes(ca: trustme.CA, cert: trustme.LeafCert) -> None:
    # The connector used on its own, with no remember_session() call: the original
    # stores the session on the socket's "session" event; here the close does.
    srv = Server(("127.0.0.1", 0), tls=server_context(cert, ssl.TLSVersion.TLSv1_3))
    try:
        c = trusting(ca)
        opts = https(srv.port)
        reused = []
        for _ in range(3):
            with c(opts) as sock:
                assert sock.recv(5) == b"hello"  # the ticket comes with the data
                reused.append(sock.session_reused)
        assert reused == [False, True, True]
    finally:
        srv.stop()


def test_session_cache_disabled(ca: trustme.CA, cert: trustme.LeafCert) -> None:
    srv = Server(("127.0.0.1", 0), tls=server_context(cert, ssl.TLSVersion.TLSv1_2))
    try:
        c = trusting(ca, max_cached_sessions=0)
        opts = https(srv.port)
        for _ in range(2):
            with c(opts) as sock:
                assert not sock.session_reused
                assert sock.recv(5) == b"hello"
                assert not c.remember_session(sock, opts)
        assert len(c.sessions) == 0
    finally:
        srv.stop()


def test_session_cache_is_lru_keyed_by_servername_or_hostname() -> None:
    cache = SessionCache(2)
    a, b, d = object(), object(), object()
    cache.set("a:443", a)  # type: ignore[arg-type]
    cache.set("b:443", b)  # type: ignore[arg-type]
    assert cache.get("a:443") is a  # "a" is now the most recent
    cache.set("d:443", d)  # type: ignore[arg-type]
    assert cache.get("b:443") is None and cache.get("a:443") is a and len(cache) == 2
    c = build_connector(servername="svc.internal")
    assert c.session_key({"hostname": "10.0.0.1", "port": 8443, "protocol": "https:"}) == (
        "svc.internal:8443"
    )
    c = build_connector()
    assert c.session_key({"hostname": "[::1]", "protocol": "https:"}) == "::1:443"
    assert c.session_key(
        {"hostname": "1.2.3.4", "host": "example.com:8443", "protocol": "https:"}
    ) == ("example.com:443")


def test_servername_sni(ca: trustme.CA, tls_server: Server) -> None:
    c = trusting(ca)
    # derived from the Host header, port stripped, even when connecting to an IP
    with c(https(tls_server.port, hostname="127.0.0.1", host="localhost:1234")) as sock:
        assert sock.recv(5) == b"hello"
    # an IP literal in Host gives no SNI (the certificate is checked against the IP)
    with c(https(tls_server.port, hostname="127.0.0.1", host="127.0.0.1:443")) as sock:
        assert sock.recv(5) == b"hello"
    # an explicit servername wins
    with c(
        https(tls_server.port, hostname="127.0.0.1", servername="localhost", host="x:1")
    ) as sock:
        assert sock.recv(5) == b"hello"
    assert tls_server.sni == ["localhost", None, "localhost"]


def test_tls_upgrade_of_existing_socket(ca: trustme.CA, cert: trustme.LeafCert) -> None:
    srv = Server(("127.0.0.1", 0), tls=server_context(cert), greeting=b"")
    try:
        c = trusting(ca)
        raw = c(http(srv.port))
        with c(https(srv.port, http_socket=raw)) as tls:
            assert tls.version() == "TLSv1.3"
            tls.sendall(b"ping")
        assert raw.fileno() == -1  # consumed by the TLS socket
    finally:
        srv.stop()


# --------------------------------------------------------------------------- unix sockets


def test_unix_socket_plain_and_tls(tmp_path: Any, ca: trustme.CA, cert: trustme.LeafCert) -> None:
    path = str(tmp_path / "plain.sock")
    lsock = gsocket.socket(stdsocket.AF_UNIX)
    lsock.bind(path)
    lsock.listen()
    srv = Server(lsock)
    tls_path = str(tmp_path / "tls.sock")
    tls_lsock = gsocket.socket(stdsocket.AF_UNIX)
    tls_lsock.bind(tls_path)
    tls_lsock.listen()
    tls_srv = Server(tls_lsock, tls=server_context(cert))
    try:
        with build_connector(socket_path=path)(http(80, hostname="localhost")) as sock:
            assert sock.family == stdsocket.AF_UNIX
            assert sock.recv(5) == b"hello"
            assert socket_info(sock)["remote_address"] == path
            assert socket_info(sock)["remote_family"] == "unix"
        with trusting(ca, socket_path=tls_path)(https(443, hostname="localhost")) as sock:
            assert sock.recv(5) == b"hello"
        assert tls_srv.sni == ["localhost"]
        before = open_fds()
        missing = str(tmp_path / "missing.sock")
        with pytest.raises(FileNotFoundError):
            build_connector(socket_path=missing)(http(80))
        assert open_fds() == before
    finally:
        srv.stop()
        tls_srv.stop()
        lsock.close()
        tls_lsock.close()


# --------------------------------------------------------------------------- happy eyeballs


def ai(sockaddr: tuple[Any, ...]) -> he.AddrInfo:
    family = stdsocket.AF_INET6 if ":" in sockaddr[0] else stdsocket.AF_INET
    return (family, stdsocket.SOCK_STREAM, stdsocket.IPPROTO_TCP, "", sockaddr)


def test_interleave_families_ipv6_first() -> None:
    infos = [ai(("10.0.0.1", 1)), ai(("10.0.0.2", 1)), ai(("::2", 1, 0, 0)), ai(("10.0.0.3", 1))]
    order = [x[4][0] for x in he.interleave_families(infos)]
    assert order == ["::2", "10.0.0.1", "10.0.0.2", "10.0.0.3"]


def pinned(connector: Connector, infos: list[he.AddrInfo]) -> Connector:
    """Point the connector's resolver hook at fixed loopback addresses."""
    connector.resolve = lambda host, port: infos  # type: ignore[method-assign]
    return connector


def test_happy_eyeballs_falls_back_at_once_when_an_attempt_fails(tcp_server: Server) -> None:
    # The IPv6 address is tried first and refused: IPv4 starts immediately,
    # long before the 5 s attempt delay.
    c = pinned(
        build_connector(auto_select_family=True, auto_select_family_attempt_timeout=5.0),
        [ai(("127.0.0.1", tcp_server.port)), ai(("::1", refused_port(), 0, 0))],
    )
    start = time.monotonic()
    with c(http(8080, hostname="dual.test")) as sock:
        assert sock.getpeername() == ("127.0.0.1", tcp_server.port)
        assert sock.getsockopt(stdsocket.IPPROTO_TCP, stdsocket.TCP_NODELAY) != 0
    assert time.monotonic() - start < 2


def test_happy_eyeballs_starts_next_attempt_after_delay_and_closes_loser(
    tcp_server: Server,
) -> None:
    owned, hole = blackhole(stdsocket.AF_INET6)
    try:
        c = pinned(
            build_connector(auto_select_family=True, auto_select_family_attempt_timeout=0.1),
            [ai(hole), ai(("127.0.0.1", tcp_server.port))],
        )
        before = open_fds()
        start = time.monotonic()
        sock = c(http(8080, hostname="dual.test"))
        elapsed = time.monotonic() - start
        assert sock.getpeername() == ("127.0.0.1", tcp_server.port)
        assert 0.1 <= elapsed < 2
        sock.close()
        tcp_server.wait_idle()
        assert open_fds() == before  # the stalled IPv6 attempt was closed too
    finally:
        for s in owned:
            s.close()


def test_happy_eyeballs_total_timeout_lists_attempts() -> None:
    owned6, hole6 = blackhole(stdsocket.AF_INET6)
    owned4, hole4 = blackhole(stdsocket.AF_INET)
    try:
        c = pinned(
            build_connector(
                timeout=0.3, auto_select_family=True, auto_select_family_attempt_timeout=0.05
            ),
            [ai(hole4), ai(hole6)],
        )
        before = open_fds()
        with pytest.raises(ConnectTimeoutError) as info:
            c(http(8080, hostname="dual.test"))
        assert str(info.value) == (
            f"Connect Timeout Error (attempted addresses: [::1]:{hole6[1]}, "
            f"127.0.0.1:{hole4[1]}, timeout: 0.3s)"
        )
        assert open_fds() == before
    finally:
        for s in owned6 + owned4:
            s.close()


def test_happy_eyeballs_all_refused_raises_last_error() -> None:
    c = pinned(
        build_connector(auto_select_family=True),
        [ai(("127.0.0.1", refused_port())), ai(("::1", refused_port(), 0, 0))],
    )
    before = open_fds()
    with pytest.raises(ConnectionRefusedError):
        c(http(8080, hostname="dual.test"))
    assert open_fds() == before


def test_without_auto_select_family_addresses_are_tried_in_order(tcp_server: Server) -> None:
    c = pinned(
        build_connector(),
        [ai(("127.0.0.1", refused_port())), ai(("127.0.0.1", tcp_server.port))],
    )
    with c(http(8080, hostname="two.test")) as sock:
        assert sock.getpeername()[1] == tcp_server.port


def test_default_resolver_resolves_localhost(tcp_server: Server) -> None:
    with build_connector()(http(tcp_server.port, hostname="localhost")) as sock:
        assert sock.getpeername() == ("127.0.0.1", tcp_server.port)


def test_concurrent_connects_from_many_greenlets(tcp_server: Server) -> None:
    c = build_connector()
    jobs = [gevent.spawn(c, http(tcp_server.port)) for _ in range(20)]
    gevent.joinall(jobs, raise_error=True)
    socks = [j.value for j in jobs]
    assert len({s.getsockname() for s in socks}) == 20
    for s in socks:
        s.close()


def test_custom_connector_example_runs() -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "examples" / "custom_connector.py"
    done = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "accepted: hello from a pinned server" in done.stdout
    assert "rejected: CertificatePinError" in done.stdout
