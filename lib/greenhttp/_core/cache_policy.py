"""HTTP caching decisions (RFC 9111), sans-IO.

Everything here decides from header values and numbers and returns plain
values; nothing reads a clock. Times are UNIX timestamps in seconds and the
caller passes ``now`` (``time.time()``), because stored entries carry
``Date``-relative times and outlive the process (the SQLite store).

The module has three parts:

* parsing: ``Cache-Control`` (RFC 9111 §5.2), HTTP dates (RFC 9110 §5.6.7),
  ``Age``, ``Vary``, entity-tags;
* storing (RFC 9111 §3, §4.2): :func:`build_entry` turns a response into the
  metadata of a cache entry (freshness, retention, stored header fields), or
  refuses to;
* reusing (RFC 9111 §4): :func:`assess` says whether a stored entry may be
  served as is, served stale, or must be validated first, and
  :func:`not_modified` evaluates a client's own conditional request against
  a stored entry (RFC 9110 §13.2.2).

Greenlet-safe: pure functions over immutable inputs.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from email.utils import formatdate
from typing import Any, TypedDict
from urllib.parse import SplitResult, urljoin, urlsplit

from .dedupe import SAFE_METHODS, CacheKey, cache_key, request_header_map

__all__ = [
    "SAFE_METHODS", "CacheKey", "CacheValue", "Verdict", "assess", "build_entry", "byte_range", "cache_key",
    "invalidation_paths", "is_conditional", "merge_304_headers", "not_modified", "parse_age",
    "parse_cache_control", "parse_http_date", "parse_vary", "request_directives", "request_header_map",
    "revalidation_headers", "valid_etag", "vary_matches", "weak_etag_match",
]

#: RFC 9111 §1.2.2: delta-seconds past 2^31 are taken as 2^31.
MAX_DELTA = 2147483648
#: RFC 9110 §15.1: status codes "heuristically cacheable" by default.
HEURISTIC_STATUSES = frozenset({200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501})
#: Final status codes whose semantics this cache implements (for ``must-understand``).
UNDERSTOOD_STATUSES = frozenset(
    {200, 201, 202, 203, 204, 205, 300, 301, 302, 303, 307, 308}
    | set(range(400, 418)) | {421, 422, 426, 428, 429, 431, 451}
    | {500, 501, 502, 503, 504, 505, 511}
)
#: How long an entry that can only be reused after validation is kept (one day).
REVALIDATE_ONLY_RETENTION = 86400.0
#: RFC 9111 §3.1 fields a cache must not store, plus Age which it regenerates.
_UNSTORED = frozenset({
    "connection", "keep-alive", "proxy-connection", "te", "transfer-encoding", "upgrade",
    "proxy-authenticate", "proxy-authentication-info", "proxy-authorization", "age",
})
#: Fields a 304 never updates (RFC 9111 §3.2): framing and the unstored ones.
_NOT_UPDATED = _UNSTORED | {"content-length", "content-encoding", "content-range", "transfer-encoding"}
_NUMERIC = frozenset({"max-age", "s-maxage", "min-fresh", "max-stale", "stale-while-revalidate", "stale-if-error"})
_FLAGS = frozenset({"public", "immutable", "no-transform", "must-understand", "only-if-cached"})
_RESTRICTIVE_FLAGS = frozenset({"no-store", "must-revalidate", "proxy-revalidate"})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_ETAG = re.compile(r'(?:W/)?"[\x21\x23-\x7e\x80-\xff]*"\Z')


class CacheValue(TypedDict, total=False):
    """A cache entry's metadata. Times are UNIX timestamps in seconds.

    ``cached_at`` is when the response was generated (the origin of its age),
    ``stale_at`` when it stops being fresh, ``delete_at`` when a store may
    drop it. ``vary`` maps each selecting header to the request's normalised
    value (or None); ``cache_control_directives`` is the parsed Cache-Control.
    A store's ``get`` adds ``body`` (bytes, or an iterable of bytes).
    """

    status_code: int
    status_message: str
    headers: dict[str, Any]
    vary: dict[str, str | None] | None
    etag: str | None
    cache_control_directives: dict[str, Any]
    cached_at: float
    stale_at: float
    delete_at: float
    body: Any


# -- parsing --------------------------------------------------------------------------------------

_DAY = r"(?:mon|tue|wed|thu|fri|sat|sun)"
_MONTH = r"(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)"
_TIME = r"(\d\d):(\d\d):(\d\d)"
_IMF = re.compile(rf"{_DAY}, (\d\d) {_MONTH} (\d{{4}}) {_TIME} gmt\Z", re.I)
_RFC850 = re.compile(
    rf"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday), (\d\d)-{_MONTH}-(\d\d) {_TIME} gmt\Z", re.I
)
_ASCTIME = re.compile(rf"{_DAY} {_MONTH} ([ \d]\d) {_TIME} (\d{{4}})\Z", re.I)
_MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}


def parse_http_date(value: Any) -> float | None:
    """An HTTP-date (IMF-fixdate, RFC 850 or asctime) as a UNIX timestamp; None if invalid.

    RFC 9110 §5.6.7. Names are matched case-insensitively; anything else
    (another zone, missing comma, one-digit hour, a list of dates) is invalid.
    """
    if type(value) is not str:
        if not isinstance(value, list) or len(value) != 1 or not isinstance(value[0], str):
            return None
        value = value[0]
    value = value.strip(" \t")
    m = _IMF.match(value)
    if m is not None:
        day, mon, year, hh, mm, ss = m.groups()
    elif (m := _RFC850.match(value)) is not None:
        day, mon, yy, hh, mm, ss = m.groups()
        # Two-digit years: 70-99 are 19xx, the rest 20xx (RFC 9110 §5.6.7's 50-year rule, for today).
        year = str((1900 if int(yy) >= 70 else 2000) + int(yy))
    elif (m := _ASCTIME.match(value)) is not None:
        mon, day, hh, mm, ss, year = m.groups()
    else:
        return None
    try:
        when = datetime(int(year), _MONTHS[mon.lower()], int(day), int(hh), int(mm), min(int(ss), 59),
                        tzinfo=timezone.utc)
    except ValueError:
        return None
    return when.timestamp()


def _split_list(text: str) -> list[str]:
    """Split a comma-separated field value, keeping quoted strings (and their commas) whole."""
    parts: list[str] = []
    start = 0
    in_quote = escaped = False
    for i, ch in enumerate(text):
        if in_quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_quote = False
        elif ch == '"':
            in_quote = True
        elif ch == ",":
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _unquote(value: str) -> str | None:
    """The content of a quoted-string (escapes removed), or None if it is not one."""
    if len(value) < 2 or value[0] != '"' or value[-1] != '"':
        return None
    return re.sub(r"\\(.)", r"\1", value[1:-1])


def _delta(value: str | None) -> int | None:
    """delta-seconds (RFC 9111 §1.2.2), quoted or not; None if malformed."""
    if value is None:
        return None
    unquoted = _unquote(value)
    if unquoted is not None:
        value = unquoted
    if not value.isdigit() or not value.isascii():
        return None
    return min(int(value), MAX_DELTA)


def parse_cache_control(value: Any) -> dict[str, Any]:
    """Parse Cache-Control (a str or a list of lines) into ``{directive: value}``.

    Numeric directives map to ints (``max-stale`` with no value to
    ``MAX_DELTA``); ``no-cache``/``private`` to True or, when qualified, a list
    of lower-case field names; other known flags to True. Unknown directives
    are ignored (RFC 9111 §5.2.3). A malformed ``max-age``/``s-maxage`` counts
    as 0 (stale, as §4.2.1 advises); other malformed numbers are ignored.
    Duplicates keep the most restrictive value. Never raises.
    """
    if isinstance(value, (list, tuple)):
        value = ",".join(v for v in value if isinstance(v, str))
    if not isinstance(value, str) or not value:
        return {}
    out: dict[str, Any] = {}
    for part in _split_list(value):
        name, eq, arg = part.partition("=")
        key = name.strip(" \t").lower()
        if not key:
            continue
        bad_spacing = eq and (name != name.rstrip(" \t") or arg != arg.lstrip(" \t"))
        value_text = arg.strip(" \t") if eq else None
        if key in _NUMERIC:
            number = None if bad_spacing else _delta(value_text)
            if number is None:
                if key == "max-stale" and value_text is None:
                    number = MAX_DELTA
                elif key in ("max-age", "s-maxage"):
                    number = 0
                else:
                    continue
            old = out.get(key)
            if old is None or (number > old if key == "min-fresh" else number < old):
                out[key] = number
        elif key in ("no-cache", "private"):
            fields = _field_list(value_text) if value_text else None
            if fields is None or out.get(key) is True:
                out[key] = True
            else:
                out[key] = out.get(key, []) + fields
        elif key in _RESTRICTIVE_FLAGS:
            out[key] = True
        elif key in _FLAGS and value_text is None:
            out[key] = True
        elif _TOKEN.match(key) is None:
            # A mangled restrictive directive ('no-store"', 'private;x') is honoured, never dropped.
            for restrictive in ("no-store", "no-cache", "private"):
                if key.startswith(restrictive):
                    out[restrictive] = True
    return out


def _field_list(arg: str) -> list[str] | None:
    """The field names of a qualified ``no-cache``/``private``; None if malformed."""
    text = _unquote(arg)
    if text is None:
        text = arg
    names = [n.strip(" \t").lower() for n in text.split(",")]
    names = [n for n in names if n]
    if not names or not all(_TOKEN.match(n) for n in names):
        return None
    return names


def parse_age(value: Any) -> int | None:
    """The Age field's delta-seconds; the first member of a list wins; None if invalid."""
    if isinstance(value, list):
        value = value[0] if value else None
    if not isinstance(value, str):
        return None
    first = value.split(",", 1)[0].strip(" \t")
    if not first.isdigit() or not first.isascii():
        return None
    return min(int(first), MAX_DELTA)


