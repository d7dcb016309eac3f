"""The decompress interceptor: every coding, stacked codings, nginx's gzip, bombs,
back-pressure, and the one-time ExperimentalWarning."""

from __future__ import annotations

import gzip
import importlib
import os
import random
import tracemalloc
import warnings
import zlib

import brotli
import gevent
import ncompress
import pytest
import zstandard

from greenhttp import errors, interceptors
from greenhttp._core.decoders import DecompressionError
from greenhttp.errors import ExperimentalWarning

decompress_module = importlib.import_module("greenhttp.interceptors.decompress")


def _decompress(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return interceptors.decompress(**kw)


random.seed(7)
TEXT = b"".join(b"%d %s\n" % (i, os.urandom(random.randrange(1, 12)).hex().encode()) for i in range(20000))


def _raw_deflate(data):
    c = zlib.compressobj(wbits=-15)
    return c.compress(data) + c.flush()


ENCODERS = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": zstandard.compress,
    "compress": ncompress.compress,
    "x-compress": ncompress.compress,
}


def _serve_encoded(routes, body, coding, status="200 OK", extra=()):
    return routes({"/": lambda conn, req: conn.respond(
        body, status=status, headers=[("Content-Encoding", coding), ("X-Other", "kept"), *extra])})


@pytest.mark.parametrize("coding", sorted(ENCODERS))
def test_every_coding(routes, make_client, coding):
    server = _serve_encoded(routes, ENCODERS[coding](TEXT), coding)
    r = make_client(server.origin).compose(_decompress()).request(path="/")
    assert r.body.bytes() == TEXT
    assert "content-encoding" not in r.headers and "content-length" not in r.headers
    assert r.headers["x-other"] == "kept"


def test_raw_deflate_and_case(routes, make_client):
    for body, coding in ((_raw_deflate(TEXT), "deflate"), (gzip.compress(TEXT), "GZip")):
        server = _serve_encoded(routes, body, coding)
        assert make_client(server.origin).compose(_decompress()).request(path="/").body.bytes() == TEXT


@pytest.mark.parametrize("coding", ["identity", "identity, identity, identity, identity, identity", "gzip, identity"])
def test_identity_is_not_a_coding_it_decodes(routes, make_client, coding):
    # The spec's list has no identity: as any coding not on it, the response passes
    # untouched, headers included (undici's 'should allow exactly 5 content-encodings').
    body = gzip.compress(TEXT) if coding.startswith("gzip") else TEXT
    server = _serve_encoded(routes, body, coding)
    r = make_client(server.origin).compose(_decompress()).request(path="/")
    assert r.body.bytes() == body
    assert r.headers["content-encoding"] == coding
    assert r.headers["content-length"] == str(len(body))


def test_stacked_codings_are_undone_last_applied_first(routes, make_client):
    body = brotli.compress(gzip.compress(zstandard.compress(TEXT)))
    server = _serve_encoded(routes, body, "zstd, gzip,br")
    r = make_client(server.origin).compose(_decompress()).request(path="/", response_headers="raw")
    assert r.body.bytes() == TEXT
    names = [n.lower() for n in r.headers[::2]]
    assert b"content-encoding" not in names and b"content-length" not in names
    assert b"x-other" in names


def test_nginx_gzip_on_the_fly(nginx, make_client):
    r = make_client(nginx.origin).compose(_decompress()).request(
        path="/chunked", headers={"accept-encoding": "gzip"}
    )
    assert r.status_code == 200
    assert r.body.bytes() == nginx.chunked_source
    assert "content-encoding" not in r.headers


def test_what_is_left_alone(routes, make_client):
    gz = gzip.compress(b"secret")
    server = routes({
        "/404": lambda conn, req: conn.respond(gz, status="404 Not Found", headers=[("Content-Encoding", "gzip")]),
        "/unknown": lambda conn, req: conn.respond(b"abc", headers=[("Content-Encoding", "gzip, snappy")]),
        "/304": lambda conn, req: conn.send(b"HTTP/1.1 304 Not Modified\r\nContent-Encoding: gzip\r\n\r\n"),
        "/head": lambda conn, req: conn.send(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(gz)),
    })
    client = make_client(server.origin)
    composed = client.compose(_decompress())
    r = composed.request(path="/404")
    assert r.body.bytes() == gz and r.headers["content-encoding"] == "gzip"
    r = composed.request(path="/unknown")
    assert r.body.bytes() == b"abc" and r.headers["content-encoding"] == "gzip, snappy"
    r = composed.request(path="/304")
    assert r.status_code == 304 and r.headers["content-encoding"] == "gzip"
    r = composed.request(path="/head", method="HEAD")
    assert r.headers["content-length"] == str(len(gz)) and r.body.bytes() == b""
    # Error bodies are decoded on request; skipped statuses are configurable.
    assert client.compose(_decompress(skip_error_responses=False)).request(path="/404").body.bytes() == b"secret"
    r = client.compose(_decompress(skip_status_codes=[404], skip_error_responses=False)).request(path="/404")
    assert r.body.bytes() == gz


def test_bad_bodies_fail_with_decompression_error(routes, make_client):
    server = routes({
        "/corrupt": lambda conn, req: conn.respond(b"\x1f\x8bnot really gzip", headers=[("Content-Encoding", "gzip")]),
        "/truncated": lambda conn, req: conn.respond(
            zstandard.compress(TEXT)[:-10], headers=[("Content-Encoding", "zstd")]),
        "/many": lambda conn, req: conn.respond(
            b"x", headers=[("Content-Encoding", "gzip, gzip, gzip, gzip, gzip, gzip")]),
    })
    composed = make_client(server.origin).compose(_decompress())
    for path in ("/corrupt", "/truncated"):
        r = composed.request(path=path)
        with pytest.raises(DecompressionError) as info:
            r.body.bytes()
        assert info.value.code == "GH_ERR_DECOMPRESSION"
    with pytest.raises(DecompressionError, match="too many content-encodings"):
        composed.request(path="/many").body.bytes()


