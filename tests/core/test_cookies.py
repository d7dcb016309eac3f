"""Cookie helpers: RFC 6265bis parsing, RFC 6265 serialisation, Cookie header (sans-IO)."""

from __future__ import annotations

import string
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greenhttp._core.cookie_parse import (
    format_imf_fixdate,
    parse_cookie_date,
    parse_set_cookie,
)
from greenhttp._core.fetch_headers import Headers
from greenhttp.cookies import (
    Cookie,
    delete_cookie,
    get_cookies,
    get_set_cookies,
    parse_cookie,
    set_cookie,
)
from greenhttp.errors import InvalidArgumentError

UTC = timezone.utc


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def set_cookie_line(cookie: Cookie) -> str | None:
    h = Headers()
    set_cookie(h, cookie)
    return h.get("set-cookie")


# -- get_cookies -------------------------------------------------------------


class TestGetCookies:
    def test_absent_header_gives_empty_dict(self) -> None:
        assert get_cookies(Headers()) == {}
        assert get_cookies(Headers({"set-cookie": "a=b"})) == {}

    @pytest.mark.parametrize(
        ("header", "expected"),
        [
            ("foo=bar", {"foo": "bar"}),
            ("full=of  ; tasty=chocolate", {"full": "of  ", "tasty": "chocolate"}),
            ("igot=99; problems=but...", {"igot": "99", "problems": "but..."}),
            (
                "PREF=al=en-GB&f1=123; wide=1; SID=123",
                {"PREF": "al=en-GB&f1=123", "wide": "1", "SID": "123"},
            ),
            ("a=1; a=2", {"a": "2"}),
            ("flag; b=2", {"flag": "", "b": "2"}),
            ("a=1;; ;b=2;", {"a": "1", "b": "2"}),
            ('q="quoted"; p=%20', {"q": '"quoted"', "p": "%20"}),
            ("\tname =value", {"name": "value"}),
        ],
    )
    def test_parses_pairs_verbatim(self, header: str, expected: dict[str, str]) -> None:
        h = Headers()
        h.set("Cookie", header)
        assert get_cookies(h) == expected

    def test_value_keeps_leading_space(self) -> None:
        h = Headers({"cookie": "a= b"})
        assert get_cookies(h) == {"a": " b"}

    def test_several_cookie_fields_are_read_as_one_list(self) -> None:
        h = Headers([("cookie", "a=1"), ("Cookie", "b=2, c")])
        assert get_cookies(h) == {"a": "1", "b": "2, c"}

    def test_accepts_a_plain_mapping(self) -> None:
        assert get_cookies({"Cookie": "k=v"}) == {"k": "v"}

    def test_rejects_other_types(self) -> None:
        with pytest.raises(TypeError, match="get_cookies"):
            get_cookies("a=b")  # type: ignore[arg-type]


# -- set_cookie --------------------------------------------------------------


