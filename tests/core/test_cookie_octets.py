"""Audit: the RFC 6265bis size limits count octets (draft-ietf-httpbis-rfc6265bis §5.6).

A name and value over 4096 octets together make the cookie ignored; an
attribute value over 1024 octets makes that attribute ignored. Header text
that greenhttp decoded from the wire is Latin-1, one character per octet, so
a UTF-8 cookie from a server is counted by its raw bytes; a ``str`` holding
characters above U+00FF is Unicode text, counted by its UTF-8 encoding.
"""

from __future__ import annotations

import gevent
import pytest

from greenhttp._core.cookie_parse import parse_set_cookie
from greenhttp.cookies import get_set_cookies, parse_cookie

EURO = "\u20ac"  # three octets in UTF-8
EURO_WIRE = EURO.encode("utf-8")


# -- name and value: 4096 octets ------------------------------------------------------------------


def test_unicode_text_counts_its_utf8_octets_at_the_name_value_limit():
    # "a" + 4092 x + € = 1 + 4092 + 3 = 4096 octets (4094 characters): kept.
    assert parse_cookie("a=" + "x" * 4092 + EURO).value == "x" * 4092 + EURO
    # One more x: 4097 octets but only 4095 characters: ignored.
    assert parse_cookie("a=" + "x" * 4093 + EURO) is None


def test_a_multibyte_character_straddling_the_name_value_limit():
    # 4095 octets of ASCII, then a 3-octet character: 4096 characters, 4098 octets.
    assert parse_cookie("a=" + "x" * 4094 + EURO) is None
    assert parse_set_cookie(EURO + "=" + "x" * 4094) is None  # in the name as well
    assert parse_set_cookie(EURO + "=" + "x" * 4093) is not None  # exactly 4096 octets


def test_an_astral_character_counts_four_octets():
    emoji = "\U0001f36a"
    assert parse_cookie("a=" + "x" * 4091 + emoji) is not None  # 1 + 4091 + 4
    assert parse_cookie("a=" + "x" * 4092 + emoji) is None


def test_a_lone_surrogate_is_counted_and_never_raises():
    assert parse_cookie("a=" + "x" * 4092 + "\ud800") is not None  # 3 octets, as UTF-8 would write it
    assert parse_cookie("a=" + "x" * 4093 + "\ud800") is None


def test_wire_bytes_are_counted_as_they_came():
    # UTF-8 from a server arrives as bytes (Latin-1 decoded): its octets are its characters.
    name_value = b"a=" + b"x" * 4092 + EURO_WIRE
    assert parse_cookie(name_value) is not None
    assert parse_cookie(b"a=" + b"x" * 4093 + EURO_WIRE) is None
    # Latin-1 text (every character below U+0100) is one octet a character, not re-encoded as UTF-8.
    assert parse_cookie("a=" + "\xe9" * 4095) is not None
    assert parse_cookie("a=" + "\xe9" * 4096) is None


def test_whitespace_trimmed_before_counting():
    assert parse_cookie(" a = " + "x" * 4092 + EURO + " \t") is not None


# -- attribute values: 1024 octets ----------------------------------------------------------------


def test_unicode_text_counts_its_utf8_octets_at_the_attribute_limit():
    kept = "/" + "x" * 1020 + EURO  # 1024 octets, 1022 characters
    assert parse_cookie("a=b; Path=" + kept).path == kept
    over = "/" + "x" * 1021 + EURO  # 1025 octets, 1023 characters
    cookie = parse_cookie("a=b; Path=/p; Path=" + over)
    assert cookie is not None and cookie.path == "/p"  # ignored: the earlier one stands


def test_a_multibyte_character_straddling_the_attribute_limit():
    # 1023 ASCII octets then a 3-octet character: 1024 characters, 1026 octets.
    cookie = parse_cookie("a=b; Domain=" + "d" * 1023 + EURO + "; Secure")
    assert cookie is not None and cookie.domain is None and cookie.secure is True
    cookie = parse_cookie("a=b; X-Ext=" + "v" * 1023 + EURO)
    assert cookie is not None and cookie.unparsed is None  # an unknown attribute is ignored too
    cookie = parse_cookie("a=b; X-Ext=" + "v" * 1021 + EURO)
    assert cookie.unparsed == ["X-Ext=" + "v" * 1021 + EURO]


def test_attribute_wire_bytes_are_counted_as_they_came():
    assert parse_cookie(b"a=b; Path=/" + b"x" * 1020 + EURO_WIRE).path is not None
    assert parse_cookie(b"a=b; Path=/" + b"x" * 1021 + EURO_WIRE).path is None


# -- from a real response ---------------------------------------------------------------------------


@pytest.mark.parametrize(("filler", "kept"), [(4092, True), (4093, False)])
def test_a_utf8_set_cookie_from_a_server_is_limited_by_its_octets(make_server, make_client, filler, kept):
    line = b"Set-Cookie: a=" + b"x" * filler + EURO_WIRE + b"; Path=/\r\n"

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\n" + line + b"Content-Length: 0\r\n\r\n")

    server = make_server(handler)
    client = make_client(server.origin)
    with gevent.Timeout(5):
        response = client.request(path="/")
        response.body.bytes()
    cookies = get_set_cookies(response.headers)
    assert len(cookies) == 1
    if kept:
        assert cookies[0].value.encode("latin-1") == b"x" * filler + EURO_WIRE
    else:
        assert cookies[0] is None
