"""Pool: connection limit, FIFO queue, drain, stats, events, TTL, lifecycle."""

from __future__ import annotations

import gevent
import gevent.event
import gevent.socket as gsocket
import pytest

import greenhttp
from greenhttp import errors
from testkit import serve_forever, wait_for


@pytest.fixture
def make_pool():
    """``make_pool(origin, **options)``: Pools destroyed at teardown."""
    pools: list[greenhttp.Pool] = []

    def make(origin, **options):
        p = greenhttp.Pool(origin, **options)
        pools.append(p)
        return p

    yield make
    for p in pools:
        with gevent.Timeout(5):
            p.destroy()


class Gate:
    """A server handler that records request targets and answers only once ``opened``.

    Counts the connections open at once (``live``, ``max_live``).
    """

    def __init__(self, opened: bool = False):
        self.opened = gevent.event.Event()
        if opened:
            self.opened.set()
        self.seen: list[str] = []
        self.live = 0
        self.max_live = 0

    def __call__(self, conn):
        self.live += 1
        self.max_live = max(self.max_live, self.live)
        try:
            while True:
                req = conn.read_request()
                if req is None:
                    return
                self.seen.append(req.target)
                self.opened.wait(10)
                conn.respond(req.target.encode())
        finally:
            self.live -= 1


class Recorder:
    def __init__(self):
        self.status = None
        self.error = None
        self.done = gevent.event.Event()

    def on_request_start(self, controller, context):
        pass

    def on_response_start(self, controller, status_code, headers, status_message):
        self.status = status_code

    def on_response_data(self, controller, chunk):
        pass

    def on_response_end(self, controller, trailers):
        self.done.set()

    def on_response_error(self, controller, err):
        self.error = err
        self.done.set()


def get(pool, path="/"):
    return pool.request(path=path, method="GET").body.bytes()


def outcome(pool, path="/"):
    """``get`` for a greenlet expected to fail: returns the exception instead of raising it."""
    try:
        return get(pool, path)
    except Exception as exc:
        return exc


# -- options ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"connections": -1}, "connections"),
        ({"connections": 1.5}, "connections"),
        ({"connections": "4"}, "connections"),
        ({"connections": True}, "connections"),
        ({"client_ttl": -1}, "client_ttl"),
        ({"client_ttl": float("inf")}, "client_ttl"),
        ({"client_ttl": "1"}, "client_ttl"),
        ({"factory": 3}, "factory"),
        ({"pipelining": -1}, "pipelining"),
        ({"keep_alive_timeout": 0}, "keep_alive_timeout"),
        ({"no_such_option": 1}, "no_such_option"),
    ],
)
def test_invalid_options_name_the_option(options, name):
    with pytest.raises(errors.InvalidArgumentError, match=name):
        greenhttp.Pool("http://127.0.0.1:1", **options)


@pytest.mark.parametrize("origin", ["ftp://h", "http://h/path", "http://h/?q", None, 42])
def test_invalid_origin(origin):
    with pytest.raises(errors.InvalidArgumentError):
        greenhttp.Pool(origin)


def test_origin_and_connections(make_pool):
    p = make_pool("http://LOCALHOST:80/", connections=3)
    assert p.origin == "http://localhost"
    assert p.connections == 3
    assert make_pool("http://127.0.0.1:1").connections is None
    assert make_pool("http://127.0.0.1:1", connections=0).connections is None
    assert "greenhttp.Pool" in repr(p)


# -- requests and the connection limit ----------------------------------------------------


def test_request_through_the_pool(make_server, make_pool):
    server = make_server(serve_forever(b"pooled"))
    pool = make_pool(server.origin, connections=2)
    r = pool.request(path="/x", method="GET", headers={"x-a": "1"})
    assert r.status_code == 200
    assert r.body.bytes() == b"pooled"
    assert server.requests[0].target == "/x"
    assert server.requests[0].header("x-a") == "1"


