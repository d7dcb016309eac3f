"""Exact request bytes (REFERENCE §3.4), request bodies, header validation, content-length checks."""

from __future__ import annotations

import io

import gevent
import pytest

from greenhttp import errors
from testkit import serve_forever, wait_for


def one_request(make_server, make_client, **options):
    """Send one request to a recording server; return (the recorded request, the response body)."""
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    path = options.pop("path", "/")
    body = client.request(path=path, **options).body.bytes()
    assert body == b"ok"
    assert len(server.requests) == 1
    return server.requests[0], server


def test_get_request_bytes_exactly(make_server, make_client):
    req, server = one_request(make_server, make_client, path="/a/b?c=d")
    assert req.raw == (
        b"GET /a/b?c=d HTTP/1.1\r\n"
        b"host: 127.0.0.1:%d\r\n"
        b"connection: keep-alive\r\n"
        b"\r\n" % server.port
    )


def test_user_headers_follow_in_order_with_original_case(make_server, make_client):
    req, server = one_request(
        make_server, make_client,
        headers=[("X-First", "1"), ("x-second", "two"), ("X-MiXeD", "Case"), ("X-First", "again")],
    )
    assert req.head == (
        b"GET / HTTP/1.1\r\n"
        b"host: 127.0.0.1:%d\r\n"
        b"connection: keep-alive\r\n"
        b"X-First: 1\r\nx-second: two\r\nX-MiXeD: Case\r\nX-First: again\r\n\r\n" % server.port
    )


@pytest.mark.parametrize(
    "headers",
    [
        {"X-A": "1", "X-B": ["2", "3"]},
        [("X-A", "1"), ("X-B", "2"), ("X-B", "3")],
        ["X-A", "1", "X-B", "2", "X-B", "3"],
    ],
    ids=["dict", "pairs", "flat"],
)
def test_header_shapes(make_server, make_client, headers):
    req, _ = one_request(make_server, make_client, headers=headers)
    assert req.headers[2:] == [("X-A", "1"), ("X-B", "2"), ("X-B", "3")]


def test_headers_object_and_non_string_values(make_server, make_client):
    import greenhttp

    h = greenhttp.Headers()
    h.append("X-H", "v")
    req, _ = one_request(make_server, make_client, headers=h)
    assert req.header("x-h") == "v"
    req, _ = one_request(make_server, make_client, headers={"X-Num": 5, "X-None": None})
    assert req.header("x-num") == "5"
    assert req.header("x-none") == ""


def test_user_host_header_replaces_the_default_and_stays_first(make_server, make_client):
    req, _ = one_request(make_server, make_client, headers={"X-A": "1", "Host": "example.com:8080"})
    assert req.headers[0] == ("host", "example.com:8080")
    assert req.header_list("host") == ["example.com:8080"]
    assert req.headers[1] == ("connection", "keep-alive")


def test_post_without_body_sends_content_length_zero(make_server, make_client):
    req, server = one_request(make_server, make_client, method="POST")
    assert req.raw == (
        b"POST / HTTP/1.1\r\nhost: 127.0.0.1:%d\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n"
        % server.port
    )


@pytest.mark.parametrize("method", ["PUT", "PATCH", "QUERY"])
def test_payload_methods_without_body_send_content_length_zero(make_server, make_client, method):
    req, _ = one_request(make_server, make_client, method=method)
    assert req.header("content-length") == "0"


@pytest.mark.parametrize("method", ["GET", "DELETE", "OPTIONS"])
def test_other_methods_without_body_send_no_length(make_server, make_client, method):
    req, _ = one_request(make_server, make_client, method=method)
    assert req.header("content-length") is None
    assert req.header("transfer-encoding") is None


def test_lower_case_method_is_normalised(make_server, make_client):
    req, _ = one_request(make_server, make_client, method="post", body=b"x")
    assert req.method == "POST"


def test_query_encoding(make_server, make_client):
    req, _ = one_request(make_server, make_client, path="/q", query={"a": "b c", "d": ["1", "2"], "e": "ä&="})
    assert req.target == "/q?a=b%20c&d=1&d=2&e=%C3%A4%26%3D"


