"""Atheris fuzz target: redirect Location resolution and the next hop.

    .venv/bin/python tests/fuzz/fuzz_redirect.py -atheris_runs=100000 [libFuzzer flags]

Only documented exceptions may escape; see ``fuzz_targets.redirect``.
"""

import sys

from atheris_run import run

if __name__ == "__main__":
    run("redirect", sys.argv)
