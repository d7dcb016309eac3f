"""Every script in examples/ runs to completion (each starts its own loopback server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))

# Examples that wait on child processes with gevent.subprocess, whose poll loop
# sleeps less than a millisecond: gevent's libuv loop warns about that itself.
_GEVENT_SUBPROCESS = {"gunicorn_app.py"}
_LIBUV_SUB_MS = "ignore:libuv only supports millisecond timer resolution"


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(script: Path) -> None:
    warnings = "error," + _LIBUV_SUB_MS if script.name in _GEVENT_SUBPROCESS else "error"
    env = {**os.environ, "PYTHONWARNINGS": warnings}
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, f"{script.name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip(), f"{script.name} printed nothing"
