"""An adversarial audit of the redirect and retry interceptors against RFC 9110,
REFERENCE.md §7.2/§7.3 and docs/interceptors.md."""

from __future__ import annotations

import time

import gevent
import gevent.event
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


def test_a_303_before_the_streamed_body_was_sent_ends_that_body_and_follows_with_get(make_server, make_client):
    # The original destroys the body a 303 drops; here the connection ends its
    # source when the answer comes first (the generator's finally runs), and the
    # GET that follows carries no body.
    ended = gevent.event.Event()
    never = gevent.event.Event()

    def body():
        try:
            yield b"first"
            never.wait()  # parked: the rest would come later
            yield b"never sent"
        finally:
            ended.set()

    seen = []

    def handler(conn):
        req = conn.read_head()
        seen.append(req)
        if req is None:
            return
        if req.target == "/a":
            conn.send(b"HTTP/1.1 303 See Other\r\nLocation: /b\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        conn.respond(b"final")

    server = make_server(handler)
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    with gevent.Timeout(5):
        r = composed.request(path="/a", method="POST", body=body())
        assert (r.status_code, r.body.text()) == (200, "final")
        assert ended.wait(5)
    second = seen[1]
    assert (second.method, second.target) == ("GET", "/b")
    assert second.header("content-length") is None and second.header("transfer-encoding") is None


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


def _busy_then_ok(status="503 Service Unavailable", retry_after=None, then=b"ok"):
    """A handler answering ``status`` first (with ``Retry-After: retry_after`` when
    given), then 200 with ``then``; the list returned beside it gets each request's
    arrival time."""
    seen = []

    def handle(conn, req):
        seen.append(time.monotonic())
        if len(seen) == 1:
            headers = [("Retry-After", retry_after)] if retry_after is not None else []
            conn.respond(b"busy", status=status, headers=headers)
        else:
            conn.respond(then)

    return handle, seen


def test_an_unusable_retry_after_falls_back_to_backoff(routes, make_client):
    handle, seen = _busy_then_ok("503 Service Unavailable", "soon")
    server = routes({"/": handle})
    with gevent.Timeout(5):
        r = make_client(server.origin).compose(_fast(min_timeout=0.05)).request(path="/")
    assert r.body.text() == "ok"
    assert 0.04 <= seen[1] - seen[0] < 1.0


def test_retry_after_zero_retries_at_once(routes, make_client):
    handle, seen = _busy_then_ok("429 Too Many Requests", "0")
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
    b, _ = _busy_then_ok(then=b"done")

    server = routes({"/a": _to("/b"), "/b": b})
    composed = make_client(server.origin).compose(_fast(), interceptors.redirect(max_redirections=3))
    r = composed.request(path="/a")
    assert r.body.text() == "done"
    assert [q.target for q in server.requests] == ["/a", "/b", "/a", "/b"]
    assert r.context["history"] == [f"{server.origin}/a", f"{server.origin}/b"]


def test_retry_inside_redirect_retries_only_the_hop(routes, make_client):
    b, _ = _busy_then_ok(then=b"done")

    server = routes({"/a": _to("/b"), "/b": b})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=3), _fast())
    r = composed.request(path="/a")
    assert r.body.text() == "done"
    assert [q.target for q in server.requests] == ["/a", "/b", "/b"]
    assert r.context["history"] == [f"{server.origin}/a", f"{server.origin}/b"]


def test_a_held_response_is_not_ended_while_a_slow_policy_decides(routes, make_client, recorder):
    # throw_on_error=False pauses the response while the policy decides; a small body that is
    # already in the socket buffer must not end the request behind the policy's back.
    handle, _ = _busy_then_ok(then=b"ok")

    def policy(err, ctx, cb):
        return gevent.spawn_later(0.1, cb, None)

    server = routes({"/": handle})
    composed = make_client(server.origin).compose(_fast(retry=policy, throw_on_error=False))
    rec = recorder()
    composed.dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(5)
    assert rec.error is None
    assert (rec.status, rec.body) == (200, b"ok")
    assert [c for c in rec.names() if c != "start"] == ["response_start", "data", "end"]


