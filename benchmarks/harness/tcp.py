"""The kernel's TCP congestion control: reported with every run, optionally set for one.

Why it matters on loopback: BBR paces its sends. Without the ``fq`` qdisc
(loopback has none: ``noqueue``) the kernel paces with a high-resolution timer
per burst, which on a virtual machine costs the *sender* far more than the
data does. In the 1 MiB scenario the sender is nginx, so BBR caps every
client at the server's ceiling (measured: about 2,400-3,000 req/s with BBR,
4,600-5,000 with CUBIC, on the same two-core VM; see docs/performance.md).

``--tcp-congestion NAME`` sets ``net.ipv4.tcp_congestion_control`` before nginx
starts (its listening sockets take the setting when they are made) and puts
the old value back when the run ends. It needs root, and it changes the
setting for the whole machine while the run lasts, so it is never the default.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

SYSCTL = Path("/proc/sys/net/ipv4/tcp_congestion_control")
AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


def current() -> str:
    """The machine's congestion control now ('unknown' where /proc does not say)."""
    try:
        return SYSCTL.read_text().strip()
    except OSError:
        return "unknown"


def describe(chosen: str | None, before: str) -> str:
    """One line for the report: what the run used, and what the machine had."""
    if chosen is None or chosen == before:
        return f"TCP congestion control {before}"
    return f"TCP congestion control {chosen} (set for this run; the machine's setting is {before})"


@contextlib.contextmanager
def congestion_control(name: str | None) -> Iterator[str]:
    """Use congestion control ``name`` inside the block (None: leave it); yields the old one.

    Raises ``SystemExit`` with a readable message when the kernel lacks
    ``name`` or the setting cannot be written (not root).
    """
    before = current()
    if name is None or name == before:
        yield before
        return
    try:
        available = AVAILABLE.read_text().split()
    except OSError as exc:
        raise SystemExit(f"--tcp-congestion: cannot read {AVAILABLE}: {exc}") from None
    if name not in available:
        raise SystemExit(f"--tcp-congestion: {name!r} is not available; this kernel has {', '.join(available)}")
    try:
        SYSCTL.write_text(name)
    except OSError as exc:
        raise SystemExit(f"--tcp-congestion {name}: cannot write {SYSCTL} (root only): {exc}") from None
    try:
        yield before
    finally:
        SYSCTL.write_text(before)
