"""The security promises of docs/security.md, one test (or table) each.

* CR, LF and NUL never reach the wire: refused where a header, path or method
  enters (request options, redirect Location, cookies, WebSocket handshake).
* TLS certificates and names are verified by default, with a clear error.
* Credentials do not follow a redirect to another origin.
* Decompression is bounded (a bomb fails, it does not exhaust memory).
* Ambiguous response framing (RFC 9112 §6.3) is refused and the connection
  is never reused, so one response cannot be smuggled into another.
"""

from __future__ import annotations

import ssl
import warnings
import zlib
from typing import Any

import gevent
import gevent.ssl
import pytest

import greenhttp
from greenhttp import errors, interceptors
from greenhttp.errors import ExperimentalWarning

CRLF_VALUES = ["a\r\nX-Injected: 1", "a\nX-Injected: 1", "a\rX-Injected: 1", "a\x00b"]


def serve(conn: Any, answer: Any = None) -> None:
    """Answer every request with ``ok <target>`` (or ``answer(conn, req)``)."""
    while True:
        req = conn.read_request()
        if req is None:
            return
        if answer is not None:
            answer(conn, req)
        else:
            conn.respond(b"ok " + req.target.encode())


@pytest.fixture
def server(make_server):
    return make_server(serve)


# ---------------------------------------------------------------------------
# CR / LF / NUL injection
# ---------------------------------------------------------------------------

INJECTIONS = [
    *[("header value", {"headers": {"x-a": v}}) for v in CRLF_VALUES],
    *[("header value in a list", {"headers": [("x-a", v)]}) for v in CRLF_VALUES],
    *[("header value in the flat list", {"headers": ["x-a", v]}) for v in CRLF_VALUES],
    *[("repeated header value", {"headers": {"x-a": ["ok", v]}}) for v in CRLF_VALUES],
    *[("header value as bytes", {"headers": {b"x-a": v.encode()}}) for v in CRLF_VALUES],
    *[("header name", {"headers": {v: "1"}}) for v in CRLF_VALUES],
    *[("host header", {"headers": {"host": v}}) for v in CRLF_VALUES],
    *[("cookie header", {"headers": {"cookie": "a=" + v}}) for v in CRLF_VALUES],
    *[("path", {"path": "/" + v}) for v in CRLF_VALUES],
    *[("method", {"method": "GET" + v}) for v in CRLF_VALUES],
    ("method with a space", {"method": "GET /other"}),
    ("path with a space", {"path": "/a HTTP/1.1"}),
]


@pytest.mark.parametrize(
    "where,options", INJECTIONS, ids=[f"{w}-{i}" for i, (w, _) in enumerate(INJECTIONS)]
)
def test_injection_through_request_options_is_refused_before_sending(
    where, options, server, make_client
):
    client = make_client(server.origin)
    opts = {"path": "/", **options}
    with pytest.raises(errors.InvalidArgumentError):
        client.request(**opts)
    assert server.accepted == 0  # nothing went out
    assert client.request(path="/after").body.bytes() == b"ok /after"


def test_injection_through_upgrade_and_connect_is_refused(server, make_client):
    client = make_client(server.origin)
    with pytest.raises(errors.InvalidArgumentError):
        client.upgrade(path="/", protocol="websocket\r\nX-Injected: 1")
    with pytest.raises(errors.InvalidArgumentError):
        client.connect(path="example.test:443\r\nX-Injected: 1")
    assert server.accepted == 0


def test_query_values_are_percent_encoded(server, make_client):
    client = make_client(server.origin)
    assert client.request(path="/q", query={"a": "b\r\nX-Injected: 1"}).body.bytes() == (
        b"ok /q?a=b%0D%0AX-Injected%3A%201"
    )
    assert server.requests[-1].header("x-injected") is None


def test_a_url_with_line_breaks_cannot_inject_a_header(server):
    """The module-level ``request(url)`` and its ``path=``: Python's URL parser (as the
    WHATWG one) would drop CR/LF and percent-encode the rest; a line break or NUL inside
    the URL or the path is refused instead, and nothing is sent."""
    with greenhttp.Agent() as agent:
        for url, options in [
            (server.origin + "/a\r\nX-Injected: 1", {}),
            (server.origin + "/a?q=1\nX-Injected: 1", {}),
            (server.origin + "/a\x00b", {}),
            (server.origin, {"path": "/a\r\nX-Injected: 1"}),
            (server.origin, {"path": "/a?q=\x00"}),
        ]:
            with pytest.raises(errors.InvalidArgumentError, match="CR, LF and NUL"):
                greenhttp.request(url, dispatcher=agent, **options)
        # At either end, controls and spaces are stripped (as the URL parsers do), not refused.
        r = greenhttp.request(server.origin + "/a \r\n", dispatcher=agent)
        assert r.body.bytes() == b"ok /a"
    assert server.accepted == 1