class TestSetCookieSerialisation:
    @pytest.mark.parametrize(
        ("cookie", "line"),
        [
            (Cookie("Space", "Cat"), "Space=Cat"),
            (Cookie("Space", "Cat", secure=True), "Space=Cat; Secure"),
            (Cookie("Space", "Cat", http_only=True), "Space=Cat; HttpOnly"),
            (Cookie("Space", "Cat", http_only=True, secure=True), "Space=Cat; Secure; HttpOnly"),
            (
                Cookie("Space", "Cat", http_only=True, secure=True, max_age=2),
                "Space=Cat; Secure; HttpOnly; Max-Age=2",
            ),
            (Cookie("Space", "Cat", max_age=0), "Space=Cat; Max-Age=0"),
            (
                Cookie("Space", "Cat", secure=True, max_age=2, domain="deno.land"),
                "Space=Cat; Secure; Max-Age=2; Domain=deno.land",
            ),
            (
                Cookie("Space", "Cat", domain="deno.land", same_site="Strict"),
                "Space=Cat; Domain=deno.land; SameSite=Strict",
            ),
            (Cookie("Space", "Cat", same_site="Lax"), "Space=Cat; SameSite=Lax"),
            (Cookie("Space", "Cat", same_site="None"), "Space=Cat; SameSite=None"),
            (
                Cookie("Space", "Cat", http_only=True, secure=True, max_age=2,
                       domain="deno.land", path="/"),
                "Space=Cat; Secure; HttpOnly; Max-Age=2; Domain=deno.land; Path=/",
            ),
            (
                Cookie("Space", "Cat", secure=True, max_age=2, domain="deno.land", path="/",
                       unparsed=["unparsed=keyvalue", "batman=Bruce"]),
                "Space=Cat; Secure; Max-Age=2; Domain=deno.land; Path=/; "
                "unparsed=keyvalue; batman=Bruce",
            ),
            (
                Cookie("Space", "Cat", secure=True, http_only=True, max_age=2,
                       domain="deno.land", path="/", expires=utc(1983, 1, 7, 15, 32)),
                "Space=Cat; Secure; HttpOnly; Max-Age=2; Domain=deno.land; Path=/; "
                "Expires=Fri, 07 Jan 1983 15:32:00 GMT",
            ),
            (
                Cookie("a", "b", expires=utc(2030, 1, 1), same_site="Lax",
                       unparsed=["Priority=High"]),
                "a=b; Expires=Tue, 01 Jan 2030 00:00:00 GMT; SameSite=Lax; Priority=High",
            ),
            (Cookie("empty", ""), "empty="),
            (Cookie("quoted", '"abc"'), 'quoted="abc"'),
            (Cookie("quoted", '""'), 'quoted=""'),
            (Cookie("secure_false", "v", secure=False, http_only=False), "secure_false=v"),
        ],
    )
    def test_serialisation(self, cookie: Cookie, line: str) -> None:
        assert set_cookie_line(cookie) == line

    def test_appends_one_set_cookie_per_call(self) -> None:
        h = Headers()
        set_cookie(h, Cookie("cookie-1", "value-1", secure=True))
        set_cookie(h, Cookie("cookie-2", "value-2", max_age=3600))
        assert h.get("Set-Cookie") == "cookie-1=value-1; Secure, cookie-2=value-2; Max-Age=3600"
        assert h.get_set_cookie() == ["cookie-1=value-1; Secure", "cookie-2=value-2; Max-Age=3600"]

    def test_empty_name_appends_nothing(self) -> None:
        h = Headers()
        set_cookie(h, Cookie("", ""))
        set_cookie(h, Cookie("", "value-without-name"))
        assert h.get("set-cookie") is None
        assert not h.has("set-cookie")

    def test_empty_domain_and_path_are_left_out(self) -> None:
        assert set_cookie_line(Cookie("a", "b", domain="", path="")) == "a=b"

    def test_expires_seconds_are_a_unix_timestamp(self) -> None:
        # 1983-01-07T15:32:00Z is 410801520 seconds after the epoch (spec 2.4: seconds).
        assert set_cookie_line(Cookie("a", "b", expires=410801520)) == (
            "a=b; Expires=Fri, 07 Jan 1983 15:32:00 GMT"
        )
        assert set_cookie_line(Cookie("a", "b", expires=410801520.9)) == (
            "a=b; Expires=Fri, 07 Jan 1983 15:32:00 GMT"
        )
        assert set_cookie_line(Cookie("a", "b", expires=0)) == (
            "a=b; Expires=Thu, 01 Jan 1970 00:00:00 GMT"
        )

    def test_expires_datetime_converted_to_gmt(self) -> None:
        plus_two = timezone(timedelta(hours=2))
        when = datetime(2024, 2, 29, 1, 30, 5, tzinfo=plus_two)
        assert set_cookie_line(Cookie("a", "b", expires=when)) == (
            "a=b; Expires=Wed, 28 Feb 2024 23:30:05 GMT"
        )

    def test_naive_expires_is_taken_as_utc(self) -> None:
        assert set_cookie_line(Cookie("a", "b", expires=datetime(2024, 2, 29, 12, 0))) == (
            "a=b; Expires=Thu, 29 Feb 2024 12:00:00 GMT"
        )

    def test_same_site_is_normalised(self) -> None:
        assert set_cookie_line(Cookie("a", "b", same_site="lax")) == "a=b; SameSite=Lax"
        assert set_cookie_line(Cookie("a", "b", same_site="STRICT")) == "a=b; SameSite=Strict"
        assert set_cookie_line(Cookie("a", "b", same_site="none")) == "a=b; SameSite=None"

    def test_secure_prefix_forces_secure(self) -> None:
        assert set_cookie_line(Cookie("__Secure-Kitty", "Meow")) == "__Secure-Kitty=Meow; Secure"
        assert set_cookie_line(Cookie("__secure-kitty", "Meow")) == "__secure-kitty=Meow; Secure"

    def test_host_prefix_forces_secure_root_path_and_no_domain(self) -> None:
        cookie = Cookie("__Host-Kitty", "Meow", domain="deno.land", path="/sub")
        assert set_cookie_line(cookie) == "__Host-Kitty=Meow; Secure; Path=/"
        # The caller's object is left as it was.
        assert cookie == Cookie("__Host-Kitty", "Meow", domain="deno.land", path="/sub")

    def test_unparsed_key_is_trimmed(self) -> None:
        assert set_cookie_line(Cookie("a", "b", unparsed=[" Partitioned=", "X=a b"])) == (
            "a=b; Partitioned=; X=a b"
        )


