"""``interceptors.dns``: cached lookups, address choice, TTLs, failures, storage."""

from __future__ import annotations

import socket
import ssl
from typing import Any

import gevent
import gevent.event
import gevent.ssl
import pytest
import trustme

import greenhttp
from greenhttp import interceptors
from greenhttp._core.dns_records import FALLBACK_TTL, DNSStorage
from greenhttp._net import dns as net_dns
from greenhttp.errors import InformationalError, InvalidArgumentError


def echo_host(conn):
    """Answer every request with its Host header."""
    while True:
        req = conn.read_request()
        if req is None:
            return
        conn.respond((req.header("host") or "").encode())


@pytest.fixture
def agent():
    a = greenhttp.Agent()
    yield a
    with gevent.Timeout(5):
        a.destroy()


class Seen:
    """An interceptor placed inside ``dns``: records what dns sent, then routes it to 127.0.0.1."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port
        self.options: list[dict[str, Any]] = []

    def __call__(self, dispatch):
        def seen(opts, handler):
            self.options.append(opts)
            if self.port is not None:
                opts = {**opts, "origin": f"http://127.0.0.1:{self.port}"}
            return dispatch(opts, handler)

        return seen

    @property
    def origins(self) -> list[str]:
        return [o["origin"] for o in self.options]


def fixed(*records, counter=None):
    """A ``lookup`` answering ``records`` at once (counting its calls in ``counter``)."""

    def lookup(origin, options, callback):
        if counter is not None:
            counter.append(origin.hostname)
        callback(None, [dict(r) for r in records])

    return lookup


def test_the_origin_becomes_an_address_and_the_name_stays(make_server, agent):
    server = make_server(echo_host)
    seen = Seen()
    d = agent.compose(interceptors.dns(lookup=fixed({"address": "127.0.0.1", "family": 4})), seen)
    r = d.request(origin=f"http://example.test:{server.port}", path="/")
    assert r.body.text() == f"example.test:{server.port}"
    opts = seen.options[0]
    assert opts["origin"] == f"http://127.0.0.1:{server.port}"
    assert opts["servername"] == "example.test"
    assert "dns" not in opts
    r = d.request(origin=f"http://example.test:{server.port}", path="/", headers=[("Host", "custom")])
    assert r.body.text() == "custom"


@pytest.mark.parametrize("headers", [{b"Host": b"custom"}, {b"host": "custom"}, [(b"HOST", "custom")],
                                     [b"host", b"custom"], greenhttp.Headers({"Host": "custom"})])
def test_a_host_header_in_any_shape_is_kept(make_server, agent, headers):
    # A dict with a bytes "host" key was not seen as having a Host header: a
    # second one was added and the request failed with "duplicate host header".
    server = make_server(echo_host)
    d = agent.compose(interceptors.dns(lookup=fixed({"address": "127.0.0.1", "family": 4})))
    with gevent.Timeout(5):
        r = d.request(origin=f"http://example.test:{server.port}", path="/", headers=headers)
        assert r.body.text() == "custom"


def test_lookup_receives_the_origin_and_options():
    got: list[Any] = []

    def lookup(origin, options, callback):
        got.append((origin, options))
        callback(None, [{"address": "1.1.1.1", "family": 4}])

    interceptors.dns(lookup=lookup, max_ttl=3, dual_stack=False)(lambda opts, handler: True)(
        {"origin": "https://Example.test:8443", "path": "/", "method": "GET"}, object())
    origin, options = got[0]
    assert origin == "https://example.test:8443" and isinstance(origin, str)
    assert (origin.protocol, origin.hostname, origin.port, origin.host) == ("https:", "example.test", 8443,
                                                                            "example.test:8443")
    assert options["dual_stack"] is False and options["affinity"] == 4 and options["max_ttl"] == 3


def test_lookups_are_cached_and_families_alternate(make_server, agent):
    server = make_server(echo_host)
    calls: list[str] = []
    seen = Seen(server.port)
    lookup = fixed({"address": "::1", "family": 6}, {"address": "::2", "family": 6},
                   {"address": "1.1.1.1", "family": 4}, {"address": "2.2.2.2", "family": 4}, counter=calls)
    d = agent.compose(interceptors.dns(lookup=lookup), seen)
    for _ in range(5):
        assert d.request(origin="http://example.test", path="/").body.text() == "example.test"
    assert seen.origins == ["http://1.1.1.1", "http://[::1]", "http://2.2.2.2", "http://[::2]", "http://1.1.1.1"]
    assert calls == ["example.test"]


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"dual_stack": False}, ["http://1.1.1.1", "http://2.2.2.2", "http://1.1.1.1"]),
        ({"dual_stack": False, "affinity": 6}, ["http://[::1]", "http://[::1]", "http://[::1]"]),
        ({"affinity": 4}, ["http://1.1.1.1", "http://2.2.2.2", "http://1.1.1.1"]),
    ],
)
def test_affinity(make_server, agent, options, expected):
    server = make_server(echo_host)
    seen = Seen(server.port)
    lookup = fixed({"address": "::1", "family": 6}, {"address": "1.1.1.1", "family": 4},
                   {"address": "2.2.2.2", "family": 4})
    d = agent.compose(interceptors.dns(lookup=lookup, **options), seen)
    for _ in range(3):
        d.request(origin="http://example.test", path="/").body.dump()
    assert seen.origins == expected


def test_a_family_without_addresses_falls_back_to_the_other(make_server, agent):
    server = make_server(echo_host)
    seen = Seen(server.port)
    d = agent.compose(interceptors.dns(lookup=fixed({"address": "1.1.1.1", "family": 4}), affinity=6), seen)
    d.request(origin="http://example.test", path="/").body.dump()
    assert seen.origins == ["http://1.1.1.1"]


def test_per_request_overrides(make_server, agent):
    server = make_server(echo_host)
    seen = Seen(server.port)
    lookup = fixed({"address": "::1", "family": 6}, {"address": "1.1.1.1", "family": 4})
    d = agent.compose(interceptors.dns(lookup=lookup, affinity=4), seen)
    d.request(origin="http://example.test", path="/", dns={"affinity": 6}).body.dump()
    d.request(origin="http://example.test", path="/").body.dump()
    other = fixed({"address": "3.3.3.3", "family": 4})
    d.request(origin="http://other.test", path="/", dns={"lookup": other, "pick": lambda o, r, a: r["records"][4]["ips"][0]}).body.dump()
    assert seen.origins == ["http://[::1]", "http://1.1.1.1", "http://3.3.3.3"]


def test_records_expire_after_their_ttl(make_server, agent):
    server = make_server(echo_host)
    calls: list[str] = []
    seen = Seen(server.port)
    d = agent.compose(interceptors.dns(lookup=fixed({"address": "1.1.1.1", "family": 4, "ttl": 0.05}, counter=calls)), seen)
    d.request(origin="http://example.test", path="/").body.dump()
    d.request(origin="http://example.test", path="/").body.dump()
    assert len(calls) == 1
    gevent.sleep(0.1)  # the time under test: the record's TTL
    d.request(origin="http://example.test", path="/").body.dump()
    assert len(calls) == 2


def test_max_ttl_caps_the_record_ttl_and_replaces_a_missing_one():
    storage = DNSStorage()
    calls: list[str] = []
    with_ttl = interceptors.dns(lookup=fixed({"address": "1.1.1.1", "family": 4, "ttl": 100}, counter=calls),
                                max_ttl=0.05, storage=storage)
    sink: list[Any] = []
    d = with_ttl(lambda opts, handler: sink.append(opts["origin"]) or True)
    d({"origin": "http://a.test", "path": "/", "method": "GET"}, object())
    assert storage.get("a.test")["records"][4]["ips"][0]["ttl"] == 0.05
    gevent.sleep(0.1)
    d({"origin": "http://a.test", "path": "/", "method": "GET"}, object())
    assert len(calls) == 2 and sink == ["http://1.1.1.1", "http://1.1.1.1"]
    for max_ttl, expected in ((0, FALLBACK_TTL), (5, 5.0)):
        storage = DNSStorage()
        d = interceptors.dns(lookup=fixed({"address": "1.1.1.1", "family": 4}), max_ttl=max_ttl, storage=storage)(
            lambda opts, handler: True)
        d({"origin": "http://b.test", "path": "/", "method": "GET"}, object())
        assert storage.get("b.test")["records"][4]["ips"][0]["ttl"] == expected


def test_the_oldest_host_is_evicted_at_max_items():
    calls: list[str] = []
    state = interceptors.dns(lookup=fixed({"address": "1.1.1.1", "family": 4}, counter=calls), max_items=2)
    d = state(lambda opts, handler: True)
    for host in ("a.test", "b.test", "c.test", "b.test", "a.test"):
        d({"origin": f"http://{host}", "path": "/", "method": "GET"}, object())
    assert calls == ["a.test", "b.test", "c.test", "a.test"]


def test_a_refused_address_is_dropped_and_the_other_family_tried(make_server, agent):
    server = make_server(echo_host)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()
    storage = DNSStorage()
    seen = Seen()
    lookup = fixed({"address": "127.0.0.1", "family": 4, "port": dead_port},
                   {"address": "::1", "family": 6, "port": 9})  # nothing listens on [::1]:9 either
    d = agent.compose(interceptors.dns(lookup=lookup, storage=storage), seen)
    with pytest.raises(OSError):
        d.request(origin="http://example.test", path="/")
    assert seen.origins == [f"http://127.0.0.1:{dead_port}", "http://[::1]:9"]
    records = storage.get("example.test")["records"]
    assert records[4]["ips"] == [] and records[6]["ips"] == []  # both dropped: the next request looks up again
    good = fixed({"address": "127.0.0.1", "family": 4, "port": server.port})
    assert d.request(origin="http://example.test", path="/", dns={"lookup": good}).body.text() == "example.test"


def test_lookup_failures_reach_the_handler(agent):
    def failing(origin, options, callback):
        callback(socket.gaierror(socket.EAI_NONAME, "Name or service not known"), None)

    d = agent.compose(interceptors.dns(lookup=failing))
    with pytest.raises(socket.gaierror):
        d.request(origin="http://nowhere.test", path="/")
    d = agent.compose(interceptors.dns(lookup=fixed()))
    with pytest.raises(InformationalError, match="No DNS entries found"):
        d.request(origin="http://nowhere.test", path="/")


def test_ip_literals_and_requests_without_origin_pass_through():
    calls: list[str] = []
    sink: list[Any] = []
    d = interceptors.dns(lookup=fixed({"address": "1.1.1.1", "family": 4}, counter=calls))(
        lambda opts, handler: sink.append(opts) or True)
    for origin in ("http://127.0.0.1:8080", "http://[::1]:8080", None):
        d({"origin": origin, "path": "/", "method": "GET"}, object())
    assert calls == [] and [o["origin"] for o in sink] == ["http://127.0.0.1:8080", "http://[::1]:8080", None]


def test_a_custom_storage_and_pick():
    class Storage:
        def __init__(self):
            self.data = {}

        size = property(lambda self: len(self.data))

        def get(self, origin):
            return self.data.get(origin)

        def set(self, origin, records, options=None):
            self.data[origin] = records
            self.ttl = options["ttl"]

        def delete(self, origin):
            self.data.pop(origin, None)

        def full(self):
            return len(self.data) >= 1

    storage = Storage()
    sink: list[str] = []
    picks: list[Any] = []

    def pick(origin, records, affinity):
        picks.append((origin.hostname, affinity))
        return records["records"][4]["ips"][-1]

    lookup = fixed({"address": "1.1.1.1", "family": 4, "ttl": 30}, {"address": "2.2.2.2", "family": 4, "ttl": 20})
    d = interceptors.dns(lookup=lookup, storage=storage, pick=pick)(
        lambda opts, handler: sink.append(opts["origin"]) or True)
    d({"origin": "http://a.test:81", "path": "/", "method": "GET"}, object())
    d({"origin": "http://b.test", "path": "/", "method": "GET"}, object())  # full: sent as it is
    assert sink == ["http://2.2.2.2:81", "http://b.test"]
    assert picks == [("a.test", None)] and storage.ttl == 20


def test_concurrent_requests_share_one_lookup(make_server, agent):
    server = make_server(echo_host)
    calls: list[str] = []

    def slow(origin, options, callback):
        calls.append(origin.hostname)
        gevent.spawn_later(0.02, callback, None, [{"address": "127.0.0.1", "family": 4, "port": server.port}])

    d = agent.compose(interceptors.dns(lookup=slow))
    bodies: list[str] = []
    gevent.joinall([gevent.spawn(lambda: bodies.append(d.request(origin="http://x.test", path="/").body.text()))
                    for _ in range(10)], timeout=10)
    assert calls == ["x.test"] and bodies == ["x.test"] * 10


class Told:
    """A dispatch handler that records the error it is given."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.done = gevent.event.Event()

    def on_response_error(self, controller, err):
        self.error = err
        self.done.set()


