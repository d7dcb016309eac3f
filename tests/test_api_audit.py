"""API.md conformance: the names, signatures, defaults (seconds) and errors it lists,
checked on the live objects; and docs/ naming every public name."""

from __future__ import annotations

import glob
import inspect
import logging
import os
import re
import warnings

import pytest

import greenhttp
from greenhttp import cache_stores, errors, interceptors

_DOCS = os.path.join(os.path.dirname(__file__), os.pardir, "docs")


def _params(fn):
    return inspect.signature(fn).parameters


def _defaults(fn):
    return {
        name: p.default
        for name, p in _params(fn).items()
        if p.default is not inspect.Parameter.empty
    }


def test_docs_name_every_public_name():
    parts = []
    for path in glob.glob(os.path.join(_DOCS, "**", "*.md"), recursive=True):
        with open(path, encoding="utf-8") as f:
            parts.append(f.read())
    text = "".join(parts)
    names = set(greenhttp.__all__) | set(interceptors.__all__) | set(cache_stores.__all__)
    names |= set(errors.__all__)
    missing = sorted(n for n in names if not re.search(r"(?<!\w)" + re.escape(n) + r"\b", text))
    assert missing == []


def test_client_defaults_are_the_spec_defaults_in_seconds():
    c = greenhttp.Client("http://127.0.0.1:1")
    h2c = greenhttp.H2CClient("http://127.0.0.1:1")
    try:
        o = c._opts
        assert (o.body_timeout, o.headers_timeout, o.connect_timeout) == (300.0, 300.0, 10.0)
        assert (o.keep_alive_timeout, o.keep_alive_max_timeout) == (4.0, 600.0)
        assert o.keep_alive_timeout_threshold == 2.0
        assert (o.max_header_size, o.max_response_size, o.pipelining) == (16384, -1, 1)
        assert (o.ping_interval, o.auto_select_family_attempt_timeout) == (60.0, 0.25)
        assert c.pipelining == 1 and not c.closed and not c.destroyed
        o2 = h2c._opts
        assert (o2.keep_alive_timeout_threshold, o2.pipelining) == (1.0, 100)
        assert o2.max_concurrent_streams == 100 and h2c.pipelining == 100
    finally:
        c.close()
        h2c.close()
    assert c.closed


def test_build_connector_signature():
    d = _defaults(greenhttp.build_connector)
    expected = {
        "allow_h2": True,
        "prefer_h2": False,
        "max_cached_sessions": 100,
        "socket_path": None,
        "timeout": 10.0,
        "ssl_context": None,
        "verify": True,
        "keep_alive": True,
        "keep_alive_initial_delay": 60.0,
    }
    assert {k: d[k] for k in expected} == expected
    for name in ("cafile", "capath", "cadata", "certfile", "keyfile", "password",
                 "check_hostname", "minimum_version", "ciphers", "servername"):
        assert name in d and d[name] is None, name
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY or p.kind is inspect.Parameter.VAR_KEYWORD
               for p in _params(greenhttp.build_connector).values())


def test_dispatcher_method_shapes():
    for cls in (greenhttp.Client, greenhttp.H2CClient, greenhttp.Pool, greenhttp.Agent):
        for name in ("request", "stream", "pipeline", "upgrade", "connect", "dispatch",
                     "compose", "close", "destroy", "on", "once", "off", "emit",
                     "listener_count"):
            assert callable(getattr(cls, name, None)), (cls.__name__, name)
        assert "callback" in _params(cls.close), cls.__name__
        assert {"err", "callback"} <= set(_params(cls.destroy)), cls.__name__
        assert _defaults(cls.destroy)["err"] is None
    req = _params(greenhttp.Client.request)
    assert req["method"].default == "GET" and req["callback"].kind is inspect.Parameter.KEYWORD_ONLY
    assert _params(greenhttp.Client.stream)["factory"].kind is inspect.Parameter.KEYWORD_ONLY
    assert _params(greenhttp.Client.pipeline)["handler"].kind is inspect.Parameter.KEYWORD_ONLY
    assert "protocol" in _params(greenhttp.Client.upgrade)
    assert list(_params(greenhttp.Client.dispatch))[1:] == ["options", "handler"]
    assert _defaults(greenhttp.Pool)["connections"] is None


