"""Audit: the request-level API calls (request/stream/pipeline/upgrade/connect) and the handler protocol."""

from __future__ import annotations

import gevent
import pytest

import greenhttp
from greenhttp import errors
from greenhttp._abort import AbortController


def test_pipeline_writer_blocked_on_full_queue_is_released_when_request_fails(make_client):
    # Nothing listens: the request fails while the writer is blocked on a full body queue.
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    client = make_client(f"http://127.0.0.1:{port}")
    duplex = client.pipeline("/", "POST", handler=lambda d: d.body)
    failed = []
    with gevent.Timeout(3, False):
        try:
            for _ in range(100):
                duplex.write(b"x")
        except Exception as exc:  # noqa: BLE001
            failed.append(exc)
    duplex.close()
    assert failed, "write() stayed blocked after the request failed"


def test_pipeline_writer_blocked_is_released_by_close(make_server, make_client):
    def handler(conn):
        conn.read_head()
        conn.wait_closed()

    server = make_server(handler)
    client = make_client(server.origin)
    duplex = client.pipeline("/", "POST", handler=lambda d: d.body)
    outcome = []

    def writer():
        try:
            for _ in range(10000):
                duplex.write(b"x" * 65536)
        except Exception as exc:  # noqa: BLE001
            outcome.append(exc)

    g = gevent.spawn(writer)
    gevent.sleep(0.05)
    duplex.close()
    g.join(3)
    done = g.dead
    g.kill()
    assert done and outcome, "a writer blocked in write() was not released by close()"
