"""Load with faults: thousands of greenlets through one Pool while some of the server's
connections reset, send garbage, cut bodies short or stall.

Every request is accounted for: it succeeds with exactly its own body, or fails
with the error class its fault documents, and the counts match what the server
injected one for one (one fault fails exactly one request; pipelining is 1).
Afterwards no socket or greenlet is left (the autouse leak check), the pool
is idle, and a clean request succeeds.
"""

from __future__ import annotations

import time

import gevent
from faultkit import Outcomes
from h2fault import serve_ok

import greenhttp

GREENLETS = 2000
CONNECTIONS = 32
TIMEOUT = 0.5


def test_2000_greenlets_through_one_pool_with_misbehaving_connections(
    make_faulty_server, make_pool
):
    server = make_faulty_server(seed=13)
    pool = make_pool(
        server.origin,
        connections=CONNECTIONS,
        headers_timeout=TIMEOUT,
        body_timeout=TIMEOUT,
        max_response_size=1 << 16,
    )
    outcomes = Outcomes()

    def one(i: int) -> None:
        path = f"/echo/{i}"
        outcomes.run(lambda: pool.request(path=path).body.bytes(), expected=path.encode())

    started = time.monotonic()
    with gevent.Timeout(45, AssertionError("the load hung")):
        gevent.joinall([gevent.spawn(one, i) for i in range(GREENLETS)], raise_error=True)
    elapsed = time.monotonic() - started

    report = (
        f"{outcomes.total} requests in {elapsed:.1f}s over {server.connections} connections; "
        f"outcomes {dict(outcomes.counts)}; injected {dict(server.injected)}"
    )
    print(report)  # shown with -rP: the figures of this run
    assert outcomes.total == GREENLETS, report
    assert outcomes.undocumented == [], report
    assert outcomes.truncated == 0, report
    assert sum(server.injected.values()) > 50, report  # the mix really hit this run
    # One for one: each fault failed exactly one request with its documented class,
    # and each good answer the server sent was one success.
    assert outcomes.counts["ok"] == server.answered, report
    expected = server.expected_errors()
    got = {k: v for k, v in outcomes.counts.items() if k != "ok"}
    assert got == dict(expected), report

    # Healthy again: nothing queued or running, and a clean request succeeds.
    stats = pool.stats
    assert (stats.queued, stats.pending, stats.running) == (0, 0, 0), stats
    server.set_mix({"ok": 1})
    assert pool.request(path="/echo/clean").body.bytes() == b"/echo/clean"


def test_1000_greenlets_through_one_http2_connection_with_reset_and_silent_streams(make_h2_server):
    """Streams fail one by one (RST_STREAM, silence) while their siblings complete."""
    answered = [0]

    def on_request(conn, sid, headers):
        n = int(dict(headers)[":path"].rsplit("/", 1)[1])
        if n % 20 == 0:
            conn.reset(sid, 2)  # INTERNAL_ERROR
        elif n % 20 == 1:
            pass  # never answered
        else:
            answered[0] += 1
            serve_ok(conn, sid, headers)

    server = make_h2_server(on_request)
    client = greenhttp.H2CClient(server.origin, headers_timeout=TIMEOUT, body_timeout=TIMEOUT)
    outcomes = Outcomes()
    n_requests = 1000

    def one(i: int) -> None:
        outcomes.run(lambda: client.request(path=f"/s/{i}").body.bytes(), expected=b"ok /s/%d" % i)

    try:
        with gevent.Timeout(30, AssertionError("the load hung")):
            gevent.joinall([gevent.spawn(one, i) for i in range(n_requests)], raise_error=True)
        assert outcomes.undocumented == [] and outcomes.truncated == 0, outcomes.counts
        assert dict(outcomes.counts) == {
            "ok": answered[0],
            "SocketError": n_requests // 20,
            "HeadersTimeoutError": n_requests // 20,
        }
        assert server.accepted == 1
        assert client.request(path="/s/7").body.bytes() == b"ok /s/7"
    finally:
        client.destroy()