def test_response_and_result_shapes():
    for field in ("status_code", "headers", "trailers", "opaque", "context", "body"):
        assert field in greenhttp.ResponseData.__slots__, field
    assert greenhttp.UpgradeData._fields[:3] == ("headers", "socket", "opaque")
    assert greenhttp.ConnectData._fields[:4] == ("status_code", "headers", "socket", "opaque")
    for name in ("read", "text", "json", "bytes", "array_buffer", "blob", "dump", "close",
                 "__iter__", "__enter__", "__exit__"):
        assert callable(getattr(greenhttp.BodyReadable, name)), name
    assert _defaults(greenhttp.BodyReadable.read)["n"] == -1
    assert "limit" in _params(greenhttp.BodyReadable.dump)
    for name in ("abort", "pause", "resume"):
        assert callable(getattr(greenhttp.Controller, name)), name
    assert {"aborted", "paused", "reason"} <= set(greenhttp.Controller.__annotations__)


def test_websocket_shapes():
    ws = greenhttp.WebSocket
    assert (ws.CONNECTING, ws.OPEN, ws.CLOSING, ws.CLOSED) == (0, 1, 2, 3)
    for name in ("onopen", "onmessage", "onerror", "onclose", "ready_state", "buffered_amount",
                 "binary_type", "extensions", "protocol", "url"):
        assert isinstance(getattr(ws, name), property), name
    assert _defaults(ws.add_event_listener) == {"once": False}
    assert callable(ws.remove_event_listener) and callable(ws.dispatch_event)
    assert _defaults(ws.close) == {"code": None, "reason": ""}
    assert _defaults(greenhttp.WebSocketStream) == {"protocols": None, "signal": None}
    assert _defaults(greenhttp.ping) == {"payload": None}
    err = greenhttp.WebSocketError("bye", {"close_code": 4000, "reason": "x"})
    assert (err.close_code, err.reason, err.name, err.code) == (4000, "x", "WebSocketError",
                                                                "GH_ERR_WEBSOCKET")
    assert isinstance(err, greenhttp.DOMException) and isinstance(err, errors.GreenHTTPError)
    ev = greenhttp.CloseEvent("close", code=1000, reason="r", was_clean=True)
    assert (ev.code, ev.reason, ev.was_clean) == (1000, "r", True)
    assert greenhttp.MessageEvent("message", data="d", origin="o").origin == "o"
    e = greenhttp.ErrorEvent("error", error=err, message="m")
    assert (e.error, e.message) == (err, "m")


def test_headers_class():
    h = greenhttp.Headers([("B", "1"), ("a", "2"), ("b", "3")])
    assert list(h) == [("a", "2"), ("b", "1, 3")]
    assert h.get("B") == "1, 3" and h.has("A")
    h.set("a", "9")
    h.delete("b")
    h.append("set-cookie", "x=1")
    h.append("set-cookie", "y=2")
    assert h.get_set_cookie() == ["x=1", "y=2"]
    assert not h.has("b") and h.get("a") == "9"


def test_abort_signal_timeout_is_in_seconds():
    import gevent

    s = greenhttp.AbortSignal.timeout(0.05)
    assert not s.aborted
    with gevent.Timeout(2):
        while not s.aborted:
            gevent.sleep(0.01)
    assert isinstance(s.reason, greenhttp.DOMException) and s.reason.name == "TimeoutError"
    a = greenhttp.AbortSignal.abort("why")
    assert a.aborted and a.reason == "why"
    with pytest.raises(errors.AbortError, match="why"):
        a.throw_if_aborted()
    c = greenhttp.AbortController()
    assert _defaults(type(c.signal).add_event_listener) == {"once": False}


