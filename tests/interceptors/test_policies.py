"""The sans-IO policies of the retry and redirect interceptors, tested without sockets."""

from __future__ import annotations

import errno
import socket
from datetime import datetime, timezone

import pytest

from greenhttp._core import redirect as rd
from greenhttp._core import retry as rt
from greenhttp.errors import (
    HeadersTimeoutError,
    InvalidArgumentError,
    RequestRetryError,
    ResponseError,
    SocketError,
)

NOW = datetime(2026, 5, 9, 12, 0, 0, tzinfo=timezone.utc).timestamp()


# -- retry ------------------------------------------------------------------------------------------
def test_retry_defaults_in_seconds():
    o = rt.retry_options({})
    assert (o.max_retries, o.min_timeout, o.max_timeout, o.timeout_factor) == (5, 0.5, 30.0, 2.0)
    assert o.retry_after is True and o.throw_on_error is True and o.retry is None
    assert o.methods == {"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE", "QUERY"}
    assert o.status_codes == {500, 502, 503, 504, 429}
    assert o.error_codes == {
        "ECONNRESET", "ECONNREFUSED", "ENOTFOUND", "ENETDOWN", "ENETUNREACH",
        "EHOSTDOWN", "EHOSTUNREACH", "EPIPE", "GH_ERR_SOCKET",
    }
    assert o.merged({"max_retries": 1, "methods": ["post"]}).methods == {"POST"}
    assert o.merged(None) is o


def test_error_codes_follow_the_cause_chain():
    reset = ConnectionResetError(errno.ECONNRESET, "reset")
    wrapped = SocketError("other side closed", cause=reset)
    assert rt.error_codes(wrapped) == ["GH_ERR_SOCKET", "ECONNRESET"]
    try:
        try:
            raise BrokenPipeError(errno.EPIPE, "pipe")
        except OSError as inner:
            raise RuntimeError("while writing") from inner
    except RuntimeError as outer:
        assert rt.error_codes(outer) == ["EPIPE"]
    assert rt.error_codes(socket.gaierror(socket.EAI_NONAME, "unknown")) == ["ENOTFOUND"]
    assert rt.error_codes(ValueError("x")) == []


def test_should_retry():
    o = rt.retry_options({"max_retries": 2})
    reset = SocketError("x", cause=ConnectionResetError(errno.ECONNRESET, "reset"))
    assert rt.should_retry(reset, 1, "GET", o)
    assert rt.should_retry(reset, 2, "GET", o)
    assert not rt.should_retry(reset, 3, "GET", o)  # past max_retries
    assert not rt.should_retry(reset, 1, "POST", o)
    assert not rt.should_retry(HeadersTimeoutError(), 1, "GET", o)
    assert not rt.should_retry(ValueError("a bug"), 1, "GET", o)
    assert rt.should_retry(RequestRetryError("x", 503), 1, "GET", o)
    assert not rt.should_retry(RequestRetryError("x", 404), 1, "GET", o)
    assert rt.should_retry(ResponseError("x", 429), 1, "GET", o)  # the REFERENCE decision
    assert not rt.should_retry(ResponseError("x", 400), 1, "GET", o)
    only_reset = rt.retry_options({"error_codes": ["ECONNRESET"]})
    assert rt.should_retry(reset, 1, "GET", only_reset)
    assert not rt.should_retry(SocketError("closed"), 1, "GET", only_reset)


