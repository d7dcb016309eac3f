"""Audit: dispatchers together: compose() order, composed dispatchers, interceptor
chains, Pool events and lifecycle, Agent routing, the global dispatcher."""

from __future__ import annotations

import gzip

import gevent
import gevent.event
import pytest

import greenhttp
from greenhttp import _global, errors, interceptors


def routes(table):
    """A server handler answering by target: ``table[target] -> (status, headers, body)``."""

    def handler(conn):
        while (req := conn.read_request()) is not None:
            status, headers, body = table[req.target]
            conn.respond(body, status=status, headers=headers)

    return handler


def recording(log, name):
    def interceptor(dispatch):
        def wrapped(options, handler):
            log.append(name)
            return dispatch(options, handler)

        return wrapped

    return interceptor


# -- compose() ----------------------------------------------------------------------------


def test_compose_first_interceptor_is_outermost_and_composing_again_wraps_outside(make_server):
    server = make_server(routes({"/": ("200 OK", [], b"ok")}))
    log: list[str] = []
    with gevent.Timeout(5):
        pool = greenhttp.Pool(server.origin)
        composed = pool.compose(recording(log, "a"), recording(log, "b"))
        twice = composed.compose([recording(log, "c")])
        assert twice.request(path="/").body.bytes() == b"ok"
        # c wraps the composed dispatcher, whose first interceptor (a) is outside b.
        assert log == ["c", "a", "b"]
        twice.close()
        assert pool.closed and pool.destroyed


def test_compose_refuses_an_interceptor_that_returns_no_dispatch():
    pool = greenhttp.Pool("http://127.0.0.1:1")
    with pytest.raises(errors.InvalidArgumentError):
        pool.compose(lambda dispatch: None)
    with pytest.raises(errors.InvalidArgumentError):
        pool.compose(3)
    # None entries are skipped.
    assert pool.compose(None, recording([], "x")) is not None
    pool.destroy()


def test_destroy_through_a_composed_dispatcher_fails_queued_requests_with_err(make_server):
    gate = gevent.event.Event()

    def handler(conn):
        while (req := conn.read_request()) is not None:
            gate.wait(5)
            conn.respond(req.target.encode())

    server = make_server(handler)
    pool = greenhttp.Pool(server.origin, connections=1)
    composed = pool.compose(interceptors.dump())
    results: dict[str, object] = {}

    def one(path):
        try:
            results[path] = composed.request(path=path).body.bytes()
        except Exception as exc:
            results[path] = exc

    gs = [gevent.spawn(one, f"/{i}") for i in range(3)]
    with gevent.Timeout(5):
        while len(server.requests) < 1 or pool.stats.queued < 2:
            gevent.sleep(0.005)
        boom = RuntimeError("boom")
        composed.destroy(boom)
        gevent.joinall(gs, raise_error=True)
    gate.set()
    # The running request and the queued ones all fail with err (REFERENCE 1.9).
    assert results == {"/0": boom, "/1": boom, "/2": boom}
    assert pool.destroyed


# -- interceptor chains ----------------------------------------------------------------------


def test_redirect_answered_from_cache(make_server):
    table = {
        "/old": ("301 Moved Permanently", [("Location", "/new"), ("Cache-Control", "max-age=60")], b""),
        "/new": ("200 OK", [("Cache-Control", "max-age=60")], b"fresh"),
    }
    server = make_server(routes(table))
    with gevent.Timeout(5):
        agent = greenhttp.Agent().compose(interceptors.redirect(max_redirections=3), interceptors.cache())
        try:
            for _ in range(2):
                r = agent.request(origin=server.origin, path="/old")
                assert r.status_code == 200
                assert r.body.bytes() == b"fresh"
            # The second time both hops came from the cache.
            assert [q.target for q in server.requests] == ["/old", "/new"]
        finally:
            agent.close()


