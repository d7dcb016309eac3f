"""An adversarial audit of the interceptors (redirect, retry, cache, decompress,
response_error, dump, deduplicate) against the RFCs, the spec and REFERENCE.md."""

from __future__ import annotations

import gzip
import time
import warnings
from email.utils import formatdate

import gevent
import gevent.event
import pytest

import greenhttp
from greenhttp import errors, interceptors
from greenhttp.cache_stores import MemoryCacheStore, SqliteCacheStore
from greenhttp.errors import ExperimentalWarning


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



@pytest.mark.parametrize("status", ["302 Found", "303 See Other"])
def test_redirect_a_sent_streamed_post_body_does_not_stop_a_hop_to_get(routes, make_client, status):
    server = routes({"/form": _to("/done", status), "/done": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    r = composed.request(path="/form", method="POST", body=iter([b"a=", b"1"]),
                         headers={"content-type": "application/x-www-form-urlencoded"})
    assert (r.status_code, r.body.text()) == (200, "final")
    done = server.requests[1]
    assert (done.method, done.body, done.header("content-type"), done.header("transfer-encoding")) == (
        "GET", b"", None, None)


@pytest.mark.parametrize(
    ("location", "target"),
    [("../c?x=1", "/c?x=1"), ("?page=2", "/dir/sub?page=2"), ("/\xe9 \xfc", "/%E9%20%FC"),
     ("//{host}/abs", "/abs")],  # the scripted server sends the Location as latin-1 bytes
)
def test_redirect_relative_locations_resolve_against_the_request_url(routes, make_client, location, target):
    table = {target: _ok()}
    server = routes(table)
    table["/dir/sub?q=0"] = _to(location.format(host=server.origin.split("//")[1]))
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=2))
    r = composed.request(path="/dir/sub?q=0")
    assert (r.status_code, r.body.text()) == (200, "final")
    assert [q.target for q in server.requests] == ["/dir/sub?q=0", target]



def test_redirect_with_credentials_in_the_url_or_two_locations_is_returned(routes, make_client):
    server = routes({
        "/creds": _to("http://user:pass@127.0.0.1/x"),
        "/two": lambda conn, req: conn.respond(b"", status="302 Found",
                                               headers=[("Location", "/a"), ("Location", "/b")]),
    })
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=3))
    assert composed.request(path="/creds").status_code == 302
    assert composed.request(path="/two").status_code == 302
    assert [q.target for q in server.requests] == ["/creds", "/two"]



def test_redirect_per_request_throw_on_max_redirect_and_a_zero_limit(routes, make_client):
    server = routes({"/1": _to("/2"), "/2": _to("/3"), "/3": _ok()})
    composed = make_client(server.origin).compose(interceptors.redirect(max_redirections=1))
    assert composed.request(path="/1").status_code == 302  # the limit: the redirect is returned
    with pytest.raises(errors.MaxRedirectionsError, match="max redirects"):
        composed.request(path="/1", throw_on_max_redirect=True)
    # 0 turns the interceptor off, whatever throw_on_max_redirect says.
    assert composed.request(path="/1", max_redirections=0, throw_on_max_redirect=True).status_code == 302
    with pytest.raises(errors.InvalidArgumentError, match="throw_on_max_redirect"):
        composed.request(path="/1", throw_on_max_redirect="yes")


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



def test_retry_a_requested_range_cut_midway_resumes_within_that_range(routes, make_client):
    full = bytes(range(100))
    seen = []

    def handle(conn, req):
        seen.append(req.header("range"))
        first, last = (int(x) for x in req.header("range").split("=")[1].split("-"))
        head = (b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/100\r\nContent-Length: %d\r\n"
                b"ETag: \"e\"\r\n\r\n" % (first, last, last - first + 1))
        if len(seen) == 1:
            conn.send(head + full[first:first + 5])  # cut after 5 of the 20 bytes
            return False
        if len(seen) == 2:
            conn.respond(b"busy", status="503 Service Unavailable")
            return None
        conn.send(head + full[first:last + 1])
        return None

    server = routes({"/": handle})
    composed = make_client(server.origin).compose(interceptors.retry(min_timeout=0.01))
    r = composed.request(path="/", headers={"range": "bytes=10-29"})
    assert r.status_code == 206
    assert r.headers["content-range"] == "bytes 10-29/100"
    assert r.body.bytes() == full[10:30]
    assert seen == ["bytes=10-29", "bytes=15-29", "bytes=15-29"]


