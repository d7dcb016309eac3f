"""``H2CClient``: a :class:`Client` that speaks cleartext HTTP/2 with prior knowledge (spec 2.2)."""

from __future__ import annotations

from typing import Any

from .._core.options import ClientOptions, check_int, validate_client_options
from .._core.url import parse_origin
from ..errors import InvalidArgumentError
from .client import Client

__all__ = ["H2CClient"]


class H2CClient(Client):
    """HTTP/2 over cleartext TCP (or a unix socket) to an ``http:`` origin, no upgrade dance.

    ``H2CClient(url, **options)`` takes :class:`Client`'s options, with
    these differences: ``allow_h2`` and ``use_h2c`` are always on;
    ``max_concurrent_streams`` (default 100) is advertised to the server,
    whose SETTINGS may lower it; ``pipelining`` is the number of requests
    multiplexed at once, defaults to ``max_concurrent_streams`` and may not
    exceed it; ``keep_alive_timeout_threshold`` defaults to 1 s; ``connect``
    may not set ``allow_h2``. A non-``http:`` url raises InvalidArgumentError.

    Greenlet-safe, like :class:`Client`; ``dispatch`` never blocks and the
    blocking helpers block only the calling greenlet.
    """

    # The HTTP/2 driver also caps concurrent streams at ``pipelining``.
    _h2_pipelining_caps = True

    def __init__(self, url: Any, **options: Any) -> None:
        origin = parse_origin(url)
        if origin.protocol != "http:":
            raise InvalidArgumentError(f"H2CClient only supports http: origins (h2c), got {origin.origin!r}")
        for name in ("allow_h2", "use_h2c"):
            if options.get(name) is False:
                raise InvalidArgumentError(f"{name} cannot be disabled on an H2CClient")
        connect = options.get("connect")
        if isinstance(connect, dict) and "allow_h2" in connect:
            raise InvalidArgumentError("connect.allow_h2 cannot be set on an H2CClient")
        streams = check_int("max_concurrent_streams", options.get("max_concurrent_streams"), 100, minimum=1)
        pipelining = check_int("pipelining", options.get("pipelining"), streams, minimum=1)
        if pipelining > streams:
            raise InvalidArgumentError(
                f"pipelining cannot be greater than max_concurrent_streams ({streams}), got {pipelining}"
            )
        options.update(max_concurrent_streams=streams, pipelining=pipelining, allow_h2=True, use_h2c=True)
        super().__init__(url, **options)

    def _validate(self, options: dict[str, Any]) -> ClientOptions:
        return validate_client_options(options, keep_alive_timeout_threshold=1.0)

    @property
    def pipelining(self) -> int:
        """Requests multiplexed at once (readable and writable; at most ``max_concurrent_streams``)."""
        return self._core._pipelining

    @pipelining.setter
    def pipelining(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidArgumentError(f"pipelining must be a positive integer, got {value!r}")
        streams = self._opts.max_concurrent_streams
        if value > streams:
            raise InvalidArgumentError(f"pipelining cannot be greater than max_concurrent_streams ({streams}), got {value}")
        self._core.set_pipelining(value)

    def __repr__(self) -> str:
        return f"<greenhttp.H2CClient {self.origin} size={self.size}>"
