"""The greenlet-safe EventTarget, the event classes, and WebSocket's on* properties."""

from __future__ import annotations

import logging
import time

import gevent
import pytest
from wsutil import frame

from greenhttp import CloseEvent, ErrorEvent, MessageEvent, WebSocket
from greenhttp._event_target import Event, EventTarget


def test_listeners_run_in_order_once_and_removable():
    target = EventTarget()
    calls = []
    a = lambda ev: calls.append(("a", ev.type))  # noqa: E731
    b = lambda ev: calls.append(("b", ev.type))  # noqa: E731
    target.add_event_listener("x", a)
    target.add_event_listener("x", a)  # the same listener twice: one registration
    target.add_event_listener("x", b, once=True)
    target.dispatch_event(Event("x"))
    target.dispatch_event(Event("x"))
    target.remove_event_listener("x", a)
    target.dispatch_event(Event("x"))
    assert calls == [("a", "x"), ("b", "x"), ("a", "x")]


def test_event_target_and_current_target():
    target = EventTarget()
    seen = []
    target.add_event_listener("x", lambda ev: seen.append((ev.target, ev.current_target)))
    ev = Event("x")
    assert target.dispatch_event(ev) is True
    assert seen == [(target, target)]
    assert ev.target is target and ev.current_target is None


def test_a_raising_listener_is_logged_and_the_next_one_runs(caplog):
    target = EventTarget()
    calls = []

    def bad(ev):
        raise RuntimeError("boom")

    target.add_event_listener("x", bad)
    target.add_event_listener("x", lambda ev: calls.append(ev.type))
    with caplog.at_level(logging.ERROR, logger="greenhttp"):
        target.dispatch_event(Event("x"))
    assert calls == ["x"]
    assert "boom" in caplog.text


def test_removal_during_dispatch_and_stop_immediate_propagation():
    target = EventTarget()
    calls = []

    def first(ev):
        calls.append(1)
        target.remove_event_listener("x", second)

    def second(ev):
        calls.append(2)

    target.add_event_listener("x", first)
    target.add_event_listener("x", second)
    target.dispatch_event(Event("x"))
    assert calls == [1]

    def stopper(ev):
        calls.append("stop")
        ev.stop_immediate_propagation()

    target.add_event_listener("y", stopper)
    target.add_event_listener("y", lambda ev: calls.append("never"))
    target.dispatch_event(Event("y"))
    assert calls == [1, "stop"]


def test_handle_event_objects_and_bad_listeners():
    target = EventTarget()

    class Handler:
        def __init__(self):
            self.seen = []

        def handle_event(self, ev):
            self.seen.append(ev.type)

    h = Handler()
    target.add_event_listener("x", h)
    target.dispatch_event(Event("x"))
    assert h.seen == ["x"]
    with pytest.raises(TypeError):
        target.add_event_listener("x", 42)
    target.add_event_listener("x", None)  # the DOM ignores a null listener


def test_handler_property_keeps_its_slot(ws_server):
    server = ws_server()
    ws = WebSocket(server.url())
    calls = []
    ws.add_event_listener("message", lambda ev: calls.append("first"))
    ws.onmessage = lambda ev: calls.append("handler")
    ws.add_event_listener("message", lambda ev: calls.append("last"))
    replacement = lambda ev: calls.append("replaced")  # noqa: E731
    ws.onmessage = replacement  # same slot, new function
    assert ws.onmessage is replacement
    ws.dispatch_event(MessageEvent("message", data="x"))
    assert calls == ["first", "replaced", "last"]
    ws.onmessage = None
    assert ws.onmessage is None
    calls.clear()
    ws.dispatch_event(MessageEvent("message", data="x"))
    assert calls == ["first", "last"]
    ws.close()


def test_event_classes():
    m = MessageEvent("message", data=b"x", origin="ws://h")
    assert (m.type, m.data, m.origin, m.last_event_id, m.source, m.ports) == (
        "message",
        b"x",
        "ws://h",
        "",
        None,
        [],
    )
    assert MessageEvent("message", {"data": "y"}).data == "y"
    c = CloseEvent("close", {"code": 1000, "reason": "r"}, was_clean=True)
    assert (c.code, c.reason, c.was_clean) == (1000, "r", True)
    assert (CloseEvent("close").code, CloseEvent("close").was_clean) == (0, False)
    err = ValueError("e")
    e = ErrorEvent("error", error=err, message="m")
    assert (e.error, e.message, e.filename, e.lineno, e.colno) == (err, "m", "", 0, 0)
    assert not (m.bubbles or m.cancelable or m.composed)
    with pytest.raises(TypeError):
        CloseEvent("close", wasClean=True)
    assert "1000" in repr(c)