@pytest.mark.parametrize("dump_first", [True, False])
def test_dump_of_a_redirected_response(make_server, dump_first):
    # dump reads and discards the body (the original's dump interceptor), at every hop.
    table = {
        "/old": ("302 Found", [("Location", "/new")], b"moved"),
        "/new": ("200 OK", [("X-Final", "1")], b"x" * 1000),
    }
    server = make_server(routes(table))
    chain = [interceptors.dump(), interceptors.redirect(max_redirections=2)]
    if not dump_first:
        chain.reverse()
    with gevent.Timeout(5):
        agent = greenhttp.Agent().compose(*chain)
        try:
            r = agent.request(origin=server.origin, path="/old")
            assert (r.status_code, r.headers.get("x-final"), r.body.bytes()) == (200, "1", b"")
            assert [q.target for q in server.requests] == ["/old", "/new"]
            # The dumped bodies were read to their end: the connection is reused.
            assert agent.request(origin=server.origin, path="/new").status_code == 200
            assert len(server.requests) == 3
        finally:
            agent.close()


@pytest.mark.filterwarnings("ignore::greenhttp.ExperimentalWarning")
def test_decompress_before_or_after_cache(make_server):
    body = gzip.compress(b"hello " * 50)
    table = {"/z": ("200 OK", [("Content-Encoding", "gzip"), ("Cache-Control", "max-age=60")], body)}
    server = make_server(routes(table))
    with gevent.Timeout(5):
        for order in ("decompress-first", "cache-first"):
            server.requests.clear()
            store = greenhttp.cache_stores.MemoryCacheStore()
            chain = [interceptors.decompress(), interceptors.cache(store=store)]
            if order == "cache-first":
                chain.reverse()
            agent = greenhttp.Agent().compose(*chain)
            try:
                for _ in range(2):
                    r = agent.request(origin=server.origin, path="/z")
                    assert r.body.bytes() == b"hello " * 50, order
                assert len(server.requests) == 1, order
            finally:
                agent.close()


def test_retry_of_a_deduplicated_request_delivers_once_to_each_waiter(make_server):
    hits: list[str] = []

    def handler(conn):
        while (req := conn.read_request()) is not None:
            hits.append(req.target)
            if len(hits) == 1:
                gevent.sleep(0.05)  # both waiters join the one request
                conn.respond(b"", status="503 Service Unavailable", headers=[("Retry-After", "0")])
            else:
                conn.respond(b"second")

    server = make_server(handler)
    with gevent.Timeout(5):
        agent = greenhttp.Agent().compose(
            interceptors.deduplicate(), interceptors.retry(max_retries=2, min_timeout=0.01)
        )
        try:
            gs = [gevent.spawn(lambda: agent.request(origin=server.origin, path="/d").body.bytes()) for _ in range(2)]
            gevent.joinall(gs, raise_error=True)
            assert [g.value for g in gs] == [b"second", b"second"]
            assert hits == ["/d", "/d"]
        finally:
            agent.close()


# -- Pool -------------------------------------------------------------------------------------


def test_pool_events_arguments_and_order(make_server):
    server = make_server(routes({"/": ("200 OK", [], b"x")}))
    pool = greenhttp.Pool(server.origin, connections=1)
    events: list[tuple] = []
    pool.on("connect", lambda origin, targets: events.append(("connect", origin, targets)))
    pool.on("disconnect", lambda origin, targets, err: events.append(("disconnect", origin, targets, err)))
    pool.on("drain", lambda origin, targets=None: events.append(("drain", origin, targets)))
    with gevent.Timeout(5):
        gs = [gevent.spawn(lambda: pool.request(path="/").body.bytes()) for _ in range(3)]
        gevent.joinall(gs, raise_error=True)
        pool.close()
    names = [e[0] for e in events]
    assert names[0] == "connect" and names[-1] == "disconnect"
    assert "drain" in names
    for e in events:
        assert e[1] == server.origin
        assert e[2][0] is pool
        assert isinstance(e[2][1], greenhttp.Client)
    assert isinstance(events[-1][3], errors.GreenHTTPError)


def test_pool_connection_error_event_and_replacement(make_server):
    pool = greenhttp.Pool("http://127.0.0.1:1", connections=1)
    seen: list[tuple] = []
    pool.on("connectionError", lambda origin, targets, err: seen.append((origin, targets, err)))
    with gevent.Timeout(5):
        for _ in range(2):
            with pytest.raises(ConnectionRefusedError):
                pool.request(path="/")
        assert len(seen) == 2
        assert seen[0][0] == "http://127.0.0.1:1" and seen[0][1][0] is pool
        assert seen[0][1][1] is not seen[1][1][1]  # a failed member is not reused
        pool.close()


