"""greenhttp benchmark: loopback nginx, every client in its own pinned subprocess.

    .venv/bin/python benchmarks/run.py                  # full run (~3-5 s per client run)
    .venv/bin/python benchmarks/run.py --quick          # smoke run, under a minute
    .venv/bin/python benchmarks/run.py --scenarios h1_100b_c16 --clients greenhttp,undici

Per scenario: (full mode) one short calibration run per client sizes its
request count to ``--duration`` seconds; then ``--repeats`` rounds run every
client once each, interleaved (A B C A B C ...); the table shows medians.
Results go to benchmarks/results/latest.{json,md}; ``--update-docs`` also puts
the table into docs/performance.md. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import report, tcp
from harness.execute import ensure_undici, run_client
from harness.scenarios import BENCH_DIR, CLIENTS, NODE_DIR, SCENARIOS, Scenario, clients_for, select
from harness.server import CpuPlan, Nginx, find_nginx

REPO = BENCH_DIR.parent
CALIBRATE_S = 1.0
QUICK_TIMEOUT_S = 60.0
PY_PACKAGES = ("greenhttp", "gevent", "geventhttpclient", "urllib3", "requests", "httpx",
               "aiohttp", "httptools")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small N, 1 repeat: a smoke run")
    p.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default 3; 1 with --quick)")
    p.add_argument("--scenarios", help="comma-separated scenario names (default: all)")
    p.add_argument("--clients", help="comma-separated client names (default: each scenario's set)")
    p.add_argument("--duration", type=float, default=4.0, help="seconds per client run in full mode (default 4)")
    p.add_argument("-n", type=int, default=None, help="fixed request count per run (no calibration)")
    p.add_argument("--baseline", help="divide req/s by this client instead of greenhttp")
    p.add_argument("--no-pin", action="store_true", help="do not pin server and client to separate CPUs")
    p.add_argument("--no-npm", action="store_true", help="do not npm-install undici when it is missing")
    p.add_argument("--tcp-congestion", metavar="NAME",
                   help="set the kernel's TCP congestion control for this run (root; restored after)")
    p.add_argument("--output", type=Path, default=BENCH_DIR / "results", help="directory for latest.json/md")
    p.add_argument("--update-docs", action="store_true", help="write the table into docs/performance.md")
    p.add_argument("--list", action="store_true", help="list scenarios and clients, then exit")
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.repeats < 1 or (args.n is not None and args.n < 1) or args.duration <= 0:
        p.error("--repeats, -n and --duration must be positive")
    return args


def _versions(nginx: Nginx) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PY_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    out["nginx"] = nginx.version()
    node = shutil.which("node")
    if node:
        out["node"] = subprocess.run([node, "--version"], capture_output=True, text=True,
                                     timeout=10).stdout.strip()
        pkg = NODE_DIR / "node_modules" / "undici" / "package.json"
        if pkg.exists():
            out["undici"] = json.loads(pkg.read_text())["version"]
    return out


def _machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model or platform.processor() or 'unknown CPU'}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


class Bench:
    """One benchmark session against one running nginx."""

    def __init__(self, args: argparse.Namespace, nginx: Nginx, plan: CpuPlan) -> None:
        self.args, self.nginx, self.plan = args, nginx, plan
        self.run_timeout = QUICK_TIMEOUT_S if args.quick else max(60.0, args.duration * 8 + 30)

    def spec(self, sc: Scenario, n: int, calibrate_s: float | None = None) -> dict[str, Any]:
        return {
            "origin": self.nginx.origin(sc.protocol),
            "host": "127.0.0.1",
            "port": self.nginx.ports[sc.protocol],
            "protocol": sc.protocol,
            "path": sc.path,
            "expect_len": sc.body_len,
            "n": n,
            "warmup": max(2 * sc.connections, min(n // 20, 1000)) if calibrate_s is None
            else max(2 * sc.connections, 200),
            "concurrency": sc.concurrency,
            "connections": sc.connections,
            "calibrate_s": calibrate_s,
            "timeout_s": self.run_timeout - 25,  # leaves time to close and report
            "cafile": self.nginx.cafile,
        }

    def run(self, sc: Scenario, client: str, spec: dict[str, Any]) -> dict[str, Any]:
        return run_client(CLIENTS[client], spec, self.plan.client, self.run_timeout)

    def size(self, sc: Scenario, client: str) -> tuple[int, dict[str, Any] | None]:
        """Requests per run for ``client``; a non-ok calibration result ends it early."""
        if self.args.n is not None:
            return max(self.args.n, 1), None
        if self.args.quick:
            return sc.quick_n, None
        probe = self.run(sc, client, self.spec(sc, 10**9, CALIBRATE_S))
        if probe["status"] != "ok":
            return 0, probe
        return max(sc.min_n, int(probe["rps"] * self.args.duration)), None

    def scenario(self, sc: Scenario) -> tuple[Scenario, str, list[report.Row]]:
        names = clients_for(sc, self.args.clients)
        rows = {name: report.Row(name) for name in names}
        log(f"== {sc.name}: {sc.title}")
        live: list[str] = []
        for name in names:
            n, failure = self.size(sc, name)
            rows[name].n = n
            if failure is not None:
                rows[name].runs.append(failure)
                log(f"   {name}: {failure['status']}: {failure['reason']}")
            else:
                live.append(name)
        for rep in range(self.args.repeats):  # interleaved: A B C A B C ...
            for name in live:
                result = self.run(sc, name, self.spec(sc, rows[name].n))
                rows[name].runs.append(result)
                log(f"   r{rep + 1}/{self.args.repeats} {name:<18} {self._brief(result)}")
        baseline = self.args.baseline or sc.baseline
        return sc, baseline, [rows[n] for n in names]

    @staticmethod
    def _brief(r: dict[str, Any]) -> str:
        if r["status"] != "ok":
            return f"{r['status']}: {r['reason']}"
        extra = f", {r['errors']} errors ({r['first_error']})" if r.get("errors") else ""
        return (f"{r['rps']:>9,.0f} req/s  p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  "
                f"cpu {r['cpu_us_per_req']:.1f} µs/req  rss {r['maxrss_kb'] / 1024:.0f} MiB  "
                f"n={r['requests']}{extra}")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds: runner groups and nginx are stopped in finally


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if args.list:
        for sc in SCENARIOS.values():
            print(f"{sc.name:<14} {sc.title}\n{'':<14} clients: {', '.join(sc.allowed())}")
        return 0
    scenarios = select(args.scenarios)
    binary = find_nginx()
    if binary is None:
        log("nginx not found: install it (apt-get install nginx) or put it on PATH")
        return 2
    if not args.no_npm:
        ensure_undici(log)
    plan = CpuPlan.choose(pin=not args.no_pin)
    log(f"cpu: {plan.note}")
    with tcp.congestion_control(args.tcp_congestion) as before, Nginx(binary=binary, cpu=plan.server) as nginx:
        network = tcp.describe(args.tcp_congestion, before)
        log(f"network: {network}")
        bench = Bench(args, nginx, plan)
        results = [bench.scenario(sc) for sc in scenarios]
        meta = {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": _machine(),
            "network": network,
            "pinning": plan.note,
            "mode": "quick" if args.quick else (f"-n {args.n}" if args.n else f"{args.duration:g} s per run"),
            "repeats": args.repeats,
            "versions": _versions(nginx),
            "argv": sys.argv[1:],
        }
    data = report.to_json(meta, results)
    json_path, md_path = report.write(args.output, data)
    table = report.markdown(data)
    print(table)
    log(f"wrote {json_path} and {md_path}")
    if args.update_docs:
        doc = REPO / "docs" / "performance.md"
        if report.update_doc(doc, table):
            log(f"updated the table in {doc}")
        else:
            log(f"{doc} has no {report.DOC_START} ... {report.DOC_END} section; not updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
