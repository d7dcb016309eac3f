"""Fixtures for the WebSocket tests: scripted raw-socket WebSocket servers.

``ws_server(script)`` starts a loopback server (the shared ``make_server``
of ``tests/conftest.py``) that answers the opening handshake and then runs
``script(peer)``, where ``peer`` is a :class:`WsPeer`: exact frames out,
client frames parsed (and their masking checked) in. ``ws_server.url(path)``
is the ``ws://`` URL. Every test here also runs under a leak check: no new
file descriptor or greenlet may outlive it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
import pytest
from wsutil import Recorder, WsPeer, handshake_response

from greenhttp._websocket import transport
from testkit import live_greenlets, open_fds, settle_leaks


class WsServer:
    def __init__(self, server: Any) -> None:
        self.server = server
        self.peers: list[WsPeer] = []

    def url(self, path: str = "/") -> str:
        return f"ws://127.0.0.1:{self.server.port}{path}"

    @property
    def errors(self) -> list[BaseException]:
        return self.server.errors


@pytest.fixture
def ws_server(make_server):
    """``ws_server(script, extensions=None, protocol=None, response=None)``.

    The server answers the handshake with a valid 101 (``extensions`` and
    ``protocol`` as given), or with ``response(request)`` bytes, then runs
    ``script(peer)`` (default: answer the client's close); assertion
    failures inside land in ``server.errors``.
    """

    def make(
        script: Callable[[WsPeer], Any] | None = None,
        *,
        extensions: str | None = None,
        protocol: str | None = None,
        response: Callable[[Any], bytes] | None = None,
    ) -> WsServer:
        holder: list[WsServer] = []

        def handler(conn: Any) -> None:
            req = conn.read_request()
            if req is None:
                return
            conn.send(
                response(req)
                if response is not None
                else handshake_response(req, extensions=extensions, protocol=protocol)
            )
            peer = WsPeer(conn, req)
            holder[0].peers.append(peer)
            if script is not None:
                script(peer)
            else:
                peer.answer_close()

        ws = WsServer(make_server(handler))
        holder.append(ws)
        return ws

    return make


@pytest.fixture
def fast_close(monkeypatch):
    """Shorten the closing-handshake timeout so tests of a silent server stay quick."""
    monkeypatch.setattr(transport, "CLOSE_TIMEOUT", 0.3)


@pytest.fixture
def record():
    return Recorder


# ---------------------------------------------------------------------------
# leak check: what a test opened is closed, what it spawned is dead
# ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def ws_leak_check():
    gevent.sleep(0)
    fds = open_fds()
    greenlets = {id(g) for g in live_greenlets()}
    yield
    settle_leaks(fds, lambda: [g for g in live_greenlets() if id(g) not in greenlets], 3.0)
