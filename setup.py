"""Build script: the metadata lives in pyproject.toml; this adds the compiled hot path.

The private modules that every HTTP/1.1 request runs through are compiled with
mypyc, from the same type-checked Python source, when mypyc is at hand (the
build requirements in pyproject.toml bring it). ``GREENHTTP_PURE_PYTHON=1``
builds the pure-Python package instead, and a machine that cannot compile (no
C compiler, no Python headers) gets it with a warning. Both behave the same;
docs/performance.md says what compiling buys and what it asks of the code.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

# Private modules only: a compiled function keeps neither its docstring nor its
# annotations at run time, so nothing public is defined in them. tests/conftest.py
# reads this list to refuse a compiled module older than its source.
COMPILED = [
    "greenhttp/_core/h1.py",
    "greenhttp/_core/request.py",
    "greenhttp/_api/request.py",
    "greenhttp/_dispatcher/client_core.py",
    "greenhttp/_dispatcher/h1_driver.py",
    "greenhttp/_dispatcher/pool_core.py",
    "greenhttp/_runtime/hot.py",
]


class OptionalBuildExt(build_ext):
    """Compile the extensions, or leave the pure-Python modules when that fails."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            _fall_back(exc)

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            _fall_back(exc)


def _fall_back(exc: BaseException) -> None:
    warnings.warn(f"greenhttp: not compiling the hot path ({exc}); the package is pure Python", stacklevel=2)


def ext_modules() -> list[Any]:
    if os.environ.get("GREENHTTP_PURE_PYTHON"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        _fall_back(exc)
        return []
    try:
        sources = [f"lib/{path}" for path in COMPILED]
        return list(mypycify(["--config-file", "pyproject.toml", *sources], opt_level="3", group_name="greenhttp"))
    except (Exception, SystemExit) as exc:  # mypyc reports type errors by exiting
        _fall_back(exc)
        return []


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
