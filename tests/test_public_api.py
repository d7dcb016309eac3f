"""The single entry point: ``greenhttp.__all__`` and what it exports (DESIGN.md §6.8)."""

from __future__ import annotations
import __future__

import inspect
import types

import greenhttp

# The names issue 2 (the HTTP/1.1 Client core) must export; later issues add more.
REQUIRED = {
    "Dispatcher",
    "ComposedDispatcher",
    "Client",
    "ClientStats",
    "ResponseData",
    "BodyReadable",
    "Controller",
    "AbortController",
    "AbortSignal",
    "build_connector",
    "errors",
    "DOMException",
    "ExperimentalWarning",
    "__version__",
}
_NAMESPACES = {"errors", "interceptors", "cache_stores"}  # API.md: the public sub-namespaces


def _exported_namespace() -> set[str]:
    """The public names the package's namespace actually holds."""
    out = set()
    for name, value in vars(greenhttp).items():
        if name.startswith("_") or isinstance(value, __future__._Feature):
            continue
        if isinstance(value, types.ModuleType) and name not in _NAMESPACES:
            continue  # an implementation module, imported as a side effect
        out.add(name)
    return out | {"__version__"}


def test_all_is_exactly_the_exported_names():
    assert len(greenhttp.__all__) == len(set(greenhttp.__all__)), "duplicates in __all__"
    assert set(greenhttp.__all__) == _exported_namespace()
    assert REQUIRED <= set(greenhttp.__all__)


def test_every_name_in_all_exists():
    for name in greenhttp.__all__:
        assert hasattr(greenhttp, name), name


def test_star_import_gives_exactly_all():
    ns: dict = {}
    exec("from greenhttp import *", ns)
    assert {k for k in ns if k != "__builtins__"} == set(greenhttp.__all__)


def _public_objects():
    for name in greenhttp.__all__:
        obj = getattr(greenhttp, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            yield name, obj


def test_every_export_reports_greenhttp_as_its_module():
    wrong = {name: obj.__module__ for name, obj in _public_objects() if obj.__module__ != "greenhttp"}
    assert wrong == {}


def test_every_public_callable_has_a_docstring():
    missing = [name for name, obj in _public_objects() if not (obj.__doc__ or "").strip()]
    assert missing == []


def test_public_methods_have_docstrings():
    missing = []
    for cls_name in ("Client", "BodyReadable", "AbortController", "AbortSignal", "Controller"):
        cls = getattr(greenhttp, cls_name)
        for attr, value in vars(cls).items():
            if attr.startswith("_"):
                continue
            fn = value.fget if isinstance(value, property) else value
            if callable(fn) and not (getattr(fn, "__doc__", None) or "").strip():
                missing.append(f"{cls_name}.{attr}")
    assert missing == []


def test_namespaces_and_version():
    assert isinstance(greenhttp.__version__, str) and greenhttp.__version__
    assert inspect.ismodule(greenhttp.errors)
    assert issubclass(greenhttp.errors.InvalidArgumentError, greenhttp.errors.GreenHTTPError)


def test_error_classes_have_codes_and_names():
    from greenhttp import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        if not (inspect.isclass(cls) and issubclass(cls, errors.GreenHTTPError)):
            continue
        assert cls.code.startswith(("GH_ERR", "HPE_")), name
        assert isinstance(cls.name, str) and cls.name
    for cls in (errors.ConnectTimeoutError, errors.HeadersTimeoutError, errors.BodyTimeoutError):
        assert issubclass(cls, TimeoutError)
    assert issubclass(errors.SocketError, ConnectionError)
    assert issubclass(errors.RequestAbortedError, errors.AbortError)
