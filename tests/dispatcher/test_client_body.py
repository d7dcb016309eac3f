"""BodyReadable: read(n), iteration, text/json/bytes/blob, dump, close, one consumer, back-pressure."""

from __future__ import annotations

import gevent
import gevent.event
import pytest

from greenhttp import errors
from testkit import serve_forever, wait_for


def chunked_handler(pieces, trailers=b""):
    def handler(conn):
        while conn.read_request() is not None:
            conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for p in pieces:
                conn.send(b"%x\r\n%s\r\n" % (len(p), p))
                gevent.sleep(0.001)
            conn.send(b"0\r\n" + trailers + b"\r\n")

    return handler


def test_read_n(make_server, make_client):
    server = make_server(serve_forever(b"abcdefghij"))
    client = make_client(server.origin)
    body = client.request(path="/").body
    assert body.read(3) == b"abc"
    assert body.body_used
    rest = b""
    while chunk := body.read(100):
        rest += chunk
    assert rest == b"defghij"
    assert body.read(5) == b""
    assert body.read() == b""


def test_read_all_with_no_argument(make_server, make_client):
    server = make_server(chunked_handler([b"a" * 10, b"b" * 20, b"c"]))
    client = make_client(server.origin)
    assert client.request(path="/").body.read() == b"a" * 10 + b"b" * 20 + b"c"


def test_iteration_yields_bytes_chunks(make_server, make_client):
    pieces = [b"one", b"two", b"three" * 1000]
    server = make_server(chunked_handler(pieces))
    client = make_client(server.origin)
    chunks = list(client.request(path="/").body)
    assert all(isinstance(c, bytes) and c for c in chunks)
    assert b"".join(chunks) == b"".join(pieces)


def test_text_json_bytes_blob_array_buffer(make_server, make_client):
    def handler(conn):
        bodies = iter([
            (b"\xef\xbb\xbfh\xc3\xa9llo", "text/plain; charset=utf-8"),
            (b'{"a": [1, 2], "b": null}', "application/json"),
            (b"\x00\x01\x02", "application/octet-stream"),
            (b"blobby", "image/png"),
            (b"ab", "x/y"),
            (b"", "application/json"),
        ])
        while conn.read_request() is not None:
            data, ctype = next(bodies)
            conn.respond(data, headers=[("Content-Type", ctype)])

    server = make_server(handler)
    client = make_client(server.origin)
    assert client.request(path="/").body.text() == "h\u00e9llo"  # the BOM is dropped
    assert client.request(path="/").body.json() == {"a": [1, 2], "b": None}
    assert client.request(path="/").body.bytes() == b"\x00\x01\x02"
    blob = client.request(path="/").body.blob()
    assert blob.type == "image/png" and blob.size == 6
    assert client.request(path="/").body.array_buffer() == b"ab"
    with pytest.raises(ValueError):
        client.request(path="/").body.json()
    assert server.accepted == 1


def test_form_data_is_not_supported(make_server, make_client):
    server = make_server(serve_forever(b"a=b"))
    client = make_client(server.origin)
    r = client.request(path="/")
    with pytest.raises(errors.NotSupportedError):
        r.body.form_data()
    r.body.dump()


@pytest.mark.parametrize("second", ["text", "bytes", "json", "blob", "array_buffer"])
def test_second_consumer_is_a_type_error(make_server, make_client, second):
    server = make_server(serve_forever(b'"x"'))
    client = make_client(server.origin)
    body = client.request(path="/").body
    assert body.text() == '"x"'
    with pytest.raises(TypeError):
        getattr(body, second)()


def test_consumer_after_read_started_is_a_type_error(make_server, make_client):
    server = make_server(serve_forever(b"abcdef"))
    client = make_client(server.origin)
    body = client.request(path="/").body
    assert body.read(2) == b"ab"
    with pytest.raises(TypeError):
        body.text()
    body.dump()


def test_dump_under_the_limit_reuses_the_connection(make_server, make_client):
    server = make_server(serve_forever(b"z" * 50_000))
    client = make_client(server.origin)
    assert client.request(path="/").body.dump() is None
    assert client.request(path="/").body.dump(limit=50_000) is None
    assert client.request(path="/").body.bytes() == b"z" * 50_000
    assert server.accepted == 1


