"""An adversarial audit of HTTP/1.1 on the wire (RFC 9110 / RFC 9112), against
exact-bytes in-process servers: framing, connection reuse, pipelining failures,
request serialisation and the timeouts."""

from __future__ import annotations

import time

import gevent
import gevent.event
import pytest

import greenhttp
from greenhttp import errors
from testkit import wait_for

T = 5.0  # the bound of every wait


def get(client, path="/", **kw):
    return client.request(path=path, **kw).body.bytes()


def spawn_gets(client, paths, **kw):
    jobs = [gevent.spawn(get, client, p, blocking=False, **kw) for p in paths]
    return jobs


# ---------------------------------------------------------------------------
# connection reuse: Connection: close and HTTP/1.0 with pipelined requests behind
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "closing_head",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n",
    ],
    ids=["connection-close", "http10"],
)
def test_pipelined_requests_behind_a_closing_response_are_resent(make_server, make_client, closing_head):
    """RFC 9112 §9.6/§9.3.2, REFERENCE §3.5/3.6: a response that closes the
    connection ends it after that response (an informational "reset"); the
    requests pipelined behind it are unanswered and go again on a new
    connection, none fails."""

    def handler(conn):
        if len(conn.server.conns) == 1:
            first = conn.read_request()
            while len(conn.server.requests) < 3:
                if conn.read_request() is None:
                    return
            conn.send(closing_head + b"/" + first.target[-1:].encode())
            conn.close()
            return
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin, pipelining=3)
    jobs = spawn_gets(client, ["/1", "/2", "/3"])
    gevent.joinall(jobs, timeout=T, raise_error=True)
    assert [j.value for j in jobs] == [b"/1", b"/2", b"/3"]
    assert server.accepted == 2


def test_bytes_after_a_closing_response_are_never_read_as_the_next_response(make_server, make_client):
    """RFC 9112 §9.6: after the response with "close" the client stops reading;
    what follows on that connection is not an answer to the next request."""

    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_request()
            conn.read_request()
            conn.send(
                b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n/1"
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nWRONG"
            )
            conn.wait_closed()
            return
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin, pipelining=2)
    jobs = spawn_gets(client, ["/1", "/2"])
    gevent.joinall(jobs, timeout=T, raise_error=True)
    assert [j.value for j in jobs] == [b"/1", b"/2"]


# ---------------------------------------------------------------------------
# a response that arrives before the request body is fully sent
# ---------------------------------------------------------------------------


def test_a_response_complete_while_the_body_is_still_written_ends_the_connection(make_server, make_client):
    """REFERENCE §3.5: a response that completes while the request body is still
    being written destroys the socket (informational "reset"): the request gets
    its response, the rest of the body is not sent, the next request gets a new
    connection."""
    sent = []
    proceed = gevent.event.Event()

    def body():
        for i in range(50):
            if i == 1:
                proceed.wait(T)
            sent.append(i)
            yield b"x" * 10

    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_head()
            conn.send(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 4\r\n\r\nfull")
            conn.wait_closed()
            return
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin)
    r = client.request(path="/up", method="POST", body=body())
    assert r.status_code == 413
    assert r.body.bytes() == b"full"
    proceed.set()
    # Closed at once (not after keep_alive_timeout, 4 s): a body cut short must
    # never be followed by another request on the same connection.
    assert server.conns[0].eof.wait(1.0)
    assert len(sent) < 50
    assert get(client, "/next") == b"/next"
    assert server.accepted == 2


def test_the_next_request_never_follows_a_body_cut_short_by_an_early_response(make_server, make_client):
    """A keep-alive server that answers early and goes on reading must never see
    the next request's bytes inside the unfinished chunked body."""
    proceed = gevent.event.Event()
    raw = []

    def body():
        yield b"first"
        proceed.wait(T)
        yield b"second"

    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_head()
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly")
            conn.wait_closed()
            raw.append(conn.buf)
            return
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin)
    assert client.request(path="/up", method="POST", body=body()).body.bytes() == b"early"
    job = gevent.spawn(get, client, "/next")
    proceed.set()
    assert job.get(timeout=T) == b"/next"
    with gevent.Timeout(T):
        server.conns[0].eof.wait()
    assert b"/next" not in raw[0]


# ---------------------------------------------------------------------------
# framing (RFC 9112 §6) with exact bytes
# ---------------------------------------------------------------------------


def scripted(answers):
    """A server answering the n-th request of the first connection with answers[n]
    (bytes, sent as they are); later connections answer "fresh <target>"."""

    def handler(conn):
        first = len(conn.server.conns) == 1
        n = 0
        while True:
            req = conn.read_request()
            if req is None:
                return
            if first and n < len(answers):
                conn.send(answers[n])
                n += 1
            else:
                conn.respond(b"fresh " + req.target.encode())

    return handler


@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified"])
def test_204_and_304_with_content_length_have_no_body_and_keep_the_connection(make_server, make_client, status):
    server = make_server(
        scripted([b"HTTP/1.1 " + status + b"\r\nContent-Length: 5\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"])
    )
    client = make_client(server.origin)
    r = client.request(path="/a")
    assert r.status_code == int(status[:3])
    assert r.body.bytes() == b""
    assert get(client, "/b") == b"ok"
    assert server.accepted == 1


def test_head_response_with_content_length_has_no_body(make_server, make_client):
    server = make_server(
        scripted([
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        ])
    )
    client = make_client(server.origin)
    r = client.request(path="/h", method="HEAD", reset=False)
    assert r.headers["content-length"] == "100"
    assert r.body.bytes() == b""
    r = client.request(path="/h", method="HEAD", reset=False)
    assert r.body.bytes() == b""
    assert get(client, "/g") == b"ok"
    assert server.accepted == 1