def _bomb(coding):
    zeros = b"\0" * (1 << 20)
    if coding == "gzip":
        c = zlib.compressobj(9, wbits=31)
        return b"".join(c.compress(zeros) for _ in range(512)) + c.flush()  # 512 MiB of zeros
    if coding == "br":
        return brotli.compress(b"\0" * (256 << 20), quality=1)
    return zstandard.ZstdCompressor().compress(b"\0" * (512 << 20))


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
def test_a_decompression_bomb_is_an_error_not_an_out_of_memory(routes, make_client, coding):
    bomb = _bomb(coding)
    assert len(bomb) < 1 << 20
    server = _serve_encoded(routes, bomb, coding)
    composed = make_client(server.origin).compose(_decompress())
    tracemalloc.start()
    try:
        r = composed.request(path="/")
        with pytest.raises(errors.ResponseExceededMaxSizeError, match="times its encoded size"):
            r.body.bytes()  # buffers everything it gets: the guard stops it at ~32 MiB
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 96 << 20


def test_limits_are_configurable(routes, make_client):
    body = gzip.compress(b"a" * (40 << 20))  # ratio about 1000 past the 32 MiB grace
    server = _serve_encoded(routes, body, "gzip")
    client = make_client(server.origin)
    assert len(client.compose(_decompress(max_ratio=None)).request(path="/").body.bytes()) == 40 << 20
    with pytest.raises(errors.ResponseExceededMaxSizeError, match="max_decoded_size"):
        client.compose(_decompress(max_decoded_size=1 << 20)).request(path="/").body.bytes()
    assert client.compose(_decompress(max_decoded_size=50 << 20, max_ratio=0)).request(path="/").body.bytes()[:3] == b"aaa"


def test_decoding_streams_with_back_pressure(routes, make_client, recorder):
    big = (TEXT * 8)[: 6 << 20]
    server = _serve_encoded(routes, gzip.compress(big), "gzip")
    rec = recorder()
    sizes = []

    class Pausing(type(rec)):
        def on_response_data(self, controller, chunk):
            super().on_response_data(controller, chunk)
            sizes.append(len(chunk))
            if len(sizes) == 3:
                controller.pause()

    rec = Pausing()
    make_client(server.origin).compose(_decompress()).dispatch({"path": "/", "method": "GET"}, rec)
    while len(sizes) < 3:
        gevent.sleep(0.005)
    gevent.sleep(0.1)
    assert len(sizes) == 3  # paused: nothing more is decoded or delivered
    assert rec.controller.paused
    rec.controller.resume()
    assert rec.done.wait(10)
    assert rec.error is None
    assert rec.body == big
    assert max(sizes) <= 1 << 16  # decoded a piece at a time, never the whole body at once
    assert len(sizes) >= len(big) >> 16


def test_abort_while_decoding_is_held_back(routes, make_client, recorder):
    big = b"z" * (4 << 20)  # a few KiB on the wire: the request ends while decoding is paused
    server = _serve_encoded(routes, gzip.compress(big), "gzip")

    class PauseFirst(recorder):
        def on_response_data(self, controller, chunk):
            super().on_response_data(controller, chunk)
            controller.pause()

    rec = PauseFirst()
    composed = make_client(server.origin).compose(_decompress())
    composed.dispatch({"path": "/", "method": "GET"}, rec)
    while not rec.body:
        gevent.sleep(0.005)
    gevent.sleep(0.05)
    assert len(rec.body) == 1 << 16
    reason = RuntimeError("enough")
    rec.controller.abort(reason)
    assert rec.done.wait(2)
    assert rec.error is reason and rec.names()[-1] == "error"
    assert rec.controller.aborted and rec.controller.reason is reason
    # The response had fully arrived: the abort cost no connection.
    assert len(composed.request(path="/").body.bytes()) == len(big)
    assert server.accepted == 1


def test_trailers_come_after_the_decoded_body(make_server, make_client, recorder):
    body = gzip.compress(b"hello trailers")

    def handler(conn):
        conn.read_request()
        conn.send(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\nTrailer: x-sum\r\n\r\n"
            + b"%x\r\n%s\r\n0\r\nx-sum: 42\r\n\r\n" % (len(body), body)
        )
        conn.wait_closed()

    server = make_server(handler)
    rec = recorder()
    make_client(server.origin).compose(_decompress()).dispatch({"path": "/", "method": "GET"}, rec)
    assert rec.done.wait(5)
    assert rec.body == b"hello trailers"
    assert rec.trailers == {"x-sum": "42"}
    assert rec.names()[-1] == "end"


def test_experimental_warning_once_per_process(monkeypatch):
    monkeypatch.setattr(decompress_module, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        interceptors.decompress()
        interceptors.decompress()
    experimental = [w for w in caught if issubclass(w.category, ExperimentalWarning)]
    assert len(experimental) == 1
    assert "experimental" in str(experimental[0].message)


def test_options_are_validated_eagerly():
    with pytest.raises(errors.InvalidArgumentError, match="skip_status_codes"):
        _decompress(skip_status_codes=204)
    with pytest.raises(errors.InvalidArgumentError, match="skip_error_responses"):
        _decompress(skip_error_responses="no")
    with pytest.raises(errors.InvalidArgumentError, match="max_decoded_size"):
        _decompress(max_decoded_size=-1)
    with pytest.raises(errors.InvalidArgumentError, match="max_ratio"):
        _decompress(max_ratio="10")