class TestSetCookieValidation:
    @pytest.mark.parametrize(
        "name", ['"id"', "id\t", "i\td", "i d", "i;d", "{id}", "[id]", '"', "id\u0091", "a=b",
                 "a,b", "a/b", "a\x00", "caf\u00e9"],
    )
    def test_invalid_name(self, name: str) -> None:
        h = Headers()
        with pytest.raises(InvalidArgumentError) as info:
            set_cookie(h, Cookie(name, "Cat", http_only=True, secure=True, max_age=3))
        message = str(info.value)
        assert "cookie name" in message
        assert repr(name) in message
        assert isinstance(info.value, ValueError)
        assert info.value.code == "GH_ERR_INVALID_ARG"
        assert not h.has("set-cookie")

    @pytest.mark.parametrize(
        "value", ["1f\tWa", "\t", "1f Wa", "1f;Wa", '"1fWa', "1f\\Wa", '1f"Wa', '"', "1fWa\u0005",
                  "1f\u0091Wa", "United Kingdom", "a,b", '"a b"', 'a"'],
    )
    def test_invalid_value(self, value: str) -> None:
        with pytest.raises(InvalidArgumentError) as info:
            set_cookie(Headers(), Cookie("Space", value, http_only=True, secure=True, max_age=3))
        assert "cookie value" in str(info.value)
        assert repr(value) in str(info.value)

    @pytest.mark.parametrize("path", ["/;domain=sub.domain.com", "/a\x00", "/\x7f", "/caf\u00e9"])
    def test_invalid_path(self, path: str) -> None:
        with pytest.raises(InvalidArgumentError) as info:
            set_cookie(Headers(), Cookie("Space", "Cat", path=path))
        assert "cookie path" in str(info.value)
        assert repr(path) in str(info.value)

    def test_valid_paths(self) -> None:
        assert set_cookie_line(Cookie("a", "b", path="/a b/%20/~")) == "a=b; Path=/a b/%20/~"

    @pytest.mark.parametrize(
        "domain",
        ["-domain.com", "domain.org.", "domain.org-", ".example.com", "a..b", " ", "a_b.com",
         "ex\u00e4mple.com", "a" * 64 + ".com", ".".join(["a" * 63] * 4) + ".b",
         "sub-.example.com"],
    )
    def test_invalid_domain(self, domain: str) -> None:
        with pytest.raises(InvalidArgumentError) as info:
            set_cookie(Headers(), Cookie("Space", "Cat", domain=domain))
        assert "cookie domain" in str(info.value)
        assert repr(domain) in str(info.value)

    @pytest.mark.parametrize(
        "domain", ["deno.land", "a", "xn--exmple-cua.com", "1-2.example.COM", "a" * 63 + ".com",
                   "127.0.0.1"],
    )
    def test_valid_domain(self, domain: str) -> None:
        assert set_cookie_line(Cookie("a", "b", domain=domain)) == f"a=b; Domain={domain}"

    @pytest.mark.parametrize("max_age", [-1, 1.5, True, "10"])
    def test_invalid_max_age(self, max_age: object) -> None:
        with pytest.raises(InvalidArgumentError, match="max_age"):
            set_cookie(Headers(), Cookie("Space", "Cat", max_age=max_age))  # type: ignore[arg-type]

    @pytest.mark.parametrize("same_site", ["Whatever", "", "StrictLax", 1])
    def test_invalid_same_site(self, same_site: object) -> None:
        with pytest.raises(InvalidArgumentError, match="same_site"):
            set_cookie(Headers(), Cookie("a", "b", same_site=same_site))  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        "expires", [float("nan"), float("inf"), True, "Fri, 07 Jan 1983 15:32:00 GMT", 1e20]
    )
    def test_invalid_expires(self, expires: object) -> None:
        with pytest.raises(InvalidArgumentError, match="expires"):
            set_cookie(Headers(), Cookie("a", "b", expires=expires))  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        "unparsed",
        [
            ["X-Custom=val; HttpOnly"],
            ["Purpose=tracking; SameSite=None; Secure"],
            ["HttpOnly; X-Custom=val"],
            ["NoEquals"],
            ["=value"],
            ["bad name=1"],
            ["x=a\x01"],
            "x=1",
            [1],
        ],
    )
    def test_invalid_unparsed(self, unparsed: object) -> None:
        with pytest.raises(InvalidArgumentError, match="unparsed"):
            set_cookie(Headers(), Cookie("Space", "Cat", unparsed=unparsed))  # type: ignore[arg-type]

    @pytest.mark.parametrize(("name", "value"), [(1, "v"), ("n", None), ("n", b"v")])
    def test_name_and_value_must_be_str(self, name: object, value: object) -> None:
        with pytest.raises(InvalidArgumentError, match="must be a str"):
            set_cookie(Headers(), Cookie(name, value))  # type: ignore[arg-type]

    def test_rejects_non_cookie_and_non_headers(self) -> None:
        with pytest.raises(TypeError, match="Cookie"):
            set_cookie(Headers(), {"name": "a", "value": "b"})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="set_cookie"):
            set_cookie(object(), Cookie("a", "b"))  # type: ignore[arg-type]

    def test_any_object_with_append_is_accepted(self) -> None:
        appended: list[tuple[str, str]] = []

        class Sink:
            def append(self, name: str, value: str) -> None:
                appended.append((name, value))

        set_cookie(Sink(), Cookie("a", "b", secure=True))  # type: ignore[arg-type]
        assert appended == [("set-cookie", "a=b; Secure")]