def parse_vary(value: Any) -> tuple[str, ...] | None:
    """The lower-case field names Vary lists; None when it contains ``*`` or is malformed."""
    if isinstance(value, list):
        value = ",".join(value)
    if not isinstance(value, str):
        return ()
    names: list[str] = []
    for part in value.split(","):
        name = part.strip(" \t").lower()
        if not name:
            continue
        if name == "*" or not _TOKEN.match(name):
            return None
        if name not in names:
            names.append(name)
    return tuple(names)


def valid_etag(value: Any) -> bool:
    """True for a well-formed entity-tag (RFC 9110 §8.8.3), strong or weak."""
    return isinstance(value, str) and _ETAG.match(value) is not None


def weak_etag_match(a: str, b: str) -> bool:
    """RFC 9110 §8.8.3.2 weak comparison: the opaque tags are equal."""
    return a.removeprefix("W/") == b.removeprefix("W/")


# -- requests -------------------------------------------------------------------------------------


def request_directives(headers: dict[str, Any]) -> dict[str, Any]:
    """The request's Cache-Control directives; ``Pragma: no-cache`` counts as no-cache
    when there is no Cache-Control (RFC 9111 §5.4)."""
    cc = headers.get("cache-control")
    if cc is not None:
        return parse_cache_control(cc)
    pragma = headers.get("pragma")
    if pragma is not None:
        values = pragma if isinstance(pragma, list) else [pragma]
        if any(p.strip(" \t").lower() == "no-cache" for v in values for p in v.split(",")):
            return {"no-cache": True}
    return {}


