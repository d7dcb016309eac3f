"""Busy polling (docs/performance.md, "Busy polling"): while a request waits for its
answer, the hub's loop polls instead of sleeping, within the client's ``busy_poll``
budget; answers later than the budget make it back off; nobody waiting, it stops."""

from __future__ import annotations

import threading

import gevent
import gevent.event
import pytest

import greenhttp
from greenhttp._runtime import hot
from h2_support.h2server import serve_ok
from testkit import serve_forever, wait_for, wrapping_connector

pytest_plugins = ["h2_support.fixtures"]


def _poll() -> hot.BusyPoll:
    return hot.busy_poll()


@pytest.fixture(autouse=True)
def _no_back_off():
    """Each test starts with a hub that polls; earlier tests' slow answers are forgotten."""
    poll = _poll()
    poll._misses = poll._skip = 0
    yield
    poll._misses = poll._skip = 0


def _idle(poll: hot.BusyPoll) -> None:
    """Wait until ``poll`` stopped polling (for what earlier tests armed)."""
    wait_for(lambda: not poll.polling, what="the loop to stop polling")


def _settled(poll: hot.BusyPoll) -> None:
    """Everything armed was answered or taken back, and the loop stops polling.

    Call it within the budget of the stretch the test armed (1 s or more): while
    that stretch runs, an arming nobody took back still counts (a leak); only
    the end of the stretch forgets it.
    """
    assert not poll.polling or poll._waiting == 0, f"{poll._waiting} armed and never answered"
    _idle(poll)


def test_one_busy_poll_per_hub():
    assert _poll() is _poll()


def test_arming_polls_until_the_answer_then_stops():
    poll = _poll()
    _idle(poll)
    armed = poll.arm(1.0)
    assert armed > 0 and poll.polling and poll._waiting == 1
    gevent.sleep(0)  # a pass of the loop with someone waiting: it goes on polling
    assert poll.polling
    poll.answered(armed, poll.stretch, 1.0)
    assert poll._waiting == 0 and poll._misses == 0
    _settled(poll)


def test_the_budget_ends_the_polling_of_an_unanswered_request():
    poll = _poll()
    _idle(poll)
    poll.arm(0.002)
    stretch = poll.stretch
    wait_for(lambda: not poll.polling, timeout=2, what="the 2 ms budget to end")
    assert poll._waiting == 0  # the stretch is over: what was armed in it is forgotten
    poll.cancel(stretch)  # a late cancel (or answer) of it changes nothing
    assert poll._waiting == 0
    armed = poll.arm(1.0)
    assert poll.polling and poll.stretch == stretch + 1 and poll._waiting == 1
    poll.cancel(stretch)
    assert poll._waiting == 1  # not this stretch's
    poll.answered(armed, poll.stretch, 1.0)
    _settled(poll)


def test_late_answers_back_off_exponentially_and_a_timely_one_resets():
    poll = _poll()
    _idle(poll)
    skipped = []
    for _ in range(8):
        armed = poll.arm(1e-3)
        assert armed > 0
        poll.answered(armed - 1.0, poll.stretch, 1e-3)  # answered a second after it was sent
        count = 0
        while poll.arm(1e-3) == 0.0:  # bounded: at most 63 in a row
            count += 1
            assert count < 64
        skipped.append(count)
        poll.cancel(poll.stretch)
    assert skipped == [1, 3, 7, 15, 31, 63, 63, 63]
    armed = poll.arm(1.0)
    poll.answered(armed, poll.stretch, 1.0)  # in time
    assert poll._misses == 0 and poll._skip == 0
    assert poll.arm(1.0) > 0  # polls again from the next request on
    poll.cancel(poll.stretch)
    _settled(poll)


def test_a_request_to_a_real_server_polls_while_it_waits(make_server):
    seen = []

    def handler(conn):
        while conn.read_request() is not None:
            poll = _poll()
            seen.append((poll.polling, poll._waiting))  # as the request arrives
            conn.respond(b"ok")

    server = make_server(handler)
    client = greenhttp.Client(server.origin, busy_poll=1.0)
    try:
        for _ in range(3):
            assert client.request(path="/").body.text() == "ok"
        assert seen == [(True, 1)] * 3
        _settled(_poll())
    finally:
        client.close()


