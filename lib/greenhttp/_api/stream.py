"""``stream()`` and ``pipeline()``: responses piped into writables, requests fed from a duplex.

Both are built on ``request()``: the body arrives in a :class:`BodyReadable`
with real back-pressure, and the *calling* greenlet moves the bytes. So a
slow writable slows the socket (the body pauses past its high-water mark)
and never blocks the connection's reader greenlet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from .._runtime import GreenletExit, Parker, Queue, spawn
from ..errors import InvalidArgumentError, InvalidReturnValueError, RequestAbortedError
from .request import await_response, start_request
from .response import ResponseData

__all__ = ["StreamData", "StreamFactoryData", "PipelineData", "PipelineDuplex", "stream", "pipeline"]


class StreamFactoryData(NamedTuple):
    """What a ``stream()`` factory receives: ``status_code``, ``headers``, ``opaque``, ``context``."""

    status_code: int
    headers: Any
    opaque: Any
    context: Any


class StreamData(NamedTuple):
    """The result of ``stream()``: ``opaque`` and the response ``trailers``."""

    opaque: Any
    trailers: dict[str, Any]


class PipelineData(NamedTuple):
    """What a ``pipeline()`` handler receives: the response, with ``body`` to read."""

    status_code: int
    headers: Any
    opaque: Any
    body: Any
    context: Any


def stream(dispatcher: Any, options: dict[str, Any], factory: Callable[[StreamFactoryData], Any]) -> StreamData:
    """Send a request and write its body into ``factory(data)``'s return value. Blocks until done.

    The writable needs ``write(bytes)``; ``close()`` is called at the end if it exists,
    and also when the request fails midway (the original destroys it), so an open file
    is never left behind.
    """
    return finish_stream(start_stream(dispatcher, options, factory), factory)


def start_stream(dispatcher: Any, options: dict[str, Any], factory: Callable[[StreamFactoryData], Any]) -> Any:
    """Check ``factory`` and dispatch the request (:func:`start_request`); never blocks."""
    if not callable(factory):
        raise InvalidArgumentError(f"invalid factory: {factory!r}")
    options.pop("high_water_mark", None)
    return start_request(dispatcher, options)


def finish_stream(started: Any, factory: Callable[[StreamFactoryData], Any]) -> StreamData:
    """Wait for the response of a :func:`start_stream` and write its body into the factory's writable."""
    resp: ResponseData = await_response(started)
    body = resp.body
    writable = None
    try:
        writable = factory(StreamFactoryData(resp.status_code, resp.headers, resp.opaque, resp.context))
        if not callable(getattr(writable, "write", None)):
            writable = None  # not ours to close
            raise InvalidReturnValueError("expected Writable")
        for chunk in body:
            writable.write(chunk)
    except BaseException:
        body.close()
        if writable is not None:
            try:
                _close(writable)
            except Exception:
                pass  # the request's own error is the one to raise
        raise
    _close(writable)
    return StreamData(resp.opaque, resp.trailers)


def _close(writable: Any) -> None:
    close = getattr(writable, "close", None)
    if close is not None:
        close()


_END = object()


