"""Audit of the error classes and abort signals against real peers.

* errors survive pickling whole (docs/errors.md: match on ``code``, "which
  survives serialisation");
* an abort signal on request/stream/pipeline/upgrade/connect, aborted before
  the call, while the head is awaited, mid-body and after the end, raises its
  reason (or the ``AbortError`` DOMException) and leaves the client usable,
  with no socket or greenlet behind (the leak check of tests/conftest.py runs
  on this file);
* the reason of a signal reused after it aborted is raised again and again
  without its traceback growing.
"""

from __future__ import annotations

import copy
import io
import pickle
from typing import Any

import gevent
import pytest

import greenhttp
from greenhttp import errors
from testkit import serve_forever


def _parser_error(make_server, make_client) -> errors.HTTPParserError:
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 2x0 OK\r\ncontent-length: 0\r\n\r\n")

    client = make_client(make_server(handler).origin)
    with gevent.Timeout(5), pytest.raises(errors.HTTPParserError) as info:
        client.request(path="/")
    return info.value


@pytest.mark.parametrize("clone", [lambda e: pickle.loads(pickle.dumps(e)), copy.copy], ids=["pickle", "copy"])
def test_a_parser_error_keeps_its_code_message_and_data_when_pickled(clone, make_server, make_client):
    err = _parser_error(make_server, make_client)
    assert err.code.startswith("HPE_") and err.code != "HPE_INVALID"
    again = clone(err)
    assert type(again) is errors.HTTPParserError
    assert (again.code, str(again), again.message, again.data) == (err.code, str(err), err.message, err.data)


def test_error_fields_survive_pickling():
    cases = [
        errors.ResponseError("Response Error", 404, {"content-type": "text/plain"}, "nope"),
        errors.RequestRetryError("Request failed", 503, {"retry-after": "1"}, {"count": 3}),
        errors.SocketError("other side closed", {"local_port": 1234, "remote_port": 80}),
        errors.RequestAbortedError(),
        errors.HeadersTimeoutError(),
    ]
    for err in cases:
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err)
        assert vars(again) == vars(err)
        assert (again.code, again.name, str(again), again.args) == (err.code, err.name, str(err), err.args)
    assert pickle.loads(pickle.dumps(cases[0])).status == 404


@pytest.mark.parametrize("clone", [lambda e: pickle.loads(pickle.dumps(e)), copy.copy, copy.deepcopy])
def test_a_dom_exception_and_a_websocket_error_keep_every_field_when_copied(clone):
    # docs/errors.md: errors pickle (and copy) whole. These two kept only their
    # constructor arguments, losing the opaque a callback= error carries.
    aborted = errors.DOMException("This operation was aborted", "AbortError")
    closed = errors.WebSocketError._closed_with("unclean close", 1006, "gone")
    for err in (aborted, closed):
        err.opaque = {"job": 7}
        again = clone(err)
        assert type(again) is type(err) and vars(again) == vars(err)
        assert (again.name, again.message, again.opaque) == (err.name, err.message, {"job": 7})
    assert (clone(closed).close_code, clone(closed).reason) == (1006, "gone")


# -- abort signals on every API, in every phase ---------------------------------------------------


class Mine(Exception):
    """An abort reason of the test's own."""


def _holding_server(make_server):
    """``/hold`` never answers; ``/part`` sends a head and half its body, then waits;
    anything else gets "hello". The connection is kept alive. ``server.held`` and
    ``server.parted`` count the ``/hold`` and the answered ``/part`` requests."""

    def handler(conn):
        while True:
            req = conn.read_request()
            if req is None:
                return
            if req.target == "/hold":
                server.held.append(req)
                conn.wait_closed()
                return
            if req.target == "/part":
                conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello")
                server.parted.append(req)
                conn.wait_closed()
                return
            conn.respond(b"hello")

    server = make_server(handler)
    server.held = []
    server.parted = []
    return server


