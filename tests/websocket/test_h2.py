"""WebSocket over HTTP/2 (RFC 8441): extended CONNECT, and the fall back to HTTP/1.1.

Against a real peer, hypercorn (``h2_ws_server.py``, one subprocess for the
module: TLS with ALPN, h2c by prior knowledge, each also without
SETTINGS_ENABLE_CONNECT_PROTOCOL), and against the scripted h2 server of
``tests/h2_support`` where the exact frames matter.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import struct
import subprocess
import sys
from pathlib import Path

import gevent
import gevent.event
import gevent.queue
import h2.settings
import pytest
import trustme
from wsutil import close_frame, frame

import greenhttp
from greenhttp._websocket import handshake, transport
from greenhttp._websocket import stream as stream_module
from greenhttp.errors import InformationalError
from testkit import WsTalk

pytest_plugins = ["h2_support.fixtures"]

SERVER = Path(__file__).resolve().with_name("h2_ws_server.py")


@pytest.fixture(autouse=True)
def h2_warned(monkeypatch):
    """The one-time ExperimentalWarning is the subject of one test; the others start after it."""
    monkeypatch.setattr(handshake, "_h2_warned", True)


class Hypercorn:
    def __init__(self, ports: dict[str, int], ca: str) -> None:
        self.ports = ports
        self.ca = ca

    def origin(self, kind: str) -> str:
        """``tls``/``tls_old``: ``https://localhost:port``; ``h2c``/``h2c_old``: ``http://127.0.0.1:port``."""
        if kind.startswith("tls"):
            return f"https://localhost:{self.ports[kind]}"
        return f"http://127.0.0.1:{self.ports[kind]}"

    def url(self, kind: str, path: str = "/ws") -> str:
        return "ws" + self.origin(kind)[4:] + path


@pytest.fixture(scope="module")
def hypercorn(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("h2ws")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp / "cert.pem"))
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    kinds = ("tls", "h2c", "tls_old", "h2c_old")
    listeners = {}
    for kind in kinds:  # bound here and inherited: no port race
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        listeners[kind] = sock
    ports = {kind: sock.getsockname()[1] for kind, sock in listeners.items()}
    fds = [listeners[kind].fileno() for kind in kinds]
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(SERVER),
                str(tmp / "cert.pem"),
                str(tmp / "key.pem"),
                *map(str, fds),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            pass_fds=fds,
        )
    finally:
        for sock in listeners.values():
            sock.close()
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"hypercorn did not start: {line!r}"
        yield Hypercorn(ports, str(tmp / "ca.pem"))
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung server
            proc.kill()
            proc.wait()
        proc.stdout.close()


@pytest.fixture
def dispatchers():
    """``dispatchers(cls, url, **options)``; all destroyed at teardown."""
    made = []

    def make(cls, *args, **options):
        d = cls(*args, **options)
        made.append(d)
        return d

    yield make
    for d in made:
        with gevent.Timeout(5):
            d.destroy()


# -- hypercorn: RFC 8441 -----------------------------------------------------------------


def test_h2c_echo_and_client_close_keep_the_connection(hypercorn, dispatchers):
    client = dispatchers(greenhttp.H2CClient, hypercorn.origin("h2c"))
    connects = []
    client.on("connect", lambda origin, targets: connects.append(origin))
    talk = WsTalk(hypercorn.url("h2c"), {"dispatcher": client, "protocols": ["chat", "other"]})
    talk.wait_open()
    assert talk.ws.protocol == "chat"
    assert talk.ask("version") == "2"
    assert talk.ask("héllo") == "héllo"
    assert talk.ask(b"\x00\x01binary") == b"\x00\x01binary"
    talk.ws.binary_type = "blob"
    blob = talk.ask(bytearray(b"as a blob"))
    assert isinstance(blob, greenhttp.Blob) and blob.bytes() == b"as a blob"
    # Ordinary requests share the connection with the WebSocket's stream.
    assert client.request(path="/side").body.text() == "2"
    talk.ws.close(1000, "done")
    close = talk.wait_closed()
    assert talk.types == ["open"] + ["message"] * 4 + ["close"]
    assert (close.code, close.was_clean) == (1000, True)
    # The stream ended cleanly (END_STREAM both ways): the connection goes on.
    assert client.request(path="/after").body.text() == "2"
    assert len(connects) == 1


