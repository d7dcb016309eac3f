"""CONNECT (RFC 9113 §8.5) and extended CONNECT (RFC 8441) tunnels over HTTP/2."""

from __future__ import annotations

import socket

import gevent
import h2.settings
import pytest

from greenhttp.errors import InformationalError, ResponseError
from h2_support.h2server import serve_ok

pytest_plugins = ["h2_support.fixtures"]


def _echo_tunnels(conn):
    """Answer CONNECTs with 200 and echo their bytes; other requests get ``ok <path>``."""

    def echo(req):
        conn.send_headers(req.stream_id, 200)
        while True:
            chunk = req.chunks.get(timeout=10)
            if chunk is None:  # the client ended its side: end ours
                with conn.lock:
                    conn.h2.end_stream(req.stream_id)
                conn.flush()
                return
            if chunk:
                conn.send_body(req.stream_id, chunk, end=False)

    def answer(req):
        while req.chunks.get(timeout=10) is not None:
            pass
        conn.respond(req.stream_id, body=b"ok " + req.path.encode())

    while True:
        req = conn.opened.get(timeout=30)
        if req is None:
            return
        conn.greenlets.append(gevent.spawn(echo if req.method == "CONNECT" else answer, req))


def test_connect_tunnel_beside_ordinary_requests(make_h2_server, make_h2c):
    server = make_h2_server(_echo_tunnels)
    client = make_h2c(server.origin)
    data = client.connect(path="example.test:443")
    assert data.status_code == 200
    tunnel = data.socket
    tunnel.sendall(b"hello")
    assert tunnel.recv(100) == b"hello"
    assert client.request(path="/side").body.text() == "ok /side"  # same connection, another stream
    tunnel.sendall(b"again")
    buf = bytearray(100)
    n = tunnel.recv_into(buf)
    assert bytes(buf[:n]) == b"again"
    tunnel.shutdown(socket.SHUT_WR)
    assert tunnel.recv(100) == b""  # the server ended its side after ours
    tunnel.close()
    req = server.requests[0]
    assert req.headers == [(":method", "CONNECT"), (":authority", "example.test:443")]
    assert server.accepted == 1
    assert client.stats.running == 0


def test_extended_connect_for_an_upgrade(make_h2_server, make_h2c):
    settings = {h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL: 1}
    server = make_h2_server(_echo_tunnels, settings=settings)
    client = make_h2c(server.origin)
    up = client.upgrade(path="/chat", protocol="websocket", headers={"sec-websocket-version": "13"})
    up.socket.sendall(b"frame")
    assert up.socket.recv(100) == b"frame"
    up.socket.close()
    req = server.requests[0]
    assert req.headers[:5] == [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "http"),
        (":path", "/chat"),
        (":authority", f"127.0.0.1:{server.port}"),
    ]
    assert req.header("sec-websocket-version") == "13"
    gevent.sleep(0.05)
    assert req.reset_code == h2.errors.ErrorCodes.CANCEL  # close() before the ends met


def test_extended_connect_needs_the_servers_setting(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin)
    with pytest.raises(InformationalError, match="Extended CONNECT"):
        client.upgrade(path="/chat", protocol="websocket")
    assert client.request(path="/still").body.text() == "ok /still"


@pytest.mark.parametrize("raw", [False, True])
def test_a_refused_connect_raises_response_error_with_its_status_as_on_http1(make_h2_server, make_h2c, raw):
    def handler(conn):
        req = conn.opened.get(timeout=10)
        conn.respond(req.stream_id, status=403, body=b"no", headers=[("x-why", "denied")])
        serve_ok(conn)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    with pytest.raises(ResponseError) as caught:
        client.connect(path="blocked.test:443", response_headers="raw" if raw else None)
    assert caught.value.status_code == 403
    headers = caught.value.headers
    if raw:
        assert headers[:2] == [b"x-why", b"denied"]
    else:
        assert headers["x-why"] == "denied"
    assert client.request(path="/ok").body.text() == "ok /ok"


def test_a_tunnel_streams_a_megabyte_each_way_with_flow_control(make_h2_server, make_h2c):
    server = make_h2_server(_echo_tunnels)
    client = make_h2c(server.origin, initial_window_size=65535, connection_window_size=65535)
    tunnel = client.connect(path="bulk.test:1").socket
    payload = bytes(range(256)) * 4096

    def writer():
        for i in range(0, len(payload), 16384):
            tunnel.sendall(payload[i : i + 16384])
        tunnel.shutdown(socket.SHUT_WR)

    w = gevent.spawn(writer)
    got = bytearray()
    while True:
        chunk = tunnel.recv(65536)
        if not chunk:
            break
        got += chunk
        gevent.sleep(0)
    w.get(timeout=10)
    assert got == payload
    tunnel.close()


def test_a_tunnel_fails_when_the_connection_goes(make_h2_server, make_h2c):
    def handler(conn):
        req = conn.opened.get(timeout=10)
        conn.send_headers(req.stream_id, 200)
        gevent.sleep(0.05)
        conn.close()

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    tunnel = client.connect(path="gone.test:1").socket
    with pytest.raises(OSError):
        tunnel.recv(10)
        tunnel.recv(10)
