"""Audit: validation of public options and arguments (types, ranges, defaults, messages)."""

from __future__ import annotations

import io
import math

import gevent
import gevent.event
import pytest

import greenhttp
from greenhttp import _global
from greenhttp.errors import InvalidArgumentError
from testkit import serve_forever

URL = "http://127.0.0.1:1"  # never connected to: constructors are lazy


# -- Client ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, value",
    [
        ("body_timeout", math.nan),
        ("body_timeout", math.inf),
        ("headers_timeout", "1"),
        ("connect_timeout", True),
        ("keep_alive_timeout", 0),
        ("keep_alive_max_timeout", -1.0),
        ("keep_alive_timeout_threshold", math.nan),
        ("pipelining", 1.0),
        ("pipelining", -1),
        ("max_header_size", 0),
        ("max_response_size", -2),
        ("max_requests_per_client", -1),
        ("max_concurrent_streams", 0),
        ("initial_window_size", 0),
        ("initial_window_size", 2**31),
        ("connection_window_size", 2**31),
        ("connection_window_size", 2**40),
        ("ping_interval", math.nan),
        ("allow_h2", 1),
        ("local_address", "localhost"),
        ("socket_path", 1),
        ("max_cached_sessions", 1.5),
    ],
)
def test_client_refuses_bad_option_naming_it_and_value(name, value):
    with pytest.raises(InvalidArgumentError) as ei:
        greenhttp.Client(URL, **{name: value})
    assert name in str(ei.value)
    assert repr(value) in str(ei.value) or str(value) in str(ei.value)


def test_window_sizes_accept_the_rfc_maximum():
    # RFC 9113 §6.5.2/§6.9.1: 2**31 - 1 is the largest legal window.
    with greenhttp.Client(URL, use_h2c=True, initial_window_size=2**31 - 1, connection_window_size=2**31 - 1) as c:
        assert c.closed is False


@pytest.mark.parametrize("name", ["pipelining", "max_requests_per_client", "body_timeout", "headers_timeout",
                                  "connect_timeout", "ping_interval"])
def test_client_zero_means_disabled_is_accepted(name):
    with greenhttp.Client(URL, **{name: 0}) as c:
        assert c.closed is False


@pytest.mark.parametrize("name", ["keep_alive", "socket_timeout", "request_timeout", "idle_timeout",
                                  "max_keep_alive_timeout", "tls"])
def test_client_removed_option_points_to_replacement(name):
    with pytest.raises(InvalidArgumentError, match=rf"unsupported {name}, "):
        greenhttp.Client(URL, **{name: 1})


@pytest.mark.parametrize("ctor", [greenhttp.Client, greenhttp.Pool, greenhttp.H2CClient])
def test_unknown_constructor_option_is_refused(ctor):
    with pytest.raises(InvalidArgumentError, match="bogus"):
        ctor(URL, bogus=1)


# -- interceptors --------------------------------------------------------------


def test_cache_by_default_refuses_nan():
    # NaN passed the "< 0" check and then cached forever in MemoryCacheStore but
    # never in SqliteCacheStore: it is no number of seconds.
    with pytest.raises(InvalidArgumentError, match=r"cache_by_default .* got nan"):
        greenhttp.interceptors.cache(cache_by_default=math.nan)


@pytest.mark.parametrize("value", [0, 0.5, 60, math.inf])
def test_cache_by_default_accepts_non_negative_seconds(value):
    assert callable(greenhttp.interceptors.cache(cache_by_default=value))


# -- module-level functions and dispatcher= --------------------------------------


