"""A hypercorn WebSocket server for the RFC 8441 tests (run as a subprocess).

``python h2_ws_server.py CERTFILE KEYFILE TLS_FD H2C_FD TLS_OLD_FD H2C_OLD_FD``
serves the ASGI app below on four listening sockets the parent made (their
file descriptors are inherited, so there is no port race): TLS (ALPN picks
h2 or http/1.1) and cleartext (HTTP/1.1, or h2c with prior knowledge), each
once as hypercorn ships (SETTINGS_ENABLE_CONNECT_PROTOCOL=1 on HTTP/2) and
once ("old") with that setting left out, as an HTTP/2 server without RFC
8441 would. It prints ``ready`` on stdout once the app has started and
serves until its stdin closes.

Each WebSocket accepts the first subprotocol offered, then answers text
messages:

* ``version``: the HTTP version of the handshake (``"2"`` or ``"1.1"``);
* ``headers``: the handshake's request headers as JSON ``[[name, value], …]``;
* ``close:<code>:<reason>``: closes with that code and reason;
* anything else (and every binary message): echoed back.

The path ``/refuse`` refuses the handshake (hypercorn answers 403).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys

import h2.settings
from hypercorn.asyncio import serve
from hypercorn.config import Config
from hypercorn.protocol import h2 as hypercorn_h2

_OLD_PORTS: set[int] = set()


def _without_extended_connect() -> None:
    """Leave SETTINGS_ENABLE_CONNECT_PROTOCOL out on the "old" sockets."""
    original = hypercorn_h2.H2Protocol.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if self.server is not None and self.server[1] in _OLD_PORTS:
            codes = h2.settings.SettingCodes
            self.connection.local_settings = h2.settings.Settings(
                client=False,
                initial_values={
                    codes.MAX_CONCURRENT_STREAMS: self.config.h2_max_concurrent_streams,
                    codes.MAX_HEADER_LIST_SIZE: self.config.h2_max_header_list_size,
                },
            )

    hypercorn_h2.H2Protocol.__init__ = __init__


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
                print("ready", flush=True)
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["http_version"].encode()})
        return
    message = await receive()
    if scope["path"] == "/refuse":
        await send({"type": "websocket.close", "code": 1008})
        return
    accept = {"type": "websocket.accept"}
    if scope.get("subprotocols"):
        accept["subprotocol"] = scope["subprotocols"][0]
    await send(accept)
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        if text is None:
            await send({"type": "websocket.send", "bytes": message["bytes"]})
        elif text == "version":
            await send({"type": "websocket.send", "text": scope["http_version"]})
        elif text == "headers":
            headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]]
            await send({"type": "websocket.send", "text": json.dumps(headers)})
        elif text.startswith("close:"):
            _, code, reason = text.split(":", 2)
            await send({"type": "websocket.close", "code": int(code), "reason": reason})
            return
        else:
            await send({"type": "websocket.send", "text": text})


async def main() -> None:
    certfile, keyfile, tls, h2c, tls_old, h2c_old = sys.argv[1:7]
    for fd in (tls_old, h2c_old):
        with socket.socket(fileno=int(fd)) as sock:
            _OLD_PORTS.add(sock.getsockname()[1])
            sock.detach()
    _without_extended_connect()
    config = Config()
    config.certfile, config.keyfile = certfile, keyfile
    config.bind = [f"fd://{tls}", f"fd://{tls_old}"]
    config.insecure_bind = [f"fd://{h2c}", f"fd://{h2c_old}"]
    config.graceful_timeout = 1.0
    config.websocket_ping_interval = None
    config.errorlog = None  # hypercorn's own tracebacks would only fill the pipe
    loop = asyncio.get_running_loop()
    stdin_closed = loop.run_in_executor(None, sys.stdin.read)

    async def shutdown_trigger() -> None:
        await stdin_closed

    await serve(app, config, shutdown_trigger=shutdown_trigger)


if __name__ == "__main__":
    asyncio.run(main())
