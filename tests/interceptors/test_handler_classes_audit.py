"""The public handler classes used directly with ``dispatch()`` (REFERENCE §7.2, §7.3).

``greenhttp.RetryHandler`` and ``greenhttp.RedirectHandler`` are exported for
custom interceptors and agents; their options are given as a dict of the
interceptor's keywords (the validated options object is private), validated
at construction with errors that name the option.
"""

from __future__ import annotations

import warnings
from typing import Any

import gevent
import gevent.event
import pytest

import greenhttp
from greenhttp import errors


def _flaky(fails: int):
    """A route answering 503 ``fails`` times, then 200 "ok"."""
    hits = []

    def route(conn, req):
        hits.append(req.target)
        if len(hits) <= fails:
            conn.respond(b"busy", status="503 Service Unavailable")
        else:
            conn.respond(b"ok")

    return route, hits


def test_retry_handler_takes_a_dict_of_retry_options(routes, make_client, recorder):
    route, hits = _flaky(2)
    server = routes({"/x": route})
    client = make_client(server.origin)
    rec = recorder()
    opts = {"path": "/x", "method": "GET"}
    handler = greenhttp.RetryHandler(dict(opts), client.dispatch, rec, {"max_retries": 3, "min_timeout": 0.01})
    client.dispatch(opts, handler)
    with gevent.Timeout(5):
        rec.done.wait()
    assert rec.error is None
    assert (rec.status, rec.body) == (200, b"ok")
    assert len(hits) == 3


def test_retry_handler_without_options_uses_the_defaults(routes, make_client, recorder):
    route, hits = _flaky(6)  # more failures than the default max_retries (5) allows
    server = routes({"/x": route})
    client = make_client(server.origin)
    rec = recorder()
    opts = {"path": "/x", "method": "POST"}  # POST is not among the default methods: no retry
    client.dispatch(opts, greenhttp.RetryHandler(dict(opts), client.dispatch, rec))
    with gevent.Timeout(5):
        rec.done.wait()
    assert isinstance(rec.error, errors.RequestRetryError)
    assert rec.error.status_code == 503
    assert len(hits) == 1


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_retries": -1}, "max_retries"),
        ({"min_timeout": "soon"}, "min_timeout"),
        ({"bogus": 1}, "bogus"),
        (3, "options"),
    ],
)
def test_retry_handler_validates_its_options(options, named, make_client, recorder):
    client = make_client("http://127.0.0.1:1")
    with pytest.raises(errors.InvalidArgumentError, match=named):
        greenhttp.RetryHandler({"path": "/", "method": "GET"}, client.dispatch, recorder(), options)


def test_redirect_handler_takes_a_dict_of_redirect_options(routes, make_client, recorder):
    def to_b(conn, req):
        conn.respond(b"", status="302 Found", headers=[("location", "/b")])

    def at_b(conn, req):
        conn.respond(b"ok")

    server = routes({"/a": to_b, "/b": at_b})
    client = make_client(server.origin)
    rec = recorder()
    opts = {"origin": server.origin, "path": "/a", "method": "GET"}
    client.dispatch(opts, greenhttp.RedirectHandler(client.dispatch, opts, rec, {"max_redirections": 2}))
    with gevent.Timeout(5):
        rec.done.wait()
    assert rec.error is None
    assert (rec.status, rec.body) == (200, b"ok")
    assert rec.context["history"] == [server.origin + "/a", server.origin + "/b"]


def test_redirect_handler_without_options_follows_nothing(routes, make_client, recorder):
    def to_b(conn, req):
        conn.respond(b"", status="302 Found", headers=[("location", "/b")])

    server = routes({"/a": to_b})
    client = make_client(server.origin)
    rec = recorder()
    opts = {"origin": server.origin, "path": "/a", "method": "GET"}
    client.dispatch(opts, greenhttp.RedirectHandler(client.dispatch, opts, rec))
    with gevent.Timeout(5):
        rec.done.wait()
    assert rec.error is None
    assert rec.status == 302


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_redirections": -1}, "max_redirections"),
        ({"throw_on_max_redirect": "yes"}, "throw_on_max_redirect"),
        ({"bogus": 1}, "bogus"),
        (2, "options"),
    ],
)
def test_redirect_handler_validates_its_options(options, named, make_client, recorder):
    client = make_client("http://127.0.0.1:1")
    opts = {"path": "/", "method": "GET"}
    with pytest.raises(errors.InvalidArgumentError, match=named):
        greenhttp.RedirectHandler(client.dispatch, opts, recorder(), options)


def _chunks():
    yield b"abc"
    yield b"def"


def test_retry_handler_never_resends_a_stream_given_as_it_is(routes, make_client, recorder):
    # The caller dispatched the generator itself: its first send read it, and a
    # second send would go out empty. The failure is delivered instead.
    route, hits = _flaky(1)
    server = routes({"/x": route})
    client = make_client(server.origin)
    rec = recorder()
    opts = {"path": "/x", "method": "PUT", "body": _chunks()}
    client.dispatch(opts, greenhttp.RetryHandler(dict(opts), client.dispatch, rec, {"min_timeout": 0.01}))
    with gevent.Timeout(5):
        rec.done.wait()
    assert isinstance(rec.error, errors.RequestRetryError)
    assert [r.body for r in server.requests] == [b"abcdef"]


