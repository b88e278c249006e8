"""``MODULE:CALLABLE`` strings, as the command line takes env factories and policies."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def load_callable(spec: str, what: str = "callable") -> Callable[..., Any]:
    """Import ``MODULE:NAME`` and return it; a clear ValueError if it cannot be used.

    >>> load_callable("math:sqrt")(4.0)
    2.0
    """
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"expected MODULE:CALLABLE for the {what}, got {spec!r}")
    try:
        target = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"cannot import the {what} {spec}: {error}") from None
    if not callable(target):
        raise ValueError(f"the {what} {spec} is not callable")
    return target