def test_a_held_response_is_delivered_whole_when_a_slow_policy_stops(routes, make_client, recorder):
    server = routes({"/": lambda conn, req: conn.respond(b"busy", status="503 Service Unavailable")})

    def policy(err, ctx, cb):
        return gevent.spawn_later(0.1, cb, err)

    composed = make_client(server.origin).compose(_fast(retry=policy, throw_on_error=False))
    rec = recorder()
    composed.dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(5)
    assert rec.error is None
    assert (rec.status, rec.body) == (503, b"busy")
    assert len(server.requests) == 1


def test_post_with_a_retryable_status_and_throw_on_error_false_returns_it(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"busy", status="503 Service Unavailable")})
    r = make_client(server.origin).compose(_fast(throw_on_error=False)).request(path="/", method="POST", body=b"x")
    assert (r.status_code, r.body.text()) == (503, "busy")
    assert len(server.requests) == 1


@pytest.mark.parametrize("method", ["PUT", "QUERY", "DELETE"])
def test_an_idempotent_method_with_a_body_is_retried_with_the_same_body(routes, make_client, method):
    n = []

    def handle(conn, req):
        n.append(1)
        if len(n) == 1:
            conn.respond(b"busy", status="502 Bad Gateway")
        else:
            conn.respond(b"ok")

    server = routes({"/": handle})
    r = make_client(server.origin).compose(_fast()).request(path="/", method=method, body=b"payload")
    assert r.body.text() == "ok"
    assert [(q.method, q.body, q.header("content-length")) for q in server.requests] == [
        (method, b"payload", "7")] * 2


def test_a_chunked_redirect_body_with_trailers_is_dropped_and_the_connection_kept(routes, make_client):
    def chunked(conn, req):
        conn.send(b"HTTP/1.1 302 Found\r\nLocation: /b\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n")

    server = routes({"/a": chunked, "/b": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    r = composed.request(path="/a")
    assert (r.status_code, r.body.text()) == (200, "final")
    assert r.trailers in (None, {}) or "x-t" not in r.trailers
    assert server.accepted == 1


def test_a_cross_origin_redirect_to_a_dead_origin_fails_with_its_error(routes, make_agent):
    import socket as _socket

    s = _socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()
    server = routes({"/a": _to(f"{dead}/x")})
    composed = make_agent().compose(interceptors.redirect(max_redirections=2))
    with gevent.Timeout(5), pytest.raises((ConnectionRefusedError, errors.SocketError, OSError)):
        composed.request(origin=server.origin, path="/a")


def test_redirect_303_on_post_with_a_streamed_body_goes_on_as_get(routes, make_client):
    server = routes({"/a": _to("/b", "303 See Other"), "/b": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    r = composed.request(path="/a", method="POST", body=iter([b"a", b"b"]))
    assert r.body.text() == "final"
    assert [(q.method, q.body) for q in server.requests] == [("POST", b"ab"), ("GET", b"")]


def test_a_custom_policy_that_raises_fails_the_request_without_hanging(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"busy", status="503 Service Unavailable"),
                     "/ok": _ok()})

    def policy(err, ctx, cb):
        raise ValueError("policy bug")

    client = make_client(server.origin)
    composed = client.compose(_fast(retry=policy))
    with gevent.Timeout(5), pytest.raises(ValueError, match="policy bug"):
        composed.request(path="/")
    assert len(server.requests) == 1
    with gevent.Timeout(5):
        assert client.request(path="/ok").body.text() == "final"


def test_retry_after_on_a_response_error_is_honoured_and_capped(routes, make_client):
    handle, seen = _busy_then_ok("503 Service Unavailable", "3600")
    server = routes({"/": handle})
    composed = make_client(server.origin).compose(
        _fast(max_timeout=0.2), interceptors.response_error())
    with gevent.Timeout(5):
        r = composed.request(path="/")
    assert r.body.text() == "ok"
    assert 0.15 <= seen[1] - seen[0] < 1.0


def test_a_client_closed_during_backoff_fails_the_request(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"busy", status="503 Service Unavailable")})
    client = make_client(server.origin)
    composed = client.compose(_fast(min_timeout=0.2))
    result = []

    def run():
        try:
            composed.request(path="/")
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            result.append(exc)

    g = gevent.spawn(run)
    with gevent.Timeout(5):
        while not server.requests:
            gevent.sleep(0.01)
        gevent.sleep(0.05)
        client.close()
        g.join()
    assert len(result) == 1 and isinstance(result[0], errors.GreenHTTPError)
    assert len(server.requests) == 1