def test_dump_over_the_limit_by_content_length_closes(make_server, make_client):
    server = make_server(serve_forever(b"z" * 200_000))
    client = make_client(server.origin)
    client.request(path="/").body.dump()  # 200 000 > 131 072
    assert server.conns[0].eof.wait(2)
    assert client.request(path="/").body.bytes() == b"z" * 200_000
    assert server.accepted == 2


def test_dump_over_the_limit_while_reading_chunked_closes(make_server, make_client):
    server = make_server(chunked_handler([b"q" * 100] * 5))
    client = make_client(server.origin)
    client.request(path="/").body.dump(limit=150)
    assert server.conns[0].eof.wait(2)
    assert client.request(path="/").body.bytes() == b"q" * 500
    assert server.accepted == 2


def test_a_dumped_body_is_used_whether_or_not_it_had_all_arrived(make_server, make_client):
    # Read once, one way: after dump() the body is used, also when it was all here
    # already (text() returned "" then), as after dump() of one still arriving.
    server = make_server(chunked_handler([b"q" * 10] * 3))
    client = make_client(server.origin)
    for settle in (True, False):
        r = client.request(path="/")
        if settle:
            wait_for(lambda r=r: r.body._ended, what="the whole body")
        assert not r.body.body_used
        r.body.dump()
        assert r.body.body_used
        with pytest.raises(TypeError, match="unusable"):
            r.body.text()
    assert server.accepted == 1


def test_body_used_after_close_whether_or_not_the_body_was_cut_short(make_server, make_client):
    server = make_server(serve_forever(b"w" * 5_000_000))
    client = make_client(server.origin)
    r = client.request(path="/")
    r.body.close()
    assert r.body.body_used  # aborted: disturbed, as the original's bodyUsed
    small = make_server(serve_forever(b"small"))
    r = make_client(small.origin).request(path="/")
    wait_for(lambda: r.body._ended, what="the whole body")
    r.body.close()
    # Arrived whole but never read: closing drops it, so it is used (the original's
    # destroyed stream is disturbed) and a read says so, rather than "" or a surprise.
    assert r.body.body_used
    with pytest.raises(TypeError, match="unusable"):
        r.body.text()


def test_text_replaces_bytes_that_do_not_decode(make_server, make_client):
    # As the original (and requests, httpx): U+FFFD, never a UnicodeDecodeError.
    server = make_server(serve_forever(b"\xff\xfeok \xe2\x82"))
    client = make_client(server.origin)
    assert client.request(path="/").body.text() == "\ufffd\ufffdok \ufffd"
    assert client.request(path="/").body.text("ascii") == "\ufffd\ufffdok \ufffd\ufffd"


