"""A Pool shared by many greenlets, an Agent for several origins, and the global dispatcher.

Starts two small HTTP/1.1 servers on 127.0.0.1, then:

1. 100 greenlets make 10 requests each through one ``Pool(connections=8)``:
   the pool opens at most 8 connections and serves waiting requests first in,
   first out;
2. an ``Agent`` routes requests to both servers by their ``origin``;
3. ``greenhttp.request(url)`` goes through the global dispatcher.

Run: ``python examples/pool.py``.
"""

from __future__ import annotations

from typing import Any

import gevent
from gevent.server import StreamServer

import greenhttp


def start_server(name: bytes) -> tuple[StreamServer, dict[str, int]]:
    """A keep-alive server answering every request with ``name``; counts its connections."""
    counts = {"connections": 0, "open": 0, "max_open": 0}

    def handle(sock: Any, _addr: Any) -> None:
        counts["connections"] += 1
        counts["open"] += 1
        counts["max_open"] = max(counts["max_open"], counts["open"])
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = sock.recv(65536)
                    if not data:
                        return
                    buf += data
                _, buf = buf.split(b"\r\n\r\n", 1)  # these requests carry no body
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(name), name))
        finally:
            counts["open"] -= 1
            sock.close()

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server, counts


def main() -> None:
    server_a, counts_a = start_server(b"from A")
    server_b, _ = start_server(b"from B")
    origin_a = f"http://127.0.0.1:{server_a.server_port}"
    origin_b = f"http://127.0.0.1:{server_b.server_port}"
    try:
        # 1. One pool, many greenlets.
        with greenhttp.Pool(origin_a, connections=8) as pool:

            def worker() -> int:
                done = 0
                for _ in range(10):
                    with pool.request(path="/", method="GET") as response:
                        assert response.body.bytes() == b"from A"
                    done += 1
                return done

            jobs = [gevent.spawn(worker) for _ in range(100)]
            gevent.joinall(jobs, raise_error=True)
            total = sum(job.value for job in jobs)
            print(f"{total} requests over at most {counts_a['max_open']} connections")
            print("pool stats:", pool.stats)

        # 2. One agent, two origins.
        with greenhttp.Agent(connections=4) as agent:
            for origin in (origin_a, origin_b):
                body = agent.request(origin=origin, path="/").body.text()
                print(f"agent -> {origin}: {body}")
            print("agent stats:", sorted(agent.stats))

        # 3. The global dispatcher (an Agent made on first use).
        print("global:", greenhttp.request(f"{origin_b}/hello?x=1").body.text())
        greenhttp.get_global_dispatcher().close()
    finally:
        server_a.stop()
        server_b.stop()


if __name__ == "__main__":
    main()
