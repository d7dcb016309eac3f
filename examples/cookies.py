"""Cookie helpers on greenhttp.Headers: build, read and remove cookies.

Runs without a network: the helpers only read and write header objects.

    python examples/cookies.py
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from greenhttp import (
    Cookie,
    Headers,
    delete_cookie,
    get_cookies,
    get_set_cookies,
    parse_cookie,
    set_cookie,
)
from greenhttp.errors import InvalidArgumentError


def server_side() -> Headers:
    """What a server would put in its response headers."""
    response = Headers({"content-type": "text/html; charset=utf-8"})
    set_cookie(
        response,
        Cookie(
            name="session",
            value="0f3a9c",
            path="/",
            http_only=True,
            same_site="Lax",
            max_age=3600,
        ),
    )
    # expires may be a datetime or a Unix timestamp in seconds.
    set_cookie(
        response,
        Cookie(
            name="theme",
            value="dark",
            expires=datetime.now(timezone.utc) + timedelta(days=30),
        ),
    )
    # The __Host- prefix adds Secure and Path=/ and drops Domain by itself.
    set_cookie(response, Cookie(name="__Host-csrf", value="k2Lq", domain="example.com"))
    # Tell the browser to forget an old cookie.
    delete_cookie(response, "legacy", path="/")
    return response


def main() -> int:
    response = server_side()
    print("Set-Cookie lines:")
    for line in response.get_set_cookie():
        print("  ", line)

    print("\nParsed back:")
    for cookie in get_set_cookies(response):
        assert cookie is not None
        print(f"   {cookie.name}={cookie.value!r} path={cookie.path} "
              f"max_age={cookie.max_age} expires={cookie.expires} same_site={cookie.same_site}")

    # A client sends the cookies back in one Cookie header.
    request = Headers()
    request.set("Cookie", "session=0f3a9c; theme=dark; tracking=%7B%22a%22%3A1%7D")
    print("\nCookie header of a request:", get_cookies(request))

    # parse_cookie never raises; it returns None for what it cannot use.
    print("\nparse_cookie examples:")
    for text in ["id=a3fWa; Max-Age=2592000; SameSite=strict; Partitioned",
                 "bad=\x07bell",
                 "lang=en-US; Expires=Wed, 09 Jun 2021 10:18:14 GMT"]:
        print(f"   {text!r} -> {parse_cookie(text)}")

    # set_cookie refuses what would corrupt the header.
    try:
        set_cookie(Headers(), Cookie(name="greeting", value="hello world"))
    except InvalidArgumentError as err:
        print("\nrefused:", err)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