class _Sink:
    def __init__(self):
        self.chunks = []

    def write(self, chunk):
        self.chunks.append(chunk)


def _call(api, client, path, signal):
    """Run ``api`` on ``client`` to the end (the whole body read), with ``signal``."""
    if api == "request":
        return client.request(path=path, signal=signal).body.bytes()
    if api == "stream":
        return client.stream(path=path, signal=signal, factory=lambda data: _Sink())
    if api == "pipeline":
        with client.pipeline(path=path, method="PUT", signal=signal, handler=lambda data: data.body) as duplex:
            duplex.end(b"x")
            return duplex.read()
    if api == "upgrade":
        return client.upgrade(path=path, signal=signal)
    return client.connect(path="example.com:443" if path == "/" else path, signal=signal)


APIS = ["request", "stream", "pipeline", "upgrade", "connect"]
REASONS = [Mine("mine"), None]


def _check_raised(err, reason):
    if reason is None:
        assert isinstance(err, errors.DOMException) and err.name == "AbortError"
    else:
        assert err is reason


def _still_works(client):
    with gevent.Timeout(5):
        assert client.request(path="/").body.bytes() == b"hello"


@pytest.mark.parametrize("reason", REASONS, ids=["reason", "default"])
@pytest.mark.parametrize("api", APIS)
def test_a_signal_aborted_before_the_call(api, reason, make_server, make_client):
    server = _holding_server(make_server)
    client = make_client(server.origin)
    controller = greenhttp.AbortController()
    controller.abort(reason)
    with gevent.Timeout(5), pytest.raises(BaseException) as info:
        _call(api, client, "/hold", controller.signal)
    _check_raised(info.value, reason)
    assert server.accepted == 0  # nothing was sent
    _still_works(client)


def _abort_once_served(api, path, reason, server, client):
    """Call ``api`` on ``path``; abort its signal once the server has the request
    (``/hold``) or has sent half the body (``/part``); return what the call raised."""
    served = server.held if path == "/hold" else server.parted
    controller = greenhttp.AbortController()
    call = gevent.spawn(_call, api, client, path, controller.signal)
    with gevent.Timeout(5):
        while not served:
            gevent.sleep(0.001)
        controller.abort(reason)
        call.join()
    assert call.exception is not None
    return call.exception


@pytest.mark.parametrize("reason", REASONS, ids=["reason", "default"])
@pytest.mark.parametrize("api", APIS)
def test_a_signal_aborting_while_the_head_is_awaited(api, reason, make_server, make_client):
    server = _holding_server(make_server)
    client = make_client(server.origin)
    _check_raised(_abort_once_served(api, "/hold", reason, server, client), reason)
    _still_works(client)


@pytest.mark.parametrize("reason", REASONS, ids=["reason", "default"])
@pytest.mark.parametrize("api", ["request", "stream", "pipeline"])
def test_a_signal_aborting_mid_body(api, reason, make_server, make_client):
    server = _holding_server(make_server)
    client = make_client(server.origin)
    _check_raised(_abort_once_served(api, "/part", reason, server, client), reason)
    _still_works(client)


@pytest.mark.parametrize("api", ["request", "stream", "pipeline"])
def test_a_signal_aborting_after_the_end_changes_nothing(api, make_server, make_client):
    server = _holding_server(make_server)
    client = make_client(server.origin)
    controller = greenhttp.AbortController()
    with gevent.Timeout(5):
        _call(api, client, "/", controller.signal)
    controller.abort(Mine("late"))
    _still_works(client)
    assert server.accepted == 1  # the connection was kept


def test_a_signal_aborting_after_an_upgrade_leaves_the_socket_alone(make_server, make_client):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n")
        conn.send(conn.read_exact(4) or b"")
        conn.wait_closed()

    client = make_client(make_server(handler).origin)
    controller = greenhttp.AbortController()
    with gevent.Timeout(5):
        data = client.upgrade(path="/", protocol="echo", signal=controller.signal)
        controller.abort(Mine("late"))
        data.socket.sendall(b"ping")
        assert data.socket.recv(4) == b"ping"
    data.socket.close()


