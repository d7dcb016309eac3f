"""The opening handshake: URL and subprotocol checks, the request on the wire, the
checks of the server's answer (RFC 6455 §4.1, RFC 7692 §7.1, WHATWG)."""

from __future__ import annotations

import base64

import gevent
import gevent.event
import pytest
import wsutil
from wsutil import accept_for, frame

import greenhttp
from greenhttp import DOMException, WebSocket
from greenhttp._websocket import handshake
from testkit import wait_for

# -- URL -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "url", "origin", "path"),
    [
        ("ws://127.0.0.1:9000", "ws://127.0.0.1:9000/", "ws://127.0.0.1:9000", "/"),
        ("http://Example.COM/a?b=1", "ws://example.com/a?b=1", "ws://example.com", "/a?b=1"),
        ("https://h:443/x", "wss://h/x", "wss://h", "/x"),
        ("wss://h:8443/p q", "wss://h:8443/p%20q", "wss://h:8443", "/p%20q"),
        ("ws://[::1]:80/", "ws://[::1]/", "ws://[::1]", "/"),
        ("WS://h/?", "ws://h/?", "ws://h", "/?"),
        # Credentials stay in the URL, as the WHATWG URL serialiser writes them.
        ("ws://user:pass@h/p", "ws://user:pass@h/p", "ws://h", "/p"),
        ("ws://user:@h/", "ws://user@h/", "ws://h", "/"),
        ("ws://:pass@h/", "ws://:pass@h/", "ws://h", "/"),
        ("ws://@h/", "ws://h/", "ws://h", "/"),
        ("ws://a@b:c:d@h:80/", "ws://a%40b:c%3Ad@h/", "ws://h", "/"),
        ('ws://ü"%41:x@h/', "ws://%C3%BC%22%41:x@h/", "ws://h", "/"),
    ],
)
def test_url_is_parsed_and_serialised(given, url, origin, path):
    target = handshake.parse_url(given)
    assert (target.url, target.origin, target.path) == (url, origin, path)
    assert target.http_origin == origin.replace("ws", "http", 1)


@pytest.mark.parametrize(
    "bad",
    [
        "ftp://h/",
        "ws://h/#",
        "ws://h/#frag",
        "/relative",
        "h:80",
        "ws://",
        "ws://h:99999/",
        "ws://a b/",
        None,
    ],
)
def test_bad_urls_raise_syntax_error(bad):
    with pytest.raises(DOMException) as info:
        WebSocket(bad)
    assert info.value.name == "SyntaxError"


# -- subprotocols -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "protocols",
    [["chat", "chat"], ["Chat", "cHAT"], [""], ["a b"], ["a,b"], ['a"'], ["é"], [1], b"chat"],
)
def test_repeated_or_invalid_subprotocols_raise_syntax_error(protocols):
    with pytest.raises(DOMException) as info:
        WebSocket("ws://127.0.0.1:1/", protocols)
    assert info.value.name == "SyntaxError"
    with pytest.raises(DOMException):
        WebSocket("ws://127.0.0.1:1/", {"protocols": protocols})


def test_unknown_init_field_is_refused():
    with pytest.raises(TypeError, match="protocol"):
        WebSocket("ws://127.0.0.1:1/", {"protocol": ["chat"]})


def test_invalid_headers_raise_at_construction():
    with pytest.raises(greenhttp.errors.InvalidArgumentError):
        WebSocket("ws://127.0.0.1:1/", {"headers": {"x-bad": "a\r\nb"}})


def test_dispatcher_must_be_a_dispatcher():
    with pytest.raises(greenhttp.errors.InvalidArgumentError):
        WebSocket("ws://127.0.0.1:1/", {"dispatcher": object()})


# -- the request -------------------------------------------------------------------------


def test_request_on_the_wire(ws_server, record):
    server = ws_server(protocol="chat")
    ws = WebSocket(
        server.url("/path?q=1"),
        {
            "protocols": ["chat", "superchat"],
            "headers": {"x-custom": "1", "Sec-WebSocket-Key": "mine"},
        },
    )
    rec = record(ws)
    rec.wait_open()
    req = server.server.requests[0]
    assert (req.method, req.target, req.version) == ("GET", "/path?q=1", "HTTP/1.1")
    names = [k.lower() for k, _ in req.headers]
    assert names.index("x-custom") < names.index("sec-websocket-key")  # the user's headers first
    assert req.header_list("sec-websocket-key") != ["mine"]
    assert len(base64.b64decode(req.header("sec-websocket-key"))) == 16
    assert req.header("sec-websocket-version") == "13"
    assert req.header("sec-websocket-protocol") == "chat, superchat"
    assert req.header("sec-websocket-extensions") == "permessage-deflate; client_max_window_bits"
    assert req.header("upgrade").lower() == "websocket"
    assert "upgrade" in req.header("connection").lower()
    assert req.header("host") == f"127.0.0.1:{server.server.port}"
    assert ws.protocol == "chat"
    assert ws.extensions == ""
    assert ws.url == server.url("/path?q=1")
    ws.close()
    rec.wait_closed()


