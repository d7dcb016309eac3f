"""Sans-IO cookie parsing and serialisation (RFC 6265 and RFC 6265bis).

* :func:`parse_set_cookie` runs the RFC 6265bis section 5.6 algorithm on one
  ``Set-Cookie`` value and returns the cookie's fields as a ``dict`` (the keys
  are the field names of :class:`greenhttp.Cookie`), or None when the string
  must be ignored.
* :func:`parse_cookie_date` is the RFC 6265 section 5.1.1 cookie-date
  algorithm; it returns an aware UTC :class:`~datetime.datetime`.
* :func:`serialize_set_cookie` validates a cookie against the RFC 6265
  section 4.1.1 grammar and builds a ``Set-Cookie`` value.
* :func:`parse_cookie_header` splits a ``Cookie`` request header into pairs.

No gevent, no sockets, no clock: nothing here reads the current time, so the
400-day cap and the Max-Age-to-expiry conversion of a user agent's storage
model are left to whoever stores cookies. Every function is pure, does not
block and is greenlet-safe.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Any

from ..errors import InvalidArgumentError

__all__ = [
    "MAX_NAME_VALUE_SIZE",
    "MAX_ATTRIBUTE_VALUE_SIZE",
    "has_ctl_excluding_htab",
    "parse_set_cookie",
    "parse_cookie_date",
    "parse_cookie_header",
    "format_imf_fixdate",
    "to_utc_datetime",
    "validate_cookie_name",
    "validate_cookie_value",
    "validate_cookie_path",
    "validate_cookie_domain",
    "serialize_set_cookie",
]

# RFC 6265bis section 5.6 step 5 and section 5.6 step 6 of the attribute loop
# (the same numbers as the Cookie Store API's maximum sizes).
MAX_NAME_VALUE_SIZE = 4096
MAX_ATTRIBUTE_VALUE_SIZE = 1024

# RFC 5234 WSP: the only whitespace RFC 6265bis trims.
_WSP = " \t"
_DIGITS = frozenset("0123456789")
# CTL characters other than HTAB: %x00-08 / %x0A-1F / %x7F.
_CTL_EXCEPT_HTAB = re.compile("[\x00-\x08\x0a-\x1f\x7f]")
# RFC 2616 token (RFC 6265 section 4.1.1 cookie-name).
_TOKEN_CHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)
# RFC 6265 section 4.1.1 cookie-octet: %x21 / %x23-2B / %x2D-3A / %x3C-5B / %x5D-7E.
_COOKIE_OCTETS = frozenset(chr(c) for c in range(0x21, 0x7F)) - frozenset('",;\\')
# RFC 6265 path-value and extension-av: any CHAR except CTLs or ";".
_AV_CHARS = frozenset(chr(c) for c in range(0x20, 0x7F)) - frozenset(";")
_LETTER_DIGIT = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

_SAME_SITE = {"strict": "Strict", "lax": "Lax", "none": "None"}

_IMF_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_IMF_MONTHS = tuple(m.capitalize() for m in _MONTHS)

# RFC 6265 section 5.1.1 productions, ASCII digits only; "( non-digit *OCTET )"
# means anything may follow once a non-digit ends the number.
_DATE_DELIMITER = re.compile("[\x09\x20-\x2f\x3b-\x40\x5b-\x60\x7b-\x7e]+")
_TIME = re.compile(r"([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})(?:[^0-9]|\Z)", re.DOTALL)
_DAY_OF_MONTH = re.compile(r"([0-9]{1,2})(?:[^0-9]|\Z)", re.DOTALL)
_YEAR = re.compile(r"([0-9]{2,4})(?:[^0-9]|\Z)", re.DOTALL)


def _ascii_lower(text: str) -> str:
    """Lower-case ASCII letters only, so no non-ASCII name matches an attribute."""
    return text.lower() if text.isascii() else text


def _octets(text: str) -> int:
    """The octets ``text`` stands for, which the RFC 6265bis size limits count.

    Header text greenhttp decoded from the wire is Latin-1, one character per
    octet; text with a character above U+00FF cannot be that, so it is Unicode
    text and counts its UTF-8 encoding (a lone surrogate as the 3 octets
    ``surrogatepass`` writes).
    """
    if text.isascii():
        return len(text)
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return len(text.encode("utf-8", "surrogatepass"))
    return len(text)


def has_ctl_excluding_htab(text: str) -> bool:
    """True if ``text`` holds a CTL character other than HTAB (%x00-08, %x0A-1F, %x7F)."""
    return _CTL_EXCEPT_HTAB.search(text) is not None


# -- parsing --------------------------------------------------------------


def parse_cookie_date(text: str) -> datetime | None:
    """Parse a cookie-date (RFC 6265 section 5.1.1) into an aware UTC datetime.

    Returns None when the algorithm fails (a missing component, a value out of
    range, a year before 1601 or a day the month does not have).
    """
    hms: tuple[int, int, int] | None = None
    day: int | None = None
    month: int | None = None
    year: int | None = None
    for token in _DATE_DELIMITER.split(text):
        if not token:
            continue
        if hms is None and (m := _TIME.match(token)):
            hms = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            continue
        if day is None and (m := _DAY_OF_MONTH.match(token)):
            day = int(m.group(1))
            continue
        if month is None and len(token) >= 3 and _ascii_lower(token[:3]) in _MONTHS:
            month = _MONTHS.index(_ascii_lower(token[:3])) + 1
            continue
        if year is None and (m := _YEAR.match(token)):
            year = int(m.group(1))
            continue
    if hms is None or day is None or month is None or year is None:
        return None
    if 70 <= year <= 99:
        year += 1900
    elif 0 <= year <= 69:
        year += 2000
    hour, minute, second = hms
    if not 1 <= day <= 31 or year < 1601 or hour > 23 or minute > 59 or second > 59:
        return None
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
    except ValueError:  # e.g. 30 February
        return None


def _parse_max_age(value: str) -> int | None:
    """RFC 6265bis section 5.6.2 steps 1-3; None means "ignore the cookie-av"."""
    if not value:
        return None
    if value[0] in _DIGITS:
        rest = value[1:]
    elif value[0] == "-" and len(value) > 1:
        rest = value[1:]
    else:
        return None
    if any(ch not in _DIGITS for ch in rest):
        return None
    return int(value)


def parse_set_cookie(text: str) -> dict[str, Any] | None:
    """Parse one Set-Cookie value (RFC 6265bis section 5.6).

    Returns a dict with ``name`` and ``value`` and, only when present,
    ``expires`` (aware UTC datetime), ``max_age`` (int, sign kept, no cap),
    ``domain`` (leading dot removed, lower-cased), ``path`` (``"/"`` when empty
    or not absolute: there is no request URI to take a default path from),
    ``secure``, ``http_only``, ``same_site`` (``Strict``/``Lax``/``None``) and
    ``unparsed`` (unknown attributes as ``"name=value"``). Returns None for a
    string with a CTL character other than HTAB, a name and value longer than
    4096 octets together (see :func:`_octets`), or an empty name together with
    an empty value.
    Never raises for a ``str`` argument.
    """
    # Step 1: CTLs other than HTAB make the whole string ignored.
    if has_ctl_excluding_htab(text):
        return None
    # Steps 2-4: name-value-pair up to the first ";", split at its first "=".
    pair, semicolon, attributes = text.partition(";")
    if "=" in pair:
        name, _, value = pair.partition("=")
    else:
        name, value = "", pair
    name = name.strip(_WSP)
    value = value.strip(_WSP)
    # Step 5: size limit.
    if _octets(name) + _octets(value) > MAX_NAME_VALUE_SIZE:
        return None
    # Nothing to store: RFC 6265bis section 5.7 aborts on an empty name and value.
    if not name and not value:
        return None
    cookie: dict[str, Any] = {"name": name, "value": value}
    if semicolon:
        _parse_attributes(attributes.split(";"), cookie)
    return cookie


def _parse_attributes(avs: list[str], cookie: dict[str, Any]) -> None:
    """The attribute loop of RFC 6265bis section 5.6; later duplicates win."""
    for av in avs:
        attr_name, _, attr_value = av.partition("=")
        attr_name = attr_name.strip(_WSP)
        attr_value = attr_value.strip(_WSP)
        if _octets(attr_value) > MAX_ATTRIBUTE_VALUE_SIZE:
            continue
        if not attr_name:
            # An empty cookie-av (as in "a=b;" or "a=b;;c") names no attribute.
            continue
        key = _ascii_lower(attr_name)
        if key == "expires":  # section 5.6.1
            expires = parse_cookie_date(attr_value)
            if expires is not None:
                cookie["expires"] = expires
        elif key == "max-age":  # section 5.6.2
            max_age = _parse_max_age(attr_value)
            if max_age is not None:
                cookie["max_age"] = max_age
        elif key == "domain":  # section 5.6.3
            domain = attr_value[1:] if attr_value.startswith(".") else attr_value
            cookie["domain"] = domain.lower()
        elif key == "path":  # section 5.6.4
            cookie["path"] = attr_value if attr_value.startswith("/") else "/"
        elif key == "secure":  # section 5.6.5
            cookie["secure"] = True
        elif key == "httponly":  # section 5.6.6
            cookie["http_only"] = True
        elif key == "samesite":  # section 5.6.7: other values are ignored here
            same_site = _SAME_SITE.get(_ascii_lower(attr_value))
            if same_site is not None:
                cookie["same_site"] = same_site
        else:
            cookie.setdefault("unparsed", []).append(f"{attr_name}={attr_value}")


def parse_cookie_header(text: str) -> dict[str, str]:
    """Split a ``Cookie`` header value into ``{name: value}``.

    Pieces are separated by ``;`` and split at their first ``=``; the name is
    stripped of spaces and tabs, the value is kept exactly as written (not
    trimmed, unquoted or decoded). A piece without ``=`` maps its name to
    ``""``; a blank piece is skipped; a later duplicate name wins.
    """
    out: dict[str, str] = {}
    for piece in text.split(";"):
        if not piece.strip(_WSP):
            continue
        name, _, value = piece.partition("=")
        out[name.strip(_WSP)] = value
    return out


# -- serialisation --------------------------------------------------------


def format_imf_fixdate(when: datetime) -> str:
    """Format an aware (or naive, taken as UTC) datetime as an RFC 9110 IMF-fixdate."""
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return (
        f"{_IMF_DAYS[when.weekday()]}, {when.day:02d} {_IMF_MONTHS[when.month - 1]} "
        f"{when.year:04d} {when.hour:02d}:{when.minute:02d}:{when.second:02d} GMT"
    )


def to_utc_datetime(expires: object) -> datetime:
    """Turn a cookie ``expires`` (datetime, or Unix time in seconds) into a UTC datetime.

    A naive datetime is taken to be UTC. Raises InvalidArgumentError for any
    other type, a non-finite number or one outside the datetime range.
    """
    if isinstance(expires, datetime):
        if expires.tzinfo is None:
            return expires.replace(tzinfo=timezone.utc)
        try:
            return expires.astimezone(timezone.utc)
        except OverflowError:  # e.g. year 1 at UTC+2: before datetime.min in UTC
            raise InvalidArgumentError(
                f"invalid cookie expires {expires!r}: out of range in UTC"
            ) from None
    if isinstance(expires, bool) or not isinstance(expires, (int, float)):
        raise InvalidArgumentError(
            f"invalid cookie expires {expires!r}: expected a datetime or a Unix timestamp "
            f"in seconds"
        )
    if isinstance(expires, float) and not math.isfinite(expires):
        raise InvalidArgumentError(f"invalid cookie expires {expires!r}: not a finite number")
    try:
        return datetime.fromtimestamp(expires, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise InvalidArgumentError(
            f"invalid cookie expires {expires!r}: timestamp out of range"
        ) from None


def validate_cookie_name(name: str, field: str = "name") -> None:
    """Raise InvalidArgumentError unless ``name`` is an RFC 6265 cookie-name (a token)."""
    if not name or any(ch not in _TOKEN_CHARS for ch in name):
        raise InvalidArgumentError(
            f"invalid cookie {field} {name!r}: must be a non-empty token "
            f'(printable ASCII except separators ()<>@,;:\\"/[]?={{}} and space)'
        )


def validate_cookie_value(value: str) -> None:
    """Raise InvalidArgumentError unless ``value`` is an RFC 6265 cookie-value.

    A cookie-value is cookie-octets (printable ASCII except space, ``"``, ``,``,
    ``;`` and ``\\``), optionally wrapped in one pair of double quotes.
    """
    inner = value
    if value.startswith('"'):
        if len(value) < 2 or not value.endswith('"'):
            raise InvalidArgumentError(
                f"invalid cookie value {value!r}: unbalanced double quote"
            )
        inner = value[1:-1]
    if any(ch not in _COOKIE_OCTETS for ch in inner):
        raise InvalidArgumentError(
            f"invalid cookie value {value!r}: only printable ASCII except space, "
            f'double quote, comma, semicolon and backslash is allowed (encode the value, '
            f"e.g. with base64 or percent-encoding)"
        )


def validate_cookie_path(path: str) -> None:
    """Raise InvalidArgumentError unless ``path`` is an RFC 6265 path-value."""
    if any(ch not in _AV_CHARS for ch in path):
        raise InvalidArgumentError(
            f"invalid cookie path {path!r}: control characters, non-ASCII and ';' "
            f"are not allowed"
        )


def validate_cookie_domain(domain: str) -> None:
    """Raise InvalidArgumentError unless ``domain`` has RFC 1034/1123 preferred syntax.

    Labels of letters, digits and hyphens, neither starting nor ending with a
    hyphen, 1-63 characters each, 255 in all; no leading or trailing dot and
    no empty label. Internationalised names must be given in their ASCII
    (punycode) form.
    """
    reason = None
    if len(domain) > 255:
        reason = "longer than 255 characters"
    else:
        for label in domain.split("."):
            if not label:
                reason = "empty label (leading, trailing or doubled dot)"
            elif len(label) > 63:
                reason = f"label {label!r} longer than 63 characters"
            elif any(ch not in _LETTER_DIGIT and ch != "-" for ch in label):
                reason = f"label {label!r} has characters other than letters, digits and '-'"
            elif label[0] == "-" or label[-1] == "-":
                reason = f"label {label!r} starts or ends with '-'"
            if reason:
                break
    if reason:
        raise InvalidArgumentError(f"invalid cookie domain {domain!r}: {reason}")


def _check_str(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"invalid cookie {field} {value!r}: must be a str, got {type(value).__name__}"
        )
    return value


def _serialize_unparsed(items: object) -> list[str]:
    if isinstance(items, str) or not isinstance(items, (list, tuple)):
        raise InvalidArgumentError(f"invalid cookie unparsed {items!r}: must be a list of str")
    out = []
    for item in items:
        item = _check_str(item, "unparsed item")
        if "=" not in item:
            raise InvalidArgumentError(
                f"invalid cookie unparsed item {item!r}: must be formatted 'name=value'"
            )
        key, _, val = item.partition("=")
        key = key.strip(_WSP)
        validate_cookie_name(key, "unparsed attribute name")
        # RFC 6265 extension-av: any CHAR except CTLs or ";".
        if any(ch not in _AV_CHARS for ch in val):
            raise InvalidArgumentError(
                f"invalid cookie unparsed item {item!r}: the value may not hold control "
                f"characters, non-ASCII or ';'"
            )
        out.append(f"{key}={val}")
    return out


def serialize_set_cookie(
    name: object,
    value: object,
    *,
    expires: object = None,
    max_age: object = None,
    domain: object = None,
    path: object = None,
    secure: object = None,
    http_only: object = None,
    same_site: object = None,
    unparsed: object = None,
) -> str | None:
    """Validate a cookie and build its Set-Cookie value; None for an empty name.

    Attribute order: ``name=value``, ``Secure``, ``HttpOnly``, ``Max-Age``,
    ``Domain``, ``Path``, ``Expires``, ``SameSite``, then the ``unparsed``
    items. A name starting with ``__Secure-`` forces ``Secure``; one starting
    with ``__Host-`` forces ``Secure`` and ``Path=/`` and drops ``Domain``
    (RFC 6265bis section 4.1.3; matched case-insensitively, as user agents do).
    An empty ``domain`` or ``path`` is left out. Raises InvalidArgumentError
    naming the field and the bad value.
    """
    name = _check_str(name, "name")
    value = _check_str(value, "value")
    if not name:
        return None
    validate_cookie_name(name)
    validate_cookie_value(value)
    parts = [f"{name}={value}"]

    lowered = name.lower()
    if lowered.startswith("__secure-"):
        secure = True
    if lowered.startswith("__host-"):
        secure = True
        domain = None
        path = "/"

    if secure:
        parts.append("Secure")
    if http_only:
        parts.append("HttpOnly")
    if max_age is not None:
        if isinstance(max_age, bool) or not isinstance(max_age, int) or max_age < 0:
            raise InvalidArgumentError(
                f"invalid cookie max_age {max_age!r}: must be a non-negative int"
            )
        parts.append(f"Max-Age={max_age}")
    if domain is not None and _check_str(domain, "domain"):
        validate_cookie_domain(domain)  # type: ignore[arg-type]
        parts.append(f"Domain={domain}")
    if path is not None and _check_str(path, "path"):
        validate_cookie_path(path)  # type: ignore[arg-type]
        parts.append(f"Path={path}")
    if expires is not None:
        parts.append(f"Expires={format_imf_fixdate(to_utc_datetime(expires))}")
    if same_site is not None:
        canonical = _SAME_SITE.get(_ascii_lower(same_site)) if isinstance(same_site, str) else None
        if canonical is None:
            raise InvalidArgumentError(
                f"invalid cookie same_site {same_site!r}: must be 'Strict', 'Lax' or 'None'"
            )
        parts.append(f"SameSite={canonical}")
    if unparsed is not None:
        parts.extend(_serialize_unparsed(unparsed))
    return "; ".join(parts)
