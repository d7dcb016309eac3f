"""Audit: lifecycle of Client, Pool and Agent (close/destroy, events, stats, blocking calls)."""

from __future__ import annotations

import socket

import gevent
import gevent.event
import pytest

import greenhttp
from greenhttp import errors
from testkit import refused_origin, serve_forever, wait_for


class Rec:
    """A handler recording every callback it gets."""

    def __init__(self, on_end=None):
        self.calls: list[str] = []
        self.errors: list[BaseException] = []
        self.body = b""
        self.done = gevent.event.Event()
        self._on_end = on_end

    def on_request_start(self, controller, context):
        self.calls.append("start")

    def on_response_start(self, controller, status_code, headers, status_message):
        self.calls.append("response")

    def on_response_data(self, controller, chunk):
        self.body += chunk

    def on_response_end(self, controller, trailers):
        self.calls.append("end")
        if self._on_end is not None:
            self._on_end()
        self.done.set()

    def on_response_error(self, controller, err):
        self.calls.append("error")
        self.errors.append(err)
        self.done.set()


class Held:
    """A server handler answering only once ``release`` is set (then every request)."""

    def __init__(self):
        self.release = gevent.event.Event()
        self.seen: list[str] = []

    def __call__(self, conn):
        while True:
            req = conn.read_request()
            if req is None:
                return
            self.seen.append(req.target)
            self.release.wait(5)
            conn.respond(req.target.encode())


# -- Client: close/destroy with work queued and in flight --------------------------------


def test_client_close_lets_queued_and_running_finish_and_counts_stay_exact(make_server, make_client):
    held = Held()
    server = make_server(held)
    client = make_client(server.origin, pipelining=1)
    recs = [Rec() for _ in range(3)]
    for i, r in enumerate(recs):
        client.dispatch({"path": f"/{i}", "method": "GET"}, r)
    wait_for(lambda: held.seen == ["/0"], what="first request on the wire")
    assert client.stats == (True, 2, 1, 3)
    assert client.busy
    closer = gevent.spawn(client.close)
    wait_for(lambda: client.closed, what="closed")
    assert not client.destroyed
    bad = Rec()
    assert client.dispatch({"path": "/late", "method": "GET"}, bad) is False
    assert len(bad.errors) == 1 and isinstance(bad.errors[0], errors.ClientClosedError)
    held.release.set()
    with gevent.Timeout(5):
        closer.get()
    assert [r.body for r in recs] == [b"/0", b"/1", b"/2"]
    assert all(r.calls == ["start", "response", "end"] for r in recs)
    assert client.destroyed and client.stats == (False, 0, 0, 0)
    late = Rec()
    client.dispatch({"path": "/", "method": "GET"}, late)
    assert [type(e) for e in late.errors] == [errors.ClientDestroyedError]
    with pytest.raises(errors.ClientDestroyedError):
        client.close()


def test_client_destroy_fails_running_and_queued_exactly_once_with_the_reason(make_server, make_client):
    held = Held()
    server = make_server(held)
    client = make_client(server.origin, pipelining=1)
    recs = [Rec() for _ in range(3)]
    for i, r in enumerate(recs):
        client.dispatch({"path": f"/{i}", "method": "GET"}, r)
    wait_for(lambda: held.seen == ["/0"], what="first request on the wire")
    boom = RuntimeError("boom")
    client.destroy(boom)
    assert client.closed and client.destroyed
    assert [r.errors for r in recs] == [[boom], [boom], [boom]]
    assert client.stats == (False, 0, 0, 0)
    client.destroy()  # again: a no-op
    assert [len(r.errors) for r in recs] == [1, 1, 1]
    held.release.set()


def test_client_destroy_during_close_wakes_the_closer_without_error(make_server, make_client):
    held = Held()
    server = make_server(held)
    client = make_client(server.origin)
    rec = Rec()
    client.dispatch({"path": "/", "method": "GET"}, rec)
    wait_for(lambda: held.seen, what="request on the wire")
    closers = [gevent.spawn(client.close) for _ in range(2)]
    wait_for(lambda: client.closed, what="closed")
    gevent.sleep(0)
    client.destroy()
    with gevent.Timeout(5):
        for g in closers:
            assert g.get() is None
    assert [type(e) for e in rec.errors] == [errors.ClientDestroyedError]
    held.release.set()