def test_pool_factory_gets_origin_and_options(make_server):
    server = make_server(routes({"/": ("200 OK", [], b"x")}))
    made: list[tuple] = []

    def factory(origin, **options):
        made.append((origin, options))
        return greenhttp.Client(origin, **options)

    pool = greenhttp.Pool(server.origin.upper().replace("HTTP", "http"), connections=2, factory=factory, pipelining=1)
    with gevent.Timeout(5):
        gs = [gevent.spawn(lambda: pool.request(path="/").body.bytes()) for _ in range(4)]
        gevent.joinall(gs, raise_error=True)
        assert len(made) == 2
        assert made[0][0] == server.origin
        assert made[0][1].get("pipelining") == 1
        pool.close()


def test_pool_close_waits_for_queued_requests_and_refuses_new_ones(make_server):
    server = make_server(routes({f"/{i}": ("200 OK", [], str(i).encode()) for i in range(4)}))
    pool = greenhttp.Pool(server.origin, connections=1)
    with gevent.Timeout(5):
        gs = [gevent.spawn(lambda i=i: pool.request(path=f"/{i}").body.bytes()) for i in range(4)]
        gevent.sleep(0)
        assert pool.stats.queued >= 1
        pool.close()
        assert [g.get() for g in gs] == [b"0", b"1", b"2", b"3"]
        assert [q.target for q in server.requests] == ["/0", "/1", "/2", "/3"]
        with pytest.raises(errors.ClientDestroyedError):
            pool.request(path="/0")


# -- Agent --------------------------------------------------------------------------------------


def test_agent_origin_spellings_share_one_dispatcher(make_server):
    server = make_server(routes({"/": ("200 OK", [], b"x")}))
    port = server.port
    made: list[str] = []

    def factory(origin, **options):
        made.append(origin)
        return greenhttp.Pool(origin, **options)

    agent = greenhttp.Agent(factory=factory)
    with gevent.Timeout(5):
        for origin in (f"http://LOCALHOST:{port}", f"http://localhost:{port}/", f"HTTP://localhost:{port}"):
            assert agent.request(origin=origin, path="/").body.bytes() == b"x"
        assert made == [f"http://localhost:{port}"]
        assert list(agent.stats) == [f"http://localhost:{port}"]
        agent.close()


def test_agent_default_port_spellings_share():
    agent = greenhttp.Agent(factory=lambda origin, **o: greenhttp.Pool(origin, **o))
    # Nothing listens: only the routing is checked, through stats.
    h = gevent.event.Event()

    class H:
        def on_request_start(self, c, ctx):
            pass

        def on_response_start(self, *a):
            pass

        def on_response_data(self, *a):
            pass

        def on_response_end(self, *a):
            h.set()

        def on_response_error(self, c, err):
            h.set()

    for origin in ("http://A.invalid:80", "http://a.invalid"):
        agent.dispatch({"origin": origin, "path": "/", "method": "GET"}, H())
    assert list(agent.stats) == ["http://a.invalid"]
    agent.destroy()


@pytest.mark.parametrize("origin", [None, "", 42, "ftp://x", "http://h/path"])
def test_agent_refuses_a_bad_origin(origin):
    agent = greenhttp.Agent()
    with gevent.Timeout(5), pytest.raises(errors.InvalidArgumentError):
        agent.request(origin=origin, path="/")
    agent.close()


def test_agent_close_and_destroy_reach_every_origin(make_server):
    s1 = make_server(routes({"/": ("200 OK", [], b"1")}))
    s2 = make_server(routes({"/": ("200 OK", [], b"2")}))
    agent = greenhttp.Agent()
    with gevent.Timeout(5):
        assert agent.request(origin=s1.origin, path="/").body.bytes() == b"1"
        assert agent.request(origin=s2.origin, path="/").body.bytes() == b"2"
        pools = list(agent._dispatchers.values())
        assert len(pools) == 2
        agent.close()
        assert all(p.destroyed for p in pools)
        with pytest.raises(errors.ClientDestroyedError):
            agent.request(origin=s1.origin, path="/")


