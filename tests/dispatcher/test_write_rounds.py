"""Requests written while the hub still handles a round of ready sockets leave together.

Two connections whose responses arrive in the same round of the hub: the
caller answered first writes its next request, and that request waits until
the round is over, so that it leaves in one burst with the other caller's
(docs/design.md "Measured costs shaped the I/O", docs/performance.md
"Writes within a round leave in bursts").
"""

from __future__ import annotations

import select
import socket as stdsocket

import gevent
import gevent.event
import gevent.socket
import pytest

import greenhttp
from greenhttp._runtime import ready_gauge

RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


def _read_head(sock: gevent.socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise AssertionError("the client closed before sending a request")
        data += chunk
    return data


def _has_bytes(sock: gevent.socket.socket) -> bool:
    """Has the peer sent anything this side has not read (never blocks)?"""
    return bool(select.select([sock.fileno()], [], [], 0)[0])


def test_a_caller_answered_mid_round_sends_its_next_request_after_the_round():
    if "libev" not in type(gevent.get_hub().loop).__module__:
        # (libuv's loop has a pendingcnt, but it always reads 0.)
        pytest.skip("only libev counts the ready watchers of a round: on libuv requests go out at once")
    assert ready_gauge().pendingcnt == 0  # not inside a round here
    listener = gevent.socket.socket(stdsocket.AF_INET, stdsocket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    origin = f"http://127.0.0.1:{listener.getsockname()[1]}"
    accepted: list[gevent.socket.socket] = []
    seconds: list[bytes] = []
    first_accepted = gevent.event.Event()

    def serve() -> None:
        accepted.append(listener.accept()[0])
        first_accepted.set()
        accepted.append(listener.accept()[0])
        for sock in accepted:
            _read_head(sock)
        # Both answers in one go: the client's hub finds both sockets ready in one round.
        for sock in accepted:
            sock.sendall(RESPONSE)
        for sock in accepted:
            seconds.append(_read_head(sock))
            sock.sendall(RESPONSE)

    clients = [greenhttp.Client(origin), greenhttp.Client(origin)]
    # For each caller, once its first answer is in: had the other caller's second
    # request reached the server already?
    others_sent: list[bool] = []

    def caller(mine: int) -> None:
        with clients[mine].request(path="/first", method="GET") as resp:
            assert resp.body.bytes() == b"ok"
        others_sent.append(_has_bytes(accepted[1 - mine]))
        with clients[mine].request(path="/second", method="GET") as resp:
            assert resp.body.bytes() == b"ok"

    server = gevent.spawn(serve)
    try:
        with gevent.Timeout(10):
            # The server accepts client 0's connection first: accepted[i] is client i's.
            callers = [gevent.spawn(caller, 0)]
            assert first_accepted.wait(5)
            callers.append(gevent.spawn(caller, 1))
            gevent.joinall(callers, raise_error=True)
            server.get()
    finally:
        server.kill()
        for c in clients:
            c.destroy()
        for sock in accepted:
            sock.close()
        listener.close()
    assert len(seconds) == 2 and all(s.startswith(b"GET /second ") for s in seconds)
    # Without the burst, the caller answered second in the round would find the
    # first one's request already sent.
    assert others_sent == [False, False]
