"""``interceptors.cache`` against a loopback origin, with each store.

The origin is scripted: ``reply(req)`` returns ``(status, headers, body)``
(or None to drop the connection), and ``server.requests`` shows what reached
it. Time never passes in these tests: staleness comes from ``Age`` headers.
"""

from __future__ import annotations

import re
import time
from typing import Any

import gevent
import pytest
from cachekit import counting, get

import greenhttp
from greenhttp import interceptors
from greenhttp.cache_stores import MemoryCacheStore
from greenhttp.errors import InvalidArgumentError, RequestAbortedError


def wait_for(predicate, timeout=5.0, what="condition"):
    """Yield to gevent until ``predicate()`` holds (there is no event for a background request)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        gevent.sleep(0.005)


def test_a_fresh_response_is_served_from_the_store(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60"), ("Set-Cookie", "a=b")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    first = get(d)
    second = get(d)
    assert len(server.requests) == 1
    assert first[0] == second[0] == 200 and first[2] == second[2] == b"payload"
    assert second[1]["x-n"] == "1" and second[1]["age"] == "0" and "age" not in first[1]
    assert second[1]["set-cookie"] == ["a=b"]  # RFC 9111 stores it like any other field


def test_a_hit_drives_the_handler_like_a_connection_would(origin, make_client, store, recorder):
    server = origin(counting(("Cache-Control", "max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    rec = recorder()
    assert d.dispatch({"path": "/", "method": "GET"}, rec) is True
    rec.done.wait(5)
    assert rec.names() == ["start", "response_start", "data", "end"]
    assert rec.body == b"payload" and rec.trailers == {}
    raw = rec.controller.raw_headers
    assert raw[raw.index(b"x-n") + 1] == b"1"
    assert len(server.requests) == 1


def test_the_body_of_a_hit_honours_back_pressure(origin, make_client, store):
    big = bytes(range(256)) * 2048
    server = origin(counting(("Cache-Control", "max-age=60"), body=big))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert get(d)[2] == big
    r = d.request(path="/", high_water_mark=1024)
    chunks = list(r.body)
    assert b"".join(chunks) == big and len(server.requests) == 1


def test_aborting_a_hit_ends_it_with_an_error(origin, make_client, store, recorder):
    server = origin(counting(("Cache-Control", "max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)

    class Aborting(recorder):
        def on_response_start(self, controller, status_code, headers, status_message):
            super().on_response_start(controller, status_code, headers, status_message)
            controller.abort(RequestAbortedError("enough"))

    rec = Aborting()
    d.dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.names() == ["start", "response_start", "error"]
    assert rec.controller.aborted and isinstance(rec.error, RequestAbortedError)


@pytest.mark.parametrize("cc", ["no-store, max-age=60", "private, max-age=60", "max-age=0"])
def test_responses_that_must_not_be_reused(origin, make_client, store, cc):
    server = origin(counting(("Cache-Control", cc)))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    assert get(d)[1]["x-n"] == "2"


def test_a_private_cache_keeps_private_responses(origin, make_client, store):
    server = origin(counting(("Cache-Control", "private, max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=store, type="private"))
    get(d)
    assert get(d)[1]["x-n"] == "1"


def test_authorization_needs_explicit_permission_in_a_shared_cache(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d, "/a", headers={"authorization": "x"})
    assert get(d, "/a", headers={"authorization": "x"})[1]["x-n"] == "2"
    public = origin(counting(("Cache-Control", "public, max-age=60")))
    d = make_client(public.origin).compose(interceptors.cache(store=store))
    get(d, "/a", headers={"authorization": "x"})
    assert get(d, "/a", headers={"authorization": "x"})[1]["x-n"] == "1"


def test_vary_keeps_variants_apart(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60"), ("Vary", "Accept-Language")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert get(d, headers={"accept-language": "en"})[1]["x-n"] == "1"
    assert get(d, headers={"accept-language": "fr"})[1]["x-n"] == "2"
    assert get(d, headers={"Accept-Language": "en"})[1]["x-n"] == "1"
    assert get(d, headers={"accept-language": "fr"})[1]["x-n"] == "2"
    assert get(d)[1]["x-n"] == "3"


def test_query_strings_are_part_of_the_key(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert get(d, "/p", query={"a": "1"})[1]["x-n"] == "1"
    assert get(d, "/p?a=1")[1]["x-n"] == "1"
    assert get(d, "/p", query={"a": "2"})[1]["x-n"] == "2"


def test_a_stale_response_is_validated_with_its_etag(origin, make_client, store):
    n = 0

    def reply(req):
        nonlocal n
        n += 1
        if req.header("if-none-match") == '"v1"':
            return "304 Not Modified", [("ETag", '"v1"'), ("Cache-Control", "max-age=60"), ("X-Later", "yes")], b""
        return "200 OK", [("ETag", '"v1"'), ("Cache-Control", "max-age=60"), ("Age", "100"), ("X-N", str(n))], b"v1"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    status, headers, body = get(d)
    assert (status, body, headers["x-n"], headers["x-later"]) == (200, b"v1", "1", "yes")
    assert server.requests[1].header("if-none-match") == '"v1"'
    # The 304 made it fresh again: the third request stays here.
    assert get(d)[2] == b"v1" and len(server.requests) == 2


def test_a_stale_response_is_validated_with_its_last_modified(origin, make_client, store):
    lm = "Thu, 01 Jan 2015 00:00:00 GMT"

    def reply(req):
        if req.header("if-modified-since") == lm:
            return "304 Not Modified", [], b""
        return "200 OK", [("Last-Modified", lm), ("Cache-Control", "max-age=1"), ("Age", "5")], b"lm"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    assert get(d) [2] == b"lm"
    assert server.requests[1].header("if-modified-since") == lm


def test_a_changed_response_replaces_the_stored_one(origin, make_client, store):
    versions = iter([b"one", b"two"])

    def reply(req):
        return "200 OK", [("ETag", '"x"' if req.header("if-none-match") is None else '"y"'),
                          ("Cache-Control", "max-age=60"), ("Age", "100")], next(versions, b"three")

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert get(d)[2] == b"one"
    assert get(d)[2] == b"two"
    assert server.requests[1].header("if-none-match") == '"x"'


def test_stale_while_revalidate_answers_now_and_refreshes_in_the_background(origin, make_client, store):
    n = 0

    def reply(req):
        nonlocal n
        n += 1
        if n == 1:
            return "200 OK", [("Cache-Control", "max-age=1, stale-while-revalidate=600"), ("Age", "2")], b"old"
        return "200 OK", [("Cache-Control", "max-age=600")], b"new"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert get(d)[2] == b"old"
    status, headers, body = get(d)
    assert body == b"old" and "response is stale" in headers["warning"]
    wait_for(lambda: len(server.requests) == 2, what="the background validation")
    wait_for(lambda: get(d)[2] == b"new", what="the refreshed entry")
    assert len(server.requests) == 2


@pytest.mark.parametrize("failure", ["500", "drop"])
def test_stale_if_error_answers_with_the_stale_response(origin, make_client, store, failure):
    n = 0

    def reply(req):
        nonlocal n
        n += 1
        if n == 1:
            return "200 OK", [("Cache-Control", "max-age=1, stale-if-error=600"), ("Age", "2"), ("ETag", '"e"')], b"ok"
        return None if failure == "drop" else ("500 Internal Server Error", [], b"broken")

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    status, headers, body = get(d)
    assert (status, body) == (200, b"ok") and headers["warning"]
    # A GET the server dropped unanswered on a reused connection is re-sent once
    # on a new one (docs/client.md) before the cache sees the error.
    assert len(server.requests) == (3 if failure == "drop" else 2)


def test_without_stale_if_error_the_error_passes_through(origin, make_client, store):
    replies = iter([("200 OK", [("Cache-Control", "max-age=1, must-revalidate, stale-if-error=60"),
                                ("Age", "2"), ("ETag", '"e"')], b"ok")])

    server = origin(lambda req: next(replies, ("503 Service Unavailable", [], b"down")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    assert get(d, headers={"cache-control": "max-stale=100"})[0:3:2] == (503, b"down")


def test_unsafe_methods_invalidate(origin, make_client, store):
    def reply(req):
        if req.method == "POST":
            status = "500 Oops" if req.target == "/fail" else "201 Created"
            return status, [("Location", "/other")], b""
        return "200 OK", [("Cache-Control", "max-age=60"), ("X-N", str(len(server.requests)))], b"x"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    for path in ("/res", "/other", "/fail"):
        get(d, path)
    get(d, "/fail", method="POST", body=b"data")
    assert get(d, "/fail")[1]["x-n"] == "3"  # an error does not invalidate
    get(d, "/res", method="POST", body=b"data")
    assert get(d, "/res")[1]["x-n"] == "6"
    assert get(d, "/other")[1]["x-n"] == "7"  # Location of the POST's answer


def test_request_directives(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60"), ("ETag", '"e"')))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    assert get(d, headers={"cache-control": "min-fresh=30"})[1]["x-n"] == "1"
    assert get(d, headers={"cache-control": "min-fresh=61"})[1]["x-n"] == "2"
    assert server.requests[-1].header("if-none-match") == '"e"'
    assert get(d, headers={"cache-control": "no-cache"})[1]["x-n"] == "3"
    assert get(d, headers={"pragma": "no-cache"})[1]["x-n"] == "4"
    assert get(d, headers={"cache-control": "no-store"})[1]["x-n"] == "5"
    assert get(d, headers={"cache-control": "only-if-cached"})[1]["x-n"] == "4"
    assert get(d)[1]["x-n"] == "4"


def test_max_stale_and_max_age(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=10"), ("Age", "15")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    assert get(d, headers={"cache-control": "max-stale=10"})[1]["x-n"] == "1"
    assert get(d, headers={"cache-control": "max-stale"})[1]["x-n"] == "1"
    assert get(d, headers={"cache-control": "max-stale=1"})[1]["x-n"] == "2"
    fresh = origin(counting(("Cache-Control", "max-age=100"), ("Age", "50")))
    d = make_client(fresh.origin).compose(interceptors.cache(store=store))
    get(d)
    assert get(d, headers={"cache-control": "max-age=60"})[1]["x-n"] == "1"
    assert get(d, headers={"cache-control": "max-age=40"})[1]["x-n"] == "2"


def test_only_if_cached_without_a_usable_response_is_a_504(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=1"), ("Age", "5"), ("ETag", '"e"')))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert get(d, "/none", headers={"cache-control": "only-if-cached"}) == (504, {}, b"")
    get(d, "/stale")
    assert get(d, "/stale", headers={"cache-control": "only-if-cached"})[0] == 504
    assert len(server.requests) == 1


def test_the_clients_own_preconditions_are_answered_from_the_store(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60"), ("ETag", '"e"'), ("Content-Type", "text/plain")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    status, headers, body = get(d, headers={"if-none-match": '"e"'})
    assert (status, body) == (304, b"") and headers["etag"] == '"e"' and "content-type" not in headers
    assert get(d, headers={"if-none-match": '"other"'})[0] == 200
    assert len(server.requests) == 1


def test_a_byte_range_of_a_stored_response(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60"), body=b"0123456789"))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    status, headers, body = get(d, headers={"range": "bytes=2-4"})
    assert (status, body, headers["content-range"], headers["content-length"]) == (206, b"234", "bytes 2-4/10", "3")
    assert get(d, headers={"range": "bytes=-2"})[2] == b"89"
    assert len(server.requests) == 1


def test_head_is_answered_from_a_stored_get(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=store, methods=["GET", "HEAD"]))
    get(d)
    status, headers, body = get(d, method="HEAD")
    assert (status, body, headers["x-n"]) == (200, b"", "1")
    only_get = make_client(server.origin).compose(interceptors.cache(store=store))
    assert get(only_get, method="HEAD")[1]["x-n"] == "2"  # HEAD is not a cached method there


def test_a_200_to_head_freshens_the_stored_get(origin, make_client, store):
    def reply(req):
        if req.method == "HEAD":
            return "200 OK", [("Cache-Control", "max-age=600"), ("X-V", "2")], b"body"
        return "200 OK", [("Cache-Control", "max-age=1"), ("Age", "5"), ("ETag", '"e"'), ("X-V", "1")], b"body"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store, methods=["GET", "HEAD"]))
    get(d)
    assert get(d, method="HEAD")[1]["x-v"] == "2"  # the stored GET is stale: HEAD goes to the origin
    status, headers, body = get(d)
    assert (status, headers["x-v"], body) == (200, "2", b"body")
    assert [r.method for r in server.requests] == ["GET", "HEAD"]


def test_after_redirects_the_final_url_is_stored(origin, make_client, store):
    def reply(req):
        if req.target == "/a":
            return "302 Found", [("Location", "/b")], b""
        return "200 OK", [("Cache-Control", "max-age=60"), ("X-N", str(len(server.requests)))], b"b"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store), interceptors.redirect(max_redirections=2))
    assert get(d, "/a")[2] == b"b"
    assert get(d, "/b")[1]["x-n"] == "2"  # stored under /b, where it came from
    assert get(d, "/a")[2] == b"b"  # the uncacheable 302 is asked again (and the hop goes on past the cache)
    assert [r.target for r in server.requests] == ["/a", "/b", "/a", "/b"]
    assert get(d, "/a", headers={"authorization": "x"})[2] == b"b"


def test_heuristic_freshness_and_cache_by_default(origin, make_client, store):
    server = origin(counting(("Last-Modified", "Thu, 01 Jan 2015 00:00:00 GMT")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d, "/lm")
    assert get(d, "/lm")[1]["x-n"] == "1"
    plain = origin(counting())
    d = make_client(plain.origin).compose(interceptors.cache(store=store))
    get(d, "/plain")
    assert get(d, "/plain")[1]["x-n"] == "2"
    d = make_client(plain.origin).compose(interceptors.cache(store=store, cache_by_default=60))
    get(d, "/default")
    assert get(d, "/default")[1]["x-n"] == "3"


def test_requests_the_cache_leaves_alone(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60")))
    client = make_client(server.origin)
    d = client.compose(interceptors.cache(store=store, origins=["http://elsewhere"]))
    get(d)
    assert get(d)[1]["x-n"] == "2"  # not a cached origin
    d = client.compose(interceptors.cache(store=store))
    assert get(d, "/body", method="GET", body=b"x")[1]["x-n"] == "3"
    assert get(d, "/body", method="GET", body=b"x")[1]["x-n"] == "4"


def test_a_failing_store_fails_the_request(origin, make_client):
    class Broken(MemoryCacheStore):
        def get(self, key):
            raise RuntimeError("store down")

    server = origin(counting(("Cache-Control", "max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=Broken()))
    with pytest.raises(RuntimeError, match="store down"):
        d.request(path="/")


def test_options_are_validated():
    with pytest.raises(InvalidArgumentError, match="methods"):
        interceptors.cache(methods=["POST"])
    with pytest.raises(InvalidArgumentError, match="methods"):
        interceptors.cache(methods=[])
    with pytest.raises(InvalidArgumentError, match="store"):
        interceptors.cache(store=object())
    with pytest.raises(InvalidArgumentError, match="type"):
        interceptors.cache(type="public")
    with pytest.raises(InvalidArgumentError, match="cache_by_default"):
        interceptors.cache(cache_by_default=-1)
    with pytest.raises(InvalidArgumentError, match="origins"):
        interceptors.cache(origins="http://a")


def test_a_bytes_pattern_in_origins_is_refused_when_the_cache_is_made():
    # It can never match the origin (a str): every request through the cache raised TypeError.
    with pytest.raises(InvalidArgumentError, match="origins"):
        interceptors.cache(origins=[re.compile(rb"^http://127\.0\.0\.1")])


def test_concurrent_hits_share_one_entry(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    results: list[Any] = []
    gevent.joinall([gevent.spawn(lambda: results.append(get(d)[2])) for _ in range(50)], timeout=10)
    assert results == [b"payload"] * 50 and len(server.requests) == 1


def test_it_works_through_an_agent(origin, store):
    server = origin(counting(("Cache-Control", "max-age=60")))
    agent = greenhttp.Agent()
    try:
        d = agent.compose(interceptors.cache(store=store))
        assert get(d, origin=server.origin)[1]["x-n"] == "1"
        assert get(d, origin=server.origin)[1]["x-n"] == "1"
    finally:
        with gevent.Timeout(5):
            agent.destroy()