def test_interim_103_goes_to_on_info_and_100_does_not_end_the_response(make_server, make_client):
    server = make_server(
        scripted([
            b"HTTP/1.1 100 Continue\r\n\r\n"
            b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.js>\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        ])
    )
    client = make_client(server.origin)
    infos = []
    r = client.request(path="/", on_info=infos.append)
    assert r.status_code == 200
    assert r.body.bytes() == b"ok"
    assert [i["status_code"] for i in infos] == [103, 103]
    assert infos[0]["headers"]["link"] == "</s.css>; rel=preload"
    assert get(client, "/2") == b"fresh /2"
    assert server.accepted == 1


def test_interim_responses_in_separate_reads(make_server, make_client):
    def handler(conn):
        conn.read_request()
        for piece in (b"HTTP/1.1 103 Early", b" Hints\r\nLink: <x>\r\n", b"\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"):
            conn.send(piece)
            gevent.sleep(0.01)
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    infos = []
    assert client.request(path="/", on_info=infos.append).body.bytes() == b"ok"
    assert [i["status_code"] for i in infos] == [103]


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 0x5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-A : 1\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX\x00A: 1\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-A: 1\x7f\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 099 Low\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"http/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n",
        b" HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\x01\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\n\r\n",
    ],
)
def test_invalid_framing_is_refused_and_the_connection_not_reused(make_server, make_client, head):
    server = make_server(scripted([head]))
    client = make_client(server.origin)
    with pytest.raises(errors.HTTPParserError):
        get(client, "/bad")
    assert get(client, "/next") == b"fresh /next"
    assert server.accepted == 2


@pytest.mark.parametrize(
    "answer,body,trailers",
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello", b"hello", {}),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", b"hello", {}),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 007\r\n\r\nhello!!", b"hello!!", {}),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5;name=value;q=\"a;b\"\r\nhello\r\n0;last\r\n\r\n",
            b"hello",
            {},
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n",
            b"0123456789",
            {},
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            b"abc",
            {},
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"
            b"3\r\nabc\r\n0\r\nX-Sum: 42\r\nX-Two: a\r\nX-Two: b\r\n\r\n",
            b"abc",
            {"x-sum": "42", "x-two": ["a", "b"]},
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000003\r\nabc\r\n0\r\n\r\n", b"abc", {}),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0000000000000000000003\r\n\r\nabc", b"abc", {}),
    ],
    ids=["cl-list", "cl-repeated", "cl-leading-zeros", "chunk-ext", "te-case", "te-gzip-chunked", "trailers", "size-zeros", "cl-many-zeros"],
)
def test_valid_framing_is_read_and_the_connection_reused(make_server, make_client, answer, body, trailers):
    server = make_server(scripted([answer]))
    client = make_client(server.origin)
    r = client.request(path="/a")
    assert r.body.bytes() == body
    assert r.trailers == trailers
    assert get(client, "/b") == b"fresh /b"
    assert server.accepted == 1


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Le",
    ],
    ids=["cl", "chunked-between", "chunked-mid", "chunked-no-trailer-end", "trailers-cut", "head-cut"],
)
def test_a_body_cut_short_by_close_is_an_error(make_server, make_client, answer):
    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_request()
            conn.send(answer)
            conn.close()
            return
        scripted([])(conn)

    server = make_server(handler)
    client = make_client(server.origin)
    with pytest.raises(errors.SocketError):
        get(client, "/cut")
    assert get(client, "/next") == b"fresh /next"


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.0 200 OK\r\n\r\nuntil close",
        b"HTTP/1.1 200 OK\r\n\r\nuntil close",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nuntil close",
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\nuntil close",
    ],
)
def test_a_body_read_until_close(make_server, make_client, answer):
    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_request()
            conn.send(answer)
            gevent.sleep(0.01)
            conn.close()
            return
        scripted([])(conn)

    server = make_server(handler)
    client = make_client(server.origin)
    assert get(client, "/a") == b"until close"
    assert get(client, "/next") == b"fresh /next"
    assert server.accepted == 2


def test_http10_keep_alive_response_keeps_the_connection(make_server, make_client):
    server = make_server(
        scripted([
            b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok",
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive, x\r\nContent-Length: 3\r\n\r\nok2",
        ])
    )
    client = make_client(server.origin)
    assert get(client, "/1") == b"ok"
    assert get(client, "/2") == b"ok2"
    assert get(client, "/3") == b"fresh /3"
    assert server.accepted == 1


@pytest.mark.parametrize("value", ["close", "Close", "keep-alive, close", "upgrade,CLOSE"])
def test_connection_close_token_in_any_form_closes(make_server, make_client, value):
    server = make_server(scripted([b"HTTP/1.1 200 OK\r\nConnection: %s\r\nContent-Length: 2\r\n\r\nok" % value.encode()]))
    client = make_client(server.origin)
    assert get(client, "/1") == b"ok"
    assert server.conns[0].eof.wait(1.0)
    assert get(client, "/2") == b"fresh /2"
    assert server.accepted == 2


def test_connection_header_without_the_close_token_keeps_the_connection(make_server, make_client):
    server = make_server(scripted([b"HTTP/1.1 200 OK\r\nConnection: x-closed-not\r\nContent-Length: 2\r\n\r\nok"]))
    client = make_client(server.origin)
    assert get(client, "/1") == b"ok"
    assert get(client, "/2") == b"fresh /2"
    assert server.accepted == 1


# ---------------------------------------------------------------------------
# request serialisation
# ---------------------------------------------------------------------------


def recorded(make_server, make_client, **options):
    server = make_server(scripted([]))
    client = make_client(server.origin)
    path = options.pop("path", "/")
    assert client.request(path=path, **options).body.bytes() == b"fresh " + path.encode()
    assert len(server.requests) == 1
    return server.requests[0], server


def test_str_body_length_counts_utf8_bytes(make_server, make_client):
    req, _ = recorded(make_server, make_client, method="POST", body="héllo €")
    assert req.header("content-length") == str(len("héllo €".encode()))
    assert req.body == "héllo €".encode()
    assert req.header("transfer-encoding") is None


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
def test_empty_body_on_a_payload_method_sends_content_length_0(make_server, make_client, method):
    for body in (None, b"", ""):
        req, _ = recorded(make_server, make_client, method=method, body=body)
        assert req.header_list("content-length") == ["0"], body
        assert req.header("transfer-encoding") is None


