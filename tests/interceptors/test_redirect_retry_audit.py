"""An adversarial audit of the redirect and retry interceptors against RFC 9110,
REFERENCE.md §7.2/§7.3 and docs/interceptors.md."""

from __future__ import annotations

import time

import gevent
import pytest

from greenhttp import errors, interceptors
from greenhttp._core.redirect import Hop, RedirectOptions, next_hop


def _to(location, status="302 Found", body=b"see elsewhere"):
    return lambda conn, req: conn.respond(body, status=status, headers=[("Location", location)])


def _ok(body=b"final"):
    return lambda conn, req: conn.respond(body)


def _fast(**kw):
    kw.setdefault("min_timeout", 0.01)
    return interceptors.retry(**kw)


# -- redirect ----------------------------------------------------------------------------------------


def test_307_keeps_a_custom_method_exactly_as_sent(routes, make_client):
    # RFC 9110 §9.1: the method token is case-sensitive; §15.4.8: a 307 MUST NOT change it.
    server = routes({"/a": _to("/b", "307 Temporary Redirect"), "/b": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    r = composed.request(path="/a", method="purge")
    assert r.status_code == 200
    assert [q.method for q in server.requests] == ["purge", "purge"]


def test_303_turns_put_into_get_and_drops_only_content_headers(routes, make_client):
    server = routes({"/a": _to("/b", "303 See Other"), "/b": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    r = composed.request(
        path="/a", method="PUT", body=b"payload",
        headers={"content-type": "text/plain", "content-language": "en", "x-keep": "1", "cookie": "a=1"},
    )
    assert r.body.text() == "final"
    first, second = server.requests
    assert (first.method, first.body) == ("PUT", b"payload")
    assert (second.method, second.body) == ("GET", b"")
    assert second.header("content-type") is None and second.header("content-language") is None
    assert second.header("content-length") is None and second.header("transfer-encoding") is None
    assert second.header("x-keep") == "1" and second.header("cookie") == "a=1"  # same origin keeps cookies


@pytest.mark.parametrize("status", ["301 Moved Permanently", "302 Found"])
def test_301_302_keep_put_and_its_body(routes, make_client, status):
    server = routes({"/a": _to("/b", status), "/b": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    composed.request(path="/a", method="PUT", body=b"xyz", headers={"content-type": "a/b"}).body.dump()
    second = server.requests[1]
    assert (second.method, second.body, second.header("content-type")) == ("PUT", b"xyz", "a/b")


def test_a_redirect_without_location_is_delivered_with_its_body(routes, make_client):
    server = routes({"/a": lambda conn, req: conn.respond(b"no where", status="302 Found")})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=3))
    r = composed.request(path="/a")
    assert (r.status_code, r.body.text()) == (302, "no where")
    assert r.context["history"] == [f"{server.origin}/a"]
    assert len(server.requests) == 1


def test_the_redirect_past_the_limit_is_delivered_with_its_body_and_the_connection_kept(routes, make_client):
    server = routes({"/a": _to("/b", body=b"to b"), "/b": _to("/c", body=b"to c"), "/c": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=1))
    r = composed.request(path="/a")
    assert (r.status_code, r.headers["location"], r.body.text()) == (302, "/c", "to c")
    r2 = composed.request(path="/c")
    assert r2.body.text() == "final"
    assert server.accepted == 1


def test_a_loop_a_b_a_fails_and_keeps_the_connection(routes, make_client):
    server = routes({"/a": _to("/b"), "/b": _to("/a"), "/ok": _ok()})
    client = make_client(server.origin)
    composed = client.compose(interceptors.redirect(max_redirections=10))
    with pytest.raises(errors.InvalidArgumentError, match="Redirect loop"):
        composed.request(path="/a")
    assert len(server.requests) == 2
    assert client.request(path="/ok").body.text() == "final"
    assert server.accepted == 1


def test_throw_on_max_redirect_error_is_max_redirections_error(routes, make_client):
    server = routes({"/a": _to("/b"), "/b": _to("/c"), "/c": _ok()})
    composed = make_client(server.origin).compose(
        interceptors.redirect(max_redirections=1, throw_on_max_redirect=True))
    with pytest.raises(errors.MaxRedirectionsError) as info:
        composed.request(path="/a")
    assert str(info.value) == "max redirects" or "max redirects" in str(info.value)
    assert [q.target for q in server.requests] == ["/a", "/b"]


def test_same_origin_spelt_differently_keeps_credentials(routes, make_client):
    table = {"/b": _ok()}
    server = routes(table)
    host, port = server.origin.split("//")[1].rsplit(":", 1)
    table["/a"] = _to(f"HTTP://{host}:{port}/b")  # the scheme is case-insensitive (RFC 3986 §3.1)
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    composed.request(path="/a", headers={"authorization": "Bearer t", "cookie": "c=1"}).body.dump()
    first, second = server.requests
    assert second.target == "/b"
    assert second.header("authorization") == "Bearer t" and second.header("cookie") == "c=1"


@pytest.mark.parametrize(
    ("origin", "location", "cross"),
    [
        ("https://example.com", "http://example.com/x", True),  # a downgrade is another origin
        ("http://example.com", "https://example.com/x", True),
        ("https://example.com", "https://example.com:443/x", False),
        ("http://example.com:80", "//example.com/x", False),
        ("http://example.com", "http://example.com:8080/x", True),
        ("http://example.com", "http://EXAMPLE.com/x", False),
    ],
)
def test_cross_origin_is_decided_by_scheme_host_and_port(origin, location, cross):
    opts = {"origin": origin, "path": "/", "method": "GET",
            "headers": {"authorization": "a", "cookie": "c", "proxy-authorization": "p", "host": "h", "x": "1"}}
    hop = next_hop(302, {"location": location}, opts, RedirectOptions(max_redirections=5), [origin + "/"], True)
    assert isinstance(hop, Hop)
    names = {k.lower() for k, _ in hop.opts["headers"]}
    assert "host" not in names and "x" in names
    assert ("authorization" in names) is not cross
    assert ("cookie" in names) is not cross
    assert ("proxy-authorization" in names) is not cross


def test_location_fragment_is_not_sent_and_the_request_fragment_is_not_either(routes, make_client):
    server = routes({"/a": _to("/b#sec"), "/b": _to("/c"), "/c": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=3))
    r = composed.request(path="/a")
    assert r.body.text() == "final"
    assert [q.target for q in server.requests] == ["/a", "/b", "/c"]


def test_a_streamed_body_on_307_before_it_was_read_is_sent_once_per_hop(routes, make_client):
    # The server answers 307 without reading the body: the body was already sent by then.
    def redirect_now(conn, req):
        conn.respond(b"", status="307 Temporary Redirect", headers=[("Location", "/b")])

    server = routes({"/a": redirect_now, "/b": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    r = composed.request(path="/a", method="POST", body=iter([b"one", b"two"]))
    # A used streamed body can't be sent again: the 307 itself is delivered.
    assert r.status_code == 307
    assert len(server.requests) == 1 and server.requests[0].body == b"onetwo"


# -- retry ------------------------------------------------------------------------------------------


def test_lowercase_head_with_a_content_length_is_not_a_short_body(routes, make_client):
    # RFC 9110 §9.3.2: a HEAD response has no body, whatever its Content-Length says.
    def head(conn, req):
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")

    server = routes({"/": head})
    composed = make_client(server.origin).compose(_fast())
    r = composed.request(path="/", method="head")
    assert r.status_code == 200
    assert r.body.bytes() == b""


def test_post_with_a_retryable_status_fails_at_once(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"busy", status="503 Service Unavailable")})
    composed = make_client(server.origin).compose(_fast())
    with pytest.raises(errors.RequestRetryError) as info:
        composed.request(path="/", method="POST", body=b"x")
    assert info.value.status_code == 503 and info.value.data == {"count": 1}
    assert len(server.requests) == 1


def test_a_status_outside_the_list_is_returned_not_retried(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"nope", status="501 Not Implemented")})
    r = make_client(server.origin).compose(_fast()).request(path="/")
    assert (r.status_code, r.body.text()) == (501, "nope")
    assert len(server.requests) == 1


def test_an_unusable_retry_after_falls_back_to_backoff(routes, make_client):
    seen = []

    def handle(conn, req):
        seen.append(time.monotonic())
        if len(seen) == 1:
            conn.respond(b"busy", status="503 Service Unavailable", headers=[("Retry-After", "soon")])
        else:
            conn.respond(b"ok")

    server = routes({"/": handle})
    with gevent.Timeout(5):
        r = make_client(server.origin).compose(_fast(min_timeout=0.05)).request(path="/")
    assert r.body.text() == "ok"
    assert 0.04 <= seen[1] - seen[0] < 1.0


def test_retry_after_zero_retries_at_once(routes, make_client):
    seen = []

    def handle(conn, req):
        seen.append(time.monotonic())
        if len(seen) == 1:
            conn.respond(b"busy", status="429 Too Many Requests", headers=[("Retry-After", "0")])
        else:
            conn.respond(b"ok")

    server = routes({"/": handle})
    with gevent.Timeout(5):
        r = make_client(server.origin).compose(_fast(min_timeout=2, max_timeout=5)).request(path="/")
    assert r.body.text() == "ok"
    assert seen[1] - seen[0] < 1.0


def test_custom_policy_sees_counter_and_options(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"busy", status="503 Service Unavailable")})
    calls = []

    def policy(err, ctx, cb):
        calls.append((type(err).__name__, ctx["state"]["counter"], ctx["opts"]["path"],
                      ctx["opts"]["retry_options"].max_retries))
        if ctx["state"]["counter"] >= 3:
            cb(err)
        else:
            cb(None)

    composed = make_client(server.origin).compose(_fast(retry=policy, max_retries=7))
    with pytest.raises(errors.RequestRetryError) as info:
        composed.request(path="/")
    assert calls == [("RequestRetryError", n, "/", 7) for n in (1, 2, 3)]
    assert info.value.data == {"count": 3}
    assert len(server.requests) == 3