@pytest.mark.parametrize("kind", ["client", "agent", "pool"])
def test_wss_over_tls_alpn_h2(hypercorn, dispatchers, kind):
    origin = hypercorn.origin("tls")
    connect = {"cafile": hypercorn.ca}
    if kind == "client":
        dispatcher = dispatchers(greenhttp.Client, origin, connect=connect)
    elif kind == "pool":
        dispatcher = dispatchers(greenhttp.Pool, origin, connections=2, connect=connect)
    else:
        dispatcher = dispatchers(greenhttp.Agent, connect=connect)
    talk = WsTalk(hypercorn.url("tls"), {"dispatcher": dispatcher, "protocols": "chat"})
    talk.wait_open()
    assert talk.ask("version") == "2"
    headers = dict(json.loads(talk.ask("headers")))
    assert headers["sec-websocket-version"] == "13"
    assert headers["sec-websocket-protocol"] == "chat"
    assert headers["sec-websocket-extensions"] == "permessage-deflate; client_max_window_bits"
    assert "upgrade" not in headers and "connection" not in headers  # HTTP/2 has neither
    big = bytes(range(256)) * 4096  # 1 MiB, past every flow-control window
    assert talk.ask(big) == big
    talk.ws.close()
    close = talk.wait_closed()
    assert (close.code, close.was_clean) == (1005, True)


def test_server_initiated_close_over_h2(hypercorn, dispatchers):
    client = dispatchers(greenhttp.H2CClient, hypercorn.origin("h2c"))
    talk = WsTalk(hypercorn.url("h2c"), {"dispatcher": client})
    talk.wait_open()
    talk.ws.send("close:4001:going away")
    close = talk.wait_closed()
    assert talk.types == ["open", "close"]
    assert (close.code, close.reason, close.was_clean) == (4001, "going away", True)


def test_permessage_deflate_over_h2(hypercorn, dispatchers, monkeypatch):
    inflated = []
    original = handshake.InboundPolicy._inflate

    def counting(self, data):
        out = original(self, data)
        inflated.append(len(out) if isinstance(out, bytes) else out)
        return out

    monkeypatch.setattr(handshake.InboundPolicy, "_inflate", counting)
    client = dispatchers(greenhttp.H2CClient, hypercorn.origin("h2c"))
    talk = WsTalk(hypercorn.url("h2c"), {"dispatcher": client})
    talk.wait_open()
    assert talk.ws.extensions.startswith("permessage-deflate")
    text = "compressible text " * 20000
    assert talk.ask(text) == text
    data = b"\x00" * 300_000
    assert talk.ask(data) == data
    assert sum(n for n in inflated if isinstance(n, int)) >= len(text) + len(data)
    talk.ws.close(1000)
    assert talk.wait_closed().was_clean


def test_ping_pong_and_debug_lines_over_h2(hypercorn, dispatchers, caplog):
    caplog.set_level(logging.DEBUG, logger="greenhttp.websocket")
    client = dispatchers(greenhttp.H2CClient, hypercorn.origin("h2c"))
    talk = WsTalk(hypercorn.url("h2c"), {"dispatcher": client})
    talk.wait_open()
    greenhttp.ping(talk.ws, b"are you there")
    assert talk.ask("after the ping") == "after the ping"  # the pong came first
    talk.ws.close(1000)
    talk.wait_closed()
    lines = [r.getMessage() for r in caplog.records if r.name == "greenhttp.websocket"]
    assert lines[0] == f"connection opened 127.0.0.1:{hypercorn.ports['h2c']}"
    assert "pong received" in lines
    assert lines[-1] == f"closed connection to {hypercorn.url('h2c')} - 1000 "


