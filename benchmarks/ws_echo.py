"""WebSocket echo benchmark: 1 KiB round trips over one connection, messages per second.

    .venv/bin/python benchmarks/ws_echo.py [--messages N] [--rounds R] [--size BYTES] [--pin]

Each client sends one binary message, waits for its echo, and repeats, N
times (after a warm-up), over one connection to the same loopback server:
the ``websockets`` library's asyncio server in a subprocess, without
compression, and again with permessage-deflate for the clients that can
negotiate it (greenhttp inflates what the server compresses but never
compresses what it sends; the ``websockets`` client compresses both ways;
websocket-client has no permessage-deflate). Every client runs in a fresh
subprocess of its own, the configurations are interleaved over R rounds,
and the table gives the median (and the range) of the rounds, plus the
client process's CPU time per round trip. ``--pin`` puts the server on one
CPU and every client on another; by default the scheduler places them (with
one message in flight, a wake-up on the same CPU is cheaper than one across
CPUs, so pinning lowers every rate; on a 2-CPU machine shared with other
work it also makes the rounds depend on what else runs on those CPUs).

Needs the ``bench`` extra (``websocket-client``, ``websockets``). Loopback
only; every loop is bounded; the server stops when its stdin closes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any

WARMUP = 500


def payload(size: int) -> bytes:
    """Deterministic, somewhat compressible bytes (words of a small vocabulary)."""
    words = [b"greenhttp", b"gevent", b"websocket", b"frame", b"echo", b"12345", b"{", b"}", b":"]
    rng = random.Random(size)
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" "
    return bytes(out[:size])


# -- the server (--serve) -----------------------------------------------------------------


def serve() -> None:
    import asyncio

    from websockets.asyncio.server import serve as ws_serve
    from websockets.exceptions import ConnectionClosed

    async def echo(ws: Any) -> None:
        try:
            async for message in ws:
                await ws.send(message)
        except ConnectionClosed:
            pass

    async def main() -> None:
        common = {"max_size": None, "ping_interval": None}
        async with (
            ws_serve(echo, "127.0.0.1", 0, compression=None, **common) as plain,
            ws_serve(echo, "127.0.0.1", 0, compression="deflate", **common) as deflate,
        ):
            ports = {
                "off": plain.sockets[0].getsockname()[1],
                "deflate": deflate.sockets[0].getsockname()[1],
            }
            print(json.dumps(ports), flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(main())


# -- the clients (--client NAME URL N SIZE COMPRESSION) -----------------------------------------
# Each returns (wall seconds, CPU seconds of this process) of N round trips,
# after WARMUP untimed ones.


class _Clock:
    """Wall and process CPU time of the timed loop."""

    def __enter__(self) -> _Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu

    @property
    def result(self) -> tuple[float, float]:
        return self.wall, self.cpu


def greenhttp_websocket(url: str, n: int, data: bytes, compression: str) -> tuple[float, float]:
    import gevent.event

    import greenhttp

    ws = greenhttp.WebSocket(url)
    ws.binary_type = "arraybuffer"
    opened, closed, arrived = gevent.event.Event(), gevent.event.Event(), gevent.event.Event()
    reply: list[Any] = [None]

    def on_message(ev: Any) -> None:
        reply[0] = ev.data
        arrived.set()

    ws.onopen = lambda ev: opened.set()
    ws.onclose = lambda ev: closed.set()
    ws.onmessage = on_message
    if not opened.wait(10):
        raise RuntimeError("greenhttp: the WebSocket did not open")
    if compression == "deflate" and "permessage-deflate" not in ws.extensions:
        raise RuntimeError("greenhttp: permessage-deflate was not negotiated")

    def round_trips(count: int) -> None:
        for _ in range(count):
            arrived.clear()
            ws.send(data)
            if not arrived.wait(10):
                raise RuntimeError("greenhttp: no echo within 10 s")

    round_trips(WARMUP)
    if reply[0] != data:
        raise RuntimeError("greenhttp: wrong echo")
    with _Clock() as clock:
        round_trips(n)
    ws.close(1000)
    closed.wait(10)
    return clock.result


def greenhttp_stream(url: str, n: int, data: bytes, compression: str) -> tuple[float, float]:
    import warnings

    import greenhttp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", greenhttp.ExperimentalWarning)
        wss = greenhttp.WebSocketStream(url)
    opened = wss.opened.get(timeout=10)
    if compression == "deflate" and "permessage-deflate" not in opened.extensions:
        raise RuntimeError("greenhttp: permessage-deflate was not negotiated")
    write, read = opened.writable.write, opened.readable.read
    for _ in range(WARMUP):
        write(data)
        if read() != data:
            raise RuntimeError("greenhttp: wrong echo")
    with _Clock() as clock:
        for _ in range(n):
            write(data)
            read()
    wss.close({"close_code": 1000})
    wss.closed.get(timeout=10)
    return clock.result


def websocket_client(url: str, n: int, data: bytes, compression: str) -> tuple[float, float]:
    import websocket

    ws = websocket.create_connection(url, timeout=10)
    for _ in range(WARMUP):
        ws.send_binary(data)
        if ws.recv() != data:
            raise RuntimeError("websocket-client: wrong echo")
    with _Clock() as clock:
        for _ in range(n):
            ws.send_binary(data)
            ws.recv()
    ws.close()
    return clock.result


def websockets_sync(url: str, n: int, data: bytes, compression: str) -> tuple[float, float]:
    from websockets.sync.client import connect

    mode = "deflate" if compression == "deflate" else None
    with connect(url, compression=mode, max_size=None, open_timeout=10) as ws:
        negotiated = [str(e.name) for e in ws.protocol.extensions]
        if compression == "deflate" and "permessage-deflate" not in negotiated:
            raise RuntimeError("websockets: permessage-deflate was not negotiated")
        for _ in range(WARMUP):
            ws.send(data)
            if ws.recv(timeout=10) != data:
                raise RuntimeError("websockets: wrong echo")
        with _Clock() as clock:
            for _ in range(n):
                ws.send(data)
                ws.recv(timeout=10)
    return clock.result


CLIENTS = {
    "greenhttp.WebSocket": greenhttp_websocket,
    "greenhttp.WebSocketStream": greenhttp_stream,
    "websocket-client (sync)": websocket_client,
    "websockets.sync.client": websockets_sync,
}
# (client, compression) in table order; websocket-client cannot negotiate permessage-deflate.
CONFIGS = [
    ("greenhttp.WebSocket", "off"),
    ("greenhttp.WebSocketStream", "off"),
    ("websocket-client (sync)", "off"),
    ("websockets.sync.client", "off"),
    ("greenhttp.WebSocket", "deflate"),
    ("greenhttp.WebSocketStream", "deflate"),
    ("websockets.sync.client", "deflate"),
]


def run_client(name: str, url: str, n: int, size: int, compression: str) -> None:
    """In the client subprocess: one measurement, printed as a JSON line."""
    wall, cpu = CLIENTS[name](url, n, payload(size), compression)
    print(json.dumps({"rate": n / wall, "cpu_us": cpu / n * 1e6}), flush=True)


# -- the orchestrator -----------------------------------------------------------------------


def _pin(cpu: int | None) -> Any:
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def _cpus(pin: bool) -> tuple[int | None, int | None]:
    """(server CPU, client CPU), or Nones when not pinning."""
    if not pin or not hasattr(os, "sched_getaffinity"):
        return None, None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    return cpus[0], cpus[1]


def measure(
    name: str, url: str, n: int, size: int, compression: str, cpu: int | None
) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, __file__, "--client", name, url, str(n), str(size), compression],
        capture_output=True,
        text=True,
        timeout=max(120, n / 100),
        preexec_fn=_pin(cpu),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{name} ({compression}) failed:\n{proc.stderr[-3000:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--messages", "-n", type=int, default=5000, help="timed round trips per run"
    )
    parser.add_argument("--rounds", "-r", type=int, default=5, help="interleaved repeats")
    parser.add_argument("--size", type=int, default=1024, help="message size in bytes")
    parser.add_argument("--pin", action="store_true", help="server on one CPU, clients on another")
    args = parser.parse_args(argv)
    server_cpu, client_cpu = _cpus(args.pin)
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_pin(server_cpu),
    )
    try:
        line = server.stdout.readline() if server.stdout is not None else ""
        if not line:
            raise RuntimeError("the websockets server did not start")
        ports = json.loads(line)
        results: dict[tuple[str, str], list[dict[str, float]]] = {c: [] for c in CONFIGS}
        for round_no in range(args.rounds):
            order = CONFIGS if round_no % 2 == 0 else CONFIGS[::-1]
            for name, compression in order:
                url = f"ws://127.0.0.1:{ports[compression]}/"
                results[(name, compression)].append(
                    measure(name, url, args.messages, args.size, compression, client_cpu)
                )
            print(f"round {round_no + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if server.stdout is not None:
            server.stdout.close()
    pinning = (
        f"server on CPU {server_cpu}, clients on CPU {client_cpu}"
        if server_cpu is not None
        else "not pinned"
    )
    print(
        f"\n{args.size}-byte binary echo round trips, one connection, one message in flight; "
        f"{args.rounds} interleaved rounds of {args.messages} (after {WARMUP} warm-up); "
        f"server: websockets {_version('websockets')} asyncio server; {pinning}; "
        f"Python {sys.version.split()[0]}.\n"
    )
    print("| Client | permessage-deflate | median msg/s | range (msg/s) | client CPU µs/msg |")
    print("|---|---|---:|---:|---:|")
    for name, compression in CONFIGS:
        runs = results[(name, compression)]
        rates = [r["rate"] for r in runs]
        cpu = statistics.median(r["cpu_us"] for r in runs)
        label = f"{name} {_version(_DIST[name])}"
        print(
            f"| {label} | {compression} | {statistics.median(rates):,.0f} | "
            f"{min(rates):,.0f}–{max(rates):,.0f} | {cpu:.0f} |"
        )
    return 0


_DIST = {
    "greenhttp.WebSocket": "greenhttp",
    "greenhttp.WebSocketStream": "greenhttp",
    "websocket-client (sync)": "websocket-client",
    "websockets.sync.client": "websockets",
}


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve()
    elif sys.argv[1:2] == ["--client"]:
        name, url, n, size, compression = sys.argv[2:7]
        run_client(name, url, int(n), int(size), compression)
    else:
        raise SystemExit(main(sys.argv[1:]))
