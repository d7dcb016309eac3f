"""The global dispatcher and the module-level request/stream/pipeline/upgrade/connect."""

from __future__ import annotations

import io
from urllib.parse import urlsplit

import gevent
import gevent.event
import pytest

import greenhttp
from greenhttp import _global, errors
from testkit import serve_forever

pytestmark = pytest.mark.usefixtures("fresh_global")  # (tests/conftest.py)


def echo_target(conn):
    """Answer every request with its method and target."""
    while True:
        req = conn.read_request()
        if req is None:
            return
        conn.respond(f"{req.method} {req.target} {req.body.decode()}".strip().encode())


# -- set / get ------------------------------------------------------------------------------


def test_default_global_dispatcher_is_a_lazy_agent():
    assert _global._global_dispatcher is None
    d = greenhttp.get_global_dispatcher()
    assert isinstance(d, greenhttp.Agent)
    assert greenhttp.get_global_dispatcher() is d


def test_set_global_dispatcher(make_server):
    server = make_server(serve_forever(b"mine"))
    agent = greenhttp.Agent()
    try:
        greenhttp.set_global_dispatcher(agent)
        assert greenhttp.get_global_dispatcher() is agent
        assert greenhttp.request(server.origin + "/").body.bytes() == b"mine"
        assert list(agent.stats) == [server.origin]
    finally:
        agent.destroy()


@pytest.mark.parametrize("bad", [None, 42, object(), "http://x"])
def test_set_global_dispatcher_needs_a_dispatcher(bad):
    with pytest.raises(errors.InvalidArgumentError, match="dispatch"):
        greenhttp.set_global_dispatcher(bad)


# -- request ---------------------------------------------------------------------------------


def test_request_splits_the_url(make_server):
    server = make_server(echo_target)
    r = greenhttp.request(server.origin + "/a/b?x=1&y=%20#frag")
    assert r.status_code == 200
    assert r.body.text() == "GET /a/b?x=1&y=%20"
    assert list(greenhttp.get_global_dispatcher().stats) == [server.origin]


def test_request_without_a_path_asks_for_slash(make_server):
    server = make_server(echo_target)
    assert greenhttp.request(server.origin).body.text() == "GET /"


def test_request_method_defaults_to_put_with_a_body(make_server):
    server = make_server(echo_target)
    assert greenhttp.request(server.origin + "/p", body=b"data").body.text() == "PUT /p data"
    assert greenhttp.request(server.origin + "/p", method="POST", body="d").body.text() == "POST /p d"


def test_path_option_replaces_the_url_path(make_server):
    server = make_server(echo_target)
    assert greenhttp.request(server.origin + "/ignored?q", path="x/y").body.text() == "GET /x/y"
    assert greenhttp.request(server.origin, path="/z?k=v").body.text() == "GET /z?k=v"


def test_a_url_is_percent_encoded_as_the_original_s_url_parser_does(make_server):
    # The original parses the URL (and a path= option) with the WHATWG URL parser,
    # which percent-encodes non-ASCII as UTF-8, spaces and a few other characters.
    # Before, "caf\u00e9" went out as one raw latin-1 byte and "a b" or "\u20ac" was refused.
    server = make_server(echo_target)
    with gevent.Timeout(5):
        assert greenhttp.request(server.origin + "/caf\u00e9").body.text() == "GET /caf%C3%A9"
        assert greenhttp.request(server.origin + "/a b/\u20ac?q=a b&x=\u00fc'").body.text() == (
            "GET /a%20b/%E2%82%AC?q=a%20b&x=%C3%BC%27"
        )
        assert greenhttp.request(server.origin + '/<"{`}>').body.text() == "GET /%3C%22%7B%60%7D%3E"
        # What is encoded already, and what needs no encoding, is sent as given.
        assert greenhttp.request(server.origin + "/%C3%A9/a%2Fb?q=%20&r=[]|").body.text() == (
            "GET /%C3%A9/a%2Fb?q=%20&r=[]|"
        )
        assert greenhttp.request(urlsplit(server.origin + "/\u00e9")).body.text() == "GET /%C3%A9"
        assert greenhttp.request(server.origin, path="d\u00e9j\u00e0 vu?q=\u00e9#frag").body.text() == (
            "GET /d%C3%A9j%C3%A0%20vu?q=%C3%A9"
        )


def test_request_accepts_a_urllib_result(make_server):
    server = make_server(echo_target)
    assert greenhttp.request(urlsplit(server.origin + "/u")).body.text() == "GET /u"


def test_request_and_client_accept_the_original_s_url_object(make_server):
    # REFERENCE §4.5 and node-test/agent.js 'global api': {origin, path} or
    # {protocol, hostname, port, path} (or pathname and search), as parseURL builds them.
    server = make_server(echo_target)
    port = server.origin.rsplit(":", 1)[1]
    assert greenhttp.request({"origin": server.origin, "path": "/a"}).body.text() == "GET /a"
    shaped = {"protocol": "http:", "hostname": "127.0.0.1", "port": int(port), "pathname": "/b", "search": "?c=d"}
    assert greenhttp.request(shaped).body.text() == "GET /b?c=d"
    assert greenhttp.request({"origin": server.origin + "/", "path": "e"}).body.text() == "GET /e"
    client = greenhttp.Client({"protocol": "http:", "hostname": "127.0.0.1", "port": port})
    try:
        assert client.request(path="/f").body.text() == "GET /f"
    finally:
        client.close()
    for bad, message in (
        ({"protocol": "ftp:", "hostname": "h"}, "protocol"),
        ({"origin": server.origin, "href": "x"}, "unknown key 'href'"),
        ({"origin": 5}, "origin must be a string"),
    ):
        with pytest.raises(errors.InvalidArgumentError, match=message):
            greenhttp.request(bad)


