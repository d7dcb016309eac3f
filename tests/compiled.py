"""Which greenhttp modules run compiled, and running the suite on their sources.

``setup.py`` lists the modules mypyc compiles (``COMPILED``); an install that
could compile puts an extension module next to each source file, and Python
then imports the extension. Importing this module (``conftest.py`` does, before
greenhttp) gives the suite two guarantees:

* with ``GREENHTTP_PURE_PYTHON=1`` the listed modules are imported from their
  ``.py`` sources even where extensions exist (``make test-pure``), so one
  checkout tests both builds;
* otherwise an extension older than any listed source is refused: it would
  run yesterday's code while the test reads today's (``make build`` rebuilds).
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "lib"
PURE = bool(os.environ.get("GREENHTTP_PURE_PYTHON"))


def _listed() -> list[str]:
    """setup.py's COMPILED list (paths under lib/), read without running setup.py."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "COMPILED" for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list) and value, "setup.py: COMPILED must be a non-empty list"
            return value
    raise AssertionError("setup.py has no COMPILED list")


LISTED = _listed()
MODULES = {path.removesuffix(".py").replace("/", "."): LIB / path for path in LISTED}


def extensions() -> list[Path]:
    """mypyc's shared library of the compiled code, if the work tree has one (the
    compiled modules' own extension files only load it)."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return [p for p in LIB.glob("greenhttp__mypyc.*") if p.name.endswith(suffixes)]


class _SourcesFirst(importlib.abc.MetaPathFinder):
    """Import the compiled modules from their .py files."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        source = MODULES.get(fullname)
        if source is None:
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def _prepare() -> None:
    """Install the source-first finder, or refuse stale extensions."""
    if "greenhttp" in sys.modules:
        raise RuntimeError("tests/compiled.py must run before greenhttp is imported")
    if PURE:
        sys.meta_path.insert(0, _SourcesFirst())
        return
    built = extensions()
    if not built:
        return
    oldest = min(path.stat().st_mtime for path in built)
    stale = [str(s.relative_to(ROOT)) for s in MODULES.values() if s.stat().st_mtime > oldest]
    if stale:
        raise SystemExit(
            f"compiled greenhttp modules are older than {', '.join(stale)}: run `make build` "
            "(or GREENHTTP_PURE_PYTHON=1 to test the sources)"
        )


def describe() -> str:
    """One line for the end of the test report: what this run tested."""
    import greenhttp  # noqa: F401  (imports the listed modules)

    compiled = [
        name for name in MODULES if not str(getattr(sys.modules.get(name), "__file__", "")).endswith(".py")
    ]
    if not compiled:
        return "greenhttp: pure Python" + (" (GREENHTTP_PURE_PYTHON=1)" if PURE else "")
    return f"greenhttp: {len(compiled)} of {len(MODULES)} listed modules compiled ({', '.join(compiled)})"


_prepare()
