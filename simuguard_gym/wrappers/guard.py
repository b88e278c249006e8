"""The guard around simuguard's own code in a wrapper's public methods: what fails there is
recorded, never raised into the user's loop (the env's own exceptions pass through untouched)."""

from __future__ import annotations

import logging
from typing import Any, Callable, TypeVar

from simuguard_gym.physics.hooks import HookError

logger = logging.getLogger(__name__)
T = TypeVar("T")


def guarded(record: Callable[[HookError], None], where: str, call: Callable[[], T], *, substep: int = 0,
            default: Any = None) -> T | Any:
    """``call()``, or ``default`` after handing what it raised to ``record`` (a wrapper's error
    sink; if that fails too, the log gets both).

    >>> from simuguard_gym.wrappers.guard import guarded
    >>> errors = []
    >>> guarded(errors.append, "step", lambda: 1 / 0, default=-1), errors[0].where, errors[0].type
    (-1, 'step', 'ZeroDivisionError')
    """
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - never raise into the evaluation
        record_failure(record, where, error, substep=substep)
        return default


def record_failure(record: Callable[[HookError], None], where: str, error: Exception, *, substep: int = 0) -> None:
    """Hand ``error``, caught in ``where``, to ``record``; never raises (the log gets both where
    recording fails too). What :func:`guarded` does with what it catches, for hot paths that
    write their ``try`` out rather than make a closure per call."""
    try:
        record(HookError.capture(substep, where, error))
    except Exception:  # noqa: BLE001
        logger.exception("simuguard: a failure in %s could not be recorded", where)