def test_a_failed_shared_lookup_reaches_every_waiter_whatever_one_handler_does(agent, caplog):
    # Three requests wait on one lookup that fails. The first handler's
    # on_response_error raises and the second has none: both are logged, and
    # the third is still told (the raise used to end the round of waiters).
    pending: list[Any] = []

    def later(origin, options, callback):
        pending.append(callback)

    class Raising:
        def on_response_error(self, controller, err):
            raise RuntimeError("handler bug")

    class Deaf:
        pass

    d = agent.compose(interceptors.dns(lookup=later))
    last = Told()
    for handler in (Raising(), Deaf(), last):
        assert d.dispatch({"origin": "http://gone.test", "path": "/", "method": "GET"}, handler) is True
    assert len(pending) == 1  # one lookup for the three
    with caplog.at_level("ERROR", logger="greenhttp"):
        pending[0](OSError(socket.EAI_NONAME, "not found"))
    assert last.done.wait(5) and isinstance(last.error, OSError)
    logged = [r.getMessage() for r in caplog.records if r.name == "greenhttp"]
    assert len(logged) == 2
    assert "handler bug" in logged[0] and "not found" in logged[1]


def test_a_pick_raising_after_a_lookup_fails_the_request(agent):
    # The first request of a name is picked for in the lookup's callback, where
    # nobody can catch a raise: the error must reach the handler (it used to be
    # only logged, and the request waited forever).
    def bad_pick(origin, records, affinity):
        raise ValueError("pick bug")

    d = agent.compose(interceptors.dns(lookup=fixed({"address": "127.0.0.1", "family": 4}), pick=bad_pick))
    told = Told()
    d.dispatch({"origin": "http://picky.test", "path": "/", "method": "GET"}, told)
    assert told.done.wait(5) and isinstance(told.error, ValueError)
    with gevent.Timeout(5), pytest.raises(ValueError, match="pick bug"):
        d.request(origin="http://other.test", path="/")