class OnlyDispatch:
    """A dispatcher with dispatch() and nothing else: all set_global_dispatcher() asks for."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = 0

    def dispatch(self, options, handler):
        self.calls += 1
        return self.inner.dispatch(options, handler)


def test_module_functions_work_with_a_dispatch_only_dispatcher(make_server):
    server = make_server(serve_forever(b"mine"))
    with greenhttp.Agent() as agent:
        d = OnlyDispatch(agent)
        with gevent.Timeout(5):
            assert greenhttp.request(server.origin + "/", dispatcher=d).body.bytes() == b"mine"
            chunks = []
            sink = type("Sink", (), {"write": lambda self, b: chunks.append(b)})()
            greenhttp.stream(server.origin + "/", lambda data: sink, dispatcher=d)
            assert b"".join(chunks) == b"mine"
            duplex = greenhttp.pipeline(server.origin + "/", lambda data: data.body, method="POST", dispatcher=d)
            duplex.end(b"x")
            assert duplex.read() == b"mine"
        assert d.calls == 3


def test_global_dispatch_only_dispatcher_serves_module_request(make_server):
    server = make_server(serve_forever(b"global"))
    saved = _global._global_dispatcher
    with greenhttp.Agent() as agent:
        d = OnlyDispatch(agent)
        try:
            greenhttp.set_global_dispatcher(d)  # accepted: it has dispatch()
            with gevent.Timeout(5):
                assert greenhttp.request(server.origin + "/").body.bytes() == b"global"
        finally:
            _global._global_dispatcher = saved
        assert d.calls == 1


@pytest.mark.parametrize("bad", [1, "http://x", object(), greenhttp.Agent])
@pytest.mark.parametrize("fn", ["request", "stream", "upgrade", "connect"])
def test_module_functions_refuse_a_non_dispatcher(fn, bad):
    args = (lambda data: io.BytesIO(),) if fn == "stream" else ()
    with pytest.raises(InvalidArgumentError, match=r"dispatcher must have a dispatch\(options, handler\) method"):
        getattr(greenhttp, fn)("http://127.0.0.1:1/", *args, dispatcher=bad)


# -- Pool, Agent, H2CClient, build_connector: refusals leave nothing behind ----------


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: greenhttp.Pool(URL, connections=-1), "connections"),
        (lambda: greenhttp.Pool(URL, connections=1.5), "connections"),
        (lambda: greenhttp.Pool(URL, client_ttl=math.nan), "client_ttl"),
        (lambda: greenhttp.Pool(URL, factory=1), "factory"),
        (lambda: greenhttp.Pool(URL, connections=2, body_timeout=-1), "body_timeout"),
        (lambda: greenhttp.Agent(max_origins=0), "max_origins"),
        (lambda: greenhttp.Agent(max_origins=math.inf), "max_origins"),
        (lambda: greenhttp.Agent(connect={"timeout": math.nan}), "timeout"),
        (lambda: greenhttp.Agent(connect={"bogus": 1}), "bogus"),
        (lambda: greenhttp.H2CClient(URL, pipelining=101), "pipelining"),
        (lambda: greenhttp.H2CClient("https://127.0.0.1:1"), "http:"),
        (lambda: greenhttp.H2CClient(URL, use_h2c=False), "use_h2c"),
        (lambda: greenhttp.build_connector(timeout=math.inf), "timeout"),
        (lambda: greenhttp.build_connector(max_cached_sessions=True), "max_cached_sessions"),
        (lambda: greenhttp.build_connector(port=0), "port"),
        (lambda: greenhttp.build_connector(bogus=1), "bogus"),
    ],
)
def test_dispatcher_and_connector_refusals(make, match):
    with pytest.raises(InvalidArgumentError, match=match):
        make()


@pytest.mark.parametrize(
    "make",
    [
        lambda: greenhttp.Pool(URL, connections=0),  # 0: unlimited
        lambda: greenhttp.Pool(URL, connections=None, client_ttl=0),
        lambda: greenhttp.Agent(max_origins=1),
        lambda: greenhttp.H2CClient(URL, pipelining=100),
    ],
)
def test_dispatcher_valid_edges(make):
    with make() as d:
        assert d.closed is False


def test_build_connector_timeout_zero_disables():
    assert callable(greenhttp.build_connector(timeout=0))


# -- interceptor factories ----------------------------------------------------------


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: greenhttp.interceptors.dump(max_size=0), "max_size"),
        (lambda: greenhttp.interceptors.dump(max_size=math.inf), "max_size"),
        (lambda: greenhttp.interceptors.retry(max_retries=True), "max_retries"),
        (lambda: greenhttp.interceptors.retry(min_timeout=math.nan), "min_timeout"),
        (lambda: greenhttp.interceptors.retry(timeout_factor=0), "timeout_factor"),
        (lambda: greenhttp.interceptors.retry(methods="GET"), "methods"),
        (lambda: greenhttp.interceptors.retry(bogus=1), "bogus"),
        (lambda: greenhttp.interceptors.redirect(max_redirections=-1), "max_redirections"),
        (lambda: greenhttp.interceptors.redirect(throw_on_max_redirect=1), "throw_on_max_redirect"),
        (lambda: greenhttp.interceptors.redirect(strip_headers_on_redirect="x"), "strip_headers_on_redirect"),
        (lambda: greenhttp.interceptors.decompress(skip_error_responses=1), "skip_error_responses"),
        (lambda: greenhttp.interceptors.decompress(max_ratio=math.nan), "max_ratio"),
        (lambda: greenhttp.interceptors.response_error(bogus=1), "bogus"),
        (lambda: greenhttp.interceptors.dns(max_ttl=math.nan), "max_ttl"),
        (lambda: greenhttp.interceptors.dns(max_items=0), "max_items"),
        (lambda: greenhttp.interceptors.dns(affinity=True), "affinity"),
        (lambda: greenhttp.interceptors.cache(store=1), "store"),
        (lambda: greenhttp.interceptors.cache(methods=["POST"]), "methods"),
        (lambda: greenhttp.interceptors.cache(type=None), "type"),
        (lambda: greenhttp.interceptors.deduplicate(max_buffer_size=0), "max_buffer_size"),
        (lambda: greenhttp.cache_stores.MemoryCacheStore(max_size=math.nan), "max_size"),
        (lambda: greenhttp.cache_stores.SqliteCacheStore(max_entry_size=True), "max_entry_size"),
    ],
)
def test_interceptor_factory_refusals(make, match):
    with pytest.raises(InvalidArgumentError, match=match):
        make()


# -- request options --------------------------------------------------------------


@pytest.mark.parametrize(
    "name, value",
    [
        ("headers_timeout", math.nan),
        ("body_timeout", math.inf),
        ("headers_timeout", True),
        ("reset", 1),
        ("expect_continue", "yes"),
        ("type_of_service", 256),
        ("high_water_mark", 1.5),
        ("upgrade", True),
        ("max_redirections", 1),
        ("throw_on_error", False),
    ],
)
def test_request_option_refused_before_connecting(make_server, name, value):
    server = make_server(serve_forever())
    with greenhttp.Client(server.origin) as c, gevent.Timeout(5):
        with pytest.raises(InvalidArgumentError, match=name):
            c.request(path="/", method="GET", **{name: value})
        assert c.request(path="/", method="GET").body.bytes() == b"hello"
    assert len(server.requests) == 1  # the refused one never reached the wire


def test_pipeline_option_error_surfaces_from_the_duplex(make_server):
    # As the original (its duplex is destroyed with the error), pipeline() returns at
    # once and the bad option's error comes out of read().
    server = make_server(serve_forever())
    with greenhttp.Client(server.origin) as c, gevent.Timeout(5):
        duplex = c.pipeline(path="/", method="CONNECT", handler=lambda data: data.body)
        with pytest.raises(InvalidArgumentError, match="CONNECT"):
            duplex.read()
    assert server.requests == []


@pytest.mark.parametrize("connect, match", [({"bogus": 1}, "bogus"), ({"timeout": math.nan}, "timeout"),
                                            ({"max_cached_sessions": -1}, "max_cached_sessions")])
def test_agent_checks_its_connect_dict_at_construction(connect, match):
    # Client and Pool refused these at once; Agent only at each origin's first request.
    with pytest.raises(InvalidArgumentError, match=match):
        greenhttp.Agent(connect=connect)


# -- URLs: the WHATWG parser drops C0 controls and spaces at both ends -------------


@pytest.mark.parametrize("url", [" http://127.0.0.1:1", "http://127.0.0.1:1 ", "\thttp://127.0.0.1:1/\n", "http://127.0.0.1:1\x00"])
def test_origin_surrounding_whitespace_is_dropped(url):
    with greenhttp.Client(url) as c:
        assert c.origin == "http://127.0.0.1:1"


def test_module_request_url_trailing_whitespace_is_dropped(make_server):
    server = make_server(serve_forever(b"trimmed"))
    with greenhttp.Agent() as agent, gevent.Timeout(5):
        r = greenhttp.request(server.origin + "/a?b=1 \r\n", dispatcher=agent)
        assert r.body.bytes() == b"trimmed"
    assert server.requests[0].target == "/a?b=1"


# -- per-request interceptor options ------------------------------------------------


@pytest.mark.parametrize(
    "dns, match",
    [
        (1, "dns must be a dict"),
        ({"affinity": 5}, "dns.affinity"),
        ({"affinity": True}, "dns.affinity"),
        ({"dual_stack": "no"}, "dns.dual_stack"),
        ({"lookup": 1}, "dns.lookup"),
        ({"pick": 1}, "dns.pick"),
        ({"max_ttl": 5}, "unknown dns option 'max_ttl'"),
    ],
)
def test_dns_per_request_overrides_are_checked(make_server, dns, match):
    # dns() checks affinity, dual_stack, lookup and pick; the same names per request
    # were used unchecked (pick=1 failed with a bare TypeError, affinity=5 was ignored).
    server = make_server(serve_forever(b"dns"))
    origin = f"http://localhost:{server.port}"
    with greenhttp.Agent() as agent, gevent.Timeout(5):
        d = agent.compose(greenhttp.interceptors.dns())
        with pytest.raises(InvalidArgumentError, match=match):
            d.request(origin=origin, path="/", method="GET", dns=dns)
        assert d.request(origin=origin, path="/", method="GET", dns={"affinity": 4}).body.bytes() == b"dns"
    assert len(server.requests) == 1


# -- close() and destroy() arguments ------------------------------------------------


def _hold(conn):
    conn.read_request()
    conn.eof.wait(5)  # never answers; the client's destroy() ends it


@pytest.mark.parametrize("kind", ["client", "pool", "agent"])
@pytest.mark.parametrize("err", ["boom", 1])
def test_destroy_refuses_an_err_that_is_no_exception(make_server, kind, err):
    # Requests used to fail with "TypeError: exceptions must derive from BaseException".
    server = make_server(_hold)
    d = {"client": lambda: greenhttp.Client(server.origin), "pool": lambda: greenhttp.Pool(server.origin),
         "agent": greenhttp.Agent}[kind]()
    with gevent.Timeout(5):
        g = gevent.spawn(d.request, origin=server.origin, path="/", method="GET")
        connected = gevent.event.Event()
        d.on("connect", lambda *a: connected.set())
        connected.wait(5)
        with pytest.raises(InvalidArgumentError, match=rf"err must be an exception or None, got {err!r}"):
            d.destroy(err)
        assert not g.ready()
        d.destroy(ValueError("real"))
        with pytest.raises(ValueError, match="real"):
            g.get()


@pytest.mark.parametrize("method", ["close", "destroy"])
def test_client_close_and_destroy_refuse_a_non_callable_callback(method):
    # Pool and Agent refused it; Client accepted it and failed later in a greenlet.
    with greenhttp.Client(URL) as c:
        with pytest.raises(InvalidArgumentError, match="callback must be callable, got 1"):
            getattr(c, method)(callback=1)
        assert c.closed is False


# -- header values --------------------------------------------------------------------


def test_none_header_value_is_empty_alone_and_in_a_list(make_server):
    # A lone None was sent as an empty value but dropped inside a list; the original
    # sends null as "" in both places.
    server = make_server(serve_forever())
    with greenhttp.Client(server.origin) as c, gevent.Timeout(5):
        c.request(path="/", method="GET", headers={"x-a": None, "x-b": ["1", None, 2]}).body.dump()
    req = server.requests[0]
    assert req.header_list("x-a") == [""]
    assert req.header_list("x-b") == ["1", "", "2"]


# -- WebSocket, WebSocketStream, ping, cookies --------------------------------------


@pytest.mark.parametrize(
    "protocols, name",
    [("a b", "SyntaxError"), (["chat", "CHAT"], "SyntaxError"), ([""], "SyntaxError"), (1, "SyntaxError")],
)
def test_websocket_bad_protocols_raise_syntax_error_and_connect_nothing(protocols, name):
    with pytest.raises(greenhttp.DOMException) as ei:
        greenhttp.WebSocket("ws://127.0.0.1:1/", protocols)
    assert ei.value.name == name


@pytest.mark.parametrize("init, exc", [({"bogus": 1}, TypeError), ({"dispatcher": 1}, InvalidArgumentError),
                                       ({"headers": {"a\n": "b"}}, InvalidArgumentError)])
def test_websocket_init_refusals(init, exc):
    with pytest.raises(exc):
        greenhttp.WebSocket("ws://127.0.0.1:1/", init)


@pytest.mark.parametrize("code", [999, 1005, 2999, 5000])
def test_websocket_close_code_range(code):
    ws = greenhttp.WebSocket("ws://127.0.0.1:1/")
    try:
        with pytest.raises(greenhttp.DOMException) as ei:
            ws.close(code)
        assert ei.value.name == "InvalidAccessError"
    finally:
        ws.close()


def test_websocket_close_reason_limit_is_123_utf8_bytes():
    ws = greenhttp.WebSocket("ws://127.0.0.1:1/")
    try:
        with pytest.raises(greenhttp.DOMException) as ei:
            ws.close(1000, "é" * 62)  # 124 bytes
        assert ei.value.name == "SyntaxError"
        ws.close(1000, "x" * 123)
    finally:
        ws.close()


@pytest.mark.parametrize("payload, match", [(b"x" * 126, "larger than 125"), ("text", "buffer")])
def test_ping_payload_checks(payload, match):
    ws = greenhttp.WebSocket("ws://127.0.0.1:1/")
    try:
        with pytest.raises(TypeError, match=match):
            greenhttp.ping(ws, payload)
        greenhttp.ping(ws, b"x" * 125)  # not open: a no-op
    finally:
        ws.close()


@pytest.mark.filterwarnings("ignore::greenhttp.ExperimentalWarning")
def test_websocket_stream_option_refusals():
    with pytest.raises(TypeError, match="signal"):
        greenhttp.WebSocketStream("ws://127.0.0.1:1/", signal=1)
    with pytest.raises(greenhttp.DOMException):
        greenhttp.WebSocketStream("ws://127.0.0.1:1/", protocols=["a", "a"])
    with pytest.raises(greenhttp.DOMException) as ei:
        greenhttp.WebSocketError("x", {"close_code": 999})
    assert ei.value.name == "InvalidAccessError"


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"max_age": -1}, "max_age"),
        ({"max_age": 1.5}, "max_age"),
        ({"max_age": True}, "max_age"),
        ({"expires": math.nan}, "expires"),
        ({"same_site": "bogus"}, "same_site"),
        ({"path": "/;x"}, "path"),
        ({"value": "a;b"}, "value"),
    ],
)
def test_set_cookie_field_refusals(fields, match):
    cookie = greenhttp.Cookie(**{"name": "a", "value": "b", **fields})
    with pytest.raises(InvalidArgumentError, match=match):
        greenhttp.set_cookie(greenhttp.Headers(), cookie)


def test_cookie_helpers_refuse_wrong_containers():
    with pytest.raises(TypeError):
        greenhttp.set_cookie({}, greenhttp.Cookie(name="a", value="b"))
    with pytest.raises(TypeError):
        greenhttp.parse_cookie(None)
    with pytest.raises(InvalidArgumentError, match="cookie name"):
        greenhttp.delete_cookie(greenhttp.Headers(), "a b")


def test_connector_refuses_a_non_callable_callback_before_connecting(make_server):
    # It used to connect, then fail calling the callback, leaving the socket open.
    server = make_server(serve_forever())
    connector = greenhttp.build_connector()
    with gevent.Timeout(5), pytest.raises(InvalidArgumentError, match="callback must be callable, got 1"):
        connector({"hostname": "127.0.0.1", "protocol": "http:", "port": server.port}, 1)
    assert server.accepted == 0


@pytest.mark.parametrize("ctor", [greenhttp.Client, greenhttp.Pool])
def test_connect_allow_h2_decides_unless_it_contradicts_allow_h2(ctor):
    # connect's allow_h2 is the client's (as the original's connect options come last);
    # given both, different, is refused. (What ALPN offers: test_client_connector.py.)
    with pytest.raises(InvalidArgumentError, match=r"connect.allow_h2 \(False\) contradicts allow_h2 \(True\)"):
        ctor("https://127.0.0.1:1", allow_h2=True, connect={"allow_h2": False})
    with pytest.raises(InvalidArgumentError, match="connect.allow_h2 must be a boolean, got 1"):
        ctor("https://127.0.0.1:1", connect={"allow_h2": 1})
    with pytest.raises(InvalidArgumentError, match="connect.allow_h2"):
        greenhttp.Agent(allow_h2=True, connect={"allow_h2": False})
    with ctor("https://127.0.0.1:1", allow_h2=False, connect={"allow_h2": False}) as d:  # consistent: fine
        assert d.closed is False


# -- unknown keyword arguments (docs/errors.md) --------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: greenhttp.Client(URL, bogus=1),
        lambda: greenhttp.Pool(URL, bogus=1),
        lambda: greenhttp.Agent(bogus=1),
        lambda: greenhttp.H2CClient(URL, bogus=1),
        lambda: greenhttp.build_connector(bogus=1),
        lambda: greenhttp.interceptors.retry(bogus=1),
        lambda: greenhttp.interceptors.response_error(bogus=1),
    ],
    ids=["Client", "Pool", "Agent", "H2CClient", "build_connector", "retry", "response_error"],
)
def test_an_unknown_option_of_an_options_mapping_is_an_invalid_argument_naming_it(make):
    with pytest.raises(InvalidArgumentError, match="bogus"):
        make()


@pytest.mark.parametrize(
    "make",
    [
        lambda: greenhttp.interceptors.redirect(bogus=1),
        lambda: greenhttp.interceptors.dump(bogus=1),
        lambda: greenhttp.interceptors.decompress(bogus=1),
        lambda: greenhttp.interceptors.dns(bogus=1),
        lambda: greenhttp.interceptors.cache(bogus=1),
        lambda: greenhttp.interceptors.deduplicate(bogus=1),
        lambda: greenhttp.cache_stores.MemoryCacheStore(bogus=1),
        lambda: greenhttp.WebSocket("ws://127.0.0.1:1", bogus=1),
    ],
    ids=["redirect", "dump", "decompress", "dns", "cache", "deduplicate", "MemoryCacheStore", "WebSocket"],
)
def test_an_unknown_keyword_of_a_fixed_signature_is_a_type_error_naming_it(make):
    with pytest.raises(TypeError, match="bogus"):
        make()