def _normalise_field(value: Any) -> str | None:
    """A selecting header's value for Vary matching: lines combined, spaces around commas dropped
    (not inside a quoted-string, where they are part of the value)."""
    if value is None:
        return None
    if isinstance(value, list):
        value = ",".join(value)
    return ",".join(p.strip(" \t") for p in _split_list(value))


def vary_values(names: tuple[str, ...], headers: dict[str, Any]) -> dict[str, str | None]:
    """The normalised request values of the selecting headers ``names``."""
    return {name: _normalise_field(headers.get(name)) for name in names}


def vary_matches(vary: dict[str, Any] | None, headers: dict[str, Any] | None) -> bool:
    """True when a request with ``headers`` selects an entry stored with ``vary`` (RFC 9111 §4.1)."""
    if not vary:
        return True
    headers = headers or {}
    for name, stored in vary.items():
        # (A custom store may hand back the value as the request spelled it: both sides normalised.)
        if _normalise_field(headers.get(name)) != (stored if stored is None else _normalise_field(stored)):
            return False
    return True


# -- storing --------------------------------------------------------------------------------------


def build_entry(
    *,
    method: str,
    status: int,
    status_message: str,
    headers: dict[str, Any],
    request_headers: dict[str, Any],
    request_time: float,
    response_time: float,
    shared: bool,
    cache_by_default: float | None = None,
) -> CacheValue | None:
    """The entry metadata for a response, or None when it must not be stored (RFC 9111 §3).

    ``request_time``/``response_time`` are when the request was sent and the
    response head received; they give the response's age (§4.2.3).
    """
    cc = parse_cache_control(headers.get("cache-control"))
    if not _storable(method, status, cc, headers, request_headers, shared):
        return None
    vary_names = parse_vary(headers.get("vary"))
    if vary_names is None:
        return None  # Vary: * never matches a later request (§4.1).
    date = parse_http_date(headers.get("date"))
    # §4.2.3: the age the response already had when it arrived.
    age_value = parse_age(headers.get("age")) if "age" in headers else 0
    apparent_age = max(0.0, response_time - date) if date is not None else 0.0
    corrected_age = (age_value or 0) + (response_time - request_time)
    initial_age = max(apparent_age, corrected_age)
    lifetime = _freshness_lifetime(cc, headers, status, date, response_time, shared, cache_by_default)
    etag = headers.get("etag")
    etag = etag if valid_etag(etag) else None
    has_validator = etag is not None or parse_http_date(headers.get("last-modified")) is not None
    if lifetime is None:
        lifetime = 0.0
    if cc.get("no-cache") is True and not has_validator:
        return None  # every reuse needs a validation it could not make
    cached_at = response_time - initial_age
    stale_at = cached_at + lifetime
    # Kept while it may still serve: stale within max-stale (as long again as it was fresh),
    # stale-while-revalidate or stale-if-error, or for validation when it has a validator.
    keep = max(lifetime, cc.get("stale-while-revalidate", 0), cc.get("stale-if-error", 0))
    if has_validator:
        keep = max(keep, REVALIDATE_ONLY_RETENTION)
    if stale_at + keep <= response_time:
        return None  # already past any use
    stored = _stored_headers(headers, cc, shared)
    if date is None:
        # RFC 9110 §6.6.1: a cache dates a response that has no (valid) Date with its arrival.
        stored["date"] = formatdate(response_time, usegmt=True)
    return {
        "status_code": status,
        "status_message": status_message,
        "headers": stored,
        "vary": vary_values(vary_names, request_headers) if vary_names else None,
        "etag": etag,
        "cache_control_directives": cc,
        "cached_at": cached_at,
        "stale_at": stale_at,
        "delete_at": stale_at + keep,
    }


