"""The retry policy, sans-IO: options, which failures are retried, back-off, ranges.

Everything here decides from numbers, headers and exceptions and returns a
decision; the :class:`~greenhttp._handlers.retry.RetryHandler` does the
waiting (a timer) and the re-dispatching. Times are seconds. Functions that
need the wall clock (an HTTP-date ``Retry-After``) take ``now`` (Unix time).

Error matching (API.md §1): an exception matches ``error_codes`` through any
of its *codes*: the ``.code`` of a greenhttp error (``GH_ERR_SOCKET``), the
``errno`` name of an ``OSError`` (``ECONNRESET``), and ``ENOTFOUND`` for a
failed name lookup, searched along the ``__cause__``/``__context__`` chain,
so ``error_codes=["ECONNRESET", "GH_ERR_SOCKET"]`` reads as in the original.
"""

from __future__ import annotations

import errno as _errno
import math
import re
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from ..errors import InvalidArgumentError, RequestRetryError, ResponseError

__all__ = [
    "RetryOptions",
    "DEFAULT_METHODS",
    "DEFAULT_STATUS_CODES",
    "DEFAULT_ERROR_CODES",
    "retry_options",
    "error_codes",
    "status_of",
    "should_retry",
    "retry_delay",
    "parse_retry_after",
    "parse_http_date",
    "ContentRange",
    "parse_content_range",
]

DEFAULT_METHODS = ("GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE", "QUERY")
DEFAULT_STATUS_CODES = (500, 502, 503, 504, 429)
DEFAULT_ERROR_CODES = (
    "ECONNRESET",
    "ECONNREFUSED",
    "ENOTFOUND",
    "ENETDOWN",
    "ENETUNREACH",
    "EHOSTDOWN",
    "EHOSTUNREACH",
    "EPIPE",
    "GH_ERR_SOCKET",
)


@dataclass(frozen=True)
class RetryOptions:
    """Validated retry options (REFERENCE §7.2), durations in seconds. Immutable."""

    max_retries: int = 5
    min_timeout: float = 0.5
    max_timeout: float = 30.0
    timeout_factor: float = 2.0
    retry_after: bool = True
    methods: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_METHODS))
    status_codes: frozenset[int] = field(default_factory=lambda: frozenset(DEFAULT_STATUS_CODES))
    error_codes: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_ERROR_CODES))
    throw_on_error: bool = True
    retry: Callable[..., Any] | None = None

    def merged(self, overrides: dict[str, Any] | None) -> RetryOptions:
        """These options with ``overrides`` (a per-request ``retry_options`` dict) applied."""
        if not overrides:
            return self
        if not isinstance(overrides, dict):
            raise InvalidArgumentError(f"retry_options must be a dict, got {overrides!r}")
        return _checked(replace(self, **_validated(overrides)))


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"{name} must be a non-negative number of seconds, got {value!r}")
    return float(value)