def test_interceptor_defaults():
    assert _defaults(interceptors.dns) == {
        "max_ttl": 0, "max_items": float("inf"), "dual_stack": True, "affinity": None,
        "lookup": None, "pick": None, "storage": None,
    }
    assert _defaults(interceptors.decompress)["skip_status_codes"] == (204, 304)
    assert _defaults(interceptors.decompress)["skip_error_responses"] is True
    assert _defaults(interceptors.redirect)["throw_on_max_redirect"] is False
    assert _defaults(interceptors.deduplicate)["methods"] == ("GET",)
    assert callable(interceptors.cache) and callable(interceptors.response_error)
    assert isinstance(cache_stores.MemoryCacheStore(), cache_stores.MemoryCacheStore)


def test_error_classes_and_warning():
    assert errors.ConnectTimeoutError.code == "GH_ERR_CONNECT_TIMEOUT"
    assert errors.HeadersTimeoutError.code == "GH_ERR_HEADERS_TIMEOUT"
    assert errors.SocketError.code == "GH_ERR_SOCKET"
    assert not issubclass(greenhttp.DOMException, SyntaxError)
    assert greenhttp.DOMException("m", "SyntaxError").name == "SyntaxError"
    assert issubclass(greenhttp.ExperimentalWarning, Warning)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn(greenhttp.ExperimentalWarning("x", code="GREENHTTP-WSS"), stacklevel=1)
    assert caught[0].message.code == "GREENHTTP-WSS"
    for name in ("greenhttp", "greenhttp.fetch", "greenhttp.websocket"):
        assert logging.getLogger(name).name == name


def test_websocket_stream_promises_are_async_results(monkeypatch):
    import gevent.event

    from greenhttp._websocket import stream as stream_module

    monkeypatch.setattr(stream_module, "_warned", True)
    s = greenhttp.WebSocketStream("ws://127.0.0.1:1/")  # nothing listens: it never opens
    assert isinstance(s.opened, gevent.event.AsyncResult)
    assert isinstance(s.closed, gevent.event.AsyncResult)
    linked = gevent.event.Event()
    s.closed.rawlink(lambda result: linked.set())
    with pytest.raises(greenhttp.WebSocketError, match="never opened"):
        s.opened.get(timeout=5)
    assert linked.wait(5) and s.closed.ready()


def test_retry_and_store_defaults_in_seconds_and_bytes():
    from greenhttp._core.retry import RetryOptions

    o = RetryOptions()
    assert (o.max_retries, o.min_timeout, o.max_timeout, o.timeout_factor) == (5, 0.5, 30.0, 2.0)
    assert o.retry_after is True and o.throw_on_error is True
    assert o.methods == {"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE", "QUERY"}
    assert o.status_codes == {500, 502, 503, 504, 429}
    assert o.error_codes == {
        "ECONNRESET", "ECONNREFUSED", "ENOTFOUND", "ENETDOWN", "ENETUNREACH", "EHOSTDOWN",
        "EHOSTUNREACH", "EPIPE", "GH_ERR_SOCKET",
    }
    assert _defaults(interceptors.dump) == {"max_size": 1048576}
    assert _defaults(interceptors.deduplicate)["max_buffer_size"] == 5 * 1024 * 1024
    assert _defaults(cache_stores.MemoryCacheStore) == {
        "max_count": 1024, "max_size": 104857600, "max_entry_size": 5242880,
    }


@pytest.mark.parametrize("seconds", [-1, -0.5, float("nan"), float("inf"), "1", None, True])
def test_abort_signal_timeout_refuses_what_is_not_seconds(seconds):
    with pytest.raises(TypeError):
        greenhttp.AbortSignal.timeout(seconds)


def test_abort_signal_timeout_zero_aborts_at_once():
    import gevent

    s = greenhttp.AbortSignal.timeout(0)
    with gevent.Timeout(2):
        while not s.aborted:
            gevent.sleep(0.001)
    assert s.reason.name == "TimeoutError"
