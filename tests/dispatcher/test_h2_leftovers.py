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
