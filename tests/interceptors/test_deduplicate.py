"""``interceptors.deduplicate``: one upstream request for concurrent identical ones."""

from __future__ import annotations

import time

import gevent
import gevent.event
import pytest

from greenhttp import interceptors
from greenhttp.errors import InvalidArgumentError, RequestAbortedError
from testkit import serve_forever


def wait_for(predicate, timeout=5.0):
    """Yield to gevent until ``predicate()`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        gevent.sleep(0.002)


def spawn_requests(d, n, **kw):
    results = [None] * n

    def one(i):
        try:
            r = d.request(path=kw.get("path", "/"), headers=kw.get("headers"), method=kw.get("method", "GET"))
            results[i] = (r.status_code, r.headers.get("x-req"), r.body.bytes(), r.trailers)
        except Exception as exc:  # recorded for the assertions
            results[i] = exc

    return results, [gevent.spawn(one, i) for i in range(n)]


def test_a_thousand_concurrent_requests_make_one(gated, make_client):
    server = gated(chunked=True)
    d = make_client(server.origin).compose(interceptors.deduplicate())
    results, greenlets = spawn_requests(d, 1000)
    gevent.idle()  # every greenlet has dispatched and waits
    server.gate.set()
    gevent.joinall(greenlets, timeout=30)
    assert len(server.requests) == 1
    assert all(r == (200, "1", b"shared body", {"x-sum": "42"}) for r in results), {repr(r)[:80] for r in results}


def test_different_requests_are_not_merged(gated, make_client):
    server = gated()
    d = make_client(server.origin, pipelining=4).compose(interceptors.deduplicate())
    a, ga = spawn_requests(d, 3, path="/a")
    b, gb = spawn_requests(d, 3, path="/b")
    c, gc = spawn_requests(d, 3, path="/a", headers={"accept": "x"})
    gevent.idle()
    server.gate.set()
    gevent.joinall(ga + gb + gc, timeout=10)
    assert sorted(r.target for r in server.requests) == ["/a", "/a", "/b"]
    assert len({r[1] for r in a}) == len({r[1] for r in b}) == len({r[1] for r in c}) == 1


def test_excluded_and_skipping_headers(gated, make_client):
    server = gated()
    d = make_client(server.origin, pipelining=4).compose(
        interceptors.deduplicate(exclude_header_names=["X-Trace"], skip_header_names=["X-NoDedupe"])
    )
    a, ga = spawn_requests(d, 2, headers={"x-trace": "1"})
    b, gb = spawn_requests(d, 1, headers={"X-TRACE": "2"})
    c, gc = spawn_requests(d, 2, headers={"x-nodedupe": "1"})
    gevent.idle()
    server.gate.set()
    gevent.joinall(ga + gb + gc, timeout=10)
    assert len(server.requests) == 3  # one for a+b, two for c
    assert {r[1] for r in a + b} == {a[0][1]}


def test_only_listed_safe_methods(gated, make_client):
    server = gated()
    d = make_client(server.origin, pipelining=4).compose(interceptors.deduplicate(methods=["GET", "HEAD"]))
    a, ga = spawn_requests(d, 2, method="HEAD")
    b, gb = spawn_requests(d, 2, method="DELETE")
    gevent.idle()
    server.gate.set()
    gevent.joinall(ga + gb, timeout=10)
    assert sorted(r.method for r in server.requests) == ["DELETE", "DELETE", "HEAD"]
    with pytest.raises(InvalidArgumentError, match="safe methods"):
        interceptors.deduplicate(methods=["GET", "POST"])
    with pytest.raises(InvalidArgumentError, match="max_buffer_size"):
        interceptors.deduplicate(max_buffer_size=0)
    with pytest.raises(InvalidArgumentError, match="skip_header_names"):
        interceptors.deduplicate(skip_header_names="x-a")


def test_a_request_after_the_body_started_goes_on_its_own(make_server, make_client, recorder):
    release = gevent.event.Event()

    def handler(conn):
        while True:
            req = conn.read_request()
            if req is None:
                return
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345")
            release.wait(10)
            conn.send(b"67890")

    server = make_server(handler)
    d = make_client(server.origin, pipelining=2).compose(interceptors.deduplicate())
    first = recorder()
    d.dispatch({"path": "/", "method": "GET"}, first)
    wait_for(lambda: b"12345" in first.body)
    second = recorder()
    d.dispatch({"path": "/", "method": "GET"}, second)
    release.set()
    first.done.wait(5)
    second.done.wait(5)
    assert first.body == second.body == b"1234567890"
    assert len(server.requests) == 2


def test_a_paused_caller_over_the_buffer_limit_fails_alone(make_server, make_client, recorder):
    body = b"x" * 40000

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 4000):
            conn.send(body[i : i + 4000])
            gevent.sleep(0.001)
        conn.wait_closed(1)

    server = make_server(handler)
    d = make_client(server.origin).compose(interceptors.deduplicate(max_buffer_size=10000))

    class Pausing(recorder):
        def on_response_start(self, controller, status_code, headers, status_message):
            super().on_response_start(controller, status_code, headers, status_message)
            controller.pause()

    reader, sleeper = recorder(), Pausing()
    d.dispatch({"path": "/", "method": "GET"}, reader)
    d.dispatch({"path": "/", "method": "GET"}, sleeper)
    reader.done.wait(5)
    sleeper.done.wait(5)
    assert reader.body == body and reader.names()[-1] == "end"
    assert isinstance(sleeper.error, RequestAbortedError) and sleeper.error.name == "AbortError"
    assert "max_buffer_size" in str(sleeper.error) and sleeper.controller.aborted
    assert len(server.requests) == 1


def test_a_paused_caller_gets_its_backlog_on_resume(gated, make_client, recorder):
    server = gated(chunked=True)
    d = make_client(server.origin).compose(interceptors.deduplicate())

    class Pausing(recorder):
        def on_response_start(self, controller, status_code, headers, status_message):
            super().on_response_start(controller, status_code, headers, status_message)
            controller.pause()

    reader, paused = recorder(), Pausing()
    d.dispatch({"path": "/", "method": "GET"}, reader)
    d.dispatch({"path": "/", "method": "GET"}, paused)
    server.gate.set()
    reader.done.wait(5)
    assert reader.body == b"shared body" and paused.body == b"" and not paused.done.is_set()
    paused.controller.resume()
    paused.done.wait(5)
    assert paused.body == b"shared body" and paused.trailers == {"x-sum": "42"}


def test_when_every_caller_is_paused_the_upstream_is(make_server, make_client, recorder):
    body = b"y" * 300000

    def handler(conn):
        conn.read_request()
        try:
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        except OSError:
            pass
        conn.wait_closed(2)

    server = make_server(handler)
    d = make_client(server.origin).compose(interceptors.deduplicate(max_buffer_size=1000))

    class Pausing(recorder):
        def on_response_data(self, controller, chunk):
            super().on_response_data(controller, chunk)
            controller.pause()

    a, b = Pausing(), Pausing()
    d.dispatch({"path": "/", "method": "GET"}, a)
    d.dispatch({"path": "/", "method": "GET"}, b)
    wait_for(lambda: a.body and b.body)
    gevent.sleep(0.05)  # time for the socket to fill, had the upstream not been paused
    assert a.error is None and b.error is None  # nobody buffered past the limit: the socket waited
    deadline = time.monotonic() + 10
    while not (a.done.is_set() and b.done.is_set()):
        assert time.monotonic() < deadline
        for rec in (a, b):
            if rec.controller.paused:
                rec.controller.resume()
        gevent.sleep(0.001)
    assert a.body == b.body == body


def test_one_caller_aborting_leaves_the_others(gated, make_client, recorder):
    server = gated()
    d = make_client(server.origin).compose(interceptors.deduplicate())
    quitter, stayer = recorder(), recorder()
    d.dispatch({"path": "/", "method": "GET"}, quitter)
    d.dispatch({"path": "/", "method": "GET"}, stayer)
    wait_for(lambda: quitter.controller is not None)
    quitter.controller.abort(RequestAbortedError("bye"))
    server.gate.set()
    stayer.done.wait(5)
    assert quitter.names() == ["start", "error"] and stayer.body == b"shared body"


def test_everyone_aborting_aborts_the_upstream(gated, make_client, recorder):
    server = gated()
    d = make_client(server.origin).compose(interceptors.deduplicate())
    recs = [recorder() for _ in range(3)]
    for rec in recs:
        d.dispatch({"path": "/", "method": "GET"}, rec)
    wait_for(lambda: all(rec.controller is not None for rec in recs))
    for rec in recs:
        rec.controller.abort(RequestAbortedError("bye"))
    server.gate.set()
    conn = server.conns[0]
    assert conn.eof.wait(5)  # the upstream request was aborted: its connection closed
    fresh = recorder()
    d.dispatch({"path": "/", "method": "GET"}, fresh)  # a new group, a new request
    fresh.done.wait(5)
    assert fresh.body == b"shared body" and len(server.requests) == 2


def test_an_upstream_error_reaches_every_caller(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        conn.close()

    server = make_server(handler)
    d = make_client(server.origin).compose(interceptors.deduplicate())
    results, greenlets = spawn_requests(d, 5)
    gevent.joinall(greenlets, timeout=10)
    assert len(server.requests) == 1
    assert all(isinstance(r, Exception) for r in results), results


def test_a_raising_handler_fails_alone(gated, make_client, recorder):
    server = gated()
    d = make_client(server.origin).compose(interceptors.deduplicate())

    class Raising(recorder):
        def on_response_start(self, controller, status_code, headers, status_message):
            raise ValueError("handler bug")

    bad, good = Raising(), recorder()
    d.dispatch({"path": "/", "method": "GET"}, bad)
    d.dispatch({"path": "/", "method": "GET"}, good)
    server.gate.set()
    good.done.wait(5)
    bad.done.wait(5)
    assert isinstance(bad.error, ValueError) and good.body == b"shared body"


def test_a_dispatch_that_raises_leaves_no_group_behind(make_server, make_client):
    # An interceptor inside deduplicate that raises from dispatch (here a
    # user's, refusing a request it dislikes) fails that request at once; the
    # group the request led must go with it, or the next identical request
    # joined it and waited forever.
    server = make_server(serve_forever(b"fine"))
    refuse_next = [True]

    def picky(dispatch):
        def picky_dispatch(opts, handler):
            if refuse_next.pop() if refuse_next else False:
                raise ValueError("not this one")
            return dispatch(opts, handler)

        return picky_dispatch

    d = make_client(server.origin).compose(interceptors.deduplicate(), picky)
    with gevent.Timeout(5):
        with pytest.raises(ValueError, match="not this one"):
            d.request(path="/")
        assert d.request(path="/").body.bytes() == b"fine"
    assert len(server.requests) == 1


def test_a_caller_joining_while_the_others_are_paused_still_gets_the_body(make_server, make_client, recorder):
    # The first caller pauses at the response head, which pauses the upstream
    # (every caller is paused). A second caller joining then reads: the upstream
    # must flow again for it, not wait until the first one resumes.
    gate = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n")
        gate.wait(5)
        conn.send(b"body")
        conn.wait_closed(5)

    server = make_server(handler)
    d = make_client(server.origin).compose(interceptors.deduplicate())

    class Pausing(recorder):
        def on_response_start(self, controller, status_code, headers, status_message):
            super().on_response_start(controller, status_code, headers, status_message)
            controller.pause()

    first, second = Pausing(), recorder()
    d.dispatch({"path": "/", "method": "GET"}, first)
    wait_for(lambda: first.status == 200)
    d.dispatch({"path": "/", "method": "GET"}, second)
    gate.set()
    assert second.done.wait(5), "the joining caller waited on the paused one"
    assert second.status == 200 and second.body == b"body" and len(server.requests) == 1
    assert first.body == b"" and not first.done.is_set()
    first.controller.resume()
    assert first.done.wait(5) and first.body == b"body"
