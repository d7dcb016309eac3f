"""The test kit itself: a server a fixture starts does not outlive a crashed test run,
and the leak check names what leaked and where it was spawned."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

import gevent
import pytest

from testkit import live_greenlets, open_fds, settle_leaks

# A stand-in for a test process: starts a long-lived child with die_with_parent,
# prints its pid, then waits to be killed.
_RUN = """
import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from testkit import die_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=die_with_parent)
print(child.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="PR_SET_PDEATHSIG and pidfd are Linux only")
def test_a_fixture_server_dies_with_a_killed_test_process():
    tests_dir = os.path.dirname(__file__)
    parent = subprocess.Popen([sys.executable, "-c", _RUN, tests_dir], stdout=subprocess.PIPE, text=True)
    child_fd = -1
    try:
        child_pid = int(parent.stdout.readline())  # type: ignore[union-attr]
        child_fd = os.pidfd_open(child_pid)  # readable once the child has exited
        parent.send_signal(signal.SIGKILL)  # no teardown runs: as after a segfault
        parent.wait(timeout=10)
        exited = select.select([child_fd], [], [], 10)[0]
        assert exited, "the child outlived its killed parent"
    finally:
        if child_fd >= 0:
            if not select.select([child_fd], [], [], 0)[0]:
                signal.pidfd_send_signal(child_fd, signal.SIGKILL)
            os.close(child_fd)
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)
        parent.stdout.close()  # type: ignore[union-attr]


def test_the_leak_check_names_the_leaked_fd_and_where_a_greenlet_was_spawned():
    gevent.sleep(0)  # the hub and its fds exist before the snapshot
    fds, before = open_fds(), {id(g) for g in live_greenlets()}
    stray = gevent.spawn(gevent.sleep, 30)
    r, w = os.pipe()
    try:
        with pytest.raises(AssertionError) as failed:
            settle_leaks(fds, lambda: [g for g in live_greenlets() if id(g) not in before], 0.05)
    finally:
        stray.kill()
        os.close(r)
        os.close(w)
    text = str(failed.value)
    assert f"{r}: 'pipe:" in text and f"{w}: 'pipe:" in text
    assert "started=True" in text and "gevent.spawn(gevent.sleep, 30)" in text
    assert "test_testkit.py" in text and "_pytest" not in text
    settle_leaks(fds, lambda: [g for g in live_greenlets() if id(g) not in before], 1.0)  # all gone: passes
