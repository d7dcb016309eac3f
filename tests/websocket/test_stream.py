"""WebSocketStream (experimental) and its use of WebSocketError."""

from __future__ import annotations

import pickle

import gevent
import pytest
from wsutil import close_frame, frame

import greenhttp
from greenhttp import AbortController, DOMException, WebSocketError, WebSocketStream
from greenhttp._websocket import stream as stream_module


def wait_until(predicate, timeout=5.0):
    """Yield to gevent until ``predicate()`` holds (bounded)."""
    with gevent.Timeout(timeout):
        while not predicate():
            gevent.sleep(0.002)


@pytest.fixture(autouse=True)
def warned(monkeypatch):
    """The one-time warning is the subject of one test; the others start after it."""
    monkeypatch.setattr(stream_module, "_warned", True)


def test_experimental_warning_once_per_process(ws_server, monkeypatch):
    monkeypatch.setattr(stream_module, "_warned", False)
    server = ws_server()
    with pytest.warns(greenhttp.ExperimentalWarning, match="experimental.*GREENHTTP-WSS") as caught:
        s = WebSocketStream(server.url())
    assert [w.message.code for w in caught] == ["GREENHTTP-WSS"]
    s2 = WebSocketStream(server.url())  # no second warning (filterwarnings=error would raise)
    for one in (s, s2):
        one.opened.get(timeout=5)
        one.close()
        one.closed.get(timeout=5)


def test_echo_through_readable_and_writable(ws_server):
    def script(peer):
        while True:
            f = peer.read_frame()
            if f.opcode == 8:
                peer.send(frame(8, f.payload))
                peer.conn.close()
                return
            peer.send(frame(f.opcode, f.payload))

    server = ws_server(script, extensions="permessage-deflate", protocol="chat")
    s = WebSocketStream(server.url(), protocols=["chat"])
    assert s.url == server.url()
    opened = s.opened.get(timeout=5)
    assert (opened.protocol, opened.extensions) == ("chat", "permessage-deflate")
    opened.writable.write("text")
    opened.writable.write(b"bytes")
    opened.writable.write(bytearray(b"ba"))
    assert [opened.readable.read() for _ in range(3)] == ["text", b"bytes", b"ba"]
    with pytest.raises(TypeError):
        opened.writable.write(3)
    s.close({"close_code": 4000, "reason": "done"})
    info = s.closed.get(timeout=5)
    assert info == {"close_code": 4000, "reason": "done"}
    assert (info.close_code, info.reason) == (4000, "done")
    assert opened.readable.read() is None  # ended cleanly
    with pytest.raises(DOMException) as exc:
        opened.writable.write("late")
    assert exc.value.name == "InvalidStateError"


def test_readable_iteration_ends_on_a_clean_close(ws_server):
    def script(peer):
        for i in range(5):
            peer.send(frame(1, str(i).encode()))
        peer.send(close_frame(1000, b"all sent"))
        peer.expect_close()
        peer.conn.close()

    server = ws_server(script)
    s = WebSocketStream(server.url())
    opened = s.opened.get(timeout=5)
    with gevent.Timeout(5):
        assert list(opened.readable) == ["0", "1", "2", "3", "4"]
    assert s.closed.get(timeout=5) == {"close_code": 1000, "reason": "all sent"}


def test_close_without_info_sends_no_code(ws_server):
    got = []

    def script(peer):
        got.append(peer.answer_close().payload)

    server = ws_server(script)
    s = WebSocketStream(server.url(), {"protocols": []})
    s.opened.get(timeout=5)
    s.close()
    assert s.closed.get(timeout=5) == {"close_code": 1005, "reason": ""}
    assert got == [b""]


@pytest.mark.parametrize(
    ("info", "error"),
    [
        ({"close_code": 1001}, DOMException),
        ({"close_code": 70000}, TypeError),  # [EnforceRange]
        ({"close_code": 1000, "reason": "x" * 124}, DOMException),
        ({"code": 1000}, TypeError),
    ],
)
def test_close_info_is_checked(ws_server, info, error):
    server = ws_server()
    s = WebSocketStream(server.url())
    s.opened.get(timeout=5)
    with pytest.raises(error):
        s.close(info)
    s.close({"reason": "only a reason"})  # means 1000
    assert s.closed.get(timeout=5) == {"close_code": 1000, "reason": "only a reason"}


def test_unclean_close_rejects_closed_and_errors_the_readable(ws_server):
    def script(peer):
        peer.send(frame(1, b"partial"))
        peer.conn.close()

    server = ws_server(script)
    s = WebSocketStream(server.url())
    opened = s.opened.get(timeout=5)
    with pytest.raises(WebSocketError) as info:
        s.closed.get(timeout=5)
    assert (info.value.close_code, info.value.message) == (1006, "unclean close")
    assert opened.readable.read() == "partial"
    with pytest.raises(WebSocketError):
        opened.readable.read()