def test_request_through_a_given_dispatcher(make_server, make_client):
    server = make_server(echo_target)
    client = make_client(server.origin)
    assert greenhttp.request(server.origin + "/c", dispatcher=client).body.text() == "GET /c"
    assert _global._global_dispatcher is None and not _global._defaults  # the global one was never made
    pool = greenhttp.Pool(server.origin, connections=2)
    try:
        r = greenhttp.request(server.origin + "/p", dispatcher=pool, headers={"x": "1"})
        assert r.body.text() == "GET /p"
    finally:
        pool.destroy()


def test_request_with_callback(make_server):
    server = make_server(echo_target)
    result = gevent.event.AsyncResult()

    def done(err, data):
        result.set((err, data.body.text() if data is not None else None))

    assert greenhttp.request(server.origin + "/cb", callback=done) is None
    assert result.get(timeout=5) == (None, "GET /cb")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://h/x", "protocol"),
        ("http://user:pw@127.0.0.1/", "credentials"),
        ("/relative", "protocol"),
        (None, "url"),
        (42, "url"),
    ],
)
def test_bad_urls(url, message):
    with pytest.raises(errors.InvalidArgumentError, match=message):
        greenhttp.request(url)


def test_agent_option_is_refused():
    with pytest.raises(errors.InvalidArgumentError, match="dispatcher"):
        greenhttp.request("http://127.0.0.1:1/", agent=greenhttp.get_global_dispatcher())


# -- stream, pipeline, upgrade, connect -------------------------------------------------------


def test_stream(make_server):
    server = make_server(serve_forever(b"streamed body"))
    class Sink(io.BytesIO):
        def close(self):  # stream() closes its writable at the end: keep the bytes
            self.result = self.getvalue()
            super().close()

    sink = Sink()
    seen = []

    def factory(data):
        seen.append(data.status_code)
        return sink

    greenhttp.stream(server.origin + "/s", factory)
    assert seen == [200]
    assert sink.result == b"streamed body"
    assert server.requests[0].target == "/s"


def test_pipeline(make_server):
    server = make_server(echo_target)
    duplex = greenhttp.pipeline(server.origin + "/pp", lambda data: data.body, method="POST")
    duplex.write(b"in")
    duplex.end()
    assert b"".join(duplex) == b"POST /pp in"


def test_upgrade(make_server):
    def handler(conn):
        req = conn.read_request()
        conn.send(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: %s\r\n\r\n"
            % req.header("upgrade").encode()
        )
        conn.send(req.target.encode())
        conn.wait_closed()

    server = make_server(handler)
    data = greenhttp.upgrade(server.origin + "/ws?room=1", protocol="chat")
    try:
        assert data.headers["upgrade"] == "chat"
        assert data.socket.recv(64) == b"/ws?room=1"
    finally:
        data.socket.close()


def test_connect_sends_the_target_as_given(make_server):
    def handler(conn):
        req = conn.read_head()
        conn.send(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        conn.send(f"{req.method} {req.target}".encode())
        conn.wait_closed()

    server = make_server(handler)
    data = greenhttp.connect(server.origin, path="example.com:443")
    try:
        assert data.status_code == 200
        assert data.socket.recv(64) == b"CONNECT example.com:443"
    finally:
        data.socket.close()


# -- URLs met again: split once (_global._SPLIT_URLS) ----------------------------------


def test_a_url_requested_again_goes_to_the_same_target(make_server):
    server = make_server(echo_target)
    url = server.origin + "/a/b?c=d"
    for _ in range(3):
        assert greenhttp.request(url).body.text() == "GET /a/b?c=d"
    # A path option still replaces the URL's path and query.
    assert greenhttp.request(url, path="x?y=1").body.text() == "GET /x?y=1"
    assert greenhttp.request(server.origin).body.text() == "GET /"
    assert server.accepted == 1


@pytest.mark.parametrize(
    "url",
    ["http://user:pw@127.0.0.1:1/", "ftp://127.0.0.1/", "http://[::1/", "http:///nohost"],
)
def test_a_bad_url_is_refused_every_time(url):
    for _ in range(2):
        with pytest.raises(errors.InvalidArgumentError):
            greenhttp.request(url)


def test_the_url_cache_stays_small(make_server):
    server = make_server(echo_target)
    for i in range(300):
        assert greenhttp.request(f"{server.origin}/?i={i}").body.text() == f"GET /?i={i}"
    assert len(_global._SPLIT_URLS) <= 256


def test_each_thread_gets_a_default_global_dispatcher_of_its_own(make_server):
    # A dispatcher belongs to the hub of the thread that runs it: one default shared
    # across threads hung a second thread's requests (or its close()). Each hub now
    # makes its own; one set with set_global_dispatcher() is still everyone's.
    server = make_server(serve_forever(b"hi"))
    main = greenhttp.get_global_dispatcher()
    assert greenhttp.request(server.origin + "/main").body.text() == "hi"

    def in_a_thread():
        hub = gevent.get_hub()
        try:
            mine = greenhttp.get_global_dispatcher()
            with gevent.Timeout(10):
                text = greenhttp.request(server.origin + "/thread").body.text()
                mine.close()
            return mine, hub, text
        finally:
            hub.destroy(destroy_loop=True)  # its loop's descriptors with it

    mine, hub, text = gevent.get_hub().threadpool.apply(in_a_thread)
    assert text == "hi"
    assert isinstance(mine, greenhttp.Agent) and mine is not main and mine.destroyed
    assert _global._defaults.pop(hub) is mine
    assert greenhttp.get_global_dispatcher() is main  # this thread's is unchanged