def test_retry_delay():
    o = rt.retry_options({"min_timeout": 0.5, "max_timeout": 3, "timeout_factor": 2})
    err = RequestRetryError("x", 503, {})
    assert [rt.retry_delay(err, n, o, NOW) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert rt.retry_delay(RequestRetryError("x", 503, {"retry-after": "2"}), 1, o, NOW) == 2.0
    assert rt.retry_delay(RequestRetryError("x", 503, {"retry-after": "120"}), 1, o, NOW) == 3.0
    assert rt.retry_delay(RequestRetryError("x", 503, {"retry-after": "0"}), 4, o, NOW) == 0.0
    assert rt.retry_delay(RequestRetryError("x", 503, {"retry-after": "soon"}), 1, o, NOW) == 0.5
    off = rt.retry_options({"retry_after": False})
    assert rt.retry_delay(RequestRetryError("x", 503, {"retry-after": "2"}), 1, off, NOW) == 0.5
    assert rt.retry_delay(err, 10_000, o, NOW) == 3.0  # no overflow


@pytest.mark.parametrize(
    "value",
    ["Sat, 09 May 2026 12:00:30 GMT", "Saturday, 09-May-26 12:00:30 GMT", "Sat May  9 12:00:30 2026"],
)
def test_retry_after_http_dates_in_the_three_formats(value):
    assert rt.parse_retry_after(value, NOW) == 30.0


def test_retry_after_edge_cases():
    assert rt.parse_retry_after("17", NOW) == 17.0
    assert rt.parse_retry_after(" 3 ", NOW) == 3.0
    assert rt.parse_retry_after("Sat, 09 May 2026 11:00:00 GMT", NOW) == 0.0  # in the past: now
    assert rt.parse_retry_after(["5", "9"], NOW) == 5.0
    for bad in ("-1", "1.5", "", "tomorrow", "Sat, 32 May 2026 12:00:30 GMT", None, 5):
        assert rt.parse_retry_after(bad, NOW) is None
    # RFC 9110 §5.6.7: a two-digit year more than 50 years ahead is in the past century.
    assert rt.parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", NOW) == 784111777.0


def test_content_range():
    assert rt.parse_content_range("bytes 5-9/10") == rt.ContentRange(5, 9, 10)
    assert rt.parse_content_range("bytes 0-0/*") == rt.ContentRange(0, 0, None)
    for bad in ("bytes 9-5/10", "bytes 5-10/10", "items 0-1/2", "bytes */10", None):
        assert rt.parse_content_range(bad) is None


# -- redirect -----------------------------------------------------------------------------------------
def _hop(status, location, opts=None, history=None, replayable=True, **options):
    opts = {"origin": "http://a.test", "path": "/p/q?x=1", "method": "GET", **(opts or {})}
    history = history if history is not None else ["http://a.test/p/q?x=1"]
    options.setdefault("max_redirections", 5)
    return rd.next_hop(status, {"location": location}, opts, rd.redirect_options(None, options), history, replayable)


def test_location_resolution():
    assert _hop(302, "/abs").url == "http://a.test/abs"
    assert _hop(302, "rel").url == "http://a.test/p/rel"
    assert _hop(302, "../up?y=2#frag").url == "http://a.test/up?y=2"
    assert _hop(302, "?only=query").url == "http://a.test/p/q?only=query"
    assert _hop(302, "//b.test:8080/x").url == "http://b.test:8080/x"
    assert _hop(302, "HTTPS://B.test:443/x").url == "https://b.test/x"
    # Heads are decoded as latin-1: the UTF-8 bytes of "é" arrive as two characters.
    assert _hop(302, "/a path/\xc3\xa9").url == "http://a.test/a%20path/%C3%A9"
    assert _hop(302, "/a%20b").url == "http://a.test/a%20b"  # already encoded stays
    for unfollowable in ("ftp://a.test/x", "javascript:alert(1)", "http://user:pw@b.test/", ""):
        assert _hop(302, unfollowable) is None


def test_which_statuses_are_followed():
    for status in (300, 301, 302, 303, 307, 308):
        assert isinstance(_hop(status, "/x"), rd.Hop)
    for status in (200, 304, 305, 404):
        assert _hop(status, "/x") is None
    opts = {"origin": "http://a.test", "path": "/", "method": "GET"}
    options = rd.redirect_options(None, {"max_redirections": 1})
    assert rd.next_hop(302, {}, opts, options, ["http://a.test/"], True) is None  # no Location
    assert rd.next_hop(302, {"location": ["/a", "/b"]}, opts, options, ["http://a.test/"], True) is None


def test_method_and_body_rewriting():
    post = {"method": "POST", "body": b"data", "headers": {"content-type": "text/plain", "content-length": "4", "x": "1"}}
    for status in (301, 302):
        hop = _hop(status, "/x", post)
        assert hop.opts["method"] == "GET" and "body" not in hop.opts
        assert hop.opts["headers"] == [("x", "1")]
    hop = _hop(303, "/x", {**post, "method": "PUT"})
    assert hop.opts["method"] == "GET" and "body" not in hop.opts and hop.opts["headers"] == [("x", "1")]
    hop = _hop(303, "/x", {"method": "HEAD", "headers": {"content-type": "a"}})
    assert hop.opts["method"] == "HEAD" and hop.opts["headers"] == []
    for status in (307, 308):
        hop = _hop(status, "/x", post)
        assert hop.opts["method"] == "POST" and hop.opts["body"] == b"data"
        assert ("content-type", "text/plain") in hop.opts["headers"]
    hop = _hop(301, "/x", {**post, "method": "PUT"})
    assert hop.opts["method"] == "PUT" and hop.opts["body"] == b"data"
    hop = _hop(302, "/x", {"method": "QUERY", "body": b"q"})
    assert hop.opts["method"] == "QUERY" and hop.opts["body"] == b"q"
    # A streamed body that was sent can't be sent again: the redirect is delivered.
    assert _hop(307, "/x", {"method": "PUT", "body": object()}, replayable=False) is None
    assert isinstance(_hop(303, "/x", {"method": "PUT", "body": object()}, replayable=False), rd.Hop)


def test_headers_on_same_and_cross_origin_hops():
    headers = {"Host": "a.test", "Authorization": "t", "Cookie": "c", "Proxy-Authorization": "p",
               "X-Keep": "k", "X-Strip": "s", "X-Cross": "c"}
    same = _hop(302, "/x", {"headers": headers}, strip_headers_on_redirect=["x-strip"],
                strip_headers_on_cross_origin_redirect=["X-Cross"])
    assert [k for k, _ in same.opts["headers"]] == ["Authorization", "Cookie", "Proxy-Authorization", "X-Keep", "X-Cross"]
    cross = _hop(302, "http://b.test/x", {"headers": headers}, strip_headers_on_redirect=["x-strip"],
                 strip_headers_on_cross_origin_redirect=["X-Cross"])
    assert cross.opts["headers"] == [("X-Keep", "k")]
    assert cross.opts["origin"] == "http://b.test"
    # Another port or scheme is another origin.
    assert _hop(302, "http://a.test:8080/x", {"headers": headers}).opts["headers"][0][0] == "X-Keep"
    assert _hop(302, "https://a.test/x", {"headers": headers}).opts["headers"][0][0] == "X-Keep"
    assert _hop(302, "http://A.TEST:80/x", {"headers": headers}).opts["headers"][0][0] == "Authorization"


def test_query_is_cleared_and_limits_and_loops():
    hop = _hop(302, "/x?z=1", {"path": "/p", "query": {"a": 1}})
    assert hop.opts["path"] == "/x?z=1" and "query" not in hop.opts
    history = ["http://a.test/1", "http://a.test/2", "http://a.test/p/q?x=1"]
    assert _hop(302, "/x", history=history, max_redirections=2) is None
    err = _hop(302, "/x", history=history, max_redirections=2, throw_on_max_redirect=True)
    assert isinstance(err, rd.MaxRedirectionsError) and err.code == "GH_ERR_MAX_REDIRECTIONS"
    loop = _hop(302, "/1", history=history)
    assert isinstance(loop, InvalidArgumentError) and "Redirect loop" in str(loop)


def test_redirect_option_validation():
    with pytest.raises(InvalidArgumentError, match="max_redirections must be a non-negative integer, got -1"):
        rd.redirect_options(None, {"max_redirections": -1})
    with pytest.raises(InvalidArgumentError, match="throw_on_max_redirect"):
        rd.redirect_options(None, {"throw_on_max_redirect": "yes"})
    with pytest.raises(InvalidArgumentError, match="strip_headers_on_redirect"):
        rd.redirect_options(None, {"strip_headers_on_redirect": "authorization"})
    with pytest.raises(InvalidArgumentError, match="unknown redirect option"):
        rd.redirect_options(None, {"follow": True})
    base = rd.redirect_options(None, {"max_redirections": 3, "strip_headers_on_redirect": ["A"]})
    assert base.strip_headers_on_redirect == {"a"}
    assert rd.redirect_options(base, {"max_redirections": None}).max_redirections == 3
    assert rd.redirect_options(base, {"max_redirections": 0}).max_redirections == 0
