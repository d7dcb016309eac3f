"""A finished request leaves nothing in a reference cycle, through every interceptor.

Objects in a cycle are freed only by the cyclic garbage collector, which at
tens of thousands of requests per second cost more CPU than the requests
themselves. Handlers, their controllers, the request and the body refer to
each other while a request runs; once the terminal callback is delivered
(``on_response_end``, ``on_response_error`` or ``on_request_upgrade``) each
of them drops the link that closed the loop, so reference counting frees the
whole request.

Each check runs a scenario a few times, then ``rounds`` more times with the
collector off and ``gc.DEBUG_SAVEALL`` on, and asserts the collector then
finds nothing (the failure lists the types it found). The handler used
downstream keeps its controller, as ``request()``'s handler and body do, and
pokes it after the end: a controller must keep answering then.
"""

from __future__ import annotations

import gc
import gzip
import itertools
import socket as stdsocket
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import gevent.event
import pytest

import greenhttp
from greenhttp import errors, interceptors
from greenhttp.cache_stores import MemoryCacheStore, SqliteCacheStore
from greenhttp.errors import ExperimentalWarning
from h2_support.h2server import H2ServerConn
from testkit import wait_for

pytest_plugins = ["h2_support.fixtures"]

Run = Callable[[], Any]

TEXT = b"".join(b"line %05d of a compressible body\n" % i for i in range(4000))  # 132 kB
GZIPPED = gzip.compress(TEXT)
BIG = bytes(range(256)) * 1024  # 256 kB


