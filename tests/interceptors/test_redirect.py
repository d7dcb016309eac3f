"""The redirect interceptor against loopback servers, one origin and two."""

from __future__ import annotations

import pytest

from greenhttp import errors, interceptors
from greenhttp._core.redirect import MaxRedirectionsError


def _to(location, status="302 Found", body=b"see elsewhere"):
    return lambda conn, req: conn.respond(body, status=status, headers=[("Location", location)])


def _ok(body=b"final"):
    return lambda conn, req: conn.respond(body)


def test_a_chain_on_one_origin_keeps_the_connection(routes, make_client):
    server = routes({"/a": _to("/b", "301 Moved Permanently"), "/b": _to("c"), "/c": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=5))
    r = composed.request(path="/a")
    assert (r.status_code, r.body.text()) == (200, "final")
    assert r.context["history"] == [f"{server.origin}/a", f"{server.origin}/b", f"{server.origin}/c"]
    assert [(q.method, q.target) for q in server.requests] == [("GET", "/a"), ("GET", "/b"), ("GET", "/c")]
    assert server.accepted == 1  # redirect bodies were read and dropped, not left on the socket


def test_a_chain_across_two_origins_drops_credentials(routes, make_agent):
    b_table = {}
    b = routes(b_table)
    a = routes({"/start": _to(f"{b.origin}/middle"), "/end": _ok(b"back home")})
    b_table["/middle"] = _to(f"{a.origin}/end", "307 Temporary Redirect")
    composed = make_agent().compose(interceptors.redirect(max_redirections=3))
    headers = {
        "Authorization": "Basic czpz",
        "Cookie": "sid=1",
        "Proxy-Authorization": "Basic cDpw",
        "X-Request-Id": "42",
    }
    r = composed.request(origin=a.origin, path="/start", headers=headers)
    assert r.body.text() == "back home"
    assert r.context["history"] == [f"{a.origin}/start", f"{b.origin}/middle", f"{a.origin}/end"]
    start, end = a.requests
    (middle,) = b.requests
    assert start.header("authorization") == "Basic czpz" and start.header("cookie") == "sid=1"
    for hop in (middle, end):  # once dropped on a cross-origin hop, credentials stay dropped
        assert hop.header("authorization") is None
        assert hop.header("cookie") is None
        assert hop.header("proxy-authorization") is None
        assert hop.header("x-request-id") == "42"
    assert middle.header("host") == b.origin.split("//")[1]


def test_strip_options_and_their_per_request_overrides(routes, make_agent):
    b = routes({"/x": _ok()})
    a = routes({"/same": _to("/other"), "/other": _to(f"{b.origin}/x")})
    composed = make_agent().compose(interceptors.redirect(
        max_redirections=3,
        strip_headers_on_redirect=["X-Every"],
        strip_headers_on_cross_origin_redirect=["X-Cross"],
    ))
    composed.request(origin=a.origin, path="/same", headers={"x-every": "1", "x-cross": "1", "x-kept": "1"}).body.dump()
    first, same_origin_hop = a.requests
    (cross,) = b.requests
    assert first.header("x-every") == "1"
    assert same_origin_hop.header("x-every") is None and same_origin_hop.header("x-cross") == "1"
    assert cross.header("x-cross") is None and cross.header("x-kept") == "1"
    composed.request(
        origin=a.origin, path="/same", headers={"x-every": "1", "x-other": "1"},
        strip_headers_on_redirect=["x-other"],
    ).body.dump()
    assert a.requests[3].header("x-every") == "1" and a.requests[3].header("x-other") is None


