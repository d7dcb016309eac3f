"""RFC 9111 decisions of ``_core/cache_policy.py``, with header values and numbers only."""

from __future__ import annotations

import calendar

import pytest

from greenhttp._core import cache_policy as p

T = calendar.timegm((1994, 11, 6, 8, 49, 37))  # Sun, 06 Nov 1994 08:49:37 GMT


# -- HTTP dates (RFC 9110 §5.6.7) ------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
        "sun, 06 nov 1994 08:49:37 gmt",  # names are case-insensitive
        "  Sun, 06 Nov 1994 08:49:37 GMT ",
        ["Sun, 06 Nov 1994 08:49:37 GMT"],
    ],
)
def test_http_date_formats(value):
    assert p.parse_http_date(value) == T


@pytest.mark.parametrize(
    "value",
    [
        "0",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 06 Nov 1994 08:49:37 +1000",
        "Sun, 06 Nov 94 08:49:37 GMT",
        "Sun 06 Nov 1994 08:49:37 GMT",
        "Sun, 06  Nov 1994 08:49:37 GMT",
        "Sun, 06-Nov-1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08.49.37 GMT",
        "Sun, 06 Nov 1994 8:49:37 GMT",
        "Sun, 31 Feb 1994 08:49:37 GMT",
        ["Sun, 06 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:38 GMT"],
        None,
    ],
)
def test_http_date_rejects(value):
    assert p.parse_http_date(value) is None


# -- Cache-Control (RFC 9111 §5.2) -----------------------------------------------------------------


def test_cache_control_directives():
    cc = p.parse_cache_control('Max-Age=60, S-MAXAGE="30", public, no-cache="Set-Cookie, X-A", private, x=1')
    assert cc == {"max-age": 60, "s-maxage": 30, "public": True, "no-cache": ["set-cookie", "x-a"], "private": True}


def test_cache_control_lines_are_combined_and_duplicates_keep_the_most_restrictive():
    assert p.parse_cache_control(["max-age=3600", "max-age=1"]) == {"max-age": 1}
    assert p.parse_cache_control("min-fresh=1, min-fresh=5")["min-fresh"] == 5
    assert p.parse_cache_control("no-cache=a, no-cache")["no-cache"] is True


@pytest.mark.parametrize("value", ["max-age=-1", "max-age=1.5", "max-age='60'", "max-age = 60", "max-age=a100", "max-age"])
def test_malformed_max_age_counts_as_zero(value):
    assert p.parse_cache_control(value)["max-age"] == 0


def test_numbers_are_capped_and_leading_zeros_accepted():
    assert p.parse_cache_control("max-age=99999999999")["max-age"] == p.MAX_DELTA
    assert p.parse_cache_control("max-age=003600")["max-age"] == 3600


def test_quoted_strings_hide_directives():
    assert p.parse_cache_control('foo="max-age=3600", max-age=1') == {"max-age": 1}
    assert p.parse_cache_control('max-age=1, foo="x, max-age=3600"') == {"max-age": 1}


def test_restrictive_directives_survive_being_mangled():
    assert p.parse_cache_control("no-store=1")["no-store"] is True
    assert p.parse_cache_control('no-store"')["no-store"] is True
    assert "public" not in p.parse_cache_control("public=1")
    assert p.parse_cache_control("max-stale") == {"max-stale": p.MAX_DELTA}


def test_age_vary_and_etags():
    assert p.parse_age("7200, 0") == 7200
    assert p.parse_age(["0", "7200"]) == 0
    assert p.parse_age("-1") is None and p.parse_age("1.5") is None and p.parse_age("old") is None
    assert p.parse_vary("Accept-Encoding, , accept-encoding, X") == ("accept-encoding", "x")
    assert p.parse_vary(["Foo", "*"]) is None
    assert p.valid_etag('"abc"') and p.valid_etag('W/"abc"') and p.valid_etag('""')
    assert not p.valid_etag("abc") and not p.valid_etag('w/"abc"')
    assert p.weak_etag_match('W/"a"', '"a"') and not p.weak_etag_match('"a"', '"b"')


# -- storing (RFC 9111 §3, §4.2) ------------------------------------------------------------------


def entry(headers, status=200, method="GET", req=None, shared=True, request_time=1000.0, response_time=1000.0,
          cache_by_default=None):
    return p.build_entry(method=method, status=status, status_message="OK", headers=headers,
                         request_headers=req or {}, request_time=request_time, response_time=response_time,
                         shared=shared, cache_by_default=cache_by_default)


def test_max_age_gives_the_freshness_and_a_retention():
    e = entry({"cache-control": "max-age=60"})
    assert (e["cached_at"], e["stale_at"], e["delete_at"]) == (1000.0, 1060.0, 1120.0)