def test_dump_invalid_limit(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    body = client.request(path="/").body
    with pytest.raises(errors.InvalidArgumentError):
        body.dump(limit=-1)
    body.dump()


def test_close_aborts_an_unfinished_body(make_server, make_client):
    server = make_server(serve_forever(b"w" * 5_000_000))
    client = make_client(server.origin)
    r = client.request(path="/")
    assert r.body.read(10) == b"w" * 10
    r.body.close()
    assert server.conns[0].eof.wait(2)
    for _ in range(2):  # what was left is gone: every later read says so (the original's stream errors)
        with pytest.raises(errors.RequestAbortedError):
            r.body.read(10)
    assert client.request(path="/").status_code == 200
    assert server.accepted == 2


def test_a_read_after_close_discarded_a_whole_unread_body_raises(make_server, make_client):
    # undici's node-test/client-abort.js 'aborted response errors': destroying a body
    # before its end was read errors with RequestAbortedError, even when it all arrived.
    server = make_server(serve_forever(b"asd"))
    client = make_client(server.origin)
    r = client.request(path="/")
    r.body.close()
    for read in (lambda: r.body.read(), lambda: r.body.read(2), lambda: list(r.body)):
        with pytest.raises(errors.RequestAbortedError):
            read()
    read_first = client.request(path="/")
    assert read_first.body.read() == b"asd"
    read_first.body.close()
    assert read_first.body.read(2) == b""  # nothing was lost: the end, as before
    assert server.accepted == 1  # the body was all there: the connection stays


def test_close_after_the_end_keeps_the_connection(make_server, make_client):
    server = make_server(serve_forever(b"small"))
    client = make_client(server.origin)
    r = client.request(path="/")
    assert r.body.bytes() == b"small"
    r.body.close()
    client.request(path="/").body.dump()
    assert server.accepted == 1


def test_body_context_manager_closes(make_server, make_client):
    server = make_server(serve_forever(b"v" * 1_000_000))
    client = make_client(server.origin)
    r = client.request(path="/")
    with r.body as body:
        assert body.read(1) == b"v"
    assert server.conns[0].eof.wait(2)


def test_connection_lost_mid_body_is_a_socket_error(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        conn.close()

    server = make_server(handler)
    client = make_client(server.origin)
    r = client.request(path="/")
    with pytest.raises(errors.SocketError) as info:
        r.body.bytes()
    assert isinstance(info.value, ConnectionError)


def test_back_pressure_unread_body_stalls_the_server(make_server, make_client):
    total = 32 * 1024 * 1024
    sent = [0]
    finished = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
        block = b"\xab" * 65536
        while sent[0] < total:
            conn.send(block)
            sent[0] += len(block)
        finished.set()
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    r = client.request(path="/")
    # Wait until the server's writes stop making progress (bounded).
    last, stable_since = -1, None
    for _ in range(400):
        gevent.sleep(0.01)
        if sent[0] != last:
            last, stable_since = sent[0], 0
        else:
            stable_since += 1
            if stable_since >= 10:
                break
    assert not finished.is_set()
    assert sent[0] < total // 2, f"the client let the server write {sent[0]} bytes"
    # What the client itself buffered: at most one big read past the pause (4 MiB, h1_driver).
    assert r.body._size <= 4 * 1024 * 1024 + 2 * 65536
    n = 0
    for chunk in r.body:
        n += len(chunk)
    assert n == total
    assert finished.wait(5)


def test_high_water_mark_bounds_what_an_unread_body_buffers(make_server, make_client):
    # Back-pressure: once high_water_mark bytes are unread, the socket is not read.
    # One socket read (64 KiB) past the mark is tolerated.
    total = 2 * 1024 * 1024
    server = make_server(serve_forever(b"m" * total))
    client = make_client(server.origin)
    for hwm in (16384, 65536):  # 65536 is the default
        r = client.request(path="/", high_water_mark=hwm)
        wait_for(lambda r=r, hwm=hwm: r.body._size >= hwm, what="the first bytes")
        gevent.sleep(0.1)
        assert r.body._size <= hwm + 65536, f"high_water_mark={hwm}: {r.body._size} bytes buffered"
        assert r.body.bytes() == b"m" * total


def test_high_water_mark_option(make_server, make_client):
    server = make_server(serve_forever(b"h" * 300_000))
    client = make_client(server.origin)
    r = client.request(path="/", high_water_mark=1024)
    wait_for(lambda: r.body._size >= 1024, what="the first bytes")
    gevent.sleep(0.05)
    assert r.body._size < 300_000
    assert r.body.bytes() == b"h" * 300_000


def test_response_data_context_manager_after_partial_read(make_server, make_client):
    server = make_server(serve_forever(b"k" * 1000))
    client = make_client(server.origin)
    with client.request(path="/") as r:
        r.body.read(1)
    assert client.request(path="/").body.bytes() == b"k" * 1000
    assert server.accepted == 1


def test_pipelined_response_body_unread_blocks_next_response_only(make_server, make_client):
    server = make_server(serve_forever(b"done"))
    client = make_client(server.origin)
    r1 = client.request(path="/1")
    g = gevent.spawn(lambda: client.request(path="/2").body.text())
    gevent.sleep(0.05)
    assert r1.body.text() == "done"
    assert g.get(timeout=5) == "done"


def test_destroy_stops_a_writer_parked_on_its_body_source(make_server, make_client):
    """A streamed body whose source blocks must not leave its writer greenlet behind."""
    server = make_server(lambda conn: conn.read_head() and conn.wait_closed())
    client = make_client(server.origin)
    started = gevent.event.Event()
    never = gevent.event.Event()

    def source():
        yield b"first"
        started.set()
        never.wait()  # the source never produces more
        yield b"unreachable"

    failures = []

    def run():
        try:
            client.request(path="/upload", method="POST", body=source())
        except Exception as exc:
            failures.append(exc)

    g = gevent.spawn(run)
    assert started.wait(5)
    client.destroy()
    g.join(5)
    assert len(failures) == 1 and isinstance(failures[0], errors.ClientDestroyedError)
    # The autouse leak check fails the test if the writer greenlet survived.