# -- delete_cookie -----------------------------------------------------------


class TestDeleteCookie:
    def test_plain(self) -> None:
        h = Headers()
        delete_cookie(h, "deno")
        assert h.get("Set-Cookie") == "deno=; Expires=Thu, 01 Jan 1970 00:00:00 GMT"

    def test_with_path_and_domain(self) -> None:
        h = Headers()
        delete_cookie(h, "sid", path="/app", domain="example.com")
        assert h.get_set_cookie() == [
            "sid=; Domain=example.com; Path=/app; Expires=Thu, 01 Jan 1970 00:00:00 GMT"
        ]

    def test_after_set_and_empty_attributes(self) -> None:
        h = Headers()
        set_cookie(h, Cookie("Space", "Cat", domain="deno.land", path="/"))
        delete_cookie(h, "Space", domain="", path="")
        assert h.get("Set-Cookie") == (
            "Space=Cat; Domain=deno.land; Path=/, Space=; Expires=Thu, 01 Jan 1970 00:00:00 GMT"
        )

    def test_parses_back_as_expired(self) -> None:
        h = Headers()
        delete_cookie(h, "x", path="/")
        assert get_set_cookies(h) == [Cookie("x", "", expires=utc(1970, 1, 1), path="/")]

    def test_invalid_name_raises(self) -> None:
        with pytest.raises(InvalidArgumentError, match="cookie name"):
            delete_cookie(Headers(), "bad name")

    def test_host_prefix(self) -> None:
        h = Headers()
        delete_cookie(h, "__Host-id", domain="example.com")
        assert h.get_set_cookie() == [
            "__Host-id=; Secure; Path=/; Expires=Thu, 01 Jan 1970 00:00:00 GMT"
        ]


# -- parsing -----------------------------------------------------------------


