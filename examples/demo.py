"""greenhttp demo: thousands of greenlets, one Client each way, against a loopback server.

Run with ``make demo``. It starts its own HTTP/1.1 server on 127.0.0.1 (a
gevent StreamServer answering every request with a small JSON body), then
has many greenlets call the blocking ``client.request()`` at once through a
handful of Clients, and prints a summary table.
"""

from __future__ import annotations

import json
import sys
import time

import gevent
from gevent.server import StreamServer

import greenhttp

GREENLETS = 2000
REQUESTS_PER_GREENLET = 5
CLIENTS = 8


def serve(sock, _addr):
    """A tiny keep-alive HTTP/1.1 server: one JSON answer per request head."""
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            head, buf = buf.split(b"\r\n\r\n", 1)
            path = head.split(b" ", 2)[1].decode()
            body = json.dumps({"path": path, "ok": True}).encode()
            sock.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
    finally:
        sock.close()


def bar(done: int, total: int, width: int = 40) -> str:
    filled = int(width * done / total)
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def main() -> int:
    server = StreamServer(("127.0.0.1", 0), serve)
    server.start()
    origin = f"http://127.0.0.1:{server.server_port}"
    clients = [greenhttp.Client(origin, pipelining=4) for _ in range(CLIENTS)]
    total = GREENLETS * REQUESTS_PER_GREENLET
    latencies: list[float] = []
    errors: list[BaseException] = []
    done = 0

    def worker(i: int) -> None:
        nonlocal done
        client = clients[i % CLIENTS]
        for j in range(REQUESTS_PER_GREENLET):
            t0 = time.perf_counter()
            try:
                with client.request(path=f"/item/{i}/{j}", method="GET") as resp:
                    payload = resp.body.json()
                    assert resp.status_code == 200 and payload["ok"]
            except Exception as exc:  # collected and reported in the summary
                errors.append(exc)
            latencies.append(time.perf_counter() - t0)
            done += 1

    print(f"greenhttp {greenhttp.__version__}: {GREENLETS} greenlets x {REQUESTS_PER_GREENLET} requests "
          f"over {CLIENTS} Clients to {origin}")
    started = time.perf_counter()
    jobs = [gevent.spawn(worker, i) for i in range(GREENLETS)]
    while not all(job.ready() for job in jobs):
        gevent.sleep(0.1)
        sys.stdout.write("\r" + bar(done, total))
        sys.stdout.flush()
    gevent.joinall(jobs)
    elapsed = time.perf_counter() - started
    sys.stdout.write("\r" + bar(done, total) + "\n")
    for client in clients:
        client.close()
    server.stop()

    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[int(len(latencies) * 0.99)] * 1000
    rows = [
        ("requests", f"{done}"),
        ("errors", f"{len(errors)}"),
        ("elapsed", f"{elapsed:.2f} s"),
        ("throughput", f"{done / elapsed:,.0f} req/s"),
        ("latency p50", f"{p50:.2f} ms"),
        ("latency p99", f"{p99:.2f} ms"),
    ]
    width = max(len(k) for k, _ in rows)
    print("-" * (width + 20))
    for key, value in rows:
        print(f"{key:<{width}}  {value:>16}")
    print("-" * (width + 20))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
