"""Moving a monkey-patched requests script to greenhttp, with the smallest change.

The "legacy" script is a common gevent pattern: ``gevent.monkey.patch_all()``
at the very top, then plain ``requests`` calls fanned out over a
``gevent.pool.Pool`` of greenlets; patching is what makes requests'
blocking sockets cooperative. The migrated version keeps the same
structure (the same fan-out, the same full URLs, the same checks) and only
swaps the HTTP calls:

=======================================  ===============================================
requests                                 greenhttp
=======================================  ===============================================
``requests.Session()`` + ``HTTPAdapter`` ``greenhttp.Agent(connections=…)``
``r.raise_for_status()``                 ``.compose(interceptors.response_error())``
``session.get(url, timeout=10)``         ``greenhttp.request(url, dispatcher=http, …)``
``r.json()``                             ``r.body.json()``
=======================================  ===============================================

greenhttp needs no monkey-patching (it uses gevent's sockets directly), but
works unchanged in a patched process like this one, so the two can live side
by side during a migration. Once nothing else needs ``patch_all()`` it can go.

The script starts its own small WSGI server on 127.0.0.1, runs the same job
both ways, prints the time and the connections each took, and checks that
both got the same results.

Run: ``python examples/legacy_requests_migration.py``.
"""

# patch_all() must run first: before anything imports socket, ssl or threading.
from gevent import monkey

monkey.patch_all()

import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import gevent.pool  # noqa: E402
import requests  # noqa: E402
import requests.adapters  # noqa: E402
from gevent.pywsgi import WSGIServer  # noqa: E402

import greenhttp  # noqa: E402
from greenhttp import interceptors  # noqa: E402

CALLS = 500  # user records to fetch
CONCURRENCY = 50  # greenlets at once, and connections at most


# -- the local service the job talks to ---------------------------------------------------


def users_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """``GET /users/<n>``: a small JSON record, after 5 ms of pretend work."""
    path = environ["PATH_INFO"]
    if not path.startswith("/users/") or not path[len("/users/"):].isdigit():
        start_response("404 Not Found", [("content-type", "text/plain")])
        return [b"no such user"]
    n = int(path[len("/users/"):])
    gevent.sleep(0.005)
    body = b'{"id": %d, "name": "user %d", "score": %d}' % (n, n, n * 7 % 100)
    start_response("200 OK", [("content-type", "application/json"), ("content-length", str(len(body)))])
    return [body]


class CountingServer(WSGIServer):
    """gevent's WSGI server, counting the connections it accepts."""

    connections = 0

    def handle(self, sock: Any, address: Any) -> None:
        self.connections += 1
        super().handle(sock, address)


# -- before: requests, made cooperative by patch_all() --------------------------------------


def fetch_all_with_requests(base: str, ids: list[int]) -> list[dict[str, Any]]:
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=CONCURRENCY))

    def fetch(user_id: int) -> dict[str, Any]:
        r = session.get(f"{base}/users/{user_id}", timeout=10)
        r.raise_for_status()
        return r.json()

    try:
        return gevent.pool.Pool(CONCURRENCY).map(fetch, ids)
    finally:
        session.close()


# -- after: greenhttp (the same shape; only the HTTP calls changed) ---------------------------


def fetch_all_with_greenhttp(base: str, ids: list[int]) -> list[dict[str, Any]]:
    http = greenhttp.Agent(connections=CONCURRENCY).compose(interceptors.response_error())

    def fetch(user_id: int) -> dict[str, Any]:
        r = greenhttp.request(f"{base}/users/{user_id}", dispatcher=http, headers_timeout=10.0, body_timeout=10.0)
        return r.body.json()  # a 4xx/5xx raised ResponseError above, like raise_for_status()

    try:
        return gevent.pool.Pool(CONCURRENCY).map(fetch, ids)
    finally:
        http.close()


def main() -> int:
    server = CountingServer(("127.0.0.1", 0), users_app, log=None)
    server.start()
    base = f"http://127.0.0.1:{server.server_port}"
    ids = list(range(1, CALLS + 1))
    try:
        runs = {}
        for name, job in (("requests", fetch_all_with_requests), ("greenhttp", fetch_all_with_greenhttp)):
            before = server.connections
            started = time.perf_counter()
            results = job(base, ids)
            elapsed = time.perf_counter() - started
            runs[name] = results
            total = sum(user["score"] for user in results)
            print(f"{name:<10} {len(results)} calls in {elapsed:.3f} s "
                  f"over {server.connections - before} connections, total score {total}")
    finally:
        server.stop(timeout=1)
    expected = [{"id": n, "name": f"user {n}", "score": n * 7 % 100} for n in ids]
    same = runs["requests"] == runs["greenhttp"] == expected
    print("results agree:", same)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