class TestGetSetCookies:
    def test_none_gives_empty_list(self) -> None:
        assert get_set_cookies(Headers()) == []

    @pytest.mark.parametrize(
        ("line", "cookie"),
        [
            ("Space=Cat", Cookie("Space", "Cat")),
            ("Space=Cat; Secure", Cookie("Space", "Cat", secure=True)),
            ("Space=Cat; HttpOnly", Cookie("Space", "Cat", http_only=True)),
            ("Space=Cat; Secure; HttpOnly; Max-Age=2",
             Cookie("Space", "Cat", secure=True, http_only=True, max_age=2)),
            ("Space=Cat; Max-Age=0", Cookie("Space", "Cat", max_age=0)),
            ("Space=Cat; Max-Age=-1", Cookie("Space", "Cat", max_age=-1)),
            ("Space=Cat; Max-Age=2; Domain=deno.land",
             Cookie("Space", "Cat", max_age=2, domain="deno.land")),
            ("Space=Cat; Domain=deno.land; SameSite=Strict",
             Cookie("Space", "Cat", domain="deno.land", same_site="Strict")),
            ("Space=Cat; SameSite=Lax", Cookie("Space", "Cat", same_site="Lax")),
            ("Space=Cat; Path=/", Cookie("Space", "Cat", path="/")),
            ("Space=Cat; Path=/; unparsed=keyvalue; batman=Bruce",
             Cookie("Space", "Cat", path="/", unparsed=["unparsed=keyvalue", "batman=Bruce"])),
            ("Space=Cat; Path=/; Expires=Fri, 07 Jan 1983 15:32:00 GMT",
             Cookie("Space", "Cat", path="/", expires=utc(1983, 1, 7, 15, 32))),
            ("__Secure-Kitty=Meow; Secure", Cookie("__Secure-Kitty", "Meow", secure=True)),
            ("__Secure-Kitty=Meow", Cookie("__Secure-Kitty", "Meow")),
            ("__Host-Kitty=Meow; Path=/", Cookie("__Host-Kitty", "Meow", path="/")),
            ("__Host-Kitty=Meow; Secure; Domain=deno.land; Path=/",
             Cookie("__Host-Kitty", "Meow", secure=True, domain="deno.land", path="/")),
            ("__Host-Kitty=Meow; Secure; Path=/not-root",
             Cookie("__Host-Kitty", "Meow", secure=True, path="/not-root")),
            ("id=a3fWa; Expires=not-a-date", Cookie("id", "a3fWa")),
        ],
    )
    def test_single(self, line: str, cookie: Cookie) -> None:
        assert get_set_cookies(Headers({"set-cookie": line})) == [cookie]

    @pytest.mark.parametrize("max_age", ["-", "--1", "-1a", "+1", "", "1.5", " ", "1 2",
                                         "\u00b2", "1\u00b9", "0x10"])
    def test_invalid_max_age_is_ignored(self, max_age: str) -> None:
        line = f"Space=Cat; Secure; HttpOnly; Max-Age={max_age}"
        assert get_set_cookies(Headers({"set-cookie": line})) == [
            Cookie("Space", "Cat", secure=True, http_only=True)
        ]

    def test_several_in_order_with_none_for_unparsable(self) -> None:
        h = Headers()
        h.append("set-cookie", "cookie-1=value-1; Secure")
        h.append("set-cookie", "=")
        h.append("set-cookie", "cookie-2=value-2; Max-Age=3600")
        assert get_set_cookies(h) == [
            Cookie("cookie-1", "value-1", secure=True),
            None,
            Cookie("cookie-2", "value-2", max_age=3600),
        ]

    def test_accepts_response_style_mapping(self) -> None:
        headers = {"content-type": "text/html", "set-cookie": ["a=1", "b=2; HttpOnly"]}
        assert get_set_cookies(headers) == [Cookie("a", "1"), Cookie("b", "2", http_only=True)]

    def test_rejects_other_types(self) -> None:
        with pytest.raises(TypeError, match="get_set_cookies"):
            get_set_cookies(["a=1"])  # type: ignore[arg-type]


class TestParseCookieRFC6265bisExamples:
    """The Set-Cookie examples of RFC 6265bis section 3.1."""

    def test_session_id(self) -> None:
        assert parse_cookie("SID=31d4d96e407aad42") == Cookie("SID", "31d4d96e407aad42")

    def test_path_and_domain(self) -> None:
        assert parse_cookie("SID=31d4d96e407aad42; Path=/; Domain=example.com") == Cookie(
            "SID", "31d4d96e407aad42", path="/", domain="example.com"
        )

    def test_secure_httponly(self) -> None:
        assert parse_cookie("SID=31d4d96e407aad42; Path=/; Secure; HttpOnly") == Cookie(
            "SID", "31d4d96e407aad42", path="/", secure=True, http_only=True
        )

    def test_lang(self) -> None:
        assert parse_cookie("lang=en-US; Path=/; Domain=example.com") == Cookie(
            "lang", "en-US", path="/", domain="example.com"
        )

    def test_persistent(self) -> None:
        assert parse_cookie("lang=en-US; Expires=Wed, 09 Jun 2021 10:18:14 GMT") == Cookie(
            "lang", "en-US", expires=utc(2021, 6, 9, 10, 18, 14)
        )

    def test_removal(self) -> None:
        assert parse_cookie("lang=; Expires=Sun, 06 Nov 1994 08:49:37 GMT") == Cookie(
            "lang", "", expires=utc(1994, 11, 6, 8, 49, 37)
        )


