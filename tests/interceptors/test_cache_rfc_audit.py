"""Behaviours of the cache interceptor and stores checked by an audit, not pinned elsewhere.

Bodies the cache must not keep (too large, cut short, on a miss or a
validation), misses racing, a SQLite file shared by two stores, a hit through
``stream()``, ``cache`` outside ``deduplicate``, and a private cache keeping
responses to authenticated requests.
"""

from __future__ import annotations

import gevent
import gevent.event
import pytest
from cachekit import counting, get

from greenhttp import interceptors
from greenhttp.cache_stores import MemoryCacheStore, SqliteCacheStore
from greenhttp.cache_stores.base import vary_matches
from greenhttp.errors import InvalidArgumentError, SocketError


def test_a_body_past_max_entry_size_is_delivered_whole_and_not_stored(origin, make_client):
    big = bytes(range(256)) * 40
    server = origin(counting(("Cache-Control", "max-age=60"), body=big))
    store = MemoryCacheStore(max_entry_size=1000)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert get(d)[2] == big
    assert get(d)[2] == big
    assert len(server.requests) == 2 and store.count == 0


def cut_after_second_to_last(answers):
    """A handler sending ``answers`` in order, one a request; the connection closes after
    the second to last (cutting a response shorter than its length), the last goes on the
    next connection."""

    def handler(conn):
        while answers and conn.read_request() is not None:
            conn.send(answers.pop(0))
            if len(answers) == 1:
                conn.close()
                return
        conn.read_request()

    return handler


def test_a_body_cut_short_is_not_stored(make_server, make_client, store):
    answers = [
        b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 100\r\n\r\ncut",
        b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 5\r\n\r\nwhole",
    ]

    server = make_server(cut_after_second_to_last(answers))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    with pytest.raises(SocketError):
        get(d)
    assert get(d)[2] == b"whole"
    assert get(d)[2] == b"whole" and len(server.requests) == 2


def test_a_new_response_cut_short_during_validation_leaves_the_stored_one(make_server, make_client, store):
    answers = [
        b'HTTP/1.1 200 OK\r\nCache-Control: max-age=0\r\nETag: "a"\r\nContent-Length: 3\r\n\r\nold',
        b'HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nETag: "b"\r\nContent-Length: 100\r\n\r\nnew',
        b'HTTP/1.1 304 Not Modified\r\nETag: "a"\r\nCache-Control: max-age=60\r\n\r\n',
    ]

    server = make_server(cut_after_second_to_last(answers))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert get(d)[2] == b"old"
    with pytest.raises(SocketError):
        get(d)
    status, headers, body = get(d)
    assert (status, body) == (200, b"old")
    assert server.requests[2].header("if-none-match") == '"a"'
    assert get(d)[2] == b"old" and len(server.requests) == 3  # freshened by the 304


