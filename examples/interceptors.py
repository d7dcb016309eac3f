"""The built-in interceptors, composed the way spec 3.3 orders them.

Starts its own loopback server (gevent's WSGIServer on 127.0.0.1) with a few
routes that misbehave on purpose, then sends requests through

    client.compose(retry(), redirect(), decompress(), response_error())

and shows what each interceptor did: ``/old`` redirects to ``/report``, which
fails with 503 once and then answers with gzip-compressed JSON; ``/missing``
answers 404 with a JSON problem; ``/ping`` goes through ``dump()``. Finally a
custom interceptor shows how to write one. Exits 0 when every check holds.

    python examples/interceptors.py
"""

from __future__ import annotations

import gzip
import json
import sys
import warnings
from typing import Any

from gevent.pywsgi import WSGIServer

import greenhttp
from greenhttp import errors, interceptors

attempts = {"/report": 0}


def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    path = environ["PATH_INFO"]
    if path == "/old":
        start_response("301 Moved Permanently", [("Location", "/report")])
        return [b""]
    if path == "/report":
        attempts["/report"] += 1
        if attempts["/report"] == 1:  # the first attempt fails: retry() tries again
            start_response("503 Service Unavailable", [("Retry-After", "0")])
            return [b"busy"]
        body = gzip.compress(json.dumps({"total": 42, "items": list(range(10))}).encode())
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Encoding", "gzip")])
        return [body]
    if path == "/missing":
        start_response("404 Not Found", [("Content-Type", "application/problem+json")])
        return [json.dumps({"title": "no such report"}).encode()]
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"pong " * 1000]


def timing(log: list[str]) -> Any:
    """A custom interceptor: logs each request and the status it got.

    An interceptor is ``interceptor(dispatch) -> dispatch``; it wraps the
    handler in a ``DecoratorHandler`` that overrides what it watches.
    """

    def interceptor(dispatch: Any) -> Any:
        def log_dispatch(opts: dict[str, Any], handler: Any) -> bool:
            class Logged(greenhttp.DecoratorHandler):
                def on_response_start(self, controller, status_code, headers, status_message):
                    log.append(f"{opts['method']} {opts['path']} -> {status_code}")
                    super().on_response_start(controller, status_code, headers, status_message)

            return dispatch(opts, Logged(handler))

        return log_dispatch

    return interceptor


def main() -> int:
    server = WSGIServer(("127.0.0.1", 0), app, log=None)
    server.start()
    origin = f"http://127.0.0.1:{server.server_port}"
    log: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", greenhttp.ExperimentalWarning)  # decompress is experimental
        decompress = interceptors.decompress()
    try:
        with greenhttp.Client(origin) as client:
            api = client.compose(
                timing(log),  # outermost: sees only what the others finally deliver
                interceptors.retry(max_retries=2, min_timeout=0.1),
                interceptors.redirect(max_redirections=3),
                decompress,
                interceptors.response_error(),
            )
            r = api.request(path="/old")
            report = r.body.json()
            print("status", r.status_code, "report", report)
            print("history", r.context["history"])
            assert report["total"] == 42 and attempts["/report"] == 2
            assert "content-encoding" not in r.headers

            try:
                api.request(path="/missing")
            except errors.ResponseError as err:
                print("ResponseError", err.status_code, err.body)
                assert err.body == {"title": "no such report"}
            else:
                raise AssertionError("/missing should have failed")

            quiet = client.compose(interceptors.dump(max_size=64 * 1024))
            r = quiet.request(path="/ping")
            print("dumped", r.status_code, repr(r.body.bytes()))
            print("log", log)
            assert log[0].endswith("-> 200")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