def test_age_date_and_delay_make_the_initial_age():
    # §4.2.3: the larger of the apparent age (Date) and Age plus the response delay.
    e = entry({"cache-control": "max-age=60", "age": "10"}, request_time=998.0, response_time=1000.0)
    assert e["cached_at"] == 1000.0 - 12
    date = "Thu, 01 Jan 1970 00:16:20 GMT"  # 980
    assert entry({"cache-control": "max-age=60", "date": date})["cached_at"] == 980.0


def test_shared_caches_prefer_s_maxage():
    assert entry({"cache-control": "max-age=10, s-maxage=100"})["stale_at"] == 1100.0
    assert entry({"cache-control": "max-age=10, s-maxage=100"}, shared=False)["stale_at"] == 1010.0


def test_expires_is_relative_to_date():
    headers = {"date": "Thu, 01 Jan 1970 00:16:40 GMT", "expires": "Thu, 01 Jan 1970 00:17:40 GMT"}
    assert entry(headers)["stale_at"] == 1060.0
    assert entry({"expires": "0", "etag": '"x"'})["stale_at"] == 1000.0  # invalid: stale at once


def test_heuristic_freshness_is_a_tenth_of_the_age_of_last_modified():
    e = entry({"last-modified": "Thu, 01 Jan 1970 00:00:00 GMT"})
    assert e["stale_at"] == pytest.approx(1100.0)
    assert entry({"last-modified": "Thu, 01 Jan 1970 00:00:00 GMT"}, status=201) is None
    assert entry({"last-modified": "Thu, 01 Jan 1970 00:00:00 GMT", "cache-control": "public"}, status=599)


def test_cache_by_default_gives_a_lifetime_to_storable_responses_without_one():
    assert entry({}, cache_by_default=30)["stale_at"] == 1030.0
    assert entry({}) is None  # nothing makes it usable: not stored


@pytest.mark.parametrize(
    "headers, status, kw",
    [
        ({"cache-control": "no-store, max-age=60"}, 200, {}),
        ({"cache-control": "private, max-age=60"}, 200, {}),
        ({"cache-control": "max-age=60"}, 206, {}),
        ({"cache-control": "max-age=60"}, 100, {}),
        ({"cache-control": "max-age=60", "vary": "*"}, 200, {}),
        ({"cache-control": "max-age=60"}, 200, {"method": "POST"}),
        ({"cache-control": "max-age=60"}, 200, {"req": {"authorization": "x"}}),
        ({"cache-control": "no-store, must-understand, max-age=60"}, 599, {}),
        ({"cache-control": "no-cache, max-age=60"}, 200, {}),
    ],
)
def test_not_storable(headers, status, kw):
    assert entry(headers, status=status, **kw) is None


def test_storable_with_permission():
    assert entry({"cache-control": "private, max-age=60"}, shared=False) is not None
    assert entry({"cache-control": "public, max-age=60"}, req={"authorization": "x"}) is not None
    assert entry({"cache-control": "s-maxage=60"}, req={"authorization": "x"}) is not None
    assert entry({"cache-control": "no-store, must-understand, max-age=60"}) is not None
    assert entry({"cache-control": "no-cache", "etag": '"v"'})["stale_at"] == 1000.0


def test_stored_headers_drop_hop_by_hop_and_listed_fields():
    e = entry({
        "cache-control": 'max-age=60, no-cache="x-a", private="x-b"',
        "connection": "x-c", "x-c": "1", "keep-alive": "timeout=5", "x-a": "1", "x-b": "1", "x-d": "1",
        "age": "3", "set-cookie": ["a=b"],
    }, shared=False)
    assert set(e["headers"]) == {"cache-control", "x-b", "x-d", "set-cookie", "date"}  # date: RFC 9110 §6.6.1


def test_vary_values_are_normalised():
    e = entry({"cache-control": "max-age=60", "vary": "Accept, X-Foo"}, req={"accept": ["a", "b"]})
    assert e["vary"] == {"accept": "a,b", "x-foo": None}
    assert p.vary_matches(e["vary"], {"accept": " a , b "})
    assert not p.vary_matches(e["vary"], {"accept": "a,b", "x-foo": ""})


# -- reusing (RFC 9111 §4) ------------------------------------------------------------------------


def stored(cc="max-age=100", **extra):
    e = entry({"cache-control": cc, "etag": '"v1"', "last-modified": "Thu, 01 Jan 1970 00:00:00 GMT"})
    e.update(extra)
    return e


def test_assess_fresh_and_stale():
    assert p.assess(stored(), {}, 1050.0, True).action == p.FRESH
    v = p.assess(stored(), {}, 1150.0, True)
    assert v.action == p.VALIDATE and v.stale and v.age == 150.0