def test_throw_on_error_false_delivers_the_last_response_once(routes, make_client):
    n = []

    def handle(conn, req):
        n.append(1)
        conn.respond(b"busy %d" % len(n), status="503 Service Unavailable")

    server = routes({"/": handle})
    r = make_client(server.origin).compose(_fast(max_retries=2, throw_on_error=False)).request(path="/")
    assert (r.status_code, r.body.text()) == (503, "busy 3")
    assert len(server.requests) == 3
    assert server.accepted == 1


def test_headers_timeout_is_not_retried_by_default(make_server, make_client):
    hits = []

    def handler(conn):
        while conn.read_request() is not None:
            hits.append(1)
            gevent.sleep(1)
            return

    server = make_server(handler)
    composed = make_client(server.origin, headers_timeout=0.1).compose(_fast())
    with gevent.Timeout(5), pytest.raises(errors.HeadersTimeoutError):
        composed.request(path="/")
    assert len(hits) == 1


def test_retry_outside_redirect_restarts_the_chain(routes, make_client):
    n = []

    def b(conn, req):
        n.append(1)
        if len(n) == 1:
            conn.respond(b"busy", status="503 Service Unavailable")
        else:
            conn.respond(b"done")

    server = routes({"/a": _to("/b"), "/b": b})
    composed = make_client(server.origin).compose(_fast(), interceptors.redirect(max_redirections=3))
    r = composed.request(path="/a")
    assert r.body.text() == "done"
    assert [q.target for q in server.requests] == ["/a", "/b", "/a", "/b"]
    assert r.context["history"] == [f"{server.origin}/a", f"{server.origin}/b"]


def test_retry_inside_redirect_retries_only_the_hop(routes, make_client):
    n = []

    def b(conn, req):
        n.append(1)
        if len(n) == 1:
            conn.respond(b"busy", status="503 Service Unavailable")
        else:
            conn.respond(b"done")

    server = routes({"/a": _to("/b"), "/b": b})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=3), _fast())
    r = composed.request(path="/a")
    assert r.body.text() == "done"
    assert [q.target for q in server.requests] == ["/a", "/b", "/b"]
    assert r.context["history"] == [f"{server.origin}/a", f"{server.origin}/b"]