def test_a_body_cut_twice_is_resumed_twice(routes, make_client):
    full = bytes(range(256)) * 64  # 16 KiB
    seen = []

    def handle(conn, req):
        seen.append(req)
        if len(seen) == 1:
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: \"e\"\r\n\r\n" % len(full) + full[:5000])
            return False
        start = int(req.header("range").split("=")[1].split("-")[0])
        stop = len(full) if len(seen) == 3 else 9000
        conn.send(
            b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\nETag: \"e\"\r\n"
            b"Content-Length: %d\r\n\r\n" % (start, len(full) - 1, len(full), len(full) - start)
            + full[start:stop]
        )
        if len(seen) == 2:
            return False
        return None

    server = routes({"/f": handle})
    r = make_client(server.origin).compose(_fast()).request(path="/f")
    with gevent.Timeout(5):
        assert r.body.bytes() == full
    assert [q.header("range") for q in seen] == [None, f"bytes=5000-{len(full) - 1}", f"bytes=9000-{len(full) - 1}"]
    assert seen[2].header("if-match") == '"e"'


def test_retry_outside_redirect_resumes_through_the_redirect(routes, make_client):
    full = b"abcdefghij" * 100
    seen = []

    def f(conn, req):
        seen.append(req)
        if len(seen) == 1:
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(full) + full[:300])
            return False
        start = int(req.header("range").split("=")[1].split("-")[0])
        conn.send(
            b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\n"
            b"Content-Length: %d\r\n\r\n" % (start, len(full) - 1, len(full), len(full) - start) + full[start:]
        )

    server = routes({"/a": _to("/f"), "/f": f})
    composed = make_client(server.origin).compose(_fast(), interceptors.redirect(max_redirections=2))
    r = composed.request(path="/a")
    with gevent.Timeout(5):
        assert r.body.bytes() == full
    assert [q.target for q in server.requests] == ["/a", "/f", "/a", "/f"]
    assert server.requests[2].header("range") == f"bytes=300-{len(full) - 1}"


def test_a_custom_policy_that_raises_on_a_held_response_fails_the_request(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"busy", status="503 Service Unavailable")})

    def policy(err, ctx, cb):
        raise ValueError("policy bug")

    composed = make_client(server.origin).compose(_fast(retry=policy, throw_on_error=False))
    with gevent.Timeout(5), pytest.raises(ValueError, match="policy bug"):
        composed.request(path="/")
    assert len(server.requests) == 1


def test_a_post_cut_midway_is_not_retried(routes, make_client):
    def cut(conn, req):
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        return False

    server = routes({"/": cut})
    r = make_client(server.origin).compose(_fast()).request(path="/", method="POST", body=b"b")
    with gevent.Timeout(5), pytest.raises(errors.SocketError):
        r.body.bytes()
    assert len(server.requests) == 1


def test_listed_error_codes_retry_a_headers_timeout(make_server, make_client):
    hits = []

    def handler(conn):
        while conn.read_request() is not None:
            hits.append(1)
            if len(hits) == 1:
                gevent.sleep(0.5)
                return
            conn.respond(b"late but ok")

    server = make_server(handler)
    composed = make_client(server.origin, headers_timeout=0.1).compose(
        _fast(error_codes=["GH_ERR_HEADERS_TIMEOUT"]))
    with gevent.Timeout(5):
        assert composed.request(path="/").body.text() == "late but ok"
    assert len(hits) == 2


