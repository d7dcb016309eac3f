"""asyncio reference clients (no gevent in this process).

``aiohttp``        ``ClientSession(connector=TCPConnector(limit=K))``;
                   ``async with session.get(url) as r: await r.read()``
``httpx_asyncio``  ``httpx.AsyncClient`` with the same limits as the gevent
                   ``httpx`` runner (h2c: ``http1=False, http2=True``).

The default event loop is used (uvloop is not assumed).
"""

from __future__ import annotations

import asyncio
import ssl
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from _common import AsyncRequestFn, Spec, drive_asyncio, emit, skip

Closer = Callable[[], Awaitable[Any]]


async def _aiohttp(spec: Spec) -> tuple[AsyncRequestFn, Closer]:
    import aiohttp

    if spec.protocol != "h1":
        skip("aiohttp speaks HTTP/1.1 only")
    connector = aiohttp.TCPConnector(limit=spec.connections, limit_per_host=spec.connections)
    session = aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=30)
    )
    url = spec.origin + spec.path

    async def one() -> int:
        async with session.get(url) as resp:
            data = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"status {resp.status}")
            return len(data)

    return one, session.close


async def _httpx_asyncio(spec: Spec) -> tuple[AsyncRequestFn, Closer]:
    import httpx

    limits = httpx.Limits(
        max_connections=spec.connections, max_keepalive_connections=spec.connections
    )
    kwargs: dict[str, Any] = {"limits": limits, "timeout": 30.0}
    if spec.protocol == "h2c":
        kwargs.update(http1=False, http2=True)
    elif spec.protocol == "h2":
        kwargs.update(http2=True, verify=ssl.create_default_context(cafile=spec.cafile))
    client = httpx.AsyncClient(**kwargs)
    url = spec.origin + spec.path

    async def one() -> int:
        resp = await client.get(url)
        if resp.status_code != 200:
            raise RuntimeError(f"status {resp.status_code}")
        return len(resp.content)

    return one, client.aclose


CLIENTS = {"aiohttp": _aiohttp, "httpx_asyncio": _httpx_asyncio}


async def _main(client: str, spec: Spec) -> None:
    try:
        one, close = await CLIENTS[client](spec)
    except ImportError as exc:
        skip(f"{client} not installed ({exc})")
    try:
        emit(await drive_asyncio(spec, [one] * spec.concurrency))
    finally:
        await close()


def main() -> None:
    client, spec = Spec.from_argv(sys.argv)
    asyncio.run(_main(client, spec))


if __name__ == "__main__":
    main()
