"""Request bodies, ``Blob`` and ``Headers``: every body type on HTTP/1.1, h2c and
TLS h2 (bytes and framing), content-length disagreements, GET/HEAD with a body,
expect-continue, request headers in every input form, the Fetch ``Headers`` class
and the File API ``Blob``."""

from __future__ import annotations

import array
import io
from typing import Any

import gevent
import pytest
import trustme
from gevent import ssl as gssl

import greenhttp
from greenhttp import Blob, Headers, errors
from h2_support.h2server import H2ServerConn

pytest_plugins = ["h2_support.fixtures"]

T = 5


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


def _tls_context(ca):
    ctx = gssl.SSLContext(gssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
    ctx.set_alpn_protocols(["h2"])
    return ctx


class Peer:
    """A client and what its server saw of the last request, the same on h1 and h2."""

    def __init__(self, kind: str, client: Any, server: Any) -> None:
        self.kind = kind
        self.client = client
        self.server = server

    @property
    def h2(self) -> bool:
        return self.kind != "h1"

    def last(self) -> dict[str, Any]:
        req = self.server.requests[-1]
        if self.h2:
            assert req.ended  # END_STREAM came
            return {
                "content-length": [v for k, v in req.headers if k == "content-length"],
                "chunked": False,
                "headers": [(k, v) for k, v in req.headers if not k.startswith(":")],
                "body": req.body,
                "method": req.method,
            }
        return {
            "content-length": req.header_list("content-length"),
            "chunked": req.chunked,
            "headers": req.headers[2:],
            "body": req.body,
            "method": req.method,
        }


def _h1_ok(conn) -> None:
    while True:
        req = conn.read_request()
        if req is None:
            return
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")


def _h2_ok(conn: H2ServerConn) -> None:
    while True:
        req = conn.next_request(timeout=30)
        if req is None:
            return
        conn.respond(req.stream_id, body=b"")


@pytest.fixture(params=["h1", "h2c", "h2-tls"])
def peer(request, make_server, make_client, make_h2_server, make_h2c, ca):
    kind = request.param
    if kind == "h1":
        server = make_server(_h1_ok)
        client = make_client(server.origin)
    elif kind == "h2c":
        server = make_h2_server(_h2_ok)
        client = make_h2c(server.origin)
    else:
        server = make_h2_server(_h2_ok, ssl_context=_tls_context(ca))
        client = make_h2c(
            f"https://localhost:{server.port}", cls=greenhttp.Client, connect={"cadata": ca.cert_pem.bytes().decode()}
        )
    return Peer(kind, client, server)


def send(peer: Peer, **options: Any) -> dict[str, Any]:
    options.setdefault("path", "/b")
    options.setdefault("method", "POST")
    with gevent.Timeout(T):
        r = peer.client.request(**options)
        r.body.bytes()
    assert r.status_code == 200
    return peer.last()


def _gen(*parts):
    yield from parts


_BIG = bytes(range(256)) * 1200  # 300 KiB: more than one h2 window and several writes

# name -> (body factory, the bytes the server must get): bodies of known length, then of unknown length
KNOWN = {
    "bytes": (lambda tmp: b"abc\x00\xff", b"abc\x00\xff"),
    "bytearray": (lambda tmp: bytearray(b"bytearray"), b"bytearray"),
    "memoryview": (lambda tmp: memoryview(b"xmemoryviewx")[1:-1], b"memoryview"),
    "memoryview-of-shorts": (lambda tmp: memoryview(array.array("H", [1, 2, 3])), array.array("H", [1, 2, 3]).tobytes()),
    "str": (lambda tmp: "h\u00e9llo \u20ac", "h\u00e9llo \u20ac".encode()),
    "big-bytes": (lambda tmp: _BIG, _BIG),
    "blob": (lambda tmp: Blob(["a", b"b", bytearray(b"c"), Blob([b"d"])]), b"abcd"),
    "binary-file": (lambda tmp: _file(tmp, _BIG, "rb"), _BIG),
}
UNKNOWN = {
    "list-of-bytes": (lambda tmp: [b"a", b"", b"bc"], b"abc"),
    "tuple-of-mixed": (lambda tmp: (b"a", "\u00e9", bytearray(b"c"), memoryview(b"d")), "a\u00e9cd".encode()),
    "generator": (lambda tmp: _gen(b"one,", "two,", bytearray(b"three")), b"one,two,three"),
    "big-generator": (lambda tmp: _gen(_BIG, _BIG), _BIG * 2),
    "blob-stream": (lambda tmp: Blob([_BIG]).stream(70000), _BIG),
    "text-file": (lambda tmp: _file(tmp, "caf\u00e9\nline\n".encode(), "r"), "caf\u00e9\nline\n".encode()),
    "bytesio": (lambda tmp: io.BytesIO(b"from bytesio"), b"from bytesio"),
    "stringio": (lambda tmp: io.StringIO("from stringio \u00e9"), "from stringio \u00e9".encode()),
}

_opened: list[Any] = []


def _file(tmp, data: bytes, mode: str):
    p = tmp / f"body-{len(_opened)}"
    p.write_bytes(data)
    f = open(p, mode, encoding="utf-8") if "b" not in mode else open(p, mode)  # noqa: SIM115
    _opened.append(f)
    return f


@pytest.fixture(autouse=True)
def _close_files():
    yield
    while _opened:
        _opened.pop().close()


@pytest.mark.parametrize("name", list(KNOWN))
def test_a_body_of_known_length_arrives_whole_with_its_content_length(peer, tmp_path, name):
    make, expected = KNOWN[name]
    seen = send(peer, body=make(tmp_path))
    assert seen["body"] == expected
    assert seen["content-length"] == [str(len(expected))]
    assert not seen["chunked"]


@pytest.mark.parametrize("name", list(UNKNOWN))
def test_a_body_of_unknown_length_is_chunked_on_h1_and_ends_the_stream_on_h2(peer, tmp_path, name):
    make, expected = UNKNOWN[name]
    seen = send(peer, body=make(tmp_path))
    assert seen["body"] == expected
    assert seen["content-length"] == []
    assert seen["chunked"] == (not peer.h2)


@pytest.mark.parametrize(
    "body",
    [None, b"", "", bytearray(), memoryview(b""), Blob(), Blob([b""], type="text/plain")],
    ids=["none", "bytes", "str", "bytearray", "memoryview", "blob", "typed-blob"],
)
def test_an_empty_body_is_no_body(peer, body):
    seen = send(peer, body=body)
    assert seen["body"] == b""
    assert seen["content-length"] == ["0"]
    assert not seen["chunked"]
    seen = send(peer, method="GET", body=body)
    assert seen["content-length"] == []


@pytest.mark.parametrize("empty", ["list", "iterator", "bytesio"])
def test_an_empty_stream_sends_an_empty_body(peer, empty):
    body = {"iterator": iter([]), "bytesio": io.BytesIO()}.get(empty, [])
    seen = send(peer, body=body)
    assert seen["body"] == b""
    assert seen["content-length"] in ([], ["0"])


def test_a_blob_body_brings_its_type_unless_the_caller_gave_one(peer):
    seen = send(peer, body=Blob([b"{}"], type="Application/JSON"))
    assert [v for k, v in seen["headers"] if k.lower() == "content-type"] == ["application/json"]
    seen = send(peer, body=Blob([b"{}"], type="application/json"), headers={"Content-Type": "text/x-mine"})
    assert [v for k, v in seen["headers"] if k.lower() == "content-type"] == ["text/x-mine"]


@pytest.mark.parametrize("method", ["GET", "HEAD", "DELETE", "OPTIONS"])
def test_a_body_on_a_method_without_payload_semantics_is_sent_framed(peer, method):
    seen = send(peer, method=method, body=b"data")
    assert seen["method"] == method
    assert seen["body"] == b"data"
    assert seen["content-length"] == ["4"]
    # and the client is still usable
    assert send(peer, method="GET", path="/next")["body"] == b""


def test_a_declared_length_that_disagrees_with_a_known_body_fails_before_sending(peer):
    for body in (b"abc", "abc", bytearray(b"abc"), Blob([b"abc"])):
        with gevent.Timeout(T), pytest.raises(errors.RequestContentLengthMismatchError):
            peer.client.request(path="/b", method="PUT", body=body, headers={"content-length": "4"})
    assert peer.server.requests == []
    seen = send(peer, body=b"abc", headers={"Content-Length": "3"})
    assert seen["content-length"] == ["3"] and seen["body"] == b"abc"


@pytest.mark.parametrize("body", [None, b"", "", Blob([])], ids=["none", "bytes", "str", "blob"])
def test_an_empty_body_is_sent_with_its_real_length_whatever_length_was_declared(peer, body):
    # As the original: a declared length is checked against a known body length > 0 only.
    seen = send(peer, method="POST", body=body, headers={"content-length": "5"})
    assert seen["method"] == "POST"
    assert seen["content-length"] == ["0"] and seen["body"] == b""
    seen = send(peer, method="DELETE", path="/d", body=body, headers={"content-length": "5"})
    assert seen["content-length"] == [] and seen["body"] == b""


@pytest.mark.parametrize("declared", ["2", "10"])
def test_a_streamed_body_that_disagrees_with_its_declared_length_fails_and_the_client_recovers(peer, declared):
    with gevent.Timeout(T), pytest.raises(errors.RequestContentLengthMismatchError):
        peer.client.request(path="/b", method="PUT", body=iter([b"abc", b"def"]), headers={"content-length": declared})
    assert send(peer, method="GET", path="/after")["method"] == "GET"
    _no_half_request_was_taken(peer)


def _no_half_request_was_taken(peer: Peer) -> None:
    """The failed request never looked complete to the server, and what came next did
    not go on the connection it was cut short on (h1) / went on after an RST (h2)."""
    if peer.h2:
        first = peer.server.requests[0]
        assert not first.ended and first.reset_code is not None  # (the RST came before the next request)
        assert peer.server.accepted == 1
    else:
        assert [r.target for r in peer.server.requests] == ["/after"]
        assert peer.server.accepted == 2


def test_a_body_iterator_that_raises_fails_with_its_error_and_the_next_request_works(peer):
    class Boom(Exception):
        pass

    def gen():
        yield b"first"
        raise Boom("broken source")

    with gevent.Timeout(T), pytest.raises(Boom, match="broken source"):
        peer.client.request(path="/b", method="POST", body=gen()).body.bytes()
    seen = send(peer, method="GET", path="/after")
    assert seen["method"] == "GET"
    _no_half_request_was_taken(peer)


def test_a_body_chunk_of_the_wrong_type_fails_the_request_with_invalid_argument(peer):
    with gevent.Timeout(T), pytest.raises(errors.InvalidArgumentError, match="int"):
        peer.client.request(path="/b", method="POST", body=[b"ok", 5]).body.bytes()
    assert send(peer, method="GET", path="/after")["method"] == "GET"
    _no_half_request_was_taken(peer)


# -- headers in every input form ------------------------------------------------------------


def _pairs_of(seen, *names):
    wanted = {n.lower() for n in names}
    return [(k.lower(), v) for k, v in seen["headers"] if k.lower() in wanted]


@pytest.mark.parametrize(
    "headers",
    [
        {"X-A": "1", "X-B": ["2", "3"], b"X-C": b"c"},
        [("X-A", "1"), ("X-B", "2"), ("X-B", "3"), (b"X-C", b"c")],
        ("X-A", "1", "X-B", "2", "X-B", "3", b"X-C", b"c"),
        ["X-A", "1", "X-B", ["2", "3"], "X-C", b"c"],
        Headers([("X-A", "1"), ("X-B", "2"), ("X-B", "3"), (b"X-C", b"c")]),
    ],
    ids=["dict", "pairs", "flat-tuple", "flat-list-with-list", "Headers"],
)
def test_headers_in_every_form_reach_the_server(peer, headers):
    seen = send(peer, method="GET", headers=headers)
    got = _pairs_of(seen, "x-a", "x-b", "x-c")
    if peer.h2:
        # h2 servers see each field; a Headers object combines a repeated name.
        values = {}
        for k, v in got:
            values.setdefault(k, []).append(v)
        assert values["x-a"] == ["1"]
        assert ", ".join(values["x-b"]) == "2, 3"
        assert values["x-c"] == ["c"]
    else:
        expected_b = [("x-b", "2, 3")] if isinstance(headers, Headers) else [("x-b", "2"), ("x-b", "3")]
        assert got == [("x-a", "1"), *expected_b, ("x-c", "c")]


@pytest.mark.parametrize(
    "headers, fragment",
    [
        ({"x-a": "a\r\nb"}, "a\\r\\nb"),
        ({"x-a": ["ok", "bad\x00"]}, "bad\\x00"),
        ({"bad name": "v"}, "bad name"),
        ([("x-a", "v\n")], "v\\n"),
        (["x-a", "1", "x-b"], "even"),
        ([("x-a",)], "key-value"),
        ({"x-a": {"nested": 1}}, "x-a"),
        ({"x-a": "\u0100"}, "x-a"),
        (12, "dict or a list"),
    ],
)
def test_invalid_headers_raise_invalid_argument_naming_what_is_wrong(peer, headers, fragment):
    with gevent.Timeout(T), pytest.raises(errors.InvalidArgumentError) as info:
        peer.client.request(path="/", headers=headers)
    assert fragment in str(info.value)
    assert peer.server.requests == []


# -- Headers against the Fetch standard -----------------------------------------------------


def test_headers_fetch_semantics():
    h = Headers()
    h.append("Accept", "text/html")
    h.append("accept", " text/plain\t")
    h.append("Set-Cookie", "a=1")
    h.append("set-cookie", "b=2, c=3")
    h.set("X-Z", "z")
    h.append(b"X-Bytes", b"\xff")
    assert h.get("ACCEPT") == "text/html, text/plain"
    assert h.get("set-cookie") == "a=1, b=2, c=3"
    assert h.get_set_cookie() == ["a=1", "b=2, c=3"]
    assert list(h) == [
        ("accept", "text/html, text/plain"),
        ("set-cookie", "a=1"),
        ("set-cookie", "b=2, c=3"),
        ("x-bytes", "\xff"),
        ("x-z", "z"),
    ]
    assert h.has("x-z") and not h.has("x-y")
    h.delete("X-Z")
    h.delete("x-absent")
    assert not h.has("x-z") and h.get("x-z") is None
    h.set("accept", "")
    assert h.get("accept") == ""
    for bad in ("", "a b", "a:b", "\u00e9", "a\r\n"):
        with pytest.raises(TypeError, match="invalid header name"):
            h.append(bad, "v")
        with pytest.raises(TypeError):
            h.get(bad)
    for value in ("a\rb", "a\nb", "a\x00b", "\u0100"):
        with pytest.raises(TypeError, match="invalid header value"):
            h.set("x", value)
    h.set("x", "a\x01\x7fb")  # Fetch forbids only NUL, CR and LF inside a value
    assert h.get("x") == "a\x01\x7fb"


# -- Blob against the File API -----------------------------------------------------------------


def test_blob_file_api_details():
    b = Blob(["ab", b"cd", bytearray(b"ef"), memoryview(b"gh"), Blob([b"ij"])], type="Text/Plain;Charset=UTF-8")
    assert b.size == len(b) == 10
    assert b.type == "text/plain;charset=utf-8"
    assert b.bytes() == b.array_buffer() == b"abcdefghij"
    assert b.slice(-3).bytes() == b"hij"
    assert b.slice(-3, -1).bytes() == b"hi"
    assert b.slice(2, -2).bytes() == b"cdefgh"
    assert b.slice(8, 2).bytes() == b""
    assert b.slice(-100, 100).bytes() == b"abcdefghij"
    assert b.slice().type == ""
    assert b.slice(0, 1, "Image/PNG").type == "image/png"
    assert b.slice(0, 1, "caf\u00e9").type == ""
    assert Blob([], type="a\x1fb").type == ""
    assert b"".join(b.stream(3)) == b"abcdefghij"
    assert [len(c) for c in b.stream(4)] == [4, 4, 2]
    assert Blob([b"\xef\xbb\xbfhi \xff"]).text() == "hi \ufffd"
    assert Blob(["\u20ac"]).bytes() == "\u20ac".encode()


# -- expect: 100-continue ---------------------------------------------------------------------

_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def _expect_h1(answer: str):
    def handler(conn) -> None:
        while True:
            req = conn.read_head()
            if req is None:
                return
            conn.server.requests.append(req)
            if req.header("expect") is not None:
                if answer == "final":
                    conn.send(b"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 2\r\n\r\nno")
                    conn.wait_closed()
                    req.body = conn.buf  # whatever came after the head: nothing
                    return
                if answer == "100":
                    conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            conn.read_body(req)
            conn.send(_OK)

    return handler


def _expect_h2(answer: str):
    def handler(conn: H2ServerConn) -> None:
        while True:
            req = conn.opened.get(timeout=30)
            if req is None:
                return
            if req.header("expect") is not None:
                if answer == "final":
                    conn.send_headers(req.stream_id, 417, [("content-length", "2")])
                    conn.send_body(req.stream_id, b"no")
                    continue
                if answer == "100":
                    conn.send_headers(req.stream_id, 100)
            while req.chunks.get(timeout=T) is not None:
                pass
            conn.respond(req.stream_id, body=b"")

    return handler


def _expect_body(kind: str, tmp_path):
    if kind == "bytes":
        return b"payload"
    if kind == "generator":
        return _gen(b"pay", "load")
    return _file(tmp_path, b"payload", "rb")


@pytest.mark.parametrize(
    "proto, answer, body",
    [
        (proto, answer, body)
        for proto in ("h1", "h2c")
        for answer, bodies in (("100", ("bytes", "generator", "file")), ("final", ("bytes", "generator", "file")), ("silent", ("generator",)))
        for body in bodies
    ],
)
def test_expect_continue(make_server, make_client, make_h2_server, make_h2c, tmp_path, proto, answer, body):
    if proto == "h1":
        server = make_server(_expect_h1(answer))
        client = make_client(server.origin)
    else:
        server = make_h2_server(_expect_h2(answer))
        client = make_h2c(server.origin)
    with gevent.Timeout(T):
        r = client.request(path="/up", method="PUT", body=_expect_body(body, tmp_path), expect_continue=True)
        data = r.body.bytes()
        req = server.requests[0]
        assert req.header("expect") == "100-continue"
        if answer == "final":
            assert (r.status_code, data) == (417, b"no")
        else:
            assert r.status_code == 200
            assert req.body == b"payload"
        # the client goes on (on a new connection after a final answer on h1)
        assert client.request(path="/next").status_code == 200
        if answer == "final":
            if proto == "h1":
                assert server.conns[0].eof.wait(T)
            else:
                # (frames arrive in order: the RST came before the next request)
                assert not req.ended and req.reset_code == 0  # our half closed with RST_STREAM(NO_ERROR)
            assert req.body == b""
    assert server.accepted == (2 if proto == "h1" and answer == "final" else 1)


# -- bugs found by this audit -------------------------------------------------------------------


class _Tagged(bytes):
    """A bytes subclass (as numpy.bytes_ or a str-like wrapper type is)."""


@pytest.mark.parametrize("size", [5, 300_000], ids=["small", "big"])
def test_a_bytes_subclass_body_is_framed_like_bytes(peer, size):
    """A body of a bytes subclass went out on HTTP/1.1 with no content-length at all
    (its bytes then read as the next request: smuggling), and on HTTP/2 it reached a
    streamed-body path that asserts a stream."""
    data = _Tagged(b"x" * size)
    seen = send(peer, body=data)
    assert seen["content-length"] == [str(size)]
    assert seen["body"] == bytes(data)
    assert not seen["chunked"]
    assert send(peer, method="GET", path="/next")["body"] == b""


@pytest.mark.parametrize("parts", [b"abc", bytearray(b"abc"), memoryview(b"abc"), "abc", Blob([b"abc"])])
def test_blob_parts_given_as_one_value_are_a_type_error(parts):
    """Blob(b"abc") used to iterate the bytes as ints and make 97 + 98 + 99 NUL bytes;
    the File API takes a sequence of parts, so a single value is a TypeError."""
    with pytest.raises(TypeError, match="parts"):
        Blob(parts)


@pytest.mark.parametrize("part", [5, True, [104, 105], None, 1.5])
def test_a_blob_part_that_is_not_bytes_like_str_or_blob_is_a_type_error(part):
    """bytes(5) is five NUL bytes and bytes([104, 105]) is b"hi": such parts used to be
    accepted and turned into bytes nobody meant."""
    with pytest.raises(TypeError, match=type(part).__name__):
        Blob([b"ok", part])


def test_blob_parts_of_every_bytes_like_kind():
    parts = [b"a", bytearray(b"b"), memoryview(b"xcx")[1:2], array.array("B", [100]), _Tagged(b"e"), "f", Blob([b"g"])]
    blob = Blob(parts)
    assert blob.bytes() == b"abcdefg"
    assert type(blob.bytes()) is bytes


def test_a_blob_type_that_is_not_a_str_is_a_type_error():
    """type=None used to fail with an AttributeError from inside the constructor."""
    with pytest.raises(TypeError, match="NoneType"):
        Blob([b"x"], type=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["body", "chunk"])
def test_any_bytes_like_body_is_sent_as_its_bytes(peer, kind):
    """An array.array (or any buffer: the original's ArrayBufferView) was iterated as
    numbers: the head went out, then the request failed with "body chunks must be
    bytes or str, got int" and the connection was lost."""
    data = array.array("H", [1, 2, 0xFFFF])
    if kind == "body":
        seen = send(peer, body=data)
        assert seen["content-length"] == [str(len(data.tobytes()))]
    else:
        seen = send(peer, body=[b"<", data, b">"])
    assert seen["body"] == (data.tobytes() if kind == "body" else b"<" + data.tobytes() + b">")
    assert send(peer, method="GET", path="/next")["body"] == b""


def test_a_bytes_like_body_is_replayable_for_the_retry_interceptor(make_server, make_client):
    """The retry interceptor resends a body it can send again: a bytes-like one is."""
    from greenhttp import interceptors

    def handler(conn) -> None:
        req = conn.read_request()
        if req is not None and len(conn.server.requests) == 1:
            conn.send(b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\nRetry-After: 0\r\n\r\n")
        elif req is not None:
            conn.send(_OK)
        _h1_ok(conn)

    server = make_server(handler)
    client = make_client(server.origin).compose(interceptors.retry(min_timeout=0.01, max_retries=2))
    data = array.array("B", b"again")
    with gevent.Timeout(T):
        r = client.request(path="/r", method="PUT", body=data)
        r.body.bytes()
    assert r.status_code == 200
    assert [q.body for q in server.requests] == [b"again", b"again"]


def test_a_blob_of_a_response_read_with_raw_headers_keeps_its_type(make_server, make_client):
    """body.blob() with response_headers="raw" had type "": the content-type was looked
    up in a dict only (the original parses the raw headers for it)."""

    def handler(conn) -> None:
        while conn.read_request() is not None:
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: Text/Plain\r\nContent-Length: 2\r\n\r\nhi")

    server = make_server(handler)
    client = make_client(server.origin)
    with gevent.Timeout(T):
        blob = client.request(path="/", response_headers="raw").body.blob()
        assert (blob.bytes(), blob.type) == (b"hi", "text/plain")
        blob = client.request(path="/").body.blob()
        assert (blob.bytes(), blob.type) == (b"hi", "text/plain")


def test_a_blobs_type_is_read_only():
    # It goes out as the content-type header: only the constructor's check may set it.
    blob = Blob([b"abc"], type="text/plain")
    with pytest.raises(AttributeError):
        blob.type = "text/x\r\nx-injected: 1"  # type: ignore[misc]
    assert blob.type == "text/plain"


@pytest.mark.parametrize("interceptor", ["retry", "redirect"])
def test_a_blob_body_keeps_its_content_type_through_retry_and_redirect(make_server, interceptor):
    # REFERENCE §3.4: a Blob brings its content-type. These two interceptors made the
    # body replayable by turning it into a stream, and its type was lost.
    seen = []

    def handler(conn):
        while (req := conn.read_request()) is not None:
            seen.append((req.header("content-type"), req.header("content-length"), req.body))
            if interceptor == "redirect" and len(seen) == 1:
                conn.respond(b"", status="307 Temporary Redirect", headers=[("Location", "/next")])
            elif interceptor == "retry" and len(seen) == 1:
                conn.respond(b"", status="503 Service Unavailable", headers=[("Retry-After", "0")])
            else:
                conn.respond(b"done")

    server = make_server(handler)
    icpt = greenhttp.interceptors.retry(min_timeout=0.001) if interceptor == "retry" else (
        greenhttp.interceptors.redirect(max_redirections=2)
    )
    client = greenhttp.Client(server.origin)
    try:
        r = client.compose(icpt).request(path="/", method="PUT", body=Blob([b"abc"], type="text/x"))
        assert r.body.text() == "done"
        assert seen == [("text/x", "3", b"abc")] * 2
    finally:
        with gevent.Timeout(5):
            client.destroy()
