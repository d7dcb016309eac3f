"""Audit tests of the cookie helpers against RFC 6265 / RFC 6265bis and docs (sans-IO)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import greenhttp
from greenhttp import (
    Cookie,
    Headers,
    delete_cookie,
    get_cookies,
    get_set_cookies,
    parse_cookie,
    set_cookie,
)
from greenhttp.errors import InvalidArgumentError

UTC = timezone.utc
SHIP = datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC)


@pytest.mark.parametrize(
    "expires",
    [
        "Sun, 06 Nov 1994 08:49:37 GMT",  # IMF-fixdate
        "Sunday, 06-Nov-94 08:49:37 GMT",  # RFC 850, two-digit year
        "Sun Nov  6 08:49:37 1994",  # asctime
        "6 nov 1994 08:49:37",  # any order, case-insensitive month
        "08:49:37 1994 November 06th",  # "( non-digit *OCTET )" after each number
        "Sun,06-Nov-1994 08:49:37 +0000",
    ],
)
def test_expires_formats_of_the_cookie_date_algorithm(expires: str) -> None:
    cookie = parse_cookie(f"a=b; Expires={expires}")
    assert cookie is not None and cookie.expires == SHIP


@pytest.mark.parametrize(
    "expires",
    [
        "Sun, 06 Nov 1994",  # no time
        "Sun, 06 Nov 1994 24:00:00 GMT",  # hour > 23
        "Sun, 06 Nov 1994 08:60:00 GMT",
        "Sun, 06 Nov 1994 08:00:60 GMT",  # no leap second
        "Sun, 32 Nov 1994 08:00:00 GMT",
        "Sun, 31 Nov 1994 08:00:00 GMT",  # a day November does not have
        "Sat, 01 Jan 1600 00:00:00 GMT",  # before 1601
        "1994-11-06T08:49:37Z",  # ISO 8601 is not a cookie-date
        "",
    ],
)
def test_an_invalid_expires_is_ignored_not_the_cookie(expires: str) -> None:
    cookie = parse_cookie(f"a=b; Expires={expires}; Path=/p")
    assert cookie is not None and cookie.expires is None and cookie.path == "/p"


def test_two_digit_years_follow_the_rfc_pivot() -> None:
    years = [parse_cookie(f"a=b; Expires=01 Jan {y} 00:00:00").expires.year for y in ("69", "70", "99", "00")]
    assert years == [2069, 1970, 1999, 2000]


def test_max_age_and_expires_are_both_kept_and_a_later_valid_duplicate_wins() -> None:
    # The parser reports both (the user agent gives Max-Age precedence, RFC 6265bis 5.7).
    cookie = parse_cookie("a=b; Max-Age=5; Expires=Sun, 06 Nov 1994 08:49:37 GMT; Max-Age=7")
    assert cookie.max_age == 7 and cookie.expires == SHIP
    # an unparsable later value is ignored: the earlier one stays
    cookie = parse_cookie("a=b; Max-Age=5; Max-Age=ten; Max-Age=; Max-Age=+3; Max-Age=1.5; Max-Age=-")
    assert cookie.max_age == 5


@pytest.mark.parametrize(("raw", "expected"), [("0", 0), ("-1", -1), ("007", 7), ("-007", -7)])
def test_max_age_values(raw: str, expected: int) -> None:
    assert parse_cookie(f"a=b; Max-Age={raw}").max_age == expected


def test_domain_leading_dot_and_case() -> None:
    assert parse_cookie("a=b; Domain=.Example.COM").domain == "example.com"
    assert parse_cookie("a=b; domain=..example.com").domain == ".example.com"  # only one dot removed
    assert parse_cookie("a=b; Domain=  sub.example.com  ").domain == "sub.example.com"


@pytest.mark.parametrize(("raw", "expected"), [("/", "/"), ("/a/b", "/a/b"), ("", "/"), ("a/b", "/"), (" /x ", "/x")])
def test_path_defaults(raw: str, expected: str) -> None:
    assert parse_cookie(f"a=b; Path={raw}").path == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("Strict", "Strict"), ("LAX", "Lax"), ("none", "None"), ("", None), ("Bogus", None), ("Lax2", None)],
)
def test_same_site_values(raw: str, expected: str | None) -> None:
    assert parse_cookie(f"a=b; SameSite={raw}").same_site == expected


def test_flags_with_values_and_partitioned() -> None:
    cookie = parse_cookie("a=b; secure=0; HTTPONLY=false; Partitioned; Priority=High")
    assert cookie.secure is True and cookie.http_only is True
    assert cookie.unparsed == ["Partitioned=", "Priority=High"]


def test_quoted_values_and_unusual_pairs() -> None:
    assert parse_cookie('a="b c"').value == '"b c"'  # kept exactly, quotes included
    assert parse_cookie("a=b=c").value == "b=c"  # split at the first "="
    nameless = parse_cookie("just-a-value; Path=/")
    assert (nameless.name, nameless.value) == ("", "just-a-value")
    assert parse_cookie("a=%20b").value == "%20b"  # no percent-decoding


@pytest.mark.parametrize("text", ["a=b\x00", "a=b\r\nSet-Cookie: c=d", "a\x7f=b", "=", " ; Path=/", ""])
def test_unparsable_set_cookie_values_give_none(text: str) -> None:
    assert parse_cookie(text) is None


def test_size_limits() -> None:
    assert parse_cookie("a=" + "x" * 4095) is not None
    assert parse_cookie("a=" + "x" * 4096) is None
    cookie = parse_cookie("a=b; Path=/" + "x" * 1024 + "; Domain=example.com")
    assert cookie.path is None and cookie.domain == "example.com"  # only the long attribute is ignored


def test_multiple_set_cookie_headers_in_order_with_none_for_bad_ones() -> None:
    h = Headers()
    for value in ("a=1; Path=/", "b\x01=2", "c=3, d=4"):
        h.append("Set-Cookie", value)
    cookies = get_set_cookies(h)
    assert cookies[1] is None
    assert [(c.name, c.value) for c in (cookies[0], cookies[2])] == [("a", "1"), ("c", "3, d=4")]
    assert get_set_cookies(Headers()) == []


def test_get_cookies_from_several_fields_and_mappings() -> None:
    h = Headers()
    h.append("cookie", "a=1; b= 2 ;x=y")
    h.append("Cookie", "a=3;;c")
    assert get_cookies(h) == {"a": "3", "b": " 2 ", "x": "y", "c": ""}
    assert get_cookies({"cookie": ["x=1", "y=2"]}) == {"x": "1", "y": "2"}
    assert get_cookies(Headers()) == {}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "a b", "value": "v"}, "name"),
        ({"name": "a=b", "value": "v"}, "name"),
        ({"name": "a;", "value": "v"}, "name"),
        ({"name": "é", "value": "v"}, "name"),
        ({"name": "a", "value": "b c"}, "value"),
        ({"name": "a", "value": "b;c"}, "value"),
        ({"name": "a", "value": "b,c"}, "value"),
        ({"name": "a", "value": "b\\c"}, "value"),
        ({"name": "a", "value": '"b'}, "value"),
        ({"name": "a", "value": '"b"c"'}, "value"),
        ({"name": "a", "value": "\x7f"}, "value"),
        ({"name": "a", "value": "v", "path": "/a;b"}, "path"),
        ({"name": "a", "value": "v", "path": "/a\nb"}, "path"),
        ({"name": "a", "value": "v", "domain": "-a.com"}, "domain"),
        ({"name": "a", "value": "v", "domain": "a..com"}, "domain"),
        ({"name": "a", "value": "v", "domain": "a_b.com"}, "domain"),
        ({"name": "a", "value": "v", "max_age": -1}, "max_age"),
        ({"name": "a", "value": "v", "same_site": "Bogus"}, "same_site"),
        ({"name": "a", "value": "v", "unparsed": ["NoEquals"]}, "unparsed"),
        ({"name": "a", "value": "v", "unparsed": ["X=a;b"]}, "unparsed"),
    ],
)
def test_invalid_cookies_raise_on_serialisation_naming_the_field(fields: dict, message: str) -> None:
    h = Headers()
    with pytest.raises(InvalidArgumentError, match=message):
        set_cookie(h, Cookie(**fields))
    assert h.get_set_cookie() == []  # nothing half-written


def test_serialisation_order_and_prefixes() -> None:
    h = Headers()
    set_cookie(h, Cookie(name="a", value='"q"', expires=SHIP, max_age=0, domain="example.com", path="/p",
                         secure=True, http_only=True, same_site="strict", unparsed=["Partitioned="]))
    set_cookie(h, Cookie(name="__Host-id", value="1", domain="example.com", path="/x"))
    set_cookie(h, Cookie(name="__Secure-id", value="1", secure=False))
    set_cookie(h, Cookie(name="", value="ignored"))
    assert h.get_set_cookie() == [
        'a="q"; Secure; HttpOnly; Max-Age=0; Domain=example.com; Path=/p; '
        "Expires=Sun, 06 Nov 1994 08:49:37 GMT; SameSite=Strict; Partitioned=",
        "__Host-id=1; Secure; Path=/",
        "__Secure-id=1; Secure",
    ]


def test_numeric_expires_is_seconds_and_round_trips() -> None:
    h = Headers()
    set_cookie(h, Cookie(name="a", value="b", expires=784111777))
    assert h.get_set_cookie() == ["a=b; Expires=Sun, 06 Nov 1994 08:49:37 GMT"]
    assert get_set_cookies(h)[0].expires == SHIP


def test_delete_cookie_matches_the_documented_header() -> None:
    h = Headers()
    delete_cookie(h, "sid", path="/", domain="example.com")
    (line,) = h.get_set_cookie()
    assert line == "sid=; Domain=example.com; Path=/; Expires=Thu, 01 Jan 1970 00:00:00 GMT"
    parsed = greenhttp.parse_cookie(line)
    assert parsed.value == "" and parsed.expires == datetime(1970, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "expires",
    [
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=2))),
        datetime.max.replace(tzinfo=timezone(timedelta(hours=-2))),
        1e20,
        float("nan"),
    ],
)
def test_an_expires_out_of_range_is_an_invalid_argument(expires: object) -> None:
    h = Headers()
    with pytest.raises(InvalidArgumentError, match="expires"):
        set_cookie(h, Cookie(name="a", value="b", expires=expires))  # type: ignore[arg-type]
    assert h.get_set_cookie() == []