@pytest.mark.parametrize("url", ["http://a\x00b", "http://a\x0bb:81", "http://a b"])
def test_an_origin_with_control_characters_is_refused(url):
    with pytest.raises(errors.InvalidArgumentError):
        greenhttp.Client(url)


@pytest.mark.parametrize("servername", ["a\x00b", "a\r\nb", "a b"])
def test_a_servername_with_control_characters_is_refused(servername, server, make_client):
    client = make_client(server.origin)
    with pytest.raises(errors.InvalidArgumentError):
        client.request(path="/", servername=servername).body.bytes()


def test_cookie_helpers_refuse_line_breaks():
    h = greenhttp.Headers()
    for value in CRLF_VALUES:
        with pytest.raises(errors.InvalidArgumentError):
            greenhttp.set_cookie(h, greenhttp.Cookie(name="a", value=value))
        with pytest.raises(errors.InvalidArgumentError):
            greenhttp.set_cookie(h, greenhttp.Cookie(name="a" + value, value="b"))
        with pytest.raises(errors.InvalidArgumentError):
            greenhttp.set_cookie(h, greenhttp.Cookie(name="a", value="b", path="/" + value))
        with pytest.raises(errors.InvalidArgumentError):
            greenhttp.set_cookie(h, greenhttp.Cookie(name="a", value="b", domain="x.test" + value))
        with pytest.raises(TypeError):  # the WHATWG Headers class raises TypeError
            h.append("cookie", "a=" + value)
        assert greenhttp.parse_cookie("a=" + value) is None
    assert h.get_set_cookie() == []


def test_websocket_handshake_headers_and_protocols_refuse_line_breaks():
    for value in CRLF_VALUES:
        with pytest.raises(errors.InvalidArgumentError):
            greenhttp.WebSocket("ws://127.0.0.1:9/", {"headers": {"x-a": value}})
        with pytest.raises(greenhttp.DOMException) as info:
            greenhttp.WebSocket("ws://127.0.0.1:9/", ["chat" + value])
        assert info.value.name == "SyntaxError"


def test_a_location_with_line_breaks_never_becomes_a_request(make_server, make_client):
    """A raw CR/LF in Location is a parser error (the response is refused); an encoded
    one stays encoded in the next request's path."""

    def answer(conn: Any, req: Any) -> None:
        if req.target == "/raw":
            conn.send(
                b"HTTP/1.1 302 Found\r\nLocation: /x\rX-Injected: 1\r\nContent-Length: 0\r\n\r\n"
            )
        elif req.target == "/encoded":
            conn.respond(
                b"", status="302 Found", headers=[("Location", "/x%0d%0aX-Injected:%201 y")]
            )
        else:
            conn.respond(b"ok " + req.target.encode())

    server = make_server(lambda conn: serve(conn, answer))
    client = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    with pytest.raises(errors.HTTPParserError):
        client.request(path="/raw").body.bytes()
    assert client.request(path="/encoded").body.bytes() == b"ok /x%0d%0aX-Injected:%201%20y"
    assert all(r.header("x-injected") is None for r in server.requests)


# ---------------------------------------------------------------------------
# TLS
# ---------------------------------------------------------------------------


@pytest.fixture
def make_tls_server(make_server, ca):
    """A TLS server whose certificate (from ``ca``) names ``names``."""

    def make(*names: str) -> Any:
        ctx = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert(*names).configure_cert(ctx)

        def handler(conn: Any) -> None:
            try:
                conn.sock = ctx.wrap_socket(conn.sock, server_side=True)
            except OSError:
                return  # the client refused the certificate, as it should
            serve(conn)

        return make_server(handler)

    return make


def test_tls_verification_is_on_by_default_with_a_clear_error(make_tls_server, make_client):
    server = make_tls_server("localhost")
    client = make_client(f"https://localhost:{server.port}")
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        client.request(path="/")
    # Verification can only be turned off explicitly.
    insecure = make_client(f"https://localhost:{server.port}", connect={"verify": False})
    assert insecure.request(path="/x").body.bytes() == b"ok /x"


def test_tls_checks_the_name_as_well_as_the_chain(make_tls_server, make_client, ca):
    server = make_tls_server("other.example")
    client = make_client(
        f"https://localhost:{server.port}", connect={"cadata": ca.cert_pem.bytes().decode()}
    )
    with pytest.raises(ssl.SSLCertVerificationError, match="[Hh]ostname mismatch"):
        client.request(path="/")


# ---------------------------------------------------------------------------
# credentials and redirects
# ---------------------------------------------------------------------------

SECRETS = {
    "authorization": "Bearer s3cret",
    "cookie": "session=s3cret",
    "proxy-authorization": "Basic eA==",
    "x-api-key": "s3cret",
    "x-trace": "keep",
}