class TestParseCookieRules:
    @pytest.mark.parametrize("ctl", ["\x00", "\x01", "\x08", "\n", "\r", "\x1f", "\x7f"])
    def test_control_characters_give_none(self, ctl: str) -> None:
        assert parse_cookie(f"a=b{ctl}c") is None
        assert parse_cookie(f"a=b; Path=/{ctl}") is None

    def test_tab_and_c1_characters_are_not_ctl(self) -> None:
        assert parse_cookie("a=b\tc") == Cookie("a", "b\tc")
        assert parse_cookie("a=b\x85c") == Cookie("a", "b\x85c")

    def test_no_equals_means_empty_name(self) -> None:
        assert parse_cookie("justavalue; Secure") == Cookie("", "justavalue", secure=True)

    @pytest.mark.parametrize("line", ["", "=", " = ", ";", "; Secure", "\t"])
    def test_empty_name_and_value_give_none(self, line: str) -> None:
        assert parse_cookie(line) is None

    def test_name_and_value_trimmed_of_wsp_only(self) -> None:
        assert parse_cookie(" \tname \t= value \t; Path=/") == Cookie("name", "value", path="/")
        # Only SP and HTAB are WSP: a no-break space stays.
        assert parse_cookie("a=\u00a0b\u00a0") == Cookie("a", "\u00a0b\u00a0")

    def test_value_split_at_first_equals_only(self) -> None:
        assert parse_cookie("a=b=c==") == Cookie("a", "b=c==")

    def test_value_is_not_percent_decoded(self) -> None:
        raw = "legit%0d%0aSet-Cookie:%20evil=injected%3B%20Path%3D/"
        assert parse_cookie(f"token={raw}") == Cookie("token", raw)
        assert parse_cookie("data=prefix%00suffix") == Cookie("data", "prefix%00suffix")
        assert parse_cookie('q="quoted value"') == Cookie("q", '"quoted value"')

    def test_name_value_size_limit(self) -> None:
        assert parse_cookie("n=" + "v" * 4095) == Cookie("n", "v" * 4095)
        assert parse_cookie("n=" + "v" * 4096) is None
        assert parse_cookie("v" * 4097) is None

    def test_attribute_value_size_limit(self) -> None:
        ok = "/" + "p" * 1023
        assert parse_cookie(f"a=b; Path={ok}") == Cookie("a", "b", path=ok)
        assert parse_cookie(f"a=b; Path={ok}p; Secure") == Cookie("a", "b", secure=True)
        assert parse_cookie(f"a=b; X={'x' * 1025}") == Cookie("a", "b")

    def test_attribute_names_case_insensitive(self) -> None:
        assert parse_cookie("a=b; SECURE; httponly; max-AGE=5; PATH=/x; domain=EX.com") == Cookie(
            "a", "b", secure=True, http_only=True, max_age=5, path="/x", domain="ex.com"
        )

    def test_non_ascii_lookalike_attribute_names_are_unknown(self) -> None:
        # U+017F LATIN SMALL LETTER LONG S upper-cases to "S" but is not "s".
        assert parse_cookie("a=b; \u017fecure") == Cookie("a", "b", unparsed=["\u017fecure="])

    def test_secure_and_httponly_ignore_their_value(self) -> None:
        assert parse_cookie("a=b; Secure=no; HttpOnly=0") == Cookie(
            "a", "b", secure=True, http_only=True
        )

    def test_max_age_forms(self) -> None:
        assert parse_cookie("a=b; Max-Age=007").max_age == 7  # type: ignore[union-attr]
        assert parse_cookie("a=b; Max-Age=-0").max_age == 0  # type: ignore[union-attr]
        assert parse_cookie("a=b; Max-Age=\u0661") == Cookie("a", "b")  # not ASCII DIGIT
        big = "9" * 30
        assert parse_cookie(f"a=b; Max-Age={big}").max_age == int(big)  # type: ignore[union-attr]

    def test_domain(self) -> None:
        assert parse_cookie("a=b; Domain=.Example.COM").domain == "example.com"  # type: ignore[union-attr]
        assert parse_cookie("a=b; Domain=..x").domain == ".x"  # type: ignore[union-attr]
        assert parse_cookie("a=b; Domain=").domain == ""  # type: ignore[union-attr]

    @pytest.mark.parametrize(("raw", "path"), [("", "/"), ("foo", "/"), ("/a/b", "/a/b"),
                                               ("/", "/"), (" /x ", "/x")])
    def test_path(self, raw: str, path: str) -> None:
        assert parse_cookie(f"a=b; Path={raw}") == Cookie("a", "b", path=path)

    @pytest.mark.parametrize(
        ("raw", "same_site"),
        [("Strict", "Strict"), ("lax", "Lax"), ("NONE", "None"), ("nOnE", "None"),
         ("StrictLax", None), ("NoneOfYourBusiness", None), ("", None), ("Lax ;", "Lax")],
    )
    def test_same_site(self, raw: str, same_site: str | None) -> None:
        cookie = parse_cookie(f"a=b; SameSite={raw}")
        assert cookie is not None
        assert cookie.same_site == same_site
        assert cookie.unparsed is None

    def test_unknown_attributes_go_to_unparsed(self) -> None:
        assert parse_cookie("a=b; Partitioned; Priority=High; x-Y = z ; Comment=a=b") == Cookie(
            "a", "b", unparsed=["Partitioned=", "Priority=High", "x-Y=z", "Comment=a=b"]
        )

    def test_empty_attributes_are_skipped(self) -> None:
        assert parse_cookie("a=b;") == Cookie("a", "b")
        assert parse_cookie("a=b;; ;=x; Secure") == Cookie("a", "b", secure=True)

    def test_later_duplicates_win(self) -> None:
        assert parse_cookie(
            "a=b; Path=/one; Path=/two; Max-Age=1; Max-Age=2; SameSite=Lax; SameSite=Strict"
        ) == Cookie("a", "b", path="/two", max_age=2, same_site="Strict")
        # An invalid later value does not erase an earlier valid one.
        assert parse_cookie("a=b; Max-Age=3; Max-Age=x; Expires=bad") == Cookie(
            "a", "b", max_age=3
        )

    def test_bytes_are_latin1(self) -> None:
        assert parse_cookie(b"a=caf\xe9") == Cookie("a", "caf\u00e9")

    def test_rejects_non_text(self) -> None:
        with pytest.raises(TypeError, match="parse_cookie"):
            parse_cookie(None)  # type: ignore[arg-type]

    def test_core_parser_returns_only_present_fields(self) -> None:
        assert parse_set_cookie("a=b; Secure") == {"name": "a", "value": "b", "secure": True}


