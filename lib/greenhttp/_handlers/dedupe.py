"""The fan-out handler of the ``deduplicate`` interceptor.

One upstream request, any number of callers. :class:`Fanout` is the handler
of the upstream request; every caller — the first one included — is a
:class:`Subscriber` whose handler receives the same callbacks with a
controller of its own. Callers are equals: any of them may pause, resume or
abort without disturbing the others.

Flow control: while at least one caller reads, the upstream keeps reading
and a paused caller's chunks are buffered for it; past ``max_buffer_size``
buffered bytes that caller fails with ``RequestAbortedError`` (name
``AbortError``) and the others go on. When every caller is paused the
upstream itself is paused, so nothing piles up. When every caller has
aborted, the upstream request is aborted.

Callbacks run on the upstream connection's reader greenlet and never block;
a resumed caller's backlog is delivered from the hub (``call_soon``), never
from inside the ``resume()`` call, so a consumer may resume and then wait.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from .._core.controller import Controller
from .._runtime import call_soon
from ..errors import RequestAbortedError

__all__ = ["Fanout", "Subscriber"]

_log = logging.getLogger("greenhttp")


class Subscriber:
    """One caller of a shared request: its handler, and the controller that handler sees.

    ``abort(reason)`` ends this caller only (its handler gets
    ``on_response_error(reason)``); ``pause``/``resume`` hold back this
    caller's data only. Any greenlet may call them. Once its handler got the
    terminal callback the subscriber forgets it (the handler usually keeps its
    controller: no reference cycle); ``abort`` then does nothing.
    """

    __slots__ = ("fanout", "handler", "_paused", "_aborted", "_reason", "done", "backlog", "buffered", "end")

    def __init__(self, fanout: Fanout, handler: Any) -> None:
        self.fanout = fanout
        self.handler = handler
        self._paused = False
        self._aborted = False
        self._reason: BaseException | None = None
        self.done = False
        self.backlog: deque[bytes] = deque()
        self.buffered = 0
        self.end: Any = None  # trailers, once the response ended while data was held back

    # -- the controller ----------------------------------------------------------------------------
    def abort(self, reason: BaseException | None = None) -> None:
        if self.done:
            return
        self._aborted = True
        self._reason = reason if reason is not None else RequestAbortedError()
        self.fail(self._reason)
        self.fanout.left(self)

    def pause(self) -> None:
        if not self.done and not self._paused:
            self._paused = True
            self.fanout.flow()

    def resume(self) -> None:
        if not self._paused:
            return
        self._paused = False
        if self.backlog or self.end is not None:
            call_soon(self.flush)
        self.fanout.flow()

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def reason(self) -> BaseException | None:
        return self._reason

    def wants_whole_body(self) -> None:
        """A hint only, and the shared request serves others: ignored."""

    @property
    def raw_headers(self) -> list[bytes] | None:
        upstream = self.fanout.upstream
        return upstream.raw_headers if upstream is not None else None

    @property
    def raw_trailers(self) -> list[bytes] | None:
        upstream = self.fanout.upstream
        return upstream.raw_trailers if upstream is not None else None

    # -- delivery (the guard: a raising handler aborts this caller only) ---------------------------
    def call(self, name: str, *args: Any) -> None:
        if self.done:
            return
        fn = getattr(self.handler, name, None)
        if fn is not None:
            try:
                fn(self, *args)
            except Exception as exc:
                self.abort(exc)

    def data(self, chunk: bytes, limit: int) -> None:
        if self.done:
            return
        if self._paused or self.backlog:
            self.backlog.append(chunk)
            self.buffered += len(chunk)
            if self.buffered > limit:
                self.abort(RequestAbortedError(
                    f"deduplicated request: a waiting handler buffered more than max_buffer_size ({limit} bytes)"
                ))
            return
        self.call("on_response_data", chunk)

    def finish(self, trailers: Any) -> None:
        if self.done:
            return
        if self.backlog:
            self.end = trailers if trailers is not None else {}
            return
        self.done = True
        handler, self.handler = self.handler, None  # it may keep us as its controller: no cycle once done
        fn = getattr(handler, "on_response_end", None)
        if fn is not None:
            try:
                fn(self, trailers)
            except Exception as exc:  # as the dispatcher's guard does: the error follows the end
                self._deliver_error(handler, exc)

    def fail(self, err: BaseException) -> None:
        if self.done:
            return
        self.done = True
        self.backlog.clear()
        self.end = None
        handler, self.handler = self.handler, None
        self._deliver_error(handler, err)

    def _deliver_error(self, handler: Any, err: BaseException) -> None:
        fn = getattr(handler, "on_response_error", None)
        if fn is None:
            _log.error("greenhttp: unhandled error of a deduplicated request: %r", err)
            return
        try:
            fn(self, err)
        except Exception as exc:
            _log.error("greenhttp: a handler's on_response_error raised: %r", exc)

    def flush(self) -> None:
        """Deliver the backlog (from the hub) until paused again; then the end, if it came."""
        backlog = self.backlog
        while backlog and not self._paused and not self.done:
            chunk = backlog.popleft()
            self.buffered -= len(chunk)
            self.call("on_response_data", chunk)
        if not backlog and self.end is not None and not self._paused:
            trailers, self.end = self.end, None
            self.finish(trailers)


Controller.register(Subscriber)


class Fanout:
    """The handler of the one upstream request that several callers share.

    ``on_closed()`` is called once no new caller may join: when the first
    body byte arrives (a late caller would miss data), or the request ends.
    One instance per upstream request; its callbacks run on the reader
    greenlet; ``add`` runs in the dispatching greenlet; never blocks.
    """

    def __init__(self, on_closed: Callable[[], None], max_buffer_size: int) -> None:
        self._on_closed: Callable[[], None] | None = on_closed
        self.max_buffer_size = max_buffer_size
        self.subscribers: list[Subscriber] = []
        self.upstream: Any = None
        self.started = False
        self.context: Any = None
        self.head: tuple[int, Any, str] | None = None
        self.joinable = True
        self.finished = False

    def add(self, handler: Any) -> bool:
        """Attach another caller; False when it is too late (its request must go on its own)."""
        if not self.joinable:
            return False
        sub = Subscriber(self, handler)
        self.subscribers.append(sub)
        if self.started:
            sub.call("on_request_start", self.context)
            if self.head is not None:
                status, headers, message = self.head
                sub.call("on_response_start", status, dict(headers) if type(headers) is dict else headers, message)
            self.flow()  # a caller that reads: an upstream paused for the others flows again
        return True

    def _close(self) -> None:
        self.joinable = False
        on_closed, self._on_closed = self._on_closed, None
        if on_closed is not None:
            on_closed()

    def abandon(self) -> None:
        """The upstream dispatch raised instead of taking the request: close the group
        (its first caller got the exception; no other caller can have joined yet)."""
        self.finished = True
        self._close()

    def _live(self) -> list[Subscriber]:
        return [s for s in self.subscribers if not s.done]

    def left(self, sub: Subscriber) -> None:
        """A caller aborted: when nobody is left, nobody needs the upstream response."""
        if self.finished:
            return
        if not self._live():
            self._close()
            self.finished = True
            if self.upstream is not None:
                self.upstream.abort(sub.reason)
        else:
            self.flow()

    def flow(self) -> None:
        """Pause the upstream when every live caller is paused; resume it when one is not."""
        upstream = self.upstream
        if upstream is None or self.finished:
            return
        live = self._live()
        all_paused = bool(live) and all(s._paused for s in live)
        if all_paused and not upstream.paused:
            upstream.pause()
        elif not all_paused and upstream.paused:
            upstream.resume()

    # -- the upstream handler ----------------------------------------------------------------------
    def on_request_start(self, controller: Any, context: Any) -> None:
        self.upstream = controller
        if self.started:
            return  # an inner interceptor re-sent the request: the callers already started
        self.started = True
        self.context = context
        for sub in self.subscribers:
            sub.call("on_request_start", context)
        if not self._live():  # every caller gave up before the request even started
            self.finished = True
            self._close()
            controller.abort(RequestAbortedError())

    def on_response_start(self, controller: Any, status_code: int, headers: Any, status_message: str) -> None:
        if status_code >= 200:
            self.head = (status_code, headers, status_message)
        copy = type(headers) is dict
        for sub in self._live():  # each caller its own dict: one handler's edits stay its own
            sub.call("on_response_start", status_code, dict(headers) if copy else headers, status_message)
        self.flow()

    def on_response_data(self, controller: Any, chunk: bytes) -> None:
        if self.joinable:
            self._close()
        limit = self.max_buffer_size
        for sub in self._live():
            sub.data(chunk, limit)
        self.flow()

    def on_response_end(self, controller: Any, trailers: Any) -> None:
        self.finished = True
        self._close()
        live = self._live()
        self.subscribers = []  # they refer to us: keep no link back once done (no reference cycle)
        for sub in live:
            sub.finish(trailers)

    def on_response_error(self, controller: Any, err: BaseException) -> None:
        self.finished = True
        self._close()
        live = self._live()
        self.subscribers = []
        for sub in live:
            sub.fail(err)
