"""``python -m build`` makes an sdist and a wheel that install into a clean virtualenv.

The sources are copied to a temporary directory first, so the build (which
writes ``*.egg-info`` next to the package) leaves nothing in the repository.
The wheel is built from the sdist, as ``python -m build`` does by default,
which also proves the sdist is complete; where a C compiler is at hand it
holds the compiled modules (setup.py), and a pure-Python wheel is built too.
The version must come from one place, ``lib/greenhttp/_version.py``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from compiled import LISTED

pytest.importorskip("build")

ROOT = Path(__file__).resolve().parent.parent
_IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "*.egg-info", "__pycache__", "*.py[cod]", ".*_cache", "build", "dist", "_build"
)


def _version() -> str:
    """The version, from its single source of truth."""
    text = (ROOT / "lib" / "greenhttp" / "_version.py").read_text(encoding="utf-8")
    found = re.findall(r'^__version__ = "([^"]+)"$', text, re.M)
    assert len(found) == 1, text
    return found[0]


def _copy_sources(dest: Path) -> None:
    """The files a clean clone would have (tracked, or new and not ignored), else a filtered copy."""
    listed = None
    if (ROOT / ".git").exists() and shutil.which("git"):
        result = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=False,
        )
        if result.returncode == 0:
            listed = [name for name in result.stdout.decode().split("\0") if name]
    if listed is None:
        shutil.copytree(ROOT, dest, ignore=_IGNORED)
        return
    for name in listed:
        src = ROOT / name
        if src.is_file():  # a file deleted from the work tree but not from the index is skipped
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def _can_compile() -> bool:
    """A C compiler and this interpreter's headers: what setup.py needs to compile."""
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return include.exists() and shutil.which(sysconfig.get_config_var("CC").split()[0] or "cc") is not None


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_TARGET", "GREENHTTP_"))}
    env.pop("VIRTUAL_ENV", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return env


def test_version_has_one_source() -> None:
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "greenhttp._version.__version__"}
    others = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "lib").rglob("*.py")
        if path.name != "_version.py" and re.search(r"^__version__\s*=", path.read_text(encoding="utf-8"), re.M)
    ]
    assert others == []
    import greenhttp

    assert greenhttp.__version__ == _version()


@pytest.mark.timeout(600)
def test_sdist_and_wheel_build_install_and_import(tmp_path: Path) -> None:
    version = _version()
    src = tmp_path / "src"
    src.mkdir()
    _copy_sources(src)
    modules = sorted(
        str(path.relative_to(src / "lib")) for path in (src / "lib" / "greenhttp").rglob("*.py")
    )
    assert "greenhttp/__init__.py" in modules and "greenhttp/_core/option_types.py" in modules
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(src)],
        capture_output=True, text=True, env=_clean_env(), cwd=tmp_path, check=False,
    )
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    sdist = dist / f"greenhttp-{version}.tar.gz"
    # Where the build can compile (setup.py), the wheel is for this interpreter and platform.
    tag = sysconfig.get_config_var("SOABI").split("-")[1] if _can_compile() else None
    wheels = [p.name for p in dist.glob("*.whl")]
    assert sorted(p.name for p in dist.iterdir()) == sorted([sdist.name, *wheels]) and len(wheels) == 1
    wheel = dist / wheels[0]
    assert wheel.name.startswith(f"greenhttp-{version}-" + (f"cp{tag}-cp{tag}-" if tag else "py3-none-any"))

    # The wheel: every module, the py.typed marker, the metadata, the compiled
    # modules if any (and mypyc's shared library beside the package); nothing else.
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(f"greenhttp-{version}.dist-info/METADATA").decode()
    assert set(modules) | {"greenhttp/py.typed"} <= names
    built = sorted(name for name in names if name.endswith(".so"))
    compiled = [path.removesuffix(".py") for path in LISTED]
    if tag:
        assert [name.split(".")[0] for name in built] == sorted([*compiled, "greenhttp__mypyc"])
    else:
        assert built == []
    tops = {name.split("/")[0] for name in names if not name.startswith("greenhttp__mypyc.")}
    assert tops == {"greenhttp", f"greenhttp-{version}.dist-info"}
    assert f"\nVersion: {version}\n" in metadata
    assert "\nRequires-Dist: gevent" in metadata

    # The sdist: the package, README, CHANGELOG, pyproject; no tests.
    top = f"greenhttp-{version}/"
    with tarfile.open(sdist) as tf:
        members = {name.removeprefix(top) for name in tf.getnames()}
    assert {"README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml", "PKG-INFO", "lib/greenhttp/py.typed"} <= members
    assert {f"lib/{module}" for module in modules} <= members
    assert [name for name in members if name == "tests" or name.startswith("tests/")] == []
    assert [name for name in members if "__pycache__" in name or name.endswith(".pyc")] == []

    # A clean virtualenv (no system site-packages): install the wheel, import it.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=_clean_env(), cwd=tmp_path)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True, text=True, env=_clean_env(), cwd=tmp_path, check=False,
    )
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]
    script = (
        "import greenhttp, greenhttp._core.request as r; "
        "print(greenhttp.__version__, greenhttp.__file__, r.__file__.endswith('.py'))"
    )
    check = subprocess.run(
        [str(python), "-I", "-c", script], capture_output=True, text=True, env=_clean_env(), cwd=tmp_path, check=False,
    )
    assert check.returncode == 0, check.stderr
    printed_version, location, pure = check.stdout.split()
    assert printed_version == version
    assert Path(location).resolve().is_relative_to(venv.resolve())
    assert pure == str(not tag)  # the installed package runs its compiled modules


@pytest.mark.timeout(300)
def test_the_pure_python_wheel_is_for_every_platform(tmp_path: Path) -> None:
    """GREENHTTP_PURE_PYTHON=1 (or a machine without a compiler) builds a wheel of sources only."""
    src = tmp_path / "src"
    src.mkdir()
    _copy_sources(src)
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(src)],
        capture_output=True, text=True, env={**_clean_env(), "GREENHTTP_PURE_PYTHON": "1"}, cwd=tmp_path,
        check=False,
    )
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    assert [p.name for p in dist.iterdir()] == [f"greenhttp-{_version()}-py3-none-any.whl"]
    with zipfile.ZipFile(next(dist.iterdir())) as zf:
        names = zf.namelist()
    assert [n for n in names if not n.endswith((".py", "/py.typed")) and ".dist-info/" not in n] == []