def test_query_values_are_written_as_the_original_writes_them(make_server, make_client):
    # undici's 'basic get with query params': booleans in lower case, null and
    # undefined (None) as empty values, numbers as numbers, lists repeat the key.
    query = {"bool": True, "foo": 1, "bar": "bar", "nullVal": None, "`~:$,+[]@^*()-": "`~:$,+[]@^*()-",
             "multi": [1, 2], "whole": 2.0, "half": 0.5, "nan": float("nan"), "no": False}
    req, _ = one_request(make_server, make_client, path="/", query=query)
    assert req.target == (
        "/?bool=true&foo=1&bar=bar&nullVal=&%60~%3A%24%2C%2B%5B%5D%40%5E*()-=%60~%3A%24%2C%2B%5B%5D%40%5E*()-"
        "&multi=1&multi=2&whole=2&half=0.5&nan=&no=false"
    )


def test_a_host_header_given_as_a_list_is_refused(make_client):
    # undici's 'invalid host header': a request has one host, a string.
    client = make_client("http://127.0.0.1:1")
    for headers in ({"host": ["example.com"]}, [("Host", ("a", "b"))]):
        with pytest.raises(errors.InvalidArgumentError, match="invalid host header"):
            client.request(path="/", headers=headers)


def test_query_with_question_mark_in_path_is_refused(make_client):
    client = make_client("http://127.0.0.1:1")
    with pytest.raises(errors.InvalidArgumentError):
        client.request(path="/x?y=1", query={"a": "b"})


@pytest.mark.parametrize(
    "body,expected",
    [
        (b"bytes body", b"bytes body"),
        (bytearray(b"bytearray body"), b"bytearray body"),
        (memoryview(b"memoryview body"), b"memoryview body"),
        ("str body \u00e9", "str body \u00e9".encode()),
    ],
    ids=["bytes", "bytearray", "memoryview", "str"],
)
def test_known_length_bodies(make_server, make_client, body, expected):
    req, server = one_request(make_server, make_client, method="POST", body=body)
    assert req.header("content-length") == str(len(expected))
    assert req.header("transfer-encoding") is None
    assert req.body == expected
    assert req.raw.endswith(b"\r\n\r\n" + expected)


def test_empty_bytes_body_on_post_is_content_length_zero(make_server, make_client):
    req, _ = one_request(make_server, make_client, method="POST", body=b"")
    assert req.header("content-length") == "0" and req.body == b""


def test_generator_body_goes_chunked(make_server, make_client):
    def gen():
        yield b"first,"
        yield b""
        yield "second,"
        yield bytearray(b"third")

    req, _ = one_request(make_server, make_client, method="POST", body=gen())
    assert req.header("transfer-encoding") == "chunked"
    assert req.header("content-length") is None
    assert req.chunked and req.body == b"first,second,third"
    # Exact chunk framing: hex size, CRLF, data, CRLF, and the last chunk without trailers.
    assert req.raw.endswith(b"6\r\nfirst,\r\n7\r\nsecond,\r\n5\r\nthird\r\n0\r\n\r\n")


def test_generator_body_with_user_content_length_is_not_chunked(make_server, make_client):
    req, _ = one_request(
        make_server, make_client, method="POST", body=iter([b"ab", b"cd"]), headers={"content-length": "4"}
    )
    assert req.header("content-length") == "4"
    assert req.header("transfer-encoding") is None
    assert req.body == b"abcd"


def test_file_body_of_a_regular_file_has_a_length(make_server, make_client, tmp_path):
    p = tmp_path / "f.bin"
    data = bytes(range(256)) * 1000
    p.write_bytes(data)
    with open(p, "rb") as f:
        req, _ = one_request(make_server, make_client, method="PUT", body=f)
    assert req.header("content-length") == str(len(data))
    assert req.body == data


def test_file_like_without_fileno_goes_chunked(make_server, make_client):
    req, _ = one_request(make_server, make_client, method="POST", body=io.BytesIO(b"x" * 100_000))
    assert req.header("transfer-encoding") == "chunked"
    assert req.body == b"x" * 100_000


def test_large_bytes_body(make_server, make_client):
    data = b"y" * (3 * 1024 * 1024)
    req, _ = one_request(make_server, make_client, method="POST", body=data)
    assert req.body == data


def test_invalid_body_type(make_client):
    client = make_client("http://127.0.0.1:1")
    with pytest.raises(errors.InvalidArgumentError):
        client.request(path="/", method="POST", body=12345)


