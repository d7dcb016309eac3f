"""HTTP/2 multiplexing and flow control: many streams, windows both ways, paused bodies, pings."""

from __future__ import annotations

import hashlib

import gevent
import h2.settings
import pytest

from greenhttp.errors import InformationalError
from h2_support.h2server import serve_ok

pytest_plugins = ["h2_support.fixtures"]

MiB = 1 << 20


def _spawn_requests(client, paths, **options):
    results = {}

    def get(path):
        try:
            r = client.request(path=path, **options)
            results[path] = (r.status_code, r.body.bytes())
        except Exception as exc:  # recorded, asserted by the test
            results[path] = exc

    gevent.joinall([gevent.spawn(get, p) for p in paths], timeout=20, raise_error=True)
    return results


def test_100_concurrent_requests_share_one_connection(make_h2_server, make_h2c):
    def handler(conn):
        # Answer only once all 100 are open at the same time.
        pending = [conn.next_request() for _ in range(100)]
        for req in pending:
            conn.respond_later(req.stream_id, body=req.path.encode())
        serve_ok(conn)

    server = make_h2_server(handler, settings={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000})
    client = make_h2c(server.origin)
    paths = [f"/{i}" for i in range(100)]
    results = _spawn_requests(client, paths)
    assert results == {p: (200, p.encode()) for p in paths}
    assert server.accepted == 1
    assert server.conns[0].max_open == 100


def test_extra_requests_queue_behind_the_servers_stream_limit(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok, settings={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 7})
    client = make_h2c(server.origin)
    client.request(path="/warm").body.bytes()  # the server's SETTINGS are known from here on
    assert client._core._conn.max_concurrent == 7
    paths = [f"/{i}" for i in range(60)]
    results = _spawn_requests(client, paths)
    assert all(v[0] == 200 for v in results.values())
    assert server.conns[0].max_open <= 7
    assert server.accepted == 1


def test_our_stream_limit_and_pipelining_cap_concurrency(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin, max_concurrent_streams=10, pipelining=4)
    results = _spawn_requests(client, [f"/{i}" for i in range(40)])
    assert len(results) == 40
    assert server.conns[0].max_open <= 4
    client.pipelining = 10
    _spawn_requests(client, [f"/b{i}" for i in range(40)])
    assert 4 < server.conns[0].max_open <= 10


def test_dispatch_says_busy_at_the_limit_and_drains(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin, max_concurrent_streams=2)
    client.request(path="/warm").body.bytes()
    drained = []
    client.on("drain", lambda origin: drained.append(origin))
    done = gevent.event.Event()
    ends = []

    class Handler:
        def on_response_end(self, controller, trailers):
            ends.append(1)
            if len(ends) == 3:
                done.set()

        def on_response_error(self, controller, err):
            raise AssertionError(err)

    results = [client.dispatch({"path": f"/{i}", "method": "GET"}, Handler()) for i in range(3)]
    assert results == [True, False, False]
    assert done.wait(5)
    assert drained == [server.origin]


def test_window_settings_reach_the_server(make_h2_server, make_h2c):
    seen = {}

    def handler(conn):
        req = conn.next_request()
        with conn.lock:
            seen["stream"] = conn.h2.local_flow_control_window(req.stream_id)
            seen["conn"] = conn.h2.outbound_flow_control_window
        conn.respond(req.stream_id)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    client.request(path="/").body.bytes()
    assert seen == {"stream": 262144, "conn": 524288}


def test_large_upload_respects_the_servers_windows(make_h2_server, make_h2c):
    body = bytes(range(256)) * (4 * 4096)  # 4 MiB

    def handler(conn):
        req = conn.next_request(timeout=30)
        conn.respond(req.stream_id, body=hashlib.sha256(req.body).hexdigest().encode())

    # Small windows: the upload only progresses as the server acknowledges data.
    server = make_h2_server(handler, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 16384})
    client = make_h2c(server.origin)
    r = client.request(path="/up", method="PUT", body=body)
    assert r.body.text() == hashlib.sha256(body).hexdigest()
    assert not server.errors  # h2 raises FlowControlError on any window overrun


def test_slow_upload_window_does_not_block_other_streams(make_h2_server, make_h2c):
    def handler(conn):
        conn.auto_ack = False  # no window ever reopens: the big upload gets stuck
        served = 0
        while served < 5:
            gevent.sleep(0.01)
            with conn.lock:
                ready = [r for r in conn.streams.values() if r.ended and not r.done.is_set()]
            for r in ready:
                conn.respond(r.stream_id, body=b"small")
                served += 1

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    big = gevent.spawn(lambda: client.request(path="/big", method="PUT", body=b"x" * (2 * MiB)))
    gevent.sleep(0.05)
    results = _spawn_requests(client, [f"/s{i}" for i in range(5)])
    assert all(v == (200, b"small") for v in results.values())
    big.kill()
    assert server.accepted == 1


def test_large_download_and_a_slow_reader_beside_fast_ones(make_h2_server, make_h2c):
    big = bytes(range(256)) * (8 * 4096)  # 8 MiB

    def handler(conn):
        while True:
            req = conn.next_request(timeout=30)
            if req is None:
                return
            conn.respond_later(req.stream_id, body=big if req.path == "/big" else b"fast")

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    slow = client.request(path="/big")
    # Nothing of /big is read yet: its stream window is held back, the others flow.
    results = _spawn_requests(client, [f"/f{i}" for i in range(30)])
    assert all(v == (200, b"fast") for v in results.values())
    with server.conns[0].lock:
        sent_unacked = server.conns[0].h2.local_flow_control_window(1)
    assert sent_unacked < 262144  # the server is stuck on stream 1's window
    assert slow.body.bytes() == big
    assert server.accepted == 1