def test_no_length_header_for_get_or_delete_without_body(make_server, make_client):
    for method in ("GET", "DELETE", "OPTIONS"):
        req, _ = recorded(make_server, make_client, method=method)
        assert req.header("content-length") is None
        assert req.header("transfer-encoding") is None


def test_iterator_body_is_chunked_and_skips_empty_chunks(make_server, make_client):
    req, _ = recorded(make_server, make_client, method="POST", body=iter([b"ab", b"", "cd", bytearray(b"e")]))
    assert req.header("transfer-encoding") == "chunked"
    assert req.header("content-length") is None
    assert req.raw.endswith(b"\r\n\r\n2\r\nab\r\n2\r\ncd\r\n1\r\ne\r\n0\r\n\r\n")


def test_empty_iterator_body_on_post(make_server, make_client):
    req, _ = recorded(make_server, make_client, method="POST", body=iter([]))
    te, cl = req.header("transfer-encoding"), req.header("content-length")
    assert (te, cl) in (("chunked", None), (None, "0"))
    assert req.body == b""


def test_file_like_bodies(make_server, make_client, tmp_path):
    import io

    req, _ = recorded(make_server, make_client, method="PUT", body=io.BytesIO(b"from bytesio"))
    assert req.header("transfer-encoding") == "chunked"
    assert req.body == b"from bytesio"
    f = tmp_path / "f.bin"
    f.write_bytes(b"0123456789")
    with open(f, "rb") as fh:
        fh.seek(4)
        req, _ = recorded(make_server, make_client, method="PUT", body=fh)
    assert req.header("content-length") == "6"
    assert req.header("transfer-encoding") is None
    assert req.body == b"456789"


def test_get_with_body_is_framed_and_closes_the_connection(make_server, make_client):
    server = make_server(scripted([]))
    client = make_client(server.origin)
    assert get(client, "/g", body=b"data") == b"fresh /g"
    assert server.requests[0].header("content-length") == "4"
    assert server.requests[0].body == b"data"
    assert server.conns[0].eof.wait(1.0)
    assert get(client, "/h") == b"fresh /h"
    assert server.accepted == 2


def test_user_content_length_is_replaced_not_duplicated(make_server, make_client):
    req, _ = recorded(make_server, make_client, method="POST", body=b"abc", headers={"Content-Length": "3"})
    assert req.header_list("content-length") == ["3"]


@pytest.mark.parametrize(
    "headers",
    [
        {"X-A": "a\r\nX-Injected: 1"},
        {"X-A": "a\nb"},
        {"X-A": "a\rb"},
        {"X-A": "a\x00b"},
        {"X-A": ["ok", "a\r\nb"]},
        {"X-A\r\nX-B": "1"},
        {"X A": "1"},
        {"X-A:": "1"},
        {"": "1"},
        {"Host": "h\r\nX-Injected: 1"},
        [("X-A", "a\r\n\r\nGET /smuggled HTTP/1.1")],
        {"Transfer-Encoding": "chunked"},
        {"Content-Length": "1\r\n"},
        {"Content-Length": "-1"},
    ],
)
def test_header_injection_is_refused_before_anything_is_sent(make_server, make_client, headers):
    server = make_server(scripted([]))
    client = make_client(server.origin)
    with pytest.raises(errors.InvalidArgumentError):
        client.request(path="/", method="POST", body=b"x", headers=headers)
    assert server.requests == []


@pytest.mark.parametrize(
    "path,method",
    [
        ("/a b", "GET"),
        ("/a\r\nX-Injected: 1", "GET"),
        ("/a\nb", "GET"),
        ("/\x00", "GET"),
        ("/\u0100", "GET"),
        ("", "GET"),
        ("/", "GE T"),
        ("/", "GET\r\n"),
        ("/", "G(ET"),
        ("/", ""),
    ],
)
def test_request_line_injection_is_refused(make_server, make_client, path, method):
    server = make_server(scripted([]))
    client = make_client(server.origin)
    with pytest.raises(errors.InvalidArgumentError):
        client.request(path=path, method=method)
    assert server.requests == []


def test_host_header_is_sent_once_and_first(make_server, make_client):
    req, server = recorded(make_server, make_client, headers={"X-A": "1"})
    assert req.headers[0] == ("host", f"127.0.0.1:{server.port}")
    assert req.header_list("host") == [f"127.0.0.1:{server.port}"]
    req, _ = recorded(make_server, make_client, headers=[("X-A", "1"), ("HOST", "example.org")])
    assert req.header_list("host") == ["example.org"]
    with pytest.raises(errors.InvalidArgumentError):
        recorded(make_server, make_client, headers=[("Host", "a"), ("host", "b")])


def test_connection_close_request_header_sends_close_once_and_closes(make_server, make_client):
    server = make_server(scripted([]))
    client = make_client(server.origin)
    assert get(client, "/a", headers={"Connection": "close"}) == b"fresh /a"
    req = server.requests[0]
    assert [v.lower() for v in req.header_list("connection")] == ["close"]
    assert server.conns[0].eof.wait(1.0)
    assert get(client, "/b") == b"fresh /b"
    assert server.accepted == 2


# ---------------------------------------------------------------------------
# expect: 100-continue
# ---------------------------------------------------------------------------


def test_expect_continue_holds_the_body_until_100(make_server, make_client):
    order = []

    def handler(conn):
        req = conn.read_head()
        order.append(("head", req.header("expect")))
        gevent.sleep(0.05)
        order.append(("early", conn.buf))
        conn.send(b"HTTP/1.1 103 Early Hints\r\nLink: <x>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n")
        conn.read_body(req)
        conn.respond(b"got " + req.body)
        scripted([])(conn)

    server = make_server(handler)
    client = make_client(server.origin)
    infos = []
    r = client.request(path="/up", method="PUT", body=b"payload", expect_continue=True, on_info=infos.append)
    assert r.body.bytes() == b"got payload"
    assert order == [("head", "100-continue"), ("early", b"")]
    assert [i["status_code"] for i in infos] == [103]
    assert get(client, "/next") == b"fresh /next"
    assert server.accepted == 1


