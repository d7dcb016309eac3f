"""Atheris fuzz target: the HTTP/1.1 response parser (whole and cut at random points).

    .venv/bin/python tests/fuzz/fuzz_h1_parser.py -atheris_runs=100000 [libFuzzer flags]

Only documented exceptions may escape; see ``fuzz_targets.h1_parser``.
"""

import sys

from atheris_run import run

if __name__ == "__main__":
    run("h1_parser", sys.argv)
