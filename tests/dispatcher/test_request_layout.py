"""Requests keep their attributes in CPython's compact per-instance array.

CPython 3.11 stores an instance's attributes in a small array shared by the
class, but only for names its first instances set: a name first given to
requests after a few were made (a default read from the class, then set for
one request) turns every request that gets it into one with a real ``dict``,
slower to build, read and free. ``Request.__init__`` therefore starts every
name that common requests get (headers, a body, an origin from an Agent, a
timeout) on the instance, in one order. ``gc.get_referents`` shows the
difference: an instance with a real dict refers to that dict. The same
holds for response bodies (``BodyReadable``).
"""

from __future__ import annotations

import gc
from typing import Any

import gevent
import pytest

import greenhttp


class Capture:
    """A dispatch handler that keeps the controller (the request itself)."""

    def __init__(self) -> None:
        self.done = gevent.event.Event()
        self.controller: Any = None
        self.error: BaseException | None = None

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        pass

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        self.controller = controller
        self.done.set()

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        self.error = err
        self.done.set()


def ok(conn: Any) -> None:
    while conn.read_request() is not None:
        conn.respond(b"ok")


def has_real_dict(obj: Any, attribute: str) -> bool:
    """Whether ``obj`` keeps its attributes (``attribute`` among them) in a real dict."""
    return any(type(x) is dict and attribute in x for x in gc.get_referents(obj))


def run(dispatcher: Any, options: dict[str, Any]) -> Any:
    handler = Capture()
    dispatcher.dispatch(options, handler)
    assert handler.done.wait(5) and handler.error is None, handler.error
    return handler.controller


@pytest.mark.parametrize(
    "options",
    [
        {"method": "GET"},
        {"method": "GET", "headers": {"x-trace": "1", "accept": "*/*"}, "headers_timeout": 5},
        {"method": "POST", "body": b"{}", "headers": {"x-trace": "1"}},
        {"method": "PUT", "body": b"abc", "headers_timeout": 5, "idempotent": True, "blocking": False},
    ],
    ids=["plain", "headers", "post", "put-options"],
)
def test_common_requests_keep_their_attributes_compact(make_server, make_client, options):
    server = make_server(ok)
    client = make_client(server.origin)
    for _ in range(40):  # many requests made first: later names find no room
        run(client, {"path": "/", "method": "GET"})
    req = run(client, {"path": "/", **options})
    assert req.method == options["method"]
    assert not has_real_dict(req, "method")


def test_a_request_through_an_agent_keeps_its_attributes_compact(make_server):
    server = make_server(ok)
    agent = greenhttp.Agent()
    try:
        for _ in range(40):
            run(agent, {"origin": server.origin, "path": "/", "method": "GET"})
        req = run(agent, {"origin": server.origin, "path": "/", "method": "GET", "headers": {"x-a": "1"}})
        assert req.origin is not None
        assert not has_real_dict(req, "method")
    finally:
        with gevent.Timeout(5):
            agent.destroy()


def test_a_response_body_read_whole_keeps_its_attributes_compact(make_server, make_client):
    server = make_server(ok)
    client = make_client(server.origin)
    for _ in range(40):
        client.request(path="/").body.bytes()
    body = client.request(path="/").body
    assert body.bytes() == b"ok"
    assert not has_real_dict(body, "_chunks")