def test_keys_are_fresh(ws_server, record):
    server = ws_server()
    keys = set()
    for _ in range(3):
        ws = WebSocket(server.url())
        rec = record(ws)
        rec.wait_open()
        ws.close()
        rec.wait_closed()
    keys = {r.header("sec-websocket-key") for r in server.server.requests}
    assert len(keys) == 3


def test_bytes_sent_right_after_the_101_are_delivered(ws_server, record):
    def response(req):
        return (
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + f"Sec-WebSocket-Accept: {accept_for(req.header('sec-websocket-key'))}\r\n\r\n".encode()
            + frame(1, b"early")
        )

    def script(peer):
        peer.send(frame(1, b"later"))
        f = peer.expect_close()
        peer.send(frame(8, f.payload[:2]))
        peer.conn.close()

    server = ws_server(script, response=response)
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    gevent_wait_messages(rec, 2)
    assert rec.messages == ["early", "later"]
    ws.close(1000)
    assert rec.wait_closed().was_clean


def gevent_wait_messages(rec, n):
    import gevent

    with gevent.Timeout(5):
        while len(rec.messages) < n:
            gevent.sleep(0.005)


# -- the response -------------------------------------------------------------------------


def _answer(
    status="101 Switching Protocols",
    *,
    upgrade="websocket",
    connection="Upgrade",
    accept=None,
    extra=(),
):
    def response(req):
        lines = [f"HTTP/1.1 {status}"]
        if upgrade is not None:
            lines.append(f"Upgrade: {upgrade}")
        if connection is not None:
            lines.append(f"Connection: {connection}")
        key = accept if accept is not None else accept_for(req.header("sec-websocket-key"))
        lines.append(f"Sec-WebSocket-Accept: {key}")
        lines.extend(f"{k}: {v}" for k, v in extra)
        if not status.startswith("101"):
            lines.append("Content-Length: 0")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    return response


@pytest.mark.parametrize(
    ("answer", "protocols"),
    [
        (_answer("200 OK"), None),
        (_answer("403 Forbidden"), None),
        (_answer(upgrade=None), None),
        (_answer(upgrade="h2c"), None),
        (_answer(connection=None), None),
        (_answer(connection="keep-alive"), None),
        (_answer(accept="dGhlIHNhbXBsZSBub25jZQ=="), None),
        (_answer(extra=[("Sec-WebSocket-Extensions", "x-webkit-deflate-frame")]), None),
        (
            _answer(extra=[("Sec-WebSocket-Extensions", "permessage-deflate, permessage-deflate")]),
            None,
        ),
        (
            _answer(
                extra=[("Sec-WebSocket-Extensions", "permessage-deflate; server_max_window_bits=7")]
            ),
            None,
        ),
        (
            _answer(
                extra=[("Sec-WebSocket-Extensions", "permessage-deflate; server_max_window_bits")]
            ),
            None,
        ),
        (
            _answer(
                extra=[
                    ("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits=16")
                ]
            ),
            None,
        ),
        (
            _answer(
                extra=[
                    ("Sec-WebSocket-Extensions", "permessage-deflate; server_no_context_takeover=1")
                ]
            ),
            None,
        ),
        (_answer(extra=[("Sec-WebSocket-Extensions", "permessage-deflate; mystery")]), None),
        (
            _answer(
                extra=[
                    (
                        "Sec-WebSocket-Extensions",
                        "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
                    )
                ]
            ),
            None,
        ),
        (_answer(extra=[("Sec-WebSocket-Protocol", "chat")]), None),
        (_answer(extra=[("Sec-WebSocket-Protocol", "other")]), ["chat"]),
        (_answer(), ["chat"]),
    ],
)
def test_invalid_answers_fail_the_connection(ws_server, record, answer, protocols):
    server = ws_server(response=answer)
    ws = WebSocket(server.url(), protocols)
    rec = record(ws)
    close = rec.wait_closed()
    assert rec.types == ["error", "close"]
    assert (close.code, close.reason, close.was_clean) == (1006, "", False)
    assert ws.ready_state == WebSocket.CLOSED
    assert isinstance(rec.events[0].error, greenhttp.WebSocketError)
    assert "handshake" in rec.events[0].message