def test_expect_continue_final_answer_first_never_sends_the_body(make_server, make_client):
    seen = []

    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_head()
            conn.send(b"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 2\r\n\r\nno")
            conn.wait_closed()
            seen.append(conn.buf)
            return
        scripted([])(conn)

    server = make_server(handler)
    client = make_client(server.origin)
    r = client.request(path="/up", method="PUT", body=b"payload", expect_continue=True)
    assert (r.status_code, r.body.bytes()) == (417, b"no")
    assert get(client, "/next") == b"fresh /next"
    assert server.accepted == 2
    assert seen == [b""]


def test_expect_continue_sends_the_body_anyway_when_the_server_ignores_the_expectation(make_server, make_client):
    """RFC 9110 §10.1.1: a client should not wait indefinitely for 100 Continue
    (a server or an HTTP/1.0 hop may ignore Expect): after a short wait (1 s,
    as curl) the body goes, and the request is answered."""
    waited = []

    def handler(conn):
        req = conn.read_head()
        started = time.monotonic()
        conn.read_body(req)
        waited.append(time.monotonic() - started)
        conn.respond(b"got " + req.body)
        scripted([])(conn)

    server = make_server(handler)
    client = make_client(server.origin)
    with gevent.Timeout(T):
        r = client.request(path="/up", method="PUT", body=b"payload", expect_continue=True)
        assert r.body.bytes() == b"got payload"
    assert waited[0] > 0.5  # it did wait for a 100 first


def test_expect_continue_pipelined_behind_another_is_bounded_by_headers_timeout(make_server, make_client):
    """Written behind a request still waiting for its answer, a request that
    waits for 100 Continue gets its headers_timeout once it is at the head:
    a server that never answers it can't hold it forever."""
    heads = []

    def handler(conn):
        conn.read_request()
        heads.append(conn.read_head())
        conn.respond(b"/1")
        conn.wait_closed()  # neither 100 nor a final answer for the second

    server = make_server(handler)
    client = make_client(server.origin, pipelining=2, headers_timeout=0.2)
    first = gevent.spawn(get, client, "/1", blocking=False)
    wait_for(lambda: client.stats.running == 1, what="the first request written")
    second = gevent.spawn(
        lambda: client.request(path="/up", method="PUT", body=b"payload", expect_continue=True, idempotent=True)
    )
    assert outcome(first) == b"/1"
    assert outcome(second) == "HeadersTimeoutError"
    assert heads[0].header("expect") == "100-continue"


# ---------------------------------------------------------------------------
# timeouts
# ---------------------------------------------------------------------------


def stall_after(data, read=True):
    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_request() if read else conn.read_head()
            if data:
                conn.send(data)
            conn.wait_closed()
            return
        scripted([])(conn)

    return handler


@pytest.mark.parametrize("data", [b"", b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 103 Early Hints\r\n\r\n"])
def test_headers_timeout_fires_with_its_error(make_server, make_client, data):
    import time

    server = make_server(stall_after(data))
    client = make_client(server.origin, headers_timeout=0.2)
    started = time.monotonic()
    with pytest.raises(errors.HeadersTimeoutError) as info:
        get(client, "/slow")
    assert isinstance(info.value, TimeoutError)
    assert info.value.code == "GH_ERR_HEADERS_TIMEOUT"
    assert 0.15 < time.monotonic() - started < 1.5
    assert get(client, "/next") == b"fresh /next"


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n0\r\n",
        b"HTTP/1.0 200 OK\r\n\r\nuntil",
    ],
)
def test_body_timeout_fires_with_its_error(make_server, make_client, data):
    import time

    server = make_server(stall_after(data))
    client = make_client(server.origin, headers_timeout=5, body_timeout=0.2)
    started = time.monotonic()
    r = client.request(path="/slow")
    assert r.status_code == 200
    with pytest.raises(errors.BodyTimeoutError) as info:
        r.body.bytes()
    assert isinstance(info.value, TimeoutError)
    assert info.value.code == "GH_ERR_BODY_TIMEOUT"
    assert 0.15 < time.monotonic() - started < 1.5
    assert get(client, "/next") == b"fresh /next"


def test_per_request_zero_disables_the_client_timeouts(make_server, make_client):
    def handler(conn):
        conn.read_request()
        gevent.sleep(0.3)
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab")
        gevent.sleep(0.3)
        conn.send(b"cd")
        scripted([])(conn)

    server = make_server(handler)
    client = make_client(server.origin, headers_timeout=0.1, body_timeout=0.1)
    assert get(client, "/", headers_timeout=0, body_timeout=0) == b"abcd"


def test_per_request_timeouts_override_the_client(make_server, make_client):
    server = make_server(stall_after(b""))
    client = make_client(server.origin, headers_timeout=30)
    with gevent.Timeout(T), pytest.raises(errors.HeadersTimeoutError):
        get(client, "/", headers_timeout=0.1)


# ---------------------------------------------------------------------------
# Keep-Alive hints
# ---------------------------------------------------------------------------


