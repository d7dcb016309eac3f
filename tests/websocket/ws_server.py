"""A loopback WebSocket server built on the ``websockets`` library, for interop tests.

Run as a subprocess: ``python ws_server.py [CERTFILE KEYFILE]``. It starts
asyncio servers on 127.0.0.1 (one negotiating permessage-deflate, one not, and
with a certificate a TLS one), prints ``{"deflate": port, "plain": port,
"tls": port}`` on one stdout line, and serves until its stdin closes. Each connection's behaviour is chosen by the request path:

* ``/echo``: send every message back unchanged;
* ``/headers``: send the request headers as one JSON text message, then echo;
* ``/close/<code>/<reason>``: close with that code and reason at once;
* ``/send/<n>/<size>``: send ``n`` binary messages of ``size`` compressible bytes, then echo;
* ``/ping``: send a ping with payload ``b"srv"``; answer ``"pong"`` when its pong arrives;
* ``/drop``: drop the TCP connection without a close frame;

The ``select_subprotocol`` hook picks ``chat`` or ``superchat`` when offered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import sys
from urllib.parse import unquote

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed


def select_subprotocol(connection: ServerConnection, offered: list[str]) -> str | None:
    for name in ("chat", "superchat"):
        if name in offered:
            return name
    return None


async def echo(ws: ServerConnection) -> None:
    try:
        async for message in ws:
            await ws.send(message)
    except ConnectionClosed:
        pass


async def handler(ws: ServerConnection) -> None:
    path = ws.request.path
    parts = path.strip("/").split("/")
    if path.startswith("/headers"):
        await ws.send(json.dumps([[k, v] for k, v in ws.request.headers.raw_items()]))
        await echo(ws)
    elif parts[0] == "close":
        await ws.close(int(parts[1]), unquote(parts[2]) if len(parts) > 2 else "")
    elif parts[0] == "send":
        count, size = int(parts[1]), int(parts[2])
        block = (b"greenhttp " * (size // 10 + 1))[:size]
        for _ in range(count):
            await ws.send(block)
        await echo(ws)
    elif parts[0] == "ping":
        waiter = await ws.ping(b"srv")
        await waiter
        await ws.send("pong")
        await echo(ws)
    elif parts[0] == "drop":
        ws.transport.abort()
    else:
        await echo(ws)


async def main() -> None:
    common = {"select_subprotocol": select_subprotocol, "max_size": None, "ping_interval": None}
    async with contextlib.AsyncExitStack() as stack:
        servers = {
            "deflate": await stack.enter_async_context(
                serve(handler, "127.0.0.1", 0, compression="deflate", **common)
            ),
            "plain": await stack.enter_async_context(
                serve(handler, "127.0.0.1", 0, compression=None, **common)
            ),
        }
        if len(sys.argv) == 3:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(sys.argv[1], sys.argv[2])
            servers["tls"] = await stack.enter_async_context(
                serve(handler, "127.0.0.1", 0, ssl=context, **common)
            )
        ports = {name: server.sockets[0].getsockname()[1] for name, server in servers.items()}
        print(json.dumps(ports), flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)  # EOF: the fixture is done


if __name__ == "__main__":
    asyncio.run(main())