def test_one_signal_shared_by_requests_aborts_them_all_and_is_released_by_the_finished(
    make_server, make_client
):
    server = _holding_server(make_server)
    client = make_client(server.origin, pipelining=1)
    other = make_client(server.origin)
    controller = greenhttp.AbortController()
    with gevent.Timeout(5):
        for _ in range(3):
            assert client.request(path="/", signal=controller.signal).body.bytes() == b"hello"
    assert not controller.signal._listeners  # finished requests do not hold the signal
    waiting = [gevent.spawn(_call, "request", c, "/hold", controller.signal) for c in (client, other)]
    with gevent.Timeout(5):
        while len(server.held) < 2:  # both requests are at the server, awaiting their heads
            gevent.sleep(0.001)
    reason = Mine("all")
    controller.abort(reason)
    with gevent.Timeout(5):
        gevent.joinall(waiting)
    assert [g.exception for g in waiting] == [reason, reason]
    _still_works(client)


def test_abort_signal_timeout_is_in_seconds(make_server, make_client):
    server = _holding_server(make_server)
    client = make_client(server.origin)
    with gevent.Timeout(5), pytest.raises(errors.DOMException) as info:
        client.request(path="/hold", signal=greenhttp.AbortSignal.timeout(0.05))
    assert info.value.name == "TimeoutError"
    _still_works(client)


def _traceback_depth(err: BaseException) -> int:
    depth, tb = 0, err.__traceback__
    while tb is not None:
        depth, tb = depth + 1, tb.tb_next
    return depth


@pytest.mark.parametrize("api", APIS)
def test_a_signal_reused_after_it_aborted_does_not_grow_its_reasons_traceback(api, make_server, make_client):
    # Every request raises the same reason object; each raise must not add its frames
    # to what the earlier ones left, or a long-lived aborted signal keeps every frame
    # of every request it failed (their clients, handlers, bodies) alive.
    server = _holding_server(make_server)
    client = make_client(server.origin)
    controller = greenhttp.AbortController()
    reason = Mine("shut down")
    controller.abort(reason)
    depths = []
    for _ in range(10):
        with gevent.Timeout(5), pytest.raises(Mine):
            _call(api, client, "/hold", controller.signal)
        depths.append(_traceback_depth(reason))
    assert depths[-1] == depths[1]


def test_throw_if_aborted_does_not_grow_the_reasons_traceback():
    def fail():
        raise Mine("original")

    try:
        fail()
    except Mine as exc:
        signal = greenhttp.AbortSignal.abort(exc)
    original = _traceback_depth(signal.reason)
    for _ in range(10):
        with pytest.raises(Mine) as info:
            signal.throw_if_aborted()
        assert info.value is signal.reason
    # The traceback it had when it aborted, plus the frames of the last raise only.
    assert original < _traceback_depth(signal.reason) <= original + 3


def test_body_dump_with_a_reused_aborted_signal_does_not_grow_the_reasons_traceback(make_server, make_client):
    client = make_client(_holding_server(make_server).origin)
    signal = greenhttp.AbortSignal.abort(Mine("stop"))
    depths = []
    for _ in range(5):
        with gevent.Timeout(5):
            response = client.request(path="/part")
        with pytest.raises(Mine):
            response.body.dump(signal=signal)
        response.body.close()
        depths.append(_traceback_depth(signal.reason))
    assert depths[-1] == depths[0]


# -- which error each failure mode gives ------------------------------------------------------------


class _Refused:
    def __init__(self):
        self.errors = []

    def on_response_error(self, controller, err):
        self.errors.append((controller, err))


