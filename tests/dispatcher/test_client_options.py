"""Client constructor options (spec 2.1 in snake_case): types, ranges, removed names."""

from __future__ import annotations

import pytest

import greenhttp
from greenhttp.errors import InvalidArgumentError

URL = "http://127.0.0.1:1"

# option -> (valid values, invalid values)
OPTIONS = {
    "body_timeout": ([0, 0.5, 300, None], [-1, "1", float("inf"), float("nan"), True, [1]]),
    "headers_timeout": ([0, 0.5, 300, None], [-0.1, "1", float("inf"), True]),
    "connect_timeout": ([0, 0.5, 10, None], [-1, "10", float("inf"), False]),
    "keep_alive_timeout": ([0.1, 4, None], [0, -1, "4", float("inf"), True]),
    "keep_alive_max_timeout": ([0.1, 600, None], [0, -1, "x", float("nan")]),
    "keep_alive_timeout_threshold": ([0, 2, 1.5, -1, None], ["2", float("inf"), float("nan"), True]),
    "max_header_size": ([1, 16384, None], [0, -1, 1.5, "16384", True]),
    "max_response_size": ([-1, 0, 1024, None], [-2, 1.5, "10", True]),
    "max_requests_per_client": ([0, 1, 100, None], [-1, 1.5, "3", True]),
    "local_address": (["127.0.0.1", "::1", None], ["localhost", "not an ip", 1234, "1.2.3.4.5"]),
    "pipelining": ([0, 1, 10, None], [-1, 1.5, "1", True]),
    "connect": ([{}, {"timeout": 1.0}, lambda opts, cb=None: None, None], ["x", 1, [1]]),
    "strict_content_length": ([True, False, None], [1, 0, "true"]),
    "auto_select_family": ([True, False, None], [1, "yes"]),
    "auto_select_family_attempt_timeout": ([0.25, 1, None], [-1, "0.25", float("inf")]),
    "allow_h2": ([True, False, None], [1, "no"]),
    "use_h2c": ([True, False, None], [0, "no"]),
    "max_concurrent_streams": ([1, 100, None], [0, -1, 1.5, True]),
    "initial_window_size": ([1, 262144, None], [0, -5, "1"]),
    "connection_window_size": ([1, 524288, None], [0, 2.5, "1"]),
    "ping_interval": ([0, 60, None], [-1, "60", float("inf")]),
    "busy_poll": ([0, 50e-6, 0.001, None], [-1e-6, "50e-6", float("nan"), True]),
    "web_socket": (
        [{"max_fragments": 0, "max_payload_size": 10}, {}, None],
        [{"max_fragments": -1}, {"max_payload_size": "1"}, {"unknown": 1}, 5],
    ),
}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_valid_values_are_accepted(name):
    for value in OPTIONS[name][0]:
        greenhttp.Client(URL, **{name: value})


@pytest.mark.parametrize(
    "name,value", [(name, value) for name, (_, bad) in OPTIONS.items() for value in bad],
    ids=lambda v: repr(v)[:30],
)
def test_invalid_values_raise_naming_the_option(name, value):
    with pytest.raises(InvalidArgumentError) as info:
        greenhttp.Client(URL, **{name: value})
    assert name in str(info.value)
    assert info.value.code == "GH_ERR_INVALID_ARG"
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "name", ["keep_alive", "socket_timeout", "request_timeout", "idle_timeout", "max_keep_alive_timeout", "tls"]
)
def test_removed_option_names_raise(name):
    with pytest.raises(InvalidArgumentError) as info:
        greenhttp.Client(URL, **{name: 1})
    assert name in str(info.value)


@pytest.mark.parametrize("name", ["bodyTimeout", "maxHeaderSize", "no_such_option", "pipeline"])
def test_unknown_and_camel_case_names_raise(name):
    with pytest.raises(InvalidArgumentError) as info:
        greenhttp.Client(URL, **{name: 1})
    assert name in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1",
        "http://127.0.0.1/path",
        "http://127.0.0.1/?q=1",
        "http://127.0.0.1/#frag",
        "http://user:pw@127.0.0.1",
        "http://",
        "not a url",
        None,
        1234,
    ],
)
def test_invalid_urls(url):
    with pytest.raises(InvalidArgumentError):
        greenhttp.Client(url)


def test_url_forms_accepted():
    from urllib.parse import urlsplit

    for url in ("http://127.0.0.1", "http://127.0.0.1/", "https://example.com:8443", "http://[::1]:8080"):
        greenhttp.Client(url)
    greenhttp.Client(urlsplit("http://127.0.0.1:8080"))


def test_origin_property():
    assert greenhttp.Client("http://127.0.0.1:80/").origin == "http://127.0.0.1"
    assert greenhttp.Client("HTTP://[::1]:8080").origin == "http://[::1]:8080"


def test_pipelining_property_is_readable_and_writable():
    c = greenhttp.Client(URL, pipelining=3)
    assert c.pipelining == 3
    c.pipelining = 5
    assert c.pipelining == 5
    for bad in (-1, "2", 1.5, True):
        with pytest.raises(InvalidArgumentError):
            c.pipelining = bad
    assert greenhttp.Client(URL).pipelining == 1


def test_build_connector_rejects_bad_max_cached_sessions():
    with pytest.raises(InvalidArgumentError) as info:
        greenhttp.build_connector(max_cached_sessions=-1)
    assert "max_cached_sessions" in str(info.value)
