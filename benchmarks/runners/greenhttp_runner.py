"""greenhttp runners, written against /work/shared/API.md.

Clients (argv[1]):

``pool``
    ``greenhttp.Pool(origin, connections=K)``; every request is
    ``pool.request(path=path, method="GET")`` then ``resp.body.bytes()``.
    On an https origin (the TLS h2 scenario) the pool is built with
    ``allow_h2=True, pipelining=100, connect={"cafile": ca}`` (the undici
    runner passes ``allowH2: true, pipelining: 100`` likewise).
``dispatch``
    The raw handler API: K ``greenhttp.Client(origin, pipelining=1)``, one per
    connection; worker ``i`` calls ``clients[i % K].dispatch({"path": path,
    "method": "GET"}, handler)`` and waits on an Event the handler sets in
    ``on_response_end``/``on_response_error``. As in the original library a
    ``False`` return only asks for back-pressure; the request is queued.
``h2c``
    ``greenhttp.H2CClient(origin)`` (HTTP/2 prior knowledge), all workers on
    its one connection: ``client.request(path=path, method="GET")`` then
    ``resp.body.bytes()``.

greenhttp runs without monkey-patching, as it is meant to (DESIGN.md §2).
A name greenhttp does not export yet makes the runner print
``skipped: greenhttp.<Name> not available yet``.
"""

from __future__ import annotations

import sys
from typing import Any

from _common import RequestFn, Spec, drive_gevent, emit, skip

PER_REQUEST_TIMEOUT_S = 30.0


def _need(module: Any, name: str) -> Any:
    attr = getattr(module, name, None)
    if attr is None:
        skip(f"greenhttp.{name} not available yet")
    return attr


def _close_all(dispatchers: list[Any]) -> None:
    """Close every dispatcher, 10 s in all; a hang here must not eat the run's budget."""
    import gevent

    try:
        with gevent.Timeout(10):
            for d in dispatchers:
                d.close()
    except (Exception, gevent.Timeout) as exc:
        print(f"close failed: {exc!r}", file=sys.stderr)


def _pool_workers(greenhttp: Any, spec: Spec, opened: list[Any]) -> list[RequestFn]:
    pool_cls = _need(greenhttp, "Pool")
    kwargs: dict[str, Any] = {"connections": spec.connections}
    if spec.protocol == "h2":
        # As undici: a Pool's h2 concurrency is bounded by `pipelining`.
        kwargs.update(allow_h2=True, pipelining=100, connect={"cafile": spec.cafile})
    pool = pool_cls(spec.origin, **kwargs)
    opened.append(pool)
    path = spec.path

    def one() -> int:
        resp = pool.request(path=path, method="GET")
        data = resp.body.bytes()
        if resp.status_code != 200:
            raise RuntimeError(f"status {resp.status_code}")
        return len(data)

    return [one] * spec.concurrency


class _Collect:
    """A dispatch handler that keeps the body and wakes the waiting greenlet."""

    __slots__ = ("chunks", "status", "error", "done")

    def __init__(self, done: Any) -> None:
        self.chunks: list[bytes] = []
        self.status = 0
        self.error: BaseException | None = None
        self.done = done

    def on_request_start(self, controller: Any, context: Any) -> None:
        pass

    def on_response_start(
        self, controller: Any, status_code: int, headers: Any, status_message: str
    ) -> None:
        self.status = status_code

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        self.chunks.append(chunk)

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        self.done.set()

    def on_response_error(self, controller: Any, error: BaseException) -> None:
        self.error = error
        self.done.set()


def _dispatch_workers(greenhttp: Any, spec: Spec, opened: list[Any]) -> list[RequestFn]:
    from gevent.event import Event

    client_cls = _need(greenhttp, "Client")
    clients = [client_cls(spec.origin, pipelining=1) for _ in range(spec.connections)]
    opened.extend(clients)
    opts = {"path": spec.path, "method": "GET"}

    def make(client: Any) -> RequestFn:
        def one() -> int:
            handler = _Collect(Event())
            client.dispatch(dict(opts), handler)
            if not handler.done.wait(PER_REQUEST_TIMEOUT_S):
                raise TimeoutError("no on_response_end/on_response_error in time")
            if handler.error is not None:
                raise handler.error
            if handler.status != 200:
                raise RuntimeError(f"status {handler.status}")
            return len(b"".join(handler.chunks))

        return one

    return [make(clients[i % len(clients)]) for i in range(spec.concurrency)]


def _h2c_workers(greenhttp: Any, spec: Spec, opened: list[Any]) -> list[RequestFn]:
    client = _need(greenhttp, "H2CClient")(spec.origin)
    opened.append(client)
    path = spec.path

    def one() -> int:
        resp = client.request(path=path, method="GET")
        data = resp.body.bytes()
        if resp.status_code != 200:
            raise RuntimeError(f"status {resp.status_code}")
        return len(data)

    return [one] * spec.concurrency


BUILDERS = {"pool": _pool_workers, "dispatch": _dispatch_workers, "h2c": _h2c_workers}


def main() -> None:
    client, spec = Spec.from_argv(sys.argv)
    try:
        import greenhttp
    except ImportError as exc:
        skip(f"greenhttp not importable: {exc}")
    opened: list[Any] = []
    try:
        try:
            workers = BUILDERS[client](greenhttp, spec, opened)
        except TypeError as exc:  # an option API.md names but the code lacks yet
            skip(f"greenhttp rejected the options: {exc}")
        emit(drive_gevent(spec, workers))
    finally:
        _close_all(opened)


if __name__ == "__main__":
    main()