@pytest.mark.parametrize("kind", ["Client", "Pool", "Agent"])
@pytest.mark.parametrize("options", [None, "/", [("path", "/")]], ids=["none", "str", "list"])
def test_dispatch_options_that_are_not_a_dict_are_an_invalid_argument(kind, options):
    dispatcher = greenhttp.Agent() if kind == "Agent" else getattr(greenhttp, kind)("http://127.0.0.1:1")
    try:
        handler = _Refused()
        dispatcher.dispatch(options, handler)
        [(controller, err)] = handler.errors
        assert controller is None
        assert isinstance(err, errors.InvalidArgumentError) and "options must be a dict" in str(err)
    finally:
        with gevent.Timeout(5):
            dispatcher.destroy()


def _dispatcher_of(kind: str, origin: str) -> tuple[Any, Any]:
    """``(the dispatcher to destroy, the one to dispatch on)`` of a kind: a Client, Pool
    or Agent, or a Client composed with an interceptor that changes nothing."""
    if kind == "Agent":
        dispatcher = greenhttp.Agent()
    else:
        dispatcher = getattr(greenhttp, "Client" if kind == "composed" else kind)(origin)
    return dispatcher, dispatcher.compose(lambda dispatch: dispatch) if kind == "composed" else dispatcher


@pytest.mark.parametrize("kind", ["Client", "Pool", "Agent", "composed"])
@pytest.mark.parametrize("handler", [None, "handler", 1, b"x"], ids=["none", "str", "int", "bytes"])
def test_dispatch_without_a_handler_object_raises_and_sends_nothing(make_server, kind, handler):
    # As the original's "handler must be an object": nobody could be told of an error.
    server = make_server(lambda conn: conn.respond(b"unexpected"))
    dispatcher, target = _dispatcher_of(kind, server.origin)
    try:
        with pytest.raises(errors.InvalidArgumentError, match="handler must be an object"):
            target.dispatch({"origin": server.origin, "path": "/", "method": "GET"}, handler)
        assert server.accepted == 0 and server.requests == []
    finally:
        with gevent.Timeout(5):
            dispatcher.destroy()


