"""greenhttp.interceptors: the built-in interceptors (spec 4.5).

Each is a factory, ``interceptors.retry(max_retries=3)``, that validates its
options at once and returns an interceptor for ``dispatcher.compose(...)``;
the first interceptor given to ``compose`` is the outermost. See
``docs/interceptors.md``.
"""

from .cache import cache
from .decompress import decompress
from .deduplicate import deduplicate
from .dns import dns
from .dump import dump
from .redirect import redirect
from .response_error import response_error
from .retry import retry

__all__ = [
    "dump",
    "retry",
    "redirect",
    "decompress",
    "response_error",
    "dns",
    "cache",
    "deduplicate",
]
