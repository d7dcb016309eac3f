"""Fixtures for the fault tests.

From ``tests/conftest.py``: ``make_server`` (scripted raw-socket servers) and
``make_client``. Here:

* an autouse leak check: no file descriptor and no greenlet that ran during
  a test may outlive it (``faultkit.LeakCheck``), and no greenlet may die
  of an exception (``faultkit.HubErrors``);
* ``make_pool`` / ``make_agent``: dispatchers destroyed at teardown;
* ``ca``: a trustme certificate authority for the TLS faults;
* ``make_h2_server``: the tiny h2c fault server of ``h2fault.py``;
* ``make_faulty_server``: the mixed-behaviour server of ``faultkit.py``;
* ``offline_connector``: a connector whose resolver knows ``localhost`` and
  fails every ``.invalid`` name with ``socket.gaierror`` (RFC 6761 §6.4:
  such names never resolve), so DNS failures are tested without a packet
  leaving the machine.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import gevent
import pytest
import trustme
from faultkit import FaultyServer, guarded
from h2fault import H2FaultServer

import greenhttp


@pytest.fixture(autouse=True)
def fault_leak_check():
    """No fd or greenlet outlives the test, and no greenlet died of an exception."""
    with guarded() as check:
        yield check


def _destroying(cls: Any):
    made: list[Any] = []

    def make(*args: Any, **options: Any) -> Any:
        d = cls(*args, **options)
        made.append(d)
        return d

    return make, made


@pytest.fixture
def make_pool():
    make, made = _destroying(greenhttp.Pool)
    yield make
    for d in made:
        with gevent.Timeout(5):
            d.destroy()


@pytest.fixture
def make_agent():
    make, made = _destroying(greenhttp.Agent)
    yield make
    for d in made:
        with gevent.Timeout(5):
            d.destroy()


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def make_h2_server():
    servers: list[H2FaultServer] = []

    def make(on_request: Callable[..., Any], **kw: Any) -> H2FaultServer:
        s = H2FaultServer(on_request, **kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


@pytest.fixture
def make_faulty_server():
    servers: list[FaultyServer] = []

    def make(**kw: Any) -> FaultyServer:
        s = FaultyServer(**kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


def offline_resolve(host: str, port: int) -> list[Any]:
    """``Connector.resolve`` that never leaves the machine."""
    if host.lower().rstrip(".").endswith(".invalid"):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    if host in ("localhost", "127.0.0.1"):
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", port))]
    raise AssertionError(f"a test tried to resolve {host!r}")


@pytest.fixture
def offline_connector():
    """``offline_connector(**build_connector_options)``: a connector using :func:`offline_resolve`."""

    def make(**options: Any) -> Any:
        connector = greenhttp.build_connector(**options)
        connector.resolve = offline_resolve
        return connector

    return make
