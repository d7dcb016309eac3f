"""Benchmark (not a test): 1 KiB echo round trips over one WebSocket connection.

    python tests/websocket/bench_echo.py [ROUND_TRIPS] [ROUNDS] [SERVER]

Compares greenhttp's ``WebSocket`` and ``WebSocketStream`` with
websocket-client and the ``websockets`` sync client, interleaved in one run.
SERVER is ``fast`` (default: a minimal blocking echo server in a subprocess,
so the client's cost shows) or ``plain``/``deflate`` (the ``websockets``
asyncio server of ``ws_server.py``). Needs ``websocket-client`` and
``websockets`` installed. Prints msg/s (median and best of the rounds) and
the client's CPU time per round trip. Loopback only; every loop is bounded.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

MESSAGE = b"x" * 1024
WARMUP = 500


# -- the minimal server (run with --serve) -------------------------------------------------


def _recv_exact(conn: socket.socket, n: int) -> bytearray:
    out = bytearray(n)
    view = memoryview(out)
    got = 0
    while got < n:
        k = conn.recv_into(view[got:])
        if not k:
            raise EOFError
        got += k
    return out


def _serve_one(conn: socket.socket) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(4096)
        if not chunk:
            return
        head += chunk
    key = next(
        line.split(b":", 1)[1].strip()
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"sec-websocket-key:")
    )
    accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    conn.sendall(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )
    try:
        while True:
            b0, b1 = _recv_exact(conn, 2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", _recv_exact(conn, 2))[0]
            elif n == 127:
                n = struct.unpack("!Q", _recv_exact(conn, 8))[0]
            mask = bytes(_recv_exact(conn, 4))
            data = _recv_exact(conn, n)
            keys = int.from_bytes((mask * (n // 4 + 1))[:n], "little")
            payload = (int.from_bytes(data, "little") ^ keys).to_bytes(n, "little") if n else b""
            opcode = b0 & 0x0F
            if n <= 125:
                out = bytes((0x80 | opcode, n))
            elif n <= 0xFFFF:
                out = struct.pack("!BBH", 0x80 | opcode, 126, n)
            else:
                out = struct.pack("!BBQ", 0x80 | opcode, 127, n)
            conn.sendall(out + payload)
            if opcode == 8:
                return
    except (EOFError, OSError):
        pass
    finally:
        conn.close()


def serve() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    print(listener.getsockname()[1], flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), listener.close()), daemon=True).start()
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_serve_one, args=(conn,), daemon=True).start()


# -- the clients -----------------------------------------------------------------------


def greenhttp_websocket(url: str, n: int) -> float:
    import gevent.event

    import greenhttp
    from greenhttp._runtime import Parker

    ws = greenhttp.WebSocket(url)
    ws.binary_type = "arraybuffer"
    opened = gevent.event.Event()
    closed = gevent.event.Event()
    ws.onopen = lambda ev: opened.set()
    ws.onclose = lambda ev: closed.set()
    box: list[Parker] = []
    ws.onmessage = lambda ev: box[0].set(ev.data)
    assert opened.wait(10)

    def round_trip() -> None:
        box[:] = [Parker()]
        ws.send(MESSAGE)
        box[0].get()

    for _ in range(WARMUP):
        round_trip()
    start = time.perf_counter()
    for _ in range(n):
        round_trip()
    rate = n / (time.perf_counter() - start)
    ws.close()
    assert closed.wait(10)
    return rate


def greenhttp_stream(url: str, n: int) -> float:
    import greenhttp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", greenhttp.ExperimentalWarning)
        wss = greenhttp.WebSocketStream(url)
    opened = wss.opened.get(timeout=10)
    write, read = opened.writable.write, opened.readable.read
    for _ in range(WARMUP):
        write(MESSAGE)
        read()
    start = time.perf_counter()
    for _ in range(n):
        write(MESSAGE)
        read()
    rate = n / (time.perf_counter() - start)
    wss.close()
    wss.closed.get(timeout=10)
    return rate


def websocket_client(url: str, n: int) -> float:
    import websocket

    ws = websocket.create_connection(url)
    for _ in range(WARMUP):
        ws.send_binary(MESSAGE)
        ws.recv()
    start = time.perf_counter()
    for _ in range(n):
        ws.send_binary(MESSAGE)
        ws.recv()
    rate = n / (time.perf_counter() - start)
    ws.close()
    return rate


def websockets_sync(url: str, n: int) -> float:
    from websockets.sync.client import connect

    with connect(url, compression=None, max_size=None) as ws:
        for _ in range(WARMUP):
            ws.send(MESSAGE)
            ws.recv()
        start = time.perf_counter()
        for _ in range(n):
            ws.send(MESSAGE)
            ws.recv()
        return n / (time.perf_counter() - start)


CLIENTS = [
    ("greenhttp WebSocket", greenhttp_websocket),
    ("greenhttp WebSocketStream", greenhttp_stream),
    ("websocket-client", websocket_client),
    ("websockets sync", websockets_sync),
]


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    kind = sys.argv[3] if len(sys.argv) > 3 else "fast"
    if kind == "fast":
        cmd = [sys.executable, __file__, "--serve"]
    else:
        cmd = [sys.executable, str(Path(__file__).with_name("ws_server.py"))]
    server = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        port = int(line) if kind == "fast" else json.loads(line)[kind]
        url = f"ws://127.0.0.1:{port}/echo"
        rates: dict[str, list[float]] = {name: [] for name, _ in CLIENTS}
        cpu: dict[str, list[float]] = {name: [] for name, _ in CLIENTS}
        for _ in range(rounds):
            for name, client in CLIENTS:
                before = time.process_time()
                rates[name].append(client(url, n))
                cpu[name].append((time.process_time() - before) / (n + WARMUP) * 1e6)
        print(f"server={kind}: {rounds} rounds x {n} round trips of {len(MESSAGE)} bytes")
        for name, _ in CLIENTS:
            print(
                f"{name:27s} median {statistics.median(rates[name]):7.0f} msg/s"
                f"  best {max(rates[name]):7.0f}"
                f"  client CPU {statistics.median(cpu[name]):5.1f} us/round trip"
            )
    finally:
        server.stdin.close()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        server.stdout.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve()
    else:
        raise SystemExit(main())
