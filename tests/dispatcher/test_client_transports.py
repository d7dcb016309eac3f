"""Unix sockets, TLS (trustme), and the debug log lines (GREENHTTP_DEBUG)."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import textwrap

import gevent.ssl
import pytest
import trustme

import greenhttp
from testkit import serve_forever


def test_unix_socket(make_server, make_client, tmp_path):
    path = str(tmp_path / "s.sock")
    server = make_server(serve_forever(b"over unix"), unix_path=path)
    client = make_client("http://localhost", socket_path=path)
    assert client.request(path="/").body.text() == "over unix"
    assert client.request(path="/").body.text() == "over unix"
    assert server.accepted == 1
    assert server.requests[0].header("host") == "localhost"


def test_unix_socket_via_connect_options(make_server, make_client, tmp_path):
    path = str(tmp_path / "c.sock")
    make_server(serve_forever(b"via connect"), unix_path=path)
    client = make_client("http://localhost", connect={"socket_path": path})
    assert client.request(path="/").body.text() == "via connect"


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture
def tls_server(make_server, ca):
    cert = ca.issue_cert("localhost", "127.0.0.1")
    # gevent's SSLContext: the server's handshakes must not block the hub.
    ctx = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(ctx)
    return make_server(serve_forever(b"secure"), ssl_context=ctx)


def test_tls_untrusted_certificate_fails_by_default(tls_server, make_client):
    client = make_client(f"https://localhost:{tls_server.port}")
    with pytest.raises(ssl.SSLCertVerificationError):
        client.request(path="/")


def test_tls_with_the_ca_data(tls_server, make_client, ca):
    client = make_client(f"https://localhost:{tls_server.port}", connect={"cadata": ca.cert_pem.bytes().decode()})
    assert client.request(path="/").body.text() == "secure"
    assert client.request(path="/").body.text() == "secure"
    assert tls_server.accepted == 1


def test_tls_with_a_ca_file(tls_server, make_client, ca, tmp_path):
    p = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(p))
    client = make_client(f"https://127.0.0.1:{tls_server.port}", connect={"cafile": str(p)})
    assert client.request(path="/").body.text() == "secure"


def test_tls_with_an_ssl_context(tls_server, make_client, ca):
    ctx = ssl.create_default_context()  # the stdlib's own context, used as given
    ca.configure_trust(ctx)
    client = make_client(f"https://localhost:{tls_server.port}", connect={"ssl_context": ctx})
    assert client.request(path="/").body.text() == "secure"


def test_tls_hostname_mismatch_fails(make_server, make_client, ca):
    cert = ca.issue_cert("other.example")
    ctx = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(ctx)
    server = make_server(serve_forever(b"x"), ssl_context=ctx)
    client = make_client(f"https://localhost:{server.port}", connect={"cadata": ca.cert_pem.bytes().decode()})
    with pytest.raises(ssl.SSLCertVerificationError):
        client.request(path="/")


def test_tls_verify_false(tls_server, make_client):
    client = make_client(f"https://localhost:{tls_server.port}", connect={"verify": False})
    assert client.request(path="/").body.text() == "secure"


# A subprocess's loopback server (trailers on /debug, none on /plain, a body in
# pieces on /big: not the whole-response path) and a Client to it; each script
# adds what the client does.
_SERVER = textwrap.dedent(
    """
    from gevent.server import StreamServer
    import greenhttp

    def handle(sock, addr):
        buf = b""
        while True:
            while b"\\r\\n\\r\\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            head, _, buf = buf.partition(b"\\r\\n\\r\\n")
            if b" /big " in head:
                sock.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 200000\\r\\n\\r\\n")
                sock.sendall(b"x" * 200000)
            elif b" /plain " in head:
                sock.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 11\\r\\n\\r\\nhello world")
            else:
                sock.sendall(
                    b"HTTP/1.1 200 OK\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n"
                    b"2\\r\\nok\\r\\n0\\r\\nX-Trailer: yes\\r\\n\\r\\n"
                )

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    client = greenhttp.Client(f"http://127.0.0.1:{server.server_port}")
    """
)

_DEBUG_SCRIPT = _SERVER + textwrap.dedent(
    """
    r = client.request(path="/debug?x=1")
    print(r.body.text(), r.trailers)
    client.close()
    server.stop()
    print("PORT", server.server_port)
    """
)

_PLAIN_SCRIPT = _SERVER + textwrap.dedent(
    """
    assert client.request(path="/plain").body.text() == "hello world"
    assert len(client.request(path="/big").body.bytes()) == 200000
    client.close()
    server.stop()
    """
)


def _run(script, env_extra):
    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, env=env)


def test_debug_log_lines():
    proc = _run(_DEBUG_SCRIPT, {"GREENHTTP_DEBUG": "greenhttp"})
    assert proc.returncode == 0, proc.stderr
    port = proc.stdout.split("PORT ")[1].strip()
    pid_prefix = "GREENHTTP "
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith(pid_prefix)]
    pids = {ln.split(" ")[1].rstrip(":") for ln in lines}
    assert len(pids) == 1 and pids.pop().isdigit()
    messages = [ln.split(": ", 1)[1] for ln in lines]
    host = f"127.0.0.1:{port}"
    origin = f"http://{host}"
    expected_prefixes = [
        f"connecting to {host} using http:h1",
        f"connected to {host} using http:h1",
        f"sending request to GET {origin}/debug?x=1",
        f"received response to GET {origin}/debug?x=1 - HTTP 200",
        f"trailers received from GET {origin}/debug?x=1",
    ]
    for prefix in expected_prefixes:
        assert any(m.startswith(prefix) for m in messages), (prefix, messages)
    order = [next(i for i, m in enumerate(messages) if m.startswith(p)) for p in expected_prefixes]
    assert order == sorted(order)


def test_debug_logs_the_end_of_a_response_without_trailers_too():
    # undici's node-test/debug.js: its fixture sends no trailers, and its five
    # lines end with "trailers received from ...", logged at every response's end.
    proc = _run(_PLAIN_SCRIPT, {"GREENHTTP_DEBUG": "greenhttp"})
    assert proc.returncode == 0, proc.stderr
    messages = [ln.split(": ", 1)[1] for ln in proc.stderr.splitlines() if ln.startswith("GREENHTTP ")]
    ends = [m for m in messages if m.startswith("trailers received from GET ")]
    assert [m.rsplit("/", 1)[1] for m in ends] == ["plain", "big"], messages
    assert messages.index(ends[0]) == 4 and len(messages) == 8, messages  # (2 to connect, 3 a request)


@pytest.mark.parametrize("value", ["", "websocket", "nothing"])
def test_debug_log_off(value):
    proc = _run(_DEBUG_SCRIPT, {"GREENHTTP_DEBUG": value})
    assert proc.returncode == 0, proc.stderr
    assert "GREENHTTP " not in proc.stderr
    assert "ok" in proc.stdout


def test_debug_log_star():
    proc = _run(_DEBUG_SCRIPT, {"GREENHTTP_DEBUG": "*"})
    assert proc.returncode == 0, proc.stderr
    assert "GREENHTTP " in proc.stderr and "connecting to" in proc.stderr


def test_public_names_used_here_exist():
    assert greenhttp.Client and greenhttp.AbortController
