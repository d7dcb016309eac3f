"""Audit: the cache dates what it stores, and a second pass over RFC 9111.

RFC 9110 §6.6.1: a recipient with a clock that caches a response without a
``Date`` must add one, the time it received the response; the cache's age
calculations (RFC 9111 §4.2.3) count from it. The rest checks the ``cache``
interceptor against RFC 9111 / RFC 5861 edge cases, with each store.
"""

from __future__ import annotations

import time
from email.utils import formatdate, parsedate_to_datetime

from greenhttp import interceptors
from greenhttp._core.cache_policy import cache_key


def counting(*headers, body=b"payload", status="200 OK"):
    n = 0

    def reply(req):
        nonlocal n
        n += 1
        return status, [*headers, ("X-N", str(n))], body

    return reply


def get(d, path="/", **kw):
    r = d.request(path=path, **kw)
    return r.status_code, r.headers, r.body.bytes()


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
