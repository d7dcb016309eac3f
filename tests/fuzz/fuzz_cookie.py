"""Atheris fuzz target: Set-Cookie parsing (parse_cookie).

    .venv/bin/python tests/fuzz/fuzz_cookie.py -atheris_runs=100000 [libFuzzer flags]

Only documented exceptions may escape; see ``fuzz_targets.cookie``.
"""

import sys

from atheris_run import run

if __name__ == "__main__":
    run("cookie", sys.argv)