def test_busy_poll_0_never_polls(make_server):
    server = make_server(serve_forever(b"ok"))
    client = greenhttp.Client(server.origin, busy_poll=0)
    try:
        poll = _poll()
        _idle(poll)
        assert client.request(path="/").body.text() == "ok"
        assert client._core._conn._spin._poll is None
        assert not poll.polling and poll._waiting == 0
    finally:
        client.close()


def test_a_connection_closed_while_its_request_waits_stops_waiting(make_server):
    arrived = gevent.event.Event()

    def handler(conn):
        conn.read_request()
        arrived.set()
        conn.wait_closed()

    server = make_server(handler)
    client = greenhttp.Client(server.origin, busy_poll=1.0)
    job = gevent.spawn(client.request, path="/")
    assert arrived.wait(5)
    assert _poll()._waiting == 1
    client.destroy()
    with pytest.raises(greenhttp.errors.ClientDestroyedError):
        job.get(timeout=5)
    _settled(_poll())


def test_h2_streams_poll_and_leave_nothing_waiting(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin, busy_poll=1.0)
    jobs = [gevent.spawn(lambda p=p: client.request(path=p).body.text()) for p in ("/a", "/b", "/c")]
    gevent.joinall(jobs, timeout=5, raise_error=True)
    assert [job.value for job in jobs] == ["ok /a", "ok /b", "ok /c"]
    _settled(_poll())


def test_a_thread_with_its_own_hub_polls_and_ends_cleanly(make_server):
    """Each hub has its own; destroying a thread's hub with its loop is fine on libev and libuv."""
    server = make_server(serve_forever(b"ok"))
    result: list[object] = []
    main_poll = _poll()

    def thread_main() -> None:
        try:
            client = greenhttp.Client(server.origin, busy_poll=1.0)
            try:
                result.append(client.request(path="/").body.text())
                result.append(_poll() is not main_poll and _poll()._waiting == 0)
            finally:
                client.destroy()
        except BaseException as exc:  # reported below
            result.append(exc)
        finally:
            gevent.get_hub().destroy(destroy_loop=True)

    thread = threading.Thread(target=thread_main)
    thread.start()
    wait_for(lambda: not thread.is_alive(), timeout=10, what="the thread's end")
    thread.join()
    assert result == ["ok", True]


def test_a_first_write_that_fails_leaves_nothing_waiting(make_server):
    """The write arms the poll before it sends, so the failing send's end of the
    connection takes the wait back (armed after it, it stayed armed)."""
    server = make_server(serve_forever(b"ok"))
    connect = wrapping_connector([1, 0])  # the first connection's first send raises
    client = greenhttp.Client(server.origin, connect=connect, busy_poll=5.0)
    try:
        with pytest.raises(greenhttp.errors.SocketError):
            client.request(path="/first")
        poll = _poll()
        wait_for(lambda: poll._waiting == 0, timeout=1, what="the failed write's wait to be taken back")
        assert client.request(path="/next").body.text() == "ok"
        _settled(poll)
    finally:
        client.close()


def test_a_streamed_upload_is_not_timed(make_server):
    """Its answer comes only after the body: timing it from the head would count
    every upload as a slow answer and make the poll back off."""
    seen = []

    def handler(conn):
        while True:
            req = conn.read_head()
            if req is None:
                return
            seen.append(_poll().polling)  # as the head arrives
            conn.read_body(req)
            conn.respond(b"ok")

    server = make_server(handler)
    client = greenhttp.Client(server.origin, busy_poll=1.0)
    try:
        assert client.request(path="/", method="POST", body=iter([b"a", b"b"])).body.text() == "ok"
        assert client.request(path="/", method="POST", body=b"ab").body.text() == "ok"
        assert seen == [False, True]
        _settled(_poll())
    finally:
        client.close()


def test_an_h2_connection_closed_while_a_stream_waits_stops_waiting(make_h2_server, make_h2c):
    arrived = gevent.event.Event()

    def handler(conn):
        if conn.next_request(timeout=5) is not None:
            arrived.set()
        conn.next_request(timeout=5)  # no answer: until the client goes

    server = make_h2_server(handler)
    client = make_h2c(server.origin, busy_poll=1.0)
    job = gevent.spawn(client.request, path="/")
    assert arrived.wait(5)
    poll = _poll()
    wait_for(lambda: poll._waiting == 1, timeout=1, what="the stream's wait to be armed")
    client.destroy()
    with pytest.raises(greenhttp.errors.ClientDestroyedError):
        job.get(timeout=5)
    _settled(poll)