@pytest.mark.parametrize("answer", [["127.0.0.1"], "127.0.0.1", 5, [None, ("127.0.0.1", 4)]])
def test_a_lookup_answering_no_records_fails_the_request(agent, answer):
    # A lookup whose answer is not a list of record dicts, at once or later:
    # the request fails instead of waiting forever.
    def at_once(origin, options, callback):
        callback(None, answer)

    def later(origin, options, callback):
        gevent.spawn(callback, None, answer)

    for lookup in (at_once, later):
        told = Told()
        d = agent.compose(interceptors.dns(lookup=lookup))
        d.dispatch({"origin": "http://odd.test", "path": "/", "method": "GET"}, told)
        assert told.done.wait(5), lookup
        assert isinstance(told.error, (InformationalError, TypeError)), told.error


def test_a_name_the_resolver_cannot_encode_fails_the_request(agent):
    # getaddrinfo raises UnicodeError (not an OSError) for a name IDNA cannot
    # encode: an empty or over-long label. The default lookup's greenlet used to
    # die of it without calling back, and the request waited forever.
    for name in ("a..test", "a" * 64 + ".test"):
        told = Told()
        agent.compose(interceptors.dns()).dispatch({"origin": f"http://{name}", "path": "/", "method": "GET"}, told)
        assert told.done.wait(5), name
        assert isinstance(told.error, UnicodeError), told.error