def _storable(
    method: str, status: int, cc: dict[str, Any], headers: dict[str, Any], req: dict[str, Any], shared: bool
) -> bool:
    if method not in SAFE_METHODS or status < 200:
        return False
    if cc.get("must-understand"):
        # §5.2.2.3: the status decides, and no-store is then overridden.
        if status not in UNDERSTOOD_STATUSES:
            return False
    elif status in (206, 304) or cc.get("no-store"):
        return False  # no range support; a lone 304 is not a storable response
    if shared:
        if cc.get("private") is True:
            return False
        # §3.5: a shared cache stores a response to an authenticated request only when allowed.
        if "authorization" in req and not (cc.get("public") or cc.get("must-revalidate") or "s-maxage" in cc):
            return False
    # §3: something must say the response may be cached.
    return (
        status in HEURISTIC_STATUSES
        or "expires" in headers
        or "max-age" in cc
        or bool(cc.get("public"))
        or (shared and "s-maxage" in cc)
        or (not shared and cc.get("private") is not None)
    )


def _freshness_lifetime(
    cc: dict[str, Any],
    headers: dict[str, Any],
    status: int,
    date: float | None,
    response_time: float,
    shared: bool,
    cache_by_default: float | None,
) -> float | None:
    """§4.2.1 (explicit) then §4.2.2 (heuristic); None when nothing gives a lifetime."""
    if shared and "s-maxage" in cc:
        return float(cc["s-maxage"])
    if "max-age" in cc:
        return float(cc["max-age"])
    if "expires" in headers:
        expires = parse_http_date(headers["expires"])  # a list of several lines is invalid
        if expires is None:
            return 0.0
        return max(0.0, expires - (date if date is not None else response_time))
    if status in HEURISTIC_STATUSES or cc.get("public"):
        last_modified = parse_http_date(headers.get("last-modified"))
        base = date if date is not None else response_time
        if last_modified is not None and last_modified < base:
            return 0.1 * (base - last_modified)  # the customary 10 % of the time since modification
    return float(cache_by_default) if cache_by_default is not None else None


