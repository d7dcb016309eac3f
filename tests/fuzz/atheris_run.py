"""Run one fuzz target under atheris; the ``fuzz_<target>.py`` scripts call :func:`run`.

Without a corpus directory among the arguments, the run uses (and grows)
``$TMPDIR/greenhttp-fuzz/<target>``, seeded with ``fuzz_targets.SEEDS``, so
mutations start from real HTTP rather than from nothing; ``http.dict`` (next
to this file) is the default libFuzzer dictionary, and a crashing input is
written to ``$TMPDIR/greenhttp-fuzz/<target>-crash-<sha1>`` (reproduce it
with ``python tests/fuzz/fuzz_<target>.py <that file>``). atheris's string hooks
give feedback from ``str`` comparisons; its regex hook is left off (it
fails on some ``bytes`` patterns of h11, which wsproto imports).
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path


def run(name: str, argv: list[str]) -> None:
    """Fuzz ``fuzz_targets.TARGETS[name]`` with libFuzzer flags ``argv`` (never returns)."""
    try:
        import atheris
    except ImportError:
        raise SystemExit("atheris is not installed: .venv/bin/pip install atheris") from None
    atheris.enabled_hooks.add("str")
    import fuzz_targets

    atheris.instrument_all()  # coverage feedback from greenhttp and what it calls
    args = list(argv)
    work = Path(tempfile.gettempdir()) / "greenhttp-fuzz"
    if not any(a.startswith("-dict=") for a in args):
        args.append(f"-dict={Path(__file__).with_name('http.dict')}")
    if not any(a.startswith("-artifact_prefix=") for a in args):
        work.mkdir(parents=True, exist_ok=True)
        args.append(f"-artifact_prefix={work}/{name}-")  # crash inputs, not in the working tree
    if not any(not a.startswith("-") for a in args[1:]):
        corpus = work / name
        corpus.mkdir(parents=True, exist_ok=True)
        for seed in fuzz_targets.SEEDS[name]:
            (corpus / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
        args.append(str(corpus))
    atheris.Setup(args, fuzz_targets.TARGETS[name])
    atheris.Fuzz()
