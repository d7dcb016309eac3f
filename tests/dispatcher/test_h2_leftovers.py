"""HTTP/2 leftovers of the last audit: content-length precedence, header size limits of 1xx and trailers."""

from __future__ import annotations

import gevent
import h2.errors
import pytest

from greenhttp.errors import HeadersOverflowError, RequestContentLengthMismatchError
from h2_support.h2server import serve_ok

pytest_plugins = ["h2_support.fixtures"]


@pytest.mark.parametrize("declared", ["5", "20"])
def test_without_strict_content_length_a_file_body_goes_with_its_real_length(
    make_h2_server, make_h2c, tmp_path, declared
):
    """docs/client.md: with strict_content_length=False a declared content-length that
    disagrees with a body of known length is replaced by the real one (as on h1)."""
    f = tmp_path / "f.bin"
    f.write_bytes(b"0123456789")
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin, strict_content_length=False)
    with gevent.Timeout(5), open(f, "rb") as fh:
        r = client.request(path="/f", method="PUT", body=fh, headers={"content-length": declared})
        assert r.body.bytes() == b"ok /f"
    req = server.requests[-1]
    assert [v for k, v in req.headers if k == "content-length"] == ["10"]
    assert req.body == b"0123456789"


def test_with_strict_content_length_a_file_body_of_another_length_fails(make_h2_server, make_h2c, tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(b"0123456789")
    server = make_h2_server(serve_ok)
    client = make_h2c(server.origin, strict_content_length=True)
    with gevent.Timeout(5):
        for declared in ("5", "20"):
            with open(f, "rb") as fh, pytest.raises(RequestContentLengthMismatchError):
                client.request(path="/f", method="PUT", body=fh, headers={"content-length": declared}).body.bytes()
        assert client.request(path="/next").body.bytes() == b"ok /next"


def _oversized(kind):
    """A server that answers /big with an oversized 1xx head or trailer block, the rest with 200."""
    resets = []

    def handler(conn):
        while True:
            req = conn.next_request()
            if req is None:
                return
            if req.path != "/big":
                conn.respond(req.stream_id, body=b"ok " + req.path.encode())
                continue
            big = [("x-big", "a" * 2000)]
            if kind == "info":
                conn.send_headers(req.stream_id, 103, big)  # no final head: the client resets
            else:
                conn.respond(req.stream_id, body=b"body", trailers=big)
            req.done.wait(5)
            resets.append(req.reset_code)

    return handler, resets


@pytest.mark.parametrize("kind", ["info", "trailers"])
def test_an_oversized_1xx_head_or_trailer_block_fails_that_stream_only(make_h2_server, make_h2c, kind):
    """As h1: every header block (1xx heads and trailers too) is held to max_header_size;
    the failure is a stream error (RST_STREAM), the connection goes on."""
    handler, resets = _oversized(kind)
    server = make_h2_server(handler)
    client = make_h2c(server.origin, max_header_size=1024)
    infos = []
    with gevent.Timeout(5):
        with pytest.raises(HeadersOverflowError):
            client.request(path="/big", on_info=lambda info: infos.append(info)).body.bytes()
        assert client.request(path="/after").body.bytes() == b"ok /after"
    assert infos == []
    assert server.accepted == 1
    if kind == "info":
        assert resets == [h2.errors.ErrorCodes.CANCEL]
