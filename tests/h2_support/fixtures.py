"""Fixtures for the HTTP/2 tests; test modules import the ones they use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
import pytest

import greenhttp
from h2_support.h2server import H2Server, H2ServerConn


@pytest.fixture
def make_h2_server():
    """``make_h2_server(handler, **kw)`` starts an :class:`H2Server`; all stop at teardown."""
    servers: list[H2Server] = []

    def make(handler: Callable[[H2ServerConn], Any], **kw: Any) -> H2Server:
        server = H2Server(handler, **kw)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def make_h2c():
    """``make_h2c(url, **options)`` builds an H2CClient (or a Client with ``cls=``), destroyed at teardown."""
    clients: list[Any] = []

    def make(url: str, cls: Any = greenhttp.H2CClient, **options: Any) -> Any:
        client = cls(url, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        with gevent.Timeout(5):
            client.destroy()