@pytest.mark.parametrize("how", ["close", "destroy"])
def test_ending_the_dispatcher_ends_its_websockets(hypercorn, how):
    client = greenhttp.H2CClient(hypercorn.origin("h2c"))
    talk = WsTalk(hypercorn.url("h2c"), {"dispatcher": client})
    talk.wait_open()
    with gevent.Timeout(5):
        getattr(client, how)()  # the stream is not a request: nothing waits for it
    close = talk.wait_closed()
    assert talk.types == ["open", "error", "close"]
    assert (close.code, close.was_clean) == (1006, False)
    assert "the connection was lost" in talk.events[1].message


def test_a_refused_h2_handshake_fails_the_websocket(hypercorn, dispatchers):
    client = dispatchers(greenhttp.H2CClient, hypercorn.origin("h2c"))
    talk = WsTalk(hypercorn.url("h2c", "/refuse"), {"dispatcher": client})
    close = talk.wait_closed()
    assert talk.types == ["error", "close"]
    assert (close.code, close.was_clean) == (1006, False)
    assert "403" in talk.events[0].message
    assert client.request(path="/still").body.text() == "2"


def test_experimental_warning_once(hypercorn, dispatchers, monkeypatch):
    monkeypatch.setattr(handshake, "_h2_warned", False)
    client = dispatchers(greenhttp.H2CClient, hypercorn.origin("h2c"))
    with pytest.warns(greenhttp.ExperimentalWarning, match="WebSocket over HTTP2") as caught:
        first = WsTalk(hypercorn.url("h2c"), {"dispatcher": client})
        first.wait_open()
    assert [w.message.code for w in caught] == ["GREENHTTP-WS-H2"]
    second = WsTalk(
        hypercorn.url("h2c"), {"dispatcher": client}
    )  # filterwarnings=error: no second one
    second.wait_open()
    for talk in (first, second):
        talk.ws.close(1000)
        assert talk.wait_closed().was_clean


def test_websocket_stream_over_h2_through_the_global_dispatcher(
    hypercorn, dispatchers, monkeypatch
):
    monkeypatch.setattr(stream_module, "_warned", True)
    agent = dispatchers(greenhttp.Agent, connect={"cafile": hypercorn.ca})
    previous = greenhttp.get_global_dispatcher()
    greenhttp.set_global_dispatcher(agent)
    try:
        wss = greenhttp.WebSocketStream(hypercorn.url("tls"), {"protocols": ["chat"]})
        opened = wss.opened.get(timeout=10)
        assert opened.protocol == "chat"
        opened.writable.write("version")
        assert opened.readable.read() == "2"
        opened.writable.write(b"raw")
        assert opened.readable.read() == b"raw"
        wss.close({"close_code": 1000, "reason": "bye"})
        assert wss.closed.get(timeout=10) == {"close_code": 1000, "reason": "bye"}
    finally:
        greenhttp.set_global_dispatcher(previous)


# -- the fall back to HTTP/1.1 ----------------------------------------------------------


def test_agent_falls_back_to_http1_without_extended_connect(hypercorn, dispatchers):
    agent = dispatchers(greenhttp.Agent, connect={"cafile": hypercorn.ca})
    connects = []
    agent.on("connect", lambda origin, targets: connects.append(targets[-1]))
    origin = hypercorn.origin("tls_old")
    assert agent.request(origin=origin, path="/").body.text() == "2"  # the origin speaks h2
    talk = WsTalk(hypercorn.url("tls_old"), {"dispatcher": agent})
    talk.wait_open()
    assert talk.ask("version") == "1.1"
    assert talk.ask(b"bytes") == b"bytes"
    # The HTTP/2 connection refused the extended CONNECT; a second client made the
    # HTTP/1.1-only connection the WebSocket took.
    assert len(connects) == 2 and connects[0] is not connects[1]
    talk.ws.close(1000)
    assert talk.wait_closed().was_clean
    assert agent.request(origin=origin, path="/").body.text() == "2"