@pytest.mark.parametrize(
    ("status", "method", "new_method", "body_kept"),
    [
        ("301 Moved Permanently", "POST", "GET", False),
        ("302 Found", "POST", "GET", False),
        ("303 See Other", "PUT", "GET", False),
        ("307 Temporary Redirect", "POST", "POST", True),
        ("308 Permanent Redirect", "PUT", "PUT", True),
        ("302 Found", "DELETE", "DELETE", True),
    ],
)
def test_method_and_body_rewriting(routes, make_client, status, method, new_method, body_kept):
    server = routes({"/form": _to("/result", status), "/result": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=1))
    r = composed.request(path="/form", method=method, body=b"a=1", headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.body.text() == "final"
    first, second = server.requests
    assert (first.method, first.body) == (method, b"a=1")
    assert second.method == new_method
    if body_kept:
        assert second.body == b"a=1"
        assert second.header("content-type") == "application/x-www-form-urlencoded"
    else:
        assert second.body == b""
        assert second.header("content-type") is None and second.header("content-length") in (None, "0")


def test_a_sent_streamed_body_is_not_replayed(routes, make_client):
    server = routes({"/upload": _to("/elsewhere", "307 Temporary Redirect")})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    r = composed.request(path="/upload", method="PUT", body=iter([b"chunk"]))
    assert r.status_code == 307  # can't send the body twice: the redirect is the answer
    assert r.headers["location"] == "/elsewhere"
    assert r.body.text() == "see elsewhere"
    assert [q.target for q in server.requests] == ["/upload"]


def test_the_limit_returns_the_redirect(routes, make_client):
    server = routes({"/1": _to("/2"), "/2": _to("/3"), "/3": _to("/4"), "/4": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    r = composed.request(path="/1")
    assert (r.status_code, r.headers["location"], r.body.text()) == (302, "/4", "see elsewhere")
    assert [q.target for q in server.requests] == ["/1", "/2", "/3"]


def test_throw_on_max_redirect_raises_only_for_a_redirect_past_the_limit(routes, make_client):
    server = routes({"/1": _to("/2"), "/2": _to("/3"), "/3": _ok()})
    client = make_client(server.origin)
    strict = client.compose(interceptors.redirect(max_redirections=2, throw_on_max_redirect=True))
    assert strict.request(path="/1").body.text() == "final"  # exactly two hops: fine
    with pytest.raises(MaxRedirectionsError, match="max redirects"):
        client.compose(interceptors.redirect(max_redirections=1, throw_on_max_redirect=True)).request(path="/1")
    assert server.accepted == 1  # the refused redirect's body was read: the connection lives on


def test_a_loop_is_detected(routes, make_client):
    server = routes({"/ping": _to("/pong"), "/pong": _to("/ping")})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=10))
    with pytest.raises(errors.InvalidArgumentError, match="Redirect loop detected"):
        composed.request(path="/ping")
    assert [q.target for q in server.requests] == ["/ping", "/pong"]


def test_redirects_are_followed_only_when_asked(routes, make_client):
    server = routes({"/a": _to("/b"), "/b": _ok()})
    client = make_client(server.origin)
    inherit = client.compose(interceptors.redirect())  # spec 2.8: inherits the request's option
    assert inherit.request(path="/a").status_code == 302
    assert inherit.request(path="/a", max_redirections=1).body.text() == "final"
    follow = client.compose(interceptors.redirect(max_redirections=3))
    assert follow.request(path="/a", max_redirections=0).status_code == 302
    assert follow.request(path="/a", max_redirections=None).body.text() == "final"
    with pytest.raises(errors.InvalidArgumentError, match="max_redirections"):
        follow.request(path="/a", max_redirections=-1)


def test_responses_that_are_not_followed(routes, make_client):
    server = routes({
        "/no-location": lambda conn, req: conn.respond(b"", status="302 Found"),
        "/not-modified": lambda conn, req: conn.send(b"HTTP/1.1 304 Not Modified\r\nLocation: /x\r\n\r\n"),
        "/ftp": _to("ftp://127.0.0.1/file"),
    })
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=3))
    assert composed.request(path="/no-location").status_code == 302
    assert composed.request(path="/not-modified").status_code == 304
    assert composed.request(path="/ftp").status_code == 302


def test_options_are_validated_eagerly():
    with pytest.raises(errors.InvalidArgumentError, match="max_redirections"):
        interceptors.redirect(max_redirections=1.5)
    with pytest.raises(errors.InvalidArgumentError, match="throw_on_max_redirect"):
        interceptors.redirect(throw_on_max_redirect=1)
    with pytest.raises(errors.InvalidArgumentError, match="strip_headers_on_cross_origin_redirect"):
        interceptors.redirect(strip_headers_on_cross_origin_redirect=[1])