class _LegacyHandler:
    """A handler written to the original's dropped API (REFERENCE §0)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_connect(self, abort: Any) -> None:
        self.calls.append("on_connect")

    def on_headers(self, status: int, headers: Any, resume: Any) -> bool:
        self.calls.append("on_headers")
        return True

    def on_data(self, chunk: bytes) -> bool:
        self.calls.append("on_data")
        return True

    def on_complete(self, trailers: Any) -> None:
        self.calls.append("on_complete")

    def on_error(self, err: BaseException) -> None:
        self.calls.append("on_error")


class _CamelCaseHandler:
    def onResponseStart(self, controller: Any, status: int, headers: Any, message: str) -> None:  # noqa: N802
        raise AssertionError("never called")


@pytest.mark.parametrize("kind", ["Client", "Pool", "Agent", "composed"])
@pytest.mark.parametrize("handler_type", [_LegacyHandler, _CamelCaseHandler], ids=["legacy", "camelCase"])
def test_dispatch_refuses_a_handler_of_another_api_and_sends_nothing(make_server, kind, handler_type):
    # REFERENCE §0: the legacy handler API is not accepted, with a clear InvalidArgumentError;
    # its handler, with none of the methods dispatch() calls, would otherwise wait for ever.
    server = make_server(lambda conn: conn.respond(b"unexpected"))
    dispatcher, target = _dispatcher_of(kind, server.origin)
    handler = handler_type()
    try:
        with pytest.raises(errors.InvalidArgumentError, match="invalid handler") as caught:
            target.dispatch({"origin": server.origin, "path": "/", "method": "GET"}, handler)
        assert "on_response_start" in str(caught.value)
        assert server.accepted == 0 and server.requests == []
    finally:
        with gevent.Timeout(5):
            dispatcher.destroy()


def test_an_empty_handler_object_is_still_accepted(make_server):
    # API.md: any handler method may be absent; only another API's names are refused.
    server = make_server(serve_forever(b"fine"))
    client = greenhttp.Client(server.origin)
    try:
        assert client.dispatch({"path": "/", "method": "GET"}, object()) in (True, False)
        with gevent.Timeout(5):
            client.close()
        assert [r.target for r in server.requests] == ["/"]
    finally:
        with gevent.Timeout(5):
            client.destroy()


class _NoUpgradeHandler:
    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def on_response_start(self, controller: Any, status: int, headers: Any, message: str) -> None:
        raise AssertionError("never called")

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        self.errors.append(err)


@pytest.mark.parametrize(
    "options",
    [{"path": "/", "method": "GET", "upgrade": "websocket"}, {"path": "example.test:443", "method": "CONNECT"}],
    ids=["upgrade", "CONNECT"],
)
def test_an_upgrade_without_on_request_upgrade_is_refused_before_it_is_sent(make_server, options):
    # As the original's "invalid onRequestUpgrade method": the 101 or the tunnel would
    # have nobody to go to, so nothing goes out (before, the connection was spent on it).
    server = make_server(lambda conn: conn.respond(b"unexpected"))
    client = greenhttp.Client(server.origin)
    handler = _NoUpgradeHandler()
    try:
        assert client.dispatch(options, handler) is False
        [err] = handler.errors
        assert isinstance(err, errors.InvalidArgumentError) and "on_request_upgrade" in str(err)
        assert server.accepted == 0
    finally:
        with gevent.Timeout(5):
            client.destroy()


class _EmitterSignal:
    """A Node-style signal (``on``/``off``) that is already aborted."""

    def __init__(self, reason: BaseException) -> None:
        self.aborted = True
        self.reason = reason
        self.listeners: list[Any] = []

    def on(self, type: str, fn: Any) -> None:
        self.listeners.append(fn)

    def off(self, type: str, fn: Any) -> None:
        self.listeners.remove(fn)


@pytest.mark.parametrize("api", ["request", "stream"])
def test_an_already_aborted_node_style_signal_fails_the_request_at_once(make_server, api):
    # REFERENCE §1.3: an aborted signal fails with its reason, whatever its shape
    # (the original checks signal.aborted first); it used to be sent and answered.
    server = make_server(serve_forever(b"unexpected"))
    client = greenhttp.Client(server.origin)
    reason = KeyError("stop")
    signal = _EmitterSignal(reason)
    try:
        with pytest.raises(KeyError) as caught:
            if api == "request":
                client.request(path="/", signal=signal)
            else:
                client.stream(path="/", signal=signal, factory=lambda data: io.BytesIO())
        assert caught.value is reason
        assert signal.listeners == [] and server.requests == []
    finally:
        with gevent.Timeout(5):
            client.destroy()


@pytest.mark.parametrize(
    ("name", "value", "hint"),
    [
        ("data", b"payload", "body="),
        ("json", {"a": 1}, "body=json.dumps"),
        ("params", {"q": "1"}, "query="),
        ("timeout", 5, "headers_timeout="),
        ("connect_timeout", 0.5, "dispatcher"),
        ("allow_redirects", True, "redirect interceptor"),
        ("follow_redirects", True, "redirect interceptor"),
    ],
)
def test_the_option_names_of_requests_are_refused_with_the_replacement(make_server, name, value, hint):
    # Ignored like any unknown key, data= sent an empty POST and timeout= applied none;
    # the users migrating from requests (docs/migrating.md) are told instead.
    server = make_server(serve_forever(b"unexpected"))
    client = greenhttp.Client(server.origin)
    try:
        with pytest.raises(errors.InvalidArgumentError, match=f"{name} is not a request option") as caught:
            client.request(path="/", method="POST", **{name: value})
        assert hint in str(caught.value)
        assert server.requests == []
        assert client.request(path="/", unknown_to_all="kept for interceptors").body.text() == "unexpected"
    finally:
        with gevent.Timeout(5):
            client.destroy()