def test_retry_max_retries_zero_sends_once_and_head_is_retried(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"", status="502 Bad Gateway")})
    client = make_client(server.origin)
    with pytest.raises(errors.RequestRetryError) as info:
        client.compose(interceptors.retry(max_retries=0)).request(path="/")
    assert info.value.data == {"count": 1} and len(server.requests) == 1
    with pytest.raises(errors.RequestRetryError):
        client.compose(interceptors.retry(max_retries=1, min_timeout=0.01)).request(path="/", method="HEAD")
    assert [q.method for q in server.requests[1:]] == ["HEAD", "HEAD"]



@pytest.mark.parametrize("fmt", ["imf", "rfc850", "asctime"])
def test_retry_after_in_each_http_date_format(routes, make_client, fmt):
    # A date in the past means "now"; an unparsed one would mean min_timeout (10 s).
    when = time.gmtime(time.time() - 3600)
    text = {
        "imf": time.strftime("%a, %d %b %Y %H:%M:%S GMT", when),
        "rfc850": time.strftime("%A, %d-%b-%y %H:%M:%S GMT", when),
        "asctime": time.strftime("%a %b ", when) + f"{when.tm_mday:2d}" + time.strftime(" %H:%M:%S %Y", when),
    }[fmt]
    seen = []

    def handle(conn, req):
        seen.append(time.monotonic())
        if len(seen) == 1:
            conn.respond(b"", status="503 Service Unavailable", headers=[("Retry-After", text)])
        else:
            conn.respond(b"ok")

    server = routes({"/": handle})
    composed = make_client(server.origin).compose(interceptors.retry(min_timeout=10, max_timeout=30))
    assert composed.request(path="/").body.text() == "ok"
    assert seen[1] - seen[0] < 2



def test_retry_a_response_error_inside_is_retried_then_delivered_as_it_is(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(
        b'{"why": "load"}', status="503 Service Unavailable",
        headers=[("Content-Type", "application/json"), ("Retry-After", "0")])})
    client = make_client(server.origin)
    composed = client.compose(interceptors.retry(max_retries=2, min_timeout=10), interceptors.response_error())
    with pytest.raises(errors.ResponseError) as info:
        composed.request(path="/")
    assert (info.value.status_code, info.value.body) == (503, {"why": "load"})
    assert len(server.requests) == 3  # Retry-After: 0 on the error's headers, not min_timeout
    with pytest.raises(errors.ResponseError):
        composed.request(path="/", method="POST", body=b"x")
    assert len(server.requests) == 4  # POST is not retried
    assert server.accepted == 1



def test_retry_inside_decompress_resumes_the_encoded_body(routes, make_client):
    text = b"".join(b"line %d\n" % i for i in range(20000))
    encoded = gzip.compress(text)
    cut = len(encoded) // 2
    seen = []

    def handle(conn, req):
        seen.append(req.header("range"))
        if len(seen) == 1:
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nETag: \"g\"\r\nContent-Length: %d\r\n\r\n"
                      % len(encoded) + encoded[:cut])
            return False
        start = int(req.header("range").split("=")[1].split("-")[0])
        conn.send(b"HTTP/1.1 206 Partial Content\r\nContent-Encoding: gzip\r\nETag: \"g\"\r\n"
                  b"Content-Range: bytes %d-%d/%d\r\nContent-Length: %d\r\n\r\n"
                  % (start, len(encoded) - 1, len(encoded), len(encoded) - start) + encoded[start:])
        return None

    server = routes({"/": handle})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        decompress = interceptors.decompress()
    composed = make_client(server.origin).compose(decompress, interceptors.retry(min_timeout=0.01))
    r = composed.request(path="/")
    assert r.body.bytes() == text
    assert "content-encoding" not in r.headers
    assert seen == [None, f"bytes={cut}-{len(encoded) - 1}"]


# -- cache -------------------------------------------------------------------------------------------


def _get(d, path="/", **kw):
    r = d.request(path=path, **kw)
    return r.status_code, r.headers, r.body.bytes()


