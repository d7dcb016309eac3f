"""Client options: validated once, eagerly, into an immutable value (sans-IO).

Durations are seconds (``float``); ``None`` means "the default"; ``0``
disables a timeout where the spec says so. Every message names the option and
the bad value.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgumentError

__all__ = [
    "ClientOptions",
    "WebSocketOptions",
    "web_socket_options_of",
    "validate_client_options",
    "check_timeout",
    "check_int",
]

_REMOVED = {
    "keep_alive": "use keep_alive_timeout",
    "socket_timeout": "use headers_timeout and body_timeout",
    "request_timeout": "use headers_timeout and body_timeout",
    "idle_timeout": "use keep_alive_timeout",
    "max_keep_alive_timeout": "use keep_alive_max_timeout",
    "tls": "pass TLS options in connect={...}",
}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_timeout(name: str, value: Any, default: float, *, allow_zero: bool = True) -> float:
    """A duration in seconds: a finite number >= 0 (> 0 without ``allow_zero``)."""
    if value is None:
        return default
    if not _is_number(value) or not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        what = "a non-negative number of seconds" if allow_zero else "a positive number of seconds"
        raise InvalidArgumentError(f"{name} must be {what}, got {value!r}")
    return float(value)


def check_int(name: str, value: Any, default: Any, *, minimum: int = 0) -> Any:
    """An integer >= ``minimum`` (bools refused)."""
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        if minimum == 0:
            what = "a non-negative integer"
        elif minimum == 1:
            what = "a positive integer"
        else:
            what = f"an integer >= {minimum}"
        raise InvalidArgumentError(f"{name} must be {what}, got {value!r}")
    return value


def _check_bool(name: str, value: Any, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be a boolean, got {value!r}")
    return value


@dataclass(frozen=True)
class WebSocketOptions:
    max_fragments: int = 131072
    max_payload_size: int = 134217728


def web_socket_options_of(dispatcher: Any) -> WebSocketOptions:
    """The ``web_socket`` limits of a WebSocket through ``dispatcher``.

    A ``Client`` holds them validated (``_opts.web_socket``); a ``Pool`` or an
    ``Agent`` holds the options it makes clients with (validated then); a
    composed dispatcher answers for the one it wraps. Anything else (or a
    dispatcher without the option) has the spec's defaults.
    """
    limits: Any = getattr(getattr(dispatcher, "_opts", None), "web_socket", None)
    if isinstance(limits, WebSocketOptions):
        return limits
    for name in ("_client_options", "_options"):
        options = getattr(dispatcher, name, None)
        if isinstance(options, dict) and isinstance(options.get("web_socket"), dict):
            raw = options["web_socket"]
            default = WebSocketOptions()
            fragments, payload = raw.get("max_fragments"), raw.get("max_payload_size")
            return WebSocketOptions(
                default.max_fragments if fragments is None else fragments,
                default.max_payload_size if payload is None else payload,
            )
    return WebSocketOptions()


@dataclass(frozen=True)
class ClientOptions:
    body_timeout: float = 300.0
    headers_timeout: float = 300.0
    connect_timeout: float = 10.0
    keep_alive_timeout: float = 4.0
    keep_alive_max_timeout: float = 600.0
    keep_alive_timeout_threshold: float = 2.0
    max_header_size: int = 16384
    max_response_size: int = -1
    max_requests_per_client: int | None = None
    local_address: str | None = None
    pipelining: int = 1
    connect: Any = None  # dict of connector options, or a connector callable
    strict_content_length: bool = True
    auto_select_family: bool = False
    auto_select_family_attempt_timeout: float = 0.25
    allow_h2: bool = True
    use_h2c: bool = False
    max_concurrent_streams: int = 100
    initial_window_size: int = 262144
    connection_window_size: int = 524288
    ping_interval: float = 60.0
    socket_path: str | None = None
    max_cached_sessions: int | None = None
    busy_poll: float = 100e-6
    web_socket: WebSocketOptions = field(default_factory=WebSocketOptions)


_FIELDS = set(ClientOptions.__dataclass_fields__)
_MAX_WINDOW = 2**31 - 1


def validate_client_options(opts: dict[str, Any], **defaults: Any) -> ClientOptions:
    """Validate keyword options of ``Client`` (and of the dispatchers built on it)."""
    for name in opts:
        if name in _REMOVED:
            raise InvalidArgumentError(f"unsupported {name}, {_REMOVED[name]}")
        if name not in _FIELDS:
            raise InvalidArgumentError(f"unknown option {name!r}")
    o = {**defaults, **{k: v for k, v in opts.items() if v is not None}}
    base = ClientOptions()
    out: dict[str, Any] = {}
    for name in (
        "body_timeout",
        "headers_timeout",
        "connect_timeout",
        "ping_interval",
        "busy_poll",
    ):
        out[name] = check_timeout(name, o.get(name), getattr(base, name))
    for name in ("keep_alive_timeout", "keep_alive_max_timeout"):
        out[name] = check_timeout(name, o.get(name), getattr(base, name), allow_zero=False)
    thr = o.get("keep_alive_timeout_threshold")
    if thr is None:
        thr = base.keep_alive_timeout_threshold
    elif not _is_number(thr) or not math.isfinite(thr):
        raise InvalidArgumentError(f"keep_alive_timeout_threshold must be a finite number, got {thr!r}")
    out["keep_alive_timeout_threshold"] = float(thr)
    out["auto_select_family_attempt_timeout"] = check_timeout(
        "auto_select_family_attempt_timeout",
        o.get("auto_select_family_attempt_timeout"),
        base.auto_select_family_attempt_timeout,
    )
    out["max_header_size"] = check_int("max_header_size", o.get("max_header_size"), base.max_header_size, minimum=1)
    out["max_response_size"] = check_int(
        "max_response_size", o.get("max_response_size"), base.max_response_size, minimum=-1
    )
    out["max_requests_per_client"] = check_int("max_requests_per_client", o.get("max_requests_per_client"), None) or None
    out["pipelining"] = check_int("pipelining", o.get("pipelining"), base.pipelining)
    out["max_concurrent_streams"] = check_int(
        "max_concurrent_streams", o.get("max_concurrent_streams"), base.max_concurrent_streams, minimum=1
    )
    out["initial_window_size"] = check_int(
        "initial_window_size", o.get("initial_window_size"), base.initial_window_size, minimum=1
    )
    out["connection_window_size"] = check_int(
        "connection_window_size", o.get("connection_window_size"), base.connection_window_size, minimum=1
    )
    # RFC 9113 §6.5.2 and §6.9.1: no flow-control window may exceed 2**31 - 1.
    for name in ("initial_window_size", "connection_window_size"):
        if out[name] > _MAX_WINDOW:
            raise InvalidArgumentError(f"{name} must be at most {_MAX_WINDOW}, got {out[name]!r}")
    out["max_cached_sessions"] = check_int("max_cached_sessions", o.get("max_cached_sessions"), None)
    for name in ("strict_content_length", "auto_select_family", "allow_h2", "use_h2c"):
        out[name] = _check_bool(name, o.get(name), getattr(base, name))

    local = o.get("local_address")
    if local is not None:
        if not isinstance(local, str):
            raise InvalidArgumentError(f"local_address must be an IP address string, got {local!r}")
        try:
            ipaddress.ip_address(local)
        except (ValueError, TypeError):
            raise InvalidArgumentError(f"local_address must be an IP address, got {local!r}") from None
    out["local_address"] = local
    path = o.get("socket_path")
    if path is not None and not isinstance(path, str):
        raise InvalidArgumentError(f"socket_path must be a string, got {path!r}")
    out["socket_path"] = path
    connect = o.get("connect")
    if connect is not None and not (isinstance(connect, dict) or callable(connect)):
        raise InvalidArgumentError(f"connect must be a dict of options or a function, got {connect!r}")
    out["connect"] = dict(connect) if isinstance(connect, dict) else connect
    if isinstance(connect, dict) and connect.get("allow_h2") is not None:
        # As in the original, whose connect options come last, connect's allow_h2 decides
        # what ALPN offers; the client takes it too (it must know whether h2 may come
        # back). Both given and different is a contradiction.
        wanted = _check_bool("connect.allow_h2", connect["allow_h2"], True)
        if o.get("allow_h2") is not None and wanted != out["allow_h2"]:
            raise InvalidArgumentError(
                f"connect.allow_h2 ({wanted!r}) contradicts allow_h2 ({out['allow_h2']!r}): give one of them"
            )
        out["allow_h2"] = wanted

    ws = o.get("web_socket")
    if ws is None:
        out["web_socket"] = WebSocketOptions()
    elif isinstance(ws, WebSocketOptions):
        out["web_socket"] = ws
    elif isinstance(ws, dict):
        unknown = set(ws) - {"max_fragments", "max_payload_size"}
        if unknown:
            raise InvalidArgumentError(f"unknown web_socket option {sorted(unknown)[0]!r}")
        out["web_socket"] = WebSocketOptions(
            check_int("web_socket.max_fragments", ws.get("max_fragments"), 131072),
            check_int("web_socket.max_payload_size", ws.get("max_payload_size"), 134217728),
        )
    else:
        raise InvalidArgumentError(f"web_socket must be a dict, got {ws!r}")
    return ClientOptions(**out)
