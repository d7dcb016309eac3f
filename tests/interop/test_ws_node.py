"""greenhttp's WebSocket against Node's ``ws`` library (the server most Node apps run).

The fixture installs ``ws`` with npm into a cache folder outside the
repository (``$GREENHTTP_NODE_CACHE`` or ``~/.cache/greenhttp-tests/node-ws``,
reused once there), writes a small Node server script to a temporary folder
and runs it for the whole module. The script listens on 127.0.0.1, port 0,
and prints its ports as one JSON line:

* ``plain``: a ``WebSocketServer`` without compression;
* ``deflate``: one negotiating permessage-deflate that compresses every message;
* ``h2``: Node's HTTP/2 server over TLS with SETTINGS_ENABLE_CONNECT_PROTOCOL,
  WebSockets over RFC 8441 streams (``ws`` driven on the stream, with
  permessage-deflate negotiated as its own server does);
* ``h2_old``: Node's HTTP/2 server over TLS without extended CONNECT, and
  ``ws`` on its HTTP/1.1 upgrades (``allowHTTP1``), for the fall back.

Each WebSocket's behaviour is chosen by the request path (see ``behave`` in
the script): echo, ``/version``, ``/headers``, ``/fragments``, ``/ping``,
``/close/<code>/<reason>``. The process stops when its stdin closes.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import gevent
import gevent.event
import gevent.queue
import pytest
import trustme

import greenhttp
from greenhttp._websocket import handshake
from greenhttp._websocket import stream as stream_module
from testkit import WsTalk, die_with_parent

WS_VERSION = "8.23.0"

_SERVER_JS = r"""
'use strict'
const fs = require('node:fs')
const http2 = require('node:http2')
const path = require('node:path')
const [wsDir, certFile, keyFile] = process.argv.slice(2)
const { WebSocketServer, WebSocket } = require(wsDir)
// Not in ws's package exports, so by file: what its own server uses to negotiate.
const PerMessageDeflate = require(path.join(wsDir, 'lib', 'permessage-deflate.js'))
const extension = require(path.join(wsDir, 'lib', 'extension.js'))

function behave (ws, reqPath, headers, version) {
  const parts = reqPath.split('?')[0].split('/').filter(Boolean)
  ws.on('error', () => {})
  ws.on('ping', (data) => ws.send('ping:' + data.toString()))
  ws.on('pong', (data) => ws.send('pong:' + data.toString()))
  ws.on('message', (data, isBinary) => {
    if (!isBinary && data.toString() === 'version') ws.send(version)
    else if (!isBinary && data.toString() === 'headers') ws.send(JSON.stringify(headers))
    else ws.send(data, { binary: isBinary })
  })
  if (parts[0] === 'close') {
    ws.close(Number(parts[1]), decodeURIComponent(parts[2] || ''))
  } else if (parts[0] === 'fragments') {
    ws.send('frag', { fin: false })
    ws.send('men', { fin: false })
    ws.send('ted ✓', { fin: true })
    ws.send(Buffer.from([1, 2]), { binary: true, fin: false })
    ws.send(Buffer.alloc(70000, 3), { binary: true, fin: true })
  } else if (parts[0] === 'ping') {
    ws.ping(Buffer.from('srv'))
  }
}

const ports = {}
const servers = []

function listen (name, server) {
  servers.push(server)
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => {
    ports[name] = server.address().port
    resolve()
  }))
}

function wsServer (perMessageDeflate) {
  const wss = new WebSocketServer({ noServer: true, perMessageDeflate })
  const server = require('node:http').createServer()
  server.on('upgrade', (req, socket, head) => {
    wss.handleUpgrade(req, socket, head, (ws) => behave(ws, req.url, req.headers, req.httpVersion))
  })
  return server
}

// RFC 8441: an extended CONNECT stream becomes a ws connection.
function h2Server () {
  const tls = { cert: fs.readFileSync(certFile), key: fs.readFileSync(keyFile) }
  const server = http2.createSecureServer({ ...tls, settings: { enableConnectProtocol: true } })
  server.on('stream', (stream, headers) => {
    if (headers[':method'] !== 'CONNECT') {
      stream.respond({ ':status': 200 })
      stream.end('h2')
      return
    }
    const response = { ':status': 200 }
    const offered = headers['sec-websocket-protocol']
    if (offered) response['sec-websocket-protocol'] = offered.split(',')[0].trim()
    const extensions = {}
    const offer = headers['sec-websocket-extensions']
    if (offer) {
      const deflate = new PerMessageDeflate({ threshold: 0, isServer: true })
      const offers = extension.parse(offer)
      if (offers[PerMessageDeflate.extensionName]) {
        deflate.accept(offers[PerMessageDeflate.extensionName])
        extensions[PerMessageDeflate.extensionName] = deflate
        response['sec-websocket-extensions'] = extension.format({ [PerMessageDeflate.extensionName]: [deflate.params] })
      }
    }
    stream.respond(response)
    const ws = new WebSocket(null, undefined, { autoPong: true })
    ws._extensions = extensions
    ws.setSocket(stream, Buffer.alloc(0), { maxPayload: 104857600 })
    behave(ws, headers[':path'], headers, '2.0')
  })
  return server
}

