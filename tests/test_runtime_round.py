"""``_runtime.at_round_end``: actions queued during one round of the hub run together, in order."""

from __future__ import annotations

import gevent
import gevent.event

from greenhttp._runtime import at_round_end, round_queue


def test_actions_of_one_round_run_together_in_order_after_the_round():
    queue = round_queue()
    assert round_queue() is queue  # one per hub
    ran: list[str] = []
    done = gevent.event.Event()

    def greenlet(name: str) -> None:
        # Each greenlet queues an action; none runs while greenlets of this round still run.
        at_round_end(queue, lambda: ran.append(name))
        ran.append("queued " + name)

    jobs = [gevent.spawn(greenlet, n) for n in "abc"]
    gevent.joinall(jobs, timeout=5)
    at_round_end(queue, done.set)
    assert done.wait(5)
    assert ran == ["queued a", "queued b", "queued c", "a", "b", "c"]
    assert not queue


def test_an_action_that_raises_is_reported_and_the_others_still_run(monkeypatch):
    queue = round_queue()
    reported: list[BaseException] = []
    hub = gevent.get_hub()
    monkeypatch.setattr(hub, "handle_error", lambda ctx, t, v, tb: reported.append(v))
    ran: list[int] = []
    done = gevent.event.Event()

    def boom() -> None:
        raise ValueError("boom")

    at_round_end(queue, boom)
    at_round_end(queue, lambda: ran.append(1))
    at_round_end(queue, done.set)
    assert done.wait(5)
    assert ran == [1]
    assert len(reported) == 1 and isinstance(reported[0], ValueError)