@pytest.mark.parametrize(
    ("extensions", "connection"),
    [
        ("permessage-deflate", "Upgrade"),
        (
            "permessage-deflate; server_no_context_takeover; client_max_window_bits=10",
            "keep-alive, Upgrade",
        ),
        ('permessage-deflate; server_max_window_bits="8"', "upgrade"),
    ],
)
def test_valid_answers_open(ws_server, record, extensions, connection):
    server = ws_server(
        response=_answer(connection=connection, extra=[("Sec-WebSocket-Extensions", extensions)])
    )
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    assert ws.extensions == extensions
    ws.close()
    rec.wait_closed()


def test_connection_refused_fails_with_error_then_close(record):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ws = WebSocket(f"ws://127.0.0.1:{port}/")
    rec = record(ws)
    close = rec.wait_closed()
    assert rec.types == ["error", "close"]
    assert close.code == 1006 and not close.was_clean
    assert isinstance(rec.events[0].error.__cause__, OSError)


# -- credentials in the URL (undici test/websocket/issue-4889.js) ---------------------------

_UNAUTHORIZED = (
    b"HTTP/1.1 401 Unauthorized\r\n"
    b'WWW-Authenticate: Basic realm="test"\r\n'
    b"Content-Length: 0\r\n\r\n"
)


def _auth_server(make_server, expected):
    """A server that wants ``Authorization: <expected>``; a handshake without it is
    answered 401 (and its connection closed)."""

    def handler(conn):
        req = conn.read_request()
        if req is None:
            return
        if expected is None or req.header("authorization") != expected:
            conn.send(_UNAUTHORIZED)
            conn.close()
            return
        conn.send(wsutil.handshake_response(req))
        wsutil.WsPeer(conn, req).answer_close()

    return make_server(handler)


def _basic(credentials: bytes) -> str:
    return "Basic " + base64.b64encode(credentials).decode()


@pytest.mark.parametrize(
    ("userinfo", "credentials"),
    [
        ("user:pass", b"user:pass"),
        ("us%20er:p%40ss%3A", b"us er:p@ss:"),  # percent-decoded, as the fetch standard has it
        ("%C3%BC:", "ü:".encode()),  # no password: an empty one
    ],
)
def test_url_credentials_answer_a_401(make_server, make_client, record, userinfo, credentials):
    server = _auth_server(make_server, _basic(credentials))
    client = make_client(server.origin)
    url = f"ws://{userinfo}@127.0.0.1:{server.port}/path"
    ws = WebSocket(url, {"dispatcher": client})
    rec = record(ws)
    rec.wait_open()
    # As the original: first without credentials, then once more with them.
    first, second = server.requests
    assert (first.target, first.header("authorization")) == ("/path", None)
    assert (second.target, second.header("authorization")) == ("/path", _basic(credentials))
    assert ws.url == url.replace("%C3%BC:@", "%C3%BC@")  # the URL keeps them (no empty password)
    ws.close()
    rec.wait_closed()
    assert not server.errors


def test_url_credentials_are_not_sent_unasked(ws_server, record):
    server = ws_server()
    ws = WebSocket(f"ws://user:pass@127.0.0.1:{server.server.port}/")
    rec = record(ws)
    rec.wait_open()
    ws.close()
    rec.wait_closed()
    [req] = server.server.requests
    assert req.header("authorization") is None


@pytest.mark.parametrize("own", [None, "Bearer mine"])
def test_a_refused_authorization_fails_after_one_retry_at_most(make_server, make_client, record, own):
    server = _auth_server(make_server, None)  # refuses everything
    client = make_client(server.origin)
    init = {"dispatcher": client, "headers": {"Authorization": own} if own else None}
    rec = record(WebSocket(f"ws://user:pass@127.0.0.1:{server.port}/", init))
    close = rec.wait_closed()
    assert rec.types == ["error", "close"] and close.code == 1006
    sent = [req.header("authorization") for req in server.requests]
    # The URL's credentials are tried once; a header of one's own is not replaced.
    assert sent == ([None, _basic(b"user:pass")] if own is None else [own])


def test_limits_come_from_the_dispatcher(ws_server, record, make_client):
    def script(peer):
        peer.send(frame(2, b"x" * 11))
        peer.expect_close()
        peer.wait_eof()

    server = ws_server(script)
    client = make_client(
        f"http://127.0.0.1:{server.server.port}", web_socket={"max_payload_size": 10}
    )
    ws = WebSocket(server.url(), {"dispatcher": client})
    rec = record(ws)
    rec.wait_closed()
    assert rec.types == ["open", "error", "close"]
    assert rec.events[1].error.close_code == 1009


