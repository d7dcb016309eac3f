"""Fixtures for the property tests.

The fuzz targets (``fuzz_targets.py``) are pure; only the WebSocket property
test talks to a loopback server (``make_server`` of ``tests/conftest.py``).
Every test here runs under the fault tests' checks (``tests/faults/faultkit.py``):
no fd or greenlet may outlive it and no greenlet may die of an exception.

Hypothesis runs a bounded number of examples (``max_examples`` per test);
``GREENHTTP_FUZZ_EXAMPLES`` scales them for a longer local run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))

from faultkit import guarded  # noqa: E402


@pytest.fixture(autouse=True)
def fuzz_leak_check():
    with guarded():
        yield