def test_paused_handler_holds_data_and_gets_it_on_resume(make_h2_server, make_h2c):
    body = b"y" * (600 * 1024)

    def handler(conn):
        req = conn.next_request()
        conn.respond_later(req.stream_id, body=body)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    received = []
    state = {}
    done = gevent.event.Event()

    class Handler:
        def on_response_start(self, controller, status, headers, message):
            state["controller"] = controller
            controller.pause()

        def on_response_data(self, controller, chunk):
            assert not controller.paused or received == []
            received.append(chunk)

        def on_response_end(self, controller, trailers):
            done.set()

        def on_response_error(self, controller, err):
            state["err"] = err
            done.set()

    client.dispatch({"path": "/p", "method": "GET"}, Handler())
    gevent.sleep(0.2)
    assert received == []  # paused since the head: nothing delivered
    with server.conns[0].lock:
        window = server.conns[0].h2.local_flow_control_window(1)
    assert window == 0  # the server could send one stream window's worth, no more
    state["controller"].resume()
    assert done.wait(10)
    assert "err" not in state
    assert b"".join(received) == body


def test_fifty_mib_upload_and_download(make_h2_server, make_h2c):
    payload = bytes(range(256)) * (50 * 4096)

    def handler(conn):
        while True:
            req = conn.next_request(timeout=60)
            if req is None:
                return
            if req.method == "PUT":
                conn.respond(req.stream_id, body=hashlib.sha256(req.body).hexdigest().encode())
            else:
                conn.respond_later(req.stream_id, body=payload)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    r = client.request(path="/up", method="PUT", body=payload)
    assert r.body.text() == hashlib.sha256(payload).hexdigest()
    digest = hashlib.sha256()
    size = 0
    for chunk in client.request(path="/down").body:
        digest.update(chunk)
        size += len(chunk)
    assert size == len(payload)
    assert digest.hexdigest() == hashlib.sha256(payload).hexdigest()


def test_ping_events_report_the_round_trip_in_seconds(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin, ping_interval=0.05, keep_alive_timeout=5)
    pings = []
    got = gevent.event.Event()

    def on_ping(duration):
        pings.append(duration)
        if len(pings) >= 2:
            got.set()

    client.on("ping", on_ping)
    client.request(path="/").body.bytes()
    assert got.wait(5)
    assert all(isinstance(d, float) and 0 <= d < 1 for d in pings)


def test_ping_interval_zero_sends_no_pings(make_h2_server, make_h2c):
    import h2.events

    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin, ping_interval=0)
    client.request(path="/").body.bytes()
    gevent.sleep(0.1)
    assert not any(isinstance(e, h2.events.PingReceived) for e in server.conns[0].events)


def test_idle_session_closes_after_keep_alive_timeout(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin, keep_alive_timeout=0.1)
    errors = []
    gone = gevent.event.Event()
    client.on("disconnect", lambda origin, targets, err: (errors.append(err), gone.set()))
    client.request(path="/").body.bytes()
    assert gone.wait(5)
    assert isinstance(errors[0], InformationalError)
    assert "idle" in str(errors[0])
    assert client.request(path="/again").body.text() == "ok /again"
    assert server.accepted == 2


def test_max_requests_per_client_opens_a_new_connection(make_h2_server, make_h2c):
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin, max_requests_per_client=3)
    for i in range(7):
        assert client.request(path=f"/{i}").body.text() == f"ok /{i}"
    assert server.accepted == 3


@pytest.mark.parametrize("size", [0, 1, 16384, 16385, 300000])
def test_body_sizes_around_frame_and_window_edges(make_h2_server, make_h2c, size):
    def handler(conn):
        req = conn.next_request()
        conn.respond(req.stream_id, body=req.body)

    server = make_h2_server(handler)
    client = make_h2c(server.origin)
    body = bytes(i % 251 for i in range(size))
    r = client.request(path="/echo", method="POST", body=body)
    assert r.body.bytes() == body


def test_mixed_aborts_slow_readers_and_big_bodies_do_not_wedge_the_session(make_h2_server, make_h2c):
    import random

    import greenhttp

    rng = random.Random(1234)
    sizes = {f"/{i}": rng.choice([0, 10, 20000, 300000, 1_000_000]) for i in range(120)}

    def handler(conn):
        while True:
            req = conn.next_request(timeout=30)
            if req is None:
                return
            conn.respond_later(req.stream_id, body=b"q" * sizes[req.path])

    server = make_h2_server(handler)
    client = make_h2c(server.origin, initial_window_size=65535, connection_window_size=131072)
    outcome = {}

    def one(path, mode):
        controller = greenhttp.AbortController()
        try:
            r = client.request(path=path, signal=controller.signal, high_water_mark=4096)
            if mode == "abort":
                controller.abort(greenhttp.errors.RequestAbortedError("bye"))
                outcome[path] = len(r.body.bytes())  # the body may have ended already
            elif mode == "slow":
                total = 0
                for chunk in r.body:
                    total += len(chunk)
                    gevent.sleep(0.001)
                outcome[path] = total
                return
            else:
                outcome[path] = len(r.body.bytes())
                return
        except greenhttp.errors.RequestAbortedError:
            outcome[path] = "aborted"

    modes = {p: rng.choice(["read", "read", "slow", "abort"]) for p in sizes}
    jobs = [gevent.spawn(one, p, modes[p]) for p in sizes]
    gevent.joinall(jobs, timeout=40, raise_error=True)
    assert all(j.dead for j in jobs)
    for path, mode in modes.items():
        if mode == "abort":
            assert outcome[path] in ("aborted", sizes[path])
        else:
            assert outcome[path] == sizes[path], (path, mode)
    assert server.accepted == 1
    assert client.request(path="/0").status_code == 200
