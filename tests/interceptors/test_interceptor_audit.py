"""An adversarial audit of the interceptors (redirect, retry, cache, decompress,
response_error, dump, deduplicate) against the RFCs, the spec and REFERENCE.md."""

from __future__ import annotations

import pytest

from greenhttp import errors, interceptors


def _to(location, status="302 Found", body=b"see elsewhere"):
    return lambda conn, req: conn.respond(body, status=status, headers=[("Location", location)])


def _ok(body=b"final"):
    return lambda conn, req: conn.respond(body)


# -- redirect ----------------------------------------------------------------------------------------


def test_redirect_from_a_url_with_a_query_option_to_the_bare_path_is_not_a_loop(routes, make_client):
    # The first request is /a?x=1 (query given as an option); /a is another URL (RFC 3986).
    server = routes({"/a?x=1": _to("/a"), "/a": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=3))
    r = composed.request(path="/a", query={"x": "1"})
    assert (r.status_code, r.body.text()) == (200, "final")
    assert [q.target for q in server.requests] == ["/a?x=1", "/a"]
    assert r.context["history"] == [f"{server.origin}/a?x=1", f"{server.origin}/a"]


def test_redirect_303_keeps_head_and_drops_nothing_else(routes, make_client):
    server = routes({"/a": _to("/b", "303 See Other"), "/b": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=3))
    r = composed.request(path="/a", method="HEAD")
    assert r.status_code == 200
    assert [(q.method, q.target) for q in server.requests] == [("HEAD", "/a"), ("HEAD", "/b")]


def test_redirect_location_with_a_fragment_sends_no_fragment(routes, make_client):
    server = routes({"/a": _to("/b?q=1#frag"), "/b?q=1": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=3))
    r = composed.request(path="/a")
    assert r.status_code == 200
    assert [q.target for q in server.requests] == ["/a", "/b?q=1"]


@pytest.mark.parametrize("location", ["http://[::1", "http://127.0.0.1:99999/x", "javascript:alert(1)", "   "])
def test_redirect_an_unusable_location_is_delivered(routes, make_client, location):
    server = routes({"/a": _to(location)})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=3))
    r = composed.request(path="/a")
    assert r.status_code == 302
    assert r.body.text() == "see elsewhere"
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", ["307 Temporary Redirect", "308 Permanent Redirect"])
def test_redirect_307_308_keep_post_and_its_body(routes, make_client, status):
    server = routes({"/a": _to("/b", status), "/b": lambda conn, req: conn.respond(req.body)})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=3))
    r = composed.request(path="/a", method="POST", body=b"payload",
                         headers={"content-type": "text/plain"})
    assert r.body.bytes() == b"payload"
    second = server.requests[1]
    assert (second.method, second.body, second.header("content-type")) == ("POST", b"payload", "text/plain")


# -- retry -------------------------------------------------------------------------------------------


def test_retry_a_streamed_body_is_not_resent_after_a_retryable_status(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"busy", status="503 Service Unavailable")})
    composed = make_client(server.origin).compose(interceptors.retry(min_timeout=0.01))
    with pytest.raises(errors.RequestRetryError) as info:
        composed.request(path="/", method="PUT", body=iter([b"a", b"b"]))
    assert info.value.status_code == 503
    assert len(server.requests) == 1


def test_retry_a_streamed_body_with_throw_on_error_false_returns_the_response(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"busy", status="503 Service Unavailable")})
    composed = make_client(server.origin).compose(interceptors.retry(min_timeout=0.01, throw_on_error=False))
    r = composed.request(path="/", method="PUT", body=iter([b"a", b"b"]))
    assert r.status_code == 503
    assert r.body.text() == "busy"
    assert len(server.requests) == 1
