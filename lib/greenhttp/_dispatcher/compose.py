"""``compose()``: wrap a dispatcher's ``dispatch`` in interceptors.

An interceptor is ``interceptor(dispatch) -> dispatch``. The first one given
is the outermost (spec 3.3): it sees the request first and the response
last, like Django or Starlette middleware. This module is the one place
that rule lives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import InvalidArgumentError

__all__ = ["compose_dispatch"]

DispatchFn = Callable[[dict[str, Any], Any], bool]


def compose_dispatch(dispatch: DispatchFn, interceptors: tuple[Any, ...]) -> DispatchFn:
    """Apply ``interceptors`` to ``dispatch``, the first one outermost."""
    if len(interceptors) == 1 and isinstance(interceptors[0], (list, tuple)):
        interceptors = tuple(interceptors[0])
    # Wrap from the innermost (last) outwards, so the first ends up outermost.
    for interceptor in reversed(interceptors):
        if interceptor is None:
            continue
        if not callable(interceptor):
            raise InvalidArgumentError(f"invalid interceptor, expected a callable, got {interceptor!r}")
        wrapped = interceptor(dispatch)
        if not callable(wrapped):
            raise InvalidArgumentError(
                f"invalid interceptor: {interceptor!r} must return a dispatch function, got {wrapped!r}"
            )
        dispatch = wrapped
    return dispatch
