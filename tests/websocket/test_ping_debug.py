"""greenhttp.ping() and the ``websocket`` debug namespace (spec 6.3)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import gevent
import pytest
from wsutil import WsPeer, frame, handshake_response

import greenhttp
from greenhttp import WebSocket


def test_ping_sends_a_ping_frame_and_handles_the_pong(ws_server, record, caplog):
    got = []

    def script(peer):
        f = peer.read_frame()
        got.append((f.opcode, f.payload))
        peer.send(frame(10, f.payload))
        f = peer.read_frame()
        got.append((f.opcode, f.payload))
        peer.send(frame(10, f.payload))
        peer.answer_close()

    server = ws_server(script)
    ws = WebSocket(server.url())
    rec = record(ws)
    rec.wait_open()
    with caplog.at_level(logging.DEBUG, logger="greenhttp.websocket"):
        greenhttp.ping(ws, b"payload")
        greenhttp.ping(ws)
        with gevent.Timeout(5):
            while caplog.text.count("pong received") < 2:
                gevent.sleep(0.002)
        ws.close()
        rec.wait_closed()
    assert got == [(9, b"payload"), (9, b"")]
    assert rec.types == ["open", "close"]  # pongs are no events


@pytest.mark.parametrize(
    ("payload", "match"), [(b"x" * 126, "125"), ("text", "buffer"), (12, "buffer")]
)
def test_ping_payload_is_checked(ws_server, payload, match):
    server = ws_server()
    ws = WebSocket(server.url())
    with pytest.raises(TypeError, match=match):
        greenhttp.ping(ws, payload)
    with pytest.raises(TypeError):
        greenhttp.ping(object())
    ws.close()


def test_ping_is_a_no_op_unless_open(ws_server, record):
    got = []

    def script(peer):
        got.append(peer.answer_close().opcode)

    server = ws_server(script)
    ws = WebSocket(server.url())
    greenhttp.ping(ws, b"connecting")  # no-op
    rec = record(ws)
    rec.wait_open()
    ws.close()
    greenhttp.ping(ws, b"closing")  # no-op
    rec.wait_closed()
    greenhttp.ping(ws, b"closed")  # no-op
    assert got == [8]  # nothing but the close frame reached the server


def test_debug_lines(ws_server, record, caplog):
    def script(peer):
        peer.send(frame(9, b"hi"))
        peer.read_frame()
        peer.answer_close()

    server = ws_server(script)
    with caplog.at_level(logging.DEBUG, logger="greenhttp.websocket"):
        ws = WebSocket(server.url("/dbg"))
        rec = record(ws)
        rec.wait_open()
        with gevent.Timeout(5):
            while "ping received" not in caplog.text:
                gevent.sleep(0.002)
        ws.close(4000, "done")
        rec.wait_closed()
    lines = [r.getMessage() for r in caplog.records if r.name == "greenhttp.websocket"]
    assert f"connection opened 127.0.0.1:{server.server.port}" in lines
    assert "ping received" in lines
    assert f"closed connection to {server.url('/dbg')} - 4000 done" in lines


def test_a_handshake_answered_without_101_logs_the_response_before_failing(ws_server, record, caplog):
    # Spec 6.3: "received response to <METHOD> <url> - HTTP <status>" for the final head;
    # an answer to an upgrade that refuses it is one, logged before the upgrade fails.
    server = ws_server(response=lambda req: b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    with caplog.at_level(logging.DEBUG, logger="greenhttp"):
        rec = record(WebSocket(server.url("/nope")))
        rec.wait_closed()
    lines = [r.getMessage() for r in caplog.records if r.name == "greenhttp"]
    http_url = server.url("/nope").replace("ws://", "http://", 1)
    assert f"received response to GET {http_url} - HTTP 404" in lines, lines
    assert rec.types == ["error", "close"]


def _run_with_debug(server, value):
    """Run a WebSocket session (open, close) in a child with GREENHTTP_DEBUG=value;
    its pid and stderr."""
    code = textwrap.dedent(
        f"""
        import gevent, greenhttp
        ws = greenhttp.WebSocket({server.url("/env")!r})
        done = gevent.event.Event()
        ws.onopen = lambda ev: ws.close()
        ws.onclose = lambda ev: done.set()
        assert done.wait(10)
        """
    )
    out = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "GREENHTTP_DEBUG": value},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with gevent.Timeout(30):  # the server lives in this process: let it run
        while out.poll() is None:
            gevent.sleep(0.01)
    stderr = out.stderr.read()
    out.stdout.close()
    out.stderr.close()
    assert out.returncode == 0, stderr
    return out.pid, stderr


def test_debug_env_prints_only_the_namespaces_it_lists(ws_server):
    """GREENHTTP_DEBUG=greenhttp prints the handshake's GREENHTTP lines, and no
    WEBSOCKET line: that namespace was not listed (the child logger's records
    must not reach the parent's stderr handler)."""
    server = ws_server()
    pid, stderr = _run_with_debug(server, "greenhttp")
    assert f"GREENHTTP {pid}: connecting to 127.0.0.1:{server.server.port} using http:h1" in stderr
    assert "WEBSOCKET" not in stderr
    pid, stderr = _run_with_debug(server, "greenhttp,websocket")
    lines = stderr.splitlines()
    assert lines.count(f"WEBSOCKET {pid}: connection opened 127.0.0.1:{server.server.port}") == 1
    assert sum(line.startswith(f"GREENHTTP {pid}: connected to ") for line in lines) == 1


def test_debug_env_writes_the_spec_line_shape(ws_server):
    """GREENHTTP_DEBUG=websocket prints ``WEBSOCKET <pid>: ...`` lines on stderr:
    the opening handshake's connection lines too (with the core namespace off, the
    original writes its client events under the websocket one), in this order, and
    not the core namespace's response lines."""
    server = ws_server()
    pid, stderr = _run_with_debug(server, "websocket")
    port = server.server.port
    expected = [
        f"WEBSOCKET {pid}: connecting to 127.0.0.1:{port} using http:h1",
        f"WEBSOCKET {pid}: connected to 127.0.0.1:{port} using http:h1",
        f"WEBSOCKET {pid}: sending request to GET http://127.0.0.1:{port}/env",
        f"WEBSOCKET {pid}: connection opened 127.0.0.1:{port}",
        f"WEBSOCKET {pid}: closed connection to {server.url('/env')} - 1005 ",
    ]
    lines = [line for line in stderr.splitlines() if line.startswith(("WEBSOCKET", "GREENHTTP"))]
    assert lines == expected, stderr


def test_connection_opened_over_a_unix_socket_has_no_address(
    make_server, make_client, record, caplog, tmp_path
):
    """Over a Unix socket getpeername() is a path, not (ip, port): the line is the
    spec's bare ``connection opened``, not the path's first two characters."""

    def handler(conn):
        req = conn.read_request()
        conn.send(handshake_response(req))
        WsPeer(conn, req).answer_close()

    path = str(tmp_path / "ws.sock")
    make_server(handler, unix_path=path)
    client = make_client("http://localhost", socket_path=path)
    with caplog.at_level(logging.DEBUG, logger="greenhttp.websocket"):
        ws = WebSocket("ws://localhost/u", {"dispatcher": client})
        rec = record(ws)
        rec.wait_open()
        ws.close()
        rec.wait_closed()
    lines = [r.getMessage() for r in caplog.records if r.name == "greenhttp.websocket"]
    assert lines[0] == "connection opened"
    assert lines.count("connection opened") == 1
