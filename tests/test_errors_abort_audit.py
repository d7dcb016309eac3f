"""Audit of the error classes and abort signals against real peers.

* errors survive pickling whole (docs/errors.md: match on ``code``, "which
  survives serialisation");
"""

from __future__ import annotations

import copy
import pickle

import gevent
import pytest

from greenhttp import errors


def _parser_error(make_server, make_client) -> errors.HTTPParserError:
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 2x0 OK\r\ncontent-length: 0\r\n\r\n")

    client = make_client(make_server(handler).origin)
    with gevent.Timeout(5), pytest.raises(errors.HTTPParserError) as info:
        client.request(path="/")
    return info.value


@pytest.mark.parametrize("clone", [lambda e: pickle.loads(pickle.dumps(e)), copy.copy], ids=["pickle", "copy"])
def test_a_parser_error_keeps_its_code_message_and_data_when_pickled(clone, make_server, make_client):
    err = _parser_error(make_server, make_client)
    assert err.code.startswith("HPE_") and err.code != "HPE_INVALID"
    again = clone(err)
    assert type(again) is errors.HTTPParserError
    assert (again.code, str(again), again.message, again.data) == (err.code, str(err), err.message, err.data)


def test_error_fields_survive_pickling():
    cases = [
        errors.ResponseError("Response Error", 404, {"content-type": "text/plain"}, "nope"),
        errors.RequestRetryError("Request failed", 503, {"retry-after": "1"}, {"count": 3}),
        errors.SocketError("other side closed", {"local_port": 1234, "remote_port": 80}),
        errors.RequestAbortedError(),
        errors.HeadersTimeoutError(),
    ]
    for err in cases:
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err)
        assert vars(again) == vars(err)
        assert (again.code, again.name, str(again), again.args) == (err.code, err.name, str(err), err.args)
    assert pickle.loads(pickle.dumps(cases[0])).status == 404