# -- the global dispatcher --------------------------------------------------------------------


@pytest.fixture
def restore_global():
    before = _global._global_dispatcher  # (None: each hub's default)
    yield
    _global._global_dispatcher = before


@pytest.mark.parametrize("bad", [None, 3, object(), greenhttp.Agent])
def test_set_global_dispatcher_refuses_a_non_dispatcher(bad, restore_global):
    before = greenhttp.get_global_dispatcher()
    with pytest.raises(errors.InvalidArgumentError):
        greenhttp.set_global_dispatcher(bad)
    assert greenhttp.get_global_dispatcher() is before


def test_module_request_uses_a_composed_global_dispatcher(make_server, restore_global):
    server = make_server(routes({"/p?q=1": ("200 OK", [], b"g")}))
    log: list[str] = []
    agent = greenhttp.Agent()
    greenhttp.set_global_dispatcher(agent.compose(recording(log, "g")))
    with gevent.Timeout(5):
        assert greenhttp.request(server.origin + "/p?q=1").body.bytes() == b"g"
        assert log == ["g"]
        agent.close()


# -- more: stats, drain, composed members, agent lifecycle ----------------------------------


class Gated:
    """A server handler answering each request only once ``gate`` is set."""

    def __init__(self):
        self.gate = gevent.event.Event()

    def __call__(self, conn):
        while (req := conn.read_request()) is not None:
            self.gate.wait(5)
            conn.respond(req.target.encode())


class Handler:
    def __init__(self):
        self.done = gevent.event.Event()
        self.error = None
        self.body = b""
        self.ends = 0

    def on_request_start(self, controller, context):
        pass

    def on_response_start(self, controller, status_code, headers, status_message):
        pass

    def on_response_data(self, controller, chunk):
        self.body += chunk

    def on_response_end(self, controller, trailers):
        self.ends += 1
        self.done.set()

    def on_response_error(self, controller, err):
        self.error = err
        self.done.set()


def test_pool_stats_while_busy_and_drain_once(make_server):
    gated = Gated()
    server = make_server(gated)
    pool = greenhttp.Pool(server.origin, connections=2)
    drains: list[tuple] = []
    pool.on("drain", lambda origin, targets: drains.append((origin, targets)))
    handlers = [Handler() for _ in range(4)]
    with gevent.Timeout(5):
        answers = [pool.dispatch({"path": f"/{i}", "method": "GET"}, h) for i, h in enumerate(handlers)]
        assert answers[2:] == [False, False]
        assert pool.busy
        while len(server.requests) < 2:
            gevent.sleep(0.005)
        s = pool.stats
        assert (s.connected, s.free, s.queued, s.pending, s.running, s.size) == (2, 0, 2, 2, 2, 4)
        gated.gate.set()
        for h in handlers:
            h.done.wait()
        assert [h.body for h in handlers] == [b"/0", b"/1", b"/2", b"/3"]
        assert all(h.error is None and h.ends == 1 for h in handlers)
        assert sorted(q.target for q in server.requests) == ["/0", "/1", "/2", "/3"]
        assert len(drains) == 1
        assert drains[0][0] == server.origin and drains[0][1][0] is pool
        assert not pool.busy
        pool.close()


def test_pool_of_composed_members_keeps_the_limit_and_fifo(make_server):
    gated = Gated()
    server = make_server(gated)
    log: list[str] = []

    def member_log(dispatch):
        def wrapped(options, handler):
            log.append(options["path"])
            return dispatch(options, handler)

        return wrapped

    def factory(origin, **options):
        return greenhttp.Client(origin, **options).compose(member_log)

    pool = greenhttp.Pool(server.origin, connections=2, factory=factory)
    with gevent.Timeout(5):
        gs = [gevent.spawn(lambda i=i: pool.request(path=f"/{i}").body.bytes()) for i in range(6)]
        while len(server.requests) < 2:
            gevent.sleep(0.005)
        gevent.sleep(0.01)
        assert len(server.requests) == 2 and server.accepted == 2
        gated.gate.set()
        gevent.joinall(gs, raise_error=True)
        assert [g.value for g in gs] == [f"/{i}".encode() for i in range(6)]
        # The members were handed the queued requests oldest first.
        assert log == [f"/{i}" for i in range(6)]
        assert server.accepted == 2
        pool.close()


