"""``_runtime.Parker``: one greenlet parks until another delivers a value or an error."""

from __future__ import annotations

import traceback

import gevent
import gevent.event
import gevent.exceptions
import pytest

from greenhttp._runtime import Parker, call_soon


def test_a_value_set_before_get_is_returned_without_blocking():
    parker = Parker()
    parker.set(7)
    parker.set(8)  # single use: the first value stays
    assert parker.ready()
    assert parker.get() == 7


def test_get_blocks_until_another_greenlet_sets_it():
    parker = Parker()
    setter = gevent.spawn(parker.set, "done")
    assert parker.get(timeout=5) == "done"
    setter.join(5)


def test_an_error_is_raised_once_in_the_waiter():
    parker = Parker()
    gevent.spawn(parker.set_exception, KeyError("gone"))
    with pytest.raises(KeyError, match="gone"):
        parker.get(timeout=5)


def test_a_wake_up_after_the_waiter_gave_up_is_harmless():
    parker = Parker()
    with pytest.raises(gevent.Timeout):
        parker.get(timeout=0.01)
    # The greenlet that waited now waits for something else; the late wake-up,
    # delivered through the hub, must not resume it.
    other = gevent.event.Event()
    call_soon(parker.set, "late")
    call_soon(call_soon, other.set)  # after the late wake-up has run
    assert other.wait(5)
    assert parker.get() == "late"  # the value is kept


def test_blocking_in_the_hub_is_refused():
    parker = Parker()
    failures: list[BaseException] = []

    def in_the_hub() -> None:
        try:
            parker.get()
        except gevent.exceptions.BlockingSwitchOutError as exc:
            failures.append(exc)

    done = gevent.event.Event()
    call_soon(in_the_hub)
    call_soon(done.set)
    assert done.wait(5)
    assert len(failures) == 1


def test_a_wake_up_queued_for_a_waiter_that_is_gone_is_harmless():
    parker = Parker()
    waiting = gevent.spawn(parker.get)
    gevent.sleep(0)  # let it park
    waiting.kill(block=False)  # its GreenletExit is queued in the hub first...
    parker.set("late")  # ...and this wake-up after it
    waiting.join(5)
    assert waiting.dead
    after = gevent.spawn(lambda: "still fine")
    assert after.get(timeout=5) == "still fine"
    assert parker.get() == "late"


def test_a_greenlet_with_a_switch_out_has_it_called_as_it_parks():
    # gevent's contract (Hub.switch): a greenlet that defines switch_out hears of
    # each block. Greenlets without one park with a plain switch.
    calls: list[str] = []

    class Noticing(gevent.Greenlet):  # type: ignore[misc]
        def switch_out(self) -> None:
            calls.append("switch_out")

    parker = Parker()
    waiting = Noticing(parker.get)
    waiting.start()
    gevent.sleep(0)  # it parks
    parker.set("ok")
    assert waiting.get(timeout=5) == "ok"
    assert calls == ["switch_out"]


def test_one_error_raised_in_many_waiters_keeps_its_own_traceback_in_each():
    # A client's reason or a deduplicated failure reaches every waiter as one object.
    # Each raise used to add its frames to the traceback the error already had, so
    # the k-th waiter saw k waiters' frames and the error kept them all alive.
    def origin():
        raise ConnectionResetError("reset")

    try:
        origin()
    except ConnectionResetError as exc:
        err = exc
    first = [f.name for f in traceback.extract_tb(err.__traceback__)]
    parkers = [Parker() for _ in range(20)]
    seen: list[list[str]] = []

    def wait(parker):
        try:
            parker.get(timeout=5)
        except ConnectionResetError as exc:
            assert exc is err
            seen.append([f.name for f in traceback.extract_tb(exc.__traceback__)])

    waiters = [gevent.spawn(wait, p) for p in parkers]
    gevent.sleep(0)
    for p in parkers:
        p.set_exception(err)
    gevent.joinall(waiters, timeout=5)
    assert len(seen) == 20
    assert all(names == seen[0] for names in seen)
    assert seen[0][-len(first):] == first and seen[0].count("origin") == 1
    assert len(seen[0]) <= len(first) + 2  # the origin's frames, then get() and wait()