def test_the_global_dispatcher_is_the_default(ws_server, record):
    seen = []

    def spy(dispatch):
        def recording_dispatch(opts, handler):
            seen.append((opts["origin"], opts["path"], opts.get("allow_h2"), opts["upgrade"]))
            return dispatch(opts, handler)

        return recording_dispatch

    server = ws_server()
    previous = greenhttp.get_global_dispatcher()
    agent = greenhttp.Agent()
    greenhttp.set_global_dispatcher(agent.compose(spy))
    try:
        ws = WebSocket(server.url("/global"))
        rec = record(ws)
        rec.wait_open()
        ws.close()
        assert rec.wait_closed().was_clean
    finally:
        greenhttp.set_global_dispatcher(previous)
        agent.close()
    # No allow_h2 restriction: an HTTP/2 connection would carry it as an extended
    # CONNECT (RFC 8441; tests/websocket/test_h2.py); this origin speaks HTTP/1.1.
    assert seen == [(f"http://127.0.0.1:{server.server.port}", "/global", None, "websocket")]


def test_limits_of_every_dispatcher_kind():
    from greenhttp._websocket.handshake import limits_of

    assert limits_of(greenhttp.Client("http://a", web_socket={"max_fragments": 5})) == (
        5,
        134217728,
    )
    assert limits_of(greenhttp.Client("http://a").compose()) == (131072, 134217728)
    assert limits_of(greenhttp.Pool("http://a", web_socket={"max_payload_size": 7})) == (131072, 7)
    agent = greenhttp.Agent(web_socket={"max_payload_size": 9, "max_fragments": 0})
    assert limits_of(agent) == (0, 9)
    assert limits_of(greenhttp.Agent(web_socket={"max_fragments": None})) == (131072, 134217728)
    assert limits_of(object()) == (131072, 134217728)


def test_a_handshake_whose_caller_is_interrupted_gives_the_request_up(make_server, make_client):
    # The greenlet waiting for the 101 is killed: the request is aborted, and
    # nothing is left holding a socket when the server's 101 comes after all.
    release = gevent.event.Event()
    closed_by_client = gevent.event.Event()

    def handler(conn):
        req = conn.read_request()
        if req is None:
            return
        release.wait(5)
        try:
            conn.send(wsutil.handshake_response(req))
            if conn.sock.recv(1) == b"":
                closed_by_client.set()
        except OSError:
            closed_by_client.set()

    server = make_server(handler)
    client = make_client(server.origin)
    target = handshake.parse_url(f"ws://127.0.0.1:{server.port}/")
    waiting = gevent.spawn(handshake.perform, client, target, [], None, greenhttp.AbortController().signal)
    wait_for(lambda: len(server.requests) == 1, what="the handshake at the server")
    waiting.kill(block=True, timeout=5)
    release.set()
    assert closed_by_client.wait(5), "the upgraded socket was kept open"


def test_a_dispatcher_reads_the_handshake_headers_by_name():
    # undici's custom-headers.js: a dispatcher of the user's reads
    # options.headers['x-khafra-hello'] and .Authorization; the original hands an object.
    seen = gevent.event.AsyncResult()

    class Recording(greenhttp.Agent):
        def dispatch(self, options, handler):
            seen.set(options)
            handler.on_response_error(None, greenhttp.errors.SocketError("no network here"))
            return True

    agent = Recording()
    headers = {"x-khafra-hello": "hi", "Authorization": "Bearer x", "X-Twice": ["1", "2"]}
    ws = WebSocket("ws://127.0.0.1:1/", {"headers": headers, "dispatcher": agent})
    try:
        options = seen.get(timeout=5)
        sent = options["headers"]
        assert sent["x-khafra-hello"] == "hi" and sent["Authorization"] == "Bearer x"
        assert sent["X-Twice"] == ["1", "2"]
        assert sent["sec-websocket-version"] == "13"
    finally:
        ws.close()
        agent.close()


@pytest.mark.parametrize("kind", ["Agent", "Pool", "Client"])
def test_web_socket_options_read_back(kind):
    # undici's dispatcher-options.js / permessage-deflate-*.js: dispatcher.webSocketOptions.
    make = getattr(greenhttp, kind)
    args = () if kind == "Agent" else ("http://127.0.0.1:1",)
    plain = make(*args)
    limited = make(*args, web_socket={"max_fragments": 8, "max_payload_size": 1024})
    try:
        assert plain.web_socket_options == {"max_fragments": 131072, "max_payload_size": 128 * 1024 * 1024}
        assert limited.web_socket_options == {"max_fragments": 8, "max_payload_size": 1024}
        assert limited.compose().web_socket_options == limited.web_socket_options
    finally:
        plain.close()
        limited.close()