def test_credentials_are_stripped_on_a_cross_origin_redirect(make_server, make_agent):
    other = make_server(serve)

    def answer(conn: Any, req: Any) -> None:
        if req.target == "/same":
            conn.respond(b"", status="302 Found", headers=[("Location", "/landed")])
        elif req.target == "/cross":
            conn.respond(
                b"",
                status="307 Temporary Redirect",
                headers=[("Location", f"{other.origin}/landed")],
            )
        else:
            conn.respond(b"ok " + req.target.encode())

    home = make_server(lambda conn: serve(conn, answer))
    agent = make_agent().compose(
        interceptors.redirect(
            max_redirections=3, strip_headers_on_cross_origin_redirect=["x-api-key"]
        )
    )
    assert (
        agent.request(origin=home.origin, path="/same", headers=SECRETS).body.bytes()
        == b"ok /landed"
    )
    same = home.requests[-1]
    assert [same.header(k) for k in SECRETS] == list(SECRETS.values())  # same origin: all kept

    assert (
        agent.request(origin=home.origin, path="/cross", headers=SECRETS).body.bytes()
        == b"ok /landed"
    )
    landed = other.requests[-1]
    for name in ("authorization", "cookie", "proxy-authorization", "x-api-key"):
        assert landed.header(name) is None, name
    assert landed.header("x-trace") == "keep"


def test_a_redirect_to_another_port_or_scheme_counts_as_cross_origin():
    from greenhttp._core.redirect import RedirectOptions, next_hop

    opts = {"origin": "http://a.test", "path": "/", "method": "GET", "headers": SECRETS}
    for location in ("http://a.test:8080/", "https://a.test/", "http://b.a.test/", "//b.test/"):
        hop = next_hop(
            302,
            {"location": location},
            opts,
            RedirectOptions(max_redirections=1),
            ["http://a.test/"],
            True,
        )
        names = {k for k, _ in hop.opts["headers"]}
        assert not names & {"authorization", "cookie", "proxy-authorization"}, location


def test_a_redirect_to_a_non_http_scheme_or_with_credentials_is_not_followed(
    make_server, make_client
):
    def answer(conn: Any, req: Any) -> None:
        location = {
            "/file": "file:///etc/passwd",
            "/js": "javascript:alert(1)",
            "/userinfo": "http://u:p@evil.test/",
        }
        conn.respond(b"moved", status="302 Found", headers=[("Location", location[req.target])])

    server = make_server(lambda conn: serve(conn, answer))
    client = make_client(server.origin).compose(interceptors.redirect(max_redirections=3))
    for path in ("/file", "/js", "/userinfo"):
        r = client.request(path=path)
        assert (r.status_code, r.body.bytes()) == (302, b"moved")  # delivered, not followed
    assert server.accepted == 1


# ---------------------------------------------------------------------------
# decompression bombs
# ---------------------------------------------------------------------------


