"""Debug logging: the spec's debug lines through Python's ``logging``.

Loggers ``greenhttp``, ``greenhttp.fetch`` and ``greenhttp.websocket`` emit
DEBUG records. Callers check :func:`enabled` first, so a disabled logger
costs one attribute read on the hot path. The environment variable
``GREENHTTP_DEBUG`` (comma-separated ``greenhttp``, ``fetch``, ``websocket``
or ``*``) is read once, at first use, and attaches a stderr handler writing
the spec's line shape: ``GREENHTTP <pid>: connecting to localhost using http:h1``.
"""

from __future__ import annotations

import logging
import os
import sys
from functools import partial

__all__ = ["core", "core_enabled", "core_maybe_enabled", "websocket", "enabled", "setup_from_env"]

core = logging.getLogger("greenhttp")
fetch = logging.getLogger("greenhttp.fetch")
websocket = logging.getLogger("greenhttp.websocket")

#: True when the ``greenhttp`` logger emits DEBUG records.
core_enabled = partial(core.isEnabledFor, logging.DEBUG)

# The per-request check, in C: logging keeps a per-logger cache of isEnabledFor
# answers and clears it whenever any level changes. A cached False answers at
# once; True or "not cached" falls through to core_enabled(), which fills it.
_level_cache = getattr(core, "_cache", None)
#: False only when the ``greenhttp`` logger surely emits no DEBUG record: call as
#: ``core_maybe_enabled() and core_enabled()``.
core_maybe_enabled = (
    partial(_level_cache.get, logging.DEBUG, True) if isinstance(_level_cache, dict) else core_enabled
)

_NAMESPACES = {"greenhttp": core, "fetch": fetch, "websocket": websocket}
_configured = False


class _SpecFormatter(logging.Formatter):
    """``<NS> <pid>: <message>``, NS the logger's namespace or the one given."""

    def __init__(self, namespace: str | None = None) -> None:
        super().__init__()
        self.namespace = namespace

    def format(self, record: logging.LogRecord) -> str:
        ns = self.namespace or record.name.rsplit(".", 1)[-1].upper()
        return f"{ns} {os.getpid()}: {record.getMessage()}"


def _own_record(name: str, record: logging.LogRecord) -> bool:
    return record.name == name


# The connection lines (the spec's client events): with ``websocket`` listed and
# ``greenhttp`` not, they are written as WEBSOCKET lines, as the original routes its
# client events to the websocket namespace when the core one is off: they are the
# opening handshake's (spec 6.3, "some lines may appear under both").
_CLIENT_EVENTS = ("connecting to ", "connected to ", "connection to ", "sending request to ")


def _client_event(record: logging.LogRecord) -> bool:
    return record.name == core.name and isinstance(record.msg, str) and record.msg.startswith(_CLIENT_EVENTS)


def setup_from_env() -> None:
    """Read ``GREENHTTP_DEBUG`` once and attach stderr handlers it asks for."""
    global _configured
    if _configured:
        return
    _configured = True
    value = os.environ.get("GREENHTTP_DEBUG", "")
    names = {v.strip().lower() for v in value.split(",") if v.strip()}
    if not names:
        return
    if "*" in names:
        names = set(_NAMESPACES)
    for name in names:
        logger = _NAMESPACES.get(name)
        if logger is None:
            continue
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_SpecFormatter())
        # Only this namespace's own lines: ``greenhttp.websocket`` records also
        # propagate to the ``greenhttp`` logger, whose namespace does not cover them.
        handler.addFilter(partial(_own_record, logger.name))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    if "websocket" in names and "greenhttp" not in names:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_SpecFormatter("WEBSOCKET"))
        handler.addFilter(_client_event)
        core.addHandler(handler)
        core.setLevel(logging.DEBUG)  # (it still propagates: its other records are not ours to print)


def enabled(logger: logging.Logger = core) -> bool:
    """True if ``logger`` would emit a DEBUG record (cheap)."""
    return logger.isEnabledFor(logging.DEBUG)