def test_a_keep_alive_hint_below_the_threshold_closes_after_the_response(make_server, make_client):
    server = make_server(scripted([b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=1\r\nContent-Length: 2\r\n\r\nok"]))
    client = make_client(server.origin)  # threshold 2 s: 1 - 2 <= 0
    assert get(client, "/1") == b"ok"
    assert server.conns[0].eof.wait(1.0)
    assert get(client, "/2") == b"fresh /2"
    assert server.accepted == 2


def test_a_keep_alive_hint_sets_the_idle_timeout(make_server, make_client):
    import time

    server = make_server(scripted([b"HTTP/1.1 200 OK\r\nKeep-Alive: max=5, timeout=2\r\nContent-Length: 2\r\n\r\nok"]))
    client = make_client(server.origin, keep_alive_timeout_threshold=1.7, keep_alive_timeout=30)
    assert get(client, "/1") == b"ok"
    started = time.monotonic()
    assert server.conns[0].eof.wait(2.0)
    assert 0.2 < time.monotonic() - started < 1.2


# ---------------------------------------------------------------------------
# pipelining: order, and what a failure in the middle does to the queue
# ---------------------------------------------------------------------------


def pipelined_server(first_script):
    """The first connection reads three requests and runs ``first_script(conn, reqs)``;
    later ones answer every request with its target."""

    def handler(conn):
        if len(conn.server.conns) == 1:
            reqs = []
            while len(reqs) < 3:
                req = conn.read_request()
                if req is None:
                    return
                reqs.append(req)
            first_script(conn, reqs)
            return
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond(req.target.encode())

    return handler


def outcome(job):
    try:
        return job.get(timeout=T)
    except errors.GreenHTTPError as exc:
        return type(exc).__name__


def test_pipelined_responses_are_matched_in_order(make_server, make_client):
    def script(conn, reqs):
        # All three answers in one write, each a different framing.
        conn.send(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n/1"
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n/2\r\n0\r\n\r\n"
            b"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n"
        )
        scripted([])(conn)

    server = make_server(pipelined_server(script))
    client = make_client(server.origin, pipelining=3)
    jobs = spawn_gets(client, ["/1", "/2", "/3"])
    assert [outcome(j) for j in jobs] == [b"/1", b"/2", b""]
    assert server.accepted == 1
    assert [r.target for r in server.requests[:3]] == ["/1", "/2", "/3"]


@pytest.mark.parametrize(
    "answer,error",
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "SocketError"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "HTTPParserError"),
        (b"", "SocketError"),
    ],
    ids=["cut-body", "parse-error", "close"],
)
def test_a_failure_at_the_head_of_the_pipeline_resends_the_others_once(make_server, make_client, answer, error):
    def script(conn, reqs):
        conn.send(answer)
        conn.close()

    server = make_server(pipelined_server(script))
    client = make_client(server.origin, pipelining=3)
    jobs = spawn_gets(client, ["/1", "/2", "/3"])
    assert [outcome(j) for j in jobs] == [error, b"/2", b"/3"]
    targets = [r.target for r in server.requests]
    assert sorted(targets) == ["/1", "/2", "/2", "/3", "/3"]  # each re-sent exactly once


def test_a_close_after_the_first_answer_fails_only_the_next_head(make_server, make_client):
    """REFERENCE §3.6: a close (not announced) with requests in flight fails the
    head of the pipeline only; the one behind it is re-sent."""

    def script(conn, reqs):
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n/1")
        conn.close()

    server = make_server(pipelined_server(script))
    client = make_client(server.origin, pipelining=3)
    jobs = spawn_gets(client, ["/1", "/2", "/3"])
    assert [outcome(j) for j in jobs] == [b"/1", "SocketError", b"/3"]


def test_a_headers_timeout_at_the_head_resends_the_others(make_server, make_client):
    def script(conn, reqs):
        conn.wait_closed()

    server = make_server(pipelined_server(script))
    client = make_client(server.origin, pipelining=3, headers_timeout=0.2)
    jobs = spawn_gets(client, ["/1", "/2", "/3"])
    assert [outcome(j) for j in jobs] == ["HeadersTimeoutError", b"/2", b"/3"]


def test_a_non_idempotent_request_waits_for_an_idle_connection_and_is_not_resent(make_server, make_client):
    """A POST is never written behind others; when the connection it waited for
    breaks before the POST was written, it goes on the next one, once."""
    release = gevent.event.Event()

    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_request()
            conn.read_request()
            release.wait(T)
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n/1")
            conn.close()
            return
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.respond(req.target.encode() + req.body)

    server = make_server(handler)
    client = make_client(server.origin, pipelining=4)
    jobs = spawn_gets(client, ["/1", "/2"])
    post = gevent.spawn(lambda: client.request(path="/p", method="POST", body=b"!", blocking=False).body.bytes())
    wait_for(lambda: len(server.requests) >= 2, what="the two GETs")
    gevent.sleep(0.02)  # (a window in which a POST sent too early would arrive)
    assert [r.target for r in server.requests] == ["/1", "/2"]  # the POST waits
    release.set()
    assert outcome(jobs[0]) == b"/1"
    assert outcome(jobs[1]) == "SocketError"
    assert post.get(timeout=T) == b"/p!"
    assert [r.target for r in server.requests].count("/p") == 1


def test_headers_timeout_does_not_fire_while_a_slow_body_source_is_still_being_sent(make_server, make_client):
    """REFERENCE §3.7: the headers timer fires only if the socket is not still
    writing (or is write-blocked): a body source slower than headers_timeout,
    whose every chunk the server takes at once, is not a server that is late."""

    def body():
        yield b"a"
        gevent.sleep(0.4)
        yield b"b"
        gevent.sleep(0.4)
        yield b"c"

    server = make_server(scripted([]))
    client = make_client(server.origin, headers_timeout=0.25)
    r = client.request(path="/up", method="POST", body=body())
    assert r.body.bytes() == b"fresh /up"
    assert server.requests[0].body == b"abc"


@pytest.mark.parametrize("body", [b"payload", "iterator"])
def test_headers_timeout_bounds_the_wait_for_100_continue(make_server, make_client, body):
    """A server that never answers an expect: 100-continue request is bounded by
    headers_timeout, as any server that never answers."""
    server = make_server(stall_after(b"", read=False))
    client = make_client(server.origin, headers_timeout=0.2)
    if body == "iterator":
        body = iter([b"pay", b"load"])
    with gevent.Timeout(T), pytest.raises(errors.HeadersTimeoutError):
        client.request(path="/up", method="PUT", body=body, expect_continue=True)


def test_headers_timeout_runs_once_a_slow_body_source_is_all_sent(make_server, make_client):
    import time

    def body():
        yield b"a"
        gevent.sleep(0.4)
        yield b"b"

    server = make_server(stall_after(b""))
    client = make_client(server.origin, headers_timeout=0.25)
    started = time.monotonic()
    with gevent.Timeout(T), pytest.raises(errors.HeadersTimeoutError):
        client.request(path="/up", method="POST", body=body())
    assert 0.6 < time.monotonic() - started < 2.0
    assert server.requests[0].body == b"ab"


# ---------------------------------------------------------------------------
# connection reuse, continued
# ---------------------------------------------------------------------------


def test_http10_response_with_transfer_encoding_is_not_reused(make_server, make_client):
    """RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty
    framing: process it, then close the connection."""
    server = make_server(
        scripted([b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"])
    )
    client = make_client(server.origin)
    assert get(client, "/1") == b"ok"
    assert get(client, "/2") == b"fresh /2"
    assert server.accepted == 2


def test_max_requests_per_client_closes_after_the_last(make_server, make_client):
    server = make_server(scripted([]))
    client = make_client(server.origin, max_requests_per_client=2)
    for i in range(5):
        assert get(client, f"/{i}") == f"fresh /{i}".encode()
    assert server.accepted == 3
    conns = [r.header("connection") for r in server.requests]
    assert conns == ["keep-alive", "close", "keep-alive", "close", "keep-alive"]


def test_a_reset_request_in_a_pipeline_is_the_last_on_its_connection(make_server, make_client):
    release = gevent.event.Event()

    def handler(conn):
        if len(conn.server.conns) == 1:
            reqs = [conn.read_request(), conn.read_request()]
            release.wait(T)
            for r in reqs:
                conn.respond(r.target.encode())
            conn.wait_closed()
            return
        scripted([])(conn)

    server = make_server(handler)
    client = make_client(server.origin, pipelining=4)
    j1 = gevent.spawn(get, client, "/1", blocking=False)
    j2 = gevent.spawn(get, client, "/2", blocking=False, reset=True)
    j3 = gevent.spawn(get, client, "/3", blocking=False)
    wait_for(lambda: len(server.requests) >= 2, what="/1 and /2")
    gevent.sleep(0.02)  # (a window in which /3, sent too early, would arrive)
    assert [r.target for r in server.requests] == ["/1", "/2"]
    assert server.requests[1].header("connection") == "close"
    release.set()
    assert [outcome(j) for j in (j1, j2, j3)] == [b"/1", b"/2", b"fresh /3"]
    assert server.accepted == 2


def test_pipelined_heads_with_lengths_have_no_bodies(make_server, make_client):
    def script(conn, reqs):
        conn.send(
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n"
        )
        scripted([])(conn)

    server = make_server(pipelined_server(script))
    client = make_client(server.origin, pipelining=3)
    jobs = [gevent.spawn(lambda p=p: client.request(path=p, method="HEAD", reset=False).status_code) for p in ("/1", "/2", "/3")]
    assert [outcome(j) for j in jobs] == [200, 200, 200]
    assert get(client, "/4") == b"fresh /4"
    assert server.accepted == 1


def test_a_blocking_request_holds_the_pipeline_until_its_head(make_server, make_client):
    release = gevent.event.Event()
    seen = []

    def handler(conn):
        req = conn.read_request()
        seen.append(req.target)
        gevent.sleep(0.05)
        seen.append(conn.buf)
        release.wait(T)
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
        gevent.sleep(0.01)
        conn.send(b"/1")
        scripted([])(conn)

    server = make_server(handler)
    client = make_client(server.origin, pipelining=4)
    j1 = gevent.spawn(get, client, "/1")
    j2 = gevent.spawn(get, client, "/2")
    gevent.sleep(0.1)
    release.set()
    assert [outcome(j) for j in (j1, j2)] == [b"/1", b"fresh /2"]
    assert seen == ["/1", b""]


def closing_first_server():
    """The first connection reads three requests, answers the first with
    Connection: close and closes; later ones answer every request."""

    def script(conn, reqs):
        conn.send(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n/1")
        conn.close()

    return pipelined_server(script)


def test_close_waits_for_the_requests_resent_after_a_closing_response(make_server, make_client):
    server = make_server(closing_first_server())
    client = make_client(server.origin, pipelining=3)
    jobs = spawn_gets(client, ["/1", "/2", "/3"])
    gevent.sleep(0.02)
    with gevent.Timeout(T):
        client.close()
    assert [outcome(j) for j in jobs] == [b"/1", b"/2", b"/3"]
    assert client.destroyed


def test_a_pool_resends_the_requests_behind_a_closing_response(make_server):
    server = make_server(closing_first_server())
    pool = greenhttp.Pool(server.origin, connections=1, pipelining=3)
    try:
        jobs = spawn_gets(pool, ["/1", "/2", "/3"])
        assert [outcome(j) for j in jobs] == [b"/1", b"/2", b"/3"]
        assert server.accepted == 2
    finally:
        with gevent.Timeout(T):
            pool.destroy()


@pytest.mark.parametrize(
    "content,encoding",
    [(b"line one\r\nline two\r\n", "utf-8"), ("caf\u00e9\n".encode("latin-1"), "latin-1")],
    ids=["crlf-newlines", "latin-1"],
)
def test_a_text_mode_file_body_is_sent_as_what_it_reads(make_server, make_client, tmp_path, content, encoding):
    """A text file's size on disk is not the length of what read() returns once
    decoded (newlines translated, re-encoded as UTF-8): the body must still go
    out whole, with a length that matches what is sent."""
    f = tmp_path / "t.txt"
    f.write_bytes(content)
    with open(f, encoding=encoding) as fh:
        expected = fh.read().encode()
        fh.seek(0)
        req, _ = recorded(make_server, make_client, method="PUT", body=fh)
    assert req.body == expected
    if req.header("content-length") is not None:
        assert req.header("content-length") == str(len(expected))


def test_without_strict_content_length_a_file_body_is_sent_with_its_real_length(make_server, make_client, tmp_path):
    """docs/client.md, docs/security.md: with strict_content_length=False a
    declared content-length that disagrees with a body of known length is
    replaced by the real one."""
    f = tmp_path / "f.bin"
    f.write_bytes(b"0123456789")
    server = make_server(scripted([]))
    client = make_client(server.origin, strict_content_length=False)
    for declared in ("5", "20"):
        with open(f, "rb") as fh:
            assert get(client, "/f", method="PUT", body=fh, headers={"content-length": declared}) == b"fresh /f"
        assert server.requests[-1].header_list("content-length") == ["10"]
        assert server.requests[-1].body == b"0123456789"


def raw_first_connection():
    """The first connection records everything it reads until the client closes;
    later ones answer every request."""
    raw = []

    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.wait_closed()
            raw.append(conn.buf)
            return
        scripted([])(conn)

    return handler, raw


@pytest.mark.parametrize("chunks", [[b"ab"], [b"abc", b"def"]], ids=["short", "long"])
def test_an_iterator_body_that_breaks_its_declared_length_never_looks_complete(make_server, make_client, chunks):
    handler, raw = raw_first_connection()
    server = make_server(handler)
    client = make_client(server.origin)
    with pytest.raises(errors.RequestContentLengthMismatchError):
        get(client, "/up", method="POST", body=iter(chunks), headers={"content-length": "4"})
    with gevent.Timeout(T):
        server.conns[0].eof.wait()
    head, _, body = raw[0].partition(b"\r\n\r\n")
    assert b"content-length: 4" in head and b"transfer-encoding" not in head
    assert len(body) < 4
    assert get(client, "/next") == b"fresh /next"


def test_an_iterator_that_raises_mid_body_never_sends_the_last_chunk(make_server, make_client):
    class Boom(Exception):
        pass

    def body():
        yield b"part"
        raise Boom("source broke")

    handler, raw = raw_first_connection()
    server = make_server(handler)
    client = make_client(server.origin)
    with pytest.raises(Boom):
        get(client, "/up", method="POST", body=body())
    with gevent.Timeout(T):
        server.conns[0].eof.wait()
    assert raw[0].endswith(b"\r\n\r\n4\r\npart\r\n")
    assert get(client, "/next") == b"fresh /next"


BIG = 300_000


@pytest.mark.parametrize("then", ["stall", "close"])
def test_a_big_body_read_whole_that_stops_fails_with_the_right_error(make_server, make_client, then):
    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_request()
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % BIG + b"x" * 100_000)
            if then == "close":
                conn.close()
            else:
                conn.wait_closed()
            return
        scripted([])(conn)

    server = make_server(handler)
    client = make_client(server.origin, body_timeout=0.2)
    r = client.request(path="/big")
    expected = errors.BodyTimeoutError if then == "stall" else errors.SocketError
    with gevent.Timeout(T), pytest.raises(expected):
        r.body.bytes()
    assert get(client, "/next") == b"fresh /next"


def test_interim_responses_in_a_pipeline_go_to_their_own_request(make_server, make_client):
    def script(conn, reqs):
        conn.send(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n/1"
            b"HTTP/1.1 103 Early Hints\r\nLink: <two>\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n/2"
            b"HTTP/1.1 103 Early Hints\r\nLink: <three>\r\n\r\n"
            b"HTTP/1.1 103 Early Hints\r\nLink: <three-b>\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n/3"
        )
        scripted([])(conn)

    server = make_server(pipelined_server(script))
    client = make_client(server.origin, pipelining=3)
    infos = {p: [] for p in ("/1", "/2", "/3")}
    jobs = [
        gevent.spawn(lambda p=p: client.request(path=p, blocking=False, on_info=infos[p].append).body.bytes())
        for p in infos
    ]
    assert [outcome(j) for j in jobs] == [b"/1", b"/2", b"/3"]
    assert {p: [i["headers"]["link"] for i in v] for p, v in infos.items()} == {
        "/1": [],
        "/2": ["<two>"],
        "/3": ["<three>", "<three-b>"],
    }


def test_an_abort_behind_a_non_idempotent_request_never_resends_it(make_server, make_client):
    """RFC 9112 §9.3.1, docs/request-api.md (idempotent): aborting a request
    pipelined behind a POST closes the connection (HTTP/1.1 can't cancel one
    response); the POST, written and maybe acted on, must not be sent again."""

    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_request()
            conn.read_request()
            conn.wait_closed()
            return
        scripted([])(conn)

    server = make_server(handler)
    client = make_client(server.origin, pipelining=2)
    post = gevent.spawn(lambda: client.request(path="/p", method="POST", body=b"!", blocking=False).body.bytes())
    wait_for(lambda: len(server.requests) == 1, what="the POST")
    ac = greenhttp.AbortController()
    job = gevent.spawn(get, client, "/g", blocking=False, signal=ac.signal)
    wait_for(lambda: len(server.requests) == 2, what="the GET behind it")
    assert [r.target for r in server.requests] == ["/p", "/g"]
    ac.abort()
    with pytest.raises(errors.InformationalError):
        post.get(timeout=T)
    with pytest.raises(greenhttp.DOMException):
        job.get(timeout=T)
    assert [r.target for r in server.requests] == ["/p", "/g"]
    assert get(client, "/next") == b"fresh /next"


def test_an_abort_behind_an_idempotent_request_resends_it(make_server, make_client):
    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_request()
            conn.read_request()
            conn.wait_closed()
            return
        scripted([])(conn)

    server = make_server(handler)
    client = make_client(server.origin, pipelining=2)
    first = gevent.spawn(get, client, "/1", blocking=False)
    wait_for(lambda: len(server.requests) == 1, what="/1")
    ac = greenhttp.AbortController()
    job = gevent.spawn(get, client, "/g", blocking=False, signal=ac.signal)
    wait_for(lambda: len(server.requests) == 2, what="/g behind it")
    ac.abort()
    assert first.get(timeout=T) == b"fresh /1"
    with pytest.raises(greenhttp.DOMException):
        job.get(timeout=T)
    assert [r.target for r in server.requests] == ["/1", "/g", "/1"]


def test_raw_headers_and_raw_trailers_keep_wire_case_and_order(make_server, make_client):
    """REFERENCE §3.10: h1 trailers go to on_response_end parsed, and as a raw
    list on the controller (controller.raw_trailers), as on HTTP/2."""
    server = make_server(
        scripted([
            b"HTTP/1.1 200 OK\r\nX-B: 1\r\nTransfer-Encoding: chunked\r\nx-a: 2\r\nX-B: 3\r\n\r\n"
            b"2\r\nok\r\n0\r\nX-Sum: 9\r\nx-sum:10\r\n\r\n"
        ])
    )
    client = make_client(server.origin)
    done = gevent.event.AsyncResult()

    class Handler:
        def on_response_end(self, controller, trailers):
            done.set((controller.raw_headers, trailers, controller.raw_trailers))

        def on_response_error(self, controller, err):
            done.set_exception(err)

    client.dispatch({"path": "/", "method": "GET"}, Handler())
    raw_headers, trailers, raw_trailers = done.get(timeout=T)
    assert raw_headers == [b"X-B", b"1", b"Transfer-Encoding", b"chunked", b"x-a", b"2", b"X-B", b"3"]
    assert trailers == {"x-sum": ["9", "10"]}
    assert raw_trailers == [b"X-Sum", b"9", b"x-sum", b"10"]


@pytest.mark.parametrize(
    "trailer",
    [b"X-T: 1\r\n folded\r\n\r\n", b"X-T : 1\r\n\r\n", b"X-T: a\x00b\r\n\r\n", b"X-T: 1\r\r\n\r\n"],
)
def test_invalid_trailers_are_refused(make_server, make_client, trailer):
    server = make_server(scripted([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n" + trailer]))
    client = make_client(server.origin)
    with pytest.raises(errors.HTTPParserError):
        get(client, "/bad")
    assert get(client, "/next") == b"fresh /next"


@pytest.mark.parametrize("kind", ["client", "pool"])
def test_headers_timeout_does_not_count_the_time_spent_queued(make_server, make_client, kind):
    """docs/client.md: headers_timeout is counted from when the request has
    been written, not from when it was queued behind a slow one."""

    def handler(conn):
        while True:
            req = conn.read_request()
            if req is None:
                return
            if req.target == "/slow":
                gevent.sleep(0.4)
            conn.respond(req.target.encode())

    server = make_server(handler)
    if kind == "pool":
        client = greenhttp.Pool(server.origin, connections=1, headers_timeout=0.25)
    else:
        client = make_client(server.origin, headers_timeout=0.25)
    try:
        slow = gevent.spawn(get, client, "/slow", headers_timeout=1.0)
        gevent.sleep(0.01)
        fast = gevent.spawn(get, client, "/fast")
        assert outcome(slow) == b"/slow"
        assert outcome(fast) == b"/fast"
    finally:
        if kind == "pool":
            with gevent.Timeout(T):
                client.destroy()


def test_an_abort_behind_a_response_mid_body_never_delivers_it_twice(make_server, make_client):
    """The guard's contract (one response per request) and "nothing delivered
    twice": the request whose response was being read when a request behind
    it was aborted fails; it is not re-sent to start a second response."""

    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_request()
            conn.read_request()
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
            conn.wait_closed()
            return
        scripted([])(conn)

    server = make_server(handler)
    client = make_client(server.origin, pipelining=2)
    events = []
    ended = gevent.event.Event()

    class Recorder:
        def on_request_start(self, controller, context):
            events.append("start")

        def on_response_start(self, controller, status, headers, message):
            events.append(status)

        def on_response_data(self, controller, chunk):
            events.append(chunk)

        def on_response_end(self, controller, trailers):
            events.append("end")
            ended.set()

        def on_response_error(self, controller, err):
            events.append(type(err).__name__)
            ended.set()

    client.dispatch({"path": "/1", "method": "GET", "blocking": False}, Recorder())
    wait = gevent.event.Event()
    gevent.spawn_later(0.05, wait.set)
    ac = greenhttp.AbortController()
    job = gevent.spawn(get, client, "/g", blocking=False, signal=ac.signal)
    wait.wait(T)
    assert [r.target for r in server.requests] == ["/1", "/g"]
    ac.abort()
    assert ended.wait(T)
    with pytest.raises(greenhttp.DOMException):
        job.get(timeout=T)
    assert events == ["start", 200, b"abc", "InformationalError"]
    assert get(client, "/next") == b"fresh /next"
    assert [r.target for r in server.requests] == ["/1", "/g", "/next"]


def test_a_body_timeout_at_the_head_resends_the_others(make_server, make_client):
    def script(conn, reqs):
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        conn.wait_closed()

    server = make_server(pipelined_server(script))
    client = make_client(server.origin, pipelining=3, body_timeout=0.2)
    jobs = spawn_gets(client, ["/1", "/2", "/3"])
    assert [outcome(j) for j in jobs] == ["BodyTimeoutError", b"/2", b"/3"]
    assert sorted(r.target for r in server.requests) == ["/1", "/2", "/2", "/3", "/3"]


def test_body_timeout_governs_a_response_body_that_stalls_while_the_upload_goes_on(make_server, make_client):
    """Once the final head has arrived, the wait is for body: a response body
    that stalls fails with BodyTimeoutError after body_timeout, even while the
    request body is still being sent (the upload must not re-arm the headers
    timer of a request whose head is in)."""
    import time

    def body():
        for _ in range(6):
            gevent.sleep(0.05)
            yield b"x"

    def handler(conn):
        if len(conn.server.conns) == 1:
            conn.read_head()
            conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
            conn.wait_closed()
            return
        scripted([])(conn)

    server = make_server(handler)
    client = make_client(server.origin, headers_timeout=3, body_timeout=0.2)
    started = time.monotonic()
    r = client.request(path="/duplex", method="POST", body=body())
    with gevent.Timeout(T), pytest.raises(errors.BodyTimeoutError):
        r.body.bytes()
    assert time.monotonic() - started < 1.5