def test_redirect_handler_never_resends_a_stream_given_as_it_is(routes, make_client, recorder):
    def to_b(conn, req):
        conn.respond(b"", status="307 Temporary Redirect", headers=[("location", "/b")])

    def at_b(conn, req):
        conn.respond(b"ok")

    server = routes({"/a": to_b, "/b": at_b})
    client = make_client(server.origin)
    rec = recorder()
    opts = {"origin": server.origin, "path": "/a", "method": "PUT", "body": _chunks()}
    client.dispatch(opts, greenhttp.RedirectHandler(client.dispatch, opts, rec, {"max_redirections": 2}))
    with gevent.Timeout(5):
        rec.done.wait()
    assert rec.error is None
    assert rec.status == 307  # returned, as a redirect whose body can't be sent again is
    assert [(r.target, r.body) for r in server.requests] == [("/a", b"abcdef")]


def test_retry_handler_resends_a_list_of_chunks(routes, make_client, recorder):
    # A list is iterated afresh by each send: it can be sent again whole.
    route, hits = _flaky(1)
    server = routes({"/x": route})
    client = make_client(server.origin)
    rec = recorder()
    opts = {"path": "/x", "method": "PUT", "body": [b"abc", b"def"]}
    client.dispatch(opts, greenhttp.RetryHandler(dict(opts), client.dispatch, rec, {"min_timeout": 0.01}))
    with gevent.Timeout(5):
        rec.done.wait()
    assert (rec.error, rec.status) == (None, 200)
    assert [r.body for r in server.requests] == [b"abcdef", b"abcdef"]


def _quiet_decompress() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", greenhttp.ExperimentalWarning)
        return greenhttp.interceptors.decompress()


class _WholeBodyReader:
    """A handler that asks for the body whole as its head arrives (as body.bytes() does)."""

    def __init__(self) -> None:
        self.controllers: list[Any] = []
        self.body = b""
        self.error: BaseException | None = None
        self.done = gevent.event.Event()

    def on_request_start(self, controller: Any, context: Any) -> None:
        self.controllers.append(controller)

    def on_response_start(self, controller: Any, status: int, headers: Any, message: str) -> None:
        self.controllers.append(controller)
        controller.wants_whole_body()

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        self.body += chunk

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        self.controllers.append(controller)
        self.done.set()

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        self.error = err
        self.done.set()


@pytest.mark.parametrize(
    "make_interceptor",
    [
        lambda: greenhttp.interceptors.retry(),
        lambda: greenhttp.interceptors.redirect(max_redirections=2),
        lambda: greenhttp.interceptors.dump(),
        lambda: _quiet_decompress(),
        lambda: greenhttp.interceptors.deduplicate(),
        lambda: greenhttp.interceptors.cache(),
        lambda: greenhttp.interceptors.response_error(),
    ],
    ids=["retry", "redirect", "dump", "decompress", "deduplicate", "cache", "response_error"],
)
def test_behind_every_interceptor_the_controller_is_a_controller(routes, make_client, make_interceptor):
    # handlers.md: the controller is a greenhttp.Controller with wants_whole_body(); behind
    # five interceptors it was not, and wants_whole_body() raised AttributeError behind three.
    server = routes({"/x": lambda conn, req: conn.respond(b"payload")})
    client = make_client(server.origin)
    handler = _WholeBodyReader()
    client.compose(make_interceptor()).dispatch({"path": "/x", "method": "GET"}, handler)
    with gevent.Timeout(5):
        handler.done.wait()
    assert handler.error is None
    assert len(handler.controllers) == 3
    assert all(isinstance(c, greenhttp.Controller) for c in handler.controllers)


def _switching_server(make_server: Any) -> tuple[Any, gevent.event.Event]:
    """A server answering 101 to an upgrade; the event is set when the client closes."""
    saw_close = gevent.event.Event()

    def handler(conn: Any) -> None:
        conn.read_request()
        conn.send(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: foo\r\n\r\n")
        if conn.wait_closed(5):
            saw_close.set()

    return make_server(handler), saw_close


def test_a_decorator_whose_handler_takes_no_upgrade_closes_the_socket_and_reports_it(make_server, make_client):
    # handlers.md: exactly one terminal call. The decorator skipped the missing method:
    # the handler heard nothing after on_request_start, and the socket waited for the GC.
    server, saw_close = _switching_server(make_server)
    class NoUpgrade:
        def __init__(self) -> None:
            self.calls: list[Any] = []
            self.done = gevent.event.Event()

        def on_request_start(self, controller: Any, context: Any) -> None:
            self.calls.append("start")

        def on_response_error(self, controller: Any, err: BaseException) -> None:
            self.calls.append(type(err))
            self.done.set()

    client = make_client(server.origin)
    inner = NoUpgrade()
    client.dispatch({"path": "/", "method": "GET", "upgrade": "foo"}, greenhttp.DecoratorHandler(inner))
    assert inner.done.wait(5)
    assert inner.calls == ["start", errors.NotSupportedError]
    assert saw_close.wait(5)  # closed now, not when the socket object is collected


def test_behind_an_interceptor_too_a_handler_without_on_request_upgrade_hears_why(make_server, make_client):
    server, saw_close = _switching_server(make_server)
    errors_seen: list[BaseException] = []
    done = gevent.event.Event()

    class NoUpgrade:
        def on_response_error(self, controller: Any, err: BaseException) -> None:
            errors_seen.append(err)
            done.set()

    client = make_client(server.origin)
    composed = client.compose(_quiet_decompress())  # its handler stands in as the controller
    composed.dispatch({"path": "/", "method": "GET", "upgrade": "foo"}, greenhttp.DecoratorHandler(NoUpgrade()))
    assert done.wait(5)
    assert [type(e) for e in errors_seen] == [errors.NotSupportedError]
    assert saw_close.wait(5)