def test_agent_events_name_the_agent_pool_and_client(make_server):
    server = make_server(routes({"/": ("200 OK", [], b"x")}))
    agent = greenhttp.Agent()
    seen: list[tuple] = []
    agent.on("connect", lambda origin, targets: seen.append(("connect", origin, targets)))
    agent.on("disconnect", lambda origin, targets, err: seen.append(("disconnect", origin, targets)))
    with gevent.Timeout(5):
        assert agent.request(origin=server.origin, path="/").body.bytes() == b"x"
        agent.close()
    assert [e[0] for e in seen] == ["connect", "disconnect"]
    for _, origin, targets in seen:
        assert origin == server.origin
        assert targets[0] is agent
        assert isinstance(targets[1], greenhttp.Pool) and isinstance(targets[2], greenhttp.Client)


def test_agent_close_waits_for_running_requests_and_destroy_fails_them(make_server):
    gated = Gated()
    server = make_server(gated)
    with gevent.Timeout(5):
        agent = greenhttp.Agent()
        g = gevent.spawn(lambda: agent.request(origin=server.origin, path="/slow").body.bytes())
        while not server.requests:
            gevent.sleep(0.005)
        closer = gevent.spawn(agent.close)
        gevent.sleep(0.01)
        assert not closer.ready()
        gated.gate.set()
        closer.get()
        assert g.get() == b"/slow"

        gated.gate.clear()
        agent2 = greenhttp.Agent()
        results = []

        def one():
            try:
                results.append(agent2.request(origin=server.origin, path="/x").body.bytes())
            except Exception as exc:
                results.append(exc)

        gs = [gevent.spawn(one) for _ in range(2)]
        while len(server.requests) < 3:
            gevent.sleep(0.005)
        boom = RuntimeError("boom")
        agent2.destroy(boom)
        gevent.joinall(gs, raise_error=True)
        gated.gate.set()
        assert results == [boom, boom]


def test_agent_accepts_a_url_object_origin(make_server):
    from urllib.parse import urlsplit

    server = make_server(routes({"/": ("200 OK", [], b"u")}))
    agent = greenhttp.Agent()
    with gevent.Timeout(5):
        for _ in range(2):
            assert agent.request(origin=urlsplit(server.origin), path="/").body.bytes() == b"u"
        assert agent.request(origin=server.origin, path="/").body.bytes() == b"u"
        assert list(agent.stats) == [server.origin]
        agent.close()


def test_composed_dispatcher_as_context_manager_and_callbacks(make_server):
    server = make_server(routes({"/": ("200 OK", [], b"x")}))
    pool = greenhttp.Pool(server.origin)
    with pool.compose(interceptors.dump()) as composed:
        with gevent.Timeout(5):
            assert composed.request(path="/").status_code == 200
    assert pool.destroyed
    pool2 = greenhttp.Pool(server.origin)
    done = gevent.event.AsyncResult()
    pool2.compose(interceptors.dump()).destroy(lambda err, value: done.set(err))
    with gevent.Timeout(5):
        assert done.get() is None
    assert pool2.destroyed


def test_agent_max_origins_counts_spellings_once_and_refuses_one_more(make_server):
    server = make_server(routes({"/": ("200 OK", [], b"x")}))
    port = server.port
    agent = greenhttp.Agent(max_origins=1)
    with gevent.Timeout(5):
        for origin in (f"http://LOCALHOST:{port}", f"http://localhost:{port}"):
            assert agent.request(origin=origin, path="/").body.bytes() == b"x"
        assert agent.request(origin=f"http://localhost:{port}", path="/", allow_h2=False).status_code == 200
        with pytest.raises(errors.MaxOriginsReachedError):
            agent.request(origin=f"http://127.0.0.1:{port}", path="/")
        agent.close()