def test_a_bad_dns_option_or_a_raising_pick_reaches_the_handler_through_dispatch(agent):
    # Spec: dispatch() raises only for a handler without on_response_error;
    # otherwise the error goes to on_response_error(None, err). A bad per-request
    # dns option and a custom pick raising for a cached name used to raise
    # out of dispatch() instead.
    def bad_pick(origin, records, affinity):
        raise ValueError("pick bug")

    storage = DNSStorage()
    storage.set("cached.test", {"records": {4: {"ips": [{"address": "127.0.0.1", "family": 4, "ttl": 60.0,
                                                           "timestamp": 0.0}], "offset": None}, 6: None},
                                "offset": None})
    d = agent.compose(interceptors.dns(lookup=fixed({"address": "127.0.0.1", "family": 4}), storage=storage,
                                       pick=bad_pick))
    for opts, error in (({"origin": "http://a.test", "dns": {"typo": 1}}, InvalidArgumentError),
                        ({"origin": "http://a.test", "dns": "six"}, InvalidArgumentError),
                        ({"origin": "http://cached.test"}, ValueError)):
        told = Told()
        assert d.dispatch({"path": "/", "method": "GET", **opts}, told) is False
        assert told.done.is_set() and isinstance(told.error, error), (opts, told.error)


def test_the_default_lookup_never_blocks_the_hub(make_server, agent):
    done = gevent.event.AsyncResult()
    net_dns.lookup(type("O", (), {"hostname": "localhost"})(), {"dual_stack": True},
                   lambda err, records: done.set((err, records)))
    assert not done.ready()  # it answers later, from the resolver
    err, records = done.get(timeout=10)
    assert err is None and {"address": "127.0.0.1", "family": 4} in records
    server = make_server(echo_host)
    d = agent.compose(interceptors.dns(dual_stack=False))
    assert d.request(origin=f"http://localhost:{server.port}", path="/").body.text() == f"localhost:{server.port}"


