"""Audit tests: build_connector (TCP, TLS, unix sockets, happy eyeballs) and ``interceptors.dns``."""

from __future__ import annotations

import socket
import ssl
from typing import Any

import gevent
import gevent.event
import pytest

import greenhttp
from greenhttp import interceptors
from greenhttp._core.dns_records import DNSStorage
from greenhttp._net.connector import build_connector
from greenhttp.errors import ConnectTimeoutError


def fixed(*records: dict[str, Any], counter: list[str] | None = None) -> Any:
    def lookup(origin: Any, options: dict[str, Any], callback: Any) -> None:
        if counter is not None:
            counter.append(origin.hostname)
        callback(None, [dict(r) for r in records])

    return lookup


def echo_host(conn: Any) -> None:
    while True:
        req = conn.read_request()
        if req is None:
            return
        conn.respond((req.header("host") or "").encode())


@pytest.fixture
def agent() -> Any:
    a = greenhttp.Agent()
    yield a
    with gevent.Timeout(5):
        a.destroy()


# --------------------------------------------------------------------------- dns interceptor


def test_dns_a_zero_ttl_record_serves_the_request_that_looked_it_up(make_server: Any) -> None:
    # RFC 1035 section 3.2.1: TTL 0 means "use only for the transaction in
    # progress, do not cache": the request that triggered the lookup must use it.
    calls: list[str] = []
    sink: list[str] = []
    storage = DNSStorage()
    d = interceptors.dns(
        lookup=fixed({"address": "1.1.1.1", "family": 4, "ttl": 0}, counter=calls), storage=storage
    )(lambda opts, handler: sink.append(opts["origin"]) or True)

    class Handler:
        errors: list[BaseException] = []

        def on_response_error(self, controller: Any, err: BaseException) -> None:
            self.errors.append(err)

    for _ in range(3):
        d({"origin": "http://zero.test", "path": "/", "method": "GET"}, Handler())
    assert Handler.errors == []
    assert sink == ["http://1.1.1.1"] * 3
    assert calls == ["zero.test"] * 3  # never cached: each request looks the name up again


# --------------------------------------------------------------------------- TLS sessions through a Client


@pytest.fixture(scope="module")
def ca() -> Any:
    import trustme

    return trustme.CA()


