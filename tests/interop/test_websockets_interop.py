"""greenhttp's WebSocket against an independent server: the ``websockets`` library.

The server (``tests/websocket/ws_server.py``) runs its asyncio loop in a
subprocess, never in the gevent hub's thread; one process serves the whole
module, on 127.0.0.1, with and without permessage-deflate and over TLS.
"""

from __future__ import annotations

import json
import logging
import ssl
import subprocess
import sys
from pathlib import Path

import gevent
import gevent.event
import pytest
import trustme

import greenhttp
from greenhttp import WebSocket, WebSocketStream
from greenhttp._websocket import stream as stream_module
from testkit import die_with_parent

SERVER = Path(__file__).resolve().parent.parent / "websocket" / "ws_server.py"


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture(scope="module")
def ws_ports(ca, tmp_path_factory):
    """Ports of the ``websockets`` servers: ``deflate``, ``plain`` and ``tls``."""
    tmp = tmp_path_factory.mktemp("wss")
    cert = ca.issue_cert("127.0.0.1")
    certfile, keyfile = tmp / "cert.pem", tmp / "key.pem"
    cert.cert_chain_pems[0].write_to_path(certfile)
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(certfile, append=True)
    cert.private_key_pem.write_to_path(keyfile)
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), str(certfile), str(keyfile)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent,
    )
    try:
        line = proc.stdout.readline()
        assert line, "the websockets server did not start"
        yield json.loads(line)
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung server
            proc.kill()
            proc.wait()
        proc.stdout.close()


def url(ws_ports, path, kind="deflate"):
    scheme = "wss" if kind == "tls" else "ws"
    return f"{scheme}://127.0.0.1:{ws_ports[kind]}{path}"


class Session:
    """A WebSocket with its events recorded."""

    def __init__(self, target, protocols=None, binary_type="arraybuffer"):
        self.ws = WebSocket(target, protocols)
        self.ws.binary_type = binary_type
        self.events = []
        self.opened = gevent.event.Event()
        self.done = gevent.event.Event()
        self.new = gevent.event.Event()
        for t in ("open", "message", "error", "close"):
            self.ws.add_event_listener(t, self._on)

    def _on(self, ev):
        self.events.append(ev)
        self.new.set()
        if ev.type == "open":
            self.opened.set()
        elif ev.type == "close":
            self.done.set()

    @property
    def messages(self):
        return [e.data for e in self.events if e.type == "message"]

    def wait_messages(self, n, timeout=10):
        with gevent.Timeout(timeout):
            while len(self.messages) < n:
                self.new.clear()
                if self.done.is_set():
                    raise AssertionError(f"closed early: {self.events}")
                self.new.wait()
        return self.messages

    def close(self, *args):
        self.ws.close(*args)
        assert self.done.wait(10), self.events
        return self.events[-1]


@pytest.mark.parametrize("kind", ["deflate", "plain"])
def test_echo(ws_ports, kind):
    s = Session(url(ws_ports, "/echo", kind))
    assert s.opened.wait(10), s.events
    text = "héllo wörld " * 1000
    blob = bytes(range(256)) * 4096
    s.ws.send(text)
    s.ws.send(blob)
    s.ws.send("")
    s.ws.send(b"")
    assert s.wait_messages(4) == [text, blob, "", b""]
    if kind == "deflate":
        assert s.ws.extensions.startswith("permessage-deflate")
    else:
        assert s.ws.extensions == ""
    close = s.close(1000, "bye")
    assert (close.code, close.reason, close.was_clean) == (1000, "bye", True)
    assert [e.type for e in s.events].count("error") == 0


def test_many_round_trips_keep_their_order(ws_ports):
    s = Session(url(ws_ports, "/echo"))
    assert s.opened.wait(10)
    for i in range(2000):
        s.ws.send(str(i))
    assert s.wait_messages(2000) == [str(i) for i in range(2000)]
    assert s.close().was_clean


def test_large_compressed_messages_from_the_server(ws_ports):
    s = Session(url(ws_ports, "/send/3/2000000"))
    data = s.wait_messages(3)
    assert [len(d) for d in data] == [2000000] * 3
    assert data[0].startswith(b"greenhttp greenhttp")
    assert s.close().was_clean