def _decompress(**kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return interceptors.decompress(**kw)


def _fast_retry(**kw: Any) -> Any:
    return interceptors.retry(min_timeout=0.001, max_timeout=0.002, **kw)


# ---------------------------------------------------------------------------
# the check
# ---------------------------------------------------------------------------


def _settle() -> None:
    """Let callbacks scheduled on the hub (resumes, background validations) run."""
    for _ in range(3):
        gevent.sleep(0.001)


def assert_no_cycles(run: Run, rounds: int = 8, warmup: int = 3) -> None:
    """Fail if ``rounds`` runs of ``run`` leave objects that only the cycle collector frees."""
    for _ in range(warmup):
        run()
    _settle()
    gc.collect()
    enabled = gc.isenabled()
    debug = gc.get_debug()
    gc.disable()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(rounds):
            run()
        _settle()
        gc.collect()
        found = Counter(type(o).__qualname__ for o in gc.garbage)
    finally:
        gc.set_debug(debug)
        gc.garbage.clear()
        if enabled:
            gc.enable()
    assert not found, (
        f"{sum(found.values())} objects left in reference cycles by {rounds} rounds: "
        f"{dict(found.most_common(25))}"
    )


# ---------------------------------------------------------------------------
# a downstream handler that keeps its controller
# ---------------------------------------------------------------------------


class Sink:
    """A dispatch handler that keeps its controller (as ``request()``'s handler does).

    ``abort_at``: ``"start"``, ``"head"`` or ``"data"`` aborts there; ``pause``
    pauses at the first body chunk and resumes from another greenlet.
    """

    def __init__(self, abort_at: str | None = None, pause: bool = False) -> None:
        self.abort_at = abort_at
        self.pause = pause
        self.controller: Any = None
        self.status: int | None = None
        self.body = bytearray()
        self.error: BaseException | None = None
        self.ended = False
        self.done = gevent.event.Event()

    def on_request_start(self, controller: Any, context: Any) -> None:
        self.controller = controller
        if self.abort_at == "start":
            controller.abort()

    def on_response_start(self, controller: Any, status_code: int, headers: Any, status_message: str) -> None:
        self.controller = controller
        if status_code >= 200:
            self.status = status_code
            if self.abort_at == "head":
                controller.abort()

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        self.body += chunk
        if self.abort_at == "data":
            controller.abort()
        elif self.pause:
            self.pause = False
            controller.pause()
            gevent.spawn(controller.resume)

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        self.ended = True
        self.done.set()

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        self.error = err
        self.done.set()

    def on_request_upgrade(self, controller: Any, status_code: int, headers: Any, socket: Any) -> None:
        socket.close()
        self.ended = True
        self.done.set()


def poke(controller: Any) -> None:
    """Use a controller after its request ended: it answers, and its methods do no harm."""
    if controller is None:
        return
    assert isinstance(controller.paused, bool)
    assert isinstance(controller.aborted, bool)
    _ = (controller.reason, controller.raw_headers, controller.raw_trailers)
    controller.pause()
    controller.resume()
    controller.abort()


class Env:
    """A keep-alive loopback server and the dispatchers aimed at it."""

    def __init__(self, origin: str, client: Any, pool: Any, agent: Any) -> None:
        self.origin = origin
        self.client = client
        self.pool = pool
        self.agent = agent
        self.paths = itertools.count()
        self.cleanups: list[Callable[[], Any]] = []

    def dispatch(self, dispatcher: Any, path: str = "/", sink: Sink | None = None, **opts: Any) -> Sink:
        sink = sink if sink is not None else Sink()
        dispatcher.dispatch({"origin": self.origin, "path": path, "method": "GET", **opts}, sink)
        assert sink.done.wait(5), f"no terminal callback for {path}"
        poke(sink.controller)
        return sink

    def fetch(self, dispatcher: Any, path: str = "/", **opts: Any) -> bytes:
        r = dispatcher.request(origin=self.origin, path=path, **opts)
        data: bytes = r.body.bytes()
        poke(r.body._controller)
        return data

    def unique(self, prefix: str) -> str:
        return f"{prefix}/{next(self.paths)}"


# ---------------------------------------------------------------------------
# the server
# ---------------------------------------------------------------------------


def _app(conn: Any) -> None:
    flaky = itertools.count()
    while True:
        req = conn.read_request()
        if req is None:
            return
        target: str = req.target
        if req.method == "HEAD":
            conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncache-control: max-age=60\r\n\r\n")
        elif target == "/":
            conn.respond(b"hello")
        elif target == "/gzip":
            conn.respond(GZIPPED, headers=[("content-encoding", "gzip")])
        elif target == "/big":
            conn.respond(BIG)
        elif target == "/r1":
            conn.respond(b"moved", status="302 Found", headers=[("location", "/r2")])
        elif target == "/r2":
            conn.respond(b"moved", status="302 Found", headers=[("location", "/")])
        elif target == "/json404":
            conn.respond(b'{"missing": true}', status="404 Not Found", headers=[("content-type", "application/json")])
        elif target == "/flaky":
            if next(flaky) % 2 == 0:
                conn.respond(b"busy", status="503 Service Unavailable")
            else:
                conn.respond(b"ok")
        elif target == "/busy":
            conn.respond(b"busy", status="503 Service Unavailable")
        elif target.startswith("/fresh"):
            conn.respond(b"fresh", headers=[("cache-control", "max-age=60"), ("etag", '"f"')])
        elif target.startswith("/etag"):
            if req.header("if-none-match") == '"x"':
                conn.send(b'HTTP/1.1 304 Not Modified\r\netag: "x"\r\ncache-control: no-cache\r\n\r\n')
            else:
                conn.respond(b"tagged", headers=[("cache-control", "no-cache"), ("etag", '"x"')])
        elif target.startswith("/swr"):
            if req.header("if-none-match"):
                conn.send(b'HTTP/1.1 304 Not Modified\r\netag: "s"\r\ncache-control: max-age=0, stale-while-revalidate=60\r\n\r\n')
            else:
                conn.respond(b"swr", headers=[("cache-control", "max-age=0, stale-while-revalidate=60"), ("etag", '"s"')])
        elif target.startswith("/sie"):
            if req.header("if-none-match"):
                conn.respond(b"down", status="500 Internal Server Error")
            else:
                conn.respond(b"sie", headers=[("cache-control", "max-age=0, stale-if-error=60"), ("etag", '"e"')])
        elif target == "/slow":
            gevent.sleep(0.01)
            conn.respond(BIG)
        elif target == "/reset":
            conn.close()
            return
        elif target == "/upgrade":
            conn.send(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: echo\r\nconnection: upgrade\r\n\r\n")
            conn.wait_closed()
            return
        elif target == "/too-big":
            conn.respond(BIG)
        else:
            conn.respond(b"no route", status="404 Not Found")


@pytest.fixture
def env(make_server: Any) -> Iterator[Env]:
    server = make_server(_app)
    client = greenhttp.Client(server.origin)
    pool = greenhttp.Pool(server.origin, connections=4)
    agent = greenhttp.Agent()
    env = Env(server.origin, client, pool, agent)
    yield env
    for cleanup in env.cleanups:
        cleanup()
    with gevent.Timeout(5):
        client.destroy()
        pool.destroy()
        agent.destroy()


# ---------------------------------------------------------------------------
# scenarios: each returns what one round runs
# ---------------------------------------------------------------------------


def plain_request(env: Env) -> Run:
    return lambda: env.fetch(env.pool, "/")


def plain_client_request(env: Env) -> Run:
    return lambda: env.fetch(env.client, "/")


def plain_stream(env: Env) -> Run:
    class Collect:
        def __init__(self) -> None:
            self.parts: list[bytes] = []

        def write(self, chunk: bytes) -> None:
            self.parts.append(chunk)

    return lambda: env.pool.stream(path="/big", method="GET", factory=lambda data: Collect())


def plain_dispatch(env: Env) -> Run:
    return lambda: env.dispatch(env.pool, "/big")


def plain_error_status(env: Env) -> Run:
    return lambda: env.fetch(env.pool, "/json404")


def plain_agent(env: Env) -> Run:
    return lambda: env.fetch(env.agent, "/")


def dump_ok(env: Env) -> Run:
    d = env.pool.compose(interceptors.dump())

    def run() -> None:
        assert env.fetch(d, "/big") == b""
        assert env.dispatch(d, "/big").ended

    return run


def dump_consumer_abort(env: Env) -> Run:
    d = env.pool.compose(interceptors.dump())

    def run() -> None:
        sink = env.dispatch(d, "/big", Sink(abort_at="head"))
        assert isinstance(sink.error, errors.RequestAbortedError)

    return run


def retry_then_ok(env: Env) -> Run:
    d = env.pool.compose(_fast_retry())

    def run() -> None:
        assert env.fetch(d, "/flaky") == b"ok"
        assert env.fetch(d, "/") == b"hello"

    return run


def retry_exhausted(env: Env) -> Run:
    d = env.pool.compose(_fast_retry(max_retries=2))

    def run() -> None:
        assert isinstance(env.dispatch(d, "/busy").error, errors.RequestRetryError)

    return run


def retry_returns_last_response(env: Env) -> Run:
    d = env.pool.compose(_fast_retry(max_retries=1, throw_on_error=False))

    def run() -> None:
        assert env.fetch(d, "/busy") == b"busy"

    return run


def retry_custom_policy(env: Env) -> Run:
    def policy(err: BaseException, state: dict[str, Any], callback: Callable[[Any], None]) -> Any:
        return gevent.spawn(callback, None if state["state"]["counter"] < 2 else err)

    d = env.pool.compose(interceptors.retry(retry=policy))

    def run() -> None:
        assert isinstance(env.dispatch(d, "/busy").error, errors.RequestRetryError)

    return run


def retry_abort_while_backing_off(env: Env) -> Run:
    d = env.pool.compose(interceptors.retry(min_timeout=0.05))

    def run() -> None:
        sink = Sink()
        d.dispatch({"origin": env.origin, "path": "/busy", "method": "GET"}, sink)
        wait_for(lambda: sink.controller is not None, what="the request to start")
        retry = sink.controller  # the RetryHandler is its own controller
        wait_for(lambda: retry._timer is not None, what="the back-off")  # not while an attempt runs
        retry.abort()
        assert sink.done.wait(5)
        assert isinstance(sink.error, errors.RequestAbortedError)
        poke(sink.controller)

    return run


def redirect_followed(env: Env) -> Run:
    d = env.pool.compose(interceptors.redirect(max_redirections=3))

    def run() -> None:
        assert env.fetch(d, "/r1") == b"hello"
        assert env.dispatch(d, "/r1").body == b"hello"

    return run


def redirect_over_the_limit(env: Env) -> Run:
    d = env.pool.compose(interceptors.redirect(max_redirections=1, throw_on_max_redirect=True))

    def run() -> None:
        assert isinstance(env.dispatch(d, "/r1").error, errors.MaxRedirectionsError)

    return run


def decompress_whole(env: Env) -> Run:
    d = env.pool.compose(_decompress())

    def run() -> None:
        assert env.fetch(d, "/gzip") == TEXT
        assert env.fetch(d, "/") == b"hello"

    return run


def decompress_with_back_pressure(env: Env) -> Run:
    d = env.pool.compose(_decompress())

    def run() -> None:
        assert env.fetch(d, "/gzip", high_water_mark=1024) == TEXT
        assert env.dispatch(d, "/gzip", Sink(pause=True)).body == TEXT

    return run


def response_error_paths(env: Env) -> Run:
    d = env.pool.compose(interceptors.response_error())

    def run() -> None:
        err = env.dispatch(d, "/json404").error
        assert isinstance(err, errors.ResponseError) and err.body == {"missing": True}
        assert env.fetch(d, "/") == b"hello"

    return run


def _lookup(origin: Any, options: Any, callback: Callable[..., None]) -> None:
    callback(None, [{"address": "127.0.0.1", "family": 4, "ttl": 60}])


def _lookup_later(origin: Any, options: Any, callback: Callable[..., None]) -> None:
    gevent.spawn(callback, None, [{"address": "127.0.0.1", "family": 4, "ttl": 60}])


def _lookup_fails(origin: Any, options: Any, callback: Callable[..., None]) -> None:
    callback(OSError("no such host"), None)


class _ForgetfulStorage:
    """DNS storage that hands each host's records out once: every request looks the name up."""

    def __init__(self) -> None:
        self.records: dict[str, Any] = {}

    @property
    def size(self) -> int:
        return len(self.records)

    def get(self, hostname: str) -> Any:
        return self.records.pop(hostname, None)

    def set(self, hostname: str, records: Any, options: Any) -> None:
        self.records[hostname] = records

    def delete(self, hostname: str) -> None:
        self.records.pop(hostname, None)

    def full(self) -> bool:
        return False


def dns_paths(env: Env) -> Run:
    named = env.origin.replace("127.0.0.1", "localhost")
    cached = env.agent.compose(interceptors.dns(lookup=_lookup))
    looked_up = env.agent.compose(interceptors.dns(lookup=_lookup_later, storage=_ForgetfulStorage()))
    failing = env.agent.compose(interceptors.dns(lookup=_lookup_fails, storage=_ForgetfulStorage()))

    def run() -> None:
        assert cached.request(origin=named, path="/").body.bytes() == b"hello"
        sink = Sink()
        looked_up.dispatch({"origin": named, "path": "/", "method": "GET"}, sink)
        assert sink.done.wait(5) and sink.ended, sink.error
        sink = Sink()
        failing.dispatch({"origin": named, "path": "/", "method": "GET"}, sink)
        assert sink.done.wait(5) and sink.error is not None

    return run


def _cache_paths(env: Env, store: Any) -> Run:
    d = env.pool.compose(interceptors.cache(store=store, methods=["GET", "HEAD"]))

    def run() -> None:
        assert env.fetch(d, env.unique("/fresh")) == b"fresh"  # a miss, stored
        assert env.fetch(d, "/fresh") == b"fresh"  # a hit
        assert env.fetch(d, "/fresh", high_water_mark=1) == b"fresh"
        assert env.dispatch(d, "/fresh").body == b"fresh"
        assert isinstance(env.dispatch(d, "/fresh", Sink(abort_at="head")).error, errors.RequestAbortedError)
        assert env.fetch(d, "/fresh", method="HEAD") == b""  # answered from the stored GET
        assert env.fetch(d, "/etag") == b"tagged"  # validated with a 304
        assert env.fetch(d, "/swr") == b"swr"  # stale, validated in the background
        assert env.fetch(d, "/sie") == b"sie"  # the validation fails: the stale answer
        assert env.fetch(d, env.unique("/fresh"), headers={"cache-control": "only-if-cached"}) == b""
        assert env.fetch(d, "/fresh", method="POST", body=b"x") == b"fresh"  # invalidates

    return run


def cache_in_memory(env: Env) -> Run:
    return _cache_paths(env, MemoryCacheStore())


def cache_in_sqlite(env: Env) -> Run:
    store = SqliteCacheStore()
    env.cleanups.append(store.close)
    return _cache_paths(env, store)


def deduplicate_paths(env: Env) -> Run:
    d = env.pool.compose(interceptors.deduplicate())

    def together(*sinks: Sink) -> list[Sink]:
        for sink in sinks:
            d.dispatch({"origin": env.origin, "path": "/slow", "method": "GET"}, sink)
        for sink in sinks:
            assert sink.done.wait(5)
            poke(sink.controller)
        return list(sinks)

    def run() -> None:
        assert together(Sink())[0].body == BIG
        first, paused, aborted = together(Sink(), Sink(pause=True), Sink(abort_at="head"))
        assert first.body == BIG and paused.body == BIG and aborted.error is not None
        together(Sink(abort_at="start"), Sink(abort_at="start"))
        readers = [gevent.spawn(env.fetch, d, "/slow") for _ in range(3)]
        assert [g.get(timeout=5) for g in readers] == [BIG] * 3

    return run


def _chain(env: Env) -> Any:
    return env.pool.compose(
        interceptors.retry(min_timeout=0.001, max_timeout=0.002),
        interceptors.redirect(max_redirections=2),
        _decompress(),
        interceptors.response_error(),
    )


def composed_chain(env: Env) -> Run:
    d = _chain(env)

    def run() -> None:
        assert env.fetch(d, "/") == b"hello"
        assert env.fetch(d, "/r1") == b"hello"
        assert env.fetch(d, "/flaky") == b"ok"
        assert env.fetch(d, "/gzip") == TEXT
        assert isinstance(env.dispatch(d, "/json404").error, errors.ResponseError)
        assert env.dispatch(d, "/gzip", Sink(pause=True)).body == TEXT

    return run


def composed_everything(env: Env) -> Run:
    named = env.origin.replace("127.0.0.1", "localhost")
    d = env.agent.compose(
        interceptors.dump(max_size=1 << 20),
        interceptors.dns(lookup=_lookup),
        interceptors.deduplicate(),
        interceptors.cache(),
        interceptors.retry(min_timeout=0.001, max_timeout=0.002),
        interceptors.redirect(max_redirections=2),
        _decompress(),
        interceptors.response_error(),
    )

    def run() -> None:
        for path in ("/", "/r1", "/flaky", "/gzip", "/fresh", "/etag"):
            sink = Sink()
            d.dispatch({"origin": named, "path": path, "method": "GET"}, sink)
            assert sink.done.wait(5) and sink.ended, (path, sink.error)
            poke(sink.controller)
        sink = Sink()
        d.dispatch({"origin": named, "path": "/json404", "method": "GET"}, sink)
        assert sink.done.wait(5) and isinstance(sink.error, errors.ResponseError)

    return run


SCENARIOS: list[Callable[[Env], Run]] = [
    plain_request,
    plain_client_request,
    plain_stream,
    plain_dispatch,
    plain_error_status,
    plain_agent,
    dump_ok,
    dump_consumer_abort,
    retry_then_ok,
    retry_exhausted,
    retry_returns_last_response,
    retry_custom_policy,
    retry_abort_while_backing_off,
    redirect_followed,
    redirect_over_the_limit,
    decompress_whole,
    decompress_with_back_pressure,
    response_error_paths,
    dns_paths,
    cache_in_memory,
    cache_in_sqlite,
    deduplicate_paths,
    composed_chain,
    composed_everything,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_no_reference_cycles(env: Env, scenario: Callable[[Env], Run]) -> None:
    assert_no_cycles(scenario(env))


# ---------------------------------------------------------------------------
# controllers after the end
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: interceptors.dump(),
        lambda: interceptors.retry(),
        lambda: _decompress(),
        lambda: interceptors.cache(),
        lambda: interceptors.deduplicate(),
    ],
    ids=["dump", "retry", "decompress", "cache", "deduplicate"],
)
def test_a_controller_kept_after_the_end_still_answers(env: Env, make: Callable[[], Any]) -> None:
    d = env.pool.compose(make())
    for _ in range(2):  # the second time, cache answers from the store
        sink = env.dispatch(d, "/fresh")
        c = sink.controller
        assert sink.ended
        assert c.aborted is False and c.reason is None and c.paused is False
        raw = c.raw_headers
        assert raw is not None and b"cache-control" in [bytes(n).lower() for n in raw[0::2]]
        c.pause()
        c.resume()
        c.abort()  # after the end: nothing happens
        assert sink.error is None


def test_an_aborted_retry_keeps_its_reason(env: Env) -> None:
    sink = env.dispatch(env.pool.compose(interceptors.retry()), "/big", Sink(abort_at="head"))
    assert isinstance(sink.error, errors.RequestAbortedError)
    assert sink.controller.aborted is True
    assert sink.controller.reason is sink.error


# ---------------------------------------------------------------------------
# HTTP/2
# ---------------------------------------------------------------------------


def _h2_app(conn: H2ServerConn) -> None:
    while True:
        req = conn.next_request(timeout=30)
        if req is None:
            return
        if req.path == "/reset":
            conn.reset(req.stream_id, 2)
        elif req.path == "/gzip":
            conn.respond(req.stream_id, body=GZIPPED, headers=[("content-encoding", "gzip")])
        elif req.path == "/json404":
            conn.respond(req.stream_id, status=404, body=b"{}", headers=[("content-type", "application/json")])
        elif req.path == "/r1":
            conn.respond(req.stream_id, status=302, body=b"", headers=[("location", "/")])
        else:
            conn.respond(req.stream_id, body=b"ok")


def test_h2c_paths_leave_no_reference_cycles(make_h2_server: Any, make_h2c: Any) -> None:
    server = make_h2_server(_h2_app)
    client = make_h2c(server.origin)
    chain = client.compose(
        interceptors.retry(min_timeout=0.001, max_timeout=0.002, max_retries=1),
        interceptors.redirect(max_redirections=2),
        _decompress(),
        interceptors.response_error(),
    )

    def dispatch(d: Any, path: str) -> Sink:
        sink = Sink()
        d.dispatch({"path": path, "method": "GET"}, sink)
        assert sink.done.wait(5)
        poke(sink.controller)
        return sink

    def run() -> None:
        assert client.request(path="/").body.bytes() == b"ok"
        client.stream(path="/", method="GET", factory=lambda data: _Discard())
        assert dispatch(client, "/").ended
        assert dispatch(client, "/reset").error is not None
        assert chain.request(path="/r1").body.bytes() == b"ok"
        assert chain.request(path="/gzip").body.bytes() == TEXT
        assert isinstance(dispatch(chain, "/json404").error, errors.ResponseError)
        assert dispatch(chain, "/reset").error is not None

    assert_no_cycles(run)


class _Discard:
    def write(self, chunk: bytes) -> None:
        pass


# ---------------------------------------------------------------------------
# A known cycle outside the interceptors (the reason says what holds it): an
# error kept for Controller.reason whose traceback refers to the frames that
# hold the request. The interceptors' part of this path is clean.
# ---------------------------------------------------------------------------

_HANDLER_RAISES = (
    "a handler that raises: Request.reason keeps the error, whose traceback keeps the guard's "
    "frame (self is the Request) and, through f_back, the reader's frames"
)


def test_request_raising_the_error_leaves_no_cycles(env: Env) -> None:
    d = _chain(env)

    def run() -> None:
        with pytest.raises(errors.ResponseError):
            env.fetch(d, "/json404")

    assert_no_cycles(run)


def test_paths_that_close_the_connection_leave_no_cycles(env: Env) -> None:
    dump = env.pool.compose(interceptors.dump(max_size=1000))
    retry = env.pool.compose(_fast_retry(max_retries=1))
    decompress = env.pool.compose(_decompress())
    cache = env.pool.compose(interceptors.cache(methods=["GET", "HEAD"]))
    chain = _chain(env)

    def run() -> None:
        assert env.fetch(cache, env.unique("/fresh"), method="HEAD") == b""  # HEAD closes the connection
        assert isinstance(env.dispatch(dump, "/too-big").error, errors.RequestAbortedError)
        assert env.dispatch(retry, "/reset").error is not None
        assert isinstance(env.dispatch(decompress, "/gzip", Sink(abort_at="data")).error, errors.RequestAbortedError)
        sink = env.dispatch(chain, "/upgrade", upgrade="echo")
        assert sink.ended, sink.error

    assert_no_cycles(run)


def test_a_closed_h2_connection_leaves_no_cycles(make_h2_server: Any, make_h2c: Any) -> None:
    def one_request_per_connection(conn: H2ServerConn) -> None:
        req = conn.next_request(timeout=30)
        if req is None:
            return
        conn.respond(req.stream_id, body=b"ok")
        conn.goaway(req.stream_id)
        conn.close()

    client = make_h2c(make_h2_server(one_request_per_connection).origin)
    closed = gevent.event.Event()
    client.on("disconnect", lambda *_args: closed.set())

    def run() -> None:
        closed.clear()
        assert client.request(path="/").body.bytes() == b"ok"
        assert closed.wait(5)  # the server's GOAWAY and close end the connection

    assert_no_cycles(run)


def test_a_refused_connection_retried_leaves_no_cycles(env: Env) -> None:
    probe = stdsocket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    pool = greenhttp.Pool(f"http://127.0.0.1:{port}")
    d = pool.compose(_fast_retry(max_retries=1))

    def run() -> None:
        sink = Sink()
        d.dispatch({"path": "/", "method": "GET"}, sink)
        assert sink.done.wait(5) and sink.error is not None

    try:
        assert_no_cycles(run)
    finally:
        with gevent.Timeout(5):
            pool.destroy()


@pytest.mark.xfail(strict=True, reason=_HANDLER_RAISES)
def test_a_corrupt_compressed_body_leaves_no_cycles(make_server: Any) -> None:
    def corrupt(conn: Any) -> None:
        while conn.read_request() is not None:
            conn.respond(b"this is not gzip", headers=[("content-encoding", "gzip")])

    server = make_server(corrupt)
    pool = greenhttp.Pool(server.origin)
    d = pool.compose(_decompress())

    def run() -> None:
        sink = Sink()
        d.dispatch({"path": "/", "method": "GET"}, sink)
        assert sink.done.wait(5) and isinstance(sink.error, errors.DecompressionError)

    try:
        assert_no_cycles(run)
    finally:
        with gevent.Timeout(5):
            pool.destroy()
