"""Compose order (spec 3.3), the spec's whole interceptor chain on one request, and 1xx pass-through."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from greenhttp import errors, interceptors
from greenhttp.errors import ExperimentalWarning


def _decompress(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return interceptors.decompress(**kw)


def _recording(name, log):
    """An interceptor that logs when it sees the request and the response head."""

    def interceptor(dispatch):
        def intercept(opts, handler):
            log.append(("request", name))

            class Wrapped:
                def __getattr__(self, attr):
                    return getattr(handler, attr)

                def on_response_start(self, controller, status_code, headers, status_message):
                    log.append(("response", name))
                    handler.on_response_start(controller, status_code, headers, status_message)

            return dispatch(opts, Wrapped())

        return intercept

    return interceptor


def test_first_interceptor_is_outermost(routes, make_client):
    server = routes({"/": lambda conn, req: conn.respond(b"ok")})
    log = []
    client = make_client(server.origin)
    composed = client.compose(_recording("a", log), _recording("b", log), _recording("c", log))
    assert composed.request(path="/").body.text() == "ok"
    assert log == [
        ("request", "a"),
        ("request", "b"),
        ("request", "c"),
        ("response", "c"),
        ("response", "b"),
        ("response", "a"),
    ]
    # A list is the same as the arguments.
    log.clear()
    client.compose([_recording("x", log), _recording("y", log)]).request(path="/").body.dump()
    assert log == [("request", "x"), ("request", "y"), ("response", "y"), ("response", "x")]


def _always_503(conn, req):
    conn.respond(b"busy", status="503 Service Unavailable", headers=[("Retry-After", "0")])


def test_retry_outside_response_error_retries_the_response_error(routes, make_client):
    server = routes({"/": _always_503})
    client = make_client(server.origin)
    composed = client.compose(interceptors.retry(max_retries=2), interceptors.response_error())
    with pytest.raises(errors.ResponseError) as info:
        composed.request(path="/")
    assert info.value.status_code == 503
    assert info.value.body == ""
    assert len(server.requests) == 3  # the first attempt and two retries
    assert server.accepted == 1  # error bodies were read: one keep-alive connection throughout


def test_response_error_outside_retry_sees_only_the_retry_error(routes, make_client):
    server = routes({"/": _always_503})
    client = make_client(server.origin)
    composed = client.compose(interceptors.response_error(), interceptors.retry(max_retries=1))
    with pytest.raises(errors.RequestRetryError) as info:
        composed.request(path="/")
    assert info.value.status_code == 503
    assert info.value.data == {"count": 2}
    assert len(server.requests) == 2


def _spec_chain(**redirect_options):
    chain = []
    dns = getattr(interceptors, "dns", None)
    if dns is not None:  # written in another issue; the spec's chain starts with it
        chain.append(dns())
    chain += [
        interceptors.retry(min_timeout=0.01),
        interceptors.redirect(**redirect_options),
        _decompress(),
        interceptors.response_error(),
    ]
    return chain


def test_the_spec_chain_on_one_request_across_two_origins(routes, make_agent):
    payload = {"items": list(range(500)), "name": "ünïcode"}
    attempts = []

    def data(conn, req):
        attempts.append(req)
        if len(attempts) == 1:
            conn.respond(b"try later", status="503 Service Unavailable", headers=[("Retry-After", "0")])
        else:
            body = gzip.compress(json.dumps(payload).encode())
            conn.respond(body, headers=[("Content-Type", "application/json"), ("Content-Encoding", "gzip")])

    b = routes({"/data?x=1": data})
    a = routes({"/start": lambda conn, req: conn.respond(
        b"", status="302 Found", headers=[("Location", f"{b.origin}/data?x=1")])})
    agent = make_agent()
    composed = agent.compose(*_spec_chain(max_redirections=3))
    r = composed.request(
        origin=a.origin, path="/start", headers={"authorization": "Bearer secret", "x-trace": "1"}
    )
    assert r.status_code == 200
    assert r.body.json() == payload
    assert "content-encoding" not in r.headers and "content-length" not in r.headers
    assert r.context["history"] == [f"{a.origin}/start", f"{b.origin}/data?x=1"]
    # retry is outside redirect: the 503 sent the whole request round again, from origin A.
    assert [q.target for q in a.requests] == ["/start", "/start"]
    assert [q.target for q in b.requests] == ["/data?x=1", "/data?x=1"]
    assert all(q.header("authorization") == "Bearer secret" for q in a.requests)
    assert all(q.header("authorization") is None for q in b.requests)  # dropped across origins
    assert all(q.header("x-trace") == "1" for q in b.requests)


def test_the_spec_chain_ends_in_response_error_with_the_body(routes, make_agent):
    problem = {"type": "about:blank", "title": "nope"}
    server = routes({"/": lambda conn, req: conn.respond(
        json.dumps(problem).encode(), status="422 Unprocessable Content",
        headers=[("Content-Type", "application/problem+json")])})
    composed = make_agent().compose(*_spec_chain(max_redirections=3))
    with pytest.raises(errors.ResponseError) as info:
        composed.request(origin=server.origin, path="/")
    assert info.value.status_code == info.value.status == 422
    assert info.value.body == problem
    assert len(server.requests) == 1  # 422 is not a retryable status


EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"


def test_interim_responses_pass_through_every_interceptor(routes, make_client):
    def hop(conn, req):
        conn.send(EARLY_HINTS)
        conn.respond(b"", status="302 Found", headers=[("Location", "/final")])

    def final(conn, req):
        conn.send(EARLY_HINTS)
        conn.respond(gzip.compress(b"decoded"), headers=[("Content-Encoding", "gzip")])

    server = routes({"/hop": hop, "/final": final})
    client = make_client(server.origin)
    composed = client.compose(
        interceptors.retry(),
        interceptors.redirect(max_redirections=2),
        _decompress(),
        interceptors.response_error(),
        interceptors.dump(max_size=1000),
    )
    infos = []
    r = composed.request(path="/hop", on_info=infos.append)
    assert r.status_code == 200
    assert r.body.bytes() == b""  # dump is innermost here: the body was read and dropped
    assert [i["status_code"] for i in infos] == [103, 103]
    assert infos[0]["headers"]["link"] == "</s.css>; rel=preload"

    composed = client.compose(
        interceptors.retry(), interceptors.redirect(max_redirections=2), _decompress(), interceptors.response_error()
    )
    infos.clear()
    r = composed.request(path="/hop", on_info=infos.append)
    assert r.body.bytes() == b"decoded"
    assert [i["status_code"] for i in infos] == [103, 103]


def test_the_example_runs():
    script = Path(__file__).resolve().parents[2] / "examples" / "interceptors.py"
    done = subprocess.run(
        [sys.executable, "-W", "error", str(script)], capture_output=True, text=True, timeout=50, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "ResponseError 404" in done.stdout