def test_cache_a_newer_variant_wins_over_an_older_entry_without_vary(origin, make_client, store):
    # RFC 9111 §4.1: of several stored responses that match, the most recent is used.
    def reply(req):
        if req.header("if-none-match") is None:
            return "200 OK", [("ETag", '"v1"'), ("Cache-Control", "max-age=60"), ("Age", "100")], b"old"
        return "200 OK", [("ETag", '"v2"'), ("Cache-Control", "max-age=60"), ("Vary", "Accept")], b"new"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert _get(d)[2] == b"old"
    assert _get(d)[2] == b"new"  # the stale one was validated and replaced by a new representation
    assert _get(d)[2] == b"new"
    assert len(server.requests) == 2  # the fresh new variant answered the third request


def test_cache_of_two_matching_entries_the_most_recent_answers(origin, make_client, store):
    # A varies on Accept and stays fresh for long; B, stored later without Vary, matches every
    # request. RFC 9111 §4.1: the most recent of the matching responses is used.
    def reply(req):
        if req.header("accept") == "a":
            return "200 OK", [("Vary", "Accept"), ("Cache-Control", "max-age=100000")], b"A"
        return "200 OK", [("Cache-Control", "max-age=60")], b"B"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert _get(d, headers={"accept": "a"})[2] == b"A"
    assert _get(d, headers={"accept": "b"})[2] == b"B"
    assert _get(d, headers={"accept": "a"})[2] == b"B"
    assert len(server.requests) == 2


def test_cache_a_304_with_new_freshness_makes_the_entry_fresh(origin, make_client, store):
    def reply(req):
        if req.header("if-none-match") == '"e"':
            return "304 Not Modified", [("ETag", '"e"'), ("Cache-Control", "max-age=600")], b""
        return "200 OK", [("ETag", '"e"'), ("Cache-Control", "no-cache")], b"body"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert _get(d)[2] == b"body"
    status, headers, body = _get(d)
    assert (status, body, headers["cache-control"]) == (200, b"body", "max-age=600")
    assert _get(d)[2] == b"body"
    assert len(server.requests) == 2


def test_cache_age_of_a_hit_counts_the_age_it_arrived_with(origin, make_client, store):
    server = origin(lambda req: ("200 OK", [("Cache-Control", "max-age=600"), ("Age", "30")], b"x"))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    _get(d)
    status, headers, _ = _get(d)
    assert 30 <= int(headers["age"]) <= 32
    assert len(server.requests) == 1


def test_cache_expires_relative_to_date_and_age_past_it_is_stale(origin, make_client, store):
    now = time.time()
    headers = [("Date", formatdate(now - 100, usegmt=True)), ("Expires", formatdate(now - 40, usegmt=True))]
    server = origin(lambda req: ("200 OK", headers, b"x"))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    _get(d)
    _get(d)
    assert len(server.requests) == 2  # already expired on arrival: never served from the store


def test_cache_no_store_in_the_request_does_not_store(origin, make_client, store):
    server = origin(lambda req: ("200 OK", [("Cache-Control", "max-age=600")], b"x"))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    _get(d, headers={"cache-control": "no-store"})
    _get(d)
    assert len(server.requests) == 2


def test_cache_post_invalidates_and_an_error_does_not(origin, make_client, store):
    n = 0

    def reply(req):
        nonlocal n
        n += 1
        if req.method == "POST":
            return ("500 Internal Server Error" if req.target == "/fail" else "204 No Content"), [], b""
        return "200 OK", [("Cache-Control", "max-age=600"), ("X-N", str(n))], b"x"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    _get(d, "/fail")
    d.request(path="/fail", method="POST", body=b"x").body.bytes()
    assert _get(d, "/fail")[1]["x-n"] == "1"  # a 5xx to an unsafe method invalidates nothing
    _get(d, "/ok")
    d.request(path="/ok", method="POST", body=b"x").body.bytes()
    assert _get(d, "/ok")[1]["x-n"] == "5"  # the 204 to POST invalidated /ok


