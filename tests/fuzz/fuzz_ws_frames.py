"""Atheris fuzz target: WebSocket frames from the server.

    .venv/bin/python tests/fuzz/fuzz_ws_frames.py -atheris_runs=100000 [libFuzzer flags]

Only documented exceptions may escape; see ``fuzz_targets.ws_frames``.
"""

import sys

from atheris_run import run

if __name__ == "__main__":
    run("ws_frames", sys.argv)
