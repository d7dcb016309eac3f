"""The WebSocket example runs, talks to its own server, and exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "websocket_echo.py"


def test_websocket_echo_example_runs():
    out = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLE)], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert "message from ws://127.0.0.1:" in out.stdout
    assert "close: code 1000, reason 'done', clean True" in out.stdout
    assert "stream closed: {'close_code': 1000, 'reason': 'bye'}" in out.stdout
