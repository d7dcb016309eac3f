"""H2CClient and HTTP/2 in Client: requests, headers, bodies, options (scripted h2 server)."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import gevent
import h2.events
import pytest
import trustme
from gevent import ssl as gssl

import greenhttp
from greenhttp.errors import (
    HeadersTimeoutError,
    InformationalError,
    InvalidArgumentError,
    RequestContentLengthMismatchError,
)
from h2_support.h2server import serve_ok
from testkit import wait_for

pytest_plugins = ["h2_support.fixtures"]


def test_get_over_h2c(make_h2_server, make_h2c):
    def handler(conn):
        req = conn.next_request()
        conn.respond(
            req.stream_id,
            body=b"hello h2",
            headers=[("x-one", "1"), ("x-two", "a"), ("x-two", "b"), ("set-cookie", "a=1")],
        )

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    r = client.request(path="/p?q=1")
    assert r.status_code == 200
    assert r.status_text == ""
    assert r.headers["x-one"] == "1"
    assert r.headers["x-two"] == ["a", "b"]
    assert r.headers["set-cookie"] == ["a=1"]
    assert r.body.bytes() == b"hello h2"
    req = server.requests[0]
    assert req.headers[:4] == [
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", f"127.0.0.1:{server.port}"),
        (":path", "/p?q=1"),
    ]


def test_pseudo_headers_are_the_librarys_and_names_are_lower_case(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin)
    r = client.request(path="/x", headers={"Host": "example.test", "X-Mixed-Case": "  v  ", "Cookie": "k=v"})
    assert r.body.text() == "ok /x"
    req = server.requests[0]
    assert req.header(":authority") == "example.test"
    assert req.header("host") is None
    assert req.header("x-mixed-case") == "v"
    assert req.header("cookie") == "k=v"
    assert all(name == name.lower() for name, _ in req.headers)


def test_post_bytes_body_sends_content_length(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin)
    r = client.request(path="/up", method="POST", body=b"x" * 1000)
    assert r.body.text() == "ok /up"
    req = server.requests[0]
    assert req.body == b"x" * 1000
    assert req.header("content-length") == "1000"


def test_empty_post_says_content_length_zero_and_get_says_nothing(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin)
    client.request(path="/a", method="POST").body.bytes()
    client.request(path="/b").body.bytes()
    assert server.requests[0].header("content-length") == "0"
    assert server.requests[1].header("content-length") is None


def test_streamed_body_without_length(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin)
    parts = [b"a" * 70000, b"b" * 5, "ü"]
    r = client.request(path="/s", method="PUT", body=iter(parts))
    assert r.status_code == 200
    r.body.bytes()
    req = server.requests[0]
    assert req.body == b"a" * 70000 + b"b" * 5 + "ü".encode()
    assert req.header("content-length") is None


def test_streamed_body_longer_than_declared_fails_that_request_only(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin)
    with pytest.raises(RequestContentLengthMismatchError):
        client.request(path="/bad", method="PUT", body=iter([b"abc", b"def"]), headers={"content-length": "4"})
    assert client.request(path="/after").body.text() == "ok /after"
    assert server.accepted == 1


def test_body_iterator_error_fails_the_request(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin)

    def gen():
        yield b"first"
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        client.request(path="/gen", method="POST", body=gen())
    assert client.request(path="/next").body.text() == "ok /next"
    assert server.accepted == 1


def test_trailers(make_h2_server, make_h2c):
    def handler(conn):
        req = conn.next_request()
        conn.respond(req.stream_id, body=b"data", trailers=[("x-checksum", "abc"), ("x-more", "1")])

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    r = client.request(path="/t")
    assert r.body.bytes() == b"data"
    assert r.trailers == {"x-checksum": "abc", "x-more": "1"}


def test_raw_response_headers(make_h2_server, make_h2c):
    def handler(conn):
        req = conn.next_request()
        conn.respond(req.stream_id, body=b"r", headers=[("x-a", "1")])

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    r = client.request(path="/", response_headers="raw")
    assert r.headers[:2] == [b"x-a", b"1"]
    assert b"content-length" in r.headers


@pytest.mark.parametrize("name,value", [("proxy-connection", "keep-alive"), ("te", "gzip")])
def test_connection_specific_header_is_a_clear_error_and_the_session_lives(make_h2_server, make_h2c, name, value):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin)
    assert client.request(path="/1").body.text() == "ok /1"
    with pytest.raises(InformationalError, match=name):
        client.request(path="/2", headers={name: value})
    assert client.request(path="/3").body.text() == "ok /3"
    assert server.accepted == 1
    assert [r.path for r in server.requests] == ["/1", "/3"]


def test_te_trailers_is_allowed(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin)
    assert client.request(path="/te", headers={"te": "trailers"}).status_code == 200
    assert server.requests[0].header("te") == "trailers"


def test_informational_responses_reach_on_info(make_h2_server, make_h2c):
    def handler(conn):
        req = conn.next_request()
        conn.send_headers(req.stream_id, 103, [("link", "</s.css>; rel=preload")])
        conn.respond(req.stream_id, body=b"final")

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    infos = []
    r = client.request(path="/", on_info=infos.append)
    assert r.body.bytes() == b"final"
    assert infos == [{"status_code": 103, "headers": {"link": "</s.css>; rel=preload"}}]


def test_expect_continue_sends_the_body_after_100(make_h2_server, make_h2c):
    def handler(conn):
        gevent.sleep(0.05)
        req = conn.streams[1]
        assert req.header("expect") == "100-continue"
        assert req.body == b""
        conn.send_headers(1, 100)
        req = conn.next_request()
        conn.respond(req.stream_id, body=b"got " + req.body)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    r = client.request(path="/e", method="PUT", body=b"payload", expect_continue=True)
    assert r.body.bytes() == b"got payload"
    assert not server.errors


def test_expect_continue_sends_the_body_anyway_when_the_server_ignores_it(make_h2_server, make_h2c):
    """RFC 9110 §10.1.1: no 100 Continue within 1 s (as on HTTP/1.1): the body goes."""

    def handler(conn):
        req = conn.next_request()  # complete only once the body arrived
        conn.respond(req.stream_id, body=b"got " + req.body)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    started = time.monotonic()
    with gevent.Timeout(5):
        r = client.request(path="/e", method="PUT", body=b"payload", expect_continue=True)
        assert r.body.bytes() == b"got payload"
    assert time.monotonic() - started > 0.5  # it did wait for a 100 first
    assert not server.errors


def test_expect_continue_still_times_out_on_a_silent_server(make_h2_server, make_h2c):
    """A headers_timeout shorter than the wait for 100 fires as before."""
    server = make_h2_server(lambda conn: conn.next_request())
    client = make_h2c(server.origin, headers_timeout=0.2)
    with gevent.Timeout(5), pytest.raises(HeadersTimeoutError):
        client.request(path="/e", method="PUT", body=b"payload", expect_continue=True)


def test_head_request(make_h2_server, make_h2c):
    def handler(conn):
        req = conn.next_request()
        conn.send_headers(req.stream_id, 200, [("content-length", "1234")], end=True)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    r = client.request(path="/h", method="HEAD")
    assert r.headers["content-length"] == "1234"
    assert r.body.bytes() == b""


def test_malformed_response_head_fails_that_stream_only(make_h2_server, make_h2c):
    def handler(conn):
        first = conn.next_request()
        second = conn.next_request()
        conn.send_headers(first.stream_id, 200, [("Bad-Upper", "x")], end=True)
        conn.respond(second.stream_id, body=b"fine")

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    results = {}

    def get(path):
        try:
            results[path] = client.request(path=path).body.bytes()
        except Exception as exc:
            results[path] = exc

    g1 = gevent.spawn(get, "/bad")
    gevent.sleep(0.02)
    g2 = gevent.spawn(get, "/good")
    gevent.joinall([g1, g2], timeout=5)
    assert isinstance(results["/bad"], InformationalError)
    assert "malformed" in str(results["/bad"])
    assert results["/good"] == b"fine"
    assert server.accepted == 1


def test_dispatch_handler_protocol(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin)
    calls = []
    done = gevent.event.Event()

    class Handler:
        def on_request_start(self, controller, context):
            calls.append("start")

        def on_response_start(self, controller, status, headers, message):
            calls.append(("head", status, message))

        def on_response_data(self, controller, chunk):
            calls.append(("data", chunk))

        def on_response_end(self, controller, trailers):
            calls.append(("end", trailers))
            done.set()

        def on_response_error(self, controller, err):
            calls.append(("error", err))
            done.set()

    client.dispatch({"path": "/d", "method": "GET"}, Handler())
    assert done.wait(5)
    assert calls == ["start", ("head", 200, ""), ("data", b"ok /d"), ("end", {})]


# -- options -------------------------------------------------------------------------


def test_h2c_client_refuses_https_and_bad_options():
    with pytest.raises(InvalidArgumentError, match="http:"):
        greenhttp.H2CClient("https://127.0.0.1:1")
    with pytest.raises(InvalidArgumentError, match="pipelining"):
        greenhttp.H2CClient("http://127.0.0.1:1", pipelining=101)
    with pytest.raises(InvalidArgumentError, match="pipelining"):
        greenhttp.H2CClient("http://127.0.0.1:1", max_concurrent_streams=10, pipelining=11)
    with pytest.raises(InvalidArgumentError, match="max_concurrent_streams"):
        greenhttp.H2CClient("http://127.0.0.1:1", max_concurrent_streams=0)
    with pytest.raises(InvalidArgumentError, match="allow_h2"):
        greenhttp.H2CClient("http://127.0.0.1:1", connect={"allow_h2": True})
    with pytest.raises(InvalidArgumentError, match="use_h2c"):
        greenhttp.H2CClient("http://127.0.0.1:1", use_h2c=False)


def test_h2c_client_defaults_and_pipelining_alias():
    c = greenhttp.H2CClient("http://127.0.0.1:1")
    assert c.pipelining == 100
    assert c._opts.max_concurrent_streams == 100
    assert c._opts.keep_alive_timeout_threshold == 1.0
    assert c._opts.allow_h2 and c._opts.use_h2c
    c.pipelining = 50
    assert c.pipelining == 50
    with pytest.raises(InvalidArgumentError):
        c.pipelining = 101
    with pytest.raises(InvalidArgumentError):
        c.pipelining = 0
    assert greenhttp.H2CClient("http://127.0.0.1:1", max_concurrent_streams=8).pipelining == 8
    assert greenhttp.H2CClient("http://127.0.0.1:1", keep_alive_timeout_threshold=3).pipelining == 100
    assert repr(c).startswith("<greenhttp.H2CClient http://127.0.0.1:1")
    c.destroy()


def test_client_use_h2c_speaks_h2_and_plain_client_speaks_h1(make_h2_server, make_h2c, make_server):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin, cls=greenhttp.Client, use_h2c=True)
    assert client.request(path="/c").body.text() == "ok /c"
    assert server.requests[0].path == "/c"


def test_h2c_over_a_unix_socket(make_h2_server, make_h2c, tmp_path):
    path = str(tmp_path / "h2.sock")
    server = make_h2_server(serve_ok, unix_path=path)
    client = make_h2c("http://localhost", socket_path=path)
    assert client.request(path="/u").body.text() == "ok /u"
    assert server.requests[0].header(":authority") == "localhost"


def test_debug_lines_say_h2(make_h2_server, make_h2c, caplog):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin)
    with caplog.at_level(logging.DEBUG, logger="greenhttp"):
        client.request(path="/dbg").body.bytes()
    messages = [r.getMessage() for r in caplog.records]
    assert f"connected to 127.0.0.1:{server.port} using http:h2" in messages
    assert f"sending request to GET {server.origin}/dbg" in messages
    assert f"received response to GET {server.origin}/dbg - HTTP 200" in messages


def test_push_is_disabled_and_windows_are_advertised(make_h2_server, make_h2c):
    seen = {}

    def handler(conn):
        req = conn.next_request()
        with conn.lock:
            remote = conn.h2.remote_settings
            seen["push"] = remote.enable_push
            seen["window"] = remote.initial_window_size
            seen["streams"] = remote.max_concurrent_streams
            seen["conn_window"] = conn.h2.outbound_flow_control_window
        conn.respond(req.stream_id)

    server = make_h2_server(handler)
    client = make_h2c(server.origin, max_concurrent_streams=42, initial_window_size=100000, connection_window_size=1 << 20)
    client.request(path="/").body.bytes()
    assert seen == {"push": 0, "window": 100000, "streams": 42, "conn_window": 1 << 20}


# -- TLS with ALPN ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


def _tls_context(ca, alpn):
    # gevent's SSLContext: the server's greenlets must not block the process.
    ctx = gssl.SSLContext(gssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
    ctx.set_alpn_protocols(alpn)
    return ctx


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls"])
def test_close_says_goodbye_with_a_goaway(make_h2_server, make_h2c, ca, tls):
    # docs/http2.md: close() sends GOAWAY before the socket closes, over TLS too (a
    # TLS socket cannot send "what fits now", so it was skipped there).
    if tls:
        server = make_h2_server(serve_ok, ssl_context=_tls_context(ca, ["h2"]))
        client = make_h2c(
            f"https://localhost:{server.port}", cls=greenhttp.Client, connect={"cadata": ca.cert_pem.bytes().decode()}
        )
    else:
        server = make_h2_server(serve_ok)
        client = make_h2c(server.origin)
    with gevent.Timeout(5):
        assert client.request(path="/").body.text() == "ok /"
        client.close()
    conn = server.conns[0]
    wait_for(lambda: any(type(ev) is h2.events.ConnectionTerminated for ev in conn.events), what="the GOAWAY")


def test_alpn_h2_over_tls(make_h2_server, make_h2c, ca, caplog):
    server = make_h2_server(serve_ok, ssl_context=_tls_context(ca, ["h2"]))
    client = make_h2c(
        f"https://localhost:{server.port}", cls=greenhttp.Client, connect={"cadata": ca.cert_pem.bytes().decode()}
    )
    with caplog.at_level(logging.DEBUG, logger="greenhttp"):
        assert client.request(path="/tls").body.text() == "ok /tls"
    assert f"connected to localhost:{server.port} using https:h2" in [r.getMessage() for r in caplog.records]
    results = []

    def get(i):
        results.append(client.request(path=f"/{i}").body.text())

    gevent.joinall([gevent.spawn(get, i) for i in range(20)], timeout=10)
    assert sorted(results) == sorted(f"ok /{i}" for i in range(20))
    assert server.accepted == 1
    assert server.requests[0].header(":scheme") == "https"


def test_the_h2c_example_runs():
    script = Path(__file__).resolve().parent.parent.parent / "examples" / "h2c.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "200 you asked for /item/0" in out.stdout
    assert "20 responses over 1 connection(s)" in out.stdout


def test_stream_and_pipeline_over_h2(make_h2_server, make_h2c):
    def handler(conn):
        while True:
            req = conn.next_request()
            if req is None:
                return
            conn.respond_later(req.stream_id, body=b"echo:" + req.body)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)

    class Sink:
        def __init__(self):
            self.parts = []

        def write(self, chunk):
            self.parts.append(chunk)

    sink = Sink()
    data = client.stream(path="/s", method="POST", body=b"to stream", factory=lambda d: sink)
    assert b"".join(sink.parts) == b"echo:to stream"
    assert data is not None

    duplex = client.pipeline(path="/p", method="PUT", handler=lambda d: d.body)
    duplex.write(b"piped ")
    duplex.write(b"body")
    duplex.end()
    assert duplex.read() == b"echo:piped body"
    assert server.accepted == 1


def test_tls_back_pressure_and_timers_wake_the_reader(make_h2_server, make_h2c, ca):
    big = bytes(range(256)) * 4096  # 1 MiB: several stream windows

    def handler(conn):
        while True:
            req = conn.next_request(timeout=10)
            if req is None:
                return
            if req.path == "/big":
                conn.respond_later(req.stream_id, body=big)
            elif req.path != "/silent":
                conn.respond(req.stream_id, body=b"small")

    server = make_h2_server(handler, ssl_context=_tls_context(ca, ["h2"]))
    client = make_h2c(
        f"https://localhost:{server.port}", cls=greenhttp.Client, connect={"cadata": ca.cert_pem.bytes().decode()}
    )
    r = client.request(path="/big", high_water_mark=1024)
    chunks = []
    for chunk in r.body:  # every resume wakes the reader parked in its TLS read
        chunks.append(chunk)
        gevent.sleep(0)
    assert b"".join(chunks) == big
    with pytest.raises(greenhttp.errors.HeadersTimeoutError):
        client.request(path="/silent", headers_timeout=0.1)
    assert client.request(path="/small").body.bytes() == b"small"
    assert server.accepted == 1