def _stored_headers(headers: dict[str, Any], cc: dict[str, Any], shared: bool) -> dict[str, Any]:
    drop = set(_UNSTORED)
    for name in ("connection", "proxy-connection"):
        value = headers.get(name)
        if value is not None:
            for line in value if isinstance(value, list) else [value]:
                drop.update(t.strip(" \t").lower() for t in line.split(","))
    if isinstance(cc.get("no-cache"), list):
        drop.update(cc["no-cache"])  # §5.2.2.4: not reused without validation, so not kept
    if shared and isinstance(cc.get("private"), list):
        drop.update(cc["private"])  # §5.2.2.7
    return {k: v for k, v in headers.items() if k not in drop}


def merge_304_headers(
    stored: dict[str, Any], fresh: dict[str, Any], received_at: float | None = None
) -> dict[str, Any]:
    """Stored header fields updated from a 304's (RFC 9111 §3.2, §4.3.4).

    A 304 without ``Date`` is dated ``received_at`` (RFC 9110 §6.6.1), when
    given: the stored response's old ``Date`` would make it as old as before.
    The 304's ``Age`` is kept for :func:`build_entry`'s age calculation
    (§4.2.3), which does not store it.
    """
    cc = parse_cache_control(fresh.get("cache-control"))
    updates = _stored_headers(fresh, cc, False)
    merged = dict(stored)
    for name, value in updates.items():
        if name not in _NOT_UPDATED:
            merged[name] = value
    if received_at is not None and "date" not in fresh:
        merged["date"] = formatdate(received_at, usegmt=True)
    if "age" in fresh:
        merged["age"] = fresh["age"]
    return merged


def invalidation_paths(key: CacheKey, headers: dict[str, Any]) -> list[str]:
    """Paths an unsafe request's non-error response invalidates (RFC 9111 §4.4).

    The target URI, and the same-origin targets of Location and Content-Location,
    resolved against the target URI as RFC 3986 §5.2 says (``../x``, ``?q``, ``//host/x``).
    """
    paths = [key["path"]]
    base = key["origin"] + key["path"]
    for name in ("location", "content-location"):
        value = headers.get(name)
        if not isinstance(value, str) or not value:
            continue
        try:
            target = urlsplit(urljoin(base, value.strip(" \t")))
            if _origin_of(target) != _origin_of(urlsplit(base)):
                continue
        except ValueError:
            continue
        path = (target.path or "/") + ("?" + target.query if target.query else "")
        if path not in paths:
            paths.append(path)
    return paths


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin_of(url: SplitResult) -> tuple[str, str, int | None]:
    """Scheme, host and port (the scheme's default when absent); raises ValueError for a bad port."""
    scheme = url.scheme.lower()
    return scheme, (url.hostname or ""), url.port or _DEFAULT_PORTS.get(scheme)


# -- reusing --------------------------------------------------------------------------------------

FRESH, STALE_OK, STALE_WHILE_REVALIDATE, VALIDATE = "fresh", "stale-ok", "stale-while-revalidate", "validate"


class Verdict:
    """What to do with a stored entry for one request.

    ``action`` is ``"fresh"`` (serve it), ``"stale-ok"`` (serve it stale,
    the request's max-stale allows), ``"stale-while-revalidate"`` (serve it
    stale and refresh it in the background) or ``"validate"`` (ask the
    origin first). ``age`` is its current age in seconds, ``stale`` whether
    it is past its freshness, and ``stale_if_error`` whether an error or a
    5xx during validation may be answered with it.
    """

    __slots__ = ("action", "age", "stale", "stale_if_error")

    def __init__(self, action: str, age: float, stale: bool, stale_if_error: bool = False) -> None:
        self.action = action
        self.age = age
        self.stale = stale
        self.stale_if_error = stale_if_error

    def __repr__(self) -> str:
        return f"<Verdict {self.action} age={self.age:.3f} stale={self.stale}>"


def _no_stale(cc: dict[str, Any], shared: bool) -> bool:
    """The entry may never be served stale (§4.2.4, §5.2.2.2, §5.2.2.8, §5.2.2.10)."""
    return bool(cc.get("must-revalidate") or cc.get("no-cache") is True) or (
        shared and bool(cc.get("proxy-revalidate") or "s-maxage" in cc)
    )