def test_connections_sharing_one_receive_buffer_never_mix_their_bytes(make_server, make_pool):
    # The readers of plain-socket connections share one receive buffer per thread.
    # Bodies of many sizes, some arriving in pieces, each distinct per request.
    def handler(conn):
        while (req := conn.read_request()) is not None:
            n = int(req.target.split("/")[2])
            body = (req.target.encode() + b"|") * (n // (len(req.target) + 1) + 1)
            head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
            conn.send(head + body[: len(body) // 2])
            gevent.sleep(0)  # the rest later: another reader reads in between
            conn.send(body[len(body) // 2 :])

    server = make_server(handler)
    pool = make_pool(server.origin, connections=6)
    sizes = [10, 100, 5000, 70_000, 200_000, 1]

    def fetch(i: int) -> tuple[str, bytes]:
        path = f"/{i}/{sizes[i % len(sizes)]}"
        return path, pool.request(path=path).body.bytes()

    jobs = [gevent.spawn(fetch, i) for i in range(60)]
    for job in jobs:
        path, got = job.get(timeout=10)
        unit = path.encode() + b"|"
        assert got == unit * (len(got) // len(unit)), f"bytes of another response in {path}"
        assert len(got) >= int(path.split("/")[2])


def test_two_thousand_greenlets_on_eight_connections(make_server, make_pool):
    gate = Gate(opened=True)
    server = make_server(gate)
    pool = make_pool(server.origin, connections=8)
    results: list[bytes] = []

    def one(i):
        results.append(get(pool, f"/{i}"))

    greenlets = [gevent.spawn(one, i) for i in range(2000)]
    gevent.joinall(greenlets, timeout=50, raise_error=True)
    assert all(g.successful() for g in greenlets)
    assert sorted(results) == sorted(f"/{i}".encode() for i in range(2000))
    assert server.accepted == 8
    assert gate.max_live <= 8
    stats = pool.stats
    assert stats.connected == 8 and stats.free == 8
    assert (stats.queued, stats.pending, stats.running, stats.size) == (0, 0, 0, 0)


def test_unbounded_pool_opens_a_connection_per_concurrent_request(make_server, make_pool):
    gate = Gate()
    server = make_server(gate)
    pool = make_pool(server.origin)
    greenlets = [gevent.spawn(get, pool, f"/{i}") for i in range(10)]
    wait_for(lambda: len(gate.seen) == 10, what="10 requests at the server")
    assert server.accepted == 10
    assert pool.stats.queued == 0
    gate.opened.set()
    gevent.joinall(greenlets, timeout=10, raise_error=True)


def test_clients_are_made_on_demand_and_reused(make_server, make_pool):
    server = make_server(serve_forever())
    pool = make_pool(server.origin, connections=4)
    for _ in range(20):
        get(pool)
    assert server.accepted == 1  # one greenlet at a time never needs a second connection


# -- FIFO ------------------------------------------------------------------------------------


def test_a_freed_connection_takes_the_oldest_request_not_the_releasing_greenlet(make_server, make_pool):
    gate = Gate()
    server = make_server(gate)
    pool = make_pool(server.origin, connections=1)
    first = gevent.event.Event()

    def loop():
        get(pool, "/0-0")
        first.set()
        get(pool, "/0-1")  # straight back: must queue behind /1 … /5

    g0 = gevent.spawn(loop)
    wait_for(lambda: gate.seen == ["/0-0"], what="the first request")
    others = []
    for i in range(1, 6):
        others.append(gevent.spawn(get, pool, f"/{i}"))
        wait_for(lambda i=i: pool.stats.queued == i, what=f"request {i} queued")
    gate.opened.set()
    gevent.joinall([g0, *others], timeout=10, raise_error=True)
    assert first.is_set()
    assert gate.seen == ["/0-0", "/1", "/2", "/3", "/4", "/5", "/0-1"]


def test_no_request_is_overtaken_at_64_greenlets_on_4_connections(make_server, make_pool):
    """FIFO: once connected, no request starts before one dispatched earlier."""
    server = make_server(Gate(opened=True))
    pool = make_pool(server.origin, connections=4)
    issued: dict[int, int] = {}
    started: list[int] = []
    seq = iter(range(10**9))

    class Start:
        def __init__(self, handler, rid):
            self.handler, self.rid = handler, rid

        def __getattr__(self, name):
            return getattr(self.handler, name)

        def on_request_start(self, controller, context):
            started.append(self.rid)
            self.handler.on_request_start(controller, context)

    def record(dispatch):
        def recorded(options, handler):
            rid = next(seq)
            issued[rid] = len(started)
            return dispatch(options, Start(handler, rid))

        return recorded

    composed = pool.compose(record)
    gevent.joinall([gevent.spawn(get, composed) for _ in range(4)], raise_error=True)  # connect all four
    issued.clear()
    started.clear()

    def worker():
        for _ in range(20):
            get(composed)

    gevent.joinall([gevent.spawn(worker) for _ in range(64)], timeout=50, raise_error=True)
    assert len(started) == 64 * 20
    # Every request started in the order it was dispatched: nobody barged in.
    assert started == sorted(started)
    # So the longest wait, counted in requests started meanwhile, is bounded by the greenlets ahead.
    position = {rid: i for i, rid in enumerate(started)}
    assert max(position[rid] - issued[rid] for rid in issued) <= 64


def test_a_queued_request_can_be_abandoned(make_server, make_pool):
    """A signal or a gevent.Timeout frees the caller at once; the request never reaches the wire."""
    gate = Gate()
    server = make_server(gate)
    pool = make_pool(server.origin, connections=1)
    first = gevent.spawn(get, pool, "/first")
    wait_for(lambda: gate.seen == ["/first"], what="the first request")
    controller = greenhttp.AbortController()
    aborted = gevent.spawn(lambda: pool.request(path="/aborted", signal=controller.signal))
    wait_for(lambda: pool.stats.queued == 1, what="queued")
    controller.abort(RuntimeError("changed my mind"))
    with pytest.raises(RuntimeError, match="changed my mind"):
        aborted.get(timeout=5)
    with pytest.raises(gevent.Timeout), gevent.Timeout(0.05):
        get(pool, "/timed-out")
    gate.opened.set()
    assert first.get(timeout=5) == b"/first"
    assert get(pool, "/last") == b"/last"
    assert gate.seen == ["/first", "/last"]


# -- dispatch, drain, stats -----------------------------------------------------------------


def test_dispatch_returns_false_when_full_and_drain_carries_targets(make_server, make_pool):
    gate = Gate()
    server = make_server(gate)
    pool = make_pool(server.origin, connections=2)
    drains = []
    pool.on("drain", lambda origin, targets: drains.append((origin, targets)))
    h = [Recorder() for _ in range(3)]
    assert pool.dispatch({"path": "/1", "method": "GET"}, h[0]) is True  # room for a second client
    assert pool.dispatch({"path": "/2", "method": "GET"}, h[1]) is False  # both busy now
    assert pool.dispatch({"path": "/3", "method": "GET"}, h[2]) is False  # queued
    assert pool.busy
    wait_for(lambda: len(gate.seen) == 2, what="two requests at the server")
    stats = pool.stats
    assert stats.queued == 1 and stats.pending == 1 and stats.running == 2 and stats.size == 3
    assert stats.connected == 2 and stats.free == 0
    gate.opened.set()
    for r in h:
        assert r.done.wait(5) and r.error is None and r.status == 200
    wait_for(lambda: drains, what="drain")
    origin, targets = drains[0]
    assert origin == server.origin
    assert targets[0] is pool and isinstance(targets[-1], greenhttp.Client)
    assert not pool.busy
    assert pool.stats.free == 2


def test_dispatch_error_goes_to_the_handler_and_keeps_the_client_free(make_server, make_pool):
    server = make_server(serve_forever())
    pool = make_pool(server.origin, connections=1)
    bad = Recorder()
    pool.dispatch({"path": "no-slash", "method": "GET"}, bad)
    assert isinstance(bad.error, errors.InvalidArgumentError)
    assert get(pool) == b"hello"  # the one client was not left waiting for a drain
    # Again, now that the client has served a request (and drained) once.
    bad = Recorder()
    pool.dispatch({"path": "no-slash", "method": "GET"}, bad)
    assert isinstance(bad.error, errors.InvalidArgumentError)
    assert pool.stats.free == 1
    assert get(pool) == b"hello"


def _gated_pool_of_one(make_server, make_pool):
    """A Pool of one connection to a Gate server, and the list its "error" events go to."""
    gate = Gate()
    pool = make_pool(make_server(gate).origin, connections=1)
    errors_seen = []
    pool.on("error", errors_seen.append)
    return gate, pool, errors_seen


def test_a_queued_request_whose_handler_fails_does_not_stall_the_pool(make_server, make_pool):
    # A queued request refused when its turn comes (a bad path), whose handler's
    # on_response_error then raises: the error goes to the pool's "error" event,
    # and the pool goes on serving (it used to keep its one client out of use).
    gate, pool, errors_seen = _gated_pool_of_one(make_server, make_pool)

    class Raising:
        def on_response_error(self, controller, err):
            raise RuntimeError("handler bug")

    first = gevent.spawn(get, pool, "/first")
    wait_for(lambda: gate.seen, what="the first request at the server")
    assert pool.dispatch({"path": "no-slash", "method": "GET"}, Raising()) is False  # queued
    gate.opened.set()
    assert first.get(timeout=5) == b"/first"
    wait_for(lambda: errors_seen, what="the handler's error")
    assert [str(e) for e in errors_seen] == ["handler bug"]
    with gevent.Timeout(5):
        assert get(pool, "/next") == b"/next"
    assert pool.stats.free == 1


def test_destroy_fails_every_queued_request_though_one_handler_cannot_be_told(make_server, make_pool):
    # Looking up a queued handler's on_response_error raises (a broken proxy, say):
    # the pool's "error" event gets that, and destroy() still fails the requests
    # queued behind it and returns (the lookup used to escape from destroy()).
    gate, pool, errors_seen = _gated_pool_of_one(make_server, make_pool)

    class Unreachable:
        def __getattr__(self, name):
            raise RuntimeError(f"cannot look up {name}")

    running = Recorder()
    assert pool.dispatch({"path": "/running", "method": "GET"}, running) is False
    wait_for(lambda: gate.seen, what="the first request at the server")
    assert pool.dispatch({"path": "/q1", "method": "GET"}, Unreachable()) is False  # queued
    behind = Recorder()
    assert pool.dispatch({"path": "/q2", "method": "GET"}, behind) is False  # queued
    try:
        with gevent.Timeout(5):
            pool.destroy()
    finally:
        gate.opened.set()  # let the server's handler finish
    assert [str(e) for e in errors_seen] == ["cannot look up on_response_error"]
    assert isinstance(behind.error, errors.ClientDestroyedError)
    assert running.done.wait(5) and running.error is not None
    assert pool.destroyed


def test_handler_without_on_response_error_gets_the_exception_raised():
    pool = greenhttp.Pool("http://127.0.0.1:1")
    pool.close()
    with pytest.raises(errors.ClientDestroyedError):
        pool.dispatch({"path": "/", "method": "GET"}, object())


# -- events -----------------------------------------------------------------------------------


def test_events_are_re_emitted_with_the_pool_first(make_server, make_pool):
    def handler(conn):
        conn.read_request()
        conn.respond(b"x", headers=[("Connection", "close")])
        conn.close()

    server = make_server(handler)
    pool = make_pool(server.origin)
    events = []
    pool.on("connect", lambda origin, targets: events.append(("connect", origin, targets)))
    pool.on("disconnect", lambda origin, targets, err: events.append(("disconnect", origin, targets, err)))
    get(pool)
    wait_for(lambda: len(events) == 2, what="connect and disconnect")
    kind, origin, targets = events[0]
    assert (kind, origin) == ("connect", server.origin)
    assert targets[0] is pool and isinstance(targets[1], greenhttp.Client) and len(targets) == 2
    assert events[1][0] == "disconnect" and events[1][2] == targets
    assert isinstance(events[1][3], BaseException)


def test_a_client_that_fails_to_connect_is_replaced(make_server, make_pool):
    server = make_server(serve_forever(b"ok"))
    real = greenhttp.build_connector()
    calls = []

    def flaky(options, callback=None):
        calls.append(options)
        if len(calls) == 1:
            raise ConnectionRefusedError(111, "refused (scripted)")
        return real(options)

    pool = make_pool(server.origin, connections=1, connect=flaky)
    failures = []
    pool.on("connectionError", lambda origin, targets, err: failures.append((targets, err)))
    connects = []
    pool.on("connect", lambda origin, targets: connects.append(targets))
    with pytest.raises(ConnectionRefusedError):
        get(pool)
    assert get(pool) == b"ok"
    assert len(failures) == 1 and failures[0][0][0] is pool
    assert isinstance(failures[0][1], ConnectionRefusedError)
    assert connects[0][-1] is not failures[0][0][-1]  # a new client took its place
    assert pool.stats.connected == 1


def test_queued_requests_survive_a_connection_error(make_server, make_pool):
    server = make_server(serve_forever(b"ok"))
    real = greenhttp.build_connector()
    calls = []

    def flaky(options, callback=None):
        calls.append(1)
        if len(calls) == 1:
            gevent.sleep(0.01)  # let the other requests queue behind this connect
            raise ConnectionRefusedError(111, "refused (scripted)")
        return real(options)

    pool = make_pool(server.origin, connections=1, connect=flaky)
    greenlets = [gevent.spawn(outcome, pool, f"/{i}") for i in range(5)]
    results = [g.get(timeout=10) for g in greenlets]
    assert isinstance(results[0], ConnectionRefusedError)
    assert results[1:] == [b"ok"] * 4


def test_a_client_destroyed_from_outside_is_replaced(make_server, make_pool):
    gate = Gate()
    server = make_server(gate)
    pool = make_pool(server.origin, connections=1)
    clients = []
    pool.on("connect", lambda origin, targets: clients.append(targets[-1]))
    first = gevent.spawn(outcome, pool, "/1")
    second = gevent.spawn(outcome, pool, "/2")
    wait_for(lambda: gate.seen == ["/1"] and pool.stats.queued == 1, what="one running, one queued")
    clients[0].destroy()  # not through the pool
    assert isinstance(first.get(timeout=5), errors.ClientDestroyedError)
    gate.opened.set()
    assert second.get(timeout=5) == b"/2"
    assert get(pool, "/3") == b"/3"
    assert len(clients) == 2 and clients[1] is not clients[0]
    clients[1].close()  # an idle one, closed from outside
    assert get(pool, "/4") == b"/4"
    assert len(clients) == 3
    assert pool.stats.connected == 1


def test_a_client_destroyed_from_outside_while_connecting_is_replaced(make_server, make_pool):
    # Destroyed before its connection was made, it emits no "disconnect": the pool
    # did not notice, and the request queued behind it (and close()) waited forever.
    server = make_server(serve_forever())
    connected = gevent.event.Event()
    calls = []

    def connector(options, callback):
        calls.append(options["hostname"])
        if len(calls) == 1:  # the first connection never completes
            return
        callback(None, gsocket.create_connection(("127.0.0.1", server.port)))
        connected.set()

    clients = []

    def factory(origin, **options):
        clients.append(greenhttp.Client(origin, **options))
        return clients[-1]

    pool = make_pool(server.origin, connections=1, factory=factory, connect=connector)
    first = gevent.spawn(outcome, pool, "/1")
    second = gevent.spawn(outcome, pool, "/2")
    wait_for(lambda: pool.stats.queued == 1 and len(calls) == 1, what="one connecting, one queued")
    clients[0].destroy()  # not through the pool
    assert isinstance(first.get(timeout=5), errors.ClientDestroyedError)
    assert second.get(timeout=5) == b"hello"
    assert len(clients) == 2 and connected.is_set()
    with gevent.Timeout(5):
        pool.close()
    assert pool.stats == greenhttp.PoolStats(0, 0, 0, 0, 0, 0)


def test_a_busy_member_destroyed_from_outside_makes_room_and_the_pool_drains(make_server, make_pool):
    gate = Gate()
    server = make_server(gate)
    clients = []

    def factory(origin, **options):
        clients.append(greenhttp.Client(origin, **options))
        return clients[-1]

    pool = make_pool(server.origin, connections=1, factory=factory)
    drains = []
    pool.on("drain", lambda origin, targets: drains.append(targets[0]))
    first = gevent.spawn(outcome, pool, "/1")
    wait_for(lambda: gate.seen == ["/1"], what="the request running")
    assert pool.busy and not drains
    clients[0].destroy()
    assert isinstance(first.get(timeout=5), errors.ClientDestroyedError)
    assert drains == [pool] and not pool.busy
    gate.opened.set()
    assert get(pool, "/2") == b"/2"


# -- client_ttl and factory ---------------------------------------------------------------


def test_client_ttl_retires_old_connections(make_server, make_pool):
    server = make_server(serve_forever())
    pool = make_pool(server.origin, connections=1, client_ttl=0.05)
    get(pool)
    gevent.sleep(0.1)  # the TTL itself is what is under test
    get(pool)
    assert server.accepted == 2
    wait_for(lambda: server.conns[0].eof.is_set(), what="the expired connection to close")
    assert pool.stats.connected == 1


def test_factory_makes_the_members(make_server, make_pool):
    server = make_server(serve_forever())
    made = []

    def factory(origin, **options):
        made.append((origin, options))
        return greenhttp.Client(origin, **options)

    pool = make_pool(server.origin, factory=factory, connections=2, keep_alive_timeout=7.0)
    get(pool)
    assert made == [(server.origin, {"keep_alive_timeout": 7.0})]


def test_a_member_s_own_drain_listeners_still_hear_its_drains(make_server, make_pool):
    # The pool learns of a member Client's drains through a direct hook, not an
    # event listener; a listener the factory put on the member is still called.
    server = make_server(serve_forever())
    heard = []

    def factory(origin, **options):
        client = greenhttp.Client(origin, **options)
        client.on("drain", lambda origin: heard.append(origin))
        return client

    pool = make_pool(server.origin, factory=factory, connections=1)
    results = [gevent.spawn(get, pool, f"/{i}") for i in range(3)]  # two wait in the pool's queue
    gevent.joinall(results, timeout=5, raise_error=True)
    assert [g.value for g in results] == [b"hello"] * 3
    assert heard and set(heard) == {server.origin}
    assert pool.stats.free == 1  # and the pool took its member back each time


def test_a_failing_factory_fails_the_request(make_pool):
    def factory(origin, **options):
        raise RuntimeError("no clients today")

    pool = make_pool("http://127.0.0.1:1", factory=factory)
    with pytest.raises(RuntimeError, match="no clients today"):
        get(pool)


# -- compose ----------------------------------------------------------------------------------


def test_compose_interceptors_see_requests_with_the_pool_origin(make_server, make_pool):
    server = make_server(serve_forever())
    pool = make_pool(server.origin, connections=2)
    seen = []

    def spy(dispatch):
        def spied(options, handler):
            seen.append((options["origin"], options["path"]))
            return dispatch(options, handler)

        return spied

    composed = pool.compose(spy)
    assert composed.request(path="/c").body.bytes() == b"hello"
    assert seen == [(server.origin, "/c")]
    assert composed.stats == pool.stats


# -- close and destroy --------------------------------------------------------------------------


def test_close_waits_for_queued_requests_then_refuses(make_server, make_pool):
    gate = Gate()
    server = make_server(gate)
    pool = make_pool(server.origin, connections=1)
    greenlets = [gevent.spawn(get, pool, f"/{i}") for i in range(4)]
    wait_for(lambda: pool.stats.queued == 3, what="three queued")
    closer = gevent.spawn(pool.close)
    wait_for(lambda: pool.closed, what="closed flag")
    with pytest.raises(errors.ClientClosedError):
        get(pool)
    assert not closer.ready()
    gate.opened.set()
    closer.get(timeout=10)
    assert [g.get(timeout=1) for g in greenlets] == [b"/0", b"/1", b"/2", b"/3"]
    assert pool.destroyed
    assert server.conns[0].eof.wait(5)
    with pytest.raises(errors.ClientDestroyedError):  # a finished close destroyed it (REFERENCE §1.9)
        pool.close()
    with pytest.raises(errors.ClientDestroyedError):
        get(pool)


def test_close_with_callback(make_server, make_pool):
    server = make_server(serve_forever())
    pool = make_pool(server.origin)
    get(pool)
    done = gevent.event.AsyncResult()
    assert pool.close(callback=lambda err, value: done.set((err, value))) is None
    assert done.get(timeout=5) == (None, None)
    assert pool.destroyed


def test_destroy_fails_queued_and_running_requests(make_server, make_pool):
    gate = Gate()
    server = make_server(gate)
    pool = make_pool(server.origin, connections=1)
    greenlets = [gevent.spawn(outcome, pool, f"/{i}") for i in range(3)]
    wait_for(lambda: pool.stats.queued == 2, what="two queued")
    boom = RuntimeError("boom")
    pool.destroy(boom)
    assert [g.get(timeout=5) for g in greenlets] == [boom, boom, boom]
    assert pool.destroyed and pool.closed
    gate.opened.set()  # the server's handler reads again, and finds the socket closed
    assert server.conns[0].eof.wait(5)
    with pytest.raises(errors.ClientDestroyedError):
        pool.close()


def test_context_manager_closes(make_server):
    server = make_server(serve_forever())
    with greenhttp.Pool(server.origin, connections=2) as pool:
        assert get(pool) == b"hello"
    assert pool.destroyed
    assert server.conns[0].eof.wait(5)


def test_example_runs():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "pool.py"
    done = subprocess.run(
        [sys.executable, "-W", "error", str(script)], capture_output=True, text=True, timeout=50, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "1000 requests over at most 8 connections" in done.stdout


# -- a real server ------------------------------------------------------------------------------


def test_nginx_256_greenlets_on_64_connections(nginx, make_pool):
    pool = make_pool(nginx.origin, connections=64)
    conns: set[str] = set()
    count = [0]

    def worker():
        for _ in range(8):
            r = pool.request(path="/", method="GET")
            assert (r.status_code, r.body.bytes()) == (200, nginx.small)
            conns.add(r.headers["x-conn"])
            count[0] += 1

    gevent.joinall([gevent.spawn(worker) for _ in range(256)], timeout=50, raise_error=True)
    assert count[0] == 256 * 8
    assert len(conns) <= 64
    assert pool.stats.connected <= 64