def test_two_greenlets_missing_the_same_key_both_get_the_response(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    with gevent.Timeout(5):
        greenlets = [gevent.spawn(get, d) for _ in range(2)]
        gevent.joinall(greenlets, raise_error=True)
    assert [g.value[2] for g in greenlets] == [b"payload", b"payload"]
    sent = len(server.requests)
    assert get(d)[1]["x-n"] in ("1", "2") and len(server.requests) == sent


def test_two_sqlite_stores_on_one_file_see_each_others_entries_and_invalidations(origin, make_client, tmp_path):
    server = origin(counting(("Cache-Control", "max-age=60")))
    with SqliteCacheStore(tmp_path / "c.sqlite") as a, SqliteCacheStore(tmp_path / "c.sqlite") as b:
        via_a = make_client(server.origin).compose(interceptors.cache(store=a))
        via_b = make_client(server.origin).compose(interceptors.cache(store=b))
        get(via_a)
        assert get(via_b)[1]["x-n"] == "1"
        via_b.request(path="/", method="DELETE").body.bytes()
        assert get(via_a)[1]["x-n"] == "3"


def test_a_hit_through_stream(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    chunks: list[bytes] = []

    class Sink:
        closed = False

        def write(self, data: bytes) -> None:
            chunks.append(data)

        def close(self) -> None:
            self.closed = True

    sink = Sink()
    with gevent.Timeout(5):
        d.stream(path="/", method="GET", factory=lambda data: sink)
    assert b"".join(chunks) == b"payload" and sink.closed and len(server.requests) == 1


def test_cache_outside_deduplicate_sends_concurrent_misses_once(make_server, make_client, store):
    release = gevent.event.Event()

    def handler(conn):
        while conn.read_request() is not None:
            release.wait(5)
            conn.send(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 2\r\n\r\nok")

    server = make_server(handler)
    d = make_client(server.origin).compose(interceptors.cache(store=store), interceptors.deduplicate())
    with gevent.Timeout(5):
        greenlets = [gevent.spawn(get, d) for _ in range(3)]
        gevent.idle()  # every greenlet has dispatched and waits for the head
        release.set()
        gevent.joinall(greenlets, raise_error=True)
    assert [g.value[2] for g in greenlets] == [b"ok"] * 3 and len(server.requests) == 1
    assert get(d)[1]["age"] == "0" and len(server.requests) == 1


def test_a_private_cache_keeps_responses_to_authenticated_requests(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=store, type="private"))
    get(d, headers={"authorization": "Bearer x"})
    assert get(d, headers={"authorization": "Bearer x"})[1]["x-n"] == "1"


@pytest.mark.parametrize(
    ("cache_type", "forbidding"),
    [("shared", "no-store"), ("private", "no-store"), ("shared", "private"), ("shared", None)],
)
def test_a_304_that_forbids_reuse_makes_the_request_again_unconditionally(
    origin, make_client, store, cache_type, forbidding
):
    # As the original (REFERENCE §7.7): a 304 with no-store (or private, to a shared
    # cache) does not let the stored body be served; the request goes again without
    # preconditions and its answer is the one delivered. Vary: * acts alike (the control).
    n = 0

    def reply(req):
        nonlocal n
        n += 1
        if req.header("if-none-match") == '"v1"':
            headers = [("ETag", '"v1"'), ("Vary", "*")]
            if forbidding is not None:
                headers = [("ETag", '"v1"'), ("Cache-Control", forbidding)]
            return "304 Not Modified", headers, b""
        return "200 OK", [("ETag", '"v1"'), ("Cache-Control", "max-age=0")], f"body{n}".encode()

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store, type=cache_type))
    assert get(d)[2] == b"body1"
    status, _, body = get(d)
    assert (status, body) == (200, b"body3")
    assert server.requests[1].header("if-none-match") == '"v1"'
    assert server.requests[2].header("if-none-match") is None


def test_a_private_304_still_validates_for_a_private_cache(origin, make_client, store):
    def reply(req):
        if req.header("if-none-match") == '"v1"':
            return "304 Not Modified", [("ETag", '"v1"'), ("Cache-Control", "private, max-age=60")], b""
        return "200 OK", [("ETag", '"v1"'), ("Cache-Control", "max-age=0")], b"v1"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store, type="private"))
    get(d)
    assert get(d)[2] == b"v1" and len(server.requests) == 2


def test_the_store_class_instead_of_a_store_is_refused_at_once():
    with pytest.raises(InvalidArgumentError, match="store must be a CacheStore instance.*MemoryCacheStore"):
        interceptors.cache(store=MemoryCacheStore)


def test_busy_timeout_none_is_the_default(tmp_path):
    # API.md: a duration of None means the default.
    with SqliteCacheStore(tmp_path / "c.sqlite", busy_timeout=None) as store:
        assert store._busy_timeout == 1.0


@pytest.mark.parametrize("stored", ["a, b", "a,b", "a ,  b"])
def test_vary_matches_compares_both_sides_normalised(stored):
    # docs/caching.md: spaces around commas are ignored, whichever side has them (a
    # custom store may keep the value as the request spelled it).
    assert vary_matches({"accept": stored}, {"accept": "a, b"})
    assert vary_matches({"accept": stored}, {"accept": ["a", "b"]})
    assert not vary_matches({"accept": stored}, {"accept": "a, c"})
    assert vary_matches({"accept": None}, {}) and not vary_matches({"accept": None}, {"accept": "a"})
