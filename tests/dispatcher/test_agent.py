"""Agent: routing by origin, max_origins, events, idle cleanup, lifecycle."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import gevent
import gevent.event
import gevent.socket as gsocket
import pytest

import greenhttp
from greenhttp import errors
from testkit import serve_forever, wait_for


@pytest.fixture
def make_agent():
    """``make_agent(**options)``: Agents destroyed at teardown."""
    agents: list[greenhttp.Agent] = []

    def make(**options):
        a = greenhttp.Agent(**options)
        agents.append(a)
        return a

    yield make
    for a in agents:
        with gevent.Timeout(5):
            a.destroy()


def get(agent, origin, path="/", **options):
    return agent.request(origin=origin, path=path, method="GET", **options).body.bytes()


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# -- options and the origin option -------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"max_origins": 0}, "max_origins"),
        ({"max_origins": -2}, "max_origins"),
        ({"max_origins": "3"}, "max_origins"),
        ({"max_origins": True}, "max_origins"),
        ({"factory": "nope"}, "factory"),
        ({"connections": -1}, "connections"),
        ({"client_ttl": -1}, "client_ttl"),
        ({"body_timeout": -1}, "body_timeout"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_invalid_options_name_the_option(options, name):
    with pytest.raises(errors.InvalidArgumentError, match=name):
        greenhttp.Agent(**options)


@pytest.mark.parametrize("origin", [None, "", 42, b"http://h"])
def test_origin_is_required(make_agent, origin):
    agent = make_agent()
    with pytest.raises(errors.InvalidArgumentError, match="origin must be a non-empty string or URL"):
        agent.request(origin=origin, path="/")
    if origin is None:
        with pytest.raises(errors.InvalidArgumentError, match="origin must be a non-empty string or URL"):
            agent.request(path="/")


@pytest.mark.parametrize("origin", ["ftp://h", "http://h/a/path", "not a url"])
def test_an_origin_that_is_not_an_origin(make_agent, origin):
    agent = make_agent()
    with pytest.raises(errors.InvalidArgumentError):
        agent.request(origin=origin, path="/")
    assert agent.stats == {}


# -- routing ------------------------------------------------------------------------------------


def test_routes_each_origin_to_its_own_pool(make_server, make_agent):
    a = make_server(serve_forever(b"A"))
    b = make_server(serve_forever(b"B"))
    agent = make_agent()
    assert get(agent, a.origin) == b"A"
    assert get(agent, b.origin, "/x") == b"B"
    assert get(agent, a.origin) == b"A"
    stats = agent.stats
    assert set(stats) == {a.origin, b.origin}
    assert all(isinstance(s, greenhttp.PoolStats) for s in stats.values())
    assert a.accepted == 1 and b.accepted == 1
    assert b.requests[0].target == "/x"


def test_spellings_of_one_origin_share_a_dispatcher(make_server, make_agent):
    server = make_server(serve_forever())
    agent = make_agent()
    for origin in (server.origin, server.origin + "/", f"HTTP://127.0.0.1:{server.port}", urlsplit(server.origin)):
        assert get(agent, origin) == b"hello"
    assert list(agent.stats) == [server.origin]
    assert server.accepted == 1


def test_an_internationalized_host_is_sent_in_its_ascii_form(make_server, make_agent):
    # As the original's URL parser: a non-ASCII host is converted to its IDNA
    # ("xn--") form. Before, "caf\u00e9" went into the Host line as a raw latin-1
    # byte, had a dispatcher of its own, and "\u20ac" raised UnicodeEncodeError.
    server = make_server(serve_forever())
    hostnames = []

    def to_server(options, callback):
        hostnames.append(options["hostname"])
        callback(None, gsocket.create_connection(("127.0.0.1", server.port)))

    agent = make_agent(connect=to_server)
    with gevent.Timeout(5):
        for origin in ("http://caf\u00e9.example", "http://CAF\u00c9.example", "http://xn--caf-dma.example"):
            assert get(agent, origin) == b"hello"
            assert server.requests[-1].header("host") == "xn--caf-dma.example"
        assert list(agent.stats) == ["http://xn--caf-dma.example"]
        assert get(agent, "http://\u20ac.example:81") == b"hello"
        assert server.requests[-1].header("host") == "xn--lzg.example:81"
    assert hostnames == ["xn--caf-dma.example", "xn--lzg.example"]
    with pytest.raises(errors.InvalidArgumentError, match="origin"):
        agent.request(origin="http://a..\u00e9/", path="/")


def test_connections_one_makes_clients(make_server, make_agent):
    server = make_server(serve_forever())
    agent = make_agent(connections=1)
    get(agent, server.origin)
    (stats,) = agent.stats.values()
    assert isinstance(stats, greenhttp.ClientStats)


def test_pool_options_reach_every_pool(make_server, make_agent):
    release = gevent.event.Event()

    def handler(conn):
        while conn.read_request() is not None:
            release.wait(5)
            conn.respond(b"x")

    server = make_server(handler)
    agent = make_agent(connections=2)
    greenlets = [gevent.spawn(get, agent, server.origin, f"/{i}") for i in range(5)]
    wait_for(lambda: getattr(agent.stats.get(server.origin), "queued", 0) == 3, what="three queued")
    release.set()
    gevent.joinall(greenlets, timeout=10, raise_error=True)
    # (Counted at the end: the server may not have accepted both sockets yet when
    # the client has queued the other three requests.)
    assert server.accepted == 2


def test_custom_factory(make_server, make_agent):
    server = make_server(serve_forever())
    made = []

    def factory(origin, **options):
        made.append((origin, options))
        return greenhttp.Client(origin, **options)

    agent = make_agent(factory=factory, keep_alive_timeout=9.0)
    get(agent, server.origin + "/")
    get(agent, server.origin)
    assert made == [(server.origin, {"keep_alive_timeout": 9.0})]


def test_allow_h2_false_gets_its_own_dispatcher(make_server, make_agent):
    server = make_server(serve_forever())
    agent = make_agent()
    get(agent, server.origin)
    get(agent, server.origin, allow_h2=False)
    get(agent, urlsplit(server.origin), allow_h2=False)
    assert set(agent.stats) == {server.origin, server.origin + "#http1-only"}
    assert server.accepted == 2
    with pytest.raises(errors.InvalidArgumentError):
        get(agent, server.origin + "#http1-only")  # a stats key is not an origin


def test_max_origins(make_server, make_agent):
    a = make_server(serve_forever(b"A"))
    b = make_server(serve_forever(b"B"))
    agent = make_agent(max_origins=1)
    assert get(agent, a.origin) == b"A"
    with pytest.raises(errors.MaxOriginsReachedError) as info:
        get(agent, b.origin)
    assert info.value.code == "GH_ERR_MAX_ORIGINS_REACHED"
    assert get(agent, a.origin + "/") == b"A"  # the same origin is still fine


def test_max_origins_frees_up_when_an_origin_is_forgotten(make_server, make_agent):
    def closing(conn):
        conn.read_request()
        conn.respond(b"A", headers=[("Connection", "close")])
        conn.close()

    a = make_server(closing)
    b = make_server(serve_forever(b"B"))
    agent = make_agent(max_origins=1)
    assert get(agent, a.origin) == b"A"
    wait_for(lambda: agent.stats == {}, what="the idle origin to be forgotten")
    assert get(agent, b.origin) == b"B"


# -- events ------------------------------------------------------------------------------------


def test_events_carry_the_agent_first_and_the_client_last(make_server, make_agent):
    def handler(conn):
        conn.read_request()
        conn.respond(b"x", headers=[("Connection", "close")])
        conn.close()

    server = make_server(handler)
    agent = make_agent()
    events = []
    agent.on("connect", lambda origin, targets: events.append(("connect", origin, targets)))
    agent.on("disconnect", lambda origin, targets, err: events.append(("disconnect", origin, targets)))
    get(agent, server.origin)
    wait_for(lambda: len(events) == 2, what="connect and disconnect")
    (k1, o1, t1), (k2, o2, t2) = events
    assert (k1, o1, k2, o2) == ("connect", server.origin, "disconnect", server.origin)
    assert t1[0] is agent and isinstance(t1[1], greenhttp.Pool) and isinstance(t1[2], greenhttp.Client)
    assert t2 == t1


@pytest.mark.parametrize("listen", ["before the origin", "after the origin"])
def test_drain_is_forwarded(make_server, make_agent, listen):
    # The agent forwards its origins' drain once somebody listens to its own: a
    # listener added when the origin's dispatcher already exists hears it too.
    release = gevent.event.Event()
    release.set()

    def handler(conn):
        while conn.read_request() is not None:
            release.wait(5)
            conn.respond(b"x")

    server = make_server(handler)
    agent = make_agent(connections=1)
    drains = []

    def on_drain(origin, targets):
        drains.append((origin, targets))

    if listen == "before the origin":
        agent.on("drain", on_drain)
    else:
        assert get(agent, server.origin) == b"x"  # the origin's Client exists now
        agent.once("drain", on_drain)
    release.clear()
    done = gevent.event.Event()

    class H:
        def on_response_end(self, controller, trailers):
            done.set()

        def on_response_error(self, controller, err):
            done.set()

    assert agent.dispatch({"origin": server.origin, "path": "/", "method": "GET"}, H()) is False
    release.set()
    assert done.wait(5)
    wait_for(lambda: drains, what="drain")
    origin, targets = drains[0]
    assert origin == server.origin
    assert targets[0] is agent and isinstance(targets[-1], greenhttp.Client)


def test_a_failing_origin_is_forgotten(make_agent):
    agent = make_agent()
    errs = []
    agent.on("connectionError", lambda origin, targets, err: errs.append((origin, targets[0], err)))
    origin = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(ConnectionRefusedError):
        get(agent, origin)
    assert errs and errs[0][0] == origin and errs[0][1] is agent
    wait_for(lambda: agent.stats == {}, what="the failing origin to be forgotten")


# -- compose and lifecycle -------------------------------------------------------------------


def test_compose_interceptors_see_requests(make_server, make_agent):
    server = make_server(serve_forever())
    agent = make_agent()
    seen = []

    def spy(dispatch):
        def spied(options, handler):
            seen.append((options["origin"], options["path"]))
            return dispatch(options, handler)

        return spied

    composed = agent.compose(spy)
    assert composed.request(origin=server.origin, path="/c").body.bytes() == b"hello"
    assert seen == [(server.origin, "/c")]


def test_close_fans_out_and_then_refuses(make_server, make_agent):
    a = make_server(serve_forever(b"A"))
    b = make_server(serve_forever(b"B"))
    agent = make_agent()
    get(agent, a.origin)
    get(agent, b.origin)
    agent.close()
    assert agent.closed and agent.destroyed
    assert agent.stats == {}
    assert a.conns[0].eof.wait(5) and b.conns[0].eof.wait(5)
    with pytest.raises(errors.ClientDestroyedError):
        get(agent, a.origin)
    with pytest.raises(errors.ClientDestroyedError):  # REFERENCE §1.9: a finished close destroyed it
        agent.close()


def test_destroy_fails_running_requests(make_server, make_agent):
    release = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        release.wait(5)

    server = make_server(handler)
    agent = make_agent()

    def attempt():
        try:
            return get(agent, server.origin)
        except Exception as exc:
            return exc

    g = gevent.spawn(attempt)
    wait_for(lambda: server.requests, what="the request at the server")
    boom = RuntimeError("boom")
    agent.destroy(boom)
    assert g.get(timeout=5) is boom
    release.set()
    with pytest.raises(errors.ClientDestroyedError):
        agent.close()


def test_close_with_callback(make_server, make_agent):
    server = make_server(serve_forever())
    agent = make_agent()
    get(agent, server.origin)
    done = gevent.event.AsyncResult()
    agent.close(callback=lambda err, value: done.set((err, value)))
    assert done.get(timeout=5) == (None, None)


class _CountingClient(greenhttp.Client):
    """A pool member counting how often its stats are read."""

    reads = 0

    @property
    def stats(self):
        type(self).reads += 1
        return super().stats


def test_a_storm_of_disconnects_does_not_read_every_members_stats_at_each_one(make_server):
    # An Agent decides at each disconnect whether the origin's Pool is idle. It read the
    # Pool's stats, which visit every member: N disconnects at once cost N² (3,000
    # keep-alive connections expiring together froze the hub for seconds).
    n = 60
    server = make_server(serve_forever(b"ok"))
    _CountingClient.reads = 0
    agent = greenhttp.Agent(
        factory=lambda origin, **opts: greenhttp.Pool(origin, factory=_CountingClient, **opts),
        keep_alive_timeout=0.2,
    )
    gone = []
    all_gone = gevent.event.Event()

    def on_disconnect(origin, targets, err=None):
        gone.append(origin)
        if len(gone) == n:
            all_gone.set()

    agent.on("disconnect", on_disconnect)
    try:
        jobs = [gevent.spawn(agent.request, origin=server.origin, path="/") for _ in range(n)]
        gevent.joinall(jobs, timeout=10, raise_error=True)
        for job in jobs:
            assert job.value.body.text() == "ok"
        assert server.accepted == n  # one connection each: all were asked for at once
        assert all_gone.wait(10), f"{len(gone)} of {n} connections closed"
        assert _CountingClient.reads < n  # not n * n / 2
        assert agent._dispatchers == {}  # and the idle Pool was still forgotten
    finally:
        with gevent.Timeout(5):
            agent.destroy()