def test_blob_binary_type(ws_ports):
    s = Session(url(ws_ports, "/echo"), binary_type="blob")
    assert s.opened.wait(10)
    s.ws.send(greenhttp.Blob([b"blob ", "data"]))
    (got,) = s.wait_messages(1)
    assert isinstance(got, greenhttp.Blob) and got.bytes() == b"blob data"
    s.close()


def test_subprotocol_and_headers(ws_ports):
    s = Session(
        url(ws_ports, "/headers"),
        {"protocols": ["superchat", "chat"], "headers": {"x-greenhttp": "yes"}},
    )
    (headers,) = s.wait_messages(1)
    headers = {k.lower(): v for k, v in json.loads(headers)}
    assert s.ws.protocol == "chat"
    assert headers["x-greenhttp"] == "yes"
    assert headers["sec-websocket-protocol"] == "superchat, chat"
    assert headers["sec-websocket-version"] == "13"
    s.close()


@pytest.mark.parametrize(("code", "reason"), [(1000, ""), (1001, "going"), (4321, "custom ✓")])
def test_server_initiated_close(ws_ports, code, reason):
    from urllib.parse import quote

    s = Session(url(ws_ports, f"/close/{code}/{quote(reason)}"))
    assert s.done.wait(10)
    close = s.events[-1]
    assert (close.code, close.reason, close.was_clean) == (code, reason, True)
    assert [e.type for e in s.events] == ["open", "close"]


def test_server_drops_the_connection(ws_ports):
    s = Session(url(ws_ports, "/drop"))
    assert s.done.wait(10)
    assert [e.type for e in s.events] == ["open", "error", "close"]
    assert (s.events[-1].code, s.events[-1].was_clean) == (1006, False)


def test_pings_both_ways(ws_ports, caplog):
    s = Session(url(ws_ports, "/ping"))
    with caplog.at_level(logging.DEBUG, logger="greenhttp.websocket"):
        assert s.wait_messages(1) == ["pong"]  # the server got the pong to its ping
        greenhttp.ping(s.ws, b"abc")
        with gevent.Timeout(10):
            while "pong received" not in caplog.text:
                gevent.sleep(0.005)
        assert "ping received" in caplog.text
    s.close()


def test_max_payload_size_against_a_real_server(ws_ports):
    client = greenhttp.Client(
        f"http://127.0.0.1:{ws_ports['deflate']}", web_socket={"max_payload_size": 100000}
    )
    try:
        s = Session(url(ws_ports, "/send/1/200000"), {"dispatcher": client})
        assert s.done.wait(10)
        assert [e.type for e in s.events] == ["open", "error", "close"]
        assert s.events[1].error.close_code == 1009
    finally:
        client.close()


def test_wss(ws_ports, ca):
    context = ssl.create_default_context()
    ca.configure_trust(context)
    client = greenhttp.Client(
        f"https://127.0.0.1:{ws_ports['tls']}", connect={"ssl_context": context}
    )
    try:
        s = Session(url(ws_ports, "/echo", "tls"), {"dispatcher": client})
        assert s.opened.wait(10), s.events
        payload = b"secure " * 100000
        for _ in range(5):
            s.ws.send(payload)
        s.ws.send("done")
        assert s.wait_messages(6) == [payload] * 5 + ["done"]
        assert s.ws.buffered_amount == 0
        assert s.close(1000).was_clean
    finally:
        client.close()


def test_websocket_stream(ws_ports, monkeypatch):
    monkeypatch.setattr(stream_module, "_warned", True)
    s = WebSocketStream(url(ws_ports, "/echo"), protocols=["chat"])
    opened = s.opened.get(timeout=10)
    assert opened.protocol == "chat"
    assert opened.extensions.startswith("permessage-deflate")
    for i in range(100):
        opened.writable.write(f"m{i}" if i % 2 else f"m{i}".encode())
    got = [opened.readable.read() for _ in range(100)]
    assert got == [f"m{i}" if i % 2 else f"m{i}".encode() for i in range(100)]
    s.close({"close_code": 3001, "reason": "over"})
    assert s.closed.get(timeout=10) == {"close_code": 3001, "reason": "over"}
