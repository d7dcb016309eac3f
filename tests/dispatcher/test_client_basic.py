"""Client construction, lazy/eager connect, request() and ResponseData, stats, lifecycle flags."""

from __future__ import annotations

import gevent
import pytest

import greenhttp
from greenhttp import errors
from testkit import response, serve_forever, wait_for


def test_request_returns_response_data(make_server, make_client):
    def handler(conn):
        req = conn.read_request()
        conn.send(
            b"HTTP/1.1 201 Created Here\r\nContent-Type: text/plain\r\nX-Multi: a\r\n"
            b"x-multi: b\r\nSet-Cookie: s=1\r\nContent-Length: 5\r\n\r\nhello"
        )
        assert req.target == "/path?x=1"
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    r = client.request(path="/path?x=1", opaque={"k": 1})
    assert isinstance(r, greenhttp.ResponseData)
    assert r.status_code == 201
    assert r.status_text == "Created Here"
    assert r.headers == {
        "content-type": "text/plain",
        "x-multi": ["a", "b"],
        "set-cookie": ["s=1"],
        "content-length": "5",
    }
    assert r.opaque == {"k": 1}
    assert r.context is None
    assert r.trailers == {}
    assert isinstance(r.body, greenhttp.BodyReadable)
    assert r.body.text() == "hello"
    assert server.errors == []