@pytest.mark.parametrize(
    ("location", "target"),
    [
        (b"/caf\xc3\xa9", "/caf%C3%A9"),
        (b"/b?q=a b&r=%20", "/b?q=a%20b&r=%20"),
        (b"HTTP:/b", "/b"),
        (b"?only=query", "/dir/page?only=query"),
        (b"../up", "/up"),
        (b"  /spaced  ", "/spaced"),
    ],
)
def test_location_bytes_resolve_and_encode(routes, make_client, location, target):
    def redirect(conn, req):
        conn.send(b"HTTP/1.1 302 Found\r\nLocation: " + location + b"\r\nContent-Length: 0\r\n\r\n")

    table = {"/dir/page": redirect}
    server = routes(table)
    table[target] = _ok()
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    r = composed.request(path="/dir/page")
    assert r.body.text() == "final"
    assert [q.target for q in server.requests] == ["/dir/page", target]


@pytest.mark.parametrize("status", ["300 Multiple Choices", "301 Moved Permanently", "308 Permanent Redirect"])
def test_every_redirect_status_is_followed(routes, make_client, status):
    server = routes({"/a": _to("/b", status), "/b": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=1))
    assert composed.request(path="/a").body.text() == "final"


@pytest.mark.parametrize("status", ["304 Not Modified", "305 Use Proxy", "306 Unused", "201 Created"])
def test_other_statuses_with_a_location_are_not_followed(routes, make_client, status):
    def answer(conn, req):
        if status.startswith("304"):
            conn.send(f"HTTP/1.1 {status}\r\nLocation: /b\r\n\r\n".encode())
        else:
            conn.respond(b"here", status=status, headers=[("Location", "/b")])

    server = routes({"/a": answer, "/b": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=3))
    r = composed.request(path="/a")
    assert r.status_code == int(status[:3])
    r.body.dump()
    assert len(server.requests) == 1


def test_abort_through_the_signal_during_a_hop_stops_the_chain(routes, make_client):
    from greenhttp import AbortController, DOMException

    ac = AbortController()

    def slow_b(conn, req):
        ac.abort()
        gevent.sleep(0.2)
        conn.respond(b"too late")

    server = routes({"/a": _to("/b"), "/b": slow_b, "/c": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=3))
    with gevent.Timeout(5), pytest.raises(DOMException) as info:
        composed.request(path="/a", signal=ac.signal)
    assert info.value.name == "AbortError"
    assert [q.target for q in server.requests] == ["/a", "/b"]


def test_a_held_response_cut_while_the_policy_waits_is_retried_once(routes, make_client, recorder):
    n = []

    def handle(conn, req):
        n.append(1)
        if len(n) == 1:
            conn.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 50\r\n\r\nbu")
            return False  # cut while the retry decision holds the response
        conn.respond(b"ok")

    server = routes({"/": handle})
    composed = make_client(server.origin).compose(_fast(min_timeout=0.1, throw_on_error=False))
    rec = recorder()
    composed.dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(5)
    gevent.sleep(0.2)  # a second back-off (0.1 s) would have sent again by now
    assert rec.error is None and (rec.status, rec.body) == (200, b"ok")
    assert len(server.requests) == 2


@pytest.mark.parametrize("digits", [400, 5000])
def test_a_huge_retry_after_is_capped_not_a_crash(routes, make_client, digits):
    # Retry-After comes from the server: a delay too large for a float (or for int()'s
    # digit limit) is still just "longer than max_timeout".
    handle, seen = _busy_then_ok("503 Service Unavailable", "9" * digits)
    server = routes({"/": handle})
    composed = make_client(server.origin).compose(_fast(max_timeout=0.1))
    with gevent.Timeout(5):
        r = composed.request(path="/")
    assert r.body.text() == "ok"
    assert 0.08 <= seen[1] - seen[0] < 1.0


