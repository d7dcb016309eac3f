"""The public face of a request to its handler: :class:`Controller`.

It is an interface only. The one implementation is ``Request``
(``_core/request.py``), which is its own controller so that no second object
is made per request; that module is compiled (docs/performance.md), and a
compiled class keeps neither docstrings nor annotations at run time, so the
documented interface lives here, in plain Python, and ``Request`` is
registered as a virtual subclass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = ["Controller"]


class Controller(ABC):
    """What a handler gets to steer its request: ``abort``, ``pause``, ``resume``.

    Greenlet-safe in the sense that any greenlet may call it; the effects are
    applied by the connection's reader greenlet. Never blocks. Handlers get
    one from the dispatcher (it is the request itself); it is not made by users.
    """

    aborted: bool  # True once the request was aborted
    paused: bool  # True while the handler asked to stop reading
    reason: BaseException | None  # why the request was aborted, or None
    raw_head: bytes | None
    raw_trailers: list[bytes] | None  # the response trailers as a flat [name, value, ...] list
    read_all: bool

    @abstractmethod
    def abort(self, reason: BaseException | None = None) -> None:
        """Abort the request; its handler gets ``on_response_error(reason)``."""

    @abstractmethod
    def pause(self) -> None:
        """Stop reading the response until :meth:`resume` (back-pressure)."""

    @abstractmethod
    def resume(self) -> None:
        """Resume reading after :meth:`pause`."""

    @abstractmethod
    def wants_whole_body(self) -> None:
        """Hint that the consumer reads the whole body at once (``body.bytes()``).

        The transport may then read a body of known length straight into one buffer.
        """

    @property
    @abstractmethod
    def raw_headers(self) -> list[bytes] | None:
        """The response head as a flat ``[name, value, ...]`` list of bytes, in wire order."""
