"""Atheris fuzz target: content decoding (gzip, deflate, br, zstd, compress).

    .venv/bin/python tests/fuzz/fuzz_decoders.py -atheris_runs=100000 [libFuzzer flags]

Only documented exceptions may escape; see ``fuzz_targets.decoders``.
"""

import sys

from atheris_run import run

if __name__ == "__main__":
    run("decoders", sys.argv)