def test_a_content_range_of_too_many_digits_is_just_not_resumable(routes, make_client):
    def ranged(conn, req):
        conn.send(b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/" + b"9" * 5000
                  + b"\r\nContent-Length: 10\r\n\r\n0123456789")

    server = routes({"/": ranged})
    r = make_client(server.origin).compose(_fast()).request(path="/", headers={"range": "bytes=0-9"})
    assert r.status_code == 206
    assert r.body.bytes() == b"0123456789"


def test_a_pool_follows_same_origin_redirects_and_keeps_credentials(routes):
    import greenhttp

    server = routes({"/a": _to("/b", "308 Permanent Redirect"), "/b": _ok()})
    pool = greenhttp.Pool(server.origin, connections=2)
    try:
        composed = pool.compose(interceptors.redirect(max_redirections=1))
        r = composed.request(path="/a", method="PUT", body=b"v", headers={"authorization": "x"})
        assert r.body.text() == "final"
        assert r.context["history"] == [f"{server.origin}/a", f"{server.origin}/b"]
        second = server.requests[1]
        assert (second.method, second.body, second.header("authorization")) == ("PUT", b"v", "x")
    finally:
        with gevent.Timeout(5):
            pool.destroy()


def test_a_client_given_a_cross_origin_redirect_does_not_leak_credentials(routes, make_client):
    other = routes({"/x": _ok(b"other")})
    server = routes({"/a": _to(f"{other.origin}/x"), "/x": _ok(b"mine")})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    with gevent.Timeout(5):
        try:
            r = composed.request(path="/a", headers={"cookie": "secret=1"})
            r.body.dump()
        except errors.GreenHTTPError:
            pass
    for q in server.requests[1:] + other.requests:
        assert q.header("cookie") is None


@pytest.mark.parametrize("method", ["HEAD", "head"])
def test_head_redirects_with_a_declared_length_and_no_body(routes, make_client, method):
    def moved(conn, req):
        conn.send(b"HTTP/1.1 301 Moved Permanently\r\nLocation: /b\r\nContent-Length: 100\r\n\r\n")

    def final(conn, req):
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n")

    server = routes({"/a": moved, "/b": final})
    composed = make_client(server.origin).compose(_fast(), interceptors.redirect(max_redirections=1))
    with gevent.Timeout(5):
        r = composed.request(path="/a", method=method)
        assert (r.status_code, r.body.bytes()) == (200, b"")
    assert [q.method.upper() for q in server.requests] == ["HEAD", "HEAD"]


def _stop_later(err, ctx, cb):
    return gevent.spawn_later(0.05, cb, err)


@pytest.mark.parametrize("policy", [None, _stop_later], ids=["at-once", "later"])
def test_a_handler_pausing_at_the_head_of_a_held_response_stays_paused(routes, make_client, recorder, policy):
    # throw_on_error=False holds the response (paused) while the policy decides, then hands it
    # over: a handler that pauses in on_response_start must not get data before it resumes.
    server = routes({"/": lambda conn, req: conn.respond(b"busy", status="503 Service Unavailable")})

    class Pausing(recorder):
        def on_response_start(self, controller, status_code, headers, status_message):
            super().on_response_start(controller, status_code, headers, status_message)
            controller.pause()

            def later():
                self.calls.append(("resume",))
                controller.resume()

            gevent.spawn_later(0.1, later)

    rec = Pausing()
    composed = make_client(server.origin).compose(_fast(max_retries=0, throw_on_error=False, retry=policy))
    composed.dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(5)
    assert [c[0] for c in rec.calls if c[0] != "start"] == ["response_start", "resume", "data", "end"]
    assert rec.body == b"busy"