def test_cache_the_memory_store_is_bounded_by_count_and_size():
    store = MemoryCacheStore(max_count=3, max_size=10, max_entry_size=6)
    value = {"status_code": 200, "status_message": "OK", "headers": {}, "cached_at": 0.0,
             "stale_at": 1e12, "delete_at": 1e12}
    for i in range(5):
        store.set({"origin": "http://a", "method": "GET", "path": f"/{i}"}, {**value, "body": b"ab"})
    assert store.count == 3
    assert [store.get({"origin": "http://a", "method": "GET", "path": f"/{i}"}) is not None for i in range(5)] == [
        False, False, True, True, True]
    store.set({"origin": "http://a", "method": "GET", "path": "/big"}, {**value, "body": b"1234567"})
    assert store.get({"origin": "http://a", "method": "GET", "path": "/big"}) is None
    store.set({"origin": "http://a", "method": "GET", "path": "/six"}, {**value, "body": b"123456"})
    assert store.size <= 10



def _value(**kw):
    return {"status_code": 200, "status_message": "OK", "headers": {}, "cached_at": time.time(),
            "stale_at": 1e12, "delete_at": 1e12, "body": b"ab", **kw}


def test_cache_the_memory_store_evicts_the_least_recently_used():
    store = MemoryCacheStore(max_count=2)
    keys = [{"origin": "http://a", "method": "GET", "path": f"/{i}"} for i in range(3)]
    store.set(keys[0], _value())
    store.set(keys[1], _value())
    assert store.get(keys[0]) is not None  # /0 is now the most recently used
    store.set(keys[2], _value())
    assert [store.get(k) is not None for k in keys] == [True, False, True]


def test_cache_the_sqlite_store_is_bounded_by_max_count_and_purges_expired_rows(tmp_path):
    with SqliteCacheStore(tmp_path / "c.sqlite", max_count=10) as store:
        keys = [{"origin": "http://a", "method": "GET", "path": f"/{i}"} for i in range(12)]
        store.set(keys[0], _value(delete_at=time.time() - 1))  # already expired
        for k in keys[1:]:
            store.set(k, _value())
        assert store.size <= 10
        assert store.get(keys[0]) is None
        assert store.get(keys[11]) is not None  # the newest stays
        store.delete({"origin": "http://a", "method": "HEAD", "path": "/11"})  # every method goes
        assert store.get(keys[11]) is None


# -- dump --------------------------------------------------------------------------------------------


def test_dump_a_bodiless_answer_is_never_too_large(make_server, make_client):
    # RFC 9110 §8.6: the Content-Length of a HEAD response or a 304 is the size the body
    # would have had; there is no body to dump, so no limit is passed.
    def handler(conn):
        while (req := conn.read_request()) is not None:
            status = "304 Not Modified" if req.target == "/nm" else "200 OK"
            conn.send(f"HTTP/1.1 {status}\r\nContent-Length: 5000000\r\n\r\n".encode())

    server = make_server(handler)
    composed = make_client(server.origin).compose(interceptors.dump(max_size=1000))
    r = composed.request(path="/", method="HEAD")
    assert (r.status_code, r.headers["content-length"], r.body.bytes()) == (200, "5000000", b"")
    r = composed.request(path="/nm")
    assert (r.status_code, r.body.bytes()) == (304, b"")
    with pytest.raises(errors.RequestAbortedError, match="larger than max_size"):
        composed.request(path="/")  # a GET's Content-Length is its body's size
    assert server.accepted == 2  # the bodiless answers kept the connection


def test_cache_a_304_without_date_freshens_an_entry_made_stale_by_its_old_date(origin, make_client, store):
    # RFC 9110 §6.6.1: a response without Date is dated when it is received; RFC 9111 §4.3.4:
    # the 304 updates the stored entry, which is then fresh again.
    old = formatdate(time.time() - 100, usegmt=True)

    def reply(req):
        if req.header("if-none-match") == '"e"':
            return "304 Not Modified", [("ETag", '"e"')], b""
        return "200 OK", [("Date", old), ("ETag", '"e"'), ("Cache-Control", "max-age=60")], b"body"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    assert _get(d)[2] == b"body"
    status, headers, body = _get(d)
    assert (status, body) == (200, b"body") and len(server.requests) == 2
    assert int(headers["age"]) < 5 and "warning" not in headers
    assert _get(d)[2] == b"body"
    assert len(server.requests) == 2  # fresh again after the 304


@pytest.mark.parametrize(("kind", "requests_after_second"), [("shared", 1), ("private", 2)])
def test_cache_s_maxage_is_for_shared_caches_only(origin, make_client, store, kind, requests_after_second):
    server = origin(lambda req: ("200 OK", [("Cache-Control", "s-maxage=600, max-age=0"), ("ETag", '"e"')], b"x"))
    d = make_client(server.origin).compose(interceptors.cache(store=store, type=kind))
    _get(d)
    _get(d)
    assert len(server.requests) == requests_after_second