@pytest.mark.parametrize("kind", ["h2c_old", "tls_old"])
def test_a_client_on_http2_without_extended_connect_fails(hypercorn, dispatchers, kind):
    # As in the original: the retry with allow_h2=False reaches the same HTTP/2
    # connection (only an Agent routes by it), so the WebSocket fails.
    if kind == "h2c_old":
        client = dispatchers(greenhttp.H2CClient, hypercorn.origin(kind))
    else:
        client = dispatchers(
            greenhttp.Client, hypercorn.origin(kind), connect={"cafile": hypercorn.ca}
        )
    talk = WsTalk(hypercorn.url(kind), {"dispatcher": client})
    close = talk.wait_closed()
    assert talk.types == ["error", "close"]
    assert (close.code, close.was_clean) == (1006, False)
    cause = talk.events[0].error.__cause__
    assert isinstance(cause, InformationalError)
    assert "Extended CONNECT protocol not supported by server" in str(cause)
    assert client.request(path="/").body.text() == "2"


def test_allow_h2_false_keeps_websockets_on_http1(hypercorn, dispatchers):
    client = dispatchers(
        greenhttp.Client, hypercorn.origin("tls"), allow_h2=False, connect={"cafile": hypercorn.ca}
    )
    talk = WsTalk(hypercorn.url("tls"), {"dispatcher": client})
    talk.wait_open()
    assert talk.ask("version") == "1.1"
    talk.ws.close(1000)
    assert talk.wait_closed().was_clean


# -- the exact frames (scripted h2 server) ---------------------------------------------------