def test_tls_keeps_the_name_for_sni_and_certificate_checks(make_server):
    ca = trustme.CA()
    ctx = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("secure.test").configure_cert(ctx)
    names: list[str | None] = []
    ctx.sni_callback = lambda sock, name, _ctx: names.append(name)
    server = make_server(echo_host, ssl_context=ctx)
    agent = greenhttp.Agent(connect={"cadata": ca.cert_pem.bytes().decode()})
    try:
        d = agent.compose(interceptors.dns(lookup=fixed({"address": "127.0.0.1", "family": 4})))
        r = d.request(origin=f"https://secure.test:{server.port}", path="/")
        assert r.body.text() == f"secure.test:{server.port}" and names == ["secure.test"]
    finally:
        with gevent.Timeout(5):
            agent.destroy()


@pytest.mark.parametrize(
    "options, name",
    [
        ({"max_ttl": -1}, "max_ttl"),
        ({"max_items": 0}, "max_items"),
        ({"dual_stack": "yes"}, "dual_stack"),
        ({"affinity": 5}, "affinity"),
        ({"lookup": "x"}, "lookup"),
        ({"pick": 1}, "pick"),
        ({"storage": {}}, "storage"),
    ],
)
def test_options_are_validated(options, name):
    with pytest.raises(InvalidArgumentError, match=name):
        interceptors.dns(**options)