def test_agent_forgets_an_origin_after_a_connection_error_and_makes_it_again():
    agent = greenhttp.Agent()
    errors_seen: list[tuple] = []
    agent.on("connectionError", lambda origin, targets, err: errors_seen.append((origin, targets, err)))
    with gevent.Timeout(5):
        for _ in range(2):
            with pytest.raises(ConnectionRefusedError):
                agent.request(origin="http://127.0.0.1:1", path="/")
            assert agent.stats == {}
        assert len(errors_seen) == 2
        assert errors_seen[0][1][0] is agent and errors_seen[0][1][1] is not errors_seen[1][1][1]
        agent.close()


def test_dedupe_in_front_of_cache_one_origin_request(make_server):
    hits: list[str] = []

    def handler(conn):
        while (req := conn.read_request()) is not None:
            hits.append(req.target)
            gevent.sleep(0.02)
            conn.respond(b"c", headers=[("Cache-Control", "max-age=60")])

    server = make_server(handler)
    with gevent.Timeout(5):
        agent = greenhttp.Agent().compose(interceptors.deduplicate(), interceptors.cache())
        try:
            gs = [gevent.spawn(lambda: agent.request(origin=server.origin, path="/c").body.bytes()) for _ in range(3)]
            gevent.joinall(gs, raise_error=True)
            assert agent.request(origin=server.origin, path="/c").body.bytes() == b"c"
            assert [g.value for g in gs] == [b"c"] * 3
            assert hits == ["/c"]
        finally:
            agent.close()


def test_retry_around_redirect_restarts_and_delivers_once(make_server):
    hits: list[str] = []

    def handler(conn):
        while (req := conn.read_request()) is not None:
            hits.append(req.target)
            if req.target == "/old":
                conn.respond(b"", status="302 Found", headers=[("Location", "/new")])
            elif hits.count("/new") == 1:
                conn.respond(b"", status="503 Service Unavailable", headers=[("Retry-After", "0")])
            else:
                conn.respond(b"ok")

    server = make_server(handler)
    h = Handler()
    with gevent.Timeout(5):
        agent = greenhttp.Agent().compose(
            interceptors.retry(max_retries=2, min_timeout=0.01), interceptors.redirect(max_redirections=2)
        )
        try:
            agent.dispatch({"origin": server.origin, "path": "/old", "method": "GET"}, h)
            h.done.wait()
            gevent.sleep(0.02)  # nothing more may arrive
            assert (h.error, h.body, h.ends) == (None, b"ok", 1)
            assert hits == ["/old", "/new", "/old", "/new"]
        finally:
            agent.close()


def test_an_interceptor_that_raises_fails_the_request_without_hanging(make_server):
    server = make_server(routes({"/": ("200 OK", [], b"x")}))

    def bad(dispatch):
        def wrapped(options, handler):
            raise ValueError("interceptor broke")

        return wrapped

    pool = greenhttp.Pool(server.origin, connections=1)
    with gevent.Timeout(5):
        with pytest.raises(ValueError, match="interceptor broke"):
            pool.compose(interceptors.dump(), bad).request(path="/")
        assert pool.request(path="/").body.bytes() == b"x"
        pool.close()


def test_pool_close_refuses_new_requests_at_once_and_destroy_defaults_to_destroyed_error(make_server):
    gated = Gated()
    server = make_server(gated)
    pool = greenhttp.Pool(server.origin, connections=1)
    handlers = [Handler() for _ in range(3)]
    with gevent.Timeout(5):
        for i, h in enumerate(handlers[:2]):
            pool.dispatch({"path": f"/{i}", "method": "GET"}, h)
        closer = gevent.spawn(pool.close)
        gevent.sleep(0)
        assert pool.closed and not pool.destroyed
        assert pool.dispatch({"path": "/late", "method": "GET"}, handlers[2]) is False
        assert isinstance(handlers[2].error, errors.ClientClosedError)
        second = gevent.spawn(pool.close)  # waits for the same close
        gevent.sleep(0.01)
        assert not closer.ready() and not second.ready()
        gated.gate.set()
        closer.get()
        second.get()
        assert [h.body for h in handlers[:2]] == [b"/0", b"/1"]
        assert pool.destroyed
        with pytest.raises(errors.ClientDestroyedError):  # a finished close destroyed it
            pool.close()

        gated.gate.clear()
        pool2 = greenhttp.Pool(server.origin, connections=1)
        hs = [Handler() for _ in range(2)]
        for i, h in enumerate(hs):
            pool2.dispatch({"path": f"/{i}", "method": "GET"}, h)
        while len(server.requests) < 3:
            gevent.sleep(0.005)
        pool2.destroy()
        gated.gate.set()
        for h in hs:
            h.done.wait()
        assert all(isinstance(h.error, errors.ClientDestroyedError) for h in hs)
        with pytest.raises(errors.ClientDestroyedError):
            pool2.close()


