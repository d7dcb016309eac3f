"""Atheris fuzz target: Cache-Control, HTTP dates, Age and Vary.

    .venv/bin/python tests/fuzz/fuzz_cache_control.py -atheris_runs=100000 [libFuzzer flags]

Only documented exceptions may escape; see ``fuzz_targets.cache_control``.
"""

import sys

from atheris_run import run

if __name__ == "__main__":
    run("cache_control", sys.argv)