def test_all_four_handlers_fire(ws_server):
    def script(peer):
        peer.send(frame(1, b"hello"))
        peer.conn.close()  # no close frame: error, then close

    server = ws_server(script)
    ws = WebSocket(server.url())
    got = []
    done = gevent.event.Event()
    ws.onopen = lambda ev: got.append(("open", ws.ready_state))
    ws.onmessage = lambda ev: got.append(("message", ev.data))
    ws.onerror = lambda ev: got.append(("error", ws.ready_state))
    ws.onclose = lambda ev: (got.append(("close", ev.code)), done.set())
    assert done.wait(5)
    assert got == [("open", 1), ("message", "hello"), ("error", 3), ("close", 1006)]


def test_a_listener_that_raises_does_not_break_the_connection(ws_server, record):
    def script(peer):
        peer.send(frame(1, b"one") + frame(1, b"two"))
        peer.answer_close()

    server = ws_server(script)
    ws = WebSocket(server.url())
    ws.onmessage = lambda ev: 1 / 0
    rec = record(ws)
    with gevent.Timeout(5):
        while len(rec.messages) < 2:
            gevent.sleep(0.002)
    ws.close()
    assert rec.wait_closed().was_clean
    assert rec.messages == ["one", "two"]


def test_listeners_may_send_and_close_from_the_reader(ws_server, record):
    """An echo written inside onmessage: send() never blocks the reader greenlet."""
    echoed = []

    def script(peer):
        for i in range(50):
            peer.send(frame(1, str(i).encode()))
        for _ in range(50):
            echoed.append(peer.read_frame().payload.decode())
        peer.answer_close()

    server = ws_server(script)
    ws = WebSocket(server.url())

    def onmessage(ev):
        ws.send(ev.data)
        if ev.data == "49":
            ws.close(1000)

    ws.onmessage = onmessage
    rec = record(ws)
    assert rec.wait_closed().was_clean
    assert echoed == [str(i) for i in range(50)]


# -- AbortSignal is an EventTarget with the same rules (DOM §2.7) -------------------------


def test_abort_signal_listeners_follow_the_dom_rules():
    from greenhttp import AbortController

    controller = AbortController()
    signal = controller.signal
    calls = []

    class Listener:
        def handle_event(self, ev):
            calls.append(("object", ev.type, ev.target is signal, ev.current_target is signal))

    def first(ev):
        calls.append("first")
        signal.remove_event_listener("abort", removed)  # an earlier listener removes a later one

    def removed(ev):
        calls.append("removed")

    def twice(ev):
        calls.append("twice")

    signal.add_event_listener("abort", first)
    signal.onabort = lambda ev: calls.append("onabort")  # its place is where it was first set
    signal.add_event_listener("abort", removed)
    signal.add_event_listener("abort", twice)
    signal.add_event_listener("abort", twice)  # added twice: runs once
    signal.add_event_listener("abort", Listener())
    controller.abort()
    controller.abort()  # once only
    assert calls == ["first", "onabort", "twice", ("object", "abort", True, True)]
    assert not signal._listeners  # nothing kept after the abort


def test_abort_event_carries_the_event_fields():
    from greenhttp import AbortController

    controller = AbortController()
    seen = []
    controller.signal.add_event_listener("abort", seen.append)
    before = time.time()
    controller.abort()
    [ev] = seen
    assert isinstance(ev, Event) and ev.type == "abort" and ev.target is controller.signal
    assert ev.current_target is None and ev.default_prevented is False and ev.bubbles is False
    assert before <= ev.time_stamp <= time.time()


def test_every_event_has_a_time_stamp_in_seconds_since_the_epoch():
    before = time.time()
    for ev in (Event("open"), MessageEvent("message", data="x"), CloseEvent("close"), ErrorEvent("error")):
        assert before <= ev.time_stamp <= time.time()