@pytest.mark.parametrize("method", ["on", "add_listener"])
def test_drain_listener_added_through_a_composed_agent_hears_the_origins_drain(make_server, method):
    gated = Gated()
    server = make_server(gated)
    agent = greenhttp.Agent(connections=1)
    composed = agent.compose(recording([], "x"))
    drains: list[tuple] = []
    getattr(composed, method)("drain", lambda origin, targets: drains.append((origin, targets)))
    handlers = [Handler() for _ in range(2)]
    with gevent.Timeout(5):
        answers = [
            composed.dispatch({"origin": server.origin, "path": f"/{i}", "method": "GET"}, h)
            for i, h in enumerate(handlers)
        ]
        assert answers[1] is False
        gated.gate.set()
        for h in handlers:
            h.done.wait()
        with gevent.Timeout(1, AssertionError("no drain heard")):
            while not drains:
                gevent.sleep(0.005)
        assert drains[0][0] == server.origin and drains[0][1][0] is agent
        composed.close()


def test_module_request_takes_the_origin_from_the_url(make_server):
    # REFERENCE 4.5: the API is called with origin and path from the URL; an
    # origin option is overridden, not an error.
    server = make_server(routes({"/a": ("200 OK", [], b"a")}))
    agent = greenhttp.Agent()
    with gevent.Timeout(5):
        r = greenhttp.request(server.origin + "/a", dispatcher=agent, origin="http://127.0.0.1:1")
        assert r.body.bytes() == b"a"
        agent.close()


def test_agent_factory_returning_no_dispatcher_leaves_no_broken_origin():
    agent = greenhttp.Agent(factory=lambda origin, **options: None, max_origins=1)
    with gevent.Timeout(5):
        for _ in range(2):
            with pytest.raises(AttributeError):
                agent.request(origin="http://127.0.0.1:1", path="/")
        assert agent.stats == {}
        agent.close()  # nothing half-made to close
        assert agent.destroyed


def test_pool_queue_against_a_dead_origin_fails_each_request_once_and_close_returns():
    pool = greenhttp.Pool("http://127.0.0.1:1", connections=1)
    made = []
    pool.on("connectionError", lambda origin, targets, err: made.append(targets[1]))
    handlers = [Handler() for _ in range(4)]
    with gevent.Timeout(5):
        for i, h in enumerate(handlers):
            pool.dispatch({"path": f"/{i}", "method": "GET"}, h)
        pool.close()
        for h in handlers:
            h.done.wait()
        gevent.sleep(0.01)
    assert all(isinstance(h.error, ConnectionRefusedError) and h.ends == 0 for h in handlers)
    assert len(set(map(id, made))) == len(made) >= 1
    assert pool.destroyed and pool.stats.connected == 0


def test_redirects_through_a_one_connection_pool_under_concurrency(make_server):
    table = {}
    for i in range(5):
        table[f"/{i}/a"] = ("302 Found", [("Location", f"/{i}/b")], b"moved")
        table[f"/{i}/b"] = ("307 Temporary Redirect", [("Location", f"/{i}/c")], b"")
        table[f"/{i}/c"] = ("200 OK", [], f"end{i}".encode())
    server = make_server(routes(table))
    pool = greenhttp.Pool(server.origin, connections=1)
    composed = pool.compose(interceptors.redirect(max_redirections=3))
    with gevent.Timeout(5):
        gs = [gevent.spawn(lambda i=i: composed.request(path=f"/{i}/a").body.bytes()) for i in range(5)]
        gevent.joinall(gs, raise_error=True)
        assert [g.value for g in gs] == [f"end{i}".encode() for i in range(5)]
        assert len(server.requests) == 15 and server.accepted == 1
        composed.close()


