"""What is measured: the scenarios, and the clients that can run each."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent.parent
RUNNERS = BENCH_DIR / "runners"
NODE_DIR = BENCH_DIR / ".node"


@dataclass(frozen=True)
class ClientDef:
    """A client runner: a script and the name it is given on its command line."""

    name: str
    script: Path
    arg: str
    label: str  # how the row reads in the table

    def command(self, spec_json: str) -> list[str]:
        if self.script.suffix == ".mjs":
            return [shutil.which("node") or "node", str(self.script), self.arg, spec_json]
        return [sys.executable, str(self.script), self.arg, spec_json]

    def unavailable(self) -> str | None:
        """Why this client cannot run at all on this machine (None: it can try)."""
        if self.script.suffix == ".mjs":
            if shutil.which("node") is None:
                return "node not found on PATH"
            if not (NODE_DIR / "node_modules" / "undici" / "package.json").exists():
                return "undici not installed (npm install --prefix benchmarks/.node undici@7)"
        return None


GH = RUNNERS / "greenhttp_runner.py"
GEV = RUNNERS / "gevent_peers.py"
AIO = RUNNERS / "asyncio_peers.py"
BARE = RUNNERS / "bare_loops.py"

CLIENTS: dict[str, ClientDef] = {
    c.name: c
    for c in (
        ClientDef("greenhttp", GH, "pool", "greenhttp Pool.request"),
        ClientDef("greenhttp_dispatch", GH, "dispatch", "greenhttp Client.dispatch (raw handler)"),
        ClientDef("greenhttp_h2c", GH, "h2c", "greenhttp H2CClient.request"),
        ClientDef("geventhttpclient", GEV, "geventhttpclient", "geventhttpclient"),
        ClientDef("urllib3", GEV, "urllib3", "urllib3 (gevent)"),
        ClientDef("requests", GEV, "requests", "requests (gevent)"),
        ClientDef("httpx", GEV, "httpx", "httpx sync (gevent)"),
        ClientDef("httpx_asyncio", AIO, "httpx_asyncio", "httpx async (asyncio)"),
        ClientDef("aiohttp", AIO, "aiohttp", "aiohttp (asyncio)"),
        ClientDef("undici", BENCH_DIR / "node_undici.mjs", "undici", "undici@7 (Node)"),
        ClientDef("bare_socket", BARE, "bare_socket", "limit: bare gevent socket loop"),
        ClientDef("bare_httptools", BARE, "bare_httptools", "limit: gevent loop + httptools"),
        ClientDef("bare_h2", BARE, "bare_h2", "bound: the h2 library alone (gevent)"),
        ClientDef("bare_h2_novalidate", BARE, "bare_h2_novalidate", "bound: h2 alone, no header validation"),
    )
}

H1_DEFAULT = (
    "greenhttp", "greenhttp_dispatch", "geventhttpclient", "urllib3", "requests", "httpx",
    "aiohttp", "undici", "bare_socket", "bare_httptools",
)


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    protocol: str  # "h1", "h2c" or "h2"
    path: str
    body_len: int
    concurrency: int
    connections: int
    quick_n: int  # measured requests in --quick mode
    min_n: int  # floor on the calibrated request count (slow clients run longer)
    clients: tuple[str, ...]  # run by default, in this order
    baseline: str  # the greenhttp client the ratio column divides by
    extra_clients: tuple[str, ...] = ()  # allowed, run only when named in --clients

    def allowed(self) -> tuple[str, ...]:
        return self.clients + self.extra_clients


KIB100 = 100
MIB = 1024 * 1024

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("h1_100b_c1", "HTTP/1.1, 100 B body, 1 greenlet, 1 connection",
                 "h1", "/100b", KIB100, 1, 1, 2000, 1000, H1_DEFAULT, "greenhttp",
                 ("httpx_asyncio",)),
        Scenario("h1_100b_c16", "HTTP/1.1, 100 B body, 16 greenlets, 16 connections",
                 "h1", "/100b", KIB100, 16, 16, 3000, 1000, H1_DEFAULT, "greenhttp",
                 ("httpx_asyncio",)),
        Scenario("h1_100b_c256", "HTTP/1.1, 100 B body, 256 greenlets, 64 connections",
                 "h1", "/100b", KIB100, 256, 64, 3000, 1000, H1_DEFAULT, "greenhttp",
                 ("httpx_asyncio",)),
        Scenario("h1_1mib_c4", "HTTP/1.1, 1 MiB body, 4 greenlets, 4 connections",
                 "h1", "/1m", MIB, 4, 4, 200, 100, H1_DEFAULT, "greenhttp",
                 ("httpx_asyncio",)),
        Scenario("h2c_c64", "h2c (prior knowledge), 100 B body, 64 streams on 1 connection",
                 "h2c", "/100b", KIB100, 64, 1, 2000, 1000,
                 ("greenhttp_h2c", "httpx", "undici", "bare_h2"), "greenhttp_h2c",
                 ("httpx_asyncio", "bare_h2_novalidate")),
        Scenario("h2_tls_c64", "HTTP/2 over TLS (ALPN h2), 100 B body, 64 streams on 1 connection",
                 "h2", "/100b", KIB100, 64, 1, 2000, 1000,
                 ("greenhttp", "httpx", "undici"), "greenhttp", ("httpx_asyncio",)),
        Scenario("spawn_10k", "10,000 greenlets on one Pool of 64 connections, 100 B body",
                 "h1", "/100b", KIB100, 10000, 64, 10000, 10000,
                 ("greenhttp", "geventhttpclient"), "greenhttp"),
    )
}


def select(names: str | None) -> list[Scenario]:
    if not names:
        return list(SCENARIOS.values())
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    return [SCENARIOS[n] for n in chosen]


def clients_for(scenario: Scenario, names: str | None) -> list[str]:
    """The scenario's clients, or those of ``names`` (comma-separated) it allows."""
    if not names:
        return list(scenario.clients)
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in CLIENTS]
    if unknown:
        raise SystemExit(f"unknown client(s) {unknown}; known: {', '.join(CLIENTS)}")
    allowed = scenario.allowed()
    return [n for n in chosen if n in allowed]