def assess(entry: CacheValue, req_cc: dict[str, Any], now: float, shared: bool) -> Verdict:
    """Decide how ``entry`` may answer a request with directives ``req_cc`` at ``now``."""
    cc = entry.get("cache_control_directives") or {}
    age = max(0.0, now - entry["cached_at"])
    lifetime = entry["stale_at"] - entry["cached_at"]
    staleness = age - lifetime
    stale = staleness >= 0
    no_stale = _no_stale(cc, shared)
    sie = cc.get("stale-if-error", req_cc.get("stale-if-error", 0))
    stale_if_error = not no_stale and sie > 0 and staleness <= sie
    # Reasons to ask the origin whatever the freshness: §5.2.2.4 and §5.2.1.4.
    if cc.get("no-cache") is True or req_cc.get("no-cache"):
        return Verdict(VALIDATE, age, stale, stale_if_error)
    if "max-age" in req_cc and age > req_cc["max-age"]:
        return Verdict(VALIDATE, age, stale, stale_if_error)  # §5.2.1.1
    if not stale:
        if "min-fresh" in req_cc and lifetime - age < req_cc["min-fresh"]:
            return Verdict(VALIDATE, age, stale, stale_if_error)  # §5.2.1.3
        return Verdict(FRESH, age, False)
    if not no_stale:
        if "max-stale" in req_cc and staleness <= req_cc["max-stale"]:
            return Verdict(STALE_OK, age, True)  # §5.2.1.2
        swr = cc.get("stale-while-revalidate", 0)
        if swr > 0 and staleness <= swr:
            return Verdict(STALE_WHILE_REVALIDATE, age, True)  # RFC 5861 §3
    return Verdict(VALIDATE, age, True, stale_if_error)


def revalidation_headers(request_headers: dict[str, Any], entry: CacheValue) -> dict[str, Any] | None:
    """The headers of the conditional request that validates ``entry`` (RFC 9111 §4.3.1).

    None when the entry has no validator (it can only be replaced). The
    client's own preconditions are replaced by the cache's.
    """
    last_modified = entry["headers"].get("last-modified")
    if parse_http_date(last_modified) is None:
        last_modified = None
    etag = entry.get("etag")
    if etag is None and last_modified is None:
        return None
    headers = {k: v for k, v in request_headers.items() if k not in _CONDITIONAL}
    if etag is not None:
        headers["if-none-match"] = etag
    if last_modified is not None:
        headers["if-modified-since"] = last_modified
    for name, value in (entry.get("vary") or {}).items():
        if value is not None:
            headers[name] = value
    return headers


_CONDITIONAL = frozenset({"if-none-match", "if-modified-since"})


def is_conditional(request_headers: dict[str, Any]) -> bool:
    """True when the request carries If-None-Match or If-Modified-Since."""
    return "if-none-match" in request_headers or "if-modified-since" in request_headers


def not_modified(request_headers: dict[str, Any], entry: CacheValue) -> bool:
    """Whether the client's own preconditions make ``entry`` a 304 (RFC 9110 §13.2.2)."""
    headers = entry["headers"]
    inm = request_headers.get("if-none-match")
    if inm is not None:
        etag = entry.get("etag")
        members = [m.strip(" \t") for line in (inm if isinstance(inm, list) else [inm]) for m in _split_list(line)]
        if "*" in members:
            return True
        return etag is not None and any(valid_etag(m) and weak_etag_match(m, etag) for m in members)
    since = parse_http_date(request_headers.get("if-modified-since"))
    if since is None:
        return False
    modified = parse_http_date(headers.get("last-modified"))
    if modified is None:
        modified = parse_http_date(headers.get("date"))
    if modified is None:
        modified = entry["cached_at"]
    return modified <= since


def byte_range(value: Any, length: int) -> tuple[int, int] | None:
    """The one satisfiable range of a ``Range: bytes=…`` header over ``length`` bytes, as
    ``(first, last)`` inclusive; None for anything else (several ranges, other units,
    unsatisfiable), which is answered with the whole representation (RFC 9110 §14.2)."""
    if not isinstance(value, str):
        return None
    unit, _, spec = value.partition("=")
    if unit.strip(" \t").lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip(" \t").partition("-")
    if not dash or not (first.isdigit() or last.isdigit()) or length == 0:
        return None
    if not first:  # suffix: the last N bytes
        n = int(last) if last.isdigit() else 0
        return (max(0, length - n), length - 1) if n > 0 else None
    if not first.isdigit() or (last and not last.isdigit()):
        return None
    start = int(first)
    end = min(int(last), length - 1) if last else length - 1
    return (start, end) if start <= end else None


#: Fields a 304 made from a stored response carries (RFC 9110 §15.4.5).
NOT_MODIFIED_FIELDS = ("cache-control", "content-location", "date", "etag", "expires", "vary")
