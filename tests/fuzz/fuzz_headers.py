"""Atheris fuzz target: request header shapes, path and method.

    .venv/bin/python tests/fuzz/fuzz_headers.py -atheris_runs=100000 [libFuzzer flags]

Only documented exceptions may escape; see ``fuzz_targets.headers``.
"""

import sys

from atheris_run import run

if __name__ == "__main__":
    run("headers", sys.argv)