class TestCookieDate:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("Sun, 06 Nov 1994 08:49:37 GMT", utc(1994, 11, 6, 8, 49, 37)),  # IMF-fixdate
            ("Sunday, 06-Nov-94 08:49:37 GMT", utc(1994, 11, 6, 8, 49, 37)),  # RFC 850
            ("Sun Nov  6 08:49:37 1994", utc(1994, 11, 6, 8, 49, 37)),  # asctime
            ("Wed, 09 Jun 2021 10:18:14 GMT", utc(2021, 6, 9, 10, 18, 14)),
            ("09 jun 2021 10:18:14", utc(2021, 6, 9, 10, 18, 14)),
            ("Thu, 01-Jan-70 00:00:01 GMT", utc(1970, 1, 1, 0, 0, 1)),
            ("Thu, 01-Jan-69 00:00:01 GMT", utc(2069, 1, 1, 0, 0, 1)),
            ("1 JANUARY 2000 1:2:3", utc(2000, 1, 1, 1, 2, 3)),
            ("Mon, 29 Feb 2024 23:59:59 GMT", utc(2024, 2, 29, 23, 59, 59)),
            ("31 Dec 9999 23:59:59", utc(9999, 12, 31, 23, 59, 59)),
            ("01 Jan 1601 00:00:00", utc(1601, 1, 1)),
            ("08:49:37xyz 6th Nov 1994abc", utc(1994, 11, 6, 8, 49, 37)),
            ("Sun, 06 Nov 1994 08:49:37 +0500", utc(1994, 11, 6, 8, 49, 37)),  # zone ignored
        ],
    )
    def test_valid(self, text: str, expected: datetime) -> None:
        parsed = parse_cookie_date(text)
        assert parsed == expected
        assert parsed is not None and parsed.tzinfo is UTC

    @pytest.mark.parametrize(
        "text",
        [
            "not-a-date",
            "",
            "2021-06-09T10:18:14Z",
            "Wed, 09 Jun 2021",  # no time
            "Wed, 09 2021 10:18:14",  # no month
            "Wed, Jun 2021 10:18:14",  # no day (2021 is not 1*2DIGIT)
            "Wed, 09 Jun 10:18:14",  # no year
            "01 Jan 1600 00:00:00",
            "00 Jan 2000 00:00:00",
            "32 Jan 2000 00:00:00",
            "01 Jan 2000 24:00:00",
            "01 Jan 2000 00:60:00",
            "01 Jan 2000 00:00:60",
            "30 Feb 2024 00:00:00",
            "29 Feb 2023 00:00:00",
            "01 Jan 12345 00:00:00",
            "\u0661\u0662 Jan 2000 00:00:00",  # Arabic-Indic digits are not DIGIT
        ],
    )
    def test_invalid(self, text: str) -> None:
        assert parse_cookie_date(text) is None

    def test_invalid_expires_attribute_is_ignored(self) -> None:
        assert parse_cookie("a=b; Expires=30 Feb 2024 00:00:00") == Cookie("a", "b")

    def test_imf_fixdate_format(self) -> None:
        assert format_imf_fixdate(utc(1, 1, 1)) == "Mon, 01 Jan 0001 00:00:00 GMT"
        assert format_imf_fixdate(utc(2024, 2, 29, 9, 5, 7, 999999)) == (
            "Thu, 29 Feb 2024 09:05:07 GMT"
        )


# -- round trips ---------------------------------------------------------------


