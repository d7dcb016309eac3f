"""Peer clients under ``gevent.monkey.patch_all()``: how a gevent user runs them.

Each client gets exactly ``connections`` keep-alive connections and blocks
(rather than opening extra ones) when more workers than connections want one:

``geventhttpclient``  ``HTTPClient(host, port, concurrency=K)``; ``get(path).read()``
``urllib3``           ``HTTPConnectionPool(host, port, maxsize=K, block=True)``
``requests``          a ``Session`` with ``HTTPAdapter(pool_maxsize=K, pool_block=True)``
``httpx``             the *sync* ``httpx.Client`` (httpcore's sync pool, its locks
                      patched into gevent ones); h2c uses ``http1=False, http2=True``
                      (prior knowledge), https uses ``http2=True`` (ALPN).
"""

from gevent import monkey

monkey.patch_all()

import ssl  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from _common import RequestFn, Spec, drive_gevent, emit, skip  # noqa: E402

Closer = Callable[[], None]


def _check(status: int) -> None:
    if status != 200:
        raise RuntimeError(f"status {status}")


def _geventhttpclient(spec: Spec) -> tuple[RequestFn, Closer]:
    from geventhttpclient import HTTPClient

    if spec.protocol != "h1":
        skip("geventhttpclient speaks HTTP/1.1 only")
    client = HTTPClient(
        spec.host, spec.port, concurrency=spec.connections, connection_timeout=10,
        network_timeout=30,
    )
    path = spec.path

    def one() -> int:
        resp = client.get(path)
        data = resp.read()  # the connection goes back to the pool at message end
        _check(resp.status_code)
        return len(data)

    return one, client.close


def _urllib3(spec: Spec) -> tuple[RequestFn, Closer]:
    import urllib3

    if spec.protocol != "h1":
        skip("urllib3 speaks HTTP/1.1 only here")
    pool = urllib3.HTTPConnectionPool(
        spec.host, spec.port, maxsize=spec.connections, block=True, retries=False, timeout=30.0
    )
    path = spec.path

    def one() -> int:
        resp = pool.request("GET", path)
        _check(resp.status)
        return len(resp.data)

    return one, pool.close


def _requests(spec: Spec) -> tuple[RequestFn, Closer]:
    import requests
    from requests.adapters import HTTPAdapter

    if spec.protocol != "h1":
        skip("requests speaks HTTP/1.1 only")
    session = requests.Session()
    adapter = HTTPAdapter(pool_connections=1, pool_maxsize=spec.connections, pool_block=True)
    session.mount("http://", adapter)
    url = spec.origin + spec.path

    def one() -> int:
        resp = session.get(url, timeout=30)
        _check(resp.status_code)
        return len(resp.content)

    return one, session.close


def _httpx(spec: Spec) -> tuple[RequestFn, Closer]:
    import httpx

    limits = httpx.Limits(
        max_connections=spec.connections, max_keepalive_connections=spec.connections
    )
    kwargs: dict[str, Any] = {"limits": limits, "timeout": 30.0}
    if spec.protocol == "h2c":
        kwargs.update(http1=False, http2=True)
    elif spec.protocol == "h2":
        kwargs.update(http2=True, verify=ssl.create_default_context(cafile=spec.cafile))
    client = httpx.Client(**kwargs)
    url = spec.origin + spec.path

    def one() -> int:
        resp = client.get(url)
        _check(resp.status_code)
        return len(resp.content)

    return one, client.close


CLIENTS = {
    "geventhttpclient": _geventhttpclient,
    "urllib3": _urllib3,
    "requests": _requests,
    "httpx": _httpx,
}


def main() -> None:
    client, spec = Spec.from_argv(sys.argv)
    try:
        one, close = CLIENTS[client](spec)
    except ImportError as exc:
        skip(f"{client} not installed ({exc})")
    try:
        emit(drive_gevent(spec, [one] * spec.concurrency))
    finally:
        close()


if __name__ == "__main__":
    main()