@pytest.mark.parametrize("cc", ["max-age=1, must-revalidate", "s-maxage=1", "max-age=1, proxy-revalidate"])
def test_cache_max_stale_never_overrides_a_shared_no_stale_rule(origin, make_client, store, cc):
    server = origin(lambda req: ("200 OK", [("Cache-Control", cc), ("Age", "10"), ("ETag", '"e"')], b"x"))
    d = make_client(server.origin).compose(interceptors.cache(store=store))
    _get(d)
    _get(d, headers={"cache-control": "max-stale=3600"})
    assert len(server.requests) == 2
    assert server.requests[1].header("if-none-match") == '"e"'  # stored, but validated
    # Nothing usable without asking the origin: only-if-cached gets a 504.
    assert _get(d, headers={"cache-control": "only-if-cached, max-stale=3600"})[0] == 504


def test_cache_inside_redirect_serves_every_hop_from_the_store(origin, make_client, store):
    def reply(req):
        if req.target == "/a":
            return "301 Moved Permanently", [("Location", "/b"), ("Cache-Control", "max-age=600")], b"moved"
        return "200 OK", [("Cache-Control", "max-age=600")], b"final"

    server = origin(reply)
    d = make_client(server.origin).compose(interceptors.redirect(max_redirections=3), interceptors.cache(store=store))
    for _ in range(2):
        r = d.request(path="/a")
        assert (r.status_code, r.body.bytes()) == (200, b"final")
        assert r.context["history"] == [f"{server.origin}/a", f"{server.origin}/b"]
    assert [q.target for q in server.requests] == ["/a", "/b"]


# -- deduplicate -------------------------------------------------------------------------------------


def test_deduplicate_a_query_option_and_the_same_query_in_the_path_are_one_request(make_server, make_client):
    gate = gevent.event.Event()

    def handler(conn):
        while (req := conn.read_request()) is not None:
            gate.wait(5)
            conn.respond(req.target.encode())

    server = make_server(handler)
    d = make_client(server.origin).compose(interceptors.deduplicate())
    results = []

    def one(**kw):
        r = d.request(**kw)
        results.append(r.body.bytes())

    greenlets = [gevent.spawn(one, path="/p", query={"a": "1 2"}), gevent.spawn(one, path="/p?a=1%202"),
                 gevent.spawn(one, path="/p", query={"a": "3"})]
    with gevent.Timeout(5):
        gevent.idle()  # every greenlet has dispatched: the duplicate joined the first
        gate.set()
        gevent.joinall(greenlets, raise_error=True)
    assert sorted(results) == [b"/p?a=1%202", b"/p?a=1%202", b"/p?a=3"]
    assert sorted(q.target for q in server.requests) == ["/p?a=1%202", "/p?a=3"]


def _upstream_statuses():
    """An interceptor recording the statuses that reach it (put it inside the cache)."""
    statuses = []

    class Spy(greenhttp.DecoratorHandler):
        def on_response_start(self, controller, status_code, headers, status_message):
            statuses.append(status_code)
            super().on_response_start(controller, status_code, headers, status_message)

    def interceptor(dispatch):
        return lambda opts, handler: dispatch(opts, Spy(handler))

    return interceptor, statuses


def test_cache_revalidates_against_nginx_with_its_real_validators(nginx, make_client, store):
    spy, statuses = _upstream_statuses()
    d = make_client(nginx.origin).compose(interceptors.cache(store=store), spy)
    first = d.request(path="/")
    assert (first.status_code, first.body.bytes()) == (200, nginx.small)
    etag = first.headers["etag"]
    # max-age=0 forces a validation: nginx answers the conditional request with a 304
    # and the body comes from the store.
    second = d.request(path="/", headers={"cache-control": "max-age=0"})
    assert (second.status_code, second.body.bytes(), second.headers["etag"]) == (200, nginx.small, etag)
    assert second.headers["content-length"] == "100"
    # The client's own precondition, answered after validation.
    third = d.request(path="/", headers={"cache-control": "max-age=0", "if-none-match": etag})
    assert (third.status_code, third.body.bytes()) == (304, b"")
    assert statuses == [200, 304, 304]