@pytest.mark.parametrize("interceptor", ["redirect", "retry"])
def test_every_callback_comes_with_the_controller_the_request_started_with(
    routes, make_client, recorder, interceptor
):
    # Both handlers send their request more than once and hand themselves downstream as
    # the controller: the same object in every callback, steering the current hop or
    # attempt (a pause through it holds that hop's body).
    answers = iter([("503 Service Unavailable", b"busy"), ("200 OK", b"final")])

    def flaky_once(conn, req):
        status, body = next(answers)
        conn.respond(body, status=status)

    server = routes({"/a": _to("/b"), "/b": _ok(), "/r": flaky_once})

    class Checking(recorder):
        def __init__(self):
            super().__init__()
            self.seen = []

        def on_request_start(self, controller, context):
            super().on_request_start(controller, context)
            self.seen.append(controller)

        def on_response_start(self, controller, status_code, headers, status_message):
            super().on_response_start(controller, status_code, headers, status_message)
            self.seen.append(controller)
            assert controller.raw_headers is not None
            controller.pause()

            def later():
                self.calls.append(("resume",))
                controller.resume()

            gevent.spawn_later(0.05, later)

        def on_response_data(self, controller, chunk):
            super().on_response_data(controller, chunk)
            self.seen.append(controller)

        def on_response_end(self, controller, trailers):
            self.seen.append(controller)
            super().on_response_end(controller, trailers)

    rec = Checking()
    if interceptor == "redirect":
        made, path = interceptors.redirect(max_redirections=2), "/a"
    else:
        made, path = _fast(max_retries=1), "/r"
    make_client(server.origin).compose(made).dispatch({"path": path, "method": "GET"}, rec)
    assert rec.done.wait(5), rec.calls
    assert rec.error is None and rec.body == b"final"
    assert [c[0] for c in rec.calls if c[0] != "start"] == ["response_start", "resume", "data", "end"]
    assert len(rec.seen) >= 4
    assert all(c is rec.seen[0] for c in rec.seen), rec.seen
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "opts",
    [{"retry_options": {"max_retries": -1}}, {"retry_options": {"nope": 1}}, {"retry_options": [1]},
     {"max_redirections": -1}, {"max_redirections": True}, {"throw_on_max_redirect": "yes"},
     {"strip_headers_on_redirect": "authorization"}],
)
def test_bad_per_request_options_fail_before_anything_is_sent(routes, make_client, opts):
    server = routes({"/": _ok()})
    composed = make_client(server.origin).compose(_fast(), interceptors.redirect(max_redirections=1))
    with gevent.Timeout(5), pytest.raises(errors.InvalidArgumentError):
        composed.request(path="/", **opts)
    assert server.requests == []


def test_a_redirect_whose_body_runs_to_eof_is_followed_on_a_new_connection(routes, make_client):
    def to_eof(conn, req):
        conn.send(b"HTTP/1.1 302 Found\r\nLocation: /b\r\nConnection: close\r\n\r\nbody until eof")
        return False

    server = routes({"/a": to_eof, "/b": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=1))
    with gevent.Timeout(5):
        assert composed.request(path="/a").body.text() == "final"
    assert server.accepted == 2


def test_an_abort_while_the_next_hop_waits_for_a_connection_fails_at_once(routes, make_agent):
    from greenhttp import AbortController, DOMException

    release = gevent.event.Event()

    def slow(conn, req):
        release.wait(5)
        conn.respond(b"slow")

    b = routes({"/slow": slow, "/x": _ok(b"b")})
    a = routes({"/a": _to(f"{b.origin}/x")})
    agent = make_agent(connections=1)
    busy = gevent.spawn(lambda: agent.request(origin=b.origin, path="/slow").body.text())
    with gevent.Timeout(5):
        while not b.requests:
            gevent.sleep(0.01)
    composed = agent.compose(interceptors.redirect(max_redirections=2))
    ac = AbortController()
    gevent.spawn_later(0.2, ac.abort)
    started = time.monotonic()
    try:
        with gevent.Timeout(5), pytest.raises(DOMException):
            composed.request(origin=a.origin, path="/a", signal=ac.signal)
        assert time.monotonic() - started < 1.0  # not once the connection to b is free
    finally:
        release.set()
        with gevent.Timeout(5):
            assert busy.get() == "slow"
    assert [q.target for q in b.requests] == ["/slow"]  # the aborted hop never went out