// HTTP/2 without extended CONNECT; WebSockets only over HTTP/1.1 upgrades.
function h2OldServer () {
  const tls = { cert: fs.readFileSync(certFile), key: fs.readFileSync(keyFile) }
  const server = http2.createSecureServer({ ...tls, allowHTTP1: true })
  server.on('stream', (stream) => {
    stream.respond({ ':status': 200 })
    stream.end('h2')
  })
  const wss = new WebSocketServer({ noServer: true })
  server.on('upgrade', (req, socket, head) => {
    wss.handleUpgrade(req, socket, head, (ws) => behave(ws, req.url, req.headers, req.httpVersion))
  })
  return server
}

Promise.all([
  listen('plain', wsServer(false)),
  listen('deflate', wsServer({ threshold: 0 })),
  listen('h2', h2Server()),
  listen('h2_old', h2OldServer())
]).then(() => process.stdout.write(JSON.stringify(ports) + '\n'))

process.stdin.resume()
process.stdin.on('end', () => process.exit(0))
"""


def _node_ws_dir() -> Path:
    """``ws`` installed with npm into the cache folder (once; a lock guards concurrent runs)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("node and npm are needed for the Node ws interop tests (Node 20 or later)")
    cache = Path(
        os.environ.get("GREENHTTP_NODE_CACHE")
        or Path.home() / ".cache" / "greenhttp-tests" / "node-ws"
    )
    cache.mkdir(parents=True, exist_ok=True)
    ws_dir = cache / "node_modules" / "ws"
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            installed = json.loads((ws_dir / "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            installed = None
        if installed != WS_VERSION:
            result = subprocess.run(
                [
                    npm,
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--no-package-lock",
                    "--loglevel=error",
                    "--prefix",
                    str(cache),
                    f"ws@{WS_VERSION}",
                ],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
            )
            if result.returncode != 0:
                pytest.fail(f"npm install ws@{WS_VERSION} failed: {result.stderr[-2000:]}")
    return ws_dir


class NodeWs:
    def __init__(self, ports: dict[str, int], ca: str) -> None:
        self.ports = ports
        self.ca = ca

    def url(self, kind: str, path: str = "/echo") -> str:
        if kind.startswith("h2"):
            return f"wss://localhost:{self.ports[kind]}{path}"
        return f"ws://127.0.0.1:{self.ports[kind]}{path}"


@pytest.fixture(scope="module")
def node_ws(tmp_path_factory):
    ws_dir = _node_ws_dir()
    tmp = tmp_path_factory.mktemp("node_ws")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    cert.private_key_pem.write_to_path(str(tmp / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp / "cert.pem"))
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    script = tmp / "ws_server.js"
    script.write_text(_SERVER_JS)
    proc = subprocess.Popen(
        ["node", str(script), str(ws_dir), str(tmp / "cert.pem"), str(tmp / "key.pem")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent,
    )
    try:
        line = proc.stdout.readline()
        assert line, f"the node server did not start (exit code {proc.poll()})"
        yield NodeWs(json.loads(line), str(tmp / "ca.pem"))
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung server
            proc.kill()
            proc.wait()
        proc.stdout.close()


@pytest.fixture
def agent():
    made = []

    def make(**options):
        a = greenhttp.Agent(**options)
        made.append(a)
        return a

    yield make
    for a in made:
        with gevent.Timeout(5):
            a.destroy()


@pytest.fixture(autouse=True)
def warned(monkeypatch):
    """The one-time experimental warnings are tested elsewhere."""
    monkeypatch.setattr(handshake, "_h2_warned", True)
    monkeypatch.setattr(stream_module, "_warned", True)


@pytest.mark.parametrize("kind", ["plain", "deflate"])
def test_text_and_binary_echo(node_ws, kind):
    talk = WsTalk(node_ws.url(kind))
    talk.wait_open()
    assert talk.ask("héllo wörld") == "héllo wörld"
    assert talk.ask(b"\x00\xff" * 10) == b"\x00\xff" * 10
    assert talk.ask("") == ""
    assert talk.ask(b"") == b""
    assert talk.ask("version") == "1.1"
    talk.close_cleanly(1000, "done")


def test_permessage_deflate_is_negotiated_and_inflated(node_ws, monkeypatch):
    inflated = []
    original = handshake.InboundPolicy._inflate

    def counting(self, data):
        out = original(self, data)
        if isinstance(out, bytes):
            inflated.append(len(out))
        return out

    monkeypatch.setattr(handshake.InboundPolicy, "_inflate", counting)
    talk = WsTalk(node_ws.url("deflate"))
    talk.wait_open()
    assert talk.ws.extensions.startswith("permessage-deflate")
    headers = json.loads(talk.ask("headers"))
    assert headers["sec-websocket-extensions"] == "permessage-deflate; client_max_window_bits"
    text = "compress me " * 50_000
    assert talk.ask(text) == text
    assert sum(inflated) >= len(text)  # the server's frames were compressed
    plain = WsTalk(node_ws.url("plain"))
    plain.wait_open()
    assert plain.ws.extensions == ""
    for t in (talk, plain):
        t.close_cleanly()


@pytest.mark.parametrize("kind", ["plain", "deflate"])
def test_fragmented_messages_from_the_server(node_ws, kind):
    talk = WsTalk(node_ws.url(kind, "/fragments"))
    talk.wait_open()
    assert talk.next() == "fragmented ✓"
    assert talk.next() == b"\x01\x02" + b"\x03" * 70000
    talk.close_cleanly()


def test_ping_and_pong_both_ways(node_ws, caplog):
    caplog.set_level(logging.DEBUG, logger="greenhttp.websocket")
    talk = WsTalk(node_ws.url("plain", "/ping"))
    talk.wait_open()
    assert talk.next() == "pong:srv"  # greenhttp answered the server's ping
    greenhttp.ping(talk.ws, b"cli")
    assert talk.next() == "ping:cli"  # the server saw our ping (and answered it)
    assert talk.ask("sync") == "sync"
    talk.close_cleanly()
    lines = [r.getMessage() for r in caplog.records if r.name == "greenhttp.websocket"]
    assert "ping received" in lines and "pong received" in lines


@pytest.mark.parametrize("kind", ["plain", "deflate"])
def test_server_initiated_close_with_code_and_reason(node_ws, kind):
    talk = WsTalk(node_ws.url(kind, "/close/4001/going%20away%20%E2%9C%93"))
    close = talk.wait_closed()
    assert [e.type for e in talk.events] == ["open", "close"]
    assert (close.code, close.reason, close.was_clean) == (4001, "going away ✓", True)


@pytest.mark.parametrize("kind", ["plain", "deflate"])
def test_one_mebibyte_messages(node_ws, kind):
    talk = WsTalk(node_ws.url(kind))
    talk.wait_open()
    data = os.urandom(1 << 20)
    assert talk.ask(data) == data
    text = "ab€" * ((1 << 20) // 5)
    assert talk.ask(text) == text
    talk.close_cleanly()


def test_websocket_stream(node_ws):
    wss = greenhttp.WebSocketStream(node_ws.url("deflate"))
    opened = wss.opened.get(timeout=10)
    assert opened.extensions.startswith("permessage-deflate")
    for message in ("one", b"two", "three" * 1000):
        opened.writable.write(message)
        assert opened.readable.read() == message
    wss.close({"close_code": 4000, "reason": "bye"})
    assert wss.closed.get(timeout=10) == {"close_code": 4000, "reason": "bye"}


# -- RFC 8441 against Node's HTTP/2 server -------------------------------------------------


def test_websocket_over_http2(node_ws, agent):
    a = agent(connect={"cafile": node_ws.ca})
    talk = WsTalk(node_ws.url("h2"), {"dispatcher": a, "protocols": ["chat"]})
    talk.wait_open()
    assert talk.ws.protocol == "chat"
    assert talk.ws.extensions.startswith("permessage-deflate")
    assert talk.ask("version") == "2.0"
    headers = json.loads(talk.ask("headers"))
    assert (headers[":method"], headers[":protocol"]) == ("CONNECT", "websocket")
    assert headers["sec-websocket-version"] == "13"
    assert talk.ask(b"\x01" * 100_000) == b"\x01" * 100_000
    text = "over h2 " * 100_000
    assert talk.ask(text) == text
    talk.close_cleanly(1000, "h2 done")
    assert (
        a.request(origin=f"https://localhost:{node_ws.ports['h2']}", path="/").body.text() == "h2"
    )


def test_server_closes_and_fragments_over_http2(node_ws, agent):
    a = agent(connect={"cafile": node_ws.ca})
    talk = WsTalk(node_ws.url("h2", "/fragments"), {"dispatcher": a})
    talk.wait_open()
    assert talk.next() == "fragmented ✓"
    assert talk.next() == b"\x01\x02" + b"\x03" * 70000
    talk.close_cleanly()
    closing = WsTalk(node_ws.url("h2", "/close/4002/bye"), {"dispatcher": a})
    close = closing.wait_closed()
    assert (close.code, close.reason, close.was_clean) == (4002, "bye", True)


def test_falls_back_to_http1_without_extended_connect(node_ws, agent):
    a = agent(connect={"cafile": node_ws.ca})
    talk = WsTalk(node_ws.url("h2_old"), {"dispatcher": a})
    talk.wait_open()
    assert talk.ask("version") == "1.1"
    talk.close_cleanly()
