"""Audit of the dump, response_error and decompress interceptors: codings, header forms,
error paths, connection reuse, and that nothing reaches a handler after its terminal call."""

from __future__ import annotations

import gzip
import json
import warnings
import zlib

import brotli
import gevent
import gevent.event
import pytest

from greenhttp import errors, interceptors
from greenhttp.errors import ExperimentalWarning

pytest_plugins = ["h2_support.fixtures"]


def _decompress(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return interceptors.decompress(**kw)


BIG = b"".join(b"line %d of a fairly compressible body\n" % i for i in range(60000))  # ~2.3 MiB


def _raw(status, headers, body=b"", chunked=False):
    head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    if chunked:
        return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _keepalive(make_server, responses):
    """A keep-alive server answering its n-th request (over all connections) with ``responses[n]`` (raw bytes).

    (A client closes its connection after a HEAD, as the original does.)
    """
    queue = list(responses)

    def handler(conn):
        while queue:
            if conn.read_request() is None:
                return
            conn.send(queue.pop(0))
        conn.wait_closed()

    return make_server(handler)


def _after_terminal(rec):
    names = rec.names()
    ends = [i for i, n in enumerate(names) if n in ("end", "error")]
    assert len(ends) == 1, names
    return names[ends[0] + 1:]


# -- decompress -----------------------------------------------------------------------------------
def test_abort_from_data_callback_stops_delivery_at_once(routes, make_client, recorder):
    # One wire chunk decodes into many 64 KiB pieces: an abort on the first must be the last thing seen.
    server = routes({"/": lambda conn, req: conn.respond(gzip.compress(BIG), headers=[("Content-Encoding", "gzip")])})

    class AbortFirst(recorder):
        def on_response_data(self, controller, chunk):
            super().on_response_data(controller, chunk)
            controller.abort(RuntimeError("stop"))

    rec = AbortFirst()
    client = make_client(server.origin).compose(_decompress())
    client.dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(5)
    gevent.sleep(0.05)
    assert rec.names() == ["start", "response_start", "data", "error"]
    assert str(rec.error) == "stop"


def test_repeated_content_encoding_lines_are_one_list(make_server, make_client):
    body = brotli.compress(gzip.compress(BIG))
    server = _keepalive(make_server, [_raw("200 OK", [("Content-Encoding", "gzip"), ("content-encoding", " BR ")], body)])
    r = make_client(server.origin).compose(_decompress()).request(path="/")
    assert r.body.bytes() == BIG
    assert "content-encoding" not in r.headers


def test_multi_member_gzip_and_trailing_garbage(routes, make_client):
    members = gzip.compress(b"first,") + gzip.compress(b"") + gzip.compress(b"second")
    server = routes({
        "/multi": lambda c, r: c.respond(members, headers=[("Content-Encoding", "gzip")]),
        "/garbage": lambda c, r: c.respond(gzip.compress(b"payload") + b"\x00\x00junk", headers=[("Content-Encoding", "x-gzip")]),
        "/deflate-garbage": lambda c, r: c.respond(zlib.compress(b"payload") + b"junk", headers=[("Content-Encoding", "deflate")]),
    })
    client = make_client(server.origin).compose(_decompress())
    assert client.request(path="/multi").body.bytes() == b"first,second"
    assert client.request(path="/garbage").body.bytes() == b"payload"
    assert client.request(path="/deflate-garbage").body.bytes() == b"payload"
    assert server.accepted == 1


def test_empty_bodies_and_skipped_statuses(make_server, make_client):
    server = _keepalive(make_server, [
        _raw("200 OK", [("Content-Encoding", "gzip")]),
        b"HTTP/1.1 204 No Content\r\nContent-Encoding: gzip\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\nContent-Encoding: gzip\r\nContent-Length: 20\r\n\r\n",
        _raw("200 OK", [("Content-Encoding", "gzip")], chunked=True, body=b""),
    ])
    client = make_client(server.origin).compose(_decompress())
    r = client.request(path="/")
    assert r.body.bytes() == b"" and "content-encoding" not in r.headers
    r = client.request(path="/")
    assert r.status_code == 204 and r.headers["content-encoding"] == "gzip" and r.body.bytes() == b""
    r = client.request(path="/")
    assert r.status_code == 304 and r.headers["content-encoding"] == "gzip" and r.body.bytes() == b""
    assert client.request(path="/").body.bytes() == b""
    assert server.accepted == 1


def test_head_keeps_headers(make_server, make_client):
    server = _keepalive(make_server, [
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 1234\r\n\r\n",
        _raw("200 OK", [("Content-Encoding", "gzip")], gzip.compress(b"after head")),
    ])
    client = make_client(server.origin).compose(_decompress())
    r = client.request(path="/", method="HEAD")
    assert r.headers["content-encoding"] == "gzip" and r.headers["content-length"] == "1234"
    assert r.body.bytes() == b""
    assert client.request(path="/").body.bytes() == b"after head"
    assert server.accepted == 2  # closed after the HEAD


def test_too_many_codings_fails_and_does_not_hang(make_server, make_client):
    body = b"x"
    server = _keepalive(make_server, [_raw("200 OK", [("Content-Encoding", "gzip, " * 5 + "gzip")], body)] * 2)
    client = make_client(server.origin).compose(_decompress())
    with gevent.Timeout(5):
        with pytest.raises(errors.DecompressionError, match="too many content-encodings"):
            client.request(path="/").body.bytes()
        with pytest.raises(errors.DecompressionError):
            client.request(path="/").body.bytes()


def test_corrupt_mid_stream_fails_and_next_request_works(make_server, make_client):
    good = gzip.compress(BIG)
    bad = good[:2000] + bytes(b ^ 0x5A for b in good[2000:4000]) + good[4000:]
    server = _keepalive(make_server, [_raw("200 OK", [("Content-Encoding", "gzip")], bad)])

    def second(conn):
        conn.read_request()
        conn.respond(good, headers=[("Content-Encoding", "gzip")])
        conn.wait_closed()

    client = make_client(server.origin).compose(_decompress())
    with gevent.Timeout(5):
        with pytest.raises(errors.DecompressionError):
            client.request(path="/").body.bytes()
    server2 = make_server(second)
    assert make_client(server2.origin).compose(_decompress()).request(path="/").body.bytes() == BIG


def test_truncated_stream_with_full_length_is_an_error_and_keeps_connection(make_server, make_client):
    truncated = gzip.compress(b"abc" * 1000)[:-6]
    server = _keepalive(make_server, [
        _raw("200 OK", [("Content-Encoding", "gzip")], truncated),
        _raw("200 OK", [("Content-Encoding", "gzip")], gzip.compress(b"ok")),
    ])
    client = make_client(server.origin).compose(_decompress())
    with gevent.Timeout(5):
        with pytest.raises(errors.DecompressionError, match="truncated"):
            client.request(path="/").body.bytes()
        assert client.request(path="/").body.bytes() == b"ok"
    assert server.accepted == 1


def test_max_decoded_size_exact_boundary(routes, make_client):
    data = b"a" * 100000
    server = routes({"/": lambda c, r: c.respond(gzip.compress(data), headers=[("Content-Encoding", "gzip")])})
    client = make_client(server.origin)
    assert client.compose(_decompress(max_decoded_size=100000)).request(path="/").body.bytes() == data
    with pytest.raises(errors.ResponseExceededMaxSizeError):
        client.compose(_decompress(max_decoded_size=99999)).request(path="/").body.bytes()


def test_error_responses_left_encoded_unless_asked(routes, make_client):
    enc = gzip.compress(b"oops")
    server = routes({"/": lambda c, r: c.respond(enc, status="500 Internal Server Error", headers=[("Content-Encoding", "gzip")])})
    client = make_client(server.origin)
    r = client.compose(_decompress()).request(path="/")
    assert r.body.bytes() == enc and r.headers["content-encoding"] == "gzip"
    r = client.compose(_decompress(skip_error_responses=False)).request(path="/")
    assert r.body.bytes() == b"oops" and "content-encoding" not in r.headers


# -- dump -----------------------------------------------------------------------------------------
def test_dump_reuses_connection_and_delivers_no_body(make_server, make_client, recorder):
    server = _keepalive(make_server, [
        _raw("200 OK", [], b"x" * 5000),
        _raw("404 Not Found", [], b"y" * 100, chunked=True),
        _raw("200 OK", [], b"z" * 10),
    ])
    client = make_client(server.origin).compose(interceptors.dump(max_size=5000))
    r = client.request(path="/")
    assert r.status_code == 200 and r.body.bytes() == b""
    rec = recorder()
    client.dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(5)
    assert rec.names() == ["start", "response_start", "end"] and rec.status == 404
    assert client.request(path="/").body.bytes() == b""
    assert server.accepted == 1


def test_dump_unknown_length_over_max_size(make_server, make_client, recorder):
    server = _keepalive(make_server, [_raw("200 OK", [], b"x" * 101, chunked=True)])
    client = make_client(server.origin).compose(interceptors.dump(max_size=100))
    rec = recorder()
    client.dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(5)
    gevent.sleep(0.05)
    assert isinstance(rec.error, errors.RequestAbortedError)
    assert "101" in str(rec.error) and "100" in str(rec.error)
    assert _after_terminal(rec) == []


def test_dump_content_length_over_max_size_closes(make_server, make_client):
    server = _keepalive(make_server, [_raw("200 OK", [], b"x" * 101), _raw("200 OK", [], b"ok")])
    client = make_client(server.origin).compose(interceptors.dump(max_size=100))
    with pytest.raises(errors.RequestAbortedError, match=r"Response size \(101\) larger than max_size \(100\)"):
        client.request(path="/").body.bytes()
    assert client.request(path="/", dump_max_size=None).status_code == 200


def test_dump_head_with_big_length_and_1xx(make_server, make_client):
    server = _keepalive(make_server, [
        b"HTTP/1.1 200 OK\r\nContent-Length: 999999\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + _raw("200 OK", [], b"body"),
    ])
    client = make_client(server.origin).compose(interceptors.dump(max_size=10))
    r = client.request(path="/", method="HEAD")
    assert r.status_code == 200
    infos = []
    r = client.request(path="/", on_info=lambda info: infos.append(info))
    assert r.status_code == 200 and r.body.bytes() == b""
    assert len(infos) == 1
    assert server.accepted == 2  # closed after the HEAD


def test_dump_abort_after_head_keeps_connection(make_server, make_client, recorder):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345")
        gevent.sleep(0.1)
        conn.send(b"67890")
        conn.read_request()
        conn.respond(b"again")
        conn.wait_closed()

    server = make_server(handler)

    class AbortAtHead(recorder):
        def on_response_start(self, controller, status_code, headers, status_message):
            super().on_response_start(controller, status_code, headers, status_message)
            controller.abort()

    rec = AbortAtHead()
    client = make_client(server.origin).compose(interceptors.dump())
    client.dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(0.09)  # at once, not after the body
    assert isinstance(rec.error, errors.RequestAbortedError)
    assert client.request(path="/").status_code == 200
    assert server.accepted == 1
    assert _after_terminal(rec) == []


def test_dump_with_signal(make_server, make_client):
    import greenhttp

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        conn.wait_closed()

    server = make_server(handler)
    ctl = greenhttp.AbortController()
    client = make_client(server.origin).compose(interceptors.dump())
    gevent.spawn_later(0.05, ctl.abort)
    with gevent.Timeout(3):
        r = client.request(path="/", signal=ctl.signal)
        assert r.status_code == 200  # the head came; the endless body is being dumped
        with pytest.raises(Exception) as info:
            r.body.bytes()
    assert info.value is ctl.signal.reason


# -- response_error -------------------------------------------------------------------------------
def test_response_error_fields_and_reuse(make_server, make_client):
    problem = {"type": "about:blank", "title": "nope", "status": 422}
    server = _keepalive(make_server, [
        _raw("422 Unprocessable Content", [("Content-Type", "application/problem+json")], json.dumps(problem).encode(), chunked=True),
        _raw("503 Service Unavailable", [("Content-Type", "text/plain; charset=ISO-8859-1")], "café".encode("latin-1")),
        _raw("400 Bad Request", [("Content-Type", "application/json")], b"{not json"),
        _raw("404 Not Found", [("Content-Type", "text/html")], b"<p>x</p>"),
        _raw("500 Internal Server Error", [("Content-Type", "text/plain"), ("Content-Encoding", "gzip")], gzip.compress(b"zipped")),
        _raw("399 Odd", [], b"fine"),
    ])
    client = make_client(server.origin).compose(interceptors.response_error())
    expected = [(422, problem), (503, "café"), (400, "{not json"), (404, ""), (500, "zipped")]
    for status, body in expected:
        with pytest.raises(errors.ResponseError) as info:
            client.request(path="/")
        err = info.value
        assert err.status_code == status and err.status == status
        assert err.body == body
        assert err.code == "GH_ERR_RESPONSE"
        assert isinstance(err.headers, dict) and "content-type" in err.headers
    assert client.request(path="/").body.bytes() == b"fine"
    assert server.accepted == 1


def test_response_error_head_and_empty_json(make_server, make_client):
    server = _keepalive(make_server, [
        b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n",
        _raw("500 Internal Server Error", [("Content-Type", "application/json")]),
        _raw("200 OK", [], b"ok"),
    ])
    client = make_client(server.origin).compose(interceptors.response_error())
    with pytest.raises(errors.ResponseError) as info:
        client.request(path="/", method="HEAD")
    assert info.value.status_code == 404 and info.value.body == ""
    with pytest.raises(errors.ResponseError) as info:
        client.request(path="/")
    assert info.value.body == ""
    assert client.request(path="/").body.bytes() == b"ok"
    assert server.accepted == 2  # closed after the HEAD


@pytest.mark.parametrize("chunked", [False, True])
def test_response_error_too_large_body(make_server, make_client, recorder, chunked):
    big = b'"' + b"e" * ((1 << 20) + 5000) + b'"'
    server = _keepalive(make_server, [_raw("500 Internal Server Error", [("Content-Type", "text/plain")], big, chunked=chunked)])
    client = make_client(server.origin).compose(interceptors.response_error())
    rec = recorder()
    client.dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(5)
    gevent.sleep(0.05)
    assert rec.names() == ["start", "error"]
    assert isinstance(rec.error, errors.ResponseError) and rec.error.status_code == 500
    assert len(rec.error.body) == 1 << 20


def test_raw_headers_stay_filtered_after_the_end(make_server, make_client, recorder):
    server = _keepalive(make_server, [_raw("200 OK", [("Content-Encoding", "gzip"), ("X-Keep", "1")], gzip.compress(b"body"))])
    seen = {}

    class Raw(recorder):
        def on_response_start(self, controller, status_code, headers, status_message):
            seen["start"] = [n.lower() for n in controller.raw_headers[::2]]
            super().on_response_start(controller, status_code, headers, status_message)

        def on_response_end(self, controller, trailers):
            seen["end"] = [n.lower() for n in controller.raw_headers[::2]]
            super().on_response_end(controller, trailers)

    rec = Raw()
    make_client(server.origin).compose(_decompress()).dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(5) and rec.body == b"body"
    for when in ("start", "end"):
        assert b"x-keep" in seen[when]
        assert b"content-encoding" not in seen[when] and b"content-length" not in seen[when], when
    assert b"content-encoding" not in [n.lower() for n in rec.controller.raw_headers[::2]]


def test_empty_content_encoding_is_no_coding(make_server, make_client):
    server = _keepalive(make_server, [_raw("200 OK", [("Content-Encoding", "")], b"plain")])
    r = make_client(server.origin).compose(_decompress()).request(path="/")
    assert r.body.bytes() == b"plain"
    assert r.headers["content-length"] == "5" and r.headers["content-encoding"] == ""


def test_byte_by_byte_stacked_codings(make_server, make_client):
    data = b"stacked and trickled " * 50
    body = zlib.compress(gzip.compress(data))

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Encoding: GZIP ,\tDeflate\r\nTransfer-Encoding: chunked\r\n\r\n")
        for b in body:
            conn.send(b"1\r\n%c\r\n" % b)
        conn.send(b"0\r\n\r\n")
        conn.wait_closed()

    server = make_server(handler)
    with gevent.Timeout(5):
        r = make_client(server.origin).compose(_decompress()).request(path="/")
        assert r.body.bytes() == data
    assert "content-encoding" not in r.headers and "transfer-encoding" in r.headers


def test_dump_bad_per_request_size_is_an_error_not_a_hang(make_server, make_client):
    server = _keepalive(make_server, [_raw("200 OK", [], b"x")])
    client = make_client(server.origin).compose(interceptors.dump())
    for bad in (0, -1, True, "10"):
        with gevent.Timeout(2):
            with pytest.raises(errors.InvalidArgumentError, match="dump_max_size"):
                client.request(path="/", dump_max_size=bad)
    assert client.request(path="/", dump_max_size=1).status_code == 200


def test_response_error_deeply_nested_json_falls_back_to_text(make_server, make_client):
    deep = b"[" * 200000 + b"]" * 200000  # valid JSON, but deeper than the parser's recursion limit
    server = _keepalive(make_server, [
        _raw("400 Bad Request", [("Content-Type", "application/json")], deep),
        _raw("200 OK", [], b"ok"),
    ])
    client = make_client(server.origin).compose(interceptors.response_error())
    with gevent.Timeout(5):
        with pytest.raises(errors.ResponseError) as info:
            client.request(path="/")
    assert info.value.status_code == 400 and info.value.body == deep.decode()
    assert client.request(path="/").body.bytes() == b"ok"
    assert server.accepted == 1


@pytest.mark.parametrize("charset", ["zlib", "hex", "undefined", "idna"])
def test_response_error_charset_that_is_no_text_encoding(make_server, make_client, charset):
    # Python knows these names, but they do not decode bytes to text (or not with errors="replace").
    server = _keepalive(make_server, [
        _raw("418 I'm a teapot", [("Content-Type", f"text/plain; charset={charset}")], "tea \xe9".encode()),
        _raw("200 OK", [], b"ok"),
    ])
    client = make_client(server.origin).compose(interceptors.response_error())
    with gevent.Timeout(5):
        with pytest.raises(errors.ResponseError) as info:
            client.request(path="/")
    assert info.value.status_code == 418 and info.value.body == "tea \xe9"
    assert client.request(path="/").body.bytes() == b"ok"
    assert server.accepted == 1


def test_dump_304_and_204_lengths_are_not_body_sizes(make_server, make_client):
    server = _keepalive(make_server, [
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5000\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\n\r\n",
        _raw("200 OK", [], b"x" * 10),
    ])
    client = make_client(server.origin).compose(interceptors.dump(max_size=10))
    assert client.request(path="/").status_code == 304
    assert client.request(path="/").status_code == 204
    assert client.request(path="/").body.bytes() == b""
    assert server.accepted == 1


def test_decompress_adds_no_accept_encoding_and_dump_counts_decoded_bytes(make_server, make_client):
    server = _keepalive(make_server, [
        _raw("200 OK", [("Content-Encoding", "gzip")], gzip.compress(b"a" * 1000)),
        _raw("200 OK", [("Content-Encoding", "gzip")], gzip.compress(b"a" * 1001)),
    ])
    client = make_client(server.origin).compose(interceptors.dump(max_size=1000), _decompress())
    assert client.request(path="/").body.bytes() == b""
    with pytest.raises(errors.RequestAbortedError, match=r"\(1001\) larger than max_size \(1000\)"):
        client.request(path="/").body.bytes()
    assert all(r.header("accept-encoding") is None for r in server.requests)


# -- the same over HTTP/2 (an abort resets one stream; the connection stays) ------------------------
def _h2_serve(table):
    def handler(conn):
        while True:
            req = conn.next_request(timeout=5)
            if req is None:
                return
            status, headers, body = table[req.path]
            conn.respond_later(req.stream_id, status=status, headers=headers, body=body)

    return handler


def test_h2_abort_from_data_callback_and_too_large_error(make_h2_server, make_h2c, recorder):
    big_error = b"e" * ((1 << 20) + 100)
    server = make_h2_server(_h2_serve({
        "/gz": (200, [("content-encoding", "gzip")], gzip.compress(BIG)),
        "/err": (500, [("content-type", "text/plain")], big_error),
        "/ok": (200, [("content-encoding", "gzip")], gzip.compress(b"fine")),
    }))
    client = make_h2c(server.origin)

    class AbortFirst(recorder):
        def on_response_data(self, controller, chunk):
            super().on_response_data(controller, chunk)
            controller.abort(RuntimeError("stop"))

    rec = AbortFirst()
    client.compose(_decompress()).dispatch({"path": "/gz", "method": "GET"}, rec)
    rec2 = recorder()
    client.compose(interceptors.response_error()).dispatch({"path": "/err", "method": "GET"}, rec2)
    assert rec.done.wait(5) and rec2.done.wait(5)
    gevent.sleep(0.05)
    assert rec.names() == ["start", "response_start", "data", "error"]
    assert rec2.names() == ["start", "error"] and len(rec2.error.body) == 1 << 20
    assert client.compose(_decompress()).request(path="/ok").body.bytes() == b"fine"
    assert server.accepted == 1


def test_pause_every_piece_resume_from_elsewhere(make_server, make_client, recorder):
    data = BIG[: 1 << 20]
    enc = gzip.compress(data)

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(0, len(enc), 3000):
            part = enc[i:i + 3000]
            conn.send(b"%x\r\n%s\r\n" % (len(part), part))
        conn.send(b"0\r\nx-t: 1\r\n\r\n")
        conn.wait_closed()

    server = make_server(handler)
    resumes = []

    class PauseAlways(recorder):
        def on_response_data(self, controller, chunk):
            super().on_response_data(controller, chunk)
            assert not controller.paused
            controller.pause()
            resumes.append(gevent.spawn_later(0.001, controller.resume))

    rec = PauseAlways()
    make_client(server.origin).compose(_decompress()).dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(10)
    gevent.joinall(resumes, timeout=2)
    assert rec.error is None and rec.body == data and rec.trailers == {"x-t": "1"}
    assert rec.names()[-1] == "end" and rec.names().count("end") == 1


# -- both: an upgrade -----------------------------------------------------------------------------
@pytest.mark.parametrize("interceptor", ["decompress", "dump"])
def test_an_upgrade_is_handed_the_controller_the_request_started_with(interceptor, make_server, make_client):
    # The wrapping handler is the controller downstream from on_request_start on; the
    # upgrade must come with that same controller, and the socket must be the peer's.
    def handler(conn):
        if conn.read_request() is not None:
            conn.send(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
            conn.sock.sendall(conn.sock.recv(100))

    class Upgraded:
        def __init__(self):
            self.controllers = []
            self.socket = None
            self.done = gevent.event.Event()

        def on_request_start(self, controller, context):
            self.controllers.append(controller)

        def on_request_upgrade(self, controller, status_code, headers, socket):
            self.controllers.append(controller)
            self.status_code, self.socket = status_code, socket
            self.done.set()

        def on_response_error(self, controller, err):
            self.error = err
            self.done.set()

    server = make_server(handler)
    made = _decompress() if interceptor == "decompress" else interceptors.dump()
    handler_ = Upgraded()
    make_client(server.origin).compose(made).dispatch(
        {"path": "/", "method": "GET", "upgrade": "echo"}, handler_
    )
    assert handler_.done.wait(5) and handler_.socket is not None, getattr(handler_, "error", None)
    try:
        assert handler_.status_code == 101
        first, upgraded = handler_.controllers
        assert upgraded is first
        handler_.socket.sendall(b"ping")
        with gevent.Timeout(5):
            assert handler_.socket.recv(4) == b"ping"
    finally:
        handler_.socket.close()
