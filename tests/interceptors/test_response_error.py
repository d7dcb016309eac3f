"""The response_error interceptor: 4xx/5xx become ResponseError with a parsed body."""

from __future__ import annotations

import gzip
import json

import pytest

from greenhttp import errors, interceptors


def _answer(status, body=b"", ctype=None, extra=()):
    headers = [("Content-Type", ctype)] if ctype else []
    return lambda conn, req: conn.respond(body, status=status, headers=[*headers, *extra])


def test_json_and_text_bodies_are_parsed(routes, make_client):
    server = routes({
        "/json": _answer("404 Not Found", json.dumps({"error": "no such thing"}).encode(), "application/json; charset=utf-8"),
        "/problem": _answer("409 Conflict", b'{"title": "taken"}', "application/problem+json"),
        "/text": _answer("503 Service Unavailable", "d\xe9j\xe0 vu".encode("latin-1"), "text/plain; charset=ISO-8859-1"),
        "/utf8": _answer("500 Internal Server Error", "π ≈ 3".encode(), "text/plain"),
        "/badjson": _answer("502 Bad Gateway", b"<html>oops", "application/json"),
        "/html": _answer("400 Bad Request", b"<h1>no</h1>", "text/html"),
        "/none": _answer("401 Unauthorized", b"who?"),
    })
    composed = make_client(server.origin).compose(interceptors.response_error())
    expected = {
        "/json": (404, {"error": "no such thing"}),
        "/problem": (409, {"title": "taken"}),
        "/text": (503, "déjà vu"),
        "/utf8": (500, "π ≈ 3"),
        "/badjson": (502, "<html>oops"),
        "/html": (400, ""),
        "/none": (401, ""),
    }
    for path, (status, body) in expected.items():
        with pytest.raises(errors.ResponseError) as info:
            composed.request(path=path)
        err = info.value
        assert (err.status_code, err.status, err.body) == (status, status, body), path
        assert err.code == "GH_ERR_RESPONSE" and str(err) == "Response Error"
        assert "content-length" in err.headers  # the response's own headers
    assert server.accepted == 1  # each error body was read: the connection stayed usable


def test_successes_and_redirects_pass(routes, make_client):
    server = routes({
        "/ok": _answer("200 OK", b"fine"),
        "/moved": _answer("302 Found", b"", extra=[("Location", "/ok")]),
        "/created": _answer("201 Created", b"{}", "application/json"),
    })
    composed = make_client(server.origin).compose(interceptors.response_error())
    assert composed.request(path="/ok").body.text() == "fine"
    assert composed.request(path="/moved").status_code == 302
    assert composed.request(path="/created").body.json() == {}


def test_an_encoded_error_body_is_decoded(routes, make_client):
    body = gzip.compress(json.dumps({"detail": "compressed"}).encode())
    server = routes({"/": _answer("500 Internal Server Error", body, "application/json", [("Content-Encoding", "gzip")])})
    with pytest.raises(errors.ResponseError) as info:
        make_client(server.origin).compose(interceptors.response_error()).request(path="/")
    assert info.value.body == {"detail": "compressed"}


def test_a_huge_error_body_is_cut(routes, make_client):
    server = routes({"/": _answer("500 Internal Server Error", b"e" * (3 << 20), "text/plain")})
    composed = make_client(server.origin).compose(interceptors.response_error())
    with pytest.raises(errors.ResponseError) as info:
        composed.request(path="/")
    assert info.value.body == "e" * (1 << 20)
    with pytest.raises(errors.ResponseError):
        composed.request(path="/")
    assert server.accepted == 2  # the rest was not read: that connection was closed


def test_head_and_empty_error_bodies(routes, make_client):
    server = routes({"/": _answer("404 Not Found", b"", "application/json")})
    composed = make_client(server.origin).compose(interceptors.response_error())
    with pytest.raises(errors.ResponseError) as info:
        composed.request(path="/", method="HEAD")
    assert info.value.body == ""


def test_takes_no_options():
    with pytest.raises(errors.InvalidArgumentError, match="no options"):
        interceptors.response_error(throw_on_error=True)