def test_stop_immediate_propagation_holds_for_one_dispatch_only():
    target = EventTarget()
    calls = []

    def stopper(ev):
        calls.append(1)
        ev.stop_immediate_propagation()

    target.add_event_listener("x", stopper)
    target.add_event_listener("x", lambda ev: calls.append(2))
    target.add_event_listener("x", lambda ev: calls.append(3))
    ev = Event("x")
    target.dispatch_event(ev)
    target.remove_event_listener("x", stopper)
    target.dispatch_event(ev)  # the same event object again: the stop was for the first dispatch
    assert calls == [1, 2, 3]


def test_current_target_goes_back_to_none_even_with_no_listener():
    target = EventTarget()
    ev = Event("nobody-listens")
    target.dispatch_event(ev)
    assert ev.target is target and ev.current_target is None


def test_a_bound_method_is_one_listener_however_often_it_is_looked_up():
    target = EventTarget()

    class Owner:
        def __init__(self):
            self.calls = 0

        def on_x(self, ev):
            self.calls += 1

    owner = Owner()
    target.add_event_listener("x", owner.on_x)
    target.add_event_listener("x", owner.on_x)
    target.dispatch_event(Event("x"))
    target.remove_event_listener("x", owner.on_x)  # a new bound method object, equal to the first
    target.dispatch_event(Event("x"))
    assert owner.calls == 1


def test_message_event_ports_are_immutable(ws_server, record):
    # undici freezes the array (events.js, the ports getter): a read-only list here,
    # which still equals [] as the original's tests compare it.
    given = ["a", "b"]
    m = MessageEvent("message", {"ports": given})
    assert m.ports == ["a", "b"]
    given.append("c")  # the event's ports are its own
    assert m.ports == ["a", "b"]
    for change in (lambda p: p.append("x"), lambda p: p.__setitem__(0, "x"), lambda p: p.clear()):
        with pytest.raises(TypeError, match="read-only"):
            change(m.ports)
    assert m.ports == ["a", "b"]
    assert MessageEvent("message", ports=("x",)).ports == ["x"]
    assert MessageEvent("message").ports == []
    for not_a_sequence in ("ab", b"ab", None, 3):
        with pytest.raises(TypeError, match="ports"):
            MessageEvent("message", ports=not_a_sequence)
    # ... and those of a message that arrived.
    server = ws_server(lambda peer: (peer.send(frame(1, b"hi")), peer.answer_close()))
    ws = WebSocket(server.url())
    rec = record(ws)
    ws.onmessage = lambda ev: ws.close()
    rec.wait_closed()
    [message] = [e for e in rec.events if e.type == "message"]
    assert message.ports == []
    with pytest.raises(TypeError):
        message.ports.append(1)


def test_message_event_strings_are_strings():
    # undici's messageevent.js: {data: 2, origin: 1, lastEventId: 0} reads '1' and '0'.
    m = MessageEvent("message", {"data": 2, "origin": 1, "last_event_id": 0})
    assert (m.data, m.origin, m.last_event_id) == (2, "1", "0")


@pytest.mark.parametrize("cls", [MessageEvent, CloseEvent, ErrorEvent])
def test_a_cancelable_event_can_be_cancelled(cls):
    # undici's messageevent.js (from Node's test-worker-message-port.js).
    cancelable = cls("x", {"cancelable": True})
    cancelable.prevent_default()
    assert cancelable.default_prevented is True
    plain = cls("x")
    plain.prevent_default()
    assert plain.default_prevented is False
    target = EventTarget()
    target.add_event_listener("x", lambda ev: ev.prevent_default())
    assert target.dispatch_event(cls("x", cancelable=True)) is False
    assert target.dispatch_event(cls("x")) is True


@pytest.mark.parametrize("cls", [MessageEvent, CloseEvent, ErrorEvent])
def test_event_constructors_take_the_doms_event_init_fields(cls):
    # REFERENCE §10.3: WebIDL init dicts, bubbles/cancelable/composed included.
    ev = cls("x", {"bubbles": True, "cancelable": True})
    assert (ev.bubbles, ev.cancelable, ev.composed) == (True, True, False)
    assert cls("x", composed=True).composed is True
    assert (cls("x").bubbles, cls("x").cancelable) == (False, False)
    with pytest.raises(TypeError, match="has no field"):
        cls("x", {"bubble": True})
