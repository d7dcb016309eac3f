"""What every Python client runner shares: the run spec, the drivers, the result line.

A runner is a subprocess started by ``benchmarks/run.py`` as
``python runners/<file>.py <client> '<spec json>'``. It performs ``warmup``
requests (not measured), then ``n`` measured requests (or, when
``calibrate_s`` is set, as many as fit in that many seconds) from
``concurrency`` workers that take requests from one shared counter, and prints
exactly one JSON line on stdout: either the measurements or
``{"skipped": reason}``.

This module imports only the standard library at the top: the gevent runners
monkey-patch before anything else, and the asyncio runners never import
gevent at all.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

#: One request: performs it completely (body read) and returns the body length.
RequestFn = Callable[[], int]
AsyncRequestFn = Callable[[], Awaitable[int]]


@dataclass(frozen=True)
class Spec:
    """The work one runner performs; built by the harness, read from argv."""

    origin: str  # "http://127.0.0.1:8080" or "https://…"
    host: str
    port: int
    protocol: str  # "h1", "h2c" (prior knowledge) or "h2" (TLS, ALPN)
    path: str
    expect_len: int  # body length every response must have
    n: int  # measured requests
    warmup: int  # unmeasured requests first (opens the connections)
    concurrency: int  # workers (greenlets, tasks) issuing requests
    connections: int  # connections the client may open
    calibrate_s: float | None  # if set: stop measuring after this many seconds
    timeout_s: float  # bound on warmup + measured phase; the harness kills us 15 s later
    cafile: str | None  # CA bundle for https origins

    @classmethod
    def from_argv(cls, argv: list[str]) -> tuple[str, Spec]:
        """Parse ``<client> <spec-json>``."""
        if len(argv) != 3:
            raise SystemExit(f"usage: {argv[0]} CLIENT SPEC_JSON")
        return argv[1], cls(**json.loads(argv[2]))


class Recorder:
    """Latencies and errors of the measured phase."""

    def __init__(self, expect_len: int) -> None:
        self.expect_len = expect_len
        # 8 bytes a sample, not a float object (32 bytes with its list slot): the
        # recording must not weigh on the peak RSS of the client it measures,
        # and a faster client records more samples.
        self.latencies = array("d")
        self.errors = 0
        self.first_error: str | None = None

    def error(self, message: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = message[:300]

    def done(self, started: float, size: int) -> None:
        if size != self.expect_len:
            self.error(f"body length {size}, expected {self.expect_len}")
        else:
            self.latencies.append(time.perf_counter() - started)


def cpu_seconds() -> float:
    """User + system CPU time of this process (all threads) so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (0 if empty)."""
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))
    return ordered[index]


def summarize(rec: Recorder, elapsed: float, cpu: float, timed_out: bool) -> dict[str, Any]:
    # Linux reports ru_maxrss in KiB: the peak of the whole process, read before
    # sorting makes a list of the samples.
    maxrss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ok = len(rec.latencies)
    ordered = sorted(rec.latencies)
    return {
        "requests": ok,
        "errors": rec.errors,
        "first_error": rec.first_error,
        "timed_out": timed_out,
        "elapsed_s": elapsed,
        "rps": ok / elapsed if elapsed > 0 else 0.0,
        "p50_ms": percentile(ordered, 0.50) * 1e3,
        "p99_ms": percentile(ordered, 0.99) * 1e3,
        "max_ms": (ordered[-1] if ordered else 0.0) * 1e3,
        "cpu_us_per_req": cpu / ok * 1e6 if ok else 0.0,
        "maxrss_kb": maxrss_kb,
    }


def emit(result: dict[str, Any]) -> None:
    """Print the one JSON result line the harness reads."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def skip(reason: str) -> NoReturn:
    """Report this client as skipped (not installed, not implemented) and exit 0."""
    emit({"skipped": reason})
    raise SystemExit(0)


class _Counter:
    """Requests left to issue; shared by all workers of one phase."""

    def __init__(self, n: int, deadline: float | None) -> None:
        self.left = n
        self.deadline = deadline

    def take(self) -> bool:
        if self.left <= 0:
            return False
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            self.left = 0
            return False
        self.left -= 1
        return True


def drive_gevent(spec: Spec, workers: list[RequestFn]) -> dict[str, Any]:
    """Run the warmup and the measured phase with one greenlet per worker."""
    import gevent

    def phase(n: int, deadline: float | None, rec: Recorder) -> bool:
        counter = _Counter(n, deadline)

        def loop(request: RequestFn) -> None:
            while counter.take():  # bounded: at most n iterations in all
                started = time.perf_counter()
                try:
                    size = request()
                except Exception as exc:  # a failed request is counted, not fatal
                    rec.error(f"{type(exc).__name__}: {exc}")
                    continue
                rec.done(started, size)

        greenlets = [gevent.spawn(loop, w) for w in workers]
        gevent.joinall(greenlets, timeout=max(1.0, budget_end - time.perf_counter()))
        stuck = [g for g in greenlets if not g.dead]
        if stuck:
            gevent.killall(stuck, timeout=5)
        return bool(stuck)

    budget_end = time.perf_counter() + spec.timeout_s  # both phases share the budget
    phase(spec.warmup, None, Recorder(spec.expect_len))
    rec = Recorder(spec.expect_len)
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    deadline = t0 + spec.calibrate_s if spec.calibrate_s else None
    timed_out = phase(spec.n, deadline, rec)
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    return summarize(rec, elapsed, cpu, timed_out)


def drive_asyncio(spec: Spec, workers: list[AsyncRequestFn]) -> Awaitable[dict[str, Any]]:
    """The asyncio twin of :func:`drive_gevent` (await it inside ``asyncio.run``)."""
    import asyncio

    async def phase(n: int, deadline: float | None, rec: Recorder) -> bool:
        counter = _Counter(n, deadline)

        async def loop(request: AsyncRequestFn) -> None:
            while counter.take():
                started = time.perf_counter()
                try:
                    size = await request()
                except Exception as exc:
                    rec.error(f"{type(exc).__name__}: {exc}")
                    continue
                rec.done(started, size)

        tasks = [asyncio.ensure_future(loop(w)) for w in workers]
        _, pending = await asyncio.wait(
            tasks, timeout=max(1.0, budget_end - time.perf_counter())
        )
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)
        return bool(pending)

    budget_end = time.perf_counter() + spec.timeout_s

    async def run() -> dict[str, Any]:
        await phase(spec.warmup, None, Recorder(spec.expect_len))
        rec = Recorder(spec.expect_len)
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        deadline = t0 + spec.calibrate_s if spec.calibrate_s else None
        timed_out = await phase(spec.n, deadline, rec)
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
        return summarize(rec, elapsed, cpu, timed_out)

    return run()