class PipelineDuplex:
    """The duplex of ``pipeline()``: ``write(bytes)``/``end()`` feed the request body,
    ``read()`` and iteration give the response body from the handler's readable.

    Writes block the calling greenlet while the request body queue is full
    (back-pressure); reads block until data arrives. Meant for one writer
    greenlet and one reader greenlet.
    """

    def __init__(self, dispatcher: Any, options: dict[str, Any], handler: Callable[[PipelineData], Any]) -> None:
        self._queue: Any = Queue(maxsize=16)
        self._ready = Parker()
        self._error: BaseException | None = None
        self._ended = False
        self._closed = False
        self._body_gone = False  # the connection will take no more of the request body
        self._response: ResponseData | None = None
        self._source: Iterator[bytes] | None = None
        self._buffer = b""
        options = dict(options)
        options["body"] = self._body_chunks()
        # Dispatched now, as the original's: a close() of the dispatcher right after
        # waits for this request. Its error, if any, is read's (the duplex's) to raise.
        self._started: Any = None
        failed: Exception | None = None
        try:
            self._started = start_request(dispatcher, options)
        except Exception as exc:
            failed = exc
        self._greenlet = spawn(self._run, failed, handler)

    def _body_chunks(self) -> Iterator[bytes]:
        try:
            while True:
                item = self._queue.get()
                if item is _END:
                    return
                yield item
        finally:
            # Closed by the connection (the response ended before the body was all
            # sent): later writes are dropped, as the original's, and a writer
            # blocked on the full queue is freed.
            self._body_gone = True
            while not self._queue.empty():
                self._queue.get_nowait()

    def _run(self, failed: Exception | None, handler: Callable[[PipelineData], Any]) -> None:
        try:
            if failed is not None:
                raise failed
            resp = self._response = await_response(self._started)
            readable = handler(PipelineData(resp.status_code, resp.headers, resp.opaque, resp.body, resp.context))
            if readable is None or not (hasattr(readable, "__iter__") or hasattr(readable, "read")):
                resp.body.close()
                raise InvalidReturnValueError("expected Readable")
            self._source = iter(readable) if hasattr(readable, "__iter__") else _read_chunks(readable)
            self._ready.set(None)
        except GreenletExit:
            # close() before the response: readers see an abort, not the kill.
            self._error = RequestAbortedError()
            self._ready.set_exception(self._error)
            raise
        except BaseException as exc:
            self._error = exc
            self._ready.set_exception(exc)
            self._release()  # the handler raised: nobody reads the body
            # Nothing reads the body queue any more: free a writer blocked on a full
            # queue (its next write() raises the error).
            while not self._queue.empty():
                self._queue.get_nowait()

    # -- request side ---------------------------------------------------------
    def write(self, data: Any) -> None:
        """Append ``data`` (bytes or str) to the request body. Blocks while the queue is full.

        Raises the request's error once it failed (``close()`` included, as
        ``read()`` does), else ``InvalidArgumentError`` after ``end()``."""
        if self._error is not None:
            raise self._error
        resp = self._response
        if resp is not None and resp.body._error is not None:
            # The request failed after its head came (aborted, the connection lost):
            # the original's duplex is destroyed then, and a write to it fails.
            raise resp.body._error
        if self._ended or self._closed:
            raise InvalidArgumentError("write after end")
        if self._body_gone:
            return
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._queue.put(bytes(data))

    def end(self, data: Any = None) -> None:
        """Finish the request body (after an optional last ``data``)."""
        if data is not None:
            self.write(data)
        if not self._ended:
            self._ended = True
            self._queue.put(_END)

    # -- response side ----------------------------------------------------------
    def _next(self) -> bytes:
        self._ready.get()
        assert self._source is not None
        try:
            for chunk in self._source:
                if chunk:
                    return bytes(chunk)
        except Exception:  # not a gevent.Timeout around read(): reading may go on after it
            self._release()
            raise
        self._release()
        return b""

    def _release(self) -> None:
        """The handler's readable ended or failed: the response body is done with. One
        the readable left unread would hold the connection: it is closed (the request
        aborted), as the original destroys the response with its duplex."""
        resp = self._response
        if resp is not None:
            resp.body.close()

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes of the response (all with ``n < 0``); ``b""`` at the end. Blocks."""
        if n is None or n < 0:
            parts = [self._buffer]
            self._buffer = b""
            while True:
                chunk = self._next()
                if not chunk:
                    return b"".join(parts)
                parts.append(chunk)
        if not self._buffer:
            self._buffer = self._next()
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def __iter__(self) -> Iterator[bytes]:
        if self._buffer:
            chunk, self._buffer = self._buffer, b""
            yield chunk
        while True:
            chunk = self._next()
            if not chunk:
                return
            yield chunk

    @property
    def response(self) -> ResponseData | None:
        return self._response

    def close(self) -> None:
        """Tear down both sides: the request is aborted if it is still running."""
        if self._closed:
            return
        self._closed = True
        resp = self._response
        if resp is not None:
            resp.body.close()
        elif not self._ready.ready():
            self._error = RequestAbortedError()
            # (Said here too: a greenlet killed before it started never runs its handler,
            # nor aborts the request it waits for.)
            self._ready.set_exception(self._error)
            self._greenlet.kill(block=False)
            if self._started is not None:
                self._started.abort(self._error)
        if not self._ended:
            self._ended = True
            while True:
                try:
                    self._queue.put_nowait(_END)
                    break
                except Exception:
                    self._queue.get_nowait()

    destroy = close

    def __enter__(self) -> PipelineDuplex:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _read_chunks(readable: Any) -> Iterator[bytes]:
    while True:
        chunk = readable.read(65536)
        if not chunk:
            return
        yield chunk


def pipeline(dispatcher: Any, options: dict[str, Any], handler: Callable[[PipelineData], Any]) -> PipelineDuplex:
    """Start a request whose body is written to the returned duplex. Never blocks."""
    if not callable(handler):
        raise InvalidArgumentError(f"invalid handler: {handler!r}")
    return PipelineDuplex(dispatcher, options, handler)
