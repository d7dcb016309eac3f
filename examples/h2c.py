"""HTTP/2 in cleartext (h2c, prior knowledge) with ``greenhttp.H2CClient``.

Starts a tiny h2c server on 127.0.0.1 (the ``h2`` library's server side, one
greenlet per connection) that answers every request with its path, then sends
20 requests from 20 greenlets: they share one connection as 20 streams.
Run: ``python examples/h2c.py``.
"""

from __future__ import annotations

import gevent
import h2.config
import h2.connection
import h2.events
from gevent.server import StreamServer

import greenhttp


def serve_h2c(sock, _address) -> None:
    """Answer each request with ``you asked for <path>``."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    while True:
        data = sock.recv(65536)
        if not data:
            return
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                path = dict(event.headers)[":path"]
                body = f"you asked for {path}".encode()
                conn.send_headers(event.stream_id, [(":status", "200"), ("content-length", str(len(body)))])
                conn.send_data(event.stream_id, body, end_stream=True)
        sock.sendall(conn.data_to_send())


def main() -> None:
    server = StreamServer(("127.0.0.1", 0), serve_h2c)
    server.start()
    origin = f"http://127.0.0.1:{server.server_port}"
    connections = []
    try:
        with greenhttp.H2CClient(origin, max_concurrent_streams=50) as client:
            client.on("connect", lambda origin, targets: connections.append(origin))

            def fetch(i: int) -> str:
                response = client.request(path=f"/item/{i}")
                return f"{response.status_code} {response.body.text()}"

            jobs = [gevent.spawn(fetch, i) for i in range(20)]
            gevent.joinall(jobs, raise_error=True)
            for job in jobs[:3]:
                print(job.value)
            print(f"... {len(jobs)} responses over {len(connections)} connection(s)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