def test_client_close_from_the_response_end_callback(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    closed = []

    def on_end():
        client.close()
        closed.append(client.destroyed)

    rec = Rec(on_end)
    client.dispatch({"path": "/", "method": "GET"}, rec)
    with gevent.Timeout(3):
        rec.done.wait()
        wait_for(lambda: closed, what="close() in the callback to return")
    assert closed == [True]
    assert rec.calls == ["start", "response", "end"]


def test_client_destroy_from_the_response_start_callback(make_server, make_client):
    server = make_server(serve_forever(b"x" * 10))
    client = make_client(server.origin)

    class Destroyer(Rec):
        def on_response_start(self, controller, status_code, headers, status_message):
            super().on_response_start(controller, status_code, headers, status_message)
            client.destroy()

    rec = Destroyer()
    client.dispatch({"path": "/", "method": "GET"}, rec)
    with gevent.Timeout(3):
        rec.done.wait()
    assert rec.calls == ["start", "response", "error"]
    assert isinstance(rec.errors[0], errors.ClientDestroyedError)
    assert client.destroyed


def test_client_destroy_from_the_response_data_callback_with_pipelined_responses(make_server, make_client):
    # Two pipelined responses arrive in one read; destroying in the first one's data
    # callback fails both, none is answered after the destroy.
    def handler(conn):
        conn.read_request()
        conn.respond(b"warm")
        conn.read_request()
        conn.read_request()
        conn.sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\ncd")
        conn.read_exact(1)

    server = make_server(handler)
    client = make_client(server.origin, pipelining=2)
    boom = RuntimeError("boom")

    class Destroyer(Rec):
        def on_response_data(self, controller, chunk):
            super().on_response_data(controller, chunk)
            client.destroy(boom)

    client.request(path="/warm").body.dump()  # a known keep-alive connection pipelines
    first, second = Destroyer(), Rec()
    client.dispatch({"path": "/1", "method": "GET", "blocking": False}, first)
    client.dispatch({"path": "/2", "method": "GET", "blocking": False}, second)
    with gevent.Timeout(3):
        first.done.wait()
        second.done.wait()
    assert first.calls == ["start", "response", "error"] and first.errors == [boom]
    assert second.calls == ["start", "error"] and second.errors == [boom]


def test_aborting_a_pipelined_request_from_another_ones_callback_still_completes_that_one(make_server, make_client):
    # Not a destroy: the connection goes (REFERENCE §1.6, h1 abort), but the response
    # whose bytes were already read is delivered whole, and only the aborted one fails.
    def handler(conn):
        conn.read_request()
        conn.respond(b"warm")
        conn.read_request()
        conn.read_request()
        conn.sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\ncd")
        conn.read_exact(1)

    server = make_server(handler)
    client = make_client(server.origin, pipelining=2)
    client.request(path="/warm").body.dump()
    controllers = []

    class Starts(Rec):
        def on_request_start(self, controller, context):
            super().on_request_start(controller, context)
            controllers.append(controller)

    class AbortsOther(Starts):
        def on_response_data(self, controller, chunk):
            super().on_response_data(controller, chunk)
            controllers[1].abort()

    first, second = AbortsOther(), Starts()
    client.dispatch({"path": "/1", "method": "GET", "blocking": False}, first)
    client.dispatch({"path": "/2", "method": "GET", "blocking": False}, second)
    with gevent.Timeout(3):
        first.done.wait()
        second.done.wait()
    assert first.calls == ["start", "response", "end"] and first.body == b"ab"
    assert second.calls == ["start", "error"]
    assert [type(e) for e in second.errors] == [errors.RequestAbortedError]


def test_client_destroy_from_a_connect_listener(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    events = []
    client.on("connect", lambda origin, targets: (events.append("connect"), client.destroy()))
    client.on("disconnect", lambda origin, targets, err: events.append(("disconnect", type(err))))
    with pytest.raises(errors.ClientDestroyedError):
        with gevent.Timeout(3):
            client.request(path="/")
    wait_for(lambda: len(events) == 2, what="disconnect")
    assert events == ["connect", ("disconnect", errors.ClientDestroyedError)]


def test_client_close_with_callback_twice(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    client.request(path="/").body.dump()
    got = []
    client.close(lambda err, value: got.append((err, value)))
    client.close(lambda err, value: got.append((err, value)))
    wait_for(lambda: len(got) == 2, what="both callbacks")
    assert got == [(None, None), (None, None)]


def test_client_close_from_two_greenlets_on_an_idle_connection(make_server, make_client):
    # Both callers share the one close (REFERENCE §1.9), also while its socket is closing.
    server = make_server(serve_forever())
    client = make_client(server.origin)
    client.request(path="/").body.dump()
    closers = [gevent.spawn(client.close) for _ in range(2)]
    with gevent.Timeout(3):
        assert [g.get() for g in closers] == [None, None]
    assert client.destroyed
    with pytest.raises(errors.ClientDestroyedError):
        client.close()


# -- connect errors ---------------------------------------------------------------------------


def test_client_refused_port_reaches_each_handler_once_and_client_stays_usable(make_client):
    client = make_client(refused_origin(), pipelining=1)
    events = []
    client.on("connectionError", lambda origin, targets, err: events.append((origin, targets, type(err))))
    recs = [Rec() for _ in range(3)]
    for r in recs:
        client.dispatch({"path": "/", "method": "GET"}, r)
    with gevent.Timeout(3):
        for r in recs:
            r.done.wait()
    gevent.sleep(0.05)
    assert [[type(e) for e in r.errors] for r in recs] == [[ConnectionRefusedError]] * 3
    assert events == [(client.origin, [client], ConnectionRefusedError)]
    assert client.stats == (False, 0, 0, 0) and not client.busy
    with pytest.raises(ConnectionRefusedError):
        client.request(path="/")


def test_pool_refused_port_reaches_each_handler_once(make_client):
    pool = greenhttp.Pool(refused_origin(), connections=2)
    try:
        events = []
        pool.on("connectionError", lambda origin, targets, err: events.append((targets[0], type(err))))
        recs = [Rec() for _ in range(5)]
        for r in recs:
            pool.dispatch({"path": "/", "method": "GET"}, r)
        with gevent.Timeout(3):
            for r in recs:
                r.done.wait()
        gevent.sleep(0.05)
        assert [[type(e) for e in r.errors] for r in recs] == [[ConnectionRefusedError]] * 5
        assert all(t is pool and k is ConnectionRefusedError for t, k in events)
        wait_for(lambda: pool.stats == (0, 0, 0, 0, 0, 0), what="pool empty")
    finally:
        pool.destroy()


# -- blocking calls interrupted ------------------------------------------------------------


def test_timeout_around_request_leaves_client_usable(make_server, make_client):
    answered = gevent.event.Event()

    def handler(conn):
        req = conn.read_request()
        if req is None:
            return
        if req.target == "/slow":
            conn.read_exact(1)  # until the client closes the connection
            return
        conn.respond(b"ok")
        answered.set()
        serve_forever()(conn)

    server = make_server(handler)
    client = make_client(server.origin)
    with pytest.raises(gevent.Timeout):
        with gevent.Timeout(0.1):
            client.request(path="/slow")
    wait_for(lambda: client.stats.size == 0, what="request gone")
    with gevent.Timeout(3):
        server.conns[0].eof.wait()  # the aborted request's socket was closed
    with gevent.Timeout(3):
        assert client.request(path="/fast").body.text() == "ok"
    assert client.stats == (True, 0, 0, 0)


def test_killed_greenlet_in_pool_request_frees_its_slot(make_server):
    held = Held()
    server = make_server(held)
    pool = greenhttp.Pool(server.origin, connections=1)
    try:
        g = gevent.spawn(pool.request, path="/a")
        waiting = gevent.spawn(pool.request, path="/b")
        wait_for(lambda: held.seen == ["/a"], what="first on the wire")
        assert pool.stats.queued == 1
        waiting.kill()  # queued in the pool when killed
        g.kill()  # running when killed
        held.release.set()
        with gevent.Timeout(3):
            assert pool.request(path="/c").body.text() == "/c"
        assert "/b" not in held.seen
        assert pool.stats.size == 0 and pool.stats.queued == 0
    finally:
        pool.destroy()


# -- Pool ----------------------------------------------------------------------------------


def test_pool_limit_and_fifo_with_many_greenlets(make_server):
    held = Held()
    server = make_server(held)
    pool = greenhttp.Pool(server.origin, connections=3)
    try:
        started = []

        class Starts(Rec):
            def __init__(self, i):
                super().__init__()
                self.i = i

            def on_request_start(self, controller, context):
                started.append(self.i)

        recs = []

        def one(i):
            r = Starts(i)
            recs.append(r)
            pool.dispatch({"path": f"/{i}", "method": "GET"}, r)
            r.done.wait(5)

        gs = [gevent.spawn(one, i) for i in range(30)]
        wait_for(lambda: len(held.seen) == 3, what="three on the wire")
        assert pool.stats.queued == 27 and pool.stats.connected == 3 and pool.busy
        assert pool.stats.running == 3 and pool.stats.size == 30 and pool.stats.pending == 27
        held.release.set()
        with gevent.Timeout(5):
            gevent.joinall(gs, raise_error=True)
        assert server.accepted == 3
        # The first three went to three new connections (connected in any order); the
        # others were written in the order they were dispatched.
        assert sorted(started[:3]) == [0, 1, 2] and started[3:] == list(range(3, 30))
        assert all(r.body == f"/{r.i}".encode() for r in recs)
        assert pool.stats == (3, 3, 0, 0, 0, 0) and not pool.busy
    finally:
        pool.destroy()


def test_pool_drain_event_once_with_targets(make_server):
    held = Held()
    server = make_server(held)
    pool = greenhttp.Pool(server.origin, connections=1)
    try:
        drains = []
        pool.on("drain", lambda origin, targets: drains.append((origin, targets)))
        a, b = Rec(), Rec()
        pool.dispatch({"path": "/a", "method": "GET"}, a)  # (False, as the original: not connected yet)
        assert pool.dispatch({"path": "/b", "method": "GET"}, b) is False
        held.release.set()
        with gevent.Timeout(3):
            a.done.wait()
            b.done.wait()
        wait_for(lambda: drains, what="drain")
        gevent.sleep(0.02)
        assert len(drains) == 1
        origin, targets = drains[0]
        assert origin == server.origin and targets[0] is pool and len(targets) == 2
    finally:
        pool.destroy()


def test_pool_close_twice_concurrently_and_destroy_after(make_server):
    held = Held()
    server = make_server(held)
    pool = greenhttp.Pool(server.origin, connections=1)
    recs = [Rec() for _ in range(3)]
    for i, r in enumerate(recs):
        pool.dispatch({"path": f"/{i}", "method": "GET"}, r)
    closers = [gevent.spawn(pool.close) for _ in range(2)]
    wait_for(lambda: pool.closed, what="closed")
    late = Rec()
    pool.dispatch({"path": "/", "method": "GET"}, late)
    assert [type(e) for e in late.errors] == [errors.ClientClosedError]
    held.release.set()
    with gevent.Timeout(5):
        for g in closers:
            assert g.get() is None
    assert [r.body for r in recs] == [b"/0", b"/1", b"/2"]
    assert pool.destroyed
    with pytest.raises(errors.ClientDestroyedError):  # a finished close destroyed it, as Client's
        pool.close()
    pool.destroy()
    late2 = Rec()
    pool.dispatch({"path": "/", "method": "GET"}, late2)
    assert [type(e) for e in late2.errors] == [errors.ClientDestroyedError]


@pytest.mark.parametrize("kind", ["pool", "agent"])
def test_a_close_interrupted_by_a_timeout_still_finishes_in_the_background(make_server, kind):
    # An interrupted close() stopped after the first member: the others stayed open
    # until their keep-alive ran out, and the pool was never destroyed.
    held = Held()
    server = make_server(held)
    if kind == "pool":
        d = greenhttp.Pool(server.origin, connections=3)
        opts = {}
    else:
        d = greenhttp.Agent(connections=3)
        opts = {"origin": server.origin}
    recs = [Rec() for _ in range(3)]
    for i, r in enumerate(recs):
        d.dispatch({**opts, "path": f"/{i}", "method": "GET"}, r)
    wait_for(lambda: len(held.seen) == 3, what="three requests in flight")
    with pytest.raises(gevent.Timeout), gevent.Timeout(0.05):
        d.close()
    assert d.closed and not d.destroyed
    held.release.set()
    wait_for(lambda: d.destroyed, what="the close finished in the background")
    assert sorted(r.body for r in recs) == [b"/0", b"/1", b"/2"]
    assert server.accepted == 3
    for conn in server.conns:
        assert conn.eof.wait(3)  # every connection closed, none left to its keep-alive


def test_pool_destroy_fails_queued_and_running_once(make_server):
    held = Held()
    server = make_server(held)
    pool = greenhttp.Pool(server.origin, connections=1)
    recs = [Rec() for _ in range(4)]
    for i, r in enumerate(recs):
        pool.dispatch({"path": f"/{i}", "method": "GET"}, r)
    wait_for(lambda: held.seen == ["/0"], what="first on the wire")
    boom = RuntimeError("boom")
    closer = gevent.spawn(pool.close)
    gevent.sleep(0)
    pool.destroy(boom)
    with gevent.Timeout(3):
        closer.get()
    assert [r.errors for r in recs] == [[boom]] * 4
    assert pool.stats == (0, 0, 0, 0, 0, 0)
    with pytest.raises(errors.ClientDestroyedError):
        pool.close()
    held.release.set()


# -- Agent ----------------------------------------------------------------------------------


def test_agent_routes_by_origin_and_forgets_idle_origins(make_server):
    s1 = make_server(serve_forever(b"one"))
    s2 = make_server(serve_forever(b"two"))
    agent = greenhttp.Agent(keep_alive_timeout=0.05)
    try:
        events = []
        agent.on("connect", lambda origin, targets: events.append(("connect", origin, targets[0])))
        agent.on("disconnect", lambda origin, targets, err: events.append(("disconnect", origin, targets[0])))
        assert agent.request(origin=s1.origin, path="/").body.text() == "one"
        assert agent.request(origin=s2.origin + "/", path="/").body.text() == "two"
        assert set(agent.stats) == {s1.origin, s2.origin}
        wait_for(lambda: agent.stats == {}, what="idle origins forgotten")
        assert sorted(e[:2] for e in events) == sorted(
            [("connect", s1.origin), ("connect", s2.origin), ("disconnect", s1.origin), ("disconnect", s2.origin)]
        )
        assert all(e[2] is agent for e in events)
        assert agent.request(origin=s1.origin, path="/").body.text() == "one"
    finally:
        agent.close()
    assert agent.destroyed
    with pytest.raises(errors.ClientDestroyedError):  # a finished close destroyed it
        agent.close()
    late = Rec()
    agent.dispatch({"origin": s1.origin, "path": "/", "method": "GET"}, late)
    assert [type(e) for e in late.errors] == [errors.ClientDestroyedError]


def test_agent_factory_and_destroy(make_server):
    held = Held()
    server = make_server(held)
    made = []

    def factory(origin, **options):
        made.append((origin, options))
        return greenhttp.Client(origin, **options)

    agent = greenhttp.Agent(factory=factory, pipelining=1)
    recs = [Rec() for _ in range(2)]
    for r in recs:
        agent.dispatch({"origin": server.origin, "path": "/", "method": "GET"}, r)
    assert made == [(server.origin, {"pipelining": 1})]
    wait_for(lambda: held.seen, what="on the wire")
    agent.destroy()
    assert [[type(e) for e in r.errors] for r in recs] == [[errors.ClientDestroyedError]] * 2
    with pytest.raises(errors.ClientDestroyedError):
        agent.close()
    held.release.set()


# -- errors thrown by user callbacks -----------------------------------------------------


def test_handler_raising_in_response_end_is_reported_and_client_stays_usable(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    reported = []
    client.on("error", reported.append)

    def boom():
        raise ValueError("handler bug")

    rec = Rec(boom)
    client.dispatch({"path": "/", "method": "GET"}, rec)
    with gevent.Timeout(3):
        rec.done.wait()
    # As the original: a throwing on_response_end is reported to the handler's on_response_error.
    assert rec.calls == ["start", "response", "end", "error"]
    assert [type(e) for e in rec.errors] == [ValueError]
    with gevent.Timeout(3):
        assert client.request(path="/").body.text() == "hello"


def test_listener_raising_in_connect_does_not_break_the_request(make_server, make_client):
    server = make_server(serve_forever())
    client = make_client(server.origin)

    def bad(origin, targets):
        raise ValueError("listener bug")

    client.on("connect", bad)
    with gevent.Timeout(3):
        assert client.request(path="/").body.text() == "hello"


# -- keep-alive ------------------------------------------------------------------------------


def _idle_time(make_server, make_client, headers, **options):
    """How long the client keeps an idle connection after one response with ``headers``."""
    server = make_server(serve_forever(b"x", headers=headers))
    client = make_client(server.origin, **options)
    lost = []
    client.on("disconnect", lambda origin, targets, err: lost.append((gevent.get_hub().loop.now(), err)))
    client.request(path="/").body.dump()
    start = gevent.get_hub().loop.now()
    wait_for(lambda: lost, what="disconnect")
    wait_for(lambda: server.conns[0].eof.is_set(), what="the server to see the close")
    return lost[0][0] - start, lost[0][1], server, client


def test_keep_alive_hint_below_the_threshold_closes_after_the_response(make_server, make_client):
    took, err, server, client = _idle_time(make_server, make_client, [("Keep-Alive", "timeout=2")])
    assert took < 0.5
    assert isinstance(err, errors.InformationalError)
    with gevent.Timeout(3):
        client.request(path="/").body.dump()
    assert server.accepted == 2


def test_keep_alive_hint_minus_threshold_bounds_the_idle_time(make_server, make_client):
    took, err, _, _ = _idle_time(
        make_server, make_client, [("Keep-Alive", "timeout=1")], keep_alive_timeout_threshold=0.8
    )
    assert 0.1 <= took < 0.6
    assert isinstance(err, errors.InformationalError) and "idle" in str(err)


def test_keep_alive_max_timeout_caps_a_large_hint(make_server, make_client):
    took, err, _, _ = _idle_time(
        make_server, make_client, [("Keep-Alive", "timeout=100")], keep_alive_max_timeout=0.1
    )
    assert took < 0.5
    assert isinstance(err, errors.InformationalError) and "idle" in str(err)


def test_keep_alive_timeout_without_hint(make_server, make_client):
    took, err, _, client = _idle_time(make_server, make_client, None, keep_alive_timeout=0.1)
    assert 0.05 <= took < 0.5
    assert client.stats == (False, 0, 0, 0)


# -- Agent: origins come and go --------------------------------------------------------------


def test_agent_max_origins_counts_only_live_origins(make_server):
    s1 = make_server(serve_forever(b"one"))
    s2 = make_server(serve_forever(b"two"))
    agent = greenhttp.Agent(max_origins=1, keep_alive_timeout=0.05)
    try:
        assert agent.request(origin=s1.origin, path="/").body.text() == "one"
        rec = Rec()
        agent.dispatch({"origin": s2.origin, "path": "/", "method": "GET"}, rec)
        assert [type(e) for e in rec.errors] == [errors.MaxOriginsReachedError]
        wait_for(lambda: agent.stats == {}, what="first origin forgotten")
        assert agent.request(origin=s2.origin, path="/").body.text() == "two"
    finally:
        agent.destroy()


def test_agent_http1_only_dispatcher_is_separate(make_server):
    server = make_server(serve_forever())
    agent = greenhttp.Agent(connections=1)
    try:
        agent.request(origin=server.origin, path="/").body.dump()
        agent.request(origin=server.origin, path="/", allow_h2=False).body.dump()
        assert set(agent.stats) == {server.origin, server.origin + "#http1-only"}
        assert all(s.connected is True for s in agent.stats.values())  # connections=1: Clients
        assert server.accepted == 2
    finally:
        agent.close()


# -- callback shapes and interrupted lifecycle calls ----------------------------------------


@pytest.mark.parametrize("kind", ["client", "pool", "agent"])
def test_destroy_callback_shapes(make_server, kind):
    server = make_server(serve_forever())
    make = {
        "client": lambda: greenhttp.Client(server.origin),
        "pool": lambda: greenhttp.Pool(server.origin),
        "agent": lambda: greenhttp.Agent(),
    }[kind]
    got = []
    boom = RuntimeError("boom")
    for n, args in enumerate([(), (boom,)], 1):
        d = make()
        rec = Rec()
        opts = {"path": "/", "method": "GET"}
        if kind == "agent":
            opts["origin"] = server.origin
        d.dispatch(opts, rec)
        d.destroy(*args, lambda err, value: got.append((err, value)))
        with gevent.Timeout(3):
            rec.done.wait()
        wait_for(lambda n=n: len(got) == n, what="destroy callback")
        assert len(rec.errors) == 1
        assert type(rec.errors[0]) is (RuntimeError if args else errors.ClientDestroyedError)
        assert d.destroyed
    assert got == [(None, None), (None, None)]


def _dispatcher_of(kind, origin):
    return {
        "client": lambda: greenhttp.Client(origin),
        "pool": lambda: greenhttp.Pool(origin),
        "agent": lambda: greenhttp.Agent(),
    }[kind]()


@pytest.mark.parametrize("kind", ["client", "pool", "agent"])
def test_close_and_destroy_with_a_callback_take_effect_before_they_return(make_server, kind):
    # As the original's (test/pool.js 'pool destroy fails queued requests',
    # close-and-destroy.js): the flags are set, and later requests refused, at once;
    # only the wait for the sockets is left to the callback's greenlet.
    server = make_server(serve_forever())
    origin = {"origin": server.origin} if kind == "agent" else {}
    got = []
    d = _dispatcher_of(kind, server.origin)
    d.close(callback=lambda err, value: got.append(("close", err)))
    assert d.closed
    with pytest.raises(errors.ClientClosedError):
        d.request(path="/", **origin)
    d = _dispatcher_of(kind, server.origin)
    d.destroy(RuntimeError("boom"), callback=lambda err, value: got.append(("destroy", err)))
    assert d.destroyed and d.closed
    with pytest.raises(errors.ClientDestroyedError):
        d.request(path="/", **origin)
    wait_for(lambda: len(got) == 2, what="both callbacks")
    assert sorted(got, key=str) == [("close", None), ("destroy", None)]


@pytest.mark.parametrize("kind", ["client", "pool", "agent"])
def test_requests_made_with_a_callback_are_queued_before_close(make_server, kind):
    # close-and-destroy.js 'close waits for queued requests to finish': a request()
    # with a callback is queued when it returns, so a close() right after waits for
    # it, and the callback gets the response, not ClientClosedError.
    server = make_server(serve_forever(b"ok"))
    origin = {"origin": server.origin} if kind == "agent" else {}
    d = _dispatcher_of(kind, server.origin)
    bodies = []
    for i in range(3):
        d.request(path=f"/{i}", callback=lambda err, data: bodies.append(err or data.body.bytes()), **origin)
    if kind == "client":
        assert d.size == 3  # queued at once (the original: stats.pending right after)
    with gevent.Timeout(5):
        d.close()
    wait_for(lambda: len(bodies) == 3, what="the three callbacks")
    assert bodies == [b"ok"] * 3
    assert sorted(r.target for r in server.requests) == ["/0", "/1", "/2"]  # (a pool may open three)


def test_stream_upgrade_and_connect_with_a_callback_are_dispatched_before_they_return(make_server, make_client):
    def handler(conn):
        while (req := conn.read_request()) is not None:
            if req.method == "CONNECT":
                conn.send(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            elif req.header("upgrade"):
                conn.send(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n")
            else:
                conn.respond(b"ok")
                continue
            conn.wait_closed()
            return

    server = make_server(handler)
    got = []
    sink = []

    class Sink:
        def write(self, chunk):
            sink.append(chunk)

    for call in (
        lambda c, cb: c.stream(path="/", factory=lambda data: Sink(), callback=cb),
        lambda c, cb: c.upgrade(path="/", protocol="x", callback=cb),
        lambda c, cb: c.connect(path="example.com:443", callback=cb),
    ):
        client = make_client(server.origin)
        before = len(got)
        call(client, lambda err, data: got.append((err, data)))
        assert client.size == 1
        with gevent.Timeout(5):
            client.close()
        wait_for(lambda n=before + 1: len(got) == n, what="the callback")
        err, data = got[-1]
        assert err is None, err
        if hasattr(data, "socket"):
            data.socket.close()
    assert sink == [b"ok"]


def test_a_pipeline_is_dispatched_before_it_returns(make_server, make_client):
    server = make_server(serve_forever(b"ok"))
    client = make_client(server.origin)
    duplex = client.pipeline(path="/", method="PUT", handler=lambda data: data.body)
    assert client.size == 1
    duplex.end(b"x")
    with gevent.Timeout(5):
        client.close()
        assert duplex.read() == b"ok"
    assert server.requests[0].body == b"x"


def test_pool_close_interrupted_by_a_timeout_then_closed_again(make_server):
    held = Held()
    server = make_server(held)
    pool = greenhttp.Pool(server.origin, connections=1)
    recs = [Rec() for _ in range(2)]
    for r in recs:
        pool.dispatch({"path": "/", "method": "GET"}, r)
    wait_for(lambda: held.seen, what="on the wire")
    with pytest.raises(gevent.Timeout):
        with gevent.Timeout(0.05):
            pool.close()
    assert pool.closed and not pool.destroyed
    held.release.set()
    with gevent.Timeout(3):
        pool.close()
    assert pool.destroyed and all(r.calls == ["start", "response", "end"] for r in recs)


def test_client_connect_interrupted_by_a_timeout_leaves_it_usable(make_server, make_client):
    server = make_server(serve_forever())
    gate = gevent.event.Event()

    def slow_connector(options, callback):
        def later():
            gate.wait(3)
            s = socket.create_connection(("127.0.0.1", server.port))
            import gevent.socket as gsocket

            callback(None, gsocket.socket(fileno=s.detach()))

        gevent.spawn(later)

    client = make_client(server.origin, connect=slow_connector)
    with pytest.raises(gevent.Timeout):
        with gevent.Timeout(0.05):
            client.connect()
    gate.set()
    with gevent.Timeout(3):
        assert client.request(path="/").body.text() == "hello"
    assert server.accepted == 1


# -- lifecycle calls from inside callbacks ----------------------------------------------------


@pytest.mark.parametrize("warm", [False, True], ids=["first-request", "connected"])
def test_client_destroy_from_on_request_start(make_server, make_client, warm):
    server = make_server(serve_forever())
    client = make_client(server.origin)
    if warm:
        client.request(path="/").body.dump()

    class Destroyer(Rec):
        def on_request_start(self, controller, context):
            super().on_request_start(controller, context)
            client.destroy()

    rec, other = Destroyer(), Rec()
    client.dispatch({"path": "/", "method": "GET"}, rec)
    client.dispatch({"path": "/", "method": "GET"}, other)
    with gevent.Timeout(3):
        rec.done.wait()
        other.done.wait()
    assert rec.calls == ["start", "error"] and isinstance(rec.errors[0], errors.ClientDestroyedError)
    assert [type(e) for e in other.errors] == [errors.ClientDestroyedError]
    assert client.stats == (False, 0, 0, 0)


def test_pool_close_from_a_response_end_callback(make_server):
    server = make_server(serve_forever())
    pool = greenhttp.Pool(server.origin, connections=2)
    try:
        closed = []

        def on_end():
            pool.close()
            closed.append(pool.destroyed)

        rec = Rec(on_end)
        pool.dispatch({"path": "/", "method": "GET"}, rec)
        with gevent.Timeout(3):
            rec.done.wait()
        wait_for(lambda: closed, what="close() in the callback to return")
        assert closed == [True] and rec.calls == ["start", "response", "end"]
        assert pool.stats == (0, 0, 0, 0, 0, 0)
    finally:
        pool.destroy()


def test_agent_destroy_from_a_response_data_callback(make_server):
    server = make_server(serve_forever(b"abc"))
    agent = greenhttp.Agent()

    class Destroyer(Rec):
        def on_response_data(self, controller, chunk):
            super().on_response_data(controller, chunk)
            agent.destroy()

    rec = Destroyer()
    agent.dispatch({"origin": server.origin, "path": "/", "method": "GET"}, rec)
    with gevent.Timeout(3):
        rec.done.wait()
    assert rec.calls == ["start", "response", "error"]
    assert [type(e) for e in rec.errors] == [errors.ClientDestroyedError]
    assert agent.destroyed and agent.stats == {}


def test_raising_connection_error_listener_does_not_change_the_outcome(make_client):
    client = make_client(refused_origin())
    client.on("connectionError", lambda *a: 1 / 0)
    recs = [Rec(), Rec()]
    for r in recs:
        client.dispatch({"path": "/", "method": "GET"}, r)
    with gevent.Timeout(3):
        for r in recs:
            r.done.wait()
    gevent.sleep(0.02)
    assert [[type(e) for e in r.errors] for r in recs] == [[ConnectionRefusedError]] * 2
    assert client.stats == (False, 0, 0, 0)


# -- destroy while connecting; timeouts of queued requests; client_ttl ---------------------


def test_destroy_while_a_callback_connector_is_connecting_closes_its_late_socket(make_server, make_client):
    import gevent.socket as gsocket

    server = make_server(serve_forever())
    gate = gevent.event.Event()
    made = []

    def slow_connector(options, callback):
        def later():
            gate.wait(3)
            s = gsocket.create_connection(("127.0.0.1", server.port))
            made.append(s)
            callback(None, s)

        made.append(gevent.spawn(later))

    client = make_client(server.origin, connect=slow_connector)
    rec = Rec()
    client.dispatch({"path": "/", "method": "GET"}, rec)
    wait_for(lambda: made, what="connecting")
    client.destroy()
    assert [type(e) for e in rec.errors] == [errors.ClientDestroyedError]
    gate.set()
    with gevent.Timeout(3):
        made[0].join()
    assert len(made) == 2
    # Nobody takes the socket the connector hands over late: the client closes it.
    wait_for(lambda: made[1].fileno() == -1, what="the late socket closed")


def test_timeout_of_a_request_queued_behind_another(make_server, make_client):
    held = Held()
    server = make_server(held)
    client = make_client(server.origin, pipelining=1)
    first = Rec()
    client.dispatch({"path": "/1", "method": "GET"}, first)
    wait_for(lambda: held.seen == ["/1"], what="first on the wire")
    with pytest.raises(gevent.Timeout):
        with gevent.Timeout(0.05):
            client.request(path="/2")
    assert client.stats.running == 1 and client.stats.size <= 2
    held.release.set()
    with gevent.Timeout(3):
        first.done.wait()
    wait_for(lambda: client.stats.size == 0, what="queue empty")
    assert held.seen == ["/1"] and first.body == b"/1"
    assert client.request(path="/3").body.text() == "/3"
    assert server.accepted == 1


def test_pool_client_ttl_retires_and_counts_stay_exact(make_server):
    server = make_server(serve_forever())
    pool = greenhttp.Pool(server.origin, connections=1, client_ttl=0.05)
    try:
        pool.request(path="/").body.dump()
        assert pool.stats == (1, 1, 0, 0, 0, 0)
        gevent.sleep(0.08)  # the client's time to live runs out
        pool.request(path="/").body.dump()
        assert server.accepted == 2
        wait_for(lambda: pool.stats == (1, 1, 0, 0, 0, 0), what="the old member gone")
        wait_for(lambda: server.conns[0].eof.is_set(), what="the old connection closed")
    finally:
        pool.destroy()


# -- paused requests, streaming bodies, handlers without on_response_error ----------------


class Pauser(Rec):
    def __init__(self):
        super().__init__()
        self.controller = None

    def on_response_start(self, controller, status_code, headers, status_message):
        super().on_response_start(controller, status_code, headers, status_message)
        self.controller = controller
        controller.pause()


@pytest.mark.parametrize("how", ["close-then-resume", "destroy"])
def test_paused_request_and_close_or_destroy(make_server, make_client, how):
    server = make_server(serve_forever(b"y" * 100_000))
    client = make_client(server.origin)
    rec = Pauser()
    client.dispatch({"path": "/", "method": "GET"}, rec)
    wait_for(lambda: rec.controller is not None, what="paused")
    closer = gevent.spawn(client.close)
    wait_for(lambda: client.closed, what="closed")
    gevent.sleep(0.02)
    assert not closer.ready() and not client.destroyed and client.stats.running == 1
    if how == "destroy":
        client.destroy()
        with gevent.Timeout(3):
            closer.get()
            rec.done.wait()
        assert rec.calls == ["start", "response", "error"]
        assert [type(e) for e in rec.errors] == [errors.ClientDestroyedError]
    else:
        rec.controller.resume()
        with gevent.Timeout(3):
            closer.get()
            rec.done.wait()
        assert rec.calls == ["start", "response", "end"] and len(rec.body) == 100_000
    assert client.destroyed and client.stats == (False, 0, 0, 0)


def test_destroy_while_a_streaming_body_is_written(make_server, make_client):
    heads = []

    def handler(conn):
        heads.append(conn.read_head())
        conn.read_exact(1 << 20)  # until the client closes

    server = make_server(handler)
    client = make_client(server.origin)
    gate = gevent.event.Event()

    def body():
        yield b"first"
        gate.wait(5)
        yield b"never"

    rec = Rec()
    client.dispatch({"path": "/", "method": "POST", "body": body()}, rec)
    wait_for(lambda: heads, what="the head on the wire")
    boom = RuntimeError("boom")
    client.destroy(boom)
    assert rec.errors == [boom] and client.stats == (False, 0, 0, 0)
    wait_for(lambda: server.conns[0].eof.is_set(), what="the connection closed")
    gate.set()


@pytest.mark.parametrize("kind", ["client", "pool", "agent"])
def test_dispatch_after_close_raises_for_a_handler_without_on_response_error(make_server, kind):
    server = make_server(serve_forever())
    d = {
        "client": lambda: greenhttp.Client(server.origin),
        "pool": lambda: greenhttp.Pool(server.origin),
        "agent": lambda: greenhttp.Agent(),
    }[kind]()

    class Bare:
        def on_response_start(self, *a):
            pass

    opts = {"path": "/", "method": "GET", "origin": server.origin}
    if kind != "agent":
        del opts["origin"]
    d.close()
    with pytest.raises((errors.ClientDestroyedError, errors.ClientClosedError)):
        d.dispatch(opts, Bare())
    d.destroy()


def test_agent_events_name_the_whole_chain(make_server):
    server = make_server(serve_forever())
    agent = greenhttp.Agent()
    try:
        got = []
        agent.on("connect", lambda origin, targets: got.append(("connect", origin, targets)))
        agent.on("disconnect", lambda origin, targets, err: got.append(("disconnect", origin, targets)))
        agent.request(origin=server.origin, path="/").body.dump()
        pool = agent._dispatchers[server.origin]
        client = pool._core._members[0].client
        agent.destroy()
        assert got == [
            ("connect", server.origin, [agent, pool, client]),
            ("disconnect", server.origin, [agent, pool, client]),
        ]
    finally:
        agent.destroy()


@pytest.mark.parametrize("warm", [False, True], ids=["new-member", "idle-member"])
def test_pool_refusal_raised_to_a_bare_handler_keeps_the_member_usable(make_server, warm):
    # A handler without on_response_error gets a refusal raised from dispatch()
    # (REFERENCE §1.9); the member the pool chose must not be lost to it.
    server = make_server(serve_forever())
    pool = greenhttp.Pool(server.origin, connections=1)
    try:
        if warm:
            pool.request(path="/").body.dump()

        class Bare:
            def on_response_start(self, *a):
                pass

        with pytest.raises(errors.InvalidArgumentError):
            pool.dispatch({"path": "no-slash", "method": "GET"}, Bare())
        assert not pool.busy
        with gevent.Timeout(3):
            assert pool.request(path="/").body.text() == "hello"
        assert server.accepted == 1
        assert pool.stats == (1, 1, 0, 0, 0, 0)
    finally:
        pool.destroy()


def test_agent_refused_origin_is_reported_once_and_forgotten():
    origin = refused_origin()
    agent = greenhttp.Agent()
    try:
        events = []
        agent.on("connectionError", lambda o, targets, err: events.append((o, targets[0], len(targets), type(err))))
        rec = Rec()
        agent.dispatch({"origin": origin, "path": "/", "method": "GET"}, rec)
        with gevent.Timeout(3):
            rec.done.wait()
        wait_for(lambda: agent.stats == {}, what="the origin forgotten")
        assert [type(e) for e in rec.errors] == [ConnectionRefusedError]
        assert events == [(origin, agent, 3, ConnectionRefusedError)]
    finally:
        agent.close()


def test_client_close_while_connecting_to_a_refused_port(make_client):
    client = make_client(refused_origin())
    rec = Rec()
    client.dispatch({"path": "/", "method": "GET"}, rec)
    with gevent.Timeout(3):
        client.close()
    assert [type(e) for e in rec.errors] == [ConnectionRefusedError]
    assert client.destroyed and client.stats == (False, 0, 0, 0)


def test_client_drain_once_after_a_refused_dispatch(make_server, make_client):
    held = Held()
    server = make_server(held)
    client = make_client(server.origin, pipelining=1)
    drains = []
    client.on("drain", lambda origin, *rest: drains.append(origin))
    a, b = Rec(), Rec()
    assert client.dispatch({"path": "/a", "method": "GET"}, a) is False  # queued while connecting
    assert client.busy and client.stats == (False, 1, 0, 1)
    assert client.dispatch({"path": "/b", "method": "GET"}, b) is False
    wait_for(lambda: held.seen == ["/a"], what="first on the wire")
    assert client.stats == (True, 1, 1, 2)
    held.release.set()
    with gevent.Timeout(3):
        a.done.wait()
        b.done.wait()
    wait_for(lambda: drains, what="drain")
    gevent.sleep(0.02)
    assert drains == [server.origin]
    assert not client.busy and client.stats == (True, 0, 0, 0)


def test_body_read_interrupted_by_a_timeout_then_closed_frees_the_client(make_server, make_client):
    def handler(conn):
        req = conn.read_request()
        if req.target == "/slow":
            conn.sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
            conn.read_exact(1)  # until the client closes
            return
        conn.respond(b"ok")

    server = make_server(handler)
    client = make_client(server.origin)
    resp = client.request(path="/slow")
    with pytest.raises(gevent.Timeout):
        with gevent.Timeout(0.05):
            resp.body.read()
    assert client.stats.running == 1
    resp.body.close()
    wait_for(lambda: client.stats == (False, 0, 0, 0), what="the connection closed")
    with gevent.Timeout(3):
        assert client.request(path="/fast").body.text() == "ok"
    assert server.accepted == 2


def test_pool_close_with_requests_queued_for_a_refused_port():
    pool = greenhttp.Pool(refused_origin(), connections=1)
    recs = [Rec() for _ in range(3)]
    for r in recs:
        pool.dispatch({"path": "/", "method": "GET"}, r)
    with gevent.Timeout(3):
        pool.close()
    assert [[type(e) for e in r.errors] for r in recs] == [[ConnectionRefusedError]] * 3
    assert pool.destroyed
    wait_for(lambda: pool.stats == (0, 0, 0, 0, 0, 0), what="members gone")


def test_pool_with_a_composed_factory_serves_its_queue_in_order(make_server):
    server = make_server(serve_forever())
    order = []

    def record(dispatch):
        def d(opts, handler):
            order.append(opts["path"])
            return dispatch(opts, handler)

        return d

    pool = greenhttp.Pool(
        server.origin, connections=2, factory=lambda origin, **o: greenhttp.Client(origin, **o).compose(record)
    )
    try:
        recs = [Rec() for _ in range(10)]
        for i, r in enumerate(recs):
            pool.dispatch({"path": f"/{i}", "method": "GET"}, r)
        with gevent.Timeout(3):
            for r in recs:
                r.done.wait()
        assert order == [f"/{i}" for i in range(10)]
        assert all(r.calls == ["start", "response", "end"] for r in recs)
        assert server.accepted == 2
    finally:
        pool.destroy()


def test_pool_close_after_destroy_raises_even_while_an_earlier_close_winds_down(make_server):
    held = Held()
    server = make_server(held)
    pool = greenhttp.Pool(server.origin, connections=1)
    recs = [Rec() for _ in range(2)]
    for r in recs:
        pool.dispatch({"path": "/", "method": "GET"}, r)
    wait_for(lambda: held.seen, what="on the wire")
    first = gevent.spawn(pool.close)
    wait_for(lambda: pool.closed, what="closing")
    pool.destroy()
    with pytest.raises(errors.ClientDestroyedError):  # REFERENCE §1.9: close() after destroy
        with gevent.Timeout(3):
            pool.close()
    with gevent.Timeout(3):
        assert first.get() is None  # the close in progress ends with the destroy
    held.release.set()