def test_assess_request_directives():
    s = stored()
    assert p.assess(s, {"max-age": 10}, 1050.0, True).action == p.VALIDATE
    assert p.assess(s, {"min-fresh": 60}, 1050.0, True).action == p.VALIDATE
    assert p.assess(s, {"no-cache": True}, 1001.0, True).action == p.VALIDATE
    assert p.assess(s, {"max-stale": 100}, 1150.0, True).action == p.STALE_OK
    assert p.assess(s, {"max-stale": 10}, 1150.0, True).action == p.VALIDATE


def test_assess_stale_while_revalidate_and_stale_if_error():
    s = stored("max-age=100, stale-while-revalidate=50, stale-if-error=200")
    assert p.assess(s, {}, 1120.0, True).action == p.STALE_WHILE_REVALIDATE
    v = p.assess(s, {}, 1200.0, True)
    assert v.action == p.VALIDATE and v.stale_if_error
    assert not p.assess(s, {}, 1400.0, True).stale_if_error
    assert p.assess(stored(), {"stale-if-error": 100}, 1150.0, True).stale_if_error


@pytest.mark.parametrize("cc, shared", [("must-revalidate", False), ("proxy-revalidate", True), ("s-maxage=100", True)])
def test_assess_never_serves_stale_when_forbidden(cc, shared):
    s = stored(f"max-age=100, {cc}, stale-while-revalidate=50")
    assert p.assess(s, {"max-stale": 1000}, 1120.0, shared).action == p.VALIDATE


def test_revalidation_headers_use_the_stored_validators():
    s = stored()
    s["vary"] = {"accept": "a"}
    h = p.revalidation_headers({"if-none-match": '"mine"', "x": "1"}, s)
    assert h == {"x": "1", "if-none-match": '"v1"', "if-modified-since": "Thu, 01 Jan 1970 00:00:00 GMT",
                 "accept": "a"}
    assert p.revalidation_headers({}, entry({"cache-control": "max-age=1"})) is None


def test_client_preconditions():
    s = stored()
    assert p.not_modified({"if-none-match": 'W/"v1", "v2"'}, s)
    assert p.not_modified({"if-none-match": "*"}, s)
    assert not p.not_modified({"if-none-match": '"v2"', "if-modified-since": "Thu, 01 Jan 2037 00:00:00 GMT"}, s)
    assert p.not_modified({"if-modified-since": "Thu, 01 Jan 1970 00:00:00 GMT"}, s)
    assert not p.not_modified({"if-modified-since": "Wed, 31 Dec 1969 00:00:00 GMT"}, s)


def test_merge_304_keeps_the_framing_of_the_stored_response():
    merged = p.merge_304_headers({"content-length": "36", "a": "1", "b": "1"},
                                 {"content-length": "10", "a": "2", "connection": "close"})
    assert merged == {"content-length": "36", "a": "2", "b": "1"}


def test_invalidation_targets():
    key = p.cache_key("http://h:1", "POST", "/a/b?x=1", None, {})
    paths = p.invalidation_paths(key, {"location": "/c", "content-location": "http://other/d"})
    assert paths == ["/a/b?x=1", "/c"]
    assert p.invalidation_paths(key, {"location": "http://h:1/e?f"}) == ["/a/b?x=1", "/e?f"]
    assert p.invalidation_paths(key, {"location": "g"}) == ["/a/b?x=1", "/a/g"]


def test_cache_key_serialises_the_query_like_the_dispatcher():
    assert p.cache_key("http://h/", "GET", "/p", {"a": "b c", "d": ["1", "2"]}, {})["path"] == "/p?a=b%20c&d=1&d=2"
    assert p.cache_key("http://h", "GET", "/p?x", {"a": 1}, {})["path"] == "/p?x"


@pytest.mark.parametrize(
    "header, span",
    [("bytes=0-1", (0, 1)), ("bytes=5-", (5, 10)), ("bytes=-3", (8, 10)), ("bytes=2-100", (2, 10)),
     ("bytes=20-", None), ("bytes=0-1,3-4", None), ("items=0-1", None), ("bytes=-0", None)],
)
def test_byte_range(header, span):
    assert p.byte_range(header, 11) == span


def test_request_directives_honour_pragma_only_without_cache_control():
    assert p.request_directives({"pragma": "no-cache"}) == {"no-cache": True}
    assert p.request_directives({"pragma": "no-cache", "cache-control": "max-age=5"}) == {"max-age": 5}
    assert p.request_header_map([("A", "1"), ("a", "2"), ("B", "3")]) == {"a": ["1", "2"], "b": "3"}
