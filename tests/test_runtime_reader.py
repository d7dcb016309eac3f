"""``_runtime.Reader``: a reader greenlet wakes the caller it answered by switching to it.

The wake-up is kept while the reader runs and handed over as it parks on its
socket; blocking any other way, or ending, hands it to the hub instead, so a
caller is never left waiting on a reader that waits itself.
"""

from __future__ import annotations

import socket

import gevent
import gevent.event

from greenhttp._net.stream import Transport
from greenhttp._runtime import Parker, call_soon, spawn_reader


def _pair() -> tuple[Transport, socket.socket]:
    a, b = gevent.socket.socketpair()
    return Transport(a), b


def test_parking_on_the_socket_switches_straight_to_the_woken_caller():
    transport, peer = _pair()
    parker = Parker()
    order: list[str] = []

    def caller() -> None:
        order.append("caller waits")
        assert parker.get() == 42
        order.append("caller woken")
        peer.send(b"x")  # lets the reader go on

    def reader() -> None:
        # Queued before the wake-up: a wake-up through the hub would run after it;
        # switched to directly as the reader parks, the caller runs first.
        call_soon(order.append, "hub callback")
        parker.set(42)
        transport.wait_readable()
        order.append("reader readable")

    waiting = gevent.spawn(caller)
    gevent.sleep(0)
    r = spawn_reader(reader)
    r.join(5)
    assert r.successful()
    waiting.join(5)
    assert order == ["caller waits", "caller woken", "hub callback", "reader readable"]
    transport.close()
    peer.close()


def test_a_reader_that_blocks_elsewhere_hands_the_wake_up_to_the_hub():
    parker = Parker()
    answered = gevent.event.Event()

    def caller() -> None:
        parker.get()
        answered.set()  # what the reader below waits for

    def reader() -> None:
        parker.set("head")
        assert answered.wait(5), "the caller was never woken"

    waiting = gevent.spawn(caller)
    gevent.sleep(0)
    r = spawn_reader(reader)
    r.join(5)
    assert r.successful()
    assert waiting.dead and answered.is_set()


def test_a_reader_that_ends_hands_the_wake_up_to_the_hub():
    parker = Parker()
    waiting = gevent.spawn(parker.get)
    gevent.sleep(0)
    r = spawn_reader(lambda: parker.set("last"))
    r.join(5)
    assert waiting.join(5) is None and waiting.value == "last"


def test_a_second_wake_up_sends_the_kept_one_through_the_hub_first():
    first, second = Parker(), Parker()
    order: list[str] = []

    def wait(p: Parker, name: str) -> None:
        p.get()
        order.append(name)

    waiting = [gevent.spawn(wait, first, "first"), gevent.spawn(wait, second, "second")]
    gevent.sleep(0)
    transport, peer = _pair()

    def reader() -> None:
        first.set(1)
        second.set(2)
        peer.send(b"x")
        transport.wait_readable()

    r = spawn_reader(reader)
    r.join(5)
    gevent.joinall(waiting, timeout=5)
    assert r.successful()
    assert order == ["first", "second"]  # neither is lost, and their order is kept
    transport.close()
    peer.close()


def test_wake_ups_of_a_reader_that_ends_run_in_the_order_they_were_made():
    # The last response wakes its caller, then the end of the connection wakes
    # close(): the caller must run first, as it would through the hub.
    parkers = [Parker() for _ in range(3)]
    order: list[int] = []

    def wait(i: int) -> None:
        parkers[i].get()
        order.append(i)

    waiting = [gevent.spawn(wait, i) for i in range(3)]
    gevent.sleep(0)

    def reader() -> None:
        for p in parkers:
            p.set(None)

    r = spawn_reader(reader)
    r.join(5)
    gevent.joinall(waiting, timeout=5)
    assert order == [0, 1, 2]