def _gzip_zeros(size: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    return b"".join(c.compress(block) for _ in range(size >> 20)) + c.flush()


def _decompress(**kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return interceptors.decompress(**kw)


def test_a_decompression_bomb_is_bounded(make_server, make_client):
    """64 MiB of zeros in 64 KiB of gzip: refused by the ratio guard past 32 MiB by default,
    or at once by max_decoded_size, and the connection stays usable."""
    bomb = _gzip_zeros(64 << 20)
    assert len(bomb) < 100_000

    def answer(conn: Any, req: Any) -> None:
        if req.target == "/bomb":
            conn.respond(bomb, headers=[("Content-Encoding", "gzip")])
        else:
            conn.respond(b"ok " + req.target.encode())

    server = make_server(lambda conn: serve(conn, answer))
    client = make_client(server.origin)
    guarded = client.compose(_decompress())
    seen = 0
    with pytest.raises(errors.ResponseExceededMaxSizeError, match="bomb"):
        for chunk in guarded.request(path="/bomb").body:
            seen += len(chunk)
    assert seen <= (32 << 20) + (1 << 20)
    capped = client.compose(_decompress(max_decoded_size=1 << 20))
    with pytest.raises(errors.ResponseExceededMaxSizeError, match="max_decoded_size"):
        capped.request(path="/bomb").body.bytes()
    assert client.request(path="/after").body.bytes() == b"ok /after"


# ---------------------------------------------------------------------------
# response smuggling (RFC 9112 §6.3, §9.3)
# ---------------------------------------------------------------------------

SMUGGLING = [
    (
        "content-length-with-transfer-encoding",
        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "transfer-encoding-with-content-length",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
    ),
    (
        "two-content-lengths",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\nok",
    ),
    ("content-length-list", b"HTTP/1.1 200 OK\r\nContent-Length: 2, 40\r\n\r\nok"),
    ("content-length-plus-sign", b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok"),
    ("content-length-hex", b"HTTP/1.1 200 OK\r\nContent-Length: 0x2\r\n\r\nok"),
    ("content-length-space-inside", b"HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\nok"),
    (
        "chunked-twice",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "chunk-size-overflow",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000001\r\nx\r\n",
    ),
    (
        "chunk-size-with-sign",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\nok\r\n0\r\n\r\n",
    ),
    (
        "chunk-extension-with-bare-cr",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;a=\rb\r\nok\r\n0\r\n\r\n",
    ),
    ("bare-lf-line-ending", b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok"),
    ("bare-cr-line-ending", b"HTTP/1.1 200 OK\rContent-Length: 2\r\r\nok"),
    ("obs-fold", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: 1\r\n\tX-B: 2\r\n\r\nok"),
    ("space-before-colon", b"HTTP/1.1 200 OK\r\nContent-Length : 40\r\n\r\nok"),
    (
        "transfer-encoding-space-before-colon",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding : chunked\r\nContent-Length: 2\r\n\r\nok",
    ),
    (
        "header-name-with-space",
        b"HTTP/1.1 200 OK\r\nContent Length: 40\r\nContent-Length: 2\r\n\r\nok",
    ),
    ("nul-in-a-value", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: \x00\r\n\r\nok"),
]


@pytest.mark.parametrize("wire", [w for _, w in SMUGGLING], ids=[n for n, _ in SMUGGLING])
def test_ambiguous_framing_is_refused_and_the_connection_dropped(wire, make_server, make_client):
    first = [True]

    def answer(conn: Any, req: Any) -> None:
        if first[0]:
            first[0] = False
            conn.send(wire + b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled")
        else:
            conn.respond(b"ok " + req.target.encode())

    server = make_server(lambda conn: serve(conn, answer))
    client = make_client(server.origin, headers_timeout=2)
    with pytest.raises(errors.HTTPParserError):
        client.request(path="/").body.bytes()
    assert client.request(path="/next").body.bytes() == b"ok /next"
    assert server.accepted == 2  # the refused connection was not reused


def test_a_body_delimited_by_close_is_never_followed_by_a_reused_connection(
    make_server, make_client
):
    """Transfer-Encoding without chunked last: the body runs to the close (§6.3 rule 4)."""

    def answer(conn: Any, req: Any) -> None:
        conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nbody HTTP/1.1 200 OK\r\n\r\n")
        conn.close()

    server = make_server(lambda conn: serve(conn, answer))
    client = make_client(server.origin)
    assert client.request(path="/").body.bytes() == b"body HTTP/1.1 200 OK\r\n\r\n"
    client.request(path="/").body.bytes()
    assert server.accepted == 2


BODY_ON_NO_BODY = [
    ("204-with-a-body", "GET", b"HTTP/1.1 204 No Content\r\nContent-Length: 8\r\n\r\nsmuggled"),
    ("304-with-a-body", "GET", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 8\r\n\r\nsmuggled"),
    ("head-answered-with-a-body", "HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"),
]


@pytest.mark.parametrize(
    "name,method,wire", BODY_ON_NO_BODY, ids=[n for n, _, _ in BODY_ON_NO_BODY]
)
def test_a_body_on_a_response_that_has_none_never_reaches_the_next_request(
    name, method, wire, make_server, make_client
):
    first = [True]

    def answer(conn: Any, req: Any) -> None:
        if first[0]:
            first[0] = False
            conn.send(wire)
        else:
            conn.respond(b"ok " + req.target.encode())

    server = make_server(lambda conn: serve(conn, answer))
    client = make_client(server.origin, headers_timeout=2)
    client.request(path="/", method=method, reset=False).body.bytes()
    with gevent.Timeout(5):
        assert client.request(path="/next").body.bytes() == b"ok /next"


def test_the_request_side_never_sends_a_wrong_content_length(server, make_client):
    """Request smuggling from our side: a declared length that disagrees with the body is an
    error by default, and without strict_content_length the real length is sent."""
    strict = make_client(server.origin)
    with pytest.raises(errors.RequestContentLengthMismatchError):
        strict.request(path="/", method="POST", body=b"0123456789", headers={"content-length": "3"})
    for header in ("transfer-encoding", "keep-alive", "upgrade"):
        with pytest.raises(errors.InvalidArgumentError):
            strict.request(path="/", method="POST", body=b"x", headers={header: "chunked"})
    assert server.accepted == 0
    lenient = make_client(server.origin, strict_content_length=False)
    lenient.request(
        path="/", method="POST", body=b"0123456789", headers={"content-length": "3"}
    ).body.bytes()
    assert server.requests[-1].header_list("content-length") == ["10"]
    assert server.requests[-1].body == b"0123456789"