@pytest.mark.filterwarnings("ignore::greenhttp.ExperimentalWarning")
def test_the_whole_stack_dedupe_retry_redirect_decompress_cache(make_server):
    payload = b"the payload " * 40
    hits: list[str] = []

    def handler(conn):
        while (req := conn.read_request()) is not None:
            hits.append(req.target)
            if req.target == "/a":
                conn.respond(b"", status="301 Moved Permanently",
                             headers=[("Location", "/b"), ("Cache-Control", "max-age=60")])
            elif hits.count("/b") == 1:
                gevent.sleep(0.02)  # the other greenlets join the deduplicated request
                conn.respond(b"", status="503 Service Unavailable", headers=[("Retry-After", "0")])
            else:
                conn.respond(gzip.compress(payload),
                             headers=[("Content-Encoding", "gzip"), ("Cache-Control", "max-age=60")])

    server = make_server(handler)
    with gevent.Timeout(5):
        agent = greenhttp.Agent().compose(
            interceptors.deduplicate(),
            interceptors.retry(max_retries=2, min_timeout=0.01),
            interceptors.redirect(max_redirections=2),
            interceptors.decompress(),
            interceptors.cache(),
        )
        try:
            gs = [gevent.spawn(lambda: agent.request(origin=server.origin, path="/a").body.bytes()) for _ in range(3)]
            gevent.joinall(gs, raise_error=True)
            assert [g.value for g in gs] == [payload] * 3
            assert hits == ["/a", "/b", "/b"]  # the retry found /a in the cache
            assert agent.request(origin=server.origin, path="/a").body.bytes() == payload
            assert hits == ["/a", "/b", "/b"]
        finally:
            agent.close()


@pytest.mark.filterwarnings("ignore::greenhttp.ExperimentalWarning")
def test_nginx_three_connection_pool_with_decompress_keeps_the_limit(nginx):
    pool = greenhttp.Pool(nginx.origin, connections=3)
    composed = pool.compose(interceptors.decompress())
    conns: set[str] = set()

    def one():
        r = composed.request(path="/chunked", headers={"accept-encoding": "gzip"})
        conns.add(r.headers["x-conn"])
        return r.body.bytes()

    with gevent.Timeout(5):
        gs = [gevent.spawn(one) for _ in range(30)]
        gevent.joinall(gs, raise_error=True)
        assert all(g.value == nginx.chunked_source for g in gs)
        assert 1 <= len(conns) <= 3
        assert pool.stats.connected <= 3
        composed.close()


def test_pool_ignores_an_origin_option_and_compose_injects_its_own(make_server):
    server = make_server(routes({"/": ("200 OK", [], b"mine")}))
    pool = greenhttp.Pool(server.origin)
    seen: list[object] = []

    def spy(dispatch):
        def wrapped(options, handler):
            seen.append(options.get("origin"))
            return dispatch(options, handler)

        return wrapped

    with gevent.Timeout(5):
        assert pool.request(origin="http://127.0.0.1:1", path="/").body.bytes() == b"mine"
        composed = pool.compose(spy)
        assert composed.request(path="/").body.bytes() == b"mine"
        assert seen == [server.origin]
        pool.close()


def test_retry_outside_dedupe_each_waiter_retries_and_ends_once(make_server):
    hits: list[str] = []

    def handler(conn):
        while (req := conn.read_request()) is not None:
            hits.append(req.target)
            if len(hits) == 1:
                gevent.sleep(0.05)
                conn.respond(b"", status="503 Service Unavailable", headers=[("Retry-After", "0")])
            else:
                conn.respond(b"second")

    server = make_server(handler)
    handlers = [Handler() for _ in range(2)]
    with gevent.Timeout(5):
        agent = greenhttp.Agent().compose(
            interceptors.retry(max_retries=2, min_timeout=0.01), interceptors.deduplicate()
        )
        try:
            for h in handlers:
                agent.dispatch({"origin": server.origin, "path": "/d", "method": "GET"}, h)
            for h in handlers:
                h.done.wait()
            gevent.sleep(0.03)  # nothing more may arrive
            assert [(h.error, h.body, h.ends) for h in handlers] == [(None, b"second", 1)] * 2
            assert 2 <= len(hits) <= 3
        finally:
            agent.close()