def _names(name: str, value: Any, upper: bool) -> frozenset[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{name} must be a list of strings, got {value!r}")
    items = list(value)
    if not all(isinstance(v, str) and v for v in items):
        raise InvalidArgumentError(f"{name} must be a list of strings, got {value!r}")
    return frozenset(v.upper() for v in items) if upper else frozenset(items)


def _statuses(name: str, value: Any) -> frozenset[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{name} must be a list of status codes, got {value!r}")
    items = list(value)
    if not all(isinstance(v, int) and not isinstance(v, bool) and 100 <= v <= 999 for v in items):
        raise InvalidArgumentError(f"{name} must be a list of status codes, got {value!r}")
    return frozenset(items)


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be a boolean, got {value!r}")
    return value


def _max_retries(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def _factor(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        raise InvalidArgumentError(f"{name} must be a number >= 1, got {value!r}")
    return float(value)


def _callable(name: str, value: Any) -> Callable[..., Any]:
    if not callable(value):
        raise InvalidArgumentError(f"{name} must be callable, got {value!r}")
    return value  # type: ignore[no-any-return]


_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "max_retries": _max_retries,
    "min_timeout": _seconds,
    "max_timeout": _seconds,
    "timeout_factor": _factor,
    "retry_after": _bool,
    "methods": lambda n, v: _names(n, v, True),
    "status_codes": _statuses,
    "error_codes": lambda n, v: _names(n, v, False),
    "throw_on_error": _bool,
    "retry": _callable,
}


def _validated(options: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in options.items():
        check = _CHECKS.get(name)
        if check is None:
            raise InvalidArgumentError(f"unknown retry option {name!r} (valid: {', '.join(_CHECKS)})")
        if value is None:  # None means "the default"
            continue
        out[name] = check(name, value)
    return out


def _checked(options: RetryOptions) -> RetryOptions:
    if options.min_timeout > options.max_timeout:
        raise InvalidArgumentError(
            f"min_timeout ({options.min_timeout!r}) must not exceed max_timeout ({options.max_timeout!r})"
        )
    return options


def retry_options(options: dict[str, Any]) -> RetryOptions:
    """Validate keyword options into :class:`RetryOptions`; raises InvalidArgumentError."""
    return _checked(RetryOptions(**_validated(options)))


# -- which failures are retried -------------------------------------------------------------------
_GAI_NAMES = {
    getattr(socket, name): code
    for name, code in (
        ("EAI_NONAME", "ENOTFOUND"),
        ("EAI_NODATA", "ENOTFOUND"),
        ("EAI_AGAIN", "EAI_AGAIN"),
        ("EAI_FAIL", "EAI_FAIL"),
    )
    if hasattr(socket, name)
}


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def error_codes(exc: BaseException) -> list[str]:
    """Every code ``exc`` answers to, outermost first (see the module docstring)."""
    out = []
    for e in _chain(exc):
        code = getattr(e, "code", None)
        if isinstance(code, str) and code:
            out.append(code)
        if isinstance(e, socket.gaierror):
            name = _GAI_NAMES.get(e.errno)
            if name is not None:
                out.append(name)
        elif isinstance(e, OSError) and isinstance(e.errno, int):
            name = _errno.errorcode.get(e.errno)
            if name is not None:
                out.append(name)
    return out


def status_of(exc: BaseException) -> int | None:
    """The HTTP status a failure stands for (``RequestRetryError``, ``ResponseError``), or None."""
    if isinstance(exc, (RequestRetryError, ResponseError)):
        return exc.status_code
    return None


def should_retry(exc: BaseException, counter: int, method: str, options: RetryOptions) -> bool:
    """May the failed attempt number ``counter`` (1-based) be retried?

    A status failure (a swallowed response, or a ``ResponseError`` from an
    inner ``response_error``) is retried when its status is in
    ``status_codes``; any other failure when one of its codes is in
    ``error_codes``. Errors with neither are never retried: they are bugs or
    decisions (an abort, a redirect limit), not transient faults.
    """
    if counter > options.max_retries or method not in options.methods:
        return False
    status = status_of(exc)
    if status is not None:
        return status in options.status_codes
    return any(code in options.error_codes for code in error_codes(exc))


def retry_delay(
    exc: BaseException, counter: int, options: RetryOptions, now: float
) -> float:
    """Seconds to wait before attempt ``counter + 1``.

    A ``Retry-After`` on the failed response wins (when ``retry_after`` is
    on), capped at ``max_timeout``; otherwise exponential back-off:
    ``min(min_timeout * timeout_factor ** (counter - 1), max_timeout)``.
    ``now`` is the wall clock (Unix time), for an HTTP-date.
    """
    if options.retry_after:
        headers = getattr(exc, "headers", None)
        value = headers.get("retry-after") if isinstance(headers, dict) else None
        wait = parse_retry_after(value, now)
        if wait is not None:
            return min(wait, options.max_timeout)
    exponent = max(counter - 1, 0)
    try:
        backoff = options.min_timeout * options.timeout_factor**exponent
    except OverflowError:
        backoff = math.inf
    return min(backoff, options.max_timeout)


# -- Retry-After and HTTP dates (RFC 9110 §10.2.3, §5.6.7) ------------------------------------------
_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}
_IMF_FIXDATE = re.compile(
    r"(?:mon|tue|wed|thu|fri|sat|sun), (\d\d) ([a-z]{3}) (\d{4}) (\d\d):(\d\d):(\d\d) gmt\Z"
)
_RFC850_DATE = re.compile(
    r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday), (\d\d)-([a-z]{3})-(\d\d) "
    r"(\d\d):(\d\d):(\d\d) gmt\Z"
)
_ASCTIME_DATE = re.compile(
    r"(?:mon|tue|wed|thu|fri|sat|sun) ([a-z]{3}) ([ \d]\d) (\d\d):(\d\d):(\d\d) (\d{4})\Z"
)


def parse_http_date(value: str, now: float | None = None) -> float | None:
    """An HTTP-date in any of RFC 9110's three formats, as Unix time; None if invalid.

    A two-digit RFC 850 year is read as the year within 50 years of ``now``
    (RFC 9110 §5.6.7).
    """
    text = value.strip().lower()
    m = _IMF_FIXDATE.match(text)
    if m:
        day, mon, year, hh, mm, ss = m.groups()
    else:
        m = _RFC850_DATE.match(text)
        if m:
            day, mon, yy, hh, mm, ss = m.groups()
            this_year = datetime.fromtimestamp(now if now is not None else 0, timezone.utc).year
            year = str(this_year - this_year % 100 + int(yy))
            if int(year) > this_year + 50:
                year = str(int(year) - 100)
        else:
            m = _ASCTIME_DATE.match(text)
            if not m:
                return None
            mon, day, hh, mm, ss, year = m.groups()
    month = _MONTHS.get(mon)
    if month is None:
        return None
    try:
        when = datetime(int(year), month, int(day), int(hh), int(mm), int(ss), tzinfo=timezone.utc)
    except ValueError:
        return None
    return when.timestamp()


def parse_retry_after(value: Any, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delay-seconds or HTTP-date); None if unusable.

    A date in the past means "now" (0).
    """
    if isinstance(value, list):
        value = value[0] if value else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.isdigit() and text.isascii():
        return float(text)  # inf when too large (int() would fail past 4300 digits, float(int) overflow)
    when = parse_http_date(text, now)
    if when is None:
        return None
    return max(when - now, 0.0)


# -- ranges, for resuming a partly received body (RFC 9110 §14.4) ------------------------------------
@dataclass(frozen=True)
class ContentRange:
    """``Content-Range: bytes start-end/size`` (``size`` None for ``*``)."""

    start: int
    end: int
    size: int | None


_CONTENT_RANGE = re.compile(r"bytes[ \t]+(\d+)-(\d+)/(\d+|\*)\Z", re.IGNORECASE)


def parse_content_range(value: Any) -> ContentRange | None:
    """Parse a satisfied byte range; None when absent or malformed."""
    if not isinstance(value, str):
        return None
    m = _CONTENT_RANGE.match(value.strip())
    if not m:
        return None
    try:
        start, end = int(m.group(1)), int(m.group(2))
        size = None if m.group(3) == "*" else int(m.group(3))
    except ValueError:  # past int()'s digit limit: no range we could ever resume
        return None
    if end < start or (size is not None and end >= size):
        return None
    return ContentRange(start, end, size)
