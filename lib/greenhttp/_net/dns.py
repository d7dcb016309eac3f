"""Host name resolution for the ``dns`` interceptor, through gevent's resolver.

:func:`lookup` has the shape of the interceptor's ``lookup`` option,
``lookup(origin, options, callback)``: it returns at once and calls
``callback(err, records)`` later from a new greenlet, with ``records`` a
list of ``{"address": str, "family": 4 | 6}`` (the system resolver reports
no TTL). The resolution itself runs in gevent's resolver (by default its
thread pool, or c-ares when configured), so it never blocks the hub.
"""

from __future__ import annotations

import logging
import socket as _stdsocket
from collections.abc import Callable
from typing import Any

from gevent import socket as gsocket
from gevent import spawn

__all__ = ["lookup", "resolve"]

_log = logging.getLogger("greenhttp")
_FAMILIES = {_stdsocket.AF_INET: 4, _stdsocket.AF_INET6: 6}


def resolve(hostname: str, family: int = 0) -> list[dict[str, Any]]:
    """The addresses of ``hostname`` (``family`` 0, 4 or 6), each once, IPv4 first.

    Blocks the calling greenlet only. Raises ``socket.gaierror`` (an OSError).
    """
    af = {0: _stdsocket.AF_UNSPEC, 4: _stdsocket.AF_INET, 6: _stdsocket.AF_INET6}[family]
    infos = gsocket.getaddrinfo(hostname, None, af, _stdsocket.SOCK_STREAM)
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    for fam, _type, _proto, _name, sockaddr in infos:
        version = _FAMILIES.get(fam)
        if version is None:
            continue
        address = sockaddr[0].split("%", 1)[0] if version == 6 and "%" in sockaddr[0] else sockaddr[0]
        if (address, version) not in seen:
            seen.add((address, version))
            out.append({"address": address, "family": version})
    out.sort(key=lambda r: r["family"])  # stable: IPv4 first, each family in resolver order
    return out


def lookup(origin: Any, options: dict[str, Any], callback: Callable[[BaseException | None, Any], Any]) -> None:
    """Resolve ``origin.hostname`` in a new greenlet; then ``callback(err, records)``. Never blocks.

    ``options["dual_stack"]`` False restricts the query to ``options["affinity"]``'s family.
    """
    family = 0 if options.get("dual_stack", True) else (options.get("affinity") or 4)
    spawn(_run, origin.hostname, family, callback)


def _run(hostname: str, family: int, callback: Callable[[BaseException | None, Any], Any]) -> None:
    try:
        records = resolve(hostname, family)
    except Exception as exc:  # socket.gaierror, or UnicodeError for a name IDNA cannot encode
        callback(exc, None)
        return
    callback(None, records)
