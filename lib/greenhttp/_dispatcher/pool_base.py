"""The public side every pool shares: state, ``dispatch``, ``close``, ``destroy``.

:class:`PoolBase` holds the documented methods and hands each call to its
:class:`~greenhttp._dispatcher.pool_core.PoolCore` (``pool_core.py``,
compiled with the request path), where the members, the FIFO queue and the
lifecycle live; that module says how the queue stays fair.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._api.request import run_with_callback
from .base import Dispatcher, destroy_arguments
from .pool_core import PoolCore
from .stats import PoolStats

__all__ = ["PoolBase"]


class PoolBase(Dispatcher):
    """What every pool shows: ``origin``, ``closed``, ``destroyed``, ``busy``,
    ``stats``, ``dispatch``, ``close`` and ``destroy``, over a :class:`PoolCore`.

    Greenlet-safe: every method runs to completion without switching, except
    ``close`` and ``destroy``, which block the calling greenlet only.
    """

    _core: PoolCore

    # -- public state -------------------------------------------------------------------
    @property
    def origin(self) -> str:
        """The origin every request goes to, e.g. ``"http://127.0.0.1:8080"``."""
        return self._core._origin_str

    @property
    def closed(self) -> bool:
        """True once ``close()`` (or ``destroy()``) was called."""
        return self._core._closed

    @property
    def destroyed(self) -> bool:
        """True once destroyed, or once a ``close()`` has finished."""
        return self._core._destroyed

    @property
    def busy(self) -> bool:
        """True when a request dispatched now would wait in the pool's queue."""
        return self._core.busy

    def _idle(self) -> bool:
        """Nothing to do and no connection (for an Agent deciding to forget this pool)."""
        return self._core.idle()

    @property
    def stats(self) -> PoolStats:
        """A snapshot: ``connected`` and ``free`` members, ``pending`` (the queue plus
        the members' pending), ``queued`` (the queue), ``running`` and ``size``."""
        return self._core.stats

    # -- dispatch ------------------------------------------------------------------------
    def dispatch(self, options: dict[str, Any], handler: Any) -> bool:
        """Hand the request to a free member, or queue it; never blocks.

        Returns False when the pool is busy (every member busy and no room for
        another): the request is queued all the same, and the pool emits
        ``drain`` once it can take more. Errors are delivered through
        ``handler.on_response_error(None, err)`` (raised if it has none).
        """
        return self._core.dispatch(options, handler)

    # -- lifecycle -------------------------------------------------------------------------
    def close(self, callback: Callable[..., Any] | None = None) -> None:
        """Stop taking requests, let the queued and running ones finish, then close every member.

        Blocks the calling greenlet until done (or, with ``callback``, returns at
        once and calls ``callback(err, None)`` when done). Calling it again
        waits for the same close. Raises :class:`ClientDestroyedError` once the
        pool is destroyed: by ``destroy()``, or by a ``close()`` that finished.
        """
        if callback is not None:
            core = self._core
            run_with_callback(core.begin_close, lambda _: core.finish_close(), callback)
            return None
        self._core.close()
        return None

    def destroy(self, err: BaseException | None = None, callback: Callable[..., Any] | None = None) -> None:
        """Fail every queued request with ``err`` (default :class:`ClientDestroyedError`),
        destroy every member (aborting their requests) and wait for their sockets to close.

        Blocks the calling greenlet (or, with ``callback``, returns at once).
        """
        err, callback = destroy_arguments(err, callback)
        if callback is not None:
            core = self._core
            run_with_callback(lambda: core.begin_destroy(err), core.finish_destroy, callback)
            return None
        self._core.destroy(err)
        return None

    def __repr__(self) -> str:
        core = self._core
        return f"<greenhttp.{type(self).__name__} {core._origin_str} members={len(core._members)}>"