class TestRoundTrip:
    def test_full_cookie(self) -> None:
        cookie = Cookie(
            "sid", "abc123", expires=utc(2030, 5, 17, 8, 0, 1), max_age=3600,
            domain="example.com", path="/app", secure=True, http_only=True,
            same_site="Lax", unparsed=["Priority=High", "Partitioned="],
        )
        h = Headers()
        set_cookie(h, cookie)
        assert get_set_cookies(h) == [cookie]

    def test_several(self) -> None:
        cookies = [Cookie("a", "1"), Cookie("b", '"2"', path="/"), Cookie("c", "", max_age=0)]
        h = Headers()
        for cookie in cookies:
            set_cookie(h, cookie)
        assert get_set_cookies(h) == cookies

    def test_seconds_expires_comes_back_as_datetime(self) -> None:
        h = Headers()
        set_cookie(h, Cookie("a", "b", expires=1700000000))
        assert get_set_cookies(h) == [
            Cookie("a", "b", expires=datetime.fromtimestamp(1700000000, tz=UTC))
        ]


_TOKEN = st.text(
    alphabet="!#$%&'*+-.^_`|~" + string.ascii_letters + string.digits, min_size=1, max_size=20
).filter(lambda n: not n.lower().startswith(("__secure-", "__host-")))
_COOKIE_OCTETS = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '",;\\')
_VALUE = st.text(alphabet=_COOKIE_OCTETS, max_size=40)
_LABEL = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?\Z")
_DOMAIN = st.lists(_LABEL, min_size=1, max_size=4).map(".".join)
_PATH = st.text(
    alphabet="".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != ";"), max_size=30
).map(lambda p: "/" + p)
_WHEN = st.datetimes(
    min_value=datetime(1601, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59),
    timezones=st.just(UTC),
).map(lambda d: d.replace(microsecond=0))
_EXTENSION = st.tuples(_TOKEN, st.text(alphabet=_COOKIE_OCTETS, max_size=10)).filter(
    lambda kv: kv[0].lower()
    not in {"expires", "max-age", "domain", "path", "secure", "httponly", "samesite"}
).map(lambda kv: f"{kv[0]}={kv[1]}")


@st.composite
def valid_cookies(draw: st.DrawFn) -> Cookie:
    return Cookie(
        name=draw(_TOKEN),
        value=draw(_VALUE | _VALUE.map(lambda v: f'"{v}"')),
        expires=draw(st.none() | _WHEN),
        max_age=draw(st.none() | st.integers(min_value=0, max_value=10**12)),
        domain=draw(st.none() | _DOMAIN),
        path=draw(st.none() | _PATH),
        secure=draw(st.none() | st.just(True)),
        http_only=draw(st.none() | st.just(True)),
        same_site=draw(st.none() | st.sampled_from(["Strict", "Lax", "None"])),
        unparsed=draw(st.none() | st.lists(_EXTENSION, min_size=1, max_size=3)),
    )


_HEADER_VALUE = st.text(
    alphabet=st.characters(min_codepoint=0, max_codepoint=0xFF, exclude_characters="\r\n\x00")
)


class TestProperties:
    @settings(max_examples=300, deadline=None, database=None)
    @given(valid_cookies())
    def test_set_then_get_round_trips(self, cookie: Cookie) -> None:
        h = Headers()
        set_cookie(h, cookie)
        assert get_set_cookies(h) == [cookie]

    @settings(max_examples=500, deadline=None, database=None)
    @given(st.text())
    def test_parse_cookie_never_raises(self, text: str) -> None:
        result = parse_cookie(text)
        assert result is None or isinstance(result, Cookie)
        if result is not None:
            assert isinstance(result.name, str) and isinstance(result.value, str)
            assert result.same_site in (None, "Strict", "Lax", "None")

    @settings(max_examples=300, deadline=None, database=None)
    @given(st.lists(st.text(alphabet=st.sampled_from("aA=;, \t-/:0123456789SecureMaxgPthD\x01.")),
                    max_size=5))
    def test_parse_cookie_never_raises_on_cookie_like_text(self, pieces: list[str]) -> None:
        text = "; ".join(pieces)
        result = parse_cookie(text)
        assert result is None or isinstance(result, Cookie)

    @settings(max_examples=300, deadline=None, database=None)
    @given(st.lists(_HEADER_VALUE, max_size=5))
    def test_get_set_cookies_never_raises(self, values: list[str]) -> None:
        h = Headers([("set-cookie", v) for v in values])
        result = get_set_cookies(h)
        assert len(result) == len(values)
        assert all(item is None or isinstance(item, Cookie) for item in result)

    @settings(max_examples=300, deadline=None, database=None)
    @given(st.text())
    def test_parse_cookie_date_never_raises(self, text: str) -> None:
        result = parse_cookie_date(text)
        assert result is None or (result.tzinfo is UTC and result.year >= 1601)
