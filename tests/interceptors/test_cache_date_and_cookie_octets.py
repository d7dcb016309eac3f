"""Audit: the cache dates what it stores, and a second pass over RFC 9111.

RFC 9110 §6.6.1: a recipient with a clock that caches a response without a
``Date`` must add one, the time it received the response; the cache's age
calculations (RFC 9111 §4.2.3) count from it. The rest checks the ``cache``
interceptor against RFC 9111 / RFC 5861 edge cases, with each store.
"""

from __future__ import annotations

import time
from email.utils import formatdate, parsedate_to_datetime

import gevent
import pytest
from cachekit import counting, get

from greenhttp import interceptors
from greenhttp._core.cache_policy import cache_key, invalidation_paths


def _date(value: str) -> float:
    return parsedate_to_datetime(value).timestamp()


# -- 1. Date ------------------------------------------------------------------------------------


def test_a_response_without_date_is_stored_and_served_with_its_receipt_time(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    before = time.time()
    get(d)
    after = time.time()
    entry = store.get(cache_key(server.origin, "GET", "/", None, {}))
    assert entry is not None and "date" in entry["headers"]
    assert int(before) <= _date(entry["headers"]["date"]) <= after
    status, headers, body = get(d)
    assert (status, body, headers["x-n"]) == (200, b"payload", "1")
    assert headers["date"] == entry["headers"]["date"] and headers["age"] == "0"
    assert len(server.requests) == 1


def test_the_added_date_does_not_hide_the_age_the_response_came_with(origin, make_client, store):
    # No Date but Age: 30 — the age is the corrected Age (§4.2.3), the Date is still the receipt time.
    server = origin(counting(("Cache-Control", "max-age=60"), ("Age", "30")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    before = time.time()
    get(d)
    status, headers, _ = get(d)
    assert status == 200 and headers["x-n"] == "1"
    assert int(headers["age"]) == 30
    assert _date(headers["date"]) >= int(before)


def test_an_origin_date_is_kept_as_it_was_sent(origin, make_client, store):
    sent = formatdate(time.time() - 20, usegmt=True)
    server = origin(counting(("Cache-Control", "max-age=60"), ("Date", sent)))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    entry = store.get(cache_key(server.origin, "GET", "/", None, {}))
    assert entry is not None and entry["headers"]["date"] == sent
    status, headers, _ = get(d)
    assert headers["date"] == sent and 19 <= int(headers["age"]) <= 22  # the apparent age


def test_an_invalid_date_is_replaced_by_the_receipt_time(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60"), ("Date", "yesterday")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    before = time.time()
    get(d)
    status, headers, _ = get(d)
    assert status == 200 and headers["x-n"] == "1"
    assert _date(headers["date"]) >= int(before)


def test_a_304_served_from_the_store_carries_the_added_date(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60"), ("ETag", '"e"')))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    status, headers, body = get(d, headers={"if-none-match": '"e"'})
    assert (status, body) == (304, b"") and "date" in headers  # RFC 9110 §15.4.5
    assert len(server.requests) == 1


# -- 3. RFC 9111 second pass --------------------------------------------------------------------


def test_vary_on_several_fields_with_normalised_values(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60"), ("Vary", "Accept-Encoding"), ("Vary", "Accept-Language")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    first = {"accept-encoding": "gzip, br", "accept-language": "en"}
    assert get(d, headers=first)[1]["x-n"] == "1"
    # Whitespace around commas and split field lines are the same value (RFC 9111 §4.1).
    assert get(d, headers={"Accept-Encoding": "gzip,br", "Accept-Language": "en"})[1]["x-n"] == "1"
    assert get(d, headers=[("accept-encoding", "gzip"), ("accept-encoding", " br"), ("accept-language", "en")])[
        1]["x-n"] == "1"
    # Either field different, or one missing: another variant.
    assert get(d, headers={"accept-encoding": "gzip, br", "accept-language": "fr"})[1]["x-n"] == "2"
    assert get(d, headers={"accept-encoding": "br, gzip", "accept-language": "en"})[1]["x-n"] == "3"
    assert get(d, headers={"accept-encoding": "gzip, br"})[1]["x-n"] == "4"
    # Each variant is kept: the first and the language-less one are still hits.
    assert get(d, headers=first)[1]["x-n"] == "1"
    assert get(d, headers={"accept-encoding": "gzip, br"})[1]["x-n"] == "4"
    assert len(server.requests) == 4


def test_a_stale_variant_is_validated_with_its_own_selecting_fields(origin, make_client, store):
    def reply(req):
        lang = req.header("accept-language")
        if req.header("if-none-match") == f'"{lang}"':
            return "304 Not Modified", [("ETag", f'"{lang}"')], b""
        return "200 OK", [("Cache-Control", "max-age=1"), ("Age", "5"), ("Vary", "Accept-Language"),
                          ("ETag", f'"{lang}"')], lang.encode()

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert get(d, headers={"accept-language": "en"})[2] == b"en"
    assert get(d, headers={"accept-language": "fr"})[2] == b"fr"
    status, headers, body = get(d, headers={"accept-language": "fr"})
    assert (status, body) == (200, b"fr")
    last = server.requests[-1]
    assert last.header("if-none-match") == '"fr"' and last.header("accept-language") == "fr"


def test_qualified_no_cache_drops_the_fields_but_allows_reuse(origin, make_client, store):
    server = origin(counting(("Cache-Control", 'max-age=60, no-cache="Set-Cookie, X-Secret"'),
                             ("Set-Cookie", "s=1"), ("X-Secret", "t"), ("X-Public", "p")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    first = get(d)[1]
    assert first["set-cookie"] == ["s=1"] and first["x-secret"] == "t"  # the origin's answer is untouched
    status, headers, _ = get(d)
    assert status == 200 and headers["x-n"] == "1" and headers["x-public"] == "p"
    assert "set-cookie" not in headers and "x-secret" not in headers
    assert len(server.requests) == 1


@pytest.mark.parametrize(("kind", "reused"), [("shared", False), ("private", True)])
def test_private_is_kept_only_by_a_private_cache(origin, make_client, store, kind, reused):
    server = origin(counting(("Cache-Control", "private, max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=store, type=kind))
    get(d)
    assert (get(d)[1]["x-n"] == "1") is reused


def test_private_with_field_names_in_a_shared_cache(origin, make_client, store):
    server = origin(counting(("Cache-Control", 'private="X-User", max-age=60'), ("X-User", "alice")))
    shared = make_client(server.origin).compose(interceptors.cache(store=store))
    get(shared)
    headers = get(shared)[1]
    assert headers["x-n"] == "1" and "x-user" not in headers


@pytest.mark.parametrize(("kind", "x_n"), [("shared", "2"), ("private", "1")])
def test_s_maxage_counts_only_in_a_shared_cache(origin, make_client, store, kind, x_n):
    # s-maxage=0 makes it stale for a shared cache; a private cache uses max-age=60.
    server = origin(counting(("Cache-Control", "max-age=60, s-maxage=0"), ("ETag", '"e"')))
    d = make_client(server.origin).compose(interceptors.cache(store=store, type=kind))
    get(d)
    assert get(d)[1]["x-n"] == x_n


@pytest.mark.parametrize(("kind", "x_n"), [("shared", "2"), ("private", "1")])
def test_s_maxage_forbids_stale_answers_only_in_a_shared_cache(origin, make_client, store, kind, x_n):
    server = origin(counting(("Cache-Control", "max-age=10, s-maxage=10"), ("Age", "15")))
    d = make_client(server.origin).compose(interceptors.cache(store=store, type=kind))
    get(d)
    assert get(d, headers={"cache-control": "max-stale=60"})[1]["x-n"] == x_n


def test_must_revalidate_forbids_stale_if_error_and_stale_while_revalidate(origin, make_client, store):
    replies = iter([
        ("200 OK", [("Cache-Control", "max-age=1, must-revalidate, stale-while-revalidate=60, stale-if-error=60"),
                    ("Age", "5"), ("ETag", '"e"')], b"old"),
        ("503 Busy", [], b"busy"),
    ])
    server = origin(lambda req: next(replies))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    status, _, body = get(d, headers={"cache-control": "max-stale=100, stale-if-error=100"})
    assert (status, body) == (503, b"busy")
    assert server.requests[-1].header("if-none-match") == '"e"'


def test_stale_if_error_serves_the_stale_response_for_502_and_504(origin, make_client, store):
    replies = iter([
        ("200 OK", [("Cache-Control", "max-age=1, stale-if-error=60"), ("Age", "5")], b"old"),
        ("502 Bad Gateway", [], b"x"),
        ("504 Gateway Timeout", [], b"x"),
        ("404 Not Found", [("Cache-Control", "max-age=60")], b"gone"),
    ])
    server = origin(lambda req: next(replies))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    for _ in range(2):
        status, headers, body = get(d)
        assert (status, body) == (200, b"old") and headers["warning"].startswith("110")
    assert get(d)[:3:2] == (404, b"gone")  # not an error: passed on and stored
    assert get(d)[:3:2] == (404, b"gone")
    assert len(server.requests) == 4


def test_stale_if_error_past_its_window_passes_the_error_on(origin, make_client, store):
    replies = iter([
        ("200 OK", [("Cache-Control", "max-age=1, stale-if-error=3"), ("Age", "10")], b"old"),
    ])
    server = origin(lambda req: next(replies, ("500 Oops", [], b"oops")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    assert get(d)[:3:2] == (500, b"oops")


def test_request_stale_if_error_applies_without_a_response_one(origin, make_client, store):
    replies = iter([("200 OK", [("Cache-Control", "max-age=1"), ("Age", "5"), ("ETag", '"e"')], b"old")])
    server = origin(lambda req: next(replies, ("500 Oops", [], b"oops")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    assert get(d, headers={"cache-control": "stale-if-error=60"})[:3:2] == (200, b"old")
    assert get(d, headers={"cache-control": "stale-if-error=2"})[:3:2] == (500, b"oops")


@pytest.mark.parametrize(("status", "stored"), [("200 OK", True), ("203 Non-Authoritative", True),
                                                 ("404 Not Found", True), ("302 Found", False),
                                                 ("307 Temporary Redirect", False), ("500 Oops", False)])
def test_heuristic_freshness_only_for_statuses_cacheable_by_default(origin, make_client, store, status, stored):
    server = origin(counting(("Last-Modified", "Thu, 01 Jan 2015 00:00:00 GMT"), ("Location", "/x"), status=status))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    assert (get(d)[1]["x-n"] == "1") is stored


def test_no_heuristic_freshness_without_last_modified_or_from_a_future_one(origin, make_client, store):
    later = formatdate(time.time() + 3600, usegmt=True)
    server = origin(counting(("Last-Modified", later)))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d, "/future")
    assert get(d, "/future")[1]["x-n"] == "2"
    assert server.requests[-1].header("if-modified-since") == later  # stored for validation only


def test_the_heuristic_counts_from_date_not_from_arrival(origin, make_client, store):
    # Modified 100 s before Date: 10 s of freshness; Date is 20 s ago, so it is stale now.
    now = time.time()
    server = origin(counting(("Date", formatdate(now - 20, usegmt=True)),
                             ("Last-Modified", formatdate(now - 120, usegmt=True))))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    assert get(d)[1]["x-n"] == "2"


def test_an_unsafe_method_invalidates_relative_location_targets(origin, make_client, store):
    def reply(req):
        if req.method == "POST":
            return "201 Created", [("Location", "../c"), ("Content-Location", "?page=2")], b""
        return "200 OK", [("Cache-Control", "max-age=60"), ("X-N", str(len(server.requests)))], b"x"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    for path in ("/a/b", "/c", "/a/b?page=2", "/a/c"):
        get(d, path)
    get(d, "/a/b", method="POST", body=b"data")
    assert get(d, "/a/b")[1]["x-n"] == "6"
    assert get(d, "/c")[1]["x-n"] == "7"  # ../c from /a/b (RFC 3986 §5.2)
    assert get(d, "/a/b?page=2")[1]["x-n"] == "8"  # ?page=2 from /a/b
    assert get(d, "/a/c")[1]["x-n"] == "4"  # untouched


def test_an_unsafe_method_invalidates_same_origin_absolute_and_network_path_targets(origin, make_client, store):
    def reply(req):
        if req.method == "PUT":
            host = server.origin.split("://", 1)[1]
            return "204 No Content", [("Location", f"//{host}/n"), ("Content-Location", f"{server.origin}/abs")], b""
        if req.method == "DELETE":
            return "200 OK", [("Location", "http://elsewhere.example/n"), ("Content-Location", "https:" + server.origin.split(":", 1)[1] + "/abs")], b""
        return "200 OK", [("Cache-Control", "max-age=60"), ("X-N", str(len(server.requests)))], b"x"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d, "/n")
    get(d, "/abs")
    get(d, "/r", method="DELETE")  # other origins (another host, another scheme) are left alone
    assert get(d, "/n")[1]["x-n"] == "1" and get(d, "/abs")[1]["x-n"] == "2"
    get(d, "/r", method="PUT", body=b"x")
    assert get(d, "/n")[1]["x-n"] == "5"
    assert get(d, "/abs")[1]["x-n"] == "6"


def test_an_error_or_a_1xx_does_not_invalidate_but_a_3xx_does(origin, make_client, store):
    def reply(req):
        if req.method == "POST":
            return {"/e": "404 Not Found", "/r": "303 See Other"}[req.target], [], b""
        return "200 OK", [("Cache-Control", "max-age=60"), ("X-N", str(len(server.requests)))], b"x"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d, "/e")
    get(d, "/r")
    get(d, "/e", method="POST", body=b"x")
    get(d, "/r", method="POST", body=b"x")
    assert get(d, "/e")[1]["x-n"] == "1"
    assert get(d, "/r")[1]["x-n"] == "5"


def test_a_stored_get_answers_head_with_its_fields_and_no_body(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=60"), ("ETag", '"e"'), body=b"0123456789"))
    d = make_client(server.origin).compose(interceptors.cache(store=store, methods=["GET", "HEAD"]))
    get(d)
    status, headers, body = get(d, method="HEAD")
    assert (status, body, headers["content-length"], headers["etag"]) == (200, b"", "10", '"e"')
    assert "date" in headers and headers["age"] == "0"
    status, headers, body = get(d, method="HEAD", headers={"if-none-match": '"e"'})
    assert (status, body) == (304, b"")
    assert [r.method for r in server.requests] == ["GET"]


def test_a_stale_stored_get_does_not_answer_head(origin, make_client, store):
    server = origin(counting(("Cache-Control", "max-age=1"), ("Age", "5"), ("ETag", '"e"')))
    d = make_client(server.origin).compose(interceptors.cache(store=store, methods=["GET", "HEAD"]))
    get(d)
    assert get(d, method="HEAD")[1]["x-n"] == "2"
    assert server.requests[-1].method == "HEAD"


@pytest.mark.parametrize("cc", ["max-age=60", "max-age=60, must-understand, no-store", "public, max-age=60"])
def test_a_206_is_never_stored(origin, make_client, store, cc):
    server = origin(counting(("Cache-Control", cc), ("Content-Range", "bytes 0-1/10"), body=b"01",
                             status="206 Partial Content"))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert get(d, headers={"range": "bytes=0-1"})[0] == 206
    assert get(d, headers={"range": "bytes=0-1"})[1]["x-n"] == "2"
    assert get(d)[1]["x-n"] == "3"  # nor does it answer a request for the whole


def test_a_206_from_the_origin_does_not_replace_the_stored_200(origin, make_client, store):
    replies = iter([("200 OK", [("Cache-Control", "max-age=1"), ("Age", "5"), ("ETag", '"e"')], b"0123456789")])
    server = origin(lambda req: next(replies, ("206 Partial Content",
                                               [("Content-Range", "bytes 0-1/10"), ("ETag", '"e"')], b"01")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    assert get(d, headers={"range": "bytes=0-1"})[:3:2] == (206, b"01")
    assert store.get(cache_key(server.origin, "GET", "/", None, {}))["status_code"] == 200


def test_vary_normalisation_keeps_the_spaces_inside_a_quoted_string(origin, make_client, store):
    # Whitespace may only be added or removed where the field's syntax allows it (RFC 9111 §4.1):
    # not inside a quoted-string, so '"a, b"' and '"a,b"' are different values.
    server = origin(counting(("Cache-Control", "max-age=60"), ("Vary", "Prefer")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert get(d, headers={"prefer": 'x="a, b", y'})[1]["x-n"] == "1"
    assert get(d, headers={"prefer": 'x="a, b" ,y'})[1]["x-n"] == "1"  # outside the quotes: the same
    assert get(d, headers={"prefer": 'x="a,b", y'})[1]["x-n"] == "2"
    assert get(d, headers={"prefer": 'x="a,  b", y'})[1]["x-n"] == "3"


def test_preconditions_of_other_methods_than_get_and_head_never_make_a_304(origin, make_client, store):
    # RFC 9110 §13.1.3: If-Modified-Since is ignored unless the method is GET or HEAD; §13.1.2: a
    # false If-None-Match is a 304 only for GET and HEAD (412 otherwise), which only the origin decides.
    server = origin(counting(("Cache-Control", "max-age=60"), ("ETag", '"e"')))
    d = make_client(server.origin).compose(interceptors.cache(store=store, methods=["GET", "OPTIONS"]))
    get(d, method="OPTIONS")
    assert get(d, method="OPTIONS")[1]["x-n"] == "1"
    later = formatdate(time.time() + 60, usegmt=True)
    assert get(d, method="OPTIONS", headers={"if-modified-since": later})[0] == 200
    assert get(d, method="OPTIONS", headers={"if-none-match": '"e"'})[0] != 304
    get(d)
    assert get(d, headers={"if-none-match": '"e"'})[0] == 304  # GET still is answered from the store


def test_a_range_is_served_from_the_store_only_for_get(origin, make_client, store):
    # RFC 9110 §14.2: GET is the only method with range handling; a Range on another is ignored.
    server = origin(counting(("Cache-Control", "max-age=60"), body=b"0123456789"))
    d = make_client(server.origin).compose(interceptors.cache(store=store, methods=["GET", "HEAD", "OPTIONS"]))
    get(d, method="OPTIONS")
    assert get(d, method="OPTIONS", headers={"range": "bytes=0-1"})[::2] == (200, b"0123456789")
    get(d)
    status, headers, body = get(d, method="HEAD", headers={"range": "bytes=0-1"})
    assert (status, body, headers["content-length"]) == (200, b"", "10")
    assert get(d, headers={"range": "bytes=0-1"})[::2] == (206, b"01")


def test_a_304_without_date_redates_the_stored_response(origin, make_client, store):
    old = formatdate(time.time() - 50, usegmt=True)

    def reply(req):
        if req.header("if-none-match") == '"e"':
            return "304 Not Modified", [("ETag", '"e"'), ("Cache-Control", "max-age=60")], b""
        return "200 OK", [("Cache-Control", "max-age=10"), ("ETag", '"e"'), ("Date", old)], b"body"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    for _ in range(2):
        status, headers, body = get(d)
        assert (status, body, headers["age"]) == (200, b"body", "0") and headers["date"] != old
    assert len(server.requests) == 2


def test_if_modified_since_is_answered_from_the_added_date(origin, make_client, store):
    # RFC 9111 §4.3.2: without Last-Modified, the stored Date (or the receipt time) decides.
    server = origin(counting(("Cache-Control", "max-age=60")))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    dated = get(d)[1]["date"]
    assert get(d, headers={"if-modified-since": dated})[0] == 304
    assert get(d, headers={"if-modified-since": formatdate(time.time() - 3600, usegmt=True)})[0] == 200
    assert len(server.requests) == 1


def test_invalidation_targets_compare_origins_with_default_ports():
    key = {"origin": "http://example.com", "path": "/a/b", "method": "POST"}
    headers = {"location": "http://EXAMPLE.com:80/x", "content-location": "https://example.com/y"}
    assert invalidation_paths(key, headers) == ["/a/b", "/x"]
    key = {"origin": "https://example.com:443", "path": "/a/b?q", "method": "POST"}
    headers = {"location": "https://example.com/x#frag", "content-location": "http://example.com:443/y"}
    assert invalidation_paths(key, headers) == ["/a/b?q", "/x"]
    assert invalidation_paths(key, {"location": "https://example.com:99999/x"}) == ["/a/b?q"]
    assert invalidation_paths(key, {"location": "./c?d=1", "content-location": "/a/b?q"}) == ["/a/b?q", "/a/c?d=1"]


def test_a_304_naming_another_last_modified_does_not_validate_the_entry(origin, make_client, store):
    # RFC 9111 §4.3.4: a 304 whose validator (here Last-Modified, no ETag) matches no stored
    # response must not update one; the request is asked again without conditions.
    t1, t2 = "Thu, 01 Jan 2015 00:00:00 GMT", "Fri, 02 Jan 2015 00:00:00 GMT"

    def reply(req):
        if req.header("if-modified-since"):
            return "304 Not Modified", [("Last-Modified", t2), ("Cache-Control", "max-age=60")], b""
        body = b"old" if len(server.requests) == 1 else b"new"
        return "200 OK", [("Cache-Control", "max-age=1"), ("Age", "5"), ("Last-Modified", t1 if body == b"old" else t2)], body

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert get(d)[2] == b"old"
    status, headers, body = get(d)
    assert (status, body, headers["last-modified"]) == (200, b"new", t2)
    assert [r.header("if-modified-since") for r in server.requests] == [None, t1, None]


def test_a_304_with_the_same_last_modified_validates_the_entry(origin, make_client, store):
    t1 = "Thu, 01 Jan 2015 00:00:00 GMT"

    def reply(req):
        if req.header("if-modified-since") == t1:
            return "304 Not Modified", [("Last-Modified", t1), ("Cache-Control", "max-age=60")], b""
        return "200 OK", [("Cache-Control", "max-age=1"), ("Age", "5"), ("Last-Modified", t1)], b"old"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    assert get(d)[::2] == (200, b"old")
    assert get(d)[::2] == (200, b"old")
    assert len(server.requests) == 2


def test_a_304_with_a_strong_etag_does_not_validate_a_weak_stored_one(origin, make_client, store):
    # RFC 9111 §4.3.4: a strong validator in the 304 selects the stored responses with the same
    # strong validator; W/"a" is not one (it would relabel, say, a gzip body as byte-identical).
    def reply(req):
        if req.header("if-none-match"):
            return "304 Not Modified", [("ETag", '"a"'), ("Cache-Control", "max-age=60")], b""
        n = len(server.requests)
        return "200 OK", [("Cache-Control", "max-age=1"), ("Age", "5"), ("ETag", 'W/"a"' if n == 1 else '"a"')], \
            b"weak" if n == 1 else b"strong"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    status, headers, body = get(d)
    assert (status, body, headers["etag"]) == (200, b"strong", '"a"')
    assert [r.header("if-none-match") for r in server.requests] == [None, 'W/"a"', None]


def test_a_304_with_a_weak_etag_validates_a_stored_strong_or_weak_one(origin, make_client, store):
    def reply(req):
        if req.header("if-none-match"):
            return "304 Not Modified", [("ETag", 'W/"a"'), ("Cache-Control", "max-age=60")], b""
        return "200 OK", [("Cache-Control", "max-age=1"), ("Age", "5"), ("ETag", '"a"')], b"body"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    assert get(d)[::2] == (200, b"body")
    assert get(d)[::2] == (200, b"body") and len(server.requests) == 2


def test_a_background_refresh_whose_304_does_not_validate_fetches_the_new_response(origin, make_client, store):
    def reply(req):
        n = len(server.requests)
        if req.header("if-none-match"):
            return "304 Not Modified", [("ETag", '"other"')], b""
        if n == 1:
            return "200 OK", [("Cache-Control", "max-age=1, stale-while-revalidate=60"), ("Age", "3"),
                              ("ETag", '"e"')], b"old"
        return "200 OK", [("Cache-Control", "max-age=60"), ("ETag", '"f"')], b"new"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    assert get(d)[2] == b"old"  # stale, answered at once; the refresh runs in the background
    key = cache_key(server.origin, "GET", "/", None, {})
    deadline = time.monotonic() + 5
    while (store.get(key) or {}).get("etag") != '"f"':
        assert time.monotonic() < deadline, "the background refresh never stored the new response"
        gevent.sleep(0.005)
    assert get(d)[::2] == (200, b"new")
    assert [r.header("if-none-match") for r in server.requests] == [None, '"e"', None]


@pytest.mark.parametrize("dated", [False, True])
def test_the_age_of_a_304_counts_for_the_freshened_response(origin, make_client, store, dated):
    # RFC 9111 §4.2.3 and §4.3.4: the 304 (here from a cache on the way, Age: 50) updates the
    # stored response's age along with its other fields: 50 s old, fresh for 10 s more.
    def reply(req):
        if req.header("if-none-match") == '"e"':
            extra = [("Date", formatdate(time.time(), usegmt=True))] if dated else []
            return "304 Not Modified", [("ETag", '"e"'), ("Cache-Control", "max-age=60"), ("Age", "50"), *extra], b""
        return "200 OK", [("Cache-Control", "max-age=1"), ("Age", "5"), ("ETag", '"e"')], b"body"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    get(d)
    status, headers, body = get(d)
    assert (status, body) == (200, b"body") and 50 <= int(headers["age"]) <= 51
    status, headers, body = get(d, headers={"cache-control": "min-fresh=20"})  # only ~10 s left
    assert len(server.requests) == 3