def test_raw_response_headers(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nX-Case: One\r\nx-case:  two \r\nContent-Length: 0\r\n\r\n")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    r = client.request(path="/", response_headers="raw")
    assert r.headers == [b"X-Case", b"One", b"x-case", b"two", b"Content-Length", b"0"]
    r.body.dump()


def test_constructing_a_client_opens_no_connection(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    gevent.sleep(0.05)
    assert server.accepted == 0
    assert client.stats == greenhttp.ClientStats(False, 0, 0, 0)
    client.request(path="/").body.dump()
    assert server.accepted == 1


def test_connect_without_arguments_connects_eagerly(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    connects = []
    client.on("connect", lambda origin, targets: connects.append((origin, targets)))
    assert client.connect() is None
    assert connects == [(server.origin, [client])]
    wait_for(lambda: server.accepted == 1, what="the server to accept")
    assert client.stats.connected is True
    # Already connected: no second connection.
    client.connect()
    assert server.accepted == 1
    assert client.request(path="/").body.text() == "hello"
    assert server.accepted == 1


def test_connect_without_arguments_raises_the_connect_error(make_client):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    client = make_client(f"http://127.0.0.1:{port}")
    with pytest.raises(ConnectionRefusedError):
        client.connect()


def test_stats_fields(make_server, make_client):
    release = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        release.wait(5)
        conn.respond(b"a")
        conn.read_request()
        conn.respond(b"b")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    results = []
    g1 = gevent.spawn(lambda: results.append(client.request(path="/1").body.text()))
    g2 = gevent.spawn(lambda: results.append(client.request(path="/2").body.text()))
    wait_for(lambda: client.stats.running == 1 and client.stats.pending == 1, what="one running, one pending")
    st = client.stats
    assert isinstance(st, greenhttp.ClientStats)
    assert st.connected is True
    assert (st.pending, st.running, st.size) == (1, 1, 2)
    assert st._fields == ("connected", "pending", "running", "size")
    release.set()
    gevent.joinall([g1, g2], timeout=5, raise_error=True)
    assert sorted(results) == ["a", "b"]
    assert client.stats == greenhttp.ClientStats(True, 0, 0, 0)


def test_closed_and_destroyed_flags_after_close(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    client.request(path="/").body.dump()
    assert (client.closed, client.destroyed) == (False, False)
    client.close()
    assert (client.closed, client.destroyed) == (True, True)
    with pytest.raises(errors.ClientDestroyedError):
        client.request(path="/")


def test_request_after_close_started_raises_client_closed(make_server, make_client):
    release = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        release.wait(5)
        conn.respond(b"done")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    g = gevent.spawn(lambda: client.request(path="/").body.text())
    wait_for(lambda: client.stats.running == 1, what="the request to be written")
    closer = gevent.spawn(client.close)
    wait_for(lambda: client.closed, what="close() to start")
    assert client.destroyed is False
    with pytest.raises(errors.ClientClosedError):
        client.request(path="/again")
    release.set()
    assert g.get(timeout=5) == "done"
    closer.get(timeout=5)
    assert client.destroyed is True


def test_close_waits_for_queued_requests(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    results = []
    greenlets = [gevent.spawn(lambda i=i: results.append(client.request(path=f"/{i}").body.text()))
                 for i in range(5)]
    gevent.sleep(0)  # every request is dispatched
    assert client.stats.size == 5
    client.close()
    gevent.joinall(greenlets, timeout=5, raise_error=True)
    assert results == ["ok"] * 5
    assert [r.target for r in server.requests] == [f"/{i}" for i in range(5)]
    assert client.destroyed


def test_close_callback_form(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    client.request(path="/").body.dump()
    calls = []
    done = gevent.event.Event()

    def cb(err, data):
        calls.append((err, data))
        done.set()

    assert client.close(callback=cb) is None
    assert done.wait(5)
    gevent.sleep(0.01)
    assert calls == [(None, None)]
    assert client.destroyed


def test_destroy_fails_pending_and_running_with_err(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.wait_closed()  # never answers

    server = make_server(handler)
    client = make_client(server.origin)
    failures = []

    def run(path):
        try:
            client.request(path=path)
        except Exception as exc:
            failures.append((path, exc))

    greenlets = [gevent.spawn(run, p) for p in ("/a", "/b", "/c")]
    wait_for(lambda: client.stats.running == 1, what="one running request")
    boom = RuntimeError("boom")
    client.destroy(boom)
    # destroy returns after the socket is closed.
    assert client.stats.connected is False
    assert server.conns[0].eof.wait(2)
    gevent.joinall(greenlets, timeout=5)
    assert sorted(p for p, _ in failures) == ["/a", "/b", "/c"]
    assert all(exc is boom for _, exc in failures)
    assert client.destroyed and client.closed
    with pytest.raises(errors.ClientDestroyedError):
        client.request(path="/")
    with pytest.raises(errors.ClientDestroyedError):
        client.close()


def test_destroy_fails_every_pending_request_though_one_handler_cannot_be_told(make_server, make_client):
    # Looking up a pending handler's on_response_error raises (a broken proxy, say):
    # the client's "error" event gets that, and destroy() still fails the requests
    # behind it and closes the socket (the lookup used to escape from destroy()).
    def handler(conn):
        conn.read_request()
        conn.wait_closed()  # never answers

    class Unreachable:
        def __getattr__(self, name):
            raise RuntimeError(f"cannot look up {name}")

    server = make_server(handler)
    client = make_client(server.origin)
    reported = []
    client.on("error", reported.append)
    running = gevent.spawn(client.request, path="/running")
    wait_for(lambda: client.stats.running == 1, what="one running request")
    client.dispatch({"path": "/q1", "method": "GET"}, Unreachable())
    behind = gevent.spawn(client.request, path="/q2")
    wait_for(lambda: client.stats.size == 3, what="two requests queued behind it")
    with gevent.Timeout(5):
        client.destroy()
    assert [str(e) for e in reported] == ["cannot look up on_response_error"]
    for g in (running, behind):
        with pytest.raises(errors.ClientDestroyedError):
            g.get(timeout=5)
    assert server.conns[0].eof.wait(2)


def test_destroy_default_error_and_callback_forms(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    g = gevent.spawn(client.request, path="/")
    wait_for(lambda: client.stats.running == 1, what="the request to be written")
    done = gevent.event.AsyncResult()
    assert client.destroy(callback=lambda err, data: done.set((err, data))) is None
    assert done.get(timeout=5) == (None, None)
    with pytest.raises(errors.ClientDestroyedError):
        g.get(timeout=5)
    # destroy() twice is harmless.
    client.destroy()
    done2 = gevent.event.AsyncResult()
    client.destroy(RuntimeError("x"), lambda err, data: done2.set(err))
    assert done2.get(timeout=5) is None


def test_destroy_before_connecting_fails_queued_requests(make_client):
    client = make_client("http://127.0.0.1:9")
    client.destroy()
    with pytest.raises(errors.ClientDestroyedError):
        client.request(path="/")


def test_with_client_closes_on_exit(make_server):
    server = make_server(serve_forever())
    with greenhttp.Client(server.origin) as client:
        assert client.request(path="/").body.text() == "hello"
    assert client.closed and client.destroyed


def test_request_callback_called_once_with_err_and_data(make_server, make_client):
    server = make_server(serve_forever(b"cb"))
    client = make_client(server.origin)
    calls = []
    done = gevent.event.Event()

    def cb(err, data):
        calls.append((err, data))
        done.set()

    assert client.request(path="/", callback=cb) is None
    assert done.wait(5)
    gevent.sleep(0.01)
    assert len(calls) == 1
    err, data = calls[0]
    assert err is None and data.status_code == 200 and data.body.text() == "cb"


def test_request_callback_gets_the_error(make_client):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    client = make_client(f"http://127.0.0.1:{port}")
    result = gevent.event.AsyncResult()
    calls = []

    def cb(err, data):
        calls.append((err, data))
        result.set()

    client.request(path="/", callback=cb, opaque="op")
    result.get(timeout=5)
    gevent.sleep(0.01)
    assert len(calls) == 1
    err, data = calls[0]
    assert isinstance(err, ConnectionRefusedError) and data is None


def test_response_context_manager_dumps_and_reuses(make_server, make_client):
    server = make_server(serve_forever(b"x" * 1000))
    client = make_client(server.origin)
    with client.request(path="/1") as r:
        assert r.status_code == 200
    with client.request(path="/2") as r:
        assert r.body.read(10) == b"x" * 10
    assert client.request(path="/3").body.bytes() == b"x" * 1000
    assert server.accepted == 1


def test_head_response_has_no_body_and_resets_connection(make_server, make_client):
    def handler(conn):
        req = conn.read_request()
        assert req.method == "HEAD"
        assert req.header("connection") == "close"
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    r = client.request(path="/", method="HEAD")
    assert r.status_code == 200
    assert r.headers["content-length"] == "1000"
    assert r.body.bytes() == b""
    assert server.conns[0].eof.wait(2)
    assert server.errors == []


def test_head_with_reset_false_keeps_the_connection(make_server, make_client):
    def handler(conn):
        while (req := conn.read_request()) is not None:
            if req.method == "HEAD":
                conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            else:
                conn.respond(b"get")

    server = make_server(handler)
    client = make_client(server.origin)
    assert client.request(path="/", method="HEAD", reset=False).body.bytes() == b""
    assert client.request(path="/").body.bytes() == b"get"
    assert server.accepted == 1
    assert server.requests[0].header("connection") == "keep-alive"


@pytest.mark.parametrize("reset_first", [True, False], ids=["reset-then-headers", "headers-then-reset"])
def test_a_connection_close_header_resets_even_with_reset_false(make_server, make_client, reset_first):
    # As the original: the header sets reset after reset= is read, so it wins in
    # either keyword order, and the next request needs a new connection.
    def handler(conn):
        while (req := conn.read_request()) is not None:
            conn.respond(req.target.encode())

    server = make_server(handler)
    client = make_client(server.origin)
    close = {"connection": "close"}
    options = {"reset": False, "headers": close} if reset_first else {"headers": close, "reset": False}
    assert client.request(path="/1", **options).body.bytes() == b"/1"
    assert server.conns[0].eof.wait(2)  # we closed it after the response
    assert client.request(path="/2").body.bytes() == b"/2"
    assert server.accepted == 2
    assert server.requests[0].header("connection") == "close"
    assert server.requests[1].header("connection") == "keep-alive"


def test_interim_1xx_go_to_on_info(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + response(b"final"))
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    infos = []
    r = client.request(path="/", on_info=infos.append)
    assert r.status_code == 200 and r.body.text() == "final"
    assert infos == [{"status_code": 103, "headers": {"link": "</a>"}}]


def test_trailers_filled_when_the_body_ends(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 42\r\n\r\n")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    r = client.request(path="/")
    assert r.body.text() == "abc"
    assert r.trailers == {"x-sum": "42"}


def test_response_content_is_a_parser_error(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nBad Header: x\r\nContent-Length: 0\r\n\r\n")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    with pytest.raises(errors.HTTPParserError):
        client.request(path="/")
    assert server.conns[0].eof.wait(2)  # a refused connection is never reused


def test_bare_lf_response_is_refused_not_hung(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok")
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin, headers_timeout=2.0)
    with pytest.raises(errors.HTTPParserError):
        client.request(path="/")


def test_unsolicited_bytes_fail_nothing_and_close(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.respond(b"one")
        conn.send(response(b"unsolicited"))
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    disconnects = []
    client.on("disconnect", lambda o, t, e: disconnects.append(e))
    assert client.request(path="/").body.text() == "one"
    wait_for(lambda: disconnects, what="the disconnect")
    assert isinstance(disconnects[0], errors.SocketError)
