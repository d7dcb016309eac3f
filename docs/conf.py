"""Sphinx configuration of greenhttp's documentation.

Build it with ``make docs``: pages are Markdown (MyST), the API reference is
generated from docstrings by autodoc, and every warning is an error (``-W``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from sphinx.util import logging

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT / "lib"))  # document the working tree, installed or not

import greenhttp  # noqa: E402

project = "greenhttp"
author = "the greenhttp authors"
copyright = "the greenhttp authors"
release = greenhttp.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
]

root_doc = "index"
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "Makefile.snippet", "README.md"]
templates_path: list[str] = []

# -- MyST --------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links work for h1-h3

# -- autodoc -----------------------------------------------------------------
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
add_module_names = False
python_use_unqualified_type_names = True

# -- HTML --------------------------------------------------------------------
html_theme = "furo"
html_title = f"greenhttp {release}"
html_static_path: list[str] = []
html_show_sourcelink = False


# -- the navigation tolerates pages still being written ----------------------
# index.md lists every page of the site in its toctree. A page another
# engineer has not committed yet is left out of this build with a note,
# instead of failing it; once the file exists it is in the navigation.
_TOCTREE = re.compile(r"(```\{toctree\}\n)(.*?)(```)", re.S)
_log = logging.getLogger("greenhttp.docs")


def _drop_missing_pages(app, docname, source):  # type: ignore[no-untyped-def]
    if docname != root_doc:
        return

    def keep(match: re.Match[str]) -> str:
        lines = []
        for line in match.group(2).splitlines(keepends=True):
            entry = line.strip()
            if entry and not entry.startswith(":"):
                target = re.sub(r"^.*<(.+)>$", r"\1", entry)
                if not (DOCS / f"{target}.md").exists():
                    _log.info("docs: %s.md is not written yet; left out of the navigation", target)
                    continue
            lines.append(line)
        return match.group(1) + "".join(lines) + match.group(3)

    source[0] = _TOCTREE.sub(keep, source[0])


# -- the API reference is generated from greenhttp.__all__ ------------------
# api.md holds a marker line; it is replaced by one section per group of
# ``__all__`` (the comment lines in ``greenhttp/__init__.py`` name the groups),
# each with a summary table and the full reference of every name. A name added
# to ``__all__`` appears here without anyone editing the docs.
API_MARKER = "<!-- greenhttp-api -->"
_GROUP = re.compile(r"^\s*#\s*(.+?)\s*$")
_NAME = re.compile(r"^\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"'],?\s*(#.*)?$")


def api_groups() -> list[tuple[str, list[str]]]:
    """``__all__`` split into the groups its comments name, in source order."""
    text = (ROOT / "lib" / "greenhttp" / "__init__.py").read_text(encoding="utf-8")
    block = re.search(r"^__all__\s*=\s*\[\n(.*?)^\]", text, re.S | re.M)
    groups: list[tuple[str, list[str]]] = []
    if block is not None:
        for line in block.group(1).splitlines():
            if (m := _NAME.match(line)) is not None:
                if not groups:
                    groups.append(("Other names", []))
                groups[-1][1].append(m.group(1))
            elif (m := _GROUP.match(line)) is not None:
                groups.append((m.group(1)[:1].upper() + m.group(1)[1:], []))
    dunders = [name for _, names in groups for name in names if name.startswith("__")]
    groups = [(title, [n for n in names if not n.startswith("__")]) for title, names in groups]
    if dunders:  # __version__ is nobody's neighbour: it gets a section of its own
        groups.append(("The package", dunders))
    listed = {name for _, names in groups for name in names}
    missing = [name for name in greenhttp.__all__ if name not in listed]
    if missing:  # __all__ built some other way: never leave a name out
        groups.append(("Other names", missing))
    return [(title, names) for title, names in groups if names]


def _directive(name: str) -> str:
    import inspect

    obj = getattr(greenhttp, name)
    full = f"greenhttp.{name}"
    if inspect.ismodule(obj):
        return f"\n.. rubric:: {obj.__name__}\n\n.. automodule:: {obj.__name__}\n"
    if inspect.isclass(obj):
        kind = "autoexception" if issubclass(obj, BaseException) else "autoclass"
        extra = "   :inherited-members:\n" if name == "Dispatcher" else ""
        return f"\n.. {kind}:: {full}\n{extra}"
    if callable(obj):
        return f"\n.. autofunction:: {full}\n"
    # A plain value (``__version__``): its type's docstring would say nothing useful.
    return f"\n.. py:data:: {full}\n   :type: {type(obj).__name__}\n   :value: {obj!r}\n"


def _summarised(name: str) -> bool:
    import inspect

    obj = getattr(greenhttp, name)
    return inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj)


def api_reference() -> str:
    out = []
    for title, names in api_groups():
        out.append(f"## {title}\n\n```{{eval-rst}}\n.. autosummary::\n   :nosignatures:\n\n")
        out.extend(f"   greenhttp.{name}\n" for name in names if _summarised(name))
        out.extend(_directive(name) for name in names)
        out.append("```\n\n")
    return "".join(out)


def _generate_api(app, docname, source):  # type: ignore[no-untyped-def]
    if API_MARKER in source[0]:
        source[0] = source[0].replace(API_MARKER, api_reference())


def setup(app):  # type: ignore[no-untyped-def]
    app.connect("source-read", _drop_missing_pages)
    app.connect("source-read", _generate_api)
    return {"parallel_read_safe": True}