def never_opened(s):
    """``opened`` and ``closed`` of a stream that never opened, as undici rejects
    them (websocketstream.js, onSocketClose): the errors, checked."""
    with pytest.raises(WebSocketError) as opened:
        s.opened.get(timeout=5)
    with pytest.raises(WebSocketError) as closed:
        s.closed.get(timeout=5)
    never, unclean = opened.value, closed.value
    assert (never.name, never.message, never.close_code, never.reason) == (
        "WebSocketError",
        "Socket never opened",
        None,
        "",
    )
    assert (unclean.name, unclean.message, unclean.close_code, unclean.reason) == (
        "WebSocketError",
        "unclean close",
        1006,
        "",
    )
    return never, unclean


def test_never_opened(ws_server):
    server = ws_server(response=lambda req: b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    never_opened(WebSocketStream(server.url()))


def test_closed_before_it_opened(make_server):
    server = make_server(lambda conn: conn.read_request() and conn.wait_closed())  # no answer
    s = WebSocketStream(f"ws://127.0.0.1:{server.port}/")
    s.close()
    never_opened(s)


@pytest.mark.parametrize("when", ["at once", "in flight"])
def test_signal_aborts_the_handshake(ws_server, when):
    """undici test/websocket/stream/abort-before-open.js: the signal aborted after the
    stream was made (not before) fails the handshake as any failure does; the
    signal's reason is only the cause."""
    gate = gevent.event.Event()

    def response(req):
        gate.wait(5)  # the server never answers in time
        return b"HTTP/1.1 500 Late\r\nContent-Length: 0\r\n\r\n"

    server = ws_server(response=response)
    controller = AbortController()
    s = WebSocketStream(server.url(), signal=controller.signal)
    if when == "in flight":
        wait_until(lambda: server.server.requests)
    reason = RuntimeError("abort before open")
    controller.abort(reason)
    never, unclean = never_opened(s)
    causes = []
    error: BaseException | None = never
    while error is not None:
        causes.append(error)
        error = error.__cause__
    assert reason in causes
    gate.set()


def test_an_aborted_signal_never_connects(ws_server):
    server = ws_server()
    controller = AbortController()
    controller.abort()
    s = WebSocketStream(server.url(), signal=controller.signal)
    with pytest.raises(DOMException) as info:
        s.opened.get(timeout=1)
    assert info.value.name == "AbortError"
    assert server.server.accepted == 0


def test_cancel_and_abort_close_with_the_error_code(ws_server):
    got = []

    def script(peer):
        got.append(peer.answer_close().payload)

    server = ws_server(script)
    s = WebSocketStream(server.url())
    opened = s.opened.get(timeout=5)
    opened.readable.cancel(WebSocketError("stop", {"close_code": 4001, "reason": "enough"}))
    assert s.closed.get(timeout=5) == {"close_code": 4001, "reason": "enough"}
    assert got == [b"\x0f\xa1enough"]

    server2 = ws_server(script)
    s2 = WebSocketStream(server2.url())
    s2.opened.get(timeout=5).writable.abort(ValueError("not a WebSocketError"))
    assert s2.closed.get(timeout=5) == {"close_code": 1005, "reason": ""}
    assert got[1] == b""


def test_readable_back_pressure_stops_reading(ws_server):
    """The consumer reads nothing: the session holds at most HIGH_WATER_MARK messages
    and stops reading the socket; the server's writes then stall."""
    progress = []

    def script(peer):
        for i in range(2000):
            peer.send(frame(2, b"m" * 16384))
            progress.append(i)
        peer.answer_close()

    server = ws_server(script)
    s = WebSocketStream(server.url())
    opened = s.opened.get(timeout=5)
    items = opened.readable._items
    wait_until(lambda: len(items) == stream_module.HIGH_WATER_MARK)
    gevent.sleep(0.1)  # and no more come
    assert len(items) == stream_module.HIGH_WATER_MARK
    assert len(progress) < 2000  # the server is blocked by TCP flow control
    with gevent.Timeout(10):
        for _ in range(2000):
            assert opened.readable.read() == b"m" * 16384
    s.close()
    assert s.closed.get(timeout=5)["close_code"] == 1005


def test_close_releases_a_reader_held_by_back_pressure(ws_server):
    def script(peer):
        for _ in range(100):
            peer.send(frame(1, b"x"))
        peer.answer_close()

    server = ws_server(script)
    s = WebSocketStream(server.url())
    opened = s.opened.get(timeout=5)
    wait_until(lambda: len(opened.readable._items) == stream_module.HIGH_WATER_MARK)
    s.close({"close_code": 1000})
    assert s.closed.get(timeout=5)["close_code"] == 1000


def test_a_write_waiting_for_the_network_fails_when_the_connection_drops(ws_server):
    release = gevent.event.Event()

    def script(peer):
        release.wait(5)  # read nothing: the client's write cannot finish
        peer.conn.close()

    server = ws_server(script)
    s = WebSocketStream(server.url())
    opened = s.opened.get(timeout=5)
    writer = gevent.spawn(opened.writable.write, b"w" * (32 << 20))
    wait_until(lambda: s._session._wqueue)  # the kernel's buffers are full: queued
    gevent.sleep(0.05)
    assert not writer.ready()  # and the writer waits for the network
    release.set()
    with pytest.raises(WebSocketError):
        writer.get(timeout=5)
    with pytest.raises(WebSocketError):
        s.closed.get(timeout=5)


@pytest.mark.parametrize("init", [{"closeCode": 4000}, {"close_code": 4000, "bogus": 1}])
def test_websocket_error_refuses_an_unknown_init_field(init):
    # A misspelt field is refused (docs/errors.md), as close() refuses one,
    # rather than silently making an error with no close code.
    with pytest.raises(TypeError, match="unknown WebSocketError init field"):
        WebSocketError("x", init)


def test_a_websocket_errors_close_code_and_reason_are_read_only_and_survive_pickling(ws_server):
    # Spec 2.7: closeCode and reason are read-only, on one made by the user and on one
    # the library reports (whose code, 1006 here, the constructor would refuse).
    def script(peer):
        peer.conn.close()

    made = WebSocketError("mine", {"close_code": 4000, "reason": "r"})
    s = WebSocketStream(ws_server(script).url())
    s.opened.get(timeout=5)
    with pytest.raises(WebSocketError) as info:
        s.closed.get(timeout=5)
    reported = info.value
    assert (reported.close_code, reported.reason) == (1006, "")
    for err, fields in ((made, (4000, "r")), (reported, (1006, ""))):
        with pytest.raises(AttributeError):
            err.close_code = 5
        with pytest.raises(AttributeError):
            err.reason = "other"
        assert (err.close_code, err.reason) == fields
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is WebSocketError
        assert (again.close_code, again.reason, again.message, again.name) == (*fields, err.message, "WebSocketError")


@pytest.mark.parametrize("info", ["x", "ab", 5, [("close_code", 1000)]])
def test_close_info_that_is_not_a_dict_is_a_type_error(ws_server, info):
    # Not a ValueError from dict("x"), nor a list of pairs taken as a dict.
    server = ws_server()
    s = WebSocketStream(server.url())
    s.opened.get(timeout=5)
    with pytest.raises(TypeError, match="close_info must be a dict"):
        s.close(info)
    s.close()
    assert s.closed.get(timeout=5) == {"close_code": 1005, "reason": ""}


def test_read_after_cancel_ends_at_once(ws_server):
    # A cancelled readable is ended (WHATWG streams): read() does not wait for the
    # closing handshake, which this server holds open for a second.
    release = gevent.event.Event()

    def script(peer):
        peer.send(frame(1, b"unread"))
        got = peer.expect_close()
        release.wait(5)
        peer.send(frame(8, got.payload))
        peer.conn.close()

    server = ws_server(script)
    s = WebSocketStream(server.url())
    opened = s.opened.get(timeout=5)
    wait_until(lambda: opened.readable._items)
    opened.readable.cancel()
    try:
        with gevent.Timeout(0.5, AssertionError("read() waited for the close")):
            assert opened.readable.read() is None
            assert list(opened.readable) == []
    finally:
        release.set()
    assert s.closed.get(timeout=5) == {"close_code": 1005, "reason": ""}


def test_opened_closed_and_url_are_read_only(ws_server):
    # WHATWG: readonly attributes. Before, assigning opened while the handshake ran
    # broke the connection's greenlet, which then dropped the TCP connection.
    server = ws_server()
    s = WebSocketStream(server.url())
    opened, closed = s.opened, s.closed
    for name in ("opened", "closed", "url"):
        with pytest.raises(AttributeError):
            setattr(s, name, None)
    assert (s.opened, s.closed) == (opened, closed)
    s.opened.get(timeout=5)
    s.close()
    assert s.closed.get(timeout=5) == {"close_code": 1005, "reason": ""}


def test_an_open_stream_lets_go_of_the_signal_it_no_longer_heeds(ws_server):
    # The signal aborts the handshake only: once open, a stream keeps no listener on it
    # (twenty streams sharing one controller held twenty until they closed).
    server = ws_server()
    controller = AbortController()
    streams = [WebSocketStream(server.url(), signal=controller.signal) for _ in range(5)]
    for s in streams:
        s.opened.get(timeout=5)
    assert not controller.signal._listeners
    controller.abort()  # does nothing to open streams
    for s in streams:
        s.close()
        assert s.closed.get(timeout=5) == {"close_code": 1005, "reason": ""}