def _h2_tls_server(ca: Any, names: tuple[str, ...], reused: list[bool]) -> Any:
    import gevent.ssl as gssl

    from h2_support.h2server import H2Server, serve_ok

    def handler(conn: Any) -> None:
        reused.append(conn.sock.session_reused)
        serve_ok(conn)

    ctx = gssl.SSLContext(gssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert(*names).configure_cert(ctx)
    ctx.set_alpn_protocols(["h2"])
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    return H2Server(handler, ssl_context=ctx)


def test_h2_tls13_session_is_resumed_under_the_request_servername(ca: Any) -> None:
    # The session must be cached under the key the connection was opened with
    # ("servername or hostname:port"), so the next connection with the same
    # servername offers it (spec 2.3: "reused for the same servername").
    reused: list[bool] = []
    server = _h2_tls_server(ca, ("h2.test",), reused)  # only valid for the servername, not the IP
    connector = build_connector(cadata=ca.cert_pem.bytes().decode())
    try:
        for _ in range(2):
            client = greenhttp.Client(server.origin, connect=connector)
            try:
                data = client.request(path="/", method="GET", servername="h2.test")
                assert data.body.bytes() == b"ok /"
            finally:
                with gevent.Timeout(5):
                    client.close()
        assert reused == [False, True]
        assert connector.sessions.get(f"h2.test:{server.port}") is not None
        assert connector.sessions.get(f"127.0.0.1:{server.port}") is None
    finally:
        server.stop()


def _tls13_context(ca: Any, names: tuple[str, ...], alpn: list[str]) -> Any:
    import gevent.ssl as gssl

    ctx = gssl.SSLContext(gssl.PROTOCOL_TLS_SERVER)  # gevent's: the server must not block
    ca.issue_cert(*names).configure_cert(ctx)
    ctx.set_alpn_protocols(alpn)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    return ctx


def _closing_h1(reused: list[bool]) -> Any:
    """Answer one request per connection, recording whether its TLS session was resumed."""

    def handler(conn: Any) -> None:
        if conn.read_request() is None:
            return
        reused.append(conn.sock.session_reused)
        conn.respond(b"hello", headers=[("Connection", "close")])

    return handler


def test_tls13_session_resumed_with_a_user_built_connector(ca: Any, make_server: Any) -> None:
    # docs/connector.md: the Client calls remember_session after the first
    # response, also when the connector is one the user built (connect=...).
    reused: list[bool] = []
    server = make_server(_closing_h1(reused), ssl_context=_tls13_context(ca, ("127.0.0.1",), ["http/1.1"]))
    connector = build_connector(cadata=ca.cert_pem.bytes().decode())
    client = greenhttp.Client(server.origin, connect=connector)
    try:
        for _ in range(3):
            assert client.request(path="/", method="GET").body.bytes() == b"hello"
    finally:
        with gevent.Timeout(5):
            client.close()
    assert reused == [False, True, True]


def test_pool_members_resume_a_tls13_session(ca: Any, make_server: Any) -> None:
    # A Pool (and so an Agent) shares one connector between its members: a
    # TLS 1.3 session ticket one member received is offered by the next.
    reused: list[bool] = []
    server = make_server(_closing_h1(reused), ssl_context=_tls13_context(ca, ("127.0.0.1",), ["http/1.1"]))
    pool = greenhttp.Pool(server.origin, connect={"cadata": ca.cert_pem.bytes().decode()})
    try:
        for _ in range(3):
            assert pool.request(path="/", method="GET").body.bytes() == b"hello"
    finally:
        with gevent.Timeout(5):
            pool.close()
    assert reused == [False, True, True]


# --------------------------------------------------------------------------- connector


class _Stalling:
    """TLS 1.2 on the first connection; later connections are accepted, then never answered."""

    def __init__(self, ctx: Any) -> None:
        from gevent.server import StreamServer

        self.ctx = ctx
        self.count = 0
        self.server = StreamServer(("127.0.0.1", 0), self.handle)
        self.server.start()

    def handle(self, sock: Any, _addr: Any) -> None:
        self.count += 1
        try:
            if self.count == 1:
                sock = self.ctx.wrap_socket(sock, server_side=True)
            while sock.recv(1024):
                pass
        except OSError:
            pass
        finally:
            sock.close()


def test_a_handshake_that_times_out_drops_the_cached_session(ca: Any) -> None:
    # docs/connector.md: "A failed handshake drops the key's session."
    ctx = _tls13_context(ca, ("localhost",), ["http/1.1"])
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    server = _Stalling(ctx)
    try:
        connector = build_connector(cadata=ca.cert_pem.bytes().decode(), timeout=0.2)
        options = {"hostname": "localhost", "protocol": "https:", "port": server.server.server_port}
        connector(options).close()
        key = connector.session_key(options)
        assert connector.sessions.get(key) is not None
        with pytest.raises(ConnectTimeoutError):
            connector(options)
        assert connector.sessions.get(key) is None
    finally:
        server.server.stop()


def test_unix_socket_errors_are_oserrors(tmp_path: Any) -> None:
    import errno
    import socket as stdsocket

    path = str(tmp_path / "s.sock")
    with pytest.raises(FileNotFoundError):
        build_connector(socket_path=path)({"hostname": "localhost", "protocol": "http:"})
    bound = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    bound.bind(path)  # bound, not listening: refused
    try:
        with pytest.raises(ConnectionRefusedError) as info:
            build_connector(socket_path=path)({"hostname": "localhost", "protocol": "http:"})
        assert info.value.errno == errno.ECONNREFUSED
    finally:
        bound.close()


def test_a_stalled_name_resolution_is_a_connect_timeout() -> None:
    connector = build_connector(timeout=0.1)

    def stall(host: str, port: int) -> Any:
        gevent.sleep(5)
        raise AssertionError("not reached")

    connector.resolve = stall
    with gevent.Timeout(2):
        with pytest.raises(ConnectTimeoutError, match=r"attempted address: slow\.test:80, timeout: 0\.1s"):
            connector({"hostname": "slow.test", "protocol": "http:"})


def test_certificate_failure_reaches_the_request_as_ssl_error(ca: Any, make_server: Any) -> None:
    other = __import__("trustme").CA()
    server = make_server(_closing_h1([]), ssl_context=_tls13_context(other, ("127.0.0.1",), ["http/1.1"]))
    client = greenhttp.Client(server.origin, connect={"cadata": ca.cert_pem.bytes().decode()})
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            client.request(path="/", method="GET")
    finally:
        with gevent.Timeout(5):
            client.close()


# --------------------------------------------------------------------------- servername per request


def _recording_context(ca: Any, names: tuple[str, ...], alpn: list[str], seen: list[str | None]) -> Any:
    ctx = _tls13_context(ca, names, alpn)
    ctx.sni_callback = lambda sslobj, name, c: seen.append(name)
    return ctx


def _serve_h1(conn: Any) -> None:
    while conn.read_request() is not None:
        conn.respond(b"hello")


def test_a_request_for_another_servername_gets_its_own_tls_connection(ca: Any, make_server: Any) -> None:
    # REFERENCE.md (request servername): a request whose servername differs from
    # the connection's reconnects; a connection is never used for a name its
    # certificate was not checked against.
    sni: list[str | None] = []
    server = make_server(_serve_h1, ssl_context=_recording_context(ca, ("a.test", "b.test"), ["http/1.1"], sni))
    client = greenhttp.Client(server.origin, connect={"cadata": ca.cert_pem.bytes().decode()})
    try:
        for name in ("a.test", "a.test", "b.test", "b.test"):
            assert client.request(path="/", method="GET", servername=name).body.bytes() == b"hello"
    finally:
        with gevent.Timeout(5):
            client.close()
    assert sni == ["a.test", "b.test"]


def test_h2_a_request_for_another_servername_gets_its_own_tls_connection(ca: Any) -> None:
    import gevent.ssl as gssl

    from h2_support.h2server import H2Server, serve_ok

    sni: list[str | None] = []
    ctx = gssl.SSLContext(gssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("a.test", "b.test").configure_cert(ctx)
    ctx.set_alpn_protocols(["h2"])
    ctx.sni_callback = lambda sslobj, name, c: sni.append(name)
    server = H2Server(serve_ok, ssl_context=ctx)
    client = greenhttp.Client(server.origin, connect={"cadata": ca.cert_pem.bytes().decode()})
    try:
        for name in ("a.test", "a.test", "b.test", "a.test"):
            assert client.request(path="/", method="GET", servername=name).body.bytes() == b"ok /"
    finally:
        with gevent.Timeout(5):
            client.close()
        server.stop()
    assert sni == ["a.test", "b.test", "a.test"]


def test_dns_interceptor_never_reuses_a_connection_checked_for_another_name(ca: Any, make_server: Any) -> None:
    # Two names on one address share the Agent's pool for https://127.0.0.1:port;
    # the certificate is only valid for a.test, so b.test must fail verification
    # instead of riding on a.test's connection.
    server = make_server(_serve_h1, ssl_context=_tls13_context(ca, ("a.test",), ["http/1.1"]))
    lookup = fixed({"address": "127.0.0.1", "family": 4, "port": server.port})
    agent = greenhttp.Agent(connect={"cadata": ca.cert_pem.bytes().decode()})
    d = agent.compose(interceptors.dns(lookup=lookup))
    try:
        assert d.request(origin="https://a.test", path="/").body.bytes() == b"hello"
        with pytest.raises(ssl.SSLCertVerificationError):
            d.request(origin="https://b.test", path="/")
        assert d.request(origin="https://a.test", path="/").body.bytes() == b"hello"
    finally:
        with gevent.Timeout(5):
            agent.destroy()


@pytest.mark.parametrize("pipelining", [1, 4])
def test_a_servername_change_waits_for_the_running_requests(ca: Any, make_server: Any, pipelining: int) -> None:
    sni: list[str | None] = []
    release = gevent.event.Event()

    def slow(conn: Any) -> None:
        while (req := conn.read_request()) is not None:
            if req.target == "/slow":
                release.wait(5)
            conn.respond(req.target.encode())

    server = make_server(slow, ssl_context=_recording_context(ca, ("a.test", "b.test"), ["http/1.1"], sni))
    client = greenhttp.Client(server.origin, connect={"cadata": ca.cert_pem.bytes().decode()}, pipelining=pipelining)
    try:
        first = gevent.spawn(lambda: client.request(path="/slow", method="GET", servername="a.test").body.bytes())
        gevent.sleep(0)  # let it be written
        second = gevent.spawn(lambda: client.request(path="/other", method="GET", servername="b.test").body.bytes())
        with gevent.Timeout(5):
            while len(sni) < 1 or client.stats.running < 1:
                gevent.sleep(0.005)
        assert not second.ready() and sni == ["a.test"]  # b.test waits for a.test's request
        release.set()
        gevent.joinall([first, second], timeout=5, raise_error=True)
        assert (first.value, second.value) == (b"/slow", b"/other")
    finally:
        release.set()
        with gevent.Timeout(5):
            client.close()
    assert sni == ["a.test", "b.test"]


def _ipv6_loopback() -> bool:
    import socket as stdsocket

    if not stdsocket.has_ipv6:
        return False
    try:
        with stdsocket.socket(stdsocket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_dns_a_connect_timeout_drops_the_address_and_retries_on_ipv6(ca: Any) -> None:
    import socket as stdsocket

    from gevent.server import StreamServer

    ctx = _tls13_context(ca, ("a.test",), ["http/1.1"])

    def handle(sock: Any, _addr: Any) -> None:
        from types import SimpleNamespace

        from testkit import ServerConn

        conn = ServerConn(sock, SimpleNamespace(requests=[]))  # type: ignore[arg-type]
        try:
            while conn.read_request() is not None:
                conn.respond(b"over ipv6")
        except OSError:
            pass

    v6 = StreamServer(("::1", 0), handle, ssl_context=ctx)
    v6.start()
    silent = stdsocket.socket()  # listens, never accepts: the TLS handshake stalls
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    storage = DNSStorage()
    lookup = fixed(
        {"address": "127.0.0.1", "family": 4, "port": silent.getsockname()[1]},
        {"address": "::1", "family": 6, "port": v6.server_port},
    )
    agent = greenhttp.Agent(connect={"cadata": ca.cert_pem.bytes().decode(), "timeout": 0.2})
    d = agent.compose(interceptors.dns(lookup=lookup, storage=storage))
    try:
        with gevent.Timeout(5):
            assert d.request(origin="https://a.test", path="/").body.bytes() == b"over ipv6"
        records = storage.get("a.test")["records"]
        assert records[4]["ips"] == [] and [r["address"] for r in records[6]["ips"]] == ["::1"]
    finally:
        with gevent.Timeout(5):
            agent.destroy()
        v6.stop()
        silent.close()


@pytest.mark.parametrize("where", ["host", "servername", "hostname"])
def test_a_fully_qualified_name_with_a_trailing_dot_sends_sni_without_it(ca: Any, where: str) -> None:
    # RFC 6066 section 3: the SNI host name is sent "without a trailing dot";
    # the certificate for "localhost" is valid for "localhost." (Node strips it too).
    from gevent.server import StreamServer

    sni: list[str | None] = []
    ctx = _recording_context(ca, ("localhost",), ["http/1.1"], sni)

    def handle(sock: Any, _addr: Any) -> None:
        try:
            sock.recv(1)
        except OSError:
            pass

    server = StreamServer(("127.0.0.1", 0), handle, ssl_context=ctx)
    server.start()
    try:
        connector = build_connector(cadata=ca.cert_pem.bytes().decode())
        connector.resolve = lambda host, port: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        options: dict[str, Any] = {"hostname": "127.0.0.1", "protocol": "https:", "port": server.server_port}
        if where == "hostname":
            options["hostname"] = "localhost."
        else:
            options[where] = f"localhost.:{server.server_port}" if where == "host" else "localhost."
        with gevent.Timeout(5):
            connector(options).close()
        assert sni == ["localhost"]
    finally:
        server.stop()


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
@pytest.mark.parametrize("v6_listens", [True, False])
def test_happy_eyeballs_over_real_ipv6_and_ipv4_loopback(make_server: Any, v6_listens: bool) -> None:
    import time

    from gevent.server import StreamServer

    v4 = make_server(echo_host)
    v6 = StreamServer(("::1", 0), lambda sock, addr: sock.sendall(b"v6"))
    v6.start()
    dead = socket.socket(socket.AF_INET6)
    dead.bind(("::1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()  # nothing listens there: refused at once
    v6_port = v6.server_port if v6_listens else dead_port
    try:
        connector = build_connector(auto_select_family=True, auto_select_family_attempt_timeout=5)
        connector.resolve = lambda host, port: [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", v4.port)),
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", v6_port, 0, 0)),
        ]
        start = time.monotonic()
        with gevent.Timeout(3):
            sock = connector({"hostname": "dual.test", "protocol": "http:"})
        try:
            assert time.monotonic() - start < 1  # a refused attempt starts the next at once
            assert sock.family == (socket.AF_INET6 if v6_listens else socket.AF_INET)  # IPv6 first
        finally:
            sock.close()
    finally:
        v6.stop()