def _client_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(opcode, unmasked payload) of each whole client frame in ``data``."""
    out = []
    i = 0
    while i + 2 <= len(data):
        b0, b1 = data[i], data[i + 1]
        assert b1 & 0x80, "client frames are masked"
        n, i = b1 & 0x7F, i + 2
        if n == 126:
            n, i = struct.unpack("!H", data[i : i + 2])[0], i + 2
        elif n == 127:
            n, i = struct.unpack("!Q", data[i : i + 8])[0], i + 8
        mask, i = data[i : i + 4], i + 4
        payload = bytes(b ^ mask[k % 4] for k, b in enumerate(data[i : i + n]))
        i += n
        out.append((b0 & 0x0F, payload))
    return out


def test_the_extended_connect_and_a_clean_end_of_stream(make_h2_server, make_h2c):
    seen = {}
    finished = gevent.event.Event()

    def handler(conn):
        req = conn.opened.get(timeout=10)
        # 200 without Sec-WebSocket-Accept: RFC 8441 §5 has no key exchange.
        conn.send_headers(req.stream_id, 200, [("sec-websocket-protocol", "b")])
        conn.send_body(req.stream_id, frame(1, b"hi"), end=False)
        received = b""
        while True:
            chunk = req.chunks.get(timeout=10)
            assert chunk is not None, "the client ended the stream before its close frame"
            received += chunk
            frames = _client_frames(received)
            if frames and frames[-1][0] == 8:
                break
        seen["frames"] = frames
        conn.send_body(req.stream_id, close_frame(1000, b"ok"), end=True)  # END_STREAM: the "FIN"
        rest = []
        while not rest or rest[-1] is not None:
            rest.append(req.chunks.get(timeout=10))
        seen["end"] = rest  # only the client's END_STREAM (an empty DATA frame) is left
        finished.set()

    server = make_h2_server(handler, settings={h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL: 1})
    client = make_h2c(server.origin)
    talk = WsTalk(
        f"ws://127.0.0.1:{server.port}/chat?room=1", {"dispatcher": client, "protocols": ["a", "b"]}
    )
    talk.wait_open()
    assert talk.inbox.get(timeout=5) == "hi"
    talk.ws.send(b"\x01\x02")
    talk.ws.close(1000, "bye")
    close = talk.wait_closed()
    assert (close.code, close.reason, close.was_clean) == (1000, "ok", True)
    assert talk.ws.protocol == "b"
    req = server.requests[0]
    assert req.headers[:5] == [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "http"),
        (":path", "/chat?room=1"),
        (":authority", f"127.0.0.1:{server.port}"),
    ]
    names = [k for k, _ in req.headers]
    assert "upgrade" not in names and "connection" not in names
    assert req.header("sec-websocket-version") == "13"
    assert req.header("sec-websocket-protocol") == "a, b"
    assert finished.wait(5), server.errors
    assert not server.errors, server.errors
    assert seen["frames"] == [(2, b"\x01\x02"), (8, struct.pack("!H", 1000) + b"bye")]
    assert seen["end"] in ([None], [b"", None]) and req.reset_code is None  # not RST_STREAM


def test_a_2xx_with_a_subprotocol_not_offered_fails(make_h2_server, make_h2c):
    def handler(conn):
        req = conn.opened.get(timeout=10)
        conn.send_headers(req.stream_id, 200, [("sec-websocket-protocol", "other")])
        req.done.wait(5)

    server = make_h2_server(handler, settings={h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL: 1})
    client = make_h2c(server.origin)
    talk = WsTalk(f"ws://127.0.0.1:{server.port}/", {"dispatcher": client, "protocols": ["chat"]})
    close = talk.wait_closed()
    assert talk.types == ["error", "close"] and close.code == 1006
    assert "not offered" in talk.events[0].message
    with gevent.Timeout(5):
        server.requests[0].done.wait()
    assert server.requests[0].reset_code == h2.errors.ErrorCodes.CANCEL  # the stream was given up


def test_failing_the_connection_over_h2_does_not_wait(make_h2_server, make_h2c, monkeypatch):
    monkeypatch.setattr(transport, "CLOSE_TIMEOUT", 30.0)
    seen = {}
    finished = gevent.event.Event()

    def handler(conn):
        req = conn.opened.get(timeout=10)
        conn.send_headers(req.stream_id, 200)
        conn.send_body(req.stream_id, frame(3, b"reserved opcode"), end=False)
        received = []
        while True:
            chunk = req.chunks.get(timeout=10)
            if chunk is None:
                break
            received.append(chunk)
        seen["frames"] = _client_frames(b"".join(received))
        req.done.wait(10)
        finished.set()

    server = make_h2_server(handler, settings={h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL: 1})
    client = make_h2c(server.origin)
    talk = WsTalk(f"ws://127.0.0.1:{server.port}/", {"dispatcher": client})
    with gevent.Timeout(5):  # not CLOSE_TIMEOUT: nothing waits for the server
        close = talk.wait_closed()
    assert talk.types == ["open", "error", "close"]
    assert (close.code, close.was_clean) == (1006, False)
    assert talk.events[1].error.close_code == 1002
    assert finished.wait(5), server.errors
    # The close frame, then END_STREAM, then RST_STREAM (the server never ended its side).
    assert seen["frames"] == [(8, struct.pack("!H", 1002) + b"protocol error")]
    assert server.requests[0].reset_code == h2.errors.ErrorCodes.CANCEL


def test_a_reset_while_echoing_the_close_still_ends_in_a_close_event(make_h2_server, make_h2c):
    """The server's close frame, then RST_STREAM: the echoed close frame fails to go out
    while the session is already finishing (on HTTP/2 it waits for its writer). The
    writer's failure used to interrupt that wait and end the session greenlet with
    no ``close`` event at all (seen against Node's ws server, once in a while)."""
    def handler(conn):
        for _ in range(20):  # the WebSockets below share the connection
            req = conn.opened.get(timeout=10)
            conn.send_headers(req.stream_id, 200)
            conn.send_body(req.stream_id, close_frame(4002, b"bye"), end=False)
            conn.reset(req.stream_id, h2.errors.ErrorCodes.CANCEL)

    server = make_h2_server(handler, settings={h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL: 1})
    client = make_h2c(server.origin)
    for _ in range(20):  # where the finishing session meets the failed write varies
        talk = WsTalk(f"ws://127.0.0.1:{server.port}/", {"dispatcher": client})
        with gevent.Timeout(5, AssertionError(f"no close event: {talk.events}")):
            close = talk.wait_closed()
        assert talk.types[0] == "open" and talk.types[-1] == "close", talk.types
        assert close.code in (4002, 1006), close


def test_url_credentials_answer_a_401_over_h2(make_h2_server, make_h2c):
    basic = "Basic " + base64.b64encode(b"user:pass").decode()

    def handler(conn):
        while True:
            req = conn.opened.get(timeout=10)
            if req is None:
                return
            if req.header("authorization") != basic:
                conn.send_headers(req.stream_id, 401, [("www-authenticate", "Basic")], end=True)
                continue
            conn.send_headers(req.stream_id, 200)
            received = b""
            while not any(op == 8 for op, _ in _client_frames(received)):
                chunk = req.chunks.get(timeout=10)
                assert chunk is not None, "the client ended the stream before its close frame"
                received += chunk
            conn.send_body(req.stream_id, close_frame(1000), end=True)

    server = make_h2_server(handler, settings={h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL: 1})
    client = make_h2c(server.origin)
    talk = WsTalk(f"ws://user:pass@127.0.0.1:{server.port}/chat", {"dispatcher": client})
    talk.wait_open()
    talk.ws.close()
    assert talk.wait_closed().was_clean
    assert [req.header("authorization") for req in server.requests] == [None, basic]
    assert [req.path for req in server.requests] == ["/chat", "/chat"]
    assert not server.errors


def test_url_credentials_do_not_follow_a_redirect_to_another_origin(
    make_h2_server, make_server, record
):
    """Over HTTP/2 a redirect interceptor may follow a 3xx answer to the handshake. The
    URL's credentials, sent again after a 401, go to the URL's origin only: the hop
    to another origin drops them."""
    elsewhere = make_server(_refuse_with_401)  # another origin (another port), HTTP/1.1

    def handler(conn):
        while True:
            req = conn.opened.get(timeout=10)
            if req is None:
                return
            location = f"http://127.0.0.1:{elsewhere.port}/there"
            conn.send_headers(req.stream_id, 307, [("location", location)], end=True)

    server = make_h2_server(handler, settings={h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL: 1})

    def factory(origin, **options):
        if origin == server.origin:
            return greenhttp.H2CClient(origin, **options)
        return greenhttp.Client(origin, **options)

    agent = greenhttp.Agent(factory=factory)
    dispatcher = agent.compose(greenhttp.interceptors.redirect(max_redirections=1))
    try:
        rec = record(
            greenhttp.WebSocket(
                f"ws://user:pass@127.0.0.1:{server.port}/here", {"dispatcher": dispatcher}
            )
        )
        close = rec.wait_closed()
        assert rec.types == ["error", "close"] and close.code == 1006
    finally:
        with gevent.Timeout(5):
            agent.destroy()
    basic = "Basic " + base64.b64encode(b"user:pass").decode()
    assert [req.header("authorization") for req in server.requests] == [None, basic]
    assert [req.target for req in elsewhere.requests] == ["/there", "/there"]
    assert [req.header("authorization") for req in elsewhere.requests] == [None, None]


def _refuse_with_401(conn):
    if conn.read_request() is not None:
        conn.send(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
    conn.close()
