"""The soak: steady load with injected faults for a long time, watching memory level off.

    .venv/bin/python benchmarks/soak.py                   # 10 minutes (make soak)
    .venv/bin/python benchmarks/soak.py --duration 20     # a short run, to check the script

A child process runs ``tests/faults/faultkit.FaultyServer`` (loopback; a share
of its connections reset, send garbage, cut bodies short or stall), so the
resident memory measured here is the client's alone. ``--greenlets`` worker
greenlets (10,000 by default) loop through one ``Pool`` until the duration
is up; every request is tallied as a success (its exact body) or by error
class. Every ``--sample`` seconds the script records RSS, open file
descriptors and progress, and prints them as a table at the end.

It fails (exit status 1) when:

* a request ended in an error class the faults do not document, or with a
  wrong body, or did not end at all;
* successes and errors do not match, one for one, the good answers and the
  faults the server reports having sent;
* a file descriptor or a worker greenlet outlives the pool;
* RSS grew more than ``--max-growth`` MiB over the last third of the run
  (after the first sample, which is warm-up).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests" / "faults"), str(REPO / "tests")]  # faultkit, and the testkit it uses

import gevent  # noqa: E402
from faultkit import FaultyServer, LeakCheck, Outcomes  # noqa: E402

import greenhttp  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / (1 << 20)


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


# ---------------------------------------------------------------------------
# the server child: `soak.py --serve SEED`
# ---------------------------------------------------------------------------


def serve(seed: int, stall_limit: float) -> None:
    """Run a FaultyServer; print its origin; on a line from stdin, print its counts and exit."""
    server = FaultyServer(seed=seed, stall_limit=stall_limit)
    print(server.origin, flush=True)
    gevent.get_hub().threadpool.apply(sys.stdin.readline)  # the parent says when
    print(
        json.dumps(
            {
                "answered": server.answered,
                "injected": dict(server.injected),
                "expected": dict(server.expected_errors()),
                "connections": server.connections,
            }
        ),
        flush=True,
    )
    server.stop()


class ServerProcess:
    def __init__(self, seed: int, stall_limit: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(seed), "--stall-limit", str(stall_limit)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.origin = self.proc.stdout.readline().strip()
        if not self.origin.startswith("http://"):
            self.proc.kill()
            raise SystemExit(f"the server child did not start: {self.origin!r}")

    def counts(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("report\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        self.proc.wait(timeout=10)
        return json.loads(line)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


# ---------------------------------------------------------------------------
# the load
# ---------------------------------------------------------------------------


def soak(args: argparse.Namespace) -> int:
    server = ServerProcess(args.seed, args.stall_limit)
    try:
        return _run(args, server)
    finally:
        server.kill()


def _run(args: argparse.Namespace, server: ServerProcess) -> int:
    check = LeakCheck()
    check.start()
    pool = greenhttp.Pool(
        server.origin,
        connections=args.connections,
        headers_timeout=args.timeout,
        body_timeout=args.timeout,
        max_response_size=1 << 16,
    )
    outcomes = Outcomes()
    started = time.monotonic()
    deadline = started + args.duration
    samples: list[tuple[float, float, int, int, int]] = []  # t, rss, fds, requests, errors

    def fetch(path: str) -> bytes:
        return pool.request(path=path).body.bytes()

    def worker(w: int) -> None:
        i = 0
        while time.monotonic() < deadline:
            path = f"/echo/{w}/{i}"
            i += 1
            outcomes.run(partial(fetch, path), expected=path.encode())

    def sampler() -> None:
        while True:
            samples.append(
                (time.monotonic() - started, rss_mib(), fd_count(), outcomes.total, outcomes.errors)
            )
            if time.monotonic() >= deadline:
                return
            gevent.sleep(min(args.sample, max(0.0, deadline - time.monotonic())))

    print(
        f"soak: {args.duration:.0f}s, {args.greenlets} greenlets, {args.connections} connections, "
        f"server {server.origin}",
        flush=True,
    )
    watch = gevent.spawn(sampler)
    workers = [gevent.spawn(worker, w) for w in range(args.greenlets)]
    # Every request is bounded by the timeouts: the workers end soon after the deadline.
    gevent.joinall(workers, timeout=args.duration + 10 * args.timeout + 30)
    hung = sum(1 for g in workers if not g.dead)
    watch.join(timeout=args.sample + 5)
    elapsed = time.monotonic() - started
    samples.append((elapsed, rss_mib(), fd_count(), outcomes.total, outcomes.errors))
    gevent.killall([g for g in workers if not g.dead], timeout=5)
    pool.destroy()
    del workers
    fds, live = check.leaks(timeout=5)
    check.stop()
    counts = server.counts()
    return _report(args, samples, outcomes, counts, hung, fds, live, elapsed)


def _report(
    args: argparse.Namespace,
    samples: list[tuple[float, float, int, int, int]],
    outcomes: Outcomes,
    counts: dict[str, Any],
    hung: int,
    fds: dict[int, str],
    live: list[Any],
    elapsed: float,
) -> int:
    print()
    print(f"{'t (s)':>7} {'RSS (MiB)':>10} {'fds':>5} {'requests':>9} {'req/s':>7} {'errors':>7}")
    prev_t, prev_n = 0.0, 0
    for t, rss, nfd, n, errs in samples:
        rate = (n - prev_n) / (t - prev_t) if t > prev_t else 0.0
        print(f"{t:7.1f} {rss:10.1f} {nfd:5d} {n:9d} {rate:7.0f} {errs:7d}")
        prev_t, prev_n = t, n

    failures: list[str] = []
    # Memory: the first sample is warm-up; compare the start and the end of the last third.
    steady = samples[1:] or samples
    cut = elapsed * 2 / 3
    tail = [s for s in steady if s[0] >= cut]
    before = [s for s in steady if s[0] < cut]
    base = before[-1][1] if before else steady[0][1]
    growth = max(s[1] for s in tail) - base if tail else 0.0
    if growth > args.max_growth:
        failures.append(
            f"RSS grew {growth:.1f} MiB over the last third (bound {args.max_growth} MiB)"
        )

    expected = counts["expected"]
    got = {k: v for k, v in outcomes.counts.items() if k != "ok"}
    print()
    print(
        f"requests: {outcomes.total} in {elapsed:.1f}s ({outcomes.total / elapsed:.0f}/s) "
        f"over {counts['connections']} connections"
    )
    print(f"faults injected: {sum(counts['injected'].values())} {counts['injected']}")
    print(f"outcomes: {dict(outcomes.counts)}")
    print(
        f"RSS: first {samples[0][1]:.1f} MiB, last {samples[-1][1]:.1f} MiB, "
        f"last-third growth {growth:+.1f} MiB"
    )
    print(f"leaks: {len(fds)} fds, {len(live)} greenlets; hung requests: {hung}")

    if outcomes.undocumented:
        failures.append(f"undocumented errors: {outcomes.undocumented[:5]!r}")
    if outcomes.truncated:
        failures.append(f"{outcomes.truncated} responses with a wrong body")
    if hung:
        failures.append(f"{hung} workers still running after every timeout passed")
    if outcomes.counts["ok"] != counts["answered"]:
        failures.append(
            f"{outcomes.counts['ok']} successes for {counts['answered']} good answers sent"
        )
    if got != expected:
        failures.append(f"errors {got} do not match the injected faults {expected}")
    if fds or live:
        failures.append(f"leaked fds {fds}, greenlets {live[:5]}")
    for f in failures:
        print(f"FAIL: {f}")
    print("soak: ok" if not failures else "soak: FAILED")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=600.0, help="seconds of load (default 600)")
    p.add_argument("--greenlets", type=int, default=10000, help="worker greenlets (default 10000)")
    p.add_argument("--connections", type=int, default=64, help="pool connections (default 64)")
    p.add_argument(
        "--sample", type=float, default=5.0, help="seconds between RSS samples (default 5)"
    )
    p.add_argument(
        "--timeout", type=float, default=0.5, help="headers/body timeout, seconds (default 0.5)"
    )
    p.add_argument(
        "--max-growth",
        type=float,
        default=8.0,
        help="MiB of RSS growth allowed over the last third",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--stall-limit", type=float, default=30.0, help=argparse.SUPPRESS)
    p.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve is not None:
        serve(args.serve, args.stall_limit)
        return 0
    if args.duration <= 0 or args.greenlets <= 0 or args.sample <= 0:
        p.error("--duration, --greenlets and --sample must be positive")
    return soak(args)


if __name__ == "__main__":
    sys.exit(main())