def test_body_on_get_is_sent_and_resets_the_connection(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    assert client.request(path="/", body=b"abc").body.bytes() == b"ok"
    assert server.requests[0].body == b"abc"
    assert server.requests[0].header("connection") == "close"
    assert client.request(path="/").body.bytes() == b"ok"
    assert server.accepted == 2


# -- header validation: nothing reaches the wire --------------------------------------------

BAD_HEADERS = [
    {"X-A": "a\r\nInjected: yes"},
    {"X-A": "a\nb"},
    {"X-A": "a\rb"},
    {"X-A": "a\x00b"},
    {"X-A\r\n": "a"},
    {"X A": "a"},
    {"": "a"},
    {"X-\x00": "a"},
    [("X-A", "ok"), ("X-B", "bad\r\n")],
    {"X-A": ["ok", "bad\n"]},
    {"X-A": {"nested": "object"}},
    ["odd", "length", "flat"],
    [("only-one",)],
    12,
]


@pytest.mark.parametrize("headers", BAD_HEADERS, ids=lambda h: repr(h)[:40])
def test_invalid_headers_raise_before_any_byte_is_sent(make_server, make_client, headers):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    with pytest.raises(errors.InvalidArgumentError):
        client.request(path="/", headers=headers)
    gevent.sleep(0.02)
    assert server.accepted == 0
    assert server.requests == []


@pytest.mark.parametrize(
    "headers,exc",
    [
        ([("Host", "a"), ("host", "b")], errors.InvalidArgumentError),
        ([("Content-Length", "1"), ("content-length", "1")], errors.InvalidArgumentError),
        ({"content-length": "abc"}, errors.InvalidArgumentError),
        ({"content-length": "-1"}, errors.InvalidArgumentError),
        ({"Transfer-Encoding": "chunked"}, errors.InvalidArgumentError),
        ({"keep-alive": "timeout=5"}, errors.InvalidArgumentError),
        ({"Upgrade": "websocket"}, errors.InvalidArgumentError),
        ({"connection": "close\x01"}, errors.InvalidArgumentError),
        ({"connection": "a b"}, errors.InvalidArgumentError),
        ({"Expect": "100-continue"}, errors.NotSupportedError),
    ],
    ids=lambda v: repr(v)[:40],
)
def test_special_headers(make_server, make_client, headers, exc):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    with pytest.raises(exc):
        client.request(path="/", method="POST", body=b"x", headers=headers)
    assert server.accepted == 0


def test_connection_header_is_not_forwarded_and_close_resets(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    client.request(path="/", headers={"Connection": "close"}).body.dump()
    assert server.requests[0].header_list("connection") == ["close"]
    client.request(path="/", headers={"Connection": "keep-alive"}).body.dump()
    assert server.requests[1].header_list("connection") == ["keep-alive"]
    assert server.accepted == 2


def test_user_content_length_is_not_forwarded_verbatim(make_server, make_client):
    req, _ = one_request(make_server, make_client, method="POST", body=b"abc", headers={"Content-Length": "3"})
    assert req.header_list("content-length") == ["3"]


@pytest.mark.parametrize(
    "options",
    [
        {"path": "no-slash"},
        {"path": "/with space"},
        {"path": "/tab\there"},
        {"path": "/\u0100"},
        {"path": None},
        {"path": "/", "method": "BAD METHOD"},
        {"path": "/", "method": ""},
        {"path": "/", "method": 5},
        {"path": "/", "method": "CONNECT"},
        {"path": "/", "reset": "yes"},
        {"path": "/", "idempotent": 1},
        {"path": "/", "blocking": "no"},
        {"path": "/", "headers_timeout": -1},
        {"path": "/", "body_timeout": "1"},
        {"path": "/", "upgrade": True},
        {"path": "/", "throw_on_error": True},
        {"path": "/", "max_redirections": 2},
        {"path": "/", "response_headers": "cooked"},
        {"path": "/", "high_water_mark": -1},
        {"path": "/", "signal": object()},
    ],
    ids=lambda o: repr(o)[:40],
)
def test_invalid_request_options(make_server, make_client, options):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    with pytest.raises(errors.InvalidArgumentError):
        client.request(**options)
    assert server.requests == []


# -- strict_content_length ---------------------------------------------------------------


def test_strict_content_length_mismatch_bytes(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    with pytest.raises(errors.RequestContentLengthMismatchError) as info:
        client.request(path="/", method="POST", body=b"abc", headers={"content-length": "10"})
    assert info.value.code == "GH_ERR_REQ_CONTENT_LENGTH_MISMATCH"
    assert server.accepted == 0


def test_strict_content_length_not_checked_for_get(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    r = client.request(path="/", method="GET", body=b"abc", headers={"content-length": "10"})
    assert r.body.bytes() == b"ok"
    # Never the wrong length on the wire.
    assert server.requests[0].header("content-length") == "3"


def test_strict_content_length_stream_longer_than_declared(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    with pytest.raises(errors.RequestContentLengthMismatchError):
        client.request(path="/", method="POST", body=iter([b"abc", b"def"]), headers={"content-length": "4"})


def test_strict_content_length_stream_shorter_than_declared(make_server, make_client):
    def handler(conn):
        conn.read_head()
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    with pytest.raises(errors.RequestContentLengthMismatchError):
        client.request(path="/", method="POST", body=iter([b"ab"]), headers={"content-length": "4"})


def test_non_strict_sends_the_real_length(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin, strict_content_length=False)
    r = client.request(path="/", method="POST", body=b"abc", headers={"content-length": "10"})
    assert r.body.bytes() == b"ok"
    assert server.requests[0].header("content-length") == "3"
    assert server.requests[0].body == b"abc"


@pytest.mark.parametrize("headers", [{}, {"content-length": "100"}], ids=["chunked", "content-length"])
def test_generator_raising_fails_the_request(make_server, make_client, headers):
    def handler(conn):
        if conn.read_head().method == "POST":
            conn.wait_closed()
        else:
            conn.respond(b"next")

    server = make_server(handler)
    client = make_client(server.origin)

    def gen():
        yield b"part"
        raise ValueError("body source failed")

    with pytest.raises(ValueError, match="body source failed"):
        client.request(path="/", method="POST", headers=headers, body=gen())
    wait_for(lambda: client.stats.size == 0, what="the request to end")
    # The half-sent body can never be completed: the connection is destroyed, not
    # reused, and the next request goes out on a new one.
    assert server.conns[0].eof.wait(2)
    assert client.request(path="/").body.bytes() == b"next"
    assert server.accepted == 2


def test_blob_body_brings_its_type(make_server, make_client):
    import greenhttp

    req, _ = one_request(make_server, make_client, method="POST", body=greenhttp.Blob([b"<a/>"], type="text/xml"))
    assert req.body == b"<a/>" and req.header("content-length") == "4"
    assert req.header("content-type") == "text/xml"


def test_blob_body_keeps_the_callers_content_type(make_server, make_client):
    import greenhttp

    req, _ = one_request(
        make_server,
        make_client,
        method="POST",
        headers={"content-type": "application/xml"},
        body=greenhttp.Blob([b"<a/>"], type="text/xml"),
    )
    assert req.header("content-type") == "application/xml"


def test_type_of_service_is_set_on_the_socket(make_server, make_client):
    import socket

    seen = []

    def handler(conn):
        seen.append(conn)
        while conn.read_request() is not None:
            conn.respond(b"ok")

    server = make_server(handler)
    client = make_client(server.origin)
    assert client.request(path="/", type_of_service=0x10).body.bytes() == b"ok"
    sock = client._core._conn.sock  # the client's socket, to read the option back
    assert sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == 0x10


def test_request_lines_stay_right_across_paths_methods_and_host_headers(make_server, make_client):
    """The encoded request line is reused per (method, path, host); never the wrong one."""
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    sent = []
    for i in range(300):  # more distinct paths than the line cache keeps
        path = f"/p{i % 150}?n={i % 7}"
        method = ("GET", "DELETE", "OPTIONS")[i % 3]
        headers = {"host": "example.test"} if i % 5 == 0 else None
        assert client.request(path=path, method=method, headers=headers).body.bytes() == b"ok"
        sent.append((method, path, "example.test" if headers else f"127.0.0.1:{server.port}"))
    assert len(client._core._request_lines) <= 256
    got = [(r.method, r.target, r.header("host")) for r in server.requests]
    assert got == sent


def test_cached_plain_heads_stay_exact_next_to_other_requests(make_server, make_client):
    """A request without headers or body reuses its whole head; the others never get it."""
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    host = b"host: 127.0.0.1:%d\r\n" % server.port
    expected = []
    for i in range(12):
        kind = i % 4
        if kind == 0:
            client.request(path="/x").body.bytes()
            expected.append(b"GET /x HTTP/1.1\r\n" + host + b"connection: keep-alive\r\n\r\n")
        elif kind == 1:
            client.request(path="/x", method="POST").body.bytes()
            expected.append(
                b"POST /x HTTP/1.1\r\n" + host + b"connection: keep-alive\r\ncontent-length: 0\r\n\r\n"
            )
        elif kind == 2:
            client.request(path="/x", headers={"x-n": str(i)}).body.bytes()
            expected.append(
                b"GET /x HTTP/1.1\r\n" + host + b"connection: keep-alive\r\nx-n: %d\r\n\r\n" % i
            )
        else:
            client.request(path="/x", method="POST", body=b"abc").body.bytes()
            expected.append(
                b"POST /x HTTP/1.1\r\n" + host + b"connection: keep-alive\r\ncontent-length: 3\r\n\r\nabc"
            )
    assert [r.raw for r in server.requests] == expected


def test_plain_heads_say_close_when_pipelining_is_off(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin, pipelining=0)
    for _ in range(3):
        assert client.request(path="/y").body.bytes() == b"ok"
    assert [r.header("connection") for r in server.requests] == ["close"] * 3


def test_a_path_checked_once_does_not_let_a_bad_one_through(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    assert client.request(path="/ok").body.bytes() == b"ok"
    assert client.request(path="http://127.0.0.1/abs").body.bytes() == b"ok"
    for bad in ("ok", "/o k", "", "/ok\r\n"):
        with pytest.raises(errors.InvalidArgumentError):
            client.request(path=bad)
    assert client.request(path="/ok").body.bytes() == b"ok"
    assert len(server.requests) == 3


# -- header sets met again: validated and encoded once (request._HEADER_SETS) --


def test_a_header_set_sent_again_is_written_the_same(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    headers = {"X-Trace": "1", "Accept": "*/*"}
    for _ in range(3):
        assert client.request(path="/", headers=headers).body.bytes() == b"ok"
    first = server.requests[0].raw
    assert first.endswith(b"connection: keep-alive\r\nX-Trace: 1\r\nAccept: */*\r\n\r\n")
    assert [r.raw for r in server.requests] == [first] * 3
    # The same dict changed between requests: what it holds now is sent.
    headers["X-Trace"] = "2"
    client.request(path="/", headers=headers).body.dump()
    assert server.requests[3].header("x-trace") == "2"
    assert server.accepted == 1


def test_values_that_compare_equal_are_not_mixed_up(make_server, make_client):
    # As cache keys, 1, 1.0 and True are equal; on the wire they differ.
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    for value in ("1", 1, 1.0, True, "1"):
        client.request(path="/", headers={"X-N": value}).body.dump()
    assert [r.header("x-n") for r in server.requests] == ["1", "1", "1.0", "true", "1"]


def test_a_header_set_with_a_list_value_is_written_every_time(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    for _ in range(2):
        client.request(path="/", headers={"X-B": ["2", "3"]}).body.dump()
    assert [r.header_list("x-b") for r in server.requests] == [["2", "3"], ["2", "3"]]


def test_special_headers_of_a_known_set_apply_every_time(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    for _ in range(2):
        client.request(path="/", headers={"Connection": "close", "Host": "example.com"}).body.dump()
    assert server.accepted == 2  # each asked to close its connection
    assert [r.header_list("host") for r in server.requests] == [["example.com"], ["example.com"]]
    for _ in range(2):
        r = client.request(path="/", method="POST", body=b"abc", headers={"Content-Length": "3"})
        r.body.dump()
    assert [r.header_list("content-length") for r in server.requests[2:]] == [["3"], ["3"]]


def test_an_invalid_header_set_is_refused_every_time(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    for _ in range(2):
        with pytest.raises(errors.InvalidArgumentError):
            client.request(path="/", headers={"X-A": "bad\r\nInjected: 1"})
        with pytest.raises(errors.InvalidArgumentError):
            client.request(path="/", headers={"Host": "a", "host": "b"})
    assert server.accepted == 0


def test_the_header_set_cache_stays_small(make_server, make_client):
    from greenhttp._core import request as request_module

    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    for i in range(300):
        client.request(path="/", headers={"X-I": str(i)}).body.dump()
    assert len(request_module._HEADER_SETS) <= 256
    assert [r.header("x-i") for r in server.requests] == [str(i) for i in range(300)]
